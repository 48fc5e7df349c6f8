//! How a job ends: its rows, FTS entries and token spend committed with its `done` state in
//! one transaction, or the job deferred after a failure, or released unrun.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::{Job, Output, enqueue, now_ms};
use crate::compact::heuristic::estimate_tokens;
use crate::compact::{NotNow, Written};
use crate::layer::Layer;
use crate::store::compact::{self as rows, Rows, Stored};

pub(super) fn bump(tx: &Transaction<'_>, name: &str, by: i64) -> rusqlite::Result<()> {
    if by != 0 {
        tx.execute(
            "INSERT INTO compact_counters (name, value) VALUES (?1, ?2)
             ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
            params![name, by],
        )?;
    }
    Ok(())
}

pub(super) fn account<T>(tx: &Transaction<'_>, w: &Written<T>) -> rusqlite::Result<()> {
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
    let heuristic = w.provenance.provider == crate::config::HEURISTIC;
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
    let prompt = job.prompt_number;
    match out {
        Output::L1(obs) => {
            let rows = obs
                .iter()
                .map(|w| Stored {
                    value: w.value.clone(),
                    provenance: w.provenance.clone(),
                    created_at: now,
                })
                .collect();
            rows::replace(&tx, pk, prompt, &Rows::Observations(rows))?;
            for w in obs {
                account(&tx, w)?;
            }
        }
        Output::L2 {
            written: w,
            raw_tokens,
            ts,
        } => {
            let t = w.value.clone();
            let summary_tokens = estimate_tokens(&t.user_request)
                + estimate_tokens(&t.summary)
                + estimate_tokens(&t.completed);
            let row = Rows::Talk {
                row: Stored {
                    value: t,
                    provenance: w.provenance.clone(),
                    created_at: now,
                },
                raw_tokens: *raw_tokens as i64,
                summary_tokens: summary_tokens as i64,
                ts: *ts,
            };
            rows::replace(&tx, pk, prompt, &row)?;
            account(&tx, w)?;
            let covered: Option<i64> = tx
                .query_row(
                    "SELECT talks_covered FROM session_summaries WHERE session_pk = ?1",
                    [pk],
                    |r| r.get(0),
                )
                .optional()?;
            if covered.is_some_and(|c| c < prompt) {
                enqueue(&tx, Layer::Sessions, pk, 0, "newer talk summary", true)?;
            }
        }
        Output::L3 {
            written: w,
            raw_tokens,
        } => {
            let created: Option<i64> = tx
                .query_row(
                    "SELECT created_at FROM session_summaries WHERE session_pk = ?1",
                    [pk],
                    |r| r.get(0),
                )
                .optional()?;
            let row = Rows::Session {
                row: Stored {
                    value: w.value.clone(),
                    provenance: w.provenance.clone(),
                    created_at: created.unwrap_or(now),
                },
                raw_tokens: *raw_tokens as i64,
                updated_at: now,
            };
            rows::replace(&tx, pk, 0, &row)?;
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
pub(super) struct Claimed {
    writer: crate::store::Writer,
    ids: Vec<i64>,
}

impl Claimed {
    pub(super) fn new(writer: crate::store::Writer, ids: Vec<i64>) -> Claimed {
        Claimed { writer, ids }
    }

    /// This job ended (committed or deferred).
    pub(super) fn done(&mut self, id: i64) {
        self.ids.retain(|&i| i != id);
    }

    /// Every job left was released by the worker itself.
    pub(super) fn released(&mut self) {
        self.ids.clear();
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
