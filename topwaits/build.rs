//! Builds the eBPF crate with aya-build so the object is embedded in the binary.

use anyhow::{anyhow, Context as _};
use aya_build::Toolchain;

fn main() -> anyhow::Result<()> {
    let meta = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("MetadataCommand::exec")?;
    let ebpf = meta
        .packages
        .into_iter()
        .find(|p| p.name.as_str() == "topwaits-ebpf")
        .ok_or_else(|| anyhow!("topwaits-ebpf package not found"))?;
    let root_dir = ebpf
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("no parent for {}", ebpf.manifest_path))?
        .as_str();
    let pkg = aya_build::Package {
        name: ebpf.name.as_str(),
        root_dir,
        ..Default::default()
    };
    aya_build::build_ebpf([pkg], Toolchain::default())
}
