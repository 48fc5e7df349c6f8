//! Search over the archive. One function serves the CLI (and later HTTP and MCP).
//!
//! Raw level (L0): FTS5 with bm25 ranking. bm25 is computed for every row a MATCH visits, so
//! ranking all matches of a common word does not scale to a million messages (PERF-NOTES.md).
//! The query therefore walks matches newest first (rowid order, which FTS5 serves without
//! sorting), stops after [`CANDIDATES`] rows that pass the filters, and ranks those by bm25.
//! Rare terms are ranked exactly; for common terms the best of the most recent matches win,
//! which is what someone asking their agent's memory usually wants.

use rusqlite::{Connection, params_from_iter, types::Value as Sql};
use serde::Serialize;

use crate::store::fts;
use crate::store::read::{Filter, iso};

/// How many newest matching rows are ranked.
pub const CANDIDATES: usize = 2000;

#[derive(Debug, Clone, Default)]
pub struct SearchParams {
    pub query: String,
    pub limit: usize,
    pub filter: Filter,
}

#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub session_id: String,
    pub message_id: String,
    pub agent: String,
    pub project: Option<String>,
    pub role: String,
    pub kind: String,
    pub prompt_number: i64,
    pub timestamp: Option<String>,
    pub snippet: String,
    pub score: f64,
    pub level: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchResponse {
    pub results: Vec<Hit>,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("limit must be between 1 and 1000, got {0}")]
    Limit(usize),
    #[error("search failed")]
    Sql(#[from] rusqlite::Error),
}

pub fn search(conn: &Connection, p: &SearchParams) -> Result<SearchResponse, SearchError> {
    if p.limit == 0 || p.limit > 1000 {
        return Err(SearchError::Limit(p.limit));
    }
    let terms = fts::parse_query(&p.query);
    if terms.is_empty() {
        return Ok(SearchResponse { results: vec![] });
    }
    let mut args = vec![Sql::Text(fts::match_expr(&terms))];
    let cond = p.filter.sql(Some("m.ts"), &mut args);
    let join = if p.filter.is_empty() {
        String::new()
    } else {
        "JOIN messages m ON m.id = messages_fts.rowid JOIN sessions s ON s.id = m.session_pk".into()
    };
    let sql = format!(
        "SELECT messages_fts.rowid, bm25(messages_fts) FROM messages_fts {join}
         WHERE messages_fts MATCH ?1 AND {cond}
         ORDER BY messages_fts.rowid DESC LIMIT {CANDIDATES}"
    );
    let mut st = conn.prepare_cached(&sql)?;
    let mut cands: Vec<(i64, f64)> = st
        .query_map(params_from_iter(args), |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    // bm25: lower is better; ties go to the newer message.
    cands.sort_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
    cands.truncate(p.limit);

    let mut detail = conn.prepare_cached(
        "SELECT s.session_id, m.message_id, s.agent, COALESCE(s.project_path, m.cwd), m.role, m.kind,
                m.prompt_number, m.ts, COALESCE(m.text, memex_unzstd(m.text_z))
         FROM messages m JOIN sessions s ON s.id = m.session_pk WHERE m.id = ?1",
    )?;
    let mut results = Vec::with_capacity(cands.len());
    for (rowid, rank) in cands {
        let hit = detail.query_row([rowid], |r| {
            let text: Option<String> = r.get(8)?;
            Ok(Hit {
                session_id: r.get(0)?,
                message_id: r.get(1)?,
                agent: r.get(2)?,
                project: r.get(3)?,
                role: r.get(4)?,
                kind: r.get(5)?,
                prompt_number: r.get(6)?,
                timestamp: iso(r.get(7)?),
                snippet: fts::snippet(text.as_deref().unwrap_or(""), &terms, 200),
                score: -rank,
                level: "raw",
            })
        })?;
        results.push(hit);
    }
    Ok(SearchResponse { results })
}

/// Parses a time bound: RFC 3339, a date (`2026-06-01`, UTC midnight), or an age (`30m`,
/// `12h`, `7d`, `2w`) counted back from now. Returns epoch milliseconds.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(d.timestamp_millis());
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        return Ok(d.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis());
    }
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: i64 = num.parse().map_err(|_| bad_time(s))?;
    let ms = match unit {
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad_time(s)),
    };
    Ok(chrono::Utc::now().timestamp_millis() - n.saturating_mul(ms))
}

fn bad_time(s: &str) -> String {
    format!(
        "`{s}` is not a time: use RFC 3339 (2026-06-01T09:00:00Z), a date (2026-06-01) or an age (30m, 12h, 7d, 2w)"
    )
}
