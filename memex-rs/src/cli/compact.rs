//! `memex compact`: trigger, one session, status, regenerate (through the running service
//! when there is one, else here).

use std::io::{IsTerminal, Write};

use anyhow::{Context, Result};
use serde_json::json;

use super::{CompactCommand, Ctx, REGENERATE_HINT, UserError, post_service, reader, user_error};
use crate::search;
use crate::store::{self, read};

pub(super) fn compact(ctx: &Ctx, cmd: CompactCommand) -> Result<()> {
    use crate::compact::queue;
    let s = &ctx.resolved.settings;
    let dir = s.data_dir();
    if let CompactCommand::Status { json } = cmd {
        let conn = reader(ctx)?;
        let st = queue::status(&conn)?;
        // The budget as the queue sees it: the chain's providers and today's spend.
        let engine = crate::compact::Engine::new(s.compact.clone());
        engine.load_spend(queue::spend_today(&conn)?);
        let budget = engine.budget_state();
        let mut out = std::io::stdout().lock();
        if json {
            let mut v = serde_json::to_value(&st)?;
            v["chain"] = json!(s.compact.chain());
            v["daily_token_budget"] = json!(s.compact.daily_token_budget);
            v["budget"] = json!(
                budget
                    .iter()
                    .map(|b| {
                        let mut e = serde_json::to_value(b).unwrap_or_default();
                        e["why"] = json!(b.why());
                        e
                    })
                    .collect::<Vec<_>>()
            );
            v["paid_providers"] = json!(engine.paid_providers());
            writeln!(out, "{v}")?;
            return Ok(());
        }
        writeln!(out, "providers  {}", s.compact.chain().join(" → "))?;
        for b in &budget {
            let limit = match (b.paid, b.limit) {
                (false, _) => "local, not counted".to_owned(),
                (true, None) => "paid, no daily limit".to_owned(),
                (true, Some(l)) => format!("paid, daily limit {l}"),
            };
            writeln!(
                out,
                "budget     {:<10} {} tokens today ({limit})",
                b.provider, b.tokens_today
            )?;
            if let Some(why) = b.why() {
                writeln!(out, "  paused: {why}")?;
            }
        }
        for (level, states) in &st.jobs {
            writeln!(
                out,
                "{level}         pending {:>6}  running {:>3}  done {:>7}  failed {:>4}",
                states["pending"], states["running"], states["done"], states["failed"]
            )?;
        }
        if st.waiting > 0 {
            writeln!(out, "waiting    {} jobs wait for a provider", st.waiting)?;
        }
        writeln!(
            out,
            "rows       {} observations, {} talk summaries, {} session summaries",
            st.rows["observations"], st.rows["talk_summaries"], st.rows["session_summaries"]
        )?;
        writeln!(
            out,
            "coverage   L1 {}%  L2 {}%  L3 {}%",
            st.coverage.l1_percent, st.coverage.l2_percent, st.coverage.l3_percent
        )?;
        writeln!(
            out,
            "tokens     saved {} (raw {} → summaries {})",
            st.tokens_saved.saved,
            st.tokens_saved.raw_tokens_covered,
            st.tokens_saved.summary_tokens
        )?;
        for t in st.tokens_per_provider_day.iter().take(7) {
            writeln!(
                out,
                "  {} {:<10} {} calls, {} in / {} out",
                t.day, t.provider, t.calls, t.tokens_input, t.tokens_output
            )?;
        }
        if let Some(e) = &st.last_error {
            writeln!(
                out,
                "last error {} {} #{}: {}",
                e.level, e.session_id, e.prompt_number, e.error
            )?;
        }
        return Ok(());
    }
    // What to queue, checked before anything runs.
    let since = match &cmd {
        CompactCommand::Regenerate { since: Some(t), .. } => Some(
            search::parse_time(t)
                .map_err(|e| user_error(format!("--since: {e}"), "for example --since 7d"))?,
        ),
        _ => None,
    };
    if let CompactCommand::Regenerate { level, .. } = &cmd {
        queue::regenerate_levels(Some(level))
            .map_err(|e| user_error(format!("--level {e}"), "for example --level talks"))?;
    }
    let session_pk = match &cmd {
        CompactCommand::Session { id }
        | CompactCommand::Regenerate {
            session: Some(id), ..
        } => {
            let conn = reader(ctx)?;
            let Some(row) = read::find_session(&conn, id)? else {
                return Err(UserError {
                    message: format!("no session `{id}`"),
                    hint: Some("`memex sessions list` shows session ids".into()),
                    code: 3,
                }
                .into());
            };
            Some((row.pk, row.session_id))
        }
        _ => None,
    };
    if let Some(addr) = store::lock::serving_addr(&dir) {
        // The service owns the archive: hand the work to it.
        let v = match &cmd {
            CompactCommand::Trigger => post_service(ctx, &addr, "/api/compact/trigger", json!({}))?,
            CompactCommand::Session { .. } => post_service(
                ctx,
                &addr,
                &format!(
                    "/api/compact/session/{}",
                    session_pk.as_ref().map_or("", |s| s.1.as_str())
                ),
                json!({}),
            )?,
            CompactCommand::Regenerate {
                level,
                since: t,
                yes,
                ..
            } => post_service(
                ctx,
                &addr,
                "/api/compact/regenerate",
                json!({"level": level, "session": session_pk.as_ref().map(|s| &s.1), "since": t,
                       "confirm": yes}),
            )?,
            CompactCommand::Status { .. } => unreachable!("handled above"),
        };
        println!(
            "queued {} jobs in the running service ({addr}); `memex compact status` follows them",
            v["queued"]
        );
        return Ok(());
    }
    let _lock = store::lock::acquire(&dir, "memex compact")?;
    let (writer, handle) = store::Writer::start(&dir)
        .with_context(|| format!("cannot open the archive in {}", dir.display()))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let c = queue::Compactor::new(
        crate::compact::Engine::new(s.compact.clone()),
        writer.clone(),
        store::ReadPool::new(&dir),
        s.watch.idle_minutes,
    );
    let sw = c.switches;
    let idle_before = c.idle_before();
    let started = std::time::Instant::now();
    // A regeneration is counted and guarded before anything else is written: refused, it
    // leaves the archive as it was.
    let regenerated = match &cmd {
        CompactCommand::Regenerate { level, yes, .. } => {
            let levels = queue::regenerate_levels(Some(level)).unwrap_or_default();
            let pk = session_pk.as_ref().map(|s| s.0);
            let guard = queue::RegenerateGuard::new(&c.engine, *yes);
            let res = runtime.block_on(
                c.writer
                    .run(move |conn| queue::regenerate(conn, &levels, pk, since, &guard)),
            )?;
            match res {
                Err(queue::RegenerateError::Confirmation(e)) => {
                    return Err(UserError {
                        message: e.to_string(),
                        hint: Some(REGENERATE_HINT.into()),
                        code: 2,
                    }
                    .into());
                }
                other => other?,
            }
        }
        _ => 0,
    };
    let ran = runtime.block_on(async {
        c.start().await?;
        let queued = match &cmd {
            CompactCommand::Trigger => {
                c.writer
                    .run(move |conn| queue::plan_pending(conn, sw, idle_before, "cli"))
                    .await??
            }
            CompactCommand::Session { .. } => {
                c.plan(vec![session_pk.as_ref().map_or(0, |s| s.0)], true, "cli")
                    .await
            }
            CompactCommand::Regenerate { .. } => regenerated,
            CompactCommand::Status { .. } => 0,
        };
        let total = c.writer.run(|conn| queue::ready_count(conn)).await??;
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} compacting {pos}/{len} jobs [{bar:30}] eta {eta}",
                )
                .unwrap()
                .progress_chars("=> "),
            );
            b
        });
        let n = c
            .drain(&|n| {
                if let Some(b) = &bar {
                    b.set_position(n);
                }
            })
            .await?;
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        Ok::<_, anyhow::Error>((queued, n))
    })?;
    let status = runtime.block_on(c.writer.run(|conn| queue::status(conn)))??;
    drop(c);
    drop(writer);
    let _ = handle.join();
    println!(
        "queued {} jobs, ran {} in {:.1}s; {} waiting for a provider, {} failed (`memex compact status`)",
        ran.0,
        ran.1,
        started.elapsed().as_secs_f64(),
        status.waiting,
        status.jobs.values().map(|s| s["failed"]).sum::<i64>()
    );
    Ok(())
}
