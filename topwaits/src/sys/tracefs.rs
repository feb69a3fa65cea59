//! tracefs: making sure it is mounted for the classic (syscall) tracepoints, and
//! reading field offsets from a tracepoint's `format` file.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// The byte offset of a field in tracepoint `format` text.
pub fn field_offset<R: BufRead>(reader: R, field: &str) -> Option<u32> {
    for line in reader.lines().map_while(Result::ok) {
        let line = line.trim();
        let Some(decl) = line.strip_prefix("field:") else { continue };
        let mut parts = decl.split(';').map(str::trim);
        let Some(name_decl) = parts.next() else { continue };
        // "int op", "u32 * uaddr", "char comm[16]"
        let name = name_decl.rsplit([' ', '*']).next().unwrap_or("");
        let name = name.split('[').next().unwrap_or("");
        if name != field {
            continue;
        }
        for p in parts {
            if let Some(off) = p.strip_prefix("offset:") {
                return off.trim().parse().ok();
            }
        }
    }
    None
}

/// A mounted tracefs; unmounted on drop if this process mounted it.
pub struct Tracefs {
    pub root: PathBuf,
    mounted_here: bool,
}

impl Tracefs {
    /// Finds tracefs, mounting it at /sys/kernel/tracing if nothing is mounted.
    pub fn open() -> Result<Tracefs> {
        for root in [TRACEFS, DEBUGFS_TRACING] {
            if Path::new(root).join("events").is_dir() {
                return Ok(Tracefs { root: root.into(), mounted_here: false });
            }
        }
        let target = std::ffi::CString::new(TRACEFS)?;
        let fstype = std::ffi::CString::new("tracefs")?;
        let src = std::ffi::CString::new("nodev")?;
        // SAFETY: all pointers are to NUL-terminated strings that outlive the call.
        let rc = unsafe {
            libc::mount(src.as_ptr(), target.as_ptr(), fstype.as_ptr(), 0, std::ptr::null())
        };
        if rc != 0 {
            bail!(
                "tracefs is not mounted and mounting it at {TRACEFS} failed ({}); mount it with: mount -t tracefs nodev {TRACEFS}",
                std::io::Error::last_os_error()
            );
        }
        Ok(Tracefs { root: TRACEFS.into(), mounted_here: true })
    }

    /// Whether a tracepoint exists.
    pub fn has_event(&self, category: &str, name: &str) -> bool {
        self.root.join("events").join(category).join(name).is_dir()
    }

    /// A field's offset in a tracepoint's record.
    pub fn field_offset(&self, category: &str, name: &str, field: &str) -> Option<u32> {
        let f =
            std::fs::File::open(self.root.join("events").join(category).join(name).join("format"))
                .ok()?;
        field_offset(std::io::BufReader::new(f), field)
    }
}

impl Drop for Tracefs {
    fn drop(&mut self) {
        if self.mounted_here {
            if let Ok(target) = std::ffi::CString::new(self.root.as_os_str().as_encoded_bytes()) {
                // SAFETY: a NUL-terminated path; a failed unmount leaves it mounted.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORMAT: &str = "name: sys_enter_futex
ID: 522
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:int __syscall_nr;\toffset:8;\tsize:4;\tsigned:1;
\tfield:u32 * uaddr;\toffset:16;\tsize:8;\tsigned:0;
\tfield:int op;\toffset:24;\tsize:8;\tsigned:0;
\tfield:char comm[16];\toffset:64;\tsize:16;\tsigned:0;
";

    #[test]
    fn finds_field_offsets() {
        assert_eq!(field_offset(FORMAT.as_bytes(), "op"), Some(24));
        assert_eq!(field_offset(FORMAT.as_bytes(), "uaddr"), Some(16));
        assert_eq!(field_offset(FORMAT.as_bytes(), "comm"), Some(64));
        assert_eq!(field_offset(FORMAT.as_bytes(), "val"), None);
        assert_eq!(field_offset("field:int op;offset:x;".as_bytes(), "op"), None);
    }
}
