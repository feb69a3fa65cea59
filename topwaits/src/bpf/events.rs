//! The ring buffers: process events (tasks seen for the first time, forks and execs),
//! and long-wait events (`--events-over`).

use aya::maps::{MapData, RingBuf};
use topwaits_common::{ProcEvent, SampleEvent, WaitEvent};

/// Process events from the kernel: a task seen for the first time, a fork or an exec.
pub struct ProcEvents {
    pub(super) ring: RingBuf<MapData>,
}

impl ProcEvents {
    /// Hands every pending event to `f`, in the order the kernel wrote them, and
    /// says how many there were.
    pub fn drain(&mut self, mut f: impl FnMut(ProcEvent)) -> usize {
        let mut n = 0;
        while let Some(item) = self.ring.next() {
            if item.len() >= std::mem::size_of::<ProcEvent>() {
                // SAFETY: the kernel writes whole ProcEvent records; the read is
                // unaligned-safe.
                let ev: ProcEvent = unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) };
                f(ev);
                n += 1;
            }
        }
        n
    }
}

impl std::os::fd::AsRawFd for ProcEvents {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}

/// Long waits sent one by one (`--events-over`). The kernel wakes no reader per
/// event: the buffer is drained on a timer, and when the kernel says it is half full.
pub struct WaitEvents {
    pub(super) ring: RingBuf<MapData>,
    /// The events read so far, in the order they ended.
    pub got: crate::util::chunked::Chunked<WaitEvent>,
    /// The on-CPU samples read so far (`--perfetto`), in the order they were taken.
    pub samples: Vec<SampleEvent>,
    /// Events read while `got` held [`MAX_HELD_EVENTS`]: dropped, counted.
    pub dropped: u64,
}

/// Most events held between two reports (136 bytes each: 136 MiB), so that a long
/// or busy trace (`topwaits why` sends every wait) stays bounded; the later ones
/// are dropped first and counted.
pub const MAX_HELD_EVENTS: usize = 1 << 20;

impl WaitEvents {
    /// Moves every pending event into [`WaitEvents::got`].
    pub fn pull(&mut self) {
        while let Some(item) = self.ring.next() {
            if self.got.len() + self.samples.len() >= MAX_HELD_EVENTS {
                self.dropped += 1;
            } else if item.len() == std::mem::size_of::<SampleEvent>() {
                // SAFETY: a whole SampleEvent record; the read is unaligned-safe.
                self.samples.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) });
            } else if item.len() >= std::mem::size_of::<WaitEvent>() {
                // SAFETY: the kernel writes whole WaitEvent records; the read is
                // unaligned-safe.
                self.got.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast()) });
            }
        }
    }
}

impl std::os::fd::AsRawFd for WaitEvents {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.ring.as_raw_fd()
    }
}
