//! Symbolization: a small trait, the batching that resolves each unique address
//! once, and the trimming of tracing-machinery frames and junk user frames; pure,
//! tested with a fake. The blazesym implementation is in `blaze`.

mod blaze;
mod file_frames;
mod lineage;

pub use blaze::{build_id_hex, BlazeSymbolizer};

use std::sync::Arc;

use topwaits_common::{is_runtime_frame, walker::CUT_MARK, what, LEAF_WORD};

use crate::model::{Capture, Frame, Hop, RawHop, Record, Stack, StackId};
use crate::util::fasthash::{FastMap, FastSet};

/// A user stack's frames and the words found at its stack pointer.
type FramesAndWords = (Vec<u64>, Vec<u64>);

/// A frame's identity in one report: its address space (`None` for the kernel),
/// address, and whether it is a leaf.
type FrameKey = (Option<u32>, u64, bool);

/// Resolves addresses to frames, one batch at a time, in the order given.
pub trait Symbolizer {
    fn kernel(&mut self, addrs: &[u64]) -> Vec<Frame>;
    /// One frame per address; but where a JVM compiled methods inline into
    /// the one at an address, their frames come first, with the same
    /// address, innermost first.
    fn user(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame>;
    /// A report begins naming its frames: what was read for the last one (a
    /// live process's maps) is read again when next needed.
    fn report_begins(&mut self) {}
    /// Whether a user address of `tgid` lies in an executable mapping (true when
    /// the mappings are unknown). Asked after [`Symbolizer::user`] for that process.
    /// With `--leaf-callers`: for each of a process's user stacks, given as its
    /// frames and the words found at its stack pointer, the word to insert as the
    /// leaf's caller, if one checks out (see [`crate::stacks::frame_scan::leaf_caller`]).
    fn leaf_callers(&mut self, _tgid: u32, stacks: &[(Vec<u64>, Vec<u64>)]) -> Vec<Option<u64>> {
        vec![None; stacks.len()]
    }

    fn is_code(&self, _tgid: u32, _addr: u64) -> bool {
        true
    }

    /// The frames of a process's Python frame words (see
    /// `topwaits_common::python`), in order.
    /// Thread `tid`'s (pid, tid) in its own PID namespace, where that is not
    /// this one (a container's); none by default.
    fn ns_ids(&mut self, _tgid: u32, _tid: u32) -> Option<(u32, u32)> {
        None
    }

    /// The cgroup process `tgid` is in (its path within its hierarchy), or was in
    /// when last seen; none by default.
    fn cgroup(&mut self, _tgid: u32) -> Option<String> {
        None
    }

    /// Names the words of language runtimes' frames (Python's and
    /// JavaScript's, `topwaits_common::is_runtime_frame`) from the process's
    /// memory.
    fn python(&mut self, _tgid: u32, words: &[u64]) -> Vec<Frame> {
        words
            .iter()
            .map(|&w| Frame {
                addr: w,
                symbol: Some("[python]".into()),
                module: None,
                offset: None,
            })
            .collect()
    }
}

/// Whether a kernel frame belongs to the tracing machinery rather than the traced task.
fn is_machinery(name: &str) -> bool {
    name.starts_with("bpf_prog_")
        || name.starts_with("bpf_trace_run")
        || name.starts_with("__traceiter_")
        || name.starts_with("__bpf_trace_")
        || name.starts_with("bpf_get_stack")
        || name == "perf_trace_run_bpf_submit"
}

/// Drops the leaf-side frames that the BPF program, `bpf_trace_run*` and
/// `__traceiter_*` add, together with any unresolved frame (the JIT-ed program)
/// before them. Frames past the first real one are never touched.
pub fn trim_machinery<F: AsRef<Frame>>(frames: &mut Vec<F>) {
    let last =
        frames.iter().take(8).rposition(|f| f.as_ref().symbol.as_deref().is_some_and(is_machinery));
    if let Some(i) = last {
        frames.drain(..=i);
    }
}

/// Where one stack id lives, for batching.
#[derive(Clone, Copy)]
enum Space {
    Kernel,
    User(u32),
}

/// The records of a capture, symbolized.
#[derive(Debug)]
pub struct Resolved {
    pub records: Vec<Record>,
    /// Unique user stacks cut at their first address outside executable code: a
    /// frame-pointer walk that went on into junk.
    pub user_stacks_cut: u64,
    /// The kernel locks waited on that a kernel symbol names exactly (a
    /// static lock), by address: named with the kernel's frames, so that
    /// labelling them reads the kernel's symbols no second time.
    pub kernel_objects: FastMap<u64, String>,
}

/// Cuts a user stack at its first address outside executable code, keeping one
/// `[unknown]` frame if nothing before it was code. Returns whether it cut.
pub fn cut_at_junk<F: AsRef<Frame> + From<Frame> + Clone>(
    frames: &mut Vec<F>,
    is_code: impl Fn(u64) -> bool,
) -> bool {
    let is_mark = |f: &F| topwaits_common::walker::is_cut_mark(f.as_ref().addr);
    let junk = frames.iter().position(|f| !is_mark(f) && !is_code(f.as_ref().addr));
    cut_at(frames, junk)
}

/// Cuts a user stack at frame `junk`, the first outside executable code, as
/// [`cut_at_junk`] does; the walker's cut mark, if the stack ended in one, stays
/// its last frame (a stack walked by frame pointers while a table loaded went
/// on into junk, and once cut passed for a whole one). Returns whether it cut.
fn cut_at<F: AsRef<Frame> + From<Frame> + Clone>(frames: &mut Vec<F>, junk: Option<usize>) -> bool {
    let Some(i) = junk else {
        return false;
    };
    let mark =
        frames.last().filter(|f| topwaits_common::walker::is_cut_mark(f.as_ref().addr)).cloned();
    frames.truncate(i.max(1));
    if i == 0 {
        frames[0] = Frame::unknown(frames[0].as_ref().addr).into();
    }
    frames.extend(mark);
    true
}

/// The frame that says why a user stack was cut short (see
/// `topwaits_common::walker::CUT_MARK`), shown as the stack's outermost frame;
/// None for a real address.
pub fn cut_frame(word: u64) -> Option<Frame> {
    use topwaits_common::walker::{cut, is_cut_mark};
    if !is_cut_mark(word) {
        return None;
    }
    let why = match word & !CUT_MARK {
        cut::LOADING => "[cut:table-loading]",
        cut::NO_INFO => "[cut:no-unwind-info]",
        cut::UNREADABLE => "[cut:stack-unreadable]",
        cut::DEPTH => "[cut:depth-limit]",
        cut::UNMAPPED => "[cut:unmapped-code]",
        cut::FULL => "[cut:tables-full]",
        cut::BP_UNKNOWN => "[cut:frame-pointer-unknown]",
        cut::GUESSED => "[cut:scanned-guess]",
        cut::STARTING => "[cut:walker-starting]",
        cut::RAN => "[cut:thread-ran]",
        _ => "[cut]",
    };
    Some(Frame { addr: word, symbol: Some(why.into()), module: None, offset: None })
}

/// The address to look up for frame `i` of a stack at `addr`. Every frame but the
/// leaf is a return address, which points after its call instruction; when that
/// call never returns, it points past the end of the calling function, into the
/// next one. Looking up one byte before it names the caller.
pub fn lookup_addr(i: usize, addr: u64) -> u64 {
    if i == 0 {
        addr
    } else {
        addr.saturating_sub(1)
    }
}

/// Frame `i` of a stack at `addr`, from the frame found at its [`lookup_addr`]:
/// with the real address, and the offset of the real address.
pub fn frame_at(i: usize, addr: u64, found: Option<&Frame>) -> Frame {
    match found {
        Some(f) => {
            let mut f = f.clone();
            let shift = addr - lookup_addr(i, addr);
            f.addr = addr;
            f.offset = f.offset.map(|o| o + shift);
            f
        }
        None => Frame::unknown(addr),
    }
}

/// Symbolizes every record of a capture, each unique address once.
pub fn resolve(capture: &Capture, sym: &mut dyn Symbolizer) -> Resolved {
    sym.report_begins();
    let wanted = wanted_stacks(capture);
    let fixed = with_leaf_callers(capture, &wanted, sym);
    let names = Names::of(capture, &fixed, &wanted, sym);
    let (ns_ids, cgroups) = ids_and_cgroups(capture, sym);
    let mut b = Builder {
        capture,
        fixed,
        names,
        sym,
        built: FastMap::default(),
        shared_frames: FastMap::default(),
        user_stacks_cut: 0,
    };
    let mut out = Vec::with_capacity(capture.records.len());
    for r in &capture.records {
        let wake = r.wake.as_ref().map(|w| {
            let mut hops = Vec::new();
            for h in &w.hops {
                let h = b.hop(h);
                let stop = h.interrupt;
                hops.push(h);
                // An interrupt's "waker" chain would be the interrupted task's.
                if stop {
                    break;
                }
            }
            w.with_hops(hops)
        });
        out.push(Record {
            tgid: r.tgid,
            tid: r.tid,
            comm: r.comm.clone(),
            kernel: b.stack(Space::Kernel, &r.kstack),
            user: b.stack(Space::User(r.tgid), &r.ustack),
            count: r.count,
            total_ns: r.total_ns,
            max_ns: r.max_ns,
            max_end_mono: r.max_end_mono,
            wake,
            open: r.open,
            threads: 1,
            ns_ids: ns_ids.get(&(r.tgid, r.tid)).copied().flatten(),
            cgroup: cgroups.get(&r.tgid).cloned().flatten(),
            waits_on: r.on_cpu.then_some(crate::model::label::WaitsOn::Running),
            ran_on: crate::model::ran_on::of(capture, r),
        });
    }
    let kernel_objects = kernel_objects(capture, &b.names.kernel);
    Resolved { records: out, user_stacks_cut: b.user_stacks_cut, kernel_objects }
}

/// The kernel locks of `capture` that a kernel symbol names exactly.
fn kernel_objects(capture: &Capture, kernel: &FastMap<u64, Frame>) -> FastMap<u64, String> {
    let locks = capture.records.iter().filter(|r| r.what.flags & what::KLOCK != 0);
    let named = |obj: u64| {
        let f = kernel.get(&obj).filter(|f| f.offset == Some(0))?;
        Some((obj, f.symbol.as_deref()?.to_string()))
    };
    locks.filter_map(|r| named(r.what.obj)).collect()
}

/// Every (space, stack id) the records use, targets and hops alike.
fn wanted_stacks(capture: &Capture) -> Vec<(Space, StackId)> {
    let mut wanted: Vec<(Space, StackId)> = Vec::new();
    for r in &capture.records {
        wanted.push((Space::Kernel, r.kstack));
        wanted.push((Space::User(r.tgid), r.ustack));
        for h in r.wake.iter().flat_map(|w| &w.hops) {
            wanted.push((Space::Kernel, h.kstack));
            wanted.push((Space::User(h.tgid), h.ustack));
        }
    }
    wanted
}

/// User stacks that carry words from the stack pointer (`--leaf-callers`): the
/// word that checks out as the leaf's caller goes in as frame 1; the rest go.
/// Checked per process, in one batch; the stacks so fixed, by (tgid, id).
fn with_leaf_callers(
    capture: &Capture,
    wanted: &[(Space, StackId)],
    sym: &mut dyn Symbolizer,
) -> FastMap<(u32, u64), Vec<u64>> {
    // Per process: the stack ids, and each stack's frames and words.
    let mut split: FastMap<u32, (Vec<u64>, Vec<FramesAndWords>)> = FastMap::default();
    let mut seen: FastSet<(u32, u64)> = FastSet::default();
    for (space, id) in wanted {
        let (Space::User(t), StackId::Id(n)) = (space, id) else { continue };
        let Some(addrs) = capture.stacks.get(n) else { continue };
        if !addrs.iter().any(|a| a & LEAF_WORD != 0) || !seen.insert((*t, *n)) {
            continue;
        }
        let (frames, words): (Vec<u64>, Vec<u64>) =
            addrs.iter().partition(|&&a| a & LEAF_WORD == 0);
        let words: Vec<u64> = words.iter().map(|w| w & !LEAF_WORD).collect();
        let (ids, stacks) = split.entry(*t).or_default();
        ids.push(*n);
        stacks.push((frames, words));
    }
    let mut fixed: FastMap<(u32, u64), Vec<u64>> = FastMap::default();
    for (t, (ids, stacks)) in split {
        let callers = sym.leaf_callers(t, &stacks);
        for ((n, (mut frames, _)), caller) in ids.into_iter().zip(stacks).zip(callers) {
            if let Some(caller) = caller {
                frames.insert(1, caller);
            }
            fixed.insert((t, n), frames);
        }
    }
    fixed
}

/// The addresses of a stack: its leaf-caller-fixed version if it has one.
fn stack_of<'a>(
    capture: &'a Capture,
    fixed: &'a FastMap<(u32, u64), Vec<u64>>,
    space: &Space,
    id: &StackId,
) -> Option<&'a [u64]> {
    match (space, id) {
        (Space::User(t), StackId::Id(i)) => {
            fixed.get(&(*t, *i)).or_else(|| capture.stacks.get(i)).map(|v| v.as_slice())
        }
        (Space::Kernel, StackId::Id(i)) => capture.stacks.get(i).map(|v| v.as_slice()),
        _ => None,
    }
}

/// Every address the stacks hold, named: the kernel's in one batch, each
/// process's in one, and Python frames by their words.
struct Names {
    kernel: FastMap<u64, Frame>,
    user: FastMap<(u32, u64), Frame>,
    /// The frames inlined at a user address, innermost first (see
    /// [`Symbolizer::user`]).
    inlined: FastMap<(u32, u64), Vec<Frame>>,
    python: FastMap<(u32, u64), Frame>,
}

impl Names {
    fn of(
        capture: &Capture,
        fixed: &FastMap<(u32, u64), Vec<u64>>,
        wanted: &[(Space, StackId)],
        sym: &mut dyn Symbolizer,
    ) -> Names {
        // Sets, not lists: 20,000 stacks of 30 frames may hold a few hundred addresses.
        let mut kset: FastSet<u64> = FastSet::default();
        let mut per_proc: FastMap<u32, FastSet<u64>> = FastMap::default();
        let mut python: FastMap<u32, FastSet<u64>> = FastMap::default();
        for (space, id) in wanted {
            let Some(addrs) = stack_of(capture, fixed, space, id) else { continue };
            let looked_up = |(i, &a): (usize, &u64)| lookup_addr(i, a);
            match space {
                Space::Kernel => kset.extend(addrs.iter().enumerate().map(looked_up)),
                Space::User(t) => {
                    let native =
                        |(_, &a): &(usize, &u64)| a & CUT_MARK == 0 && !is_runtime_frame(a);
                    let addresses = addrs.iter().enumerate().filter(native).map(looked_up);
                    per_proc.entry(*t).or_default().extend(addresses);
                    let words = addrs.iter().copied().filter(|&a| is_runtime_frame(a));
                    python.entry(*t).or_default().extend(words);
                }
            }
        }
        // Kernel locks waited on, by their own address (a static one is a symbol).
        let locks = capture.records.iter().filter(|r| r.what.flags & what::KLOCK != 0);
        kset.extend(locks.map(|r| r.what.obj).filter(|&a| a != 0));
        let mut kaddrs: Vec<u64> = kset.into_iter().collect();
        kaddrs.sort_unstable();
        let kernel = if kaddrs.is_empty() {
            FastMap::default()
        } else {
            sym.kernel(&kaddrs).into_iter().map(|f| (f.addr, f)).collect()
        };
        let mut user: FastMap<(u32, u64), Frame> = FastMap::default();
        let mut inlined: FastMap<(u32, u64), Vec<Frame>> = FastMap::default();
        let mut tgids: Vec<_> = per_proc.keys().copied().collect();
        tgids.sort_unstable();
        for tgid in tgids {
            let mut addrs: Vec<u64> =
                per_proc.remove(&tgid).unwrap_or_default().into_iter().collect();
            addrs.sort_unstable();
            let mut before: Vec<Frame> = Vec::new();
            let mut got = sym.user(tgid, &addrs).into_iter().peekable();
            while let Some(f) = got.next() {
                if got.peek().is_some_and(|next| next.addr == f.addr) {
                    before.push(f);
                    continue;
                }
                if !before.is_empty() {
                    inlined.insert((tgid, f.addr), std::mem::take(&mut before));
                }
                user.insert((tgid, f.addr), f);
            }
        }
        // Python frames, by their words (never looked up a byte back).
        let mut pyframes: FastMap<(u32, u64), Frame> = FastMap::default();
        for (tgid, words) in python {
            let words: Vec<u64> = words.into_iter().collect();
            for f in sym.python(tgid, &words) {
                pyframes.insert((tgid, f.addr), f);
            }
        }
        Names { kernel, user, inlined, python: pyframes }
    }
}

/// Each thread's (pid, tid) in its own PID namespace, by (tgid, tid).
type NsIds = FastMap<(u32, u32), Option<(u32, u32)>>;
/// Each process's cgroup path, by tgid.
type Cgroups = FastMap<u32, Option<Arc<str>>>;

/// Each thread's ids in its own PID namespace, asked once per thread, and each
/// process's cgroup, asked once per process (records share its text).
fn ids_and_cgroups(capture: &Capture, sym: &mut dyn Symbolizer) -> (NsIds, Cgroups) {
    let mut ns_ids = NsIds::default();
    let mut cgroups = Cgroups::default();
    let mut paths: FastSet<Arc<str>> = FastSet::default();
    for r in &capture.records {
        ns_ids.entry((r.tgid, r.tid)).or_insert_with(|| sym.ns_ids(r.tgid, r.tid));
        cgroups.entry(r.tgid).or_insert_with(|| {
            let path = sym.cgroup(r.tgid)?;
            if let Some(p) = paths.get(path.as_str()) {
                return Some(p.clone());
            }
            let p: Arc<str> = Arc::from(path);
            paths.insert(p.clone());
            Some(p)
        });
    }
    (ns_ids, cgroups)
}

/// Builds each (space, stack id) once, shared by every record using it, and
/// each frame (space, address, leaf or not) once, shared by every stack.
struct Builder<'a> {
    capture: &'a Capture,
    fixed: FastMap<(u32, u64), Vec<u64>>,
    names: Names,
    sym: &'a dyn Symbolizer,
    built: FastMap<(Option<u32>, u64), Stack>,
    shared_frames: FastMap<FrameKey, SharedFrame>,
    user_stacks_cut: u64,
}

impl Builder<'_> {
    fn stack(&mut self, space: Space, id: &StackId) -> Stack {
        let n = match id {
            StackId::None => return Stack::None,
            StackId::Lost(_) => return Stack::Missing,
            StackId::Id(n) => n,
        };
        let key = (if let Space::User(t) = space { Some(t) } else { None }, *n);
        if let Some(s) = self.built.get(&key) {
            return s.clone();
        }
        let stack = match stack_of(self.capture, &self.fixed, &space, id) {
            None => match self.capture.named.get(n) {
                Some(frames) => Stack::of(frames.clone()),
                // An id whose trace is gone from the map is as good as lost.
                None => Stack::Missing,
            },
            Some(addrs) => {
                let shared = &mut self.shared_frames;
                let (mut frames, junk) = frames(&self.names, self.sym, shared, space, key.0, addrs);
                match space {
                    Space::Kernel => trim_machinery(&mut frames),
                    Space::User(_) => {
                        if cut_at(&mut frames, junk) {
                            self.user_stacks_cut += 1;
                        }
                    }
                }
                Stack::shared(frames)
            }
        };
        self.built.insert(key, stack.clone());
        stack
    }

    fn hop(&mut self, h: &RawHop) -> Hop {
        let mut hop = Hop {
            tgid: h.tgid,
            tid: h.tid,
            comm: h.comm.clone(),
            kernel: self.stack(Space::Kernel, &h.kstack),
            user: self.stack(Space::User(h.tgid), &h.ustack),
            interrupt: false,
        };
        crate::stacks::interrupts::classify_interrupt(&mut hop);
        hop
    }
}

/// A stack's frames, and where junk begins: a word that is not code, or a
/// cut mark that is not the stack's last word.
fn frames(
    names: &Names,
    sym: &dyn Symbolizer,
    shared_frames: &mut FastMap<FrameKey, SharedFrame>,
    space: Space,
    owner: Option<u32>,
    addrs: &[u64],
) -> (Vec<Arc<Frame>>, Option<usize>) {
    let mut junk = None;
    let mut frames = Vec::with_capacity(addrs.len());
    for (i, &a) in addrs.iter().enumerate() {
        // Only a stack's last word is the walker's cut mark: a word like one
        // anywhere else is junk a frame-pointer walk read (shown as "[cut]"
        // mid-stack, once).
        if i + 1 < addrs.len() && cut_frame(a).is_some() {
            junk.get_or_insert(frames.len());
            frames.push(Arc::new(Frame::unknown(a)));
            continue;
        }
        let shared = shared_frames
            .entry((owner, a, i == 0))
            .or_insert_with(|| frame_named(names, sym, space, i, a));
        frames.extend(shared.inlined.iter().cloned());
        if !shared.code && junk.is_none() {
            junk = Some(frames.len());
        }
        frames.push(shared.frame.clone());
    }
    (frames, junk)
}

/// A frame named once per report, shared by every stack that has it.
struct SharedFrame {
    frame: Arc<Frame>,
    /// Whether it lies in executable code (user frames; kernel ones always).
    code: bool,
    /// The frames inlined at its address, which go before it (see
    /// [`Symbolizer::user`]).
    inlined: Vec<Arc<Frame>>,
}

impl SharedFrame {
    fn of(frame: Frame, code: bool) -> Self {
        SharedFrame { frame: Arc::new(frame), code, inlined: Vec::new() }
    }
}

/// Frame `i` of a stack, word `a`, named.
fn frame_named(names: &Names, sym: &dyn Symbolizer, space: Space, i: usize, a: u64) -> SharedFrame {
    if let (Space::User(_), Some(cut)) = (&space, cut_frame(a)) {
        return SharedFrame::of(cut, true);
    }
    if let (Space::User(t), true) = (&space, is_runtime_frame(a)) {
        let f = names.python.get(&(*t, a)).cloned().unwrap_or_else(|| Frame::unknown(a));
        return SharedFrame::of(f, true);
    }
    let l = lookup_addr(i, a);
    match space {
        Space::Kernel => SharedFrame::of(frame_at(i, a, names.kernel.get(&l)), true),
        Space::User(t) => {
            let inlined = names.inlined.get(&(t, l)).map_or_else(Vec::new, |fs| {
                fs.iter().map(|f| Arc::new(frame_at(i, a, Some(f)))).collect()
            });
            let frame = frame_at(i, a, names.user.get(&(t, l)));
            SharedFrame { inlined, ..SharedFrame::of(frame, sym.is_code(t, a)) }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;

    use crate::model::RawRecord;

    /// Names every address `k_<hex>` or `u<tgid>_<hex>`, and counts calls.
    #[derive(Default)]
    pub(crate) struct FakeSymbolizer {
        pub names: HashMap<u64, String>,
        pub kernel_calls: usize,
        pub user_calls: usize,
        /// `leaf_callers` answers with the words it is given that are listed here,
        /// and counts its batches.
        pub callers: Vec<u64>,
        pub leaf_batches: usize,
        /// Kernel addresses that lie inside a symbol, not at its start.
        pub kernel_inside: Vec<u64>,
        /// Names of frames inlined at a user address, given before its own.
        pub inlined: HashMap<u64, Vec<String>>,
    }

    impl Symbolizer for FakeSymbolizer {
        fn kernel(&mut self, addrs: &[u64]) -> Vec<Frame> {
            self.kernel_calls += 1;
            addrs
                .iter()
                .map(|&a| Frame {
                    addr: a,
                    symbol: Some(self.names.get(&a).cloned().unwrap_or(format!("k_{a:x}")).into()),
                    module: None,
                    offset: Some(if self.kernel_inside.contains(&a) { 0x10 } else { 0 }),
                })
                .collect()
        }
        fn user(&mut self, tgid: u32, addrs: &[u64]) -> Vec<Frame> {
            self.user_calls += 1;
            let inlined = |a: u64| {
                let names = self.inlined.get(&a).cloned().unwrap_or_default();
                names.into_iter().map(move |n| Frame {
                    addr: a,
                    symbol: Some(n.into()),
                    module: None,
                    offset: None,
                })
            };
            addrs.iter().flat_map(|&a| inlined(a).chain([self.own(tgid, a)])).collect()
        }
        fn leaf_callers(
            &mut self,
            _tgid: u32,
            stacks: &[(Vec<u64>, Vec<u64>)],
        ) -> Vec<Option<u64>> {
            self.leaf_batches += 1;
            stacks
                .iter()
                .map(|(_, words)| words.iter().copied().find(|w| self.callers.contains(w)))
                .collect()
        }
    }

    impl FakeSymbolizer {
        /// The frame of user address `a` itself.
        fn own(&self, tgid: u32, a: u64) -> Frame {
            match self.names.get(&a) {
                Some(n) if n == "?" => Frame::unknown(a),
                Some(n) => Frame {
                    addr: a,
                    symbol: Some(n.as_str().into()),
                    module: Some("app".into()),
                    offset: Some(4),
                },
                None => Frame {
                    addr: a,
                    symbol: Some(format!("u{tgid}_{a:x}").into()),
                    module: Some("app".into()),
                    offset: Some(4),
                },
            }
        }
    }

    /// A record of process 10 with one 5 ns wait and these stacks.
    fn raw(tid: u32, kstack: StackId, ustack: StackId) -> RawRecord {
        RawRecord { kstack, ustack, ..crate::model::fixtures::raw_record(10, tid) }
    }

    fn names(list: &[(u64, &str)]) -> HashMap<u64, String> {
        list.iter().map(|(a, n)| (*a, n.to_string())).collect()
    }

    fn frame(name: Option<&str>) -> Frame {
        Frame { addr: 1, symbol: name.map(Into::into), module: None, offset: None }
    }

    #[test]
    fn a_return_address_past_a_noreturn_call_names_the_caller() {
        // The caller ends at 0x1000 with a call that never returns; the next
        // function starts there. Frame 1's return address is 0x1000.
        let caller =
            Frame { addr: 0xfff, symbol: Some("caller".into()), module: None, offset: Some(0x3f) };
        let f = frame_at(1, 0x1000, Some(&caller));
        assert_eq!((f.name().as_ref(), f.addr, f.offset), ("caller", 0x1000, Some(0x40)));
        assert_eq!(lookup_addr(1, 0x1000), 0xfff);
        assert_eq!(
            lookup_addr(0, 0x1000),
            0x1000,
            "the leaf is where the thread is, not a return address"
        );
        assert_eq!(frame_at(0, 0x1000, None), Frame::unknown(0x1000));
    }

    #[test]
    fn a_user_stack_is_cut_at_its_first_junk_address() {
        let mut f = vec![
            Frame::unknown(0x10),
            Frame::unknown(0x20),
            Frame::unknown(0x9000),
            Frame::unknown(0x30),
        ];
        assert!(cut_at_junk(&mut f, |a| a < 0x1000));
        assert_eq!(f.iter().map(|f| f.addr).collect::<Vec<_>>(), [0x10, 0x20]);
        let mut all_junk = vec![Frame {
            addr: 0x9000,
            symbol: Some("_PyRuntime".into()),
            module: None,
            offset: None,
        }];
        assert!(cut_at_junk(&mut all_junk, |a| a < 0x1000));
        assert_eq!(all_junk, [Frame::unknown(0x9000)], "junk is never named");
        let mut clean = vec![Frame::unknown(0x10)];
        assert!(!cut_at_junk(&mut clean, |_| true));
        // A stack the walker marked cut (by frame pointers while a table
        // loaded) keeps its mark when its junk goes: it never passes for whole.
        let mark = topwaits_common::walker::CUT_MARK | topwaits_common::walker::cut::LOADING;
        let mut marked =
            vec![Frame::unknown(0x10), Frame::unknown(0x9000), cut_frame(mark).unwrap()];
        assert!(cut_at_junk(&mut marked, |a| a < 0x1000));
        assert_eq!(marked.iter().map(|f| f.addr).collect::<Vec<_>>(), [0x10, mark]);
        assert!(Stack::of(marked).is_cut());
    }

    #[test]
    fn trims_program_trace_run_and_traceiter_frames() {
        let mut f = vec![
            frame(None),
            frame(Some("bpf_trace_run4")),
            frame(Some("__traceiter_sched_switch")),
            frame(Some("__schedule")),
            frame(Some("schedule")),
        ];
        trim_machinery(&mut f);
        let names: Vec<_> = f.iter().map(|f| f.name().to_string()).collect();
        assert_eq!(names, ["__schedule", "schedule"]);
    }

    #[test]
    fn leaves_stacks_without_machinery_alone() {
        let mut f = vec![frame(None), frame(Some("__schedule")), frame(Some("schedule"))];
        trim_machinery(&mut f);
        assert_eq!(f.len(), 3);
        let mut deep = vec![frame(Some("a")); 9];
        deep.push(frame(Some("bpf_trace_run4")));
        trim_machinery(&mut deep);
        assert_eq!(deep.len(), 10, "only the leaf end is trimmed");
    }

    /// A JVM's compiled frame comes with the methods inlined at its call:
    /// they go before it, innermost first, in every stack that has it, and the
    /// stack's own frames keep their order around them.
    #[test]
    fn frames_inlined_at_an_address_go_before_its_own() {
        let capture = Capture {
            records: vec![
                raw(11, StackId::None, StackId::Id(1)),
                raw(12, StackId::None, StackId::Id(2)),
            ],
            stacks: [(1, vec![0x10, 0x41, 0x61]), (2, vec![0x41])].into_iter().collect(),
            ..Default::default()
        };
        let mut sym = FakeSymbolizer {
            names: names(&[(0x40, "Turns.lambda (Turns.java:21)")]),
            inlined: [(
                0x40,
                vec!["Turns.sleep (Turns.java:8)".into(), "Turns.handle (Turns.java:13)".into()],
            )]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let recs = resolve(&capture, &mut sym).records;
        let u = |i: usize| -> Vec<String> {
            recs[i].user.frames().iter().map(|f| f.name().to_string()).collect()
        };
        assert_eq!(
            u(0),
            [
                "u10_10",
                "Turns.sleep (Turns.java:8)",
                "Turns.handle (Turns.java:13)",
                "Turns.lambda (Turns.java:21)",
                "u10_60"
            ]
        );
        // As a leaf the address is looked up as itself, where nothing is inlined.
        assert_eq!(u(1), ["u10_41"]);
        assert!(recs[0].user.frames()[1..4].iter().all(|f| f.addr == 0x41), "the call's address");
    }

    #[test]
    fn resolves_each_address_once_and_keeps_missing_stacks() {
        let capture = Capture {
            records: vec![
                raw(11, StackId::Id(1), StackId::Id(2)),
                RawRecord {
                    comm: b"b".to_vec(),
                    total_ns: 7,
                    count: 2,
                    max_ns: 4,
                    ..raw(12, StackId::Lost(-12), StackId::Id(99))
                },
            ],
            stacks: [(1, vec![0x100, 0x200, 0x300]), (2, vec![0x10, 0x20])].into_iter().collect(),
            ..Default::default()
        };
        let mut sym = FakeSymbolizer {
            // Return addresses (every frame but the leaf) are looked up one byte back.
            names: names(&[(0x100, "bpf_trace_run4"), (0x1ff, "__schedule"), (0x1f, "?")]),
            ..Default::default()
        };
        let recs = resolve(&capture, &mut sym).records;
        assert_eq!((sym.kernel_calls, sym.user_calls), (1, 1));
        let k: Vec<_> = recs[0].kernel.frames().iter().map(|f| f.name().to_string()).collect();
        assert_eq!(k, ["__schedule", "k_2ff"]);
        let u: Vec<_> = recs[0].user.frames().iter().map(|f| f.name().to_string()).collect();
        assert_eq!(u, ["u10_10", "[unknown]"]);
        assert_eq!(recs[0].kernel.frames()[0].addr, 0x200, "frames keep their real address");
        assert_eq!(recs[1].kernel, Stack::Missing);
        assert_eq!(recs[1].user, Stack::Missing, "an id absent from the stack map is missing");
        assert_eq!(recs[1].total_ns, 7);
    }

    /// A user stack's last word is the walker's cut mark, shown as the frame that
    /// says why; a word like a mark anywhere else is junk a frame-pointer walk
    /// read, and the stack is cut there, its own mark kept (nginx's `ab` showed
    /// `apr_socket_send <- [cut] <- [cut:unmapped-code]`).
    #[test]
    fn only_a_stacks_last_word_is_a_cut_mark() {
        use topwaits_common::walker::{cut, CUT_MARK};
        let capture = Capture {
            records: vec![
                raw(11, StackId::None, StackId::Id(1)),
                raw(12, StackId::None, StackId::Id(2)),
            ],
            stacks: [
                (1, vec![0x10, 0x20, CUT_MARK | 0x1234, 0x30, CUT_MARK | cut::UNMAPPED]),
                (2, vec![0x10, CUT_MARK | cut::UNMAPPED]),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let recs = resolve(&capture, &mut FakeSymbolizer::default()).records;
        let names =
            |r: &Record| r.user.frames().iter().map(|f| f.name().to_string()).collect::<Vec<_>>();
        assert_eq!(names(&recs[0]), ["u10_10", "u10_1f", "[cut:unmapped-code]"]);
        assert_eq!(names(&recs[1]), ["u10_10", "[cut:unmapped-code]"]);
        assert!(recs[0].user.is_cut() && recs[1].user.is_cut());
    }

    /// Stacks share their frames: one per (process, address, leaf or not), so that
    /// thousands of unique stacks through the same functions cost a pointer a slot.
    #[test]
    fn unique_stacks_share_their_frames() {
        let capture = Capture {
            records: vec![
                raw(11, StackId::Id(1), StackId::Id(3)),
                raw(12, StackId::Id(2), StackId::Id(4)),
            ],
            stacks: [
                (1, vec![0x100, 0x200]),
                (2, vec![0x100, 0x300]),
                (3, vec![0x10, 0x20]),
                (4, vec![0x20, 0x30]),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let recs = resolve(&capture, &mut FakeSymbolizer::default()).records;
        let (k0, k1) = (recs[0].kernel.frames(), recs[1].kernel.frames());
        assert!(Arc::ptr_eq(&k0[0], &k1[0]), "the same leaf is one frame");
        assert_eq!((k0[1].addr, k1[1].addr), (0x200, 0x300));
        let (u0, u1) = (recs[0].user.frames(), recs[1].user.frames());
        // 0x20 is a return address in one stack and the leaf in the other: looked
        // up differently (one byte back for a return address), so two frames.
        assert!(!Arc::ptr_eq(&u0[1], &u1[0]));
        assert_eq!((u0[1].addr, u1[0].addr), (0x20, 0x20));
    }

    /// With `--leaf-callers`, the words after a user stack's frames go; the one
    /// that checks out becomes frame 1. A process's stacks are checked in one batch.
    #[test]
    fn leaf_words_give_way_to_the_checked_caller() {
        use topwaits_common::LEAF_WORD;
        let capture = Capture {
            records: vec![
                raw(11, StackId::None, StackId::Id(1)),
                raw(12, StackId::None, StackId::Id(2)),
            ],
            stacks: [
                (1, vec![0x10, 0x30, 0x77 | LEAF_WORD, 0x21 | LEAF_WORD]),
                (2, vec![0x10, 0x30, 0x55 | LEAF_WORD]),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let mut sym = FakeSymbolizer { callers: vec![0x21], ..Default::default() };
        let recs = resolve(&capture, &mut sym).records;
        let addrs = |r: &Record| r.user.frames().iter().map(|f| f.addr).collect::<Vec<_>>();
        assert_eq!(addrs(&recs[0]), [0x10, 0x21, 0x30]);
        assert_eq!(addrs(&recs[1]), [0x10, 0x30], "no word checked out: the walk as it was");
        assert_eq!(sym.leaf_batches, 1);
    }

    /// A kernel lock waited on is named where a kernel symbol starts at its
    /// address (a static lock), by the report's one kernel batch.
    #[test]
    fn static_kernel_locks_are_named_with_the_kernel_frames() {
        use topwaits_common::{what, What};
        let lock = |tid, obj| RawRecord {
            what: What { flags: what::KLOCK, obj, ..Default::default() },
            ..raw(tid, StackId::None, StackId::None)
        };
        let not_a_lock = RawRecord {
            what: What { obj: 0xc0, ..Default::default() },
            ..raw(3, StackId::None, StackId::None)
        };
        let capture = Capture {
            records: vec![lock(1, 0xa0), lock(2, 0xb0), not_a_lock],
            ..Default::default()
        };
        let mut sym = FakeSymbolizer {
            names: names(&[(0xa0, "rtnl_mutex"), (0xb0, "some_struct")]),
            kernel_inside: vec![0xb0],
            ..Default::default()
        };
        let objects = resolve(&capture, &mut sym).kernel_objects;
        assert_eq!(objects.into_iter().collect::<Vec<_>>(), [(0xa0, "rtnl_mutex".to_string())]);
        assert_eq!(sym.kernel_calls, 1, "one batch with the stacks' frames");
    }
}
