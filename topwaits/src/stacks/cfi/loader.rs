//! Keeps the in-kernel walker's tables up to date while a trace runs: each traced
//! process's executable mappings (read from `/proc/PID/maps` when it is first
//! seen, forks, execs, or runs code the walker found in no mapping, as after a
//! `dlopen`), and one unwind tree per file (by device and inode, so shared by
//! every process that maps it), built on a thread of its own so that neither the
//! start nor the process events wait for it. What the kernel holds is written
//! through a [`Sink`], which `bpf/` implements.

use std::collections::{HashMap, HashSet};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::Result;
use topwaits_common::walker::{
    file_state, ExecMap, FileInfo, Node, ProcMaps, IN_HASH, MAX_FILES, MAX_LEVELS, MAX_MAPS,
};
use topwaits_common::{proc_event, ProcEvent};

use super::cache::{self, Cache, Source};
use super::tree::{self, Tree};
use crate::sys::elf;
use crate::sys::procfs::{self, alive};

/// Where the walker's tables go.
pub trait Sink {
    fn put_proc(&mut self, tgid: u32, maps: &ProcMaps) -> Result<()>;
    fn drop_proc(&mut self, tgid: u32);
    /// Drops many processes' mappings (see [`Sink::drop_proc`]).
    fn drop_procs(&mut self, tgids: &[u32]) {
        tgids.iter().for_each(|&t| self.drop_proc(t));
    }
    fn put_node(&mut self, key: u64, node: &Node) -> Result<()>;
    /// Puts a file's nodes at once, each under the key of the same index; an
    /// error (full) may leave part of them in.
    fn put_nodes(&mut self, keys: &[u64], nodes: &[Node]) -> Result<()> {
        keys.iter().zip(nodes).try_for_each(|(key, node)| self.put_node(*key, node))
    }
    /// Puts a tree's nodes, in order, into the node array if they fit
    /// there: the index of the first (None: they go to the hash map).
    fn place_nodes(&mut self, nodes: &[Node]) -> Option<u32> {
        let _ = nodes;
        None
    }
    fn put_file(&mut self, id: u32, info: FileInfo) -> Result<()>;
}

/// The file index that stands for every file beyond [`MAX_FILES`]: marked full.
const OVERFLOW_FILE: u32 = 0;

/// Shortest and longest wait before a process whose code the walker could not
/// place is read again; it doubles while reading finds nothing new (JIT code).
const REREAD_MIN: Duration = Duration::from_millis(50);
const REREAD_MAX: Duration = Duration::from_secs(5);

/// How long after its exec a process's code is taken to be still loading (its
/// libraries, then what it loads itself): each time the walker meets code
/// outside its mappings meanwhile, they are read at once, up to
/// [`READS_WHILE_LOADING`] times (a JIT's code, never in a file, would be met
/// at every walk).
pub const LOADING_AFTER_EXEC: Duration = Duration::from_millis(200);
const READS_WHILE_LOADING: u32 = 4;

/// The exited are forgotten once this many processes were added since the last
/// sweep, or this long after it: often enough to keep the kernel's table of
/// processes (16,384) far from full under a fork storm, rarely enough to cost
/// little. A sweep lists `/proc`, whatever it finds: at every 256 processes it
/// was a twentieth of the tracer's CPU under `perf bench sched messaging`,
/// which forks 200 a run.
const SWEEP_AFTER_PROCS: usize = 1024;
const SWEEP_AFTER: Duration = Duration::from_secs(10);

/// How many walks of running tasks must meet a file before its table is built
/// (one walk of a blocking task suffices; see [`Loader::met_running`]).
const RUNNING_MEETINGS: u32 = 4;
/// Over how long at least those walks must come (see [`Loader::met_running`]).
const RUNNING_SPREAD: Duration = Duration::from_secs(1);

/// Reads kept for [`Loader::take_fresh`] between two calls (a bound, should no
/// one take them).
const FRESH_KEPT: usize = 4096;

/// What the tables cost and what did not fit, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Files whose tables are in the kernel, and the bytes their nodes take.
    pub files_ready: u64,
    /// Of the tables, those found in the cache rather than built.
    pub files_from_cache: u64,
    pub table_bytes: u64,
    /// Files with no unwind information (walked by frame pointers).
    pub files_without_tables: u64,
    /// Files whose tables did not fit (stacks through them are cut, marked).
    pub files_not_fitting: u64,
    /// Processes with more executable mappings than the walker keeps.
    pub procs_with_too_many_maps: u64,
    /// From the start to the first table in place.
    pub first_table_after: Option<Duration>,
    /// Forks whose mappings the fork hook copied as kept here, not written again.
    pub forks_copied: u64,
}

impl Stats {
    /// What did not fit, one line each, with the way out.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.files_not_fitting > 0 {
            out.push(format!(
                "the unwind tables of {} files did not fit into the kernel's maps: user stacks through them end in [cut:tables-full] (trace fewer processes with -p, or use --unwind fp)",
                self.files_not_fitting
            ));
        }
        if self.procs_with_too_many_maps > 0 {
            out.push(format!(
                "{} processes map code from more than {MAX_MAPS} places: stacks through the rest end in [cut:unmapped-code]",
                self.procs_with_too_many_maps
            ));
        }
        out
    }
}

struct File {
    id: u32,
    segments: Vec<elf::Segment>,
}

struct Proc {
    /// Shared with the forks that map the same (a fork storm copies no table).
    maps: Arc<ProcMaps>,
    read_at: Instant,
    reread_after: Duration,
    /// A forked process that has not exec'd: the process whose mappings it
    /// shares, read in its stead (reading every fork's maps is what a fork-heavy
    /// workload would make the user side's main cost).
    source: Option<u32>,
}

struct Built {
    id: u32,
    tree: Result<Option<Tree>>,
    /// The file's path, how long its tree took, and whether its table came
    /// from the cache (for the log and the stats).
    path: String,
    took: Duration,
    source: Source,
}

/// A file whose tree is to be built.
struct Job {
    id: u32,
    file: std::fs::File,
    path: String,
    /// Asked for at the start, for the traced processes, which the start waits
    /// for: built at normal priority. Every other table is built when a CPU
    /// would otherwise idle.
    urgent: bool,
}

/// The tables of the traced processes, kept in step with them.
pub struct Loader {
    files: HashMap<(u64, u64), File>,
    next_id: u32,
    /// The [`ProcMaps::version`] of the last mappings read.
    version: u32,
    procs: HashMap<u32, Proc>,
    /// The processes in which the walker met code it could not place since they
    /// were last read (a set of its own: each event looks at these, not at all).
    missed: HashSet<u32>,
    /// The processes read at their exec and not since: what they mapped then
    /// lacked their libraries, so they are read again at their first fork
    /// rather than each fork being handed the stale table (and each sending
    /// a MAPS event of its own).
    execed: HashSet<u32>,
    /// When each process that exec'd during the trace did, and how often it
    /// was read at once since (see [`LOADING_AFTER_EXEC`]).
    exec_at: HashMap<u32, (Instant, u32)>,
    jobs: Option<mpsc::Sender<Job>>,
    built: mpsc::Receiver<Built>,
    in_flight: usize,
    started: Instant,
    /// When the exited were last forgotten, and how many processes were kept then.
    swept: (Instant, usize),
    /// The executable mappings read since [`Loader::take_fresh`] was last called.
    fresh: Vec<(u32, Vec<procfs::Mapping>)>,
    /// Tables asked for now are the start's own (see [`Loader::settle`]).
    urgent: bool,
    /// Files known but not built, with the process and mapping they were
    /// first seen in: built when a walk first meets their code.
    unbuilt: HashMap<u32, (u32, procfs::Mapping)>,
    /// Of those, how many times walks of running tasks met each, since when.
    unbuilt_met: HashMap<u32, (u32, Instant)>,
    /// Of those, the ones met often in a burst, paused (walks of running tasks
    /// ask no more) until they may be asked for again.
    paused: HashMap<u32, Instant>,
    /// [`RUNNING_SPREAD`], shorter in tests.
    running_spread: Duration,
    pub stats: Stats,
}

/// The builder's thread: each file's tree, from its cached table or a new one.
/// A table found in the cache is read at normal priority (a few milliseconds);
/// one to be built waits for an idle CPU rather than take one from the
/// workload (on a busy machine its stacks stay marked loading a while
/// longer), unless the start waits for it.
fn builder(jobs: mpsc::Receiver<Job>, built: mpsc::Sender<Built>, cache: Option<Cache>) {
    let mut idle = false;
    let mut set = |want_idle: bool| {
        if want_idle != idle {
            idle = match want_idle {
                true => {
                    log::debug!(
                        "unwind tables are built in {}",
                        crate::sys::priority::lowest_for_this_thread()
                    );
                    true
                }
                false => !crate::sys::priority::normal_for_this_thread(),
            };
        }
    };
    for Job { id, file, path, urgent } in jobs {
        set(false);
        let t0 = Instant::now();
        let got = cache::entries_of(cache.as_ref(), file, || set(!urgent));
        let (tree, source) = match got {
            Ok((entries, source)) => (Ok(entries.and_then(tree::build_from)), source),
            Err(e) => (Err(e), Source::Built),
        };
        if built.send(Built { id, tree, path, took: t0.elapsed(), source }).is_err() {
            break;
        }
    }
}

impl Loader {
    /// A loader whose file index 0 stands for the files that do not fit. The
    /// tables asked for before the first [`Loader::settle`] are the start's,
    /// built at once; every later one when a CPU would otherwise idle.
    pub fn new(sink: &mut dyn Sink, cache: Option<Cache>) -> Result<Loader> {
        sink.put_file(OVERFLOW_FILE, FileInfo::marked(file_state::FULL))?;
        let (job_tx, job_rx) = mpsc::channel::<Job>();
        let (built_tx, built) = mpsc::channel();
        std::thread::Builder::new()
            .name("unwind-tables".into())
            .spawn(move || builder(job_rx, built_tx, cache))?;
        Ok(Loader {
            files: HashMap::new(),
            next_id: 1,
            version: 0,
            procs: HashMap::new(),
            missed: HashSet::new(),
            execed: HashSet::new(),
            exec_at: HashMap::new(),
            jobs: Some(job_tx),
            built,
            in_flight: 0,
            started: Instant::now(),
            swept: (Instant::now(), 0),
            fresh: Vec::new(),
            urgent: true,
            unbuilt: HashMap::new(),
            unbuilt_met: HashMap::new(),
            paused: HashMap::new(),
            running_spread: RUNNING_SPREAD,
            stats: Stats::default(),
        })
    }

    /// Takes one process event (None: a beat). Returns whether it wants beats:
    /// while tables are being built or a process awaits being read again.
    pub fn on_event(&mut self, ev: Option<ProcEvent>, sink: &mut dyn Sink) -> bool {
        let now = Instant::now();
        match ev {
            Some(ev) => match ev.kind {
                proc_event::FORK => {
                    let source = self.procs.get(&ev.parent).map(|p| p.source.unwrap_or(ev.parent));
                    if let Some(s) =
                        source.filter(|s| self.execed.contains(s) || self.missed.contains(s))
                    {
                        let execed = self.execed.contains(&s);
                        self.read(s, now, sink);
                        if execed {
                            // Its libraries are mapped now: libc among them.
                            self.build_anchors(s, sink);
                        }
                    }
                    self.fork(ev, now, sink);
                }
                proc_event::TABLE => self.wanted(ev.tgid, ev.parent, sink),
                proc_event::TABLE_RUNNING => self.met_running(ev.tgid, ev.parent, sink),
                proc_event::EXEC => {
                    self.read(ev.tgid, now, sink);
                    self.execed.insert(ev.tgid);
                    self.exec_at.insert(ev.tgid, (now, 0));
                    self.build_anchors(ev.tgid, sink);
                }
                proc_event::MAPS => {
                    // A fork's source is read for it, while that still runs.
                    let source = self
                        .procs
                        .get(&ev.tgid)
                        .and_then(|p| p.source)
                        .filter(|s| self.procs.contains_key(s) && alive(*s));
                    let tgid = source.unwrap_or(ev.tgid);
                    let loading = self.exec_at.get_mut(&tgid).filter(|(at, reads)| {
                        now.duration_since(*at) < LOADING_AFTER_EXEC && *reads < READS_WHILE_LOADING
                    });
                    if let Some((_, reads)) = loading {
                        *reads += 1;
                        // The walker met code that a program loading since its
                        // exec has mapped now: read at once, not after
                        // REREAD_MIN, since its forks meanwhile copy the
                        // kernel's entry without it (15 of perf's 200 each met
                        // perf's libraries unmapped, and asked for a read).
                        // The dynamic loader may still be mapping the rest:
                        // a first fork still reads it again.
                        let first_fork_pending = self.execed.contains(&tgid);
                        self.read(tgid, now, sink);
                        if first_fork_pending {
                            self.execed.insert(tgid);
                        }
                        self.build_anchors(tgid, sink);
                    } else if self.procs.contains_key(&tgid) {
                        self.missed.insert(tgid);
                    } else {
                        self.read(ev.tgid, now, sink);
                    }
                }
                _ => {
                    if !self.procs.contains_key(&ev.tgid) {
                        self.read(ev.tgid, now, sink);
                    }
                }
            },
            None => self.take_built(sink),
        }
        self.reopen(now, sink);
        if !self.missed.is_empty() {
            let procs = &self.procs;
            let due: Vec<u32> = self
                .missed
                .iter()
                .copied()
                .filter(|t| procs.get(t).is_none_or(|p| now >= p.read_at + p.reread_after))
                .collect();
            for tgid in due {
                self.missed.remove(&tgid);
                self.read(tgid, now, sink);
            }
        }
        self.in_flight > 0 || !self.missed.is_empty()
    }

    /// Forgets the processes that have exited, when enough time has passed or
    /// enough processes have come since the last time.
    /// Returns the processes forgotten.
    pub fn sweep(&mut self, sink: &mut dyn Sink) -> Vec<u32> {
        if self.procs.len() < self.swept.1 + SWEEP_AFTER_PROCS
            && self.swept.0.elapsed() < SWEEP_AFTER
        {
            return Vec::new();
        }
        self.sweep_now(sink)
    }

    /// Forgets the processes that have exited, now; returns them.
    pub fn sweep_now(&mut self, sink: &mut dyn Sink) -> Vec<u32> {
        let Some(running) = procfs::running() else { return Vec::new() };
        let gone: Vec<u32> = self.procs.keys().copied().filter(|t| !running.contains(t)).collect();
        for &tgid in &gone {
            self.procs.remove(&tgid);
            self.missed.remove(&tgid);
            self.execed.remove(&tgid);
        }
        sink.drop_procs(&gone);
        self.exec_at.retain(|_, (at, _)| at.elapsed() < LOADING_AFTER_EXEC);
        self.swept = (Instant::now(), self.procs.len());
        gone
    }

    /// The executable mappings of the processes read since the last call.
    pub fn take_fresh(&mut self) -> Vec<(u32, Vec<procfs::Mapping>)> {
        std::mem::take(&mut self.fresh)
    }

    /// Waits up to `limit` for the tables being built (tests, and a short trace
    /// whose report should not show stacks cut for want of a table).
    pub fn settle(&mut self, limit: Duration, sink: &mut dyn Sink) {
        self.urgent = false;
        let end = Instant::now() + limit;
        while self.in_flight > 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
            self.take_built(sink);
        }
    }

    /// Files known whose code no walk has met (their tables never built).
    pub fn unbuilt(&self) -> usize {
        self.unbuilt.len()
    }

    /// Whether every table asked for is in place.
    pub fn idle(&self) -> bool {
        self.in_flight == 0
    }

    fn take_built(&mut self, sink: &mut dyn Sink) {
        while let Ok(b) = self.built.try_recv() {
            self.in_flight -= 1;
            self.install(b, sink);
        }
    }

    fn install(&mut self, b: Built, sink: &mut dyn Sink) {
        let info = match b.tree {
            Ok(Some(tree)) => {
                let placed = sink.place_nodes(&tree.nodes).map(|first| tree.bases(first));
                let fits =
                    placed.is_some() || sink.put_nodes(&tree.keys(b.id), &tree.nodes).is_ok();
                let how = if b.source == Source::Cache { "read from the cache" } else { "built" };
                log::debug!(
                    "unwind table of {} {how} in {:?}, in place {:?} after the start: {} KiB",
                    b.path,
                    b.took,
                    self.started.elapsed(),
                    tree.bytes() / 1024
                );
                if b.source == Source::Cache {
                    self.stats.files_from_cache += 1;
                }
                if fits {
                    self.stats.files_ready += 1;
                    self.stats.table_bytes += tree.bytes() as u64;
                    self.stats.first_table_after.get_or_insert(self.started.elapsed());
                    FileInfo::ready(tree.levels, placed.unwrap_or([IN_HASH; MAX_LEVELS as usize]))
                } else {
                    self.stats.files_not_fitting += 1;
                    FileInfo::marked(file_state::FULL)
                }
            }
            Ok(None) => {
                self.stats.files_without_tables += 1;
                FileInfo::marked(file_state::NO_TABLE)
            }
            Err(e) => {
                log::debug!("no unwind table for {}: {e:#}", b.path);
                self.stats.files_without_tables += 1;
                FileInfo::marked(file_state::NO_TABLE)
            }
        };
        if let Err(e) = sink.put_file(b.id, info) {
            log::warn!("could not mark unwind table {}: {e:#}", b.id);
        }
    }

    /// The index of the file behind `m` (of process `tgid`), asking for its tree
    /// when it is new, with its loaded segments; None when it is not ELF.
    fn file_of(
        &mut self,
        tgid: u32,
        m: &procfs::Mapping,
        sink: &mut dyn Sink,
    ) -> Option<(u32, Option<u64>)> {
        let key = (m.dev, m.inode);
        if let Some(f) = self.files.get(&key) {
            return Some((f.id, elf::mapping_vaddr(&f.segments, m.offset, m.exec)));
        }
        let opened = procfs::open_mapped(tgid, m)?;
        let segments = elf::load_segments(&mut std::io::BufReader::new(&opened)).ok()?;
        let id = if self.next_id < MAX_FILES {
            self.next_id += 1;
            let id = self.next_id - 1;
            // The start's tables are built at once; any other file's when a walk
            // first meets its code (most of a process's libraries never hold a
            // frame of a wait).
            match self.urgent {
                true => self.build(id, opened, m.path.clone()),
                false => match sink.put_file(id, FileInfo::marked(file_state::UNBUILT)) {
                    Ok(()) => _ = self.unbuilt.insert(id, (tgid, m.clone())),
                    Err(_) => self.build(id, opened, m.path.clone()),
                },
            }
            id
        } else {
            self.stats.files_not_fitting += 1;
            OVERFLOW_FILE
        };
        let vaddr = elf::mapping_vaddr(&segments, m.offset, m.exec);
        self.files.insert(key, File { id, segments });
        Some((id, vaddr))
    }

    /// Asks the builder for file `id`'s tree.
    fn build(&mut self, id: u32, file: std::fs::File, path: String) {
        if let Some(jobs) = &self.jobs {
            if jobs.send(Job { id, file, path, urgent: self.urgent }).is_ok() {
                self.in_flight += 1;
            }
        }
    }

    /// A walk met file `id`, whose table was not built, in process `tgid`: it is
    /// built now, and with it the files at the ends of nearly every stack of that
    /// process, its executable and its C library, so that its next walks pass
    /// through rather than each stopping at the next file new to the walker. The
    /// rest of its libraries wait until a walk meets them: most never hold a
    /// frame of a wait (perf maps 35 files and its waits pass through three),
    /// and putting their tables into the kernel was most of the tracer's own CPU
    /// when a new program started.
    fn wanted(&mut self, tgid: u32, id: u32, sink: &mut dyn Sink) {
        self.build_unbuilt(id, sink);
        self.build_anchors(tgid, sink);
    }

    /// Builds the tables of the files at the ends of nearly every stack of
    /// process `tgid` (see [`on_most_stacks`]) that are not built yet. Also
    /// done for a program started during the trace, at its exec and again
    /// once its libraries are mapped, before its first waits: under the
    /// bench's messaging, perf's workers' first waits were otherwise walked
    /// while perf's own table was still loading (a tenth of their time).
    fn build_anchors(&mut self, tgid: u32, sink: &mut dyn Sink) {
        let Some(p) = self.procs.get(&tgid) else { return };
        let exe = crate::sys::procfs::exe_path(tgid);
        let exe = exe.as_deref();
        let unbuilt = &self.unbuilt;
        let ids: Vec<u32> = p.maps.maps[..p.maps.len as usize]
            .iter()
            .map(|m| m.file)
            .filter(|f| unbuilt.get(f).is_some_and(|(_, m)| on_most_stacks(&m.path, exe)))
            .collect();
        for id in ids {
            self.build_unbuilt(id, sink);
        }
    }

    /// A walk of a task that was running (preempted, sampled on a CPU, or in
    /// a page fault) met file `id`, whose table was not built: it is built
    /// once such walks have met it [`RUNNING_MEETINGS`] times over at least
    /// [`RUNNING_SPREAD`], and until then handed back to the walker as
    /// unbuilt, to be counted again. Such walks land wherever code runs or
    /// first touches memory, which at a program's start and exit is every
    /// library's constructors and destructors: perf's start met 20 of its 35
    /// files this way, each once or twice, and the exits of its 200 forks met
    /// libstdc++, GLib and libpython four times each within a few
    /// milliseconds. Their tables (2-6 ms of CPU each, and their nodes put
    /// into the kernel) named stacks that held a few microseconds of the
    /// trace. A file met that often in a burst is paused: walks of running
    /// tasks pass it without asking until the spread has passed, and the next
    /// meeting after that builds it; a walk of a blocking task still asks for
    /// it, and has it built at once.
    fn met_running(&mut self, tgid: u32, id: u32, sink: &mut dyn Sink) {
        let now = Instant::now();
        let Some((met, first)) = self.unbuilt_met.get_mut(&id) else {
            // The first such walk; or the file was built meanwhile (two CPUs
            // asked at once), and there is nothing to count.
            if self.unbuilt.contains_key(&id) {
                self.unbuilt_met.insert(id, (1, now));
                let _ = sink.put_file(id, FileInfo::marked(file_state::UNBUILT));
            }
            return;
        };
        *met += 1;
        if *met < RUNNING_MEETINGS {
            let _ = sink.put_file(id, FileInfo::marked(file_state::UNBUILT));
            return;
        }
        if now.duration_since(*first) < self.running_spread {
            self.paused.insert(id, *first + self.running_spread);
            let _ = sink.put_file(id, FileInfo::marked(file_state::PAUSED));
            return;
        }
        self.unbuilt_met.remove(&id);
        self.wanted(tgid, id, sink);
    }

    /// Hands the paused files whose spread has passed back to the walker as
    /// unbuilt (those built meanwhile stay as they are).
    fn reopen(&mut self, now: Instant, sink: &mut dyn Sink) {
        if self.paused.is_empty() {
            return;
        }
        let unbuilt = &self.unbuilt;
        let due: Vec<u32> =
            self.paused.iter().filter(|(_, &at)| at <= now).map(|(&id, _)| id).collect();
        for id in due {
            self.paused.remove(&id);
            if unbuilt.contains_key(&id) {
                let _ = sink.put_file(id, FileInfo::marked(file_state::UNBUILT));
            }
        }
    }

    /// When a paused file may be asked for again, the soonest (see
    /// [`Loader::met_running`]): the caller's next beat.
    pub fn next_reopen(&self) -> Option<Instant> {
        self.paused.values().min().copied()
    }

    /// Builds file `id`'s table if it is unbuilt, from the mapping it was first
    /// seen in (or, if that process has gone, its path, while it is still the
    /// same file).
    fn build_unbuilt(&mut self, id: u32, sink: &mut dyn Sink) {
        let Some((tgid, m)) = self.unbuilt.remove(&id) else { return };
        self.unbuilt_met.remove(&id);
        self.paused.remove(&id);
        let same = |f: &std::fs::File| {
            f.metadata().is_ok_and(|meta| std::os::unix::fs::MetadataExt::ino(&meta) == m.inode)
        };
        let opened = procfs::open_mapped(tgid, &m)
            .or_else(|| std::fs::File::open(&m.path).ok())
            .filter(same);
        match opened {
            Some(f) => self.build(id, f, m.path),
            None => {
                // Gone: its frames are followed by frame pointers.
                let _ = sink.put_file(id, FileInfo::marked(file_state::NO_TABLE));
                self.stats.files_without_tables += 1;
            }
        }
    }

    /// A fork maps what its parent does until it execs. The fork hook copied
    /// the parent's mappings for it: they are written again only when that
    /// copy is not of the ones kept here (the parent was read again since, or
    /// nothing was copied). A fork storm then costs no write a fork.
    fn fork(&mut self, ev: ProcEvent, now: Instant, sink: &mut dyn Sink) {
        match self.procs.get(&ev.parent).map(|p| (p.maps.clone(), p.source.unwrap_or(ev.parent))) {
            Some((maps, source)) => {
                if ev.maps_version != 0 && ev.maps_version == maps.version {
                    self.stats.forks_copied += 1;
                    self.record(ev.tgid, maps, now);
                } else {
                    self.keep(ev.tgid, maps, now, sink);
                }
                if let Some(p) = self.procs.get_mut(&ev.tgid) {
                    p.source = Some(source);
                }
            }
            None => self.read(ev.tgid, now, sink),
        }
    }

    /// Reads `tgid`'s mappings and hands them to the walker.
    fn read(&mut self, tgid: u32, now: Instant, sink: &mut dyn Sink) {
        self.execed.remove(&tgid);
        let Some(read) = procfs::maps_read(tgid) else {
            // Gone: forgotten now, not asked after again, and whatever the kernel
            // side holds for it goes too (a forked child may hold the copy of its
            // parent's maps that the fork hook made, and have exited before its
            // event was read).
            self.missed.remove(&tgid);
            self.procs.remove(&tgid);
            sink.drop_proc(tgid);
            return;
        };
        let mut maps: Vec<ExecMap> = Vec::new();
        let code: Vec<procfs::Mapping> =
            read.mappings().iter().filter(|m| m.exec).cloned().collect();
        for m in &code {
            let Some((file, vaddr)) = self.file_of(tgid, m, sink) else { continue };
            let vaddr = vaddr.unwrap_or(m.offset);
            maps.push(ExecMap {
                start: m.start,
                end: m.end,
                bias: m.start.wrapping_sub(vaddr),
                file,
                pad: 0,
            });
        }
        if self.fresh.len() < FRESH_KEPT {
            self.fresh.push((tgid, code));
        }
        if maps.is_empty() {
            return;
        }
        maps.sort_by_key(|m| m.start);
        if maps.len() > MAX_MAPS {
            self.stats.procs_with_too_many_maps += 1;
            maps.truncate(MAX_MAPS);
        }
        let mut table = Arc::new(ProcMaps::EMPTY);
        let t = Arc::get_mut(&mut table).expect("a new table");
        t.len = maps.len() as u32;
        t.maps[..maps.len()].copy_from_slice(&maps);
        let (unchanged, wait) = match self.procs.get(&tgid) {
            Some(p) if p.maps.maps == table.maps => {
                // The same version: the forks the kernel copied it for need
                // no write.
                table = p.maps.clone();
                (true, (p.reread_after * 2).min(REREAD_MAX))
            }
            _ => {
                self.version = self.version.checked_add(1).unwrap_or(1);
                Arc::get_mut(&mut table).expect("a new table").version = self.version;
                (false, REREAD_MIN)
            }
        };
        self.keep(tgid, table.clone(), now, sink);
        if let Some(p) = self.procs.get_mut(&tgid) {
            p.reread_after = wait;
        }
        if unchanged {
            return;
        }
        // The forks that share these mappings get them too.
        let sharers: Vec<u32> =
            self.procs.iter().filter(|(_, p)| p.source == Some(tgid)).map(|(t, _)| *t).collect();
        for t in sharers {
            if sink.put_proc(t, &table).is_ok() {
                if let Some(p) = self.procs.get_mut(&t) {
                    p.maps = table.clone();
                    self.missed.remove(&t);
                }
            }
        }
    }

    fn keep(&mut self, tgid: u32, maps: Arc<ProcMaps>, now: Instant, sink: &mut dyn Sink) {
        if let Err(e) = sink.put_proc(tgid, &maps) {
            log::debug!("could not hand the mappings of {tgid} to the walker: {e:#}");
            return;
        }
        self.record(tgid, maps, now);
    }

    /// Notes that the walker has `maps` for `tgid`, as read at `now`.
    fn record(&mut self, tgid: u32, maps: Arc<ProcMaps>, now: Instant) {
        self.missed.remove(&tgid);
        self.procs
            .insert(tgid, Proc { maps, read_at: now, reread_after: REREAD_MIN, source: None });
    }
}

/// Whether a file mapped at `path` holds a frame of nearly every stack of a
/// process whose executable is `exe`: the executable itself (`main`, `_start`)
/// and the C library (the system call a wait begins in, `__libc_start_main`,
/// `start_thread`; `libpthread` where glibc still had one, musl's loader).
fn on_most_stacks(path: &str, exe: Option<&str>) -> bool {
    if exe == Some(path) {
        return true;
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    ["libc.so", "libc-2.", "libpthread.so", "libpthread-2.", "ld-musl-"]
        .iter()
        .any(|p| name.starts_with(p))
}

impl Drop for Loader {
    fn drop(&mut self) {
        // Ends the builder thread once it is done with its current file.
        self.jobs = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The kernel side, as maps in memory.
    #[derive(Default)]
    struct Mem {
        procs: HashMap<u32, ProcMaps>,
        nodes: HashMap<u64, Node>,
        files: HashMap<u32, FileInfo>,
        node_room: usize,
        /// The node array, and how many nodes it holds at most (0: none).
        array: Vec<Node>,
        array_room: usize,
        /// Mappings written, in order.
        puts: Vec<u32>,
    }

    impl Mem {
        /// The fork hook: the child gets a copy of the parent's mappings, and
        /// the fork's event says which version it copied.
        fn fork(&mut self, parent: u32, child: u32) -> Option<ProcEvent> {
            let copied = self.procs.get(&parent).copied();
            let maps_version = copied.map_or(0, |m| m.version);
            if let Some(m) = copied {
                self.procs.insert(child, m);
            }
            Some(ProcEvent { tgid: child, kind: proc_event::FORK, parent, maps_version })
        }
    }

    impl Sink for Mem {
        fn put_proc(&mut self, tgid: u32, maps: &ProcMaps) -> Result<()> {
            self.puts.push(tgid);
            self.procs.insert(tgid, *maps);
            Ok(())
        }
        fn drop_proc(&mut self, tgid: u32) {
            self.procs.remove(&tgid);
        }
        fn put_node(&mut self, key: u64, node: &Node) -> Result<()> {
            anyhow::ensure!(self.nodes.len() < self.node_room, "full");
            self.nodes.insert(key, *node);
            Ok(())
        }
        fn place_nodes(&mut self, nodes: &[Node]) -> Option<u32> {
            if self.array.len() + nodes.len() > self.array_room {
                return None;
            }
            let first = self.array.len() as u32;
            self.array.extend_from_slice(nodes);
            Some(first)
        }
        fn put_file(&mut self, id: u32, info: FileInfo) -> Result<()> {
            self.files.insert(id, info);
            Ok(())
        }
    }

    /// Trees go into the node array while they fit, the rest into the hash
    /// map, and the walker's search finds the same rule either way.
    #[test]
    fn trees_in_the_node_array_give_the_rules_the_hash_map_gives() {
        let here =
            trees_in_the_node_array_give_the_rules_the_hash_map_gives as fn() as usize as u64;
        let rule_here = |array_room: usize| {
            let mut mem = Mem { node_room: 1 << 20, array_room, ..Mem::default() };
            let mut loader = Loader::new(&mut mem, None).unwrap();
            loader.on_event(seen(std::process::id()), &mut mem);
            loader.settle(Duration::from_secs(60), &mut mem);
            let maps = mem.procs[&std::process::id()];
            let m = *maps.maps[..maps.len as usize]
                .iter()
                .find(|m| m.start <= here && here < m.end)
                .expect("a mapping of this function");
            let info = mem.files[&m.file];
            assert_eq!(info.state, file_state::READY);
            let in_array = info.base[0] != IN_HASH;
            assert_eq!(in_array, array_room > 0, "{info:?}");
            let (array, nodes) = (&mem.array, &mem.nodes);
            let get = |level: u32, index: u32| match in_array {
                true => array.get((info.base[level as usize] + index) as usize).copied(),
                false => {
                    nodes.get(&topwaits_common::walker::node_key(m.file, level, index)).copied()
                }
            };
            let word = tree::lookup(info.levels, get, here - m.bias).expect("a row here");
            // Every ready file's tree is wholly in one place or the other.
            for (&id, f) in mem.files.iter().filter(|(_, f)| f.state == file_state::READY) {
                match f.base[0] {
                    IN_HASH => {
                        assert!(nodes.contains_key(&topwaits_common::walker::node_key(id, 0, 0)))
                    }
                    _ => assert!(f.base[..f.levels as usize]
                        .iter()
                        .all(|&b| (b as usize) < array.len())),
                }
            }
            assert!(mem.array.len() <= array_room);
            word
        };
        assert_eq!(rule_here(1 << 20), rule_here(0));
    }

    fn seen(tgid: u32) -> Option<ProcEvent> {
        Some(ProcEvent { tgid, kind: proc_event::SEEN, ..Default::default() })
    }

    /// A loader that has seen this test process (not yet settled); its pid.
    fn seeing_this_process() -> (Mem, Loader, u32) {
        let mut mem = Mem { node_room: 1 << 20, ..Mem::default() };
        let mut loader = Loader::new(&mut mem, None).unwrap();
        let me = std::process::id();
        loader.on_event(seen(me), &mut mem);
        (mem, loader, me)
    }

    /// A loader past its start that has read this test process, its
    /// mappings, and the file whose code holds address `here`.
    fn past_the_start_with_this_process(here: u64) -> (Mem, Loader, ProcMaps, u32) {
        let mut mem = Mem { node_room: 1 << 20, ..Mem::default() };
        let mut loader = Loader::new(&mut mem, None).unwrap();
        loader.settle(Duration::ZERO, &mut mem);
        loader.on_event(seen(std::process::id()), &mut mem);
        let maps = mem.procs[&std::process::id()];
        let file = maps.maps[..maps.len as usize]
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .unwrap()
            .file;
        (mem, loader, maps, file)
    }

    /// This test process itself: its executable, libc and the rest get mappings
    /// whose bias turns a function's address into its file address, and trees
    /// that say where the function's rules are.
    #[test]
    fn a_live_process_gets_its_mappings_and_one_tree_per_file() {
        let (mut mem, mut loader, me) = seeing_this_process();
        loader.settle(Duration::from_secs(60), &mut mem);
        let maps = mem.procs[&me];
        assert!(maps.len >= 2, "{} mappings", maps.len);
        let used = &maps.maps[..maps.len as usize];
        assert!(used.windows(2).all(|w| w[0].start < w[1].start), "sorted");
        // This function's own address lies in a mapping of this test binary.
        let here = a_live_process_gets_its_mappings_and_one_tree_per_file as fn() as usize as u64;
        let m = used
            .iter()
            .find(|m| m.start <= here && here < m.end)
            .expect("a mapping of this function");
        let info = mem.files[&m.file];
        assert_eq!(info.state, file_state::READY);
        let get = |level, index| {
            mem.nodes.get(&topwaits_common::walker::node_key(m.file, level, index)).copied()
        };
        let word = tree::lookup(info.levels, get, here - m.bias).expect("a row for this function");
        assert_ne!(
            word & 15,
            topwaits_common::walker::rule::STOP,
            "a followable rule at {:#x}",
            here - m.bias
        );
        assert!(
            loader.stats.files_ready >= 2 && loader.stats.table_bytes > 0,
            "{:?}",
            loader.stats
        );
        // Seen again: nothing is read or built twice.
        let files = mem.files.len();
        loader.on_event(seen(me), &mut mem);
        assert!(loader.idle());
        assert_eq!(mem.files.len(), files);
    }

    /// After the start, a process's files are known but not built until a walk
    /// asks for one (its TABLE event): then that file, the process's executable
    /// and its C library get trees, and the others stay unbuilt.
    #[test]
    fn after_the_start_only_the_files_of_a_process_a_walk_meets_are_built() {
        let here = after_the_start_only_the_files_of_a_process_a_walk_meets_are_built as fn()
            as usize as u64;
        let (mut mem, mut loader, maps, mine) = past_the_start_with_this_process(here);
        let me = std::process::id();
        assert!(loader.idle(), "nothing is built before a walk asks");
        let files: BTreeSet<u32> = maps.maps[..maps.len as usize].iter().map(|m| m.file).collect();
        assert!(
            files.len() >= 2 && files.iter().all(|f| mem.files[f].state == file_state::UNBUILT),
            "{:?}",
            mem.files
        );
        // Asked for by a process the loader does not know: that file alone.
        loader.on_event(
            Some(ProcEvent {
                tgid: u32::MAX,
                kind: proc_event::TABLE,
                parent: mine,
                ..Default::default()
            }),
            &mut mem,
        );
        loader.settle(Duration::from_secs(60), &mut mem);
        assert_eq!(mem.files[&mine].state, file_state::READY);
        assert!(
            files.iter().filter(|&&f| f != mine).all(|f| mem.files[f].state == file_state::UNBUILT),
            "{:?}",
            mem.files
        );
        assert_eq!(loader.stats.files_ready, 1);
        // Asked again (two CPUs raced): built once.
        loader.on_event(
            Some(ProcEvent {
                tgid: u32::MAX,
                kind: proc_event::TABLE,
                parent: mine,
                ..Default::default()
            }),
            &mut mem,
        );
        assert!(loader.idle());
        // Met in this process: that file is built, and so is the C library
        // (the executable, this test, was built above); the rest stay unbuilt.
        let path_of = |file: u32| {
            let m = maps.maps[..maps.len as usize].iter().find(|m| m.file == file).unwrap();
            procfs::maps_of(me).into_iter().find(|p| p.exec && p.start == m.start).unwrap().path
        };
        let libc = *files
            .iter()
            .find(|&&f| on_most_stacks(&path_of(f), None))
            .expect("this test maps a C library");
        let others: Vec<u32> = files.iter().copied().filter(|&f| f != mine && f != libc).collect();
        assert!(
            !others.is_empty(),
            "the dynamic loader at least: {:?}",
            files.iter().map(|&f| path_of(f)).collect::<Vec<_>>()
        );
        loader.on_event(
            Some(ProcEvent {
                tgid: me,
                kind: proc_event::TABLE,
                parent: others[0],
                ..Default::default()
            }),
            &mut mem,
        );
        loader.settle(Duration::from_secs(60), &mut mem);
        assert!(
            [others[0], libc, mine].iter().all(|f| mem.files[f].state != file_state::UNBUILT),
            "{:?}",
            mem.files
        );
        assert!(
            others[1..].iter().all(|f| mem.files[f].state == file_state::UNBUILT),
            "{:?}",
            mem.files
        );
    }

    /// A file met by walks of running tasks is handed back unbuilt until the
    /// fourth such walk; met that often within the spread, it is paused (walks
    /// of running tasks ask no more) until the spread has passed, and built at
    /// the next meeting after that.
    #[test]
    fn a_file_met_only_by_running_tasks_is_built_once_they_keep_meeting_it() {
        let here = a_file_met_only_by_running_tasks_is_built_once_they_keep_meeting_it as fn()
            as usize as u64;
        let (mut mem, mut loader, _, mine) = past_the_start_with_this_process(here);
        // Long enough that a slow machine's test does not see it pass early.
        loader.running_spread = Duration::from_millis(800);
        let running = || {
            Some(ProcEvent {
                tgid: u32::MAX,
                kind: proc_event::TABLE_RUNNING,
                parent: mine,
                ..Default::default()
            })
        };
        // The walker marks it loading as it asks.
        let ask = |loader: &mut Loader, mem: &mut Mem| {
            mem.files.insert(mine, FileInfo::marked(file_state::LOADING));
            loader.on_event(running(), mem);
        };
        for _ in 1..RUNNING_MEETINGS {
            ask(&mut loader, &mut mem);
            assert_eq!(mem.files[&mine].state, file_state::UNBUILT, "handed back to be counted");
            assert!(loader.idle(), "not built yet");
        }
        // The fourth, in a burst: paused, and a beat asked for when it may be asked for again.
        ask(&mut loader, &mut mem);
        assert_eq!(mem.files[&mine].state, file_state::PAUSED);
        assert!(loader.idle(), "not built in a burst");
        let reopen = loader.next_reopen().expect("a beat when the spread has passed");
        assert!(reopen > Instant::now() && reopen <= Instant::now() + Duration::from_millis(800));
        loader.on_event(None, &mut mem);
        assert_eq!(mem.files[&mine].state, file_state::PAUSED, "not before its time");
        std::thread::sleep(
            reopen.saturating_duration_since(Instant::now()) + Duration::from_millis(5),
        );
        loader.on_event(None, &mut mem);
        assert_eq!(
            mem.files[&mine].state,
            file_state::UNBUILT,
            "handed back once the spread has passed"
        );
        assert_eq!(loader.next_reopen(), None);
        // Met again after the spread: built.
        ask(&mut loader, &mut mem);
        loader.settle(Duration::from_secs(60), &mut mem);
        assert_eq!(mem.files[&mine].state, file_state::READY);
        // Asked again afterwards (a walk on another CPU): nothing changes.
        loader.on_event(running(), &mut mem);
        assert!(loader.idle());
        assert_eq!(mem.files[&mine].state, file_state::READY);
    }

    /// A file paused after a burst of running walks, then met by a blocking
    /// walk, is built at once, and the end of its pause leaves it built.
    #[test]
    fn a_paused_file_met_by_a_blocking_walk_is_built_and_stays_built() {
        let here =
            a_paused_file_met_by_a_blocking_walk_is_built_and_stays_built as fn() as usize as u64;
        let (mut mem, mut loader, _, mine) = past_the_start_with_this_process(here);
        loader.running_spread = Duration::from_millis(800);
        for _ in 0..RUNNING_MEETINGS {
            mem.files.insert(mine, FileInfo::marked(file_state::LOADING));
            loader.on_event(
                Some(ProcEvent {
                    tgid: u32::MAX,
                    kind: proc_event::TABLE_RUNNING,
                    parent: mine,
                    ..Default::default()
                }),
                &mut mem,
            );
        }
        assert_eq!(mem.files[&mine].state, file_state::PAUSED);
        let reopen = loader.next_reopen().expect("paused");
        // The walker asks for a paused file only from a blocking walk.
        mem.files.insert(mine, FileInfo::marked(file_state::LOADING));
        loader.on_event(
            Some(ProcEvent {
                tgid: u32::MAX,
                kind: proc_event::TABLE,
                parent: mine,
                ..Default::default()
            }),
            &mut mem,
        );
        loader.settle(Duration::from_secs(60), &mut mem);
        assert_eq!(mem.files[&mine].state, file_state::READY);
        assert_eq!(loader.next_reopen(), None, "no longer paused");
        std::thread::sleep(
            reopen.saturating_duration_since(Instant::now()) + Duration::from_millis(5),
        );
        loader.on_event(None, &mut mem);
        assert_eq!(mem.files[&mine].state, file_state::READY);
    }

    /// A walk that meets unmapped code in a program exec'd moments ago has it
    /// read at once (its libraries are being mapped, and its forks copy the
    /// kernel's entry); later, or in a program seen running, it waits its turn.
    #[test]
    fn unmapped_code_soon_after_an_exec_is_read_at_once() {
        let mut mem = Mem { node_room: 1 << 20, ..Mem::default() };
        let mut loader = Loader::new(&mut mem, None).unwrap();
        let (mut child, mut other) = (procfs::settled_sleeper(), procfs::settled_sleeper());
        let maps = |tgid| Some(ProcEvent { tgid, kind: proc_event::MAPS, ..Default::default() });
        loader.on_event(
            Some(ProcEvent { tgid: child.id(), kind: proc_event::EXEC, ..Default::default() }),
            &mut mem,
        );
        loader.on_event(seen(other.id()), &mut mem);
        let read_at = |l: &Loader, t: u32| l.procs[&t].read_at;
        let (before, other_before) = (read_at(&loader, child.id()), read_at(&loader, other.id()));
        std::thread::sleep(Duration::from_millis(2));
        loader.on_event(maps(child.id()), &mut mem);
        loader.on_event(maps(other.id()), &mut mem);
        assert!(read_at(&loader, child.id()) > before, "read again at once");
        assert!(loader.execed.contains(&child.id()), "and again at its first fork");
        // So many times at most: code outside any file (a JIT's) is met again
        // at every walk.
        for _ in 1..READS_WHILE_LOADING {
            loader.on_event(maps(child.id()), &mut mem);
        }
        let last = read_at(&loader, child.id());
        std::thread::sleep(Duration::from_millis(2));
        loader.on_event(maps(child.id()), &mut mem);
        assert_eq!(read_at(&loader, child.id()), last, "then it waits its turn");
        assert!(loader.missed.contains(&child.id()));
        assert_eq!(read_at(&loader, other.id()), other_before, "not yet");
        assert!(loader.missed.contains(&other.id()));
        for c in [&mut child, &mut other] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// A program started during the trace has its executable's and its C
    /// library's tables built at once, before a walk asks; not the rest.
    #[test]
    fn a_program_execd_during_the_trace_gets_its_executable_and_libc_built() {
        let mut mem = Mem { node_room: 1 << 20, ..Mem::default() };
        let mut loader = Loader::new(&mut mem, None).unwrap();
        loader.settle(Duration::ZERO, &mut mem);
        let mut child = procfs::settled_sleeper();
        let pid = child.id();
        loader.on_event(
            Some(ProcEvent { tgid: pid, kind: proc_event::EXEC, ..Default::default() }),
            &mut mem,
        );
        loader.settle(Duration::from_secs(60), &mut mem);
        let code: Vec<procfs::Mapping> =
            procfs::maps_of(pid).into_iter().filter(|m| m.exec).collect();
        child.kill().unwrap();
        child.wait().unwrap();
        let maps = mem.procs[&pid];
        let state_of = |path: &str| {
            let m = code
                .iter()
                .find(|m| m.path.contains(path))
                .unwrap_or_else(|| panic!("{path} in {code:?}"));
            let file =
                maps.maps[..maps.len as usize].iter().find(|x| x.start == m.start).unwrap().file;
            mem.files[&file].state
        };
        assert_ne!(state_of("sleep"), file_state::UNBUILT);
        assert_ne!(state_of("libc"), file_state::UNBUILT);
        assert_eq!(state_of("ld-linux"), file_state::UNBUILT);
    }

    #[test]
    fn the_executable_and_the_c_library_are_on_most_stacks() {
        assert!(on_most_stacks("/usr/bin/perf", Some("/usr/bin/perf")));
        assert!(on_most_stacks("/usr/lib/x86_64-linux-gnu/libc.so.6", None));
        assert!(on_most_stacks("/lib/libc-2.31.so", Some("/usr/bin/x")));
        assert!(on_most_stacks("/lib/ld-musl-x86_64.so.1", None));
        assert!(!on_most_stacks(
            "/usr/lib/x86_64-linux-gnu/libperl.so.5.36.0",
            Some("/usr/bin/perf")
        ));
        assert!(!on_most_stacks("/usr/lib/libcrypt.so.1", None));
        assert!(!on_most_stacks("/usr/bin/perf", Some("/usr/bin/python3")));
    }

    /// A second loader with the same cache finds every table there, and the
    /// trees it makes of them are the first one's.
    #[test]
    fn a_second_run_reads_its_tables_from_the_cache() {
        let dir = std::env::temp_dir().join(format!("tw-loader-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let me = std::process::id();
        let run = || {
            let mut mem = Mem { node_room: 1 << 20, ..Mem::default() };
            let cache = Cache::open(&dir, cache::DEFAULT_LIMIT).unwrap();
            let mut loader = Loader::new(&mut mem, Some(cache)).unwrap();
            loader.on_event(seen(me), &mut mem);
            loader.settle(Duration::from_secs(60), &mut mem);
            (loader.stats.clone(), mem.nodes.len())
        };
        let (cold, nodes) = run();
        let (warm, again) = run();
        assert_eq!(cold.files_from_cache, 0, "{cold:?}");
        assert!(cold.files_ready >= 2);
        assert_eq!(warm.files_from_cache, warm.files_ready, "every table from the cache: {warm:?}");
        assert_eq!(
            (warm.files_ready, warm.table_bytes, again),
            (cold.files_ready, cold.table_bytes, nodes)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fork_shares_its_parents_mappings_and_the_exited_are_swept() {
        let (mut mem, mut loader, me) = seeing_this_process();
        // A pid that cannot exist (above pid_max's limit).
        let child = 4_194_304 + 7;
        loader.on_event(
            Some(ProcEvent {
                tgid: child,
                kind: proc_event::FORK,
                parent: me,
                ..Default::default()
            }),
            &mut mem,
        );
        assert_eq!(mem.procs[&child], mem.procs[&me]);
        // Two processes kept since the start: too few, too soon, to sweep.
        loader.sweep(&mut mem);
        assert!(mem.procs.contains_key(&child));
        loader.sweep_now(&mut mem);
        assert!(!mem.procs.contains_key(&child) && mem.procs.contains_key(&me));
    }

    /// The kernel's copy for a fork is written over only when it is not of the
    /// mappings kept: 200 forks of `perf bench sched messaging` were 200
    /// writes of a 2 KiB entry for nothing.
    #[test]
    fn a_fork_given_the_kept_mappings_by_the_kernel_is_not_written_again() {
        let (mut mem, mut loader, me) = seeing_this_process();
        let version = mem.procs[&me].version;
        assert_ne!(version, 0, "every reading has a version");
        let child = 4_194_304 + 11;
        mem.puts.clear();
        let ev = mem.fork(me, child);
        loader.on_event(ev, &mut mem);
        assert!(mem.puts.is_empty(), "written again: {:?}", mem.puts);
        assert_eq!(mem.procs[&child], mem.procs[&me]);
        assert!(Arc::ptr_eq(&loader.procs[&child].maps, &loader.procs[&me].maps));
        assert_eq!(loader.stats.forks_copied, 1);
        // Read again unchanged: the same version, so its next fork is not
        // written either.
        loader.read(me, Instant::now(), &mut mem);
        assert_eq!(mem.puts, [me]);
        assert_eq!(mem.procs[&me].version, version);
        mem.puts.clear();
        let ev = mem.fork(me, child + 1);
        loader.on_event(ev, &mut mem);
        assert!(mem.puts.is_empty(), "written again: {:?}", mem.puts);
        // The kernel copied an older version (the parent was read again, with
        // other mappings, between the fork and its event): written.
        let ev = mem.fork(me, child + 2);
        let mut changed = *loader.procs[&me].maps;
        changed.maps[0].bias ^= 0x1000;
        changed.version += 1;
        loader.procs.get_mut(&me).unwrap().maps = Arc::new(changed);
        loader.on_event(ev, &mut mem);
        assert_eq!(mem.puts, [child + 2]);
        assert_eq!(mem.procs[&(child + 2)], changed);
        // Nothing copied (a full map, or a reused pid's stale entry): written.
        mem.puts.clear();
        loader.on_event(
            Some(ProcEvent {
                tgid: child + 3,
                kind: proc_event::FORK,
                parent: me,
                maps_version: 0,
            }),
            &mut mem,
        );
        assert_eq!(mem.puts, [child + 3]);
    }

    /// Regression: a process read at its exec (before its loader had mapped its
    /// libraries) handed that table to each of its forks, each of which then
    /// sent a MAPS event of its own. Now its first fork reads it again first.
    #[test]
    fn the_first_fork_after_an_exec_gets_the_parents_libraries() {
        let mut mem = Mem { node_room: 1 << 20, ..Mem::default() };
        let mut loader = Loader::new(&mut mem, None).unwrap();
        let me = std::process::id();
        loader.on_event(
            Some(ProcEvent { tgid: me, kind: proc_event::EXEC, ..Default::default() }),
            &mut mem,
        );
        let whole = mem.procs[&me];
        assert!(whole.len >= 2, "{} mappings", whole.len);
        // As read at the exec: the executable alone.
        let mut early = whole;
        early.len = 1;
        early.maps[1..].fill(ExecMap::default());
        loader.procs.get_mut(&me).unwrap().maps = Arc::new(early);
        let child = 4_194_304 + 9;
        loader.on_event(
            Some(ProcEvent {
                tgid: child,
                kind: proc_event::FORK,
                parent: me,
                ..Default::default()
            }),
            &mut mem,
        );
        assert_eq!(mem.procs[&child].maps, whole.maps, "the fork got the parent's libraries");
        assert!(loader.missed.is_empty() && loader.execed.is_empty());
        // The next fork shares that table without a read.
        let read_at = loader.procs[&me].read_at;
        loader.on_event(
            Some(ProcEvent {
                tgid: child + 1,
                kind: proc_event::FORK,
                parent: me,
                ..Default::default()
            }),
            &mut mem,
        );
        assert_eq!(loader.procs[&me].read_at, read_at);
        assert!(
            Arc::ptr_eq(&loader.procs[&(child + 1)].maps, &loader.procs[&me].maps),
            "shared, not copied"
        );
    }

    /// A child the fork hook gave its parent's maps, gone before its fork's event
    /// was read, from a parent this side does not know: its copy is dropped, not
    /// left in the kernel's map for good.
    #[test]
    fn a_forked_child_gone_before_its_event_leaves_no_maps_in_the_kernel() {
        let mut mem = Mem { node_room: 1 << 20, ..Mem::default() };
        let mut loader = Loader::new(&mut mem, None).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        mem.procs.insert(pid, ProcMaps::EMPTY);
        loader.on_event(
            Some(ProcEvent {
                tgid: pid,
                kind: proc_event::FORK,
                parent: u32::MAX,
                ..Default::default()
            }),
            &mut mem,
        );
        assert!(!mem.procs.contains_key(&pid) && !loader.procs.contains_key(&pid));
    }

    /// Regression: a process that exited while awaiting a second read was asked
    /// after again on every event until the next sweep.
    #[test]
    fn a_process_gone_before_its_second_read_is_forgotten_at_once() {
        let mut mem = Mem { node_room: 1 << 20, ..Mem::default() };
        let mut loader = Loader::new(&mut mem, None).unwrap();
        let mut child = procfs::settled_sleeper();
        let pid = child.id();
        loader.on_event(seen(pid), &mut mem);
        assert!(mem.procs.contains_key(&pid));
        assert!(
            loader.on_event(
                Some(ProcEvent { tgid: pid, kind: proc_event::MAPS, ..Default::default() }),
                &mut mem
            ),
            "a missed process wants beats"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        std::thread::sleep(REREAD_MIN);
        loader.on_event(None, &mut mem);
        assert!(!mem.procs.contains_key(&pid) && !loader.procs.contains_key(&pid));
        loader.settle(Duration::from_secs(60), &mut mem);
        assert!(!loader.on_event(None, &mut mem), "nothing is left to wait for");
    }

    #[test]
    fn tables_that_do_not_fit_are_marked_full_and_counted() {
        let mut mem = Mem { node_room: 1, ..Mem::default() };
        let mut loader = Loader::new(&mut mem, None).unwrap();
        assert_eq!(mem.files[&OVERFLOW_FILE].state, file_state::FULL);
        loader.on_event(seen(std::process::id()), &mut mem);
        loader.settle(Duration::from_secs(60), &mut mem);
        assert!(loader.stats.files_not_fitting >= 1, "{:?}", loader.stats);
        assert!(mem.files.values().any(|f| f.state == file_state::FULL && f.levels == 0));
    }
}
