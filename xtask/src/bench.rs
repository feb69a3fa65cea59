//! `cargo xtask bench`: placeholder options; filled in by the benchmark work.

use anyhow::Result;

#[derive(clap::Args)]
pub struct Options {}

pub fn bench(_opts: &Options) -> Result<()> {
    anyhow::bail!("the benchmark is not written yet")
}
