//! The commit subject lint: every commit since the rule began has a subject of
//! at most 72 characters, so that `git log --oneline` can be read; the why goes
//! in the body.

use std::process::Command;

use anyhow::{bail, Result};

/// The last commit before the rule; every later one must keep it.
const RULE_AFTER: &str = "39697bb8b7c451d8ccf83132b944673379335429";
/// The longest subject allowed.
pub const MAX_SUBJECT: usize = 72;

/// The subjects of `log` (one `hash<TAB>subject` per line) that are too long.
pub fn too_long(log: &str) -> Vec<String> {
    log.lines()
        .filter_map(|l| l.split_once('\t'))
        .filter(|(_, subject)| subject.chars().count() > MAX_SUBJECT)
        .map(|(hash, subject)| {
            format!("{hash} ({} characters): {subject}", subject.chars().count())
        })
        .collect()
}

/// Fails on any commit since [`RULE_AFTER`] whose subject is too long. Skipped,
/// with a note, where the history is not there (a shallow clone, no git).
pub fn check() -> Result<()> {
    let out = Command::new("git")
        .current_dir(crate::root())
        .args(["log", "--format=%h%x09%s", &format!("{RULE_AFTER}..HEAD")])
        .output();
    let log = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        _ => {
            eprintln!(
                "xtask: commit subjects not checked: no git history back to {}",
                &RULE_AFTER[..12]
            );
            return Ok(());
        }
    };
    let long = too_long(&log);
    if !long.is_empty() {
        bail!(
            "commit subjects over {MAX_SUBJECT} characters (put the why in the body):\n  {}",
            long.join("\n  ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_over_72_characters_are_named() {
        let ok = "a".repeat(72);
        let long = "é".repeat(73);
        let log = format!("abc123\t{ok}\ndef456\t{long}\n");
        assert_eq!(too_long(&log), [format!("def456 (73 characters): {long}")]);
        assert!(too_long("").is_empty());
    }

    /// The rule holds on this repository's own history.
    #[test]
    fn this_history_keeps_the_rule() {
        check().unwrap();
    }
}
