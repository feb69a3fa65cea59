//! Checks of the eBPF crate's sources, run as unit tests: its shared modules import
//! one way (hooks above the accounting, the accounting above the task helpers and
//! maps), so that no import cycle comes back; and every name user space looks up
//! (`topwaits_common::names`) is a map, global or program of the crate, named by
//! its identifier and never by a second literal.

#[cfg(test)]
mod tests {
    /// The eBPF crate's shared modules from top to bottom: each may use only the
    /// ones after it. Hook files (one per tracepoint) sit above all of them.
    const ORDER: &[&str] = &[
        "goroutines",
        "switch",
        "events",
        "wake",
        "threads",
        "task",
        "what",
        "gostack",
        "kstack",
        "ustack",
        "kcache",
        "uwalk",
        "pyframes",
        "uread",
        "stackref",
        "taskmap",
        "itertask",
        "maps",
    ];

    /// Whether `text` holds `form` as a whole name (`crate::task` is not in
    /// `crate::taskmap`).
    fn uses(text: &str, form: &str) -> bool {
        text.match_indices(form).any(|(i, _)| {
            !text[i + form.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        })
    }

    #[test]
    fn a_longer_name_is_not_a_use() {
        assert!(uses("use crate::task::Outgoing;", "crate::task"));
        assert!(uses("use crate::{task, maps};", "crate::{task"));
        assert!(!uses("use crate::taskmap::TaskStorage;", "crate::task"));
    }

    #[test]
    fn ebpf_modules_import_one_way() {
        let dir = crate::root().join("topwaits-ebpf/src");
        let mut checked = 0;
        for (i, module) in ORDER.iter().enumerate() {
            let text = std::fs::read_to_string(dir.join(format!("{module}.rs"))).unwrap();
            for above in &ORDER[..i] {
                for form in
                    [format!("crate::{above}"), format!("crate::{{{above}"), format!(" {above}::")]
                {
                    assert!(
                        !uses(&text, &form),
                        "{module}.rs uses {above}, which sits above it: keep imports one way"
                    );
                }
            }
            checked += 1;
        }
        assert_eq!(checked, ORDER.len());
    }

    /// `names`' constants: (constant, value).
    fn names() -> Vec<(String, String)> {
        let block =
            std::fs::read_to_string(crate::root().join("topwaits-common/src/names.rs")).unwrap();
        block
            .lines()
            .filter_map(|l| {
                let rest = l.trim().strip_prefix("pub const ")?;
                let (name, value) = rest.split_once(": &str = \"")?;
                Some((name.to_string(), value.trim_end_matches("\";").to_string()))
            })
            .collect()
    }

    #[test]
    fn every_name_user_space_uses_is_an_identifier_of_the_ebpf_crate() {
        let dir = crate::root().join("topwaits-ebpf/src");
        let text: String = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect::<Vec<_>>()
            .join("\n");
        assert!(
            !text.contains("map(name"),
            "a map named by a literal: name it by its identifier (#[map]), as names:: spells it"
        );
        let list = names();
        assert!(list.len() > 30, "names read: {list:?}");
        for (constant, value) in list {
            let found = if constant.starts_with("PROG_") {
                text.contains(&format!("fn {value}("))
            } else {
                text.contains(&format!("static {value}:"))
            };
            assert!(found, "names::{constant} is {value:?}, which the eBPF crate does not define");
        }
    }

    /// The module map of docs/DESIGN.md names every module of topwaits/src and
    /// every hook file of the eBPF crate, so it cannot fall behind the tree.
    #[test]
    fn the_design_documents_module_map_matches_the_tree() {
        let design = std::fs::read_to_string(crate::root().join("docs/DESIGN.md")).unwrap();
        let map = &design[design.find("## Module map").expect("a module map")..];
        let map = &map[..map.find("\n## ").unwrap_or(map.len())];
        let mut missing = Vec::new();
        for dir in [
            "topwaits/src",
            "topwaits/src/run",
            "topwaits/src/report",
            "topwaits/src/analysis",
            "topwaits/src/analysis/blocked",
            "topwaits/src/analysis/why",
            "topwaits/src/analysis/what",
            "topwaits/src/bpf",
            "topwaits/src/stacks",
            "topwaits/src/stacks/symbolize",
            "topwaits/src/stacks/cfi",
            "topwaits/src/stacks/python",
            "topwaits/src/model",
            "topwaits/src/cli",
            "topwaits/src/settings",
            "topwaits/src/sys",
            "topwaits/src/util",
        ] {
            for e in std::fs::read_dir(crate::root().join(dir)).unwrap() {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                let stem = name.trim_end_matches(".rs");
                if ["mod", "lib", "main", "layering"].contains(&stem) {
                    continue;
                }
                if !uses(map, stem) {
                    missing.push(format!("{dir}/{name}"));
                }
            }
        }
        for e in std::fs::read_dir(crate::root().join("topwaits-ebpf/src")).unwrap() {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let stem = name.trim_end_matches(".rs");
            if stem != "main" && !uses(map, stem) {
                missing.push(format!("topwaits-ebpf/src/{name}"));
            }
        }
        assert!(missing.is_empty(), "docs/DESIGN.md's module map does not name: {missing:?}");
    }
}
