//! Each goroutine's waits over a `topwaits threads` window: its time parked,
//! what it waited on, the function it parked in and the threads it ran on.

use std::collections::HashMap;

use topwaits_common::golang::{is_goroutine, GOID_MASK, GOROUTINE_TID};

use crate::model::label::WaitsOn;
use crate::model::Record;

/// One goroutine's waits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoroutineProfile {
    pub tgid: u32,
    /// Its goid, modulo 2^30 (as its records keep it).
    pub goid: u32,
    pub comm: Vec<u8>,
    /// From each park until the scheduler ran it again.
    pub parked_ns: u64,
    pub waits: u64,
    /// What it waited on (the runtime's wait reason), most time first.
    pub on: Vec<(String, u64)>,
    /// The function its longest-waiting site parked in, past the runtime's
    /// own frames; None where its stack was not kept.
    pub site: Option<String>,
    /// The threads it ran on, the one it ran on most first.
    pub ran_on: Vec<u32>,
}

/// The goroutines of `records`, most time parked first; and the time of the
/// goroutine waits kept by stack alone (goid 0: the aggregate was half full),
/// which no one goroutine stands for.
pub fn profiles(records: &[Record]) -> (Vec<GoroutineProfile>, u64) {
    let mut by: HashMap<(u32, u32), (GoroutineProfile, u64)> = HashMap::new();
    let mut merged_ns = 0;
    for r in records.iter().filter(|r| is_goroutine(r.tid) && !r.on_cpu()) {
        if r.tid == GOROUTINE_TID {
            merged_ns += r.total_ns;
            continue;
        }
        let goid = r.tid & GOID_MASK;
        let (p, heaviest) = by.entry((r.tgid, goid)).or_insert_with(|| {
            let p = GoroutineProfile {
                tgid: r.tgid,
                goid,
                comm: r.comm.clone(),
                parked_ns: 0,
                waits: 0,
                on: Vec::new(),
                site: None,
                ran_on: Vec::new(),
            };
            (p, 0)
        });
        p.parked_ns += r.total_ns;
        p.waits += r.count;
        let reason = match &r.waits_on {
            Some(WaitsOn::Goroutine { reason }) => reason.clone(),
            other => crate::model::label::short_of(other.as_ref()),
        };
        match p.on.iter_mut().find(|(on, _)| *on == reason) {
            Some((_, ns)) => *ns += r.total_ns,
            None => p.on.push((reason, r.total_ns)),
        }
        if r.total_ns > *heaviest {
            *heaviest = r.total_ns;
            p.site = site(r).or(p.site.take());
        }
        crate::model::ran_on::join(&mut p.ran_on, &r.ran_on);
    }
    let mut out: Vec<GoroutineProfile> = by
        .into_values()
        .map(|(mut p, _)| {
            p.on.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            p
        })
        .collect();
    out.sort_by(|a, b| b.parked_ns.cmp(&a.parked_ns).then((a.tgid, a.goid).cmp(&(b.tgid, b.goid))));
    (out, merged_ns)
}

/// Packages whose frames say how a goroutine parks, not what it was doing.
const PARKING: &[&str] = &["runtime.", "sync.", "time.", "internal/"];

/// The first frame of a record's user stack, leaf first, past the runtime's
/// parking and the packages that park: `main.handle` for a sync.Mutex taken
/// there, `main.nap` for its `time.Sleep`.
pub fn site(r: &Record) -> Option<String> {
    r.user
        .frames()
        .iter()
        .map(|f| f.name())
        .find(|n| !n.starts_with('[') && !PARKING.iter().any(|p| n.starts_with(p)))
        .map(|n| n.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixtures::bare_record;
    use crate::model::{Frame, Stack};
    use topwaits_common::golang::tid_of;

    fn wait(goid: u64, reason: &str, user: &[&str], total_ns: u64, ran_on: &[u32]) -> Record {
        let frames = user
            .iter()
            .map(|n| Frame { symbol: Some((*n).into()), ..Frame::unknown(0x1000) })
            .collect();
        Record {
            tgid: 10,
            tid: tid_of(goid),
            user: Stack::of(frames),
            waits_on: Some(WaitsOn::Goroutine { reason: reason.into() }),
            ran_on: ran_on.to_vec(),
            ..bare_record("server", total_ns, 2)
        }
    }

    #[test]
    fn each_goroutine_sums_its_waits_by_reason_with_its_heaviest_site() {
        let mutex = ["runtime.gopark", "sync.runtime_SemacquireMutex", "sync.(*Mutex).Lock"];
        let records = vec![
            wait(18, "sync.Mutex", &[&mutex[..], &["main.handle"]].concat(), 900, &[11, 12]),
            wait(18, "sleep", &["runtime.gopark", "time.Sleep", "main.nap"], 300, &[12, 13]),
            wait(
                19,
                "chan receive",
                &["runtime.gopark", "runtime.chanrecv1", "main.consume"],
                2000,
                &[11],
            ),
            // Kept by stack: stands for many goroutines.
            Record { tid: GOROUTINE_TID, ..wait(0, "sleep", &[], 50, &[]) },
            // A thread's wait is no goroutine's.
            Record { tid: 11, ..wait(0, "sleep", &[], 70, &[]) },
        ];
        let (got, merged) = profiles(&records);
        assert_eq!(merged, 50);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].goid, got[0].parked_ns, got[0].waits), (19, 2000, 2));
        assert_eq!(got[0].site.as_deref(), Some("main.consume"));
        let g18 = &got[1];
        assert_eq!((g18.goid, g18.parked_ns, g18.waits), (18, 1200, 4));
        assert_eq!(g18.on, vec![("sync.Mutex".to_string(), 900), ("sleep".to_string(), 300)]);
        assert_eq!(g18.site.as_deref(), Some("main.handle"));
        assert_eq!(g18.ran_on, vec![11, 12, 13]);
    }

    #[test]
    fn a_goroutine_whose_stack_was_not_kept_has_no_site() {
        let r = wait(7, "select", &[], 10, &[]);
        let (got, _) = profiles(&[r]);
        assert_eq!(got[0].site, None);
        assert_eq!(got[0].on, vec![("select".to_string(), 10)]);
    }
}
