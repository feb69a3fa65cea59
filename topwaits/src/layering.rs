//! A check that topwaits' modules import one way, from the runners down to the
//! plain data and the readers of `/proc`, so that no import circle comes back.
//! Run as a unit test; it reads the sources, so it needs no privilege.

/// The modules from top to bottom, as paths under `src`: each may use only the
/// ones after it. A folder's own modules are ranked within it, its `mod.rs`
/// after them; a file belongs to the longest entry its path begins with. A new
/// module must be placed here.
const ORDER: &[&str] = &[
    "run",
    "cli",
    "report",
    "analysis/blocked",
    "analysis/why",
    "analysis/locks",
    "analysis/open",
    "analysis/snapshot",
    "analysis/waitfor",
    "analysis/rtapp",
    "analysis/deps",
    "analysis/longwaits",
    "analysis/timeshare",
    "analysis/what",
    "analysis/reduce",
    "analysis/diff",
    "analysis/goroutines",
    "analysis/metrics",
    "analysis/increments",
    "analysis",
    "bpf",
    "stacks/objects",
    "stacks/symbolize",
    "stacks/interrupts",
    "stacks/cfi",
    "stacks/jit",
    "stacks/v8",
    "stacks/hotspot",
    "stacks/python",
    "stacks/golang",
    "stacks/frame_scan",
    "stacks",
    "model/recording",
    "model/profile",
    "model",
    "model/label",
    "settings",
    "sys",
    "util/outfile",
    "util/stderr",
    "util/clock",
    "util/fasthash",
    "util/error",
    "util/http",
    "util/text",
    "util/alone",
    "util",
];

/// Only the runners may name the command line's parser: everything else reads
/// the plain settings it was parsed into.
const FRONT_DOOR: &[&str] = &["run", "cli"];

/// Files outside the order: the crate root, and this test.
const OUTSIDE: &[&str] = &["lib", "main", "layering"];

/// The entry of [`ORDER`] that a module path (`analysis/why/group`, or a use
/// `analysis/why/Cause`) belongs to: the longest that it begins with.
fn rank(path: &str) -> Option<usize> {
    let within = |entry: &str| path == entry || path.starts_with(&format!("{entry}/"));
    ORDER.iter().enumerate().filter(|(_, e)| within(e)).max_by_key(|(_, e)| e.len()).map(|(i, _)| i)
}

/// Every `.rs` file under `src`, as its module path (`analysis/why/group`,
/// `model` for `model/mod.rs`) and its file.
fn modules(src: &std::path::Path) -> Vec<(String, std::path::PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p.strip_prefix(src).unwrap().with_extension("");
                let rel = rel.to_string_lossy().into_owned();
                let module = rel.strip_suffix("/mod").unwrap_or(&rel).to_string();
                out.push((module, p));
            }
        }
    }
    out
}

/// The paths of one `use` tree after `crate::`: `model::Report` gives
/// `model/Report`, `{cli, sys::procfs}` gives `cli` and `sys/procfs`, and
/// `analysis::{why, what::Label}` gives `analysis/why` and `analysis/what/Label`.
fn tree(text: &str, prefix: &str, found: &mut Vec<String>) {
    let mut depth = 0;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    for item in items {
        let item = item.trim();
        if let Some(inner) = item.strip_prefix('{') {
            tree(&inner[..inner.rfind('}').unwrap_or(inner.len())], prefix, found);
            continue;
        }
        let (head, group) = match item.find("::{") {
            Some(i) => (&item[..i], Some(&item[i + 3..item.rfind('}').unwrap_or(item.len())])),
            None => (item, None),
        };
        let path: Vec<&str> = head
            .split("::")
            .map(|s| s.split_whitespace().next().unwrap_or(""))
            .take_while(|s| !s.is_empty())
            .collect();
        let full =
            if prefix.is_empty() { path.join("/") } else { format!("{prefix}/{}", path.join("/")) };
        match group {
            Some(g) => tree(g, &full, found),
            None if !path.is_empty() => found.push(full),
            None => {}
        }
    }
}

/// The module paths that `text` (code before its tests) names through
/// `crate::`, alone or in a `use crate::{...}` group.
fn uses(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        // One path: up to where it stops being a path, a brace group whole.
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' => depth -= 1,
                c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        tree(&rest[..end], "", &mut found);
    }
    found
}

/// Every use of a module above the user: (user, used) pairs.
fn back_edges(src: &std::path::Path) -> Vec<(String, String)> {
    let mut back = Vec::new();
    for (module, file) in modules(src) {
        if OUTSIDE.contains(&module.as_str()) {
            continue;
        }
        let mine = rank(&module)
            .unwrap_or_else(|| panic!("module {module} is not in layering::ORDER: place it there"));
        for used in uses(&std::fs::read_to_string(&file).unwrap()) {
            if let Some(theirs) = rank(&used) {
                if theirs < mine {
                    back.push((
                        format!("{module} ({})", file.display()),
                        ORDER[theirs].to_string(),
                    ));
                }
            }
        }
    }
    back
}

#[test]
fn uses_are_found_alone_and_in_groups_but_not_in_tests() {
    let text = "use crate::model::Report;\nuse crate::{cli, sys::procfs};\nuse crate::analysis::{why, what::{Label, x}};\nfn f() { crate::util::stderr::say!(); }\n#[cfg(test)]\nmod tests { use crate::run; }";
    assert_eq!(
        uses(text),
        [
            "model/Report",
            "cli",
            "sys/procfs",
            "analysis/why",
            "analysis/what/Label",
            "analysis/what/x",
            "util/stderr/say"
        ]
    );
    assert_eq!(rank("analysis/what/Label").map(|i| ORDER[i]), Some("analysis/what"));
    assert_eq!(rank("model/Report").map(|i| ORDER[i]), Some("model"));
    assert_eq!(rank("model/label/WaitsOn").map(|i| ORDER[i]), Some("model/label"));
    assert_eq!(rank("analysisx"), None, "a prefix only at a path's segments");
}

#[test]
fn modules_import_one_way() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let back = back_edges(&src);
    assert!(back.is_empty(), "imports against the layer order (each may use only the modules after it in layering::ORDER): {back:#?}");
}

#[test]
fn only_the_runners_name_the_command_line() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let inside = |m: &str| FRONT_DOOR.iter().any(|f| m == *f || m.starts_with(&format!("{f}/")));
    let named: Vec<String> = modules(&src)
        .into_iter()
        .filter(|(m, _)| !inside(m) && m != "lib" && m != "layering")
        .filter(|(_, f)| std::fs::read_to_string(f).unwrap().contains("crate::cli"))
        .map(|(m, _)| m)
        .collect();
    assert!(named.is_empty(), "modules outside cli/ and run/ that name crate::cli: {named:?}");
    assert_eq!(ORDER[..2], ["run", "cli"], "the front door sits on top");
}

#[test]
fn a_back_edge_is_caught_between_folders_and_within_one() {
    // A scratch tree: `model` using `run`, which sits above it, and a label
    // using the model it sits below.
    let dir = std::env::temp_dir().join(format!("tw-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    std::fs::create_dir_all(dir.join("model")).unwrap();
    std::fs::write(dir.join("run/mod.rs"), "use crate::model::Report;\n").unwrap();
    std::fs::write(
        dir.join("model/mod.rs"),
        "use crate::run::trace;\nuse crate::model::label::WaitsOn;\n",
    )
    .unwrap();
    std::fs::write(dir.join("model/label.rs"), "use crate::{model::Record};\n").unwrap();
    let mut back = back_edges(&dir);
    back.sort();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(back.len(), 2, "{back:?}");
    assert!(back[0].0.starts_with("model ") && back[0].1 == "run", "{back:?}");
    assert!(back[1].0.starts_with("model/label ") && back[1].1 == "model", "{back:?}");
}
