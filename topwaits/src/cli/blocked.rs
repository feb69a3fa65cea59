//! Options of `topwaits blocked` and their validation into a [`BlockedConfig`].

use std::path::PathBuf;

use super::{ConfigError, TargetArgs, Threads};
use crate::settings::*;

pub(super) const BLOCKED_EXAMPLES: &str = "\
Examples:
  topwaits blocked -p 1234            every blocked thread of process 1234, who holds its lock
  topwaits blocked                    threads in D state (uninterruptible) system-wide
  topwaits blocked -S                 ... and threads in interruptible sleep (S) too
  topwaits blocked -p 1234 --json     threads, wait-for edges and deadlock cycles as JSON
  topwaits blocked -p 1234 --dot g.dot && dot -Tsvg g.dot > g.svg";

/// Options of `topwaits blocked`.
#[derive(clap::Args, Debug, Clone)]
pub struct BlockedArgs {
    #[command(flatten)]
    pub target: TargetArgs,

    /// System-wide, also list threads in interruptible sleep (S). Without -p/-t the
    /// default is threads in uninterruptible sleep (D) only; with them, threads in S
    /// and D state are both listed.
    #[arg(short = 'S', long)]
    pub sleeping: bool,

    /// Print one JSON document: threads, wait-for edges, chains and deadlock cycles.
    #[arg(long)]
    pub json: bool,

    /// Also write the wait-for graph for Graphviz (`dot -Tsvg FILE`).
    #[arg(long, value_name = "FILE")]
    pub dot: Option<PathBuf>,

    #[command(flatten)]
    pub cache: super::CacheArgs,
}

impl BlockedConfig {
    pub fn from_args(a: BlockedArgs) -> Result<Self, ConfigError> {
        let threads = a.target.threads(Threads::All)?;
        let sleeping = a.sleeping || threads != Threads::All;
        Ok(BlockedConfig { threads, sleeping, json: a.json, dot: a.dot, cache: a.cache.dir() })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Args, Command};
    use super::*;
    use clap::Parser as _;

    fn parse(args: &[&str]) -> Result<BlockedConfig, String> {
        let a =
            Args::try_parse_from(["topwaits", "blocked"].into_iter().chain(args.iter().copied()))
                .map_err(|e| e.kind().to_string())?;
        let Some(Command::Blocked(b)) = a.command else {
            return Err("not the blocked subcommand".into());
        };
        BlockedConfig::from_args(b).map_err(|e| e.to_string())
    }

    #[test]
    fn system_wide_lists_d_state_only_unless_asked() {
        let c = parse(&[]).unwrap();
        assert_eq!((c.threads, c.sleeping), (Threads::All, false));
        assert!(parse(&["-S"]).unwrap().sleeping);
    }

    #[test]
    fn a_process_or_thread_lists_sleepers_too() {
        let c = parse(&["-p", "9,3"]).unwrap();
        assert_eq!(c.threads, Threads::Pids(vec![3, 9]));
        assert!(c.sleeping);
        let c = parse(&["-t", "5", "--json", "--dot", "g.dot"]).unwrap();
        assert_eq!(c.threads, Threads::Tids(vec![5]));
        assert!(c.json);
        assert_eq!(c.dot.as_deref(), Some(std::path::Path::new("g.dot")));
    }

    #[test]
    fn bad_ids_are_rejected() {
        assert!(parse(&["-p", "1", "-t", "2"]).is_err());
        assert!(parse(&["-p", "x"]).is_err());
        assert_eq!(parse(&["-p", "0"]).unwrap_err(), "-p/-t ids must be positive, got 0");
        assert!(parse(&["5"]).is_err(), "a snapshot takes no duration");
    }
}
