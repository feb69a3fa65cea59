//! Stacks and their names: the unwind tables the kernel walker reads (`cfi`),
//! Python, JavaScript and Java frames, walks of threads blocked now, symbolization, and the files
//! mapped into the traced processes.

pub mod cfi;
pub mod frame_scan;
pub mod golang;
pub mod hotspot;
pub mod interrupts;
pub mod jit;
pub mod objects;
pub mod python;
pub mod symbolize;
pub mod v8;
