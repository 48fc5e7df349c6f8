//! What the queue and the layers look like: `memex compact status`, `/api/compact/status`,
//! the summary view of a session, the day's spend.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use super::now_ms;
use crate::compact::{Observation, Provenance, SessionSummary, TalkSummary};
use crate::layer::Layer;

/// Queue and layer figures for `memex compact status`, `/api/compact/status` and stats.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// Job level (`l1`, `l2`, `l3`) → state → count.
    pub jobs: BTreeMap<String, BTreeMap<String, i64>>,
    /// Pending jobs waiting for a provider (an outage, the budget).
    pub waiting: i64,
    pub last_error: Option<JobError>,
    /// Layer table → rows.
    pub rows: BTreeMap<String, i64>,
    pub coverage: Coverage,
    /// Newest days first, at most 60 rows.
    pub tokens_per_provider_day: Vec<DayUsage>,
    pub tokens_saved: TokensSaved,
    pub counters: BTreeMap<String, i64>,
}

/// The newest job error.
#[derive(Debug, Clone, Serialize)]
pub struct JobError {
    pub level: String,
    pub session_id: String,
    pub prompt_number: i64,
    pub state: String,
    pub error: String,
    pub at: Option<String>,
}

/// How much of the archive the layers cover.
#[derive(Debug, Clone, Serialize)]
pub struct Coverage {
    pub talks_with_observations_processed: i64,
    pub talk_summaries: i64,
    pub prompts: i64,
    pub sessions_with_summary: i64,
    pub sessions_with_prompts: i64,
    pub l1_percent: f64,
    pub l2_percent: f64,
    pub l3_percent: f64,
}

/// One provider's spend on one day.
#[derive(Debug, Clone, Serialize)]
pub struct DayUsage {
    pub day: String,
    pub provider: String,
    pub calls: i64,
    pub tokens_input: i64,
    pub tokens_output: i64,
}

/// Raw tokens the talk summaries stand for, against their own size.
#[derive(Debug, Clone, Serialize)]
pub struct TokensSaved {
    pub raw_tokens_covered: i64,
    pub summary_tokens: i64,
    pub saved: i64,
    pub ratio: f64,
}

pub fn status(conn: &Connection) -> rusqlite::Result<Status> {
    let mut jobs: BTreeMap<String, BTreeMap<String, i64>> = BTreeMap::new();
    for level in Layer::COMPACT.into_iter().filter_map(Layer::job) {
        let e = jobs.entry(level.into()).or_default();
        for s in ["pending", "running", "done", "failed"] {
            e.insert(s.into(), 0);
        }
    }
    {
        let mut st =
            conn.prepare("SELECT level, state, COUNT(*) FROM compact_jobs GROUP BY 1, 2")?;
        for r in st.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })? {
            let (l, s, n) = r?;
            jobs.entry(l).or_default().insert(s, n);
        }
    }
    let waiting = conn.query_row(
        "SELECT COUNT(*) FROM compact_jobs WHERE state = 'pending' AND not_before > ?1",
        [now_ms()],
        |r| r.get(0),
    )?;
    let last_error = conn
        .query_row(
            "SELECT j.level, s.session_id, j.prompt_number, j.state, j.last_error, j.updated_at
             FROM compact_jobs j JOIN sessions s ON s.id = j.session_pk
             WHERE j.last_error IS NOT NULL ORDER BY j.updated_at DESC LIMIT 1",
            [],
            |r| {
                Ok(JobError {
                    level: r.get(0)?,
                    session_id: r.get(1)?,
                    prompt_number: r.get(2)?,
                    state: r.get(3)?,
                    error: r.get(4)?,
                    at: crate::store::read::iso(r.get(5)?),
                })
            },
        )
        .optional()?;
    let one = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0));
    let mut rows = BTreeMap::new();
    for l in Layer::COMPACT {
        let table = l.table();
        rows.insert(
            table.to_owned(),
            one(&format!("SELECT COUNT(*) FROM {table}"))?,
        );
    }
    let prompts = one("SELECT COALESCE(SUM(prompt_count), 0) FROM sessions")?;
    let with_prompts = one("SELECT COUNT(*) FROM sessions WHERE prompt_count > 0")?;
    let l1_done = conn.query_row(
        "SELECT COUNT(*) FROM compact_jobs WHERE level = ?1 AND state = 'done'",
        [Layer::Observations.job()],
        |r| r.get::<_, i64>(0),
    )?;
    let pct = |a: i64, b: i64| {
        if b == 0 {
            0.0
        } else {
            (a as f64 * 1000.0 / b as f64).round() / 10.0
        }
    };
    let coverage = Coverage {
        talks_with_observations_processed: l1_done,
        talk_summaries: rows[Layer::Talks.table()],
        prompts,
        sessions_with_summary: rows[Layer::Sessions.table()],
        sessions_with_prompts: with_prompts,
        l1_percent: pct(l1_done, prompts),
        l2_percent: pct(rows[Layer::Talks.table()], prompts),
        l3_percent: pct(rows[Layer::Sessions.table()], with_prompts),
    };
    let mut tokens = Vec::new();
    {
        let mut st = conn.prepare(
            "SELECT day, provider, calls, tokens_input, tokens_output FROM llm_usage ORDER BY day DESC, provider LIMIT 60",
        )?;
        for r in st.query_map([], |r| {
            Ok(DayUsage {
                day: r.get(0)?,
                provider: r.get(1)?,
                calls: r.get(2)?,
                tokens_input: r.get(3)?,
                tokens_output: r.get(4)?,
            })
        })? {
            tokens.push(r?);
        }
    }
    let raw = one("SELECT COALESCE(SUM(raw_tokens), 0) FROM talk_summaries")?;
    let summary_tokens = one("SELECT COALESCE(SUM(summary_tokens), 0) FROM talk_summaries")?;
    let tokens_saved = TokensSaved {
        raw_tokens_covered: raw,
        summary_tokens,
        saved: (raw - summary_tokens).max(0),
        ratio: if summary_tokens == 0 {
            0.0
        } else {
            (raw as f64 / summary_tokens as f64 * 10.0).round() / 10.0
        },
    };
    let mut counters = BTreeMap::new();
    {
        let mut st = conn.prepare("SELECT name, value FROM compact_counters")?;
        for r in st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))? {
            let (k, v) = r?;
            counters.insert(k, v);
        }
    }
    Ok(Status {
        jobs,
        waiting,
        last_error,
        rows,
        coverage,
        tokens_per_provider_day: tokens,
        tokens_saved,
        counters,
    })
}

/// A session's compact layers as every surface shows them (`memex sessions show --format
/// summary`, `GET /api/sessions/{id}/summary`, MCP `get_session` with `format: summary`, the
/// web page and exports): the session summary (L3), the talk summaries (L2) and the
/// observations (L1), each with who wrote it.
#[derive(Debug, Clone, Serialize)]
pub struct SummaryView {
    pub session_id: String,
    pub session_summary: Option<SessionSummaryView>,
    pub talks: Vec<TalkSummaryView>,
    pub observations: Vec<ObservationView>,
}

impl SummaryView {
    /// Only the talk `prompt` and its observations (the session summary stays).
    pub fn only_talk(&mut self, prompt: i64) {
        self.talks.retain(|t| t.talk.prompt_number == prompt);
        self.observations.retain(|o| o.prompt_number == prompt);
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SessionSummaryView {
    #[serde(flatten)]
    pub summary: SessionSummary,
    pub updated_at: Option<String>,
    #[serde(flatten)]
    pub written_by: Provenance,
}

#[derive(Debug, Clone, Serialize)]
pub struct TalkSummaryView {
    #[serde(flatten)]
    pub talk: TalkSummary,
    pub raw_tokens: i64,
    #[serde(flatten)]
    pub written_by: Provenance,
}

#[derive(Debug, Clone, Serialize)]
pub struct ObservationView {
    pub prompt_number: i64,
    #[serde(flatten)]
    pub observation: Observation,
    #[serde(flatten)]
    pub written_by: Provenance,
}

/// A list column as written by the queue (a JSON array of strings); anything else reads as
/// empty.
fn list(json: String) -> Vec<String> {
    serde_json::from_str(&json).unwrap_or_default()
}

/// The [`Provenance`] columns (provider … fallback_reason) from column `i` on.
fn written_by(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Provenance> {
    Ok(Provenance {
        provider: r.get(i)?,
        model: r.get(i + 1)?,
        prompt_version: r.get(i + 2)?,
        tokens_input: r.get(i + 3)?,
        tokens_output: r.get(i + 4)?,
        confidence: r.get(i + 5)?,
        fallback_reason: r.get(i + 6)?,
    })
}

/// The [`SummaryView`] of session `pk`.
pub fn summary_view(conn: &Connection, pk: i64, session_id: &str) -> rusqlite::Result<SummaryView> {
    let session_summary = conn
        .query_row(
            "SELECT summary, key_points, files_involved, technologies, talks_covered, updated_at,
                    provider, model, prompt_version, tokens_input, tokens_output, confidence, fallback_reason
             FROM session_summaries WHERE session_pk = ?1",
            [pk],
            |r| {
                Ok(SessionSummaryView {
                    summary: SessionSummary {
                        summary: r.get(0)?,
                        key_points: list(r.get(1)?),
                        files_involved: list(r.get(2)?),
                        technologies: list(r.get(3)?),
                        talks_covered: r.get(4)?,
                    },
                    updated_at: crate::store::read::iso(r.get(5)?),
                    written_by: written_by(r, 6)?,
                })
            },
        )
        .optional()?;
    let mut st = conn.prepare(
        "SELECT prompt_number, user_request, summary, completed, files_involved, raw_tokens,
                provider, model, prompt_version, tokens_input, tokens_output, confidence, fallback_reason
         FROM talk_summaries WHERE session_pk = ?1 ORDER BY prompt_number",
    )?;
    let talks = st
        .query_map([pk], |r| {
            Ok(TalkSummaryView {
                talk: TalkSummary {
                    prompt_number: r.get(0)?,
                    user_request: r.get(1)?,
                    summary: r.get(2)?,
                    completed: r.get(3)?,
                    files_involved: list(r.get(4)?),
                },
                raw_tokens: r.get(5)?,
                written_by: written_by(r, 6)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut st = conn.prepare(
        "SELECT prompt_number, first_message_id, last_message_id, tool_name, call_count, type, title,
                subtitle, facts, narrative, files_read, files_modified,
                provider, model, prompt_version, tokens_input, tokens_output, confidence, fallback_reason,
                ts
         FROM observations WHERE session_pk = ?1 ORDER BY prompt_number, id",
    )?;
    let observations = st
        .query_map([pk], |r| {
            Ok(ObservationView {
                prompt_number: r.get(0)?,
                observation: Observation {
                    first_message_id: r.get(1)?,
                    last_message_id: r.get(2)?,
                    tool_name: r.get(3)?,
                    call_count: r.get(4)?,
                    kind: r.get(5)?,
                    title: r.get(6)?,
                    subtitle: r.get(7)?,
                    facts: list(r.get(8)?),
                    narrative: r.get(9)?,
                    files_read: list(r.get(10)?),
                    files_modified: list(r.get(11)?),
                    ts: r.get(19)?,
                },
                written_by: written_by(r, 12)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(SummaryView {
        session_id: session_id.to_owned(),
        session_summary,
        talks,
        observations,
    })
}

/// Tokens (in + out) each provider spent today (UTC), for the budget.
pub fn spend_today(conn: &Connection) -> rusqlite::Result<Vec<(String, u64)>> {
    let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
    let mut st = conn
        .prepare("SELECT provider, tokens_input + tokens_output FROM llm_usage WHERE day = ?1")?;
    st.query_map([day], |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)))?
        .collect()
}

/// Jobs ready to run now.
pub fn ready_count(conn: &Connection) -> rusqlite::Result<u64> {
    conn.query_row(
        "SELECT COUNT(*) FROM compact_jobs WHERE state = 'pending' AND not_before <= ?1",
        [now_ms()],
        |r| r.get::<_, i64>(0),
    )
    .map(|n| n as u64)
}
