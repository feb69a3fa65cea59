//! Names the commit xtask is built from: it includes topwaits' options (for the
//! man pages), whose `--version` names it.

include!("../topwaits/build_commit.rs");

fn main() {
    commit();
}
