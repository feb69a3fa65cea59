//! The one-line status a trace keeps on a terminal's stderr: time so far and
//! left, waits recorded, losses.

use std::io::{self, Write};
use std::time::Duration;

/// The one-line status on a terminal's stderr, rewritten in place.
pub struct Status {
    on: bool,
    started: std::time::Instant,
    total: Option<Duration>,
}

impl Status {
    pub fn new(total: Option<Duration>) -> Self {
        // SAFETY: isatty has no preconditions.
        let on = unsafe { libc::isatty(2) } == 1;
        Status { on, started: std::time::Instant::now(), total }
    }

    pub fn show(&self, c: &crate::model::Counters) {
        if !self.on {
            return;
        }
        let el = self.started.elapsed().as_secs_f64();
        let left = match self.total {
            Some(t) => format!(", {:.0} s left", (t.as_secs_f64() - el).max(0.0)),
            None => String::new(),
        };
        let mut err = io::stderr();
        let _ = write!(
            err,
            "\r\x1b[Ktopwaits: {el:.0} s{left}, {} waits recorded, {} lost",
            c.recorded,
            c.lost_total()
        );
        let _ = err.flush();
    }

    pub fn clear(&self) {
        if self.on {
            let mut err = io::stderr();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}
