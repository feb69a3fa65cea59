//! Section names, one section's bytes and loaded segments of ELF64 files, read from
//! the headers and that section alone (a binary with debug info can be hundreds of
//! MiB): enough to tell a stripped library from one that keeps its symbol table, to
//! turn a file offset into the address its symbols (and its separate debug file's)
//! are given at, and to read the eBPF object's BTF sections.

use std::io::{self, Read, Seek, SeekFrom};

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

fn u16_at(b: &[u8], o: usize) -> u64 {
    u16::from_le_bytes([b[o], b[o + 1]]) as u64
}

fn u32_at(b: &[u8], o: usize) -> u64 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default()) as u64
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default())
}

/// The file header of a little-endian ELF64 file.
fn file_header<R: Read>(f: &mut R) -> io::Result<[u8; 64]> {
    let mut eh = [0u8; 64];
    f.read_exact(&mut eh)?;
    if &eh[..6] != b"\x7fELF\x02\x01" {
        return Err(bad("not a little-endian ELF64 file"));
    }
    Ok(eh)
}

/// The section headers of a little-endian ELF64 file, each with its name.
fn sections<R: Read + Seek>(f: &mut R) -> io::Result<Vec<(String, [u8; 64])>> {
    f.seek(SeekFrom::Start(0))?;
    let eh = file_header(f)?;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(&eh, 0x28), u16_at(&eh, 0x3a), u16_at(&eh, 0x3c), u16_at(&eh, 0x3e));
    if shentsize < 64 || shnum > 65_535 || shstrndx >= shnum {
        return Err(bad("bad section header table"));
    }
    let mut table = vec![0u8; (shentsize * shnum) as usize];
    f.seek(SeekFrom::Start(shoff))?;
    f.read_exact(&mut table)?;
    let header = |i: u64| -> [u8; 64] {
        let at = (i * shentsize) as usize;
        table[at..at + 64].try_into().unwrap_or([0; 64])
    };
    let strs = header(shstrndx);
    let names = section_data(f, &strs, 16 << 20, "section name table too large")?;
    Ok((0..shnum)
        .map(|i| {
            let h = header(i);
            let at = (u32_at(&h, 0) as usize).min(names.len());
            let end = names[at..].iter().position(|&b| b == 0).map_or(names.len(), |n| at + n);
            (String::from_utf8_lossy(&names[at..end]).into_owned(), h)
        })
        .collect())
}

/// The section names of a little-endian ELF64 file.
pub fn section_names<R: Read + Seek>(f: &mut R) -> io::Result<Vec<String>> {
    Ok(sections(f)?.into_iter().map(|(name, _)| name).collect())
}

/// The bytes of the first section named `name`, if there is one.
pub fn section_bytes<R: Read + Seek>(f: &mut R, name: &str) -> io::Result<Option<Vec<u8>>> {
    match sections(f)?.into_iter().find(|(n, _)| n == name) {
        Some((_, h)) => section_data(f, &h, 256 << 20, "section too large").map(Some),
        None => Ok(None),
    }
}

/// The address and bytes of the first section named `name`, if there is one.
pub fn section_with_addr<R: Read + Seek>(
    f: &mut R,
    name: &str,
) -> io::Result<Option<(u64, Vec<u8>)>> {
    match sections(f)?.into_iter().find(|(n, _)| n == name) {
        Some((_, h)) => {
            Ok(Some((u64_at(&h, 0x10), section_data(f, &h, 256 << 20, "section too large")?)))
        }
        None => Ok(None),
    }
}

/// The virtual address of section `name`, its contents left unread (perf's
/// `.text`, whose address a table needs, is 2.4 MB).
pub fn section_addr<R: Read + Seek>(f: &mut R, name: &str) -> io::Result<Option<u64>> {
    Ok(sections(f)?.into_iter().find(|(n, _)| n == name).map(|(_, h)| u64_at(&h, 0x10)))
}

/// The bytes of the section whose header is `h`, refused past `limit` bytes.
fn section_data<R: Read + Seek>(
    f: &mut R,
    h: &[u8; 64],
    limit: u64,
    too_large: &str,
) -> io::Result<Vec<u8>> {
    let (off, size) = (u64_at(h, 0x18), u64_at(h, 0x20));
    if size > limit {
        return Err(bad(too_large));
    }
    let mut bytes = vec![0u8; size as usize];
    f.seek(SeekFrom::Start(off))?;
    f.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// The file's GNU build id (the descriptor of its `.note.gnu.build-id`), if it
/// has one.
pub fn build_id<R: Read + Seek>(f: &mut R) -> io::Result<Option<Vec<u8>>> {
    let Some(note) = section_bytes(f, ".note.gnu.build-id")? else { return Ok(None) };
    Ok(build_id_of_note(&note))
}

/// The descriptor of a `NT_GNU_BUILD_ID` note named "GNU".
fn build_id_of_note(note: &[u8]) -> Option<Vec<u8>> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |at: usize| Some(u32::from_le_bytes(note.get(at..at + 4)?.try_into().ok()?));
    let (namesz, descsz, kind) = (word(0)? as usize, word(4)? as usize, word(8)?);
    let desc = 12 + namesz.div_ceil(4) * 4;
    (kind == NT_GNU_BUILD_ID && note.get(12..12 + namesz)? == b"GNU\0" && descsz > 0)
        .then(|| note.get(desc..desc + descsz).map(<[u8]>::to_vec))?
}

/// A loaded segment (`PT_LOAD`): where its bytes lie in the file and in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    /// Whether it is executable (`PF_X`).
    pub exec: bool,
}

/// The loaded segments of a little-endian ELF64 file.
pub fn load_segments<R: Read + Seek>(f: &mut R) -> io::Result<Vec<Segment>> {
    f.seek(SeekFrom::Start(0))?;
    let eh = file_header(f)?;
    let (phoff, phentsize, phnum) = (u64_at(&eh, 0x20), u16_at(&eh, 0x36), u16_at(&eh, 0x38));
    if phentsize < 56 || phnum > 4096 {
        return Err(bad("bad program header table"));
    }
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    f.seek(SeekFrom::Start(phoff))?;
    f.read_exact(&mut table)?;
    const PT_LOAD: u64 = 1;
    const PF_X: u64 = 1;
    Ok(table
        .chunks_exact(phentsize as usize)
        .filter(|h| u32_at(h, 0) == PT_LOAD)
        .map(|h| Segment {
            offset: u64_at(h, 0x08),
            vaddr: u64_at(h, 0x10),
            filesz: u64_at(h, 0x20),
            exec: u32_at(h, 4) & PF_X != 0,
        })
        .collect())
}

/// The address that the byte at file offset `off` is loaded at, if a segment
/// holds it.
pub fn vaddr_of(segments: &[Segment], off: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| s.offset <= off && off - s.offset < s.filesz)
        .map(|s| off - s.offset + s.vaddr)
}

/// The address at which a mapping of the file that begins at file offset `off`
/// (a page boundary, as `/proc/PID/maps` gives it) begins, `exec` when the
/// mapping is executable: the load bias of that mapping is its start less
/// this. The kernel maps each segment from the page that holds its first
/// byte, and lld begins a segment on the page where the one before it ends,
/// loaded a page further on: two mappings of different addresses then begin
/// at one offset, told apart by their permissions. The segment the mapping
/// was made for comes first; [`vaddr_of`] alone would take the earlier one.
pub fn mapping_vaddr(segments: &[Segment], off: u64, exec: bool) -> Option<u64> {
    const PAGE: u64 = 4096;
    let begins = |s: &&Segment| s.offset & !(PAGE - 1) == off;
    segments
        .iter()
        .filter(begins)
        .find(|s| s.exec == exec)
        .or_else(|| segments.iter().find(begins))
        .map(|s| s.vaddr.wrapping_sub(s.offset - off))
        // A mapping that begins inside a segment (split by mprotect).
        .or_else(|| vaddr_of(segments, off))
}

/// The file offset that address `vaddr` is loaded from, if a segment holds it
/// (the inverse of [`vaddr_of`]).
pub fn offset_of(segments: &[Segment], vaddr: u64) -> Option<u64> {
    segments
        .iter()
        .find(|s| s.vaddr <= vaddr && vaddr - s.vaddr < s.filesz)
        .map(|s| vaddr - s.vaddr + s.offset)
}

/// The address and size of each of `wanted` that the file's dynamic symbol table
/// (and, with `full`, its full symbol table) defines; the first definition wins.
pub fn symbols<R: Read + Seek>(
    f: &mut R,
    wanted: &[&str],
    full: bool,
) -> io::Result<Vec<(String, u64, u64)>> {
    symbols_where(f, full, &|name, _| wanted.contains(&name))
}

/// `STT_OBJECT`, a data symbol's type.
pub const STT_OBJECT: u8 = 1;

/// The name, address and size of each defined symbol that `keep` takes (given
/// its name and type, `st_info & 0xf`) in the file's dynamic symbol table (and,
/// with `full`, its full symbol table); the first definition of a name wins.
pub fn symbols_where<R: Read + Seek>(
    f: &mut R,
    full: bool,
    keep: &dyn Fn(&str, u8) -> bool,
) -> io::Result<Vec<(String, u64, u64)>> {
    let all = sections(f)?;
    let mut out: Vec<(String, u64, u64)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let tables: &[(&str, &str)] = if full {
        &[(".dynsym", ".dynstr"), (".symtab", ".strtab")]
    } else {
        &[(".dynsym", ".dynstr")]
    };
    for (table, strings) in tables {
        let (Some((_, th)), Some((_, sh))) =
            (all.iter().find(|(n, _)| n == table), all.iter().find(|(n, _)| n == strings))
        else {
            continue;
        };
        let syms = section_data(f, th, 256 << 20, "symbol table too large")?;
        let names = section_data(f, sh, 256 << 20, "string table too large")?;
        for sym in syms.chunks_exact(24) {
            let (value, size) = (u64_at(sym, 8), u64_at(sym, 16));
            let at = (u32_at(sym, 0) as usize).min(names.len());
            let end = names[at..].iter().position(|&b| b == 0).map_or(names.len(), |n| at + n);
            let Ok(name) = std::str::from_utf8(&names[at..end]) else { continue };
            // Defined (a section index other than SHN_UNDEF).
            if value != 0
                && u16_at(sym, 6) != 0
                && keep(name, sym[4] & 0xf)
                && seen.insert(name.to_string())
            {
                out.push((name.to_string(), value, size));
            }
        }
    }
    Ok(out)
}

/// Whether the file at `path` keeps a symbol table (`.symtab`); `None` when it
/// cannot be read as ELF.
pub fn has_symtab(path: &str) -> Option<bool> {
    let mut f = std::fs::File::open(path).ok()?;
    Some(section_names(&mut f).ok()?.iter().any(|n| n == ".symtab"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_offsets_come_from_the_segment_holding_the_address() {
        let segs = [
            Segment { offset: 0, vaddr: 0x400000, filesz: 0x1000, exec: false },
            Segment { offset: 0x1000, vaddr: 0x402000, filesz: 0x800, exec: false },
        ];
        assert_eq!(offset_of(&segs, 0x400010), Some(0x10));
        assert_eq!(offset_of(&segs, 0x402010), Some(0x1010));
        assert_eq!(offset_of(&segs, 0x401800), None);
    }

    #[test]
    fn finds_a_functions_symbol_in_this_test_binary() {
        let me = std::env::current_exe().unwrap();
        let mut f = std::fs::File::open(&me).unwrap();
        // `main` is in the full symbol table of every Rust test binary.
        let found = symbols(&mut f, &["main", "no_such_symbol_anywhere"], true).unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "main");
        assert!(found[0].1 > 0 && found[0].2 > 0);
        assert!(symbols(&mut std::io::Cursor::new(b"junk".to_vec()), &["main"], true).is_err());
    }

    #[test]
    fn a_build_id_is_read_from_its_note_and_junk_is_none() {
        let mut note = vec![4, 0, 0, 0, 4, 0, 0, 0, 3, 0, 0, 0];
        note.extend(b"GNU\0");
        note.extend([0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(build_id_of_note(&note), Some(vec![0xde, 0xad, 0xbe, 0xef]));
        assert_eq!(build_id_of_note(&note[..18]), None, "truncated");
        note[8] = 1;
        assert_eq!(build_id_of_note(&note), None, "another kind of note");
        let me = std::env::current_exe().unwrap();
        let id = build_id(&mut std::fs::File::open(&me).unwrap())
            .unwrap()
            .expect("test binaries have a build id");
        assert!(id.len() >= 8, "{id:?}");
    }

    #[test]
    fn reads_this_test_binarys_sections_and_rejects_junk() {
        let me = std::env::current_exe().unwrap();
        let names = section_names(&mut std::fs::File::open(&me).unwrap()).unwrap();
        assert!(names.iter().any(|n| n == ".text"), "{names:?}");
        assert_eq!(has_symtab(me.to_str().unwrap()), Some(true));
        assert!(section_names(&mut io::Cursor::new(b"not an elf file, not at all, no".repeat(4)))
            .is_err());
        let bytes = std::fs::read(&me).unwrap();
        assert!(
            section_names(&mut io::Cursor::new(&bytes[..100])).is_err(),
            "truncated: an error, not a panic"
        );
        assert_eq!(has_symtab("/nonexistent"), None);
    }

    #[test]
    fn reads_a_sections_bytes_by_name() {
        let me = std::env::current_exe().unwrap();
        let mut f = std::fs::File::open(&me).unwrap();
        let interp =
            section_bytes(&mut f, ".interp").unwrap().expect("a dynamically linked test binary");
        assert!(interp.starts_with(b"/") && interp.ends_with(b"\0"), "{interp:?}");
        assert!(String::from_utf8_lossy(&interp).contains("ld-linux"), "{interp:?}");
        assert_eq!(section_bytes(&mut f, ".no-such-section").unwrap(), None);
        assert!(section_bytes(&mut io::Cursor::new(b"junk".repeat(20)), ".text").is_err());
    }

    /// A section's address alone is the address its bytes come with.
    #[test]
    fn a_sections_address_is_read_without_its_bytes() {
        let me = std::env::current_exe().unwrap();
        let mut f = std::fs::File::open(&me).unwrap();
        let (addr, _) = section_with_addr(&mut f, ".text").unwrap().unwrap();
        assert!(addr > 0);
        assert_eq!(section_addr(&mut f, ".text").unwrap(), Some(addr));
        assert_eq!(section_addr(&mut f, ".no-such-section").unwrap(), None);
        assert!(section_addr(&mut io::Cursor::new(b"junk".repeat(20)), ".text").is_err());
    }

    #[test]
    fn file_offsets_map_to_addresses_through_the_loaded_segments() {
        let me = std::env::current_exe().unwrap();
        let segs = load_segments(&mut std::fs::File::open(&me).unwrap()).unwrap();
        assert!(segs.len() >= 2, "{segs:?}");
        let text = segs[1];
        assert_eq!(vaddr_of(&segs, text.offset + 5), Some(text.vaddr + 5));
        let fake = [
            Segment { offset: 0x1000, vaddr: 0x401000, filesz: 0x100, exec: false },
            Segment { offset: 0x2000, vaddr: 0x603000, filesz: 0x10, exec: false },
        ];
        assert_eq!(vaddr_of(&fake, 0x10ff), Some(0x4010ff));
        assert_eq!(vaddr_of(&fake, 0x1100), None, "past the segment's file bytes");
        assert_eq!(vaddr_of(&fake, 0x2008), Some(0x603008));
        assert!(load_segments(&mut io::Cursor::new(b"junk".repeat(20))).is_err());
    }

    /// lld's layout: the text segment's first byte shares a page with the
    /// read-only segment before it, and is loaded a page further on than its
    /// offset. A mapping of that page is the text's.
    #[test]
    fn a_mapping_of_a_shared_page_belongs_to_the_segment_it_begins() {
        let lld = [
            Segment { offset: 0, vaddr: 0, filesz: 0x458b4, exec: false },
            Segment { offset: 0x458c0, vaddr: 0x468c0, filesz: 0xcc4e0, exec: true },
            Segment { offset: 0x111da0, vaddr: 0x113da0, filesz: 0xba38, exec: false },
        ];
        assert_eq!(mapping_vaddr(&lld, 0x45000, true), Some(0x46000));
        assert_eq!(mapping_vaddr(&lld, 0, false), Some(0));
        assert_eq!(mapping_vaddr(&lld, 0x111000, false), Some(0x113000));
        // A mapping that begins inside a segment (split by mprotect).
        assert_eq!(mapping_vaddr(&lld, 0x50000, true), Some(0x51000));
        assert_eq!(mapping_vaddr(&lld, 0x200000, true), None);
        // A small program: the text's first byte is on the file's first page,
        // so both mappings begin at offset 0, the text's a page further on.
        let small = [
            Segment { offset: 0, vaddr: 0, filesz: 0xb00, exec: false },
            Segment { offset: 0xb00, vaddr: 0x1b00, filesz: 0x730, exec: true },
        ];
        assert_eq!(mapping_vaddr(&small, 0, true), Some(0x1000));
        assert_eq!(mapping_vaddr(&small, 0, false), Some(0));
    }

    /// A function of this test program, named in its symbol table as is.
    #[no_mangle]
    #[inline(never)]
    extern "C" fn tw_elf_placed_function() -> u64 {
        std::hint::black_box(7)
    }

    /// This test program's own code: the address of one of its functions,
    /// less the load bias of the mapping that holds it, is that function's
    /// address in the file's symbol table, whichever linker laid it out.
    #[test]
    fn this_programs_load_bias_places_its_own_functions() {
        assert_eq!(tw_elf_placed_function(), 7);
        let me = std::env::current_exe().unwrap();
        let mut f = std::fs::File::open(&me).unwrap();
        let segs = load_segments(&mut f).unwrap();
        let here = tw_elf_placed_function as *const () as u64;
        let maps = crate::sys::procfs::maps_of(std::process::id());
        let m = maps.iter().find(|m| m.start <= here && here < m.end).expect("mapped");
        let bias = m.start.wrapping_sub(mapping_vaddr(&segs, m.offset, m.exec).unwrap());
        let syms = symbols(&mut f, &["tw_elf_placed_function"], true).unwrap();
        assert_eq!(syms.len(), 1, "{syms:?}");
        assert_eq!(here.wrapping_sub(bias), syms[0].1, "mapping {m:?}, segments {segs:x?}");
    }
}
