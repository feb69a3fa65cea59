//! The files topwaits writes (`--svg`, `--timeline`, `--pprof`, `--perfetto`,
//! `--dot`, `--rt-app`, `record -o`), written the way a tool run as root must:
//! never through another user's symbolic link, and never seen half-written.
//!
//! A file is prepared before anything loads, so that a bad path fails at once: a
//! new temporary file is created beside its target (`O_EXCL`, mode 0644 less the
//! umask), and when the report is done it is written, synced and renamed over the
//! target. A rename replaces a symbolic link instead of following it. The rules:
//! - a symbolic link owned by the caller or by root is followed, and each link it
//!   leads to is judged by the same rules;
//! - one owned by another user is replaced, never followed, and in a
//!   world-writable sticky directory (such as `/tmp`) it is refused in one line,
//!   since there anyone could have planted it;
//! - a FIFO or character device (`/dev/null`, `/dev/stdout` on a pipe) is
//!   written in place; a directory, block device or socket is refused.

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{
    FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context as _, Result};

/// How many symbolic links a path may lead through, as the kernel's limit.
const MAX_LINKS: usize = 40;

/// The mode of a new file, less the umask.
const NEW_MODE: u32 = 0o644;

/// Whose links may be followed: the caller's own, and root's.
#[derive(Clone, Copy, Debug)]
pub struct Caller {
    pub euid: u32,
}

impl Caller {
    pub fn this_process() -> Self {
        // SAFETY: geteuid has no preconditions and cannot fail.
        Caller { euid: unsafe { libc::geteuid() } }
    }

    fn trusts(self, owner: u32) -> bool {
        owner == self.euid || owner == 0
    }

    /// Whether a rename may replace `target` (owned by `owner`) in a sticky
    /// directory owned by `dir_owner`: the kernel allows it to the file's owner,
    /// the directory's owner and root.
    fn may_replace_in_sticky(self, owner: u32, dir_owner: u32) -> bool {
        self.euid == 0 || owner == self.euid || dir_owner == self.euid
    }
}

/// Where a file's bytes go.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// A new file renamed over `target` once written (which replaces a symbolic
    /// link left at `target`, an untrusted one included).
    Replace { target: PathBuf, mode: Option<u32> },
    /// Written in place: a FIFO or a character device.
    Stream(PathBuf),
}

fn is_sticky_world_writable(m: &fs::Metadata) -> bool {
    m.mode() & 0o1002 == 0o1002
}

/// The directory a path's last component lives in (`.` for a bare name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Refuses a path whose directories lead through a symbolic link another user
/// planted in a world-writable sticky directory.
fn check_ancestors(path: &Path, caller: Caller) -> Result<()> {
    let mut prefix = PathBuf::new();
    let components: Vec<_> = path.components().collect();
    for c in &components[..components.len().saturating_sub(1)] {
        prefix.push(c);
        let Ok(meta) = fs::symlink_metadata(&prefix) else { return Ok(()) };
        if meta.file_type().is_symlink() {
            check_link(&prefix, &meta, caller)?;
        }
    }
    Ok(())
}

/// Refuses a symbolic link that another user owns in a world-writable sticky
/// directory; says whether a link elsewhere may be followed.
fn check_link(link: &Path, meta: &fs::Metadata, caller: Caller) -> Result<bool> {
    if caller.trusts(meta.uid()) {
        return Ok(true);
    }
    let dir = parent_dir(link);
    if fs::metadata(&dir).is_ok_and(|d| is_sticky_world_writable(&d)) {
        bail!(
            "refusing to write {}: it is a symbolic link owned by uid {} in the world-writable sticky directory {}, where anyone could have planted it; remove it or choose another path",
            link.display(),
            meta.uid(),
            dir.display()
        );
    }
    Ok(false)
}

/// Decides where the bytes for `path` go, following only trusted links.
pub fn plan(path: &Path, caller: Caller) -> Result<Plan> {
    if path.as_os_str().is_empty() {
        bail!("an empty path is not a file name");
    }
    let mut at = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        check_ancestors(&at, caller)?;
        let meta = match fs::symlink_metadata(&at) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Plan::Replace { target: at, mode: None })
            }
            Err(e) => return Err(anyhow!(e).context(format!("cannot write {}", at.display()))),
        };
        let t = meta.file_type();
        if t.is_symlink() {
            if !check_link(&at, &meta, caller)? {
                // Another user's link: replaced by the rename, never followed.
                return Ok(Plan::Replace { target: at, mode: None });
            }
            // What it leads to, followed by the kernel: a magic link such as
            // /proc/self/fd/1 (behind /dev/stdout) names a pipe it cannot be read as.
            if fs::metadata(&at)
                .is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device())
            {
                return Ok(Plan::Stream(at));
            }
            let to = fs::read_link(&at)
                .with_context(|| format!("cannot read the link {}", at.display()))?;
            at = if to.is_absolute() { to } else { parent_dir(&at).join(to) };
            continue;
        }
        return if t.is_file() {
            // The permission bits only: a profile never inherits set-id bits.
            Ok(Plan::Replace { target: at, mode: Some(meta.mode() & 0o777) })
        } else if t.is_fifo() || t.is_char_device() {
            Ok(Plan::Stream(at))
        } else if t.is_dir() {
            Err(anyhow!("cannot write {}: it is a directory", path.display()))
        } else {
            Err(anyhow!(
                "cannot write {}: it is not a regular file, a FIFO or a character device",
                path.display()
            ))
        };
    }
    bail!("cannot write {}: too many levels of symbolic links", path.display())
}

/// An output file, prepared before anything loads so that a bad path fails at
/// once rather than after the trace.
pub struct OutputFile {
    /// The path as the user gave it, for messages.
    shown: PathBuf,
    file: Option<File>,
    /// With a temporary file: (its path, the target it is renamed to).
    rename: Option<(PathBuf, PathBuf)>,
}

impl OutputFile {
    /// Prepares `path` for writing, or fails in one line naming it.
    pub fn create(path: &Path) -> Result<Self> {
        Self::create_as(path, Caller::this_process())
    }

    /// [`OutputFile::create`] for a given caller (tests pretend to be another).
    pub fn create_as(path: &Path, caller: Caller) -> Result<Self> {
        match plan(path, caller)? {
            Plan::Stream(at) => {
                let file = fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NOCTTY)
                    .open(&at)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                Ok(OutputFile { shown: path.to_path_buf(), file: Some(file), rename: None })
            }
            Plan::Replace { target, mode } => {
                let dir = parent_dir(&target);
                check_replaceable(&target, &dir, caller)?;
                let (tmp, file) = temporary(&dir, &target)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                if let Some(mode) = mode {
                    // Keep an existing file's permissions (a 0600 file stays 0600).
                    let _ = file.set_permissions(fs::Permissions::from_mode(mode));
                }
                Ok(OutputFile {
                    shown: path.to_path_buf(),
                    file: Some(file),
                    rename: Some((tmp, target)),
                })
            }
        }
    }

    /// Prepares the file of an optional option.
    pub fn create_opt(path: Option<&Path>) -> Result<Option<Self>> {
        path.map(Self::create).transpose()
    }

    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// Writes the file through a buffered writer and puts it in place, naming it in
    /// errors and on stderr.
    pub fn write(self, f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
        let path = self.shown.clone();
        self.write_quiet(f)?;
        crate::util::stderr::say!("Wrote {}", path.display());
        Ok(())
    }

    /// [`OutputFile::write`] without the "Wrote" line.
    pub fn write_quiet(mut self, f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
        let file = self
            .file
            .take()
            .ok_or_else(|| anyhow!("{} was written already", self.shown.display()))?;
        let mut w = BufWriter::new(file);
        f(&mut w)
            .and_then(|()| w.flush())
            .map_err(|e| anyhow!(e).context(format!("failed to write {}", self.shown.display())))?;
        let file = w.into_inner().map_err(|e| {
            anyhow!(e.into_error()).context(format!("failed to write {}", self.shown.display()))
        })?;
        if let Some((tmp, target)) = self.rename.take() {
            let placed = file.sync_all().and_then(|()| fs::rename(&tmp, &target));
            if let Err(e) = placed {
                let _ = fs::remove_file(&tmp);
                return Err(anyhow!(e).context(format!("failed to write {}", self.shown.display())));
            }
            // The rename itself is made durable with its directory.
            if let Ok(d) = File::open(parent_dir(&target)) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for OutputFile {
    /// A file never written (the trace failed) leaves no temporary file behind.
    fn drop(&mut self) {
        if let Some((tmp, _)) = self.rename.take() {
            let _ = fs::remove_file(tmp);
        }
    }
}

/// Fails now, not after the trace, where the rename would: an existing file of
/// another user in a sticky directory that the caller may not replace.
fn check_replaceable(target: &Path, dir: &Path, caller: Caller) -> Result<()> {
    let (Ok(d), Ok(t)) = (fs::metadata(dir), fs::symlink_metadata(target)) else { return Ok(()) };
    if d.mode() & 0o1000 != 0 && !caller.may_replace_in_sticky(t.uid(), d.uid()) {
        bail!(
            "cannot write {}: it belongs to uid {} in the sticky directory {}, so only its owner may replace it",
            target.display(),
            t.uid(),
            dir.display()
        );
    }
    Ok(())
}

/// A new, empty file beside `target`, created exclusively.
fn temporary(dir: &Path, target: &Path) -> io::Result<(PathBuf, File)> {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    let mut last = io::Error::other("no temporary name left");
    for n in 0..100u32 {
        let tmp = dir.join(format!(".{name}.topwaits-{}-{n}.tmp", std::process::id()));
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(NEW_MODE)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory.
    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tw-outfile-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn me() -> Caller {
        Caller::this_process()
    }

    fn write(p: &Path, caller: Caller, text: &str) -> Result<()> {
        OutputFile::create_as(p, caller)?.write_quiet(|w| w.write_all(text.as_bytes()))
    }

    /// A link to `to` at `at`, owned by neither the caller [`STRANGER`] nor root.
    fn plant(to: &Path, at: &Path) {
        std::os::unix::fs::symlink(to, at).unwrap();
        if me().euid == 0 {
            std::os::unix::fs::lchown(at, Some(65534), Some(65534)).unwrap();
        }
    }

    /// A caller who owns neither the planted links nor is root.
    const STRANGER: Caller = Caller { euid: 4_000_000 };

    fn entries(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_new_file_appears_whole_and_leaves_nothing_beside_it() {
        let d = scratch("new");
        let p = d.join("out.svg");
        let f = OutputFile::create_as(&p, me()).unwrap();
        // Prepared but not yet written: the target does not exist yet.
        assert!(!p.exists());
        f.write_quiet(|w| w.write_all(b"<svg/>")).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"<svg/>");
        assert_eq!(entries(&d), ["out.svg"]);
        let mode = fs::metadata(&p).unwrap().mode() & 0o777;
        assert_eq!(mode & !0o644, 0, "at most 0644: {mode:o}");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_existing_file_is_replaced_and_keeps_its_permissions() {
        let d = scratch("existing");
        let p = d.join("out.pb.gz");
        fs::write(&p, b"old old old").unwrap();
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        write(&p, me(), "new").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "new");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o600);
        // Set-id bits are not carried over to what replaces a file.
        fs::set_permissions(&p, fs::Permissions::from_mode(0o4755)).unwrap();
        write(&p, me(), "newer").unwrap();
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o7777, 0o755);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_trace_that_fails_leaves_neither_a_temporary_file_nor_a_changed_target() {
        let d = scratch("failed");
        let p = d.join("rec.tw");
        fs::write(&p, b"previous").unwrap();
        drop(OutputFile::create_as(&p, me()).unwrap());
        assert_eq!(entries(&d), ["rec.tw"]);
        let e = OutputFile::create_as(&p, me())
            .unwrap()
            .write_quiet(|_| Err(io::Error::other("disk on fire")))
            .unwrap_err();
        assert!(format!("{e:#}").contains("disk on fire"), "{e:#}");
        assert_eq!(fs::read(&p).unwrap(), b"previous");
        assert_eq!(entries(&d), ["rec.tw"]);
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn an_own_link_is_followed_and_stays_a_link() {
        let d = scratch("ownlink");
        fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink("real/target.svg", d.join("latest.svg")).unwrap();
        write(&d.join("latest.svg"), me(), "svg").unwrap();
        assert!(fs::symlink_metadata(d.join("latest.svg")).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(d.join("real/target.svg")).unwrap(), "svg");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_users_link_is_replaced_never_followed() {
        let d = scratch("otherlink");
        let victim = d.join("victim");
        fs::write(&victim, b"precious").unwrap();
        plant(&victim, &d.join("out.svg"));
        assert_eq!(
            plan(&d.join("out.svg"), STRANGER).unwrap(),
            Plan::Replace { target: d.join("out.svg"), mode: None }
        );
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn another_users_link_in_a_sticky_world_writable_directory_is_refused() {
        let d = scratch("sticky");
        fs::set_permissions(&d, fs::Permissions::from_mode(0o1777)).unwrap();
        let victim = d.join("victim");
        fs::write(&victim, b"precious").unwrap();
        plant(&victim, &d.join("out.svg"));
        let e = OutputFile::create_as(&d.join("out.svg"), STRANGER).err().unwrap().to_string();
        assert!(
            e.starts_with("refusing to write") && e.contains("world-writable sticky directory"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        // And as a directory on the way.
        plant(&d, &d.join("sub"));
        let e = OutputFile::create_as(&d.join("sub/x.svg"), STRANGER).err().unwrap().to_string();
        assert!(e.starts_with("refusing to write"), "{e}");
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_fifo_or_device_is_written_in_place() {
        assert_eq!(plan(Path::new("/dev/null"), me()).unwrap(), Plan::Stream("/dev/null".into()));
        write(Path::new("/dev/null"), me(), "gone").unwrap();
        let d = scratch("fifo");
        let fifo = d.join("pipe");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(plan(&fifo, me()).unwrap(), Plan::Stream(fifo.clone()));
        // /dev/stdout on a pipe: the magic link in /proc names the pipe.
        let mut fds = [0i32; 2];
        // SAFETY: pipe fills two fds, closed below.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let through_proc = PathBuf::from(format!("/proc/self/fd/{}", fds[1]));
        assert_eq!(plan(&through_proc, me()).unwrap(), Plan::Stream(through_proc.clone()));
        // SAFETY: the fds made above.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1])
        };
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn unwritable_places_fail_before_the_trace_in_one_line() {
        let d = scratch("bad");
        let e = OutputFile::create_as(&d, me()).err().unwrap().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = format!(
            "{:#}",
            OutputFile::create_as(&d.join("no/such/dir/x.svg"), me()).err().unwrap()
        );
        assert!(e.contains("cannot write") && e.contains("No such file"), "{e}");
        // /proc takes no new files, even from root.
        let e =
            format!("{:#}", OutputFile::create_as(Path::new("/proc/version"), me()).err().unwrap());
        assert!(e.contains("cannot write /proc/version"), "{e}");
        assert!(OutputFile::create_as(Path::new(""), me()).is_err());
        let mut loop_at = d.join("loop");
        std::os::unix::fs::symlink("loop", &loop_at).unwrap();
        let e = OutputFile::create_as(&loop_at, me()).err().unwrap().to_string();
        assert!(e.contains("too many levels"), "{e}");
        loop_at.pop();
        fs::remove_dir_all(&d).unwrap();
    }
}
