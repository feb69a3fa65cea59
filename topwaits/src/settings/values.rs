//! The plain values that options take: what a folded line counts, what one
//! record stands for, which attach path; named for the command line in cli/.

/// Which number a folded line carries.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ValueKind {
    Total,
    Max,
    Count,
}

/// What one record of the top view and JSON stands for (`--by`).
#[derive(
    Copy, Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
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
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum AttachMode {
    Auto,
    TpBtf,
    RawTp,
    Kprobe,
}
