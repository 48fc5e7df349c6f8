//! The `memex` binary: parse the command line, set up logging, run, and turn errors into a
//! message, a hint and a deliberate exit code.

use clap::Parser;
use memex::cli::{self, UserError};

fn main() {
    let cli = cli::Cli::parse();
    if let Err(e) = cli::run(cli) {
        let (code, hint) = match e.downcast_ref::<UserError>() {
            Some(u) => (u.code, u.hint.clone()),
            None => (1, None),
        };
        eprintln!("error: {e}");
        for cause in e.chain().skip(1) {
            eprintln!("  caused by: {cause}");
        }
        if let Some(h) = hint {
            eprintln!("hint: {h}");
        }
        std::process::exit(code);
    }
}
