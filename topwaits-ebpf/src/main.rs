//! topwaits' eBPF object: one module per hook, plus the maps and the shared
//! accounting they use. Dependencies run one way: hooks (and cpu_sample) → goroutines →
//! switch → events → wake → threads → task → what → gostack/kstack/ustack/kcache/klearn →
//! uwalk/layouts → stackref → taskmap → maps.
// Built for the BPF target it is freestanding; on the host (clippy, `cargo check
// --workspace`) it is checked as a plain program, with std's panic handler.
#![cfg_attr(target_arch = "bpf", no_std)]
#![cfg_attr(target_arch = "bpf", no_main)]
// The BPF target has no atomic read-modify-write in `core::sync::atomic`; its
// atomic add is reached through the intrinsic (see `maps::atomic_add`).
#![cfg_attr(target_arch = "bpf", feature(core_intrinsics))]
#![cfg_attr(target_arch = "bpf", allow(internal_features))]
// Its build output is shown only when it fails, so warnings must fail it.
#![deny(unused)]
// Map keys and values go by reference: a value by copy would take BPF stack
// (512 bytes in all) for keys of up to a few hundred bytes.
#![allow(clippy::needless_borrows_for_generic_args)]

mod cgroup_attach_task;
mod cpu_sample;
mod events;
mod finish_task_switch;
mod futex;
mod go_execute;
mod go_ready;
mod go_switch;
mod goroutines;
mod gostack;
mod itertask;
mod jsframes;
mod jvm_monitor;
mod jvm_sleep;
mod kcache;
mod klearn;
mod kstack;
mod layouts;
mod learn_stack;
mod learn_waker_stack;
mod lock_contention;
mod maps;
mod pyframes;
mod sched_process_exec;
mod sched_process_fork;
mod sched_switch;
mod sched_wakeup_new;
mod sched_waking;
mod seed_waits;
mod stackref;
mod switch;
mod task;
mod task_regs;
mod taskmap;
mod threads;
mod uread;
mod ustack;
mod uwalk;
mod wake;
mod what;

/// GPL, so that the GPL-only helpers (stack ids, probe reads, ...) are allowed.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any program that could reach here, so it never runs.
    loop {}
}

/// The host build's entry point: never run, it only lets the crate be checked there.
#[cfg(not(target_arch = "bpf"))]
fn main() {}
