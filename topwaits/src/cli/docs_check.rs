//! The README's and docs' own check: every `topwaits` command they show is
//! accepted by the options it names (parsed and validated as the binary would,
//! without running it), and every relative link leads to a file and heading
//! that exist. Read from the files themselves, so the docs cannot drift from
//! the tool. Tests only.

use std::path::{Path, PathBuf};

/// The documents checked, from the workspace root.
const DOCS: &[&str] = &[
    "README.md",
    "docs/GUIDE.md",
    "docs/DESIGN.md",
    "docs/PERFORMANCE.md",
    "docs/JSON.md",
    "docs/SERVE.md",
    "CHANGELOG.md",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `topwaits` command lines of a document: lines of its code blocks (fenced
/// or indented) and of inline code that start with `topwaits` (after `sudo`,
/// `$` or a prompt), with comments after `#` and what follows a pipe or a
/// redirection left out.
pub fn commands(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        // A heading names a view; it is no command to run.
        if !fenced && line.starts_with('#') {
            continue;
        }
        let code = fenced || line.starts_with("    ");
        let mut candidates: Vec<&str> = Vec::new();
        if code {
            // Two columns side by side (a before/after example) are two commands.
            candidates.extend(line.split("      $ ").map(str::trim));
        } else {
            candidates.extend(line.split('`').skip(1).step_by(2));
        }
        for c in candidates {
            let c = c.trim().trim_start_matches("$ ").trim_start_matches("sudo ");
            if !c.starts_with("topwaits ") && c != "topwaits" {
                continue;
            }
            // A synopsis (`topwaits threads [-p PID | -t TID...]`) is no
            // command, nor is a subcommand's bare name in prose.
            if c.contains("[-") || (!code && c.split_whitespace().count() <= 2 && !c.contains(" -"))
            {
                continue;
            }
            // Comments, pipes, redirections and a column of explanation after
            // three spaces are not the command's words.
            let c = c.split(" # ").next().unwrap_or(c);
            let c = c.split(" | ").next().unwrap_or(c);
            let c = c.split(" > ").next().unwrap_or(c);
            let c = c.split("   ").next().unwrap_or(c);
            out.push(c.trim().to_string());
        }
    }
    out
}

/// Words of a command as a shell would pass them, with `$(...)` substitutions
/// and the placeholders `PID` and `TID` standing for a number.
pub fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = command;
    while let Some(start) = rest.find("$(") {
        out.extend(rest[..start].split_whitespace().map(str::to_string));
        let end = rest[start..].find(')').map_or(rest.len(), |e| start + e + 1);
        out.push("4242".to_string());
        rest = &rest[end..];
    }
    out.extend(rest.split_whitespace().map(|w| w.trim_matches('"').to_string()));
    for w in &mut out {
        if w == "PID" || w == "TID" {
            *w = "4242".to_string();
        }
    }
    out
}

/// The relative links of a markdown document: (target file, anchor).
pub fn links(doc: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        if target.starts_with("http") || target.starts_with("mailto:") || target.contains(' ') {
            continue;
        }
        let (file, anchor) = match target.split_once('#') {
            Some((f, a)) => (f.to_string(), Some(a.to_string())),
            None => (target.to_string(), None),
        };
        out.push((file, anchor));
    }
    out
}

/// A heading's anchor as GitHub makes it: lower case, punctuation but `-` and
/// `_` dropped, spaces become `-`.
pub fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::super::Args;
    use super::*;

    #[test]
    fn commands_words_and_anchors_are_read_as_a_shell_and_github_would() {
        let doc = "    sudo topwaits -p 1234 10      # process 1234\n```\n$ topwaits -f 10 | flamegraph.pl > x.svg\ntopwaits why -p 7 10      the causes\n```\n\
            See `topwaits why -p 7 2`, `topwaits record`, `topwaits threads [-p PID]` and `cargo test`.\n\
            ### `topwaits record --json`\n";
        assert_eq!(
            commands(doc),
            [
                "topwaits -p 1234 10",
                "topwaits -f 10",
                "topwaits why -p 7 10",
                "topwaits why -p 7 2"
            ]
        );
        assert_eq!(words("topwaits -p $(pgrep -x gzip) 2"), ["topwaits", "-p", "4242", "2"]);
        assert_eq!(
            words("topwaits why --for TID -p PID"),
            ["topwaits", "why", "--for", "4242", "-p", "4242"]
        );
        assert_eq!(
            anchor("Who woke it (`-w`, `--chain`, `--wakeups`)"),
            "who-woke-it--w---chain---wakeups"
        );
        assert_eq!(
            links("[a](docs/GUIDE.md#x-y) [b](https://x.org) [c](#here)"),
            [
                ("docs/GUIDE.md".to_string(), Some("x-y".to_string())),
                (String::new(), Some("here".to_string()))
            ]
        );
    }

    /// Every command the documents show runs as written: its options parse and
    /// pass the checks the binary makes before anything loads.
    #[test]
    fn every_command_in_the_docs_is_accepted() {
        let mut checked = 0;
        let mut bad = Vec::new();
        for doc in DOCS {
            let text =
                std::fs::read_to_string(root().join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"));
            for c in commands(&text) {
                let args = match Args::try_parse_from(words(&c)) {
                    Ok(a) => a,
                    Err(e)
                        if matches!(
                            e.kind(),
                            clap::error::ErrorKind::DisplayHelp
                                | clap::error::ErrorKind::DisplayVersion
                        ) =>
                    {
                        checked += 1;
                        continue;
                    }
                    Err(e) => {
                        bad.push(format!(
                            "{doc}: `{c}` does not parse: {}",
                            e.to_string().lines().next().unwrap_or("")
                        ));
                        continue;
                    }
                };
                match args.validate() {
                    // The options are right; the cgroup, unit or container it
                    // names is not on this machine.
                    Err(super::super::ConfigError::Cgroup(_)) | Ok(_) => {}
                    Err(e) => bad.push(format!("{doc}: `{c}` is refused: {e}")),
                }
                checked += 1;
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        assert!(checked >= 30, "only {checked} commands found in the docs");
    }

    /// Every relative link leads to a file that exists, and an anchor to a
    /// heading of it.
    #[test]
    fn every_link_in_the_docs_resolves() {
        let mut bad = Vec::new();
        for doc in DOCS {
            let path = root().join(doc);
            let text = std::fs::read_to_string(&path).unwrap();
            for (file, anchor_of) in links(&text) {
                let target =
                    if file.is_empty() { path.clone() } else { path.parent().unwrap().join(&file) };
                if !target.exists() {
                    bad.push(format!("{doc}: a link to {file}, which does not exist"));
                    continue;
                }
                let Some(a) = anchor_of else { continue };
                let target_text = std::fs::read_to_string(&target).unwrap_or_default();
                let found = target_text
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .any(|h| anchor(h.trim_start_matches('#')) == a);
                if !found {
                    bad.push(format!("{doc}: a link to {file}#{a}, which is no heading there"));
                }
            }
        }
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}
