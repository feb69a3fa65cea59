//! How a trace is shown, shared by a trace and by `topwaits report`: the format
//! on stdout (top view, folded, JSON) and the files written beside it.

use std::path::PathBuf;

use super::{By, Output, ValueKind};

/// The largest a recording may be, compressed or expanded, when read, unless
/// `--max-record-size` says otherwise: one of 20,000 stacks takes tens of MiB.
pub const DEFAULT_MAX_RECORD_MIB: u64 = 1024;

/// How a trace is shown: the format on stdout and the files written beside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewConfig {
    pub output: Output,
    /// Number on folded lines and flame-graph widths.
    pub value: ValueKind,
    pub by: By,
    pub svg: Option<PathBuf>,
    pub timeline: Option<PathBuf>,
    /// How many waits the timeline shows.
    pub timeline_limit: usize,
    pub pprof: Option<PathBuf>,
    pub perfetto: Option<PathBuf>,
    /// `--what`: what each wait was for as the root frame of folded lines and SVG.
    pub what: bool,
    /// `--cgroup-frames` (true), `--no-cgroup-frames` (false), or neither.
    pub cgroup_frames: Option<bool>,
    /// `--max-record-size`: the most a recording read may take, in MiB.
    pub max_record_mib: u64,
}
