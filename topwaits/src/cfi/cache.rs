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

use super::{Base, Row, Rule, Table};
use crate::sys::elf;

/// The most the entries may take.
pub const DEFAULT_LIMIT: u64 = 256 << 20;

/// The first bytes of every entry, and its format: raised whenever the rows'
/// meaning or their encoding changes, so that an older entry is rebuilt.
const MAGIC: &[u8; 8] = b"TWCFI\0\0\0";
const FORMAT: u32 = 1;
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
            Key::BuildId(id) => format!("b-{}{SUFFIX}", id.iter().map(|b| format!("{b:02x}")).collect::<String>()),
            Key::File { dev, inode, size, mtime_ns } => format!("f-{dev:x}-{inode:x}-{size:x}-{mtime_ns:x}{SUFFIX}"),
        }
    }
}

/// 64-bit FNV-1a: finds a damaged entry (a checksum, not a signature: entries
/// are trusted only because no other user can write them).
fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// A rule as 12 bytes: a tag (its kind, base, whether bp is saved, and a PLT
/// stub's threshold) and two numbers.
fn encode_rule(r: Rule) -> (u32, i32, i32) {
    match r {
        Rule::Stop => (0, 0, 0),
        Rule::End => (1, 0, 0),
        Rule::Signal => (2, 0, 0),
        Rule::Plt { threshold } => (3 | (threshold as u32) << 8, 0, 0),
        Rule::Cfa { base, offset, bp_at } => {
            let tag = 4 | u32::from(base == Base::Bp) << 4 | u32::from(bp_at.is_some()) << 5;
            (tag, offset, bp_at.unwrap_or(0))
        }
    }
}

fn decode_rule(tag: u32, a: i32, b: i32) -> Option<Rule> {
    Some(match tag & 15 {
        0 => Rule::Stop,
        1 => Rule::End,
        2 => Rule::Signal,
        3 => Rule::Plt { threshold: (tag >> 8) as u8 },
        4 => Rule::Cfa { base: if tag & 16 != 0 { Base::Bp } else { Base::Sp }, offset: a, bp_at: (tag & 32 != 0).then_some(b) },
        _ => return None,
    })
}

/// An entry's bytes: magic, format, key, row count, rows, checksum.
pub fn encode(key: &Key, t: &Table) -> Vec<u8> {
    let name = key.name();
    let mut out = Vec::with_capacity(32 + name.len() + t.rows.len() * 20);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&(name.len() as u32).to_le_bytes());
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&(t.rows.len() as u64).to_le_bytes());
    for row in &t.rows {
        let (tag, a, b) = encode_rule(row.rule);
        out.extend_from_slice(&row.pc.to_le_bytes());
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&a.to_le_bytes());
        out.extend_from_slice(&b.to_le_bytes());
    }
    let sum = checksum(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// The table in an entry's bytes, if they are a whole, undamaged entry of this
/// format made for `key`; else why not.
pub fn decode(key: &Key, bytes: &[u8]) -> Result<Table> {
    let Some((body, sum)) = bytes.split_last_chunk::<8>() else { bail!("too short") };
    if checksum(body) != u64::from_le_bytes(*sum) {
        bail!("checksum mismatch");
    }
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8]> {
        let s = body.get(at..at + n).context("truncated")?;
        at += n;
        Ok(s)
    };
    if take(8)? != MAGIC {
        bail!("not a table");
    }
    let u32_of = |b: &[u8]| u32::from_le_bytes(b.try_into().unwrap_or_default());
    if u32_of(take(4)?) != FORMAT {
        bail!("another format");
    }
    let len = u32_of(take(4)?) as usize;
    if take(len)? != key.name().as_bytes() {
        bail!("made for another file");
    }
    let n = u64::from_le_bytes(take(8)?.try_into().unwrap_or_default());
    if n > (body.len() / 20) as u64 {
        bail!("bad row count");
    }
    let mut rows = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let r = take(20)?;
        let pc = u64::from_le_bytes(r[..8].try_into().unwrap_or_default());
        let (tag, a, b) = (u32_of(&r[8..12]), u32_of(&r[12..16]) as i32, u32_of(&r[16..20]) as i32);
        rows.push(Row { pc, rule: decode_rule(tag, a, b).context("bad rule")? });
    }
    if at != body.len() {
        bail!("trailing bytes");
    }
    if !rows.windows(2).all(|w| w[0].pc < w[1].pc) {
        bail!("rows out of order");
    }
    Ok(Table { rows })
}

/// Where a file's table came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cache,
    Built,
}

/// The table of an open ELF file (None: it has no `.eh_frame`): from `cache`
/// when it holds a good one, else built (`before_build` is called first: the
/// builder's thread lowers its priority there) and kept in it.
pub fn table_of(cache: Option<&Cache>, file: fs::File, before_build: impl FnOnce()) -> Result<(Option<Table>, Source)> {
    let meta = file.metadata()?;
    let mut r = std::io::BufReader::new(file);
    let key = cache.map(|_| Key::of(&mut r, &meta));
    if let (Some(c), Some(k)) = (cache, &key) {
        if let Some(t) = c.get(k) {
            return Ok((Some(t), Source::Cache));
        }
    }
    before_build();
    let table = Table::from_elf(&mut r)?;
    if let (Some(c), Some(k), Some(t)) = (cache, &key, &table) {
        if let Err(e) = c.put(k, t) {
            log::debug!("unwind table cache: {e:#}");
        }
    }
    Ok((table, Source::Built))
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
        let meta = fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if !meta.is_dir() {
            bail!("{} is not a directory", dir.display());
        }
        if meta.uid() != me {
            bail!("{} belongs to uid {}, not to this user ({me}): not used", dir.display(), meta.uid());
        }
        if meta.permissions().mode() & 0o022 != 0 {
            bail!("{} is writable by other users (mode {:o}): not used", dir.display(), meta.permissions().mode() & 0o777);
        }
        Ok(Cache { dir: dir.to_path_buf(), limit })
    }

    /// The table kept for `key`, if a good one is; its use is noted (for the
    /// least recently used to go first). A bad entry is removed.
    pub fn get(&self, key: &Key) -> Option<Table> {
        let path = self.dir.join(key.name());
        let mut f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(&path).ok()?;
        let meta = f.metadata().ok()?;
        // SAFETY: geteuid has no preconditions.
        if !meta.is_file() || meta.uid() != unsafe { libc::geteuid() } || meta.permissions().mode() & 0o022 != 0 {
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
    pub fn put(&self, key: &Key, t: &Table) -> Result<()> {
        let path = self.dir.join(key.name());
        let tmp = self.dir.join(format!(".{}.{}.tmp", key.name(), std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
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

    fn table(n: u64) -> Table {
        let rules = [
            Rule::Cfa { base: Base::Sp, offset: 8, bp_at: None },
            Rule::Cfa { base: Base::Bp, offset: 16, bp_at: Some(-16) },
            Rule::Plt { threshold: 11 },
            Rule::End,
            Rule::Signal,
            Rule::Stop,
        ];
        Table { rows: (0..n).map(|i| Row { pc: 0x1000 + i * 16, rule: rules[i as usize % rules.len()] }).collect() }
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
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(decode(&key, &bad).is_err(), "a flipped byte {i} passed");
        }
        assert!(decode(&key, &bytes[..bytes.len() - 1]).is_err());
        assert!(decode(&key, &[]).is_err());
        let err = decode(&Key::BuildId(vec![9]), &bytes).unwrap_err().to_string();
        assert!(err.contains("another file"), "{err}");
        // Another format: rewritten with a valid checksum, still refused.
        let mut other = bytes[..bytes.len() - 8].to_vec();
        other[8] = 2;
        let sum = checksum(&other);
        other.extend_from_slice(&sum.to_le_bytes());
        assert!(decode(&key, &other).unwrap_err().to_string().contains("format"));
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
            fs::File::options().write(true).open(dir.join(k.name())).unwrap().set_modified(old).unwrap();
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
