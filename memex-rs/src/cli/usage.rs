//! `memex usage`: what the agents' model calls cost, by day, week, month, session and 5-hour
//! window; a status line; the price table.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use memex_usage::PriceTable;
use memex_usage::report::{Cost, ModelCost, PeriodRow};
use serde_json::Value;

use super::{Ctx, UserError, reader, user_error};
use crate::usage::{Answer, Pricing, UsageRequest};

#[derive(Debug, Subcommand)]
pub enum UsageCommand {
    /// Tokens and dollars per day, per model.
    Daily(ReportArgs),
    /// Per ISO week (Monday to Sunday).
    Weekly(ReportArgs),
    /// Per calendar month.
    Monthly(ReportArgs),
    /// The most expensive sessions.
    Session(ReportArgs),
    /// The 5-hour billing windows Claude subscriptions count (the active one with its burn
    /// rate and projection).
    Blocks(ReportArgs),
    /// One short line for a shell prompt or Claude Code's status line: this session's cost,
    /// today's, and the active 5-hour window's. Reads Claude Code's status JSON on stdin when
    /// there is one.
    Statusline {
        /// The session to show (default: `session_id` from stdin).
        #[arg(long)]
        session: Option<String>,
        #[arg(long)]
        timezone: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// The price table reports use: where it comes from, and a model's prices.
    Prices {
        #[command(subcommand)]
        command: Option<PricesCommand>,
        /// Show how these models are priced.
        models: Vec<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum PricesCommand {
    /// Replace the shipped table with LiteLLM price files you downloaded
    /// (model_prices_and_context_window.json): the newest first; an older file adds the models
    /// a newer one dropped. Nothing is fetched.
    Refresh {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The day the prices were taken (default: today).
        #[arg(long)]
        date: Option<String>,
        /// Write the table here instead of the data folder.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Go back to the table shipped in this binary.
    Reset,
}

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub req: UsageRequest,
    #[arg(long)]
    pub json: bool,
}

fn pricing(ctx: &Ctx) -> Result<Pricing> {
    Pricing::load(&ctx.resolved.settings).map_err(|e| {
        UserError {
            message: e.to_string(),
            hint: Some(
                "fix or remove `[usage] prices`, or `memex usage prices reset` for the shipped table"
                    .into(),
            ),
            code: 2,
        }
        .into()
    })
}

pub(super) fn usage(ctx: &Ctx, cmd: UsageCommand) -> Result<()> {
    let (report, args) = match cmd {
        UsageCommand::Daily(a) => ("daily", a),
        UsageCommand::Weekly(a) => ("weekly", a),
        UsageCommand::Monthly(a) => ("monthly", a),
        UsageCommand::Session(a) => ("session", a),
        UsageCommand::Blocks(a) => ("blocks", a),
        UsageCommand::Statusline {
            session,
            timezone,
            json,
        } => return statusline(ctx, session, timezone, json),
        UsageCommand::Prices {
            command,
            models,
            json,
        } => return prices(ctx, command, &models, json),
    };
    let pricing = pricing(ctx)?;
    // A bare `--breakdown` (or `--breakdown model`) lists the models under each row; `agent`
    // and `project` list those instead.
    let show_models = args.req.breakdown.as_deref() == Some("model");
    let mut req = args.req;
    req.report = Some(report.into());
    if report == "session" && show_models {
        // The session list's own breakdown: its models under each session.
        req.breakdown = None;
    }
    let plan = req.check(pricing.zone).map_err(|e| {
        user_error(
            format!(
                "--{}{}",
                e.name,
                e.to_string().trim_start_matches(&format!("`{}`", e.name))
            ),
            "`memex usage --help` lists the options",
        )
    })?;
    let conn = reader(ctx)?;
    let answer = crate::usage::run(&conn, &pricing, &plan)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", answer.to_json())?;
        return Ok(());
    }
    match &answer {
        Answer::Periods(r) => {
            let (what, first) = match r.period {
                memex_usage::Period::Daily => ("day", "Date"),
                memex_usage::Period::Weekly => ("week", "Week of"),
                memex_usage::Period::Monthly => ("month", "Month"),
            };
            writeln!(
                out,
                "Usage by {what} ({}), {}",
                r.zone,
                prices_line(&pricing.table)
            )?;
            if r.rows.is_empty() {
                writeln!(out, "no model calls in this range")?;
            } else {
                header(&mut out, first)?;
                for row in &r.rows {
                    period_row(&mut out, row, show_models)?;
                }
                rule(&mut out)?;
                line(&mut out, "Total", &r.totals)?;
                if let Some(ratio) = r.totals.tokens.cache_hit_ratio() {
                    writeln!(
                        out,
                        "cache hits: {:.1} % of prompt tokens were read from cache",
                        ratio * 100.0
                    )?;
                }
            }
            for o in &r.own {
                let cost = o.cost.map_or("unpriced".to_owned(), |c| format!("${c:.2}"));
                writeln!(
                    out,
                    "Memex itself, {} ({}{}): {} calls, {} in, {} out, {cost}",
                    o.period,
                    o.provider,
                    o.model
                        .as_deref()
                        .map(|m| format!(" {m}"))
                        .unwrap_or_default(),
                    o.calls,
                    thousands(o.input_tokens),
                    thousands(o.output_tokens),
                )?;
            }
            let (n, t) = r
                .injected
                .iter()
                .fold((0, 0), |(n, t), i| (n + i.injections, t + i.tokens));
            if n > 0 {
                writeln!(
                    out,
                    "Memex's hooks added {} tokens of memory to {n} prompts (inside the agents' input above)",
                    thousands(t)
                )?;
            }
            unpriced(&mut out, &r.unpriced)?;
        }
        Answer::Sessions {
            sessions, totals, ..
        } => {
            writeln!(
                out,
                "Most expensive sessions ({}), {}",
                plan.scope.zone().name(),
                prices_line(&pricing.table)
            )?;
            if sessions.is_empty() {
                writeln!(out, "no model calls in this range")?;
            }
            for s in sessions {
                let title = s
                    .title
                    .as_deref()
                    .map(|t| crate::compact::heuristic::one_line(t, 50))
                    .unwrap_or_default();
                writeln!(
                    out,
                    "{:>10}  {:<16}  {:<8} {:>13} tok  {}  {}  {title}",
                    s.cost.dollars(),
                    s.last_activity
                        .get(..16)
                        .unwrap_or(&s.last_activity)
                        .replace('T', " "),
                    s.agent,
                    thousands(s.cost.tokens.total_tokens),
                    s.session_id,
                    s.project.as_deref().unwrap_or("-"),
                )?;
                if show_models {
                    for m in &s.model_breakdowns {
                        model_line(&mut out, m)?;
                    }
                }
            }
            writeln!(
                out,
                "{:>10}  every session of the range together ({} most expensive above)",
                totals.dollars(),
                sessions.len()
            )?;
        }
        Answer::Blocks { blocks, zone, .. } => {
            writeln!(
                out,
                "5-hour windows ({zone}), {}",
                prices_line(&pricing.table)
            )?;
            if blocks.is_empty() {
                writeln!(out, "no model calls in this range")?;
            }
            for b in blocks {
                let start = b
                    .start_time
                    .get(..16)
                    .unwrap_or(&b.start_time)
                    .replace('T', " ");
                if b.is_gap {
                    writeln!(
                        out,
                        "{start}  (no calls for {} h)",
                        (b.end_ms - b.start_ms) / 3_600_000
                    )?;
                    continue;
                }
                let mut tail = String::new();
                if b.is_active {
                    tail = format!(
                        "  ACTIVE, {} left, {}/h, projected {}",
                        minutes(b.minutes_left.unwrap_or(0)),
                        b.burn_rate_per_hour
                            .map_or("-".into(), |r| format!("${r:.2}")),
                        b.projected_cost.map_or("-".into(), |r| format!("${r:.2}")),
                    );
                }
                writeln!(
                    out,
                    "{start}  {:>13} tok  {:>10}  {}{tail}",
                    thousands(b.cost.tokens.total_tokens),
                    b.cost.dollars(),
                    b.models_used.join(", "),
                )?;
            }
        }
    }
    Ok(())
}

fn prices_line(t: &PriceTable) -> String {
    let o = &t.origins;
    let base = o
        .first()
        .map(|o| format!("prices of {} ({})", o.date, o.name))
        .unwrap_or_default();
    if o.len() > 1 {
        format!("{base} and {}", o[1].name)
    } else {
        base
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn minutes(m: i64) -> String {
    format!("{}h {:02}m", m / 60, m % 60)
}

fn header(out: &mut impl Write, first: &str) -> std::io::Result<()> {
    writeln!(
        out,
        "{first:<30} {:>13} {:>11} {:>13} {:>15} {:>15} {:>11}",
        "Input", "Output", "Cache write", "Cache read", "Total tokens", "Cost (USD)"
    )?;
    rule(out)
}

fn rule(out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out, "{}", "-".repeat(114))
}

fn line(out: &mut impl Write, label: &str, c: &Cost) -> std::io::Result<()> {
    let t = &c.tokens;
    let agent = c
        .agent_cost
        .map(|a| format!("  (the agents said ${a:.2})"))
        .unwrap_or_default();
    writeln!(
        out,
        "{label:<30} {:>13} {:>11} {:>13} {:>15} {:>15} {:>11}{agent}",
        thousands(t.input_tokens),
        thousands(t.output_tokens),
        thousands(t.cache_creation_tokens),
        thousands(t.cache_read_tokens),
        thousands(t.total_tokens),
        c.dollars(),
    )
}

fn model_line(out: &mut impl Write, m: &ModelCost) -> std::io::Result<()> {
    let name = if m.priced_as.is_none() {
        format!("  {} (unpriced)", m.model_name)
    } else {
        format!("  {}", m.model_name)
    };
    line(out, &name, &m.cost)
}

fn period_row(out: &mut impl Write, r: &PeriodRow, models: bool) -> std::io::Result<()> {
    line(out, &r.label, &r.cost)?;
    if models {
        for m in &r.model_breakdowns {
            model_line(out, m)?;
        }
    }
    for g in r.agents.iter().chain(&r.projects) {
        line(out, &format!("  {}", g.name), &g.cost)?;
    }
    Ok(())
}

fn unpriced(out: &mut impl Write, models: &[String]) -> std::io::Result<()> {
    if !models.is_empty() {
        writeln!(
            out,
            "unpriced (not in the price table; their tokens are counted, their cost is not, `$…+` marks it): {}",
            models.join(", ")
        )?;
        writeln!(
            out,
            "  add them in a file named by `[usage] prices` (LiteLLM's format), or `memex usage prices refresh FILE`"
        )?;
    }
    Ok(())
}

/// What Claude Code hands a status line command on stdin (the fields Memex reads).
#[derive(Default)]
struct Hook {
    session_id: Option<String>,
    model: Option<String>,
}

/// How long the status line waits for its stdin to end (Claude Code writes its JSON and closes
/// it at once); a pipe left open past it is not read.
const STDIN_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// Claude Code's status JSON, when stdin is not a terminal and holds one (at most 1 MiB).
fn read_hook() -> Result<Hook> {
    if std::io::stdin().is_terminal() {
        return Ok(Hook::default());
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let read = std::io::stdin().lock().take(1 << 20).read_to_end(&mut buf);
        let _ = tx.send(read.map(|_| buf));
    });
    let buf = match rx.recv_timeout(STDIN_WAIT) {
        Ok(read) => read?,
        Err(_) => return Ok(Hook::default()),
    };
    if buf.iter().all(u8::is_ascii_whitespace) {
        return Ok(Hook::default());
    }
    let v: Value = serde_json::from_slice(&buf).map_err(|e| {
        user_error(
            format!("stdin is not Claude Code's status JSON: {e}"),
            "pipe nothing, or the JSON Claude Code sends to a statusLine command",
        )
    })?;
    let text = |v: Option<&Value>, max: usize| {
        v.and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= max && !s.chars().any(char::is_control))
            .map(str::to_owned)
    };
    Ok(Hook {
        session_id: text(v.get("session_id"), 256),
        model: text(
            v.get("model")
                .and_then(|m| m.get("display_name").or_else(|| m.get("id"))),
            100,
        ),
    })
}

fn statusline(
    ctx: &Ctx,
    session: Option<String>,
    timezone: Option<String>,
    json: bool,
) -> Result<()> {
    let hook = read_hook()?;
    let pricing = pricing(ctx)?;
    let zone = match timezone {
        Some(z) => memex_usage::Zone::parse(&z)
            .map_err(|e| user_error(format!("--timezone: {e}"), "for example --timezone UTC"))?,
        None => pricing.zone,
    };
    let session = session.or(hook.session_id);
    let conn = reader(ctx)?;
    let st = memex_usage::report::status(
        &conn,
        session.as_deref(),
        &zone,
        &pricing.table,
        chrono::Utc::now().timestamp_millis(),
    )?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(&st)?)?;
        return Ok(());
    }
    let mut parts: Vec<String> = Vec::new();
    if let Some(m) = hook.model {
        parts.push(m);
    }
    if let Some(c) = st.session_cost {
        parts.push(format!("session ${c:.2}"));
    }
    parts.push(format!("today ${:.2}", st.today_cost));
    match (st.block_cost, st.block_minutes_left) {
        (Some(c), Some(left)) => {
            let rate = st
                .burn_rate_per_hour
                .map(|r| format!(", ${r:.2}/h"))
                .unwrap_or_default();
            parts.push(format!("block ${c:.2} ({} left{rate})", minutes(left)));
        }
        _ => parts.push("no active block".into()),
    }
    if st.unpriced_tokens > 0 {
        parts.push(format!("{} tokens unpriced", thousands(st.unpriced_tokens)));
    }
    writeln!(out, "{}", parts.join(" · "))?;
    Ok(())
}

fn prices(ctx: &Ctx, command: Option<PricesCommand>, models: &[String], json: bool) -> Result<()> {
    let dir = ctx.resolved.settings.data_dir();
    let mut out = std::io::stdout().lock();
    match command {
        Some(PricesCommand::Refresh {
            files,
            date,
            out: to,
        }) => {
            let date = match date {
                Some(d) => chrono::NaiveDate::parse_from_str(&d, "%Y-%m-%d")
                    .map_err(|_| {
                        user_error(
                            format!("--date `{d}` is not a day"),
                            "for example --date 2026-12-01",
                        )
                    })?
                    .to_string(),
                None => chrono::Utc::now().format("%Y-%m-%d").to_string(),
            };
            let names: Vec<String> = files
                .iter()
                .map(|f| {
                    f.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
                .collect();
            let refs: Vec<&std::path::Path> = files.iter().map(PathBuf::as_path).collect();
            let text = PriceTable::stored_from(
                &refs,
                &format!("LiteLLM price list ({})", names.join(", ")),
                &date,
            )
            .map_err(|e| {
                user_error(
                    e.to_string(),
                    "give LiteLLM's model_prices_and_context_window.json",
                )
            })?;
            let refreshed = dir.join(memex_usage::prices::REFRESHED);
            let target = to.unwrap_or_else(|| refreshed.clone());
            let in_use = target == refreshed;
            if in_use {
                std::fs::create_dir_all(&dir)?;
                super::write_private(&dir, memex_usage::prices::REFRESHED, &text)?;
            } else {
                std::fs::write(&target, &text)
                    .with_context(|| format!("cannot write {}", target.display()))?;
            }
            let models = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v["models"].as_object().map(|m| m.len()))
                .unwrap_or(0);
            writeln!(
                out,
                "wrote {} ({models} models, prices of {date}){}",
                target.display(),
                if in_use {
                    "; reports use it from now on (`memex usage prices reset` goes back)"
                } else {
                    ""
                }
            )?;
        }
        Some(PricesCommand::Reset) => {
            let p = dir.join(memex_usage::prices::REFRESHED);
            match std::fs::remove_file(&p) {
                Ok(()) => writeln!(
                    out,
                    "removed {}: reports use the shipped table",
                    p.display()
                )?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    writeln!(out, "reports already use the shipped table")?
                }
                Err(e) => return Err(e).with_context(|| format!("cannot remove {}", p.display())),
            }
        }
        None => {
            let pricing = pricing(ctx)?;
            let t = &pricing.table;
            let found: Vec<Value> = models
                .iter()
                .map(|m| match t.lookup(m) {
                    Some((k, p)) => serde_json::json!({"model": m, "pricedAs": k, "perMillion": {
                        "input": p.input * 1e6, "output": p.output * 1e6,
                        "cacheWrite": p.cache_write * 1e6, "cacheRead": p.cache_read * 1e6,
                        "above200k": p.long.map(|l| serde_json::json!({
                            "input": l.input * 1e6, "output": l.output * 1e6,
                            "cacheWrite": l.cache_write * 1e6, "cacheRead": l.cache_read * 1e6})),
                    }}),
                    None => serde_json::json!({"model": m, "pricedAs": null}),
                })
                .collect();
            if json {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({"tables": t.origins, "models": t.len(), "lookups": found})
                )?;
                return Ok(());
            }
            for o in &t.origins {
                writeln!(out, "{}: {} (prices of {})", o.name, o.source, o.date)?;
            }
            writeln!(out, "{} models priced", t.len())?;
            for f in found {
                match f["pricedAs"].as_str() {
                    Some(k) => {
                        let p = &f["perMillion"];
                        writeln!(
                            out,
                            "{} (as {k}): per million tokens ${} input, ${} output, ${} cache write, ${} cache read{}",
                            f["model"].as_str().unwrap_or_default(),
                            p["input"],
                            p["output"],
                            p["cacheWrite"],
                            p["cacheRead"],
                            if p["above200k"].is_null() {
                                String::new()
                            } else {
                                let l = &p["above200k"];
                                format!(
                                    "; past 200k tokens in a call ${} / ${} / ${} / ${}",
                                    l["input"], l["output"], l["cacheWrite"], l["cacheRead"]
                                )
                            }
                        )?;
                    }
                    None => writeln!(
                        out,
                        "{}: not in the table (unpriced); add it with `[usage] prices`",
                        f["model"].as_str().unwrap_or_default()
                    )?,
                }
            }
        }
    }
    Ok(())
}
