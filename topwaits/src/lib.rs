//! topwaits: a Linux off-CPU and wakeup profiler. The binary calls
//! `run::main_entry`; the work lives in these modules, listed here in the order the data flows and the
//! order of their layers (each imports only those below it; `layering` checks):
//!
//! - `run`: one runner per subcommand, from the options to the output;
//! - `report`: the formats (top view, folded, JSON, SVG, pprof, Perfetto);
//! - `analysis`: what the waits mean (why, locks, what, blocked, threads and
//!   rt-app, diff, the grouping of records);
//! - `bpf`: the only module that touches aya: loads, attaches, reads the maps;
//! - `stacks`: user stacks and names: unwind tables, Python, symbolization;
//! - `model`: the data every layer shares: records, labels, recordings;
//! - `cli`: the command line, parsed and checked into the settings;
//! - `settings`: what a command was asked to do, as plain types;
//! - `sys`: the readers of `/proc`, `/sys`, ELF files and the kernel's BTF;
//! - `util`: small shared helpers (clock, hashing, errors, output files).

pub mod analysis;
pub mod bpf;
pub mod cli;
#[cfg(test)]
mod layering;
pub mod model;
pub mod report;
pub mod run;
pub mod settings;
pub mod stacks;
pub mod sys;
pub mod util;
