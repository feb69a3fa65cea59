//! One-line messages to stderr that a closed or broken stderr cannot turn into a
//! panic (the `eprintln!` macro would).

/// Writes one line to stderr, ignoring errors.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub(crate) use say;

/// An error and its causes on one line, `outer: cause: ...`, as anyhow's `{:#}`
/// prints them, but without a cause whose text the line already holds: many
/// library errors (aya's among them) put their source's message in their own and
/// also return it as the source, which `{:#}` would print twice.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(text.as_str()) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::error_line;

    #[derive(Debug)]
    struct Inner;
    impl std::fmt::Display for Inner {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("type of TASKS is unsupported")
        }
    }
    impl std::error::Error for Inner {}

    /// Says its source's text itself and returns it as the source too.
    #[derive(Debug)]
    struct Wrapper(Inner);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "map error: {}", self.0)
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_cause_already_in_the_line_is_said_once() {
        let e = anyhow::Error::new(Wrapper(Inner)).context("failed to load the eBPF object");
        assert_eq!(format!("{e:#}").matches("unsupported").count(), 2, "anyhow repeats it");
        assert_eq!(
            error_line(&e),
            "failed to load the eBPF object: map error: type of TASKS is unsupported"
        );
    }

    #[test]
    fn distinct_causes_all_stay_in_order() {
        let e = anyhow::anyhow!("No such file or directory (os error 2)")
            .context("failed to read /proc/42/maps")
            .context("symbolizing");
        assert_eq!(
            error_line(&e),
            "symbolizing: failed to read /proc/42/maps: No such file or directory (os error 2)"
        );
    }
}
