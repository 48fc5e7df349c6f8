//! WAL checkpoints beside the writer, not on it.
//!
//! SQLite's automatic checkpoint runs on the connection that commits: every 32 MiB of log the
//! writer stopped to copy the log into the database file and wait for two `fsync`s. In a 1M
//! import that was a quarter of the writer's time spent asleep, waiting for the disk, while the
//! parsers waited for it. Here the writer's connection only counts the log's pages (a WAL hook)
//! and, every [`EVERY`] bytes of log, wakes a thread with a connection of its own that runs a
//! `PASSIVE` checkpoint: it copies what is committed while the writer goes on appending.
//!
//! A passive checkpoint blocks neither the writer nor a reader, but the log restarts from its
//! beginning only when the writer begins a transaction after everything in it was copied (and
//! no reader still reads an older snapshot). A writer that never pauses, as in an import, keeps
//! adding a tail while the thread copies, so the log grows up to [`CAP`] bytes; there the
//! writer copies that tail itself (unless the thread is copying; then after its next job) and
//! the log restarts at its next transaction. `journal_size_limit` then cuts the file back to
//! 64 MiB, so a long-running service does not keep a 256 MiB log file.
//!
//! Jobs on the writer that need the log emptied now (`memex forget` and `memex scrub`) take
//! [`pause`] first: a `TRUNCATE` checkpoint gets `SQLITE_BUSY` at once, without calling the busy
//! handler, while another connection checkpoints. A `PRAGMA wal_autocheckpoint` on the writer's
//! connection (`memex-bench import --pre`) replaces the hook and turns all this off.

use std::cell::Cell;
use std::marker::PhantomData;
use std::os::raw::c_int;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::thread;

use rusqlite::Connection;
use rusqlite::hooks::Wal;

use super::Result;

/// Bytes of log between two background checkpoints, so that pages rewritten by consecutive
/// batches are copied once.
pub const EVERY: i64 = 32 << 20;
/// Bytes of log at which the writer checkpoints itself.
pub const CAP: i64 = 256 << 20;

thread_local! {
    /// Pages in the log after the last commit on this thread's writer connection.
    static WAL_PAGES: Cell<i32> = const { Cell::new(0) };
    /// The turns of this thread's checkpointer, for [`pause`].
    static TURNS: std::cell::RefCell<Option<Arc<Turns>>> = const { std::cell::RefCell::new(None) };
}

/// Whether the background checkpoint runs, how many pauses hold it back, and how many it ran.
#[derive(Default)]
struct Turns {
    state: Mutex<State>,
    changed: Condvar,
    ran: AtomicU64,
}

#[derive(Default)]
struct State {
    running: bool,
    pauses: u32,
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits while `busy` holds of the state.
    fn wait_while<'a>(
        &self,
        mut s: MutexGuard<'a, State>,
        busy: fn(&State) -> bool,
    ) -> MutexGuard<'a, State> {
        while busy(&s) {
            s = self.changed.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        s
    }

    /// Waits for the pauses to end, then marks the checkpoint running.
    fn begin(&self) {
        self.wait_while(self.lock(), |s| s.pauses > 0).running = true;
    }

    fn end(&self) {
        self.lock().running = false;
        self.ran.fetch_add(1, Ordering::Relaxed);
        self.changed.notify_all();
    }
}

/// Holds the background checkpoint back while it lives. It stays on the writer's thread (not
/// `Send`): a guard held past the writer's end would keep its shutdown waiting.
pub struct Paused(Arc<Turns>, PhantomData<*const ()>);

impl Paused {
    /// A pause once a running checkpoint has ended; with `wait` false, `None` while one runs.
    fn take(turns: &Arc<Turns>, wait: bool) -> Option<Paused> {
        let mut s = turns.lock();
        if s.running && !wait {
            return None;
        }
        s.pauses += 1;
        drop(turns.wait_while(s, |s| s.running));
        Some(Paused(Arc::clone(turns), PhantomData))
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        self.0.lock().pauses -= 1;
        self.0.changed.notify_all();
    }
}

/// A `PASSIVE` checkpoint on `conn`; a failure is logged, and the next one retries.
fn checkpoint(conn: &Connection, whose: &str) {
    if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
        tracing::warn!(error = %e, whose, "checkpoint failed; the next one retries");
    }
}

fn note_pages(_: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|p| p.set(pages));
    Ok(())
}

/// Waits for a running background checkpoint to end and holds the next one back while the
/// guard lives. On a thread that is not a writer's, it holds nothing.
pub fn pause() -> Option<Paused> {
    TURNS
        .with(|t| t.borrow().clone())
        .and_then(|t| Paused::take(&t, true))
}

/// The writer's side: counts the log's pages and wakes the checkpoint thread.
pub struct Checkpointer {
    wake: Option<mpsc::SyncSender<()>>,
    thread: Option<thread::JoinHandle<()>>,
    turns: Arc<Turns>,
    /// Pages in the log when the thread was last woken.
    woken_at: i32,
    /// [`EVERY`] and [`CAP`] in pages of this archive.
    every: i32,
    cap: i32,
}

impl Checkpointer {
    /// Sets up `conn` (the writer's connection, whose commits must all run on the writer's
    /// thread, where the hook counts pages) and starts the thread, on a connection of its own
    /// to the archive at `db`.
    pub fn start(conn: &Connection, db: &Path) -> Result<Checkpointer> {
        let own = super::connect(db)?;
        let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        let pages = |bytes: i64| (bytes / page) as i32;
        conn.pragma_update(None, "wal_autocheckpoint", 0)?;
        conn.pragma_update(None, "journal_size_limit", 64 << 20)?;
        conn.wal_hook(Some(note_pages));
        let turns = Arc::new(Turns::default());
        let (wake, woken) = mpsc::sync_channel::<()>(1);
        let mine = Arc::clone(&turns);
        let thread = thread::Builder::new()
            .name("memex-checkpoint".into())
            .spawn(move || {
                for () in woken {
                    mine.begin();
                    checkpoint(&own, "background");
                    mine.end();
                }
            })
            .expect("spawn the checkpoint thread");
        Ok(Checkpointer {
            wake: Some(wake),
            thread: Some(thread),
            turns,
            woken_at: 0,
            every: pages(EVERY),
            cap: pages(CAP),
        })
    }

    /// Makes [`pause`] work on the calling thread (the writer's).
    pub fn register(&self) {
        TURNS.with(|t| *t.borrow_mut() = Some(Arc::clone(&self.turns)));
    }

    /// After a job on the writer: wakes the thread every [`EVERY`] bytes of log, and past
    /// [`CAP`] checkpoints on `conn` itself, unless the thread is checkpointing (then after a
    /// later job).
    pub fn after_job(&mut self, conn: &Connection) {
        let pages = WAL_PAGES.with(Cell::get);
        if pages < self.woken_at {
            // The log restarted.
            self.woken_at = 0;
        }
        if pages >= self.cap {
            if let Some(_paused) = Paused::take(&self.turns, false) {
                checkpoint(conn, "writer");
                WAL_PAGES.with(|p| p.set(0));
                self.woken_at = 0;
            }
        } else if pages - self.woken_at >= self.every {
            if let Some(w) = &self.wake {
                // Full: a wake-up is already waiting, which is as good.
                let _ = w.try_send(());
            }
            self.woken_at = pages;
        }
    }
}

impl Drop for Checkpointer {
    /// Stops the thread after the checkpoint it runs, if any; its connection closes with it.
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        TURNS.with(|t| t.borrow_mut().take());
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::{Writer, db_path};

    fn db_len(dir: &Path) -> u64 {
        std::fs::metadata(db_path(dir)).map_or(0, |m| m.len())
    }

    /// The log reaches the database file while the writer goes on, and no commit on the writer
    /// copies it there: the writer's own automatic checkpoint is off.
    #[test]
    fn the_log_is_copied_beside_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let (writer, handle) = Writer::start(dir.path()).unwrap();
        let auto: i64 = writer
            .call(|c| c.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0)))
            .unwrap()
            .unwrap();
        assert_eq!(auto, 0);
        writer
            .call(|c| c.execute_batch("CREATE TABLE filler (b BLOB)"))
            .unwrap()
            .unwrap();
        let before = db_len(dir.path());
        // 40 MiB of pages in ten commits: past `EVERY` once.
        for _ in 0..10 {
            writer
                .call(|c| {
                    c.execute(
                        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1024)
                         INSERT INTO filler SELECT randomblob(4000) FROM n",
                        [],
                    )
                })
                .unwrap()
                .unwrap();
        }
        let t = Instant::now();
        while db_len(dir.path()) < before + (16 << 20) && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            db_len(dir.path()) >= before + (16 << 20),
            "the database file grew from {before} to only {} bytes",
            db_len(dir.path())
        );
        // The file may grow before the thread counts its checkpoint as done.
        let ran = || {
            writer
                .call(|_| {
                    TURNS.with(|t| t.borrow().as_ref().map(|t| t.ran.load(Ordering::Relaxed)))
                })
                .unwrap()
        };
        let t = Instant::now();
        while ran() < Some(1) && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let ran = ran();
        assert!(ran >= Some(1), "background checkpoints: {ran:?}");
        // More log, then the log emptied at once, as `memex forget` does: with `pause`, a
        // running background checkpoint ends first instead of making it busy.
        writer
            .call(|c| c.execute("UPDATE filler SET b = randomblob(4000)", []))
            .unwrap()
            .unwrap();
        let busy: i64 = writer
            .call(|c| {
                let _paused = pause().expect("on the writer's thread");
                c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
            })
            .unwrap()
            .unwrap();
        assert_eq!(busy, 0);
        let wal = dir.path().join("memex.db-wal");
        assert_eq!(std::fs::metadata(&wal).map_or(0, |m| m.len()), 0);
        // `pause` holds on the writer's thread only.
        assert!(pause().is_none());
        drop(writer);
        handle.join().unwrap();
    }
}
