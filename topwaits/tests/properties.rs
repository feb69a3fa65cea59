//! Property tests: no input panics the option parser or any parser of kernel text or
//! bytes (BTF, kallsyms, tracefs formats, /proc files). They need no BPF.

use clap::Parser;
use proptest::prelude::*;
use topwaits::cli::{Args, Command};
use topwaits::settings::{BlockedConfig, Config, ThreadsConfig};
use topwaits::stacks::frame_scan::{Arch, Memory, Region, Walker};
use topwaits::sys::btf::FromBtf as _;
use topwaits::sys::{btf, caps, kallsyms, procfs, thread, tracefs};

/// Words the option parser knows, mixed with noise.
fn arg() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-p".to_string()),
        Just("-t".to_string()),
        Just("-u".to_string()),
        Just("-k".to_string()),
        Just("-U".to_string()),
        Just("-K".to_string()),
        Just("-m".to_string()),
        Just("-M".to_string()),
        Just("--state".to_string()),
        Just("-f".to_string()),
        Just("-d".to_string()),
        Just("--json".to_string()),
        Just("-w".to_string()),
        Just("--chain".to_string()),
        Just("--wakeups".to_string()),
        Just("-n".to_string()),
        Just("--value".to_string()),
        Just("--attach".to_string()),
        Just("--stack-storage-size".to_string()),
        Just("--max-entries".to_string()),
        Just("threads".to_string()),
        Just("--rt-app".to_string()),
        Just("--rt-app-duration".to_string()),
        Just("blocked".to_string()),
        Just("-S".to_string()),
        Just("--dot".to_string()),
        Just("record".to_string()),
        Just("report".to_string()),
        Just("why".to_string()),
        Just("--for".to_string()),
        Just("-o".to_string()),
        Just("--events-over".to_string()),
        Just("--perfetto".to_string()),
        Just("--pprof".to_string()),
        Just("--open-waits".to_string()),
        Just("no".to_string()),
        Just("0".to_string()),
        Just("1".to_string()),
        Just("-1".to_string()),
        Just("1,2,3".to_string()),
        Just("0x2".to_string()),
        Just("18446744073709551616".to_string()),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("1e9".to_string()),
        Just("raw_tp".to_string()),
        "[ -~]{0,12}",
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn option_parsing_never_panics(args in proptest::collection::vec(arg(), 0..8)) {
        let argv = std::iter::once("topwaits".to_string()).chain(args);
        if let Ok(a) = Args::try_parse_from(argv) {
            match a.command.clone() {
                Some(Command::Threads(t)) => { let _ = ThreadsConfig::from_args(t); }
                Some(Command::Blocked(b)) => { let _ = BlockedConfig::from_args(b); }
                Some(Command::Record(r)) => { let _ = Config::for_record(r); }
                Some(Command::Report(r)) => { let _ = topwaits::settings::ReportConfig::from_args(r); }
                Some(Command::Diff(d)) => { let _ = topwaits::settings::DiffConfig::from_args(d); }
                Some(Command::Serve(s)) => {
                    if let Ok(c) = topwaits::settings::ServeConfig::from_args(s) {
                        // Serving drains every step and prints nothing itself.
                        prop_assert!(c.trace.interval == Some(c.step) && !c.trace.print);
                    }
                }
                Some(Command::Why(w)) => {
                    if let Ok(topwaits::settings::WhyConfig::Trace(c)) = topwaits::settings::WhyConfig::from_args(w) {
                        // Every wait is an event, with its waker.
                        prop_assert!(c.waker && c.events_over_us == Some(1));
                    }
                }
                Some(Command::Locks(l)) => {
                    if let Ok(topwaits::settings::LocksConfig::Trace(c)) = topwaits::settings::LocksConfig::from_args(l) {
                        // Every wait is an event, with its waker and its label.
                        prop_assert!(c.waker && c.events_over_us == Some(1) && c.labels);
                    }
                }
                Some(Command::Generate { .. }) => {}
                None => {
                    if let Ok(c) = Config::from_args(a.trace) {
                        // A valid config has consistent bounds.
                        prop_assert!(c.min_us <= c.max_us);
                        let s = c.settings();
                        prop_assert!(s.chain >= 1 && s.chain <= topwaits_common::MAX_CHAIN as u32);
                    }
                }
            }
        }
    }

    #[test]
    fn btf_parsing_never_panics(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = btf::TaskOffsets::from_bytes(&data);
    }

    #[test]
    fn btf_with_a_valid_header_and_garbage_types_never_panics(types in proptest::collection::vec(any::<u8>(), 0..400), strings in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut data = vec![0x9f, 0xeb, 1, 0];
        for w in [24u32, 0, types.len() as u32, types.len() as u32, strings.len() as u32] {
            data.extend_from_slice(&w.to_le_bytes());
        }
        data.extend_from_slice(&types);
        data.extend_from_slice(&strings);
        let _ = btf::TaskOffsets::from_bytes(&data);
    }

    #[test]
    fn kallsyms_lookup_never_panics_and_never_picks_cold(text in "([0-9a-f]{1,16} [tTdDbB] [a-z_.0-9]{0,30}( \\[[a-z]+\\])?\n){0,20}") {
        if let Some(name) = kallsyms::find_function(text.as_bytes(), "finish_task_switch") {
            prop_assert!(name.starts_with("finish_task_switch"));
            prop_assert!(!name.split('.').any(|p| p == "cold"));
        }
    }

    #[test]
    fn proc_and_tracefs_parsers_never_panic(text in any::<String>()) {
        let _ = procfs::parse_maps(text.as_bytes());
        let _ = procfs::status_tgid(text.as_bytes());
        let _ = caps::effective_caps(text.as_bytes());
        let _ = tracefs::field_offset(text.as_bytes(), "op");
        let _ = kallsyms::find_function(text.as_bytes(), "finish_task_switch");
        let _ = procfs::parse_regions(text.as_bytes());
        let _ = thread::parse_stat(text.as_bytes());
        let _ = thread::parse_syscall(&text);
        let _ = thread::parse_exec_start(&text);
        let _ = thread::parse_kernel_stack(&text);
        let _ = thread::special_inode(&text);
        let _ = topwaits::analysis::blocked::classify::fd_access(&text);
    }

    /// Whatever the stack memory holds, a walk ends, and every frame after the pc is
    /// an address in an executable mapping that follows a call: never data.
    #[test]
    fn user_stack_walks_end_and_name_only_code(words in proptest::collection::vec(any::<u64>(), 0..64), picks in proptest::collection::vec(0usize..4, 0..64)) {
        struct Mem(Vec<u8>);
        impl Memory for Mem {
            fn read(&self, addr: u64, buf: &mut [u8]) -> usize {
                // Code at 0x1000..0x2000 (all call instructions), stack at 0x10000..0x11000.
                for (i, b) in buf.iter_mut().enumerate() {
                    let a = addr + i as u64;
                    *b = if (0x1000..0x2000).contains(&a) { 0xe8 } else if (0x10000..0x11000).contains(&a) { self.0[(a - 0x10000) as usize] } else { return i };
                }
                buf.len()
            }
        }
        let mut stack = vec![0u8; 0x1000];
        for (i, (w, p)) in words.iter().zip(picks.iter().chain(std::iter::repeat(&0))).enumerate() {
            // Mix code addresses, stack addresses and noise.
            let v = match p { 0 => 0x1000 + w % 0x1000, 1 => (0x10000 + w % 0x1000) & !7, 2 => 0, _ => *w };
            stack[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        let regions = [Region { start: 0x1000, end: 0x2000, exec: true }, Region { start: 0x10000, end: 0x11000, exec: false }];
        let mem = Mem(stack);
        let frames = Walker::new(&regions, &mem, Arch::X86_64).walk(0x1800, 0x10000);
        prop_assert!(frames.len() <= topwaits::stacks::frame_scan::MAX_FRAMES);
        prop_assert!(frames.iter().all(|&f| (0x1000..0x2000).contains(&f)), "{:x?}", frames);
    }

    #[test]
    fn maps_lines_round_trip(start in 0u64..1 << 47, len in 1u64..1 << 20, off in 0u64..1 << 32, name in "[a-z]{1,8}") {
        let line = format!("{:x}-{:x} r-xp {:x} fe:01 42 /usr/lib/{name}.so\n", start, start + len, off);
        let maps = procfs::parse_maps(line.as_bytes());
        prop_assert_eq!(maps.len(), 1);
        prop_assert_eq!(procfs::locate(&maps, start), Some((format!("{name}.so"), off)));
        prop_assert_eq!(procfs::locate(&maps, start + len), None);
    }
}
