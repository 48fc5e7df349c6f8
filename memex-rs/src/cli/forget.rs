//! `memex forget` and `memex scrub`: through the running service when there is one, else on the
//! archive directly (holding its lock), with a progress bar.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{Value, json};

use super::{Ctx, UserError, post_service_within, user_error, write_access};
use crate::store::{self, forget};

/// Forgetting and scrubbing rewrite the archive's file through the service: minutes on a
/// large archive.
const REWRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

#[derive(Args, Debug)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(false)))]
pub struct ForgetArgs {
    /// A session (id or a prefix only one session has), with its sub-agents.
    #[arg(long, group = "what")]
    pub session: Option<String>,
    /// Every session of a project: its folder (absolute path), its git root, or below.
    #[arg(long, group = "what")]
    pub project: Option<String>,
    /// Everything older than this: RFC 3339, a date or an age such as 90d.
    #[arg(long, group = "what")]
    pub before: Option<String>,
    /// Every message, summary and logged prompt containing this text (case-sensitive, at
    /// least 4 characters).
    #[arg(long = "match", group = "what", value_name = "TEXT")]
    pub text: Option<String>,
    /// Count what would go, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask for confirmation.
    #[arg(long)]
    pub yes: bool,
    #[arg(long)]
    pub json: bool,
}

impl ForgetArgs {
    /// The request body of `POST /api/forget` (also what the local path parses).
    fn body(&self, dry_run: bool) -> Value {
        json!({
            "session": self.session, "project": self.project, "before": self.before,
            "match": self.text, "dry_run": dry_run,
        })
    }
}

pub(super) fn run_forget(ctx: &Ctx, a: ForgetArgs) -> Result<()> {
    let s = &ctx.resolved.settings;
    let dir = s.data_dir();
    let (sel, _) = crate::api::forget_request(&a.body(true)).map_err(|e| {
        // The body's fields are the command's flags.
        let message = match e.field.as_str() {
            "" => e.problem,
            f => format!("--{f} {}", e.problem),
        };
        user_error(
            message,
            "for example --session 3f2a9c1b, --project ~/work/app, --before 180d or --match sk-live-",
        )
    })?;
    let service = store::lock::serving_addr(&dir);
    // First the count: what the user is about to lose.
    let preview = match &service {
        Some(addr) => post_service_within(ctx, addr, "/api/forget", a.body(true), REWRITE_TIMEOUT)?,
        None => {
            let mut conn = super::reader(ctx)?;
            serde_json::to_value(forget::forget(&mut conn, &sel, true).map_err(forget_error)?)?
        }
    };
    if a.dry_run {
        return print(&preview, a.json, "would forget");
    }
    if !a.yes {
        if !std::io::stdin().is_terminal() {
            return Err(UserError {
                message: format!("forgetting is final: {}", summary(&preview)),
                hint: Some("add --yes to go ahead, or --dry-run to only count".into()),
                code: 2,
            }
            .into());
        }
        eprint!("forget {}? [y/N] ", summary(&preview));
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            eprintln!("nothing forgotten");
            return Ok(());
        }
    }
    let done = match &service {
        Some(addr) => {
            post_service_within(ctx, addr, "/api/forget", a.body(false), REWRITE_TIMEOUT)?
        }
        None => {
            let (_lock, writer, handle) = write_access(
                &dir,
                "memex forget",
                "try again in a moment (another memex command holds the archive)",
            )?;
            let spinner = spinner("forgetting");
            let sel2 = sel.clone();
            let res = writer.call(move |c| forget::forget(c, &sel2, false))?;
            drop(writer);
            let _ = handle.join();
            let report = res.map_err(forget_error)?;
            if let Some(b) = &spinner {
                b.set_message("removing vectors");
            }
            remove_vectors(s, &report.gone)?;
            if let Some(b) = spinner {
                b.finish_and_clear();
            }
            serde_json::to_value(report)?
        }
    };
    print(&done, a.json, "forgot")
}

fn forget_error(e: forget::ForgetError) -> anyhow::Error {
    match e {
        forget::ForgetError::Sqlite(e) => anyhow::Error::from(e),
        e @ forget::ForgetError::NoSession(_) => UserError {
            message: e.to_string(),
            hint: Some("`memex sessions list` shows session ids".into()),
            code: 3,
        }
        .into(),
        e => user_error(e.to_string(), "see `memex forget --help`"),
    }
}

fn summary(v: &Value) -> String {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    format!(
        "{} sessions, {} messages ({} raw records), {} observations, {} talk and {} session summaries, {} logged injections",
        n("sessions"),
        n("messages"),
        n("raw_records"),
        n("observations"),
        n("talk_summaries"),
        n("session_summaries"),
        n("injections"),
    )
}

fn print(v: &Value, json: bool, verb: &str) -> Result<()> {
    if json {
        println!("{v}");
    } else {
        println!("{verb} {}", summary(v));
        if let Some(b) = v["raw_bytes"].as_u64().filter(|b| *b > 0) {
            println!("  {b} bytes of raw records reclaimed");
        }
        if let Some(q) = v["requeued"].as_u64().filter(|q| *q > 0) {
            println!("  {q} summaries queued again from what is left");
        }
        match v["vector_files"].as_str() {
            Some("pending") => println!(
                "  the service rewrites the vector files as soon as its indexer is free (see `memex status`)"
            ),
            Some("failed") => {
                println!("  the vector files could not be rewritten: see the service log")
            }
            _ => {}
        }
    }
    Ok(())
}

fn spinner(what: &'static str) -> Option<indicatif::ProgressBar> {
    std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_message(what);
        b.enable_steady_tick(std::time::Duration::from_millis(120));
        b
    })
}

/// Deletes the forgotten rows' vectors from the vector folder now, and the old versions that
/// still hold them (a running service does this in its indexer: `POST /api/forget`).
pub(super) fn remove_vectors(s: &crate::config::Settings, gone: &[(i64, i64)]) -> Result<()> {
    let dir = s.data_dir();
    if gone.is_empty() || !crate::vector::dir(&dir).is_dir() {
        return Ok(());
    }
    let dim = {
        let conn = store::open(&dir)?;
        crate::vector::stored_model(&conn)?.map(|(_, d)| d)
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(crate::vector::forget_without_indexer(&dir, dim, gone))?;
    Ok(())
}

pub(super) fn run_scrub(ctx: &Ctx, json: bool) -> Result<()> {
    let s = &ctx.resolved.settings;
    let dir = s.data_dir();
    let report = match store::lock::serving_addr(&dir) {
        Some(addr) => post_service_within(ctx, &addr, "/api/scrub", json!({}), REWRITE_TIMEOUT)?,
        None => {
            let (_lock, writer, handle) = write_access(
                &dir,
                "memex scrub",
                "try again in a moment (another memex command holds the archive)",
            )?;
            let bar = std::io::stderr().is_terminal().then(|| {
                let b = indicatif::ProgressBar::new(0);
                b.set_style(
                    indicatif::ProgressStyle::with_template(
                        "{spinner} scrubbing {pos}/{len} messages [{bar:30}] eta {eta}",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                b
            });
            let (fts_max, logs) = (s.store.fts_max_bytes, dir.join("logs"));
            let b2 = bar.clone();
            let res = writer.call(move |c| {
                crate::store::scrub::scrub(c, fts_max, Some(&logs), &|done, total| {
                    if let Some(b) = &b2 {
                        b.set_length(total);
                        b.set_position(done);
                    }
                })
            })?;
            drop(writer);
            let _ = handle.join();
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            serde_json::to_value(res.context("cannot scrub the archive")?)?
        }
    };
    if json {
        println!("{report}");
        return Ok(());
    }
    let found = report["found"].as_object().cloned().unwrap_or_default();
    let total: u64 = found.values().filter_map(Value::as_u64).sum();
    println!("{total} secrets found and redacted");
    for (rule, n) in &found {
        println!("  {rule:<24} {n}");
    }
    let n = |k: &str| report[k].as_u64().unwrap_or(0);
    println!(
        "changed: {} messages, {} raw records, {} titles, {} compact rows, {} logged prompts, {} log files; {} bytes of raw records reclaimed",
        n("messages"),
        n("raw_records"),
        n("titles"),
        n("compact_rows"),
        n("injections"),
        n("log_files"),
        n("raw_bytes_reclaimed")
    );
    if total > 0 {
        println!("vectors of the changed rows are embedded again by `memex serve`");
    }
    Ok(())
}
