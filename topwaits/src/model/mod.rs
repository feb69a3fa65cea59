//! Plain data that flows from the kernel maps to the reports: raw records as drained,
//! loss counters, and symbolized records (no aya, no I/O); below it, what a wait
//! was for (`label`), per-thread profiles (`profile`) and record files
//! (`recording`, the one module here that reads and writes).

pub mod label;
pub mod profile;
pub mod ran_on;
pub mod recording;

use std::collections::HashMap;
use std::sync::Arc;

use crate::util::clock::ClockPair;

/// What a record's stack-id slot held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StackId {
    /// A stored stack: its reference (with `STACK_STORED` set) in the kernel or
    /// user stack map, or (with [`SNAPSHOT_STACK`]) a stack read from `/proc`.
    Id(u64),
    /// No stack was asked for, or none exists (a kernel thread's user stack).
    None,
    /// The kernel could not take or store the stack; the value is the negated errno.
    Lost(i32),
}

impl StackId {
    /// Decodes a stack reference, kernel or user, of a wait or a waker.
    pub fn from_ref(raw: u64) -> Self {
        match raw {
            topwaits_common::STACK_NONE => StackId::None,
            r if r & topwaits_common::STACK_STORED != 0 => StackId::Id(r),
            r => StackId::Lost(-(r.min(i32::MAX as u64) as i32)),
        }
    }
}

/// Set in the stack ids that user space gave stacks it read from `/proc` (waits that
/// began before the trace); clear in the kernel's stack references (bit 63 set).
pub const SNAPSHOT_STACK: u64 = 1 << 62;

/// One aggregate row as drained from the kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    pub tgid: u32,
    pub tid: u32,
    /// `comm` bytes up to the first NUL (may be empty or non-UTF-8).
    pub comm: Vec<u8>,
    pub kstack: StackId,
    pub ustack: StackId,
    pub total_ns: u64,
    pub count: u64,
    pub max_ns: u64,
    /// CLOCK_MONOTONIC ns at which the longest wait ended.
    pub max_end_mono: u64,
    /// With `--waker`: who woke it, and the blocked/run-queue split.
    pub wake: Option<WakeInfo<RawHop>>,
    /// A wait still in progress when the trace ended: one wait, whose time so far is
    /// `max_ns` and whose "end" `max_end_mono` is the end of the trace.
    pub open: Option<OpenSince>,
    /// What the wait was for, as the kernel saw it (classified into
    /// [`Record::waits_on`]).
    pub what: topwaits_common::What,
    /// Not a wait: on-CPU samples of the thread at these stacks (`--on-cpu`);
    /// `count` is the samples, `total_ns` their time, `max_end_mono` the last.
    pub on_cpu: bool,
}

/// When a wait still in progress at the end of the trace began.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum OpenSince {
    /// Seen to begin during the trace, at this CLOCK_MONOTONIC ns.
    Exact(u64),
    /// Began before the trace; estimated from the scheduler's clock.
    Estimated(u64),
    /// Began before the trace, at an unknown time.
    BeforeTrace,
}

impl OpenSince {
    /// The start as CLOCK_MONOTONIC ns, where known or estimated.
    pub fn mono(self) -> Option<u64> {
        match self {
            OpenSince::Exact(t) | OpenSince::Estimated(t) => Some(t),
            OpenSince::BeforeTrace => None,
        }
    }
}

/// How a wait ended, with `--waker`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum WakeKind {
    /// Woken by the recorded hops.
    Woken,
    /// Slept, but no wakeup was seen.
    NoWaker,
    /// Switched out runnable; nobody had to wake it.
    Preempted,
    /// Still blocked when the trace ended: not woken yet.
    NotYet,
}

/// A waker as drained: ids and stack ids.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawHop {
    pub tgid: u32,
    pub tid: u32,
    pub comm: Vec<u8>,
    pub kstack: StackId,
    pub ustack: StackId,
}

/// A kernel comm (NUL-padded) as its bytes.
pub fn comm_bytes(comm: &[u8]) -> Vec<u8> {
    let len = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    comm[..len].to_vec()
}

/// A kernel waker hop as a raw hop.
pub fn raw_hop(h: &topwaits_common::Hop) -> RawHop {
    RawHop {
        tgid: h.tgid,
        tid: h.tid,
        comm: comm_bytes(&h.comm),
        kstack: StackId::from_ref(h.kstack),
        ustack: StackId::from_ref(h.ustack),
    }
}

/// A symbolized waker.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Hop {
    pub tgid: u32,
    pub tid: u32,
    pub comm: Vec<u8>,
    pub kernel: Stack,
    pub user: Stack,
    /// The wakeup ran in interrupt context. The ids are then 0 and the comm empty:
    /// the task the interrupt happened to hit is no waker.
    pub interrupt: bool,
}

/// The waker side of a record: the chain (hop 0 woke the target) and the split.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WakeInfo<H> {
    pub kind: WakeKind,
    pub hops: Vec<H>,
    /// Switch-out to wakeup.
    pub blocked_ns: u64,
    /// Wakeup to switch-in.
    pub runq_ns: u64,
    pub max_blocked_ns: u64,
    pub max_runq_ns: u64,
}

impl<H> WakeInfo<H> {
    /// The same split with other hops.
    pub fn with_hops<J>(&self, hops: Vec<J>) -> WakeInfo<J> {
        WakeInfo {
            kind: self.kind,
            hops,
            blocked_ns: self.blocked_ns,
            runq_ns: self.runq_ns,
            max_blocked_ns: self.max_blocked_ns,
            max_runq_ns: self.max_runq_ns,
        }
    }
}

/// Event and loss counters, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub switches: u64,
    pub recorded: u64,
    pub outside_block_time: u64,
    pub lost_kernel_stacks: u64,
    pub lost_user_stacks: u64,
    pub aggregate_full: u64,
    pub aggregate_full_ns: u64,
    pub start_full: u64,
    pub negative_deltas: u64,
    pub wakings: u64,
    pub wake_full: u64,
    /// Wakeups whose chain did not fit into the full chain map.
    pub chains_full: u64,
    /// Kernel stacks of waits reused in place rather than unwound.
    pub kstacks_reused: u64,
    /// Kernel stacks of wakers reused in place rather than unwound.
    pub waker_kstacks_reused: u64,
    /// Of those two, the stacks reused from a layout another task learned.
    pub kstacks_shared: u64,
    /// Unique user stacks cut at their first address outside executable code (set
    /// by symbolization, per report; not a kernel counter).
    pub user_stacks_cut: u64,
    /// Long waits sent as events (`--events-over`), and those the full ring buffer
    /// could not take.
    #[serde(default)]
    pub wait_events: u64,
    #[serde(default)]
    pub lost_wait_events: u64,
    /// Waits whose end (the task's switch-in) the hook never saw, and which could
    /// not be dated from the task's run time, so are missing.
    #[serde(default)]
    pub unended: u64,
    /// Waits whose switch-in the hook never saw, recorded with the end their task's
    /// run time since that switch-in gives.
    #[serde(default)]
    pub ends_estimated: u64,
    /// Process events (a first sight, a fork, an exec, a table asked for) the
    /// full ring buffer could not take: their processes' frames may go unnamed.
    #[serde(default)]
    pub lost_proc_events: u64,
    /// On-CPU samples of traced threads, those the full sample map could not
    /// count, and those whose time the full ring buffer could not take.
    #[serde(default)]
    pub samples: u64,
    #[serde(default)]
    pub lost_samples: u64,
    #[serde(default)]
    pub lost_sample_events: u64,
    /// Waits already in progress when the trace began, recorded from its start;
    /// those whose user stack was walked while they waited; and those that
    /// ended first, left out, and their time.
    #[serde(default)]
    pub seeded: u64,
    #[serde(default)]
    pub seeded_walked: u64,
    #[serde(default)]
    pub seeded_unwalked: u64,
    #[serde(default)]
    pub seeded_unwalked_ns: u64,
    /// Goroutine waits recorded (Go programs), and those whose waker was seen.
    #[serde(default)]
    pub goroutine_waits: u64,
    #[serde(default)]
    pub goroutine_wakeups: u64,
    /// Of the goroutine waits, those kept by stack rather than by goroutine,
    /// after the aggregate was half full (see `Settings::go_merge_rows`).
    #[serde(default)]
    pub goroutine_waits_by_stack: u64,
    /// Starts of a goroutine on a thread not counted, the map of the threads
    /// goroutines ran on being full: that thread is missing from its list.
    #[serde(default)]
    pub goroutine_threads_lost: u64,
    /// Time the threads of Go programs whose goroutines are traced spent idle
    /// in the Go scheduler, left out (set per report; not a kernel counter).
    #[serde(default)]
    pub go_scheduler_idle_ns: u64,
}

impl Counters {
    /// Builds from the per-index sums of the COUNTERS map.
    pub fn from_slots(s: &[u64]) -> Self {
        use topwaits_common::counter as c;
        let at = |i: u32| s.get(i as usize).copied().unwrap_or(0);
        Counters {
            switches: at(c::SWITCHES),
            // Waits of held rows that did not fit into the aggregate were counted
            // when held (see `Settings::hold_rows`).
            recorded: at(c::RECORDED).saturating_sub(at(c::HELD_LOST)),
            outside_block_time: at(c::OUTSIDE_BLOCK_TIME),
            lost_kernel_stacks: at(c::LOST_KERNEL_STACK),
            lost_user_stacks: at(c::LOST_USER_STACK),
            aggregate_full: at(c::LOST_AGG_FULL),
            aggregate_full_ns: at(c::LOST_AGG_FULL_NS),
            start_full: at(c::LOST_START_FULL),
            negative_deltas: at(c::NEGATIVE_DELTA),
            wakings: at(c::WAKINGS),
            wake_full: at(c::LOST_WAKE_FULL),
            chains_full: at(c::LOST_CHAINS_FULL),
            kstacks_reused: at(c::KSTACK_REUSED),
            waker_kstacks_reused: at(c::WAKER_KSTACK_REUSED),
            kstacks_shared: at(c::KSTACK_SHARED),
            user_stacks_cut: 0,
            wait_events: at(c::WAIT_EVENTS),
            lost_wait_events: at(c::LOST_WAIT_EVENTS),
            unended: at(c::UNENDED),
            ends_estimated: at(c::ENDS_ESTIMATED),
            lost_proc_events: at(c::LOST_EVENTS),
            samples: at(c::SAMPLES),
            lost_samples: at(c::LOST_SAMPLES_FULL),
            lost_sample_events: at(c::LOST_SAMPLE_EVENTS),
            seeded: at(c::SEEDED),
            seeded_walked: at(c::SEEDED_WALKED),
            seeded_unwalked: at(c::SEEDED_UNWALKED),
            seeded_unwalked_ns: at(c::SEEDED_UNWALKED_NS),
            goroutine_waits: at(c::GO_WAITS),
            goroutine_wakeups: at(c::GO_WAKEUPS),
            goroutine_waits_by_stack: at(c::GO_MERGED),
            goroutine_threads_lost: at(c::GO_RAN_ON_FULL),
            go_scheduler_idle_ns: 0,
        }
    }

    /// The counts since an earlier reading (for interval reports).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters {
            switches: self.switches.saturating_sub(earlier.switches),
            recorded: self.recorded.saturating_sub(earlier.recorded),
            outside_block_time: self.outside_block_time.saturating_sub(earlier.outside_block_time),
            lost_kernel_stacks: self.lost_kernel_stacks.saturating_sub(earlier.lost_kernel_stacks),
            lost_user_stacks: self.lost_user_stacks.saturating_sub(earlier.lost_user_stacks),
            aggregate_full: self.aggregate_full.saturating_sub(earlier.aggregate_full),
            aggregate_full_ns: self.aggregate_full_ns.saturating_sub(earlier.aggregate_full_ns),
            start_full: self.start_full.saturating_sub(earlier.start_full),
            negative_deltas: self.negative_deltas.saturating_sub(earlier.negative_deltas),
            wakings: self.wakings.saturating_sub(earlier.wakings),
            wake_full: self.wake_full.saturating_sub(earlier.wake_full),
            chains_full: self.chains_full.saturating_sub(earlier.chains_full),
            kstacks_reused: self.kstacks_reused.saturating_sub(earlier.kstacks_reused),
            waker_kstacks_reused: self
                .waker_kstacks_reused
                .saturating_sub(earlier.waker_kstacks_reused),
            kstacks_shared: self.kstacks_shared.saturating_sub(earlier.kstacks_shared),
            user_stacks_cut: self.user_stacks_cut,
            wait_events: self.wait_events.saturating_sub(earlier.wait_events),
            lost_wait_events: self.lost_wait_events.saturating_sub(earlier.lost_wait_events),
            unended: self.unended.saturating_sub(earlier.unended),
            ends_estimated: self.ends_estimated.saturating_sub(earlier.ends_estimated),
            lost_proc_events: self.lost_proc_events.saturating_sub(earlier.lost_proc_events),
            samples: self.samples.saturating_sub(earlier.samples),
            lost_samples: self.lost_samples.saturating_sub(earlier.lost_samples),
            lost_sample_events: self.lost_sample_events.saturating_sub(earlier.lost_sample_events),
            seeded: self.seeded.saturating_sub(earlier.seeded),
            seeded_walked: self.seeded_walked.saturating_sub(earlier.seeded_walked),
            seeded_unwalked: self.seeded_unwalked.saturating_sub(earlier.seeded_unwalked),
            seeded_unwalked_ns: self.seeded_unwalked_ns.saturating_sub(earlier.seeded_unwalked_ns),
            goroutine_waits: self.goroutine_waits.saturating_sub(earlier.goroutine_waits),
            goroutine_wakeups: self.goroutine_wakeups.saturating_sub(earlier.goroutine_wakeups),
            goroutine_waits_by_stack: self
                .goroutine_waits_by_stack
                .saturating_sub(earlier.goroutine_waits_by_stack),
            goroutine_threads_lost: self
                .goroutine_threads_lost
                .saturating_sub(earlier.goroutine_threads_lost),
            go_scheduler_idle_ns: self.go_scheduler_idle_ns,
        }
    }

    /// Everything lost, for a status line.
    pub fn lost_total(&self) -> u64 {
        self.lost_kernel_stacks
            + self.lost_user_stacks
            + self.aggregate_full
            + self.start_full
            + self.negative_deltas
            + self.wake_full
            + self.chains_full
            + self.lost_wait_events
            + self.unended
            + self.lost_proc_events
            + self.lost_samples
            + self.lost_sample_events
    }

    /// Whether anything was lost.
    pub fn any_loss(&self) -> bool {
        self.lost_total() > 0
    }

    /// One warning line per kind of loss, each with the fix to apply.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let stacks = self.lost_kernel_stacks + self.lost_user_stacks;
        if stacks > 0 {
            w.push(format!(
                "{stacks} stack traces could not be stored ({} kernel, {} user); their time is kept under \
                 [missing ... stack] frames; increase --stack-storage-size",
                self.lost_kernel_stacks, self.lost_user_stacks
            ));
        }
        if self.aggregate_full > 0 {
            w.push(format!(
                "{} waits ({:.3} ms) did not fit into the full aggregate map; increase --max-entries",
                self.aggregate_full,
                self.aggregate_full_ns as f64 / 1e6
            ));
        }
        if self.lost_proc_events > 0 {
            w.push(format!(
                "{} process events were lost (the ring buffer was full): some processes' frames may be unnamed or their stacks walked by frame pointers",
                self.lost_proc_events
            ));
        }
        if self.lost_samples > 0 {
            w.push(format!(
                "{} on-CPU samples did not fit into the full sample map (their running time is missing); raise --max-entries",
                self.lost_samples
            ));
        }
        if self.lost_sample_events > 0 {
            w.push(format!(
                "{} on-CPU samples could not be sent with their times (the ring buffer was full): they count in the totals but are missing from the Perfetto trace",
                self.lost_sample_events
            ));
        }
        if self.start_full > 0 {
            w.push(format!("{} switch-outs did not fit into the full per-task start map; narrow the trace with -p/-t/-u", self.start_full));
        }
        if self.wake_full > 0 {
            w.push(format!(
                "{} wakeups did not fit into the full per-task wakeup map; their waits show [no waker seen]; \
                 narrow the trace with -p/-t/-u",
                self.wake_full
            ));
        }
        if self.chains_full > 0 {
            w.push(format!(
                "{} wakeups had a waker chain that did not fit into the full chain map; their waits show \
                 [no waker seen]; raise --max-entries or narrow the trace with -p/-t/-u",
                self.chains_full
            ));
        }
        if self.lost_wait_events > 0 {
            w.push(format!(
                "{} long-wait events did not fit into the full event buffer (their waits are still in the \
                 aggregate); raise --events-over",
                self.lost_wait_events
            ));
        }
        if self.unended > 0 {
            w.push(format!(
                "{} waits of traced threads began but the kernel ran no hook when they got back on a CPU, \
                 and their end could not be told from their run time (not a fair-class task), so their \
                 time is missing; see Limitations in the README",
                self.unended
            ));
        }
        if self.negative_deltas > 0 {
            w.push(format!(
                "{} waits ended before they began and were dropped (clock skew)",
                self.negative_deltas
            ));
        }
        // Not a loss: their time is all there, under "goroutines" rows.
        if self.goroutine_waits_by_stack > 0 {
            w.push(format!(
                "{} of the {} goroutine waits came after the aggregate map was half full and are kept by \
                 stack rather than by goroutine (their rows say \"goroutines\"); raise --max-entries to \
                 keep every goroutine's own rows",
                self.goroutine_waits_by_stack, self.goroutine_waits
            ));
        }
        // Not a loss of time either: a label of the goroutine's rows.
        if self.goroutine_threads_lost > 0 {
            w.push(format!(
                "{} starts of a goroutine on a thread did not fit into the full map of the threads \
                 goroutines ran on, so some goroutines name fewer threads than they ran on; raise \
                 --max-entries",
                self.goroutine_threads_lost
            ));
        }
        // Each such wait lasted into the trace no longer than the walks at its
        // start took: said when that adds up to something worth knowing.
        if self.seeded_unwalked_ns >= 10_000_000 {
            w.push(format!(
                "{} of the {} waits in progress as the trace began ended before their user stacks could be walked, \
                 and their {:.3} ms are left out; trace with -p/-t to walk fewer threads at the start",
                self.seeded_unwalked,
                self.seeded,
                self.seeded_unwalked_ns as f64 / 1e6
            ));
        }
        w
    }
}

/// How the programs were attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AttachKind {
    TpBtf,
    RawTp,
    Kprobe,
}

impl AttachKind {
    pub fn name(self) -> &'static str {
        match self {
            AttachKind::TpBtf => "tp_btf",
            AttachKind::RawTp => "raw_tp",
            AttachKind::Kprobe => "kprobe",
        }
    }
}

/// Everything drained from the kernel at the end of a trace (or an interval).
#[derive(Clone, Debug, Default)]
pub struct Capture {
    pub records: Vec<RawRecord>,
    /// Stack id to addresses, leaf first.
    pub stacks: HashMap<u64, Vec<u64>>,
    /// Stacks that arrive symbolized (a kernel stack from `/proc/TID/stack`), by
    /// stack id; ids in neither map are missing.
    pub named: HashMap<u64, Vec<Frame>>,
    pub counters: Counters,
    /// Threads seen switching out during the trace (with open waits).
    pub switched: std::collections::HashSet<u32>,
    /// The threads each goroutine ran on, by (tgid, goid): see
    /// [`ran_on::by_goroutine`].
    pub ran_on: HashMap<(u32, u64), Vec<u32>>,
}

impl Capture {
    /// Adds the rows and stacks of `other`, drained earlier from the same
    /// trace (rows alike are merged when the report is made); the counters
    /// and threads seen stay this capture's, the later.
    pub fn absorb(&mut self, other: Capture) {
        self.records.extend(other.records);
        self.stacks.extend(other.stacks);
        self.named.extend(other.named);
        for (goroutine, tids) in other.ran_on {
            self.ran_on.entry(goroutine).or_insert(tids);
        }
    }
}

/// One symbolized frame. Names are shared: a report can hold hundreds of
/// thousands of frames naming the same few thousand functions.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frame {
    pub addr: u64,
    /// Function name, when one resolved.
    pub symbol: Option<Arc<str>>,
    /// Module (file name) the address lies in, when known.
    pub module: Option<Arc<str>>,
    /// Offset into the symbol when it resolved, else into the module file.
    pub offset: Option<u64>,
}

impl AsRef<Frame> for Frame {
    fn as_ref(&self) -> &Frame {
        self
    }
}

impl Frame {
    /// A frame with only an address.
    pub fn unknown(addr: u64) -> Self {
        Frame { addr, symbol: None, module: None, offset: None }
    }

    /// The frame's name in every view, text and JSON alike: the function name,
    /// or `module+0xoffset` where no symbol resolved, or `[unknown]`.
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        match (&self.symbol, &self.module, self.offset) {
            (Some(s), _, _) => std::borrow::Cow::Borrowed(s),
            (None, Some(m), Some(off)) => format!("{m}+{off:#x}").into(),
            (None, Some(m), None) => format!("[{m}]").into(),
            (None, None, _) => "[unknown]".into(),
        }
    }

    /// [`Frame::name`], owned.
    pub fn describe(&self) -> String {
        self.name().into_owned()
    }
}

/// A symbolized stack, leaf first. Records with the same stack share it, and
/// stacks share their frames: 20,000 unique stacks of 30 frames hold 600,000 frame
/// slots but only as many distinct frames as there are distinct return addresses,
/// so a slot is a pointer (8 bytes) rather than a frame (56).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Stack {
    Frames(Arc<[Arc<Frame>]>),
    /// Not captured, or does not exist.
    None,
    /// The kernel could not store it; the record keeps its time.
    Missing,
}

impl Stack {
    /// A stack of these frames.
    pub fn of(frames: Vec<Frame>) -> Self {
        Stack::Frames(frames.into_iter().map(Arc::new).collect())
    }

    /// A stack of frames that other stacks may share.
    pub fn shared(frames: Vec<Arc<Frame>>) -> Self {
        Stack::Frames(frames.into())
    }

    /// Whether this user stack was cut short: its outermost frame is the mark
    /// saying why (`topwaits_common::walker::CUT_MARK`).
    pub fn is_cut(&self) -> bool {
        self.frames().last().is_some_and(|f| topwaits_common::walker::is_cut_mark(f.addr))
    }

    pub fn frames(&self) -> &[Arc<Frame>] {
        match self {
            Stack::Frames(f) => f,
            _ => &[],
        }
    }
}

/// One symbolized record.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Record {
    pub tgid: u32,
    pub tid: u32,
    pub comm: Vec<u8>,
    pub kernel: Stack,
    pub user: Stack,
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub max_end_mono: u64,
    pub wake: Option<WakeInfo<Hop>>,
    /// Still waiting at the end of the trace (see [`RawRecord::open`]).
    pub open: Option<OpenSince>,
    /// How many threads the record stands for: 1, or more once merged with
    /// `--by process` or `--by comm`.
    pub threads: u32,
    /// What the waits were for (none in recordings made before labels);
    /// [`crate::model::label::WaitsOn::Running`] for on-CPU samples.
    #[serde(default)]
    pub waits_on: Option<crate::model::label::WaitsOn>,
    /// The process's and thread's ids in their own PID namespace (a
    /// container's), where that is not this one: (pid, tid).
    #[serde(default)]
    pub ns_ids: Option<(u32, u32)>,
    /// The cgroup its process was in (a path within its hierarchy, `/` for the
    /// root), where it could be read: at the end, or when last seen alive.
    #[serde(default)]
    pub cgroup: Option<Arc<str>>,
    /// A goroutine's record: the threads the scheduler ran it on, the one it
    /// ran on most first; empty for a thread's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ran_on: Vec<u32>,
}

impl Record {
    /// Whether the record holds on-CPU samples (`--on-cpu`) rather than waits.
    pub fn on_cpu(&self) -> bool {
        matches!(self.waits_on, Some(crate::model::label::WaitsOn::Running))
    }
}

/// Facts about the trace itself, for headers, titles and JSON.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct TraceInfo {
    pub clock: ClockPair,
    /// Monotonic time at which tracing was attached and at which it ended.
    pub start_mono: u64,
    pub end_mono: u64,
    pub attach: AttachKind,
    /// Human description of the filters, e.g. "all threads" or "PID 1234".
    pub target: String,
    /// Local UTC offset in seconds, for printing times.
    pub utc_offset_s: i32,
    /// Wakers were captured (`--waker`, `--chain`, `--wakeups`).
    pub waker: bool,
    /// What one record stands for (`--by`).
    pub by: crate::settings::By,
    /// `--state`: the state every recorded wait began in.
    pub state_filter: Option<u32>,
    /// `--on-cpu`: the rate at which running threads were sampled (Hz).
    #[serde(default)]
    pub on_cpu_hz: Option<u32>,
    /// The trace was of a cgroup (`--cgroup`, `--unit`, `--container`): folded
    /// lines and pprof samples then carry each record's cgroup by default.
    #[serde(default)]
    pub cgroup_target: bool,
    /// The Go programs whose goroutines were traced (`1 Go program (go1.19.8)`),
    /// or None.
    #[serde(default)]
    pub goroutines: Option<String>,
}

impl TraceInfo {
    pub fn duration_s(&self) -> f64 {
        self.end_mono.saturating_sub(self.start_mono) as f64 / 1e9
    }
}

/// What the report writers format.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub info: TraceInfo,
    pub counters: Counters,
    pub records: Vec<Record>,
    /// The file-backed mappings of each process with user frames, for formats that
    /// let other tools symbolize again (pprof). Empty where nobody asked.
    pub objects: HashMap<u32, Vec<ObjectMap>>,
    /// Each wait of at least `--events-over`, in the order they ended.
    #[serde(default)]
    pub events: Vec<Event>,
    /// With `--on-cpu` and `--perfetto`: each on-CPU sample as a record of one
    /// sample, `max_end_mono` its time, in the order they were taken.
    #[serde(default)]
    pub samples: Vec<Record>,
}

/// One long wait (`--events-over`): a record of one wait (`count` 1, `max_ns` its
/// length, `max_end_mono` its end, `wake` its waker with `-w`), and its state.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    pub record: Record,
    /// State at switch-out (0: preempted).
    pub state: u32,
}

impl Event {
    pub fn start_mono(&self) -> u64 {
        self.record.max_end_mono.saturating_sub(self.record.max_ns)
    }

    pub fn end_mono(&self) -> u64 {
        self.record.max_end_mono
    }
}

/// Where a file is mapped in a process: what pprof calls a mapping.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectMap {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub path: Arc<str>,
    /// The ELF build id, in hex, when the file has one.
    pub build_id: Option<Arc<str>>,
}

/// The mapping of `objects` (sorted by start) that holds `addr`.
pub fn object_of(objects: &[ObjectMap], addr: u64) -> Option<&ObjectMap> {
    let i = objects.partition_point(|m| m.start <= addr);
    objects[..i].last().filter(|m| addr < m.end)
}

/// A comm for display: lossy UTF-8 with control characters escaped; `[empty]` when empty.
pub fn comm_text(comm: &[u8]) -> String {
    if comm.is_empty() {
        return "[empty]".to_string();
    }
    let mut s = String::new();
    for c in String::from_utf8_lossy(comm).chars() {
        if c.is_control() {
            s.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            s.push(c);
        }
    }
    s
}

/// Records for tests of the layers above.
#[cfg(test)]
pub mod fixtures {
    use super::{RawRecord, Record, Stack, StackId};

    /// A row of one 5 ns wait by thread `tid` of process `tgid` named `a`,
    /// with no stacks, waker or label.
    pub fn raw_record(tgid: u32, tid: u32) -> RawRecord {
        RawRecord {
            tgid,
            tid,
            comm: b"a".to_vec(),
            kstack: StackId::None,
            ustack: StackId::None,
            total_ns: 5,
            count: 1,
            max_ns: 5,
            max_end_mono: 9,
            wake: None,
            open: None,
            what: Default::default(),
            on_cpu: false,
        }
    }

    /// A record of `count` waits of `total_ns` by thread 1/2 named `comm`, with
    /// no stacks, waker or label.
    pub fn bare_record(comm: &str, total_ns: u64, count: u64) -> Record {
        Record {
            tgid: 1,
            tid: 2,
            comm: comm.as_bytes().to_vec(),
            kernel: Stack::None,
            user: Stack::None,
            count,
            total_ns,
            max_ns: total_ns,
            max_end_mono: 0,
            wake: None,
            open: None,
            threads: 1,
            waits_on: None,
            ns_ids: None,
            ran_on: Vec::new(),
            cgroup: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_references_decode_to_stored_none_or_lost() {
        use topwaits_common::{STACK_NONE, STACK_STORED};
        let stored = STACK_STORED | 0x1234_5678_9abc;
        assert_eq!(StackId::from_ref(stored), StackId::Id(stored));
        assert_eq!(StackId::from_ref(STACK_NONE), StackId::None);
        // The eBPF side stores a failed capture's errno, positive.
        assert_eq!(StackId::from_ref(7), StackId::Lost(-7));
        assert_eq!(StackId::from_ref(61), StackId::Lost(-61));
        assert_eq!(
            StackId::from_ref(1 << 40),
            StackId::Lost(-i32::MAX),
            "a nonsense value is a loss, not a panic"
        );
        assert_eq!(stored & SNAPSHOT_STACK, 0, "snapshot ids never collide with stored references");
    }

    #[test]
    fn comm_text_keeps_hostile_names_printable() {
        assert_eq!(comm_text(b""), "[empty]");
        assert_eq!(comm_text(b"a;b c"), "a;b c");
        assert_eq!(comm_text(b"x\ny\t"), "x\\x0ay\\x09");
        assert_eq!(comm_text(b"bad\xffname"), "bad\u{fffd}name");
    }

    #[test]
    fn warnings_name_the_fix() {
        let c = Counters {
            lost_kernel_stacks: 3,
            aggregate_full: 2,
            aggregate_full_ns: 5_000_000,
            ..Default::default()
        };
        let w = c.warnings();
        assert_eq!(w.len(), 2);
        assert!(w[0].contains("--stack-storage-size"), "{}", w[0]);
        assert!(w[1].contains("--max-entries") && w[1].contains("5.000 ms"), "{}", w[1]);
        assert!(c.any_loss());
        assert!(Counters::default().warnings().is_empty());
        // Waits ended at an estimated switch-in are recorded: not a loss.
        let unseen =
            Counters { unended: 3, lost_wait_events: 2, ends_estimated: 4, ..Default::default() };
        let w = unseen.warnings();
        assert!(w.iter().any(|l| l.starts_with("3 waits") && l.contains("missing")), "{w:?}");
        assert!(
            w.iter().any(|l| l.starts_with("2 long-wait events") && l.contains("--events-over")),
            "{w:?}"
        );
        assert_eq!(unseen.lost_total(), 5);
        let merged =
            Counters { goroutine_waits: 9, goroutine_waits_by_stack: 4, ..Default::default() };
        let w = merged.warnings();
        assert!(w.len() == 1 && w[0].starts_with("4 of the 9 goroutine waits"), "{w:?}");
        assert!(w[0].contains("--max-entries") && !merged.any_loss(), "{w:?}");
        // Threads missing from goroutines' lists: a label lost, not a wait.
        let threads = Counters { goroutine_threads_lost: 5, ..Default::default() };
        let w = threads.warnings();
        assert!(w.len() == 1 && w[0].starts_with("5 starts of a goroutine"), "{w:?}");
        assert!(w[0].contains("--max-entries") && !threads.any_loss(), "{w:?}");
    }

    #[test]
    fn interval_counters_are_differences() {
        let a = Counters { recorded: 10, lost_user_stacks: 1, ..Default::default() };
        let b = Counters {
            recorded: 25,
            lost_user_stacks: 4,
            switches: 7,
            kstacks_reused: 5,
            ..Default::default()
        };
        let d = b.since(&a);
        assert_eq!((d.recorded, d.lost_user_stacks, d.switches, d.kstacks_reused), (15, 3, 7, 5));
        assert_eq!(d.lost_total(), 3);
        assert_eq!(a.since(&b).recorded, 0, "never negative");
    }

    /// A frame has one name in every view (issue: `why` said `[unknown]` where
    /// the top view said `postgres+0x…`).
    #[test]
    fn a_frame_is_named_alike_everywhere() {
        let mut f = Frame::unknown(0x10);
        assert_eq!(f.describe(), "[unknown]");
        f.module = Some("libc.so.6".into());
        f.offset = Some(0x28004);
        assert_eq!(f.describe(), "libc.so.6+0x28004");
        assert_eq!(f.name(), "libc.so.6+0x28004");
        f.symbol = Some("read".into());
        assert_eq!(f.describe(), "read");
    }
}
