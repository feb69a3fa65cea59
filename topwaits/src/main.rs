//! The topwaits binary: everything lives in the library.

fn main() {
    std::process::exit(topwaits::run::main_entry());
}
