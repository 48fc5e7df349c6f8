//! `memex search`: full text and meaning, fused, at the level asked for.

use std::io::Write;

use ai_cli_session_collector::AdapterRegistry;
use anyhow::Result;

use super::models::vectors_for_reading;
use super::{Ctx, SearchArgs, check_agent, filter, reader, user_error};
use crate::search::{self, SearchParams};

pub(super) fn search_cmd(ctx: &Ctx, a: SearchArgs) -> Result<()> {
    check_agent(&AdapterRegistry::new(), &a.agent)?;
    if a.limit == 0 || a.limit > 1000 {
        return Err(user_error(
            format!("--limit must be between 1 and 1000, got {}", a.limit),
            "for example --limit 20",
        ));
    }
    let level: search::Scope = a
        .level
        .parse()
        .map_err(|e: String| user_error(format!("--level {e}"), "for example --level talks"))?;
    let mode: search::Mode = a
        .mode
        .parse()
        .map_err(|e: String| user_error(format!("--mode {e}"), "for example --mode fts"))?;
    let params = SearchParams {
        level,
        mode,
        query: a.query,
        limit: a.limit,
        filter: filter(a.agent, a.project, a.session, a.since, a.until)?,
    };
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
    }
    Ok(())
}
