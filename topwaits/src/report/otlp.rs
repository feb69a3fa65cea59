//! OTLP profiles (`serve --otlp-endpoint`): a report as one
//! `ExportProfilesServiceRequest` of the v1development profiles signal. Each
//! process is a resource (host, pid, executable, container); each holds two
//! profiles of the same samples, off-CPU time and wait count, since a profile
//! has one sample type; what a wait was for, its thread and its waker are
//! sample attributes. The tables (strings, functions, locations, stacks,
//! attributes) are shared by the whole request, entry 0 of each the empty one
//! as the schema asks. Pure.

use std::collections::HashMap;

use prost::Message as _;

use crate::model::{comm_text, Frame, Record, Report, WakeKind};

/// The messages of opentelemetry-proto's profiles v1development, field numbers
/// as in its `.proto` files; prost does the encoding.
pub mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportProfilesServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_profiles: Vec<ResourceProfiles>,
        #[prost(message, optional, tag = "2")]
        pub dictionary: Option<ProfilesDictionary>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ProfilesDictionary {
        #[prost(message, repeated, tag = "1")]
        pub mapping_table: Vec<Mapping>,
        #[prost(message, repeated, tag = "2")]
        pub location_table: Vec<Location>,
        #[prost(message, repeated, tag = "3")]
        pub function_table: Vec<Function>,
        #[prost(message, repeated, tag = "4")]
        pub link_table: Vec<Link>,
        #[prost(string, repeated, tag = "5")]
        pub string_table: Vec<String>,
        #[prost(message, repeated, tag = "6")]
        pub attribute_table: Vec<KeyValueAndUnit>,
        #[prost(message, repeated, tag = "7")]
        pub stack_table: Vec<Stack>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceProfiles {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_profiles: Vec<ScopeProfiles>,
        #[prost(string, tag = "3")]
        pub schema_url: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeProfiles {
        #[prost(message, optional, tag = "1")]
        pub scope: Option<InstrumentationScope>,
        #[prost(message, repeated, tag = "2")]
        pub profiles: Vec<Profile>,
        #[prost(string, tag = "3")]
        pub schema_url: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct InstrumentationScope {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub version: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, optional, tag = "1")]
        pub sample_type: Option<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        #[prost(fixed64, tag = "3")]
        pub time_unix_nano: u64,
        #[prost(uint64, tag = "4")]
        pub duration_nano: u64,
        #[prost(message, optional, tag = "5")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "6")]
        pub period: i64,
        #[prost(bytes = "vec", tag = "7")]
        pub profile_id: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int32, tag = "1")]
        pub type_strindex: i32,
        #[prost(int32, tag = "2")]
        pub unit_strindex: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(int32, tag = "1")]
        pub stack_index: i32,
        #[prost(int32, repeated, tag = "2")]
        pub attribute_indices: Vec<i32>,
        #[prost(int64, repeated, tag = "4")]
        pub values: Vec<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Stack {
        #[prost(int32, repeated, tag = "1")]
        pub location_indices: Vec<i32>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(int32, tag = "1")]
        pub mapping_index: i32,
        #[prost(uint64, tag = "2")]
        pub address: u64,
        #[prost(message, repeated, tag = "3")]
        pub lines: Vec<Line>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(int32, tag = "1")]
        pub function_index: i32,
        #[prost(int64, tag = "2")]
        pub line: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(int32, tag = "1")]
        pub name_strindex: i32,
        #[prost(int32, tag = "2")]
        pub system_name_strindex: i32,
        #[prost(int32, tag = "3")]
        pub filename_strindex: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub memory_start: u64,
        #[prost(uint64, tag = "2")]
        pub memory_limit: u64,
        #[prost(int32, tag = "4")]
        pub filename_strindex: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Link {
        #[prost(bytes = "vec", tag = "1")]
        pub trace_id: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValueAndUnit {
        #[prost(int32, tag = "1")]
        pub key_strindex: i32,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
        #[prost(int32, tag = "3")]
        pub unit_strindex: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(oneof = "Value", tags = "1, 3")]
        pub value: Option<Value>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Value {
        #[prost(string, tag = "1")]
        String(String),
        #[prost(int64, tag = "3")]
        Int(i64),
    }
}

/// Who a request comes from, and what to call each process: resource
/// attributes the report does not hold.
#[derive(Clone, Debug, Default)]
pub struct Origin {
    pub host: String,
    /// Each process's executable name, where known.
    pub executables: HashMap<u32, String>,
}

/// The two profiles each process gets: (sample type, unit, the value of a record).
const PROFILES: [(&str, &str); 2] = [("off_cpu", "nanoseconds"), ("waits", "count")];

/// Interns the shared tables; index 0 of each is the empty entry.
struct Tables {
    d: proto::ProfilesDictionary,
    strings: HashMap<String, i32>,
    functions: HashMap<(i32, i32), i32>,
    locations: HashMap<(u64, i32), i32>,
    stacks: HashMap<Vec<i32>, i32>,
    attributes: HashMap<(i32, String), i32>,
}

impl Tables {
    fn new() -> Tables {
        let mut t = Tables {
            d: proto::ProfilesDictionary {
                mapping_table: vec![Default::default()],
                location_table: vec![Default::default()],
                function_table: vec![Default::default()],
                link_table: vec![Default::default()],
                string_table: Vec::new(),
                attribute_table: vec![Default::default()],
                stack_table: vec![Default::default()],
            },
            strings: HashMap::new(),
            functions: HashMap::new(),
            locations: HashMap::new(),
            stacks: HashMap::new(),
            attributes: HashMap::new(),
        };
        t.string("");
        t
    }

    fn string(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.strings.get(s) {
            return i;
        }
        let i = self.d.string_table.len() as i32;
        self.d.string_table.push(s.to_string());
        self.strings.insert(s.to_string(), i);
        i
    }

    fn location(&mut self, f: &Frame, kernel: bool) -> i32 {
        let name = f.symbol.as_deref().map_or_else(|| f.describe(), str::to_string);
        let file = if kernel {
            "[kernel.kallsyms]".to_string()
        } else {
            f.module.as_deref().unwrap_or("").to_string()
        };
        let (name, file) = (self.string(&name), self.string(&file));
        let function = *self.functions.entry((name, file)).or_insert_with(|| {
            self.d.function_table.push(proto::Function {
                name_strindex: name,
                system_name_strindex: name,
                filename_strindex: file,
            });
            self.d.function_table.len() as i32 - 1
        });
        *self.locations.entry((f.addr, function)).or_insert_with(|| {
            let lines = vec![proto::Line { function_index: function, line: 0 }];
            self.d.location_table.push(proto::Location {
                mapping_index: 0,
                address: f.addr,
                lines,
            });
            self.d.location_table.len() as i32 - 1
        })
    }

    fn stack(&mut self, r: &Record) -> i32 {
        // Leaf first: the kernel frames, then the user frames.
        let mut ids: Vec<i32> = r.kernel.frames().iter().map(|f| self.location(f, true)).collect();
        ids.extend(r.user.frames().iter().map(|f| self.location(f, false)));
        let next = self.d.stack_table.len() as i32;
        let id = *self.stacks.entry(ids.clone()).or_insert(next);
        if id == next {
            self.d.stack_table.push(proto::Stack { location_indices: ids });
        }
        id
    }

    fn attribute(&mut self, key: &str, value: proto::Value) -> i32 {
        let k = self.string(key);
        let text = format!("{value:?}");
        let next = self.d.attribute_table.len() as i32;
        let id = *self.attributes.entry((k, text)).or_insert(next);
        if id == next {
            self.d.attribute_table.push(proto::KeyValueAndUnit {
                key_strindex: k,
                value: Some(proto::AnyValue { value: Some(value) }),
                unit_strindex: 0,
            });
        }
        id
    }
}

fn kv(key: &str, value: proto::Value) -> proto::KeyValue {
    proto::KeyValue { key: key.into(), value: Some(proto::AnyValue { value: Some(value) }) }
}

/// The attributes of one sample: its thread, what it waited for, its longest
/// wait, and with `-w` its waker.
fn sample_attributes(t: &mut Tables, r: &Record) -> Vec<i32> {
    use proto::Value::{Int, String as Str};
    let mut a = vec![t.attribute("thread.name", Str(comm_text(&r.comm)))];
    if r.threads <= 1 {
        a.push(t.attribute("thread.id", Int(r.tid.into())));
    }
    if let Some(w) = &r.waits_on {
        a.push(t.attribute("topwaits.wait.kind", Str(w.kind().into())));
        a.push(t.attribute("topwaits.wait.label", Str(w.short())));
    }
    a.push(t.attribute("topwaits.wait.max_ns", Int(r.max_ns as i64)));
    if let Some(w) = &r.wake {
        let who = match (w.kind, w.hops.first()) {
            (WakeKind::Woken, Some(h)) => super::hop_name(h),
            (kind, _) => super::no_waker_label(kind).to_string(),
        };
        a.push(t.attribute("topwaits.waker", Str(who)));
        if let (WakeKind::Woken, Some(h)) = (w.kind, w.hops.first()) {
            if let Some(f) =
                h.user.frames().iter().chain(h.kernel.frames()).find(|f| f.symbol.is_some())
            {
                a.push(t.attribute(
                    "topwaits.waker.frame",
                    Str(f.symbol.as_deref().unwrap_or_default().to_string()),
                ));
            }
        }
    }
    a
}

/// The request of one report's waits (on-CPU samples are left out).
/// `profile_id`: 16 bytes that tell this push's profiles apart.
pub fn request(
    report: &Report,
    origin: &Origin,
    profile_id: [u8; 16],
) -> proto::ExportProfilesServiceRequest {
    use proto::Value::{Int, String as Str};
    /// A sample before it is placed: its stack, its attributes, its record.
    type Sample<'r> = (i32, Vec<i32>, &'r Record);
    let mut t = Tables::new();
    let time = report.info.clock.wall(report.info.start_mono).max(0) as u64;
    let duration = report.info.end_mono.saturating_sub(report.info.start_mono);
    // Processes in first-seen order, each with its samples (stack, attributes, record).
    let mut order: Vec<u32> = Vec::new();
    let mut by_process: HashMap<u32, Vec<Sample<'_>>> = HashMap::new();
    for r in report.records.iter().filter(|r| !r.on_cpu()) {
        let stack = t.stack(r);
        let attrs = sample_attributes(&mut t, r);
        by_process
            .entry(r.tgid)
            .or_insert_with(|| {
                order.push(r.tgid);
                Vec::new()
            })
            .push((stack, attrs, r));
    }
    let types: Vec<proto::ValueType> = PROFILES
        .iter()
        .map(|(ty, unit)| proto::ValueType {
            type_strindex: t.string(ty),
            unit_strindex: t.string(unit),
        })
        .collect();
    let mut resource_profiles = Vec::new();
    for (n, tgid) in order.iter().enumerate() {
        let samples = &by_process[tgid];
        let mut attributes =
            vec![kv("host.name", Str(origin.host.clone())), kv("process.pid", Int((*tgid).into()))];
        if let Some(exe) = origin.executables.get(tgid) {
            attributes.push(kv("process.executable.name", Str(exe.clone())));
        }
        let cgroup = samples.iter().find_map(|s| s.2.cgroup.as_deref());
        if let Some(id) =
            cgroup.and_then(|c| c.rsplit('/').find_map(crate::sys::cgroup::container_id_of))
        {
            attributes.push(kv("container.id", Str(id.to_string())));
        }
        if let Some(cg) = cgroup {
            attributes.push(kv("topwaits.cgroup", Str(cg.to_string())));
        }
        let profiles = types
            .iter()
            .enumerate()
            .map(|(i, ty)| {
                let mut id = profile_id;
                id[14] ^= n as u8;
                id[15] ^= (i as u8) | ((n >> 8) as u8) << 1;
                proto::Profile {
                    sample_type: Some(ty.clone()),
                    samples: samples
                        .iter()
                        .map(|(stack, attrs, r)| proto::Sample {
                            stack_index: *stack,
                            attribute_indices: attrs.clone(),
                            values: vec![if i == 0 { r.total_ns as i64 } else { r.count as i64 }],
                        })
                        .collect(),
                    time_unix_nano: time,
                    duration_nano: duration,
                    period_type: Some(ty.clone()),
                    period: 1,
                    profile_id: id.to_vec(),
                }
            })
            .collect();
        resource_profiles.push(proto::ResourceProfiles {
            resource: Some(proto::Resource { attributes }),
            scope_profiles: vec![proto::ScopeProfiles {
                scope: Some(proto::InstrumentationScope {
                    name: "topwaits".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        });
    }
    proto::ExportProfilesServiceRequest { resource_profiles, dictionary: Some(t.d) }
}

/// The request's protobuf bytes.
pub fn encode(req: &proto::ExportProfilesServiceRequest) -> Vec<u8> {
    req.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::fixtures::{offwake_report, report};

    fn decoded(r: &Report) -> proto::ExportProfilesServiceRequest {
        let origin =
            Origin { host: "h1".into(), executables: [(100, "server".to_string())].into() };
        proto::ExportProfilesServiceRequest::decode(&encode(&request(r, &origin, [7; 16]))[..])
            .unwrap()
    }

    fn s(req: &proto::ExportProfilesServiceRequest, i: i32) -> &str {
        &req.dictionary.as_ref().unwrap().string_table[i as usize]
    }

    /// Each process a resource with two profiles (time, count) of the same
    /// samples; the tables begin with their empty entries; the stacks name
    /// the records' frames, leaf first.
    #[test]
    fn every_record_is_a_sample_of_both_profiles_under_its_process() {
        let rep = report();
        let req = decoded(&rep);
        let d = req.dictionary.as_ref().unwrap();
        assert_eq!(d.string_table[0], "");
        assert_eq!(
            (d.stack_table[0].location_indices.len(), d.function_table[0].name_strindex),
            (0, 0)
        );
        let waits: Vec<&Record> = rep.records.iter().filter(|r| !r.on_cpu()).collect();
        let samples: usize = req
            .resource_profiles
            .iter()
            .map(|p| p.scope_profiles[0].profiles[0].samples.len())
            .sum();
        assert_eq!(samples, waits.len());
        for rp in &req.resource_profiles {
            let attrs = &rp.resource.as_ref().unwrap().attributes;
            assert!(attrs.iter().any(|a| a.key == "host.name"));
            let [time, count] = &rp.scope_profiles[0].profiles[..] else { panic!("two profiles") };
            assert_eq!(
                (
                    s(&req, time.sample_type.as_ref().unwrap().type_strindex),
                    s(&req, count.sample_type.as_ref().unwrap().type_strindex)
                ),
                ("off_cpu", "waits")
            );
            assert_eq!(time.samples.len(), count.samples.len());
            assert_ne!(time.profile_id, count.profile_id);
        }
        let first = &req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0];
        let r = waits[0];
        assert_eq!(first.values, vec![r.total_ns as i64]);
        let stack = &d.stack_table[first.stack_index as usize];
        let leaf = &d.location_table[stack.location_indices[0] as usize];
        let f = &d.function_table[leaf.lines[0].function_index as usize];
        let want = r.kernel.frames().first().or(r.user.frames().first()).unwrap();
        assert_eq!(s(&req, f.name_strindex), want.symbol.as_deref().unwrap());
        assert_eq!(stack.location_indices.len(), r.kernel.frames().len() + r.user.frames().len());
    }

    /// What a wait was for and who woke it are sample attributes.
    #[test]
    fn the_wait_label_and_the_waker_are_attributes() {
        let mut rep = offwake_report();
        rep.records[0].waits_on = Some(crate::model::label::WaitsOn::Sleep {
            requested_ns: None,
            syscall: "nanosleep".into(),
            to_deadline: false,
        });
        let req = decoded(&rep);
        let d = req.dictionary.as_ref().unwrap();
        let attrs: Vec<(String, String)> = req.resource_profiles[0].scope_profiles[0].profiles[0]
            .samples[0]
            .attribute_indices
            .iter()
            .map(|&i| {
                let a = &d.attribute_table[i as usize];
                let v = match a.value.as_ref().and_then(|v| v.value.clone()) {
                    Some(proto::Value::String(s)) => s,
                    Some(proto::Value::Int(n)) => n.to_string(),
                    None => String::new(),
                };
                (s(&req, a.key_strindex).to_string(), v)
            })
            .collect();
        let get = |k: &str| attrs.iter().find(|a| a.0 == k).map(|a| a.1.as_str());
        assert_eq!(get("topwaits.wait.kind"), Some("sleep"));
        assert_eq!(get("topwaits.waker"), Some("writer"));
        assert!(get("topwaits.waker.frame").is_some());
        assert!(get("thread.name").is_some());
    }
}
