//! `memex status` (what the archive holds), `memex config` (the settings in effect) and
//! `memex stats`.

use std::collections::BTreeMap;
use std::io::Write;

use ai_cli_session_collector::AdapterRegistry;
use anyhow::Result;
use serde_json::json;

use super::models::vectors_for_reading;
use super::{Ctx, agent_lines, reader, short_time};
use crate::store::{self, read};

pub(super) fn status(ctx: &Ctx, json: bool) -> Result<()> {
    let s = &ctx.resolved.settings;
    let dir = s.data_dir();
    let conn = reader(ctx)?;
    let st = read::status(&conn)?;
    let now = chrono::Utc::now().timestamp_millis();
    let activity = read::activity(&conn, s.watch.idle_minutes, now)?;
    let gone = read::sessions_with_source_gone(&conn, 10)?;
    let service = store::lock::holder(&dir);
    let cleanup = ai_cli_session_collector::adapters::claude::cleanup_settings(&ctx.env);
    let db = store::db_path(&dir);
    let size: u64 = ["", "-wal", "-shm"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{}{s}", db.display())).ok())
        .map(|m| m.len())
        .sum();
    let backlog = crate::vector::indexer::Vectors::backlog(&conn)?;
    let (rt, vectors) = vectors_for_reading(ctx, &conn, true)?;
    let vst = rt.block_on(vectors.status(backlog));
    let mut out = std::io::stdout().lock();
    if json {
        let mut v = serde_json::to_value(&st)?;
        v["vectors"] = serde_json::to_value(&vst)?;
        v["data_dir"] = json!(dir);
        v["database_bytes"] = json!(size);
        v["service"] = json!({ "running": service });
        v["activity"] = serde_json::to_value(&activity)?;
        v["sessions_source_gone"] = serde_json::to_value(&gone)?;
        v["claude_cleanup"] = json!(
            cleanup
                .iter()
                .map(|c| json!({
                    "settings": c.settings,
                    "cleanup_period_days": c.days(),
                    "configured": c.configured.is_some(),
                }))
                .collect::<Vec<_>>()
        );
        writeln!(out, "{v}")?;
        return Ok(());
    }
    writeln!(out, "data dir   {}", dir.display())?;
    writeln!(out, "database   {:.1} MB", size as f64 / 1e6)?;
    match &service {
        Some(h) => writeln!(out, "service    running: {h}")?,
        None => writeln!(
            out,
            "service    not running (`memex serve` keeps the archive current)"
        )?,
    }
    writeln!(
        out,
        "sessions   {}   messages {}   prompts {}",
        st.sessions, st.messages, st.prompts
    )?;
    agent_lines(&mut out, &st, 7)?;
    writeln!(
        out,
        "activity   {} active in the last {} min, {} idle (event sent), {} idle awaiting the service",
        activity.active,
        activity.idle_minutes,
        activity.idle_event_sent,
        activity.idle_event_pending
    )?;
    if vst.state == "on" {
        let rows: Vec<String> = vst.rows.iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(
            out,
            "vectors    {} ({} dims): {}; {} waiting; {:.1} MB{}",
            vst.model,
            vst.dimension,
            rows.join(", "),
            vst.backlog,
            vst.disk_bytes as f64 / 1e6,
            if vst.ann_index.is_empty() {
                String::new()
            } else {
                format!("; ANN index on {}", vst.ann_index.join(", "))
            }
        )?;
    } else {
        writeln!(out, "vectors    off; {} rows waiting", vst.backlog)?;
    }
    if let Some(w) = &vst.warning {
        writeln!(out, "  WARNING  {w}")?;
    }
    writeln!(
        out,
        "sources    {} files ({} gone from disk, their {} sessions kept)",
        st.source_files, st.source_files_gone, st.sessions_with_source_gone
    )?;
    for g in &gone {
        writeln!(
            out,
            "  kept     {} {} {} msgs  {}  (was {})",
            short_time(g.updated_at.as_deref()),
            g.agent,
            g.messages,
            g.session_id,
            g.source_path
        )?;
    }
    writeln!(
        out,
        "bad lines  {}   secrets redacted {}",
        st.bad_lines, st.redactions
    )?;
    for c in &cleanup {
        let days = c.days();
        let origin = if c.configured.is_some() {
            format!("cleanupPeriodDays in {}", c.settings.display())
        } else {
            "the default; cleanupPeriodDays is not set".into()
        };
        if days <= 0 {
            writeln!(
                out,
                "warning: Claude Code keeps no transcripts ({origin}); Memex only archives what it reads while `memex serve` runs"
            )?;
        } else if days < 365 {
            writeln!(
                out,
                "warning: Claude Code deletes transcripts older than {days} days ({origin}); Memex keeps every message it has archived, so keep `memex serve` running"
            )?;
        }
    }
    Ok(())
}

pub(super) fn show_config(ctx: &Ctx, json: bool) -> Result<()> {
    let s = &ctx.resolved.settings.for_display();
    // The target `memex sync setup|join` recorded in the data folder, when `[sync] url` is
    // not set (password masked).
    let target = super::sync::configured_url(ctx)?.map(|u| crate::config::without_password(&u));
    if json {
        println!(
            "{}",
            json!({"config_file": ctx.resolved.file, "config_file_exists": ctx.resolved.file_exists, "settings": s,
                   "sync_target": target})
        );
        return Ok(());
    }
    println!(
        "# settings in effect (defaults < {}{} < MEMEX_* < flags)",
        ctx.resolved.file.display(),
        if ctx.resolved.file_exists {
            ""
        } else {
            " (absent)"
        }
    );
    print!("{}", toml::to_string_pretty(s)?);
    if let Some(t) = target.filter(|_| s.sync.url.is_empty()) {
        println!(
            "\n# sync target in effect: {t} (recorded by `memex sync setup` or `join` in {})",
            ctx.resolved
                .settings
                .data_dir()
                .join(crate::service::sync::TARGET_FILE)
                .display()
        );
    }
    let registry = AdapterRegistry::new();
    println!("\n# transcript roots in effect");
    let mut by_agent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (a, r) in s.roots(&registry, &ctx.env) {
        let exists = if r.is_dir() { "" } else { "  (not present)" };
        by_agent
            .entry(a)
            .or_default()
            .push(format!("{}{exists}", r.display()));
    }
    for (a, rs) in by_agent {
        for r in rs {
            println!("# {a:<7} {r}");
        }
    }
    Ok(())
}

pub(super) fn stats(ctx: &Ctx, json: bool) -> Result<()> {
    let conn = reader(ctx)?;
    let archive = read::status(&conn)?;
    let compact = crate::compact::queue::status(&conn)?;
    let inj = crate::inject::stats(&conn)?;
    let mut out = std::io::stdout().lock();
    if json {
        let v = json!({"archive": archive, "compact": compact, "injections": inj});
        writeln!(out, "{v}")?;
        return Ok(());
    }
    writeln!(
        out,
        "archive     {} sessions, {} messages, {} prompts",
        archive.sessions, archive.messages, archive.prompts
    )?;
    agent_lines(&mut out, &archive, 9)?;
    let c = &compact.coverage;
    writeln!(
        out,
        "compaction  L1 {}%  L2 {}%  L3 {}% of prompts / sessions",
        c.l1_percent, c.l2_percent, c.l3_percent
    )?;
    let t = &compact.tokens_saved;
    writeln!(
        out,
        "tokens      summaries hold {} tokens for {} raw ({}x smaller)",
        t.summary_tokens, t.raw_tokens_covered, t.ratio
    )?;
    let mut spent: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for d in &compact.tokens_per_provider_day {
        let e = spent.entry(d.provider.clone()).or_default();
        e.0 += d.tokens_input;
        e.1 += d.tokens_output;
    }
    for (p, (i, o)) in &spent {
        writeln!(out, "  spent     {p}: {i} in / {o} out")?;
    }
    let rate = |r: Option<f64>| r.map_or("-".into(), |r| format!("{:.0}%", r * 100.0));
    writeln!(
        out,
        "injections  {} in all, {} tokens",
        inj.total, inj.tokens_total
    )?;
    writeln!(
        out,
        "  smart     {} prompts, {} with items (hit rate {}), {} skipped, {} tokens",
        inj.smart.calls,
        inj.smart.with_items,
        rate(inj.smart.hit_rate),
        inj.smart.skipped,
        inj.smart.tokens
    )?;
    writeln!(
        out,
        "  full      {} session starts, {} with items, {} tokens",
        inj.full.calls, inj.full.with_items, inj.full.tokens
    )?;
    if let (Some(p50), Some(p95)) = (inj.latency_ms.p50, inj.latency_ms.p95) {
        writeln!(
            out,
            "  latency   p50 {p50:.1} ms, p95 {p95:.1} ms in the service ({} calls)",
            inj.latency_ms.samples
        )?;
    }
    for d in &inj.per_day {
        writeln!(
            out,
            "  {}  {} injections, {} with items, {} tokens",
            d.day, d.injections, d.with_items, d.tokens
        )?;
    }
    Ok(())
}
