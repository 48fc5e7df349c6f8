//! This machine's membership of a team (`memex team`, `memex share`): where the team archive is
//! and this member's token (files in the data folder, readable by their owner only), and one
//! push of what the share levels allow, with the vectors this archive has (`memex-team`). The
//! CLI and the service (`service::team`) both push through [`push_once`].

use std::collections::HashMap;
use std::path::Path;

use memex_team::TeamError;
use memex_team::archive::Team;
use memex_team::share::{self, ConfigRule, Pushed, VectorSource};
use memex_team::token::Token;

use crate::layer::Layer;

/// The team archive's URL, in the data folder.
pub const URL_FILE: &str = "team.url";
/// This member's token, in the data folder.
pub const TOKEN_FILE: &str = "team.token";

/// What the data folder holds of a team this machine can not use, and why.
#[derive(Debug, thiserror::Error)]
pub enum JoinedError {
    #[error("{file} cannot be read: {why}")]
    Token { file: String, why: String },
    #[error("{0}")]
    Url(TeamError),
}

/// The team this machine joined (`None`: it joined none), from the data folder.
pub fn joined(data_dir: &Path) -> Result<Option<(Team, Token)>, JoinedError> {
    let (Ok(url), Ok(token)) = (
        std::fs::read_to_string(data_dir.join(URL_FILE)),
        std::fs::read_to_string(data_dir.join(TOKEN_FILE)).map(zeroize::Zeroizing::new),
    ) else {
        return Ok(None);
    };
    let token = Token::parse(&token).map_err(|e| JoinedError::Token {
        file: data_dir.join(TOKEN_FILE).display().to_string(),
        why: e.to_string(),
    })?;
    let team = Team::new(url.trim()).map_err(JoinedError::Url)?;
    Ok(Some((team, token)))
}

/// The vectors this archive has (its LanceDB folder and the model that made them), for a push.
pub enum Source {
    Lance {
        store: Box<crate::vector::VectorStore>,
        model: String,
        dims: usize,
    },
    None,
}

impl Source {
    /// The archive's vectors, when it has any.
    pub async fn open(data_dir: &Path, conn: &rusqlite::Connection) -> Source {
        match crate::vector::stored_model(conn) {
            Ok(Some((model, dims))) if dims > 0 && crate::vector::dir(data_dir).is_dir() => {
                match crate::vector::VectorStore::open(data_dir, dims).await {
                    Ok(store) => Source::Lance {
                        store: Box::new(store),
                        model,
                        dims,
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "the vectors cannot be opened; rows go to the team without them");
                        Source::None
                    }
                }
            }
            _ => Source::None,
        }
    }
}

impl VectorSource for Source {
    fn model(&self) -> Option<(String, usize)> {
        match self {
            Source::Lance { model, dims, .. } => Some((model.clone(), *dims)),
            Source::None => None,
        }
    }

    async fn vectors(&self, layer: Layer, refs: &[i64]) -> HashMap<i64, Vec<Vec<f32>>> {
        match self {
            Source::Lance { store, .. } => store.vectors_of(layer, refs).await.unwrap_or_else(|e| {
                tracing::warn!(error = %e, "vectors could not be read for the team; rows go without");
                HashMap::new()
            }),
            Source::None => HashMap::new(),
        }
    }
}

/// This machine's name in the team.
pub fn host_name() -> String {
    memex_sync::machine_name().unwrap_or_else(|| "unnamed".to_owned())
}

/// One push: the member the token names, then what the levels allow (and no more).
pub async fn push_once(
    data_dir: &Path,
    conn: &rusqlite::Connection,
    team: &Team,
    token: &Token,
    config: &[ConfigRule],
) -> Result<Pushed, TeamError> {
    let me = team.authenticate(token).await?;
    let vectors = Source::open(data_dir, conn).await;
    share::push(conn, team, &me, &host_name(), config, &vectors).await
}

/// The team this machine joined, for searches (the service and `memex mcp` keep one).
pub struct Joined {
    pub team: Team,
    pub token: Token,
}

impl Joined {
    /// The team of the data folder, if this machine joined one (a problem is logged).
    pub fn of(data_dir: &Path) -> Option<Joined> {
        match joined(data_dir) {
            Ok(Some((team, token))) => Some(Joined { team, token }),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "the team this machine joined cannot be used");
                None
            }
        }
    }
}

/// The query's vector for the team's side: this archive's model, when it made vectors and is
/// loaded (`None`: the team's side is searched by words).
pub fn query_vector(
    vectors: &crate::vector::ForSearch,
    conn: &rusqlite::Connection,
    query: &str,
) -> Option<(String, Vec<f32>)> {
    let v = vectors.vectors.as_ref()?;
    if v.embedder.fallback_reason().is_some() {
        return None;
    }
    let (model, _) = crate::vector::stored_model(conn).ok()??;
    let mut q = v.embedder.embed_queries(&[query.to_owned()]).ok()?;
    Some((model, q.pop()?))
}

/// The team's side of a search (`scope` team or all): the member's projects, at the levels and
/// with the filters asked for, as hits of the local search's shape with `scope` and `member`.
pub async fn search(
    j: &Joined,
    params: &crate::search::SearchParams,
    query_vector: Option<(&str, &[f32])>,
) -> Result<(Vec<serde_json::Value>, Option<String>), TeamError> {
    let me = j.team.authenticate(&j.token).await?;
    search_as(&j.team, &me, params, query_vector).await
}

/// The team's side of a search for member `me` (already authenticated): what
/// [`search`] answers, and the team server's search.
pub async fn search_as(
    team: &Team,
    me: &memex_team::archive::Member,
    params: &crate::search::SearchParams,
    query_vector: Option<(&str, &[f32])>,
) -> Result<(Vec<serde_json::Value>, Option<String>), TeamError> {
    use crate::search::query;
    use memex_team::search::{TeamQuery, TermText};
    let terms = query::parse_query(&params.query);
    let texts: Vec<TermText> = terms
        .iter()
        .map(|t| {
            let prefix = t.fts.ends_with('*');
            let inner = t
                .fts
                .trim_end_matches('*')
                .trim_matches('"')
                .replace("\"\"", "\"");
            if prefix {
                TermText::Prefix(inner)
            } else {
                TermText::Phrase(inner)
            }
        })
        .collect();
    let f = &params.filter;
    let words_only = params.mode == crate::search::Mode::Fts;
    let q = TeamQuery {
        terms: if params.mode == crate::search::Mode::Vector {
            &[]
        } else {
            &texts
        },
        min_terms: (texts.len() / 2).max(1),
        vector: if words_only { None } else { query_vector },
        layers: params.level.layers(),
        limit: params.limit,
        project: f.project.as_deref(),
        member: params.member.as_deref(),
        agent: f.agent.as_deref(),
        since: f.since,
        until: f.until,
    };
    let answer = team.search(me, &q).await?;
    let hits = answer
        .hits
        .iter()
        .map(|h| {
            serde_json::json!({
                "scope": "team",
                "member": h.member,
                "session_id": h.session_id,
                "agent": h.agent,
                "project": h.project,
                "host": h.host,
                "role": h.role,
                "kind": h.kind,
                "prompt_number": h.prompt_number,
                "timestamp": crate::store::read::iso(h.ts),
                "snippet": query::snippet(&h.body, &terms, 240),
                "score": h.score,
                "level": h.layer.name(),
                "match": h.matched,
                "terms": h.terms.iter().filter_map(|n| terms.get(*n).map(|t| t.literal.clone())).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok((hits, answer.notice))
}

/// The answer of a search at scope team or all: the team's hits alone, or this archive's
/// answer (`local`, the JSON of a `SearchResponse`) and the team's fused by rank (RRF). At
/// scope all, a team archive that cannot be searched leaves the local answer with a notice
/// that says why; at scope team it is the error.
pub fn answer(
    params: &crate::search::SearchParams,
    local: Option<serde_json::Value>,
    team: Result<(Vec<serde_json::Value>, Option<String>), TeamError>,
    vectors_used: bool,
) -> Result<serde_json::Value, TeamError> {
    use serde_json::json;
    let scope = params.reach.name();
    let (team_hits, team_notice) = match (team, params.reach) {
        (Ok(t), _) => t,
        (Err(e), crate::search::Reach::All) => (
            Vec::new(),
            Some(format!("the team archive could not be searched: {e}")),
        ),
        (Err(e), _) => return Err(e),
    };
    let mut res = match local {
        None => json!({
            "mode": if vectors_used && params.mode != crate::search::Mode::Fts { "hybrid" } else { "fts" },
            "results": team_hits,
        }),
        Some(mut local) => {
            let mut local_hits = local["results"]
                .as_array_mut()
                .map(std::mem::take)
                .unwrap_or_default();
            for h in &mut local_hits {
                h["scope"] = "local".into();
            }
            let mut all: Vec<(f64, usize, serde_json::Value)> = Vec::new();
            for list in [local_hits, team_hits] {
                for (rank, mut h) in list.into_iter().enumerate() {
                    let score = 1.0 / (crate::search::RRF_K + rank as f64 + 1.0);
                    h["score"] = score.into();
                    all.push((score, all.len(), h));
                }
            }
            // Equal ranks keep the local hit first.
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            all.truncate(params.limit);
            local["results"] = all.into_iter().map(|(_, _, h)| h).collect();
            local
        }
    };
    res["scope"] = scope.into();
    if let Some(n) = team_notice {
        let joined = match res["notice"].as_str() {
            Some(old) => format!("{old}; team: {n}"),
            None => format!("team: {n}"),
        };
        res["notice"] = joined.into();
    }
    Ok(res)
}

/// Why a search at scope team or all failed.
#[derive(Debug, thiserror::Error)]
pub enum ScopedError {
    #[error(
        "this machine is in no team: `scope` team and all read the team archive (memex team join URL --token FILE)"
    )]
    NoTeam,
    #[error(transparent)]
    Local(#[from] crate::search::SearchError),
    #[error("the team archive: {0}")]
    Team(#[from] TeamError),
    #[error("the archive could not be read: {0}")]
    Read(String),
}

/// A search at scope team or all in the service (HTTP, the web pages, MCP): the local side and
/// the query's vector on the blocking pool, the team's side on the runtime.
pub async fn scoped_search(
    pool: crate::store::ReadPool,
    vectors: std::sync::Arc<crate::vector::ForSearch>,
    team: Option<std::sync::Arc<Joined>>,
    params: crate::search::SearchParams,
) -> Result<serde_json::Value, ScopedError> {
    use crate::search::{self, Reach, SearchParams};
    let team = team.ok_or(ScopedError::NoTeam)?;
    let (p, rt) = (params.clone(), tokio::runtime::Handle::current());
    let (local, qv) = tokio::task::spawn_blocking(move || {
        pool.with(|c| -> Result<_, ScopedError> {
            let qv = (p.mode != search::Mode::Fts)
                .then(|| query_vector(&vectors, c, &p.query))
                .flatten();
            let local = if p.reach == Reach::All {
                let mine = SearchParams {
                    reach: Reach::Local,
                    member: None,
                    ..p.clone()
                };
                let r = search::search(c, &search::Semantic::of(&vectors, &rt), &mine)?;
                Some(serde_json::to_value(r).map_err(|e| ScopedError::Read(e.to_string()))?)
            } else {
                None
            };
            Ok((local, qv))
        })
    })
    .await
    .map_err(|e| ScopedError::Read(e.to_string()))?
    .map_err(|e| ScopedError::Read(e.to_string()))??;
    let found = search(
        &team,
        &params,
        qv.as_ref().map(|(m, v)| (m.as_str(), v.as_slice())),
    )
    .await;
    Ok(answer(&params, local, found, qv.is_some())?)
}

/// The layers smart injection looks at in the team archive: what was learned, not raw talk.
const INJECT_LAYERS: [Layer; 3] = [Layer::Talks, Layer::Sessions, Layer::Observations];

/// Smart injection's team items for `prompt`: the team's nearest talk summaries, session
/// summaries and observations by meaning (of the projects this member reads), each with its
/// confidence as this archive's items get theirs; those at `threshold` or above, at most `max`,
/// best first. None when the team's vectors come from another model.
pub async fn inject_items(
    j: &Joined,
    embedder: std::sync::Arc<dyn crate::embed::Embedder>,
    prompt: &str,
    threshold: f64,
    max: usize,
) -> Result<Vec<crate::inject::Item>, TeamError> {
    use memex_team::search::TeamQuery;
    let model = embedder.id().to_owned();
    let text = prompt.to_owned();
    let Some(vector) = tokio::task::spawn_blocking(move || {
        embedder
            .embed_queries(&[text])
            .ok()
            .and_then(|mut v| v.pop())
    })
    .await
    .ok()
    .flatten() else {
        return Ok(Vec::new());
    };
    let me = j.team.authenticate(&j.token).await?;
    let q = TeamQuery {
        vector: Some((&model, &vector)),
        layers: &INJECT_LAYERS,
        limit: (max * 4).max(8),
        ..TeamQuery::default()
    };
    let answer = j.team.search(&me, &q).await?;
    let mut items: Vec<crate::inject::Item> = answer
        .hits
        .into_iter()
        .filter_map(|h| {
            let similarity = h.similarity?;
            let (confidence, words) =
                crate::inject::team_confidence(&model, h.layer, similarity, prompt, &h.body);
            (confidence >= threshold).then(|| crate::inject::Item {
                level: h.layer,
                hint: format!(
                    "memex search --scope team --member {} (session {})",
                    h.member, h.session_id
                ),
                session_id: h.session_id,
                agent: h.agent,
                project: Some(h.project),
                prompt_number: h.prompt_number,
                date: crate::store::read::iso(h.ts),
                confidence: Some(confidence),
                similarity: Some(similarity),
                words,
                summary: h.body,
                member: Some(h.member),
            })
        })
        .collect();
    items.sort_by(|a, b| {
        b.confidence
            .unwrap_or(0.0)
            .total_cmp(&a.confidence.unwrap_or(0.0))
    });
    items.truncate(max);
    Ok(items)
}
