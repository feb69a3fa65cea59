//! Per-thread facts from `/proc/PID/task/TID`, read without stopping the thread: its
//! state and last CPU (`stat`), the syscall it is in with its arguments and user
//! registers (`syscall`), the scheduler's clock when it last ran (`sched`), its kernel
//! stack as the kernel prints it (`stack`), and what its file descriptors are.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;

use crate::sys::procfs::{read_text, read_whole};

/// The fields of `/proc/.../stat` that a snapshot needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stat {
    /// `R`, `S`, `D`, `T`, `t`, `Z`, `X`, `I`, ...
    pub state: char,
    pub comm: Vec<u8>,
    /// The CPU the thread last ran on.
    pub cpu: u32,
    /// `task_struct.flags` (`PF_*`).
    pub flags: u32,
}

/// Parses `stat` text. The comm sits in parentheses and may itself hold `)` and
/// spaces, so the fields are counted from the last `)`.
pub fn parse_stat(text: &[u8]) -> Option<Stat> {
    let open = text.iter().position(|&b| b == b'(')?;
    let close = text.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let comm = text[open + 1..close].to_vec();
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // Field 3 (state) is the first after the comm; field 39 (processor) is 36 later.
    let state = fields.first()?.chars().next()?;
    let flags = fields.get(6)?.parse().ok()?;
    let cpu = fields.get(36)?.parse().ok()?;
    Some(Stat { state, comm, cpu, flags })
}

/// What `/proc/.../syscall` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SyscallState {
    /// On a CPU: no registers to read.
    Running,
    /// Blocked, but not in a syscall (a page fault, for example).
    Blocked { sp: u64, pc: u64 },
    /// Blocked in syscall `nr` with these arguments.
    In(Syscall),
}

/// A syscall in progress, and the user stack pointer and program counter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Syscall {
    pub nr: u64,
    pub args: [u64; 6],
    pub sp: u64,
    pub pc: u64,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x").unwrap_or(s), 16).ok()
}

/// Parses `syscall` text: `running`, `-1 SP PC`, or `NR A1 .. A6 SP PC`.
pub fn parse_syscall(text: &str) -> Option<SyscallState> {
    let f: Vec<&str> = text.split_ascii_whitespace().collect();
    match f.as_slice() {
        ["running"] => Some(SyscallState::Running),
        ["-1", sp, pc] => Some(SyscallState::Blocked { sp: hex(sp)?, pc: hex(pc)? }),
        [nr, a @ .., sp, pc] if a.len() == 6 => {
            let mut args = [0u64; 6];
            for (slot, v) in args.iter_mut().zip(a) {
                *slot = hex(v)?;
            }
            Some(SyscallState::In(Syscall {
                nr: nr.parse().ok()?,
                args,
                sp: hex(sp)?,
                pc: hex(pc)?,
            }))
        }
        _ => None,
    }
}

/// `se.exec_start` from `sched` text, in ns of the scheduler's per-CPU task clock:
/// when the thread last ran (for a sleeper, about when it went to sleep). The kernel
/// prints it as milliseconds with six decimals; it is read as integers, exactly.
pub fn parse_exec_start(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.trim_start().starts_with("se.exec_start"))?;
    let v = line.split(':').nth(1)?.trim();
    let (ms, frac) = v.split_once('.').unwrap_or((v, "0"));
    let frac = format!("{frac:0<6}");
    let ms: u64 = ms.parse().ok()?;
    let ns: u64 = frac.get(..6)?.parse().ok()?;
    Some(ms * 1_000_000 + ns)
}

/// The third field of `schedstat`: how many times the thread has got a CPU
/// (`sched_info.pcount`).
pub fn parse_arrivals(text: &str) -> Option<u64> {
    text.split_ascii_whitespace().nth(2)?.parse().ok()
}

/// One kernel frame as `/proc/.../stack` prints it: `[<0>] name+0x74/0xf0`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelFrame {
    pub name: String,
    pub offset: u64,
}

/// Parses `stack` text, leaf first; lines that do not parse are skipped.
pub fn parse_kernel_stack(text: &str) -> Vec<KernelFrame> {
    text.lines()
        .filter_map(|l| {
            let sym = l.split_once("] ").map(|(_, s)| s).unwrap_or(l).trim();
            let (name, rest) = sym.split_once('+').unwrap_or((sym, "0x0/0x0"));
            let off = rest.split('/').next().and_then(hex).unwrap_or(0);
            (!name.is_empty()).then(|| KernelFrame { name: name.to_string(), offset: off })
        })
        .collect()
}

/// The `/proc` directory of one thread.
pub fn dir(tgid: u32, tid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{tgid}/task/{tid}"))
}

/// Reads and parses `stat`; `None` when the thread is gone.
pub fn stat(tgid: u32, tid: u32) -> Option<Stat> {
    parse_stat(&read_whole(dir(tgid, tid).join("stat"), 1024).ok()?)
}

/// Reads and parses `syscall` (root only); the error says why not.
pub fn syscall(tgid: u32, tid: u32) -> std::io::Result<SyscallState> {
    let text = read_text(dir(tgid, tid).join("syscall"))?;
    parse_syscall(&text).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("unexpected syscall text {text:?}"),
        )
    })
}

/// Reads `se.exec_start` from `sched`.
pub fn exec_start(tgid: u32, tid: u32) -> Option<u64> {
    parse_exec_start(&read_text(dir(tgid, tid).join("sched")).ok()?)
}

/// Reads how many times the thread has got a CPU, from `schedstat`.
pub fn arrivals(tgid: u32, tid: u32) -> Option<u64> {
    parse_arrivals(&read_text(dir(tgid, tid).join("schedstat")).ok()?)
}

/// Reads and parses `stack` (root only); the error says why not.
pub fn kernel_stack(tgid: u32, tid: u32) -> std::io::Result<Vec<KernelFrame>> {
    Ok(parse_kernel_stack(&read_text(dir(tgid, tid).join("stack"))?))
}

/// What file descriptor `fd` of a process is: a path, `pipe:[123]`, `socket:[456]`,
/// `anon_inode:[eventpoll]`, ...
pub fn fd_target(tgid: u32, fd: u64) -> Option<String> {
    std::fs::read_link(format!("/proc/{tgid}/fd/{fd}"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// The numeric entries of a `/proc` directory (processes, or a process's threads).
pub fn numeric_entries(path: &str) -> Vec<u32> {
    let mut v: Vec<u32> = std::fs::read_dir(path)
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    v.sort_unstable();
    v
}

/// The thread ids of a process; empty when it is gone.
pub fn tids_of(tgid: u32) -> Vec<u32> {
    numeric_entries(&format!("/proc/{tgid}/task"))
}

/// Every process id.
pub fn all_pids() -> Vec<u32> {
    numeric_entries("/proc")
}

/// The inode of a `pipe:[N]` or `socket:[N]` fd target, with its kind.
pub fn special_inode(target: &str) -> Option<(&str, u64)> {
    let (kind, rest) = target.split_once(":[")?;
    // Up to the `]`: user space may have added a description after it.
    let inode = rest.split_once(']')?.0.parse().ok()?;
    matches!(kind, "pipe" | "socket").then_some((kind, inode))
}

/// Another process that holds a pipe or socket open: pid, comm, access (`r`, `w`, `rw`).
pub type Holder = (u32, Vec<u8>, &'static str);

/// The access mode of an fd from the `flags:` line of `/proc/PID/fdinfo/FD`.
pub fn fd_access(fdinfo: &str) -> &'static str {
    let flags = fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("flags:"))
        .and_then(|v| u32::from_str_radix(v.trim(), 8).ok());
    match flags.map(|f| f & 3) {
        Some(0) => "r",
        Some(1) => "w",
        Some(2) => "rw",
        _ => "?",
    }
}

/// Who holds pipes and sockets open: inode -> every holder.
pub fn holders_of(inodes: &BTreeSet<u64>) -> HashMap<u64, Vec<Holder>> {
    let mut out: HashMap<u64, Vec<Holder>> = HashMap::new();
    if inodes.is_empty() {
        return out;
    }
    for pid in all_pids() {
        for fd in numeric_entries(&format!("/proc/{pid}/fd")) {
            let Some(target) = fd_target(pid, fd as u64) else {
                continue;
            };
            let Some((_, inode)) = special_inode(&target) else {
                continue;
            };
            if !inodes.contains(&inode) {
                continue;
            }
            let access = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}"))
                .map(|t| fd_access(&t))
                .unwrap_or("?");
            let comm = stat(pid, pid).map(|s| s.comm).unwrap_or_default();
            let list = out.entry(inode).or_default();
            if !list.iter().any(|(p, _, a)| *p == pid && *a == access) {
                list.push((pid, comm, access));
            }
        }
    }
    out
}

/// Most fds a poll or epoll wait lists.
pub const MAX_POLL_FDS: usize = 16;

/// The fds an epoll set watches, from the `tfd:` lines of its `/proc/PID/fdinfo/FD`.
pub fn epoll_fds(fdinfo: &str) -> Vec<u64> {
    fdinfo
        .lines()
        .filter_map(|l| {
            l.trim_start().strip_prefix("tfd:")?.split_whitespace().next()?.parse().ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &[u8] = b"4242 (we ird) name) S 1 4242 4242 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 2 0 \
        5000 10000000 300 18446744073709551615 1 1 0 0 0 0 0 4096 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn stat_counts_fields_from_the_last_parenthesis() {
        let s = parse_stat(STAT).unwrap();
        assert_eq!(s.state, 'S');
        assert_eq!(s.comm, b"we ird) name");
        assert_eq!(s.cpu, 1);
        assert_eq!(s.flags, 4194560);
        assert_eq!(parse_stat(b"12 (x) D"), None, "too short");
        assert_eq!(parse_stat(b"garbage"), None);
        // SAFETY: gettid has no preconditions.
        let own = stat(std::process::id(), unsafe { libc::gettid() } as u32).unwrap();
        assert_eq!(own.state, 'R', "this thread is running");
    }

    #[test]
    fn syscall_forms() {
        assert_eq!(parse_syscall("running\n"), Some(SyscallState::Running));
        assert_eq!(
            parse_syscall("-1 0x7ffd0 0x401000\n"),
            Some(SyscallState::Blocked { sp: 0x7ffd0, pc: 0x401000 })
        );
        let s = parse_syscall("202 0x55d0 0x80 0x2 0x0 0x0 0x0 0x7ffd091cc918 0x7ff3708aa503\n")
            .unwrap();
        assert_eq!(
            s,
            SyscallState::In(Syscall {
                nr: 202,
                args: [0x55d0, 0x80, 2, 0, 0, 0],
                sp: 0x7ffd091cc918,
                pc: 0x7ff3708aa503
            })
        );
        assert_eq!(parse_syscall("202 0x1 0x2"), None);
        assert_eq!(parse_syscall(""), None);
        assert_eq!(parse_syscall("x 0x1 0x2 0x3 0x4 0x5 0x6 0x7 0x8"), None);
    }

    #[test]
    fn exec_start_is_exact_nanoseconds() {
        let text =
            "sleep (123, #threads: 1)\n---\nse.exec_start                                :        297983.186865\nse.vruntime : 1.0\n";
        assert_eq!(parse_exec_start(text), Some(297_983_186_865));
        assert_eq!(parse_exec_start("se.exec_start : 12.5\n"), Some(12_500_000));
        assert_eq!(parse_exec_start("se.exec_start : 7\n"), Some(7_000_000));
        assert_eq!(parse_exec_start("nothing here"), None);
        assert_eq!(parse_arrivals("30139597312 6137465 9713\n"), Some(9713));
        assert_eq!(parse_arrivals("1 2\n"), None);
        assert_eq!(parse_arrivals("a b c\n"), None);
    }

    #[test]
    fn kernel_stack_lines() {
        let f = parse_kernel_stack(
            "[<0>] hrtimer_nanosleep+0x74/0xf0\n[<0>] do_syscall_64+0x71/0x280\n[<0>] weird\n\n",
        );
        assert_eq!(f.len(), 3);
        assert_eq!(f[0], KernelFrame { name: "hrtimer_nanosleep".into(), offset: 0x74 });
        assert_eq!(f[2], KernelFrame { name: "weird".into(), offset: 0 });
    }

    #[test]
    fn special_inodes() {
        assert_eq!(special_inode("pipe:[8812]"), Some(("pipe", 8812)));
        assert_eq!(special_inode("socket:[7]"), Some(("socket", 7)));
        assert_eq!(special_inode("socket:[7] TCP 127.0.0.1:80, listening"), Some(("socket", 7)));
        assert_eq!(special_inode("pipe:[x]"), None);
        assert_eq!(special_inode("anon_inode:[eventpoll]"), None);
        assert_eq!(special_inode("/tmp/x"), None);
    }
}
