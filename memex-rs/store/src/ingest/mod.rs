//! Turning transcript files into archive rows.
//!
//! Parser threads read each file from its stored cursor through its adapter and *prepare* a
//! batch (redaction, compression, FTS text) so that the writer thread does nothing but write.
//! A batch and the file's new cursor commit together: a crash at any moment loses
//! nothing and duplicates nothing, and `(session, message_id)` is unique so re-reading a file
//! from the start never duplicates either.

mod apply;
mod discover;
mod gone;
mod prepare;

pub(crate) use apply::apply_in;
pub(super) use apply::refresh_session;
pub use apply::{Applied, Outcome, apply, apply_all, resolve_project_hashes};
pub use discover::{Job, discover, git_root};
pub use gone::{mark_gone, mark_gone_under, mark_path_gone};
pub(super) use prepare::redacted_title_tally;
pub use prepare::{Prepared, RawRef, pack_raw, prepare};

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use ai_cli_session_collector::{
    AdapterRegistry, Cursor, Edit, MessageKind, ParseIssue, SessionInfo, SourceKind, TitleSource,
    text,
};
use rusqlite::{Connection, OptionalExtension};
use serde::Serialize;

use super::Writer;
use crate::redact;
use prepare::redacted_title;

/// How ingestion behaves; from `[store]` and `[import]` settings.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    pub redact: bool,
    pub fts_max_bytes: usize,
    pub batch_bytes: usize,
    pub threads: usize,
}

/// A session as the adapter described it, plus what the filesystem says about its project.
pub struct PreparedSession {
    pub info: SessionInfo,
    pub git_root: Option<String>,
}

/// One chunk of one file, ready for the writer.
pub struct Batch {
    pub agent: &'static str,
    pub root: PathBuf,
    pub path: PathBuf,
    /// The file's size and mtime, set only on the batch that reaches its end: an import that
    /// stops between batches must not look finished to the next one.
    pub seen: Option<(u64, i64)>,
    pub cursor: Cursor,
    pub messages: Vec<Prepared>,
    /// zstd blocks holding the messages' raw records (see [`RawRef`]).
    pub raw_blocks: Vec<Vec<u8>>,
    pub sessions: Vec<PreparedSession>,
    pub edits: Vec<Edit>,
    pub issues: Vec<ParseIssue>,
    pub bytes: u64,
}

/// One reported problem with an input file.
#[derive(Debug, Clone, Serialize)]
pub struct FileError {
    pub file: String,
    pub line: u64,
    pub reason: String,
}

/// The outcome of an import.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ImportReport {
    pub files: u64,
    pub files_skipped_unchanged: u64,
    pub sessions: u64,
    pub messages: u64,
    pub messages_updated: u64,
    pub prompts: u64,
    pub bad_lines: u64,
    pub bytes: u64,
    pub errors: Vec<FileError>,
    /// The sessions that got new or changed messages, with their last activity (epoch ms).
    #[serde(skip)]
    pub touched: HashMap<i64, Option<i64>>,
    /// Files whose batch could not be stored: each stopped at its last stored batch (its
    /// cursor), to be read again from there.
    #[serde(skip)]
    pub failed: Vec<Job>,
    /// Databases read while their log was being written: their stamp is not recorded, and
    /// they are to be read again once it settles (see [`SETTLE`]).
    #[serde(skip)]
    pub settling: Vec<Job>,
}

/// What [`ingest_file`] did with a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// Its stamp was the stored one: not read.
    Unchanged,
    /// Read to its end, or as far as the sink let it.
    Read,
    /// A database read to its end while its log was written less than [`SETTLE`] ago: it must
    /// be read again later.
    Settling,
}

/// How long a database's log must have been left alone before its stamp is trusted. SQLite
/// appends a commit to the `-wal` file (which changes the stamp and wakes the watcher) before
/// it publishes the commit in the `-shm` index, after an `fsync`; a reader in between sees
/// the database without that commit. Recording the stamp then would hide the commit until the
/// agent writes again, which for a conversation's last message may be never.
pub const SETTLE: Duration = Duration::from_secs(2);

/// Whether a source with this stamp's mtime (epoch ms) was written less than [`SETTLE`] ago
/// (a time ahead of the clock counts as long ago: it would never settle).
fn written_lately(mtime_ms: i64) -> bool {
    let age = chrono::Utc::now().timestamp_millis() - mtime_ms;
    (0..SETTLE.as_millis() as i64).contains(&age)
}

/// The stored cursor, size and mtime of a file.
fn stored_cursor(conn: &Connection, path: &Path) -> rusqlite::Result<Option<(Cursor, u64, i64)>> {
    conn.query_row(
        "SELECT cursor, size, mtime FROM source_files WHERE path = ?1",
        [path.to_string_lossy()],
        |r| {
            let c: String = r.get(0)?;
            Ok((
                serde_json::from_str(&c).unwrap_or_default(),
                r.get::<_, i64>(1)? as u64,
                r.get(2)?,
            ))
        },
    )
    .optional()
}

/// Whether `path` is a file `forget` left with nothing archived (`forgotten_files`) and it has
/// the stamp it had then.
fn forgotten_unchanged(
    conn: &Connection,
    path: &Path,
    size: u64,
    mtime: i64,
) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT size = ?2 AND mtime = ?3 FROM forgotten_files WHERE digest = ?1",
        rusqlite::params![
            super::path_digest(&path.to_string_lossy()),
            size as i64,
            mtime
        ],
        |r| r.get(0),
    )
    .optional()
    .map(|v| v.unwrap_or(false))
}

/// Why a file could not be read into the archive (the import goes on with the other files).
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("no adapter named {0}")]
    NoAdapter(String),
    #[error("cannot read the file")]
    File(#[from] std::io::Error),
    #[error("cannot read the file's stored cursor")]
    Cursor(#[from] rusqlite::Error),
    #[error(transparent)]
    Parse(#[from] ai_cli_session_collector::ParseError),
}

impl IngestError {
    /// The error and its causes on one line, as the import report shows it.
    pub fn report(&self) -> String {
        let mut out = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            out.push_str(": ");
            out.push_str(&c.to_string());
            cause = c.source();
        }
        out
    }
}

/// Parses one file from its stored cursor to its end, sending prepared batches to `sink`, which
/// answers whether to go on (`false` stops before the next batch is parsed: shutting down).
pub fn ingest_file(
    registry: &AdapterRegistry,
    reader: &Connection,
    job: &Job,
    opts: &IngestOptions,
    git_roots: &mut HashMap<String, Option<String>>,
    sink: &mut dyn FnMut(Batch) -> bool,
) -> Result<Read, IngestError> {
    let adapter = registry
        .get(job.agent)
        .ok_or_else(|| IngestError::NoAdapter(job.agent.to_owned()))?;
    // Whoever found the path (a scan, a file event, a project's file), what lies behind a link
    // inside the agent's folder is not read.
    ai_cli_session_collector::adapter::check_inside(&job.root, &job.path)?;
    let (size, mtime) = adapter.stamp(&job.root, &job.path)?;
    let stored = stored_cursor(reader, &job.path)?;
    if let Some((_, s, m)) = &stored
        && *s == size
        && *m == mtime
    {
        return Ok(Read::Unchanged);
    }
    // A file whose every session was forgotten, unchanged since.
    if stored.is_none() && forgotten_unchanged(reader, &job.path, size, mtime)? {
        return Ok(Read::Unchanged);
    }
    let settling = adapter.source_kind(&job.path) == SourceKind::Database && written_lately(mtime);
    let mut cursor = stored.map(|s| s.0).unwrap_or_default();
    loop {
        let out = adapter.parse(&job.root, &job.path, &cursor, opts.batch_bytes)?;
        // A rewritten file starts again from 0: its first chunk can end exactly where the old
        // cursor was, with nothing but bad lines in it, and still be progress.
        let progressed =
            out.cursor.offset != cursor.offset || !out.messages.is_empty() || out.bytes > 0;
        let at_end = out.at_end;
        // A title is derived from text, so it is derived again from the redacted text: the
        // adapter cut it to one line first, which can leave the start of a `<private>` block or
        // of a key in it, where no rule can recognise it any more.
        let mut titles: HashMap<String, String> = HashMap::new();
        if opts.redact {
            for info in &out.sessions {
                if let Some((src, t)) = &info.title {
                    let from_prompt = (*src == TitleSource::FirstPrompt)
                        .then(|| {
                            out.messages.iter().find(|m| {
                                m.session_id == info.session_id && m.kind == MessageKind::UserPrompt
                            })
                        })
                        .flatten();
                    let title = match from_prompt {
                        Some(m) => text::prompt_title(&redact::redact_text(&m.text).0),
                        None => redacted_title(t),
                    };
                    titles.insert(info.session_id.clone(), title);
                }
            }
        }
        let mut messages: Vec<Prepared> =
            out.messages.into_iter().map(|m| prepare(m, opts)).collect();
        let raw_blocks = pack_raw(&mut messages);
        let sessions = out
            .sessions
            .into_iter()
            .map(|mut info| {
                if let Some((_, t)) = info.title.as_mut()
                    && let Some(safe) = titles.get(&info.session_id)
                {
                    *t = safe.clone();
                }
                let git_root = info.project_path.as_ref().and_then(|p| {
                    git_roots
                        .entry(p.clone())
                        .or_insert_with(|| git_root(p))
                        .clone()
                });
                PreparedSession { info, git_root }
            })
            .collect();
        cursor = out.cursor.clone();
        let go_on = sink(Batch {
            agent: job.agent,
            root: job.root.clone(),
            path: job.path.clone(),
            seen: (at_end && !settling).then_some((size, mtime)),
            cursor: out.cursor,
            messages,
            raw_blocks,
            sessions,
            edits: out.edits,
            issues: out.issues,
            bytes: out.bytes,
        });
        if at_end || !progressed || !go_on {
            return Ok(if at_end && settling && go_on {
                Read::Settling
            } else {
                Read::Read
            });
        }
    }
}

/// The writer writes several batches in one transaction: at most [`GROUP_MAX`], and none more
/// once they hold [`GROUP_BYTES`] of source (with the one batch that can pass it, a group holds
/// the writer and grows the WAL at most about twice as much as the largest batch, 8 MiB of
/// source by default, does alone).
const GROUP_MAX: usize = 64;
const GROUP_BYTES: u64 = 8 << 20;
/// Source bytes of the prepared batches in flight (waiting, or in the group being written):
/// they bound an import's memory. Four groups, so that the parsers go on while the writer
/// writes one and through a full-text merge (every few seconds of an import the writer merges
/// sixteen segments at once, for a quarter of a second; with room for one more group the
/// parsers stopped then, and a core stood idle).
const QUEUED_BYTES: u64 = QUEUED_GROUPS as u64 * GROUP_BYTES;
/// The groups in flight: [`QUEUED_BYTES`], and as many groups' batches in the channel.
const QUEUED_GROUPS: usize = 4;
/// How long a group waits for the next batch while a parser thread is still at work, and for
/// all of them at most ([`GROUP_WAIT`]). Each commit writes a full-text segment that must be
/// merged later and the pages every batch touches, so an import of many small files commits a
/// twentieth as often when its groups fill up; a parser sends a small file's batch within a
/// few milliseconds. When the parsers are done (the end of an import, a live file's new lines)
/// the channel closes and nothing waits; nor does a group while a parser waits for room.
const LINGER: Duration = Duration::from_millis(20);
const GROUP_WAIT: Duration = Duration::from_millis(100);

/// The source bytes of the batches in flight, and whether the writer still takes batches.
/// A parser waits here before it sends a batch that would pass [`QUEUED_BYTES`]; a batch is
/// always let through when nothing else is in flight, however large.
#[derive(Default)]
struct InFlight {
    state: Mutex<Flight>,
    freed: Condvar,
}

#[derive(Default)]
struct Flight {
    bytes: u64,
    closed: bool,
    /// Parsers waiting for room.
    waiting: usize,
}

impl InFlight {
    /// Waits until `bytes` more fit; `false` once the writer has stopped taking batches.
    fn take(&self, bytes: u64) -> bool {
        let mut s = self.state.lock().unwrap();
        s.waiting += 1;
        while !s.closed && s.bytes > 0 && s.bytes + bytes > QUEUED_BYTES {
            s = self.freed.wait(s).unwrap();
        }
        s.waiting -= 1;
        s.bytes += bytes;
        !s.closed
    }

    fn give(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap();
        s.bytes = s.bytes.saturating_sub(bytes);
        self.freed.notify_all();
    }

    /// Whether a parser waits for room: then no batch comes until the writer writes.
    fn full(&self) -> bool {
        self.state.lock().unwrap().waiting > 0
    }

    /// The writer takes no more batches: every parser waiting here goes on, and stops.
    fn close(&self) {
        self.state.lock().unwrap().closed = true;
        self.freed.notify_all();
    }
}

/// Closes an [`InFlight`] when the writer's loop ends, however it ends.
struct CloseOnDrop<'a>(&'a InFlight);

impl Drop for CloseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Progress of an import, for a progress bar.
pub enum Progress {
    Total { files: u64, bytes: u64 },
    File { bytes: u64 },
}

/// Imports every job: `opts.threads` parser threads prepare batches, the writer writes them.
/// When `stop` is set, the writer stops taking batches: the group being written is finished,
/// the batches not written yet are dropped whole, and the rest is left for next time (every
/// file's cursor stays exact, so nothing is lost or read twice).
pub fn import(
    writer: &Writer,
    data_dir: &Path,
    registry: Arc<AdapterRegistry>,
    jobs: Vec<Job>,
    opts: &IngestOptions,
    stop: &AtomicBool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<ImportReport, super::StoreError> {
    let total_bytes: u64 = jobs
        .iter()
        .map(|j| std::fs::metadata(&j.path).map_or(0, |m| m.len()))
        .sum();
    progress(Progress::Total {
        files: jobs.len() as u64,
        bytes: total_bytes,
    });
    let queue = Arc::new(Mutex::new(jobs.into_iter().collect::<VecDeque<_>>()));
    let report = Arc::new(Mutex::new(ImportReport::default()));
    let mut sessions: HashSet<(&'static str, String)> = HashSet::new();
    // Bounded by the bytes in flight, which caps memory (the channel's own bound is a
    // backstop for batches without source bytes, as many as the groups in flight hold: small
    // files make groups of many batches).
    let (btx, brx) = mpsc::sync_channel::<Batch>(QUEUED_GROUPS * GROUP_MAX);
    let in_flight = InFlight::default();
    let in_flight = &in_flight;
    // Written batches go back to the parser threads to be dropped there. A batch's strings
    // come from its parser's malloc arena; freed on the writer thread, each free takes that
    // arena's lock while the parser allocates from it, and the writer spent most of its waits
    // there (BENCHMARKS.md, "Import").
    let (done_tx, done_rx) = mpsc::channel::<Batch>();
    let done_rx = Mutex::new(done_rx);
    let done_rx = &done_rx;
    let db = super::db_path(data_dir);
    // Files whose batch failed to store. Their later batches must not be stored: each carries
    // a cursor past the lost one, and committing it would skip that batch for good. The file
    // stays at its last committed cursor and is read again from there next time.
    let failed: Mutex<HashMap<PathBuf, Job>> = Mutex::new(HashMap::new());
    let failed = &failed;

    std::thread::scope(|scope| -> Result<(), super::StoreError> {
        for _ in 0..opts.threads.max(1) {
            let queue = queue.clone();
            let report = report.clone();
            let registry = registry.clone();
            let btx = btx.clone();
            let db = db.clone();
            scope.spawn(move || {
                lower_priority();
                let Ok(reader) = super::connect(&db) else {
                    return;
                };
                let mut git_roots = HashMap::new();
                loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Some(job) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let mut send = |b: Batch| {
                        let written: Vec<Batch> = done_rx.lock().unwrap().try_iter().collect();
                        drop(written);
                        in_flight.take(b.bytes)
                            && btx.send(b).is_ok()
                            && !stop.load(Ordering::Relaxed)
                            && !failed.lock().unwrap().contains_key(&job.path)
                    };
                    let res =
                        ingest_file(&registry, &reader, &job, opts, &mut git_roots, &mut send);
                    let mut r = report.lock().unwrap();
                    r.files += 1;
                    match res {
                        Ok(Read::Read) => {}
                        Ok(Read::Settling) => r.settling.push(job.clone()),
                        Ok(Read::Unchanged) => r.files_skipped_unchanged += 1,
                        Err(e) => r.errors.push(FileError {
                            file: job.path.display().to_string(),
                            line: 0,
                            reason: e.report(),
                        }),
                    }
                }
            });
        }
        drop(btx);
        // The caller's thread feeds the writer. On stop it leaves at once: the batches not
        // written are dropped whole (each file's cursor is still at the last written one), and
        // the parsers see the channel close.
        // The batches waiting when the writer is free, and those that follow within
        // [`LINGER`] of each other, are written together in one transaction (`apply_all`).
        let brx = brx;
        let _close = CloseOnDrop(in_flight);
        while let Ok(first) = brx.recv() {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let mut bytes = first.bytes;
            let mut group = vec![first];
            let until = Instant::now() + GROUP_WAIT;
            while group.len() < GROUP_MAX
                && bytes < GROUP_BYTES
                && !stop.load(Ordering::Relaxed)
                && let Ok(b) = match until.checked_duration_since(Instant::now()) {
                    Some(left) if !in_flight.full() => brx.recv_timeout(left.min(LINGER)),
                    _ => brx.try_recv().map_err(|_| mpsc::RecvTimeoutError::Timeout),
                }
            {
                bytes += b.bytes;
                group.push(b);
            }
            group.retain(|b| !failed.lock().unwrap().contains_key(&b.path));
            if group.is_empty() {
                in_flight.give(bytes);
                continue;
            }
            let (outcomes, group) = writer.call(move |c| (apply_all(c, &group), group))?;
            in_flight.give(bytes);
            for (b, outcome) in group.iter().zip(outcomes) {
                let mut r = report.lock().unwrap();
                match outcome {
                    Outcome::Skipped => continue,
                    Outcome::Stored(a) => count_stored(&mut r, &mut sessions, b, a),
                    Outcome::Failed(e) => {
                        r.errors.push(FileError {
                            file: b.path.display().to_string(),
                            line: 0,
                            reason: format!("cannot store: {e}"),
                        });
                        let job = Job {
                            agent: b.agent,
                            root: b.root.clone(),
                            path: b.path.clone(),
                        };
                        failed.lock().unwrap().insert(job.path.clone(), job);
                    }
                }
                r.bytes += b.bytes;
                drop(r);
                progress(Progress::File { bytes: b.bytes });
            }
            // Dropped by a parser thread; after the last file, when this function returns.
            for b in group {
                let _ = done_tx.send(b);
            }
        }
        Ok(())
    })?;
    writer.call(|c| resolve_project_hashes(c))??;
    let mut r = Arc::try_unwrap(report)
        .map(|m| m.into_inner().unwrap())
        .unwrap_or_else(|a| a.lock().unwrap().clone());
    r.sessions = sessions.len() as u64;
    r.failed = failed.lock().unwrap().drain().map(|(_, j)| j).collect();
    Ok(r)
}

/// Adds a stored batch to the import's report: its counts, its parse issues, its sessions.
fn count_stored(
    r: &mut ImportReport,
    sessions: &mut HashSet<(&'static str, String)>,
    b: &Batch,
    a: Applied,
) {
    if a.inserted + a.updated > 0 {
        r.touched.extend(a.sessions.iter().copied());
    }
    r.messages += a.inserted;
    r.messages_updated += a.updated;
    r.prompts += a.prompts;
    r.bad_lines += b.issues.iter().filter(|i| !i.kept).count() as u64;
    let file = b.path.display().to_string();
    r.errors.extend(b.issues.iter().map(|i| FileError {
        file: file.clone(),
        line: i.line,
        reason: if i.kept {
            format!("{} (kept)", i.reason)
        } else {
            i.reason.clone()
        },
    }));
    // The sessions this batch touches: a handful, whatever the number of messages, so each is
    // copied once. Messages come session by session, so only a change of session is looked up
    // (this runs between two groups, while the writer waits).
    let mut ids: HashSet<&str> = HashSet::new();
    let mut last = None;
    for id in b
        .messages
        .iter()
        .map(|m| m.m.session_id.as_str())
        .chain(b.sessions.iter().map(|s| s.info.session_id.as_str()))
    {
        if last != Some(id) {
            ids.insert(id);
            last = Some(id);
        }
    }
    sessions.extend(ids.into_iter().map(|s| (b.agent, s.to_owned())));
}

/// Parsers yield the CPU to the writer: it is the one thread every batch goes through, and
/// with a parser per core it lost its core to them while it had work. The thread's nice value
/// goes up by 5 from what it is (a process started with `nice` stays below the writer, never
/// above it); raising it needs no privilege (Linux, where the value is per thread).
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: `gettid`, `getpriority` and `setpriority` take plain integers, and errno is this
    // thread's own; the calls change only this thread's nice value, and a failure (ignored)
    // leaves it as it was.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        // -1 is also a valid nice value: errno tells them apart.
        *libc::__errno_location() = 0;
        let now = libc::getpriority(libc::PRIO_PROCESS, tid);
        if now != -1 || *libc::__errno_location() == 0 {
            libc::setpriority(libc::PRIO_PROCESS, tid, (now + 5).min(19));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude_file(dir: &Path, lines: usize) -> PathBuf {
        claude_session(dir, "55555555-2222-4333-8444-555555555555", lines)
    }

    /// A parser thread's nice value goes up by 5 (or to the top, 19), and only its own.
    #[cfg(target_os = "linux")]
    #[test]
    fn parsers_yield_to_the_writer() {
        // SAFETY: plain integer calls reading the nice value of the calling thread.
        let nice =
            || unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
        let before = nice();
        let after = std::thread::spawn(move || {
            lower_priority();
            nice()
        })
        .join()
        .unwrap();
        assert_eq!(after, (before + 5).min(19));
        // From a thread at nice 10 (where the process allows it), up to 15: relative, never
        // back down to 5.
        let (start, end) = std::thread::spawn(move || {
            // SAFETY: as above, on this thread only.
            unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 10) };
            let start = nice();
            lower_priority();
            (start, nice())
        })
        .join()
        .unwrap();
        assert_eq!(end, (start + 5).min(19));
        assert_eq!(nice(), before, "the calling thread keeps its own");
    }

    fn claude_session(dir: &Path, sid: &str, lines: usize) -> PathBuf {
        let proj = dir.join("projects/-p");
        std::fs::create_dir_all(&proj).unwrap();
        let body: String = (0..lines)
            .map(|i| {
                format!(
                    "{}\n",
                    serde_json::json!({"type": "user", "uuid": format!("u{i}"), "sessionId": sid, "cwd": "/p",
                        "timestamp": "2026-06-05T10:00:00.000Z",
                        "message": {"role": "user", "content": format!("prompt number {i} {}", "padding ".repeat(40))}})
                )
            })
            .collect();
        let path = proj.join(format!("{sid}.jsonl"));
        std::fs::write(&path, body).unwrap();
        path
    }

    /// A session's source path is its own transcript file, whichever of its files is stored
    /// first: two parser threads may hand over a sub-agent's file before its session's.
    #[test]
    fn a_session_is_named_after_its_own_file_in_either_order() {
        let dir = tempfile::tempdir().unwrap();
        let sid = "66666666-2222-4333-8444-555555555555";
        let main = claude_session(dir.path(), sid, 3);
        let sub_dir = main.with_extension("").join("subagents");
        std::fs::create_dir_all(&sub_dir).unwrap();
        let sub = sub_dir.join("agent-a77.jsonl");
        let sub_line = |uuid: &str| {
            let line = serde_json::json!({"type": "user", "uuid": uuid, "sessionId": sid,
                "isSidechain": true, "agentId": "a77", "timestamp": "2026-06-05T10:01:00.000Z",
                "message": {"role": "user", "content": "look through the logs"}});
            format!("{line}\n")
        };
        std::fs::write(&sub, sub_line("s1")).unwrap();
        let registry = AdapterRegistry::new();
        // Stores a file's batches, each as `edit` leaves it.
        let store_with = |conn: &mut Connection, path: &Path, edit: fn(&mut Batch)| {
            let job = Job {
                agent: "claude",
                root: dir.path().join("projects"),
                path: path.to_owned(),
            };
            for mut b in batches_of(&registry, conn, &job) {
                edit(&mut b);
                apply(conn, &b).unwrap();
            }
        };
        let store = |conn: &mut Connection, path: &Path| store_with(conn, path, |_| {});
        let named = |conn: &Connection| -> (String, i64) {
            conn.query_row(
                "SELECT source_path, message_count FROM sessions WHERE session_id = ?1",
                [sid],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        };
        let (main_s, sub_s) = (main.to_string_lossy(), sub.to_string_lossy());
        for (n, order) in [[&main, &sub], [&sub, &main]].into_iter().enumerate() {
            let mut conn = super::super::open(&dir.path().join(format!("data{n}"))).unwrap();
            for path in order {
                store(&mut conn, path);
            }
            // The three prompts, and the sub-agent's line(s) so far.
            assert_eq!(
                named(&conn),
                (main_s.to_string(), 4 + n as i64),
                "order {n}"
            );
            // A line appended to the sub-agent's file leaves the path alone too.
            let mut f = std::fs::OpenOptions::new().append(true).open(&sub).unwrap();
            std::io::Write::write_all(&mut f, sub_line(&format!("s2-{n}")).as_bytes()).unwrap();
            store(&mut conn, &sub);
            assert_eq!(named(&conn).0, main_s, "order {n}, appended");
        }
        // A session an edit created before any of its files was stored has no path yet: the
        // first file names it, and its own file takes over. So does a file whose batch carries
        // the session's messages but no info of it.
        let no_info: fn(&mut Batch) = |b| b.sessions.clear();
        for (n, edit) in [(|_: &mut Batch| {}) as fn(&mut Batch), no_info]
            .into_iter()
            .enumerate()
        {
            let mut conn = super::super::open(&dir.path().join(format!("edited{n}"))).unwrap();
            conn.execute(
                "INSERT INTO sessions (agent, session_id, source_path) VALUES ('claude', ?1, '')",
                [sid],
            )
            .unwrap();
            store_with(&mut conn, &sub, edit);
            assert_eq!(named(&conn).0, sub_s, "edited {n}");
            store(&mut conn, &main);
            assert_eq!(named(&conn).0, main_s, "edited {n}");
        }
    }

    /// A message's full-text body is its text, whether stored as it is or compressed, and a
    /// text of its own only where the index needs another (CJK runs, a cut).
    #[test]
    fn the_index_gets_each_text_as_the_store_does() {
        let dir = tempfile::tempdir().unwrap();
        let sid = "77777777-2222-4333-8444-555555555555";
        let proj = dir.path().join("projects/-p");
        std::fs::create_dir_all(&proj).unwrap();
        let texts = [
            "short text".to_owned(),
            format!("long {}", "text ".repeat(100)),
            "修复认证".to_owned(),
            format!("head {} tail", "middle ".repeat(400)),
            "   ".to_owned(),
        ];
        let body: String = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let line = serde_json::json!({"type": "user", "uuid": format!("u{i}"),
                    "sessionId": sid, "message": {"role": "user", "content": t}});
                format!("{line}\n")
            })
            .collect();
        let path = proj.join(format!("{sid}.jsonl"));
        std::fs::write(&path, body).unwrap();
        let data = dir.path().join("data");
        let conn = super::super::open(&data).unwrap();
        let job = Job {
            agent: "claude",
            root: dir.path().join("projects"),
            path,
        };
        let mut opts = test_opts(1 << 20);
        opts.fts_max_bytes = 1000;
        let batches = batches_with(&AdapterRegistry::new(), &conn, &job, &opts);
        let index: Vec<Option<&str>> = batches[0].messages.iter().map(|p| p.index()).collect();
        assert_eq!(index.len(), texts.len());
        assert_eq!(index[0], Some(texts[0].as_str()));
        assert_eq!(index[1], Some(texts[1].as_str()));
        assert!(batches[0].messages[1].text_z.is_some(), "stored compressed");
        assert_eq!(index[2], Some(" 修复 复认 认证 证 "));
        let cut = index[3].unwrap();
        assert!(
            cut.len() < 1100 && cut.starts_with("head ") && cut.ends_with(" tail"),
            "{cut}"
        );
        assert_eq!(index[4], None, "nothing to search");
    }

    fn test_opts(batch_bytes: usize) -> IngestOptions {
        IngestOptions {
            redact: true,
            fts_max_bytes: 1 << 20,
            batch_bytes,
            threads: 1,
        }
    }

    /// Every batch of `job`, prepared as an import would (64 KiB batches), not written.
    fn batches_of(registry: &AdapterRegistry, conn: &Connection, job: &Job) -> Vec<Batch> {
        batches_with(registry, conn, job, &test_opts(64 << 10))
    }

    /// Every batch of `job`, prepared with `opts`, not written.
    fn batches_with(
        registry: &AdapterRegistry,
        conn: &Connection,
        job: &Job,
        opts: &IngestOptions,
    ) -> Vec<Batch> {
        let mut batches = Vec::new();
        ingest_file(registry, conn, job, opts, &mut HashMap::new(), &mut |b| {
            batches.push(b);
            true
        })
        .unwrap();
        batches
    }

    /// One `import` of `job` into `data`, with its own writer.
    fn import_once(data: &Path, job: &Job, opts: &IngestOptions) -> ImportReport {
        let (writer, handle) = Writer::start(data).unwrap();
        let stop = AtomicBool::new(false);
        let registry = Arc::new(AdapterRegistry::new());
        let r = import(
            &writer,
            data,
            registry,
            vec![job.clone()],
            opts,
            &stop,
            &|_| {},
        )
        .unwrap();
        drop(writer);
        handle.join().unwrap();
        r
    }

    /// A session's talks end at its highest active prompt: when the agent rewinds its last
    /// prompt away, the session no longer counts it (the compactor would wait for that talk).
    #[test]
    fn a_rewound_last_prompt_is_no_talk_of_the_session() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tmp");
        let chats = root.join("app/chats");
        std::fs::create_dir_all(&chats).unwrap();
        let path = chats.join("session-2026-11-30T10-00-abcdef12.jsonl");
        let line = |v: serde_json::Value| format!("{v}\n");
        let msg = |id: &str, ty: &str, text: &str| {
            line(
                serde_json::json!({"id": id, "timestamp": "2026-11-30T10:00:00.000Z",
                "type": ty, "content": [{"text": text}]}),
            )
        };
        let mut body = line(
            serde_json::json!({"sessionId": "abcdef12-0000-4000-8000-000000000001",
            "projectHash": "x", "startTime": "2026-11-30T10:00:00.000Z", "kind": "main"}),
        );
        body += &msg("p1", "user", "first question about dates");
        body += &msg("a1", "gemini", "first answer");
        body += &msg("p2", "user", "second question about times");
        body += &msg("a2", "gemini", "second answer");
        std::fs::write(&path, &body).unwrap();
        let data = dir.path().join("data");
        let job = Job {
            agent: "gemini",
            root: root.clone(),
            path: path.clone(),
        };
        let count = || -> i64 {
            super::super::open(&data)
                .unwrap()
                .query_row("SELECT prompt_count FROM sessions", [], |r| r.get(0))
                .unwrap()
        };
        import_once(&data, &job, &test_opts(1 << 20));
        assert_eq!(count(), 2);
        body += &line(serde_json::json!({"$rewindTo": "p2"}));
        std::fs::write(&path, &body).unwrap();
        import_once(&data, &job, &test_opts(1 << 20));
        assert_eq!(
            count(),
            1,
            "the rewound prompt stays stored, inactive, and is no talk"
        );
        body += &msg("p3", "user", "third question instead");
        std::fs::write(&path, &body).unwrap();
        import_once(&data, &job, &test_opts(1 << 20));
        let numbers: Vec<(i64, bool)> = {
            let conn = super::super::open(&data).unwrap();
            let mut st = conn
                .prepare(
                    "SELECT prompt_number, active FROM messages WHERE kind = 'user_prompt'
                     ORDER BY line",
                )
                .unwrap();
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let highest_active = numbers.iter().filter(|n| n.1).map(|n| n.0).max().unwrap();
        assert_eq!(numbers.len(), 3, "{numbers:?}");
        assert_eq!(count(), highest_active, "{numbers:?}");
    }

    /// A crash after the first batch of a large file: the next import reads the rest.
    #[test]
    fn a_file_interrupted_between_batches_is_finished_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = claude_file(dir.path(), 1000);
        let data = dir.path().join("data");
        let opts = IngestOptions {
            redact: true,
            fts_max_bytes: 1 << 20,
            batch_bytes: 64 << 10,
            threads: 1,
        };
        let registry = Arc::new(AdapterRegistry::new());
        let job = Job {
            agent: "claude",
            root: dir.path().join("projects"),
            path: path.clone(),
        };
        // First run: only the first batch reaches the archive, then the process "dies".
        let mut conn = super::super::open(&data).unwrap();
        let batches = batches_with(&registry, &conn, &job, &opts);
        assert!(batches.len() > 1, "the file must span several batches");
        apply(&mut conn, &batches[0]).unwrap();
        let stored: i64 = conn
            .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
            .unwrap();
        assert!(stored > 0 && stored < 1000);
        drop(conn);
        // Second run: everything, exactly once.
        let (writer, handle) = Writer::start(&data).unwrap();
        let stop = AtomicBool::new(false);
        let report = import(&writer, &data, registry, vec![job], &opts, &stop, &|_| {}).unwrap();
        assert_eq!(report.messages as i64, 1000 - stored);
        drop(writer);
        handle.join().unwrap();
        let conn = super::super::open(&data).unwrap();
        let total: i64 = conn
            .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
            .unwrap();
        assert_eq!(total, 1000);
    }

    /// A message read again whose stored text was compressed otherwise (an archive written
    /// before an upgrade of zstd or of its level) is no edit: nothing is updated, nothing is
    /// indexed or embedded again, and the stored bytes stay.
    #[test]
    fn a_text_compressed_otherwise_is_no_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = claude_file(dir.path(), 20);
        let data = dir.path().join("data");
        let mut conn = super::super::open(&data).unwrap();
        let registry = AdapterRegistry::new();
        let job = Job {
            agent: "claude",
            root: dir.path().join("projects"),
            path,
        };
        let batches = batches_of(&registry, &conn, &job);
        let stored = |outcomes: Vec<Outcome>| -> Vec<Applied> {
            outcomes
                .into_iter()
                .map(|o| match o {
                    Outcome::Stored(a) => a,
                    other => panic!("not stored: {other:?}"),
                })
                .collect()
        };
        assert_eq!(stored(apply_all(&mut conn, &batches))[0].inserted, 20);
        let (id, z): (i64, Vec<u8>) = conn
            .query_row(
                "SELECT id, text_z FROM messages WHERE text_z IS NOT NULL ORDER BY id LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        let other = zstd::bulk::compress(&super::super::unzstd_bytes(&z), 19).unwrap();
        assert_ne!(other, z, "level 19 writes other bytes");
        conn.execute(
            "UPDATE messages SET text_z = ?1 WHERE id = ?2",
            rusqlite::params![other, id],
        )
        .unwrap();
        let queued = |c: &Connection| -> i64 {
            c.query_row("SELECT COUNT(*) FROM vector_outbox", [], |r| r.get(0))
                .unwrap()
        };
        let before = queued(&conn);
        let again = stored(apply_all(&mut conn, &batches));
        assert_eq!(again.iter().map(|a| a.updated).sum::<u64>(), 0);
        assert_eq!(queued(&conn), before, "nothing to embed again");
        let kept: Vec<u8> = conn
            .query_row("SELECT text_z FROM messages WHERE id = ?1", [id], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(kept, other);
    }

    /// The bytes in flight: a parser waits while they would pass the bound (and the writer
    /// then sees it waiting), goes on when the writer gives them back, and stops when the
    /// writer stops.
    #[test]
    fn in_flight_bytes_wait_for_the_writer_and_never_outlive_it() {
        let f = InFlight::default();
        // A batch larger than the bound goes through when nothing else is in flight.
        assert!(f.take(3 * QUEUED_BYTES));
        assert!(!f.full());
        let pause = Duration::from_millis(50);
        std::thread::scope(|s| {
            let next = s.spawn(|| f.take(1));
            std::thread::sleep(pause);
            assert!(!next.is_finished(), "waits while the bound is passed");
            assert!(f.full(), "the writer sees a parser waiting");
            f.give(3 * QUEUED_BYTES);
            assert!(next.join().unwrap());
            let full = s.spawn(|| f.take(QUEUED_BYTES));
            std::thread::sleep(pause);
            assert!(!full.is_finished(), "1 + QUEUED_BYTES do not fit");
            f.close();
            assert!(!full.join().unwrap(), "a closed import takes no batch");
        });
        assert!(!f.take(1));
        assert!(!f.full());
    }

    /// Several files' batches written together: all stored in one go; and when one fails, it
    /// takes none of the others with it, leaves nothing of itself, and its file's later batches
    /// are skipped, so that file's stored cursor stays at its last stored batch.
    #[test]
    fn batches_written_together_fail_one_by_one() {
        let dir = tempfile::tempdir().unwrap();
        let (sid_a, sid_b) = (
            "aaaaaaaa-2222-4333-8444-555555555555",
            "bbbbbbbb-2222-4333-8444-555555555555",
        );
        let (path_a, path_b) = (
            claude_session(dir.path(), sid_a, 1000),
            claude_session(dir.path(), sid_b, 1000),
        );
        let data = dir.path().join("data");
        let mut conn = super::super::open(&data).unwrap();
        let registry = AdapterRegistry::new();
        let batches_of = |path: &Path| {
            let job = Job {
                agent: "claude",
                root: dir.path().join("projects"),
                path: path.to_owned(),
            };
            batches_of(&registry, &conn, &job)
        };
        let (a, b) = (batches_of(&path_a), batches_of(&path_b));
        // Without a failure: one transaction, every batch stored.
        let sid_c = "cccccccc-2222-4333-8444-555555555555";
        let path_c = claude_session(dir.path(), sid_c, 1000);
        let c = batches_of(&path_c);
        assert!(c.len() > 2);
        let commits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = commits.clone();
        conn.commit_hook(Some(move || {
            counter.fetch_add(1, Ordering::Relaxed);
            false
        }));
        let outcomes = apply_all(&mut conn, &c);
        assert_eq!(outcomes.len(), c.len());
        assert!(outcomes.iter().all(|o| matches!(o, Outcome::Stored(_))));
        assert_eq!(
            commits.load(Ordering::Relaxed),
            1,
            "one transaction for all"
        );
        // And one full-text segment: no statement of a batch made FTS5 write what it holds.
        let segments: i64 = conn
            .query_row(
                "SELECT COUNT(DISTINCT segid) FROM messages_fts_idx",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(segments, 1, "one segment for {} batches", c.len());
        let fails = b
            .iter()
            .position(|b| b.messages.iter().any(|m| m.m.message_id == "u500"))
            .unwrap();
        assert!(a.len() > 2 && fails > 0 && fails + 1 < b.len());
        let stored_of_b: usize = b[..fails].iter().map(|b| b.messages.len()).sum();
        let cursor_of_b = b[fails - 1].cursor.offset;
        conn.execute_batch(&format!(
            "CREATE TRIGGER fail_b BEFORE INSERT ON messages
             WHEN NEW.message_id = 'u500'
              AND NEW.session_pk = (SELECT id FROM sessions WHERE session_id = '{sid_b}')
             BEGIN SELECT RAISE(ROLLBACK, 'injected failure'); END;"
        ))
        .unwrap();
        // A's and B's batches interleaved, B's first. The failure rolls back the whole
        // transaction, as a full disk or an I/O error does.
        let (na, nb) = (a.len(), b.len());
        let mut group = Vec::new();
        let (mut a, mut b) = (a.into_iter(), b.into_iter());
        loop {
            match (b.next(), a.next()) {
                (None, None) => break,
                (x, y) => group.extend(x.into_iter().chain(y)),
            }
        }
        let outcomes = apply_all(&mut conn, &group);
        let of = |path: &Path| -> Vec<&Outcome> {
            group
                .iter()
                .zip(&outcomes)
                .filter(|(b, _)| b.path == path)
                .map(|(_, o)| o)
                .collect()
        };
        assert_eq!(of(&path_a).len(), na);
        assert!(of(&path_a).iter().all(|o| matches!(o, Outcome::Stored(_))));
        let of_b = of(&path_b);
        assert_eq!(of_b.len(), nb);
        for (i, o) in of_b.iter().enumerate() {
            match o {
                Outcome::Stored(_) => assert!(i < fails, "{i}"),
                Outcome::Failed(e) => {
                    assert_eq!(i, fails);
                    assert!(e.to_string().contains("injected failure"), "{e}");
                }
                Outcome::Skipped => assert!(i > fails, "{i}"),
            }
        }
        let count = |sid: &str| -> usize {
            conn.query_row(
                "SELECT COUNT(*) FROM messages JOIN sessions s ON s.id = session_pk
                 WHERE s.session_id = ?1",
                [sid],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(count(sid_a), 1000);
        assert_eq!(count(sid_b), stored_of_b);
        assert_eq!(count(sid_c), 1000);
        let indexed: usize = conn
            .query_row(
                "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'padding'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            indexed,
            2000 + stored_of_b,
            "no search row of a rolled-back batch"
        );
        let cursor = |path: &Path| -> u64 {
            let json: String = conn
                .query_row(
                    "SELECT cursor FROM source_files WHERE path = ?1",
                    [path.to_string_lossy()],
                    |r| r.get(0),
                )
                .unwrap();
            serde_json::from_str::<Cursor>(&json).unwrap().offset
        };
        assert_eq!(cursor(&path_a), std::fs::metadata(&path_a).unwrap().len());
        assert_eq!(cursor(&path_c), std::fs::metadata(&path_c).unwrap().len());
        assert_eq!(cursor(&path_b), cursor_of_b);
    }

    fn rows(data: &Path) -> Vec<(String, i64, String, i64)> {
        let conn = super::super::open(data).unwrap();
        let mut st = conn
            .prepare(
                "SELECT message_id, line, COALESCE(text, memex_unzstd(text_z)), prompt_number
                 FROM messages ORDER BY line, seq",
            )
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// One batch of a multi-batch file fails to store: the file stops at the last stored batch
    /// (later batches are not committed past the hole), and the next import fills it in.
    #[test]
    fn a_failed_batch_stops_its_file_at_the_last_stored_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let path = claude_file(dir.path(), 1000);
        let opts = test_opts(64 << 10);
        let job = Job {
            agent: "claude",
            root: dir.path().join("projects"),
            path: path.clone(),
        };
        let import_once = |data: &Path| import_once(data, &job, &opts);
        let clean = dir.path().join("clean");
        assert_eq!(import_once(&clean).messages, 1000);

        // The storage fails on the batch holding message u500 (an injected SQLite error).
        let data = dir.path().join("data");
        super::super::open(&data)
            .unwrap()
            .execute_batch(
                "CREATE TRIGGER fail_once BEFORE INSERT ON messages WHEN NEW.message_id = 'u500'
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
            )
            .unwrap();
        let first = import_once(&data);
        assert!(
            first
                .errors
                .iter()
                .any(|e| e.reason.contains("injected failure")),
            "{:?}",
            first.errors
        );
        assert_eq!(first.failed.len(), 1);
        let stored = rows(&data);
        assert!(!stored.is_empty() && stored.len() < 500, "{}", stored.len());
        let last_line = stored.last().unwrap().1;
        assert_eq!(
            stored.len() as i64,
            last_line,
            "nothing after the failed batch was stored"
        );
        super::super::open(&data)
            .unwrap()
            .execute_batch("DROP TRIGGER fail_once")
            .unwrap();
        let second = import_once(&data);
        assert!(second.errors.is_empty(), "{:?}", second.errors);
        assert_eq!(rows(&data), rows(&clean));
    }

    /// A legacy Gemini document is rewritten whole at every message. Each read stores only the
    /// records of new or changed messages: no block nobody uses, no record twice.
    #[test]
    fn rewritten_documents_store_each_record_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tmp");
        let chats = root.join("0123abcd/chats");
        std::fs::create_dir_all(&chats).unwrap();
        let path = chats.join("session-2025-11-02T14-05-7d3c2a10.json");
        let data = dir.path().join("data");
        let opts = test_opts(8 << 20);
        let job = Job {
            agent: "gemini",
            root: root.clone(),
            path: path.clone(),
        };
        let mut messages = Vec::new();
        for i in 0..40 {
            messages.push(serde_json::json!({
                "id": format!("m{i}"), "timestamp": format!("2025-11-02T14:{:02}:00.000Z", i % 60),
                "type": if i % 2 == 0 { "user" } else { "gemini" },
                "content": format!("message {i} {}", "lorem ipsum dolor ".repeat(30)),
            }));
            let doc = serde_json::json!({
                "sessionId": "7d3c2a10-6e5f-4b4a-9d8c-7b6a5f4e3d2c",
                "projectHash": "0123abcd", "startTime": "2025-11-02T14:00:00.000Z",
                "lastUpdated": format!("2025-11-02T14:{:02}:00.000Z", i % 60),
                "messages": messages,
            });
            std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
            let r = import_once(&data, &job, &opts);
            assert!(r.errors.is_empty(), "{:?}", r.errors);
        }
        let conn = super::super::open(&data).unwrap();
        let one = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            one("SELECT COUNT(*) FROM messages WHERE message_id GLOB 'm[0-9]*'"),
            40
        );
        assert_eq!(
            one("SELECT COUNT(*) FROM raw_blocks WHERE id NOT IN
                   (SELECT raw_block FROM messages WHERE raw_block IS NOT NULL)"),
            0,
            "blocks no message uses"
        );
        assert_eq!(
            one("SELECT COUNT(*) FROM raw_refs r WHERE refs !=
                   (SELECT COUNT(*) FROM messages m WHERE m.raw_block = r.block)"),
            0,
            "raw_refs counts every block's messages"
        );
        assert_eq!(
            one("SELECT COUNT(*) FROM raw_blocks"),
            one("SELECT COUNT(*) FROM raw_refs")
        );
        let stored: i64 = {
            let mut st = conn.prepare("SELECT data FROM raw_blocks").unwrap();
            st.query_map([], |r| r.get::<_, Vec<u8>>(0))
                .unwrap()
                .map(|b| super::super::unzstd_bytes(&b.unwrap()).len() as i64)
                .sum()
        };
        let referenced = one("SELECT SUM(raw_len) FROM messages WHERE raw_block IS NOT NULL");
        assert_eq!(stored, referenced, "each record stored once");
        let pk = one("SELECT id FROM sessions");
        let records = super::super::read::raw_records(&conn, pk).unwrap();
        assert_eq!(
            records.len() as i64,
            one("SELECT COUNT(*) FROM messages WHERE raw_block IS NOT NULL")
        );
        for (i, r) in records.iter().enumerate() {
            let text = String::from_utf8_lossy(r);
            assert!(text.contains("lorem ipsum"), "record {i}: {text}");
        }
    }

    /// A file rewritten so that its first chunk (bad lines only) ends exactly at the old cursor:
    /// the rest of it is read in the same ingest, not at some later scan.
    #[test]
    fn a_rewrite_whose_first_chunk_ends_at_the_old_cursor_is_read_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = claude_file(dir.path(), 10);
        let data = dir.path().join("data");
        let job = Job {
            agent: "claude",
            root: dir.path().join("projects"),
            path: path.clone(),
        };
        assert_eq!(import_once(&data, &job, &test_opts(8 << 20)).messages, 10);
        let old = std::fs::metadata(&path).unwrap().len() as usize;
        let sid = "55555555-2222-4333-8444-555555555555";
        let mut body = format!("{}\n", "x".repeat(old - 1));
        for i in 0..5 {
            body.push_str(&format!(
                "{}\n",
                serde_json::json!({"type": "user", "uuid": format!("v{i}"), "sessionId": sid,
                    "cwd": "/p", "timestamp": "2026-06-05T11:00:00.000Z",
                    "message": {"role": "user", "content": format!("rewritten {i}")}})
            ));
        }
        std::fs::write(&path, body).unwrap();
        let r = import_once(&data, &job, &test_opts(old + 1));
        assert_eq!(r.messages, 5, "{r:?}");
    }
}
