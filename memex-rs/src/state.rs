//! What the running service's components share, behind one cheap-to-clone [`Shared`] handle:
//! its phase, the watcher's, ingester's and tracker's counters, and the idle-session events.
//! The service writes it; the HTTP API and injection only read it. [`SyncHandle`] is how the
//! HTTP API asks the service's sync loop for a sync now.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use tokio::sync::broadcast;

use crate::watch::WatchStatus;

/// The state every component can read, behind one `Arc`.
pub struct State {
    pub started: Instant,
    pub started_at_ms: i64,
    pub phase: Mutex<&'static str>,
    pub watch: Arc<WatchStatus>,
    pub ingest: IngestStats,
    pub tracker: TrackerStats,
    /// Sessions that went idle (the compact queue subscribes).
    pub idle_events: broadcast::Sender<SessionIdle>,
    /// The sessions (primary keys) each ingest gave new or changed messages: the live pages
    /// subscribe, each to the session it shows.
    pub touched: broadcast::Sender<Arc<[i64]>>,
}

pub type Shared = Arc<State>;

impl Default for State {
    fn default() -> State {
        State {
            started: Instant::now(),
            started_at_ms: chrono::Utc::now().timestamp_millis(),
            phase: Mutex::new("starting"),
            watch: Arc::default(),
            ingest: IngestStats::default(),
            tracker: TrackerStats::default(),
            idle_events: broadcast::channel(1024).0,
            touched: broadcast::channel(256).0,
        }
    }
}

impl State {
    /// Whether every file change seen so far has been ingested.
    pub fn ingest_settled(&self) -> bool {
        let w = &self.watch;
        w.pending_files.load(Ordering::Relaxed) == 0
            && self.ingest.changes_done.load(Ordering::Relaxed)
                >= w.changes_sent.load(Ordering::Relaxed)
    }

    pub fn phase(&self) -> &'static str {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_phase(&self, p: &'static str) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = p;
    }
}

/// What the ingester has done since the service started.
#[derive(Default)]
pub struct IngestStats {
    pub ingests: AtomicU64,
    pub files: AtomicU64,
    pub messages: AtomicU64,
    pub messages_updated: AtomicU64,
    pub bad_lines: AtomicU64,
    pub errors: AtomicU64,
    pub files_gone: AtomicU64,
    pub last_ingest_ms: AtomicI64,
    /// Changes from the watcher ingested (see `WatchStatus::changes_sent`).
    pub changes_done: AtomicU64,
    /// Milliseconds from the first file event of a change to its messages being committed,
    /// for the most recent changes.
    lags: Mutex<std::collections::VecDeque<u64>>,
}

/// How many recent ingest lags are kept for the percentiles.
const LAG_WINDOW: usize = 512;

/// The `p` quantile (0 to 1) of sorted values, nearest rank; `None` when there are none.
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> Option<T> {
    (!sorted.is_empty()).then(|| sorted[((sorted.len() - 1) as f64 * p).round() as usize])
}

#[derive(Debug, Clone, Serialize)]
pub struct LagSummary {
    pub samples: usize,
    pub last_ms: Option<u64>,
    pub p50_ms: Option<u64>,
    pub p95_ms: Option<u64>,
    pub max_ms: Option<u64>,
}

impl IngestStats {
    pub(crate) fn record_lag(&self, ms: u64) {
        let mut l = self.lags.lock().unwrap_or_else(|e| e.into_inner());
        if l.len() == LAG_WINDOW {
            l.pop_front();
        }
        l.push_back(ms);
    }

    pub fn lag(&self) -> LagSummary {
        let l = self.lags.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<u64> = l.iter().copied().collect();
        v.sort_unstable();
        let pct = |p: f64| percentile(&v, p);
        LagSummary {
            samples: v.len(),
            last_ms: l.back().copied(),
            p50_ms: pct(0.5),
            p95_ms: pct(0.95),
            max_ms: v.last().copied(),
        }
    }
}

/// A session that has been idle for `idle_minutes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SessionIdle {
    /// The session's row in the archive.
    pub session_pk: i64,
    /// Its newest message (epoch ms).
    pub last_activity_ms: i64,
}

#[derive(Debug, Default)]
pub struct TrackerStats {
    /// Sessions with activity within `idle_minutes`.
    pub active: AtomicU64,
    /// Idle events sent since start.
    pub idle_events: AtomicU64,
}

// ---- the sync (issue 44): how the HTTP API asks the service's sync loop for a sync now ----

/// What one sync asked of the service did.
#[derive(Debug, Serialize, serde::Deserialize)]
pub struct Synced {
    pub pushed: Option<memex_sync::engine::PushReport>,
    pub pulled: Option<memex_sync::engine::PullReport>,
}

/// A request for a sync now: push, pull, and where to answer.
pub type Ask = (
    bool,
    bool,
    tokio::sync::oneshot::Sender<Result<Synced, String>>,
);

/// Asks the running sync for a sync now.
#[derive(Clone)]
pub struct SyncHandle(tokio::sync::mpsc::Sender<Ask>);

impl SyncHandle {
    pub fn new(asks: tokio::sync::mpsc::Sender<Ask>) -> SyncHandle {
        SyncHandle(asks)
    }

    /// Pushes and/or pulls now; the error is the sync's own, as text.
    pub async fn now(&self, push: bool, pull: bool) -> Result<Synced, String> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.0
            .send((push, pull, tx))
            .await
            .map_err(|_| "the service is stopping".to_owned())?;
        rx.await.map_err(|_| "the service is stopping".to_owned())?
    }
}
