//! The watcher component: `notify` wrapped in an actor thread that turns file-system events
//! under the agents' transcript roots into debounced [`Change`]s for the ingester.
//!
//! - Every root is watched recursively, except a project folder of an agent that keeps its
//!   files in projects (Aider, Crush): there only the folder that holds the agent's file is
//!   watched, not recursively, so a large work tree costs one watch. A root that does not exist yet is watched through its
//!   nearest existing ancestor and taken up (with a scan) the moment it appears.
//! - A folder that appears under a root is scanned, because files can be written into it before
//!   its own watch is in place.
//! - Events are gathered until the files have been quiet for `debounce` (at most four times
//!   that in a steady stream of appends), so a burst of appends is one ingest.
//! - When the operating system drops events (queue overflow) or our own event queue is full,
//!   every root is scanned again: the ingester's cursors make a scan cheap and exact.
//! - Reads generate open/close events (our own ingest among them): access events are ignored.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use ai_cli_session_collector::AdapterRegistry;
use notify::{EventKind, RecursiveMode, Watcher as _};
use serde::Serialize;

/// What changed since the last [`Change`], gathered over one debounce window.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// Transcript files written, created, renamed or removed: (agent, root, path).
    pub files: BTreeSet<(String, PathBuf, PathBuf)>,
    /// Folders to scan for transcripts: (agent, root, folder), the folder being the root itself
    /// or a folder that appeared under it.
    pub scans: BTreeSet<(String, PathBuf, PathBuf)>,
    /// Paths under a root that vanished and are not transcripts themselves (a folder deleted or
    /// moved away): known files under them are checked and marked gone.
    pub vanished: BTreeSet<PathBuf>,
    /// When the first event of this change arrived (for the ingest-lag figures).
    pub since: Option<Instant>,
}

impl Change {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.scans.is_empty() && self.vanished.is_empty()
    }

    /// Adds `other` to this change.
    pub fn merge(&mut self, other: Change) {
        self.files.extend(other.files);
        self.scans.extend(other.scans);
        self.vanished.extend(other.vanished);
        self.since = match (self.since, other.since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// How to watch.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    pub roots: Vec<(String, PathBuf)>,
    /// `Some(interval)`: poll instead of file-system events.
    pub poll: Option<Duration>,
    pub debounce: Duration,
}

/// The state of one root, for `/api/health` and the log.
#[derive(Debug, Clone, Serialize)]
pub struct RootState {
    pub agent: String,
    pub path: PathBuf,
    /// `watching`, `waiting` (does not exist yet; its parent is watched) or `failed`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the watcher shares with the rest of the service.
#[derive(Debug, Default)]
pub struct WatchStatus {
    pub mode: Mutex<&'static str>,
    pub roots: Mutex<Vec<RootState>>,
    /// File-system events received (access events excluded).
    pub events: AtomicU64,
    /// Times every root was scanned again because events were lost.
    pub overflows: AtomicU64,
    /// Files changed but not yet handed to the ingester.
    pub pending_files: AtomicU64,
    pub last_event_ms: AtomicI64,
    /// Changes handed to the ingester (compare with the ingester's `changes_done`).
    pub changes_sent: AtomicU64,
}

impl WatchStatus {
    pub fn roots(&self) -> Vec<RootState> {
        self.roots.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

enum Msg {
    Event(notify::Result<notify::Event>),
    /// Roots found while running (project folders the archive learnt of).
    AddRoots(Vec<(String, PathBuf)>),
    Stop,
}

/// Hands the running watcher roots to follow from now on; each is scanned once it is watched.
#[derive(Clone)]
pub struct RootAdder {
    tx: mpsc::SyncSender<Msg>,
}

impl RootAdder {
    /// Adds `roots` (those already followed are ignored). `false` when the watcher has stopped.
    pub fn add(&self, roots: Vec<(String, PathBuf)>) -> bool {
        self.tx.send(Msg::AddRoots(roots)).is_ok()
    }
}

/// The running watcher; [`WatcherHandle::stop`] ends it.
pub struct WatcherHandle {
    tx: mpsc::SyncSender<Msg>,
    thread: Option<thread::JoinHandle<()>>,
}

impl WatcherHandle {
    /// What adds roots to this watcher while it runs.
    pub fn adder(&self) -> RootAdder {
        RootAdder {
            tx: self.tx.clone(),
        }
    }

    /// Stops watching and waits for the actor to finish; changes not yet sent are dropped (the
    /// next start scans every root anyway).
    pub fn stop(mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Events waiting for the actor. Sized for a burst of tool output: past it the actor scans every
/// root instead of queueing more, so memory stays bounded whatever the file system does.
const EVENT_QUEUE: usize = 4096;

/// Starts watching. Changes go to `out`, a bounded channel: when the ingester is behind, the
/// actor keeps merging changes into the one it holds instead of queueing more.
pub fn start(
    cfg: WatchConfig,
    registry: Arc<AdapterRegistry>,
    out: tokio::sync::mpsc::Sender<Change>,
    status: Arc<WatchStatus>,
) -> notify::Result<WatcherHandle> {
    let (tx, rx) = mpsc::sync_channel::<Msg>(EVENT_QUEUE);
    let overflow = Arc::new(AtomicBool::new(false));
    let handler = {
        let tx = tx.clone();
        let overflow = overflow.clone();
        move |res: notify::Result<notify::Event>| {
            if tx.try_send(Msg::Event(res)).is_err() {
                overflow.store(true, Ordering::Relaxed);
            }
        }
    };
    let watcher: Box<dyn notify::Watcher + Send> = match cfg.poll {
        Some(interval) => {
            *status.mode.lock().unwrap_or_else(|e| e.into_inner()) = "poll";
            Box::new(notify::PollWatcher::new(
                handler,
                notify::Config::default()
                    .with_poll_interval(interval)
                    .with_follow_symlinks(false),
            )?)
        }
        None => {
            *status.mode.lock().unwrap_or_else(|e| e.into_inner()) = "native";
            // Links below a root are not followed: what they point at is not the agent's (the
            // store refuses such files too).
            Box::new(notify::RecommendedWatcher::new(
                handler,
                notify::Config::default().with_follow_symlinks(false),
            )?)
        }
    };
    let mut actor = Actor {
        watcher,
        roots: cfg
            .roots
            .iter()
            .map(|(agent, path)| Root::new(&registry, agent, path))
            .collect(),
        registry,
        debounce: cfg.debounce,
        status,
        overflow,
        pending: Change::default(),
        last_event: None,
        out,
    };
    actor.place_watches(false);
    let thread = thread::Builder::new()
        .name("memex-watch".into())
        .spawn(move || actor.run(rx))
        .expect("spawn the watcher thread");
    Ok(WatcherHandle {
        tx,
        thread: Some(thread),
    })
}

struct Root {
    agent: String,
    path: PathBuf,
    /// The folder to watch: the root, or in a project folder the folder of the agent's file.
    target: PathBuf,
    /// Whether `target` is watched with everything under it.
    recursive: bool,
    /// The folder actually watched: the target or, while the target does not exist, its
    /// nearest existing ancestor (not recursively).
    watched: Option<PathBuf>,
    error: Option<String>,
}

impl Root {
    fn new(registry: &AdapterRegistry, agent: &str, path: &Path) -> Root {
        // A project folder is watched only where the agent's file lives.
        let in_project = registry
            .get(agent)
            .and_then(|a| a.project_files().first())
            .and_then(|f| path.join(f).parent().map(Path::to_owned));
        Root {
            agent: agent.to_owned(),
            path: path.to_owned(),
            target: in_project.clone().unwrap_or_else(|| path.to_owned()),
            recursive: in_project.is_none(),
            watched: None,
            error: None,
        }
    }
}

struct Actor {
    watcher: Box<dyn notify::Watcher + Send>,
    registry: Arc<AdapterRegistry>,
    roots: Vec<Root>,
    debounce: Duration,
    status: Arc<WatchStatus>,
    overflow: Arc<AtomicBool>,
    pending: Change,
    last_event: Option<Instant>,
    out: tokio::sync::mpsc::Sender<Change>,
}

impl Actor {
    fn run(mut self, rx: mpsc::Receiver<Msg>) {
        loop {
            let timeout = self.next_timeout();
            match rx.recv_timeout(timeout) {
                Ok(Msg::Event(Ok(ev))) => self.on_event(ev),
                Ok(Msg::Event(Err(e))) => {
                    tracing::warn!(error = %e, "file watcher error; scanning every root again");
                    self.rescan_all();
                }
                Ok(Msg::AddRoots(roots)) => self.add_roots(roots),
                Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if self.overflow.swap(false, Ordering::Relaxed) {
                tracing::warn!("file events were dropped; scanning every root again");
                self.rescan_all();
            }
            self.flush_if_due();
        }
        tracing::debug!("watcher stopped");
    }

    fn next_timeout(&self) -> Duration {
        let Some(first) = self.pending.since else {
            return Duration::from_secs(3600);
        };
        let now = Instant::now();
        let quiet_at = self.last_event.unwrap_or(first) + self.debounce;
        let latest = first + self.max_wait();
        quiet_at
            .min(latest)
            .saturating_duration_since(now)
            .max(Duration::from_millis(1))
    }

    /// A steady stream of appends is still delivered this often.
    fn max_wait(&self) -> Duration {
        (self.debounce * 4).max(Duration::from_millis(10))
    }

    fn flush_if_due(&mut self) {
        let Some(first) = self.pending.since else {
            return;
        };
        let now = Instant::now();
        let quiet = self
            .last_event
            .is_none_or(|t| now.duration_since(t) >= self.debounce);
        if !quiet && now.duration_since(first) < self.max_wait() {
            return;
        }
        let change = std::mem::take(&mut self.pending);
        match self.out.try_send(change) {
            Ok(()) => {
                self.status.pending_files.store(0, Ordering::Relaxed);
                self.status.changes_sent.fetch_add(1, Ordering::Relaxed);
            }
            // The ingester is behind: keep gathering, try again after the next debounce.
            Err(tokio::sync::mpsc::error::TrySendError::Full(change)) => {
                self.pending = change;
                self.last_event = Some(now);
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    fn on_event(&mut self, ev: notify::Event) {
        if matches!(ev.kind, EventKind::Access(_)) {
            return;
        }
        let now = Instant::now();
        self.status.events.fetch_add(1, Ordering::Relaxed);
        self.status
            .last_event_ms
            .store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
        if ev.need_rescan() {
            self.status.overflows.fetch_add(1, Ordering::Relaxed);
            self.rescan_all();
        }
        // Something changed near a root that is not there yet, or a root went away.
        let near_missing = self.roots.iter().any(|r| {
            r.watched.as_ref() != Some(&r.target)
                && ev
                    .paths
                    .iter()
                    .any(|p| r.watched.as_ref().is_some_and(|w| p.starts_with(w)))
        });
        let root_gone = ev.paths.iter().any(|p| {
            self.roots
                .iter()
                .any(|r| r.target.starts_with(p) && !r.target.is_dir())
        });
        if near_missing || root_gone {
            self.place_watches(true);
        }
        let mut added = Change::default();
        for p in &ev.paths {
            // Every watched root that holds the path, the deepest first: several agents can
            // share a folder (Aider and Crush in one project), and the path belongs to the
            // first whose adapter reads it.
            let mut holders: Vec<&Root> = self
                .roots
                .iter()
                .filter(|r| r.watched.as_ref() == Some(&r.target) && p.starts_with(&r.path))
                .collect();
            holders.sort_by_key(|r| std::cmp::Reverse(r.path.as_os_str().len()));
            let Some(&deepest) = holders.first() else {
                continue;
            };
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir()) {
                if let Some(root) = holders.iter().find(|r| r.recursive)
                    && matches!(ev.kind, EventKind::Create(_) | EventKind::Modify(_))
                {
                    added
                        .scans
                        .insert((root.agent.clone(), root.path.clone(), p.clone()));
                }
                continue;
            }
            // A transcript, or a change of one: a database's `-wal`, a part of a conversation
            // kept in many files.
            let source = holders.iter().find_map(|r| {
                let a = self.registry.get(&r.agent)?;
                a.source_of(&r.path, p).map(|s| (*r, s))
            });
            if let Some((root, source)) = source {
                added
                    .files
                    .insert((root.agent.clone(), root.path.clone(), source));
            } else if p != &deepest.path
                && matches!(ev.kind, EventKind::Remove(_) | EventKind::Modify(_))
                && !p.exists()
            {
                added.vanished.insert(p.clone());
            }
        }
        if !added.is_empty() {
            added.since = Some(now);
            self.pending.merge(added);
            self.last_event = Some(now);
            self.status
                .pending_files
                .store(self.pending.files.len() as u64, Ordering::Relaxed);
        }
    }

    fn add_roots(&mut self, roots: Vec<(String, PathBuf)>) {
        let mut added = false;
        for (agent, path) in roots {
            if self.registry.get(&agent).is_none()
                || self
                    .roots
                    .iter()
                    .any(|r| r.agent == agent && r.path == path)
            {
                continue;
            }
            tracing::info!(agent = %agent, root = %path.display(), "following a new root");
            let root = Root::new(&self.registry, &agent, &path);
            self.roots.push(root);
            added = true;
        }
        if added {
            self.place_watches(true);
        }
    }

    fn rescan_all(&mut self) {
        let mut c = Change {
            since: Some(Instant::now()),
            ..Change::default()
        };
        for r in self.roots.iter().filter(|r| r.target.is_dir()) {
            c.scans
                .insert((r.agent.clone(), r.path.clone(), r.path.clone()));
        }
        self.pending.merge(c);
    }

    /// Puts each root's watch where it belongs: on the root when it exists, else on its nearest
    /// existing ancestor. A root that has just appeared is scanned when `scan_new` is set.
    /// Folders can appear while the watches are placed (`mkdir -p` of a whole path, then a
    /// file): the placing is repeated until nothing moves, so that no level appears unseen
    /// between one watch and the next.
    fn place_watches(&mut self, scan_new: bool) {
        for _ in 0..16 {
            if !self.place_watches_once(scan_new) {
                break;
            }
        }
        let states = self
            .roots
            .iter()
            .map(|r| RootState {
                agent: r.agent.clone(),
                path: r.path.clone(),
                state: match (&r.error, &r.watched) {
                    (Some(_), _) => "failed",
                    (None, Some(w)) if w == &r.target => "watching",
                    _ => "waiting",
                },
                error: r.error.clone(),
            })
            .collect();
        *self.status.roots.lock().unwrap_or_else(|e| e.into_inner()) = states;
    }

    /// One pass of [`Self::place_watches`]; whether any watch moved.
    fn place_watches_once(&mut self, scan_new: bool) -> bool {
        let mut moved = false;
        let targets: Vec<Option<PathBuf>> = self
            .roots
            .iter()
            .map(|r| {
                if r.target.is_dir() {
                    Some(r.target.clone())
                } else {
                    r.target
                        .ancestors()
                        .skip(1)
                        .find(|a| a.is_dir())
                        .map(Path::to_owned)
                }
            })
            .collect();
        let mut scans = Vec::new();
        for (i, target) in targets.into_iter().enumerate() {
            if target == self.roots[i].watched && self.roots[i].error.is_none() {
                continue;
            }
            // A watch on an ancestor can be shared by several missing roots.
            if let Some(old) = self.roots[i].watched.take() {
                let shared = self
                    .roots
                    .iter()
                    .enumerate()
                    .any(|(j, r)| j != i && r.watched.as_ref() == Some(&old));
                if !shared {
                    let _ = self.watcher.unwatch(&old);
                }
            }
            let r = &mut self.roots[i];
            r.error = None;
            let Some(t) = target else { continue };
            let mode = if t == r.target && r.recursive {
                RecursiveMode::Recursive
            } else {
                RecursiveMode::NonRecursive
            };
            match self.watcher.watch(&t, mode) {
                Ok(()) => {
                    moved = true;
                    if t == r.target {
                        tracing::info!(agent = %r.agent, root = %r.path.display(), "watching");
                        if scan_new {
                            scans.push((r.agent.clone(), r.path.clone(), r.path.clone()));
                        }
                    } else {
                        // Most agents are not installed: one line each would bury the log.
                        tracing::debug!(agent = %r.agent, root = %r.path.display(), parent = %t.display(),
                            "root does not exist yet; watching its parent");
                    }
                    r.watched = Some(t);
                }
                Err(e) => {
                    tracing::warn!(agent = %r.agent, root = %r.path.display(), error = %e,
                        "cannot watch; raise fs.inotify.max_user_watches or set [watch] poll = true");
                    r.error = Some(e.to_string());
                }
            }
        }
        if !scans.is_empty() {
            let mut c = Change {
                since: Some(Instant::now()),
                ..Change::default()
            };
            c.scans.extend(scans);
            self.pending.merge(c);
        }
        moved
    }
}
