//! Small helpers every layer may use: the clocks, a fast hash, the errors the
//! binary maps to exit codes, output files and one-line messages on stderr.

#[cfg(test)]
pub mod alone;
pub mod clock;
pub mod error;
pub mod fasthash;
pub mod http;
pub mod outfile;
pub(crate) mod stderr;
pub mod text;
