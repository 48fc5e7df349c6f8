//! Search over the archive. One function serves the CLI, HTTP and MCP: per level, a full-text
//! ranking and a vector ranking ([`Semantic`]), fused with Reciprocal Rank Fusion.
//!
//! Full text, every level: FTS5 finds the matching rows, newest first (rowid order, which FTS5
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
use crate::vector::indexer::Vectors;
use crate::vector::{Near, Tbl};

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
    pub mode: Mode,
}

/// Which rankings are fused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Mode {
    /// Full-text and vector results fused with RRF (full text alone when vectors are unavailable).
    #[default]
    Hybrid,
    /// Full-text search (BM25) only.
    Fts,
    /// Vector similarity only.
    Vector,
}

/// What `mode` accepts.
pub const MODES: &[&str] = &["hybrid", "fts", "vector"];

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Mode, String> {
        Ok(match s {
            "hybrid" => Mode::Hybrid,
            "fts" => Mode::Fts,
            "vector" => Mode::Vector,
            other => {
                return Err(format!(
                    "must be one of {}, got `{other}`",
                    MODES.join(", ")
                ));
            }
        })
    }
}

/// The vector side of a search: the layer and a runtime to query LanceDB on, or why there is
/// none.
pub enum Semantic<'a> {
    On {
        vectors: &'a Vectors,
        rt: &'a tokio::runtime::Handle,
    },
    Off(String),
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
    /// Which rankings found it: `fts`, `vector` or `both`.
    #[serde(rename = "match")]
    pub matched: &'static str,
    /// The SQLite row (message or layer row) the hit stands for.
    #[serde(skip)]
    pub row: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchResponse {
    /// `hybrid`, `fts` or `vector`: what actually ranked the results.
    pub mode: &'static str,
    /// Set when the search could not do what was asked (vectors unavailable, a stand-in
    /// embedder), and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
    pub results: Vec<Hit>,
}

/// At most this many words and phrases per query: each costs an index lookup and a pass over
/// the candidates' text, and no question needs more.
pub const MAX_TERMS: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("limit must be between 1 and 1000, got {0}")]
    Limit(usize),
    #[error("the query has {0} words and phrases; at most {MAX_TERMS} are searched at once")]
    TooManyTerms(usize),
    #[error("search failed")]
    Sql(#[from] rusqlite::Error),
    #[error("vector search is unavailable: {0}")]
    NoVectors(String),
    #[error("vector search failed: {0}")]
    Vector(#[from] crate::vector::VectorError),
}

pub fn search(
    conn: &Connection,
    sem: &Semantic<'_>,
    p: &SearchParams,
) -> Result<SearchResponse, SearchError> {
    if p.limit == 0 || p.limit > 1000 {
        return Err(SearchError::Limit(p.limit));
    }
    let terms = fts::parse_query(&p.query);
    if terms.len() > MAX_TERMS {
        return Err(SearchError::TooManyTerms(terms.len()));
    }
    let mut notice = None;
    let vectors = match (p.mode, sem) {
        (Mode::Fts, _) => None,
        (_, Semantic::On { vectors, rt }) => {
            if let Some(w) = vectors.embedder.fallback_reason() {
                notice = Some(w.to_owned());
            } else if let Some(n) = waiting(conn)? {
                notice = Some(format!(
                    "about {n} rows still wait for their vectors; until then they are found by full text only"
                ));
            }
            Some((*vectors, *rt))
        }
        (Mode::Vector, Semantic::Off(why)) => return Err(SearchError::NoVectors(why.clone())),
        (Mode::Hybrid, Semantic::Off(why)) => {
            notice = Some(format!("full-text results only: {why}"));
            None
        }
    };
    let empty = |mode| SearchResponse {
        mode,
        notice: notice.clone(),
        results: vec![],
    };
    if p.query.trim().is_empty() || (terms.is_empty() && vectors.is_none()) {
        return Ok(empty("fts"));
    }
    let Some((vectors, rt)) = vectors else {
        // Full text alone: each level's own ranking (BM25), levels fused with RRF.
        let results = match p.level {
            Level::All => fuse(
                LEVELS_FUSED
                    .iter()
                    .map(|&t| fts_level(conn, p, &terms, t, depth(p.limit)))
                    .collect::<Result<Vec<_>, _>>()?,
                p.limit,
            ),
            level => fts_level(conn, p, &terms, level_tbl(level), p.limit)?,
        };
        return Ok(SearchResponse {
            mode: "fts",
            notice,
            results,
        });
    };
    let query = vectors
        .embedder
        .embed(std::slice::from_ref(&p.query))
        .map_err(|e| SearchError::Vector(e.into()))?
        .pop()
        .unwrap_or_default();
    let tbls: Vec<Tbl> = match p.level {
        Level::All => LEVELS_FUSED.to_vec(),
        level => vec![level_tbl(level)],
    };
    let deep = depth(p.limit);
    // The filter as a LanceDB predicate: the same for every level.
    let filter = lance_filter(conn, &p.filter)?;
    let mut lists = Vec::new();
    for t in tbls {
        if p.mode == Mode::Hybrid && !terms.is_empty() {
            lists.push(fts_level(conn, p, &terms, t, deep)?);
        }
        let v = VectorLevel {
            vectors,
            rt,
            filter: filter.as_deref(),
            query: &query,
        };
        lists.push(v.search(conn, p, t, deep)?);
    }
    let mode = if p.mode == Mode::Vector {
        "vector"
    } else {
        "hybrid"
    };
    Ok(SearchResponse {
        mode,
        notice,
        results: fuse(lists, p.limit),
    })
}

/// Roughly how many rows the indexer has yet to embed (the outbox's id span and the messages
/// above the mark: O(1)).
fn waiting(conn: &Connection) -> rusqlite::Result<Option<i64>> {
    conn.query_row(
        "SELECT NULLIF(COALESCE((SELECT MAX(id) - MIN(id) + 1 FROM vector_outbox), 0)
             + MAX(0, COALESCE((SELECT MAX(id) FROM messages), 0)
                      - (SELECT messages_through FROM vector_progress)), 0)",
        [],
        |r| r.get::<_, Option<i64>>(0),
    )
}

/// The levels `all` fuses.
const LEVELS_FUSED: [Tbl; 4] = [Tbl::Raw, Tbl::Observations, Tbl::Talks, Tbl::Sessions];

/// How deep each ranking is read before fusion.
fn depth(limit: usize) -> usize {
    (limit * 2).clamp(20, 1000)
}

fn level_tbl(level: Level) -> Tbl {
    match level {
        Level::Raw | Level::All => Tbl::Raw,
        Level::Observations => Tbl::Observations,
        Level::Talks => Tbl::Talks,
        Level::Sessions => Tbl::Sessions,
    }
}

fn fts_level(
    conn: &Connection,
    p: &SearchParams,
    terms: &[fts::Term],
    t: Tbl,
    limit: usize,
) -> Result<Vec<Hit>, SearchError> {
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    match t {
        Tbl::Raw => search_raw(conn, p, terms, limit),
        t => search_layer(conn, p, terms, layer(t), limit),
    }
}

/// Reciprocal Rank Fusion: score = Σ 1 / (k + rank) over the rankings a result is in.
fn fuse(lists: Vec<Vec<Hit>>, limit: usize) -> Vec<Hit> {
    if lists.len() == 1 {
        let mut only = lists.into_iter().next().unwrap_or_default();
        only.truncate(limit);
        return only;
    }
    let mut fused: Vec<Hit> = Vec::new();
    let mut index: std::collections::HashMap<(&'static str, i64), usize> = Default::default();
    for list in lists {
        for (rank, h) in list.into_iter().enumerate() {
            let score = 1.0 / (RRF_K + rank as f64 + 1.0);
            match index.get(&(h.level, h.row)) {
                Some(&i) => {
                    let f = &mut fused[i];
                    f.score += score;
                    if f.matched != h.matched {
                        f.matched = "both";
                    }
                    // The full-text snippet shows the words that matched.
                    if h.matched == "fts" {
                        f.snippet = h.snippet;
                    }
                }
                None => {
                    index.insert((h.level, h.row), fused.len());
                    fused.push(Hit { score, ..h });
                }
            }
        }
    }
    fused.sort_by(|a, b| b.score.total_cmp(&a.score));
    fused.truncate(limit);
    fused
}

/// A LanceDB predicate for the filter: the sessions it allows (when it names any) and the
/// time bounds. `None`: no condition; `Some("false")`: nothing can match.
pub(crate) fn lance_filter(conn: &Connection, f: &Filter) -> Result<Option<String>, SearchError> {
    let mut c = Vec::new();
    if f.agent.is_some() || f.project.is_some() || f.session.is_some() {
        let mut args = Vec::new();
        let cond = Filter {
            since: None,
            until: None,
            ..f.clone()
        }
        .sql(None, &mut args);
        let mut st = conn.prepare_cached(&format!(
            "SELECT s.id FROM sessions s WHERE {cond} LIMIT 5001"
        ))?;
        let ids: Vec<i64> = st
            .query_map(params_from_iter(args), |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        if ids.is_empty() {
            return Ok(Some("false".into()));
        }
        // Beyond a few thousand sessions the list costs more than it saves; SQLite checks
        // every hit's filter afterwards either way.
        if ids.len() <= 5000 {
            let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
            c.push(format!("session_pk IN ({})", ids.join(",")));
        }
    }
    if let Some(t) = f.since {
        c.push(format!("ts >= {t}"));
    }
    if let Some(t) = f.until {
        c.push(format!("ts < {t}"));
    }
    Ok((!c.is_empty()).then(|| c.join(" AND ")))
}

/// What the vector side of a search needs at each level.
struct VectorLevel<'a> {
    vectors: &'a Vectors,
    rt: &'a tokio::runtime::Handle,
    /// From [`lance_filter`].
    filter: Option<&'a str>,
    query: &'a [f32],
}

impl VectorLevel<'_> {
    fn search(
        &self,
        conn: &Connection,
        p: &SearchParams,
        t: Tbl,
        limit: usize,
    ) -> Result<Vec<Hit>, SearchError> {
        let (vectors, rt, filter, query) = (self.vectors, self.rt, self.filter, self.query);
        if filter == Some("false") {
            return Ok(Vec::new());
        }
        let mut hits = nearest_rows(conn, vectors, rt, t, query, limit, filter, &p.filter)?;
        for (hit, text) in &mut hits {
            hit.matched = "vector";
            // Found by meaning: the words of the query need not be there to highlight.
            hit.snippet = fts::snippet(text, &[], 200);
        }
        let floor = vectors.settings.min_similarity;
        let mut out: Vec<Hit> = hits
            .into_iter()
            .map(|(h, _)| h)
            .filter(|h| h.score >= floor)
            .collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(out)
    }
}

/// The `limit` vectors of table `t` nearest to `query` (LanceDB prefiltered by `cond`, from
/// [`lance_filter`]), mapped back to their current SQLite rows that pass `filter` (a stale
/// vector finds nothing): hits scored with their cosine similarity, with their text.
#[allow(clippy::too_many_arguments)]
pub(crate) fn nearest_rows(
    conn: &Connection,
    vectors: &Vectors,
    rt: &tokio::runtime::Handle,
    t: Tbl,
    query: &[f32],
    limit: usize,
    cond: Option<&str>,
    filter: &Filter,
) -> Result<Vec<(Hit, String)>, SearchError> {
    let near: Vec<Near> = rt.block_on(vectors.store.nearest(t, query, limit, cond))?;
    let ids: Vec<i64> = near.iter().map(|n| n.ref_id).collect();
    let mut hits = match t {
        Tbl::Raw => raw_rows(conn, &ids, filter)?,
        t => layer_rows(conn, &ids, filter, layer(t))?,
    };
    for (hit, _) in &mut hits {
        let d = near
            .iter()
            .find(|n| n.ref_id == hit.row)
            .map_or(2.0, |n| n.distance);
        hit.score = 1.0 - f64::from(d);
    }
    Ok(hits)
}

/// One compact layer's table, full-text index and columns (the indexer embeds the same text).
pub(crate) struct Layer {
    pub level: &'static str,
    pub kind: &'static str,
    pub table: &'static str,
    pub fts: &'static str,
    pub prompt: &'static str,
    pub ts: &'static str,
    pub text: &'static str,
    /// The `kind` column of its vectors.
    pub vector_kind: &'static str,
}

const OBSERVATIONS: Layer = Layer {
    level: "observations",
    kind: "observation",
    table: "observations",
    fts: "observations_fts",
    prompt: "x.prompt_number",
    ts: "x.ts",
    text: "x.title || ' — ' || x.subtitle || char(10) || x.narrative",
    vector_kind: "x.type",
};
const TALKS: Layer = Layer {
    level: "talks",
    kind: "talk_summary",
    table: "talk_summaries",
    fts: "talk_summaries_fts",
    prompt: "x.prompt_number",
    ts: "x.ts",
    text: "x.user_request || char(10) || x.summary",
    vector_kind: "'talk'",
};
const SESSIONS: Layer = Layer {
    level: "sessions",
    kind: "session_summary",
    table: "session_summaries",
    fts: "session_summaries_fts",
    prompt: "0",
    ts: "x.updated_at",
    text: "x.summary",
    vector_kind: "'session'",
};

/// The compact layer of a vector table (the raw table has none: it is all of `Raw`).
pub(crate) fn layer(t: Tbl) -> &'static Layer {
    match t {
        Tbl::Observations => &OBSERVATIONS,
        Tbl::Talks => &TALKS,
        Tbl::Sessions | Tbl::Raw => &SESSIONS,
    }
}

fn layer_hit(r: &rusqlite::Row<'_>, l: &Layer) -> rusqlite::Result<(Hit, String)> {
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
            score: 0.0,
            level: l.level,
            matched: "fts",
            row: r.get(6)?,
        },
        r.get(5)?,
    ))
}

/// The layer columns [`layer_hit`] reads, in order.
fn layer_columns(l: &Layer) -> String {
    format!(
        "s.session_id, s.agent, COALESCE(s.project_path, s.git_root), {}, {}, {}, x.id",
        l.prompt, l.ts, l.text
    )
}

/// A compact layer: its newest matches, ranked like the raw level (at a million messages the
/// layers hold hundreds of thousands of rows, and FTS5's `bm25()` would scan every match).
fn search_layer(
    conn: &Connection,
    p: &SearchParams,
    terms: &[fts::Term],
    l: &Layer,
    limit: usize,
) -> Result<Vec<Hit>, SearchError> {
    let tx = conn.unchecked_transaction()?;
    let mut args = vec![Sql::Text(fts::match_expr(terms))];
    let cond = p.filter.sql(Some(l.ts), &mut args);
    let ids = newest_matches(
        &tx,
        l.fts,
        &format!(
            "JOIN {table} x ON x.id = {fts}.rowid JOIN sessions s ON s.id = x.session_pk",
            table = l.table,
            fts = l.fts
        ),
        &cond,
        args,
    )?;
    let hits = layer_rows(&tx, &ids, &Filter::default(), l)?;
    bm25_rank(&tx, l.fts, terms, hits, limit)
}

/// Row ids of the newest [`CANDIDATES`] matches of `args[0]` in `fts` that pass `cond`.
fn newest_matches(
    tx: &Connection,
    fts: &str,
    join: &str,
    cond: &str,
    args: Vec<Sql>,
) -> Result<Vec<i64>, SearchError> {
    let sql = format!(
        "SELECT {fts}.rowid FROM {fts} {join}
         WHERE {fts} MATCH ?1 AND {cond}
         ORDER BY {fts}.rowid DESC LIMIT {CANDIDATES}"
    );
    let mut st = tx.prepare_cached(&sql)?;
    let ids = st
        .query_map(params_from_iter(args), |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    Ok(ids)
}

/// Ranks candidates with BM25 (k1 = 1.2, b = 0.75): document frequencies from `fts`, counted up
/// to [`DF_CAP`]; term frequencies and lengths from the candidates' own text. Best first;
/// among equals the newer (candidates arrive newest first, and the sort is stable).
fn bm25_rank(
    tx: &Connection,
    fts: &str,
    terms: &[fts::Term],
    hits: Vec<(Hit, String)>,
    limit: usize,
) -> Result<Vec<Hit>, SearchError> {
    if hits.is_empty() {
        return Ok(Vec::new());
    }
    let total: f64 = tx
        .query_row(&format!("SELECT MAX(rowid) FROM {fts}"), [], |r| {
            r.get::<_, Option<i64>>(0)
        })?
        .unwrap_or(1) as f64;
    let mut df_st = tx.prepare_cached(&format!(
        "SELECT COUNT(*) FROM (SELECT rowid FROM {fts} WHERE {fts} MATCH ?1 LIMIT {DF_CAP})"
    ))?;
    let mut weighted = Vec::with_capacity(terms.len());
    for t in terms {
        let df: f64 = df_st.query_row([&t.fts], |r| r.get::<_, i64>(0))? as f64;
        let idf = ((total - df + 0.5) / (df + 0.5) + 1.0).ln();
        if let Some(re) = t.regex() {
            weighted.push((re, idf));
        }
    }
    // Length in bytes: BM25 only needs lengths relative to the average.
    let avg = hits.iter().map(|h| h.1.len().max(1)).sum::<usize>() as f64 / hits.len() as f64;
    let mut hits = hits;
    for (hit, text) in &mut hits {
        let norm = 1.2 * (0.25 + 0.75 * text.len().max(1) as f64 / avg);
        hit.score = weighted
            .iter()
            .map(|(re, idf)| {
                let tf = re.find_iter(text).count().max(1) as f64;
                idf * tf * 2.2 / (tf + norm)
            })
            .sum();
    }
    hits.sort_by(|a, b| b.0.score.total_cmp(&a.0.score));
    hits.truncate(limit);
    Ok(hits
        .into_iter()
        .map(|(mut hit, text)| {
            hit.snippet = fts::snippet(&text, terms, 200);
            hit
        })
        .collect())
}

/// Layer rows by id, in the order given, that pass the filter.
fn layer_rows(
    conn: &Connection,
    ids: &[i64],
    filter: &Filter,
    l: &Layer,
) -> Result<Vec<(Hit, String)>, SearchError> {
    let mut args = vec![Sql::Null];
    let cond = filter.sql(Some(l.ts), &mut args);
    let mut st = conn.prepare_cached(&format!(
        "SELECT {cols} FROM {table} x JOIN sessions s ON s.id = x.session_pk
         WHERE x.id = ?1 AND {cond}",
        cols = layer_columns(l),
        table = l.table,
    ))?;
    let mut out = Vec::with_capacity(ids.len());
    for &id in ids {
        args[0] = Sql::Integer(id);
        if let Some(hit) = st
            .query_map(params_from_iter(args.iter()), |r| layer_hit(r, l))?
            .next()
        {
            out.push(hit?);
        }
    }
    Ok(out)
}

/// Messages by id, in the order given, that pass the filter, with their text.
fn raw_rows(
    conn: &Connection,
    ids: &[i64],
    filter: &Filter,
) -> Result<Vec<(Hit, String)>, SearchError> {
    let mut args = vec![Sql::Null];
    let cond = filter.sql(Some("m.ts"), &mut args);
    let mut st = conn.prepare_cached(&format!(
        "SELECT s.session_id, m.message_id, s.agent, COALESCE(s.project_path, m.cwd), m.role, m.kind,
                m.prompt_number, m.ts, COALESCE(m.text, memex_unzstd(m.text_z))
         FROM messages m JOIN sessions s ON s.id = m.session_pk
         WHERE m.id = ?1 AND {cond}"
    ))?;
    let mut out = Vec::with_capacity(ids.len());
    for &id in ids {
        args[0] = Sql::Integer(id);
        let mut rows = st.query_map(params_from_iter(args.iter()), |r| {
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
                    matched: "fts",
                    row: id,
                },
                text.unwrap_or_default(),
            ))
        })?;
        if let Some(hit) = rows.next() {
            out.push(hit?);
        }
    }
    Ok(out)
}

/// Raw level: the newest matching messages, ranked here with BM25.
fn search_raw(
    conn: &Connection,
    p: &SearchParams,
    terms: &[fts::Term],
    limit: usize,
) -> Result<Vec<Hit>, SearchError> {
    // One read transaction for the whole search: one snapshot, and one lock instead of one per
    // statement.
    let tx = conn.unchecked_transaction()?;
    let mut args = vec![Sql::Text(fts::match_expr(terms))];
    let cond = p.filter.sql(Some("m.ts"), &mut args);
    let join = if p.filter.is_empty() {
        ""
    } else {
        "JOIN messages m ON m.id = messages_fts.rowid JOIN sessions s ON s.id = m.session_pk"
    };
    let rowids = newest_matches(&tx, "messages_fts", join, &cond, args)?;
    // The candidates already passed the filter.
    let hits = raw_rows(&tx, &rowids, &Filter::default())?;
    bm25_rank(&tx, "messages_fts", terms, hits, limit)
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
