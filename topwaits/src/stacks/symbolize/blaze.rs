//! The blazesym [`Symbolizer`]: kernel frames from kallsyms, user frames from
//! `/proc/PID` (kept for processes that exit), debug files, and build ids.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use blazesym::symbolize::{
    source::{Elf, Kernel, Process, Source},
    Input, Symbolized, Symbolizer as Blaze,
};
use blazesym::MaybeDefault;
use topwaits_common::jit::{is_jvm_frame, is_v8_frame};

use crate::model::Frame;
use crate::stacks::frame_scan::{self, Region};
use crate::sys::elf;
use crate::sys::procfs::{self, alive};
use crate::util::fasthash::FastMap;

use super::file_frames::FileFrames;
use super::lineage::Lineage;
use super::Symbolizer;

/// blazesym: kernel frames from kallsyms, user frames from `/proc/PID`, and the
/// module and file offset from `/proc/PID/maps` when no symbol resolves.
///
/// Processes can exit before the trace ends. [`BlazeSymbolizer::remember`], called
/// while a process lives, keeps its memory maps so that its frames still resolve
/// by the files' paths after it is gone (blazesym keeps its own copy only of a
/// process with a perf map, which it alone reads).
pub struct BlazeSymbolizer {
    inner: Blaze,
    /// Memory maps read while each remembered process was alive.
    maps: HashMap<u32, Vec<procfs::Mapping>>,
    /// Whose maps name each process's frames (forked ones share their parent's).
    lineage: Lineage,
    /// Every mapping, with its exec bit, of each process symbolized or remembered.
    regions: FastMap<u32, Vec<Region>>,
    /// Whether each module file keeps its symbol table (else its names are only
    /// in a separate debug file).
    symtab: HashMap<String, bool>,
    /// Each stripped module's debug file found by build id, with the module's
    /// loaded segments.
    debug_files: HashMap<String, Option<ElfFile>>,
    /// The thread that resolves kernel frames, once [`BlazeSymbolizer::warm_kernel`]
    /// has started it: requests out, frames back.
    kernel_thread: Option<KernelThread>,
    /// Names Python frames from the interpreters' memory.
    python: crate::stacks::python::Resolver,
    javascript: crate::stacks::v8::names::Resolver,
    java: crate::stacks::hotspot::names::Resolver,
    /// Whether each process is in another PID namespace (a container's).
    pid_ns: FastMap<u32, bool>,
    /// Each remembered process's cgroup, read with its maps.
    cgroups: FastMap<u32, String>,
    /// The ids in their own PID namespace of the threads of remembered
    /// processes that have one, by host tid, read with the maps.
    kept_ns_ids: FastMap<u32, (u32, u32)>,
    /// The code files of remembered processes with a root of their own (a
    /// container's), kept open by device and inode: once such a process has
    /// exited, its paths name nothing here, or other files.
    kept_files: FastMap<(u64, u64), KeptFile>,
    /// The remembered processes with a root of their own.
    foreign_roots: std::collections::HashSet<u32>,
    /// How many times maps were kept anew (tests).
    kept_reads: u64,
    /// Each Go program's function table, which names its functions where
    /// its symbol table is stripped, with its loaded segments; None for a
    /// file that is no Go program.
    go: HashMap<String, Option<std::sync::Arc<GoFile>>>,
    /// The processes found gone at the last [`BlazeSymbolizer::forget_gone`].
    gone_at_last_sweep: std::collections::HashSet<u32>,
    /// Frames named already, by the file their code lies in.
    file_frames: FileFrames,
    /// When each process's kept maps were last read again for a report.
    refreshed: FastMap<u32, Instant>,
    /// When each process's cgroup was last read for a report.
    cgroup_read: FastMap<u32, Instant>,
    /// How long a read of a live process's maps or cgroup serves later
    /// reports (zero: each report reads them again).
    refresh_every: Duration,
    /// The remembered processes that blazesym keeps a copy of too: those
    /// with a perf map (JIT code), which only its process source reads.
    blaze_kept: std::collections::HashSet<u32>,
    /// Code files opened by path for kept maps, by device and inode, with
    /// their loaded segments (None: the path names another file now).
    by_path: FastMap<(u64, u64), Option<ElfFile>>,
}

/// A Go program's function table, and its loaded segments (to turn a file
/// offset into an address of the table).
struct GoFile {
    table: crate::stacks::golang::Pclntab,
    segments: Vec<elf::Segment>,
}

impl GoFile {
    /// The Go program at `path`, if it is one.
    fn open(path: &str) -> Option<GoFile> {
        let mut f = std::io::BufReader::new(std::fs::File::open(path).ok()?);
        let table = crate::stacks::golang::pclntab_of(&mut f).ok()??;
        Some(GoFile { table, segments: elf::load_segments(&mut f).ok()? })
    }

    /// The name of the function at file offset `off`, with its file and line.
    fn name(&self, off: u64) -> Option<String> {
        crate::stacks::golang::name_at(&self.table, elf::vaddr_of(&self.segments, off)?, true)
    }
}

/// An ELF file to read a module's symbols from, and the module's loaded
/// segments.
type ElfFile = (PathBuf, Vec<elf::Segment>);

/// A file kept open, the path that opens it again (`/proc/self/fd/N`), and its
/// loaded segments.
struct KeptFile {
    path: PathBuf,
    segments: Vec<elf::Segment>,
    _file: std::fs::File,
}

/// Most files kept open for containers' processes that may exit.
const MAX_KEPT_FILES: usize = 2048;

/// Opens process `tgid`'s code file `m`: the very file it maps
/// (`map_files`), else by its path in the process's root, checked to be the
/// file its maps name (the same inode).
fn keep_file(tgid: u32, m: &procfs::Mapping) -> Option<KeptFile> {
    use std::os::fd::AsRawFd as _;
    let mut file = procfs::open_mapped(tgid, m)?;
    let segments = segments_if_mapped(&mut file, m)?;
    Some(KeptFile {
        path: PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
        segments,
        _file: file,
    })
}

/// Code file `m` opened by its path, if that still names the file mapped
/// (the same inode), with its loaded segments.
fn file_by_path(m: &procfs::Mapping) -> Option<ElfFile> {
    let mut file = std::fs::File::open(&m.path).ok()?;
    Some((PathBuf::from(&m.path), segments_if_mapped(&mut file, m)?))
}

/// The loaded segments of `file`, if it is the file mapping `m` names (the
/// same inode).
fn segments_if_mapped(file: &mut std::fs::File, m: &procfs::Mapping) -> Option<Vec<elf::Segment>> {
    use std::os::unix::fs::MetadataExt as _;
    if file.metadata().ok()?.ino() != m.inode {
        return None;
    }
    elf::load_segments(file).ok()
}

/// The kernel symbolizing thread's channels: addresses out, frames back.
type KernelThread = (std::sync::mpsc::Sender<Vec<u64>>, std::sync::mpsc::Receiver<Vec<Frame>>);

fn new_blaze() -> Blaze {
    Blaze::builder().enable_code_info(false).enable_inlined_fns(false).build()
}

fn symbolize_kernel(blaze: &Blaze, addrs: &[u64]) -> Vec<Frame> {
    let src = Source::Kernel(Kernel {
        kallsyms: MaybeDefault::Default,
        vmlinux: MaybeDefault::None,
        kaslr_offset: Some(0),
        debug_syms: false,
        ..Default::default()
    });
    symbolize_each(blaze, &src, addrs)
}

impl Default for BlazeSymbolizer {
    fn default() -> Self {
        BlazeSymbolizer {
            inner: new_blaze(),
            maps: HashMap::new(),
            lineage: Lineage::default(),
            symtab: HashMap::new(),
            debug_files: HashMap::new(),
            kernel_thread: None,
            python: Default::default(),
            javascript: Default::default(),
            java: Default::default(),
            regions: FastMap::default(),
            pid_ns: FastMap::default(),
            cgroups: FastMap::default(),
            kept_ns_ids: FastMap::default(),
            kept_files: FastMap::default(),
            foreign_roots: Default::default(),
            kept_reads: 0,
            go: HashMap::new(),
            gone_at_last_sweep: Default::default(),
            file_frames: FileFrames::default(),
            refreshed: FastMap::default(),
            cgroup_read: FastMap::default(),
            refresh_every: Duration::ZERO,
            blaze_kept: Default::default(),
            by_path: FastMap::default(),
        }
    }
}

impl BlazeSymbolizer {
    /// Takes a process event from the kernel: keeps the maps of a process seen
    /// for the first time or that exec'd, and lets a forked one share its
    /// parent's (see [`Lineage`]); with `None`, reads again the processes whose
    /// loader is done since their exec. Says whether some still await that.
    pub fn on_event(&mut self, ev: Option<topwaits_common::ProcEvent>) -> bool {
        let mut lineage = std::mem::take(&mut self.lineage);
        match ev {
            Some(ev) => lineage.on_event(ev, &mut |t, shares| self.remember(t, shares), &alive),
            None => lineage.settle_due(&mut |t, shares| self.remember(t, shares), &alive),
        }
        self.lineage = lineage;
        self.lineage.awaiting()
    }

    /// Keeps what symbolizing `tgid` needs, in case it exits before the end, and
    /// says whether it kept maps (a kernel thread has none). Call again after an
    /// exec, when its maps change. `shares`: the process whose maps it shares
    /// (see [`Lineage`]); it keeps nothing of its own while it maps the same,
    /// or once it has begun to exit.
    pub fn remember(&mut self, tgid: u32, shares: Option<u32>) -> bool {
        if tgid == 0 {
            return false;
        }
        let Some(read) = procfs::maps_read(tgid) else {
            // Gone already: keep what we had.
            return self.maps.contains_key(&tgid);
        };
        let maps = read.mappings().to_vec();
        if maps.is_empty() {
            // A kernel thread: nothing to keep.
            return false;
        }
        if let Some(source) = shares {
            // A fork whose walk met code that the kernel's copy of its maps
            // lacked (forked before its parent's libraries were seen there):
            // it maps what its parent was read mapping, so keeping its own
            // would cost a full read of it (blazesym's too, with a stat of
            // each file) for nothing; 15 of perf's 200 forks a run.
            if self.maps.get(&source) == Some(&maps) {
                return false;
            }
            // A read of an exiting process may be torn (see
            // `procfs::exiting`): one read as it exited kept a few of its
            // files and lost its parent's, and its waits went unnamed.
            if procfs::exiting(tgid) {
                log::debug!("process {tgid} is exiting: it keeps sharing its parent's maps");
                return false;
            }
        }
        self.regions.insert(tgid, procfs::parse_regions(&read.text[..]));
        if self.maps.get(&tgid) == Some(&maps) && !procfs::has_perf_map(tgid) {
            // The same files where they were (read again at an exec and the
            // first fork handled together, or at a settle): blazesym's copy
            // of them stands, and its own read of the maps, which stats every
            // mapped file, is spared. Only threads may be new.
            if self.pid_ns.get(&tgid) == Some(&true) {
                self.keep_ns_ids(tgid);
            }
            return true;
        }
        self.kept_reads += 1;
        if procfs::foreign_root(tgid) {
            self.foreign_roots.insert(tgid);
            for m in maps.iter().filter(|m| m.exec && m.path.starts_with('/')) {
                if self.kept_files.len() < MAX_KEPT_FILES
                    && !self.kept_files.contains_key(&(m.dev, m.inode))
                {
                    if let Some(k) = keep_file(tgid, m) {
                        self.kept_files.insert((m.dev, m.inode), k);
                    }
                }
            }
        }
        self.maps.insert(tgid, maps);
        if let Some(cg) = crate::sys::cgroup::of_process(tgid) {
            self.cgroups.insert(tgid, cg);
        }
        let foreign = procfs::foreign_pid_ns(tgid);
        self.pid_ns.insert(tgid, foreign);
        if foreign {
            self.keep_ns_ids(tgid);
        }
        // The kept maps name its frames by file (see `user`). blazesym's own
        // copy (its own read of the maps, and a stat of every mapped file)
        // was most of the cost of a process's arrival; it is kept only for
        // a perf map, which blazesym alone reads.
        if procfs::has_perf_map(tgid) {
            let mut cache = blazesym::symbolize::cache::Process::new(tgid.into());
            cache.cache_vmas = true;
            cache.cache_perf_map = true;
            match self.inner.cache(&blazesym::symbolize::cache::Cache::Process(cache)) {
                Ok(()) => drop(self.blaze_kept.insert(tgid)),
                Err(e) => log::debug!("could not cache the maps of {tgid}: {e}"),
            }
        }
        if shares.is_some() && procfs::exiting(tgid) {
            // Its read came after the exit began.
            log::debug!(
                "process {tgid} began to exit as it was read: it keeps sharing its parent's maps"
            );
            self.maps.remove(&tgid);
            self.regions.remove(&tgid);
            return false;
        }
        true
    }

    /// Keeps the ids of `tgid`'s threads in its own PID namespace.
    fn keep_ns_ids(&mut self, tgid: u32) {
        for tid in crate::sys::thread::tids_of(tgid) {
            if let Some(ids) = procfs::ns_ids(tgid, tid) {
                self.kept_ns_ids.insert(tid, ids);
            }
        }
    }

    /// Starts reading the kernel's symbols on a thread of their own (about 45 ms
    /// for `/proc/kallsyms`), so that it happens while the trace runs rather than
    /// in the report at its end, and without delaying the events of processes that
    /// must be remembered before they exit. Kernel frames are then resolved there.
    pub fn warm_kernel(&mut self) {
        let (req_tx, req_rx) = std::sync::mpsc::channel::<Vec<u64>>();
        let (resp_tx, resp_rx) = std::sync::mpsc::channel::<Vec<Frame>>();
        let spawned = std::thread::Builder::new().name("kallsyms".into()).spawn(move || {
            let blaze = new_blaze();
            // Any kernel address: the whole table is read and kept on first use.
            let _ = symbolize_kernel(&blaze, &[0xffff_ffff_8100_0000]);
            for addrs in req_rx {
                if resp_tx.send(symbolize_kernel(&blaze, &addrs)).is_err() {
                    break;
                }
            }
        });
        if spawned.is_ok() {
            self.kernel_thread = Some((req_tx, resp_rx));
        }
    }

    /// The file mappings of `tgid`: those kept while it lived, else read now, else
    /// those of the process it shared maps with.
    pub fn file_maps(&self, tgid: u32) -> Vec<procfs::Mapping> {
        if let Some(m) = self.maps.get(&tgid) {
            return m.clone();
        }
        let source = self.source_of(tgid);
        self.maps.get(&source).cloned().unwrap_or_else(|| procfs::maps_of(source))
    }

    /// Whose maps name `tgid`'s frames: its own while it runs, else those of the
    /// process it shared them with (forked, never exec'd).
    fn source_of(&self, tgid: u32) -> u32 {
        if alive(tgid) {
            tgid
        } else {
            self.lineage.source_of(tgid)
        }
    }

    /// Forgets the processes that were gone at the last sweep already (a
    /// continuous trace's, `serve`): every report since has named their
    /// frames, and no new wait of theirs can come. Without it the maps of
    /// every process that ever ran would be kept. Returns how many went.
    pub fn forget_gone(&mut self) -> usize {
        let known: std::collections::HashSet<u32> = self
            .maps
            .keys()
            .chain(self.regions.keys())
            .chain(self.pid_ns.keys())
            .copied()
            .chain(self.lineage.known_processes())
            .collect();
        let gone: std::collections::HashSet<u32> =
            known.into_iter().filter(|&t| !alive(t)).collect();
        let forget: Vec<u32> = gone.intersection(&self.gone_at_last_sweep).copied().collect();
        for &t in &forget {
            self.maps.remove(&t);
            self.regions.remove(&t);
            self.cgroups.remove(&t);
            self.cgroup_read.remove(&t);
            self.refreshed.remove(&t);
            self.pid_ns.remove(&t);
            self.foreign_roots.remove(&t);
            self.blaze_kept.remove(&t);
            self.lineage.forget(t);
            self.python.forget(t);
            self.javascript.forget(t);
            self.java.forget(t);
            let _ = self.inner.evict(&blazesym::symbolize::evict::Evict::Process(
                blazesym::symbolize::evict::Process::new(t.into()),
            ));
        }
        // Thread ids of the processes gone (kept by host tid).
        if !forget.is_empty() {
            self.kept_ns_ids.retain(|&tid, _| alive(tid));
            let mapped: std::collections::HashSet<(u64, u64)> =
                self.maps.values().flatten().map(|m| (m.dev, m.inode)).collect();
            self.file_frames.retain_files(&|dev, inode| mapped.contains(&(dev, inode)));
        }
        self.gone_at_last_sweep =
            gone.difference(&forget.iter().copied().collect()).copied().collect();
        forget.len()
    }

    /// The frames of a fork that maps what its parent was read mapping (see
    /// [`Lineage`]), where each of its code addresses was named before by
    /// that file and offset: no read of its own maps, as a fork-heavy server
    /// would pay one each report for every fork. None: it goes the long way.
    fn named_as_parent(&mut self, tgid: u32, addrs: &[u64]) -> Option<Vec<Frame>> {
        let parent = self.lineage.source_of(tgid);
        if parent == tgid {
            return None;
        }
        let (maps, regions) = (self.maps.get(&parent)?, self.regions.get(&parent)?);
        let frames = addrs
            .iter()
            .map(|&a| match frame_scan::region_of(regions, a) {
                Some(r) if r.exec => self.file_frames.get(maps, a),
                _ => Some(Frame::unknown(a)),
            })
            .collect::<Option<Vec<Frame>>>()?;
        // [`Symbolizer::is_code`] is asked about the process itself.
        let shared = regions.clone();
        self.regions.insert(tgid, shared);
        Some(frames)
    }

    /// Has a report of a live process read its maps and cgroup again only
    /// once `every` (a continuous trace's reports, `serve`'s each step),
    /// not at every report. An address outside every mapping known is read
    /// again at once.
    pub fn refresh_every(&mut self, every: Duration) {
        self.refresh_every = every;
    }

    /// Whether some of `addrs` lies outside every mapping known of `tgid`
    /// (a library loaded since its maps were read).
    fn unmapped(&self, tgid: u32, addrs: &[u64]) -> bool {
        let Some(regions) = self.regions.get(&tgid) else { return true };
        addrs.iter().any(|&a| frame_scan::region_of(regions, a).is_none())
    }

    /// Number of processes whose maps are kept.
    pub fn remembered(&self) -> usize {
        self.maps.len()
    }
}

/// The maps `tgid`'s names are kept by: those read now, else those kept
/// (refreshed this report if it lives); a process gone that kept none has none.
fn names_kept_by<'a>(
    read_now: &'a Option<Vec<procfs::Mapping>>,
    kept: &'a HashMap<u32, Vec<procfs::Mapping>>,
    tgid: u32,
) -> &'a [procfs::Mapping] {
    match read_now {
        Some(m) => m,
        None => kept.get(&tgid).map(Vec::as_slice).unwrap_or_default(),
    }
}

fn module_name(path: &std::ffi::OsStr) -> String {
    Path::new(path).file_name().unwrap_or(path).to_string_lossy().into_owned()
}

/// The ELF build id of the file at `path`, in lower-case hex, when it has one.
pub fn build_id_hex(path: &str) -> Option<String> {
    let id = blazesym::helper::read_elf_build_id(&path).ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// A module's separate debug file, by its build id under `/usr/lib/debug` (where
/// distributions install them), and the module's loaded segments. `root`: where
/// the process's files are read (`/proc/PID/root` for a container), or "".
fn debug_file(root: &str, module: &str) -> Option<ElfFile> {
    let module = format!("{root}{module}");
    let hex = build_id_hex(&module)?;
    if hex.len() < 3 {
        return None;
    }
    let path =
        PathBuf::from(format!("{root}/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]));
    let segments = elf::load_segments(&mut std::fs::File::open(&module).ok()?).ok()?;
    path.exists().then_some((path, segments))
}

/// Names addresses in modules without a symbol table from their debug files'
/// symbol tables. A debug file keeps its module's addresses but not its file
/// layout, so each address goes in as where the module's segments load it. Only
/// the symbol table is read: blazesym's own search (`fallback`, for modules whose
/// debug file is not found by build id) also loads the DWARF sections, which took a
/// tenth of a 20,000-stack report.
fn from_debug_files(
    root: &str,
    blaze: &Blaze,
    found: &mut HashMap<String, Option<ElfFile>>,
    maps: &[procfs::Mapping],
    addrs: &[u64],
    fallback: Option<&Source<'_>>,
) -> Vec<Frame> {
    from_files(blaze, maps, addrs, fallback, &mut |m| {
        found
            .entry(format!("{root}{}", m.path))
            .or_insert_with(|| debug_file(root, &m.path))
            .clone()
    })
}

/// Names addresses by the symbol tables of the ELF files that `file_of` gives
/// for their modules (given a module's first mapping: a file to read and the
/// module's loaded segments); each address goes in as where the segments load
/// it. Addresses of modules without a file go to `fallback`, or stay unnamed.
fn from_files(
    blaze: &Blaze,
    maps: &[procfs::Mapping],
    addrs: &[u64],
    fallback: Option<&Source<'_>>,
    file_of: &mut dyn FnMut(&procfs::Mapping) -> Option<ElfFile>,
) -> Vec<Frame> {
    let mut by_module: BTreeMap<&str, (&procfs::Mapping, Vec<u64>)> = BTreeMap::new();
    for &a in addrs {
        if let Some(m) = procfs::mapping_of(maps, a) {
            by_module.entry(&m.path).or_insert_with(|| (m, Vec::new())).1.push(a);
        }
    }
    let mut out = Vec::new();
    let mut rest = Vec::new();
    for (module, (first, addrs)) in by_module {
        let Some((file, segments)) = file_of(first) else {
            rest.extend(addrs);
            continue;
        };
        let placed: Vec<(u64, u64)> = addrs
            .iter()
            .filter_map(|&a| {
                let m = procfs::mapping_of(maps, a)?;
                Some((a, elf::mapping_vaddr(&segments, m.offset, m.exec)? + (a - m.start)))
            })
            .collect();
        let vaddrs: Vec<u64> = placed.iter().map(|p| p.1).collect();
        let mut elf_src = Elf::new(file.as_path());
        elf_src.debug_syms = false;
        let src = Source::Elf(elf_src);
        let syms = blaze.symbolize(&src, Input::VirtOffset(&vaddrs)).ok();
        let originals: Vec<u64> = placed.iter().map(|p| p.0).collect();
        let name: std::sync::Arc<str> = module_name(module.as_ref()).into();
        out.extend(to_frames(&originals, syms).into_iter().map(|mut f| {
            if f.symbol.is_some() {
                f.module = Some(name.clone());
            }
            f
        }));
    }
    match fallback {
        Some(src) if !rest.is_empty() => out.extend(symbolize_each(blaze, src, &rest)),
        _ => out.extend(rest.into_iter().map(Frame::unknown)),
    }
    out
}

fn to_frames(addrs: &[u64], syms: Option<Vec<Symbolized<'_>>>) -> Vec<Frame> {
    let Some(syms) = syms else {
        return addrs.iter().map(|&a| Frame::unknown(a)).collect();
    };
    addrs
        .iter()
        .zip(syms)
        .map(|(&addr, s)| match s {
            // Past the end of a symbol of known size, the address is in some other
            // function that the symbol table does not name (a stripped binary's
            // internal code): not this one.
            Symbolized::Sym(sym) if sym.size.is_some_and(|size| sym.offset >= size) => {
                Frame::unknown(addr)
            }
            Symbolized::Sym(sym) => Frame {
                addr,
                symbol: Some(sym.name.as_ref().into()),
                module: sym.module.as_deref().map(|m| module_name(m).into()),
                offset: Some(sym.offset as u64),
            },
            Symbolized::Unknown(_) => Frame::unknown(addr),
        })
        .collect()
}

/// Symbolizes a batch, and where the batch fails as a whole (one address in a file
/// blazesym cannot read fails them all), each address on its own.
fn symbolize_each(blaze: &Blaze, src: &Source<'_>, addrs: &[u64]) -> Vec<Frame> {
    match blaze.symbolize(src, Input::AbsAddr(addrs)) {
        Ok(syms) => to_frames(addrs, Some(syms)),
        Err(e) => {
            log::debug!(
                "symbolizing {} addresses failed ({e}); retrying one at a time",
                addrs.len()
            );
            addrs
                .iter()
                .flat_map(|&a| to_frames(&[a], blaze.symbolize(src, Input::AbsAddr(&[a])).ok()))
                .collect()
        }
    }
}

/// A process as blazesym reads it: its perf map too, its files through the
/// process where `map_files` (see `user`), with debug files or not.
fn process_source(tgid: u32, map_files: bool, debug_syms: bool) -> Source<'static> {
    let mut proc_src = Process::new(tgid.into());
    proc_src.perf_map = true;
    // With cached maps, files are opened by path (the process may be gone); a
    // container's paths are its own, so its files are opened through the
    // process (`map_files`) while it lives.
    proc_src.map_files = map_files;
    proc_src.debug_syms = debug_syms;
    Source::Process(proc_src)
}

impl BlazeSymbolizer {
    /// The stripped addresses named from separate debug files, for modules
    /// without a symbol table of their own only: for the others the debug
    /// file adds nothing but DWARF to parse (a Rust binary's takes seconds).
    fn named_from_debug_files(
        &mut self,
        root: &str,
        maps: &[procfs::Mapping],
        stripped: &[u64],
        source: Option<&Source>,
    ) -> Vec<Frame> {
        let symtab = &mut self.symtab;
        let debug: Vec<u64> = stripped
            .iter()
            .copied()
            .filter(|&a| {
                procfs::mapping_of(maps, a).is_some_and(|m| {
                    let path = format!("{root}{}", m.path);
                    !*symtab
                        .entry(path.clone())
                        .or_insert_with(|| crate::sys::elf::has_symtab(&path).unwrap_or(true))
                })
            })
            .collect();
        if debug.is_empty() {
            return Vec::new();
        }
        from_debug_files(root, &self.inner, &mut self.debug_files, maps, &debug, source)
    }

    /// Frames of code still unnamed, as `module+0xoffset`; a stripped Go
    /// program still names its functions in its own table.
    fn name_by_module(
        &mut self,
        tgid: u32,
        root: &str,
        maps: &[procfs::Mapping],
        frames: &mut [Frame],
    ) {
        let unnamed: Vec<usize> = (0..frames.len())
            .filter(|&i| frames[i].symbol.is_none() && self.is_code(tgid, frames[i].addr))
            .collect();
        for i in unnamed {
            let f = &mut frames[i];
            let Some((module, off)) = procfs::locate(maps, f.addr) else { continue };
            let path = procfs::mapping_of(maps, f.addr)
                .map(|m| format!("{root}{}", m.path))
                .unwrap_or_default();
            let go = self
                .go
                .entry(path.clone())
                .or_insert_with(|| GoFile::open(&path).map(std::sync::Arc::new));
            f.symbol = go.as_ref().and_then(|g| g.name(off)).map(Into::into);
            f.module = Some(module.into());
            f.offset = Some(off);
        }
    }
}

impl Symbolizer for BlazeSymbolizer {
    fn kernel(&mut self, addrs: &[u64]) -> Vec<Frame> {
        if let Some((tx, rx)) = &self.kernel_thread {
            if tx.send(addrs.to_vec()).is_ok() {
                if let Ok(frames) = rx.recv() {
                    return frames;
                }
            }
        }
        symbolize_kernel(&self.inner, addrs)
    }

    fn report_begins(&mut self) {
        let every = self.refresh_every;
        self.refreshed.retain(|_, at| at.elapsed() < every);
        self.cgroup_read.retain(|_, at| at.elapsed() < every);
    }

    fn user(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame> {
        if let Some(frames) = self.named_as_parent(tgid, addrs) {
            return frames;
        }
        let asked = tgid;
        let tgid = self.source_of(tgid);
        let live = alive(tgid);
        let mut cached = self.maps.contains_key(&tgid);
        // Cached maps are not re-read by blazesym: refresh them (dlopen, ...),
        // once a report (every fork gone since names its frames by these), or
        // once per `refresh_every`, and sooner for an address outside every
        // mapping they know.
        let repeating = self.refresh_every > Duration::ZERO;
        let due = match self.refreshed.get(&tgid) {
            None => true,
            Some(_) => repeating && self.unmapped(tgid, addrs),
        };
        // Under repeated reports, a process first met in a report (it ran
        // before the trace) keeps its maps too, as one that exec'd during it
        // does: the next reports name its frames from them, and from the
        // names found before, instead of blazesym reading it all again.
        if live && due && (cached || repeating) {
            self.refreshed.insert(tgid, Instant::now());
            cached |= self.remember(tgid, None);
        }
        let foreign = live && procfs::foreign_root(tgid);
        let root = if foreign { format!("/proc/{tgid}/root") } else { String::new() };
        // Through `map_files` where the tracer may (a file replaced since it
        // was mapped is still the one mapped); else by path, which serves every
        // process that sees the files this one does.
        let map_files = (!cached || foreign) && procfs::map_files_usable();
        let source = |debug_syms: bool| process_source(tgid, map_files, debug_syms);
        // A live process whose maps are not kept is read now, once for both
        // its regions and the maps its names are kept by.
        let just_read = if live && !cached { procfs::maps_read(tgid) } else { None };
        let read_now = just_read.as_ref().map(|t| t.mappings().to_vec());
        match &just_read {
            Some(t) => drop(self.regions.insert(tgid, procfs::parse_regions(&t.text[..]))),
            None => drop(self.regions.entry(tgid).or_insert_with(|| procfs::regions_of(tgid))),
        }
        if asked != tgid {
            // [`Symbolizer::is_code`] is asked about the process itself.
            let shared = self.regions.get(&tgid).cloned().unwrap_or_default();
            self.regions.insert(asked, shared);
        }
        // Only addresses in executable mappings are code; the rest (junk from a
        // frame-pointer walk through code without frame pointers) are never named.
        let code: Vec<u64> = addrs.iter().copied().filter(|&a| self.is_code(tgid, a)).collect();
        let key_maps = names_kept_by(&read_now, &self.maps, tgid);
        let mut named: FastMap<u64, Frame> = FastMap::default();
        let mut code_left = Vec::with_capacity(code.len());
        for a in code {
            match self.file_frames.get(key_maps, a) {
                Some(f) => drop(named.insert(a, f)),
                None => code_left.push(a),
            }
        }
        let code = code_left;
        // Symbol tables first: DWARF parsing costs seconds and hundreds of MiB on
        // large binaries, and the frames need no line numbers.
        // A container's process that has exited: its paths name nothing here,
        // or other files; its code files were kept open while it lived.
        // (Or a zombie: it counts as alive, but its root cannot be read.)
        let dead_foreign = !foreign && self.foreign_roots.contains(&tgid);
        let fresh = match self.maps.get(&tgid).filter(|_| dead_foreign) {
            Some(maps) => {
                let files = &self.kept_files;
                from_files(&self.inner, maps, &code, None, &mut |m| {
                    files.get(&(m.dev, m.inode)).map(|k| (k.path.clone(), k.segments.clone()))
                })
            }
            None if code.is_empty() => Vec::new(),
            // Kept maps name the frames by their files, found by path: the
            // process may be gone (a live one's were just read again).
            None if cached && !foreign && !self.blaze_kept.contains(&tgid) => {
                let maps = self.maps.get(&tgid).map_or(&[][..], Vec::as_slice);
                let by_path = &mut self.by_path;
                if by_path.len() >= MAX_KEPT_FILES {
                    by_path.clear();
                }
                // A file replaced since it was mapped is read through the
                // process while it lives.
                let fallback =
                    live.then(|| process_source(tgid, procfs::map_files_usable(), false));
                from_files(&self.inner, maps, &code, fallback.as_ref(), &mut |m| {
                    by_path.entry((m.dev, m.inode)).or_insert_with(|| file_by_path(m)).clone()
                })
            }
            None => symbolize_each(&self.inner, &source(false), &code),
        };
        named.extend(fresh.into_iter().map(|f| (f.addr, f)));
        // What is left lies in stripped code (Debian's libc keeps only its exported
        // symbols): a second pass reads the separate debug files (build id or
        // debug link under /usr/lib/debug) for those addresses alone. On a Python
        // HTTP server this took unresolved user frames from 34% of the off-CPU
        // time to none.
        let stripped: Vec<u64> = code
            .iter()
            .copied()
            .filter(|a| named.get(a).is_none_or(|f| f.symbol.is_none()))
            .collect();
        // Unresolved code needs the maps, read once here: for the debug-file pass
        // and for `module+0xoffset`. Kept maps were just refreshed if the process
        // lives; they are read only for a process never remembered.
        // (Taken out of the kept ones while in use, and put back.)
        let kept = if stripped.is_empty() { None } else { self.maps.remove(&tgid) };
        let read;
        let maps: Option<&[procfs::Mapping]> = match (stripped.is_empty(), &kept, &read_now) {
            (true, _, _) => None,
            (false, Some(m), _) | (false, None, Some(m)) => Some(m),
            (false, None, None) => {
                read = procfs::maps_of(tgid);
                Some(&read)
            }
        };
        // (Not for a container's exited process: they are found by path.)
        if let Some(maps) = maps.filter(|_| !dead_foreign) {
            // A process gone is read no more: its modules without a debug
            // file keep what their own symbols named.
            let fallback = (live || self.blaze_kept.contains(&tgid)).then(|| source(true));
            for f in self.named_from_debug_files(&root, maps, &stripped, fallback.as_ref()) {
                if f.symbol.is_some() {
                    named.insert(f.addr, f);
                }
            }
        }
        let mut frames: Vec<Frame> =
            addrs.iter().map(|&a| named.remove(&a).unwrap_or_else(|| Frame::unknown(a))).collect();
        if let Some(maps) = maps {
            self.name_by_module(tgid, &root, maps, &mut frames);
            // Code in no file: a JVM's code cache names what it compiled, and
            // the methods inlined at the call, as frames of the same address
            // before it (innermost first).
            let in_jit =
                |f: &Frame| f.symbol.is_none() && procfs::mapping_of(maps, f.addr).is_none();
            if live && frames.iter().any(in_jit) {
                let mut out = Vec::with_capacity(frames.len());
                for f in frames {
                    // The return address, the byte after the lookup address.
                    match in_jit(&f).then(|| self.java.code(tgid, f.addr.wrapping_add(1))).flatten()
                    {
                        Some(named) => {
                            out.extend(named.into_iter().map(|n| Frame { addr: f.addr, ..n }))
                        }
                        None => out.push(f),
                    }
                }
                frames = out;
            }
        }
        if let Some(k) = kept {
            self.maps.insert(tgid, k);
        }
        self.file_frames.keep(names_kept_by(&read_now, &self.maps, tgid), &frames);
        frames
    }

    fn leaf_callers(&mut self, tgid: u32, stacks: &[(Vec<u64>, Vec<u64>)]) -> Vec<Option<u64>> {
        let regions = self.regions.entry(tgid).or_insert_with(|| procfs::regions_of(tgid));
        let mem = crate::sys::memory::ProcessMemory { pid: tgid };
        // One walker per process: the code pages it reads are read once.
        let mut walker = frame_scan::Walker::new(regions, &mem, frame_scan::Arch::native());
        stacks
            .iter()
            .map(|(frames, words)| {
                frame_scan::leaf_caller(frames, words, |w, pc| walker.calls_leaf(w, pc))
            })
            .collect()
    }

    fn is_code(&self, tgid: u32, addr: u64) -> bool {
        match self.regions.get(&tgid) {
            Some(r) if !r.is_empty() => frame_scan::region_of(r, addr).is_some_and(|m| m.exec),
            _ => true,
        }
    }

    fn ns_ids(&mut self, tgid: u32, tid: u32) -> Option<(u32, u32)> {
        if !*self.pid_ns.entry(tgid).or_insert_with(|| procfs::foreign_pid_ns(tgid)) {
            return None;
        }
        // Read now while the thread lives, else as it was when its process
        // was first seen.
        procfs::ns_ids(tgid, tid).or_else(|| self.kept_ns_ids.get(&tid).copied())
    }

    fn cgroup(&mut self, tgid: u32) -> Option<String> {
        let kept =
            |s: &Self| s.cgroups.get(&tgid).or_else(|| s.cgroups.get(&s.source_of(tgid))).cloned();
        if self.cgroup_read.contains_key(&tgid) {
            return kept(self);
        }
        match crate::sys::cgroup::of_process(tgid) {
            Some(now) if self.refresh_every > Duration::ZERO => {
                self.cgroups.insert(tgid, now.clone());
                self.cgroup_read.insert(tgid, Instant::now());
                Some(now)
            }
            Some(now) => Some(now),
            None => kept(self),
        }
    }

    fn python(&mut self, tgid: u32, words: &[u64]) -> Vec<Frame> {
        if words.is_empty() {
            // Most records: no interpreter frames, and no need to look at the process.
            return Vec::new();
        }
        // A fork that has not exec'd runs its parent's code objects; but its own
        // memory is read first, as it may have loaded more since.
        let tgid = if procfs::alive(tgid) { tgid } else { self.source_of(tgid) };
        words
            .iter()
            .map(|&w| match (is_v8_frame(w), is_jvm_frame(w)) {
                (true, _) => self.javascript.frame(tgid, w),
                (_, true) => self.java.frame(tgid, w),
                _ => self.python.frame(tgid, w),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Maps read again unchanged are not kept again (blazesym's own read of
    /// them was a tenth of the tracer's CPU while perf forked).
    #[test]
    fn maps_read_again_unchanged_are_kept_once() {
        let mut s = BlazeSymbolizer::default();
        // Processes whose maps stay as they are (this one's change as other tests run).
        let (mut child, mut other) = (procfs::settled_sleeper(), procfs::settled_sleeper());
        let pid = child.id();
        // A fork that maps what the process whose maps it shares was read
        // mapping keeps nothing of its own, and goes on sharing.
        const SOURCE: u32 = u32::MAX - 7;
        s.maps.insert(SOURCE, procfs::maps_of(other.id()));
        assert!(!s.remember(other.id(), Some(SOURCE)));
        assert!(!s.maps.contains_key(&other.id()) && s.kept_reads == 0);
        s.maps.remove(&SOURCE);
        assert!(s.remember(pid, None));
        // Past the moment a read is shared for: a read of its own, unchanged.
        std::thread::sleep(std::time::Duration::from_millis(5));
        assert!(s.remember(pid, None));
        assert_eq!(s.kept_reads, 1);
        // Changed (as by an exec): kept anew.
        s.maps.insert(
            other.id(),
            vec![procfs::Mapping { path: "/elsewhere".into(), ..Default::default() }],
        );
        assert!(s.remember(other.id(), None));
        for c in [&mut child, &mut other] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
        assert_eq!(s.kept_reads, 2);
        assert!(s.file_maps(pid).iter().any(|m| m.exec), "still kept once gone");
    }

    /// A process that has exited is named from the maps kept while it lived,
    /// by its files' paths, with no copy of them kept by blazesym.
    #[test]
    fn a_process_gone_is_named_from_its_kept_maps() {
        let mut s = BlazeSymbolizer::default();
        let mut sleeper = procfs::settled_sleeper();
        let pid = sleeper.id();
        assert!(s.remember(pid, None));
        assert!(!s.blaze_kept.contains(&pid), "no perf map: blazesym keeps nothing");
        // Where getpid lies in the sleeper: at its file offset in our own libc.
        let here = libc::getpid as *const () as u64;
        let own = procfs::maps_of(std::process::id());
        let mine = procfs::mapping_of(&own, here).expect("getpid lies in a mapped file");
        let file_off = here - mine.start + mine.offset;
        let theirs = s.file_maps(pid).into_iter().find(|m| {
            m.exec
                && m.inode == mine.inode
                && m.offset <= file_off
                && file_off < m.offset + (m.end - m.start)
        });
        let theirs = theirs.expect("sleep maps the same libc's code");
        let addr = theirs.start + (file_off - theirs.offset);
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        assert!(!alive(pid));
        s.report_begins();
        let frames = s.user(pid, &[addr]);
        let name = frames[0].symbol.as_deref().unwrap_or("");
        assert!(name.contains("getpid"), "{frames:?}");
        assert!(frames[0].module.as_deref().is_some_and(|m| m.starts_with("libc")), "{frames:?}");
    }

    /// A fork that shares its parent's maps is named from the names its
    /// parent's files were given, without a read of its own maps.
    #[test]
    fn a_fork_reuses_the_names_its_parents_files_were_given() {
        use topwaits_common::{proc_event, ProcEvent};
        let mut s = BlazeSymbolizer::default();
        let mut sleeper = procfs::settled_sleeper();
        let pid = sleeper.id();
        const FORK: u32 = u32::MAX - 9;
        let fork =
            ProcEvent { kind: proc_event::FORK, tgid: FORK, parent: pid, ..Default::default() };
        s.on_event(Some(fork));
        let libc = s.file_maps(pid).into_iter().find(|m| m.exec && m.path.contains("libc"));
        let libc = libc.expect("sleep maps libc's code");
        let addrs = [libc.start + 0x40, libc.start + 0x1000, 0x10];
        assert!(s.named_as_parent(FORK, &addrs).is_none(), "nothing named yet");
        s.report_begins();
        let parents = s.user(pid, &addrs);
        assert!(parents[..2].iter().all(|f| f.module.is_some()), "{parents:?}");
        let forks = s.named_as_parent(FORK, &addrs).expect("every address named before");
        assert_eq!(forks, parents);
        assert!(s.is_code(FORK, addrs[0]) && !s.is_code(FORK, addrs[2]));
        assert!(s.named_as_parent(pid, &addrs).is_none(), "the parent shares no one's maps");
        let elsewhere = [libc.start + 0x80];
        assert!(s.named_as_parent(FORK, &elsewhere).is_none(), "an address not named before");
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }

    /// Under repeated reports (`serve`), a live process's maps and cgroup
    /// are read once per `refresh_every`, or sooner for an address outside
    /// every mapping known; a single report reads them as before.
    #[test]
    fn repeated_reports_read_a_live_process_again_only_when_due() {
        let mut sleeper = procfs::settled_sleeper();
        let pid = sleeper.id();
        let maps = procfs::maps_of(pid);
        let libc = maps.iter().find(|m| m.exec && m.path.contains("libc")).expect("libc code");
        let addrs = [libc.start + 0x40];
        let mut once = BlazeSymbolizer::default();
        once.report_begins();
        let named = once.user(pid, &addrs);
        assert!(!once.maps.contains_key(&pid), "one report keeps no maps of its own");
        let mut s = BlazeSymbolizer::default();
        s.refresh_every(Duration::from_secs(3600));
        s.report_begins();
        assert_eq!(s.user(pid, &addrs), named);
        assert!(s.maps.contains_key(&pid), "a process first met in a report keeps its maps");
        let read_at = s.refreshed[&pid];
        let cgroup = s.cgroup(pid);
        assert!(cgroup.is_some() && s.cgroup_read.contains_key(&pid));
        s.report_begins();
        assert_eq!(s.user(pid, &addrs), named, "named from the kept maps");
        assert_eq!(s.refreshed[&pid], read_at, "not read again before it is due");
        assert_eq!(s.cgroup(pid), cgroup);
        s.report_begins();
        let _ = s.user(pid, &[0x10]);
        assert!(s.refreshed[&pid] > read_at, "an address in no mapping reads them again");
        s.refresh_every(Duration::ZERO);
        s.report_begins();
        assert!(s.refreshed.is_empty() && s.cgroup_read.is_empty(), "each report reads again");
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }

    #[test]
    fn build_ids_are_two_lower_case_hex_digits_a_byte() {
        let me = std::env::current_exe().unwrap();
        let id =
            build_id_hex(me.to_str().unwrap()).expect("test binaries are linked with a build id");
        assert!(id.len() >= 16 && id.len().is_multiple_of(2), "{id}");
        assert!(id.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)), "{id}");
        assert_eq!(build_id_hex("/nonexistent/lib.so"), None);
    }
}
