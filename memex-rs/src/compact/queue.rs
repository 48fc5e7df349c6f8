//! The persistent compact queue and its workers.
//!
//! - **Planning** turns session progress into jobs: a talk is complete when the next prompt has
//!   started (or, on `final`, when the session went idle, stopped, or someone asked); its L1 and
//!   L2 jobs are queued once, guarded by the per-session cursor `last_processed_prompt`; a final
//!   plan also queues the L3 job.
//! - **Jobs** live in `compact_jobs` (one row per level, session and prompt). A worker claims
//!   every ready job of one session at once (so the session's messages are read once), runs them
//!   L1 → L2 → L3, and commits each job's rows, FTS entries, token spend and `done` state in one
//!   transaction: a crash re-runs at most the jobs in flight, and never records one twice.
//! - **Failures**: an outage (every provider unavailable, the budget spent) puts the job back
//!   to wait without using an attempt; any other error uses one, with exponential backoff, and
//!   after `max_attempts` the job is `failed` with its reason.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use super::heuristic::{self, estimate_tokens};
use super::{
    Call, Engine, Lang, NotNow, Observation, Provenance, Redacted, SessionSummary, Switches, Talk,
    TalkSummary, Written, prompt,
};
use crate::layer::Layer;
use crate::store::{ReadPool, Writer, fts};

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Queues one job unless the same key is already pending or running; a done or failed key is
/// queued again only with `again` (regeneration, a newer L3). The raw layer has no jobs.
fn enqueue(
    tx: &Connection,
    layer: Layer,
    pk: i64,
    prompt: i64,
    reason: &str,
    again: bool,
) -> rusqlite::Result<usize> {
    let Some(level) = layer.job() else {
        return Ok(0);
    };
    let now = now_ms();
    let sql = if again {
        "INSERT INTO compact_jobs (level, session_pk, prompt_number, regenerate, state, reason, created_at, updated_at)
         VALUES (?1, ?2, ?3, 1, 'pending', ?4, ?5, ?5)
         ON CONFLICT (level, session_pk, prompt_number) DO UPDATE SET
           state = 'pending', regenerate = 1, attempts = 0, not_before = 0, last_error = NULL,
           reason = excluded.reason, updated_at = excluded.updated_at
         WHERE compact_jobs.state IN ('done', 'failed')"
    } else {
        "INSERT INTO compact_jobs (level, session_pk, prompt_number, state, reason, created_at, updated_at)
         VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?5)
         ON CONFLICT (level, session_pk, prompt_number) DO NOTHING"
    };
    tx.execute(sql, params![level, pk, prompt, reason, now])
}

/// Queues the work a session's progress made possible. `final_` treats its last talk as
/// complete and asks for (or refreshes) its L3. Returns the jobs queued.
pub fn plan(
    conn: &Connection,
    pk: i64,
    final_: bool,
    reason: &str,
    sw: Switches,
) -> rusqlite::Result<usize> {
    if !sw.any() {
        return Ok(0);
    }
    let Some((done, prompts)): Option<(i64, i64)> = conn
        .query_row(
            "SELECT last_processed_prompt, prompt_count FROM sessions WHERE id = ?1",
            [pk],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?
    else {
        return Ok(0);
    };
    let complete_to = if final_ { prompts } else { prompts - 1 };
    let mut n = 0;
    for p in (done + 1)..=complete_to {
        if sw.l1 {
            n += enqueue(conn, Layer::Observations, pk, p, reason, false)?;
        }
        if sw.l2 {
            n += enqueue(conn, Layer::Talks, pk, p, reason, false)?;
        }
    }
    if complete_to > done {
        conn.execute(
            "UPDATE sessions SET last_processed_prompt = ?2 WHERE id = ?1",
            params![pk, complete_to],
        )?;
    }
    if final_ && sw.l3 && prompts > 0 {
        // (Re)build the L3 unless it already covers every talk.
        let covered: Option<i64> = conn
            .query_row(
                "SELECT talks_covered FROM session_summaries WHERE session_pk = ?1",
                [pk],
                |r| r.get(0),
            )
            .optional()?;
        if covered.is_none_or(|c| c < prompts) {
            n += enqueue(conn, Layer::Sessions, pk, 0, reason, true)?;
            n += enqueue(conn, Layer::Sessions, pk, 0, reason, false)?;
        }
    }
    Ok(n)
}

/// Plans every session whose complete talks were never planned, or which is idle (its idle
/// event was sent, or its newest message is older than `idle_before`, epoch ms) without all its
/// talks or its L3. Returns the jobs queued.
pub fn plan_pending(
    conn: &Connection,
    sw: Switches,
    idle_before: i64,
    reason: &str,
) -> rusqlite::Result<usize> {
    if !sw.any() {
        return Ok(0);
    }
    let rows: Vec<(i64, bool)> = {
        let mut st = conn.prepare(
            "SELECT id, idle FROM (
               SELECT s.id, s.prompt_count, s.last_processed_prompt,
                      COALESCE(s.idle_event_at >= s.updated_at OR s.updated_at < ?1, 0) AS idle
               FROM sessions s WHERE s.prompt_count > 0) t
             WHERE last_processed_prompt < prompt_count - 1
               OR (idle AND (last_processed_prompt < prompt_count OR NOT EXISTS (
                    SELECT 1 FROM session_summaries x
                    WHERE x.session_pk = t.id AND x.talks_covered >= t.prompt_count)))",
        )?;
        st.query_map([idle_before], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    let mut planned = 0;
    for (pk, idle) in rows {
        planned += plan(conn, pk, idle, reason, sw)?;
    }
    // Asked for now: jobs waiting for a provider are tried again at once.
    conn.execute(
        "UPDATE compact_jobs SET not_before = 0 WHERE state = 'pending' AND not_before > 0",
        [],
    )?;
    Ok(planned)
}

/// At start-up: jobs left running by a crash are pending again, and what was missed while the
/// service was down is planned ([`plan_pending`]).
pub fn converge(
    conn: &mut Connection,
    sw: Switches,
    idle_before: i64,
) -> rusqlite::Result<(usize, usize)> {
    let tx = conn.transaction()?;
    let reset = tx.execute(
        "UPDATE compact_jobs SET state = 'pending', updated_at = ?1 WHERE state = 'running'",
        [now_ms()],
    )?;
    let planned = plan_pending(&tx, sw, idle_before, "start-up")?;
    tx.commit()?;
    Ok((reset, planned))
}

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
const BATCH: usize = 1024;

/// Claims up to [`BATCH`] ready jobs of the session whose ready job is oldest.
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
                      ORDER BY level = 'l3', prompt_number, id LIMIT {BATCH})
         RETURNING id, level, session_pk, prompt_number, attempts"
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
}

pub fn load_session(
    conn: &Connection,
    pk: i64,
    prompts: (i64, i64),
) -> rusqlite::Result<SessionData> {
    let project: Option<String> = conn
        .query_row(
            "SELECT COALESCE(git_root, project_path) FROM sessions WHERE id = ?1",
            [pk],
            |r| r.get(0),
        )
        .optional()?
        .flatten();
    let mut st = conn.prepare_cached(
        "SELECT message_id, kind, prompt_number, COALESCE(text, memex_unzstd(text_z), ''),
                tool_name, tool_call_id, tool_input, is_error, ts
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
        ))
    })?;
    for row in rows {
        let (id, kind, p, text, tool, call_id, input, is_error, ts) = row?;
        let talk = talks.entry(p).or_insert_with(|| Talk {
            prompt_number: p,
            prompt: String::new(),
            assistant_texts: Vec::new(),
            calls: Vec::new(),
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
            "assistant_text" if !text.trim().is_empty() => talk.assistant_texts.push(text),
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
            let raw_tokens = l2s.iter().map(|(_, t)| *t as u64).sum();
            let talks: Vec<TalkSummary> = l2s.into_iter().map(|(t, _)| t).collect();
            let base = heuristic::session_summary(&talks, data.lang, data.project.as_deref());
            let written = engine
                .write(
                    base,
                    prompt::l3_system,
                    || prompt::l3_user(&talks, data.project.as_deref()),
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

fn bump(tx: &Transaction<'_>, name: &str, by: i64) -> rusqlite::Result<()> {
    if by != 0 {
        tx.execute(
            "INSERT INTO compact_counters (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
            params![name, by],
        )?;
    }
    Ok(())
}

fn account<T>(tx: &Transaction<'_>, w: &Written<T>) -> rusqlite::Result<()> {
    let day = chrono::Utc::now().format("%Y-%m-%d").to_string();
    for s in &w.spend {
        tx.execute(
            "INSERT INTO llm_usage (day, provider, calls, tokens_input, tokens_output) VALUES (?1, ?2, 1, ?3, ?4)
             ON CONFLICT (day, provider) DO UPDATE SET calls = calls + 1,
               tokens_input = tokens_input + excluded.tokens_input,
               tokens_output = tokens_output + excluded.tokens_output",
            params![day, s.provider, s.tokens_input as i64, s.tokens_output as i64],
        )?;
    }
    let heuristic = w.provenance.provider == "heuristic";
    bump(
        tx,
        if heuristic {
            "rows_heuristic"
        } else {
            "rows_llm"
        },
        1,
    )?;
    bump(
        tx,
        "rows_fallback",
        i64::from(w.provenance.fallback_reason.is_some()),
    )?;
    bump(tx, "malformed_outputs", i64::from(w.malformed))
}

fn prov_params(p: &Provenance) -> [rusqlite::types::Value; 7] {
    use rusqlite::types::Value as V;
    [
        V::Text(p.provider.clone()),
        p.model.clone().map_or(V::Null, V::Text),
        V::Text(p.prompt_version.clone()),
        V::Integer(p.tokens_input as i64),
        V::Integer(p.tokens_output as i64),
        V::Real(p.confidence),
        p.fallback_reason.clone().map_or(V::Null, V::Text),
    ]
}

fn index(tx: &Transaction<'_>, table: &str, rowid: i64, body: &str) -> rusqlite::Result<()> {
    tx.execute(
        &format!("INSERT INTO {table} (rowid, body) VALUES (?1, ?2)"),
        params![rowid, fts::index_text(body, 1 << 20)],
    )?;
    Ok(())
}

fn unindex(
    tx: &Transaction<'_>,
    table: &str,
    fts_table: &str,
    cond: &str,
    args: &[i64],
) -> rusqlite::Result<()> {
    let ids: Vec<i64> = {
        let mut st = tx.prepare(&format!("SELECT id FROM {table} WHERE {cond}"))?;
        st.query_map(rusqlite::params_from_iter(args), |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    for id in ids {
        tx.execute(&format!("DELETE FROM {fts_table} WHERE rowid = ?1"), [id])?;
    }
    tx.execute(
        &format!("DELETE FROM {table} WHERE {cond}"),
        rusqlite::params_from_iter(args),
    )?;
    Ok(())
}

fn list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

/// Writes a job's rows and marks it done, in one transaction. A newer L2 refreshes an L3 built
/// before it.
pub fn commit(conn: &mut Connection, job: &Job, out: &Output) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    let now = now_ms();
    let pk = job.session_pk;
    // `memex forget` may have removed what this job read while it ran: it then puts the job
    // back (or deletes it with its session), and the result is thrown away.
    let live: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM compact_jobs WHERE id = ?1 AND state = 'running')",
        [job.id],
        |r| r.get(0),
    )?;
    if !live {
        return tx.commit();
    }
    match out {
        Output::L1(obs) => {
            unindex(
                &tx,
                "observations",
                "observations_fts",
                "session_pk = ?1 AND prompt_number = ?2",
                &[pk, job.prompt_number],
            )?;
            for w in obs {
                let o = &w.value.redacted();
                let p = prov_params(&w.provenance);
                tx.execute(
                    "INSERT INTO observations (session_pk, prompt_number, first_message_id, last_message_id,
                       tool_name, call_count, type, title, subtitle, facts, narrative, files_read,
                       files_modified, ts, provider, model, prompt_version, tokens_input, tokens_output,
                       confidence, fallback_reason, created_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                       ?18, ?19, ?20, ?21, ?22)",
                    params![
                        pk, job.prompt_number, o.first_message_id, o.last_message_id, o.tool_name,
                        o.call_count, o.kind, o.title, o.subtitle, list(&o.facts), o.narrative,
                        list(&o.files_read), list(&o.files_modified), o.ts, p[0], p[1], p[2], p[3],
                        p[4], p[5], p[6], now
                    ],
                )?;
                let body = format!(
                    "{}\n{}\n{}\n{}\n{} {}",
                    o.title,
                    o.subtitle,
                    o.narrative,
                    o.facts.join("\n"),
                    o.files_modified.join(" "),
                    o.files_read.join(" ")
                );
                index(&tx, "observations_fts", tx.last_insert_rowid(), &body)?;
                account(&tx, w)?;
            }
        }
        Output::L2 {
            written: w,
            raw_tokens,
            ts,
        } => {
            let t = &w.value.redacted();
            let p = prov_params(&w.provenance);
            unindex(
                &tx,
                "talk_summaries",
                "talk_summaries_fts",
                "session_pk = ?1 AND prompt_number = ?2",
                &[pk, job.prompt_number],
            )?;
            tx.execute(
                "INSERT INTO talk_summaries (session_pk, prompt_number, user_request, summary, completed,
                   files_involved, raw_tokens, summary_tokens, ts, provider, model, prompt_version,
                   tokens_input, tokens_output, confidence, fallback_reason, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
                params![
                    pk, job.prompt_number, t.user_request, t.summary, t.completed,
                    list(&t.files_involved), *raw_tokens as i64,
                    (estimate_tokens(&t.user_request) + estimate_tokens(&t.summary)
                        + estimate_tokens(&t.completed)) as i64,
                    ts, p[0], p[1], p[2], p[3], p[4], p[5], p[6], now
                ],
            )?;
            let body = format!(
                "{}\n{}\n{}\n{}",
                t.user_request,
                t.summary,
                t.completed,
                t.files_involved.join(" ")
            );
            index(&tx, "talk_summaries_fts", tx.last_insert_rowid(), &body)?;
            account(&tx, w)?;
            let covered: Option<i64> = tx
                .query_row(
                    "SELECT talks_covered FROM session_summaries WHERE session_pk = ?1",
                    [pk],
                    |r| r.get(0),
                )
                .optional()?;
            if covered.is_some_and(|c| c < job.prompt_number) {
                enqueue(&tx, Layer::Sessions, pk, 0, "newer talk summary", true)?;
            }
        }
        Output::L3 {
            written: w,
            raw_tokens,
        } => {
            let s = &w.value.redacted();
            let p = prov_params(&w.provenance);
            let created: Option<i64> = tx
                .query_row(
                    "SELECT created_at FROM session_summaries WHERE session_pk = ?1",
                    [pk],
                    |r| r.get(0),
                )
                .optional()?;
            unindex(
                &tx,
                "session_summaries",
                "session_summaries_fts",
                "session_pk = ?1",
                &[pk],
            )?;
            tx.execute(
                "INSERT INTO session_summaries (session_pk, summary, key_points, files_involved,
                   technologies, talks_covered, raw_tokens, provider, model, prompt_version,
                   tokens_input, tokens_output, confidence, fallback_reason, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
                params![
                    pk,
                    s.summary,
                    list(&s.key_points),
                    list(&s.files_involved),
                    list(&s.technologies),
                    s.talks_covered,
                    *raw_tokens as i64,
                    p[0],
                    p[1],
                    p[2],
                    p[3],
                    p[4],
                    p[5],
                    p[6],
                    created.unwrap_or(now),
                    now
                ],
            )?;
            let body = format!(
                "{}\n{}\n{}\n{}",
                s.summary,
                s.key_points.join("\n"),
                s.technologies.join(" "),
                s.files_involved.join(" ")
            );
            index(&tx, "session_summaries_fts", tx.last_insert_rowid(), &body)?;
            account(&tx, w)?;
        }
        Output::Nothing => {}
    }
    tx.execute(
        "UPDATE compact_jobs SET state = 'done', attempts = attempts + 1, last_error = NULL,
           regenerate = 0, updated_at = ?2 WHERE id = ?1",
        params![job.id, now],
    )?;
    tx.commit()
}

/// Puts a job back after a failure: an outage waits without using an attempt; anything else
/// uses one, and the last one fails the job for good.
pub fn defer(
    conn: &Connection,
    job: &Job,
    err: &NotNow,
    max_attempts: u32,
) -> rusqlite::Result<()> {
    let now = now_ms();
    if err.outage {
        let wait = err
            .retry_after
            .unwrap_or(Duration::from_secs(30))
            .clamp(Duration::from_secs(1), Duration::from_secs(600));
        conn.execute(
            "UPDATE compact_jobs SET state = 'pending', not_before = ?2, last_error = ?3, updated_at = ?4
             WHERE id = ?1",
            params![job.id, now + wait.as_millis() as i64, format!("waiting: {}", err.reason), now],
        )?;
        return Ok(());
    }
    let attempts = job.attempts + 1;
    if attempts >= i64::from(max_attempts) {
        conn.execute(
            "UPDATE compact_jobs SET state = 'failed', attempts = ?2, last_error = ?3, updated_at = ?4 WHERE id = ?1",
            params![job.id, attempts, err.reason, now],
        )?;
    } else {
        let wait = crate::llm::http::backoff(attempts as u32 + 2).min(Duration::from_secs(600));
        conn.execute(
            "UPDATE compact_jobs SET state = 'pending', attempts = ?2, not_before = ?3, last_error = ?4,
               updated_at = ?5 WHERE id = ?1",
            params![job.id, attempts, now + wait.as_millis() as i64, err.reason, now],
        )?;
    }
    Ok(())
}

/// Releases claimed jobs that were not run (shutting down, a failed step).
pub fn release(conn: &Connection, ids: &[i64]) -> rusqlite::Result<()> {
    let mut st = conn.prepare_cached(
        "UPDATE compact_jobs SET state = 'pending' WHERE id = ?1 AND state = 'running'",
    )?;
    for id in ids {
        st.execute([id])?;
    }
    Ok(())
}

/// Jobs a worker has claimed and not finished. Whatever ends the step early (shutdown dropping
/// its future, a read or write error, a panic) puts them back to pending at once: they must
/// not wait, marked running, for the next start.
struct Claimed {
    writer: crate::store::Writer,
    ids: Vec<i64>,
}

impl Claimed {
    fn done(&mut self, id: i64) {
        self.ids.retain(|&i| i != id);
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        if self.ids.is_empty() {
            return;
        }
        let (writer, ids) = (self.writer.clone(), std::mem::take(&mut self.ids));
        // Drop may run on a runtime thread: the writer is waited for on a thread of its own.
        let _ = std::thread::Builder::new()
            .name("memex-release".into())
            .spawn(move || match writer.call(move |c| release(c, &ids)) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot release compact jobs"),
                Err(e) => tracing::warn!(error = %e, "cannot release compact jobs"),
            });
    }
}

/// Queue and layer figures for `memex compact status`, `/api/compact/status` and stats.
#[derive(Debug, Clone, Serialize)]
pub struct Status {
    /// level → state → count.
    pub jobs: BTreeMap<String, BTreeMap<String, i64>>,
    pub waiting: i64,
    pub last_error: Option<Value>,
    pub rows: BTreeMap<String, i64>,
    pub coverage: Value,
    pub tokens_per_provider_day: Vec<Value>,
    pub tokens_saved: Value,
    pub counters: BTreeMap<String, i64>,
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
                Ok(json!({
                    "level": r.get::<_, String>(0)?, "session_id": r.get::<_, String>(1)?,
                    "prompt_number": r.get::<_, i64>(2)?, "state": r.get::<_, String>(3)?,
                    "error": r.get::<_, String>(4)?,
                    "at": crate::store::read::iso(r.get(5)?),
                }))
            },
        )
        .optional()?;
    let one = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0));
    let mut rows = BTreeMap::new();
    rows.insert(
        "observations".into(),
        one("SELECT COUNT(*) FROM observations")?,
    );
    rows.insert(
        "talk_summaries".into(),
        one("SELECT COUNT(*) FROM talk_summaries")?,
    );
    rows.insert(
        "session_summaries".into(),
        one("SELECT COUNT(*) FROM session_summaries")?,
    );
    let prompts = one("SELECT COALESCE(SUM(prompt_count), 0) FROM sessions")?;
    let with_prompts = one("SELECT COUNT(*) FROM sessions WHERE prompt_count > 0")?;
    let l1_done = one("SELECT COUNT(*) FROM compact_jobs WHERE level = 'l1' AND state = 'done'")?;
    let pct = |a: i64, b: i64| {
        if b == 0 {
            0.0
        } else {
            (a as f64 * 1000.0 / b as f64).round() / 10.0
        }
    };
    let coverage = json!({
        "talks_with_observations_processed": l1_done, "talk_summaries": rows["talk_summaries"],
        "prompts": prompts, "sessions_with_summary": rows["session_summaries"],
        "sessions_with_prompts": with_prompts,
        "l1_percent": pct(l1_done, prompts), "l2_percent": pct(rows["talk_summaries"], prompts),
        "l3_percent": pct(rows["session_summaries"], with_prompts),
    });
    let mut tokens = Vec::new();
    {
        let mut st = conn.prepare(
            "SELECT day, provider, calls, tokens_input, tokens_output FROM llm_usage ORDER BY day DESC, provider LIMIT 60",
        )?;
        for r in st.query_map([], |r| {
            Ok(
                json!({"day": r.get::<_, String>(0)?, "provider": r.get::<_, String>(1)?,
                "calls": r.get::<_, i64>(2)?, "tokens_input": r.get::<_, i64>(3)?,
                "tokens_output": r.get::<_, i64>(4)?}),
            )
        })? {
            tokens.push(r?);
        }
    }
    let raw = one("SELECT COALESCE(SUM(raw_tokens), 0) FROM talk_summaries")?;
    let summary_tokens = one("SELECT COALESCE(SUM(summary_tokens), 0) FROM talk_summaries")?;
    let tokens_saved = json!({
        "raw_tokens_covered": raw, "summary_tokens": summary_tokens,
        "saved": (raw - summary_tokens).max(0),
        "ratio": if summary_tokens == 0 { 0.0 } else { (raw as f64 / summary_tokens as f64 * 10.0).round() / 10.0 },
    });
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

/// The summary view of a session: its L3, its L2s and its L1s.
pub fn summary_view(conn: &Connection, pk: i64, session_id: &str) -> rusqlite::Result<Value> {
    let parse = |s: String| serde_json::from_str::<Value>(&s).unwrap_or(json!([]));
    let prov = |r: &rusqlite::Row<'_>, i: usize| -> rusqlite::Result<Value> {
        Ok(json!({
            "provider": r.get::<_, String>(i)?, "model": r.get::<_, Option<String>>(i + 1)?,
            "prompt_version": r.get::<_, String>(i + 2)?, "tokens_input": r.get::<_, i64>(i + 3)?,
            "tokens_output": r.get::<_, i64>(i + 4)?, "confidence": r.get::<_, f64>(i + 5)?,
            "fallback_reason": r.get::<_, Option<String>>(i + 6)?,
        }))
    };
    let merge = |mut a: Value, b: Value| {
        if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
            a.extend(b);
        }
        a
    };
    let session_summary = conn
        .query_row(
            "SELECT summary, key_points, files_involved, technologies, talks_covered, updated_at,
                    provider, model, prompt_version, tokens_input, tokens_output, confidence, fallback_reason
             FROM session_summaries WHERE session_pk = ?1",
            [pk],
            |r| {
                Ok(merge(
                    json!({
                        "summary": r.get::<_, String>(0)?, "key_points": parse(r.get(1)?),
                        "files_involved": parse(r.get(2)?), "technologies": parse(r.get(3)?),
                        "talks_covered": r.get::<_, i64>(4)?,
                        "updated_at": crate::store::read::iso(r.get(5)?),
                    }),
                    prov(r, 6)?,
                ))
            },
        )
        .optional()?;
    let mut st = conn.prepare(
        "SELECT prompt_number, user_request, summary, completed, files_involved, raw_tokens,
                provider, model, prompt_version, tokens_input, tokens_output, confidence, fallback_reason
         FROM talk_summaries WHERE session_pk = ?1 ORDER BY prompt_number",
    )?;
    let talks: Vec<Value> = st
        .query_map([pk], |r| {
            Ok(merge(
                json!({
                    "prompt_number": r.get::<_, i64>(0)?, "user_request": r.get::<_, String>(1)?,
                    "summary": r.get::<_, String>(2)?, "completed": r.get::<_, String>(3)?,
                    "files_involved": parse(r.get(4)?), "raw_tokens": r.get::<_, i64>(5)?,
                }),
                prov(r, 6)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut st = conn.prepare(
        "SELECT prompt_number, first_message_id, last_message_id, tool_name, call_count, type, title,
                subtitle, facts, narrative, files_read, files_modified,
                provider, model, prompt_version, tokens_input, tokens_output, confidence, fallback_reason
         FROM observations WHERE session_pk = ?1 ORDER BY prompt_number, id",
    )?;
    let observations: Vec<Value> = st
        .query_map([pk], |r| {
            Ok(merge(
                json!({
                    "prompt_number": r.get::<_, i64>(0)?, "first_message_id": r.get::<_, String>(1)?,
                    "last_message_id": r.get::<_, String>(2)?, "tool_name": r.get::<_, String>(3)?,
                    "call_count": r.get::<_, i64>(4)?, "type": r.get::<_, String>(5)?,
                    "title": r.get::<_, String>(6)?, "subtitle": r.get::<_, String>(7)?,
                    "facts": parse(r.get(8)?), "narrative": r.get::<_, String>(9)?,
                    "files_read": parse(r.get(10)?), "files_modified": parse(r.get(11)?),
                }),
                prov(r, 12)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(json!({
        "session_id": session_id,
        "session_summary": session_summary,
        "talks": talks,
        "observations": observations,
    }))
}

/// The worker component: claims ready jobs and runs them, `concurrency` at a time.
#[derive(Clone)]
pub struct Compactor {
    pub engine: Arc<Engine>,
    pub writer: Writer,
    pub pool: ReadPool,
    pub switches: Switches,
    pub wake: Arc<Notify>,
    /// A session without a new message for this long is idle.
    pub idle: Duration,
}

impl Compactor {
    pub fn new(engine: Engine, writer: Writer, pool: ReadPool, idle_minutes: u64) -> Compactor {
        let switches = Switches::from(&engine.settings);
        Compactor {
            engine: Arc::new(engine),
            writer,
            pool,
            switches,
            wake: Arc::new(Notify::new()),
            idle: Duration::from_secs(idle_minutes * 60),
        }
    }

    /// Epoch ms before which a newest message means the session is idle.
    pub fn idle_before(&self) -> i64 {
        now_ms() - self.idle.as_millis() as i64
    }

    /// Loads today's spend and recovers from a crash; returns (jobs reset, jobs planned).
    pub async fn start(&self) -> Result<(usize, usize), crate::store::StoreError> {
        let sw = self.switches;
        let spend = self.pool.with(spend_today)??;
        self.engine.load_spend(spend);
        let idle_before = self.idle_before();
        let res = self
            .writer
            .run(move |c| converge(c, sw, idle_before))
            .await??;
        self.wake.notify_waiters();
        Ok(res)
    }

    /// Queues a session's work (after an ingest, an idle event, a trigger).
    pub async fn plan(&self, pks: Vec<i64>, final_: bool, reason: &'static str) -> usize {
        let sw = self.switches;
        let res = self
            .writer
            .run(move |c| -> rusqlite::Result<usize> {
                let tx = c.transaction()?;
                let mut n = 0;
                for pk in pks {
                    n += plan(&tx, pk, final_, reason, sw)?;
                }
                tx.commit()?;
                Ok(n)
            })
            .await;
        match res {
            Ok(Ok(n)) => {
                if n > 0 {
                    self.wake.notify_waiters();
                }
                n
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot queue compact jobs");
                0
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot queue compact jobs");
                0
            }
        }
    }

    /// Claims and runs one session's ready jobs; returns how many ran (0: nothing was ready).
    pub async fn step(&self, stop: &AtomicBool) -> Result<usize, crate::store::StoreError> {
        let jobs = self.writer.run(|c| claim(c)).await??;
        if jobs.is_empty() {
            return Ok(0);
        }
        let mut claimed = Claimed {
            writer: self.writer.clone(),
            ids: jobs.iter().map(|j| j.id).collect(),
        };
        let mut ran = 0;
        let pk = jobs[0].session_pk;
        let talk_jobs = jobs
            .iter()
            .filter(|j| j.layer != Layer::Sessions)
            .map(|j| j.prompt_number);
        let range = (
            talk_jobs.clone().min().unwrap_or(0),
            talk_jobs.max().unwrap_or(-1),
        );
        let data = {
            let pool = self.pool.clone();
            tokio::task::spawn_blocking(move || pool.with(|c| load_session(c, pk, range)))
                .await
                .map_err(|_| crate::store::StoreError::WriterGone)???
        };
        for (i, job) in jobs.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                let rest: Vec<i64> = jobs[i..].iter().map(|j| j.id).collect();
                self.writer.run(move |c| release(c, &rest)).await??;
                claimed.ids.clear();
                break;
            }
            let pool = self.pool.clone();
            let l2s = move || {
                pool.with(|c| talk_summaries(c, pk)).map_err(|e| match e {
                    crate::store::StoreError::Sqlite(e) => e,
                    other => rusqlite::Error::InvalidParameterName(other.to_string()),
                })?
            };
            let res = execute(&self.engine, job, &data, l2s).await;
            let job = job.clone();
            let max = self.engine.settings.max_attempts;
            ran += 1;
            let id = job.id;
            match res {
                Ok(out) => self.writer.run(move |c| commit(c, &job, &out)).await??,
                Err(e) => {
                    tracing::info!(layer = %job.layer, session = job.session_pk, prompt = job.prompt_number,
                        reason = %e.reason, outage = e.outage, "compact job deferred");
                    self.writer.run(move |c| defer(c, &job, &e, max)).await??
                }
            }
            claimed.done(id);
        }
        drop(data);
        // A large batch leaves its messages' text freed behind it.
        if ran >= BATCH / 2 {
            crate::memory::release_free_memory();
        }
        Ok(ran)
    }

    /// One worker: runs jobs until shutdown, sleeping when there are none ready.
    pub async fn worker(self, stop: Arc<AtomicBool>, mut shutdown: watch::Receiver<bool>) {
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let ran = tokio::select! {
                r = self.step(&stop) => r,
                _ = shutdown.wait_for(|s| *s) => break,
            };
            match ran {
                Ok(n) if n > 0 => continue,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "compact worker error"),
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
        }
    }

    /// Runs every ready job to the end (the CLI, when no service is running). Jobs that must
    /// wait for a provider stay queued. Returns the jobs run.
    pub async fn drain(
        &self,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<u64, crate::store::StoreError> {
        let stop = AtomicBool::new(false);
        let mut n = 0u64;
        loop {
            let ran = self.step(&stop).await?;
            if ran == 0 {
                break;
            }
            n += ran as u64;
            progress(n);
        }
        Ok(n)
    }
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

/// `l1`, `l2`, `l3` or `all` (the default).
pub fn regenerate_levels(level: Option<&str>) -> Result<Vec<Layer>, String> {
    match level.unwrap_or("all") {
        "all" => Ok(Layer::COMPACT.to_vec()),
        other => Layer::from_job(other)
            .map(|l| vec![l])
            .ok_or_else(|| format!("`level` must be l1, l2, l3 or all, got `{other}`")),
    }
}

/// A regeneration over more talks than this needs confirmation (`--yes`, `"confirm": true`)
/// when a paid provider would write it. A talk costs about 2,500 tokens on average with every
/// layer on (BENCHMARKS.md, `memex-bench talk-cost`), so 50 talks are about 125,000 tokens,
/// more than half the default daily budget: a session or two redone on purpose passes, while
/// "regenerate everything" (a day's budget and more, for days) gets a second look first.
pub const REGENERATE_CONFIRM_ABOVE: u64 = 50;

/// What a regeneration covers, counted before anything is queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RegenerateScope {
    /// Sessions it touches.
    pub sessions: u64,
    /// Talks it goes over: their L1 and L2 are rewritten, and an L3 is rebuilt from them.
    pub talks: u64,
}

/// Whether a regeneration may go ahead: it may when it is small, when no paid provider would
/// write it, or when someone confirmed.
#[derive(Debug, Clone)]
pub struct RegenerateGuard {
    /// The chain's paid providers ([`Engine::paid_providers`]).
    pub paid: Vec<String>,
    pub confirmed: bool,
}

impl RegenerateGuard {
    pub fn new(engine: &Engine, confirmed: bool) -> RegenerateGuard {
        RegenerateGuard {
            paid: engine.paid_providers(),
            confirmed,
        }
    }

    pub fn check(&self, scope: RegenerateScope) -> Result<(), ConfirmationRequired> {
        if self.confirmed || self.paid.is_empty() || scope.talks <= REGENERATE_CONFIRM_ABOVE {
            return Ok(());
        }
        Err(ConfirmationRequired {
            scope,
            paid: self.paid.clone(),
        })
    }
}

/// A large regeneration with a paid provider, refused until confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfirmationRequired {
    pub scope: RegenerateScope,
    pub paid: Vec<String>,
}

impl std::fmt::Display for ConfirmationRequired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = |n: usize| if n == 1 { "" } else { "s" };
        write!(
            f,
            "regenerating would queue {} talks in {} session{} for the paid provider{} {}; \
             more than {REGENERATE_CONFIRM_ABOVE} talks need confirmation",
            self.scope.talks,
            self.scope.sessions,
            s(self.scope.sessions as usize),
            s(self.paid.len()),
            self.paid.join(", ")
        )
    }
}

impl std::error::Error for ConfirmationRequired {}

#[derive(Debug, thiserror::Error)]
pub enum RegenerateError {
    #[error(transparent)]
    Confirmation(#[from] ConfirmationRequired),
    #[error("cannot queue the regeneration")]
    Store(#[from] rusqlite::Error),
}

/// The sessions a regeneration covers, each with its talks up to the cursor (the last one is
/// still open unless the session is idle: its turn comes with the normal flow).
const REGENERATE_SESSIONS: &str =
    "SELECT id, MAX(0, MIN(last_processed_prompt, prompt_count)) AS talks
     FROM sessions WHERE prompt_count > 0
       AND (?1 IS NULL OR id = ?1) AND (?2 IS NULL OR updated_at >= ?2)";

/// What [`regenerate`] would cover, without queueing anything.
pub fn regenerate_scope(
    conn: &Connection,
    session: Option<i64>,
    since: Option<i64>,
) -> rusqlite::Result<RegenerateScope> {
    conn.query_row(
        &format!("SELECT COUNT(*), COALESCE(SUM(talks), 0) FROM ({REGENERATE_SESSIONS})"),
        params![session, since],
        |r| {
            Ok(RegenerateScope {
                sessions: r.get::<_, i64>(0)? as u64,
                talks: r.get::<_, i64>(1)? as u64,
            })
        },
    )
}

/// Queues regeneration of existing rows (and of talks never summarised) from raw, in one
/// transaction: its scope is counted first, and when `guard` refuses it nothing is queued.
/// Returns the jobs queued.
pub fn regenerate(
    conn: &mut Connection,
    levels: &[Layer],
    session: Option<i64>,
    since: Option<i64>,
    guard: &RegenerateGuard,
) -> Result<usize, RegenerateError> {
    let tx = conn.transaction()?;
    guard.check(regenerate_scope(&tx, session, since)?)?;
    let sessions: Vec<(i64, i64)> = {
        let mut st = tx.prepare(REGENERATE_SESSIONS)?;
        st.query_map(params![session, since], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    let mut n = 0;
    for (pk, talks) in sessions {
        for p in 1..=talks {
            for layer in [Layer::Observations, Layer::Talks] {
                if levels.contains(&layer) {
                    n += enqueue(&tx, layer, pk, p, "regenerate", true)?;
                    n += enqueue(&tx, layer, pk, p, "regenerate", false)?;
                }
            }
        }
        if levels.contains(&Layer::Sessions) {
            n += enqueue(&tx, Layer::Sessions, pk, 0, "regenerate", true)?;
            n += enqueue(&tx, Layer::Sessions, pk, 0, "regenerate", false)?;
        }
    }
    tx.commit()?;
    Ok(n)
}
