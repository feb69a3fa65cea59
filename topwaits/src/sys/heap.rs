//! How glibc's allocator serves topwaits: a tracer that builds and moves
//! tables while the workload runs, then ends with one large report.

/// Allocations of this size and more get mappings of their own, given back to
/// the kernel when freed: the report's.
const REPORT_MMAP_THRESHOLD: i32 = 64 * 1024;
/// glibc's default, for the report.
const REPORT_TRIM_THRESHOLD: i32 = 128 * 1024;
/// While tracing, up to this size comes from the heap (32 MiB is the most
/// glibc takes), and freed memory stays there for the next use.
const TRACING_MMAP_THRESHOLD: i32 = 16 << 20;
const TRACING_TRIM_THRESHOLD: i32 = 64 << 20;

/// For start-up and the report: allocations of 64 KiB and more get their own
/// mappings, given back to the kernel when freed. Left to itself glibc raises
/// that threshold as large blocks are freed (the kernel's BTF parsed at
/// start-up), and the report's big vectors then stay in the heap after use:
/// the peak RSS of a 20,000-stack report went from about 50 MiB to about
/// 42 MiB with this.
pub fn tune() {
    set(REPORT_MMAP_THRESHOLD, REPORT_TRIM_THRESHOLD);
}

/// For the trace itself: each unwind table built (a few hundred KiB to a few
/// MiB in five or six vectors), each process's maps read and each batch of
/// nodes written freed and asked for again. Served by fresh mappings, every
/// page of them was faulted in, zeroed and unmapped each time: over half the
/// table builder's CPU and a third of the main thread's while perf arrived
/// under `perf bench sched messaging`. Kept in the heap, they are reused.
pub fn for_tracing() {
    set(TRACING_MMAP_THRESHOLD, TRACING_TRIM_THRESHOLD);
}

/// Back to [`tune`]'s settings for a report, with what the trace freed given
/// back to the kernel first.
pub fn for_report() {
    set(REPORT_MMAP_THRESHOLD, REPORT_TRIM_THRESHOLD);
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[allow(unused_variables)]
fn set(mmap_threshold: i32, trim_threshold: i32) {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets parameters of the allocator. Threads that
    // allocate meanwhile read them as glibc's own dynamic threshold leaves
    // them: a value either before or after the change.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, mmap_threshold);
        libc::mallopt(libc::M_TRIM_THRESHOLD, trim_threshold);
    }
}

#[cfg(all(test, target_env = "gnu"))]
mod tests {
    use super::*;

    /// Whether glibc serves a block of `size` bytes by a mapping of its own:
    /// the IS_MMAPPED bit of the size word it keeps just before the block.
    fn mmapped(size: usize) -> bool {
        // SAFETY: the block is glibc's from malloc to free; the word before it
        // is its chunk header, read as a plain address (volatile, so that the
        // compiler does not reason about memory outside the block).
        unsafe {
            let p = libc::malloc(size) as usize;
            assert_ne!(p, 0);
            let word = std::ptr::read_volatile((p - std::mem::size_of::<usize>()) as *const usize);
            libc::free(p as *mut libc::c_void);
            word & 2 != 0
        }
    }

    /// A table's megabyte comes from the heap while tracing; in the report, a
    /// block larger than any the trace freed gets a mapping of its own.
    ///
    /// The allocator's state is the process's: a free chunk that another test
    /// left in this thread's arena serves a large block whatever the
    /// threshold. So the check runs in a fresh process of this test binary
    /// that runs this test alone.
    #[test]
    fn tracing_keeps_large_blocks_in_the_heap_and_the_report_maps_them() {
        let name =
            "sys::heap::tests::tracing_keeps_large_blocks_in_the_heap_and_the_report_maps_them";
        if crate::util::alone::is_alone(name) {
            for_tracing();
            assert!(!mmapped(1 << 20), "a block of 1 MiB was mapped while tracing");
            for_report();
            assert!(mmapped(8 << 20), "a block of 8 MiB came from the heap in the report");
            return;
        }
        let (status, out) = crate::util::alone::run_alone(name, &[]);
        assert!(status.success() && out.contains("1 passed"), "the test alone failed: {out}");
    }
}
