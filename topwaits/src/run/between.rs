//! The wait between two reports while the tracer is attached: process events
//! handed to the learners, Go execs and JVMs hooked, a half-full aggregate spilled, and
//! the once-a-second upkeep that the trace loop and `serve` share.

use std::cell::RefCell;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use anyhow::Result;

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

/// How often the aggregate is checked for being half full: a busy trace adds
/// thousands of rows a second (a thread per request, each a row), and the
/// other half must hold what comes until the next check.
const SPILL_CHECKS: Duration = Duration::from_millis(200);

/// Takes the rows out of the aggregate into `spilled` once it is half full
/// (see [`Tracer::spill`]); where that fails, the map fills and what does not
/// fit is counted as before.
fn spill(tracer: &mut Tracer, spilled: &mut Vec<Capture>) {
    match tracer.aggregate_half_full().and_then(|half| match half {
        true => tracer.spill(),
        false => Ok(None),
    }) {
        Ok(Some(taken)) => spilled.push(taken),
        Ok(None) => {}
        Err(e) => log::warn!("{e:#}"),
    }
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
    /// When the upkeep last ran: None runs it at the first check.
    last_upkeep: Option<Instant>,
}

impl Waiting {
    pub fn new(
        targets: Vec<OwnedFd>,
        events: Option<ProcEvents>,
        long: Option<WaitEvents>,
    ) -> Self {
        Waiting { targets, events, long, spilled: Vec::new(), last_upkeep: None }
    }

    /// Waits for `slice` (None: until a signal or the targets' exit). Every
    /// [`SPILL_CHECKS`] it spills a half-full aggregate; once a second, from
    /// the first check on, it sweeps the unwind tables and calls `upkeep` (a
    /// status line, say) with the tracer.
    pub fn wait(
        &mut self,
        slice: Option<Duration>,
        tracer: &mut Tracer,
        symbolizer: &mut BlazeSymbolizer,
        unwinder: &RefCell<Unwinder>,
        upkeep: &mut dyn FnMut(&Tracer),
    ) -> Result<End> {
        let Waiting { targets, events, long, spilled, last_upkeep } = self;
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
                spill(&mut tracer.borrow_mut(), spilled);
                if last_upkeep.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                    return;
                }
                *last_upkeep = Some(Instant::now());
                upkeep(&tracer.borrow());
                unwinder.borrow_mut().sweep();
            },
            SPILL_CHECKS,
        )
    }

    /// Merges the rows spilled since the last drain into its capture.
    pub fn absorb_spilled(&mut self, capture: &mut Capture) {
        for taken in self.spilled.drain(..) {
            capture.absorb(taken);
        }
    }
}
