//! A check that topwaits' modules import one way, from the runners down to the
//! plain data and the readers of `/proc`, so that no import circle comes back.
//! Run as a unit test; it reads the sources, so it needs no privilege.

/// The top-level modules from top to bottom: each may use only the ones after
/// it. A new module must be placed here.
const ORDER: &[&str] = &[
    "run",
    "report",
    "blocked",
    "why",
    "locks",
    "open",
    "snapshot",
    "waitfor",
    "objects",
    "rtapp",
    "deps",
    "recording",
    "longwaits",
    "timeshare",
    "what",
    "reduce",
    "symbolize",
    "interrupts",
    "bpf",
    "cfi",
    "python",
    "profile",
    "model",
    "label",
    "diff",
    "cli",
    "sys",
    "unwind",
    "clock",
    "fasthash",
    "error",
    "outfile",
    "stderr",
];

/// Modules outside the order: the crate root, and this test.
const OUTSIDE: &[&str] = &["lib", "main", "layering"];

/// The source files of each top-level module of `src`.
fn modules(src: &std::path::Path) -> Vec<(String, Vec<std::path::PathBuf>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            let mut files = Vec::new();
            let mut stack = vec![path.clone()];
            while let Some(dir) = stack.pop() {
                for e in std::fs::read_dir(dir).unwrap() {
                    let p = e.unwrap().path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") {
                        files.push(p);
                    }
                }
            }
            out.push((name, files));
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push((name, vec![path]));
        }
    }
    out
}

/// The top-level modules that `text` (code before its tests) names through
/// `crate::`, alone or in a `use crate::{...}` group.
fn uses(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                found.push(name);
            }
        } else {
            found.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    found
}

/// Every use of a module above the user: (user, used) pairs.
fn back_edges(src: &std::path::Path) -> Vec<(String, String)> {
    let rank = |m: &str| ORDER.iter().position(|o| *o == m);
    let mut back = Vec::new();
    for (module, files) in modules(src) {
        if OUTSIDE.contains(&module.as_str()) {
            continue;
        }
        let mine = rank(&module).unwrap_or_else(|| panic!("module {module} is not in layering::ORDER: place it there"));
        for f in files {
            for used in uses(&std::fs::read_to_string(&f).unwrap()) {
                if let Some(theirs) = rank(&used) {
                    if theirs < mine {
                        back.push((format!("{} ({})", module, f.display()), used));
                    }
                }
            }
        }
    }
    back
}

#[test]
fn uses_are_found_alone_and_in_groups_but_not_in_tests() {
    let text = "use crate::model::Report;\nuse crate::{cli, sys::procfs};\nfn f() { crate::stderr::say!(); }\n#[cfg(test)]\nmod tests { use crate::run; }";
    assert_eq!(uses(text), ["model", "cli", "sys", "stderr"]);
}

#[test]
fn modules_import_one_way() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let back = back_edges(&src);
    assert!(back.is_empty(), "imports against the layer order (each may use only the modules after it in layering::ORDER): {back:#?}");
}

#[test]
fn a_back_edge_is_caught() {
    // A scratch tree: `model` using `run`, which sits above it.
    let dir = std::env::temp_dir().join(format!("tw-layering-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("run")).unwrap();
    std::fs::write(dir.join("run/mod.rs"), "use crate::model::Report;\n").unwrap();
    std::fs::write(dir.join("model.rs"), "use crate::run::trace;\n").unwrap();
    let back = back_edges(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(back.len(), 1, "{back:?}");
    assert!(back[0].0.starts_with("model") && back[0].1 == "run", "{back:?}");
}
