//! `cargo xtask licenses`: the third-party licence list of what the binary links
//! (and the eBPF object embeds), generated from `cargo metadata` and the crates' own
//! licence files; `--check` fails when the checked-in list is stale or a licence is
//! outside the policy.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use anyhow::{bail, Context as _, Result};
use serde_json::Value;

/// The checked-in list, at the workspace root.
pub const FILE: &str = "THIRD-PARTY-LICENSES.md";

/// Licences a dependency may use. Each needs only its text and notices shipped with
/// the binary, except CDDL-1.0 (see [`SOURCE_REQUIRED`]).
const ALLOWED: &[&str] = &[
    "MIT",
    "Apache-2.0",
    "Apache-2.0 WITH LLVM-exception",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "0BSD",
    "ISC",
    "Zlib",
    "Unicode-3.0",
    "Unicode-DFS-2016",
    "Unlicense",
    "BSL-1.0",
    "CDDL-1.0",
];

/// Licences whose code, shipped in a binary, obliges the shipper to tell
/// recipients where its source is.
const SOURCE_REQUIRED: &[&str] = &["CDDL-1.0"];

/// Workspace crates whose normal dependencies end up in what is shipped.
const SHIPPED: &[&str] = &["topwaits", "topwaits-ebpf"];

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Crate {
    pub name: String,
    pub version: String,
    pub license: String,
    pub repository: String,
    pub authors: Vec<String>,
    /// (file name, text) of its licence files.
    pub texts: Vec<(String, String)>,
}

/// The licence identifiers an SPDX expression (or an old `A/B` form) names.
pub fn identifiers(expr: &str) -> Vec<String> {
    let expr = expr.replace('/', " OR ").replace(['(', ')'], " ");
    let mut out = Vec::new();
    let words: Vec<&str> = expr.split_whitespace().collect();
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "OR" | "AND" => i += 1,
            w if words.get(i + 1) == Some(&"WITH") && i + 2 < words.len() => {
                out.push(format!("{w} WITH {}", words[i + 2]));
                i += 3;
            }
            w => {
                out.push(w.to_string());
                i += 1;
            }
        }
    }
    out
}

/// Whether an expression can be satisfied within the policy: every AND term, and
/// some choice of each OR.
pub fn allowed(expr: &str) -> bool {
    let flat = expr.replace('/', " OR ");
    flat.split(" AND ")
        .all(|term| identifiers(term).iter().any(|id| ALLOWED.contains(&id.as_str())))
}

/// The crates `SHIPPED` depends on for the host target, from `cargo metadata`.
pub fn collect(meta: &Value) -> Result<Vec<Crate>> {
    let packages: HashMap<&str, &Value> = meta["packages"]
        .as_array()
        .context("no packages")?
        .iter()
        .filter_map(|p| Some((p["id"].as_str()?, p)))
        .collect();
    let nodes: HashMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .context("no resolve graph")?
        .iter()
        .filter_map(|n| Some((n["id"].as_str()?, n)))
        .collect();
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut todo: Vec<&str> = packages
        .iter()
        .filter(|(_, p)| SHIPPED.contains(&p["name"].as_str().unwrap_or("")))
        .map(|(id, _)| *id)
        .collect();
    let mut seen = BTreeSet::new();
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes.get(id).and_then(|n| n["deps"].as_array()).into_iter().flatten() {
            let normal =
                dep["dep_kinds"].as_array().into_iter().flatten().any(|k| k["kind"].is_null());
            if normal {
                if let Some(p) = dep["pkg"].as_str() {
                    todo.push(p);
                }
            }
        }
    }
    let mut out = Vec::new();
    for id in seen.into_iter().filter(|id| !members.contains(id)) {
        let p = packages[id];
        let dir = Path::new(p["manifest_path"].as_str().unwrap_or(""))
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let mut texts: Vec<(String, String)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let upper = name.to_uppercase();
                let is_licence = ["LICENSE", "LICENCE", "COPYING", "NOTICE", "UNLICENSE"]
                    .iter()
                    .any(|p| upper.starts_with(p));
                (is_licence && e.path().is_file())
                    .then(|| Some((name, std::fs::read_to_string(e.path()).ok()?)))?
            })
            .collect();
        if let Some(f) = p["license_file"].as_str() {
            if !texts.iter().any(|(n, _)| f.ends_with(n.as_str())) {
                texts.push((
                    f.to_string(),
                    std::fs::read_to_string(dir.join(f)).unwrap_or_default(),
                ));
            }
        }
        texts.sort();
        out.push(Crate {
            name: p["name"].as_str().unwrap_or("").to_string(),
            version: p["version"].as_str().unwrap_or("").to_string(),
            license: p["license"].as_str().unwrap_or("").to_string(),
            repository: p["repository"].as_str().unwrap_or("").to_string(),
            authors: p["authors"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect(),
            texts,
        });
    }
    out.sort();
    Ok(out)
}

/// Problems that make the list unshippable: licences outside the policy, or a
/// crate with neither a licence expression nor a licence file.
pub fn problems(crates: &[Crate]) -> Vec<String> {
    let mut p = Vec::new();
    for c in crates {
        if c.license.is_empty() && c.texts.is_empty() {
            p.push(format!("{} {} declares no licence", c.name, c.version));
        } else if !c.license.is_empty() && !allowed(&c.license) {
            p.push(format!(
                "{} {} is {}, outside the allowed licences",
                c.name, c.version, c.license
            ));
        }
    }
    p
}

/// The Markdown document: what a redistributor must do, a table, then each distinct
/// licence text once with the crates it covers.
pub fn render(crates: &[Crate]) -> String {
    let mut s = String::from(
        "# Third-party licences\n\n\
         Generated by `cargo xtask licenses` from `Cargo.lock`; `cargo xtask test` fails when it is stale.\n\
         It lists every crate linked into the `topwaits` binary or into the eBPF object it embeds.\n\n\
         **Redistributing the binary:** ship this file with it (it carries the licence texts and\n\
         notices the MIT, Apache-2.0, BSD, ISC, Zlib and Unicode licences ask for).\n\n",
    );
    let source: Vec<&Crate> = crates
        .iter()
        .filter(|c| identifiers(&c.license).iter().any(|i| SOURCE_REQUIRED.contains(&i.as_str())))
        .collect();
    for c in &source {
        s.push_str(&format!(
            "{} {} is under {}: whoever ships the binary must also tell recipients where its source code\n\
             is available (for example <https://crates.io/crates/{}/{}>{}) and must not\n\
             change its licence terms. topwaits does not modify it.\n",
            c.name,
            c.version,
            c.license,
            c.name,
            c.version,
            if c.repository.is_empty() { String::new() } else { format!(" or {}", c.repository) }
        ));
    }
    s.push_str("\n| crate | version | licence |\n|---|---|---|\n");
    for c in crates {
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            c.name,
            c.version,
            if c.license.is_empty() { "see its licence file" } else { &c.license }
        ));
    }
    let mut texts: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for c in crates {
        for (_, t) in &c.texts {
            texts.entry(t.as_str()).or_default().push(format!("{} {}", c.name, c.version));
        }
    }
    let bare: Vec<&Crate> = crates.iter().filter(|c| c.texts.is_empty()).collect();
    if !bare.is_empty() {
        s.push_str(
            "\nThese crates ship no licence file in their packages; the standard texts of their licences,\n\
                    reproduced below for other crates, apply with their authors' copyright:\n\n",
        );
        for c in bare {
            let who =
                if c.authors.is_empty() { "its authors".to_string() } else { c.authors.join(", ") };
            s.push_str(&format!("- {} {}: {}, copyright {}\n", c.name, c.version, c.license, who));
        }
    }
    s.push_str("\n## Licence texts\n");
    for (text, users) in texts {
        s.push_str(&format!(
            "\n### Used by {}\n\n```text\n{}\n```\n",
            users.join(", "),
            text.trim_end().replace("```", "'''")
        ));
    }
    s
}

fn metadata() -> Result<Value> {
    let host = std::env::var("TARGET")
        .unwrap_or_else(|_| format!("{}-unknown-linux-gnu", std::env::consts::ARCH));
    let out = crate::cargo()
        .args(["metadata", "--format-version", "1", "--locked", "--filter-platform", &host])
        .output()
        .context("failed to run cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Writes the list, or with `check` compares it with the checked-in one.
pub fn run(check: bool) -> Result<()> {
    let crates = collect(&metadata()?)?;
    let bad = problems(&crates);
    if !bad.is_empty() {
        bail!("licence policy: {}", bad.join("; "));
    }
    let text = render(&crates);
    let path = crate::root().join(FILE);
    if check {
        let old = std::fs::read_to_string(&path).unwrap_or_default();
        if old != text {
            bail!("{FILE} is stale: run `cargo xtask licenses` and commit it");
        }
        eprintln!("xtask: {FILE} is up to date ({} crates)", crates.len());
    } else {
        std::fs::write(&path, text)?;
        eprintln!("xtask: wrote {FILE} ({} crates)", crates.len());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_split_into_identifiers_and_meet_the_policy() {
        assert_eq!(identifiers("MIT OR Apache-2.0"), ["MIT", "Apache-2.0"]);
        assert_eq!(identifiers("MIT/Apache-2.0"), ["MIT", "Apache-2.0"]);
        assert_eq!(
            identifiers("Apache-2.0 WITH LLVM-exception OR MIT"),
            ["Apache-2.0 WITH LLVM-exception", "MIT"]
        );
        assert_eq!(
            identifiers("(MIT OR Apache-2.0) AND Unicode-3.0"),
            ["MIT", "Apache-2.0", "Unicode-3.0"]
        );
        assert!(allowed("(MIT OR Apache-2.0) AND Unicode-3.0"));
        assert!(allowed("GPL-3.0 OR MIT"), "one allowed choice suffices");
        assert!(!allowed("GPL-3.0"));
        assert!(!allowed("MIT AND GPL-2.0"), "every AND term must be allowed");
    }

    fn krate(name: &str, license: &str) -> Crate {
        Crate {
            name: name.into(),
            version: "1.0.0".into(),
            license: license.into(),
            repository: String::new(),
            authors: vec![],
            texts: vec![("LICENSE".into(), format!("{license} text"))],
        }
    }

    #[test]
    fn cddl_code_tells_the_shipper_to_point_at_its_source() {
        let doc = render(&[krate("inferno", "CDDL-1.0"), krate("anyhow", "MIT OR Apache-2.0")]);
        assert!(
            doc.contains("inferno 1.0.0 is under CDDL-1.0")
                && doc.contains("https://crates.io/crates/inferno/1.0.0"),
            "{doc}"
        );
        assert!(doc.contains("| anyhow | 1.0.0 | MIT OR Apache-2.0 |"));
        assert!(doc.contains("### Used by inferno 1.0.0\n\n```text\nCDDL-1.0 text\n```"));
        assert!(problems(&[krate("x", "GPL-3.0")])[0].contains("outside the allowed"));
        let mut none = krate("y", "");
        none.texts.clear();
        assert!(problems(&[none])[0].contains("declares no licence"));
    }

    /// The real dependency graph: inferno (CDDL) is in, and nothing is outside
    /// the policy.
    #[test]
    fn the_shipped_crates_are_all_within_the_policy() {
        let crates = collect(&metadata().unwrap()).unwrap();
        assert!(crates.iter().any(|c| c.name == "inferno" && c.license == "CDDL-1.0"));
        assert!(crates.iter().any(|c| c.name == "aya-ebpf"), "the eBPF object's crates count too");
        assert!(
            !crates.iter().any(|c| c.name == "topwaits" || c.name == "proptest"),
            "no workspace members or test-only crates"
        );
        assert!(crates.iter().any(|c| c.name == "clap_mangen"), "the binary writes its man pages");
        assert_eq!(problems(&crates), Vec::<String>::new());
        assert!(crates.iter().all(|c| !c.texts.is_empty() || !c.license.is_empty()));
    }
}
