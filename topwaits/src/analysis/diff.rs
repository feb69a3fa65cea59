//! `topwaits diff`: two traces compared stack by stack, and the gate a CI job
//! sets on the change. Pure: both sides are read from the JSON document every
//! trace can be shown as (a recording is turned into one first), and stacks
//! are matched by their frames' names, so that two runs of a rebuilt or
//! relocated binary still match. Beside the stacks, the waiting is compared by
//! what it was for (each record's label, its addresses left out) and, where
//! both traces hold every wait and its waker, by `why`'s causes.

use std::collections::HashMap;

use serde_json::Value;

pub use crate::settings::Gate;

/// What one side of the comparison holds: its length, and its stacks.
#[derive(Clone, Debug, Default)]
pub struct Side {
    pub duration_s: f64,
    pub rows: Vec<Row>,
}

/// A label as it matches between runs: user-space addresses, which differ
/// from run to run, left out (`mutex 0x7f3a…` is `mutex 0x…`).
pub fn label_key(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    let mut rest = label;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        let digits = rest[i + 2..].chars().take_while(char::is_ascii_hexdigit).count();
        if digits >= 6 {
            out.push_str("0x…");
        } else {
            out.push_str(&rest[i..i + 2 + digits]);
        }
        rest = &rest[i + 2 + digits..];
    }
    out.push_str(rest);
    out
}

/// One stack of one side: whose (by name), what kind of wait (or `running`),
/// its frames' names leaf first, and its waiting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Row {
    pub key: Key,
    pub stat: Stat,
}

/// What matches two sides' stacks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub comm: String,
    pub kind: String,
    pub user: Vec<String>,
    pub kernel: Vec<String>,
}

/// The waiting of one stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    pub total_ns: u64,
    pub count: u64,
    pub max_ns: u64,
}

impl Stat {
    fn absorb(&mut self, o: &Stat) {
        self.total_ns += o.total_ns;
        self.count += o.count;
        self.max_ns = self.max_ns.max(o.max_ns);
    }

    fn scaled(&self, by: f64) -> Stat {
        Stat {
            total_ns: (self.total_ns as f64 * by).round() as u64,
            count: (self.count as f64 * by).round() as u64,
            max_ns: self.max_ns,
        }
    }
}

fn names(stack: &Value) -> Vec<String> {
    stack
        .as_array()
        .map(|frames| {
            frames.iter().map(|f| f["symbol"].as_str().unwrap_or("[unknown]").to_string()).collect()
        })
        .unwrap_or_default()
}

impl Side {
    /// The side a JSON document of a trace (`--json`) holds, or why it holds none.
    pub fn of_json(doc: &Value) -> Result<Side, String> {
        let records = doc["records"]
            .as_array()
            .ok_or("no \"records\" array: not the --json document of a trace")?;
        let duration_s = doc["duration_s"]
            .as_f64()
            .ok_or("no \"duration_s\": not the --json document of a trace")?;
        let mut rows = Vec::with_capacity(records.len());
        for r in records {
            let key = Key {
                comm: r["comm"].as_str().unwrap_or("").to_string(),
                kind: r["waits_on"]["kind"].as_str().unwrap_or("").to_string(),
                user: names(&r["user_stack"]),
                kernel: names(&r["kernel_stack"]),
            };
            let stat = Stat {
                total_ns: r["total_ns"].as_u64().ok_or("a record without total_ns")?,
                count: r["count"].as_u64().unwrap_or(0),
                max_ns: r["max_ns"].as_u64().unwrap_or(0),
            };
            rows.push(Row { key, stat });
        }
        Ok(Side { duration_s, rows })
    }

    /// The same waiting by what it was for: one row per label (see
    /// [`label_key`]), its key's `kind` the label. Records without one (a trace
    /// with `--no-labels`) are `not labelled`.
    pub fn of_json_by_label(doc: &Value) -> Result<Side, String> {
        let side = Side::of_json(doc)?;
        let records = doc["records"].as_array().map(Vec::as_slice).unwrap_or_default();
        let rows = records
            .iter()
            .zip(&side.rows)
            .map(|(r, row)| {
                let label = r["waits_on"]["label"]
                    .as_str()
                    .map_or_else(|| "not labelled".to_string(), label_key);
                Row {
                    key: Key {
                        comm: String::new(),
                        kind: label,
                        user: Vec::new(),
                        kernel: Vec::new(),
                    },
                    stat: row.stat,
                }
            })
            .collect();
        Ok(Side { duration_s: side.duration_s, rows })
    }

    /// The causes of a `why --json` document as rows: whose (the first
    /// thread's name), what (the cause's kind, and for a blocked one what it
    /// was blocked on), where (its stacks' names), and how much of the waiting
    /// it explains (its count is its threads).
    pub fn of_why_json(doc: &Value) -> Result<Side, String> {
        let causes = doc["causes"].as_array().ok_or("no \"causes\" array: not a why document")?;
        let duration_s =
            doc["duration_s"].as_f64().ok_or("no \"duration_s\" in the why document")?;
        let rows = causes
            .iter()
            .map(|c| {
                let kind = c["kind"].as_str().unwrap_or("").to_string();
                let kind = match c["on"].as_str() {
                    // A waker past the path's depth is named by its tid, which
                    // differs between runs.
                    Some(on) if on.starts_with("thread ") => {
                        format!("{kind} on a thread (path too deep)")
                    }
                    Some(on) => format!("{kind} on {}", label_key(on)),
                    None => kind,
                };
                let key = Key {
                    comm: c["thread"]["comm"].as_str().unwrap_or("").to_string(),
                    kind,
                    user: names(&c["user_stack"]),
                    kernel: names(&c["kernel_stack"]),
                };
                let threads = c["threads"].as_array().map_or(1, Vec::len) as u64;
                Row {
                    key,
                    stat: Stat {
                        total_ns: c["ns"].as_u64().unwrap_or(0),
                        count: threads,
                        max_ns: 0,
                    },
                }
            })
            .collect();
        Ok(Side { duration_s, rows })
    }

    /// Each stack once: rows alike but for their threads added up.
    fn by_key(&self) -> HashMap<&Key, Stat> {
        let mut m: HashMap<&Key, Stat> = HashMap::new();
        for r in &self.rows {
            m.entry(&r.key).or_default().absorb(&r.stat);
        }
        m
    }

    fn total_ns(&self) -> u64 {
        self.rows.iter().map(|r| r.stat.total_ns).sum()
    }
}

/// The change of one stack: absent on a side where it was not seen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub key: Key,
    pub before: Option<Stat>,
    pub after: Option<Stat>,
}

impl Change {
    pub fn delta_ns(&self) -> i64 {
        self.after.map_or(0, |s| s.total_ns as i64) - self.before.map_or(0, |s| s.total_ns as i64)
    }

    pub fn status(&self) -> &'static str {
        match (self.before, self.after) {
            (None, _) => "new",
            (_, None) => "gone",
            _ => "changed",
        }
    }
}

/// Two sides compared: every stack's change, the largest first.
#[derive(Clone, Debug)]
pub struct Diff {
    pub before_s: f64,
    pub after_s: f64,
    /// The before side was scaled to the after side's length.
    pub normalised: bool,
    pub before_ns: u64,
    pub after_ns: u64,
    pub changes: Vec<Change>,
}

impl Diff {
    pub fn delta_ns(&self) -> i64 {
        self.after_ns as i64 - self.before_ns as i64
    }

    /// The change of the whole, in percent of the before side (None: it was 0).
    pub fn delta_pct(&self) -> Option<f64> {
        (self.before_ns > 0).then(|| 100.0 * self.delta_ns() as f64 / self.before_ns as f64)
    }
}

/// Compares `after` with `before`, with `normalise` the before side's time and
/// counts scaled to the after side's length first.
pub fn compare(before: &Side, after: &Side, normalise: bool) -> Diff {
    let scale = if normalise && before.duration_s > 0.0 {
        after.duration_s / before.duration_s
    } else {
        1.0
    };
    let (b, a) = (before.by_key(), after.by_key());
    let mut changes: Vec<Change> = b
        .iter()
        .map(|(k, s)| Change {
            key: (*k).clone(),
            before: Some(s.scaled(scale)),
            after: a.get(k).copied(),
        })
        .chain(a.iter().filter(|(k, _)| !b.contains_key(*k)).map(|(k, s)| Change {
            key: (*k).clone(),
            before: None,
            after: Some(*s),
        }))
        .collect();
    changes.sort_by(|x, y| {
        y.delta_ns()
            .unsigned_abs()
            .cmp(&x.delta_ns().unsigned_abs())
            .then_with(|| x.key.cmp(&y.key))
    });
    Diff {
        before_s: before.duration_s,
        after_s: after.duration_s,
        normalised: normalise,
        before_ns: (before.total_ns() as f64 * scale).round() as u64,
        after_ns: after.total_ns(),
        changes,
    }
}

/// What crossed a threshold: the threshold, and the changes that crossed it
/// (none for the whole).
#[derive(Clone, Debug, PartialEq)]
pub struct Crossed<'a> {
    pub what: String,
    pub changes: Vec<&'a Change>,
}

/// Every threshold of `gate` that `diff` crosses.
pub fn check<'a>(diff: &'a Diff, gate: &Gate) -> Vec<Crossed<'a>> {
    let mut out = Vec::new();
    if let Some(pct) = gate.grows_pct {
        let grew = match diff.delta_pct() {
            Some(p) => p > pct,
            None => diff.after_ns > 0,
        };
        if grew {
            out.push(Crossed {
                what: format!(
                    "the waiting grew by {} ({}), more than {pct}%",
                    diff.delta_pct().map_or("all of it".into(), |p| format!("{p:.1}%")),
                    delta(diff.delta_ns())
                ),
                changes: Vec::new(),
            });
        }
    }
    if let Some(ns) = gate.stack_grows_ns {
        let rows: Vec<&Change> = diff.changes.iter().filter(|c| c.delta_ns() > ns as i64).collect();
        if !rows.is_empty() {
            out.push(Crossed {
                what: format!(
                    "{} grew by more than {}",
                    plural_stacks(rows.len()),
                    secs(ns as i64)
                ),
                changes: rows,
            });
        }
    }
    if let Some(ns) = gate.new_ns {
        let rows: Vec<&Change> = diff
            .changes
            .iter()
            .filter(|c| c.before.is_none() && c.after.is_some_and(|s| s.total_ns > ns))
            .collect();
        if !rows.is_empty() {
            out.push(Crossed {
                what: format!(
                    "{} new, each waiting more than {}",
                    plural_stacks(rows.len()),
                    secs(ns as i64)
                ),
                changes: rows,
            });
        }
    }
    out
}

fn plural_stacks(n: usize) -> String {
    if n == 1 {
        "1 stack".into()
    } else {
        format!("{n} stacks")
    }
}

/// A change in seconds to the millisecond, with its sign.
pub fn delta(ns: i64) -> String {
    format!("{}{}", if ns >= 0 { "+" } else { "" }, secs(ns))
}

/// Signed seconds to the millisecond.
pub fn secs(ns: i64) -> String {
    format!("{}{:.3} s", if ns < 0 { "-" } else { "" }, ns.unsigned_abs() as f64 / 1e9)
}

/// A stack on one line, leaf first: its user frames (its kernel ones where it
/// has none), at most `n` of them.
pub fn one_line(key: &Key, n: usize) -> String {
    frames_line(&key.user, &key.kernel, n)
}

/// Frame names on one line, leaf first: the user ones (the kernel ones where
/// there are none), at most `n` of them, or `[no stack]`.
pub fn frames_line(user: &[String], kernel: &[String], n: usize) -> String {
    let frames = if user.is_empty() { kernel } else { user };
    let mut s = frames.iter().take(n).cloned().collect::<Vec<_>>().join(" <- ");
    if frames.len() > n {
        s.push_str(" <- ...");
    }
    if s.is_empty() {
        s = "[no stack]".into();
    }
    s
}

/// The folded frames of a stack, root first (`comm;user;kernel`), as the
/// folded view writes a wait's.
pub fn folded(key: &Key) -> String {
    let clean = |f: &str| f.replace([';', ' ', '\n'], "_");
    let mut parts = vec![clean(if key.comm.is_empty() { "[empty]" } else { &key.comm })];
    parts.extend(key.user.iter().rev().map(|f| clean(f)));
    parts.extend(key.kernel.iter().rev().map(|f| clean(f)));
    if key.kind == "running" {
        parts.push("[running]".into());
    }
    parts.join(";")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(comm: &str, user: &[&str], total_ms: u64, count: u64) -> Row {
        Row {
            key: Key {
                comm: comm.into(),
                kind: "sleep".into(),
                user: user.iter().map(|s| s.to_string()).collect(),
                kernel: vec!["schedule".into()],
            },
            stat: Stat { total_ns: total_ms * 1_000_000, count, max_ns: 1_000_000 },
        }
    }

    fn side(duration_s: f64, rows: Vec<Row>) -> Side {
        Side { duration_s, rows }
    }

    #[test]
    fn stacks_match_by_names_across_threads_and_rank_by_the_change() {
        let before = side(
            10.0,
            vec![
                row("app", &["read", "main"], 100, 10),
                row("app", &["poll", "main"], 500, 5),
                row("app", &["old"], 40, 1),
            ],
        );
        let after = side(
            10.0,
            vec![
                // Two threads of the same stack add up.
                row("app", &["read", "main"], 60, 6),
                row("app", &["read", "main"], 60, 6),
                row("app", &["poll", "main"], 200, 2),
                row("app", &["nanosleep", "added_sleep", "main"], 1000, 100),
            ],
        );
        let d = compare(&before, &after, false);
        let order: Vec<(&str, i64)> =
            d.changes.iter().map(|c| (c.key.user[0].as_str(), c.delta_ns() / 1_000_000)).collect();
        assert_eq!(order, vec![("nanosleep", 1000), ("poll", -300), ("old", -40), ("read", 20)]);
        assert_eq!(d.changes[0].status(), "new");
        assert_eq!(d.changes[2].status(), "gone");
        assert_eq!(d.changes[3].after.unwrap().count, 12);
        assert_eq!((d.before_ns, d.after_ns), (640_000_000, 1_320_000_000));
        assert!((d.delta_pct().unwrap() - 106.25).abs() < 1e-9);
    }

    #[test]
    fn normalising_scales_the_before_side_to_the_after_sides_length() {
        let before = side(5.0, vec![row("app", &["read"], 100, 10)]);
        let after = side(10.0, vec![row("app", &["read"], 200, 20)]);
        assert_eq!(compare(&before, &after, false).changes[0].delta_ns(), 100_000_000);
        let d = compare(&before, &after, true);
        assert_eq!(d.changes[0].delta_ns(), 0, "twice as long, twice the waiting: no change");
        assert_eq!(d.changes[0].before.unwrap().count, 20);
        assert_eq!(d.delta_pct(), Some(0.0));
    }

    #[test]
    fn the_gate_names_what_crossed_each_threshold() {
        let before =
            side(10.0, vec![row("app", &["read"], 100, 10), row("app", &["poll"], 900, 9)]);
        let after = side(
            10.0,
            vec![
                row("app", &["read"], 130, 13),
                row("app", &["poll"], 900, 9),
                row("app", &["new_wait"], 50, 5),
            ],
        );
        let d = compare(&before, &after, false);
        // +80 ms of 1 s: 8%.
        assert!(check(&d, &Gate { grows_pct: Some(10.0), ..Gate::default() }).is_empty());
        let crossed = check(
            &d,
            &Gate {
                grows_pct: Some(5.0),
                stack_grows_ns: Some(20_000_000),
                new_ns: Some(40_000_000),
            },
        );
        assert_eq!(crossed.len(), 3, "{crossed:?}");
        assert!(
            crossed[0].what.contains("8.0%") && crossed[0].what.contains("+0.080 s"),
            "{}",
            crossed[0].what
        );
        let names =
            |c: &Crossed| c.changes.iter().map(|c| c.key.user[0].clone()).collect::<Vec<_>>();
        assert_eq!(names(&crossed[1]), vec!["new_wait", "read"]);
        assert_eq!(names(&crossed[2]), vec!["new_wait"]);
        assert!(check(
            &d,
            &Gate { stack_grows_ns: Some(50_000_000), new_ns: Some(50_000_000), ..Gate::default() }
        )
        .is_empty());
        // Rerun against itself: nothing crosses anything.
        assert!(check(
            &compare(&before, &before, false),
            &Gate { grows_pct: Some(0.0), stack_grows_ns: Some(0), new_ns: Some(0) }
        )
        .is_empty());
    }

    #[test]
    fn labels_match_without_their_addresses() {
        assert_eq!(label_key("mutex 0x7f3a12345678"), "mutex 0x…");
        assert_eq!(label_key("kernel rwsem mmap_lock (read)"), "kernel rwsem mmap_lock (read)");
        assert_eq!(
            label_key("futex 0x10 and 0x55d0c0ffee00"),
            "futex 0x10 and 0x…",
            "short numbers stay"
        );
        assert_eq!(label_key("disk vda"), "disk vda");
        let doc = |addr: &str, ns: u64| {
            json!({"duration_s": 1.0, "records": [
                {"comm": "a", "total_ns": ns, "count": 2, "max_ns": 5, "waits_on": {"kind": "mutex", "label": format!("mutex {addr}")}},
                {"comm": "b", "total_ns": 7, "count": 1, "max_ns": 7, "waits_on": {"kind": "sleep", "label": "sleep"}},
                {"comm": "c", "total_ns": 3, "count": 1, "max_ns": 3},
            ]})
        };
        let before = Side::of_json_by_label(&doc("0x7f0000001000", 10)).unwrap();
        let after = Side::of_json_by_label(&doc("0x7f9999991000", 40)).unwrap();
        let d = compare(&before, &after, false);
        let kinds: Vec<(&str, i64)> =
            d.changes.iter().map(|c| (c.key.kind.as_str(), c.delta_ns())).collect();
        assert_eq!(
            kinds,
            [("mutex 0x…", 30), ("not labelled", 0), ("sleep", 0)],
            "one mutex in both runs, at another address"
        );
    }

    #[test]
    fn why_causes_become_rows_keyed_by_who_what_and_where() {
        let doc = json!({"duration_s": 2.0, "causes": [
            {"kind": "running", "ns": 900, "thread": {"comm": "postgres"}, "threads": [{}, {}],
             "user_stack": [{"symbol": "XLogFlush"}], "kernel_stack": []},
            {"kind": "blocked", "on": "disk vda", "ns": 300, "thread": {"comm": "postgres"}, "threads": [{}],
             "user_stack": [{"symbol": "pg_fsync"}], "kernel_stack": [{"symbol": "io_schedule"}]},
        ]});
        let side = Side::of_why_json(&doc).unwrap();
        assert_eq!(side.rows.len(), 2);
        assert_eq!(
            (side.rows[0].key.kind.as_str(), side.rows[0].stat.total_ns, side.rows[0].stat.count),
            ("running", 900, 2)
        );
        assert_eq!(side.rows[1].key.kind, "blocked on disk vda");
        assert_eq!(side.rows[1].key.kernel, ["io_schedule"]);
        assert!(Side::of_why_json(&json!({"records": []})).is_err());
    }

    #[test]
    fn a_json_document_becomes_a_side() {
        let doc = serde_json::json!({
            "duration_s": 2.5,
            "records": [{"comm": "app", "waits_on": {"kind": "running"}, "user_stack": [{"symbol": "spin"}, {"symbol": "main"}],
                         "kernel_stack": [], "total_ns": 30, "count": 3, "max_ns": 10}]
        });
        let s = Side::of_json(&doc).unwrap();
        assert_eq!(s.duration_s, 2.5);
        assert_eq!(s.rows[0].key.user, vec!["spin", "main"]);
        assert_eq!(folded(&s.rows[0].key), "app;main;spin;[running]");
        assert!(Side::of_json(&serde_json::json!({"causes": []})).unwrap_err().contains("records"));
    }
}
