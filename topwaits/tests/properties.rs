//! Property tests: no input panics the option parser or any parser of kernel text or
//! bytes (BTF, kallsyms, tracefs formats, /proc files). They need no BPF.

use clap::Parser;
use proptest::prelude::*;
use topwaits::cli::{Args, Command, Config, ThreadsConfig};
use topwaits::sys::{btf, caps, kallsyms, procfs, tracefs};

/// Words the option parser knows, mixed with noise.
fn arg() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-p".to_string()), Just("-t".to_string()), Just("-u".to_string()), Just("-k".to_string()),
        Just("-U".to_string()), Just("-K".to_string()), Just("-m".to_string()), Just("-M".to_string()),
        Just("--state".to_string()), Just("-f".to_string()), Just("-d".to_string()), Just("--json".to_string()),
        Just("-w".to_string()), Just("--chain".to_string()), Just("--wakeups".to_string()), Just("-n".to_string()),
        Just("--value".to_string()), Just("--attach".to_string()), Just("--stack-storage-size".to_string()),
        Just("--max-entries".to_string()), Just("threads".to_string()), Just("--rt-app".to_string()),
        Just("--rt-app-duration".to_string()), Just("0".to_string()), Just("1".to_string()), Just("-1".to_string()),
        Just("1,2,3".to_string()), Just("0x2".to_string()), Just("18446744073709551616".to_string()),
        Just("nan".to_string()), Just("inf".to_string()), Just("1e9".to_string()), Just("raw_tp".to_string()),
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
                None => {
                    if let Ok(c) = Config::from_args(a) {
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
