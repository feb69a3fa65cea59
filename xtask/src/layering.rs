//! A check that the eBPF crate's shared modules import one way (hooks above the
//! accounting, the accounting above the task helpers and maps), so that no import
//! cycle comes back. Run as a unit test.

#[cfg(test)]
mod tests {
    /// The eBPF crate's shared modules from top to bottom: each may use only the
    /// ones after it. Hook files (one per tracepoint) sit above all of them.
    const ORDER: &[&str] = &["switch", "events", "wake", "threads", "task", "kstack", "ustack", "kcache", "stackref", "taskmap", "maps"];

    /// Whether `text` holds `form` as a whole name (`crate::task` is not in
    /// `crate::taskmap`).
    fn uses(text: &str, form: &str) -> bool {
        text.match_indices(form).any(|(i, _)| !text[i + form.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '_'))
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
                for form in [format!("crate::{above}"), format!("crate::{{{above}"), format!(" {above}::")] {
                    assert!(!uses(&text, &form), "{module}.rs uses {above}, which sits above it: keep imports one way");
                }
            }
            checked += 1;
        }
        assert_eq!(checked, ORDER.len());
    }
}
