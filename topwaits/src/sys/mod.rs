//! Readers of kernel-provided files (`/sys`, `/proc`). Each parser takes a reader or
//! bytes so tests can feed it text; a separate function reads the real file.

pub mod btf;
pub mod caps;
pub mod cgroup;
pub mod elf;
pub mod heap;
pub mod kallsyms;
pub mod memory;
pub mod net;
pub mod priority;
pub mod procfs;
pub mod schedclock;
pub mod syscalls;
pub mod thread;
pub mod tracefs;
