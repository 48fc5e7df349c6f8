//! Logging through `tracing`: to stderr always, and for the service also to a file in the data
//! directory that rotates daily (a week of files is kept). `MEMEX_LOG` is the one filter
//! (e.g. `MEMEX_LOG=debug`, `MEMEX_LOG=memex=debug,warn`); by default the service logs `info`,
//! the one-shot commands only warnings.

use std::io::IsTerminal;
use std::path::Path;

use ai_cli_session_collector::Env;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Log files kept in `logs/`.
const KEEP_FILES: usize = 7;

/// Installs the global subscriber; `file_dir` adds the rotating log file.
pub fn init(env: &Env, file_dir: Option<&Path>) {
    // rmcp logs every invalid-params answer as a warning: for the MCP server those are the
    // client's mistakes, already answered, not the operator's concern. LanceDB logs every
    // file it opens or writes at info.
    let default = if file_dir.is_some() {
        "info,rmcp=error,lance=warn,lancedb=warn"
    } else {
        "warn,rmcp=error"
    };
    let filter = || match env.var("MEMEX_LOG") {
        Some(f) => EnvFilter::try_new(f).unwrap_or_else(|e| {
            eprintln!("warning: MEMEX_LOG `{f}` is not a valid filter ({e}); using `{default}`");
            EnvFilter::new(default)
        }),
        None => EnvFilter::new(default),
    };
    let stderr = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .with_filter(filter());
    let file = file_dir.and_then(|dir| {
        let appender = std::fs::create_dir_all(dir)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                tracing_appender::rolling::Builder::new()
                    .rotation(tracing_appender::rolling::Rotation::DAILY)
                    .filename_prefix("memex")
                    .filename_suffix("log")
                    .max_log_files(KEEP_FILES)
                    .build(dir)
                    .map_err(|e| e.to_string())
            });
        match appender {
            Ok(a) => Some(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(a)
                    .with_filter(filter()),
            ),
            Err(e) => {
                eprintln!(
                    "warning: cannot write logs to {}: {e}; logging to stderr only",
                    dir.display()
                );
                None
            }
        }
    });
    let _ = tracing_subscriber::registry()
        .with(stderr)
        .with(file)
        .try_init();
}
