//! pprof output (`--pprof FILE`): the report as a gzip-compressed `profile.proto`,
//! which `go tool pprof`, Grafana Pyroscope and Parca read. Each record is one
//! sample; user frames carry their file's mapping (path, build id, file offset) so
//! that fleet tools can symbolize again with their own debug info.

use std::collections::HashMap;
use std::io::{self, Write};

use prost::Message;

use super::Format;
use crate::model::{comm_text, object_of, Frame, ObjectMap, Record, Report, WakeKind};

/// The messages of pprof's `profile.proto` (github.com/google/pprof, proto3) that
/// topwaits writes, field numbers as in the schema; prost does the encoding.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
    }
}

/// The sample values, in order: (type, unit). The waker split comes with `-w`.
/// pprof adds up a value over the samples it merges, so the longest wait, which
/// adds up to nothing meaningful, is a numeric label ([`MAX_WAIT`]) instead.
pub const VALUES: [(&str, &str); 2] = [("off_cpu", "nanoseconds"), ("waits", "count")];

/// The sample types added with on-CPU samples (`--on-cpu`): a running record's
/// time and samples, where its off-CPU values are 0 (and a wait's are these).
pub const ON_CPU_VALUES: [(&str, &str); 2] = [("on_cpu", "nanoseconds"), ("samples", "count")];
pub const WAKER_VALUES: [(&str, &str); 2] = [("blocked", "nanoseconds"), ("runq", "nanoseconds")];
/// The label of a sample's longest wait, in nanoseconds.
pub const MAX_WAIT: &str = "max_wait";

/// The name pprof shows for the kernel's mapping.
const KERNEL: &str = "[kernel.kallsyms]";

/// `--pprof`: one gzip-compressed profile.
pub struct Pprof {
    /// Label each sample with its record's cgroup (see
    /// [`super::folded::cgroup_on`]).
    pub cgroup: Option<bool>,
}

impl Format for Pprof {
    fn write(&self, report: &Report, out: &mut dyn Write) -> io::Result<()> {
        let bytes = profile(report, super::folded::cgroup_on(self.cgroup, report)).encode_to_vec();
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::default());
        gz.write_all(&bytes)?;
        gz.finish()?;
        Ok(())
    }
}

/// Builds the tables of one profile: strings, mappings, functions and locations,
/// each entry once, ids from 1 (0 means none in pprof).
#[derive(Default)]
struct Builder {
    strings: Vec<String>,
    string_ids: HashMap<String, i64>,
    mappings: Vec<proto::Mapping>,
    /// Mapping id by (start, end, offset, path): processes mapping a file alike share one.
    mapping_ids: HashMap<(u64, u64, u64, String), u64>,
    kernel_mapping: u64,
    functions: Vec<proto::Function>,
    function_ids: HashMap<(String, String), u64>,
    locations: Vec<proto::Location>,
    location_ids: HashMap<(u64, u64, String), u64>,
}

impl Builder {
    fn new() -> Self {
        let mut b = Builder::default();
        b.string(""); // Index 0 is the empty string, as pprof requires.
        b
    }

    fn string(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as i64;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    fn mapping(&mut self, m: &ObjectMap) -> u64 {
        let key = (m.start, m.end, m.offset, m.path.to_string());
        if let Some(&id) = self.mapping_ids.get(&key) {
            return id;
        }
        let id = self.mappings.len() as u64 + 1;
        let (filename, build_id) =
            (self.string(&m.path), m.build_id.as_deref().map_or(0, |b| self.string(b)));
        self.mappings.push(proto::Mapping {
            id,
            memory_start: m.start,
            memory_limit: m.end,
            file_offset: m.offset,
            filename,
            build_id,
            has_functions: true,
        });
        self.mapping_ids.insert(key, id);
        id
    }

    fn kernel_mapping(&mut self) -> u64 {
        if self.kernel_mapping == 0 {
            let id = self.mappings.len() as u64 + 1;
            let filename = self.string(KERNEL);
            self.mappings.push(proto::Mapping {
                id,
                memory_start: 0,
                memory_limit: u64::MAX,
                filename,
                has_functions: true,
                ..Default::default()
            });
            self.kernel_mapping = id;
        }
        self.kernel_mapping
    }

    fn function(&mut self, name: &str, file: &str) -> u64 {
        let key = (name.to_string(), file.to_string());
        if let Some(&id) = self.function_ids.get(&key) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let (name, filename) = (self.string(name), self.string(file));
        self.functions.push(proto::Function { id, name, system_name: name, filename });
        self.function_ids.insert(key, id);
        id
    }

    /// A frame's location: its mapping and address, and a line naming its function
    /// when one resolved (an unresolved frame is left for the reader to symbolize).
    fn location(&mut self, f: &Frame, mapping: Option<&ObjectMap>, kernel: bool) -> u64 {
        let mapping_id = match (kernel, mapping) {
            (true, _) => self.kernel_mapping(),
            (false, Some(m)) => self.mapping(m),
            (false, None) => 0,
        };
        let name = f.symbol.as_deref().map(str::to_string).unwrap_or_else(|| {
            if mapping_id == 0 {
                f.describe()
            } else {
                String::new()
            }
        });
        let key = (mapping_id, f.addr, name.clone());
        if let Some(&id) = self.location_ids.get(&key) {
            return id;
        }
        let id = self.locations.len() as u64 + 1;
        let file = if kernel {
            KERNEL.to_string()
        } else {
            mapping
                .map(|m| m.path.to_string())
                .or_else(|| f.module.as_deref().map(str::to_string))
                .unwrap_or_default()
        };
        let line = if name.is_empty() {
            vec![]
        } else {
            vec![proto::Line { function_id: self.function(&name, &file), line: 0 }]
        };
        self.locations.push(proto::Location { id, mapping_id, address: f.addr, line });
        self.location_ids.insert(key, id);
        id
    }

    fn label(&mut self, key: &str, value: &str) -> proto::Label {
        proto::Label { key: self.string(key), str: self.string(value), ..Default::default() }
    }

    fn num_label(&mut self, key: &str, num: i64) -> proto::Label {
        proto::Label { key: self.string(key), num, ..Default::default() }
    }

    fn ns_label(&mut self, key: &str, ns: u64) -> proto::Label {
        proto::Label { num_unit: self.string("nanoseconds"), ..self.num_label(key, ns as i64) }
    }

    fn value_type(&mut self, (t, unit): (&str, &str)) -> proto::ValueType {
        proto::ValueType { r#type: self.string(t), unit: self.string(unit) }
    }
}

/// The state a record's waits were in, where the report knows it: every wait
/// under `--state`, and with `-w` the waits that ended a preemption.
fn state_of(report: &Report, r: &Record) -> Option<&'static str> {
    if let Some(w) = &r.wake {
        match w.kind {
            WakeKind::Preempted => return Some("R"),
            WakeKind::Woken | WakeKind::NoWaker if report.info.state_filter.is_none() => {
                return None
            }
            _ => {}
        }
    }
    match report.info.state_filter {
        Some(0) => Some("R"),
        Some(1) => Some("S"),
        Some(2) => Some("D"),
        _ => None,
    }
}

/// The report with each waker's stack joined above its sleeper's, as
/// offwaketime draws them: read from the leaf, each hop's name, its user then
/// kernel frames root to leaf, a `--` frame, then the sleeper's stack (later
/// hops further from the sleeper). Records without a waker keep their stacks.
pub fn joined_with_wakers(mut report: Report) -> Report {
    let mark = |name: &str| {
        std::sync::Arc::new(Frame {
            addr: 0,
            symbol: Some(name.into()),
            module: None,
            offset: None,
        })
    };
    for r in &mut report.records {
        let Some(w) = &r.wake else { continue };
        let mut frames = Vec::new();
        if w.hops.is_empty() {
            frames.push(mark(super::no_waker_label(w.kind)));
            frames.push(mark("--"));
        }
        for h in w.hops.iter().rev() {
            frames.push(mark(&super::hop_name(h)));
            frames.extend(h.user.frames().iter().rev().cloned());
            frames.extend(h.kernel.frames().iter().rev().cloned());
            frames.push(mark("--"));
        }
        frames.extend(r.kernel.frames().iter().cloned());
        r.kernel = crate::model::Stack::shared(frames);
    }
    report
}

/// The profile of a report; with `cgroup`, each sample labelled with its cgroup.
pub fn profile(report: &Report, cgroup: bool) -> proto::Profile {
    let mut b = Builder::new();
    let waker = report.info.waker;
    let mut sample_type: Vec<proto::ValueType> = VALUES.iter().map(|&v| b.value_type(v)).collect();
    if waker {
        sample_type.extend(WAKER_VALUES.iter().map(|&v| b.value_type(v)));
    }
    let on_cpu = report.info.on_cpu_hz.is_some();
    if on_cpu {
        sample_type.extend(ON_CPU_VALUES.iter().map(|&v| b.value_type(v)));
    }
    let no_objects = Vec::new();
    let mut samples = Vec::with_capacity(report.records.len());
    for r in &report.records {
        let objects = report.objects.get(&r.tgid).unwrap_or(&no_objects);
        // Leaf first: the kernel frames, then the user frames.
        let mut location_id: Vec<u64> =
            r.kernel.frames().iter().map(|f| b.location(f, None, true)).collect();
        location_id.extend(
            r.user.frames().iter().map(|f| b.location(f, object_of(objects, f.addr), false)),
        );
        let (off, on) = if r.on_cpu() {
            ([0, 0], [r.total_ns as i64, r.count as i64])
        } else {
            ([r.total_ns as i64, r.count as i64], [0, 0])
        };
        let mut value = off.to_vec();
        if waker {
            let (blocked, runq) = r.wake.as_ref().map_or((0, 0), |w| (w.blocked_ns, w.runq_ns));
            value.extend([blocked as i64, runq as i64]);
        }
        if on_cpu {
            value.extend(on);
        }
        let mut label = vec![
            b.label("comm", &comm_text(&r.comm)),
            b.num_label("pid", r.tgid.into()),
            b.ns_label(MAX_WAIT, r.max_ns),
        ];
        match (r.threads <= 1, topwaits_common::golang::is_goroutine(r.tid)) {
            // Goroutines kept by stack have no one id.
            (true, true) if r.tid == topwaits_common::golang::GOROUTINE_TID => {}
            // A goroutine by its id, as Go's own profiles label it.
            (true, true) => {
                let goid = r.tid & topwaits_common::golang::GOID_MASK;
                label.push(b.num_label("goroutine", goid.into()));
            }
            (true, false) => label.push(b.num_label("tid", r.tid.into())),
            (false, _) => {}
        }
        // A goroutine's threads, one label each, most often ran on first.
        label.extend(r.ran_on.iter().map(|&tid| b.num_label("ran_on_tid", tid.into())));
        if let Some(state) = state_of(report, r) {
            label.push(b.label("state", state));
        }
        if let Some(w) = &r.waits_on {
            label.push(b.label("waits_on", &w.short()));
        }
        if let (true, Some(cg)) = (cgroup, &r.cgroup) {
            label.push(b.label("cgroup", cg));
        }
        if let Some(w) = &r.wake {
            let who = match (w.kind, w.hops.first()) {
                (WakeKind::Woken, Some(h)) => super::hop_name(h),
                (kind, _) => super::no_waker_label(kind).to_string(),
            };
            label.push(b.label("waker", &who));
        }
        samples.push(proto::Sample { location_id, value, label });
    }
    let comment = b.string(&format!(
        "topwaits: {} of {}",
        if waker { "off-wake time" } else { "off-CPU time" },
        report.info.target
    ));
    let period_type = Some(b.value_type(VALUES[0]));
    // Clients show the last sample type unless told: the off-CPU time is the one.
    let default_sample_type = b.string(VALUES[0].0);
    proto::Profile {
        sample_type,
        sample: samples,
        mapping: b.mappings,
        location: b.locations,
        function: b.functions,
        string_table: b.strings,
        time_nanos: report.info.clock.wall(report.info.start_mono) as i64,
        duration_nanos: report.info.end_mono.saturating_sub(report.info.start_mono) as i64,
        period_type,
        period: 1,
        comment: vec![comment],
        default_sample_type,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{offwake_report, report};

    fn decoded(report: &Report) -> proto::Profile {
        let mut buf = Vec::new();
        Pprof { cgroup: None }.write(report, &mut buf).unwrap();
        assert_eq!(&buf[..2], &[0x1f, 0x8b], "gzip magic");
        let mut raw = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&buf[..]), &mut raw).unwrap();
        proto::Profile::decode(&raw[..]).unwrap()
    }

    fn s(p: &proto::Profile, i: i64) -> &str {
        &p.string_table[i as usize]
    }

    fn label<'a>(p: &'a proto::Profile, smp: &proto::Sample, key: &str) -> Option<(&'a str, i64)> {
        smp.label.iter().find(|l| s(p, l.key) == key).map(|l| (s(p, l.str), l.num))
    }

    #[test]
    fn samples_carry_their_cgroup_as_a_label_when_it_is_on() {
        let mut r = report();
        r.records[0].cgroup = Some("/kubepods/pod1/cri-containerd-4f1c.scope".into());
        let cgroups = |asked: Option<bool>, r: &Report| {
            let p = profile(r, super::super::folded::cgroup_on(asked, r));
            p.sample
                .iter()
                .filter_map(|smp| label(&p, smp, "cgroup").map(|l| l.0.to_string()))
                .collect::<Vec<_>>()
        };
        assert!(cgroups(None, &r).is_empty(), "off by default for a trace of threads");
        assert_eq!(
            cgroups(Some(true), &r),
            ["/kubepods/pod1/cri-containerd-4f1c.scope"],
            "only records with a cgroup"
        );
        r.info.cgroup_target = true;
        assert_eq!(cgroups(None, &r).len(), 1, "on by default for a trace of a cgroup");
        assert!(cgroups(Some(false), &r).is_empty());
    }

    #[test]
    fn on_cpu_samples_are_a_second_sample_type() {
        let p = decoded(&crate::report::fixtures::on_cpu_report());
        let types: Vec<&str> = p.sample_type.iter().map(|t| s(&p, t.r#type)).collect();
        assert_eq!(types, ["off_cpu", "waits", "on_cpu", "samples"]);
        assert_eq!(s(&p, p.default_sample_type), "off_cpu");
        let values: Vec<&Vec<i64>> = p.sample.iter().map(|x| &x.value).collect();
        assert!(values.contains(&&vec![1_000_500_000, 10, 0, 0]), "a wait: {values:?}");
        assert!(
            values.contains(&&vec![0, 0, 2_000_000_000, 200]),
            "the running record: {values:?}"
        );
    }

    #[test]
    fn a_goroutines_sample_is_labelled_with_its_goroutine_not_a_tid() {
        let mut r = report();
        r.records[0].tid = topwaits_common::golang::tid_of(42);
        r.records[0].ran_on = vec![104, 101];
        let p = decoded(&r);
        let smp = &p.sample[0];
        assert_eq!(label(&p, smp, "goroutine").map(|l| l.1), Some(42));
        assert_eq!(label(&p, smp, "tid"), None);
        let ran_on: Vec<i64> =
            smp.label.iter().filter(|l| s(&p, l.key) == "ran_on_tid").map(|l| l.num).collect();
        assert_eq!(ran_on, [104, 101], "the threads it ran on, most often first");
        let others = p.sample[1..].iter().flat_map(|x| &x.label);
        assert!(others.clone().all(|l| s(&p, l.key) != "ran_on_tid"), "threads ran on themselves");
    }

    #[test]
    fn every_record_is_a_sample_with_its_values_frames_and_labels() {
        let r = report();
        let p = decoded(&r);
        assert_eq!(s(&p, 0), "");
        let types: Vec<(&str, &str)> =
            p.sample_type.iter().map(|t| (s(&p, t.r#type), s(&p, t.unit))).collect();
        assert_eq!(types, VALUES.to_vec());
        assert_eq!(p.sample.len(), 2);
        let smp = &p.sample[0];
        assert_eq!(smp.value, vec![1_000_500_000, 10]);
        assert_eq!(s(&p, p.default_sample_type), "off_cpu");
        let max = smp.label.iter().find(|l| s(&p, l.key) == MAX_WAIT).unwrap();
        assert_eq!((max.num, s(&p, max.num_unit)), (250_000_000, "nanoseconds"));
        let loc = |id: u64| p.location.iter().find(|l| l.id == id).unwrap();
        let names: Vec<&str> = smp
            .location_id
            .iter()
            .map(|&id| {
                s(&p, p.function.iter().find(|f| f.id == loc(id).line[0].function_id).unwrap().name)
            })
            .collect();
        assert_eq!(
            names,
            ["__schedule", "schedule", "do_nanosleep", "clock_nanosleep", "wait_here", "main"]
        );
        assert_eq!(label(&p, smp, "comm"), Some(("sleeper", 0)));
        assert_eq!(label(&p, smp, "pid").map(|l| l.1), Some(100));
        assert_eq!(label(&p, smp, "tid").map(|l| l.1), Some(101));
        assert_eq!(label(&p, smp, "state"), None, "unknown without --state or -w");
        // User frames carry their file's mapping; kernel frames the kernel's.
        let user = loc(smp.location_id[3]);
        let m = p.mapping.iter().find(|m| m.id == user.mapping_id).unwrap();
        assert_eq!(
            (s(&p, m.filename), s(&p, m.build_id), m.memory_start, m.memory_limit),
            ("/usr/bin/sleeper", "abcdef01", 0x1000, 0x9000)
        );
        assert_eq!(user.address, 0x1000);
        let kernel = p.mapping.iter().find(|m| m.id == loc(smp.location_id[0]).mapping_id).unwrap();
        assert_eq!(s(&p, kernel.filename), KERNEL);
        // A lost stack is a sample without frames, its time kept.
        assert!(p.sample[1].location_id.is_empty());
        assert_eq!(p.sample[1].value[0], 3_000);
        assert_eq!(p.duration_nanos as u64, r.info.end_mono - r.info.start_mono);
    }

    /// The waker's frames sit above the sleeper's, root to leaf, after its
    /// name, then `--`, as offwaketime's folded lines read from the leaf.
    #[test]
    fn offwake_profiles_put_the_waker_above_the_sleeper() {
        let rep = joined_with_wakers(offwake_report());
        let names: Vec<&str> = rep.records[0]
            .kernel
            .frames()
            .iter()
            .map(|f| f.symbol.as_deref().unwrap_or(""))
            .collect();
        let first = names.iter().position(|n| *n == "writer").unwrap();
        assert_eq!(&names[first..first + 4], ["writer", "main", "produce", "write"], "{names:?}");
        let dash = names.iter().rposition(|n| *n == "--").unwrap();
        assert_eq!(
            names[dash - 1],
            "try_to_wake_up",
            "the waker's kernel leaf just above the divider"
        );
        let original = offwake_report();
        assert_eq!(names[dash + 1..].len(), original.records[0].kernel.frames().len());
        assert_eq!(names[0], "[interrupt]", "the last hop furthest from the sleeper");
    }

    #[test]
    fn offwake_adds_the_split_and_the_waker() {
        let p = decoded(&offwake_report());
        assert_eq!(p.sample_type.len(), 4);
        assert_eq!(s(&p, p.sample_type[2].r#type), "blocked");
        assert_eq!(p.sample[0].value[2..], [1_000_000_000, 500_000]);
        assert_eq!(
            s(&p, p.default_sample_type),
            "off_cpu",
            "not the run-queue time, the last type"
        );
        assert_eq!(label(&p, &p.sample[0], "waker").map(|l| l.0), Some("writer"));
        assert_eq!(label(&p, &p.sample[1], "state").map(|l| l.0), Some("R"), "a preemption");
    }

    #[test]
    fn shared_functions_and_locations_are_written_once() {
        let mut r = report();
        let twin = Record { tid: 102, ..r.records[0].clone() };
        r.records.push(twin);
        let p = decoded(&r);
        assert_eq!(p.sample.len(), 3);
        assert_eq!(p.sample[0].location_id, p.sample[2].location_id);
        assert_eq!(p.location.len(), 6);
        let mut names: Vec<&str> = p.function.iter().map(|f| s(&p, f.name)).collect();
        names.dedup();
        assert_eq!(names.len(), p.function.len());
    }
}
