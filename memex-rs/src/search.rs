//! Search over the archive. One function serves the CLI (and later HTTP and MCP).
//!
//! Raw level (L0): FTS5 finds the matching messages, newest first (rowid order, which FTS5
//! serves lazily, so this costs well under a millisecond even for common words at a million
//! messages), and the newest [`CANDIDATES`] that pass the filters are ranked here with BM25.
//! FTS5's own `bm25()` is not used: before ranking a single row it counts every document that
//! contains each phrase, a scan of the whole doclist that costs 5–30 ms for common words
//! (BENCHMARKS.md). Here a term's document frequency is counted up to [`DF_CAP`] (exact for
//! rare terms, saturated for common ones, which carry little weight either way), and term
//! frequencies and lengths come from the candidates' own text. Rare terms are ranked over all
//! their matches; for common terms the best of the most recent matches win, which is what
//! someone asking their agent's memory usually wants.

use rusqlite::{Connection, params_from_iter, types::Value as Sql};
use serde::Serialize;

use crate::store::fts;
use crate::store::read::{Filter, iso};

/// How many newest matching rows are ranked.
pub const CANDIDATES: usize = 300;

/// Document frequencies are counted up to this many matches.
pub const DF_CAP: usize = 5_000;

#[derive(Debug, Clone, Default)]
pub struct SearchParams {
    pub query: String,
    pub limit: usize,
    pub filter: Filter,
    pub level: Level,
}

/// The level of detail searched.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Level {
    /// Every stored message (L0).
    #[default]
    Raw,
    /// L1 observations.
    Observations,
    /// L2 talk summaries.
    Talks,
    /// L3 session summaries.
    Sessions,
    /// All of them, fused with Reciprocal Rank Fusion.
    All,
}

/// What `level` accepts.
pub const LEVELS: &[&str] = &["raw", "observations", "talks", "sessions", "all"];

impl std::str::FromStr for Level {
    type Err = String;

    fn from_str(s: &str) -> Result<Level, String> {
        Ok(match s {
            "raw" => Level::Raw,
            "observations" => Level::Observations,
            "talks" => Level::Talks,
            "sessions" => Level::Sessions,
            "all" => Level::All,
            other => {
                return Err(format!(
                    "must be one of {}, got `{other}`",
                    LEVELS.join(", ")
                ));
            }
        })
    }
}

/// Reciprocal Rank Fusion constant.
pub const RRF_K: f64 = 60.0;

#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub session_id: String,
    /// The message (raw level only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
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
    let results = match p.level {
        Level::Raw => search_raw(conn, p, &terms)?,
        Level::Observations => search_layer(conn, p, &terms, &OBSERVATIONS, p.limit)?,
        Level::Talks => search_layer(conn, p, &terms, &TALKS, p.limit)?,
        Level::Sessions => search_layer(conn, p, &terms, &SESSIONS, p.limit)?,
        Level::All => {
            // Each level ranked on its own, then fused: score = Σ 1 / (k + rank).
            let deeper = (p.limit * 2).min(1000);
            let lists = [
                search_raw(
                    conn,
                    &SearchParams {
                        limit: deeper,
                        ..p.clone()
                    },
                    &terms,
                )?,
                search_layer(conn, p, &terms, &OBSERVATIONS, deeper)?,
                search_layer(conn, p, &terms, &TALKS, deeper)?,
                search_layer(conn, p, &terms, &SESSIONS, deeper)?,
            ];
            let mut fused: Vec<Hit> = Vec::new();
            for list in lists {
                for (rank, mut h) in list.into_iter().enumerate() {
                    h.score = 1.0 / (RRF_K + rank as f64 + 1.0);
                    fused.push(h);
                }
            }
            fused.sort_by(|a, b| b.score.total_cmp(&a.score));
            fused.truncate(p.limit);
            fused
        }
    };
    Ok(SearchResponse { results })
}

/// One compact layer's table, full-text index and columns.
struct Layer {
    level: &'static str,
    kind: &'static str,
    table: &'static str,
    fts: &'static str,
    prompt: &'static str,
    ts: &'static str,
    text: &'static str,
}

const OBSERVATIONS: Layer = Layer {
    level: "observations",
    kind: "observation",
    table: "observations",
    fts: "observations_fts",
    prompt: "x.prompt_number",
    ts: "x.ts",
    text: "x.title || ' — ' || x.subtitle || char(10) || x.narrative",
};
const TALKS: Layer = Layer {
    level: "talks",
    kind: "talk_summary",
    table: "talk_summaries",
    fts: "talk_summaries_fts",
    prompt: "x.prompt_number",
    ts: "x.ts",
    text: "x.user_request || char(10) || x.summary",
};
const SESSIONS: Layer = Layer {
    level: "sessions",
    kind: "session_summary",
    table: "session_summaries",
    fts: "session_summaries_fts",
    prompt: "0",
    ts: "x.updated_at",
    text: "x.summary",
};

/// A compact layer, ranked by FTS5's BM25 (the layers are small next to the raw messages).
fn search_layer(
    conn: &Connection,
    p: &SearchParams,
    terms: &[fts::Term],
    l: &Layer,
    limit: usize,
) -> Result<Vec<Hit>, SearchError> {
    let mut args = vec![Sql::Text(fts::match_expr(terms))];
    let cond = p.filter.sql(Some(l.ts), &mut args);
    let sql = format!(
        "SELECT s.session_id, s.agent, COALESCE(s.project_path, s.git_root), {prompt}, {ts}, {text},
                bm25({fts})
         FROM {fts} JOIN {table} x ON x.id = {fts}.rowid JOIN sessions s ON s.id = x.session_pk
         WHERE {fts} MATCH ?1 AND {cond}
         ORDER BY bm25({fts}) LIMIT {limit}",
        prompt = l.prompt,
        ts = l.ts,
        text = l.text,
        fts = l.fts,
        table = l.table,
    );
    let mut st = conn.prepare_cached(&sql)?;
    let rows = st.query_map(params_from_iter(args), |r| {
        let text: String = r.get(5)?;
        Ok((
            Hit {
                session_id: r.get(0)?,
                message_id: None,
                agent: r.get(1)?,
                project: r.get(2)?,
                role: "summary".into(),
                kind: l.kind.into(),
                prompt_number: r.get(3)?,
                timestamp: iso(r.get(4)?),
                snippet: String::new(),
                score: -r.get::<_, f64>(6)?,
                level: l.level,
            },
            text,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (mut hit, text) = row?;
        hit.snippet = fts::snippet(&text, terms, 200);
        out.push(hit);
    }
    Ok(out)
}

/// Raw level: the newest matching messages, ranked here with BM25.
fn search_raw(
    conn: &Connection,
    p: &SearchParams,
    terms: &[fts::Term],
) -> Result<Vec<Hit>, SearchError> {
    // One read transaction for the whole search: one snapshot, and one lock instead of one per
    // statement.
    let tx = conn.unchecked_transaction()?;
    let mut args = vec![Sql::Text(fts::match_expr(terms))];
    let cond = p.filter.sql(Some("m.ts"), &mut args);
    let join = if p.filter.is_empty() {
        String::new()
    } else {
        "JOIN messages m ON m.id = messages_fts.rowid JOIN sessions s ON s.id = m.session_pk".into()
    };
    let sql = format!(
        "SELECT messages_fts.rowid FROM messages_fts {join}
         WHERE messages_fts MATCH ?1 AND {cond}
         ORDER BY messages_fts.rowid DESC LIMIT {CANDIDATES}"
    );
    let mut st = tx.prepare_cached(&sql)?;
    let rowids: Vec<i64> = st
        .query_map(params_from_iter(args), |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    if rowids.is_empty() {
        return Ok(Vec::new());
    }

    // BM25 over the candidates (k1 = 1.2, b = 0.75).
    let total: f64 = tx
        .query_row("SELECT MAX(rowid) FROM messages_fts", [], |r| {
            r.get::<_, Option<i64>>(0)
        })?
        .unwrap_or(1) as f64;
    let mut df_st = tx.prepare_cached(&format!(
        "SELECT COUNT(*) FROM (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?1 LIMIT {DF_CAP})"
    ))?;
    let mut weighted = Vec::with_capacity(terms.len());
    for t in terms {
        let df: f64 = df_st.query_row([&t.fts], |r| r.get::<_, i64>(0))? as f64;
        let idf = ((total - df + 0.5) / (df + 0.5) + 1.0).ln();
        if let Some(re) = t.regex() {
            weighted.push((re, idf));
        }
    }
    let mut detail = tx.prepare_cached(
        "SELECT s.session_id, m.message_id, s.agent, COALESCE(s.project_path, m.cwd), m.role, m.kind,
                m.prompt_number, m.ts, COALESCE(m.text, memex_unzstd(m.text_z))
         FROM messages m JOIN sessions s ON s.id = m.session_pk WHERE m.id = ?1",
    )?;
    let mut hits: Vec<(Hit, String, usize)> = Vec::with_capacity(rowids.len());
    for rowid in rowids {
        let hit = detail.query_row([rowid], |r| {
            let text: Option<String> = r.get(8)?;
            Ok((
                Hit {
                    session_id: r.get(0)?,
                    message_id: Some(r.get(1)?),
                    agent: r.get(2)?,
                    project: r.get(3)?,
                    role: r.get(4)?,
                    kind: r.get(5)?,
                    prompt_number: r.get(6)?,
                    timestamp: iso(r.get(7)?),
                    snippet: String::new(),
                    score: 0.0,
                    level: "raw",
                },
                text.unwrap_or_default(),
            ))
        })?;
        // Length in bytes: BM25 only needs lengths relative to the average.
        let len = hit.1.len().max(1);
        hits.push((hit.0, hit.1, len));
    }
    let avg = hits.iter().map(|h| h.2).sum::<usize>() as f64 / hits.len() as f64;
    for (hit, text, len) in &mut hits {
        let norm = 1.2 * (0.25 + 0.75 * *len as f64 / avg);
        hit.score = weighted
            .iter()
            .map(|(re, idf)| {
                let tf = re.find_iter(text).count().max(1) as f64;
                idf * tf * 2.2 / (tf + norm)
            })
            .sum();
    }
    // Best first; among equals the newer message (candidates arrive newest first, and the
    // sort is stable).
    hits.sort_by(|a, b| b.0.score.total_cmp(&a.0.score));
    hits.truncate(p.limit);
    Ok(hits
        .into_iter()
        .map(|(mut hit, text, _)| {
            hit.snippet = fts::snippet(&text, terms, 200);
            hit
        })
        .collect())
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
