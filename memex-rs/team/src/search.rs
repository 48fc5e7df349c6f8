//! Search of the team archive, for one member: only the projects they may read. Per layer, a
//! full-text ranking (PostgreSQL's `tsvector`, CJK as bigrams as the local archive indexes it)
//! and a vector ranking (pgvector's HNSW, cosine), fused with Reciprocal Rank Fusion as the
//! local search fuses its own.

use std::collections::HashMap;

use memex_store::layer::Layer;
use pgvector::Vector;
use tokio_postgres::types::ToSql;

use crate::TeamError;
use crate::archive::{Member, Team};

/// One word or phrase of a query, as the local search read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TermText {
    /// Words that must follow each other (one word is a phrase of one).
    Phrase(String),
    /// A word's beginning (`auth*`).
    Prefix(String),
}

/// A search of the team archive.
#[derive(Debug, Clone, Default)]
pub struct TeamQuery<'a> {
    pub terms: &'a [TermText],
    /// A row must have at least this many of the terms (the local search's rule).
    pub min_terms: usize,
    /// The query's embedding and the model that made it.
    pub vector: Option<(&'a str, &'a [f32])>,
    pub layers: &'a [Layer],
    pub limit: usize,
    pub project: Option<&'a str>,
    /// A member's name.
    pub member: Option<&'a str>,
    pub agent: Option<&'a str>,
    /// Epoch ms bounds of the row's time.
    pub since: Option<i64>,
    pub until: Option<i64>,
}

/// A row of the team archive a search found.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamHit {
    pub item: i64,
    pub layer: Layer,
    /// The member who shared it.
    pub member: String,
    pub host: String,
    pub agent: String,
    pub session_id: String,
    pub project: String,
    pub title: Option<String>,
    pub role: String,
    pub kind: String,
    pub prompt_number: i64,
    pub ts: Option<i64>,
    /// Its text (at most [`BODY_CHARS`] characters of it).
    pub body: String,
    pub score: f64,
    /// `fts`, `vector` or `both`.
    pub matched: &'static str,
    /// Which of the query's terms it has (their places in [`TeamQuery::terms`]).
    pub terms: Vec<usize>,
    /// Cosine similarity of its nearest chunk to the query's vector, when the vector side
    /// found it.
    pub similarity: Option<f64>,
}

/// What a search answers: its hits, and why vectors took no part when they did not.
#[derive(Debug, Clone, Default)]
pub struct TeamAnswer {
    pub hits: Vec<TeamHit>,
    pub notice: Option<String>,
}

/// At most this much of a hit's text is returned (for its snippet).
pub const BODY_CHARS: i32 = 20_000;

const RRF_K: f64 = 60.0;

/// The SQL of term `n`'s `tsquery`, reading its text from parameter `$p`.
fn term_sql(t: &TermText, p: usize) -> String {
    match t {
        TermText::Phrase(_) => format!("phraseto_tsquery('simple', ${p})"),
        // A quoted lexeme with `:*` matches every word it begins.
        TermText::Prefix(_) => {
            format!("to_tsquery('simple', '''' || replace(${p}, '''', '''''') || ''':*')")
        }
    }
}

fn term_text(t: &TermText) -> &str {
    match t {
        TermText::Phrase(s) | TermText::Prefix(s) => s,
    }
}

/// The filter of a query over items `i`, its parameters appended to `args`: the projects
/// `me` may read (`allowed`), then the query's own filters.
fn filter_sql<'a>(
    allowed: &'a [String],
    q: &'a TeamQuery<'a>,
    args: &mut Vec<Box<dyn ToSql + Sync + Send + 'a>>,
) -> String {
    let mut c = Vec::new();
    args.push(Box::new(allowed.to_vec()));
    c.push(format!("i.project = ANY(${})", args.len()));
    if let Some(p) = q.project {
        args.push(Box::new(p.to_owned()));
        c.push(format!("i.project = ${}", args.len()));
    }
    if let Some(m) = q.member {
        args.push(Box::new(m.to_owned()));
        c.push(format!(
            "i.member_id = (SELECT id FROM memex_team_members WHERE name = ${})",
            args.len()
        ));
    }
    if let Some(a) = q.agent {
        args.push(Box::new(a.to_owned()));
        c.push(format!("i.agent = ${}", args.len()));
    }
    if let Some(t) = q.since {
        args.push(Box::new(t));
        c.push(format!("i.ts >= ${}", args.len()));
    }
    if let Some(t) = q.until {
        args.push(Box::new(t));
        c.push(format!("i.ts < ${}", args.len()));
    }
    c.join(" AND ")
}

/// How many of the newest rows that match a query's words are ranked (as the local search
/// ranks its newest candidates): PostgreSQL finds them by walking the rows newest first for a
/// common word, or through the full-text index for a rare one, and never ranks every match.
const CANDIDATES: i64 = 1000;

impl Team {
    /// The best rows for `q` of the projects `me` may read, at most `q.limit`.
    pub async fn search(&self, me: &Member, q: &TeamQuery<'_>) -> Result<TeamAnswer, TeamError> {
        let info = self.checked().await?;
        if q.limit == 0 || q.limit > 1000 {
            return Err(TeamError::Invalid(format!(
                "limit must be between 1 and 1000, got {}",
                q.limit
            )));
        }
        let depth = (q.limit * 2).clamp(20, 1000) as i64;
        let mut notice = None;
        let vector = match q.vector {
            Some((model, v)) => match (&info.vector_model, info.vector_dims) {
                (Some(m), Some(d)) if m == model && d as usize == v.len() => Some(v),
                (Some(m), Some(d)) => {
                    notice = Some(format!(
                        "the team's vectors were made by {m} ({d} dimensions), this machine's by \
                         {model} ({} dimensions): the team archive is searched by words only",
                        v.len()
                    ));
                    None
                }
                _ => None,
            },
            None => None,
        };
        let mut lists: Vec<Vec<(i64, &'static str)>> = Vec::new();
        let mut nearest: HashMap<i64, f64> = HashMap::new();
        let mut g = self.pg.client().await?;
        let c = g.as_mut().expect("connected");
        let tx = c.transaction().await.map_err(|e| self.sql(&e))?;
        // Filtered nearest-neighbour queries read the HNSW graph on until they have enough.
        if vector.is_some() {
            tx.batch_execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                .await
                .map_err(|e| self.sql(&e))?;
        }
        let allowed: Vec<String> = tx
            .query_one(
                "SELECT COALESCE(array_agg(project), '{}') FROM memex_team_access WHERE member_id = $1",
                &[&me.id],
            )
            .await
            .map_err(|e| self.sql(&e))?
            .get(0);
        for &layer in q.layers {
            if !q.terms.is_empty() {
                let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
                let filter = filter_sql(&allowed, q, &mut args);
                let mut tq = Vec::new();
                for t in q.terms {
                    args.push(Box::new(term_text(t).to_owned()));
                    tq.push(term_sql(t, args.len()));
                }
                // Written out (not a subquery) so that the planner sees the query: for a common
                // word it walks the newest rows, for a rare one it reads the index.
                let any = format!("({})", tq.join(" || "));
                let count: Vec<String> =
                    tq.iter().map(|t| format!("(c.tsv @@ {t})::int")).collect();
                args.push(Box::new(layer.index() as i16));
                let layer_p = args.len();
                args.push(Box::new(q.min_terms.max(1) as i32));
                let min_p = args.len();
                args.push(Box::new(depth));
                let depth_p = args.len();
                let sql = format!(
                    "SELECT c.id FROM (
                         SELECT i.id, i.tsv FROM memex_team_items i
                         WHERE i.tsv @@ {any} AND i.layer = ${layer_p} AND {filter}
                         ORDER BY i.id DESC LIMIT {CANDIDATES}
                     ) c
                     WHERE {} >= ${min_p}
                     ORDER BY ts_rank(c.tsv, {any}, 1) DESC, c.id DESC
                     LIMIT ${depth_p}",
                    count.join(" + ")
                );
                let params: Vec<&(dyn ToSql + Sync)> = args
                    .iter()
                    .map(|a| a.as_ref() as &(dyn ToSql + Sync))
                    .collect();
                let rows = tx.query(&sql, &params).await.map_err(|e| self.sql(&e))?;
                lists.push(rows.iter().map(|r| (r.get(0), "fts")).collect());
            }
            if let Some(v) = vector {
                let mut args: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
                let filter = filter_sql(&allowed, q, &mut args);
                args.push(Box::new(Vector::from(v.to_vec())));
                let v_p = args.len();
                args.push(Box::new(layer.index() as i16));
                let layer_p = args.len();
                args.push(Box::new(depth * 2));
                let depth_p = args.len();
                let sql = format!(
                    "SELECT v.item, (v.embedding <=> ${v_p})::float8 FROM memex_team_vectors v
                     JOIN memex_team_items i ON i.id = v.item
                     WHERE i.layer = ${layer_p} AND {filter}
                     ORDER BY v.embedding <=> ${v_p}
                     LIMIT ${depth_p}"
                );
                let params: Vec<&(dyn ToSql + Sync)> = args
                    .iter()
                    .map(|a| a.as_ref() as &(dyn ToSql + Sync))
                    .collect();
                let rows = tx.query(&sql, &params).await.map_err(|e| self.sql(&e))?;
                let mut seen = std::collections::HashSet::new();
                for r in &rows {
                    let (id, d): (i64, f64) = (r.get(0), r.get(1));
                    let e = nearest.entry(id).or_insert(d);
                    *e = e.min(d);
                }
                let list: Vec<(i64, &'static str)> = rows
                    .iter()
                    .map(|r| r.get::<_, i64>(0))
                    .filter(|id| seen.insert(*id))
                    .take(depth as usize)
                    .map(|id| (id, "vector"))
                    .collect();
                lists.push(list);
            }
        }
        // Reciprocal Rank Fusion over every list.
        let mut fused: HashMap<i64, (f64, &'static str)> = HashMap::new();
        for list in &lists {
            for (rank, (id, side)) in list.iter().enumerate() {
                let e = fused.entry(*id).or_insert((0.0, side));
                e.0 += 1.0 / (RRF_K + rank as f64 + 1.0);
                if e.1 != *side {
                    e.1 = "both";
                }
            }
        }
        let mut order: Vec<(i64, f64, &'static str)> =
            fused.into_iter().map(|(id, (s, m))| (id, s, m)).collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.cmp(&a.0)));
        order.truncate(q.limit);
        if order.is_empty() {
            tx.commit().await.map_err(|e| self.sql(&e))?;
            return Ok(TeamAnswer {
                hits: vec![],
                notice,
            });
        }
        let ids: Vec<i64> = order.iter().map(|o| o.0).collect();
        let mut args: Vec<Box<dyn ToSql + Sync + Send>> = vec![Box::new(ids), Box::new(BODY_CHARS)];
        let mut tq = Vec::new();
        for t in q.terms {
            args.push(Box::new(term_text(t).to_owned()));
            tq.push(format!("i.tsv @@ {}", term_sql(t, args.len())));
        }
        let matched = if tq.is_empty() {
            "ARRAY[]::boolean[]".to_owned()
        } else {
            format!("ARRAY[{}]", tq.join(", "))
        };
        let sql = format!(
            "SELECT i.id, i.layer, m.name, s.host, s.agent, s.session_id, s.project, s.title,
                    i.role, i.kind, i.prompt_number, i.ts, left(i.body, $2), {matched}
             FROM memex_team_items i
             JOIN memex_team_sessions s ON s.id = i.session
             JOIN memex_team_members m ON m.id = s.member_id
             WHERE i.id = ANY($1)"
        );
        let params: Vec<&(dyn ToSql + Sync)> = args
            .iter()
            .map(|a| a.as_ref() as &(dyn ToSql + Sync))
            .collect();
        let rows = tx.query(&sql, &params).await.map_err(|e| self.sql(&e))?;
        tx.commit().await.map_err(|e| self.sql(&e))?;
        let mut by_id: HashMap<i64, tokio_postgres::Row> =
            rows.into_iter().map(|r| (r.get(0), r)).collect();
        let hits = order
            .into_iter()
            .filter_map(|(id, score, side)| {
                let r = by_id.remove(&id)?;
                let terms: Vec<bool> = r.get(13);
                Some(TeamHit {
                    item: id,
                    layer: Layer::ALL[r.get::<_, i16>(1) as usize & 3],
                    member: r.get(2),
                    host: r.get(3),
                    agent: r.get(4),
                    session_id: r.get(5),
                    project: r.get(6),
                    title: r.get(7),
                    role: r.get(8),
                    kind: r.get(9),
                    prompt_number: r.get::<_, i32>(10).into(),
                    ts: r.get(11),
                    body: r.get(12),
                    score,
                    matched: side,
                    terms: terms
                        .iter()
                        .enumerate()
                        .filter_map(|(n, m)| m.then_some(n))
                        .collect(),
                    similarity: nearest.get(&id).map(|d| 1.0 - d),
                })
            })
            .collect();
        Ok(TeamAnswer { hits, notice })
    }
}
