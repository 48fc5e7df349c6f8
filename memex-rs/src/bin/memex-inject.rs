//! `memex-inject`: the hook command the RFC names, the same as `memex inject`.
//! `memex-inject --mode full|smart [--explain] [--config FILE] [--data-dir DIR]`.

use clap::Parser;
use memex::cli::{self, Cli};

fn main() {
    // Parsed as `memex inject ...`; a usage error must not fail the hook (exit 2 blocks the
    // prompt in Claude Code), so it is reported and the exit code stays 0.
    let args = std::iter::once("memex".to_owned())
        .chain(std::iter::once("inject".to_owned()))
        .chain(std::env::args().skip(1));
    match Cli::try_parse_from(args) {
        Ok(c) => cli::run_hook(&c),
        Err(e) if e.use_stderr() => eprintln!("{e}"),
        Err(e) => e.exit(),
    }
}
