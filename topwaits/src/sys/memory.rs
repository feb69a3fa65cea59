//! Reads another process's memory with `process_vm_readv`: no ptrace, no stop.

/// Memory of a process, read at addresses (walkers take it as a trait, so
/// that tests can give them plain bytes).
pub trait Memory {
    /// Reads up to `buf.len()` bytes at `addr`; returns how many were read.
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize;

    /// Exactly `len` bytes at `addr`, or None.
    fn bytes(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mut b = vec![0u8; len];
        (self.read(addr, &mut b) == len).then_some(b)
    }

    /// The little-endian word at `addr`, or None.
    fn word(&self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        (self.read(addr, &mut b) == 8).then(|| u64::from_le_bytes(b))
    }

    /// The little-endian 32-bit value at `addr`, or None.
    fn u32(&self, addr: u64) -> Option<u32> {
        let mut b = [0u8; 4];
        (self.read(addr, &mut b) == 4).then(|| u32::from_le_bytes(b))
    }

    /// The byte at `addr`, or None.
    fn byte(&self, addr: u64) -> Option<u8> {
        let mut b = [0u8; 1];
        (self.read(addr, &mut b) == 1).then_some(b[0])
    }
}

/// A process whose memory can be read (root, or the same user).
pub struct ProcessMemory {
    pub pid: u32,
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: the local iovec covers `buf`, which we own; the kernel checks the
        // remote range and fails or reads short without touching anything else.
        let n =
            unsafe { libc::process_vm_readv(self.pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        n.max(0) as usize
    }
}

/// Plain bytes at addresses, for tests' fabricated memory.
#[cfg(test)]
#[derive(Default)]
pub struct Bytes(std::collections::BTreeMap<u64, u8>);

#[cfg(test)]
impl Bytes {
    pub fn put(&mut self, at: u64, b: &[u8]) {
        b.iter().enumerate().for_each(|(i, &v)| {
            self.0.insert(at + i as u64, v);
        });
    }

    pub fn put_word(&mut self, at: u64, w: u64) {
        self.put(at, &w.to_le_bytes());
    }
}

#[cfg(test)]
impl Memory for Bytes {
    fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
        for (i, b) in buf.iter_mut().enumerate() {
            match self.0.get(&(addr + i as u64)) {
                Some(v) => *b = *v,
                None => return i,
            }
        }
        buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process_and_fails_cleanly_elsewhere() {
        let data: [u8; 8] = *b"topwaits";
        let mem = ProcessMemory { pid: std::process::id() };
        let mut buf = [0u8; 8];
        assert_eq!(mem.read(data.as_ptr() as u64, &mut buf), 8);
        assert_eq!(&buf, b"topwaits");
        assert_eq!(mem.read(8, &mut buf), 0, "an unmapped address reads nothing");
    }
}
