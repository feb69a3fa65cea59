//! For tests that change what a whole process shares (the allocator's
//! settings, signal dispositions): the test runs again alone, in a fresh
//! process of the test binary.

/// Set in the fresh process.
const ALONE: &str = "TOPWAITS_TEST_ALONE";

/// Whether this process is the fresh one, running test `name` alone.
pub fn is_alone(name: &str) -> bool {
    std::env::var(ALONE).is_ok_and(|v| v == name)
}

/// Runs test `name` (its full path) alone in a fresh process of the test
/// binary, with `env` set; its exit status, and what it wrote on stdout and
/// stderr.
pub fn run_alone(name: &str, env: &[(&str, &str)]) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--test-threads=1", "--nocapture"])
        .env(ALONE, name)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status, text)
}
