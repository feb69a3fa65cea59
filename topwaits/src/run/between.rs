//! The wait between two reports while the tracer is attached: process events
//! handed to the learners, Go execs and JVMs hooked, a half-full aggregate spilled, and
//! the once-a-second upkeep that the trace loop and `serve` share.

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::spill::{SpillClock, LATEST};
use super::tables::Unwinder;
use super::wait::{wait, End};
use crate::bpf::{ProcEvents, Tracer, WaitEvents};
use crate::model::Capture;
use crate::stacks::symbolize::BlazeSymbolizer;

/// Hands a process event (None: a beat) to the symbolizer and the unwinder;
/// how soon either wants the next beat.
pub(super) fn on_event(
    symbolizer: &mut BlazeSymbolizer,
    unwinder: &RefCell<Unwinder>,
    e: Option<topwaits_common::ProcEvent>,
) -> Option<Duration> {
    let named = symbolizer.on_event(e).then_some(super::wait::BEAT);
    super::wait::sooner(unwinder.borrow_mut().on_event(e), named)
}

/// A process that exec'd during the trace: a Go program has its goroutines
/// traced from now on (said once per binary where it cannot be).
pub(super) fn hook_goroutines(tracer: &mut Tracer, e: Option<topwaits_common::ProcEvent>) {
    let Some(e) = e.filter(|e| e.kind == topwaits_common::proc_event::EXEC) else { return };
    if let Some(failed) = tracer.exec(e.tgid) {
        crate::util::stderr::say!("topwaits: warning: goroutines not traced in {failed}");
    }
}

/// JVMs that started running Java during the trace: their libjvm.so is
/// hooked from now on, for their sleeps' asked times and their monitors.
fn hook_jvms(tracer: &mut Tracer, unwinder: &mut Unwinder) {
    for pid in unwinder.take_jvms() {
        tracer.hook_jvm(pid);
    }
}

/// Looks at how full the aggregate is and takes its rows out into `spilled`
/// once half is in use (see [`Tracer::spill`]); where that fails, the map fills
/// and what does not fit is counted as before. Returns when to look next.
fn spill(tracer: &mut Tracer, clock: &mut SpillClock, spilled: &mut Vec<Capture>) -> Duration {
    let (half, next) = match tracer.aggregate_fill() {
        Ok(fill) => clock.look(Instant::now(), fill),
        Err(e) => {
            log::warn!("{e:#}");
            return LATEST;
        }
    };
    match half.then(|| tracer.spill()).transpose() {
        Ok(Some(Some(taken))) => spilled.push(taken),
        Ok(_) => {}
        Err(e) => log::warn!("{e:#}"),
    }
    next
}

/// What the waits of one trace read and keep from one to the next.
pub(super) struct Waiting {
    /// The traced processes' pidfds: the trace ends once all have exited.
    targets: Vec<OwnedFd>,
    events: Option<ProcEvents>,
    /// The long waits sent one by one, where the trace asked for them.
    pub long: Option<WaitEvents>,
    /// Rows taken out of a half-full aggregate, for the next drain.
    spilled: Vec<Capture>,
    /// When to look at the aggregate next.
    clock: SpillClock,
    /// When the upkeep last ran: None runs it at the first check.
    last_upkeep: Option<Instant>,
}

impl Waiting {
    pub fn new(
        targets: Vec<OwnedFd>,
        events: Option<ProcEvents>,
        long: Option<WaitEvents>,
    ) -> Self {
        Waiting {
            targets,
            events,
            long,
            spilled: Vec::new(),
            clock: SpillClock::default(),
            last_upkeep: None,
        }
    }

    /// Waits for `slice` (None: until a signal or the targets' exit). It looks
    /// at the aggregate as often as [`SpillClock`] says and spills it once half
    /// full; once a second, from the first look on, it sweeps the unwind tables
    /// and calls `upkeep` (a status line, say) with the tracer.
    pub fn wait(
        &mut self,
        slice: Option<Duration>,
        tracer: &mut Tracer,
        symbolizer: &mut BlazeSymbolizer,
        unwinder: &RefCell<Unwinder>,
        upkeep: &mut dyn FnMut(&Tracer),
    ) -> Result<End> {
        let Waiting { targets, events, long, spilled, clock, last_upkeep } = self;
        let tracer = RefCell::new(tracer);
        wait(
            slice,
            targets,
            events,
            long,
            &mut |e| {
                hook_goroutines(&mut tracer.borrow_mut(), e);
                let next = on_event(symbolizer, unwinder, e);
                hook_jvms(&mut tracer.borrow_mut(), &mut unwinder.borrow_mut());
                next
            },
            &mut || {
                let next = spill(&mut tracer.borrow_mut(), clock, spilled);
                if last_upkeep.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    *last_upkeep = Some(Instant::now());
                    upkeep(&tracer.borrow());
                    unwinder.borrow_mut().sweep();
                }
                next
            },
        )
    }

    /// Merges the rows spilled since the last drain into its capture.
    pub fn absorb_spilled(&mut self, capture: &mut Capture) {
        for taken in self.spilled.drain(..) {
            capture.absorb(taken);
        }
    }
}
