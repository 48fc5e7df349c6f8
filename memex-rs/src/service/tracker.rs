//! The session tracker: last activity per session, and one idle event per period of activity
//! once a session has had no new message for `idle_minutes` (the compact layer builds session
//! summaries on it).
//!
//! Activity is the time of the session's newest message. The event is recorded in the archive
//! (`sessions.idle_event_at` = the activity it was for), so a restart neither repeats events nor
//! misses those that fell due while the service was down: at start every session whose newest
//! message has no event yet is tracked again.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use crate::compact::queue::Compactor;
use crate::state::{SessionIdle, Shared};
use crate::store::{ReadPool, Writer};

/// The pure bookkeeping, driven by explicit times so it can be tested step by step.
#[derive(Debug)]
pub struct Tracker {
    idle_ms: i64,
    last: HashMap<i64, i64>,
}

impl Tracker {
    pub fn new(idle_minutes: u64) -> Tracker {
        Tracker {
            idle_ms: idle_minutes as i64 * 60_000,
            last: HashMap::new(),
        }
    }

    /// Records activity; a session whose messages carry no time counts as active `now`.
    pub fn touch(&mut self, pk: i64, at: Option<i64>, now: i64) {
        let at = at.unwrap_or(now);
        let e = self.last.entry(pk).or_insert(at);
        *e = (*e).max(at);
    }

    /// The sessions idle at `now`, which stop being tracked until their next activity.
    pub fn due(&mut self, now: i64) -> Vec<SessionIdle> {
        let idle_ms = self.idle_ms;
        let mut out: Vec<SessionIdle> = self
            .last
            .iter()
            .filter(|(_, at)| **at + idle_ms <= now)
            .map(|(&pk, &at)| SessionIdle {
                session_pk: pk,
                last_activity_ms: at,
            })
            .collect();
        for e in &out {
            self.last.remove(&e.session_pk);
        }
        out.sort_by_key(|e| (e.last_activity_ms, e.session_pk));
        out
    }

    /// When the next session falls idle.
    pub fn next_due(&self) -> Option<i64> {
        self.last.values().min().map(|at| at + self.idle_ms)
    }

    /// Sessions still active.
    pub fn active(&self) -> usize {
        self.last.len()
    }
}

/// Runs the tracker until shutdown: takes activity from the ingester, sends idle events.
pub(super) async fn run(
    mut tracker: Tracker,
    mut activity: mpsc::Receiver<HashMap<i64, Option<i64>>>,
    writer: Writer,
    pool: ReadPool,
    state: Shared,
    compactor: Option<Compactor>,
    mut shutdown: watch::Receiver<bool>,
) {
    let now = || chrono::Utc::now().timestamp_millis();
    let pending = tokio::task::spawn_blocking(move || {
        pool.with(|c| {
            let mut st = c.prepare(
                "SELECT id, updated_at FROM sessions
                 WHERE updated_at IS NOT NULL AND (idle_event_at IS NULL OR idle_event_at < updated_at)",
            )?;
            st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()
        })
    })
    .await;
    match pending {
        Ok(Ok(Ok(rows))) => {
            let t = now();
            for (pk, at) in rows {
                tracker.touch(pk, Some(at), t);
            }
        }
        Ok(Ok(Err(e))) => {
            tracing::warn!(error = %e, "cannot read sessions awaiting their idle event")
        }
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot read sessions awaiting their idle event"),
        Err(e) => tracing::warn!(error = %e, "cannot read sessions awaiting their idle event"),
    }
    loop {
        let idle = fire(&mut tracker, now(), &writer, &state).await;
        if let Some(c) = &compactor
            && !idle.is_empty()
        {
            c.plan(idle, true, "idle").await;
        }
        state
            .tracker
            .active
            .store(tracker.active() as u64, Ordering::Relaxed);
        // Wake for the next session due, and at least every minute.
        let wait = tracker
            .next_due()
            .map_or(60_000, |at| (at - now()).clamp(10, 60_000));
        let msg = tokio::select! {
            msg = activity.recv() => match msg {
                Some(touched) => Some(touched),
                None => break,
            },
            _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => None,
            _ = shutdown.wait_for(|s| *s) => break,
        };
        if let Some(touched) = msg {
            let t = now();
            let pks: Vec<i64> = touched.keys().copied().collect();
            for (pk, at) in touched {
                tracker.touch(pk, at, t);
            }
            // Talks completed by the new prompts get their L1 and L2.
            if let Some(c) = &compactor {
                c.plan(pks, false, "talk complete").await;
            }
        }
    }
}

/// Sends the idle events due; returns the sessions that went idle.
async fn fire(tracker: &mut Tracker, now: i64, writer: &Writer, state: &Shared) -> Vec<i64> {
    let due = tracker.due(now);
    if due.is_empty() {
        return Vec::new();
    }
    let pks: Vec<i64> = due.iter().map(|e| e.session_pk).collect();
    let rows: Vec<(i64, i64)> = due
        .iter()
        .map(|e| (e.session_pk, e.last_activity_ms))
        .collect();
    let recorded = writer
        .run(move |c| -> rusqlite::Result<()> {
            let tx = c.transaction()?;
            {
                let mut st =
                    tx.prepare_cached("UPDATE sessions SET idle_event_at = ?2 WHERE id = ?1")?;
                for (pk, at) in &rows {
                    st.execute([pk, at])?;
                }
            }
            tx.commit()
        })
        .await;
    match recorded {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(error = %e, "cannot record idle events"),
        Err(e) => tracing::warn!(error = %e, "cannot record idle events"),
    }
    state
        .tracker
        .idle_events
        .fetch_add(due.len() as u64, Ordering::Relaxed);
    tracing::info!(sessions = due.len(), "sessions went idle");
    for e in due {
        // Nobody listening is fine: the archive records the event.
        let _ = state.idle_events.send(e);
    }
    pks
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn one_event_per_period_of_activity() {
        let mut t = Tracker::new(5);
        let t0 = 1_000_000_000_000;
        t.touch(1, Some(t0), t0);
        t.touch(2, Some(t0 + 2 * MIN), t0 + 2 * MIN);
        assert_eq!(t.next_due(), Some(t0 + 5 * MIN));
        assert!(t.due(t0 + 4 * MIN).is_empty());
        // Session 1 is active again before it falls idle: its deadline moves.
        t.touch(1, Some(t0 + 4 * MIN), t0 + 4 * MIN);
        let due = t.due(t0 + 7 * MIN);
        assert_eq!(
            due,
            vec![SessionIdle {
                session_pk: 2,
                last_activity_ms: t0 + 2 * MIN
            }]
        );
        assert!(t.due(t0 + 8 * MIN).is_empty(), "an event is sent once");
        assert_eq!(t.due(t0 + 9 * MIN)[0].session_pk, 1);
        assert_eq!(t.active(), 0);
        // New activity after the event starts a new period.
        t.touch(2, Some(t0 + 20 * MIN), t0 + 20 * MIN);
        assert_eq!(t.due(t0 + 25 * MIN).len(), 1);
    }

    #[test]
    fn an_older_message_arriving_late_does_not_move_activity_back() {
        let mut t = Tracker::new(5);
        t.touch(1, Some(10 * MIN), 10 * MIN);
        t.touch(1, Some(MIN), 10 * MIN);
        assert!(t.due(14 * MIN).is_empty());
        // Messages without a time count as activity when they arrive.
        t.touch(3, None, 12 * MIN);
        assert_eq!(t.due(17 * MIN).len(), 2);
    }
}
