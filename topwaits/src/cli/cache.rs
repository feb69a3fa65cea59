//! Where built unwind tables are kept between runs (`--cache-dir`, `--no-cache`),
//! shared by every subcommand that walks user stacks.

use std::path::PathBuf;

/// Where the tables are kept unless told otherwise.
pub const DEFAULT_DIR: &str = "/var/cache/topwaits";

/// The options of the unwind table cache.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CacheArgs {
    /// Keep the unwind tables built for each binary and library in DIR, so that
    /// the next run finds them instead of building them again (default
    /// /var/cache/topwaits, created 0700; entries are checked before use, and a
    /// directory other users can write is not used).
    #[arg(long, value_name = "DIR", conflicts_with = "no_cache", value_hint = clap::ValueHint::DirPath)]
    pub cache_dir: Option<PathBuf>,

    /// Build every unwind table afresh and keep none.
    #[arg(long)]
    pub no_cache: bool,
}

impl CacheArgs {
    /// The cache directory to use, if any.
    pub fn dir(&self) -> Option<PathBuf> {
        match (&self.cache_dir, self.no_cache) {
            (_, true) => None,
            (Some(d), false) => Some(d.clone()),
            (None, false) => Some(PathBuf::from(DEFAULT_DIR)),
        }
    }
}
