//! Process facts from `/proc`: whether an id is a live process or thread, and the
//! executable mappings that turn an unresolved user address into `module+offset`.

use std::io::BufRead;
use std::path::Path;

/// `Tgid:` from `/proc/ID/status` text.
pub fn status_tgid<R: BufRead>(reader: R) -> Option<u32> {
    reader
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("Tgid:").and_then(|v| v.trim().parse().ok()))
}

/// The thread-group id of a live task, or `None` when no such task exists.
pub fn tgid_of(id: u32) -> Option<u32> {
    let f = std::fs::File::open(Path::new("/proc").join(id.to_string()).join("status")).ok()?;
    status_tgid(std::io::BufReader::new(f))
}

/// One file-backed mapping of a process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// File offset of `start`.
    pub offset: u64,
    pub path: String,
    /// Whether its pages are executable.
    pub exec: bool,
    /// The file's device (`major << 32 | minor`) and inode: which file it is,
    /// whatever path names it.
    pub dev: u64,
    pub inode: u64,
}

/// The file-backed mappings in `/proc/PID/maps` text. Anonymous mappings and
/// pseudo-files (`[stack]`, `[vdso]`, ...) are left out; junk lines are skipped.
/// Read in place, line by line: the tracer parses a process's maps at each
/// of its execs, and a copy of every line was most of what that cost.
pub fn parse_maps(text: &[u8]) -> Vec<Mapping> {
    let mut out = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let Some(([range, perms, offset, dev, inode], path)) = maps_fields(line) else {
            continue;
        };
        if path.first() != Some(&b'/') {
            continue;
        }
        let (Some((start, end)), Some(offset)) = (hex_range(range), hex(offset)) else {
            continue;
        };
        let dev = dev
            .iter()
            .position(|&b| b == b':')
            .and_then(|at| Some(hex(&dev[..at])? << 32 | hex(&dev[at + 1..])?));
        out.push(Mapping {
            start,
            end,
            offset,
            path: String::from_utf8_lossy(path).into_owned(),
            exec: perms.get(2) == Some(&b'x'),
            dev: dev.unwrap_or(0),
            inode: std::str::from_utf8(inode).ok().and_then(|i| i.parse().ok()).unwrap_or(0),
        });
    }
    out
}

/// One maps line's first five fields (range, permissions, offset, device,
/// inode), each ended by one space, and what follows the padding: the path,
/// if any.
fn maps_fields(line: &[u8]) -> Option<([&[u8]; 5], &[u8])> {
    let mut fields: [&[u8]; 5] = [&[]; 5];
    let mut rest = line;
    for (i, field) in fields.iter_mut().enumerate() {
        match rest.iter().position(|&b| b == b' ') {
            Some(at) => (*field, rest) = (&rest[..at], &rest[at + 1..]),
            // The inode may end the line (no path).
            None if i == 4 => (*field, rest) = (rest, &[]),
            None => return None,
        }
    }
    let path_at = rest.iter().position(|&b| b != b' ').unwrap_or(rest.len());
    Some((fields, &rest[path_at..]))
}

/// A hexadecimal number in maps text.
fn hex(text: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(text).ok()?, 16).ok()
}

/// A maps range, `start-end`, in hexadecimal.
fn hex_range(text: &[u8]) -> Option<(u64, u64)> {
    let at = text.iter().position(|&b| b == b'-')?;
    Some((hex(&text[..at])?, hex(&text[at + 1..])?))
}

/// One mapping of the process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    pub exec: bool,
}

/// The mapping `addr` lies in, from mappings sorted by start.
pub fn region_of(regions: &[Region], addr: u64) -> Option<&Region> {
    let i = regions.partition_point(|r| r.start <= addr);
    regions.get(i.checked_sub(1)?).filter(|r| addr < r.end)
}

/// The text of `/proc/PID/maps` (None: the process is gone), read whole
/// with room for a small process's at the first read.
fn maps_text(pid: u32) -> Option<Vec<u8>> {
    read_whole(format!("/proc/{pid}/maps"), 16 * 1024).ok()
}

/// Every mapping in `/proc/PID/maps` text, file-backed or not, with whether it is
/// executable, sorted by start; junk lines are skipped.
pub fn parse_regions(text: &[u8]) -> Vec<Region> {
    let mut out: Vec<Region> = text
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let mut cols = line.split(|&b| b == b' ').filter(|c| !c.is_empty());
            let (start, end) = hex_range(cols.next()?)?;
            Some(Region { start, end, exec: cols.next()?.get(2) == Some(&b'x') })
        })
        .collect();
    out.sort_by_key(|r| r.start);
    out
}

/// Reads every mapping of a process; empty when it is gone.
pub fn regions_of(pid: u32) -> Vec<Region> {
    maps_text(pid).map_or_else(Vec::new, |t| parse_regions(&t))
}

/// This process's own use of the machine: its user and system CPU time in
/// seconds (all threads), and its resident memory in bytes.
pub fn own_usage() -> (f64, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let cpu = unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(u.ru_utime) + secs(u.ru_stime)
    };
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let rss = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse::<u64>().ok()))
        .unwrap_or(0);
    (cpu, rss * page)
}

/// Whether process (or thread) `pid` still exists, zombies included, as its
/// `/proc` directory does. Asked with signal 0: one call and no path walk,
/// where a stat of `/proc/PID/maps` walked procfs and checked access. The
/// tracer asks at every process event.
pub fn alive(pid: u32) -> bool {
    // 0 and negative ids name process groups, not a process.
    let Ok(id) = libc::pid_t::try_from(pid) else { return false };
    if id <= 0 {
        return false;
    }
    // SAFETY: signal 0 sends nothing; kill only checks that the id exists.
    let sent = unsafe { libc::kill(id, 0) };
    sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Reads a `/proc` file whole. Such a file says it is empty, so the
/// standard reader stats it, probes it with 32 bytes and then doubles its
/// buffer: six calls or more for a `stat` line, at every process event. This
/// one starts with room for `room` bytes: an open, a read, and the read that
/// finds the end.
pub fn read_whole(path: impl AsRef<Path>, room: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; room.max(64)];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// [`read_whole`] of a small text file (a line or a few dozen), as text.
/// Bytes that are not UTF-8 (a thread may name itself with any) become
/// U+FFFD: the fields read after a name stay readable, where a strict read
/// failed the whole file, and `exiting` took such a process for gone.
pub fn read_text(path: impl AsRef<Path>) -> std::io::Result<String> {
    let bytes = read_whole(path, 4096)?;
    Ok(String::from_utf8(bytes)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

/// The kernel's `PF_EXITING` task flag: the task has begun to exit.
const PF_EXITING: u32 = 0x4;

/// The task flags (`PF_*`, the ninth field) in `/proc/PID/stat` text. The name
/// before them is in parentheses and may hold spaces and parentheses itself.
pub fn stat_flags(stat: &str) -> Option<u32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(6)?.parse().ok()
}

/// Whether process `pid` has begun to exit (or is gone). Its maps read from now
/// on may be torn: since Linux 6.17 `/proc/PID/maps` is read without the lock
/// that exit takes, so a read races the unmapping of its files one by one.
pub fn exiting(pid: u32) -> bool {
    read_text(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_flags(&s))
        .is_none_or(|f| f & PF_EXITING != 0)
}

/// The processes that still run (zombies included, as [`alive`] counts them):
/// one read of `/proc`, much cheaper than asking after each one in turn. None
/// when `/proc` cannot be read.
pub fn running() -> Option<std::collections::HashSet<u32>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    Some(dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
}

/// Opens the file behind mapping `m` of process `pid`: the one it maps, even if
/// its path has been replaced since (`map_files`), else by path in its root.
pub fn open_mapped(pid: u32, m: &Mapping) -> Option<std::fs::File> {
    std::fs::File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end))
        .or_else(|_| std::fs::File::open(format!("/proc/{pid}/root{}", m.path)))
        .ok()
}

/// Whether process `pid` sees files other than this process does: in another
/// mount namespace (a container), or with another root (a chroot). Its maps'
/// paths are then its own, and name nothing, or another file, here.
pub fn foreign_root(pid: u32) -> bool {
    other_namespace(pid, "mnt")
        || std::fs::read_link(format!("/proc/{pid}/root")).is_ok_and(|r| r != Path::new("/"))
}

/// Whether this process may open other processes' files through
/// `/proc/PID/map_files`, read once: the kernel asks for CAP_SYS_ADMIN (or
/// CAP_CHECKPOINT_RESTORE) there, which a tracer deployed with only the
/// capabilities it needs (docs/SERVE.md) lacks. Its own entries are asked
/// under the same check.
pub fn map_files_usable() -> bool {
    static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *USABLE.get_or_init(|| {
        let Ok(mut dir) = std::fs::read_dir("/proc/self/map_files") else { return false };
        dir.next().and_then(Result::ok).is_some_and(|e| std::fs::metadata(e.path()).is_ok())
    })
}

/// Whether process `pid` is in another namespace of `kind` (`mnt`, `pid`) than
/// this process; false when either cannot be read.
fn other_namespace(pid: u32, kind: &str) -> bool {
    matches!((namespace_id(pid, kind), own_namespace(kind)), (Some(a), Some(b)) if a != b)
}

/// This process's namespace of `kind` (`mnt`, `pid`), read once: it never
/// moves, and the tracer asks at every process it reads (a stat of a
/// namespace file is a path walk through procfs with an access check).
fn own_namespace(kind: &str) -> Option<(u64, u64)> {
    static MNT: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    static PID: std::sync::OnceLock<Option<(u64, u64)>> = std::sync::OnceLock::new();
    let cell = match kind {
        "mnt" => &MNT,
        "pid" => &PID,
        _ => return namespace_id_of(&format!("/proc/self/ns/{kind}")),
    };
    *cell.get_or_init(|| namespace_id_of(&format!("/proc/self/ns/{kind}")))
}

/// Process `pid`'s namespace of `kind`, as (`st_dev`, `st_ino`).
pub fn namespace_id(pid: u32, kind: &str) -> Option<(u64, u64)> {
    namespace_id_of(&format!("/proc/{pid}/ns/{kind}"))
}

fn namespace_id_of(path: &str) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path).map(|m| (m.dev(), m.ino())).ok()
}

/// Where this process reads file `path` as process `pid` names it: through
/// `/proc/PID/root` when `foreign` (see [`foreign_root`]), else `path` itself.
pub fn path_in(pid: u32, foreign: bool, path: &str) -> std::path::PathBuf {
    if foreign {
        std::path::PathBuf::from(format!("/proc/{pid}/root{path}"))
    } else {
        std::path::PathBuf::from(path)
    }
}

/// A thread's (pid, tid) in its innermost PID namespace, from its `status`
/// (`NStgid:` and `NSpid:` list them outermost first); none when it is in
/// this namespace alone.
pub fn parse_ns_ids(status: &str) -> Option<(u32, u32)> {
    let innermost = |key: &str| -> Option<(usize, u32)> {
        let line = status.lines().find_map(|l| l.strip_prefix(key))?;
        let ids: Vec<u32> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
        Some((ids.len(), *ids.last()?))
    };
    let ((levels, pid), (_, tid)) = (innermost("NStgid:")?, innermost("NSpid:")?);
    (levels > 1).then_some((pid, tid))
}

/// Process `pid`'s PID namespace as (`st_dev`, `st_ino`) of its
/// `/proc/PID/ns/pid`, when it is not this process's; `None` when it is, or
/// cannot be read.
pub fn foreign_pid_ns_id(pid: u32) -> Option<(u64, u64)> {
    let theirs = namespace_id(pid, "pid")?;
    (Some(theirs) != own_namespace("pid")).then_some(theirs)
}

/// Whether process `pid` is in another PID namespace than this process.
pub fn foreign_pid_ns(pid: u32) -> bool {
    foreign_pid_ns_id(pid).is_some()
}

/// Thread `tid`'s ids in its own PID namespace (see [`parse_ns_ids`]).
pub fn ns_ids(tgid: u32, tid: u32) -> Option<(u32, u32)> {
    parse_ns_ids(&read_text(format!("/proc/{tgid}/task/{tid}/status")).ok()?)
}

/// How long a read of `/proc/PID/maps` serves the next reader of the same
/// process: the unwind loader and the symbolizer both read a process's maps at
/// its exec and its first fork, one right after the other, and the kernel's
/// formatting of every mapping's path is what the read costs.
const MAPS_SHARED_FOR: std::time::Duration = std::time::Duration::from_millis(2);

/// A read of `/proc/PID/maps`: its text, and its mappings parsed once, by
/// the first reader that asks for them (the unwind loader and the
/// symbolizer both parse what they share).
pub struct MapsRead {
    pub text: Vec<u8>,
    parsed: std::cell::OnceCell<Vec<Mapping>>,
}

impl MapsRead {
    /// Every mapping of the text, parsed at the first call.
    pub fn mappings(&self) -> &[Mapping] {
        self.parsed.get_or_init(|| parse_maps(&self.text[..]))
    }
}

thread_local! {
    /// The last few reads of `/proc/PID/maps` on this thread.
    static MAPS_READ: std::cell::RefCell<Recent<Option<std::rc::Rc<MapsRead>>>> =
        std::cell::RefCell::new(Recent::default());
    /// The last few reads of `/proc/PID/exe` on this thread.
    static EXE_READ: std::cell::RefCell<Recent<Option<std::rc::Rc<str>>>> =
        std::cell::RefCell::new(Recent::default());
}

/// The last few reads of one kind of process file, each serving the readers
/// that come within [`MAPS_SHARED_FOR`] of it; a process found gone too.
struct Recent<T> {
    kept: Vec<(u32, std::time::Instant, T)>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Recent { kept: Vec::new() }
    }
}

impl<T: Clone> Recent<T> {
    /// What was read of `pid` a moment before `now`, else `read()`, kept.
    fn get(&mut self, pid: u32, now: std::time::Instant, read: impl FnOnce() -> T) -> T {
        self.kept.retain(|(_, at, _)| now.saturating_duration_since(*at) < MAPS_SHARED_FOR);
        if let Some((_, _, kept)) = self.kept.iter().find(|(p, _, _)| *p == pid) {
            return kept.clone();
        }
        let got = read();
        if self.kept.len() >= 8 {
            self.kept.remove(0);
        }
        self.kept.push((pid, now, got.clone()));
        got
    }
}

/// `/proc/PID/maps` (None: the process is gone), shared with a read of the
/// same process on this thread less than [`MAPS_SHARED_FOR`] ago.
pub fn maps_read(pid: u32) -> Option<std::rc::Rc<MapsRead>> {
    maps_read_at(pid, std::time::Instant::now(), &mut maps_text)
}

fn maps_read_at(
    pid: u32,
    now: std::time::Instant,
    read: &mut dyn FnMut(u32) -> Option<Vec<u8>>,
) -> Option<std::rc::Rc<MapsRead>> {
    MAPS_READ.with_borrow_mut(|reads| {
        reads.get(pid, now, || {
            log::trace!("maps of {pid}: read");
            let text = read(pid)?;
            Some(std::rc::Rc::new(MapsRead { text, parsed: std::cell::OnceCell::new() }))
        })
    })
}

/// The path of process `pid`'s executable (None: gone, or a kernel thread),
/// shared as [`maps_read`] is: the unwind loader and the Python and V8
/// trackers each ask at a process's exec.
pub fn exe_path(pid: u32) -> Option<std::rc::Rc<str>> {
    EXE_READ.with_borrow_mut(|reads| {
        reads.get(pid, std::time::Instant::now(), || {
            let link = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
            Some(link.to_str()?.into())
        })
    })
}

/// Whether process `pid` writes a perf map (`/tmp/perf-PID.map`, how JIT
/// compilers name their code for profilers).
pub fn has_perf_map(pid: u32) -> bool {
    Path::new(&format!("/tmp/perf-{pid}.map")).exists()
}

/// Reads `/proc/PID/maps`; empty when the process is gone.
pub fn maps_of(pid: u32) -> Vec<Mapping> {
    maps_text(pid).map_or_else(Vec::new, |t| parse_maps(&t))
}

/// The file mapping `addr` lies in.
pub fn mapping_of(maps: &[Mapping], addr: u64) -> Option<&Mapping> {
    maps.iter().find(|m| m.start <= addr && addr < m.end)
}

/// The module (file name) and file offset of `addr`.
pub fn locate(maps: &[Mapping], addr: u64) -> Option<(String, u64)> {
    let m = mapping_of(maps, addr)?;
    let name = m.path.rsplit('/').next().unwrap_or(&m.path).to_string();
    Some((name, addr - m.start + m.offset))
}

/// A child process for tests whose maps stay as they are: `sleep 30` once its
/// dynamic loader has mapped libc and what follows it (the locale), or 5 s.
#[cfg(test)]
pub(crate) fn settled_sleeper() -> std::process::Child {
    let child = std::process::Command::new("sleep").arg("30").spawn().expect("sleep runs");
    let (t0, mut last) = (std::time::Instant::now(), Vec::new());
    while t0.elapsed().as_secs() < 5 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = std::fs::read(format!("/proc/{}/maps", child.id())).unwrap_or_default();
        if now == last && now.windows(4).any(|w| w == b"libc") {
            break;
        }
        last = now;
    }
    child
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_flags_follow_any_name() {
        assert_eq!(stat_flags("20577 (cat) R 20532 20532 702 0 -1 4194304 125 0"), Some(4194304));
        // A name with spaces and a closing parenthesis of its own.
        assert_eq!(stat_flags("7 (a) b (c)) S 1 7 7 0 -1 4194308 0"), Some(4194308));
        assert_eq!(stat_flags("7 (cut"), None);
        assert_eq!(stat_flags("7 (x) S 1"), None);
        assert!(exiting(u32::MAX - 1), "a process that is gone counts as exiting");
        assert!(!exiting(std::process::id()));
    }

    #[test]
    fn a_threads_ids_in_its_own_pid_namespace_are_the_innermost() {
        let status = "Name:\tctr_app\nTgid:\t2063\nNgid:\t0\nPid:\t2065\nNStgid:\t2063\t1\nNSpid:\t2065\t3\n";
        assert_eq!(parse_ns_ids(status), Some((1, 3)));
        let nested = "NStgid:\t900\t40\t1\nNSpid:\t900\t40\t1\n";
        assert_eq!(parse_ns_ids(nested), Some((1, 1)));
        assert_eq!(
            parse_ns_ids("NStgid:\t77\nNSpid:\t78\n"),
            None,
            "one namespace: the host's ids are its own"
        );
        assert_eq!(parse_ns_ids("Name:\tx\n"), None, "kernels before 4.1 list none");
        let me = std::process::id();
        assert!(!foreign_pid_ns(me));
        assert_eq!(foreign_pid_ns_id(me), None, "this process's namespace is not foreign");
        assert_eq!(foreign_pid_ns_id(u32::MAX - 1), None, "a missing process has none");
        assert_eq!(ns_ids(me, me), None);
    }

    #[test]
    fn a_containers_files_are_read_through_its_root() {
        let me = std::process::id();
        assert!(!foreign_root(me), "this process shares its own root");
        assert_eq!(path_in(me, false, "/usr/lib/libc.so.6"), Path::new("/usr/lib/libc.so.6"));
        assert_eq!(path_in(42, true, "/app/server"), Path::new("/proc/42/root/app/server"));
    }

    const MAPS: &str = "\
5581a000-5581b000 r--p 00000000 fe:01 123 /usr/bin/app
5581b000-5581c000 r-xp 00001000 fe:01 123 /usr/bin/app
7f00000-7f01000 rw-p 00000000 00:00 0
7ffd000-7ffe000 rw-p 00000000 00:00 0 [stack]
7f10000-7f20000 r-xp 00028000 fe:01 9 /usr/lib/x86_64-linux-gnu/libc.so.6
garbage line
7f30000-7f40000 r-xp 00000000 fe:01 9 /tmp/my lib (deleted)
";

    #[test]
    fn file_backed_mappings_only() {
        let maps = parse_maps(MAPS.as_bytes());
        assert_eq!(maps.len(), 4);
        assert_eq!(maps[3].path, "/tmp/my lib (deleted)");
        assert_eq!((maps[1].exec, maps[1].dev, maps[1].inode), (true, 0xfe << 32 | 1, 123));
        assert!(!maps[0].exec, "r--p is not executable");
    }

    #[test]
    fn locates_module_and_file_offset() {
        let maps = parse_maps(MAPS.as_bytes());
        assert_eq!(locate(&maps, 0x5581b010), Some(("app".into(), 0x1010)));
        assert_eq!(locate(&maps, 0x7f10004), Some(("libc.so.6".into(), 0x28004)));
        assert_eq!(locate(&maps, 0x7f00010), None);
    }

    #[test]
    fn regions_keep_anonymous_mappings_and_the_exec_bit() {
        let r = parse_regions(MAPS.as_bytes());
        assert_eq!(r.len(), 6, "{r:?}");
        assert!(r.windows(2).all(|w| w[0].start <= w[1].start), "sorted");
        let stack = r.iter().find(|x| x.start == 0x7ffd000).unwrap();
        assert!(!stack.exec);
        assert!(r.iter().find(|x| x.start == 0x5581b000).unwrap().exec);
    }

    #[test]
    fn status_tgid_is_parsed() {
        assert_eq!(status_tgid("Name:\tx\nTgid:\t42\nPid:\t43\n".as_bytes()), Some(42));
        assert_eq!(status_tgid("Name:\tx\n".as_bytes()), None);
        assert_eq!(tgid_of(std::process::id()), Some(std::process::id()));
    }

    #[test]
    fn a_proc_file_is_read_whole_past_the_room_first_given() {
        let maps = read_whole("/proc/self/maps", 64).unwrap();
        assert!(maps.len() > 64, "one buffer's worth was not all");
        assert_eq!(maps.last(), Some(&b'\n'), "the last line is whole");
        let stat = read_text("/proc/self/stat").unwrap();
        assert!(stat.starts_with(&format!("{} (", std::process::id())));
        assert!(read_text("/proc/self/no-such-file").is_err());
    }

    /// The in-place parse agrees with the files themselves: every path line
    /// of this process's maps, each with its file's device and inode.
    #[test]
    fn this_processs_own_maps_parse_to_its_files() {
        use std::os::unix::fs::MetadataExt as _;
        let text = read_whole("/proc/self/maps", 64).unwrap();
        let lines = String::from_utf8_lossy(&text);
        let with_path = lines.lines().filter(|l| l.contains(" /")).count();
        let maps = parse_maps(&text);
        assert_eq!(maps.len(), with_path);
        let regions = parse_regions(&text);
        assert_eq!(regions.len(), lines.lines().count());
        let exe = std::env::current_exe().unwrap();
        let meta = std::fs::metadata(&exe).unwrap();
        let mine = maps.iter().find(|m| std::path::Path::new(&m.path) == exe).unwrap();
        let dev = u64::from(libc::major(meta.dev())) << 32 | u64::from(libc::minor(meta.dev()));
        assert_eq!((mine.dev, mine.inode), (dev, meta.ino()));
        assert!(maps.iter().any(|m| m.exec) && regions.iter().any(|r| r.exec));
    }

    /// A thread named with bytes that are not UTF-8 keeps its `stat`
    /// readable: its flags are read, and it is not taken for exiting.
    #[test]
    fn a_thread_with_a_name_not_utf8_is_read() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: PR_SET_NAME copies at most 16 bytes of a NUL-ended string.
            unsafe { libc::prctl(libc::PR_SET_NAME, c"tw\xff\xfe(odd)".as_ptr()) };
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = wait.recv();
        });
        let tid = rx.recv().unwrap();
        let stat = read_text(format!("/proc/self/task/{tid}/stat")).unwrap();
        assert!(stat.contains("(tw\u{fffd}\u{fffd}(odd))"), "{stat}");
        assert!(stat_flags(&stat).is_some_and(|f| f & PF_EXITING == 0), "{stat}");
        assert!(!exiting(tid), "a live thread with an odd name is not exiting");
        done.send(()).unwrap();
        t.join().unwrap();
    }

    #[test]
    fn alive_knows_live_gone_and_impossible_ids() {
        assert!(alive(std::process::id()));
        // A thread's id counts too, as its /proc directory does.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let _ = wait.recv();
        });
        let tid = rx.recv().unwrap();
        assert!(tid != std::process::id() && alive(tid), "thread {tid}");
        done.send(()).unwrap();
        t.join().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid), "a reaped child is gone");
        assert!(!alive(0), "0 names a process group");
        assert!(!alive(u32::MAX), "-1 names every process");
    }

    #[test]
    fn the_executable_is_read_once_for_its_readers() {
        let me = std::process::id();
        let exe = exe_path(me).unwrap();
        assert_eq!(&*exe, std::env::current_exe().unwrap().to_str().unwrap());
        assert!(std::rc::Rc::ptr_eq(&exe, &exe_path(me).unwrap()), "the second reader shares it");
        assert_eq!(exe_path(u32::MAX - 1), None);
    }

    #[test]
    fn a_read_of_maps_serves_the_next_reader_for_a_moment() {
        let mut reads = 0;
        let mut read = |_pid: u32| {
            reads += 1;
            Some(b"text".to_vec())
        };
        let t0 = std::time::Instant::now();
        let a = maps_read_at(7, t0, &mut read).unwrap();
        let b = maps_read_at(7, t0 + std::time::Duration::from_micros(300), &mut read).unwrap();
        assert!(std::rc::Rc::ptr_eq(&a, &b), "one read for both");
        // ... and one parse: the second reader's mappings are the first's.
        assert!(std::ptr::eq(a.mappings(), b.mappings()));
        let _other = maps_read_at(8, t0, &mut read).unwrap();
        let c = maps_read_at(7, t0 + MAPS_SHARED_FOR, &mut read).unwrap();
        assert!(!std::rc::Rc::ptr_eq(&a, &c), "read again once the moment has passed");
        assert_eq!(reads, 3);
        assert!(maps_read_at(9, t0, &mut |_| None).is_none());
        let mut tries = 0;
        let mut gone = |_pid: u32| {
            tries += 1;
            None
        };
        assert!(maps_read_at(9, t0 + std::time::Duration::from_micros(10), &mut gone).is_none());
        assert_eq!(tries, 0, "a process found gone is not looked for again at once");
    }
}
