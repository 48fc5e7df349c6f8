//! Memex's archive, a crate of its own: the L0 archive in SQLite (connections, migrations, the
//! single writer thread, the compression helpers the schema relies on), ingest, full-text
//! indexing, reads, forgetting and scrubbing, together with what storage needs and everything
//! above it shares: the archive's layers ([`layer`]) and redaction ([`redact`]).
//!
//! It imports nothing from the rest of Memex (the service, search, vectors, compaction, the
//! interfaces): Cargo enforces it, since this crate does not depend on `memex-rs`.
//!
//! One thread owns the write connection ([`Writer`]); everything else reads through its own
//! connections in WAL mode, so readers never block the writer and vice versa.

pub mod layer;
pub mod redact;

pub mod checkpoint;
pub mod compact;
pub mod forget;
pub mod fts;
pub mod fts_hits;
pub mod ingest;
pub mod lock;
pub mod read;
pub mod scrub;
pub mod sync;
pub mod usage;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use rusqlite::functions::FunctionFlags;
use rusqlite::{Connection, OptionalExtension, params};

/// Ordered, append-only migrations, embedded at build time. Entry N brings the schema to
/// `user_version` N + 1.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "0001_archive",
        include_str!("../../../migrations/0001_archive.sql"),
    ),
    (
        "0002_service",
        include_str!("../../../migrations/0002_service.sql"),
    ),
    (
        "0003_compact",
        include_str!("../../../migrations/0003_compact.sql"),
    ),
    (
        "0004_vector",
        include_str!("../../../migrations/0004_vector.sql"),
    ),
    (
        "0005_inject",
        include_str!("../../../migrations/0005_inject.sql"),
    ),
    (
        "0006_trust",
        include_str!("../../../migrations/0006_trust.sql"),
    ),
    (
        "0007_vector_mark",
        include_str!("../../../migrations/0007_vector_mark.sql"),
    ),
    (
        "0008_fts_secure_delete_scoped",
        include_str!("../../../migrations/0008_fts_secure_delete_scoped.sql"),
    ),
    (
        "0009_messages_ts",
        include_str!("../../../migrations/0009_messages_ts.sql"),
    ),
    (
        "0010_injections_session",
        include_str!("../../../migrations/0010_injections_session.sql"),
    ),
    (
        "0011_fts_champions",
        include_str!("../../../migrations/0011_fts_champions.sql"),
    ),
    (
        "0012_fts_leaf_size",
        include_str!("../../../migrations/0012_fts_leaf_size.sql"),
    ),
    (
        "0013_session_source_path",
        include_str!("../../../migrations/0013_session_source_path.sql"),
    ),
    (
        "0014_forgotten_files",
        include_str!("../../../migrations/0014_forgotten_files.sql"),
    ),
    (
        "0015_sync",
        include_str!("../../../migrations/0015_sync.sql"),
    ),
    (
        "0016_sync_forgets",
        include_str!("../../../migrations/0016_sync_forgets.sql"),
    ),
    (
        "0017_sync_changed",
        include_str!("../../../migrations/0017_sync_changed.sql"),
    ),
    (
        "0018_sync_compact",
        include_str!("../../../migrations/0018_sync_compact.sql"),
    ),
    (
        "0019_team",
        include_str!("../../../migrations/0019_team.sql"),
    ),
    (
        "0020_usage",
        include_str!("../../../migrations/0020_usage.sql"),
    ),
];

/// What `forgotten_files` knows a file by: a digest of its path (the path itself, which names
/// the project, is not kept).
pub fn path_digest(path: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"memex forgotten file\0");
    h.update(path.as_bytes());
    h.finalize().to_vec()
}

/// The provider name compact rows written without a model carry (the summariser inside Memex).
pub const HEURISTIC: &str = "heuristic";

/// Texts longer than this are stored zstd-compressed.
pub const COMPRESS_TEXT_ABOVE: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open the archive at {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("cannot create the data directory {path}")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("migration {name} failed")]
    Migration {
        name: &'static str,
        #[source]
        source: rusqlite::Error,
    },
    #[error("the archive was written by a newer memex (schema {found}, this build knows {known})")]
    TooNew { found: i64, known: i64 },
    #[error("the writer thread has stopped")]
    WriterGone,
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Where the archive lives inside the data directory.
pub fn db_path(data_dir: &Path) -> PathBuf {
    data_dir.join("memex.db")
}

/// The page size of an archive created by this version (migration `0012` sizes the full-text
/// leaves for it).
pub const PAGE_SIZE: u32 = 16384;

/// Opens a connection with the pragmas every connection needs, the `memex_unzstd` SQL function
/// and the full-text function [`fts_hits::NAME`]. Does not migrate.
pub fn connect(path: &Path) -> Result<Connection> {
    let open = |source| StoreError::Open {
        path: path.to_owned(),
        source,
    };
    let conn = Connection::open(path).map_err(open)?;
    // The page size counts only when the file is created (before its first write, so before
    // the switch to WAL); an existing archive keeps its own. 16 KiB instead of SQLite's 4 KiB:
    // fewer, fuller pages for the long texts, raw blocks and full-text leaves an import writes
    // (BENCHMARKS.md, issue 13).
    conn.execute_batch(&format!(
        "PRAGMA page_size = {PAGE_SIZE};
         PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA busy_timeout = 10000;
         PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -32000;"
    ))
    .map_err(open)?;
    conn.create_scalar_function(
        "memex_unzstd",
        1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let blob: Option<Vec<u8>> = ctx.get(0)?;
            Ok(blob.map(|b| unzstd_text(&b)))
        },
    )
    .map_err(open)?;
    fts_hits::register(&conn).map_err(open)?;
    Ok(conn)
}

/// Creates the data directory private to its owner (0700), or makes an existing one so: it
/// and every folder in it 0700, every file 0600, whatever the umask was when they were written
/// (earlier versions left them 0755 / 0644). Returns how many entries were tightened.
pub fn private_dir(data_dir: &Path) -> std::io::Result<usize> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(parent) = data_dir.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(data_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && data_dir.is_dir() => {}
        Err(e) => return Err(e),
    }
    let mode = std::fs::metadata(data_dir)?.permissions().mode();
    if mode & 0o077 == 0 {
        // Private already: everything in it was written by a version that keeps it so.
        return Ok(0);
    }
    let mut changed = 0;
    let tighten = |p: &Path, dir: bool, changed: &mut usize| -> std::io::Result<()> {
        let m = std::fs::symlink_metadata(p)?.permissions().mode();
        if m & 0o077 != 0 {
            let to = if dir { 0o700 } else { m & 0o700 | 0o600 };
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(to))?;
            *changed += 1;
        }
        Ok(())
    };
    tighten(data_dir, true, &mut changed)?;
    // Only what Memex writes there: the folder may be one the user shares with other things.
    let mut stack = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("memex.") || ["logs", "vectors", "models"].contains(&name.as_ref()) {
            stack.push(entry.path());
        }
    }
    while let Some(p) = stack.pop() {
        let ft = std::fs::symlink_metadata(&p)?.file_type();
        if ft.is_dir() {
            tighten(&p, true, &mut changed)?;
            for entry in std::fs::read_dir(&p)? {
                stack.push(entry?.path());
            }
        } else if ft.is_file() {
            tighten(&p, false, &mut changed)?;
        }
    }
    tracing::info!(
        dir = %data_dir.display(),
        entries = changed,
        "the data directory was readable by other users: made private to its owner (0700 / 0600)"
    );
    Ok(changed)
}

/// Creates the data directory (private) and brings the archive's schema up to date.
pub fn open(data_dir: &Path) -> Result<Connection> {
    private_dir(data_dir).map_err(|source| StoreError::DataDir {
        path: data_dir.to_owned(),
        source,
    })?;
    let mut conn = connect(&db_path(data_dir))?;
    migrate(&mut conn)?;
    Ok(conn)
}

/// Applies the migrations not applied yet, all in one transaction.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    let current: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let known = MIGRATIONS.len() as i64;
    if current > known {
        return Err(StoreError::TooNew {
            found: current,
            known,
        });
    }
    if current == known {
        return Ok(());
    }
    let tx = conn.transaction()?;
    for (i, (name, sql)) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        tx.execute_batch(sql)
            .and_then(|_| tx.pragma_update(None, "user_version", i as i64 + 1))
            .map_err(|source| StoreError::Migration { name, source })?;
    }
    let (blocks, bytes) = reclaim_raw(&tx)?;
    tx.commit()?;
    if blocks > 0 {
        tracing::info!(
            blocks,
            bytes,
            "reclaimed raw blocks that no message used (left by an earlier version)"
        );
    }
    Ok(())
}

/// Counts `lost` messages off each raw block (block id → messages that no longer point into
/// it) and deletes the blocks left unused. Returns the blocks still in use, and the stored
/// bytes deleted.
pub fn release_raw(
    conn: &Connection,
    lost: impl IntoIterator<Item = (i64, u64)>,
) -> rusqlite::Result<(Vec<i64>, u64)> {
    let mut kept = Vec::new();
    let mut freed = 0u64;
    let mut count = conn.prepare_cached(
        "UPDATE raw_refs SET refs = refs - ?2 WHERE block = ?1 RETURNING refs, bytes",
    )?;
    for (block, n) in lost {
        let left: Option<(i64, i64)> = count
            .query_row(params![block, n as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        match left {
            Some((refs, bytes)) if refs <= 0 => {
                // The count first: it refers to the block.
                conn.prepare_cached("DELETE FROM raw_refs WHERE block = ?1")?
                    .execute([block])?;
                conn.prepare_cached("DELETE FROM raw_blocks WHERE id = ?1")?
                    .execute([block])?;
                freed += bytes as u64;
            }
            _ => kept.push(block),
        }
    }
    Ok((kept, freed))
}

/// Deletes the raw blocks no message points into; returns how many and their stored bytes.
pub fn reclaim_raw(conn: &Connection) -> rusqlite::Result<(u64, u64)> {
    let (blocks, bytes): (i64, Option<i64>) = conn.query_row(
        "SELECT COUNT(*), SUM(bytes) FROM raw_refs WHERE refs <= 0",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    if blocks > 0 {
        // The counts first: they refer to the blocks.
        conn.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS unused_blocks (id INTEGER PRIMARY KEY);
             DELETE FROM temp.unused_blocks;
             INSERT INTO temp.unused_blocks SELECT block FROM raw_refs WHERE refs <= 0;
             DELETE FROM raw_refs WHERE refs <= 0;
             DELETE FROM raw_blocks WHERE id IN (SELECT id FROM temp.unused_blocks);
             DELETE FROM temp.unused_blocks;",
        )?;
    }
    Ok((blocks as u64, bytes.unwrap_or(0) as u64))
}

thread_local! {
    /// Creating a zstd context costs more than compressing a short text: one per thread.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Compresses at level 1: on texts of a few hundred bytes to a few KiB it compresses as well as
/// level 3 (the tables it builds for each text cost the same) in three quarters of the time, and
/// the 128 KiB raw blocks come out 2.5 % larger, a fifth sooner (BENCHMARKS.md, "Import").
pub fn zstd_bytes(b: &[u8]) -> Vec<u8> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = zstd::bulk::Compressor::new(1).ok();
        }
        c.as_mut()
            .and_then(|c| c.compress(b).ok())
            .unwrap_or_else(|| zstd::bulk::compress(b, 1).unwrap_or_else(|_| b.to_vec()))
    })
}

thread_local! {
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

/// Decompresses what [`zstd_bytes`] wrote (its frames record their size); empty on corruption.
pub fn unzstd_bytes(b: &[u8]) -> Vec<u8> {
    let size = zstd::zstd_safe::get_frame_content_size(b).ok().flatten();
    let fast = size.and_then(|size| {
        DECOMPRESSOR.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = zstd::bulk::Decompressor::new().ok();
            }
            d.as_mut()?.decompress(b, size as usize).ok()
        })
    });
    fast.unwrap_or_else(|| zstd::stream::decode_all(b).unwrap_or_default())
}

fn unzstd_text(b: &[u8]) -> String {
    // Valid UTF-8 as stored: checked on the fast path, replaced only if it is not.
    String::from_utf8(unzstd_bytes(b))
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// The one thread that owns the write connection. Work is sent to it as closures over a
/// bounded channel; callers wait for the answer on a reply channel.
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::SyncSender<Job>,
}

impl Writer {
    /// Opens (and migrates) the archive in `data_dir` and starts the writer thread.
    /// The channel holds a few jobs: enough to keep the writer busy while parsers prepare the
    /// next batch, few enough that queued batches stay a small, bounded amount of memory.
    pub fn start(data_dir: &Path) -> Result<(Writer, thread::JoinHandle<()>)> {
        let mut conn = open(data_dir)?;
        // The log is checkpointed by a thread of its own every 32 MiB (`checkpoint`).
        let mut checkpoints = checkpoint::Checkpointer::start(&conn, &db_path(data_dir))?;
        // Every statement a batch runs stays compiled (about 30; rusqlite keeps 16).
        conn.set_prepared_statement_cache_capacity(64);
        let (tx, rx) = mpsc::sync_channel::<Job>(4);
        let handle = thread::Builder::new()
            .name("memex-writer".into())
            .spawn(move || {
                checkpoints.register();
                for job in rx {
                    job(&mut conn);
                    checkpoints.after_job(&conn);
                }
                drop(checkpoints);
            })
            .expect("spawn the writer thread");
        Ok((Writer { tx }, handle))
    }

    /// Runs `f` on the writer thread and waits for its result.
    pub fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T> {
        let (rtx, rrx) = mpsc::sync_channel(1);
        self.tx
            .send(Box::new(move |c| {
                let _ = rtx.send(f(c));
            }))
            .map_err(|_| StoreError::WriterGone)?;
        rrx.recv().map_err(|_| StoreError::WriterGone)
    }
}

impl Writer {
    /// [`Writer::call`] for async code: the job goes to the writer thread and the answer comes
    /// back on a oneshot, so no runtime thread waits on the database.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T> {
        let (rtx, rrx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move |c| {
            let _ = rtx.send(f(c));
        });
        match self.tx.try_send(job) {
            Ok(()) => {}
            Err(mpsc::TrySendError::Disconnected(_)) => return Err(StoreError::WriterGone),
            // The queue is full (an ingest is writing): wait for room off the runtime.
            Err(mpsc::TrySendError::Full(job)) => {
                let tx = self.tx.clone();
                tokio::task::spawn_blocking(move || tx.send(job))
                    .await
                    .map_err(|_| StoreError::WriterGone)?
                    .map_err(|_| StoreError::WriterGone)?;
            }
        }
        rrx.await.map_err(|_| StoreError::WriterGone)
    }
}

/// Read connections for concurrent readers (the HTTP API): each request takes one, and gives it
/// back when done. Readers never block the writer in WAL mode, nor it them.
#[derive(Clone)]
pub struct ReadPool {
    path: PathBuf,
    idle: Arc<Mutex<Vec<Connection>>>,
}

/// At most this many idle connections are kept (each holds its own page cache); the API runs
/// at most two reads per core at once, so this covers machines up to eight cores.
const POOL_IDLE: usize = 16;

impl ReadPool {
    /// A pool over an archive that [`open`] has already migrated.
    pub fn new(data_dir: &Path) -> ReadPool {
        ReadPool {
            path: db_path(data_dir),
            idle: Arc::default(),
        }
    }

    /// Runs `f` on a pooled connection.
    pub fn with<T>(&self, f: impl FnOnce(&Connection) -> T) -> Result<T> {
        let conn = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let conn = match conn {
            Some(c) => c,
            None => {
                let c = connect(&self.path)?;
                // A reader needs far less page cache than the writer.
                c.pragma_update(None, "cache_size", -8000)?;
                c
            }
        };
        let out = f(&conn);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < POOL_IDLE {
            idle.push(conn);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::OptionalExtension;

    use super::*;

    const FTS: [&str; 4] = [
        "messages_fts",
        "observations_fts",
        "talk_summaries_fts",
        "session_summaries_fts",
    ];

    fn page_size(conn: &Connection) -> i64 {
        conn.query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap()
    }

    /// The leaf size a full-text table was given, if any.
    fn leaf_size(conn: &Connection, fts: &str) -> Option<i64> {
        conn.query_row(
            &format!("SELECT v FROM {fts}_config WHERE k = 'pgsz'"),
            [],
            |r| r.get(0),
        )
        .optional()
        .unwrap()
    }

    /// Indexes 3,000 rows of distinct words and returns the longest record of the index.
    fn largest_leaf(conn: &Connection) -> i64 {
        conn.execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000)
             INSERT INTO messages_fts (rowid, body)
             SELECT i, 'word' || i || ' other' || (i * 7) || ' more' || (i * 13) FROM n;",
        )
        .unwrap();
        conn.query_row(
            "SELECT MAX(length(block)) FROM messages_fts_data",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// An archive at `path` as the version before `migration` left it, made after `pragmas`.
    fn archive_before(path: &Path, migration: &str, pragmas: &str) -> Connection {
        let before = MIGRATIONS
            .iter()
            .position(|(name, _)| *name == migration)
            .unwrap();
        let mut c = Connection::open(path).unwrap();
        c.execute_batch(pragmas).unwrap();
        c.execute_batch("PRAGMA journal_mode = WAL;").unwrap();
        let tx = c.transaction().unwrap();
        for (i, (_, sql)) in MIGRATIONS.iter().take(before).enumerate() {
            tx.execute_batch(sql).unwrap();
            tx.pragma_update(None, "user_version", i as i64 + 1)
                .unwrap();
        }
        tx.commit().unwrap();
        c
    }

    /// A Claude session that an earlier version stored under its sub-agent's file, or under no
    /// file, gets its own transcript file back; every other session keeps its path.
    #[test]
    fn claude_sessions_get_their_own_file_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = db_path(dir.path());
        let sid = |n: u8| format!("{n}{n}{n}{n}{n}{n}{n}{n}-2222-4333-8444-555555555555");
        let c = archive_before(&path, "0013_session_source_path", "");
        let files = [
            format!("/h/.claude/projects/-p/{}.jsonl", sid(1)),
            format!("/h/.claude/projects/-p/{}/subagents/agent-a1.jsonl", sid(1)),
            format!("/h/.claude/projects/-p/{}.jsonl", sid(2)),
            format!("C:\\h\\.claude\\projects\\-p\\{}.jsonl", sid(3)),
            format!("/h/.claude/projects/-p/{}/subagents/agent-a4.jsonl", sid(4)),
            format!("/h/.codex/sessions/rollout-{}.jsonl", sid(5)),
            format!("/h/.codex/sessions/rollout-x-{}.jsonl", sid(5)),
        ];
        for f in &files {
            c.execute(
                "INSERT INTO source_files (path, agent, root, cursor, updated_at)
                 VALUES (?1, 'x', '/h', '{}', 0)",
                [f],
            )
            .unwrap();
        }
        // (agent, session, stored path, its files by number)
        let sessions: [(&str, String, Option<&str>, &[i64]); 5] = [
            ("claude", sid(1), Some(&files[1]), &[1, 2]),
            ("claude", sid(2), Some(""), &[3]),
            ("claude", sid(3), None, &[4]),
            ("claude", sid(4), Some(&files[4]), &[5]),
            ("codex", sid(5), Some(&files[6]), &[6, 7]),
        ];
        for (agent, session, stored, owned) in &sessions {
            c.execute(
                "INSERT INTO sessions (agent, session_id, source_path) VALUES (?1, ?2, ?3)",
                params![agent, session, stored],
            )
            .unwrap();
            let pk = c.last_insert_rowid();
            for f in *owned {
                c.execute("INSERT INTO session_files VALUES (?1, ?2)", [pk, *f])
                    .unwrap();
            }
        }
        drop(c);
        let mut conn = connect(&path).unwrap();
        migrate(&mut conn).unwrap();
        let now = |n: u8| -> Option<String> {
            conn.query_row(
                "SELECT source_path FROM sessions WHERE session_id = ?1",
                [sid(n)],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert_eq!(now(1).as_deref(), Some(files[0].as_str()));
        assert_eq!(now(2).as_deref(), Some(files[2].as_str()));
        assert_eq!(now(3).as_deref(), Some(files[3].as_str()));
        assert_eq!(
            now(4).as_deref(),
            Some(files[4].as_str()),
            "no own file known"
        );
        assert_eq!(now(5).as_deref(), Some(files[6].as_str()), "not Claude's");
    }

    /// A new archive gets 16 KiB pages and full-text leaves that fill them; an archive an
    /// earlier version created keeps its 4 KiB pages and FTS5's own leaf size when migrated.
    #[test]
    fn new_archives_get_larger_pages_and_old_ones_keep_theirs() {
        let dir = tempfile::tempdir().unwrap();
        let conn = open(dir.path()).unwrap();
        assert_eq!(page_size(&conn), i64::from(PAGE_SIZE));
        for fts in FTS {
            assert_eq!(leaf_size(&conn, fts), Some(16000), "{fts}");
        }
        drop(conn);
        // Opening it again changes nothing, and its index writes leaves of that size.
        let conn = open(dir.path()).unwrap();
        assert_eq!(page_size(&conn), i64::from(PAGE_SIZE));
        assert_eq!(leaf_size(&conn, "messages_fts"), Some(16000));
        assert!(largest_leaf(&conn) > 12_000, "{}", largest_leaf(&conn));

        let old = tempfile::tempdir().unwrap();
        let path = db_path(old.path());
        archive_before(&path, "0012_fts_leaf_size", "PRAGMA page_size = 4096;");
        let mut conn = connect(&path).unwrap();
        migrate(&mut conn).unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, MIGRATIONS.len() as i64);
        assert_eq!(page_size(&conn), 4096);
        for fts in FTS {
            assert_eq!(leaf_size(&conn, fts), None, "{fts}");
        }
        assert!(largest_leaf(&conn) < 8_000, "{}", largest_leaf(&conn));
    }
}
