//! Hook: a BPF iterator over every task (`iter/task`), run once as a trace
//! begins. Each traced task already off its CPU is in a wait that began before
//! the hooks could see it; the iterator records that wait in `STARTS` from this
//! moment, as a switch-out would (its kernel stack, what it waits for), so that
//! its switch-in ends it like any other. Its user stack cannot be walked here
//! (it lies in another process's memory): the entry names `SEEDED_USTACK`, and
//! the iterator writes the task's user registers for user space, which walks
//! the stack while the task still waits and hands the result back in `REWALKS`.

use core::ffi::c_void;

use aya_ebpf::{
    bindings::{task_struct, BPF_NOEXIST},
    helpers::{bpf_get_task_stack, bpf_ktime_get_ns, bpf_task_pt_regs},
    macros::map,
    maps::PerCpuArray,
};
use topwaits_common::{
    counter, walker::cut, walker::CUT_MARK, KernelStack, SeededWait, SwitchOut, WaitVal,
    CAPTURE_KERNEL, CAPTURE_USER, KSTACK_DEPTH, SEEDED_USTACK, STACK_NONE, TASK_DEAD, USER_SEED,
};

use crate::itertask::task_and_output;
use crate::maps::{count, mark_started, settings, task_u32, KSTACKS, STARTS, USTACKS};
use crate::stackref;
use crate::task::{comm_of, Outgoing};
use crate::uwalk::{PtRegs, REGS_BP, REGS_CS, REGS_IP, REGS_SP, USER_CS};

/// The iterator's own scratch: its run may be preempted by the hooks, which
/// use theirs on the same CPU.
#[map]
static SCRATCH_SEED_STACK: PerCpuArray<KernelStack> = PerCpuArray::with_max_entries(1, 0);
#[map]
static SCRATCH_SEED_START: PerCpuArray<SwitchOut> = PerCpuArray::with_max_entries(1, 0);
#[map]
static SCRATCH_SEED_ADDR: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The task's address as a plain number, as `maps::as_number` makes one, through
/// the iterator's own scratch.
#[inline(always)]
fn as_number(task: u64) -> Option<u64> {
    let slot = SCRATCH_SEED_ADDR.get_ptr_mut(0)?;
    // SAFETY: this CPU's scratch, the iterator's alone; volatile, so that the
    // compiler does not hand the stored value straight back.
    unsafe {
        core::ptr::write_volatile(slot, task);
        Some(core::ptr::read_volatile(slot))
    }
}

const BYTES: u32 = (KSTACK_DEPTH * 8) as u32;
const ENODATA: u64 = 61;
const ENOMEM: u64 = 12;

#[unsafe(no_mangle)]
#[unsafe(link_section = "iter/task")]
pub fn seed_waits(ctx: *mut c_void) -> i32 {
    let Some((task, output)) = task_and_output(ctx) else { return 0 };
    let t = settings().task;
    let Some(addr) = as_number(task as u64) else { return 0 };
    let (Some(tid), Some(tgid), Some(state)) =
        (task_u32(addr, t.pid), task_u32(addr, t.tgid), task_u32(addr, t.state))
    else {
        return 0;
    };
    // The idle tasks, the dying, and the running wait for nothing.
    if tid == 0 || state & TASK_DEAD != 0 || task_u32(addr, t.on_cpu).is_none_or(|on| on != 0) {
        return 0;
    }
    let out = Outgoing { task: addr, tgid, tid, state, current: false, next: 0 };
    if !crate::switch::wanted(&out) || STARTS.get_ptr(&addr).is_some() {
        // Not traced, or a hook saw this wait begin (or is ending it now).
        return 0;
    }
    // SAFETY: a helper call on the task the iterator hands over.
    let regs = unsafe { bpf_task_pt_regs(task) } as *const u64;
    let regs = (!regs.is_null()).then(|| PtRegs::at(regs));
    let user = regs
        .as_ref()
        .filter(|r| r.word(REGS_CS) == USER_CS)
        .map(|r| (r.word(REGS_IP), r.word(REGS_SP), r.word(REGS_BP)));
    let Some(rec) = SCRATCH_SEED_START.get_ptr_mut(0) else { return 0 };
    // SAFETY: this CPU's scratch slot, the iterator's alone.
    let rec = unsafe { &mut *rec };
    // SAFETY: a helper call without preconditions.
    rec.ts = unsafe { bpf_ktime_get_ns() };
    rec.kstack =
        if settings().stacks & CAPTURE_KERNEL != 0 { kernel_stack(task) } else { STACK_NONE };
    rec.ustack = match user {
        Some(_) if settings().stacks & CAPTURE_USER != 0 => seeded_ustack(),
        _ => STACK_NONE,
    };
    rec.tgid = tgid;
    rec.tid = tid;
    rec.state = state;
    rec.arrivals = task_u32(addr, t.pcount).unwrap_or(0);
    rec.comm = comm_of(addr);
    crate::what::fill_other(&mut rec.what, tid, regs, state);
    rec.row = crate::switch::NO_ROW;
    rec.held = WaitVal::default();
    rec.woken = 0;
    rec.chain = 0;
    mark_started(addr);
    if STARTS.insert(&addr, &*rec, BPF_NOEXIST as u64).is_err() {
        // A switch of the task in between, or a full map (counted as the hooks count it).
        if STARTS.get_ptr(&addr).is_none() {
            count(counter::LOST_START_FULL, 1);
        }
        return 0;
    }
    count(counter::SEEDED, 1);
    if let (Some((ip, sp, bp)), true) = (user, rec.ustack == SEEDED_USTACK) {
        output.write(&SeededWait { task: addr, ts: rec.ts, tid, tgid, ip, sp, bp });
    }
    0
}

/// The task's kernel stack (it is off its CPU: the stack it switched out
/// with), kept in `KSTACKS` as the hooks keep theirs.
#[inline(always)]
fn kernel_stack(task: *mut task_struct) -> u64 {
    let Some(buf) = SCRATCH_SEED_STACK.get_ptr_mut(0) else { return ENOMEM };
    // SAFETY: the helper writes at most BYTES into the per-CPU buffer of that size.
    let ret = unsafe { bpf_get_task_stack(task, buf.cast(), BYTES, 0) };
    if ret <= 0 {
        count(counter::LOST_KERNEL_STACK, 1);
        return if ret < 0 { (-ret) as u64 } else { ENODATA };
    }
    // SAFETY: the per-CPU buffer the helper just filled.
    let frames = unsafe { &*buf };
    stackref::keep(
        &KSTACKS,
        stackref::hash(frames, ret as usize / 8, crate::kstack::SEED),
        frames,
        counter::LOST_KERNEL_STACK,
    )
}

/// [`SEEDED_USTACK`], kept in `USTACKS` (once): the stack a seeded wait shows
/// if it ends before user space has walked its own.
#[inline(always)]
fn seeded_ustack() -> u64 {
    let Some(buf) = SCRATCH_SEED_STACK.get_ptr_mut(0) else { return ENOMEM };
    // SAFETY: this CPU's scratch, the iterator's alone.
    let frames = unsafe { &mut *buf };
    frames[0] = CUT_MARK | cut::STARTING;
    frames[1] = 0;
    stackref::keep(&USTACKS, stackref::hash(frames, 1, USER_SEED), frames, counter::LOST_USER_STACK)
}
