//! The process-event ring buffer: tasks seen for the first time, and execs.

use aya::maps::{MapData, RingBuf};
use topwaits_common::ProcEvent;

/// Process events from the kernel: a task seen for the first time, or an exec.
pub struct ProcEvents {
    pub(super) ring: RingBuf<MapData>,
}

impl ProcEvents {
    /// Hands every pending event to `f` as (tgid, kind).
    pub fn drain(&mut self, mut f: impl FnMut(u32, u32)) {
        while let Some(item) = self.ring.next() {
            if item.len() >= std::mem::size_of::<ProcEvent>() {
                // SAFETY: the kernel writes whole ProcEvent records; the read is
                // unaligned-safe.
                let ev: ProcEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                f(ev.tgid, ev.kind);
            }
        }
    }
}

impl std::os::fd::AsRawFd for ProcEvents {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}
