//! The sync of a running service (issue 44): this machine's new messages and forgets go out
//! shortly after they are archived (at most one push every [`PUSH_EVERY`]), and the other
//! machines' batches come in on `[sync] interval_secs` and, on PostgreSQL, as soon as the
//! database announces one (`LISTEN`). The target being away is normal: the archive keeps
//! working, and the service tries again after a pause that doubles up to [`MAX_PAUSE`].
//!
//! `memex sync` run while the service holds the archive asks this loop for a sync now
//! (`POST /api/sync`) and prints what it did.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ai_cli_session_collector::AdapterRegistry;
use tokio::sync::{mpsc, watch};

use memex_sync::engine::{Engine, SyncError};
use memex_sync::key::SyncKey;
use memex_sync::target::Target;
use memex_sync::url::AnyTarget;

use crate::config::Settings;
use crate::state::{Ask, Shared, SyncHandle, Synced};
use crate::store::ingest::IngestOptions;
use crate::store::{ReadPool, Writer};
use crate::vector::ForSearch;

/// The target `memex sync setup` or `join` recorded in the data folder when the config names
/// none (private: its URL may hold a password).
pub const TARGET_FILE: &str = "sync-target";

/// At most one push this often while messages keep coming.
pub const PUSH_EVERY: Duration = Duration::from_secs(2);
/// The longest pause after failures before the target is tried again.
pub const MAX_PAUSE: Duration = Duration::from_secs(300);

/// The sync key's file: `[sync] key_file`, else `sync.key` in the data folder.
pub fn key_path(s: &Settings) -> PathBuf {
    if s.sync.key_file.is_empty() {
        s.data_dir().join("sync.key")
    } else {
        PathBuf::from(&s.sync.key_file)
    }
}

/// The target in effect: `[sync] url`, else the one setup or join recorded.
pub fn configured_url(s: &Settings) -> std::io::Result<Option<String>> {
    if !s.sync.url.is_empty() {
        return Ok(Some(s.sync.url.clone()));
    }
    match std::fs::read_to_string(s.data_dir().join(TARGET_FILE)) {
        Ok(u) => Ok(Some(u.trim().to_owned()).filter(|u| !u.is_empty())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// How pulled messages are ingested: as the service ingests files, on one thread.
pub fn ingest_options(s: &Settings) -> IngestOptions {
    IngestOptions {
        redact: s.store.redact,
        fts_max_bytes: s.store.fts_max_bytes,
        batch_bytes: s.import.batch_bytes,
        threads: 1,
    }
}

/// The target and key the service syncs with, when this machine syncs; a sync that is set up
/// but cannot start (a key that does not read, a URL that does not parse) is logged and left
/// off, the rest of the service runs.
pub(super) fn configured(s: &Settings) -> Option<(String, SyncKey)> {
    let url = match configured_url(s) {
        Ok(Some(u)) => u,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(error = %e, "sync is off: cannot read the recorded sync target");
            return None;
        }
    };
    if let Err(e) = memex_sync::url::target(&url) {
        tracing::warn!(error = %e, "sync is off");
        return None;
    }
    match SyncKey::read_file(&key_path(s)) {
        Ok(k) => Some((url, k)),
        Err(e) => {
            tracing::warn!(error = %e, "sync is off: the sync key cannot be used");
            None
        }
    }
}

/// The loop's channel: its handle, and what it reads.
pub(super) fn channel() -> (SyncHandle, mpsc::Receiver<Ask>) {
    let (tx, rx) = mpsc::channel(4);
    (SyncHandle::new(tx), rx)
}

/// Everything the loop works with.
pub(super) struct SyncLoop {
    /// The target's URL: each attempt to open it makes it anew.
    pub url: String,
    pub key: SyncKey,
    pub interval: Duration,
    pub opts: IngestOptions,
    pub data_dir: PathBuf,
    pub pool: ReadPool,
    pub writer: Writer,
    pub state: Shared,
    pub vectors: Arc<ForSearch>,
}

/// Failures in a row, and when to try again.
#[derive(Default)]
struct Pause {
    failures: u32,
    until: Option<Instant>,
}

impl Pause {
    fn failed(&mut self, what: &str, e: &dyn std::fmt::Display) {
        self.failures += 1;
        let pause = PUSH_EVERY
            .saturating_mul(1 << self.failures.min(10))
            .min(MAX_PAUSE);
        // The first failure says why; the later ones of the same outage only count.
        if self.failures == 1 {
            tracing::warn!(error = %e, retry_in_s = pause.as_secs(), "sync: cannot {what}");
        } else {
            tracing::debug!(error = %e, failures = self.failures, "sync: cannot {what}");
        }
        self.until = Some(Instant::now() + pause);
    }

    fn ok(&mut self) {
        if self.failures > 0 {
            tracing::info!(failures = self.failures, "sync: the target answers again");
        }
        *self = Pause::default();
    }

    fn waiting(&self) -> bool {
        self.until.is_some_and(|u| Instant::now() < u)
    }
}

impl SyncLoop {
    /// Runs until shutdown.
    pub(super) async fn run(
        self,
        mut asks: mpsc::Receiver<Ask>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let agents = AdapterRegistry::new().names();
        let mut engine: Option<Engine<AnyTarget>> = None;
        let mut pause = Pause::default();
        let mut news: Option<mpsc::Receiver<String>> = None;
        // What was archived when the last push ran (none yet: push at the start).
        let mut pushed_at_count: Option<u64> = None;
        let mut next_pull = Instant::now();
        loop {
            let mut asked: Option<Ask> = None;
            let (mut announced, mut deaf) = (false, false);
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => return,
                a = asks.recv() => asked = a,
                n = async { news.as_mut()?.recv().await }, if news.is_some() => match n {
                    Some(host) => announced = engine.as_ref().is_some_and(|e| e.host() != host),
                    None => deaf = true,
                },
                () = tokio::time::sleep(PUSH_EVERY) => {}
            }
            if deaf {
                news = None;
            }
            // An asked sync runs now, whatever the pause says.
            if engine.is_none() && (asked.is_some() || !pause.waiting()) {
                let Ok(target) = memex_sync::url::target(&self.url) else {
                    return;
                };
                let opened = Engine::open(
                    target,
                    self.key.clone(),
                    &self.writer,
                    agents.clone(),
                    self.opts.clone(),
                )
                .await;
                match opened {
                    Ok(e) => {
                        pause.ok();
                        tracing::info!(target = %e.target().describe(), host = e.host(), "sync: on");
                        engine = Some(e);
                    }
                    Err(e) => {
                        pause.failed("reach the target", &e);
                        if let Some((_, _, answer)) = asked.take() {
                            let _ = answer.send(Err(e.to_string()));
                        }
                        continue;
                    }
                }
            }
            let Some(e) = engine.as_ref() else { continue };
            if news.is_none() && !pause.waiting() {
                match e.target().watch().await {
                    Ok(rx) => news = rx,
                    Err(err) => {
                        tracing::debug!(error = %err, "sync: cannot listen for new batches")
                    }
                }
            }
            let count = self.state.ingest.messages.load(Ordering::Relaxed)
                + self.state.ingest.messages_updated.load(Ordering::Relaxed);
            let (push, pull) = match &asked {
                Some((push, pull, _)) => (*push, *pull),
                None if pause.waiting() => continue,
                None => (
                    pushed_at_count != Some(count) || self.outbox_waiting().await,
                    announced || Instant::now() >= next_pull,
                ),
            };
            let mut done = Synced {
                pushed: None,
                pulled: None,
            };
            let result: Result<(), SyncError> = async {
                if push {
                    let r = e.push(&self.pool, &self.writer).await?;
                    pushed_at_count = Some(count);
                    if r.batches > 0 {
                        tracing::info!(
                            batches = r.batches,
                            messages = r.messages,
                            forgets = r.forgets,
                            seq = r.seq,
                            "sync: pushed"
                        );
                    }
                    done.pushed = Some(r);
                }
                if pull {
                    let r = e.pull(&self.pool, &self.writer).await?;
                    next_pull = Instant::now() + self.interval;
                    if r.batches > 0 || !r.failed.is_empty() {
                        tracing::info!(
                            batches = r.batches,
                            messages = r.messages,
                            forgotten = r.forgotten,
                            failed = r.failed.len(),
                            "sync: pulled"
                        );
                    }
                    if !r.gone.is_empty() {
                        self.purge(&r.gone).await;
                    }
                    done.pulled = Some(r);
                }
                Ok(())
            }
            .await;
            let answer = match result {
                Ok(()) => {
                    pause.ok();
                    Ok(done)
                }
                Err(err) => {
                    pause.failed("sync", &err);
                    Err(err.to_string())
                }
            };
            if let Some((_, _, to)) = asked {
                let _ = to.send(answer);
            }
        }
    }

    /// Whether something forgotten here, or a message changed since it was sent, waits.
    async fn outbox_waiting(&self) -> bool {
        let pool = self.pool.clone();
        matches!(
            tokio::task::spawn_blocking(move || pool.with(crate::store::sync::outbox_waiting))
                .await,
            Ok(Ok(Ok(true)))
        )
    }

    /// The vectors of what the other machines forgot leave the vector folder's files too.
    async fn purge(&self, gone: &[(i64, i64)]) {
        if let Some(v) = &self.vectors.vectors {
            // The indexer rewrites the files when it is free; nothing to wait for here.
            drop(v.request_purge());
            return;
        }
        let pool = self.pool.clone();
        let dim = tokio::task::spawn_blocking(move || {
            pool.with(|c| crate::vector::stored_model(c).map(|m| m.map(|(_, d)| d)))
        })
        .await;
        let dim = match dim {
            Ok(Ok(Ok(d))) => d,
            _ => None,
        };
        if let Err(e) = crate::vector::forget_without_indexer(&self.data_dir, dim, gone).await {
            tracing::warn!(error = %e, "sync: cannot remove the vectors of forgotten rows");
        }
    }
}
