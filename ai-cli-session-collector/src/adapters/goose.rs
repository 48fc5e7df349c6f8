//! Goose (block/goose, now aaif-goose/goose). FORMATS-MORE §10.
//!
//! **Where.** Goose ≥ 1.10 keeps every session in one SQLite database,
//! `<data>/sessions/sessions.db` (WAL mode), where `<data>` is `$GOOSE_PATH_ROOT/data` when that
//! absolute path is set, else the XDG data dir on Linux *and* macOS (`$XDG_DATA_HOME/goose`,
//! default `~/.local/share/goose`: Goose asks `etcetera::choose_app_strategy`, which is XDG
//! everywhere but Windows) and `%APPDATA%\Block\goose\data` on Windows. The macOS
//! `~/Library/Application Support/Block/goose/data` folder [DV-goose] is a root too when it
//! exists. Before 1.10 each session was a `<yyyymmdd_hhmmss>.jsonl` file in the same folder;
//! Goose imported them into the database once and left them there.
//!
//! **What is read.** `sessions.db` ([`SourceKind::Database`]): only `sessions`, `messages` and
//! `usage_ledger` (never the provider inventory or anything else; Goose's secrets live in
//! `secrets.yaml`, outside the root). Every `messages` row yields one message per `content_json`
//! part, ids taken from the row's own `message_id` (kept by Goose when it rewrites a
//! conversation), so a row read again is the same message. Every `sessions` row is kept as a
//! meta message `session` (name, token totals as usage keyed per session); every
//! `usage_ledger` row as a meta message (no usage: the session totals already count it). The
//! legacy `.jsonl` files are read as lines ([`SourceKind::Lines`]): line 1 is the session's
//! metadata (`working_dir`, `description`, token totals), then one message per line.
//!
//! **Prompts.** A `user` row is a prompt when it has a `text` part, its
//! `metadata_json.userVisible` is not `false`, and its session is not a `sub_agent` session
//! (whose "user" text is the task the parent agent wrote; those messages are sidechain, with the
//! sub-agent session's id as `agent_id`, and the session links its `parent_session_id`). Tool
//! responses also arrive as `user` rows and are tool results, not prompts.
//!
//! **Tools.** `toolRequest.id` pairs with `toolResponse.id`; a call Goose could not parse
//! (`toolCall.status: "error"`) is still a call (named `unknown`, the error as its input) and its
//! response an error result.
//!
//! **Traps.** `created_timestamp` is epoch seconds, but some clients write milliseconds: like
//! Goose, values above 10¹⁰ are taken as milliseconds. `sessions.created_at`/`updated_at` are
//! SQLite `YYYY-MM-DD HH:MM:SS` UTC text (RFC 3339 for imported legacy sessions). Goose updates
//! rows in place without any update time (`update_message_metadata`), rewrites a whole
//! conversation as new rows (`replace_conversation`) and deletes sessions: new rows are read
//! above the highest row id taken, and the last [`WINDOW`] rows are read again on every parse and
//! taken again when their content changed. An in-place change to an older row is not seen.
//! Deleted rows and sessions are not reported: the archive keeps what it read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use rusqlite::types::ValueRef;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, SourceKind, blank, drive_jsonl, str_of,
    string_of, u64_of,
};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, ToolCall,
    ToolResult, Usage,
};
use crate::sqlite::{Db, json_column, row_json};
use crate::text;

const AGENT: &str = "goose";

/// How many of the last rows of a message table are read again on every parse, to take the rows
/// the agent rewrote in place (Crush streams its answers into the row it inserted first).
pub(crate) const WINDOW: usize = 128;

pub struct GooseAdapter;

fn is_database(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "sessions.db")
}

impl ConversationAdapter for GooseAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let absolute = |k: &str| env.var(k).map(PathBuf::from).filter(|p| p.is_absolute());
        if let Some(root) = absolute("GOOSE_PATH_ROOT") {
            return vec![root.join("data").join("sessions")];
        }
        let xdg =
            absolute("XDG_DATA_HOME").unwrap_or_else(|| env.home.join(".local").join("share"));
        let appdata = env
            .var("APPDATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join("AppData").join("Roaming"));
        let mut roots = vec![
            xdg.join("goose").join("sessions"),
            appdata
                .join("Block")
                .join("goose")
                .join("data")
                .join("sessions"),
            env.home
                .join("Library")
                .join("Application Support")
                .join("Block")
                .join("goose")
                .join("data")
                .join("sessions"),
        ];
        roots.dedup();
        roots
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        if !path.starts_with(root) || path == root {
            return false;
        }
        if is_database(path) {
            return true;
        }
        // Legacy sessions sit directly in the sessions folder.
        let in_sessions = path
            .parent()
            .is_some_and(|p| p == root || p.file_name().is_some_and(|n| n == "sessions"));
        in_sessions && path.extension().is_some_and(|e| e == "jsonl")
    }

    fn source_kind(&self, path: &Path) -> SourceKind {
        if is_database(path) {
            SourceKind::Database
        } else {
            SourceKind::Lines
        }
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        if is_database(path) {
            parse_database(path, cursor, max_bytes)
        } else {
            parse_legacy(path, cursor, max_bytes)
        }
    }
}

// ---- shared with crush.rs: incremental reading of an agent's SQLite tables ----

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
pub(crate) fn value_text(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => String::new(),
        ValueRef::Integer(n) => n.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
    }
}

/// Whether update stamp `a` is at or after `b`: numerically when both are numbers, else as text
/// (SQLite `YYYY-MM-DD HH:MM:SS` sorts as text).
pub(crate) fn at_or_after(a: &str, b: &str) -> bool {
    match (a.parse::<f64>(), b.parse::<f64>()) {
        (Ok(x), Ok(y)) => x >= y,
        _ => a >= b,
    }
}

/// A digest of a row's columns from `from` on: equal digests mean an unchanged row.
pub(crate) fn row_digest(row: &rusqlite::Row<'_>, from: usize) -> u64 {
    let mut h = Sha256::new();
    for i in from..row.as_ref().column_count() {
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

/// The alias the row id is selected under (removed from the row's record).
const ROWID: &str = "_memex_rowid";

/// One row taken from a table: its row id, its columns as JSON and that JSON's bytes (the
/// row's lossless record in the archive).
pub(crate) struct Taken {
    pub rowid: i64,
    pub row: Value,
    pub raw: Vec<u8>,
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
    #[serde(default)]
    recent: BTreeMap<i64, u64>,
}

fn take(row: &rusqlite::Row<'_>, rowid: i64) -> Taken {
    let mut v = row_json(row);
    if let Value::Object(o) = &mut v {
        o.remove(ROWID);
    }
    let raw = serde_json::to_vec(&v).unwrap_or_default();
    Taken { rowid, row: v, raw }
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
                    let t = take(r, rowid);
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
                let t = take(r, rowid);
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
    /// The number of prompt row `rowid` with message id `id`: the one it had, else the next.
    pub(crate) fn prompt(&mut self, rowid: i64, id: &str) -> u32 {
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
    pub(crate) fn after(&mut self, rowid: i64) -> u32 {
        if let Ok(i) = self.marks.binary_search_by_key(&rowid, |m| m.0) {
            self.marks.remove(i);
        }
        let i = self.marks.partition_point(|m| m.0 < rowid);
        if i == 0 { 0 } else { self.marks[i - 1].1 }
    }
}

/// A session's usage totals as the agent keeps them in its session row.
pub(crate) fn usage_of(
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
) -> Option<Usage> {
    (input + output + cache_read + cache_write > 0).then_some(Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cache_read,
        cache_creation_tokens: cache_write,
        reasoning_tokens: 0,
    })
}

// ---- the database ----

/// What this adapter remembers of a session between reads.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Sess {
    /// `updated_at` and digest of the row when last read.
    #[serde(default)]
    u: String,
    #[serde(default)]
    h: u64,
    #[serde(default)]
    sub: bool,
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    prompts: Prompts,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct DbState {
    #[serde(default)]
    sessions: BTreeMap<String, Sess>,
    /// The latest `updated_at` of a session at the last read: sessions at or after it are read
    /// again (a second update within the same second leaves the stamp as it was).
    #[serde(default)]
    mark: String,
    #[serde(default)]
    messages: RowMarks,
    #[serde(default)]
    ledger: i64,
}

/// `YYYY-MM-DD HH:MM:SS` (SQLite `CURRENT_TIMESTAMP`, UTC), RFC 3339, or epoch seconds/ms.
fn sql_time(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().map(epoch_ms),
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map(|d| d.timestamp_millis())
            .ok()
            .or_else(|| {
                chrono::NaiveDateTime::parse_from_str(s.trim(), "%Y-%m-%d %H:%M:%S%.f")
                    .ok()
                    .map(|d| d.and_utc().timestamp_millis())
            }),
        _ => None,
    }
}

fn parse_database(
    path: &Path,
    cursor: &Cursor,
    max_bytes: usize,
) -> Result<ParseOutput, ParseError> {
    let db = Db::open(path)?;
    let mut st: DbState = serde_json::from_value(cursor.state.clone()).unwrap_or_default();
    let mut emit = Emit::default();
    let mut out = ParseOutput {
        cursor: cursor.clone(),
        at_end: true,
        ..Default::default()
    };
    let missing: Vec<&str> = ["sessions", "messages"]
        .into_iter()
        .filter(|t| !db.has_table(t))
        .collect();
    if !missing.is_empty() {
        out.issues.push(crate::ParseIssue {
            line: 0,
            byte_offset: 0,
            reason: format!(
                "no `{}` table: not a Goose sessions database",
                missing.join("`, `")
            ),
            kept: false,
        });
        return Ok(out);
    }
    let read = read_database(db.conn(), &mut st, &mut emit, max_bytes).map_err(|e| db.error(e))?;
    drop(db);
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

struct DbRead {
    infos: BTreeMap<String, SessionInfo>,
    rows: u64,
    bytes: u64,
    at_end: bool,
}

fn read_database(
    conn: &Connection,
    st: &mut DbState,
    emit: &mut Emit,
    max_bytes: usize,
) -> rusqlite::Result<DbRead> {
    // One snapshot for the whole read: sessions and their messages as of one moment.
    let tx = conn.unchecked_transaction()?;
    let mut infos: BTreeMap<String, SessionInfo> = BTreeMap::new();
    let mut rows = 0u64;
    let mut bytes = 0u64;

    // Sessions: the rows whose stamp moved (or is at the last read's latest) are read whole.
    let stamps: Vec<(String, String)> = {
        let mut s = tx.prepare("SELECT id, updated_at FROM sessions")?;
        s.query_map([], |r| {
            Ok((value_text(r.get_ref(0)?), value_text(r.get_ref(1)?)))
        })?
        .collect::<rusqlite::Result<_>>()?
    };
    let present: std::collections::BTreeSet<&str> =
        stamps.iter().map(|(s, _)| s.as_str()).collect();
    st.sessions.retain(|id, _| present.contains(id.as_str()));
    let mark = std::mem::take(&mut st.mark);
    {
        let mut whole = tx.prepare("SELECT * FROM sessions WHERE id = ?1")?;
        for (id, u) in &stamps {
            if at_or_after(u, &st.mark) {
                st.mark.clone_from(u);
            }
            let known = st.sessions.get(id).map(|s| (s.u == *u, s.h));
            if known.is_some_and(|(same, _)| same) && !at_or_after(u, &mark) {
                continue;
            }
            let Some((row, digest)) = whole
                .query_map([id], |r| Ok((row_json(r), row_digest(r, 0))))?
                .next()
                .transpose()?
            else {
                continue;
            };
            let sess = st.sessions.entry(id.clone()).or_default();
            sess.u.clone_from(u);
            if known.is_some_and(|(_, h)| h == digest) {
                continue;
            }
            sess.h = digest;
            let raw = serde_json::to_vec(&row).unwrap_or_default();
            rows += 1;
            bytes += raw.len() as u64;
            infos.insert(id.clone(), session_row(id, &row, raw, sess, emit));
        }
    }

    // Messages: new rows, and the last rows again where they changed.
    let taking = st.messages.read(&tx, "messages", max_bytes)?;
    if taking.reset {
        for s in st.sessions.values_mut() {
            s.prompts = Prompts::default();
        }
        st.ledger = 0;
    }
    rows += taking.rows.len() as u64;
    bytes += taking.bytes;
    for t in &taking.rows {
        message_row(t, st, emit, &mut infos);
    }

    // The usage ledger (schema ≥ 15): appended, never updated; read once the messages are.
    if taking.at_end && has_table(&tx, "usage_ledger") {
        let mut s = tx.prepare("SELECT * FROM usage_ledger WHERE id > ?1 ORDER BY id")?;
        let mut q = s.query([st.ledger])?;
        while let Some(r) = q.next()? {
            let row = row_json(r);
            let id = row.get("id").and_then(Value::as_i64).unwrap_or(0);
            st.ledger = st.ledger.max(id);
            let raw = serde_json::to_vec(&row).unwrap_or_default();
            rows += 1;
            bytes += raw.len() as u64;
            ledger_row(id, &row, raw, st, emit, &mut infos);
        }
    }
    drop(tx);
    Ok(DbRead {
        infos,
        rows,
        bytes,
        at_end: taking.at_end,
    })
}

fn has_table(conn: &Connection, name: &str) -> bool {
    conn.query_row(
        "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [name],
        |_| Ok(()),
    )
    .is_ok()
}

/// The session info a session's messages carry when its row did not change.
fn base_info(id: &str, sess: &Sess) -> SessionInfo {
    SessionInfo {
        session_id: id.to_owned(),
        project_path: sess.cwd.clone(),
        model: sess.model.clone(),
        parent_session_id: sess.parent.clone(),
        is_subagent: sess.sub,
        ..Default::default()
    }
}

/// A `sessions` row: remembered, kept as the session's meta message, and its info.
fn session_row(
    id: &str,
    row: &Value,
    raw: Vec<u8>,
    sess: &mut Sess,
    emit: &mut Emit,
) -> SessionInfo {
    sess.sub = str_of(row, "session_type") == Some("sub_agent");
    sess.parent = string_of(row, "parent_session_id");
    sess.cwd = string_of(row, "working_dir");
    let config = row.get("model_config_json").map(json_column);
    sess.model = config
        .as_ref()
        .and_then(|c| string_of(c, "model_name"))
        .or_else(|| sess.model.take());
    let started = row.get("created_at").and_then(sql_time);
    let updated = row.get("updated_at").and_then(sql_time);
    let name = string_of(row, "name")
        .or_else(|| string_of(row, "description"))
        .map(|n| n.trim().to_owned())
        .filter(|n| !n.is_empty());
    let custom = row
        .get("user_set_name")
        .is_some_and(|v| v.as_i64() == Some(1) || v.as_bool() == Some(true));
    let title = name.as_ref().map(|n| {
        let src = if custom {
            TitleSource::Custom
        } else {
            TitleSource::Generated
        };
        (src, text::truncate_chars(n, 200))
    });
    // Goose's own totals; `accumulated_*` (whole session, across compactions) when present.
    let tok = |acc: &str, cur: &str| {
        row.get(acc)
            .and_then(Value::as_u64)
            .unwrap_or_else(|| u64_of(row, cur))
    };
    let usage = usage_of(
        tok("accumulated_input_tokens", "input_tokens"),
        tok("accumulated_output_tokens", "output_tokens"),
        tok("accumulated_cache_read_tokens", "cache_read_tokens"),
        tok("accumulated_cache_write_tokens", "cache_write_tokens"),
    );
    let mut m = blank(AGENT, id, "session".into(), Role::System, MessageKind::Meta);
    m.text = name.unwrap_or_default();
    m.timestamp = started;
    m.cwd.clone_from(&sess.cwd);
    m.model.clone_from(&sess.model);
    m.usage = usage;
    m.usage_key = usage.map(|_| format!("session:{id}"));
    m.flags.sidechain = sess.sub;
    m.agent_id = sess.sub.then(|| id.to_owned());
    m.raw = Some(raw);
    emit.push(m);
    SessionInfo {
        title,
        started_at: started,
        updated_at: updated,
        ..base_info(id, sess)
    }
}

/// A `usage_ledger` row: one provider call's tokens, kept as a meta message.
fn ledger_row(
    id: i64,
    row: &Value,
    raw: Vec<u8>,
    st: &DbState,
    emit: &mut Emit,
    infos: &mut BTreeMap<String, SessionInfo>,
) {
    let sid = string_of(row, "session_id").unwrap_or_default();
    let sess = st.sessions.get(&sid).cloned().unwrap_or_default();
    let mut m = blank(
        AGENT,
        &sid,
        format!("ledger:{id}"),
        Role::System,
        MessageKind::Meta,
    );
    m.model = string_of(row, "model");
    m.text = format!(
        "{} tokens in, {} out",
        u64_of(row, "input_tokens"),
        u64_of(row, "output_tokens")
    );
    m.timestamp = row
        .get("created_timestamp")
        .and_then(Value::as_i64)
        .map(epoch_ms);
    m.cwd.clone_from(&sess.cwd);
    m.flags.sidechain = sess.sub;
    m.agent_id = sess.sub.then(|| sid.clone());
    m.seq = id as u64;
    m.raw = Some(raw);
    emit.push(m);
    infos
        .entry(sid.clone())
        .or_insert_with(|| base_info(&sid, &sess));
}

/// A `messages` row: one message per content part.
fn message_row(
    t: &Taken,
    st: &mut DbState,
    emit: &mut Emit,
    infos: &mut BTreeMap<String, SessionInfo>,
) {
    let row = &t.row;
    let line = t.rowid.max(0) as u64;
    let sid = string_of(row, "session_id").unwrap_or_default();
    let sess = st.sessions.entry(sid.clone()).or_default();
    let info = infos
        .entry(sid.clone())
        .or_insert_with(|| base_info(&sid, sess));
    let mid = string_of(row, "message_id").unwrap_or_else(|| format!("row:{}", t.rowid));
    let role = str_of(row, "role").unwrap_or("");
    let meta = row
        .get("metadata_json")
        .map(json_column)
        .unwrap_or_default();
    let content = match row.get("content_json").map(json_column) {
        Some(Value::Array(a)) => a,
        other => {
            emit.issue(line, "`content_json` is not a JSON list", true);
            other
                .filter(|v| !v.is_null())
                .map(|v| {
                    let s = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    vec![serde_json::json!({"type": "unreadable", "text": s})]
                })
                .unwrap_or_default()
        }
    };
    let visible = meta.get("userVisible").and_then(Value::as_bool) != Some(false);
    let prompt = role == "user" && visible && !sess.sub && has_text(&content);
    let number = if prompt {
        sess.prompts.prompt(t.rowid, &mid)
    } else {
        sess.prompts.after(t.rowid)
    };
    let model = meta
        .get("inference")
        .and_then(|i| string_of(i, "resolvedModel").or_else(|| string_of(i, "requestedModel")))
        .or_else(|| sess.model.clone());
    let ctx = Ctx {
        sid: &sid,
        base: &mid,
        number,
        timestamp: row
            .get("created_timestamp")
            .and_then(Value::as_i64)
            .map(epoch_ms),
        cwd: sess.cwd.as_deref(),
        model: model.as_deref(),
        sub: sess.sub,
    };
    let mut msgs = blocks(&ctx, role, &content, prompt);
    if prompt && number == 1 {
        offer_first_prompt(info, &msgs);
    }
    for (i, m) in msgs.iter_mut().enumerate() {
        m.seq = ((t.rowid.max(0) as u64) << 10) | (i as u64).min(1023);
    }
    if let Some(first) = msgs.first_mut() {
        first.raw = Some(t.raw.clone());
    }
    for m in msgs {
        emit.push(m);
    }
}

/// The first prompt as the session's title, unless this read already has a title for it.
pub(crate) fn offer_first_prompt(info: &mut SessionInfo, msgs: &[ParsedMessage]) {
    if info.title.is_some() {
        return;
    }
    if let Some(p) = msgs.iter().find(|m| m.kind == MessageKind::UserPrompt) {
        let t = text::prompt_title(&p.text);
        if !t.is_empty() {
            info.title = Some((TitleSource::FirstPrompt, t));
        }
    }
}

// ---- content parts (database rows and legacy lines alike) ----

/// What the messages of one record share.
struct Ctx<'a> {
    sid: &'a str,
    base: &'a str,
    number: u32,
    timestamp: Option<i64>,
    cwd: Option<&'a str>,
    model: Option<&'a str>,
    sub: bool,
}

impl Ctx<'_> {
    fn message(&self, i: usize, role: Role, kind: MessageKind) -> ParsedMessage {
        let id = if i == 0 {
            self.base.to_owned()
        } else {
            format!("{}#{i}", self.base)
        };
        let mut m = blank(AGENT, self.sid, id, role, kind);
        m.prompt_number = self.number;
        m.timestamp = self.timestamp;
        m.cwd = self.cwd.map(str::to_owned);
        if role == Role::Assistant {
            m.model = self.model.map(str::to_owned);
        }
        m.flags.sidechain = self.sub;
        m.agent_id = self.sub.then(|| self.sid.to_owned());
        m
    }
}

fn has_text(content: &[Value]) -> bool {
    content.iter().any(|p| {
        str_of(p, "type") == Some("text") && str_of(p, "text").is_some_and(|t| !t.trim().is_empty())
    })
}

/// The text of MCP tool output (`text`, `image`, `resource` items).
fn output_text(v: &Value) -> String {
    match v {
        Value::Array(items) => items
            .iter()
            .map(output_text)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(_) => match str_of(v, "type") {
            Some("resource") => v
                .get("resource")
                .and_then(|r| str_of(r, "text").or_else(|| str_of(r, "uri")))
                .unwrap_or_default()
                .to_owned(),
            _ => text::blocks_text(v),
        },
        Value::String(s) => s.clone(),
        _ => String::new(),
    }
}

/// Searchable text of a part this adapter keeps as meta.
fn part_text(p: &Value) -> String {
    ["msg", "text", "message", "error", "prompt"]
        .iter()
        .find_map(|k| str_of(p, k))
        .map(str::to_owned)
        .unwrap_or_else(|| str_of(p, "type").unwrap_or_default().to_owned())
}

fn blocks(c: &Ctx<'_>, role: &str, content: &[Value], prompt: bool) -> Vec<ParsedMessage> {
    let row_role = match role {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        _ => Role::System,
    };
    // (part index, message), put in part order at the end.
    let mut out: Vec<(usize, ParsedMessage)> = Vec::new();
    if prompt {
        // What the human sent: its text and images, as one prompt.
        let mut at = None;
        let mut parts = Vec::new();
        for (i, p) in content.iter().enumerate() {
            match str_of(p, "type") {
                Some("text") => {
                    at.get_or_insert(i);
                    parts.push(str_of(p, "text").unwrap_or_default());
                }
                Some("image") => parts.push("[image]"),
                _ => {}
            }
        }
        let at = at.unwrap_or(0);
        let mut m = c.message(at, Role::User, MessageKind::UserPrompt);
        m.text = parts
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        out.push((at, m));
    }
    for (i, p) in content.iter().enumerate() {
        let ty = str_of(p, "type").unwrap_or("");
        if prompt && matches!(ty, "text" | "image") {
            continue;
        }
        let m = match ty {
            "text" if row_role == Role::Assistant => {
                let mut m = c.message(i, Role::Assistant, MessageKind::AssistantText);
                m.text = str_of(p, "text").unwrap_or_default().to_owned();
                m
            }
            "thinking" | "redactedThinking" | "reasoning" => {
                let mut m = c.message(i, Role::Assistant, MessageKind::Thinking);
                m.text = str_of(p, "thinking")
                    .or_else(|| str_of(p, "text"))
                    .unwrap_or_default()
                    .to_owned();
                m
            }
            "toolRequest" | "frontendToolRequest" => tool_request(c, i, p),
            "toolResponse" => tool_response(c, i, p),
            "image" => {
                let mut m = c.message(i, row_role, MessageKind::Meta);
                m.text = "[image]".into();
                m
            }
            _ => {
                let mut m = c.message(i, row_role, MessageKind::Meta);
                m.text = part_text(p);
                m
            }
        };
        out.push((i, m));
    }
    if out.is_empty() {
        out.push((0, c.message(0, row_role, MessageKind::Meta)));
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, m)| m).collect()
}

fn tool_request(c: &Ctx<'_>, i: usize, p: &Value) -> ParsedMessage {
    let call = p.get("toolCall").unwrap_or(&Value::Null);
    let (name, input) = match (str_of(call, "status"), call.get("value")) {
        (Some("success") | None, Some(v)) if v.is_object() => (
            str_of(v, "name").unwrap_or("unknown").to_owned(),
            v.get("arguments").cloned().unwrap_or(Value::Null),
        ),
        // Goose could not read the call: its error is all there is.
        _ => ("unknown".to_owned(), call.clone()),
    };
    let mut m = c.message(i, Role::Assistant, MessageKind::ToolCall);
    m.text = text::tool_call_text(&name, &input);
    m.tool_call = Some(ToolCall {
        name,
        input,
        call_id: string_of(p, "id"),
    });
    m
}

fn tool_response(c: &Ctx<'_>, i: usize, p: &Value) -> ParsedMessage {
    let result = p.get("toolResult").unwrap_or(&Value::Null);
    let failed = str_of(result, "status") == Some("error");
    let value = result.get("value").unwrap_or(&Value::Null);
    let (body, is_error) = if failed {
        (str_of(result, "error").unwrap_or_default().to_owned(), true)
    } else {
        match value {
            // CallToolResult: `{content: [...], isError}`; older Goose: the content list itself.
            Value::Object(_) => (
                output_text(value.get("content").unwrap_or(&Value::Null)),
                value.get("isError").and_then(Value::as_bool) == Some(true),
            ),
            other => (output_text(other), false),
        }
    };
    let mut m = c.message(i, Role::Tool, MessageKind::ToolResult);
    m.text = body;
    m.tool_result = Some(ToolResult {
        call_id: string_of(p, "id"),
        is_error,
    });
    m
}

// ---- legacy JSONL (≤ 1.9) ----

#[derive(Default, Serialize, Deserialize)]
struct LegacyState {
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    prompt: u32,
}

fn parse_legacy(path: &Path, cursor: &Cursor, max_bytes: usize) -> Result<ParseOutput, ParseError> {
    let sid = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned();
    let mut info = SessionInfo {
        session_id: sid.clone(),
        ..Default::default()
    };
    let (mut out, st) = drive_jsonl::<LegacyState>(path, cursor, max_bytes, |st, emit, rec| {
        legacy_record(&sid, st, emit, rec, &mut info);
    })?;
    if !out.messages.is_empty() {
        info.project_path = st.cwd;
        out.sessions.push(info);
    }
    Ok(out)
}

fn legacy_record(
    sid: &str,
    st: &mut LegacyState,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
) {
    let v = &rec.value;
    if !v.is_object() {
        emit.skip(&rec, "line is not a JSON object");
        return;
    }
    let Some(role) = str_of(v, "role") else {
        // The metadata line (line 1).
        if let Some(cwd) = string_of(v, "working_dir") {
            st.cwd = Some(cwd);
        }
        if let Some(d) = string_of(v, "description").filter(|d| !d.trim().is_empty()) {
            info.title = Some((TitleSource::Generated, text::truncate_chars(d.trim(), 200)));
        }
        let tok = |acc: &str, cur: &str| {
            v.get(acc)
                .and_then(Value::as_u64)
                .unwrap_or_else(|| u64_of(v, cur))
        };
        let id = if rec.line == 1 {
            "metadata".to_owned()
        } else {
            format!("L{}", rec.line)
        };
        let mut m = blank(AGENT, sid, id, Role::System, MessageKind::Meta);
        m.text = string_of(v, "description").unwrap_or_default();
        m.cwd.clone_from(&st.cwd);
        m.prompt_number = st.prompt;
        m.usage = usage_of(
            tok("accumulated_input_tokens", "input_tokens"),
            tok("accumulated_output_tokens", "output_tokens"),
            0,
            0,
        );
        m.usage_key = m.usage.map(|_| format!("session:{sid}"));
        emit.push(m);
        return;
    };
    let content: Vec<Value> = match v.get("content") {
        Some(Value::Array(a)) => a.clone(),
        _ => {
            emit.note(&rec, "message has no `content` list");
            Vec::new()
        }
    };
    let visible = v
        .get("metadata")
        .and_then(|m| m.get("userVisible"))
        .and_then(Value::as_bool)
        != Some(false);
    let prompt = role == "user" && visible && has_text(&content);
    if prompt {
        st.prompt += 1;
    }
    let base = string_of(v, "id").unwrap_or_else(|| format!("L{}", rec.line));
    let ctx = Ctx {
        sid,
        base: &base,
        number: st.prompt,
        timestamp: v.get("created").and_then(Value::as_i64).map(epoch_ms),
        cwd: st.cwd.as_deref(),
        model: None,
        sub: false,
    };
    let msgs = blocks(&ctx, role, &content, prompt);
    if let Some(t) = msgs.first().and_then(|m| m.timestamp) {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    if prompt && st.prompt == 1 {
        offer_first_prompt(info, &msgs);
    }
    for m in msgs {
        emit.push(m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_milliseconds() {
        assert_eq!(epoch_ms(1_781_001_000), 1_781_001_000_000);
        assert_eq!(epoch_ms(1_781_001_060_000), 1_781_001_060_000);
        assert_eq!(
            sql_time(&Value::from("2026-06-09 10:30:00")),
            Some(1_781_001_000_000)
        );
        assert_eq!(
            sql_time(&Value::from("2026-06-09T10:30:00Z")),
            Some(1_781_001_000_000)
        );
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
    fn roots_follow_goose_path_root_xdg_and_appdata() {
        let env = |vars: &[(&str, &str)]| Env {
            home: PathBuf::from("/home/u"),
            vars: vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        let roots = GooseAdapter.default_roots(&env(&[]));
        assert!(roots.contains(&PathBuf::from("/home/u/.local/share/goose/sessions")));
        assert!(roots.contains(&PathBuf::from(
            "/home/u/AppData/Roaming/Block/goose/data/sessions"
        )));
        assert!(roots.contains(&PathBuf::from(
            "/home/u/Library/Application Support/Block/goose/data/sessions"
        )));
        let roots = GooseAdapter.default_roots(&env(&[("XDG_DATA_HOME", "/data")]));
        assert!(roots.contains(&PathBuf::from("/data/goose/sessions")));
        // A relative XDG_DATA_HOME is ignored, as the XDG spec says.
        let roots = GooseAdapter.default_roots(&env(&[("XDG_DATA_HOME", "rel")]));
        assert!(roots.contains(&PathBuf::from("/home/u/.local/share/goose/sessions")));
        let roots = GooseAdapter.default_roots(&env(&[("APPDATA", "/w/Roaming")]));
        assert!(roots.contains(&PathBuf::from("/w/Roaming/Block/goose/data/sessions")));
        let roots = GooseAdapter.default_roots(&env(&[("GOOSE_PATH_ROOT", "/g")]));
        assert_eq!(roots, vec![PathBuf::from("/g/data/sessions")]);
    }

    #[test]
    fn what_is_a_transcript() {
        let root = Path::new("/h/.local/share/goose/sessions");
        let a = GooseAdapter;
        assert!(a.is_transcript(root, &root.join("sessions.db")));
        assert!(a.is_transcript(root, &root.join("20250724_101500.jsonl")));
        assert!(!a.is_transcript(root, &root.join("sessions.db-wal")));
        assert!(!a.is_transcript(root, &root.join("x/y.jsonl")));
        assert!(!a.is_transcript(root, Path::new("/elsewhere/sessions.db")));
        assert_eq!(
            a.source_kind(&root.join("sessions.db")),
            SourceKind::Database
        );
        assert_eq!(
            a.source_kind(&root.join("20250724_101500.jsonl")),
            SourceKind::Lines
        );
        // A change of the write-ahead log is a change of the database.
        assert_eq!(
            a.source_of(root, &root.join("sessions.db-wal")),
            Some(root.join("sessions.db"))
        );
    }
}
