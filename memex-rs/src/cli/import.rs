//! `memex import`: every transcript of every agent into the archive, with a progress bar.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use ai_cli_session_collector::AdapterRegistry;
use anyhow::Result;
use serde_json::json;

use super::{Ctx, ImportArgs, check_agent, write_access};
use crate::store::ingest;

pub(super) fn import(ctx: &Ctx, a: ImportArgs) -> Result<()> {
    let registry = Arc::new(AdapterRegistry::new());
    check_agent(&registry, &a.agent)?;
    let s = &ctx.resolved.settings;
    let roots: Vec<(String, PathBuf)> = s
        .roots_with_projects(&registry, &ctx.env, &super::known_projects(ctx))
        .into_iter()
        .filter(|(agent, root)| a.agent.as_ref().is_none_or(|x| x == agent) && root.is_dir())
        .collect();
    let data_dir = s.data_dir();
    let (_lock, writer, handle) = write_access(
        &data_dir,
        "memex import",
        "a running `memex serve` keeps the archive current by itself; stop it to import by hand",
    )?;
    let jobs = ingest::discover(&registry, &roots);
    let present = jobs.iter().map(|j| j.path.clone()).collect();
    let opts = ingest::IngestOptions {
        redact: s.store.redact,
        fts_max_bytes: s.store.fts_max_bytes,
        batch_bytes: s.import.batch_bytes,
        threads: s.import_threads(),
    };
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = indicatif::ProgressBar::new(0);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} importing {bytes}/{total_bytes} [{bar:30}] {bytes_per_sec} eta {eta}",
            )
            .unwrap()
            .progress_chars("=> "),
        );
        b
    });
    let started = std::time::Instant::now();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let report = ingest::import(&writer, &data_dir, registry, jobs, &opts, &stop, &|p| {
        if let Some(b) = &bar {
            match p {
                ingest::Progress::Total { bytes, .. } => b.set_length(bytes),
                ingest::Progress::File { bytes } => b.inc(bytes),
            }
        }
    })?;
    let roots2 = roots.clone();
    writer.call(move |c| ingest::mark_gone(c, &roots2, &present))??;
    drop(writer);
    let _ = handle.join();
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let secs = started.elapsed().as_secs_f64();
    if a.json {
        let mut v = serde_json::to_value(&report)?;
        v["roots"] = json!(
            roots
                .iter()
                .map(|(a, r)| json!({"agent": a, "path": r}))
                .collect::<Vec<_>>()
        );
        v["seconds"] = json!(secs);
        println!("{v}");
        return Ok(());
    }
    if roots.is_empty() {
        eprintln!("no transcript folders found; looked in:");
        for (agent, r) in s.roots(&AdapterRegistry::new(), &ctx.env) {
            eprintln!("  {agent:<7} {}", r.display());
        }
    }
    println!(
        "imported {} new messages ({} prompts) in {} sessions from {} files ({} unchanged) in {:.1}s",
        report.messages,
        report.prompts,
        report.sessions,
        report.files,
        report.files_skipped_unchanged,
        secs
    );
    if report.bad_lines > 0 || !report.errors.is_empty() {
        eprintln!("{} bad lines skipped; problems:", report.bad_lines);
        for e in report.errors.iter().take(20) {
            eprintln!("  {}:{}: {}", e.file, e.line, e.reason);
        }
        if report.errors.len() > 20 {
            eprintln!("  … and {} more (see --json)", report.errors.len() - 20);
        }
    }
    Ok(())
}
