//! Planning: which jobs a session's progress makes possible, and regeneration on request.

use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;

use super::{enqueue, now_ms};
use crate::compact::{Engine, Switches};
use crate::layer::{Layer, UnknownName};

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
        if sw.on(Layer::Observations) {
            n += enqueue(conn, Layer::Observations, pk, p, reason, false)?;
        }
        if sw.on(Layer::Talks) {
            n += enqueue(conn, Layer::Talks, pk, p, reason, false)?;
        }
    }
    if complete_to > done {
        conn.execute(
            "UPDATE sessions SET last_processed_prompt = ?2 WHERE id = ?1",
            params![pk, complete_to],
        )?;
    }
    if final_ && sw.on(Layer::Sessions) && prompts > 0 {
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

/// `observations`, `talks`, `sessions` (the levels as search names them) or `all` (the
/// default); the job names `l1`, `l2`, `l3` are read too.
pub fn regenerate_levels(level: Option<&str>) -> Result<Vec<Layer>, UnknownName> {
    match level.unwrap_or("all") {
        "all" => Ok(Layer::COMPACT.to_vec()),
        other => Layer::from_job(other)
            .or_else(|| other.parse::<Layer>().ok().filter(|l| l.job().is_some()))
            .map(|l| vec![l])
            .ok_or_else(|| {
                UnknownName::new(
                    other,
                    Layer::COMPACT.map(Layer::name).into_iter().chain(["all"]),
                )
            }),
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
pub(super) const REGENERATE_SESSIONS: &str =
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
