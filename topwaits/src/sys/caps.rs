//! Checks, before anything loads, that this process holds the capabilities that
//! loading and attaching eBPF tracing programs needs.

use std::io::BufRead;

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

/// The effective capability set from `/proc/self/status` text, if present.
pub fn effective_caps<R: BufRead>(reader: R) -> Option<u64> {
    reader
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
}

/// Whether a capability set is enough: CAP_BPF with CAP_PERFMON, or CAP_SYS_ADMIN.
pub fn sufficient(caps: u64) -> bool {
    let has = |c: u32| caps & (1u64 << c) != 0;
    (has(CAP_BPF) && has(CAP_PERFMON)) || has(CAP_SYS_ADMIN)
}

/// Reads this process's effective capabilities.
pub fn this_process_is_privileged() -> bool {
    std::fs::File::open("/proc/self/status")
        .ok()
        .and_then(|f| effective_caps(std::io::BufReader::new(f)))
        .is_some_and(sufficient)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_bpf_perfmon_are_enough_nothing_less() {
        let root = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        assert!(sufficient(effective_caps(root.as_bytes()).unwrap()));
        let bpf_perfmon = format!("CapEff:\t{:016x}\n", (1u64 << 39) | (1u64 << 38));
        assert!(sufficient(effective_caps(bpf_perfmon.as_bytes()).unwrap()));
        let bpf_only = format!("CapEff:\t{:016x}\n", 1u64 << 39);
        assert!(!sufficient(effective_caps(bpf_only.as_bytes()).unwrap()));
        assert!(!sufficient(effective_caps("CapEff:\t0000000000000000\n".as_bytes()).unwrap()));
    }

    #[test]
    fn missing_or_garbled_status_is_none() {
        assert_eq!(effective_caps("Name: x\n".as_bytes()), None);
        assert_eq!(effective_caps("CapEff:\tzz\n".as_bytes()), None);
    }
}
