//! Waiting while the kernel traces: for the duration, a signal, or the end of every
//! `-p` process, with the process events handed on as they arrive. SIGINT, SIGTERM
//! and SIGHUP stay blocked from before attaching to the end and are read from a
//! signalfd while waiting: one that comes between two waits (while an interval is
//! reported) stays pending for the next, so none is lost.

use std::time::Duration;

use anyhow::{Context as _, Result};

use crate::bpf::{ProcEvents, WaitEvents};
use crate::settings::Threads;

/// How often a process read at its exec is checked for being due to be read again.
pub const BEAT: Duration = Duration::from_millis(20);

/// Why tracing ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Duration,
    Signal(&'static str),
    /// Every process of `-p` has exited.
    TargetsExited,
}

/// Process file descriptors of the `-p` processes: each becomes readable when its
/// process exits. A process already gone gets none.
pub fn pidfds(threads: &Threads) -> Vec<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    let Threads::Pids(pids) = threads else { return Vec::new() };
    pids.iter()
        .filter_map(|&p| {
            // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
            let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, p as libc::pid_t, 0) };
            // SAFETY: a non-negative return is a new fd that nothing else owns.
            (fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
        })
        .collect()
}

/// The index of the first pidfd that is readable (its process exited); pending
/// while none is, or there are none.
fn first_ready(
    fds: &[tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>],
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<(std::io::Result<()>, usize)> {
    for (i, fd) in fds.iter().enumerate() {
        if let std::task::Poll::Ready(r) = fd.poll_read_ready(cx) {
            return std::task::Poll::Ready((r.map(drop), i));
        }
    }
    std::task::Poll::Pending
}

/// Waits for the duration, or SIGINT, SIGTERM or SIGHUP, or (with `targets`, the
/// pidfds of `-p`) until every target process has exited, handing process events
/// to `on_event` as they arrive and calling `tick` at once, then as soon after
/// each call as it says. `on_event` says
/// how soon it wants a beat (it is called with `None` then, until it says None):
/// a process read at its exec is read again once its loader is done.
pub fn wait(
    duration: Option<Duration>,
    targets: &mut Vec<std::os::fd::OwnedFd>,
    events_slot: &mut Option<ProcEvents>,
    waits_slot: &mut Option<WaitEvents>,
    on_event: &mut dyn FnMut(Option<topwaits_common::ProcEvent>) -> Option<Duration>,
    tick: &mut dyn FnMut() -> Duration,
) -> Result<End> {
    use tokio::io::unix::AsyncFd;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("failed to start the async runtime")?;
    rt.block_on(async {
        // One that came while attaching, or between two waits, is read now.
        let mut signals = registered(SignalFd::open()?)?;
        let mut events = events_slot.take().map(registered).transpose()?;
        let mut long = waits_slot.take().map(registered).transpose()?;
        // When `on_event` wants to be called with None next: at once, as events
        // taken before this loop (while the learners loaded) may have asked for
        // beats that no one gave (a waker first seen then had its tables built
        // and never installed).
        let mut next_beat: Option<tokio::time::Instant> = Some(tokio::time::Instant::now());
        let mut reads = TimedReads::new(tokio::time::Instant::now());
        let after = |d: Option<Duration>| d.map(|d| tokio::time::Instant::now() + d);
        let mut next_tick = tokio::time::Instant::now();
        let sleep = async {
            match duration {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(sleep);
        let watch = !targets.is_empty();
        let mut alive = targets.drain(..).map(registered).collect::<std::io::Result<Vec<_>>>()?;
        let end = loop {
            let readable = async {
                match events.as_mut() {
                    Some(fd) => fd.readable_mut().await.map(Some),
                    None => std::future::pending().await,
                }
            };
            let long_pulled = pull_long(long.as_mut());
            tokio::select! {
                _ = &mut sleep => break End::Duration,
                _ = long_pulled => {}
                guard = signals.readable_mut() => {
                    let mut guard = guard?;
                    match guard.get_inner_mut().read() {
                        Some(name) => break End::Signal(name),
                        None => guard.clear_ready(),
                    }
                }
                _ = tokio::time::sleep_until(next_tick) => next_tick = tokio::time::Instant::now() + tick(),
                _ = tokio::time::sleep_until(next_beat.unwrap_or_else(tokio::time::Instant::now)), if next_beat.is_some() => next_beat = after(on_event(None)),
                (res, i) = std::future::poll_fn(|cx| first_ready(&alive, cx)) => {
                    res?;
                    alive.swap_remove(i);
                    if watch && alive.is_empty() {
                        break End::TargetsExited;
                    }
                }
                guard = readable => {
                    if let Some(mut guard) = guard? {
                        guard.get_inner_mut().drain(|e| next_beat = after(on_event(Some(e))));
                        guard.clear_ready();
                        reads.woken(tokio::time::Instant::now());
                    }
                }
                _ = tokio::time::sleep_until(reads.next.unwrap_or_else(tokio::time::Instant::now)), if reads.next.is_some() => {
                    let n = events.as_mut().map_or(0, |fd| fd.get_mut().drain(|e| next_beat = after(on_event(Some(e)))));
                    reads.read(tokio::time::Instant::now(), n);
                }
            }
        };
        // One that came as another branch won ends the wait all the same.
        let end = match end {
            End::Duration | End::TargetsExited => signals.get_mut().read().map_or(end, End::Signal),
            signal => signal,
        };
        // Processes still alive are watched again in the next interval.
        targets.extend(alive.into_iter().map(AsyncFd::into_inner));
        // Hand the event streams back for the next interval, with what is pending.
        *events_slot = events.map(|fd| {
            let mut inner = fd.into_inner();
            inner.drain(|e| {
                on_event(Some(e));
            });
            inner
        });
        *waits_slot = long.map(|fd| {
            let mut inner = fd.into_inner();
            inner.pull();
            inner
        });
        Ok(end)
    })
}

/// `fd` registered with the runtime, to be awaited until readable.
fn registered<T: std::os::fd::AsRawFd>(fd: T) -> std::io::Result<tokio::io::unix::AsyncFd<T>> {
    // SAFETY: the AsyncFd owns `fd` (a signalfd, a ring buffer's map fd or a
    // pidfd), which stays open and the same for as long as it is registered.
    unsafe { tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
}

/// Long-wait events wake no one: read when the kernel says the buffer is half
/// full, else every 100 ms; pending for ever without them.
async fn pull_long(long: Option<&mut tokio::io::unix::AsyncFd<WaitEvents>>) {
    let Some(fd) = long else { return std::future::pending().await };
    match tokio::time::timeout(Duration::from_millis(100), fd.readable_mut()).await {
        Ok(Ok(mut guard)) => {
            guard.get_inner_mut().pull();
            guard.clear_ready();
        }
        _ => fd.get_mut().pull(),
    }
}

/// When to read the process events without being woken. The kernel wakes this
/// loop for a few of them only (see `proc_event::BATCH_NS`): every other one is
/// written less than that period after a wakeup. So each wakeup arms a read that
/// period later, even when it found nothing (a timed read may have taken its event
/// just before), a timed read that finds events arms the next, and the first is
/// armed at once (a wakeup may have come before the loop began).
#[derive(Debug)]
struct TimedReads {
    period: Duration,
    next: Option<tokio::time::Instant>,
}

impl TimedReads {
    fn new(now: tokio::time::Instant) -> Self {
        let period = Duration::from_nanos(topwaits_common::proc_event::BATCH_NS);
        TimedReads { period, next: Some(now + period) }
    }

    /// The buffer was read on a wakeup at `now`.
    fn woken(&mut self, now: tokio::time::Instant) {
        self.next = Some(now + self.period);
    }

    /// The buffer was read on the timer at `now`, and held `found` events.
    fn read(&mut self, now: tokio::time::Instant, found: usize) {
        self.next = (found > 0).then(|| now + self.period);
    }
}

/// The sooner of two wanted beats.
pub fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The signals that end a wait: SIGINT and SIGTERM always (a shell starts a
/// background command with SIGINT ignored, which would make `kill -INT` of
/// `topwaits 10 &` do nothing), SIGHUP unless it is ignored (under nohup).
fn ending_signals() -> libc::sigset_t {
    // SAFETY: sigset operations on a local set, and a disposition read.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        let mut hup: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut hup) != 0
            || hup.sa_sigaction != libc::SIG_IGN
        {
            libc::sigaddset(&mut set, libc::SIGHUP);
        }
        set
    }
}

/// Blocks the signals that end a wait on this thread (and so on every thread it
/// starts), from before attaching: a Ctrl-C right after the "Tracing..." line, or
/// while an interval is reported, stays pending until a wait reads it.
pub fn hold_signals() {
    let set = ending_signals();
    // SAFETY: a mask change of this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
}

/// A non-blocking signalfd of the signals that end a wait.
struct SignalFd(std::os::fd::OwnedFd);

impl SignalFd {
    fn open() -> std::io::Result<SignalFd> {
        use std::os::fd::FromRawFd as _;
        let set = ending_signals();
        // SAFETY: a new signalfd of a valid set; the fd is owned from here.
        let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: fd is a new, valid descriptor that nothing else owns.
        Ok(SignalFd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }))
    }

    /// The name of a pending signal, read (consumed); None when none is.
    fn read(&mut self) -> Option<&'static str> {
        use std::os::fd::AsRawFd as _;
        // SAFETY: an all-zero signalfd_siginfo is valid.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads at most `size` bytes into `info`.
        let n = unsafe {
            libc::read(self.0.as_raw_fd(), (&mut info as *mut libc::signalfd_siginfo).cast(), size)
        };
        (n == size as isize).then_some(match info.ssi_signo as i32 {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            _ => "SIGHUP",
        })
    }
}

impl std::os::fd::AsRawFd for SignalFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

/// Lets a second Ctrl-C during the report end the process at once, once the
/// wait ended as `end` says. A Ctrl-C ended it: SIGINT back to its default
/// action, and no longer blocked on this thread (the only one then that takes
/// it). The wait ended on its own (its duration, or the traced processes
/// exited): a Ctrl-C that comes now is the first, the one that would have ended
/// the trace, and the report goes on; a thread of its own waits for it, and
/// lets the next one end the process.
pub fn second_interrupt_quits(end: &End) {
    if !matches!(end, End::Signal(_)) {
        std::thread::spawn(|| {
            // SAFETY: sigset operations on a local set; SIGINT is blocked on
            // every thread (`hold_signals`), so sigwait takes it here.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGINT);
                let mut signal = 0;
                libc::sigwait(&set, &mut signal);
                crate::util::stderr::say!("topwaits: finishing the report; Ctrl-C again to quit");
                libc::sigwait(&set, &mut signal);
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::raise(libc::SIGINT);
            }
        });
        return;
    }
    // SAFETY: restoring the default disposition of a signal is always allowed,
    // and a mask change of this thread.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::{hold_signals, second_interrupt_quits, End, TimedReads};
    use std::time::Duration;
    use tokio::time::Instant;

    /// Every event the kernel writes without a wakeup, less than a period after
    /// one, is read by a timed read after it was written, whatever the order in
    /// which the wakeup and the timed reads found the events.
    #[test]
    fn an_event_sent_without_a_wakeup_is_read_within_two_periods() {
        let t0 = Instant::now();
        let mut r = TimedReads::new(t0);
        let period = r.period;
        assert_eq!(r.next, Some(t0 + period), "armed from the start");
        let ms = |n: u64| t0 + Duration::from_millis(n);
        // 100 ms: a wakeup's event is taken by a timed read just before the
        // wakeup is handled, which then finds nothing.
        r.read(ms(100), 1);
        r.woken(ms(101));
        // An event written without a wakeup at 100 ms + 3.9 is read at 105.
        let due = r.next.unwrap();
        assert!(
            due > ms(100) + Duration::from_micros(3_900) && due <= ms(100) + 2 * period,
            "{:?}",
            due - t0
        );
        // That read finds it and arms the next; the one after finds none and stops.
        r.read(due, 1);
        assert_eq!(r.next, Some(due + period));
        r.read(due + period, 0);
        assert_eq!(r.next, None, "no reads while nothing comes");
    }

    /// A trace that ended on its own: the first Ctrl-C during the report lets
    /// it go on, the second ends the process. Signals are the process's, and
    /// topwaits blocks them before any thread starts: the check runs in a
    /// forked child, whose one thread is the one that blocks them.
    #[test]
    fn a_ctrl_c_after_a_trace_ended_on_its_own_lets_the_report_finish() {
        let status = |second: bool| {
            // SAFETY: the child runs only this test's code, then _exits.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                hold_signals();
                second_interrupt_quits(&End::Duration);
                // SAFETY: signals to this process, and its end.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGINT);
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    if second {
                        libc::kill(libc::getpid(), libc::SIGINT);
                        std::thread::sleep(std::time::Duration::from_secs(5));
                        libc::_exit(3);
                    }
                    libc::_exit(0);
                }
            }
            let mut status = 0;
            // SAFETY: waits for the child just forked.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            status
        };
        let first = status(false);
        assert!(libc::WIFEXITED(first) && libc::WEXITSTATUS(first) == 0, "status {first:#x}");
        let second = status(true);
        assert!(
            libc::WIFSIGNALED(second) && libc::WTERMSIG(second) == libc::SIGINT,
            "status {second:#x}"
        );
    }
}
