//! Unwind tables kept across runs: a file's table is built once, not once per
//! trace. Entries live in a directory that only topwaits' own user may write
//! (root's `/var/cache/topwaits` by default, created 0700), one file per
//! table, named by the file's build id, or where it has none by its device,
//! inode, size and modification time. Every entry is checked before use: its
//! format version, a checksum over it, and the key it was made for; anything
//! else (damaged, foreign, stale) is rebuilt and written over. The directory's
//! size is bounded: past it, the least recently used entries go. A directory
//! another user can write is not used at all, since its entries steer the
//! in-kernel walker.

use std::fs;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{bail, Context as _, Result};

use super::Table;
use crate::sys::elf;

/// The most the entries may take.
pub const DEFAULT_LIMIT: u64 = 256 << 20;

/// The first bytes of every entry, and its format: raised whenever the rows'
/// meaning or their encoding changes, so that an older entry is rebuilt.
const MAGIC: &[u8; 8] = b"TWCFI\0\0\0";
const FORMAT: u32 = 4;
/// An entry's suffix.
const SUFFIX: &str = ".cfi";

/// What identifies a file's contents: its build id, or where it has none, its
/// device, inode, size and modification time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Key {
    BuildId(Vec<u8>),
    File { dev: u64, inode: u64, size: u64, mtime_ns: i128 },
}

impl Key {
    /// The key of an open ELF file.
    pub fn of<R: Read + Seek>(f: &mut R, meta: &fs::Metadata) -> Key {
        match elf::build_id(f) {
            Ok(Some(id)) => Key::BuildId(id),
            _ => Key::File {
                dev: meta.dev(),
                inode: meta.ino(),
                size: meta.size(),
                mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
            },
        }
    }

    /// The entry's file name, and the text its header keeps to match it.
    fn name(&self) -> String {
        match self {
            Key::BuildId(id) => {
                format!("b-{}{SUFFIX}", id.iter().map(|b| format!("{b:02x}")).collect::<String>())
            }
            Key::File { dev, inode, size, mtime_ns } => {
                format!("f-{dev:x}-{inode:x}-{size:x}-{mtime_ns:x}{SUFFIX}")
            }
        }
    }
}

/// A checksum of an entry's words: finds a damaged entry (not a signature:
/// entries are trusted only because no other user can write them).
fn checksum(words: impl Iterator<Item = u64>) -> u64 {
    use std::hash::Hasher as _;
    let mut h = crate::util::fasthash::FastHasher::default();
    for w in words {
        h.write_u64(w);
    }
    h.finish()
}

/// The little-endian words of `bytes` (a whole number of them).
fn words_of(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
}

/// An entry's bytes: magic, format, the key's length and text, the entries'
/// count and the entries (the walker's words: address above, rule word below),
/// then the checksum of all of it. Little-endian words throughout.
pub fn encode(key: &Key, entries: &[u64]) -> Vec<u8> {
    let name = key.name();
    let mut words: Vec<u64> = Vec::with_capacity(4 + name.len() / 8 + entries.len());
    words.push(u64::from_le_bytes(*MAGIC));
    words.push(u64::from(FORMAT) | (name.len() as u64) << 32);
    let mut padded = name.into_bytes();
    padded.resize(padded.len().div_ceil(8) * 8, 0);
    words.extend(
        padded.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())),
    );
    words.push(entries.len() as u64);
    words.extend_from_slice(entries);
    words.push(checksum(words.iter().copied()));
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The entries in an entry's bytes, if they are a whole, undamaged entry of
/// this format made for `key`; else why not.
pub fn decode(key: &Key, bytes: &[u8]) -> Result<Vec<u64>> {
    if !bytes.len().is_multiple_of(8) || bytes.len() < 32 {
        bail!("truncated");
    }
    // Read in place: a cached table is megabytes, and each copy of it cost
    // the tracer page faults as well as time.
    let (body, sum) = bytes.split_at(bytes.len() - 8);
    if checksum(words_of(body)) != u64::from_le_bytes(sum.try_into()?) {
        bail!("checksum mismatch");
    }
    let word = |i: usize| {
        body.get(i * 8..i * 8 + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()))
    };
    if word(0) != Some(u64::from_le_bytes(*MAGIC)) {
        bail!("not a table");
    }
    let format = word(1).context("truncated")?;
    if format as u32 != FORMAT {
        bail!("another format");
    }
    let name = key.name();
    let name_words = name.len().div_ceil(8);
    let mut padded = name.into_bytes();
    padded.resize(name_words * 8, 0);
    let stored = body.get(16..16 + name_words * 8).context("truncated")?;
    if (format >> 32) as usize != padded.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
        || stored != padded
    {
        bail!("made for another file");
    }
    let count = word(2 + name_words).context("truncated")? as usize;
    let entries: Vec<u64> = words_of(&body[(3 + name_words) * 8..]).collect();
    if entries.len() != count {
        bail!("bad entry count");
    }
    if !entries.windows(2).all(|w| w[0] >> 32 < w[1] >> 32) {
        bail!("entries out of order");
    }
    Ok(entries)
}

/// Where a file's table came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cache,
    Built,
}

/// The table of an open ELF file as the walker's entries (see
/// [`super::tree::entries`]; None: it has no `.eh_frame`, or no table the
/// walker can hold): from `cache` when it holds a good one, else built
/// (`before_build` is called first: the builder's thread lowers its priority
/// there) and kept in it.
pub fn entries_of(
    cache: Option<&Cache>,
    file: fs::File,
    before_build: impl FnOnce(),
) -> Result<(Option<Vec<u64>>, Source)> {
    let meta = file.metadata()?;
    let mut r = std::io::BufReader::new(file);
    let key = cache.map(|_| Key::of(&mut r, &meta));
    if let (Some(c), Some(k)) = (cache, &key) {
        if let Some(t) = c.get(k) {
            return Ok((Some(t), Source::Cache));
        }
    }
    before_build();
    let entries = Table::from_elf(&mut r)?.as_ref().and_then(super::tree::entries);
    if let (Some(c), Some(k), Some(e)) = (cache, &key, &entries) {
        if let Err(err) = c.put(k, e) {
            log::debug!("unwind table cache: {err:#}");
        }
    }
    Ok((entries, Source::Built))
}

/// The cache directory, checked, with its bound.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
    limit: u64,
}

impl Cache {
    /// Opens (creating, 0700) the cache in `dir`. Refused when the directory
    /// is a symbolic link, is not owned by this process's user, or is writable
    /// by anyone else.
    pub fn open(dir: &Path, limit: u64) -> Result<Cache> {
        if let Err(e) = fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
            bail!("cannot create {}: {e}", dir.display());
        }
        let meta =
            fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if !meta.is_dir() {
            bail!("{} is not a directory", dir.display());
        }
        if meta.uid() != me {
            bail!(
                "{} belongs to uid {}, not to this user ({me}): not used",
                dir.display(),
                meta.uid()
            );
        }
        if meta.permissions().mode() & 0o022 != 0 {
            bail!(
                "{} is writable by other users (mode {:o}): not used",
                dir.display(),
                meta.permissions().mode() & 0o777
            );
        }
        Ok(Cache { dir: dir.to_path_buf(), limit })
    }

    /// The table kept for `key`, if a good one is; its use is noted (for the
    /// least recently used to go first). A bad entry is removed.
    pub fn get(&self, key: &Key) -> Option<Vec<u64>> {
        let path = self.dir.join(key.name());
        let mut f =
            fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&path).ok()?;
        let meta = f.metadata().ok()?;
        // SAFETY: geteuid has no preconditions.
        if !meta.is_file()
            || meta.uid() != unsafe { libc::geteuid() }
            || meta.permissions().mode() & 0o022 != 0
        {
            log::debug!("unwind table cache: {} is not ours alone; not used", path.display());
            return None;
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        f.read_to_end(&mut bytes).ok()?;
        match decode(key, &bytes) {
            Ok(t) => {
                let _ = f.set_modified(SystemTime::now());
                Some(t)
            }
            Err(e) => {
                log::debug!("unwind table cache: {} is rebuilt ({e})", path.display());
                let _ = fs::remove_file(&path);
                None
            }
        }
    }

    /// Keeps `t` for `key` (written whole, then renamed into place), then trims
    /// the directory to its bound.
    pub fn put(&self, key: &Key, t: &[u64]) -> Result<()> {
        let path = self.dir.join(key.name());
        let tmp = self.dir.join(format!(".{}.{}.tmp", key.name(), std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            f.write_all(&encode(key, t))?;
            fs::rename(&tmp, &path)
        };
        if let Err(e) = write() {
            let _ = fs::remove_file(&tmp);
            bail!("cannot write {}: {e}", path.display());
        }
        self.trim();
        Ok(())
    }

    /// Removes the least recently used entries while they take more than the bound.
    pub fn trim(&self) {
        let Ok(dir) = fs::read_dir(&self.dir) else { return };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = dir
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(SUFFIX))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect();
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        if total <= self.limit {
            return;
        }
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.limit {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` entries in order, with rule words of every kind.
    fn table(n: u64) -> Vec<u64> {
        (0..n).map(|i| (0x1000 + i * 16) << 32 | (i % 6) | (i % 200) << 8).collect()
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("tw-cache-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_table_comes_back_as_it_went_in() {
        let key = Key::BuildId(vec![0xab, 0xcd]);
        let t = table(600);
        assert_eq!(decode(&key, &encode(&key, &t)).unwrap(), t);
        assert_eq!(key.name(), "b-abcd.cfi");
        let by_file = Key::File { dev: 0xfe01, inode: 42, size: 1000, mtime_ns: 7 };
        assert_eq!(by_file.name(), "f-fe01-2a-3e8-7.cfi");
    }

    /// A damaged, foreign, truncated or other-format entry is refused, never
    /// trusted; each of its bytes is covered.
    #[test]
    fn damaged_foreign_and_stale_entries_are_refused() {
        let key = Key::BuildId(vec![1, 2, 3]);
        let bytes = encode(&key, &table(40));
        for i in (0..bytes.len()).step_by(3) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(decode(&key, &bad).is_err(), "a flipped byte {i} passed");
        }
        assert!(decode(&key, &bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&key, &[]).is_err());
        let err = decode(&Key::BuildId(vec![9]), &bytes).unwrap_err().to_string();
        assert!(err.contains("another file"), "{err}");
        // Another format, or rows out of order: rewritten with a valid
        // checksum, still refused.
        let rewrite = |at: usize, value: u64| {
            let mut words: Vec<u64> =
                bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
            words.pop();
            words[at] = value;
            words.push(checksum(words.iter().copied()));
            words.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>()
        };
        assert!(decode(&key, &rewrite(1, u64::from(FORMAT + 1) | (key.name().len() as u64) << 32))
            .unwrap_err()
            .to_string()
            .contains("format"));
        let last = bytes.len() / 8 - 2;
        assert!(decode(&key, &rewrite(last, 0)).unwrap_err().to_string().contains("order"));
    }

    /// The key of a file without a build id changes with its contents: the same
    /// path, swapped for another file, is another entry.
    #[test]
    fn a_file_swapped_at_the_same_path_is_another_key() {
        let dir = scratch("swap");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lib.so");
        fs::write(&path, b"not an elf file, the first one").unwrap();
        let key = |p: &Path| Key::of(&mut fs::File::open(p).unwrap(), &fs::metadata(p).unwrap());
        let first = key(&path);
        assert!(matches!(first, Key::File { .. }));
        fs::write(dir.join("new.so"), b"another file, of another size!!").unwrap();
        fs::rename(dir.join("new.so"), &path).unwrap();
        assert_ne!(key(&path), first, "a new inode, size or time");
        let me = std::env::current_exe().unwrap();
        assert!(matches!(key(&me), Key::BuildId(_)), "an ELF file with a build id is keyed by it");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn entries_are_kept_found_and_rebuilt_when_damaged() {
        let dir = scratch("keep");
        let cache = Cache::open(&dir, DEFAULT_LIMIT).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let key = Key::BuildId(vec![7; 20]);
        assert!(cache.get(&key).is_none());
        cache.put(&key, &table(100)).unwrap();
        assert_eq!(cache.get(&key), Some(table(100)));
        let entry = dir.join(key.name());
        assert_eq!(fs::metadata(&entry).unwrap().permissions().mode() & 0o777, 0o600);
        // Damaged on disk: not used, and gone so that it is built again.
        let mut bytes = fs::read(&entry).unwrap();
        bytes[40] ^= 1;
        fs::write(&entry, bytes).unwrap();
        assert!(cache.get(&key).is_none());
        assert!(!entry.exists());
        let _ = fs::remove_dir_all(&dir);
    }

    /// Past the bound, the least recently used entries go first.
    #[test]
    fn the_least_recently_used_entries_are_evicted() {
        let dir = scratch("lru");
        let one = encode(&Key::BuildId(vec![0]), &table(1000)).len() as u64;
        let cache = Cache::open(&dir, one * 3 + one / 2).unwrap();
        let keys: Vec<Key> = (0..3).map(|i| Key::BuildId(vec![i])).collect();
        for (i, k) in keys.iter().enumerate() {
            cache.put(k, &table(1000)).unwrap();
            let old = SystemTime::now() - std::time::Duration::from_secs(100 - i as u64 * 10);
            fs::File::options()
                .write(true)
                .open(dir.join(k.name()))
                .unwrap()
                .set_modified(old)
                .unwrap();
        }
        // The oldest is used now: the next oldest is the least recently used.
        assert!(cache.get(&keys[0]).is_some());
        cache.put(&Key::BuildId(vec![9]), &table(1000)).unwrap();
        assert!(dir.join(keys[0].name()).exists() && dir.join(keys[2].name()).exists());
        assert!(!dir.join(keys[1].name()).exists(), "the least recently used went");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A directory anyone else may write is not used: its entries would steer
    /// the walker.
    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = scratch("open");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
        let err = Cache::open(&dir, DEFAULT_LIMIT).unwrap_err().to_string();
        assert!(err.contains("writable by other users"), "{err}");
        let link = scratch("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
        assert!(Cache::open(&link, DEFAULT_LIMIT).is_err(), "a symbolic link is refused");
        let _ = (fs::remove_file(&link), fs::remove_dir_all(&dir));
    }
}
