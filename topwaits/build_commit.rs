// The commit a build is made from, for `--version`: included by the build
// scripts of topwaits and of xtask (whose man pages include topwaits' options).

/// The commit the binary is built from, for `--version` (`unknown` outside a git
/// checkout); rebuilt when HEAD moves.
fn commit() {
    use std::process::Command;
    let git = |args: &[&str]| {
        Command::new("git").args(args).output().ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let hash = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TOPWAITS_COMMIT={hash}");
    if let Some(head) = git(&["rev-parse", "--git-path", "HEAD"]) {
        println!("cargo:rerun-if-changed={head}");
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]).and_then(|r| git(&["rev-parse", "--git-path", &r])) {
        println!("cargo:rerun-if-changed={branch}");
    }
}

