//! Kernel tests of JavaScript frames: Debian's node runs a script whose main
//! thread blocks in named functions; run without flags and with
//! `--perf-basic-prof`, its waits have whole stacks that name them, in order,
//! in the traced stacks and in `blocked`.

mod common;

use common::*;
use serde_json::Value;

/// Whether node is here (setup installs it; elsewhere the test skips).
fn node_here(test: &str) -> bool {
    let missing = (!installed("node")).then(|| "node is not installed (cargo xtask setup)".into());
    present(test, "node", missing)
}

/// Starts node on the test script with `flags`, past its first requests, as
/// a server under load is.
fn start(flags: &[&str]) -> Script {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs/blocks.js");
    let node = start_script("node", flags, script);
    std::thread::sleep(std::time::Duration::from_millis(300));
    node
}

/// Whether `names` (leaf first) holds each of `wanted`, in that order.
fn in_order(names: &[String], wanted: &[&str]) -> bool {
    let mut at = 0;
    wanted.iter().all(|w| match names[at..].iter().position(|n| n == w) {
        Some(i) => {
            at += i + 1;
            true
        }
        None => false,
    })
}

/// The script's functions, leaf first, as topwaits names them.
const FUNCTIONS: [&str; 3] =
    ["waitForChild (blocks.js)", "handleRequest (blocks.js)", "serve (blocks.js)"];

#[test]
fn node_functions_are_named_in_whole_stacks_with_and_without_a_perf_map() {
    require_bpf!();
    if !node_here(module_path!()) {
        return;
    }
    for flags in [&[][..], &["--perf-basic-prof"]] {
        let node = start(flags);
        let pid = node.0.id().to_string();
        let doc = json(&run(&["--json", "-t", &pid, "2"]));
        drop(node);
        let (mut total, mut named) = (0u64, 0u64);
        for r in doc["records"].as_array().unwrap() {
            let names = stack_names(&r["user_stack"]);
            let ns = r["total_ns"].as_u64().unwrap();
            total += ns;
            let whole = !names.iter().any(|n| n.starts_with("[cut:") || n == "[unknown]")
                && names.last().is_some_and(|n| n == "_start");
            if whole && in_order(&names, &FUNCTIONS) {
                named += ns;
            }
        }
        assert!(total > 1_000_000_000, "{flags:?}: the main thread waited only {total} ns");
        eprintln!("{flags:?}: {named} of {total} ns in whole stacks naming the functions");
        assert!(
            named * 10 >= total * 9,
            "{flags:?}: only {named} of {total} ns in whole stacks naming the functions: {doc:#}"
        );
    }
}

#[test]
fn blocked_names_the_functions_a_node_thread_waits_in() {
    require_bpf!();
    if !node_here(module_path!()) {
        return;
    }
    let node = start(&[]);
    let pid = node.0.id();
    // A moment's view: the thread may be between two children, running, or
    // wake while its stack is read (said by a last frame `[cut:thread-ran]`).
    // Its stack, once listed otherwise, must be whole.
    let thread = (0..10)
        .find_map(|_| {
            let doc: Value = json(&run(&["blocked", "--json", "-t", &pid.to_string()]));
            let t = doc["threads"].as_array()?.iter().find(|t| {
                t["tid"].as_u64() == Some(pid as u64)
                    && t["user_stack"].as_array().is_some_and(|s| !s.is_empty())
                    && !stack_names(&t["user_stack"]).contains(&"[cut:thread-ran]".to_string())
            });
            t.cloned().or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(20));
                None
            })
        })
        .unwrap_or_else(|| panic!("the main thread was never listed as blocked"));
    drop(node);
    let names = stack_names(&thread["user_stack"]);
    assert!(in_order(&names, &FUNCTIONS), "{names:?}");
    assert!(!names.iter().any(|n| n.starts_with("[cut:")), "{names:?}");
}
