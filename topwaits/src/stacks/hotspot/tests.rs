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
const CALL_STUB_AT: u64 = 0x9_0200;

/// A vmStructs row: type, field, offset, and a static field's address (0
/// for an instance field).
type Row = (&'static str, &'static str, u64, u64);

/// A fabricated process with both vmStructs tables; the variables' values.
fn tables(m: &mut Bytes) -> [u64; 11] {
    tables_with(m, |_| {})
}

/// [`tables`], its struct rows changed by `change` first.
fn tables_with(m: &mut Bytes, change: impl FnOnce(&mut Vec<Row>)) -> [u64; 11] {
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
    let mut rows: Vec<Row> = vec![("JavaThread", "_threadObj", 0, 0)];
    rows.extend(FIELDS.iter().zip(OFFSETS).map(|(&(t, f), o)| {
        let address = match (t, f) {
            ("AbstractInterpreter", "_code") => INTERPRETER_AT,
            ("CodeCache", "_heaps") => HEAPS_AT,
            _ => 0,
        };
        (t, f, o, address)
    }));
    rows.push(("StubRoutines", "_call_stub_return_address", 0, CALL_STUB_AT));
    change(&mut rows);
    for (i, (ty, field, off, address)) in rows.iter().enumerate() {
        let e = structs + 48 * i as u64;
        let (t, f) = (string(m, ty), string(m, field));
        m.put_word(e, t);
        m.put_word(e + 8, f);
        m.put_word(e + 24, (*address != 0) as u64);
        m.put_word(e + 32, *off);
        m.put_word(e + 40, *address);
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
    // Where calls into Java return, in that blob: the call stub, by name.
    assert_eq!(l.call_stub_return, CALL_STUB_AT);
    m.put_word(CALL_STUB_AT, low + 150);
    let call_stub = Some(Code::Stub("StubRoutines::call_stub".into()));
    assert_eq!(code_at(&m, &l, low + 150), call_stub);
    assert_eq!(code_at(&m, &l, low + 148), call_stub, "the call's own address");
    assert_eq!(code_at(&m, &l, low + 151), Some(Code::Stub("StubRoutines (1)".into())));
    assert_eq!(code_at(&m, &l, low + 140), Some(Code::Stub("StubRoutines (1)".into())));
    assert_eq!(code_at(&m, &l, low + 5 * 128 + 3), Some(Code::Method(vec!["Turns.handle".into()])));
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

#[test]
fn a_field_that_moved_in_a_later_release_is_read_where_it_moved() {
    let mut m = Bytes::default();
    let vars = tables_with(&mut m, |rows| {
        let at = rows.iter().position(|r| (r.0, r.1) == ("CompiledMethod", "_method")).unwrap();
        rows[at] = ("nmethod", "_method", 80, 0);
    });
    assert_eq!(layout_of(&m, &vars).unwrap().compiled_method, 80);
}

mod monitors {
    use super::*;
    use crate::stacks::hotspot::monitors::{monitor_waits, thread_layout_of, MonitorWait};

    const LIST_AT: u64 = 0x9_0200;
    const NARROW_BASE_AT: u64 = 0x9_0300;
    const NARROW_SHIFT_AT: u64 = 0x9_0308;

    /// JDK 17's rows for threads and monitors; `owner_ids` adds JDK 24's
    /// owner ids, and a lock stack.
    fn rows(owner_ids: bool) -> impl FnOnce(&mut Vec<Row>) {
        move |rows| {
            rows.extend([
                ("ThreadsSMRSupport", "_java_thread_list", 0, LIST_AT),
                ("ThreadsList", "_length", 4, 0),
                ("ThreadsList", "_threads", 16, 0),
                ("JavaThread", "_current_pending_monitor", 776, 0),
                ("JavaThread", "_current_waiting_monitor", 792, 0),
                ("JavaThread", "_stack_base", 592, 0),
                ("JavaThread", "_stack_size", 600, 0),
                ("OSThread", "_thread_id", 208, 0),
                ("ObjectMonitor", "_object", 8, 0),
                ("ObjectMonitor", "_owner", 64, 0),
                ("oopDesc", "_metadata._klass", 8, 0),
            ]);
            if owner_ids {
                rows.extend([
                    ("Thread", "_osthread", 1016, 0),
                    ("JavaThread", "_monitor_owner_id", 1312, 0),
                    ("JavaThread", "_lock_stack", 2000, 0),
                    ("LockStack", "_top", 0, 0),
                    ("LockStack", "_base[0]", 16, 0),
                    ("CompressedKlassPointers", "_base", 0, NARROW_BASE_AT),
                    ("CompressedKlassPointers", "_shift", 0, NARROW_SHIFT_AT),
                ]);
            } else {
                rows.extend([
                    ("JavaThread", "_osthread", 560, 0),
                    ("CompressedKlassPointers", "_narrow_klass._base", 0, NARROW_BASE_AT),
                    ("CompressedKlassPointers", "_narrow_klass._shift", 0, NARROW_SHIFT_AT),
                ]);
            }
        }
    }

    /// A Java thread at `at` with tid `tid`, its stack just below `at`.
    fn thread(m: &mut Bytes, at: u64, tid: u32, osthread_off: u64) {
        let os = at + 0x3000;
        m.put_word(at + osthread_off, os);
        m.put(os + 208, &tid.to_le_bytes());
        m.put_word(at + 592, at - 0x1000);
        m.put_word(at + 600, 0x1_0000);
    }

    /// An object of class `class` at `oop` with a compressed class pointer
    /// (base 0x40_0000, shift 3), and a monitor at `monitor` locking it.
    fn locked(m: &mut Bytes, monitor: u64, oop: u64, class: &str) {
        m.put_word(NARROW_BASE_AT, 0x40_0000);
        m.put(NARROW_SHIFT_AT, &3u32.to_le_bytes());
        let klass = 0x40_0000 + 0x800 * (class.len() as u64);
        m.put(oop + 8, &(((klass - 0x40_0000) >> 3) as u32).to_le_bytes());
        let name = symbol(m, klass + 0x100, class);
        m.put_word(klass + 24, name);
        m.put_word(monitor + 8, monitor + 0x100);
        m.put_word(monitor + 0x100, oop);
    }

    fn list(m: &mut Bytes, threads: &[u64]) {
        m.put_word(LIST_AT, 0xd_0000);
        m.put(0xd_0000 + 4, &(threads.len() as u32).to_le_bytes());
        m.put_word(0xd_0000 + 16, 0xd_1000);
        for (i, t) in threads.iter().enumerate() {
            m.put_word(0xd_1000 + 8 * i as u64, *t);
        }
    }

    #[test]
    fn jdk17_owners_are_thread_pointers_or_stack_locks_on_their_stacks() {
        let mut m = Bytes::default();
        let vars = tables_with(&mut m, rows(false));
        let l = layout_of(&m, &vars).unwrap();
        let t = thread_layout_of(&m, &vars).unwrap();
        let (a, b, c) = (0x100_0000u64, 0x200_0000u64, 0x300_0000u64);
        for (at, tid) in [(a, 11), (b, 12), (c, 13)] {
            thread(&mut m, at, tid, 560);
        }
        list(&mut m, &[a, b, c]);
        // a enters a monitor that b owns; c waits in Object.wait on another,
        // stack-locked by a (its BasicLock on a's stack).
        let (m1, m2) = (0x50_0000u64, 0x60_0000u64);
        locked(&mut m, m1, 0x7_0000_0000, "java/lang/Object");
        locked(&mut m, m2, 0x7_0000_1000, "app/Queue$Lock");
        m.put_word(a + 776, m1);
        m.put_word(m1 + 64, b);
        m.put_word(c + 792, m2);
        m.put_word(m2 + 64, a - 0x2000);
        let waits = monitor_waits(&m, &t, &l);
        assert_eq!(waits.len(), 2, "{waits:?}");
        let entering = &waits[&11];
        assert_eq!(
            *entering,
            MonitorWait {
                monitor: m1,
                thread: a,
                object: Some(0x7_0000_0000),
                class: Some("java.lang.Object".into()),
                owner: Some(12),
                entering: true,
            }
        );
        assert_eq!(entering.name(), "<0x0000000700000000> (a java.lang.Object)");
        // Object.wait waits for a notify: no owner is named.
        assert_eq!((waits[&13].owner, waits[&13].entering), (None, false));
        assert_eq!(waits[&13].class.as_deref(), Some("app.Queue$Lock"));
        // Stack-locked: the owner is the thread whose stack holds the lock.
        m.put_word(b + 776, m2);
        assert_eq!(monitor_waits(&m, &t, &l)[&12].owner, Some(11));
        // An owner that is no thread, and an unreadable object.
        m.put_word(m1 + 64, 0xdead_0000);
        m.put_word(m1 + 0x100, 0);
        let w = &monitor_waits(&m, &t, &l)[&11];
        assert_eq!((w.owner, w.object, w.name()), (None, None, "<0x0000000000500000>".into()));
    }

    #[test]
    fn jdk24_owners_are_owner_ids_or_the_lock_stack_holding_the_object() {
        let mut m = Bytes::default();
        let vars = tables_with(&mut m, rows(true));
        let l = layout_of(&m, &vars).unwrap();
        let t = thread_layout_of(&m, &vars).unwrap();
        let (a, b) = (0x100_0000u64, 0x200_0000u64);
        thread(&mut m, a, 21, 1016);
        thread(&mut m, b, 22, 1016);
        m.put_word(a + 1312, 5);
        m.put_word(b + 1312, 6);
        list(&mut m, &[a, b]);
        let (monitor, oop) = (0x50_0000u64, 0x7_0000_0000u64);
        locked(&mut m, monitor, oop, "Turns");
        m.put_word(a + 776, monitor);
        m.put_word(monitor + 64, 6);
        assert_eq!(monitor_waits(&m, &t, &l)[&21].owner, Some(22));
        // Anonymous: b's lock stack (two entries in use) holds the object.
        m.put_word(monitor + 64, 1);
        m.put(b + 2000, &(2000u32 + 16 + 16).to_le_bytes());
        m.put_word(b + 2000 + 16, 0x7_0000_0100);
        m.put_word(b + 2000 + 24, oop);
        m.put(a + 2000, &(2000u32 + 16).to_le_bytes());
        let w = &monitor_waits(&m, &t, &l)[&21];
        assert_eq!((w.owner, w.class.as_deref()), (Some(22), Some("Turns")));
        // Past the top of the stack does not count.
        m.put(b + 2000, &(2000u32 + 16 + 8).to_le_bytes());
        assert_eq!(monitor_waits(&m, &t, &l)[&21].owner, None);
    }

    #[test]
    fn a_jvm_without_the_thread_fields_says_which() {
        let mut m = Bytes::default();
        let vars = tables(&mut m);
        let e = thread_layout_of(&m, &vars).unwrap_err().to_string();
        assert!(e.contains("ThreadsSMRSupport::_java_thread_list"), "{e}");
    }
}

#[test]
fn an_internal_monitor_is_the_global_lock_whose_condition_variable_holds_the_word() {
    use crate::stacks::hotspot::lock_at;
    let locks = vec![(0x1000, "Heap_lock".to_string()), (0x1080, "VMOperation_lock".to_string())];
    assert_eq!(lock_at(&locks, 0x1030), Some("Heap_lock"));
    // The nearest lock below, not the first within reach.
    assert_eq!(lock_at(&locks, 0x10b8), Some("VMOperation_lock"));
    assert_eq!(lock_at(&locks, 0x1080), Some("VMOperation_lock"));
    // Past a lock's span, or below every lock, no name is guessed.
    assert_eq!(lock_at(&locks, 0x1100), None);
    assert_eq!(lock_at(&locks, 0xfff), None);
    assert_eq!(lock_at(&[], 0x1000), None);
}

/// JDK 17's offsets for `debug`, as its vmStructs give them.
fn jdk17_debug() -> debug::DebugLayout {
    debug::DebugLayout {
        home: debug::ScopeHome::InBlob(debug::InBlob {
            code_begin: 32,
            scopes_data: 120,
            pcs: 268,
            dependencies: 272,
            metadata: 260,
        }),
        excluded: 0,
        pc_desc_size: 16,
        pc_offset: 0,
        scope_decode_offset: 4,
        const_size: 48,
        const_flags: 28,
        const_code_size: 32,
        const_method_size: 24,
        cp_source_file: 54,
    }
}

/// JDK 25's offsets of its scopes, as Temurin 25's vmStructs give them.
const JDK25_HOME: debug::ScopeHome = debug::ScopeHome::Apart(debug::Apart {
    code_offset: 36,
    immutable: 96,
    immutable_size: 160,
    pcs: 196,
    scopes_data: 200,
    mutable: 16,
    mutable_size: 48,
    relocation_size: 28,
});

/// An nmethod at `nm`, its code at `code`, laid out as `home` says, with
/// `metadata` and the scopes data `scopes`, and three PcDescs: the sentinel,
/// one at 0x40 naming the scope at 4, one at 0x80 with none. Returns where
/// its scopes data begins.
fn nmethod(
    m: &mut Bytes,
    home: &debug::ScopeHome,
    (nm, code): (u64, u64),
    metadata: &[u64],
    scopes: &[u8],
) -> u64 {
    let (pcs, data, meta) = match home {
        debug::ScopeHome::InBlob(b) => {
            m.put_word(nm + b.code_begin, code);
            m.put(nm + b.metadata, &0x200u32.to_le_bytes());
            m.put_word(nm + b.scopes_data, nm + 0x300);
            m.put(nm + b.pcs, &0x400u32.to_le_bytes());
            m.put(nm + b.dependencies, &(0x400u32 + 3 * 16).to_le_bytes());
            (nm + 0x400, nm + 0x300, nm + 0x200)
        }
        debug::ScopeHome::Apart(a) => {
            // Both data apart from the nmethod, as on the C heap.
            let (imm, muts) = (0xa_0000u64, 0xb_0000u64);
            m.put(nm + a.code_offset, &((code - nm) as u32).to_le_bytes());
            m.put_word(nm + a.immutable, imm);
            m.put(nm + a.immutable_size, &0x200u32.to_le_bytes());
            m.put(nm + a.pcs, &0x100u32.to_le_bytes());
            m.put(nm + a.scopes_data, &0x130u32.to_le_bytes());
            m.put_word(nm + a.mutable, muts);
            m.put(nm + a.relocation_size, &0x20u32.to_le_bytes());
            m.put(nm + a.mutable_size, &(0x20 + 8 * metadata.len() as u32).to_le_bytes());
            (imm + 0x100, imm + 0x130, muts + 0x20)
        }
        debug::ScopeHome::Unknown => unreachable!(),
    };
    for (i, &md) in metadata.iter().enumerate() {
        m.put_word(meta + 8 * i as u64, md);
    }
    m.put(data, scopes);
    for (i, (pc, scope)) in [(-1i32, 0u32), (0x40, 4), (0x80, 0)].iter().enumerate() {
        let at = pcs + 16 * i as u64;
        m.put(at, &[0; 16]);
        m.put(at, &pc.to_le_bytes());
        m.put(at + 4, &scope.to_le_bytes());
    }
    data
}

/// Gives the method at `at` (see [`method`]) the source file Turns.java and
/// ten bytes of code whose line table says: bci 0 is line 12, bci 4 line 13.
fn with_lines(m: &mut Bytes, at: u64) {
    let (cm, cp) = (at + 0x100, at + 0x200);
    m.put(cp + 54, &5u16.to_le_bytes());
    let file = symbol(m, at + 0x700, "Turns.java");
    m.put_word(cp + 72 + 8 * 5, file);
    m.put(cm + 28, &1u16.to_le_bytes());
    m.put(cm + 32, &10u16.to_le_bytes());
    m.put(cm + 24, &16u32.to_le_bytes());
    // (0, 12) by the escape, as a delta of 12 lines needs; (4, 13) in a byte.
    m.put(cm + 48 + 10, &[0xff, 0, 24, 4 << 3 | 1, 0]);
}

#[test]
fn a_call_in_compiled_code_names_the_methods_inlined_there_with_lines() {
    // Where JDK 17 keeps the scopes, and where JDK 25 does.
    for home in [jdk17_debug().home, JDK25_HOME] {
        let mut m = Bytes::default();
        let vars = tables(&mut m);
        let l = layout_of(&m, &vars).unwrap();
        assert_eq!(l.debug, None, "a table without PcDesc describes no scopes");
        let d = debug::DebugLayout { home, ..jdk17_debug() };
        let inner = method(&mut m, 0x5_0000, "Turns", "sleepHoldingTheLock");
        let outer = method(&mut m, 0x6_0000, "Turns", "handle");
        with_lines(&mut m, inner);
        with_lines(&mut m, outer);
        let (nm, code) = (0x8_0000u64, 0x8_1000u64);
        // Scopes: at 1 the compiled method at bci 4 (stored plus one); at 4
        // the method inlined into it, at bci 0, whose sender is the scope at 1.
        let data = nmethod(&mut m, &home, (nm, code), &[outer, inner], &[0, 0, 1, 5, 1, 2, 1]);
        m.put_word(nm + l.compiled_method, outer);
        let scopes = debug::scopes_at(&m, &l, &d, nm, code + 0x40);
        assert_eq!(scopes, Some(vec![(inner, 0), (outer, 4)]), "{home:?}");
        let frames = debug::frames_at(&m, &l, &d, nm, code + 0x40).unwrap();
        assert_eq!(
            frames,
            ["Turns.sleepHoldingTheLock (Turns.java:12)", "Turns.handle (Turns.java:13)"]
        );
        // No PcDesc at that return address, or one without a scope: nothing.
        assert_eq!(debug::scopes_at(&m, &l, &d, nm, code + 0x50), None);
        assert_eq!(debug::scopes_at(&m, &l, &d, nm, code + 0x80), None);
        assert_eq!(debug::scopes_at(&m, &l, &d, nm, code - 8), None);
        // Scopes that do not end in the nmethod's own method were read by a
        // wrong layout: nothing, not a guess.
        m.put_word(nm + l.compiled_method, inner);
        assert_eq!(debug::scopes_at(&m, &l, &d, nm, code + 0x40), None, "{home:?}");
        m.put_word(nm + l.compiled_method, outer);
        // A scope naming metadata past its end: nothing.
        m.put(data + 5, &[9]);
        assert_eq!(debug::scopes_at(&m, &l, &d, nm, code + 0x40), None);
    }
    // Between two entries of the line table, the line of the one before.
    let mut m = Bytes::default();
    let vars = tables(&mut m);
    let l = layout_of(&m, &vars).unwrap();
    let d = jdk17_debug();
    let outer = method(&mut m, 0x6_0000, "Turns", "handle");
    with_lines(&mut m, outer);
    assert_eq!(debug::line_of(&m, &l, &d, outer, 2), Some(12));
    assert_eq!(debug::line_of(&m, &l, &d, outer, 9), Some(13));
    assert_eq!(debug::line_of(&m, &l, &d, outer, -1), Some(12), "the method's entry");
    // A method without a line table: its file alone.
    m.put(0x6_0000 + 0x100 + 28, &0u16.to_le_bytes());
    assert_eq!(
        debug::placed_name(&m, &l, &d, outer, &[4]).as_deref(),
        Some("Turns.handle (Turns.java)")
    );
}

#[test]
fn the_debug_layout_takes_lines_and_scopes_where_described() {
    let d = jdk17_debug();
    let jdk17 = |ty: &str, f: &str| match (ty, f) {
        ("CodeBlob", "_code_begin") => Some(32),
        ("CompiledMethod", "_scopes_data_begin") => Some(120),
        ("nmethod", "_scopes_pcs_offset") => Some(268),
        ("nmethod", "_dependencies_offset") => Some(272),
        ("nmethod", "_metadata_offset") => Some(260),
        ("PcDesc", "_pc_offset") => Some(0),
        ("PcDesc", "_scope_decode_offset") => Some(4),
        ("ConstMethod", "_code_size") => Some(32),
        ("ConstMethod", "_constMethod_size") => Some(24),
        ("ConstantPool", "_source_file_name_index") => Some(54),
        ("ConstMethod", "_flags") => Some(28),
        _ => None,
    };
    let size = |ty: &str| match ty {
        "PcDesc" => Some(16),
        "ConstMethod" => Some(48),
        _ => None,
    };
    assert_eq!(debug::DebugLayout::of(jdk17, size), Some(d));
    // JDK 25: no CompiledMethod, the scopes apart from the nmethod; flags by
    // their new name, and compressed ints' digits stored plus one.
    let jdk25 = |ty: &str, f: &str| match (ty, f) {
        ("CompiledMethod", _) | ("CodeBlob", "_code_begin") => None,
        ("nmethod", "_dependencies_offset" | "_metadata_offset") => None,
        ("ConstMethod", "_flags") => None,
        ("ConstMethod", "_flags._flags") => Some(28),
        ("CodeBlob", "_code_offset") => Some(36),
        ("nmethod", "_immutable_data") => Some(96),
        ("nmethod", "_immutable_data_size") => Some(160),
        ("nmethod", "_scopes_pcs_offset") => Some(196),
        ("nmethod", "_scopes_data_offset") => Some(200),
        ("CodeBlob", "_mutable_data") => Some(16),
        ("CodeBlob", "_mutable_data_size") => Some(48),
        ("CodeBlob", "_relocation_size") => Some(28),
        _ => jdk17(ty, f),
    };
    let later = debug::DebugLayout::of(jdk25, size).unwrap();
    assert_eq!(later.home, JDK25_HOME);
    assert!(later.excluded == 1 && later.const_flags == 28, "{later:?}");
    // JDK 23 and 24: the scopes apart, but the metadata where the tables do
    // not say: lines, and no scopes read.
    let jdk23 = |ty: &str, f: &str| match (ty, f) {
        ("CodeBlob", "_mutable_data" | "_mutable_data_size" | "_relocation_size") => None,
        _ => jdk25(ty, f),
    };
    let between = debug::DebugLayout::of(jdk23, size).unwrap();
    assert!(!between.scopes() && between.const_code_size == 32, "{between:?}");
    let mut m = Bytes::default();
    let vars = tables(&mut m);
    let l = layout_of(&m, &vars).unwrap();
    assert_eq!(debug::scopes_at(&m, &l, &between, 0x1000, 0x2000), None);
    // Without a line field or ConstMethod's size, nothing.
    let no_lines = |ty: &str, f: &str| if f == "_code_size" { None } else { jdk17(ty, f) };
    assert_eq!(debug::DebugLayout::of(no_lines, size), None);
    assert_eq!(debug::DebugLayout::of(jdk17, |_| None), None);
    // A PcDesc whose ints lie past its size, or a size no JDK has: lines,
    // and no scopes read by it.
    let past = |ty: &str, f: &str| match (ty, f) {
        ("PcDesc", "_scope_decode_offset") => Some(14),
        _ => jdk17(ty, f),
    };
    let lines_only = debug::DebugLayout::of(past, size).unwrap();
    assert!(!lines_only.scopes() && lines_only.const_code_size == 32, "{lines_only:?}");
    let huge = |ty: &str| if ty == "PcDesc" { Some(1 << 40) } else { size(ty) };
    assert!(!debug::DebugLayout::of(jdk17, huge).unwrap().scopes());
}

#[test]
fn an_interpreted_frame_is_placed_at_the_line_of_its_bytecode() {
    use topwaits_common::jit::jvm_word;
    let mut m = Bytes::default();
    let vars = tables(&mut m);
    let l = Layout { debug: Some(jdk17_debug()), ..layout_of(&m, &vars).unwrap() };
    let at = method(&mut m, 0x6_0000, "Turns", "handle");
    with_lines(&mut m, at);
    // Its ten bytes of code follow the 48 of its ConstMethod.
    let code = 0x6_0000 + 0x100 + 48;
    let name = |bcp: u64| names::interpreted_name(&m, &l, jvm_word(at, bcp));
    assert_eq!(name(code + 4).as_deref(), Some("Turns.handle (Turns.java:13)"));
    assert_eq!(name(code + 1).as_deref(), Some("Turns.handle (Turns.java:12)"));
    // No bytecode pointer (a native method's frame), or one past the code.
    assert_eq!(name(0).as_deref(), Some("Turns.handle"));
    assert_eq!(name(code + 10).as_deref(), Some("Turns.handle"));
    // A method of 5,000 bytes of code: the low bits leave two indexes apart
    // by 4 KiB, and its line is said where both have the same.
    let long = method(&mut m, 0x7_0000, "Turns", "parse");
    with_lines(&mut m, long);
    let cm = long + 0x100;
    m.put(cm + 32, &5000u16.to_le_bytes());
    // (0, 12); 132 steps of 31 indexes on line 12 (to 4,092); then (4,100, 19).
    let mut table = vec![0xff, 0, 24];
    table.extend([31 << 3; 132]);
    table.extend([8 << 3 | 7, 0]);
    m.put(cm + 48 + 5000, &table);
    m.put(cm + 24, &((48 + 5000 + table.len() as u32) / 8 + 1).to_le_bytes());
    let code = cm + 48;
    let name = |bcp: u64| names::interpreted_name(&m, &l, jvm_word(long, bcp));
    assert_eq!(name(code + 2).as_deref(), Some("Turns.parse (Turns.java:12)"), "2 or 4,098");
    assert_eq!(name(code + 4000).as_deref(), Some("Turns.parse (Turns.java:12)"), "4,000 only");
    assert_eq!(name(code + 4100).as_deref(), Some("Turns.parse (Turns.java)"), "4 or 4,100");
    // Without the layout of lines, the method alone.
    let bare = Layout { debug: None, ..l };
    assert_eq!(
        names::interpreted_name(&m, &bare, jvm_word(at, code + 4)).as_deref(),
        Some("Turns.handle")
    );
}
