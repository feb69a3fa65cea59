//! A small, panic-free reader of kernel BTF that finds struct member offsets, so the
//! eBPF programs can read `task_struct` fields without CO-RE relocations; with what
//! lets aya's loader skip its own parse of that BTF: the count of an object's CO-RE
//! relocations, and hiding the kernel's BTF from the loader's thread.

use std::collections::HashMap;
use std::path::Path;

use thiserror::Error;

/// Where the running kernel publishes its own BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Makes the kernel's BTF file invisible to the calling thread alone: the thread
/// stops sharing its root directory with the rest of the process, then makes the
/// BTF directory its root, in which no `/sys/kernel/btf/vmlinux` exists. For a
/// thread that does one job and ends.
pub fn hide_from_this_thread() -> std::io::Result<()> {
    let dir = std::ffi::CString::new(VMLINUX_BTF.rsplit_once('/').map_or("/", |(d, _)| d))
        .map_err(std::io::Error::other)?;
    // SAFETY: plain syscalls; `dir` is a NUL-terminated string that outlives the call.
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 || unsafe { libc::chroot(dir.as_ptr()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
/// Nesting limit when flattening anonymous struct/union members.
const MAX_DEPTH: usize = 8;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("BTF data is truncated or malformed ({0})")]
    Malformed(&'static str),
    #[error("BTF has no struct named {0}")]
    NoStruct(String),
    #[error("BTF struct {strukt} has no member {member}")]
    NoMember { strukt: String, member: String },
}

/// One type record: enough to walk struct members.
#[derive(Clone, Copy, Debug)]
struct TypeRec {
    kind: u32,
    name_off: u32,
    vlen: u32,
    kind_flag: bool,
    size: u32,
    /// Byte position of the kind-specific data that follows the common header.
    extra: usize,
}

/// Parsed BTF: where each type record starts, and the string section. Records are
/// decoded when asked for: the kernel's BTF holds about 150,000 types, of which a
/// lookup of `task_struct` decodes a few hundred.
pub struct Btf<'a> {
    data: &'a [u8],
    strings: &'a [u8],
    /// The byte position in `data` of each type's header; type ids index this
    /// vector directly, and index 0 (the void type) is unused.
    types: Vec<u32>,
}

fn u16_at(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(d.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(d: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(d.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// Size in bytes of the data after the 12-byte header, by kind.
fn extra_len(kind: u32, vlen: u32) -> Option<usize> {
    let vlen = vlen as usize;
    Some(match kind {
        1 | 14 | 17 => 4,             // INT, VAR, DECL_TAG
        3 => 12,                      // ARRAY
        4 | 5 | 15 | 19 => 12 * vlen, // STRUCT, UNION, DATASEC, ENUM64
        6 | 13 => 8 * vlen,           // ENUM, FUNC_PROTO
        2 | 7..=12 | 16 | 18 => 0, // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
        _ => return None,
    })
}

fn kind_of(info: u32) -> u32 {
    (info >> 24) & 0x1f
}

impl<'a> Btf<'a> {
    /// Parses little-endian BTF as found in `/sys/kernel/btf/vmlinux`.
    pub fn parse(data: &'a [u8]) -> Result<Self, BtfError> {
        let bad = BtfError::Malformed;
        if u16_at(data, 0).ok_or(bad("header"))? != MAGIC {
            return Err(bad("bad magic or big-endian data"));
        }
        if u32::try_from(data.len()).is_err() {
            return Err(bad("larger than 4 GiB"));
        }
        let hdr_len = u32_at(data, 4).ok_or(bad("header"))? as usize;
        let field = |at| u32_at(data, at).map(|v| v as usize).ok_or(bad("header"));
        let (type_off, type_len, str_off, str_len) =
            (field(8)?, field(12)?, field(16)?, field(20)?);
        let range = |off: usize, len: usize| {
            let start = hdr_len.checked_add(off)?;
            data.get(start..start.checked_add(len)?)
        };
        let type_sec = range(type_off, type_len).ok_or(bad("type section out of bounds"))?;
        let strings = range(str_off, str_len).ok_or(bad("string section out of bounds"))?;
        let base = hdr_len + type_off;
        // A type record takes at least 12 bytes.
        let mut types = Vec::with_capacity(1 + type_sec.len() / 12);
        types.push(0);
        let mut at = 0usize;
        while at < type_sec.len() {
            let info = u32_at(type_sec, at + 4).ok_or(bad("type header"))?;
            let extra = extra_len(kind_of(info), info & 0xffff).ok_or(bad("unknown type kind"))?;
            // In range: `data` is under 4 GiB.
            types.push((base + at) as u32);
            at = at + 12 + extra;
        }
        if at != type_sec.len() {
            return Err(bad("type section ends inside a type"));
        }
        Ok(Btf { data, strings, types })
    }

    /// The record of type `id`; every listed header lies within `data`. Type 0,
    /// void, has none.
    fn rec(&self, id: usize) -> Option<TypeRec> {
        if id == 0 {
            return None;
        }
        let at = *self.types.get(id)? as usize;
        let info = u32_at(self.data, at + 4)?;
        Some(TypeRec {
            kind: kind_of(info),
            name_off: u32_at(self.data, at)?,
            vlen: info & 0xffff,
            kind_flag: info >> 31 != 0,
            size: u32_at(self.data, at + 8)?,
            extra: at + 12,
        })
    }

    fn name(&self, off: u32) -> &'a [u8] {
        let rest = self.strings.get(off as usize..).unwrap_or(&[]);
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        &rest[..end]
    }

    /// Whether the string at `off` is `want`, without measuring the string first.
    fn name_is(&self, off: u32, want: &[u8]) -> bool {
        let rest = self.strings.get(off as usize..).unwrap_or(&[]);
        rest.starts_with(want) && rest.get(want.len()).is_none_or(|&b| b == 0)
    }

    /// Byte offsets of every member of `struct name`, with the members of anonymous
    /// structs and unions flattened in. Bitfields are left out.
    pub fn member_offsets(&self, name: &str) -> Result<HashMap<String, u32>, BtfError> {
        let id = (1..self.types.len())
            .find(|&id| {
                self.rec(id).is_some_and(|t| {
                    t.kind == KIND_STRUCT && t.size > 0 && self.name_is(t.name_off, name.as_bytes())
                })
            })
            .ok_or_else(|| BtfError::NoStruct(name.to_string()))?;
        let mut out = HashMap::new();
        self.walk(id, 0, 0, &mut out)?;
        Ok(out)
    }

    fn walk(
        &self,
        id: usize,
        base_bits: u64,
        depth: usize,
        out: &mut HashMap<String, u32>,
    ) -> Result<(), BtfError> {
        let t = self.rec(id).ok_or(BtfError::Malformed("type id"))?;
        for i in 0..t.vlen as usize {
            let at = t.extra + i * 12;
            let m = |k| u32_at(self.data, at + k).ok_or(BtfError::Malformed("member"));
            let (name_off, type_id, raw_off) = (m(0)?, m(4)?, m(8)?);
            let (bits, bitfield) = if t.kind_flag {
                (raw_off & 0x00ff_ffff, raw_off >> 24 != 0)
            } else {
                (raw_off, false)
            };
            let bits = base_bits + bits as u64;
            let mname = self.name(name_off);
            if mname.is_empty() {
                if let Some(inner) = self.rec(type_id as usize) {
                    if (inner.kind == KIND_STRUCT || inner.kind == KIND_UNION) && depth < MAX_DEPTH
                    {
                        self.walk(type_id as usize, bits, depth + 1, out)?;
                    }
                }
                continue;
            }
            if bitfield || !bits.is_multiple_of(8) {
                continue;
            }
            let bytes =
                u32::try_from(bits / 8).map_err(|_| BtfError::Malformed("member offset"))?;
            out.entry(String::from_utf8_lossy(mname).into_owned()).or_insert(bytes);
        }
        Ok(())
    }
}

/// How many bytes of CO-RE relocation records an eBPF object's `.BTF.ext` section
/// holds: those the loader would resolve against the kernel's BTF. Its header is
/// magic, version, flags, header length, then offset and length of the function,
/// line and (when the header is long enough) CO-RE records.
pub fn core_relocation_bytes(ext: &[u8]) -> Result<u32, BtfError> {
    let bad = BtfError::Malformed;
    if u16_at(ext, 0).ok_or(bad("BTF.ext header"))? != MAGIC {
        return Err(bad("BTF.ext: bad magic or big-endian data"));
    }
    let hdr_len = u32_at(ext, 4).ok_or(bad("BTF.ext header"))?;
    if hdr_len < 32 {
        return Ok(0);
    }
    u32_at(ext, 28).ok_or(bad("BTF.ext header"))
}

/// The `task_struct` fields that the programs read, as they are handed to them.
pub use topwaits_common::TaskOffsets;

/// The offset of `inner` within the `outer` struct found at `base`, or `u32::MAX`
/// when either is unknown.
fn nested(btf: &Btf, base: Option<u32>, outer: &str, inner: &str) -> u32 {
    let Some(base) = base else { return u32::MAX };
    btf.member_offsets(outer)
        .ok()
        .and_then(|m| m.get(inner).copied())
        .and_then(|o| base.checked_add(o))
        .unwrap_or(u32::MAX)
}

/// Reading [`TaskOffsets`] from the kernel's BTF.
pub trait FromBtf: Sized {
    /// Finds the offsets in raw BTF bytes.
    fn from_bytes(data: &[u8]) -> Result<Self, BtfError>;

    /// Reads the running kernel's BTF at `path`.
    fn from_sys(path: &Path) -> anyhow::Result<Self>;
}

impl FromBtf for TaskOffsets {
    fn from_bytes(data: &[u8]) -> Result<Self, BtfError> {
        let btf = Btf::parse(data)?;
        let m = btf.member_offsets("task_struct")?;
        let get = |name: &str| {
            m.get(name).copied().ok_or_else(|| BtfError::NoMember {
                strukt: "task_struct".into(),
                member: name.into(),
            })
        };
        Ok(TaskOffsets {
            pid: get("pid")?,
            tgid: get("tgid")?,
            flags: get("flags")?,
            state: get("__state").or_else(|_| get("state"))?,
            comm: get("comm")?,
            prio: get("prio").unwrap_or(u32::MAX),
            static_prio: get("static_prio").unwrap_or(u32::MAX),
            policy: get("policy").unwrap_or(u32::MAX),
            rt_priority: get("rt_priority").unwrap_or(u32::MAX),
            sum_exec: nested(&btf, get("se").ok(), "sched_entity", "sum_exec_runtime"),
            prev_sum_exec: nested(&btf, get("se").ok(), "sched_entity", "prev_sum_exec_runtime"),
            pcount: nested(&btf, get("sched_info").ok(), "sched_info", "pcount"),
            stack: get("stack").unwrap_or(u32::MAX),
            fsbase: nested(&btf, get("thread").ok(), "thread_struct", "fsbase"),
            on_cpu: get("on_cpu").unwrap_or(u32::MAX),
            reserved: 0,
        })
    }

    fn from_sys(path: &Path) -> anyhow::Result<Self> {
        with_bytes(path, Self::from_bytes)
    }
}

/// `parse` of the BTF file at `path`: mapped where the kernel allows it (6.16
/// on, and only privately), which spares copying its 5-6 MiB, read otherwise.
fn with_bytes<T>(
    path: &Path,
    parse: impl FnOnce(&[u8]) -> Result<T, BtfError>,
) -> anyhow::Result<T> {
    use anyhow::Context as _;
    let file =
        std::fs::File::open(path).with_context(|| format!("failed to open {}", path.display()))?;
    // SAFETY: the kernel's BTF is read-only and never changes while mapped.
    let parsed = match unsafe { memmap2::MmapOptions::new().map_copy_read_only(&file) } {
        Ok(map) => parse(&map),
        Err(_) => {
            let mut data = Vec::with_capacity(file.metadata().map_or(0, |m| m.len() as usize));
            std::io::Read::read_to_end(&mut &file, &mut data)
                .with_context(|| format!("failed to read {}", path.display()))?;
            parse(&data)
        }
    };
    parsed.with_context(|| format!("failed to parse {}", path.display()))
}

/// The offsets of [`topwaits_common::CgroupFilter`] from raw BTF bytes.
pub fn cgroup_offsets(data: &[u8], f: &mut topwaits_common::CgroupFilter) -> Result<(), BtfError> {
    let btf = Btf::parse(data)?;
    let cgroup = btf.member_offsets("cgroup")?;
    let get = |m: &HashMap<String, u32>, s: &str, name: &str| {
        m.get(name)
            .copied()
            .ok_or_else(|| BtfError::NoMember { strukt: s.into(), member: name.into() })
    };
    f.off_root = get(&cgroup, "cgroup", "root")?;
    f.off_level = get(&cgroup, "cgroup", "level")?;
    f.off_kn = get(&cgroup, "cgroup", "kn")?;
    // 6.1 on: pointers to the ancestors; before: their ids.
    (f.off_ancestors, f.ancestors_are_ids) = match get(&cgroup, "cgroup", "ancestors") {
        Ok(off) => (off, 0),
        Err(_) => (get(&cgroup, "cgroup", "ancestor_ids")?, 1),
    };
    f.off_hierarchy_id = get(&btf.member_offsets("cgroup_root")?, "cgroup_root", "hierarchy_id")?;
    f.off_kn_id = get(&btf.member_offsets("kernfs_node")?, "kernfs_node", "id")?;
    // Optional: without them a child follows its parent, as on v1.
    let task_cgroups =
        btf.member_offsets("task_struct").ok().and_then(|m| m.get("cgroups").copied());
    let dfl_cgrp = btf.member_offsets("css_set").ok().and_then(|m| m.get("dfl_cgrp").copied());
    if let (Some(t), Some(d)) = (task_cgroups, dfl_cgrp) {
        (f.off_task_cgroups, f.off_dfl_cgrp) = (t, d);
    }
    Ok(())
}

/// Reads [`cgroup_offsets`] from the running kernel's BTF at `path`.
pub fn cgroup_offsets_into(
    path: &Path,
    f: &mut topwaits_common::CgroupFilter,
) -> anyhow::Result<()> {
    with_bytes(path, |data| cgroup_offsets(data, f))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Builds BTF bytes: strings, then types as (name, kind, vlen, kind_flag, size, extra words).
    pub(crate) struct Builder {
        strings: Vec<u8>,
        types: Vec<u8>,
    }

    impl Builder {
        pub(crate) fn new() -> Self {
            Builder { strings: vec![0], types: Vec::new() }
        }
        pub(crate) fn str(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }
        pub(crate) fn ty(
            &mut self,
            name: &str,
            kind: u32,
            vlen: u32,
            kflag: bool,
            size: u32,
            extra: &[u32],
        ) {
            let n = self.str(name);
            let info = (kind << 24) | vlen | ((kflag as u32) << 31);
            for w in [n, info, size].iter().chain(extra) {
                self.types.extend_from_slice(&w.to_le_bytes());
            }
        }
        pub(crate) fn build(&self) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend_from_slice(&MAGIC.to_le_bytes());
            out.extend_from_slice(&[1, 0]);
            for w in [
                24u32,
                0,
                self.types.len() as u32,
                self.types.len() as u32,
                self.strings.len() as u32,
            ] {
                out.extend_from_slice(&w.to_le_bytes());
            }
            out.extend_from_slice(&self.types);
            out.extend_from_slice(&self.strings);
            out
        }
    }

    /// A fabricated task_struct: `__state` at 24, an anonymous union holding `pid`
    /// (at 1000) and a bitfield, `tgid` at 1004, `flags` at 44, `comm` at 2000.
    pub(crate) fn fake_task_btf() -> Vec<u8> {
        let mut b = Builder::new();
        b.ty("int", 1, 0, false, 4, &[32]); // id 1
        let (pid, bf) = (b.str("pid"), b.str("bits"));
        b.ty("", KIND_UNION, 2, true, 4, &[pid, 1, 0, bf, 1, (3 << 24)]); // id 2
        let names: Vec<u32> =
            ["__state", "flags", "tgid", "comm"].iter().map(|n| b.str(n)).collect();
        b.ty(
            "task_struct",
            KIND_STRUCT,
            5,
            false,
            4096,
            &[
                names[0],
                1,
                24 * 8,
                names[1],
                1,
                44 * 8,
                0,
                2,
                1000 * 8,
                names[2],
                1,
                1004 * 8,
                names[3],
                1,
                2000 * 8,
            ],
        );
        b.build()
    }

    #[test]
    fn finds_task_struct_offsets_including_anonymous_members() {
        let off = TaskOffsets::from_bytes(&fake_task_btf()).unwrap();
        assert_eq!(
            off,
            TaskOffsets {
                pid: 1000,
                tgid: 1004,
                flags: 44,
                state: 24,
                comm: 2000,
                ..TaskOffsets::UNKNOWN
            }
        );
    }

    #[test]
    fn charged_cpu_time_offset_adds_the_nested_member() {
        let mut b = Builder::new();
        b.ty("u64", 1, 0, false, 8, &[64]); // id 1
        let sum = b.str("sum_exec_runtime");
        let prev = b.str("prev_sum_exec_runtime");
        b.ty("sched_entity", KIND_STRUCT, 2, false, 256, &[sum, 1, 72 * 8, prev, 1, 80 * 8]); // id 2
        let names: Vec<u32> =
            ["__state", "flags", "pid", "tgid", "comm", "se"].iter().map(|n| b.str(n)).collect();
        let at = [24u32, 44, 1000, 1004, 2000, 128];
        let members: Vec<u32> = names
            .iter()
            .zip(at)
            .flat_map(|(&n, o)| [n, if o == 128 { 2 } else { 1 }, o * 8])
            .collect();
        b.ty("task_struct", KIND_STRUCT, 6, false, 4096, &members);
        let off = TaskOffsets::from_bytes(&b.build()).unwrap();
        assert_eq!((off.sum_exec, off.prev_sum_exec), (128 + 72, 128 + 80));
        let off = TaskOffsets::from_bytes(&fake_task_btf()).unwrap();
        assert_eq!(
            (off.sum_exec, off.prev_sum_exec),
            (u32::MAX, u32::MAX),
            "no se: unknown, not an error"
        );
    }

    #[test]
    fn bitfields_are_not_offered_as_byte_offsets() {
        let data = fake_task_btf();
        let m = Btf::parse(&data).unwrap().member_offsets("task_struct").unwrap();
        assert!(!m.contains_key("bits"));
    }

    #[test]
    fn missing_struct_and_member_are_named() {
        let mut b = Builder::new();
        b.ty("int", 1, 0, false, 4, &[32]);
        let x = b.str("x");
        b.ty("task_struct", KIND_STRUCT, 1, false, 8, &[x, 1, 0]);
        let data = b.build();
        assert_eq!(
            TaskOffsets::from_bytes(&data).unwrap_err().to_string(),
            "BTF struct task_struct has no member pid"
        );
        let mut b = Builder::new();
        b.ty("int", 1, 0, false, 4, &[32]);
        assert_eq!(
            TaskOffsets::from_bytes(&b.build()).unwrap_err(),
            BtfError::NoStruct("task_struct".into())
        );
    }

    #[test]
    fn counts_the_core_relocation_bytes_of_btf_ext() {
        let header = |hdr_len: u32, core_len: u32| {
            let mut h = vec![0x9f, 0xeb, 1, 0];
            for w in [hdr_len, 0, 8, 8, 8, 16, core_len] {
                h.extend_from_slice(&w.to_le_bytes());
            }
            h
        };
        assert_eq!(core_relocation_bytes(&header(32, 0)), Ok(0));
        assert_eq!(core_relocation_bytes(&header(32, 48)), Ok(48));
        assert_eq!(
            core_relocation_bytes(&header(24, 48)),
            Ok(0),
            "a header without CO-RE fields has none"
        );
        assert!(core_relocation_bytes(&header(32, 0)[..20]).is_err(), "truncated");
        assert!(core_relocation_bytes(b"\x00\x00junkjunkjunkjunkjunkjunkjunkjunk").is_err());
    }

    #[test]
    fn truncated_or_garbage_input_is_an_error_not_a_panic() {
        let data = fake_task_btf();
        for cut in 0..data.len() {
            let _ = TaskOffsets::from_bytes(&data[..cut]);
        }
        let mut flipped = data.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 0xa5;
            let _ = TaskOffsets::from_bytes(&flipped);
            flipped[i] ^= 0xa5;
        }
        assert!(TaskOffsets::from_bytes(b"").is_err());
        assert!(matches!(Btf::parse(&data[..30]), Err(BtfError::Malformed(_))));
    }

    #[test]
    fn hides_the_kernels_btf_from_one_thread_alone() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() || unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var_os("TOPWAITS_REQUIRE_BPF").is_none(),
                "needs root and {VMLINUX_BTF}"
            );
            eprintln!("skipped: needs root and {VMLINUX_BTF}");
            return;
        }
        let seen = std::thread::spawn(|| {
            hide_from_this_thread().unwrap();
            (Path::new(VMLINUX_BTF).exists(), std::fs::read(VMLINUX_BTF).is_ok())
        });
        assert_eq!(seen.join().unwrap(), (false, false), "hidden from the thread");
        assert!(
            path.exists() && TaskOffsets::from_sys(path).is_ok(),
            "the rest of the process still reads it"
        );
    }

    #[test]
    fn finds_where_a_cgroup_names_its_ancestors() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() {
            eprintln!("skipped: {VMLINUX_BTF} is absent");
            return;
        }
        let mut f = topwaits_common::CgroupFilter::NONE;
        cgroup_offsets_into(path, &mut f).unwrap();
        // The ancestors are the last member of struct cgroup, after its kernfs node.
        assert!(f.off_ancestors > f.off_kn && f.off_ancestors > f.off_level, "{f:?}");
        assert!(
            [f.off_root, f.off_hierarchy_id, f.off_kn_id].iter().all(|&o| o != u32::MAX),
            "{f:?}"
        );
        assert!(
            f.off_task_cgroups != u32::MAX && f.off_dfl_cgrp != u32::MAX,
            "a new task's unified cgroup: {f:?}"
        );
        assert!(cgroup_offsets(&fake_task_btf(), &mut f).is_err(), "BTF without struct cgroup");
    }

    #[test]
    fn reads_the_running_kernels_btf_when_present() {
        let path = Path::new(VMLINUX_BTF);
        if !path.exists() {
            eprintln!("skipped: {VMLINUX_BTF} is absent");
            return;
        }
        let off = TaskOffsets::from_sys(path).unwrap();
        assert_ne!(off.pid, off.tgid);
        assert!(off.comm > off.pid);
        assert!(off.static_prio != u32::MAX && off.policy != u32::MAX);
        // se.sum_exec_runtime has been in every kernel with BTF.
        assert!(off.sum_exec != u32::MAX && off.sum_exec > off.state, "{off:?}");
        assert!(off.prev_sum_exec != u32::MAX && off.prev_sum_exec > off.sum_exec, "{off:?}");
        assert!(off.pcount != u32::MAX && off.pcount > off.state, "{off:?}");
        // The stack pointer follows __state in every kernel with BTF.
        assert!(off.stack != u32::MAX && off.stack > off.state, "{off:?}");
        // on_cpu (SMP kernels) follows the stack pointer.
        assert!(off.on_cpu != u32::MAX && off.on_cpu > off.stack, "{off:?}");
        eprintln!("running kernel: {off:?}");
    }
}
