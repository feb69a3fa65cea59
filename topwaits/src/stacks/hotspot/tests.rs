use super::names::{code_at, method_name, Code};
use super::*;
use crate::sys::memory::Bytes;
use topwaits_common::jit::{jvm_block_start, JVM_HOPS};

/// OpenJDK 17's offsets, as its vmStructs give them.
const OFFSETS: [u64; 24] =
    [8, 8, 34, 24, 24, 4, 6, 0, 8, 20, 0, 0, 8, 8, 120, 256, 16, 24, 8, 96, 112, 0, 8, 28];
/// Where the fabricated statics live: the interpreter's queue pointer and the
/// code heaps' array pointer.
const INTERPRETER_AT: u64 = 0x9_0000;
const HEAPS_AT: u64 = 0x9_0100;

/// A fabricated process with both vmStructs tables; the variables' values.
fn tables(m: &mut Bytes) -> [u64; 11] {
    let mut strings = 0x2_0000u64;
    let mut string = |m: &mut Bytes, s: &str| {
        let at = strings;
        m.put(at, s.as_bytes());
        m.put(at + s.len() as u64, &[0]);
        strings += s.len() as u64 + 1;
        at
    };
    // Entries: type name, field name, type string, is static, offset, address.
    let structs = 0x1_0000u64;
    // One entry of a type no field is wanted from comes first.
    let mut rows = vec![("JavaThread", "_threadObj", 0u64)];
    rows.extend(FIELDS.iter().zip(OFFSETS).map(|(&(t, f), o)| (t, f, o)));
    for (i, (ty, field, off)) in rows.iter().enumerate() {
        let e = structs + 48 * i as u64;
        let (t, f) = (string(m, ty), string(m, field));
        m.put_word(e, t);
        m.put_word(e + 8, f);
        let address = match (*ty, *field) {
            ("AbstractInterpreter", "_code") => INTERPRETER_AT,
            ("CodeCache", "_heaps") => HEAPS_AT,
            _ => 0,
        };
        m.put_word(e + 24, (address != 0) as u64);
        m.put_word(e + 32, *off);
        m.put_word(e + 40, address);
    }
    m.put_word(structs + 48 * rows.len() as u64, 0);
    let types = 0x3_0000u64;
    for (i, (ty, size)) in
        [("Method", 88u64), ("ConstantPool", 72), ("HeapBlock", 16)].iter().enumerate()
    {
        let e = types + 40 * i as u64;
        let t = string(m, ty);
        m.put_word(e, t);
        m.put_word(e + 32, *size);
    }
    m.put_word(types + 40 * 3, 0);
    [structs, 48, 0, 8, 24, 32, 40, types, 40, 0, 32]
}

fn symbol(m: &mut Bytes, at: u64, s: &str) -> u64 {
    m.put(at + 4, &(s.len() as u16).to_le_bytes());
    m.put(at + 6, s.as_bytes());
    at
}

/// A method `name` of class `class`, its Method* at `at`.
fn method(m: &mut Bytes, at: u64, class: &str, name: &str) -> u64 {
    let (cm, cp, holder) = (at + 0x100, at + 0x200, at + 0x400);
    m.put_word(at + 8, cm);
    m.put_word(cm + 8, cp);
    m.put(cm + 34, &3u16.to_le_bytes());
    m.put_word(cp + 24, holder);
    let class = symbol(m, at + 0x500, class);
    m.put_word(holder + 24, class);
    let name = symbol(m, at + 0x600, name);
    m.put_word(cp + 72 + 8 * 3, name);
    at
}

#[test]
fn the_layout_is_read_from_both_tables_statics_by_address() {
    let mut m = Bytes::default();
    let vars = tables(&mut m);
    let l = layout_of(&m, &vars).unwrap();
    assert_eq!((l.method_const, l.const_name_index, l.blob_name), (8, 34, 96));
    assert_eq!((l.interpreter, l.code_heaps), (INTERPRETER_AT, HEAPS_AT));
    assert_eq!((l.cp_size, l.block_size), (72, 16));
    // The interpreter, once its queue is in place.
    assert_eq!(interpreter(&m, &l), None);
    m.put_word(INTERPRETER_AT, 0x9_1000);
    m.put_word(0x9_1000 + 8, 0x7f00_0000_0000);
    m.put(0x9_1000 + 20, &0x4_0000u32.to_le_bytes());
    assert_eq!(interpreter(&m, &l), Some((0x7f00_0000_0000, 0x7f00_0004_0000)));
    // A table that lacks a field says which.
    m.put_word(0x1_0000 + 48 * 21, 0);
    let e = layout_of(&m, &vars).unwrap_err().to_string();
    assert!(e.contains("CompiledMethod::_method"), "{e}");
}

#[test]
fn a_method_is_named_by_its_class_and_constant_pool() {
    let mut m = Bytes::default();
    let vars = tables(&mut m);
    let l = layout_of(&m, &vars).unwrap();
    let at = method(&mut m, 0x5_0000, "java/lang/Thread", "sleep");
    assert_eq!(method_name(&m, &l, at).as_deref(), Some("java.lang.Thread.sleep"));
    // A lambda's hidden class, without the address that differs by run.
    let lambda = method(&mut m, 0x7_0000, "app/Turns$$Lambda$1+0x00007f420c000a08", "run");
    assert_eq!(method_name(&m, &l, lambda).as_deref(), Some("app.Turns$$Lambda$1.run"));
    // No ConstMethod, or a name that is no text: nothing is guessed.
    assert_eq!(method_name(&m, &l, 0x6_0000), None);
    m.put(0x5_0600 + 6, &[0x07]);
    assert_eq!(method_name(&m, &l, at), None);
}

#[test]
fn code_is_found_through_the_segment_map_and_named() {
    let mut m = Bytes::default();
    let vars = tables(&mut m);
    let l = layout_of(&m, &vars).unwrap();
    let (heap, low, map) = (0xa_0000u64, 0x7e00_0000_0000u64, 0xb_0000u64);
    m.put_word(HEAPS_AT, 0xa_1000);
    m.put(0xa_1000, &1i32.to_le_bytes());
    m.put_word(0xa_1000 + 8, 0xa_2000);
    m.put_word(0xa_2000, heap);
    m.put_word(heap + 8, low);
    m.put_word(heap + 8 + 8, low + 0x1_0000);
    m.put_word(heap + 120 + 16, map);
    m.put(heap + 256, &7i32.to_le_bytes());
    // Segments of 128 bytes: a stub in segments 0-1, an nmethod in 2-5, 6 free.
    m.put(map, &[0, 1, 0, 1, 2, 3, 0xff]);
    let name = |m: &mut Bytes, at: u64, s: &str| {
        m.put(at, s.as_bytes());
        m.put(at + s.len() as u64, &[0]);
        at
    };
    let (stub, nm) = (low + 16, low + 2 * 128 + 16);
    m.put(low + 8, &[1]);
    m.put(low + 2 * 128 + 8, &[1]);
    let stub_name = name(&mut m, 0xc_0000, "StubRoutines (1)");
    m.put_word(stub + 96, stub_name);
    let nm_name = name(&mut m, 0xc_1000, "nmethod");
    m.put_word(nm + 96, nm_name);
    let at = method(&mut m, 0x5_0000, "Turns", "handle");
    m.put_word(nm + 112, at);
    assert_eq!(code_at(&m, &l, low + 200), Some(Code::Stub("StubRoutines (1)".into())));
    assert_eq!(code_at(&m, &l, low + 5 * 128 + 3), Some(Code::Method("Turns.handle".into())));
    assert_eq!(code_at(&m, &l, low + 6 * 128), None, "a free segment");
    assert_eq!(code_at(&m, &l, low + 0x1_0000), None, "past the heap");
    // The walker's view: the heap and its map, and the nmethod's frame size.
    let code = code_of(&m, &l).unwrap();
    assert_eq!(code.heaps[0], JvmHeap { low, high: low + 0x1_0000, segmap: map });
    assert_eq!((code.log2_segment, code.block_size, code.frame_size), (7, 16, 28));
    m.put(nm + 28, &6u32.to_le_bytes());
    let start = jvm_block_start(|a| m.byte(a), JVM_HOPS);
    assert_eq!(code.frame_words(low + 5 * 128, start, |a| m.u32(a)), Some(6));
    // A block not in use.
    m.put(low + 8, &[0]);
    assert_eq!(code_at(&m, &l, low + 100), None);
}
