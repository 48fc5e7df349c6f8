//! The vector side of retrieval: the filter as a LanceDB predicate, the nearest vectors of a
//! layer mapped back to their current SQLite rows, and the vector-only query that injection
//! asks for.

use rusqlite::{Connection, params_from_iter};

use super::rows::layer_rows;
use super::{Hit, SearchError, SearchParams, query};
use crate::layer::Layer;
use crate::store::read::Filter;
use crate::vector::Near;
use crate::vector::indexer::Vectors;

/// The filter as LanceDB sees it, checked before the nearest neighbours are found.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Prefilter {
    /// No condition.
    All,
    /// No session passes the filter: nothing can match.
    Nothing,
    /// A LanceDB SQL predicate.
    Where(String),
}

impl Prefilter {
    /// The sessions the filter allows (when it names any) and its time bounds.
    pub(super) fn of(conn: &Connection, f: &Filter) -> Result<Prefilter, SearchError> {
        let mut c = Vec::new();
        if f.agent.is_some() || f.project.is_some() || f.session.is_some() || f.host.is_some() {
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
                return Ok(Prefilter::Nothing);
            }
            // Beyond a few thousand sessions the list costs more than it saves; SQLite checks
            // every hit's filter afterwards either way.
            if ids.len() <= 5000 {
                c.push(format!("session_pk IN ({})", join(&ids)));
            }
        }
        if let Some(t) = f.since {
            c.push(format!("ts >= {t}"));
        }
        if let Some(t) = f.until {
            c.push(format!("ts < {t}"));
        }
        Ok(if c.is_empty() {
            Prefilter::All
        } else {
            Prefilter::Where(c.join(" AND "))
        })
    }

    /// The same, also leaving out these sessions.
    fn without(self, sessions: &[i64]) -> Prefilter {
        if sessions.is_empty() {
            return self;
        }
        let not = format!("session_pk NOT IN ({})", join(sessions));
        match self {
            Prefilter::Nothing => Prefilter::Nothing,
            Prefilter::All => Prefilter::Where(not),
            Prefilter::Where(c) => Prefilter::Where(format!("{c} AND {not}")),
        }
    }
}

fn join(ids: &[i64]) -> String {
    ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// What the vector side of a search needs at each layer.
pub(super) struct VectorSide<'a> {
    pub vectors: &'a Vectors,
    pub rt: &'a tokio::runtime::Handle,
    pub prefilter: &'a Prefilter,
    pub query: &'a [f32],
}

impl VectorSide<'_> {
    /// Layer `l`'s nearest rows above the similarity floor, best first.
    pub(super) fn search(
        &self,
        conn: &Connection,
        p: &SearchParams,
        l: Layer,
        limit: usize,
    ) -> Result<Vec<Hit>, SearchError> {
        let mut hits = nearest_rows(
            conn,
            self.vectors,
            self.rt,
            l,
            self.query,
            limit,
            self.prefilter,
            &p.filter,
        )?;
        for (hit, text) in &mut hits {
            hit.matched = "vector";
            // Found by meaning: the words of the query need not be there to highlight.
            hit.snippet = query::snippet(text, &[], 200);
        }
        let floor = self.vectors.settings.similarity_floor();
        let mut out: Vec<Hit> = hits
            .into_iter()
            .map(|(h, _)| h)
            .filter(|h| h.score >= floor)
            .collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(out)
    }
}

/// The `limit` vectors of layer `l` nearest to `query` (LanceDB prefiltered), mapped back to
/// their current SQLite rows that pass `filter` (a stale vector finds nothing): hits scored
/// with their cosine similarity, with their text.
#[allow(clippy::too_many_arguments)]
fn nearest_rows(
    conn: &Connection,
    vectors: &Vectors,
    rt: &tokio::runtime::Handle,
    l: Layer,
    query: &[f32],
    limit: usize,
    prefilter: &Prefilter,
    filter: &Filter,
) -> Result<Vec<(Hit, String)>, SearchError> {
    let cond = match prefilter {
        Prefilter::Nothing => return Ok(Vec::new()),
        Prefilter::All => None,
        Prefilter::Where(c) => Some(c.as_str()),
    };
    let near: Vec<Near> = rt.block_on(vectors.store.nearest(l, query, limit, cond))?;
    let ids: Vec<i64> = near.iter().map(|n| n.ref_id).collect();
    let mut hits = layer_rows(conn, &ids, filter, l)?;
    for (hit, _) in &mut hits {
        let d = near
            .iter()
            .find(|n| n.ref_id == hit.row)
            .map_or(2.0, |n| n.distance);
        hit.score = 1.0 - f64::from(d);
    }
    Ok(hits)
}

/// A hit with its row's whole text.
pub type HitText = (Hit, String);

/// A vector-only question over several layers, as injection asks it.
pub struct Nearby<'a> {
    /// The text whose meaning is searched (embedded here).
    pub text: &'a str,
    pub filter: &'a Filter,
    /// Sessions left out (the one asking, and its forks).
    pub exclude_sessions: &'a [i64],
    pub layers: &'a [Layer],
    pub per_layer: usize,
}

/// For each asked layer, its nearest rows that pass the filter, with their similarity as the
/// score and their text; nothing for an empty text.
pub fn nearby(
    conn: &Connection,
    vectors: &Vectors,
    rt: &tokio::runtime::Handle,
    q: &Nearby<'_>,
) -> Result<Vec<(Layer, Vec<HitText>)>, SearchError> {
    if q.text.is_empty() {
        return Ok(Vec::new());
    }
    let query = vectors
        .embedder
        .embed_queries(&[q.text.to_owned()])
        .map_err(|e| SearchError::Vector(e.into()))?
        .pop()
        .unwrap_or_default();
    let prefilter = Prefilter::of(conn, q.filter)?.without(q.exclude_sessions);
    q.layers
        .iter()
        .map(|&l| {
            let rows = nearest_rows(
                conn,
                vectors,
                rt,
                l,
                &query,
                q.per_layer,
                &prefilter,
                q.filter,
            )?;
            Ok((l, rows))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excluded_sessions_narrow_every_prefilter_but_nothing() {
        let ex = [3, 4];
        assert_eq!(
            Prefilter::All.without(&ex),
            Prefilter::Where("session_pk NOT IN (3,4)".into())
        );
        assert_eq!(
            Prefilter::Where("ts >= 1".into()).without(&ex),
            Prefilter::Where("ts >= 1 AND session_pk NOT IN (3,4)".into())
        );
        assert_eq!(Prefilter::Nothing.without(&ex), Prefilter::Nothing);
        assert_eq!(Prefilter::All.without(&[]), Prefilter::All);
    }
}
