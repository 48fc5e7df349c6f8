//! The ingester component: backfills every root, then turns each [`Change`] from the watcher
//! into ingests through the same code path as `memex import` (parser threads, one writer,
//! a batch and its cursor in one transaction).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ai_cli_session_collector::AdapterRegistry;
use tokio::sync::mpsc;

use super::Shared;
use crate::store::Writer;
use crate::store::ingest::{self, IngestOptions, Job, Progress};
use crate::watch::Change;

pub(super) struct Ingester {
    pub registry: Arc<AdapterRegistry>,
    pub writer: Writer,
    pub data_dir: PathBuf,
    pub opts: IngestOptions,
    pub roots: Vec<(String, PathBuf)>,
    pub state: Shared,
    pub stop: Arc<AtomicBool>,
    /// Sessions touched by each ingest, with their last activity, for the tracker.
    pub activity: mpsc::Sender<HashMap<i64, Option<i64>>>,
    /// Told after each ingest that touched sessions: project folders may have been learnt
    /// ([`ProjectRoots`], on a thread of its own: reading a folder can hang on a network mount).
    pub projects: Option<std::sync::mpsc::SyncSender<()>>,
}

/// The roots in project folders (agents that keep their files there: Aider, Crush): when an
/// ingest brings sessions of a project the archive did not know, the project's folder becomes a
/// root of those agents, watched and scanned from then on, without a restart.
pub(super) struct ProjectRoots {
    pub settings: crate::config::Settings,
    pub env: ai_cli_session_collector::Env,
    pub pool: crate::store::ReadPool,
    pub adder: crate::watch::RootAdder,
    /// Every root followed.
    pub known: HashSet<(String, PathBuf)>,
    /// The highest session row id when the projects were last read.
    pub sessions_seen: i64,
    pub checked: Option<Instant>,
}

/// Even without new sessions, how often the known projects are read again while ingesting (a
/// session's folder can arrive after its first message).
const PROJECTS_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Project folders followed at most, the most recently active first: each costs a watch or two,
/// and the system's watches are shared by every program of the user.
pub const MAX_PROJECT_ROOTS: usize = 1000;

impl ProjectRoots {
    /// Runs until the ingester goes: each nudge (those sent meanwhile count once) reads the
    /// projects again.
    pub(super) fn run(
        mut self,
        registry: Arc<AdapterRegistry>,
        nudges: std::sync::mpsc::Receiver<()>,
    ) {
        while nudges.recv().is_ok() {
            while nudges.try_recv().is_ok() {}
            let added = self.refresh(&registry);
            if !added.is_empty() {
                tracing::debug!(
                    roots = added.len(),
                    "project folders added to the watched roots"
                );
            }
        }
    }

    /// Reads the archive's projects when sessions were added (or a while has passed), and hands
    /// the watcher the roots they bring. The roots added.
    pub(super) fn refresh(&mut self, registry: &AdapterRegistry) -> Vec<(String, PathBuf)> {
        let top = self
            .pool
            .with(|c| {
                c.query_row("SELECT coalesce(max(id), 0) FROM sessions", [], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .ok()
            .and_then(Result::ok)
            .unwrap_or(self.sessions_seen);
        let due = self.checked.is_none_or(|t| t.elapsed() >= PROJECTS_EVERY);
        if top == self.sessions_seen && !due {
            return Vec::new();
        }
        self.sessions_seen = top;
        self.checked = Some(Instant::now());
        let projects = match self.pool.with(crate::store::read::known_projects) {
            Ok(Ok(mut p)) => {
                p.truncate(MAX_PROJECT_ROOTS);
                p
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot read the archive's projects");
                return Vec::new();
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the archive's projects");
                return Vec::new();
            }
        };
        let new: Vec<(String, PathBuf)> = self
            .settings
            .roots_with_projects(registry, &self.env, &projects)
            .into_iter()
            .filter(|r| !self.known.contains(r))
            .collect();
        if !new.is_empty() && self.adder.add(new.clone()) {
            self.known.extend(new.iter().cloned());
        }
        new
    }
}

impl Ingester {
    pub(super) fn run(self, mut changes: mpsc::Receiver<Change>) {
        self.state.set_phase("backfilling");
        let mut all = Change {
            since: None,
            ..Change::default()
        };
        for (agent, root) in self.roots.iter().filter(|(_, r)| r.is_dir()) {
            all.scans
                .insert((agent.clone(), root.clone(), root.clone()));
        }
        let started = Instant::now();
        let (mut retry, mut settling) = self.ingest(all, "backfill");
        if self.stop.load(Ordering::Relaxed) {
            return;
        }
        tracing::info!(
            seconds = started.elapsed().as_secs_f64(),
            "backfill done; watching"
        );
        self.state.set_phase("watching");
        loop {
            let (mut change, mut n) = if retry.is_empty() && settling.is_empty() {
                match changes.blocking_recv() {
                    Some(c) => (c, 1),
                    None => break,
                }
            } else {
                // Files whose batch could not be stored are read again from their last stored
                // cursor after a pause, or with the next change, whichever comes first; databases
                // written while they were read, after a shorter one.
                let pause = if settling.is_empty() {
                    RETRY_AFTER
                } else {
                    SETTLE_AFTER
                };
                match self.wait_for_change(&mut changes, pause) {
                    Ok(Some(c)) => (c, 1),
                    Ok(None) => (Change::default(), 0),
                    Err(()) => break,
                }
            };
            for job in retry.drain(..).chain(settling.drain(..)) {
                change
                    .files
                    .insert((job.agent.to_owned(), job.root, job.path));
            }
            // Everything queued meanwhile is one ingest.
            while let Ok(more) = changes.try_recv() {
                change.merge(more);
                n += 1;
            }
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            (retry, settling) = self.ingest(change, "change");
            self.state
                .ingest
                .changes_done
                .fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The next change, or `None` after `wait`; `Err` when the watcher is gone or the service
    /// stops.
    fn wait_for_change(
        &self,
        changes: &mut mpsc::Receiver<Change>,
        wait: std::time::Duration,
    ) -> Result<Option<Change>, ()> {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if self.stop.load(Ordering::Relaxed) {
                return Err(());
            }
            match changes.try_recv() {
                Ok(c) => return Ok(Some(c)),
                Err(mpsc::error::TryRecvError::Empty) => {
                    std::thread::sleep(std::time::Duration::from_millis(100))
                }
                Err(mpsc::error::TryRecvError::Disconnected) => return Err(()),
            }
        }
        Ok(None)
    }

    /// Ingests one change; returns the files to read again: those a batch of which could not be
    /// stored, and the databases that were being written (`ImportReport::settling`).
    fn ingest(&self, change: Change, what: &'static str) -> (Vec<Job>, Vec<Job>) {
        let stats = &self.state.ingest;
        let mut jobs: BTreeMap<PathBuf, Job> = BTreeMap::new();
        let mut full_roots = Vec::new();
        for (agent, root, under) in &change.scans {
            let Some(adapter) = self.registry.get(agent) else {
                continue;
            };
            if under == root {
                full_roots.push((agent.clone(), root.clone()));
            }
            for path in adapter.discover(root) {
                if path.starts_with(under) {
                    jobs.insert(
                        path.clone(),
                        Job {
                            agent: adapter.name(),
                            root: root.clone(),
                            path,
                        },
                    );
                }
            }
        }
        let mut gone = Vec::new();
        for (agent, root, path) in &change.files {
            let Some(adapter) = self.registry.get(agent) else {
                continue;
            };
            if path.is_file() {
                jobs.entry(path.clone()).or_insert_with(|| Job {
                    agent: adapter.name(),
                    root: root.clone(),
                    path: path.clone(),
                });
            } else {
                gone.push(path.clone());
            }
        }
        let vanished = change.vanished;
        let present: HashSet<PathBuf> = jobs.keys().cloned().collect();
        let jobs: Vec<Job> = jobs.into_values().collect();
        let opts = IngestOptions {
            threads: self.opts.threads.min(jobs.len()).max(1),
            ..self.opts.clone()
        };
        let files = jobs.len();
        let progress = BackfillLog::new(what);
        let report = ingest::import(
            &self.writer,
            &self.data_dir,
            self.registry.clone(),
            jobs.clone(),
            &opts,
            &self.stop,
            &|p| progress.on(p),
        );
        let report = match report {
            Ok(r) => r,
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "cannot write to the archive");
                // Every file of this change is read again after a pause: some may be databases
                // whose last commit nothing else would bring back.
                return (jobs, Vec::new());
            }
        };
        let stopped = self.stop.load(Ordering::Relaxed);
        // Files a full scan no longer finds, and files removed or renamed away, keep their
        // messages; they are only marked gone.
        if !stopped {
            let marked = self.writer.call(move |c| {
                let mut n = ingest::mark_gone(c, &full_roots, &present)?;
                for p in &gone {
                    n += usize::from(ingest::mark_path_gone(c, p)?);
                }
                for d in &vanished {
                    n += ingest::mark_gone_under(c, d)?;
                }
                Ok::<_, rusqlite::Error>(n)
            });
            match marked {
                Ok(Ok(n)) if n > 0 => {
                    stats.files_gone.fetch_add(n as u64, Ordering::Relaxed);
                    tracing::info!(
                        files = n,
                        "transcripts deleted from disk; their messages stay in the archive"
                    );
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot record deleted files"),
                Err(e) => tracing::warn!(error = %e, "cannot record deleted files"),
            }
        }
        stats.ingests.fetch_add(1, Ordering::Relaxed);
        stats.files.fetch_add(
            report.files - report.files_skipped_unchanged,
            Ordering::Relaxed,
        );
        stats.messages.fetch_add(report.messages, Ordering::Relaxed);
        stats
            .messages_updated
            .fetch_add(report.messages_updated, Ordering::Relaxed);
        stats
            .bad_lines
            .fetch_add(report.bad_lines, Ordering::Relaxed);
        // Bad lines are recorded with the file (parse_issues); a file that cannot be read or
        // stored at all is worth a warning.
        let failed: Vec<_> = report.errors.iter().filter(|e| e.line == 0).collect();
        stats
            .errors
            .fetch_add(failed.len() as u64, Ordering::Relaxed);
        for e in failed.iter().take(20) {
            tracing::warn!(file = %e.file, reason = %e.reason, "cannot ingest");
        }
        if report.messages + report.messages_updated > 0 {
            stats
                .last_ingest_ms
                .store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
            if let Some(since) = change.since {
                stats.record_lag(since.elapsed().as_millis() as u64);
            }
        }
        if what == "backfill" || report.messages > 0 {
            tracing::info!(
                what,
                files = files,
                changed_files = report.files - report.files_skipped_unchanged,
                messages = report.messages,
                updated = report.messages_updated,
                bad_lines = report.bad_lines,
                "ingested"
            );
        }
        if !report.touched.is_empty() {
            // No page listening is not an error.
            let _ = self
                .state
                .touched
                .send(report.touched.keys().copied().collect());
            if let Some(p) = &self.projects {
                // Full: a read is already due, which sees this ingest too.
                let _ = p.try_send(());
            }
            if self.activity.blocking_send(report.touched).is_err() {
                tracing::debug!("the tracker has stopped");
            }
        }
        if report.bytes >= RELEASE_AFTER_BYTES {
            crate::memory::release_free_memory();
        }
        (report.failed, report.settling)
    }
}

/// How long a file whose batch could not be stored waits before it is read again.
const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(30);
/// How soon a database read while it was written is read again (it is read again until its
/// log has been left alone for [`ingest::SETTLE`]).
const SETTLE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// After an ingest of at least this much, freed memory is handed back to the system.
const RELEASE_AFTER_BYTES: u64 = 1 << 20;
/// Backfill progress in the log, every few seconds.
struct BackfillLog {
    what: &'static str,
    inner: Mutex<(u64, u64, u64, Instant)>,
}

impl BackfillLog {
    fn new(what: &'static str) -> Self {
        BackfillLog {
            what,
            inner: Mutex::new((0, 0, 0, Instant::now())),
        }
    }

    fn on(&self, p: Progress) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (files_total, bytes_total, done, last) = &mut *g;
        match p {
            Progress::Total { files, bytes } => {
                *files_total = files;
                *bytes_total = bytes;
                if self.what == "backfill" {
                    tracing::info!(
                        files,
                        mb = bytes / 1_000_000,
                        "backfill: reading every transcript"
                    );
                }
            }
            Progress::File { bytes } => {
                *done += bytes;
                if last.elapsed().as_secs() >= 3 {
                    *last = Instant::now();
                    tracing::info!(
                        what = self.what,
                        done_mb = *done / 1_000_000,
                        total_mb = *bytes_total / 1_000_000,
                        files = *files_total,
                        "ingest progress"
                    );
                }
            }
        }
    }
}
