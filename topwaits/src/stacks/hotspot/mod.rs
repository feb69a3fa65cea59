//! Java frames: finding HotSpot in traced processes (its template interpreter,
//! and the layout of its metadata and code cache, from the vmStructs tables
//! that libjvm.so exports for debuggers) for the walker ([`proc_of`]), and
//! naming interpreted frames' methods and compiled code in the report
//! (`names::Resolver`); and what monitor each Java thread waits for
//! (`monitors`).

pub mod debug;
pub mod monitors;
pub mod names;

use std::collections::HashMap;
use std::io::{Read, Seek};

use anyhow::{Context as _, Result};
use topwaits_common::jit::{JitProc, JvmCode, JvmHeap, KIND_HOTSPOT};

use crate::sys::elf;
use crate::sys::memory::{Memory, ProcessMemory};
use crate::sys::procfs::{self, Mapping};

/// The slot of an interpreted frame that holds its `Method*`, from its frame
/// pointer (x86-64's `interpreter_frame_method_offset`, -3 words).
const FP_METHOD: i32 = -24;
/// The slot that holds its bytecode pointer (`interpreter_frame_bcp_offset`,
/// -8 words), saved there before each call.
const FP_BCP: i32 = -64;

/// The exported variables that describe the vmStructs tables, in the order of
/// [`Tables`]' fields.
const SYMS: [&str; 10] = [
    "gHotSpotVMStructs",
    "gHotSpotVMStructEntryArrayStride",
    "gHotSpotVMStructEntryTypeNameOffset",
    "gHotSpotVMStructEntryFieldNameOffset",
    "gHotSpotVMStructEntryIsStaticOffset",
    "gHotSpotVMStructEntryOffsetOffset",
    "gHotSpotVMStructEntryAddressOffset",
    "gHotSpotVMTypes",
    "gHotSpotVMTypeEntryArrayStride",
    "gHotSpotVMTypeEntryTypeNameOffset",
];
const TYPE_SIZE_SYM: &str = "gHotSpotVMTypeEntrySizeOffset";

/// Where a libjvm.so keeps the variables of [`SYMS`] (file addresses), and
/// its segments to place them in a process.
#[derive(Clone, Debug)]
pub struct JvmFile {
    syms: [u64; 11],
    segments: Vec<elf::Segment>,
}

/// A file's HotSpot, or None where it exports no vmStructs.
pub fn file_of<R: Read + Seek>(f: &mut R) -> Result<Option<JvmFile>> {
    let mut wanted = SYMS.to_vec();
    wanted.push(TYPE_SIZE_SYM);
    let found = elf::symbols(f, &wanted, false)?;
    if found.is_empty() {
        return Ok(None);
    }
    let mut syms = [0u64; 11];
    for (i, name) in wanted.iter().enumerate() {
        syms[i] = found
            .iter()
            .find(|(n, _, _)| n == name)
            .with_context(|| format!("libjvm.so without its {name} symbol"))?
            .1;
    }
    Ok(Some(JvmFile { syms, segments: elf::load_segments(f)? }))
}

/// The file offset of a libjvm.so's `JVM_Sleep` (`JVM_SleepNanos` since JDK
/// 21), where `Thread.sleep` enters the JVM, for a uprobe; None where it
/// exports neither.
pub fn sleep_offset<R: Read + Seek>(f: &mut R) -> Result<Option<u64>> {
    let found = elf::symbols(f, &["JVM_Sleep", "JVM_SleepNanos"], false)?;
    let Some(&(_, vaddr, _)) = found.first() else { return Ok(None) };
    Ok(elf::offset_of(&elf::load_segments(f)?, vaddr))
}

/// Where a HotSpot thread enters a contended monitor to park, and where it
/// waits in `Object.wait`: the file offsets of those `ObjectMonitor` methods,
/// for uprobes; each with whether its `JavaThread*` is its fourth argument
/// (`wait(long, bool, JavaThread*)`) rather than its second.
pub fn monitor_offsets<R: Read + Seek>(f: &mut R) -> Result<Vec<(u64, bool)>> {
    /// `EnterI(JavaThread*)` up to JDK 23, `enter_internal` since; `wait`.
    const ENTER: [&str; 2] = [
        "_ZN13ObjectMonitor6EnterIEP10JavaThread",
        "_ZN13ObjectMonitor14enter_internalEP10JavaThread",
    ];
    const WAIT: &str = "_ZN13ObjectMonitor4waitElbP10JavaThread";
    let wanted: Vec<&str> = ENTER.iter().copied().chain([WAIT]).collect();
    let found = elf::symbols(f, &wanted, true)?;
    let segments = elf::load_segments(f)?;
    Ok(found
        .iter()
        .filter_map(|(name, vaddr, _)| Some((elf::offset_of(&segments, *vaddr)?, name == WAIT)))
        .collect())
}

/// The offsets (and, for static fields, addresses) HotSpot describes itself
/// by, each read from its vmStructs entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub method_const: u64,
    pub const_constants: u64,
    pub const_name_index: u64,
    pub cp_holder: u64,
    /// `sizeof(ConstantPool)`: its entries follow it.
    pub cp_size: u64,
    pub klass_name: u64,
    pub symbol_length: u64,
    pub symbol_body: u64,
    /// `&AbstractInterpreter::_code`, the interpreter's `StubQueue*`.
    pub interpreter: u64,
    pub queue_buffer: u64,
    pub queue_limit: u64,
    /// `&CodeCache::_heaps`, a `GrowableArray<CodeHeap*>*`.
    pub code_heaps: u64,
    pub array_len: u64,
    pub array_data: u64,
    pub heap_memory: u64,
    pub heap_segmap: u64,
    pub heap_log2_segment: u64,
    pub space_low: u64,
    pub space_high: u64,
    pub space_low_boundary: u64,
    pub space_high_boundary: u64,
    pub blob_frame_size: u64,
    /// `sizeof(HeapBlock)`, and where its header keeps whether it is in use.
    pub block_size: u64,
    pub block_used: u64,
    pub blob_name: u64,
    pub compiled_method: u64,
    /// `&StubRoutines::_call_stub_return_address`, where the JVM's calls from
    /// C++ into Java return; 0 where vmStructs does not give it.
    pub call_stub_return: u64,
    /// Where methods keep their line tables, and compiled code its inlined
    /// methods; None where vmStructs lacks the line fields.
    pub debug: Option<debug::DebugLayout>,
}

/// The static field [`Layout::call_stub_return`] is read from, if there.
const CALL_STUB_RETURN: Field = ("StubRoutines", "_call_stub_return_address");

/// The (type, field) of each [`Layout`] field read from the struct table, in
/// order; the two sizes come from the type table.
const FIELDS: [(&str, &str); 24] = [
    ("Method", "_constMethod"),
    ("ConstMethod", "_constants"),
    ("ConstMethod", "_name_index"),
    ("ConstantPool", "_pool_holder"),
    ("Klass", "_name"),
    ("Symbol", "_length"),
    ("Symbol", "_body"),
    ("AbstractInterpreter", "_code"),
    ("StubQueue", "_stub_buffer"),
    ("StubQueue", "_buffer_limit"),
    ("CodeCache", "_heaps"),
    ("GrowableArrayBase", "_len"),
    ("GrowableArray<int>", "_data"),
    ("CodeHeap", "_memory"),
    ("CodeHeap", "_segmap"),
    ("CodeHeap", "_log2_segment_size"),
    ("VirtualSpace", "_low"),
    ("VirtualSpace", "_high"),
    ("HeapBlock::Header", "_used"),
    ("CodeBlob", "_name"),
    ("CompiledMethod", "_method"),
    ("VirtualSpace", "_low_boundary"),
    ("VirtualSpace", "_high_boundary"),
    ("CodeBlob", "_frame_size"),
];

/// A vmStructs field: its type's name and its own.
type Field = (&'static str, &'static str);

/// Where a field of [`FIELDS`] moved in later releases: JDK 23 merged
/// `CompiledMethod` into `nmethod`.
const MOVED: [(Field, Field); 1] = [(("CompiledMethod", "_method"), ("nmethod", "_method"))];

/// Most entries read from either table: HotSpot's have under a thousand.
const MAX_ENTRIES: u64 = 20_000;

/// The NUL-terminated string at `at` (at most 256 bytes).
fn c_string(mem: &dyn Memory, at: u64) -> Option<String> {
    let mut buf = [0u8; 256];
    let n = mem.read(at, &mut buf);
    let end = buf[..n].iter().position(|&b| b == 0)?;
    String::from_utf8(buf[..end].to_vec()).ok()
}

/// The fields of `types` in the vmStructs table (`vars`, see [`layout_of`]):
/// each one's type, name and value, a static field's address or else the
/// field's offset in its type.
pub(super) fn fields_of(
    mem: &dyn Memory,
    vars: &[u64; 11],
    types: &[&str],
) -> Result<Vec<(String, String, u64)>> {
    let [structs, stride, type_name, field_name, is_static, offset, address, ..] = *vars;
    let found = entries(
        mem,
        (structs, stride, type_name),
        Some(field_name),
        &[is_static, offset, address],
        types,
    )?;
    let value = |v: &[u64]| if v[0] as u32 != 0 { v[2] } else { v[1] };
    Ok(found.into_iter().map(|(t, f, v)| (t, f, value(&v))).collect())
}

/// Each entry of a vmStructs table (`table`: the array, `stride` apart) whose
/// type name is one of `types`: its field name (None for the type table) and
/// the words at `words` within the entry.
fn entries(
    mem: &dyn Memory,
    (table, stride, type_name): (u64, u64, u64),
    field_name: Option<u64>,
    words: &[u64],
    types: &[&str],
) -> Result<Vec<(String, String, Vec<u64>)>> {
    anyhow::ensure!((8..=256).contains(&stride), "vmStructs entries of {stride} bytes");
    let mut names: HashMap<u64, Option<String>> = HashMap::new();
    let mut name = |p: u64| names.entry(p).or_insert_with(|| c_string(mem, p)).clone();
    let mut out = Vec::new();
    for i in 0..MAX_ENTRIES {
        let e = table + i * stride;
        let t = mem.word(e + type_name).context("vmStructs entry unreadable")?;
        if t == 0 {
            return Ok(out);
        }
        let Some(ty) = name(t).filter(|ty| types.contains(&ty.as_str())) else { continue };
        let field = match field_name {
            Some(f) => name(mem.word(e + f).unwrap_or(0)).unwrap_or_default(),
            None => String::new(),
        };
        let values = words.iter().map(|&w| mem.word(e + w).unwrap_or(0)).collect();
        out.push((ty, field, values));
    }
    anyhow::bail!("vmStructs table without its end")
}

/// HotSpot's layout, from the tables' variables as the process holds them
/// (`vars`: the values of [`SYMS`] and [`TYPE_SIZE_SYM`]).
pub fn layout_of(mem: &dyn Memory, vars: &[u64; 11]) -> Result<Layout> {
    let [.., types, t_stride, t_name, t_size] = *vars;
    let mut kinds: Vec<&str> = FIELDS
        .iter()
        .chain(MOVED.iter().map(|m| &m.1))
        .chain([&CALL_STUB_RETURN])
        .chain(&debug::LINE_FIELDS)
        .chain(debug::scope_fields())
        .map(|f| f.0)
        .collect();
    kinds.sort_unstable();
    kinds.dedup();
    let found = fields_of(mem, vars, &kinds)?;
    let mut values = [0u64; 24];
    for (i, (ty, field)) in FIELDS.iter().enumerate() {
        let moved = MOVED.iter().find(|(from, _)| *from == (*ty, *field)).map(|m| m.1);
        let (_, _, v) = found
            .iter()
            .find(|(t, f, _)| t == ty && f == field)
            .or_else(|| {
                let (ty, field) = moved?;
                found.iter().find(|(t, f, _)| t == ty && f == field)
            })
            .with_context(|| format!("HotSpot without {ty}::{field} in its vmStructs"))?;
        values[i] = *v;
    }
    let mut sized = vec!["ConstantPool", "HeapBlock"];
    sized.extend(debug::SIZES);
    let sizes = entries(mem, (types, t_stride, t_name), None, &[t_size], &sized)?;
    let size_of = |ty: &str| {
        sizes
            .iter()
            .find(|(t, _, _)| t == ty)
            .map(|(_, _, v)| v[0])
            .with_context(|| format!("HotSpot without the size of {ty} in its vmStructs"))
    };
    let v = values;
    Ok(Layout {
        method_const: v[0],
        const_constants: v[1],
        const_name_index: v[2],
        cp_holder: v[3],
        klass_name: v[4],
        symbol_length: v[5],
        symbol_body: v[6],
        interpreter: v[7],
        queue_buffer: v[8],
        queue_limit: v[9],
        code_heaps: v[10],
        array_len: v[11],
        array_data: v[12],
        heap_memory: v[13],
        heap_segmap: v[14],
        heap_log2_segment: v[15],
        space_low: v[16],
        space_high: v[17],
        block_used: v[18],
        blob_name: v[19],
        compiled_method: v[20],
        space_low_boundary: v[21],
        space_high_boundary: v[22],
        blob_frame_size: v[23],
        call_stub_return: found
            .iter()
            .find(|(t, f, _)| (t.as_str(), f.as_str()) == CALL_STUB_RETURN)
            .map_or(0, |(_, _, v)| *v),
        cp_size: size_of("ConstantPool")?,
        block_size: size_of("HeapBlock")?,
        debug: debug::DebugLayout::of(
            |ty, field| found.iter().find(|(t, f, _)| t == ty && f == field).map(|(_, _, v)| *v),
            |ty| size_of(ty).ok(),
        ),
    })
}

/// The template interpreter's code, [start, end), once HotSpot has generated it.
pub fn interpreter(mem: &dyn Memory, l: &Layout) -> Option<(u64, u64)> {
    let queue = mem.word(l.interpreter).filter(|&q| q != 0)?;
    let start = mem.word(queue + l.queue_buffer).filter(|&s| s != 0)?;
    let size = mem.u32(queue + l.queue_limit)? as u64;
    (size > 0).then_some((start, start + size))
}

/// Most code heaps read (HotSpot has three with a segmented cache, else one).
pub const MAX_HEAPS: usize = 3;

/// The code cache's heaps, each as (its reserved range, its segment map),
/// for the walker; None until HotSpot has set them up.
pub fn code_of(mem: &dyn Memory, l: &Layout) -> Option<JvmCode> {
    let heaps = mem.word(l.code_heaps).filter(|&p| p != 0)?;
    let len = (mem.u32(heaps + l.array_len)? as i32).clamp(0, MAX_HEAPS as i32) as u64;
    let data = mem.word(heaps + l.array_data)?;
    let log2 = mem.u32(mem.word(data)? + l.heap_log2_segment)?;
    let mut code = JvmCode {
        log2_segment: log2,
        block_size: l.block_size as u32,
        frame_size: l.blob_frame_size as u32,
        ..Default::default()
    };
    for (i, h) in code.heaps.iter_mut().enumerate().take(len as usize) {
        let heap = mem.word(data + 8 * i as u64)?;
        *h = JvmHeap {
            low: mem.word(heap + l.heap_memory + l.space_low_boundary)?,
            high: mem.word(heap + l.heap_memory + l.space_high_boundary)?,
            segmap: mem.word(heap + l.heap_segmap + l.space_low)?,
        };
    }
    (len > 0 && log2 < 32).then_some(code)
}

/// The mapping of a process's libjvm.so, if it maps one.
pub(crate) fn jvm_mapping(maps: &[Mapping]) -> Option<&Mapping> {
    maps.iter().find(|m| m.path.ends_with("/libjvm.so"))
}

/// Where a file address of `file`, mapped at `maps`, lies in the process: by
/// the segment it falls in, whose memory is whole from its start (HotSpot's
/// table variables are in .bss, past the segment's file bytes).
fn placed(file: &JvmFile, maps: &[Mapping], of: &Mapping, vaddr: u64) -> Option<u64> {
    let s = file.segments.iter().filter(|s| s.vaddr <= vaddr).max_by_key(|s| s.vaddr)?;
    let m = maps
        .iter()
        .filter(|m| (m.dev, m.inode) == (of.dev, of.inode))
        .find(|m| m.offset <= s.offset && s.offset - m.offset < m.end - m.start)?;
    Some(m.start + (s.offset - m.offset) + (vaddr - s.vaddr))
}

/// The JVMs met: each libjvm.so read once, and each process's layout.
#[derive(Default)]
pub struct Jvms {
    files: HashMap<(u64, u64), Option<JvmFile>>,
    /// By process and where its libjvm.so is mapped (an exec maps it anew).
    layouts: HashMap<(u32, u64), Layout>,
    /// Where each process keeps its threads and monitors, keyed as `layouts`.
    thread_layouts: HashMap<(u32, u64), monitors::ThreadLayout>,
    /// Each file's global locks (`VMOperation_lock`...): names and addresses.
    lock_vars: HashMap<(u64, u64), Vec<(String, u64)>>,
    /// Each process's global locks: where each lies, and its name, by address.
    locks: HashMap<(u32, u64), Vec<(u64, String)>>,
}

/// How far into a HotSpot `Mutex` its condition variable's futex words lie:
/// past its vtable pointer and its `pthread_mutex_t`, within its
/// `pthread_cond_t`.
const MUTEX_SPAN: u64 = 128;

/// Whether a symbol of libjvm.so is one of HotSpot's global locks: a pointer
/// (`Mutex* VMOperation_lock` and the like, unmangled globals of
/// mutexLocker.cpp) whose name ends so.
fn is_lock_var(name: &str, kind: u8) -> bool {
    kind == elf::STT_OBJECT && name.ends_with("_lock") && !name.starts_with("_Z")
}

/// The name of the lock among `locks` (by address, sorted) whose condition
/// variable holds the futex word at `addr`.
pub fn lock_at(locks: &[(u64, String)], addr: u64) -> Option<&str> {
    let i = locks.partition_point(|(base, _)| *base <= addr).checked_sub(1)?;
    let (base, name) = &locks[i];
    (addr - base < MUTEX_SPAN).then_some(name.as_str())
}

impl Jvms {
    /// The layout of the JVM process `tgid` maps at `maps`; None where it
    /// runs no HotSpot, or one that cannot be read.
    pub fn layout(&mut self, tgid: u32, maps: &[Mapping]) -> Option<Layout> {
        let m = jvm_mapping(maps)?;
        let file = self
            .files
            .entry((m.dev, m.inode))
            .or_insert_with(|| {
                let mut r = std::io::BufReader::new(procfs::open_mapped(tgid, m)?);
                file_of(&mut r).unwrap_or_else(|e| {
                    log::debug!("HotSpot in {} not read: {e:#}", m.path);
                    None
                })
            })
            .as_ref()?;
        // A JVM just started fills its tables in as it starts: a layout that
        // did not read is read again when next asked.
        let key = (tgid, m.start);
        if let Some(&l) = self.layouts.get(&key) {
            return Some(l);
        }
        let l = layout_in(file, tgid, m)?;
        self.layouts.insert(key, l);
        Some(l)
    }

    /// The monitor each Java thread of process `tgid` (mapping `maps`) waits
    /// for now, by tid; None where it runs no HotSpot that reads.
    pub fn monitor_waits(
        &mut self,
        tgid: u32,
        maps: &[Mapping],
    ) -> Option<HashMap<u32, monitors::MonitorWait>> {
        let l = self.layout(tgid, maps)?;
        let t = self.thread_layout(tgid, maps)?;
        Some(monitors::monitor_waits(&ProcessMemory { pid: tgid }, &t, &l))
    }

    /// Where HotSpot keeps the threads and monitors of JVM process `tgid`
    /// (mapping `maps`); None where it runs no HotSpot that reads.
    /// Read once per process, as its layout is.
    pub fn thread_layout(&mut self, tgid: u32, maps: &[Mapping]) -> Option<monitors::ThreadLayout> {
        self.layout(tgid, maps)?;
        let m = jvm_mapping(maps)?;
        let key = (tgid, m.start);
        if let Some(&t) = self.thread_layouts.get(&key) {
            return Some(t);
        }
        let file = self.files.get(&(m.dev, m.inode))?.as_ref()?;
        let mem = ProcessMemory { pid: tgid };
        let t = monitors::thread_layout_of(&mem, &vars_in(file, tgid, m)?)
            .map_err(|e| log::debug!("HotSpot of {tgid}: its threads not read: {e:#}"))
            .ok()?;
        self.thread_layouts.insert(key, t);
        Some(t)
    }

    /// The object Java monitor `monitor` of process `tgid` (mapping `maps`)
    /// locks, as jstack names it (`<0x...> (a java.lang.Object)`); None where
    /// it no longer reads (the monitor was deflated, or the process is gone).
    pub fn monitor_name(&mut self, tgid: u32, maps: &[Mapping], monitor: u64) -> Option<String> {
        let l = self.layout(tgid, maps)?;
        let t = self.thread_layout(tgid, maps)?;
        let mem = ProcessMemory { pid: tgid };
        let (object, class) = monitors::object_of(&mem, &t, &l, monitor);
        object.map(|object| monitors::named(object, class.as_deref()))
    }

    /// The name of HotSpot's global lock (`VMOperation_lock`) whose
    /// condition variable holds the futex word at `addr` in JVM process
    /// `tgid` (mapping `maps`); None where no global lock does.
    pub fn internal_lock(&mut self, tgid: u32, maps: &[Mapping], addr: u64) -> Option<String> {
        // Reads the file's tables in, if they were not.
        let _ = self.layout(tgid, maps);
        let m = jvm_mapping(maps)?;
        let file = self.files.get(&(m.dev, m.inode))?.as_ref()?;
        let vars = self.lock_vars.entry((m.dev, m.inode)).or_insert_with(|| {
            let found = procfs::open_mapped(tgid, m).and_then(|f| {
                let mut r = std::io::BufReader::new(f);
                elf::symbols_where(&mut r, true, &is_lock_var).ok()
            });
            found
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, _, size)| *size == 8)
                .map(|(name, vaddr, _)| (name, vaddr))
                .collect()
        });
        let locks = self.locks.entry((tgid, m.start)).or_insert_with(|| {
            let mem = ProcessMemory { pid: tgid };
            let mut locks: Vec<(u64, String)> = vars
                .iter()
                .filter_map(|(name, vaddr)| {
                    let at = placed(file, maps, m, *vaddr)?;
                    Some((mem.word(at).filter(|&p| p != 0)?, name.clone()))
                })
                .collect();
            locks.sort_unstable();
            locks
        });
        lock_at(locks, addr).map(str::to_string)
    }

    /// Forgets process `tgid`.
    pub fn forget(&mut self, tgid: u32) {
        self.layouts.retain(|&(t, _), _| t != tgid);
        self.thread_layouts.retain(|&(t, _), _| t != tgid);
        self.locks.retain(|&(t, _), _| t != tgid);
    }

    /// The walker's entries for a JVM process mapping `maps`, once its
    /// interpreter and code cache are in place.
    pub fn proc_of(&mut self, tgid: u32, maps: &[Mapping]) -> Option<(JitProc, JvmCode)> {
        let l = self.layout(tgid, maps)?;
        let mem = ProcessMemory { pid: tgid };
        let (Some((start, end)), Some(code)) = (interpreter(&mem, &l), code_of(&mem, &l)) else {
            log::debug!("HotSpot of {tgid}: its interpreter or code cache is not in place yet");
            return None;
        };
        let p = JitProc {
            blob: [start, end, 0, 0],
            fp_function: FP_METHOD,
            fp_context: FP_BCP,
            kind: KIND_HOTSPOT,
            ..Default::default()
        };
        Some((p, code))
    }
}

/// The values of [`SYMS`] and [`TYPE_SIZE_SYM`] in JVM process `tgid`, whose
/// libjvm.so `file` is mapped at `m`.
fn vars_in(file: &JvmFile, tgid: u32, m: &Mapping) -> Option<[u64; 11]> {
    let mem = ProcessMemory { pid: tgid };
    // The variables are in the file's data, which code mappings leave out.
    let all = procfs::maps_of(tgid);
    let mut vars = [0u64; 11];
    for (v, &sym) in vars.iter_mut().zip(&file.syms) {
        let Some(w) = placed(file, &all, m, sym).and_then(|a| mem.word(a)) else {
            log::debug!("HotSpot of {tgid}: its vmStructs variables do not read");
            return None;
        };
        *v = w;
    }
    Some(vars)
}

/// The layout of JVM process `tgid`, whose libjvm.so `file` is mapped at `m`.
fn layout_in(file: &JvmFile, tgid: u32, m: &Mapping) -> Option<Layout> {
    let vars = vars_in(file, tgid, m)?;
    let l = layout_of(&ProcessMemory { pid: tgid }, &vars);
    match &l {
        Ok(_) => log::debug!("HotSpot of {tgid}: layout read"),
        Err(e) => log::debug!("HotSpot of {tgid} not read: {e:#}"),
    }
    l.ok()
}

#[cfg(test)]
mod tests;
