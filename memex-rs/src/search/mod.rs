//! Search over the archive. One function serves the CLI, HTTP and MCP: per level, a full-text
//! ranking and a vector ranking ([`Semantic`]), fused with Reciprocal Rank Fusion.
//!
//! Full text, every level: FTS5 finds the matching rows, newest first (rowid order, which FTS5
//! serves lazily, so this costs well under a millisecond even for common words at a million
//! messages), and the newest [`CANDIDATES`] that pass the filters are ranked here with BM25,
//! together with the [`champions`] of the query's common words: their best rows over all
//! their matches, which the service keeps. A one-word query without filters whose lists are
//! made ranks only its matches since the lists' mark, the rows of its rare spellings and the
//! champions (the best older rows by FTS5's BM25, which orders rows much as the ranking here
//! does), so it reads 64 rows per common spelling, and the few since their mark, where it read
//! 300. FTS5's own `bm25()` is not used at query time: before ranking a single row it counts
//! every document that contains each phrase, a scan of the whole doclist that costs 5–30 ms
//! for common words (BENCHMARKS.md). Here a term's document frequency comes from its champion
//! list, or is counted up to [`DF_CAP`] (exact for rare terms, saturated for common ones whose
//! list is not made yet). Term frequencies and lengths (in tokens) of the query's own matches
//! come from the index as FTS5 finds each row ([`crate::store::fts_hits`]), so a search reads
//! the text of the few rows it returns only; champions and partial matches are counted in
//! their text.
//!
//! The parts: [`query`] reads what a user typed, `rank` ranks full-text matches and fuses
//! rankings, [`champions`] keeps common words' best rows, `nearest` asks the vector tables
//! (also for injection: [`nearby`]), `rows` reads every hit back from SQLite.

pub mod champions;
mod nearest;
mod params;
pub mod query;
mod rank;
mod rows;

use rusqlite::Connection;
use serde::Serialize;

pub use self::nearest::{HitText, Nearby, nearby};
use self::nearest::{Prefilter, VectorSide};
pub use self::params::{
    BadParam, MAX_QUERY_BYTES, QUERY_NAMES, SearchRequest, check_agent, check_host, limit_of,
};
use self::rank::{fts_layer, fuse};
use crate::layer::{Layer, UnknownName};
use crate::store::read::Filter;
use crate::vector::indexer::Vectors;

/// How many newest matching rows are ranked.
pub const CANDIDATES: usize = 300;

/// Document frequencies are counted up to this many matches.
pub const DF_CAP: usize = 5_000;

#[derive(Debug, Clone, Default)]
pub struct SearchParams {
    pub query: String,
    pub limit: usize,
    pub filter: Filter,
    pub level: Scope,
    pub mode: Mode,
    /// Whose memory: this archive, the team's, or both (the team's side is `crate::team`).
    pub reach: Reach,
    /// Only what this team member shared (team and all).
    pub member: Option<String>,
}

/// Whose memory a search reads (`scope` at the wire).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Reach {
    /// This archive.
    #[default]
    Local,
    /// What the team shared with this member.
    Team,
    /// Both, fused by rank.
    All,
}

/// What `scope` accepts.
pub const SCOPES: &[&str] = &["local", "team", "all"];

impl Reach {
    pub const fn name(self) -> &'static str {
        match self {
            Reach::Local => "local",
            Reach::Team => "team",
            Reach::All => "all",
        }
    }
}

impl std::str::FromStr for Reach {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Reach, UnknownName> {
        Ok(match s {
            "local" => Reach::Local,
            "team" => Reach::Team,
            "all" => Reach::All,
            other => return Err(UnknownName::new(other, SCOPES.iter().copied())),
        })
    }
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
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Mode, UnknownName> {
        Ok(match s {
            "hybrid" => Mode::Hybrid,
            "fts" => Mode::Fts,
            "vector" => Mode::Vector,
            other => return Err(UnknownName::new(other, MODES.iter().copied())),
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

impl<'a> Semantic<'a> {
    /// The vector side the open vector layer allows.
    pub fn of(v: &'a crate::vector::ForSearch, rt: &'a tokio::runtime::Handle) -> Semantic<'a> {
        match &v.vectors {
            Some(vectors) => Semantic::On { vectors, rt },
            None => Semantic::Off(v.off.clone()),
        }
    }
}

/// The layers searched: one, or all of them fused with Reciprocal Rank Fusion (`level` at the
/// wire: a layer's name or `all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    One(Layer),
    All,
}

impl Default for Scope {
    fn default() -> Scope {
        Scope::One(Layer::Raw)
    }
}

impl Scope {
    pub fn layers(self) -> &'static [Layer] {
        match self {
            Scope::One(l) => &Layer::ALL[l.index()..=l.index()],
            Scope::All => &Layer::ALL,
        }
    }
}

impl std::str::FromStr for Scope {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Scope, UnknownName> {
        if s == "all" {
            return Ok(Scope::All);
        }
        s.parse::<Layer>()
            .map(Scope::One)
            .map_err(|_| UnknownName::new(s, LEVELS.iter().copied()))
    }
}

/// What `level` accepts: a layer's name or `all`.
pub const LEVELS: &[&str] = &[
    Layer::Raw.name(),
    Layer::Observations.name(),
    Layer::Talks.name(),
    Layer::Sessions.name(),
    "all",
];

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
    /// The machine that archived it (with sync), by name; absent: this one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
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
    /// The query's words and phrases this row has (full text; a row need not have them all).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub terms: Vec<String>,
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
    // What the user typed is limited; what it expands to (CJK words as their bigrams) is
    // bounded too, to the first of them, so that a long Chinese question is not refused.
    let typed = p.query.split_whitespace().count();
    if typed > MAX_TERMS {
        return Err(SearchError::TooManyTerms(typed));
    }
    let mut terms = query::parse_query(&p.query);
    terms.truncate(2 * MAX_TERMS);
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
    let layers = p.level.layers();
    let Some((vectors, rt)) = vectors else {
        // Full text alone: each layer's own ranking (BM25), layers fused with RRF.
        let results = match layers {
            [only] => fts_layer(conn, p, &terms, *only, p.limit)?,
            _ => fuse(
                layers
                    .iter()
                    .map(|&l| fts_layer(conn, p, &terms, l, depth(p.limit)))
                    .collect::<Result<Vec<_>, _>>()?,
                p.limit,
                terms.len(),
            ),
        };
        notice = join_notice(notice, words_notice(conn, p, &terms, &results)?);
        return Ok(SearchResponse {
            mode: "fts",
            notice,
            results,
        });
    };
    let deep = depth(p.limit);
    let words = p.mode == Mode::Hybrid && !terms.is_empty();
    // The query is embedded on a thread of its own while the words side runs and the vector
    // tables open: in a process that searches once, the embedding includes loading the model.
    // The thread keeps the caller's runtime context, in which a remote embedder sends its
    // request (the service's connection pool, not a runtime of its own per query).
    let context = tokio::runtime::Handle::try_current().ok();
    let (query, words_lists) = std::thread::scope(|s| {
        let embedding = s.spawn(|| {
            let _entered = context.as_ref().map(tokio::runtime::Handle::enter);
            vectors
                .embedder
                .embed_queries(std::slice::from_ref(&p.query))
        });
        let words_lists = if words {
            layers
                .iter()
                .map(|&l| fts_layer(conn, p, &terms, l, deep))
                .collect::<Result<Vec<_>, _>>()
        } else {
            Ok(Vec::new())
        };
        rt.block_on(vectors.store.open_tables(layers));
        let query = embedding
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (query, words_lists)
    });
    let query = query
        .map_err(|e| SearchError::Vector(e.into()))?
        .pop()
        .unwrap_or_default();
    // The filter as a LanceDB predicate: the same for every layer.
    let prefilter = Prefilter::of(conn, &p.filter)?;
    let side = VectorSide {
        vectors,
        rt,
        prefilter: &prefilter,
        query: &query,
    };
    let mut words_lists = words_lists?.into_iter();
    let mut lists = Vec::new();
    for &l in layers {
        lists.extend(words_lists.next());
        lists.push(side.search(conn, p, l, deep)?);
    }
    let mode = if p.mode == Mode::Vector {
        "vector"
    } else {
        "hybrid"
    };
    let results = fuse(lists, p.limit, terms.len());
    if p.mode == Mode::Hybrid {
        notice = join_notice(notice, words_notice(conn, p, &terms, &results)?);
    } else if results.is_empty() {
        notice = join_notice(notice, filtered_out(conn, p, &terms)?);
    }
    Ok(SearchResponse {
        mode,
        notice,
        results,
    })
}

fn join_notice(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{b}; {a}")),
        (a, b) => a.or(b),
    }
}

/// What an answer of the words side means, when it needs saying: filters that removed
/// everything, else a partial or scattered match.
fn words_notice(
    conn: &Connection,
    p: &SearchParams,
    terms: &[query::Term],
    results: &[Hit],
) -> rusqlite::Result<Option<String>> {
    if results.is_empty()
        && let Some(n) = filtered_out(conn, p, terms)?
    {
        return Ok(Some(n));
    }
    partial_only(conn, p, terms, results)
}

/// When words found results but no result has every word, says so, and names the words that
/// are nowhere in the layers searched: "nothing has all of it" and "this word never came up"
/// are answers too. When the words found nothing although some are in the archive, says that
/// they are there only apart (a row needs at least half of them to be an answer).
fn partial_only(
    conn: &Connection,
    p: &SearchParams,
    terms: &[query::Term],
    results: &[Hit],
) -> rusqlite::Result<Option<String>> {
    let worded: Vec<&Hit> = results.iter().filter(|h| !h.terms.is_empty()).collect();
    if terms.len() < 2 || worded.iter().any(|h| h.terms.len() >= terms.len()) {
        return Ok(None);
    }
    let mut found = Vec::new();
    let mut absent = Vec::new();
    for t in terms {
        let mut here = false;
        // The messages hold every word any layer was written from.
        for l in std::iter::once(&Layer::Raw).chain(p.level.layers()) {
            let fts = l.fts_table();
            here |= conn.query_row(
                &format!("SELECT EXISTS (SELECT 1 FROM {fts} WHERE {fts} MATCH ?1)"),
                [t.expr()],
                |r| r.get::<_, bool>(0),
            )?;
            if here {
                break;
            }
        }
        let named = format!("`{}`", t.literal);
        if here {
            found.push(named);
        } else {
            absent.push(named);
        }
    }
    let mut n = if !worded.is_empty() {
        "no result has every word of the query; these have some (each names its words)".to_owned()
    } else if !found.is_empty() && p.filter.is_empty() {
        format!(
            "no row has at least {} of the {} words of the query together; in the archive apart: {}",
            rank::least_terms(terms.len()),
            terms.len(),
            found.join(", ")
        )
    } else if found.is_empty() && p.filter.is_empty() {
        // An empty answer is clear, but not why: no word of the question ever came up.
        return Ok(Some(format!(
            "no word of the query is in the archive: {}",
            absent.join(", ")
        )));
    } else {
        return Ok(None);
    };
    if !absent.is_empty() {
        n.push_str(&format!("; nowhere in the archive: {}", absent.join(", ")));
    }
    Ok(Some(n))
}

/// When a filtered search found nothing and the filters are why, says so: an empty answer
/// must not read as "this never came up". Either no session passes the filters at all (an
/// unknown project, an agent never used here), or the words are in the archive outside them.
fn filtered_out(
    conn: &Connection,
    p: &SearchParams,
    terms: &[query::Term],
) -> rusqlite::Result<Option<String>> {
    use rusqlite::params_from_iter;
    let f = &p.filter;
    if f.is_empty() {
        return Ok(None);
    }
    let mut named = Vec::new();
    if let Some(a) = &f.agent {
        named.push(format!("agent `{a}`"));
    }
    if let Some(pr) = &f.project {
        named.push(format!("project `{pr}`"));
    }
    if let Some(s) = &f.session {
        named.push(format!("session `{s}`"));
    }
    if let Some(h) = &f.host {
        named.push(format!(
            "machine `{h}` (`memex hosts` lists them: a name, an id or an id's first 6 \
             characters or more)"
        ));
    }
    if !named.is_empty() {
        let mut args = Vec::new();
        let sessions_only = Filter {
            since: None,
            until: None,
            ..f.clone()
        };
        let cond = sessions_only.sql(None, &mut args);
        let any: bool = conn.query_row(
            &format!("SELECT EXISTS (SELECT 1 FROM sessions s WHERE {cond})"),
            params_from_iter(args),
            |r| r.get(0),
        )?;
        if !any {
            return Ok(Some(format!(
                "the archive holds no session of {}",
                named.join(" and ")
            )));
        }
    }
    if terms.is_empty() {
        return Ok(None);
    }
    let expr = query::match_any(terms);
    for l in p.level.layers() {
        let fts = l.fts_table();
        let found: bool = conn.query_row(
            &format!("SELECT EXISTS (SELECT 1 FROM {fts} WHERE {fts} MATCH ?1)"),
            [&expr],
            |r| r.get(0),
        )?;
        if found {
            let mut all = named;
            if f.since.is_some() || f.until.is_some() {
                all.push("the time range".to_owned());
            }
            return Ok(Some(format!(
                "nothing matched within {}; the archive has matches outside them: widen or drop a filter",
                all.join(" and ")
            )));
        }
    }
    Ok(None)
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

/// How deep each ranking is read before fusion.
fn depth(limit: usize) -> usize {
    (limit * 2).clamp(20, 1000)
}

/// Parses a time bound: RFC 3339, a date (`2026-06-01`, UTC midnight), or an age (`30m`,
/// `12h`, `7d`, `2w`) counted back from now. Returns epoch milliseconds.
pub fn parse_time(s: &str) -> Result<i64, BadTime> {
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

/// A time bound that is none of the forms [`parse_time`] reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is not a time: use RFC 3339 (2026-06-01T09:00:00Z), a date (2026-06-01) or an age (30m, 12h, 7d, 2w)"
)]
pub struct BadTime(pub String);

fn bad_time(s: &str) -> BadTime {
    BadTime(s.to_owned())
}
