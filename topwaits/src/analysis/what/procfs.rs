//! [`Resolve`] from `/proc` and `/sys`: a descriptor's link and file type, the
//! block device a file lives on, a process's sockets, a pipe's holders, an epoll
//! set's descriptors, static kernel locks by the symbols the report's kernel
//! frames were named with, and Java monitors by the object they lock and the
//! JVM's own by their global, read from the JVM's memory.
//! Each table is read once per report.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use super::{Fd, FdKind, Resolve};
use crate::sys::{net, thread};

/// The resolver a report uses; it caches what it read.
#[derive(Default)]
pub struct ProcResolver {
    /// The sockets of each network namespace met.
    sockets: net::ByNamespace,
    /// The descriptors resolved this interval (a process's threads and
    /// stacks wait on the same ones), by (tgid, fd).
    fds: HashMap<(u32, u64), Option<Fd>>,
    /// The processes named this interval, by tgid.
    processes: HashMap<u32, Option<String>>,
    holders: Option<HashMap<u64, Vec<thread::Holder>>>,
    /// The pipe inodes `holders` was read for.
    pipes: BTreeSet<u64>,
    devices: HashMap<u64, Option<String>>,
    /// The report's kernel locks that a kernel symbol names exactly.
    kernel_objects: crate::util::fasthash::FastMap<u64, String>,
    /// Go programs' wait reasons, by tgid (read on first need).
    go_reasons: HashMap<u32, Vec<String>>,
    /// The JVMs met, and the names read from them (see [`JvmName`]).
    jvms: crate::stacks::hotspot::Jvms,
    jvm_names: HashMap<(JvmName, u32, u64), Option<String>>,
    /// Only what a label's short form shows: no pipe's holders and no epoll
    /// set's descriptors, which cost a read of every process's descriptors
    /// and of each watched one (see [`ProcResolver::brief`]).
    brief: bool,
}

/// What a name read from a JVM's memory is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum JvmName {
    /// A Java monitor, by its `ObjectMonitor*`: the object it locks.
    Monitor,
    /// One of HotSpot's own locks, by a futex word in it: its global.
    Lock,
}

/// The block device named by `dev` (`st_dev`), from `/sys/dev/block`.
pub fn device_name(dev: u64) -> Option<String> {
    let (major, minor) = (libc_major(dev), libc_minor(dev));
    let uevent = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent")).ok()?;
    devname(&uevent)
}

/// `DEVNAME=` of a uevent file.
pub fn devname(uevent: &str) -> Option<String> {
    uevent.lines().find_map(|l| l.strip_prefix("DEVNAME=")).map(str::to_string)
}

/// The major and minor numbers of a `dev_t`, as glibc encodes them.
fn libc_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)
}

fn libc_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0xff)
}

impl ProcResolver {
    /// A resolver for reports that show labels only in their short form
    /// (`serve`'s metrics, pprof and OTLP): a pipe's holders and an epoll
    /// set's descriptors are left out, as that form never names them.
    pub fn brief() -> Self {
        ProcResolver { brief: true, ..Default::default() }
    }

    /// Ready for the next interval of a long trace: what processes' file
    /// descriptors, sockets and names said is read again; the devices' names
    /// are kept.
    pub fn next_interval(&mut self) {
        self.sockets = net::ByNamespace::default();
        self.fds.clear();
        self.processes.clear();
        self.holders = None;
        self.pipes.clear();
        // A monitor deflated since may be another object's now.
        self.jvm_names.clear();
    }

    /// The name of `what` at `addr` in JVM process `tgid`, read once.
    fn jvm_name(&mut self, what: JvmName, tgid: u32, addr: u64) -> Option<String> {
        let jvms = &mut self.jvms;
        let read = || {
            let maps = crate::sys::procfs::maps_of(tgid);
            match what {
                JvmName::Monitor => jvms.monitor_name(tgid, &maps, addr),
                JvmName::Lock => jvms.internal_lock(tgid, &maps, addr),
            }
        };
        self.jvm_names.entry((what, tgid, addr)).or_insert_with(read).clone()
    }

    /// Descriptor `fd` of process `tgid`, read now.
    fn fd_now(&mut self, tgid: u32, fd: u64) -> Option<Fd> {
        let target = thread::fd_target(tgid, fd)?;
        if let Some((kind, inode)) = thread::special_inode(&target) {
            let kind =
                if kind == "pipe" { FdKind::Pipe { inode } } else { FdKind::Socket { inode } };
            return Some(Fd { target, kind });
        }
        if target == "anon_inode:[eventpoll]" {
            return Some(Fd { target, kind: FdKind::Epoll });
        }
        // The file itself, through the descriptor (it may have been renamed since).
        let meta = std::fs::metadata(format!("/proc/{tgid}/fd/{fd}")).ok();
        let kind = match meta {
            Some(m) if m.file_type().is_fifo() => FdKind::Pipe { inode: m.ino() },
            Some(m) if m.file_type().is_file() || m.file_type().is_dir() => {
                FdKind::File { device: self.device_of(m.dev()) }
            }
            Some(m) if m.file_type().is_block_device() => {
                FdKind::File { device: self.device_of(m.rdev()) }
            }
            _ => FdKind::Other,
        };
        Some(Fd { target, kind })
    }

    fn device_of(&mut self, dev: u64) -> Option<String> {
        self.devices.entry(dev).or_insert_with(|| device_name(dev)).clone()
    }
}

impl Resolve for ProcResolver {
    fn jvm_lock(&mut self, tgid: u32, addr: u64) -> Option<String> {
        self.jvm_name(JvmName::Lock, tgid, addr)
    }

    fn java_monitor(&mut self, tgid: u32, monitor: u64) -> Option<String> {
        self.jvm_name(JvmName::Monitor, tgid, monitor)
    }

    fn go_wait_reason(&mut self, tgid: u32, reason: u64) -> Option<String> {
        let reasons = self.go_reasons.entry(tgid).or_insert_with(|| {
            crate::stacks::golang::runtime::wait_reasons(&format!("/proc/{tgid}/exe"))
                .unwrap_or_default()
        });
        reasons.get(usize::try_from(reason).ok()?).filter(|r| !r.is_empty()).cloned()
    }

    fn fd(&mut self, tgid: u32, fd: u64) -> Option<Fd> {
        if let Some(known) = self.fds.get(&(tgid, fd)) {
            return known.clone();
        }
        let resolved = self.fd_now(tgid, fd);
        self.fds.insert((tgid, fd), resolved.clone());
        resolved
    }

    fn socket(&mut self, tgid: u32, inode: u64) -> Option<String> {
        self.sockets.describe(tgid, inode)
    }

    fn pipe_holders(&mut self, inodes: &BTreeSet<u64>) -> HashMap<u64, Vec<String>> {
        if self.brief {
            return HashMap::new();
        }
        // One pass over every process's descriptors finds all the pipes asked;
        // it is made again only for a pipe not asked before in this interval.
        if self.holders.is_none() || !inodes.is_subset(&self.pipes) {
            self.pipes.extend(inodes);
            self.holders = Some(thread::holders_of(&self.pipes));
        }
        let holders = self.holders.as_ref();
        let named = |inode: &u64| {
            let list = holders.and_then(|h| h.get(inode)).map(Vec::as_slice).unwrap_or_default();
            let names = list.iter().map(|(pid, comm, access)| {
                format!("pid {pid} {} ({access})", crate::model::comm_text(comm))
            });
            (*inode, names.collect())
        };
        inodes.iter().map(named).collect()
    }

    fn epoll_fds(&mut self, tgid: u32, epfd: u64) -> Vec<String> {
        if self.brief {
            return Vec::new();
        }
        let info =
            std::fs::read_to_string(format!("/proc/{tgid}/fdinfo/{epfd}")).unwrap_or_default();
        let fds = thread::epoll_fds(&info);
        fds.into_iter()
            .take(thread::MAX_POLL_FDS)
            .map(|fd| match thread::fd_target(tgid, fd) {
                Some(t) => match thread::special_inode(&t) {
                    Some(("socket", ino)) => {
                        format!("{fd} ({})", self.socket(tgid, ino).unwrap_or(t))
                    }
                    _ => format!("{fd} ({t})"),
                },
                None => format!("{fd}"),
            })
            .collect()
    }

    fn process(&mut self, tgid: u32) -> Option<String> {
        let name = |t: &u32| {
            let comm = thread::stat(*t, *t)?.comm;
            Some(format!("pid {t} ({})", crate::model::comm_text(&comm)))
        };
        self.processes.entry(tgid).or_insert_with_key(name).clone()
    }

    fn kernel_symbol(&mut self, addr: u64) -> Option<String> {
        self.kernel_objects.get(&addr).cloned()
    }

    fn take_kernel_objects(&mut self, named: crate::util::fasthash::FastMap<u64, String>) {
        self.kernel_objects = named;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_device_names() {
        assert_eq!(
            devname("MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n").as_deref(),
            Some("vda")
        );
        assert_eq!(devname("MAJOR=254\n"), None);
        // 254:0 as glibc packs it, and a large minor.
        assert_eq!((libc_major(0xfe00), libc_minor(0xfe00)), (254, 0));
        assert_eq!((libc_major(0x0010_0103), libc_minor(0x0010_0103)), (1, 0x103));
    }

    #[test]
    fn resolves_this_process_own_descriptors() {
        let mut r = ProcResolver::default();
        let me = std::process::id();
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        use std::os::fd::AsRawFd;
        let fd = r.fd(me, file.as_raw_fd() as u64).expect("an open descriptor resolves");
        assert!(matches!(fd.kind, FdKind::File { .. }), "{fd:?}");
        let (rd, _wr) = std::io::pipe().unwrap();
        let p = r.fd(me, rd.as_raw_fd() as u64).unwrap();
        assert!(matches!(p.kind, FdKind::Pipe { .. }) && p.target.starts_with("pipe:["), "{p:?}");
        let FdKind::Pipe { inode } = p.kind else { unreachable!() };
        let holders = r.pipe_holders(&BTreeSet::from([inode]));
        assert!(
            holders[&inode]
                .iter()
                .any(|h| h.starts_with(&format!("pid {me} ")) && h.ends_with("(r)")),
            "{holders:?}"
        );
        assert_eq!(r.fd(me, 999_999), None, "a closed descriptor is not resolved");
        // Sockets by the namespace's table, read again for one made since.
        let socket_inode = |r: &mut ProcResolver, l: &std::net::TcpListener| match r
            .fd(me, l.as_raw_fd() as u64)
        {
            Some(Fd { kind: FdKind::Socket { inode }, .. }) => inode,
            other => panic!("not a socket: {other:?}"),
        };
        let first = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ino = socket_inode(&mut r, &first);
        assert!(r.socket(me, ino).is_some_and(|s| s.ends_with("listening")));
        let later = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let ino = socket_inode(&mut r, &later);
        let port = later.local_addr().unwrap().port();
        assert!(r.socket(me, ino).is_some_and(|s| s.contains(&format!(":{port}"))), "made since");
        let brief = ProcResolver::brief().pipe_holders(&BTreeSet::from([inode]));
        assert!(brief.is_empty(), "brief labels find no holders: {brief:?}");
        assert!(r.process(me).unwrap().starts_with(&format!("pid {me} (")));
    }
}
