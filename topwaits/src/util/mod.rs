//! Small helpers every layer may use: the clocks, a fast hash, the errors the
//! binary maps to exit codes, output files, one-line messages on stderr and a
//! list that grows without moving what it holds.

#[cfg(test)]
pub mod alone;
pub mod chunked;
pub mod clock;
pub mod error;
pub mod fasthash;
pub mod http;
pub mod outfile;
pub(crate) mod stderr;
pub mod text;
