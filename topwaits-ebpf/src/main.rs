//! topwaits' eBPF object: one module per hook, plus the maps and the shared
//! accounting they use. Dependencies run one way: hooks → switch → events → wake →
//! threads → task → kstack/ustack/kcache/klearn → layouts → stackref → taskmap →
//! maps.
#![no_std]
#![no_main]
// Its build output is shown only when it fails, so warnings must fail it.
#![deny(unused)]

mod events;
mod finish_task_switch;
mod futex;
mod kcache;
mod klearn;
mod kstack;
mod layouts;
mod learn_stack;
mod learn_waker_stack;
mod maps;
mod sched_process_exec;
mod sched_process_fork;
mod sched_switch;
mod sched_wakeup_new;
mod sched_waking;
mod stackref;
mod switch;
mod task;
mod taskmap;
mod threads;
mod ustack;
mod wake;

/// GPL, so that the GPL-only helpers (stack ids, probe reads, ...) are allowed.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects any program that could reach here, so it never runs.
    loop {}
}
