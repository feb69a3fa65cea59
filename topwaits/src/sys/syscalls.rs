//! The syscalls threads block in, by number for this machine's ABI: each one's name
//! and which argument, if any, is a file descriptor.

/// A syscall's name and which argument, if any, is a file descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyscallInfo {
    pub name: &'static str,
    pub fd_arg: Option<usize>,
}

/// The syscalls that threads block in, by number, for this machine's ABI.
#[cfg(target_arch = "aarch64")]
const TABLE: &[(u64, &str, Option<usize>)] = &[
    (22, "epoll_pwait", Some(0)),
    (25, "fcntl", Some(0)),
    (29, "ioctl", Some(0)),
    (32, "flock", Some(0)),
    (46, "ftruncate", Some(0)),
    (47, "fallocate", Some(0)),
    (56, "openat", None),
    (57, "close", Some(0)),
    (63, "read", Some(0)),
    (64, "write", Some(0)),
    (65, "readv", Some(0)),
    (66, "writev", Some(0)),
    (67, "pread64", Some(0)),
    (68, "pwrite64", Some(0)),
    (71, "sendfile", Some(0)),
    (72, "pselect6", None),
    (73, "ppoll", None),
    (76, "splice", Some(0)),
    (81, "sync", None),
    (82, "fsync", Some(0)),
    (83, "fdatasync", Some(0)),
    (84, "sync_file_range", Some(0)),
    (95, "waitid", None),
    (98, "futex", None),
    (101, "nanosleep", None),
    (115, "clock_nanosleep", None),
    (133, "rt_sigsuspend", None),
    (137, "rt_sigtimedwait", None),
    (202, "accept", Some(0)),
    (203, "connect", Some(0)),
    (206, "sendto", Some(0)),
    (207, "recvfrom", Some(0)),
    (211, "sendmsg", Some(0)),
    (212, "recvmsg", Some(0)),
    (214, "brk", None),
    (215, "munmap", None),
    (222, "mmap", None),
    (226, "mprotect", None),
    (227, "msync", None),
    (233, "madvise", None),
    (242, "accept4", Some(0)),
    (243, "recvmmsg", Some(0)),
    (260, "wait4", None),
    (269, "sendmmsg", Some(0)),
    (426, "io_uring_enter", Some(0)),
    (441, "epoll_pwait2", Some(0)),
    (449, "futex_waitv", None),
];

/// The syscalls that threads block in, by number, for this machine's ABI.
#[cfg(not(target_arch = "aarch64"))]
const TABLE: &[(u64, &str, Option<usize>)] = &[
    (0, "read", Some(0)),
    (1, "write", Some(0)),
    (3, "close", Some(0)),
    (7, "poll", None),
    (9, "mmap", None),
    (10, "mprotect", None),
    (11, "munmap", None),
    (12, "brk", None),
    (16, "ioctl", Some(0)),
    (17, "pread64", Some(0)),
    (18, "pwrite64", Some(0)),
    (19, "readv", Some(0)),
    (20, "writev", Some(0)),
    (23, "select", None),
    (26, "msync", None),
    (28, "madvise", None),
    (34, "pause", None),
    (35, "nanosleep", None),
    (40, "sendfile", Some(0)),
    (42, "connect", Some(0)),
    (43, "accept", Some(0)),
    (44, "sendto", Some(0)),
    (45, "recvfrom", Some(0)),
    (46, "sendmsg", Some(0)),
    (47, "recvmsg", Some(0)),
    (61, "wait4", None),
    (65, "semop", None),
    (70, "msgrcv", None),
    (72, "fcntl", Some(0)),
    (73, "flock", Some(0)),
    (74, "fsync", Some(0)),
    (75, "fdatasync", Some(0)),
    (77, "ftruncate", Some(0)),
    (128, "rt_sigtimedwait", None),
    (130, "rt_sigsuspend", None),
    (162, "sync", None),
    (202, "futex", None),
    (208, "io_getevents", None),
    (220, "semtimedop", None),
    (230, "clock_nanosleep", None),
    (232, "epoll_wait", Some(0)),
    (247, "waitid", None),
    (257, "openat", None),
    (270, "pselect6", None),
    (271, "ppoll", None),
    (275, "splice", Some(0)),
    (277, "sync_file_range", Some(0)),
    (281, "epoll_pwait", Some(0)),
    (285, "fallocate", Some(0)),
    (288, "accept4", Some(0)),
    (299, "recvmmsg", Some(0)),
    (307, "sendmmsg", Some(0)),
    (426, "io_uring_enter", Some(0)),
    (441, "epoll_pwait2", Some(0)),
    (449, "futex_waitv", None),
];

/// The name of syscall `nr`, and its fd argument; `None` for one not in the table.
pub fn syscall_info(nr: u64) -> Option<SyscallInfo> {
    TABLE.iter().find(|(n, ..)| *n == nr).map(|&(_, name, fd_arg)| SyscallInfo { name, fd_arg })
}

/// The number of a syscall by name, for this machine's ABI.
pub fn syscall_info_by_name(name: &str) -> Option<u64> {
    TABLE.iter().find(|(_, n, _)| *n == name).map(|&(nr, ..)| nr)
}

/// Whether a syscall's first argument is what its waits are on (a file
/// descriptor, or `futex`'s word).
fn keeps_arg0(fd_arg: Option<usize>, name: &str) -> bool {
    // select's first argument is its number of descriptors: none is a sleep.
    fd_arg == Some(0) || matches!(name, "futex" | "select" | "pselect6")
}

/// Whether syscall `nr`'s waits keep its first argument, as the programs do.
pub fn keeps_arg0_of(nr: u64) -> bool {
    syscall_info(nr).is_some_and(|i| keeps_arg0(i.fd_arg, i.name))
}

/// The syscalls whose first argument is what their waits are on, one bit per
/// number, for the programs (see [`keeps_arg0_of`]).
pub fn arg0_bitmap() -> [u64; 8] {
    let mut bits = [0u64; 8];
    for &(nr, name, fd_arg) in TABLE {
        if keeps_arg0(fd_arg, name) && nr < 512 {
            bits[(nr / 64) as usize] |= 1 << (nr % 64);
        }
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_one_name_per_number_and_the_bitmap_marks_fd_calls() {
        let mut nrs: Vec<u64> = TABLE.iter().map(|t| t.0).collect();
        nrs.sort_unstable();
        nrs.dedup();
        assert_eq!(nrs.len(), TABLE.len(), "a number twice in the table");
        let bits = arg0_bitmap();
        let has = |name: &str| {
            syscall_info_by_name(name)
                .is_some_and(|nr| bits[(nr / 64) as usize] & (1 << (nr % 64)) != 0)
        };
        assert!(
            has("read") && has("write") && has("futex") && has("epoll_wait") | has("epoll_pwait")
        );
        assert!(!has("nanosleep") && !has("clock_nanosleep") && !has("mmap"));
    }
}
