//! Section names of ELF64 files, read from the headers alone (a binary with debug
//! info can be hundreds of MiB): enough to tell a stripped library from one that
//! keeps its symbol table.

use std::io::{self, Read, Seek, SeekFrom};

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The section names of a little-endian ELF64 file.
pub fn section_names<R: Read + Seek>(f: &mut R) -> io::Result<Vec<String>> {
    let mut eh = [0u8; 64];
    f.read_exact(&mut eh)?;
    if &eh[..6] != b"\x7fELF\x02\x01" {
        return Err(bad("not a little-endian ELF64 file"));
    }
    let u16_at = |b: &[u8], o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as u64;
    let u32_at = |b: &[u8], o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or_default()) as u64;
    let u64_at = |b: &[u8], o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or_default());
    let (shoff, shentsize, shnum, shstrndx) = (u64_at(&eh, 0x28), u16_at(&eh, 0x3a), u16_at(&eh, 0x3c), u16_at(&eh, 0x3e));
    if shentsize < 64 || shnum > 65_535 || shstrndx >= shnum {
        return Err(bad("bad section header table"));
    }
    let mut table = vec![0u8; (shentsize * shnum) as usize];
    f.seek(SeekFrom::Start(shoff))?;
    f.read_exact(&mut table)?;
    let header = |i: u64| &table[(i * shentsize) as usize..((i + 1) * shentsize) as usize];
    let strs = header(shstrndx);
    let (str_off, str_size) = (u64_at(strs, 0x18), u64_at(strs, 0x20));
    if str_size > 16 << 20 {
        return Err(bad("section name table too large"));
    }
    let mut names = vec![0u8; str_size as usize];
    f.seek(SeekFrom::Start(str_off))?;
    f.read_exact(&mut names)?;
    Ok((0..shnum)
        .map(|i| {
            let at = (u32_at(header(i), 0) as usize).min(names.len());
            let end = names[at..].iter().position(|&b| b == 0).map_or(names.len(), |n| at + n);
            String::from_utf8_lossy(&names[at..end]).into_owned()
        })
        .collect())
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
    fn reads_this_test_binarys_sections_and_rejects_junk() {
        let me = std::env::current_exe().unwrap();
        let names = section_names(&mut std::fs::File::open(&me).unwrap()).unwrap();
        assert!(names.iter().any(|n| n == ".text"), "{names:?}");
        assert_eq!(has_symtab(me.to_str().unwrap()), Some(true));
        assert!(section_names(&mut io::Cursor::new(b"not an elf file, not at all, no".repeat(4))).is_err());
        let bytes = std::fs::read(&me).unwrap();
        assert!(section_names(&mut io::Cursor::new(&bytes[..100])).is_err(), "truncated: an error, not a panic");
        assert_eq!(has_symtab("/nonexistent"), None);
    }
}
