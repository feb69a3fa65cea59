//! JavaScript frames: finding V8 in traced processes (its builtins and the
//! layout of its frames and objects, from the postmortem metadata, the
//! `v8dbg_*` symbols every V8 build exports for debuggers) for the walker
//! ([`proc_of`]), and naming the walker's JavaScript frame words in the report
//! (`names::Resolver`).

pub mod names;

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};

use anyhow::{Context as _, Result};
use topwaits_common::jit::JitProc;

use crate::sys::elf;
use crate::sys::procfs::{self, Mapping};

/// A symbol every V8 build exports for debuggers (postmortem metadata): its
/// presence in `.dynsym` marks a file that holds V8, before the (large) full
/// symbol table is read.
pub const V8_MARKER: &str = "v8dbg_class_JSFunction__shared__SharedFunctionInfo";
/// Where the embedded builtins begin, and the `u32` holding their size.
const BLOB: &str = "v8_Default_embedded_blob_code_";
const BLOB_SIZE: &str = "v8_Default_embedded_blob_code_size_";

/// Where a V8 file's embedded builtins lie (file address and size), or None
/// where the file holds no V8 or keeps no symbol table to find them by.
pub fn blob_of<R: Read + Seek>(f: &mut R) -> Result<Option<(u64, u64)>> {
    if elf::symbols(f, &[V8_MARKER], false)?.is_empty() {
        return Ok(None);
    }
    let syms = elf::symbols(f, &[BLOB, BLOB_SIZE], true)?;
    let addr_of = |name: &str| syms.iter().find(|(n, _, _)| n == name).map(|s| s.1);
    let (Some(start), Some(size_at)) = (addr_of(BLOB), addr_of(BLOB_SIZE)) else {
        log::debug!("V8 without its embedded blob's symbols: its builtins are not walked");
        return Ok(None);
    };
    let segments = elf::load_segments(f)?;
    let off = elf::offset_of(&segments, size_at).context("the blob's size is not in the file")?;
    let mut size = [0u8; 4];
    f.seek(SeekFrom::Start(off))?;
    f.read_exact(&mut size)?;
    Ok(Some((start, u32::from_le_bytes(size) as u64)))
}

/// The offsets and tags V8 describes itself by, each from its `v8dbg_` symbol.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub fp_function: i32,
    pub fp_context: i32,
    pub function_shared: i32,
    pub heap_object_map: i32,
    pub map_instance_type: i32,
    pub shared_name: i32,
    pub shared_script: i32,
    pub script_name: i32,
    pub string_length: i32,
    pub seq_chars: i32,
    pub cons_first: i32,
    pub cons_second: i32,
    pub thin_actual: i32,
    pub first_nonstring: i32,
    pub repr_mask: i32,
    pub encoding_mask: i32,
    pub one_byte: i32,
    pub seq_tag: i32,
    pub cons_tag: i32,
    pub thin_tag: i32,
    pub type_shared: i32,
    pub type_scope_info: i32,
    pub type_script: i32,
    pub scope_locals: i32,
    pub scope_first_vars: i32,
}

/// The `v8dbg_` symbol of each [`Layout`] field, in order.
const FIELDS: [&str; 25] = [
    "v8dbg_off_fp_function",
    "v8dbg_off_fp_context",
    "v8dbg_class_JSFunction__shared__SharedFunctionInfo",
    "v8dbg_class_HeapObject__map__Map",
    "v8dbg_class_Map__instance_type__uint16_t",
    "v8dbg_class_SharedFunctionInfo__name_or_scope_info__Object",
    "v8dbg_class_SharedFunctionInfo__script_or_debug_info__HeapObject",
    "v8dbg_class_Script__name__Object",
    "v8dbg_class_String__length__int32_t",
    "v8dbg_class_SeqOneByteString__chars__char",
    "v8dbg_class_ConsString__first__String",
    "v8dbg_class_ConsString__second__String",
    "v8dbg_class_ThinString__actual__String",
    "v8dbg_FirstNonstringType",
    "v8dbg_StringRepresentationMask",
    "v8dbg_StringEncodingMask",
    "v8dbg_OneByteStringTag",
    "v8dbg_SeqStringTag",
    "v8dbg_ConsStringTag",
    "v8dbg_ThinStringTag",
    "v8dbg_type_SharedFunctionInfo__SHARED_FUNCTION_INFO_TYPE",
    "v8dbg_type_ScopeInfo__SCOPE_INFO_TYPE",
    "v8dbg_type_Script__SCRIPT_TYPE",
    "v8dbg_scopeinfo_idx_ncontextlocals",
    "v8dbg_scopeinfo_idx_first_vars",
];

impl Layout {
    fn from_values(v: &[i32; 25]) -> Layout {
        Layout {
            fp_function: v[0],
            fp_context: v[1],
            function_shared: v[2],
            heap_object_map: v[3],
            map_instance_type: v[4],
            shared_name: v[5],
            shared_script: v[6],
            script_name: v[7],
            string_length: v[8],
            seq_chars: v[9],
            cons_first: v[10],
            cons_second: v[11],
            thin_actual: v[12],
            first_nonstring: v[13],
            repr_mask: v[14],
            encoding_mask: v[15],
            one_byte: v[16],
            seq_tag: v[17],
            cons_tag: v[18],
            thin_tag: v[19],
            type_shared: v[20],
            type_scope_info: v[21],
            type_script: v[22],
            scope_locals: v[23],
            scope_first_vars: v[24],
        }
    }
}

/// What a V8 file holds: its builtins (file address and size) and its layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct V8File {
    pub blob: (u64, u64),
    pub layout: Layout,
    segments: Vec<elf::Segment>,
}

/// A file's V8, or None where it holds none. The frame slots must be where
/// every x86-64 V8 has kept them: anything else is not read by this layout.
pub fn file_of<R: Read + Seek>(f: &mut R) -> Result<Option<V8File>> {
    let Some(blob) = blob_of(f)? else { return Ok(None) };
    let syms = elf::symbols(f, &FIELDS, false)?;
    let segments = elf::load_segments(f)?;
    let mut values = [0i32; 25];
    for (i, name) in FIELDS.iter().enumerate() {
        let (_, at, _) = syms
            .iter()
            .find(|(n, _, _)| n == name)
            .with_context(|| format!("V8 without its {name} symbol"))?;
        // A symbol past the file's bytes (in .bss) is zero.
        if let Some(off) = elf::offset_of(&segments, *at) {
            let mut b = [0u8; 4];
            f.seek(SeekFrom::Start(off))?;
            f.read_exact(&mut b)?;
            values[i] = i32::from_le_bytes(b);
        }
    }
    let layout = Layout::from_values(&values);
    if layout.fp_function >= 0 || layout.fp_context >= 0 || layout.function_shared <= 0 {
        anyhow::bail!("V8's frame layout is not one this walker knows");
    }
    Ok(Some(V8File { blob, layout, segments }))
}

/// Whether mapping `m` of a process whose executable is `exe` can hold V8: the
/// executable itself (node links it in) or a library named for node
/// (`libnode`), so that other programs' files are not read for it.
fn may_hold_v8(m: &Mapping, exe: Option<&str>) -> bool {
    let name = m.path.rsplit('/').next().unwrap_or(&m.path);
    m.exec && (name.contains("node") || exe.is_some_and(|e| e == m.path))
}

/// The V8 file a process maps, read once per file, with every mapping of it.
fn v8_of<'a>(
    files: &mut HashMap<(u64, u64), Option<V8File>>,
    tgid: u32,
    maps: &'a [Mapping],
) -> Option<(V8File, Vec<&'a Mapping>)> {
    let exe = procfs::exe_path(tgid);
    let exe = exe.as_deref();
    for m in maps.iter().filter(|m| may_hold_v8(m, exe)) {
        let file = files
            .entry((m.dev, m.inode))
            .or_insert_with(|| {
                let mut r = std::io::BufReader::new(procfs::open_mapped(tgid, m)?);
                file_of(&mut r).unwrap_or_else(|e| {
                    log::debug!("V8 in {} not read: {e:#}", m.path);
                    None
                })
            })
            .clone();
        if let Some(f) = file {
            let all = maps.iter().filter(|o| (o.dev, o.inode) == (m.dev, m.inode)).collect();
            return Some((f, all));
        }
    }
    None
}

/// The walker's entry for a process mapping `file` at `maps`: the builtins'
/// file bytes in each executable mapping that holds them (at most two: the
/// binary's and V8's remapped copy).
fn walker_for(file: &V8File, maps: &[&Mapping]) -> JitProc {
    let mut p = JitProc {
        fp_function: file.layout.fp_function,
        fp_context: file.layout.fp_context,
        shared: file.layout.function_shared as u32,
        ..Default::default()
    };
    let Some(off) = elf::offset_of(&file.segments, file.blob.0) else { return p };
    let (lo, hi) = (off, off + file.blob.1);
    let mut ranges = maps.iter().filter(|m| m.exec).filter_map(|m| {
        let (from, to) = (lo.max(m.offset), hi.min(m.offset + (m.end - m.start)));
        (from < to).then(|| (m.start + (from - m.offset), m.start + (to - m.offset)))
    });
    if let Some((a, b)) = ranges.next() {
        (p.blob[0], p.blob[1]) = (a, b);
    }
    if let Some((a, b)) = ranges.next() {
        (p.blob[2], p.blob[3]) = (a, b);
    }
    p
}

/// The walker's entry for a V8 process mapping `maps`, its files read once
/// into `files`.
pub fn proc_of(
    files: &mut HashMap<(u64, u64), Option<V8File>>,
    tgid: u32,
    maps: &[Mapping],
) -> Option<JitProc> {
    v8_of(files, tgid, maps).map(|(f, mine)| walker_for(&f, &mine))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(start: u64, end: u64, offset: u64, exec: bool) -> Mapping {
        Mapping { start, end, offset, path: "/usr/bin/node".into(), exec, dev: 1, inode: 2 }
    }

    fn file() -> V8File {
        V8File {
            blob: (0x18c4000, 0x190000),
            layout: Layout {
                fp_function: -16,
                fp_context: -8,
                function_shared: 24,
                ..Default::default()
            },
            segments: vec![elf::Segment {
                offset: 0x772000,
                vaddr: 0xb72000,
                filesz: 0x1a8c000,
                exec: false,
            }],
        }
    }

    #[test]
    fn the_builtins_are_found_in_the_binary_and_in_their_remapped_copy() {
        let maps = [
            mapping(0xb72000, 0x25fe000, 0x772000, true),
            mapping(0x7f00_0000_0000, 0x7f00_0019_2000, 0x14c4000, true),
            mapping(0x7f00_1000_0000, 0x7f00_1019_0000, 0x14c4000, false),
        ];
        let p = walker_for(&file(), &maps.iter().collect::<Vec<_>>());
        assert_eq!((p.blob[0], p.blob[1]), (0x18c4000, 0x18c4000 + 0x190000));
        assert_eq!((p.blob[2], p.blob[3]), (0x7f00_0000_0000, 0x7f00_0019_0000));
        assert_eq!((p.fp_function, p.fp_context, p.shared), (-16, -8, 24));
    }

    #[test]
    fn only_the_executable_and_node_libraries_are_looked_at() {
        let m = |path: &str| Mapping { path: path.into(), ..mapping(0, 1, 0, true) };
        assert!(may_hold_v8(&m("/usr/lib/libnode.so.108"), None));
        assert!(may_hold_v8(&m("/opt/app/server"), Some("/opt/app/server")));
        assert!(!may_hold_v8(&m("/usr/lib/libc.so.6"), Some("/usr/bin/node")));
        assert!(!may_hold_v8(&Mapping { exec: false, ..m("/usr/bin/node") }, None));
    }

    /// Debian's node, where installed: its layout is read whole.
    #[test]
    fn nodes_layout_is_read_from_its_metadata() {
        let Ok(f) = std::fs::File::open("/usr/bin/node") else {
            eprintln!("skipped: no /usr/bin/node");
            return;
        };
        let Some(v8) = file_of(&mut std::io::BufReader::new(f)).unwrap() else {
            eprintln!("skipped: /usr/bin/node keeps no symbol table");
            return;
        };
        let l = v8.layout;
        assert_eq!((l.fp_function, l.fp_context), (-16, -8));
        assert!(l.type_shared > 0 && l.type_shared != l.type_scope_info && l.first_nonstring > 0);
        assert!(l.string_length > 0 && l.seq_chars > l.string_length);
    }
}
