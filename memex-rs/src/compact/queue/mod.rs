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

mod commit;
mod jobs;
mod plan;
mod status;
mod worker;

use rusqlite::{Connection, params};

pub use self::commit::{commit, defer, release};
pub use self::jobs::{Job, Output, SessionData, claim, execute, load_session, talk_summaries};
pub use self::plan::{
    ConfirmationRequired, REGENERATE_CONFIRM_ABOVE, RegenerateError, RegenerateGuard,
    RegenerateScope, converge, plan, plan_pending, regenerate, regenerate_levels, regenerate_scope,
};
pub use self::status::{
    Coverage, DayUsage, JobError, ObservationView, SessionSummaryView, Status, SummaryView,
    TalkSummaryView, TokensSaved, ready_count, spend_today, status, summary_view,
};
pub use self::worker::Compactor;
use crate::layer::Layer;

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

#[cfg(test)]
mod tests;
