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
