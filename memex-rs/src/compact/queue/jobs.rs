//! A job from claim to output: claiming a session's ready jobs, reading what they need, and
//! running them through the engine.

use std::collections::BTreeMap;

use rusqlite::{Connection, OptionalExtension};
use serde_json::Value;

use super::now_ms;
use crate::compact::heuristic::{self, estimate_tokens};
use crate::compact::{
    Call, Engine, Lang, NotNow, Note, NoteKind, Observation, SessionSummary, Talk, TalkSummary,
    Written, prompt,
};
use crate::layer::Layer;

/// A claimed job.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: i64,
    pub layer: Layer,
    pub session_pk: i64,
    pub prompt_number: i64,
    pub attempts: i64,
}

/// Jobs claimed at once (one session's).
pub(super) const BATCH: usize = 1024;

/// Claims up to `BATCH` ready jobs of the session whose ready job is oldest.
pub fn claim(conn: &Connection) -> rusqlite::Result<Vec<Job>> {
    let now = now_ms();
    // Two indexed steps: the oldest ready job's session (walking pending jobs in id order),
    // then that session's ready jobs.
    let session: Option<i64> = conn
        .prepare_cached(
            "SELECT session_pk FROM compact_jobs INDEXED BY compact_jobs_state
             WHERE state = 'pending' AND not_before <= ?1 ORDER BY id LIMIT 1",
        )?
        .query_row([now], |r| r.get(0))
        .optional()?;
    let Some(session) = session else {
        return Ok(Vec::new());
    };
    // A bounded batch, in talk order, the L3 last: a session with thousands of talks is done
    // in several steps, each reading only its own talks.
    let mut st = conn.prepare_cached(&format!(
        "UPDATE compact_jobs SET state = 'running', updated_at = ?1
         WHERE id IN (SELECT id FROM compact_jobs
                      WHERE session_pk = ?2 AND state = 'pending' AND not_before <= ?1
                      ORDER BY level = '{l3}', prompt_number, id LIMIT {BATCH})
         RETURNING id, level, session_pk, prompt_number, attempts",
        l3 = Layer::Sessions.job().unwrap_or_default(),
    ))?;
    let mut jobs: Vec<Job> = st
        .query_map([now, session], |r| {
            let level: String = r.get(1)?;
            Ok(Job {
                id: r.get(0)?,
                layer: Layer::from_job(&level).ok_or_else(|| {
                    rusqlite::Error::FromSqlConversionFailure(
                        1,
                        rusqlite::types::Type::Text,
                        format!("unknown compaction level `{level}`").into(),
                    )
                })?,
                session_pk: r.get(2)?,
                prompt_number: r.get(3)?,
                attempts: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    jobs.sort_by_key(|j| (j.layer == Layer::Sessions, j.prompt_number, j.layer));
    Ok(jobs)
}

/// A session's talks, read once for all its jobs.
pub struct SessionData {
    pub talks: BTreeMap<i64, Talk>,
    pub lang: Lang,
    pub project: Option<String>,
    /// Taken from another machine by sync (`sessions.host`).
    pub foreign: bool,
}

pub fn load_session(
    conn: &Connection,
    pk: i64,
    prompts: (i64, i64),
) -> rusqlite::Result<SessionData> {
    let (project, foreign): (Option<String>, bool) = conn
        .query_row(
            "SELECT COALESCE(git_root, project_path), host IS NOT NULL FROM sessions
             WHERE id = ?1",
            [pk],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
        .unwrap_or_default();
    let mut st = conn.prepare_cached(
        "SELECT message_id, kind, prompt_number, COALESCE(text, memex_unzstd(text_z), ''),
                tool_name, tool_call_id, tool_input, is_error, ts, role
         FROM messages WHERE session_pk = ?1 AND active = 1 AND duplicate = 0 AND inherited = 0
           AND prompt_number BETWEEN ?2 AND ?3
         ORDER BY id",
    )?;
    let mut talks: BTreeMap<i64, Talk> = BTreeMap::new();
    let mut results: BTreeMap<String, (String, bool)> = BTreeMap::new();
    let mut calls: Vec<(i64, Call, Option<String>)> = Vec::new();
    let rows = st.query_map([pk, prompts.0.max(1), prompts.1], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, i64>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, Option<String>>(5)?,
            r.get::<_, Option<String>>(6)?,
            r.get::<_, bool>(7)?,
            r.get::<_, Option<i64>>(8)?,
            r.get::<_, String>(9)?,
        ))
    })?;
    for row in rows {
        let (id, kind, p, text, tool, call_id, input, is_error, ts, role) = row?;
        let talk = talks.entry(p).or_insert_with(|| Talk {
            prompt_number: p,
            prompt: String::new(),
            assistant_texts: Vec::new(),
            calls: Vec::new(),
            notes: Vec::new(),
            notes_after: 0,
            raw_tokens: 0,
            lang: Lang::En,
            ts,
        });
        talk.raw_tokens += estimate_tokens(&text) + input.as_deref().map_or(0, estimate_tokens);
        match kind.as_str() {
            "user_prompt" if talk.prompt.is_empty() => {
                talk.prompt = text;
                talk.ts = ts.or(talk.ts);
            }
            "assistant_text" if !text.trim().is_empty() => {
                talk.assistant_texts.push(text);
                talk.notes_after = 0;
            }
            "meta" | "compaction_summary" if !text.trim().is_empty() => {
                let kind = match (kind.as_str(), role.as_str()) {
                    ("compaction_summary", _) => NoteKind::Compaction,
                    (_, "user") => NoteKind::User,
                    _ => NoteKind::Program,
                };
                talk.notes.push(Note { kind, text });
                talk.notes_after += 1;
            }
            "tool_call" => {
                let input: Value = input
                    .as_deref()
                    .and_then(|i| serde_json::from_str(i).ok())
                    .unwrap_or(Value::Null);
                calls.push((
                    p,
                    Call {
                        message_id: id,
                        tool_name: tool.unwrap_or_else(|| "tool".into()),
                        input,
                        output: String::new(),
                        is_error: false,
                        ts,
                    },
                    call_id,
                ));
            }
            "tool_result" => {
                if let Some(cid) = call_id {
                    let e = results.entry(cid).or_default();
                    e.0.push_str(&text);
                    e.1 |= is_error;
                }
            }
            _ => {}
        }
    }
    for (p, mut call, call_id) in calls {
        if let Some((out, err)) = call_id.and_then(|c| results.remove(&c)) {
            call.output = out;
            call.is_error = err;
        }
        if let Some(t) = talks.get_mut(&p) {
            t.calls.push(call);
        }
    }
    // The session's language, from its first prompts (whatever talks this batch holds).
    let sample: Vec<String> = conn
        .prepare_cached(
            "SELECT substr(COALESCE(text, memex_unzstd(text_z), ''), 1, 400) FROM messages
             WHERE session_pk = ?1 AND kind = 'user_prompt' ORDER BY id LIMIT 20",
        )?
        .query_map([pk], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let lang = heuristic::detect_lang(&sample.join("\n"));
    for t in talks.values_mut() {
        t.lang = lang;
    }
    Ok(SessionData {
        talks,
        lang,
        project,
        foreign,
    })
}

/// The L2s of a session, in order.
pub fn talk_summaries(conn: &Connection, pk: i64) -> rusqlite::Result<Vec<(TalkSummary, i64)>> {
    let mut st = conn.prepare_cached(
        "SELECT prompt_number, user_request, summary, completed, files_involved, raw_tokens
         FROM talk_summaries WHERE session_pk = ?1 ORDER BY prompt_number",
    )?;
    st.query_map([pk], |r| {
        let files: String = r.get(4)?;
        Ok((
            TalkSummary {
                prompt_number: r.get(0)?,
                user_request: r.get(1)?,
                summary: r.get(2)?,
                completed: r.get(3)?,
                files_involved: serde_json::from_str(&files).unwrap_or_default(),
            },
            r.get(5)?,
        ))
    })?
    .collect()
}

/// What one job produced.
pub enum Output {
    L1(Vec<Written<Observation>>),
    L2 {
        written: Written<TalkSummary>,
        raw_tokens: u64,
        ts: Option<i64>,
    },
    L3 {
        written: Written<SessionSummary>,
        raw_tokens: u64,
    },
    /// Nothing to write (a talk without content, a session without L2s).
    Nothing,
}

/// Runs one job.
pub async fn execute(
    engine: &Engine,
    job: &Job,
    data: &SessionData,
    l2s: impl FnOnce() -> rusqlite::Result<Vec<(TalkSummary, i64)>>,
) -> Result<Output, NotNow> {
    match job.layer {
        Layer::Observations => {
            let Some(talk) = data.talks.get(&job.prompt_number) else {
                return Ok(Output::Nothing);
            };
            let mut out = Vec::new();
            for group in heuristic::group_calls(&talk.calls, &engine.settings.l1) {
                let base = heuristic::observation(&group, talk);
                let w = engine
                    .write(
                        base,
                        prompt::l1_system,
                        || prompt::l1_user(talk, &group),
                        prompt::l1_schema(),
                        talk.lang,
                        prompt::parse_l1,
                    )
                    .await?;
                out.push(w);
            }
            Ok(Output::L1(out))
        }
        Layer::Talks => {
            let Some(talk) = data.talks.get(&job.prompt_number) else {
                return Ok(Output::Nothing);
            };
            if talk.prompt.is_empty() && talk.assistant_texts.is_empty() && talk.calls.is_empty() {
                return Ok(Output::Nothing);
            }
            let base = heuristic::talk_summary(talk);
            let written = engine
                .write(
                    base,
                    prompt::l2_system,
                    || prompt::l2_user(talk),
                    prompt::l2_schema(),
                    talk.lang,
                    prompt::parse_l2,
                )
                .await?;
            Ok(Output::L2 {
                written,
                raw_tokens: talk.raw_tokens,
                ts: talk.ts,
            })
        }
        Layer::Raw => Ok(Output::Nothing),
        Layer::Sessions => {
            let l2s = l2s().map_err(|e| NotNow {
                outage: false,
                reason: format!("cannot read the talk summaries: {e}"),
                retry_after: None,
            })?;
            if l2s.is_empty() {
                return Ok(Output::Nothing);
            }
            let sizes: Vec<u64> = l2s.iter().map(|(_, t)| (*t).max(0) as u64).collect();
            let raw_tokens = sizes.iter().sum();
            let talks: Vec<TalkSummary> = l2s.into_iter().map(|(t, _)| t).collect();
            let base =
                heuristic::session_summary(&talks, &sizes, data.lang, data.project.as_deref());
            let written = engine
                .write(
                    base,
                    prompt::l3_system,
                    || prompt::l3_user(&talks, data.project.as_deref()),
                    prompt::l3_schema(),
                    data.lang,
                    prompt::parse_l3,
                )
                .await?;
            Ok(Output::L3 {
                written,
                raw_tokens,
            })
        }
    }
}
