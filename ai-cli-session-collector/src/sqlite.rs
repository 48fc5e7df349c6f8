//! The small SQLite reader the database adapters share. An agent's database is written by the
//! agent while Memex reads it, and it also holds credentials: so every read opens it read-only,
//! waits briefly for a writer instead of failing, reads only the conversation tables the adapter
//! names, and closes it again, holding no lock between reads.
//!
//! Agents that append rows and update some in place (Goose, Crush) are read incrementally
//! (`parse_database`, `Tables`): session rows again when their stamp moved, message rows
//! above the highest row id taken and the last `WINDOW` rows again (`RowMarks`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::ParseError;
use crate::adapter::Emit;
use crate::model::{Cursor, ParseIssue, ParseOutput, ParsedMessage, SessionInfo};

/// How long a read waits for the agent's writer before giving up until the next change.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one open database may be read before its queries are interrupted (a read takes
/// milliseconds; a hostile schema could make one take forever).
const READ_DEADLINE: Duration = Duration::from_secs(60);

/// An agent's database, open read-only for one read.
pub struct Db {
    conn: Connection,
    path: std::path::PathBuf,
    /// Opened as immutable (see [`Db::open`]): the file's size and time then, which must be
    /// the same when the read ends.
    immutable: Option<(u64, Option<std::time::SystemTime>)>,
}

/// Whether the database at `path` is in WAL mode (header bytes 18 and 19 are 2) with no log
/// beside it: a read-only connection would create `-wal` and `-shm` files there and, unable
/// to take the lock that removes them, leave them in the agent's folder.
fn wal_without_log(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 20];
    let read = crate::reader::open_file(path).and_then(|mut f| f.read_exact(&mut head));
    read.is_ok()
        && head.starts_with(b"SQLite format 3\0")
        && head[18] == 2
        && head[19] == 2
        && !wal_of(path).exists()
}

fn wal_of(path: &Path) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push("-wal");
    p.into()
}

/// `file:` URI of `path`, for SQLite (`%`, `?` and `#` escaped).
fn file_uri(path: &Path) -> String {
    let mut out = String::from("file:");
    let text = path.to_string_lossy();
    if text.starts_with('/') {
        out.push_str("//");
    }
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

fn stamp(path: &Path) -> Option<(u64, Option<std::time::SystemTime>)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.len(), m.modified().ok()))
}

impl Db {
    /// Opens `path` read-only (never through a symbolic link). A database in WAL mode is read
    /// through its log as the agent's own connections see it; one in WAL mode without a log
    /// (no connection has it open) is read as an immutable file, so the read leaves no file
    /// behind, and [`Db::finish`] checks that no writer came meanwhile. The file may be hostile
    /// (any folder the user points a project root at): schema-defined SQL (views, generated
    /// columns, triggers) is not trusted, and a read that runs longer than `READ_DEADLINE` is
    /// interrupted.
    pub fn open(path: &Path) -> Result<Db, ParseError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let err = |source| ParseError::Database {
            path: path.to_owned(),
            source,
        };
        let (conn, immutable) = if wal_without_log(path) {
            let before = stamp(path);
            let uri = format!("{}?immutable=1", file_uri(path));
            let conn = Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI)
                .map_err(err)?;
            (conn, before)
        } else {
            (Connection::open_with_flags(path, flags).map_err(err)?, None)
        };
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        conn.pragma_update(None, "query_only", true).map_err(err)?;
        conn.pragma_update(None, "trusted_schema", false)
            .map_err(err)?;
        let deadline = std::time::Instant::now() + READ_DEADLINE;
        conn.progress_handler(10_000, Some(move || std::time::Instant::now() > deadline));
        // Not a database at all, or a corrupt header: fail here, with the file named.
        conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(err)?;
        Ok(Db {
            conn,
            path: path.to_owned(),
            immutable,
        })
    }

    /// Closes the database; for one read as immutable, fails when it was written meanwhile (a
    /// log appeared, or the file changed): what was read may be torn, and the writer's change
    /// brings the next read.
    pub fn finish(self) -> Result<(), ParseError> {
        let Db {
            conn,
            path,
            immutable,
        } = self;
        drop(conn);
        if let Some(before) = immutable
            && (wal_of(&path).exists() || stamp(&path) != Some(before))
        {
            return Err(ParseError::Io {
                path,
                source: std::io::Error::other(
                    "the database was written while it was read; it is read again at its next change",
                ),
            });
        }
        Ok(())
    }

    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The error of a failed query, naming the database.
    pub fn error(&self, source: rusqlite::Error) -> ParseError {
        ParseError::Database {
            path: self.path.clone(),
            source,
        }
    }

    /// Whether the database has a table of this name.
    pub fn has_table(&self, name: &str) -> bool {
        has_table(&self.conn, name)
    }

    /// The columns of `table`, in order (empty when there is no such table).
    pub fn columns(&self, table: &str) -> Vec<String> {
        let Ok(mut st) = self
            .conn
            .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
        else {
            return Vec::new();
        };
        st.query_map([table], |r| r.get::<_, String>(0))
            .map(|rows| rows.filter_map(Result::ok).collect())
            .unwrap_or_default()
    }
}

/// One row as a JSON object, column by column: text as strings (invalid UTF-8 replaced),
/// numbers as numbers, blobs as text when they are UTF-8 and as lowercase hex otherwise. This is
/// the row's lossless record in the archive.
pub fn row_json(row: &rusqlite::Row<'_>) -> Value {
    let stmt = row.as_ref();
    let mut obj = Map::new();
    for i in 0..stmt.column_count() {
        let name = stmt.column_name(i).unwrap_or("?").to_owned();
        let v = match row.get_ref(i) {
            Ok(ValueRef::Null) | Err(_) => Value::Null,
            Ok(ValueRef::Integer(n)) => Value::from(n),
            Ok(ValueRef::Real(f)) => Value::from(f),
            Ok(ValueRef::Text(t)) => Value::String(String::from_utf8_lossy(t).into_owned()),
            Ok(ValueRef::Blob(b)) => match std::str::from_utf8(b) {
                Ok(s) => Value::String(s.to_owned()),
                Err(_) => Value::String(crate::reader::hex(b)),
            },
        };
        obj.insert(name, v);
    }
    Value::Object(obj)
}

/// A text column that holds JSON (most agents keep message bodies so): parsed, or the text
/// itself as a JSON string when it is not JSON.
pub fn json_column(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        other => other.clone(),
    }
}

/// Whether the database behind `conn` has a table of this name.
pub(crate) fn has_table(conn: &Connection, name: &str) -> bool {
    conn.query_row(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .is_ok()
}

// ---- incremental reading of an agent's tables ----

/// How many of the last rows of a message table are read again on every parse, to take the rows
/// the agent rewrote in place (Crush streams its answers into the row it inserted first).
pub(crate) const WINDOW: usize = 128;

/// Epoch milliseconds from a number that is seconds or milliseconds (values above 10¹⁰, past
/// the year 2286 in seconds, are milliseconds: Goose's own rule).
pub(crate) fn epoch_ms(n: i64) -> i64 {
    if n.unsigned_abs() > 10_000_000_000 {
        n
    } else {
        n.saturating_mul(1000)
    }
}

/// A column's value as text: ids and update stamps, whatever type the agent stored.
fn value_text(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => String::new(),
        ValueRef::Integer(n) => n.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
    }
}

/// Whether update stamp `a` is at or after `b`: numerically when both are numbers, else as text
/// (SQLite `YYYY-MM-DD HH:MM:SS` sorts as text).
fn at_or_after(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x >= y,
        _ => a >= b,
    }
}

/// A digest of a row's columns from `from` on: equal digests mean an unchanged row.
fn row_digest(row: &rusqlite::Row<'_>, from: usize) -> u64 {
    row_digest_range(row, from, row.as_ref().column_count())
}

/// A digest of a row's columns `from..to`.
fn row_digest_range(row: &rusqlite::Row<'_>, from: usize, to: usize) -> u64 {
    let mut h = Sha256::new();
    for i in from..to {
        match row.get_ref(i) {
            Ok(ValueRef::Null) | Err(_) => h.update([0u8]),
            Ok(ValueRef::Integer(n)) => {
                h.update([1u8]);
                h.update(n.to_le_bytes());
            }
            Ok(ValueRef::Real(f)) => {
                h.update([2u8]);
                h.update(f.to_bits().to_le_bytes());
            }
            Ok(ValueRef::Text(t)) => {
                h.update([3u8]);
                h.update((t.len() as u64).to_le_bytes());
                h.update(t);
            }
            Ok(ValueRef::Blob(b)) => {
                h.update([4u8]);
                h.update((b.len() as u64).to_le_bytes());
                h.update(b);
            }
        }
    }
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_le_bytes(first)
}

/// What one read of an agent's database took: the infos of the sessions it touched, the rows
/// taken and their bytes, and whether rows remain after the byte budget was spent.
pub(crate) struct DbRead {
    pub infos: BTreeMap<String, SessionInfo>,
    pub rows: u64,
    pub bytes: u64,
    pub at_end: bool,
}

impl DbRead {
    /// The info of session `id` in this read, made by `base` when the read has none yet.
    pub(crate) fn info(
        &mut self,
        id: &str,
        base: impl FnOnce() -> SessionInfo,
    ) -> &mut SessionInfo {
        self.infos.entry(id.to_owned()).or_insert_with(base)
    }
}

/// One parse of an agent's database: restores the adapter's state `S` from the cursor, reports
/// a database without the `tables` the adapter reads as an issue (`what` says what it is not),
/// and else lets `read` read it within one snapshot (sessions and their messages as of one
/// moment). The cursor counts the rows taken and holds the state.
pub(crate) fn parse_database<S: Default + Serialize + DeserializeOwned>(
    path: &Path,
    cursor: &Cursor,
    tables: &[&str],
    what: &str,
    read: impl FnOnce(&Connection, &mut S, &mut Emit) -> rusqlite::Result<DbRead>,
) -> Result<ParseOutput, ParseError> {
    let db = Db::open(path)?;
    let mut st: S = serde_json::from_value(cursor.state.clone()).unwrap_or_default();
    let mut out = ParseOutput {
        cursor: cursor.clone(),
        at_end: true,
        ..Default::default()
    };
    let missing: Vec<&str> = tables
        .iter()
        .copied()
        .filter(|t| !db.has_table(t))
        .collect();
    if !missing.is_empty() {
        out.issues.push(ParseIssue {
            line: 0,
            byte_offset: 0,
            reason: format!("no `{}` table: not {what}", missing.join("`, `")),
            kept: false,
        });
        return Ok(out);
    }
    let mut emit = Emit::default();
    let read = {
        let tx = db.conn().unchecked_transaction().map_err(|e| db.error(e))?;
        read(&tx, &mut st, &mut emit).map_err(|e| db.error(e))?
    };
    db.finish()?;
    out.messages = emit.out.messages;
    out.issues = emit.out.issues;
    out.sessions = read.infos.into_values().collect();
    out.bytes = read.bytes;
    out.at_end = read.at_end;
    out.cursor = Cursor {
        offset: cursor.offset + read.rows,
        line: 0,
        head: None,
        state: serde_json::to_value(&st).unwrap_or_default(),
        unterminated: false,
    };
    Ok(out)
}

/// What the reader remembers of one session between reads (kept in the adapter's own session
/// state): the stamp and digest of its `sessions` row when last read, and its prompt numbers.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct SessionMarks {
    /// `updated_at` and digest of the row when last read.
    #[serde(default)]
    u: String,
    #[serde(default)]
    h: u64,
    #[serde(default)]
    pub prompts: Prompts,
}

/// Where reading an agent's `sessions` and `messages` tables stands (Goose and Crush keep both
/// alike: a `sessions` row per session with `id` and `updated_at`, `messages` rows with a
/// `session_id`): what is remembered of each session (`S`, the adapter's, holding the reader's
/// [`SessionMarks`]), the latest session stamp, and the marks of the message rows.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct Tables<S> {
    #[serde(default)]
    pub sessions: BTreeMap<String, S>,
    /// The latest `updated_at` of a session at the last read: sessions at or after it are read
    /// again (a second update within the same second leaves the stamp as it was).
    #[serde(default)]
    pub mark: String,
    #[serde(default)]
    pub messages: RowMarks,
}

impl<S: Default + AsMut<SessionMarks>> Tables<S> {
    /// Reads the `sessions` rows whose stamp moved since the last read, or is at the latest stamp
    /// of the last read, and hands each row whose content changed to `row` (as JSON and as its
    /// record's bytes), which makes the session's info. Sessions gone from the table are
    /// forgotten. The read so far: the infos and the rows and bytes taken.
    pub(crate) fn read_sessions(
        &mut self,
        conn: &Connection,
        mut row: impl FnMut(&str, &Value, Vec<u8>, &mut S) -> SessionInfo,
    ) -> rusqlite::Result<DbRead> {
        let stamps: Vec<(String, String)> = {
            let mut s = conn.prepare("SELECT id, updated_at FROM sessions")?;
            s.query_map([], |r| {
                Ok((value_text(r.get_ref(0)?), value_text(r.get_ref(1)?)))
            })?
            .collect::<rusqlite::Result<_>>()?
        };
        let present: std::collections::BTreeSet<&str> =
            stamps.iter().map(|(s, _)| s.as_str()).collect();
        self.sessions.retain(|id, _| present.contains(id.as_str()));
        let mark = std::mem::take(&mut self.mark);
        let mut read = DbRead {
            infos: BTreeMap::new(),
            rows: 0,
            bytes: 0,
            at_end: true,
        };
        let mut whole = conn.prepare("SELECT * FROM sessions WHERE id = ?1")?;
        for (id, u) in &stamps {
            if at_or_after(u, &self.mark) {
                self.mark.clone_from(u);
            }
            let known = self.sessions.get_mut(id).map(|s| {
                let m = s.as_mut();
                (m.u == *u, m.h)
            });
            if known.is_some_and(|(same, _)| same) && !at_or_after(u, &mark) {
                continue;
            }
            let Some((v, digest)) = whole
                .query_map([id], |r| Ok((row_json(r), row_digest(r, 0))))?
                .next()
                .transpose()?
            else {
                continue;
            };
            let sess = self.sessions.entry(id.clone()).or_default();
            sess.as_mut().u.clone_from(u);
            if known.is_some_and(|(_, h)| h == digest) {
                continue;
            }
            sess.as_mut().h = digest;
            let raw = serde_json::to_vec(&v).unwrap_or_default();
            read.rows += 1;
            read.bytes += raw.len() as u64;
            read.infos.insert(id.clone(), row(id, &v, raw, sess));
        }
        Ok(read)
    }

    /// Reads the `messages` rows above the marks and the last ones again where they changed,
    /// about `max_bytes` of them, and counts them in `read`. When the table started over, so do
    /// the sessions' prompt numbers.
    pub(crate) fn read_messages(
        &mut self,
        conn: &Connection,
        max_bytes: usize,
        read: &mut DbRead,
    ) -> rusqlite::Result<Taking> {
        let taking = self.messages.read(conn, "messages", max_bytes)?;
        if taking.reset {
            for s in self.sessions.values_mut() {
                s.as_mut().prompts = Prompts::default();
            }
        }
        read.rows += taking.rows.len() as u64;
        read.bytes += taking.bytes;
        read.at_end = taking.at_end;
        Ok(taking)
    }
}

/// The alias the row id is selected under (removed from the row's record).
const ROWID: &str = "_memex_rowid";
/// The alias a row's update stamp is selected under, as an integer (not part of its record).
const STAMP: &str = "_memex_stamp";
/// The alias a row's key is selected under again (not part of its record).
const KEY: &str = "_memex_key";

/// One row taken from a table: its row id, its columns as JSON and that JSON's bytes (the
/// row's lossless record in the archive).
pub(crate) struct Taken {
    pub rowid: i64,
    pub row: Value,
    pub raw: Vec<u8>,
}

impl Taken {
    fn new(row: &rusqlite::Row<'_>, rowid: i64) -> Taken {
        let mut v = row_json(row);
        if let Value::Object(o) = &mut v {
            o.remove(ROWID);
            o.remove(STAMP);
            o.remove(KEY);
        }
        let raw = serde_json::to_vec(&v).unwrap_or_default();
        Taken { rowid, row: v, raw }
    }

    /// The row id as the place a problem with the row is reported at.
    pub(crate) fn line(&self) -> u64 {
        self.rowid.max(0) as u64
    }

    /// The JSON list `column` holds (a message's parts). Anything else is reported, and what it
    /// holds becomes the one part `unreadable` makes of its text (none when it is null).
    pub(crate) fn json_list(
        &self,
        column: &str,
        emit: &mut Emit,
        unreadable: impl FnOnce(String) -> Value,
    ) -> Vec<Value> {
        match self.row.get(column).map(json_column) {
            Some(Value::Array(a)) => a,
            other => {
                emit.issue(self.line(), format!("`{column}` is not a JSON list"), true);
                other
                    .filter(|v| !v.is_null())
                    .map(|v| {
                        vec![unreadable(
                            v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                        )]
                    })
                    .unwrap_or_default()
            }
        }
    }

    /// Hands the messages made of this row to `emit`, numbered in order under the row id, the
    /// first carrying the row's record.
    pub(crate) fn emit(&self, emit: &mut Emit, mut msgs: Vec<ParsedMessage>) {
        for (i, m) in msgs.iter_mut().enumerate() {
            m.seq = (self.line() << 10) | (i as u64).min(1023);
        }
        if let Some(first) = msgs.first_mut() {
            first.raw = Some(self.raw.clone());
        }
        for m in msgs {
            emit.push(m);
        }
    }
}

/// What one read of a table took.
pub(crate) struct Taking {
    /// New rows and rows changed in place, in row id order within each group.
    pub rows: Vec<Taken>,
    /// Bytes of row data taken.
    pub bytes: u64,
    /// `false` when new rows remain after the byte budget was spent.
    pub at_end: bool,
    /// The table no longer holds what the marks describe (a new database in the same place):
    /// the marks started over, and so should everything derived from them.
    pub reset: bool,
}

/// Where reading a table stands: the highest row id taken, and the digests of the last rows,
/// which are read again to take the ones updated in place.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct RowMarks {
    #[serde(default)]
    pub max: i64,
    #[serde(default, deserialize_with = "row_id_keys")]
    recent: BTreeMap<i64, u64>,
}

/// A map keyed by row id, whose keys JSON keeps as text: read back as text, so that it also
/// reads from a state nested in another one (`#[serde(flatten)]` hands them on as text).
fn row_id_keys<'de, D, V>(d: D) -> Result<BTreeMap<i64, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    let keyed = BTreeMap::<String, V>::deserialize(d)?;
    keyed
        .into_iter()
        .map(|(k, v)| k.parse().map(|k| (k, v)).map_err(serde::de::Error::custom))
        .collect()
}

impl RowMarks {
    /// Reads `table` above the marks: the rows of the window that changed, then new rows until
    /// about `max_bytes` were taken. `table` is a fixed name chosen by the adapter.
    pub(crate) fn read(
        &mut self,
        conn: &Connection,
        table: &str,
        max_bytes: usize,
    ) -> rusqlite::Result<Taking> {
        let select = format!("SELECT rowid AS {ROWID}, * FROM {table}");
        let mut rows = Vec::new();
        let mut bytes = 0u64;
        let mut seen: BTreeMap<i64, u64> = BTreeMap::new();
        if let Some(&lo) = self.recent.keys().next() {
            let mut st = conn.prepare(&format!(
                "{select} WHERE rowid >= ?1 AND rowid <= ?2 ORDER BY rowid"
            ))?;
            let mut q = st.query([lo, self.max])?;
            while let Some(r) = q.next()? {
                let rowid: i64 = r.get(0)?;
                let d = row_digest(r, 1);
                seen.insert(rowid, d);
                if self.recent.get(&rowid) != Some(&d) {
                    let t = Taken::new(r, rowid);
                    bytes += t.raw.len() as u64;
                    rows.push(t);
                }
            }
        }
        let mut reset = false;
        if seen.is_empty() && !self.recent.is_empty() {
            // Every watched row is gone: either they were deleted, or this is another database.
            let top: Option<i64> =
                conn.query_row(&format!("SELECT max(rowid) FROM {table}"), [], |r| r.get(0))?;
            if top.unwrap_or(0) < self.max {
                *self = RowMarks::default();
                reset = true;
            }
        }
        let mut at_end = true;
        {
            let mut st = conn.prepare(&format!("{select} WHERE rowid > ?1 ORDER BY rowid"))?;
            let mut q = st.query([self.max])?;
            let mut new = 0usize;
            while let Some(r) = q.next()? {
                if new > 0 && bytes >= max_bytes as u64 {
                    at_end = false;
                    break;
                }
                let rowid: i64 = r.get(0)?;
                seen.insert(rowid, row_digest(r, 1));
                let t = Taken::new(r, rowid);
                bytes += t.raw.len() as u64;
                rows.push(t);
                self.max = rowid;
                new += 1;
            }
        }
        while seen.len() > WINDOW {
            seen.pop_first();
        }
        self.recent = seen;
        Ok(Taking {
            rows,
            bytes,
            at_end,
            reset,
        })
    }
}

/// How far back, in milliseconds of a table's own update stamps, rows are looked at again for
/// changes made in place ([`StampMarks`]): wider than any write transaction an agent keeps open,
/// so a row stamped before it committed is still seen.
pub(crate) const STAMP_WINDOW_MS: i64 = 120_000;
/// Rows of the window remembered by digest at most (a table whose stamps are all alike would
/// otherwise put every row in the cursor).
const STAMP_WINDOW_ROWS: usize = 4096;
/// The last rows taken, remembered by the key the agent gave them: when the agent deletes its
/// newest rows (OpenCode's revert), SQLite gives their row ids to the next rows.
const ANCHORS: usize = 64;

/// Where reading a table that stamps every write stands (OpenCode's `time_updated`): new rows
/// are taken in row id order above the highest taken (a single writer commits row ids in order,
/// so a row committed late is still above it, and a first import never sorts the table); rows
/// changed in place are found by their stamp, from [`STAMP_WINDOW_MS`] before the latest stamp
/// seen, once the new rows are all taken. The rows of that window are remembered by digest, so
/// a row is taken again only when it changed. The keys of the last rows taken tell a reused row
/// id (the newest rows deleted, others written in their place) and another database in the
/// same place (read again from its start) from the rows taken.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct StampMarks {
    #[serde(default)]
    max: i64,
    /// The latest stamp seen, as the agent wrote it.
    #[serde(default)]
    top: Option<i64>,
    /// Row id → (stamp, digest) of the rows within the window.
    #[serde(default, deserialize_with = "row_id_keys")]
    recent: BTreeMap<i64, (i64, u64)>,
    /// (row id, digest of its key) of the last rows taken, in row id order.
    #[serde(default)]
    anchors: Vec<(i64, u64)>,
}

/// A digest of one value (a row's key).
fn value_digest(v: ValueRef<'_>) -> u64 {
    let mut h = Sha256::new();
    h.update(value_text(v).as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_le_bytes(first)
}

impl StampMarks {
    /// Reads `table` (a fixed name chosen by the adapter) whose rows are named by `key` and
    /// stamped by `stamp`: new rows until about `max_bytes` were taken, then, when none is
    /// left, the rows of the window that changed.
    pub(crate) fn read(
        &mut self,
        conn: &Connection,
        table: &str,
        key: &str,
        stamp: &str,
        max_bytes: usize,
    ) -> rusqlite::Result<Taking> {
        let select = format!(
            "SELECT rowid AS {ROWID}, *, coalesce(CAST({stamp} AS INTEGER), 0) AS {STAMP}, \
             {key} AS {KEY} FROM {table}"
        );
        let reset = self.check_anchors(conn, table, key)?;
        let mut rows = Vec::new();
        let mut bytes = 0u64;
        let mut at_end = true;
        let now = chrono::Utc::now().timestamp_millis();
        {
            let mut st = conn.prepare(&format!("{select} WHERE rowid > ?1 ORDER BY rowid"))?;
            let mut q = st.query([self.max])?;
            while let Some(r) = q.next()? {
                if !rows.is_empty() && bytes >= max_bytes as u64 {
                    at_end = false;
                    break;
                }
                let (t, at, digest) = Self::take(r)?;
                self.see(at, now);
                self.recent.insert(t.rowid, (at, digest));
                self.anchors.push((t.rowid, value_digest(r.get_ref(KEY)?)));
                bytes += t.raw.len() as u64;
                self.max = t.rowid;
                rows.push(t);
            }
        }
        let excess = self.anchors.len().saturating_sub(ANCHORS);
        self.anchors.drain(..excess);
        // A table without stamps (all alike, or none) has no window: its rows are read once.
        if at_end && self.top.is_some_and(|t| t > 0) {
            let mut st = conn.prepare(&format!(
                "{select} WHERE rowid <= ?1 AND coalesce(CAST({stamp} AS INTEGER), 0) >= ?2 \
                 ORDER BY rowid DESC LIMIT ?3"
            ))?;
            let mut q = st.query(rusqlite::params![
                self.max,
                self.since(),
                STAMP_WINDOW_ROWS as i64
            ])?;
            let mut window = BTreeMap::new();
            while let Some(r) = q.next()? {
                let (t, at, digest) = Self::take(r)?;
                window.insert(t.rowid, (at, digest));
                if self.recent.get(&t.rowid).map(|e| e.1) != Some(digest) {
                    bytes += t.raw.len() as u64;
                    rows.push(t);
                }
            }
            self.recent = window;
        }
        let since = self.since();
        self.recent.retain(|_, e| e.0 >= since);
        while self.recent.len() > STAMP_WINDOW_ROWS {
            self.recent.pop_first();
        }
        Ok(Taking {
            rows,
            bytes,
            at_end,
            reset,
        })
    }

    /// Finds where the rows taken end in the table as it is now: at the newest anchor whose row
    /// still holds the same key. Rows after it were deleted (their ids may come back with other
    /// rows, read as new); no anchor left means another database: read from the start, `true`.
    fn check_anchors(
        &mut self,
        conn: &Connection,
        table: &str,
        key: &str,
    ) -> rusqlite::Result<bool> {
        if self.max == 0 {
            return Ok(false);
        }
        let mut st = conn.prepare(&format!("SELECT {key} FROM {table} WHERE rowid = ?1"))?;
        while let Some(&(rowid, digest)) = self.anchors.last() {
            let mut q = st.query([rowid])?;
            let same = match q.next()? {
                Some(r) => value_digest(r.get_ref(0)?) == digest,
                None => false,
            };
            if same {
                if rowid < self.max {
                    self.max = rowid;
                    self.recent.retain(|&r, _| r <= rowid);
                }
                return Ok(false);
            }
            self.anchors.pop();
        }
        *self = StampMarks::default();
        Ok(true)
    }

    /// Counts a stamp into the latest one, unless it lies in the future (a wrong clock, or a
    /// hostile row) where it would move the window past every real change.
    fn see(&mut self, at: i64, now_ms: i64) {
        if epoch_ms(at) <= now_ms.saturating_add(86_400_000) {
            self.top = Some(self.top.map_or(at, |top| top.max(at)));
        }
    }

    /// The oldest stamp of the window, in the table's own unit (seconds or milliseconds).
    fn since(&self) -> i64 {
        match self.top {
            None => i64::MIN,
            Some(top) if epoch_ms(top) == top => top.saturating_sub(STAMP_WINDOW_MS),
            Some(top) => top.saturating_sub(STAMP_WINDOW_MS / 1000),
        }
    }

    /// A row as taken, with its stamp and its digest (neither the row id in front nor the stamp
    /// and key behind are part of the record).
    fn take(r: &rusqlite::Row<'_>) -> rusqlite::Result<(Taken, i64, u64)> {
        let rowid: i64 = r.get(0)?;
        let at: i64 = r.get(STAMP)?;
        let n = r.as_ref().column_count();
        let digest = row_digest_range(r, 1, n - 2);
        Ok((Taken::new(r, rowid), at, digest))
    }
}

/// The prompts of one session: which rows are prompts and their numbers, so a row read again
/// (updated in place, or rewritten by the agent under the same message id) keeps its number.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(crate) struct Prompts {
    /// `(row id, prompt number, message id)` of each prompt row, in row id order.
    #[serde(default)]
    marks: Vec<(i64, u32, String)>,
    #[serde(default)]
    count: u32,
}

impl Prompts {
    /// The prompt number of row `rowid` with message id `id`: its own when it is a prompt, else
    /// that of the last prompt before it.
    pub(crate) fn number(&mut self, rowid: i64, id: &str, prompt: bool) -> u32 {
        if prompt {
            self.prompt(rowid, id)
        } else {
            self.after(rowid)
        }
    }

    /// The number of prompt row `rowid` with message id `id`: the one it had, else the next.
    fn prompt(&mut self, rowid: i64, id: &str) -> u32 {
        let n = match self.marks.iter().find(|m| m.2 == id) {
            Some(m) => m.1,
            None => {
                self.count += 1;
                self.count
            }
        };
        match self.marks.binary_search_by_key(&rowid, |m| m.0) {
            Ok(i) => self.marks[i] = (rowid, n, id.to_owned()),
            Err(i) => self.marks.insert(i, (rowid, n, id.to_owned())),
        }
        n
    }

    /// The number of the last prompt before row `rowid`, which is no prompt (any more).
    fn after(&mut self, rowid: i64) -> u32 {
        if let Ok(i) = self.marks.binary_search_by_key(&rowid, |m| m.0) {
            self.marks.remove(i);
        }
        let i = self.marks.partition_point(|m| m.0 < rowid);
        if i == 0 { 0 } else { self.marks[i - 1].1 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_while_another_connection_writes_and_never_writes_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.db");
        let w = Connection::open(&path).unwrap();
        w.pragma_update(None, "journal_mode", "wal").unwrap();
        w.execute_batch("CREATE TABLE message (id INTEGER PRIMARY KEY, body TEXT, data BLOB);")
            .unwrap();
        w.execute(
            "INSERT INTO message (body, data) VALUES ('hello', x'ff00')",
            [],
        )
        .unwrap();
        let db = Db::open(&path).unwrap();
        assert!(db.has_table("message"));
        assert!(!db.has_table("auth"));
        assert_eq!(db.columns("message"), ["id", "body", "data"]);
        let row = db
            .conn()
            .query_row("SELECT * FROM message", [], |r| Ok(row_json(r)))
            .unwrap();
        assert_eq!(row["body"], "hello");
        assert_eq!(row["data"], "ff00");
        // The agent keeps writing while the reader is open.
        w.execute("INSERT INTO message (body) VALUES ('more')", [])
            .unwrap();
        let n: i64 = db
            .conn()
            .query_row("SELECT count(*) FROM message", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        let refused = db.conn().execute("DELETE FROM message", []);
        assert!(refused.is_err(), "a reader must never write");
    }

    #[test]
    fn a_stamp_in_the_future_does_not_move_the_window() {
        let now = 1_790_000_000_000;
        let mut m = StampMarks::default();
        m.see(now - 5_000, now);
        m.see(i64::MAX / 2, now);
        m.see(now + 365 * 86_400_000, now);
        assert_eq!(m.top, Some(now - 5_000));
        assert_eq!(m.since(), now - 5_000 - STAMP_WINDOW_MS);
        // Seconds stay seconds.
        let mut s = StampMarks::default();
        s.see(now / 1000, now);
        assert_eq!(s.since(), now / 1000 - STAMP_WINDOW_MS / 1000);
    }

    #[test]
    fn stamps_compare_as_numbers_or_text() {
        assert!(at_or_after("1781004100", "999"));
        assert!(!at_or_after("999", "1781004100"));
        assert!(at_or_after("2026-06-09 10:31:40", "2026-06-09 10:31:40"));
        assert!(at_or_after("x", ""));
    }

    #[test]
    fn prompt_numbers_survive_rereads_and_rewrites() {
        let mut p = Prompts::default();
        assert_eq!(p.after(1), 0);
        assert_eq!(p.prompt(2, "a"), 1);
        assert_eq!(p.after(3), 1);
        assert_eq!(p.prompt(5, "b"), 2);
        // Row 3 read again after prompt 2 arrived: still in talk 1.
        assert_eq!(p.after(3), 1);
        assert_eq!(p.after(6), 2);
        // The conversation rewritten as new rows, same message ids: same numbers.
        assert_eq!(p.prompt(10, "a"), 1);
        assert_eq!(p.after(11), 1);
        assert_eq!(p.prompt(12, "b"), 2);
        assert_eq!(p.prompt(13, "c"), 3);
    }

    #[test]
    fn a_file_that_is_not_a_database_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.vscdb");
        std::fs::write(
            &path,
            b"this is not sqlite, just text that is long enough to be read",
        )
        .unwrap();
        let err = Db::open(&path).err().expect("not a database");
        assert!(err.to_string().contains("state.vscdb"), "{err}");
    }
}
