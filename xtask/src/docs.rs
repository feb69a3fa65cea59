//! `cargo xtask completions`: shell completions (bash, zsh, fish) and a man page,
//! generated from topwaits' own clap definitions.

use std::path::Path;

use anyhow::{Context as _, Result};
use clap::CommandFactory;
use clap_complete::Shell;

/// topwaits' option definitions, shared as source so that xtask builds without the
/// eBPF toolchain that the topwaits crate's build script needs.
#[allow(dead_code, unused_imports)]
#[path = "../../topwaits/src/cli/mod.rs"]
mod cli;

pub fn generate(out: &Path) -> Result<()> {
    let comp = out.join("completions");
    let man = out.join("man");
    std::fs::create_dir_all(&comp)?;
    std::fs::create_dir_all(&man)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut cmd = cli::Args::command();
        let path = clap_complete::generate_to(shell, &mut cmd, "topwaits", &comp)
            .with_context(|| format!("failed to write {shell} completions"))?;
        eprintln!("xtask: wrote {}", path.display());
    }
    let cmd = cli::Args::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    std::fs::write(man.join("topwaits.1"), page)?;
    for sub in cmd.get_subcommands() {
        let mut page = Vec::new();
        // Leaked once per subcommand for clap's 'static names; xtask then exits.
        let name: &'static str = Box::leak(format!("topwaits-{}", sub.get_name()).into_boxed_str());
        clap_mangen::Man::new(sub.clone().name(name)).render(&mut page)?;
        std::fs::write(man.join(format!("{name}.1")), page)?;
    }
    eprintln!("xtask: wrote {}", man.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn completions_and_man_pages_name_every_option() {
        let dir = std::env::temp_dir().join(format!("tw-docs-{}", std::process::id()));
        super::generate(&dir).unwrap();
        let bash = std::fs::read_to_string(dir.join("completions/topwaits.bash")).unwrap();
        assert!(bash.contains("--stack-storage-size") && bash.contains("threads"));
        assert!(dir.join("completions/_topwaits").exists() && dir.join("completions/topwaits.fish").exists());
        let man = std::fs::read_to_string(dir.join("man/topwaits.1")).unwrap();
        assert!(man.contains(".TH topwaits") && man.contains("min\\-block\\-time"), "{man}");
        assert!(dir.join("man/topwaits-threads.1").exists());
        let blocked = std::fs::read_to_string(dir.join("man/topwaits-blocked.1")).unwrap();
        assert!(blocked.contains("\\-\\-dot") && blocked.contains("\\-\\-sleeping"), "{blocked}");
        assert!(bash.contains("--open-waits"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
