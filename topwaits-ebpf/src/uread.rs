//! Reads of user memory for the stack walker: one word, or a window of stack read
//! at once, so that one helper call serves the slots of several frames (the
//! walker's cost is mostly its reads of user memory).

use aya_ebpf::helpers::{bpf_probe_read_user, generated as gen};

/// The word at user address `addr`, if it can be read.
#[inline(always)]
pub fn user_word(addr: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user checks the address and fails cleanly.
    unsafe { bpf_probe_read_user(addr as *const u64).ok() }
}

/// The 32-bit value at user address `addr`, if it can be read.
#[inline(always)]
pub fn user_u32(addr: u64) -> Option<u32> {
    // SAFETY: as for `user_word`.
    unsafe { bpf_probe_read_user(addr as *const u32).ok() }
}

/// The byte at user address `addr`, if it can be read.
#[inline(always)]
pub fn user_byte(addr: u64) -> Option<u8> {
    // SAFETY: as for `user_word`.
    unsafe { bpf_probe_read_user(addr as *const u8).ok() }
}

/// Words of stack a window holds.
const WINDOW_WORDS: usize = 128;
const WINDOW_BYTES: u64 = WINDOW_WORDS as u64 * 8;
/// The page size: a read that crosses into an unmapped page fails whole.
pub const PAGE: u64 = 4096;

/// A stretch of user stack read at once.
#[repr(C)]
pub struct StackWindow {
    base: u64,
    /// Bytes held from `base`; 0: none.
    len: u64,
    /// Where reads need reach no further (0: as far as the window does).
    end: u64,
    words: [u64; WINDOW_WORDS],
}

impl StackWindow {
    /// Forgets what was read (the stack changes between walks).
    #[inline(always)]
    pub fn clear(&mut self) {
        self.clear_up_to(0);
    }

    /// Forgets what was read, and reads no further than `end` from now on: a
    /// check of known slots copies the lines that hold them, not a whole window.
    #[inline(always)]
    pub fn clear_up_to(&mut self, end: u64) {
        self.len = 0;
        self.end = end;
    }

    /// The stack word at `addr`, from the window when it holds it; else the
    /// window is read again from `addr`, up to its size but not past `addr`'s
    /// page (the page above may not be mapped, and a read that fails fails whole).
    #[inline(always)]
    pub fn word(&mut self, addr: u64) -> Option<u64> {
        let off = addr.wrapping_sub(self.base);
        if addr & 7 == 0 && off < self.len {
            return Some(self.words[(off / 8) as usize & (WINDOW_WORDS - 1)]);
        }
        if addr & 7 != 0 {
            return user_word(addr);
        }
        let mut len = PAGE - (addr & (PAGE - 1));
        if len > WINDOW_BYTES {
            len = WINDOW_BYTES;
        }
        if self.end > addr && self.end - addr < len {
            len = self.end - addr;
        }
        // SAFETY: the helper checks the source and fails cleanly; it writes at most
        // `len` bytes, no more than the window holds, into this map value.
        let ret = unsafe {
            gen::bpf_probe_read_user(
                self.words.as_mut_ptr().cast(),
                len as u32,
                addr as *const core::ffi::c_void,
            )
        };
        if ret != 0 {
            self.len = 0;
            return user_word(addr);
        }
        (self.base, self.len) = (addr, len);
        Some(self.words[0])
    }
}
