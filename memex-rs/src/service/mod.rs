//! `memex serve`: the long-running service, as components around events.
//!
//! ```text
//!  notify ──▶ watcher actor ──Change──▶ ingester ──batches──▶ writer thread ──▶ SQLite
//!             (debounce)     (bounded)  (parsers)  (bounded)  (one connection)    ▲
//!                                          │ activity (bounded)                   │ reads
//!                                          ▼                                      │
//!                                       tracker ──idle events──▶ (compact queue)  │
//!                                                                  HTTP API ──────┘
//! ```
//!
//! Each component has a start, handles its input, and stops on the shutdown event that SIGINT
//! or SIGTERM becomes. They share state only through one cheap-to-clone [`Shared`] handle.

mod ingester;
pub mod tracker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ai_cli_session_collector::AdapterRegistry;
use serde::Serialize;
use tokio::sync::{broadcast, mpsc, watch as tokio_watch};

use crate::config::Settings;
use crate::store::{self, ingest::IngestOptions, lock};
use crate::watch::{self, WatchStatus};

pub use tracker::SessionIdle;

/// How long a shutdown may take before the process leaves anyway. Everything written is
/// committed transaction by transaction, so leaving early loses nothing.
const SHUTDOWN_BUDGET: Duration = Duration::from_millis(4500);

/// The state every component can read, behind one `Arc`.
pub struct State {
    pub started: Instant,
    pub started_at_ms: i64,
    pub phase: Mutex<&'static str>,
    pub watch: Arc<WatchStatus>,
    pub ingest: IngestStats,
    pub tracker: tracker::TrackerStats,
    /// Sessions that went idle (the compact queue subscribes).
    pub idle_events: broadcast::Sender<SessionIdle>,
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
            tracker: tracker::TrackerStats::default(),
            idle_events: broadcast::channel(1024).0,
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

    fn set_phase(&self, p: &'static str) {
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
    fn record_lag(&self, ms: u64) {
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

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to serve the HTTP API on {0} without a token: anyone who can reach it could read the archive"
    )]
    NoToken(SocketAddr),
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("cannot start the file watcher")]
    Watch(#[from] notify::Error),
    #[error(transparent)]
    Vectors(#[from] crate::vector::VectorError),
}

/// Everything `memex serve` needs, resolved by the CLI.
pub struct ServeConfig {
    pub settings: Settings,
    pub roots: Vec<(String, PathBuf)>,
    pub bind: SocketAddr,
}

/// Runs the service until `shutdown` resolves (SIGINT / SIGTERM in the binary).
/// `on_listen` is told the address actually bound (port 0 picks a free one).
pub async fn run(
    cfg: ServeConfig,
    shutdown: impl std::future::Future<Output = ()>,
    on_listen: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let s = &cfg.settings;
    if s.api.token.is_empty() && !cfg.bind.ip().is_loopback() {
        return Err(ServeError::NoToken(cfg.bind));
    }
    let data_dir = s.data_dir();
    let mut data_lock = lock::acquire(&data_dir, "memex serve")?;
    let (writer, writer_thread) = store::Writer::start(&data_dir)?;
    // The vector layer: the model guard first (stale vectors refuse the start), then the
    // indexer in the background. Without a usable model the service runs on full text.
    let vectors = start_vectors(s, &writer).await?;
    let listener = tokio::net::TcpListener::bind(cfg.bind)
        .await
        .map_err(|source| ServeError::Bind {
            addr: cfg.bind,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind {
        addr: cfg.bind,
        source,
    })?;
    data_lock.describe(&format!("{}{addr}", lock::SERVE_ON));
    on_listen(addr);

    let state: Shared = Arc::new(State::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (shutdown_tx, shutdown_rx) = tokio_watch::channel(false);
    let registry = Arc::new(AdapterRegistry::new());

    // Watcher → ingester: a handful of changes. Each change already merges every file touched
    // during its debounce window, and the watcher keeps merging while this is full, so a small
    // bound costs nothing and keeps a stalled ingester from growing memory.
    let (change_tx, change_rx) = mpsc::channel::<watch::Change>(8);
    let watcher = watch::start(
        watch::WatchConfig {
            roots: cfg.roots.clone(),
            poll: s
                .watch
                .poll
                .then(|| Duration::from_millis(s.watch.poll_interval_ms)),
            debounce: Duration::from_millis(s.watch.debounce_ms),
        },
        registry.clone(),
        change_tx,
        state.watch.clone(),
    )?;

    // The compact queue: recover jobs a crash left running, plan what was missed while down,
    // then `concurrency` workers.
    let compactor = crate::compact::queue::Compactor::new(
        crate::compact::Engine::new(s.compact.clone()),
        writer.clone(),
        store::ReadPool::new(&data_dir),
        s.watch.idle_minutes,
    );
    match compactor.start().await {
        Ok((reset, planned)) => {
            tracing::info!(reset, planned, chain = ?s.compact.chain(), "compact queue ready")
        }
        Err(e) => tracing::warn!(error = %e, "cannot prepare the compact queue"),
    }
    let workers: Vec<_> = (0..s.compact.concurrency)
        .map(|_| tokio::spawn(compactor.clone().worker(stop.clone(), shutdown_rx.clone())))
        .collect();

    let indexer = vectors.vectors.clone().map(|v| {
        tokio::spawn(v.run(
            store::ReadPool::new(&data_dir),
            writer.clone(),
            shutdown_rx.clone(),
        ))
    });
    let vectors = Arc::new(vectors);

    // Ingester → tracker: session activity, one message per ingest; the tracker only updates a
    // map and queues compact jobs, so it is never the slow side.
    let (activity_tx, activity_rx) = mpsc::channel(64);
    let tracker = tokio::spawn(tracker::run(
        tracker::Tracker::new(s.watch.idle_minutes),
        activity_rx,
        writer.clone(),
        store::ReadPool::new(&data_dir),
        state.clone(),
        Some(compactor.clone()),
        shutdown_rx.clone(),
    ));

    let ingester = ingester::Ingester {
        registry,
        writer: writer.clone(),
        data_dir: data_dir.clone(),
        opts: IngestOptions {
            redact: s.store.redact,
            fts_max_bytes: s.store.fts_max_bytes,
            batch_bytes: s.import.batch_bytes,
            threads: s.import_threads(),
        },
        roots: cfg.roots.clone(),
        state: state.clone(),
        stop: stop.clone(),
        activity: activity_tx,
    };
    let ingester = std::thread::Builder::new()
        .name("memex-ingest".into())
        .spawn(move || ingester.run(change_rx))
        .expect("spawn the ingester thread");

    let api = crate::api::router(crate::api::ApiState {
        pool: store::ReadPool::new(&data_dir),
        state: state.clone(),
        settings: Arc::new(cfg.settings.clone()),
        policy: Arc::new(crate::api::guard::Policy::new(addr, &cfg.settings.api)),
        readers: Arc::new(tokio::sync::Semaphore::new(crate::api::reader_slots())),
        hook_readers: Arc::new(tokio::sync::Semaphore::new(2)),
        compactor: Some(compactor.clone()),
        vectors: vectors.clone(),
        writer: Some(writer.clone()),
    });
    let mut http_shutdown = shutdown_rx.clone();
    let http = tokio::spawn(async move {
        let res = axum::serve(listener, api)
            .with_graceful_shutdown(async move {
                let _ = http_shutdown.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = res {
            tracing::error!(error = %e, "the HTTP server stopped");
        }
    });
    tracing::info!(%addr, pid = std::process::id(), data_dir = %data_dir.display(), "memex serve started");

    shutdown.await;
    tracing::info!("shutting down: finishing the batch in flight");
    state.set_phase("stopping");
    stop.store(true, Ordering::SeqCst);
    if let Some(v) = &vectors.vectors {
        v.stop.store(true, Ordering::SeqCst);
    }
    let _ = shutdown_tx.send(true);
    let finish = async {
        // The watcher first: no new changes. Then the ingester ends after its batch in flight,
        // the tracker writes its last idle events, the HTTP server answers requests in flight.
        let _ = tokio::task::spawn_blocking(move || {
            watcher.stop();
            let _ = ingester.join();
        })
        .await;
        let _ = tracker.await;
        for w in workers {
            let _ = w.await;
        }
        if let Some(i) = indexer {
            let _ = i.await;
        }
        let _ = http.await;
        drop(compactor);
        drop(writer);
        let _ = tokio::task::spawn_blocking(move || writer_thread.join()).await;
    };
    if tokio::time::timeout(SHUTDOWN_BUDGET, finish).await.is_err() {
        tracing::warn!("shutdown took too long; leaving with every committed batch in place");
    } else {
        tracing::info!("stopped");
    }
    drop(data_lock);
    Ok(())
}

/// Opens the vector layer for `memex serve`. Stale vectors (another model) stop the start; a
/// missing model or a broken vector folder only turn semantic search off, loudly: the archive
/// must keep recording either way.
async fn start_vectors(
    s: &Settings,
    writer: &store::Writer,
) -> Result<crate::vector::ForSearch, ServeError> {
    use crate::vector::{ForSearch, VectorError};
    let v = match crate::vector::open_vectors(s).await {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Ok(ForSearch::off(crate::vector::OFF));
        }
        Err(e) => {
            tracing::warn!(error = %e, "semantic search is off");
            return Ok(ForSearch::off(e.to_string()));
        }
    };
    match crate::vector::prepare(&v, writer).await {
        Ok(()) => {
            tracing::info!(
                model = v.embedder.id(),
                dimension = v.embedder.dimension(),
                "vector layer ready"
            );
            Ok(ForSearch {
                vectors: Some(Arc::new(v)),
                off: String::new(),
            })
        }
        Err(e @ VectorError::Stale { .. }) => Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "semantic search is off");
            Ok(ForSearch::off(e.to_string()))
        }
    }
}
