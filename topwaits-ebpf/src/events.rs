//! Long-wait events (`--events-over`): each wait of at least the threshold is sent
//! at its end through the `WAIT_EVENTS` ring buffer, with its stacks and waker,
//! while shorter waits stay aggregated in the kernel; on-CPU samples go the same
//! way where their times are wanted (`--perfetto`), each a record of its own
//! size. User space polls the buffer rather than being woken per event; it is
//! woken only once the buffer is half full.

use aya_ebpf::{macros::map, maps::RingBuf};
use topwaits_common::{counter, wake_kind, Hop, SampleEvent, WaitEvent, WaitKey};

use crate::maps::{count, CHAINS};

/// Sized by user space at load (`--events-buffer`); this is the default.
#[map]
pub static WAIT_EVENTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;
const BPF_RB_AVAIL_DATA: u64 = 0;
const BPF_RB_RING_SIZE: u64 = 1;

/// Sends the wait with record key `key` that began at `began` and ends at `now`;
/// with `waker`, names the task that woke it (from the task's last wakeup at
/// `woken`, whose chain is `chain`).
#[inline(always)]
pub fn send(key: &WaitKey, began: u64, now: u64, state: u32, waker: bool, woken: u64, chain: u64) {
    let Some(mut entry) = WAIT_EVENTS.reserve::<WaitEvent>(0) else {
        count(counter::LOST_WAIT_EVENTS, 1);
        return;
    };
    let e = entry.as_mut_ptr();
    // SAFETY: a reserved ring-buffer record of the event's size, written field by
    // field (a whole value would not fit on the BPF stack beside the hook's).
    unsafe {
        (*e).start = began;
        (*e).end = now;
        (*e).kstack = key.kstack;
        (*e).ustack = key.ustack;
        (*e).tgid = key.tgid;
        (*e).tid = key.tid;
        (*e).state = state;
        (*e).comm = key.comm;
        (*e).what = key.what;
        (*e).woken = 0;
        (*e).wake_kind = if state == 0 { wake_kind::PREEMPTED } else { wake_kind::NO_WAKER };
        (*e).waker = Hop::default();
        if waker && topwaits_common::woke_wait(woken, chain, began, now) {
            (*e).woken = woken;
            (*e).wake_kind = wake_kind::WOKEN;
            if let Some(h) = CHAINS.get_ptr(&chain) {
                // A pointer from a map lookup; chains are never changed.
                (*e).waker = (*h).hops[0];
            }
        }
    }
    entry.submit(wakeup());
    count(counter::WAIT_EVENTS, 1);
}

/// Wakes user space only once the buffer is half full.
#[inline(always)]
fn wakeup() -> u64 {
    let half = WAIT_EVENTS.query(BPF_RB_RING_SIZE) / 2;
    if WAIT_EVENTS.query(BPF_RB_AVAIL_DATA) >= half {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

/// Sends one on-CPU sample with its time.
#[inline(always)]
pub fn send_sample(ev: &SampleEvent) {
    if WAIT_EVENTS.output::<SampleEvent>(ev, wakeup()).is_err() {
        count(counter::LOST_SAMPLE_EVENTS, 1);
    }
}
