//! Reading whole hash maps a batch at a time (`BPF_MAP_LOOKUP_BATCH`, Linux 5.6):
//! one syscall per thousand entries, where iterating costs two per entry (a
//! 20,000-stack report made 60,000 of them); and writing or deleting many
//! entries at once (`BPF_MAP_UPDATE_BATCH`, `BPF_MAP_DELETE_BATCH`).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{HashMap, Map, MapData};
use aya::Pod;

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_LOOKUP_AND_DELETE_BATCH: libc::c_long = 25;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;
/// Entries asked for per call; doubled when one hash bucket holds more.
const CHUNK: usize = 1024;
/// `ENOTSUPP`, which the kernel returns for map types without batch operations.
const ENOTSUPP: i32 = 524;

/// The `batch` member of `union bpf_attr`.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// Calls `f` with every entry of the hash map `map`, a batch at a time. `Ok(false)`
/// when the map or the kernel has no batch lookups: the caller then iterates.
pub fn for_each<K: Pod, V: Pod>(map: &Map, f: impl FnMut(&K, &V)) -> io::Result<bool> {
    let Map::HashMap(data) = map else { return Ok(false) };
    batches(data.fd().as_fd().as_raw_fd(), BPF_MAP_LOOKUP_BATCH, f)
}

/// Takes every entry out of the hash map `map`, a batch at a time, calling `f`
/// with each: the kernel copies and deletes a bucket's entries under its lock,
/// so a program adding to an entry never adds to one already read. `Ok(false)`
/// when the map or the kernel has no such batches (nothing was taken).
pub fn take_each<K: Pod, V: Pod>(map: &Map, f: impl FnMut(&K, &V)) -> io::Result<bool> {
    let Map::HashMap(data) = map else { return Ok(false) };
    batches(data.fd().as_fd().as_raw_fd(), BPF_MAP_LOOKUP_AND_DELETE_BATCH, f)
}

/// [`for_each`] and [`take_each`]: the batch command `cmd` over the whole hash
/// map whose descriptor is `fd`.
fn batches<K: Pod, V: Pod>(
    fd: std::os::fd::RawFd,
    cmd: libc::c_long,
    mut f: impl FnMut(&K, &V),
) -> io::Result<bool> {
    let mut chunk = CHUNK;
    // SAFETY: Pod types are plain data, valid when zeroed.
    let zeroed = || unsafe { std::mem::zeroed::<(K, V)>() };
    let (mut keys, mut values): (Vec<K>, Vec<V>) =
        (vec![zeroed().0; chunk], vec![zeroed().1; chunk]);
    // A hash map's batch position is a bucket number.
    let (mut next, mut at): (u32, u32) = (0, 0);
    let mut first = true;
    loop {
        let mut attr = BatchAttr {
            in_batch: if first { 0 } else { &at as *const u32 as u64 },
            out_batch: &mut next as *mut u32 as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count: chunk as u32,
            map_fd: fd as u32,
            ..Default::default()
        };
        // SAFETY: the attribute points at buffers of `chunk` keys and values and at
        // the two position words, all live across the call.
        let ret = unsafe {
            libc::syscall(libc::SYS_bpf, cmd, &mut attr as *mut BatchAttr, size_of::<BatchAttr>())
        };
        let err = (ret < 0).then(|| io::Error::last_os_error().raw_os_error().unwrap_or(0));
        let got = (attr.count as usize).min(chunk);
        for (k, v) in keys[..got].iter().zip(&values[..got]) {
            f(k, v);
        }
        match err {
            None => {}
            Some(libc::ENOENT) => return Ok(true),
            // One bucket holds more entries than fit: ask again for more.
            Some(libc::ENOSPC) if got == 0 && chunk < 1 << 20 => {
                chunk *= 2;
                keys.resize(chunk, zeroed().0);
                values.resize(chunk, zeroed().1);
                continue;
            }
            Some(libc::EINVAL | ENOTSUPP) if first => return Ok(false),
            Some(e) => return Err(io::Error::from_raw_os_error(e)),
        }
        at = next;
        first = false;
    }
}

/// Writes `values`, each under the key of the same index in `keys`, into the
/// map whose descriptor is `fd`, [`CHUNK`] to a syscall, from where they lie.
/// `Ok(false)` when the kernel has no batch updates for it (nothing was
/// written): the caller then writes one at a time. An error (the map is full)
/// may come after part of them were written.
pub fn update<K: Pod, V: Pod>(
    fd: std::os::fd::BorrowedFd<'_>,
    keys: &[K],
    values: &[V],
) -> io::Result<bool> {
    if keys.len() != values.len() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut first = true;
    for (keys, values) in keys.chunks(CHUNK).zip(values.chunks(CHUNK)) {
        let mut attr = BatchAttr {
            keys: keys.as_ptr() as u64,
            values: values.as_ptr() as u64,
            count: keys.len() as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..Default::default()
        };
        // SAFETY: the attribute points at `count` keys and values, live across the call.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_UPDATE_BATCH,
                &mut attr as *mut BatchAttr,
                size_of::<BatchAttr>(),
            )
        };
        if ret < 0 {
            let e = io::Error::last_os_error();
            if first && matches!(e.raw_os_error(), Some(libc::EINVAL | ENOTSUPP)) && attr.count == 0
            {
                return Ok(false);
            }
            return Err(e);
        }
        first = false;
    }
    Ok(true)
}

/// Deletes the entries of `keys` from the map whose descriptor is `fd`, as
/// many to a syscall as there are until one is not there (the kernel stops at
/// it; it is stepped over). `Ok(false)` when the kernel has no batch deletes
/// for it: the caller then deletes one at a time. Returns once every key was
/// tried.
pub fn delete<K: Pod>(fd: std::os::fd::BorrowedFd<'_>, keys: &[K]) -> io::Result<bool> {
    let mut rest = keys;
    let mut first = true;
    while !rest.is_empty() {
        let chunk = &rest[..rest.len().min(CHUNK)];
        let mut attr = BatchAttr {
            keys: chunk.as_ptr() as u64,
            count: chunk.len() as u32,
            map_fd: fd.as_raw_fd() as u32,
            ..Default::default()
        };
        // SAFETY: the attribute points at `count` keys, live across the call.
        let ret = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_DELETE_BATCH,
                &mut attr as *mut BatchAttr,
                size_of::<BatchAttr>(),
            )
        };
        let done = (attr.count as usize).min(chunk.len());
        if ret < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINVAL | ENOTSUPP) if first && done == 0 => return Ok(false),
                // Key `done` was not there: on with the one after it.
                Some(libc::ENOENT) => rest = &rest[done + 1..],
                _ => return Err(e),
            }
        } else {
            // The kernel stops only at an error: the whole chunk is gone.
            rest = &rest[chunk.len()..];
        }
        first = false;
    }
    Ok(true)
}

/// Calls `f` with every entry of the hash map `map`: in batches where the kernel
/// has them, else one lookup at a time.
pub fn each<K: Pod, V: Pod>(map: &Map, mut f: impl FnMut(&K, &V)) -> anyhow::Result<()> {
    if for_each(map, &mut f)? {
        return Ok(());
    }
    let m: HashMap<&MapData, K, V> = HashMap::try_from(map)?;
    for item in m.iter() {
        let (k, v) = item?;
        f(&k, &v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd};

    /// A hash map of u32 to u64 made for the test, or None (said) without BPF.
    fn hash_map(entries: u32) -> Option<OwnedFd> {
        #[repr(C)]
        #[derive(Default)]
        struct CreateAttr {
            map_type: u32,
            key_size: u32,
            value_size: u32,
            max_entries: u32,
            map_flags: u32,
        }
        // BPF_MAP_CREATE = 0, BPF_MAP_TYPE_HASH = 1.
        let attr = CreateAttr {
            map_type: 1,
            key_size: 4,
            value_size: 8,
            max_entries: entries,
            map_flags: 0,
        };
        // SAFETY: the attribute is a valid prefix of `union bpf_attr`, live across the call.
        let fd = unsafe {
            libc::syscall(libc::SYS_bpf, 0, &attr as *const CreateAttr, size_of::<CreateAttr>())
        };
        if fd < 0 {
            assert!(
                std::env::var_os("TOPWAITS_REQUIRE_BPF").is_none(),
                "cannot make a BPF map: {}",
                std::io::Error::last_os_error()
            );
            eprintln!("skipped: cannot make a BPF map ({})", std::io::Error::last_os_error());
            return None;
        }
        // SAFETY: a new descriptor that nothing else owns.
        Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
    }

    fn present(fd: &OwnedFd, key: u32) -> bool {
        #[repr(C)]
        struct ElemAttr {
            map_fd: u32,
            pad: u32,
            key: u64,
            value: u64,
            flags: u64,
        }
        let mut value = 0u64;
        let attr = ElemAttr {
            map_fd: fd.as_raw_fd() as u32,
            pad: 0,
            key: &key as *const u32 as u64,
            value: &mut value as *mut u64 as u64,
            flags: 0,
        };
        // SAFETY: BPF_MAP_LOOKUP_ELEM (1) with pointers live across the call.
        unsafe {
            libc::syscall(libc::SYS_bpf, 1, &attr as *const ElemAttr, size_of::<ElemAttr>()) == 0
        }
    }

    /// A sweep deletes the exited processes' entries in one call, stepping over
    /// those the map does not hold (the kernel stops at the first).
    #[test]
    fn a_batch_delete_steps_over_missing_keys_and_deletes_the_rest() {
        let Some(fd) = hash_map(64) else { return };
        let keys: Vec<u32> = (1..=10).collect();
        let values: Vec<u64> = keys.iter().map(|&k| u64::from(k) * 100).collect();
        assert!(super::update(fd.as_fd(), &keys, &values).unwrap());
        assert!(keys.iter().all(|&k| present(&fd, k)));
        // 11 and 12 were never there; 3 twice (the second is missing by then).
        let gone = [11, 1, 2, 3, 12, 3, 5, 9];
        assert!(super::delete(fd.as_fd(), &gone).unwrap());
        let left: Vec<u32> = keys.iter().copied().filter(|&k| present(&fd, k)).collect();
        assert_eq!(left, [4, 6, 7, 8, 10]);
        assert!(super::delete(fd.as_fd(), &[] as &[u32]).unwrap());
    }

    /// Taking a map's entries reads each once and leaves the map empty, across
    /// more calls than one (a chunk is 1,024 entries).
    #[test]
    fn taking_the_entries_reads_each_once_and_empties_the_map() {
        let Some(fd) = hash_map(4096) else { return };
        let keys: Vec<u32> = (1..=3000).collect();
        let values: Vec<u64> = keys.iter().map(|&k| u64::from(k) * 7).collect();
        assert!(super::update(fd.as_fd(), &keys, &values).unwrap());
        let mut got = Vec::new();
        let cmd = super::BPF_MAP_LOOKUP_AND_DELETE_BATCH;
        let taken = super::batches(fd.as_raw_fd(), cmd, |&k: &u32, &v: &u64| got.push((k, v)));
        assert!(taken.unwrap());
        got.sort_unstable();
        assert_eq!(got, keys.iter().zip(&values).map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
        assert!(!keys.iter().any(|&k| present(&fd, k)));
    }
}
