//! The values options take: enums with their clap names, and the parsers of
//! durations and state masks.

use std::time::Duration;

use clap::ValueEnum;

/// Whether reports include waits still in progress at the end.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum OpenWaits {
    Yes,
    No,
}

/// Which number a folded line carries.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ValueKind {
    Total,
    Max,
    Count,
}

/// What one record of the top view and JSON stands for (`--by`).
#[derive(
    Copy,
    Clone,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
pub enum By {
    /// One record per thread and stacks (the default).
    #[default]
    Thread,
    /// The threads of a process with the same stacks are one record.
    Process,
    /// Every thread with the same name and stacks is one record, across processes.
    Comm,
    /// Every wait on the same thing (mutex 0x…, disk vda, sleep, …) is one record,
    /// whatever its thread and stacks; the stacks shown are its heaviest record's.
    What,
    /// Every thread in the same cgroup with the same stacks is one record (a
    /// container's, a unit's), whatever its process.
    Cgroup,
}

impl By {
    /// The option's value, as JSON's `by` field names it.
    pub fn name(self) -> &'static str {
        match self {
            By::Thread => "thread",
            By::Process => "process",
            By::Comm => "comm",
            By::What => "what",
            By::Cgroup => "cgroup",
        }
    }
}

/// Which attach path to use.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum AttachMode {
    Auto,
    #[value(name = "tp_btf")]
    TpBtf,
    #[value(name = "raw_tp")]
    RawTp,
    Kprobe,
}

pub(super) fn parse_mask(s: &str) -> Result<u32, String> {
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("'{s}' is not a state mask (use decimal or 0x hex, e.g. 2 or 0x2)"))
}

pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|_| format!("'{s}' is not a number of seconds"))?;
    if !secs.is_finite() || secs <= 0.0 || secs > 1e9 {
        return Err(format!("duration must be a positive number of seconds, got '{s}'"));
    }
    Ok(Duration::from_secs_f64(secs))
}
