//! Reading whole hash maps a batch at a time (`BPF_MAP_LOOKUP_BATCH`, Linux 5.6):
//! one syscall per thousand entries, where iterating costs two per entry (a
//! 20,000-stack report made 60,000 of them); and writing many entries at once
//! (`BPF_MAP_UPDATE_BATCH`).

use std::io;
use std::os::fd::{AsFd, AsRawFd};

use aya::maps::{HashMap, Map, MapData};
use aya::Pod;

const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_UPDATE_BATCH: libc::c_long = 26;
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
pub fn for_each<K: Pod, V: Pod>(map: &Map, mut f: impl FnMut(&K, &V)) -> io::Result<bool> {
    let Map::HashMap(data) = map else { return Ok(false) };
    let fd = data.fd().as_fd().as_raw_fd();
    let mut chunk = CHUNK;
    // SAFETY: Pod types are plain data, valid when zeroed.
    let zeroed = || unsafe { std::mem::zeroed::<(K, V)>() };
    let (mut keys, mut values): (Vec<K>, Vec<V>) = (vec![zeroed().0; chunk], vec![zeroed().1; chunk]);
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
        let ret = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_LOOKUP_BATCH, &mut attr as *mut BatchAttr, size_of::<BatchAttr>()) };
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
pub fn update<K: Pod, V: Pod>(fd: std::os::fd::BorrowedFd<'_>, keys: &[K], values: &[V]) -> io::Result<bool> {
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
        let ret = unsafe { libc::syscall(libc::SYS_bpf, BPF_MAP_UPDATE_BATCH, &mut attr as *mut BatchAttr, size_of::<BatchAttr>()) };
        if ret < 0 {
            let e = io::Error::last_os_error();
            if first && matches!(e.raw_os_error(), Some(libc::EINVAL | ENOTSUPP)) && attr.count == 0 {
                return Ok(false);
            }
            return Err(e);
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
