//! When to look at how full the aggregate is, and when to take its rows out:
//! the faster rows arrive, the sooner the next look.

use std::time::{Duration, Instant};

use crate::bpf::Fill;

/// The soonest look after another: each is one map lookup.
const SOONEST: Duration = Duration::from_millis(10);

/// The latest look after another, however quiet the trace: a burst that begins
/// just after a look must not fill the map's free half before the next.
pub const LATEST: Duration = Duration::from_millis(200);

/// Whether at least half of the map is in use.
fn half_full(fill: &Fill) -> bool {
    fill.size > 1 && fill.inserted.saturating_sub(fill.taken) >= u64::from(fill.size / 2)
}

/// Spreads the looks at the aggregate so that no more than an eighth of it
/// fills between two at the rate rows last came. Rows are taken out once half
/// is in use, so the other half holds four looks' worth: a look that comes
/// late, or rows that come faster for a while, still find room.
#[derive(Debug, Default)]
pub struct SpillClock {
    /// The last look: when, and the rows inserted by then.
    last: Option<(Instant, u64)>,
    /// Rows a second, as last measured; it halves at most per look, so that one
    /// quiet moment in a busy trace does not stretch the next wait.
    rate: f64,
}

impl SpillClock {
    /// A look at `now` found `fill`: whether to take the rows out now, and
    /// how long to wait for the next look.
    pub fn look(&mut self, now: Instant, fill: Fill) -> (bool, Duration) {
        let last = self.last.replace((now, fill.inserted));
        // The first look has no rate to go by: the next comes soon and finds one.
        let Some((then, inserted)) = last else { return (half_full(&fill), SOONEST) };
        // The count restarts when user space clears the map.
        let added = fill.inserted.checked_sub(inserted).unwrap_or(fill.inserted);
        let secs = now.saturating_duration_since(then).as_secs_f64();
        if secs > 0.0 {
            self.rate = (added as f64 / secs).max(self.rate / 2.0);
        }
        // How long an eighth of the map takes to fill, compared as seconds
        // first: a rate halved for minutes of quiet is far below a row a
        // second, and its wait beyond any Duration.
        let to_eighth = f64::from(fill.size.max(8) / 8) / self.rate;
        let next = match to_eighth < LATEST.as_secs_f64() {
            true => Duration::from_secs_f64(to_eighth).max(SOONEST),
            false => LATEST,
        };
        (half_full(&fill), next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(inserted: u64, taken: u64) -> Fill {
        Fill { inserted, taken, size: 2048 }
    }

    #[test]
    fn a_quiet_trace_is_looked_at_five_times_a_second() {
        let mut c = SpillClock::default();
        let t = Instant::now();
        // The first look has no rate to go by: it looks again soon.
        assert_eq!(c.look(t, fill(0, 0)), (false, SOONEST));
        assert_eq!(c.look(t + SOONEST, fill(3, 0)), (false, LATEST));
        assert_eq!(c.look(t + LATEST, fill(3, 0)), (false, LATEST));
    }

    #[test]
    fn fast_rows_are_looked_at_before_an_eighth_of_the_map_fills() {
        let mut c = SpillClock::default();
        let t = Instant::now();
        c.look(t, fill(0, 0));
        // 5,600 rows a second (a thread per request, with wakers): 256 rows
        // come in 46 ms.
        let (spill, next) = c.look(t + Duration::from_millis(100), fill(560, 0));
        assert!(!spill);
        assert!(next >= Duration::from_millis(45) && next <= Duration::from_millis(46), "{next:?}");
        // Faster than an eighth per 10 ms: looked at every 10 ms.
        let (_, next) = c.look(t + Duration::from_millis(110), fill(1060, 0));
        assert_eq!(next, SOONEST);
    }

    #[test]
    fn minutes_of_quiet_after_a_busy_moment_wait_the_longest() {
        let mut c = SpillClock::default();
        let mut t = Instant::now();
        c.look(t, fill(0, 0));
        t += SOONEST;
        c.look(t, fill(5_000, 0));
        // An hour of looks finding nothing new: the rate halves at each, far
        // below a row a second, and the wait stays the longest.
        let mut waits = Vec::new();
        for _ in 0..18_000 {
            t += LATEST;
            waits.push(c.look(t, fill(5_000, 0)).1);
        }
        assert_eq!(waits[0], SOONEST);
        assert!(waits[20..].iter().all(|&w| w == LATEST), "{:?}", &waits[..30]);
        // Rows coming again bring the looks closer at once.
        t += LATEST;
        assert_eq!(c.look(t, fill(7_000, 0)).1, Duration::from_secs_f64(256.0 / 10_000.0));
    }

    #[test]
    fn rows_are_taken_out_once_half_the_map_is_in_use() {
        let mut c = SpillClock::default();
        let t = Instant::now();
        assert!(!c.look(t, fill(1023, 0)).0);
        assert!(c.look(t, fill(1024, 0)).0);
        // What was taken out is free again.
        assert!(!c.look(t, fill(1500, 1000)).0);
        // A map of one row (the aggregate not in use) never is.
        assert!(!c.look(t, Fill { inserted: 5, taken: 0, size: 1 }).0);
    }

    #[test]
    fn the_rate_falls_by_at_most_half_a_look_and_survives_a_cleared_map() {
        let mut c = SpillClock::default();
        let t = Instant::now();
        c.look(t, fill(0, 0));
        c.look(t + Duration::from_millis(100), fill(2560, 0));
        // Nothing for 100 ms: the rate (25,600 a second) halves, no more.
        let (_, next) = c.look(t + Duration::from_millis(200), fill(2560, 0));
        assert_eq!(next, Duration::from_millis(20));
        // The map was cleared (the count starts again): 128 rows in 10 ms,
        // not a negative count, sets the rate.
        let (_, next) = c.look(t + Duration::from_millis(210), fill(128, 0));
        assert_eq!(next, Duration::from_millis(20));
    }
}
