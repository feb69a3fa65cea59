//! User frames already named, kept by the file and file offset their code lies
//! at: a name comes from the file alone, so every process that maps the file
//! (each of a server's forks, each interval of `serve`) reuses it instead of
//! naming it again through its own maps.

use crate::model::Frame;
use crate::sys::procfs::{mapping_of, Mapping};
use crate::util::fasthash::FastMap;

/// Most names kept; past it the cache starts again empty (a name is only
/// ever read again, never lost).
pub const MAX_FILE_FRAMES: usize = 1 << 17;

/// A code address as the file it lies in (device, inode) and its offset there.
type FileKey = (u64, u64, u64);

/// Names of code addresses by [`FileKey`].
#[derive(Default)]
pub struct FileFrames {
    names: FastMap<FileKey, Frame>,
}

/// Where `addr` lies in a file whose bytes cannot change under it, by `maps`:
/// not in anonymous memory (a JIT's code, named by address), a memfd (code
/// written at run time) or a deleted file.
fn key(maps: &[Mapping], addr: u64) -> Option<FileKey> {
    let m = mapping_of(maps, addr)?;
    let fixed = m.exec
        && m.inode != 0
        && m.path.starts_with('/')
        && !m.path.starts_with("/memfd:")
        && !m.path.ends_with(" (deleted)");
    fixed.then(|| (m.dev, m.inode, addr - m.start + m.offset))
}

impl FileFrames {
    /// The name kept for `addr` of a process mapped as `maps`, as a frame at `addr`.
    pub fn get(&self, maps: &[Mapping], addr: u64) -> Option<Frame> {
        let f = self.names.get(&key(maps, addr)?)?;
        Some(Frame { addr, ..f.clone() })
    }

    /// Keeps the names of `frames`, of a process mapped as `maps`. A frame
    /// left unnamed is not kept: the file may have failed to read this time.
    pub fn keep(&mut self, maps: &[Mapping], frames: &[Frame]) {
        for f in frames.iter().filter(|f| f.symbol.is_some() || f.module.is_some()) {
            let Some(k) = key(maps, f.addr) else { continue };
            if self.names.len() >= MAX_FILE_FRAMES {
                self.names.clear();
            }
            self.names.insert(k, f.clone());
        }
    }

    /// Keeps only the names of files that `mapped` says some process still maps:
    /// an inode freed with its file may come back as another file.
    pub fn retain_files(&mut self, mapped: &dyn Fn(u64, u64) -> bool) {
        self.names.retain(|&(dev, inode, _), _| mapped(dev, inode));
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.names.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(start: u64, path: &str, inode: u64, exec: bool) -> Mapping {
        Mapping {
            start,
            end: start + 0x1000,
            offset: 0x2000,
            path: path.into(),
            exec,
            dev: 8,
            inode,
        }
    }

    fn named(addr: u64, name: &str) -> Frame {
        Frame { addr, symbol: Some(name.into()), module: Some("perf".into()), offset: Some(4) }
    }

    #[test]
    fn a_name_serves_every_process_that_maps_the_file_wherever_it_lies() {
        let mut c = FileFrames::default();
        let parent = [mapping(0x40_0000, "/usr/bin/perf", 11, true)];
        c.keep(&parent, &[named(0x40_0010, "run_bench")]);
        // Another process maps the same file elsewhere.
        let other = [mapping(0x7f_0000, "/usr/bin/perf", 11, true)];
        let f = c.get(&other, 0x7f_0010).expect("the same file and offset");
        assert_eq!((f.addr, f.symbol.as_deref()), (0x7f_0010, Some("run_bench")));
        assert_eq!(c.get(&other, 0x7f_0020), None, "another offset is not named");
        // Another file at the same place names nothing.
        let replaced = [mapping(0x40_0000, "/usr/bin/perf", 12, true)];
        assert_eq!(c.get(&replaced, 0x40_0010), None);
    }

    #[test]
    fn code_that_can_change_is_never_kept() {
        let mut c = FileFrames::default();
        let maps = [
            mapping(0x1000, "/memfd:jit (deleted)", 5, true),
            mapping(0x3000, "/tmp/lib.so (deleted)", 6, true),
            mapping(0x5000, "/usr/lib/data", 7, false),
        ];
        let frames =
            [named(0x1010, "a"), named(0x3010, "b"), named(0x5010, "c"), named(0x9000, "d")];
        c.keep(&maps, &frames);
        assert_eq!(c.len(), 0);
        // Nor a frame that could not be named this time.
        let file = [mapping(0x1000, "/usr/lib/libc.so.6", 9, true)];
        c.keep(&file, &[Frame::unknown(0x1010)]);
        assert_eq!(c.get(&file, 0x1010), None);
    }

    #[test]
    fn names_of_files_no_longer_mapped_go() {
        let mut c = FileFrames::default();
        let maps = [mapping(0x1000, "/a", 1, true), mapping(0x3000, "/b", 2, true)];
        c.keep(&maps, &[named(0x1010, "a"), named(0x3010, "b")]);
        c.retain_files(&|_, inode| inode == 2);
        assert_eq!(c.get(&maps, 0x1010), None);
        assert!(c.get(&maps, 0x3010).is_some());
    }
}
