//! `memex search`: full text and meaning, fused, at the level asked for.

use std::io::Write;

use ai_cli_session_collector::AdapterRegistry;
use anyhow::Result;

use super::models::vectors_for_reading;
use super::{Ctx, SearchArgs, check_agent, reader, user_error};
use crate::search;

pub(super) fn search_cmd(ctx: &Ctx, a: SearchArgs) -> Result<()> {
    check_agent(&AdapterRegistry::new(), &a.agent)?;
    let params = search::SearchRequest {
        query: a.query,
        limit: Some(a.limit as u64),
        agent: a.agent,
        project: a.project,
        session: a.session,
        since: a.since,
        until: a.until,
        level: Some(a.level),
        mode: Some(a.mode),
    }
    .check(1000)
    .map_err(|e| {
        let hint = match e.name {
            "limit" => "for example --limit 20",
            "level" => "for example --level talks",
            "mode" => "for example --mode fts",
            "since" | "until" => "for example --since 7d or --since 2026-06-01",
            _ => "see memex search --help",
        };
        user_error(format!("--{} {}", e.name, e.reason), hint)
    })?;
    let mode = params.mode;
    let conn = reader(ctx)?;
    let (rt, vectors) = vectors_for_reading(ctx, &conn, mode != search::Mode::Fts)?;
    let res = search::search(&conn, &search::Semantic::of(&vectors, rt.handle()), &params)
        .map_err(|e| match e {
            search::SearchError::NoVectors(_) => user_error(
                e.to_string(),
                "`memex status` shows the vector layer; --mode fts searches without it",
            ),
            search::SearchError::TooManyTerms(_) => user_error(
                e.to_string(),
                "keep the words that matter; a \"quoted phrase\" counts as one",
            ),
            other => other.into(),
        })?;
    let mut out = std::io::stdout().lock();
    if a.json {
        writeln!(out, "{}", serde_json::to_string(&res)?)?;
        return Ok(());
    }
    if let Some(n) = &res.notice {
        eprintln!("note: {n}");
    }
    if res.results.is_empty() {
        writeln!(out, "no matches")?;
    }
    for h in &res.results {
        writeln!(
            out,
            "{} {} {} #{} {} {}\n    {}",
            h.timestamp.as_deref().unwrap_or("-"),
            h.agent,
            &h.session_id,
            h.prompt_number,
            h.kind,
            h.project.as_deref().unwrap_or(""),
            h.snippet
        )?;
        if !h.terms.is_empty() {
            writeln!(out, "    matched: {}", h.terms.join(", "))?;
        }
    }
    Ok(())
}
