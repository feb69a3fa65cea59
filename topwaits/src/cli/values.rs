//! The values options take: the settings' enums with their names and help on
//! the command line, and the parsers of durations and state masks.

use std::time::Duration;

use clap::builder::PossibleValue;
use clap::ValueEnum;

use crate::settings::{AttachMode, By, Unwind, ValueKind};

/// Whether reports include waits still in progress at the end.
#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OpenWaits {
    Yes,
    No,
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

/// Names an enum of the settings for clap: each variant's value on the command
/// line, and its help where it needs one.
macro_rules! value_enum {
    ($t:ty { $($v:expr => $name:literal $(: $help:literal)?,)* }) => {
        impl ValueEnum for $t {
            fn value_variants<'a>() -> &'a [Self] {
                &[$($v),*]
            }
            fn to_possible_value(&self) -> Option<PossibleValue> {
                let all: &[($t, PossibleValue)] =
                    &[$(($v, PossibleValue::new($name)$(.help($help))?)),*];
                all.iter().find(|(v, _)| v == self).map(|(_, p)| p.clone())
            }
        }
    };
}

value_enum!(ValueKind {
    ValueKind::Total => "total",
    ValueKind::Max => "max",
    ValueKind::Count => "count",
});

value_enum!(By {
    By::Thread => "thread": "One record per thread and stacks (the default)",
    By::Process => "process": "The threads of a process with the same stacks are one record",
    By::Comm => "comm": "Every thread with the same name and stacks is one record, across processes",
    By::What => "what": "Every wait on the same thing (mutex 0x…, disk vda, sleep, …) is one \
        record, whatever its thread and stacks; the stacks shown are its heaviest record's",
    By::Cgroup => "cgroup": "Every thread in the same cgroup with the same stacks is one record \
        (a container's, a unit's), whatever its process",
});

value_enum!(AttachMode {
    AttachMode::Auto => "auto",
    AttachMode::TpBtf => "tp_btf",
    AttachMode::RawTp => "raw_tp",
    AttachMode::Kprobe => "kprobe",
});

value_enum!(Unwind {
    Unwind::Cfi => "cfi": "From `.eh_frame` unwind tables, with frame pointers where a file has none",
    Unwind::Fp => "fp": "By frame pointers only",
});
