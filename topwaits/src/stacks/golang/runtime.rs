//! What the goroutine hooks need from a Go binary: its Go version (from
//! `.go.buildinfo`), where `runtime.g` keeps the goid in that version, the file
//! offsets of the runtime functions the uprobes go on (from `pclntab`, which
//! stripped binaries keep), the names of the runtime's wait reasons, and where
//! the runtime lists its goroutines (for `blocked`).

use std::io::{Read, Seek};

use anyhow::{anyhow, Context, Result};

use crate::sys::elf;

/// The runtime functions the hooks probe, in the order of [`Runtime::hooks`].
pub const HOOKED: [&str; 2] = ["runtime.ready", "runtime.execute"];

/// What the goroutine hooks need from one Go binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Runtime {
    /// `go1.19.8`, where the binary says it.
    pub version: Option<String>,
    /// Offset of `runtime.g.goid`; None for a version whose layout is not
    /// known (its goroutines are then not traced).
    pub goid_off: Option<u32>,
    /// File offsets of [`HOOKED`]'s probe points, in that order: each
    /// function's stack-bound branch where its prologue has the usual form
    /// (see [`probe_point`]), else its entry.
    pub hooks: [u64; 2],
    /// The runtime's wait reasons by number (empty where not known).
    pub reasons: Vec<String>,
    /// The address of `runtime.allgs`, the list of all goroutines: from the
    /// symbol table, or in a stripped binary from `runtime.forEachG`'s code
    /// (see [`allgs_in_code`]).
    pub allgs: Option<u64>,
}

impl Runtime {
    /// The goid's offset, or why its goroutines cannot be read.
    pub fn goid_layout(&self) -> Result<u32> {
        self.goid_off.ok_or_else(|| {
            anyhow!(
                "{}: the layout of its goroutines is not known to topwaits",
                self.version.as_deref().unwrap_or("a Go version not named in the binary")
            )
        })
    }
}

/// The wait reasons of Go 1.19 to 1.20 (`runtime.waitReasonStrings`), for
/// binaries without a symbol table to read them from.
const REASONS_GO119: &[&str] = &[
    "",
    "GC assist marking",
    "IO wait",
    "chan receive (nil chan)",
    "chan send (nil chan)",
    "dumping heap",
    "garbage collection",
    "garbage collection scan",
    "panicwait",
    "select",
    "select (no cases)",
    "GC assist wait",
    "GC sweep wait",
    "GC scavenge wait",
    "chan receive",
    "chan send",
    "finalizer wait",
    "force gc (idle)",
    "semacquire",
    "sleep",
    "sync.Cond.Wait",
    "timer goroutine (idle)",
    "trace reader (blocked)",
    "wait for GC cycle",
    "GC worker (idle)",
    "preempted",
    "debug call",
];

/// `(major, minor)` of a `go1.21.3`-style version.
pub fn major_minor(version: &str) -> Option<(u32, u32)> {
    let rest = version.strip_prefix("go")?;
    let mut parts = rest.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Where `runtime.g` keeps `goid` on amd64: after `syscallbp` joined the struct
/// in Go 1.23 it moved by a word. The hooks also read `atomicstatus` (the
/// word before) and `waitreason` (three words after) by it.
pub fn goid_offset(version: &str) -> Option<u32> {
    match major_minor(version)? {
        (1, 19..=22) => Some(152),
        (1, 23..=25) => Some(160),
        _ => None,
    }
}

/// The Go version in a `.go.buildinfo` section (the layout of Go 1.18 on, whose
/// strings are inline: a varint length, then the bytes).
pub fn buildinfo_version(data: &[u8]) -> Option<String> {
    const MAGIC: &[u8] = b"\xff Go buildinf:";
    if !data.starts_with(MAGIC) || data.get(15)? & 2 == 0 {
        return None;
    }
    let (len, n) = super::pclntab::varint(data.get(32..)?)?;
    let len = len as usize;
    let s = data.get(32 + n..32 + n + len)?;
    String::from_utf8(s.to_vec()).ok()
}

/// Reads what the hooks need from the Go binary at `path`; None when it is no
/// Go program.
pub fn read(path: &str) -> Result<Option<Runtime>> {
    let mut f = std::fs::File::open(path).with_context(|| format!("failed to open {path}"))?;
    let Some(tab) = super::pclntab_of(&mut f)? else { return Ok(None) };
    let segments = elf::load_segments(&mut f)?;
    let mut entries = [0u64; 2];
    let mut for_each_g = None;
    for func in tab.funcs() {
        match tab.name(func) {
            Some("runtime.forEachG") => for_each_g = Some(func),
            Some(n) => {
                if let Some(i) = HOOKED.iter().position(|h| *h == n) {
                    entries[i] = func.entry;
                }
            }
            None => {}
        }
    }
    if let Some(i) = entries.iter().position(|&e| e == 0) {
        return Err(anyhow!("{path} is a Go program without {}", HOOKED[i]));
    }
    let mut hooks = [0u64; 2];
    for (i, &entry) in entries.iter().enumerate() {
        let off = elf::offset_of(&segments, entry)
            .ok_or_else(|| anyhow!("{} of {path} is in no loaded segment", HOOKED[i]))?;
        let code = read_at(&mut f, &segments, entry, 16).unwrap_or_default();
        hooks[i] = off + probe_point(&code) as u64;
    }
    let (version, reasons, allgs) = from_binary(&mut f, &segments)?;
    let allgs = allgs.or_else(|| {
        let func = for_each_g?;
        let code = read_at(&mut f, &segments, func.entry, (func.end - func.entry).min(512))?;
        allgs_in_code(&code, func.entry)
    });
    let goid_off = version.as_deref().and_then(goid_offset);
    Ok(Some(Runtime { version, goid_off, hooks, reasons, allgs }))
}

/// In amd64 code at `entry`, the first address that two pc-relative 8-byte
/// loads read at it and 8 bytes on (`MOVQ runtime.allgs(SB)` and
/// `MOVQ runtime.allgs+8(SB)`: a slice's pointer, then its length).
pub fn allgs_in_code(code: &[u8], entry: u64) -> Option<u64> {
    let mut loads = Vec::new();
    for i in 0..code.len().saturating_sub(6) {
        let [rex, op, modrm, d0, d1, d2, d3] = code[i..i + 7] else { break };
        if (rex == 0x48 || rex == 0x4c) && op == 0x8b && modrm & 0xc7 == 0x05 {
            let disp = i32::from_le_bytes([d0, d1, d2, d3]) as i64;
            loads.push((entry + i as u64 + 7).wrapping_add(disp as u64));
        }
    }
    loads.iter().copied().find(|&a| loads.contains(&(a + 8)))
}

/// Where in a function whose code starts with `code` its probe goes: at the
/// conditional branch of the amd64 stack-bound check that opens most Go
/// functions (`CMPQ 0x10(R14), SP` or `LEAQ -n(SP), R12; CMPQ 0x10(R14), R12`,
/// then `JBE`), else at the entry (0).
///
/// The kernel emulates a probed branch, where any other instruction is
/// stepped out of line: a second trap into the kernel, which on a VM costs
/// more than the probe's program. Up to the branch, the prologue has changed
/// no register the hooks read (the stack pointer, the frame pointer, r14 and
/// the argument registers).
pub fn probe_point(code: &[u8]) -> usize {
    const CMP_SP: [u8; 4] = [0x49, 0x3b, 0x66, 0x10];
    const CMP_R12: [u8; 4] = [0x4d, 0x3b, 0x66, 0x10];
    let branch = |at: usize| match code.get(at..) {
        Some([0x76, ..]) | Some([0x0f, 0x86, ..]) => at,
        _ => 0,
    };
    if code.starts_with(&CMP_SP) {
        return branch(4);
    }
    // LEAQ disp8(SP), R12 or LEAQ disp32(SP), R12.
    let lea = match code {
        [0x4c, 0x8d, 0x64, 0x24, ..] => 5,
        [0x4c, 0x8d, 0xa4, 0x24, ..] => 8,
        _ => return 0,
    };
    match code.get(lea..lea + 4) {
        Some(c) if c == CMP_R12 => branch(lea + 4),
        _ => 0,
    }
}

/// The wait reasons of the Go program at `path` (empty where not known).
pub fn wait_reasons(path: &str) -> Result<Vec<String>> {
    let mut f = std::fs::File::open(path).with_context(|| format!("failed to open {path}"))?;
    let segments = elf::load_segments(&mut f)?;
    Ok(from_binary(&mut f, &segments)?.1)
}

/// The Go version, the wait reasons, and `runtime.allgs` where the symbol
/// table names it (one read of the table for both).
fn from_binary<R: Read + Seek>(
    f: &mut R,
    segments: &[elf::Segment],
) -> Result<(Option<String>, Vec<String>, Option<u64>)> {
    let version = elf::section_bytes(f, ".go.buildinfo")?.and_then(|d| buildinfo_version(&d));
    let syms =
        elf::symbols(f, &["runtime.waitReasonStrings", "runtime.allgs"], true).unwrap_or_default();
    let addr_of = |name: &str| syms.iter().find(|s| s.0 == name).map(|s| (s.1, s.2));
    let reasons =
        match addr_of("runtime.waitReasonStrings").and_then(|t| reasons_at(f, segments, t)) {
            Some(r) => r,
            None if version.as_deref().and_then(major_minor).is_some_and(|v| v.1 <= 20) => {
                REASONS_GO119.iter().map(|s| s.to_string()).collect()
            }
            None => Vec::new(),
        };
    Ok((version, reasons, addr_of("runtime.allgs").map(|s| s.0)))
}

/// `runtime.waitReasonStrings` at `(addr, size)` in the file: an array of Go
/// strings (pointer, length).
fn reasons_at<R: Read + Seek>(
    f: &mut R,
    segments: &[elf::Segment],
    (addr, size): (u64, u64),
) -> Option<Vec<String>> {
    let table = read_at(f, segments, addr, size.min(16 * 256))?;
    table
        .chunks_exact(16)
        .map(|e| {
            let ptr = u64::from_le_bytes(e[..8].try_into().ok()?);
            let len = u64::from_le_bytes(e[8..].try_into().ok()?);
            if len == 0 {
                return Some(String::new());
            }
            let bytes = read_at(f, segments, ptr, len.min(256))?;
            String::from_utf8(bytes).ok()
        })
        .collect()
}

fn read_at<R: Read + Seek>(
    f: &mut R,
    segments: &[elf::Segment],
    addr: u64,
    len: u64,
) -> Option<Vec<u8>> {
    let off = elf::offset_of(segments, addr)?;
    f.seek(std::io::SeekFrom::Start(off)).ok()?;
    let mut buf = vec![0u8; len as usize];
    f.read_exact(&mut buf).ok()?;
    Some(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allgs_is_the_pair_of_loads_eight_bytes_apart() {
        // runtime.forEachG of go1.19.8 at 0x439f00, from its lock call on:
        // MOVQ runtime.allgs(SB), CX; MOVQ CX, 0x18(SP);
        // MOVQ runtime.allgs+8(SB), DX.
        let mut code = vec![0x90; 0x2a];
        code.extend([0x48, 0x8b, 0x0d, 0xaf, 0x78, 0x48, 0x00]);
        code.extend([0x48, 0x89, 0x4c, 0x24, 0x18]);
        code.extend([0x48, 0x8b, 0x15, 0xab, 0x78, 0x48, 0x00]);
        assert_eq!(allgs_in_code(&code, 0x439f00), Some(0x8c17e0));
        // One load alone, or two that are not a slice's first words: none.
        assert_eq!(allgs_in_code(&code[..0x36], 0x439f00), None);
        let mut apart = code.clone();
        apart[0x36 + 3] = 0xb3;
        assert_eq!(allgs_in_code(&apart, 0x439f00), None);
    }

    #[test]
    fn probes_go_on_the_stack_check_branch_where_there_is_one() {
        // CMPQ 0x10(R14), SP; JBE rel32 (runtime.execute, go1.19).
        let cmp = [0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0x49, 0x01, 0, 0, 0x48, 0x83];
        assert_eq!(probe_point(&cmp), 4);
        // CMPQ 0x10(R14), SP; JBE rel8.
        assert_eq!(probe_point(&[0x49, 0x3b, 0x66, 0x10, 0x76, 0x20, 0x48]), 4);
        // LEAQ -0x20(SP), R12; CMPQ 0x10(R14), R12; JBE rel32.
        let lea8 = [0x4c, 0x8d, 0x64, 0x24, 0xe0, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86, 1, 2, 3, 4];
        assert_eq!(probe_point(&lea8), 9);
        let lea32 = [0x4c, 0x8d, 0xa4, 0x24, 0, 0xfe, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x76, 9];
        assert_eq!(probe_point(&lea32), 12);
        // No check (a small frame), another branch, or too short: the entry.
        assert_eq!(probe_point(&[0x48, 0x83, 0xec, 0x18, 0x48, 0x89]), 0);
        assert_eq!(probe_point(&[0x49, 0x3b, 0x66, 0x10, 0x72, 0x20]), 0);
        assert_eq!(probe_point(&[0x49, 0x3b, 0x66, 0x10]), 0);
        assert_eq!(probe_point(&[0x4c, 0x8d, 0x64, 0x24, 0xe0, 0x4d, 0x3b]), 0);
    }

    #[test]
    fn versions_give_the_goid_offset_of_their_layout() {
        assert_eq!(major_minor("go1.19.8"), Some((1, 19)));
        assert_eq!(major_minor("go1.22rc1"), Some((1, 22)));
        assert_eq!(goid_offset("go1.19.8"), Some(152));
        assert_eq!(goid_offset("go1.23.0"), Some(160));
        assert_eq!(goid_offset("go1.18"), None);
        assert_eq!(goid_offset("devel"), None);
    }

    #[test]
    fn the_version_is_read_from_inline_buildinfo() {
        let mut d = b"\xff Go buildinf:".to_vec();
        d.extend([8, 2]);
        d.resize(32, 0);
        d.push(8);
        d.extend(b"go1.19.8");
        d.extend([0, 0]);
        assert_eq!(buildinfo_version(&d).as_deref(), Some("go1.19.8"));
        // Pointer-style buildinfo (before Go 1.18) is not read.
        d[15] = 0;
        assert_eq!(buildinfo_version(&d), None);
        assert_eq!(buildinfo_version(b"short"), None);
    }
}
