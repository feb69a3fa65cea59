//! Turns BPF timestamps (CLOCK_MONOTONIC nanoseconds) into wall-clock times, using a
//! clock pair sampled at start, and formats them as RFC 3339 with the local offset.

/// Nanoseconds since the Unix epoch.
pub type WallNs = i128;

/// A CLOCK_MONOTONIC reading and the CLOCK_REALTIME reading taken at the same instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ClockPair {
    pub mono_ns: u64,
    pub wall_ns: WallNs,
}

fn now_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the timespec we own; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

impl ClockPair {
    /// Samples both clocks, bracketing the monotonic read between two real-time reads
    /// and keeping the tightest of a few tries, so the pair is exact to well under a µs.
    pub fn sample() -> Self {
        let mut best: Option<(i128, ClockPair)> = None;
        for _ in 0..5 {
            let w1 = now_ns(libc::CLOCK_REALTIME);
            let m = now_ns(libc::CLOCK_MONOTONIC);
            let w2 = now_ns(libc::CLOCK_REALTIME);
            let pair = ClockPair { mono_ns: m as u64, wall_ns: w1 + (w2 - w1) / 2 };
            if best.is_none_or(|(gap, _)| w2 - w1 < gap) {
                best = Some((w2 - w1, pair));
            }
        }
        // Five iterations always ran, so `best` is set.
        best.map(|(_, p)| p).unwrap_or(ClockPair { mono_ns: 0, wall_ns: 0 })
    }

    /// The wall-clock time of a monotonic timestamp.
    pub fn wall(&self, mono_ns: u64) -> WallNs {
        self.wall_ns + (mono_ns as i128 - self.mono_ns as i128)
    }
}

/// Current CLOCK_MONOTONIC in nanoseconds, the clock of `bpf_ktime_get_ns`.
pub fn monotonic_now() -> u64 {
    now_ns(libc::CLOCK_MONOTONIC) as u64
}

/// The local time zone's offset from UTC, in seconds, at a given instant.
pub fn local_offset_s(at: WallNs) -> i32 {
    let secs = at.div_euclid(1_000_000_000) as libc::time_t;
    // SAFETY: an all-zero tm is a valid value; localtime_r fills it or leaves it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are to live values owned here.
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if ok {
        tm.tm_gmtoff as i32
    } else {
        0
    }
}

/// Civil date from days since 1970-01-01 (proleptic Gregorian).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Broken-down local time: (date, hh, mm, ss, fraction ns).
fn parts(at: WallNs, offset_s: i32) -> ((i64, u32, u32), i64, i64, i64, i64) {
    let local = at + offset_s as i128 * 1_000_000_000;
    let secs = local.div_euclid(1_000_000_000) as i64;
    let frac = local.rem_euclid(1_000_000_000) as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    (civil(days), sod / 3600, sod / 60 % 60, sod % 60, frac)
}

/// RFC 3339 with microseconds and an explicit offset, e.g. `2026-11-22T14:03:12.524117+01:00`.
pub fn rfc3339(at: WallNs, offset_s: i32) -> String {
    let ((y, mo, d), h, mi, s, frac) = parts(at, offset_s);
    let sign = if offset_s < 0 { '-' } else { '+' };
    let off = offset_s.unsigned_abs();
    format!(
        "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:06}{sign}{:02}:{:02}",
        frac / 1000,
        off / 3600,
        off / 60 % 60
    )
}

/// Local `HH:MM:SS.mmm` (millisecond precision), for the top view.
pub fn hms_millis(at: WallNs, offset_s: i32) -> String {
    let (_, h, mi, s, frac) = parts(at, offset_s);
    format!("{h:02}:{mi:02}:{s:02}.{:03}", frac / 1_000_000)
}

/// Local `YYYY-MM-DD`.
pub fn date(at: WallNs, offset_s: i32) -> String {
    let ((y, mo, d), ..) = parts(at, offset_s);
    format!("{y:04}-{mo:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_monotonic_to_wall_exactly() {
        let pair = ClockPair { mono_ns: 5_000_000_000, wall_ns: 1_700_000_000_123_456_789 };
        assert_eq!(pair.wall(5_000_000_000), 1_700_000_000_123_456_789);
        assert_eq!(pair.wall(6_500_000_001), 1_700_000_001_623_456_790);
        assert_eq!(pair.wall(4_000_000_000), 1_699_999_999_123_456_789);
    }

    #[test]
    fn formats_rfc3339_with_offsets() {
        // 2023-11-14T22:13:20.123456Z
        let t: WallNs = 1_700_000_000_123_456_789;
        assert_eq!(rfc3339(t, 0), "2023-11-14T22:13:20.123456+00:00");
        assert_eq!(rfc3339(t, 3600 + 1800), "2023-11-14T23:43:20.123456+01:30");
        assert_eq!(rfc3339(t, -8 * 3600), "2023-11-14T14:13:20.123456-08:00");
        assert_eq!(hms_millis(t, 0), "22:13:20.123");
        assert_eq!(date(t, 2 * 3600), "2023-11-15");
    }

    #[test]
    fn civil_dates_across_leap_years_and_before_the_epoch() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(-1), (1969, 12, 31));
        assert_eq!(civil(11_016), (2000, 2, 29));
        assert_eq!(civil(20_779), (2026, 11, 22));
    }

    #[test]
    fn sampled_pair_matches_the_system_clocks() {
        let pair = ClockPair::sample();
        let mono = monotonic_now();
        let wall = now_ns(libc::CLOCK_REALTIME);
        let err = (pair.wall(mono) - wall).abs();
        assert!(err < 5_000_000, "conversion off by {err} ns");
    }
}
