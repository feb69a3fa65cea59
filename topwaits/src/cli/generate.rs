//! `topwaits generate DIR` (hidden; `cargo xtask completions` runs it): shell
//! completions (bash, zsh, fish) and man pages, made from the options as the
//! binary itself parses them and from the JSON schemas of docs/JSON.md.

use std::io::Write as _;
use std::path::Path;

use anyhow::{Context as _, Result};
use clap::CommandFactory;
use clap_complete::Shell;

use super::Args;

/// The JSON schemas, whose sections the man pages carry.
const SCHEMAS: &str = include_str!("../../../docs/JSON.md");

pub fn generate(out: &Path) -> Result<()> {
    let comp = out.join("completions");
    let man = out.join("man");
    std::fs::create_dir_all(&comp)?;
    std::fs::create_dir_all(&man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut cmd = Args::command();
        let path = clap_complete::generate_to(shell, &mut cmd, "topwaits", &comp)
            .with_context(|| format!("failed to write {shell} completions"))?;
        let script = std::fs::read_to_string(&path)?;
        std::fs::write(&path, complete_pids(shell, &script))?;
        eprintln!("topwaits: wrote {}", path.display());
    }
    // No `help` subcommand: it has no page of its own to point to.
    let mut cmd = Args::command().disable_help_subcommand(true);
    cmd.build();
    std::fs::write(man.join("topwaits.1"), page(&cmd, &JSON_TAIL)?)?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        // Leaked once per subcommand for clap's 'static names; the process then exits.
        let name: &'static str = Box::leak(format!("topwaits-{}", sub.get_name()).into_boxed_str());
        // serve prints no document: its page carries its endpoints instead.
        let heading = format!("### `topwaits {} --json`", sub.get_name());
        let tail = match sub.get_name() {
            "serve" => Tail {
                title: "ENDPOINTS",
                doc: SERVE,
                file: "docs/SERVE.md",
                heading: "## Endpoints",
            },
            _ => Tail { heading: &heading, ..JSON_TAIL },
        };
        std::fs::write(man.join(format!("{name}.1")), page(&sub.clone().name(name), &tail)?)?;
    }
    eprintln!("topwaits: wrote {}", man.display());
    Ok(())
}

/// `-p`/`--pid` completes running pids (clap's scripts have no hint for process
/// ids); `-t`/`--tid`, hinted as "other", completes nothing rather than files.
fn complete_pids(shell: Shell, script: &str) -> String {
    match shell {
        Shell::Bash => {
            // With no value hint clap echoes the word back (and adds no space,
            // which suits a comma-separated list).
            let echo = "COMPREPLY=(\"${cur}\")";
            let pids =
                "COMPREPLY=($(compgen -W \"$(ls /proc | grep -E '^[0-9]+$')\" -- \"${cur}\"))";
            let mut out = String::new();
            let mut option = "";
            for line in script.lines() {
                let t = line.trim();
                if t.ends_with(')') && t.starts_with('-') {
                    option = t;
                }
                match option {
                    "--pid)" | "-p)" if t == echo => out.push_str(&line.replace(echo, pids)),
                    _ => out.push_str(line),
                }
                out.push('\n');
            }
            out
        }
        Shell::Zsh => script.replace(":PID:'", ":PID:_pids'"),
        Shell::Fish => {
            script
                .lines()
                .map(|l| {
                    if l.contains(" -l pid ") {
                        format!("{l} -a '(__fish_complete_pids)'")
                    } else {
                        l.to_string()
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
                + "\n"
        }
        _ => script.to_string(),
    }
}

/// The last section of a man page: the Markdown section under `heading` of
/// `doc` (the text of `file`), under the roff title `title`.
struct Tail<'a> {
    title: &'a str,
    doc: &'a str,
    file: &'a str,
    heading: &'a str,
}

/// The top page's tail: the JSON schema.
const JSON_TAIL: Tail<'static> = Tail {
    title: "JSON OUTPUT",
    doc: SCHEMAS,
    file: "docs/JSON.md",
    heading: "## JSON (`--json`)",
};

/// serve's endpoints, metrics and OTLP mapping.
const SERVE: &str = include_str!("../../../docs/SERVE.md");

/// One man page: clap's sections, the examples verbatim, and its tail (the
/// JSON schema from docs/JSON.md, or serve's endpoints).
fn page(cmd: &clap::Command, tail: &Tail) -> Result<Vec<u8>> {
    let man = clap_mangen::Man::new(cmd.clone());
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    if cmd.get_subcommands().next().is_some() {
        man.render_subcommands_section(&mut out)?;
    }
    if let Some(examples) = cmd.get_after_help() {
        writeln!(out, ".SH EXAMPLES\n.nf")?;
        for line in examples.to_string().lines().skip_while(|l| l.trim_end().ends_with(':')) {
            writeln!(out, "{}", escape(line))?;
        }
        writeln!(out, ".fi")?;
    }
    let schema = section(tail.doc, tail.heading)
        .with_context(|| format!("{} has no section {}", tail.file, tail.heading))?;
    writeln!(out, ".SH {}", tail.title)?;
    out.extend_from_slice(markdown_to_roff(schema).as_bytes());
    if cmd.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(out)
}

/// The body of the Markdown section under `heading`, up to the next heading of the
/// same or a higher level.
fn section<'a>(text: &'a str, heading: &str) -> Option<&'a str> {
    let level = heading.chars().take_while(|&c| c == '#').count();
    let start = text.find(&format!("\n{heading}\n"))? + heading.len() + 2;
    let rest = &text[start..];
    let end = rest
        .match_indices("\n#")
        .find(|(i, _)| rest[i + 1..].chars().take_while(|&c| c == '#').count() <= level)
        .map_or(rest.len(), |(i, _)| i);
    Some(&rest[..end])
}

/// Text safe in roff: backslashes doubled, and a line starting with `.` or `'`
/// guarded so it is not taken for a request.
fn escape(line: &str) -> String {
    let s = line.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// The schemas' small Markdown (paragraphs, `field | meaning` tables and code
/// blocks) as roff: tables become tagged paragraphs, code stays verbatim.
fn markdown_to_roff(md: &str) -> String {
    let mut out = String::new();
    let mut code = false;
    let mut para = false;
    for line in md.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            out.push_str(if code { ".fi\n" } else { ".PP\n.nf\n" });
            code = !code;
            para = false;
            continue;
        }
        if code {
            out.push_str(&escape(line));
            out.push('\n');
        } else if t.is_empty() {
            para = false;
        } else if let Some(row) = t.strip_prefix('|') {
            let cells: Vec<&str> =
                row.trim_end_matches('|').splitn(2, " | ").map(str::trim).collect();
            let header = cells.first().is_some_and(|c| *c == "field" || c.starts_with("---"));
            if let [field, meaning] = cells[..] {
                if !header {
                    out.push_str(&format!(
                        ".TP\n\\fB{}\\fR\n{}\n",
                        escape(&plain(field)),
                        escape(&plain(meaning))
                    ));
                }
            }
            para = false;
        } else {
            if !para {
                out.push_str(".PP\n");
                para = true;
            }
            out.push_str(&escape(&plain(t)));
            out.push('\n');
        }
    }
    out
}

/// Markdown inline marks dropped: backticks, bold, escaped pipes.
fn plain(s: &str) -> String {
    s.replace('`', "").replace("**", "").replace("\\|", "|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completions_and_man_pages_name_every_option() {
        let dir = std::env::temp_dir().join(format!("tw-docs-{}", std::process::id()));
        super::generate(&dir).unwrap();
        let bash = std::fs::read_to_string(dir.join("completions/topwaits.bash")).unwrap();
        assert!(bash.contains("--stack-storage-size") && bash.contains("threads"));
        assert!(
            dir.join("completions/_topwaits").exists()
                && dir.join("completions/topwaits.fish").exists()
        );
        let man = std::fs::read_to_string(dir.join("man/topwaits.1")).unwrap();
        assert!(man.contains(".TH topwaits") && man.contains("min\\-block\\-time"), "{man}");
        assert!(dir.join("man/topwaits-threads.1").exists());
        let blocked = std::fs::read_to_string(dir.join("man/topwaits-blocked.1")).unwrap();
        assert!(blocked.contains("\\-\\-dot") && blocked.contains("\\-\\-sleeping"), "{blocked}");
        assert!(bash.contains("--open-waits"));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Regressions: the page sent readers to the README for the JSON schema, named
    /// a topwaits-help(1) page that does not exist, and reflowed the examples.
    #[test]
    fn man_pages_carry_the_schema_verbatim_examples_and_no_help_page() {
        let dir = std::env::temp_dir().join(format!("tw-man-{}", std::process::id()));
        super::generate(&dir).unwrap();
        let man = std::fs::read_to_string(dir.join("man/topwaits.1")).unwrap();
        assert!(
            !man.contains("topwaits\\-help") && !dir.join("man/topwaits-help.1").exists(),
            "{man}"
        );
        let json = &man[man.find(".SH JSON OUTPUT").expect("a JSON section")..];
        for field in
            ["records_total", "symbol_offset", "file_offset", "open_since", "max_blocked_us"]
        {
            assert!(json.contains(field), "{field} missing from the schema");
        }
        let ex = &man[man.find(".SH EXAMPLES\n.nf\n").expect("verbatim examples")..];
        let ex = &ex[..ex.find(".fi").unwrap()];
        assert!(
            ex.contains("\n  topwaits \\-p 1234 10             the threads of process 1234\n"),
            "{ex}"
        );
        for sub in ["threads", "blocked"] {
            let page = std::fs::read_to_string(dir.join(format!("man/topwaits-{sub}.1"))).unwrap();
            assert!(
                page.contains(".SH JSON OUTPUT") && page.contains("\\fBversion\\fR"),
                "{sub}: {page}"
            );
        }
        let serve = std::fs::read_to_string(dir.join("man/topwaits-serve.1")).unwrap();
        assert!(
            serve.contains(".SH ENDPOINTS") && serve.contains("/debug/pprof/offwake"),
            "{serve}"
        );
        let threads = std::fs::read_to_string(dir.join("man/topwaits-threads.1")).unwrap();
        assert!(threads.contains("dependencies") && threads.contains("stolen_us"));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Regression: `-p <TAB>` offered file names.
    #[test]
    fn pid_options_complete_pids_not_files() {
        let dir = std::env::temp_dir().join(format!("tw-comp-{}", std::process::id()));
        super::generate(&dir).unwrap();
        let bash = std::fs::read_to_string(dir.join("completions/topwaits.bash")).unwrap();
        for opt in ["-p)", "--pid)", "-t)", "--tid)"] {
            let at = bash.find(&format!(" {opt}\n")).unwrap_or_else(|| panic!("{opt} in {bash}"));
            let body = &bash[at..at + bash[at..].find(";;").unwrap()];
            assert!(!body.contains("compgen -f"), "{opt} completes files: {body}");
        }
        assert!(bash.contains("ls /proc | grep -E '^[0-9]+$'"));
        let zsh = std::fs::read_to_string(dir.join("completions/_topwaits")).unwrap();
        assert!(
            zsh.contains("--pid=[Only these processes (comma-separated PIDs)]:PID:_pids'"),
            "{zsh}"
        );
        assert!(!zsh.contains(":PID:_default") && !zsh.contains(":TID:_default"));
        let fish = std::fs::read_to_string(dir.join("completions/topwaits.fish")).unwrap();
        assert_eq!(fish.matches("-l pid ").count(), fish.matches("__fish_complete_pids").count());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn markdown_tables_and_code_become_roff() {
        let md = "Intro `x` text.\n\n| field | meaning |\n|---|---|\n| `a` | one \\| two |\n\n```\n.dot line\n```\n";
        let roff = markdown_to_roff(md);
        assert_eq!(
            roff,
            ".PP\nIntro x text.\n.TP\n\\fBa\\fR\none | two\n.PP\n.nf\n\\&.dot line\n.fi\n"
        );
        assert_eq!(
            section("a\n## X\nbody\n### sub\nmore\n## Y\nno", "## X"),
            Some("body\n### sub\nmore")
        );
    }
}
