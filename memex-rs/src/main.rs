//! The `memex` binary: parse the command line, set up logging, run, and turn errors into a
//! message, a hint and a deliberate exit code.

use clap::Parser;
use memex::cli::{self, UserError};

fn main() {
    // Everything Memex writes (the archive, its WAL, logs, vectors, models, the lock) is the
    // user's private data: files 0600 and folders 0700, whatever umask the shell had.
    // SAFETY: umask only sets this process's file mode mask; no other thread runs yet.
    unsafe {
        libc::umask(0o077);
    }
    let cli = match cli::Cli::try_parse() {
        Ok(c) => c,
        // A hook command must never fail: Claude Code treats exit code 2 (clap's usage error)
        // from UserPromptSubmit as "block this prompt".
        Err(e) if e.use_stderr() && cli::is_hook_invocation(std::env::args()) => {
            eprintln!("{e}");
            std::process::exit(0);
        }
        Err(e) => e.exit(),
    };
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
