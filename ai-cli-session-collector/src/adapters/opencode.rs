//! OpenCode: every shape lives under the data folder `$XDG_DATA_HOME/opencode`, by default
//! `~/.local/share/opencode` on Linux, macOS and Windows alike (OpenCode joins the home folder
//! with `.local/share` everywhere; there is no `%APPDATA%` branch). FORMATS-MORE §4.
//!
//! * **2.x database** (§4a): `opencode.db` (`$OPENCODE_DB` names another file, relative to the
//!   data folder or absolute; non-default release channels use `opencode-<channel>.db`).
//!   `session_v2` holds one row per session (directory, generated title, `parent_id`, model),
//!   `session_message` one row per record (`type` = `user`, `assistant`, `shell`, `synthetic`,
//!   `compaction`, `idle`, …; `data` JSON; `seq` orders a session, sparse).
//! * **1.x database** (§4b, from 1.2): the same file with `session`, `message` (role, model,
//!   tokens, cwd) and `part` (the content, one row per text / reasoning / tool / step part).
//! * **1.x JSON storage** (§4c, before 1.2): `storage/session/<project>/<sid>.json`,
//!   `storage/message/<sid>/<msgid>.json`, `storage/part/<msgid>/<partid>.json`. The session file
//!   is the source ([`SourceKind::Document`]): a change of one of its message or part files maps
//!   to it ([`OpenCodeAdapter::source_of`]), and it is read again whole with all its messages and
//!   parts, which keep the agent's own ids. Unchanged is decided on all those files together.
//!
//! Databases are read incrementally: per table, the rows above the `(time_updated, id)` mark
//! kept in the cursor, in that order, about `max_bytes` of them per call. A row rewritten in
//! place (a 2.x assistant step while it streams, a 1.x part growing) has a newer
//! `time_updated`, so it comes back under the same message ids with its final content. Only
//! `session_v2`/`session_message`, or `session`/`message`/`part`, are ever queried: the
//! `account`, `control_account` and `credential` tables and `auth.json` (tokens, API keys) are
//! never opened. A database with `session_v2` is read as 2.x only (the old tables are migrated
//! data). Every `*.db` directly in the data folder is taken for OpenCode's (a custom
//! `$OPENCODE_DB` name is not known when a path is classified); one without these tables is
//! reported and left alone. The JSON storage is ignored once `opencode.db` sits next to it:
//! OpenCode migrated it into the database and left it stale (§4c, [AS-TRACK]).
//!
//! Prompts. 2.x: a `user` row. Slash commands are stored already expanded with no marker (§4a
//! trap), so `/review` counts as a prompt holding its whole template: the human sent it. A
//! `shell` row (the user's `!command`) and a `synthetic` row (its echo for the model, plan-mode
//! reminders) are kept as meta. 1.x: the first text part of a `user` message that is neither
//! `synthetic` nor empty. A child session (`parent_id` / `parentID`: a sub-agent's) has no
//! prompts: its user text is the parent agent's task, kept as meta; its messages are sidechain.
//!
//! Tools. A tool part holds the call and its result (2.x `id`, `state.content[]` / `state.error`;
//! 1.x `callID`, `state.output` / `state.error`), so a call and its result share the call id and
//! need no pairing by order. A 2.x tool can be answered without running (`executed: false`, the
//! `question` tool): its answer is still its result.
//!
//! Ids. 2.x: a row's first block is the row id, block `i` is `<row>#<i>`, a tool result
//! `<block>/result`. 1.x: a message record is `<msgid>`, a part `<msgid>/<partid>`, a result
//! `<msgid>/<partid>/result`, the same in the database and in the JSON files, so a session seen
//! in both converges. Each session's own record (a `session_v2` / `session` row, the session
//! file) is a meta message `session` carrying its raw bytes.
//!
//! Traps. Titles `New session - <time>`, `Child session - <time>` and `Untitled` are
//! placeholders, not titles. Rows the agent deletes (a reverted turn, a deleted session) are not
//! noticed: the archive keeps them. `session_message` has no index on `time_updated`, so each
//! read scans the table (the `data` column last, so overflow pages are not read). A row
//! rewritten within the same millisecond as the mark keeps its `time_updated` and is not read
//! again until it changes once more. 1.x JSON: OpenCode touches the session file only at the
//! start of a turn, so a change of a message or part file is a change of the session only to
//! a caller that asks `source_of` (a size/mtime stamp of the session file alone misses it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, SourceKind, blank, parse_ts, str_of, string_of,
    u64_of,
};
use crate::document::{Read, drive_document};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, ToolCall,
    ToolResult, Usage,
};
use crate::sqlite::{Db, StampMarks, json_column, row_json};
use crate::{reader, text};

const AGENT: &str = "opencode";

/// The message id of a session's own record.
const SESSION_RECORD: &str = "session";

pub struct OpenCodeAdapter;

impl ConversationAdapter for OpenCodeAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let data = env
            .var("XDG_DATA_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join(".local").join("share"))
            .join("opencode");
        let mut roots = vec![data.clone()];
        // `$OPENCODE_DB` is resolved against the data folder; its folder is a root of its own
        // when it lies elsewhere.
        if let Some(db) = env.var("OPENCODE_DB").filter(|d| *d != ":memory:") {
            let db = data.join(db);
            if let Some(dir) = db.parent()
                && dir != data
            {
                roots.push(dir.to_owned());
            }
        }
        roots
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Some(parts) = rel_parts(root, path) else {
            return false;
        };
        match parts.as_slice() {
            [name] => name.ends_with(".db"),
            ["storage", "session", _project, name] => {
                name.ends_with(".json") && !root.join("opencode.db").is_file()
            }
            _ => false,
        }
    }

    fn source_kind(&self, path: &Path) -> SourceKind {
        if path.extension().is_some_and(|e| e == "db") {
            SourceKind::Database
        } else {
            SourceKind::Document
        }
    }

    /// The database whose `-wal` changed, or the session file a message or part file belongs to.
    fn source_of(&self, root: &Path, changed: &Path) -> Option<PathBuf> {
        if self.is_transcript(root, changed) {
            return Some(changed.to_owned());
        }
        let parts = rel_parts(root, changed)?;
        let source = match parts.as_slice() {
            [name] => root.join(name.strip_suffix("-wal")?),
            ["storage", "message", sid, name] if name.ends_with(".json") => {
                session_file(root, sid)?
            }
            ["storage", "part", msg, name] if name.ends_with(".json") => {
                let sid = part_session(changed).or_else(|| message_session(root, msg))?;
                session_file(root, &sid)?
            }
            _ => return None,
        };
        self.is_transcript(root, &source).then_some(source)
    }

    /// The databases in the data folder and the JSON sessions under `storage/session/`, without
    /// walking the snapshot and cache folders OpenCode keeps there too.
    /// A 1.x JSON session changes when any of its message or part files does (OpenCode touches
    /// the session file only at the start of a turn): the stamp covers them all.
    fn stamp(&self, root: &Path, path: &Path) -> std::io::Result<(u64, i64)> {
        let kind = self.source_kind(path);
        let (mut size, mut mtime) = kind.stamp(path)?;
        if kind == SourceKind::Database {
            return Ok((size, mtime));
        }
        let Some(sid) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|s| safe_id(s))
        else {
            return Ok((size, mtime));
        };
        let storage = root.join("storage");
        let mut add = |f: &Path| {
            if let Ok(m) = std::fs::metadata(f) {
                size = size.wrapping_add(m.len()).wrapping_add(1);
                mtime = mtime.max(crate::adapter::mtime_ms(&m));
            }
        };
        for msg in files_in(&storage.join("message").join(sid)) {
            add(&msg);
            let Some(mid) = msg
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|s| safe_id(s))
            else {
                continue;
            };
            for part in files_in(&storage.join("part").join(mid)) {
                add(&part);
            }
        }
        Ok((size, mtime))
    }

    fn discover(&self, root: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = files_in(root)
            .into_iter()
            .filter(|p| self.is_transcript(root, p))
            .collect();
        for project in dirs_in(&root.join("storage").join("session")) {
            files.extend(
                files_in(&project)
                    .into_iter()
                    .filter(|p| self.is_transcript(root, p)),
            );
        }
        files.sort_by_key(|p| (p.components().count(), p.clone()));
        files
    }

    fn parse(
        &self,
        root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        match self.source_kind(path) {
            SourceKind::Database => parse_database(path, cursor, max_bytes),
            SourceKind::Document | SourceKind::Lines => parse_storage(root, path, cursor),
        }
    }
}

/// `path` below `root`, as UTF-8 components.
fn rel_parts<'a>(root: &Path, path: &'a Path) -> Option<Vec<&'a str>> {
    path.strip_prefix(root)
        .ok()?
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect()
}

/// An id that can name a file or folder: no separators, no `..`.
fn safe_id(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !s.starts_with('.')
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn dirs_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    v.sort();
    v
}

/// `storage/session/<project>/<sid>.json`, whichever project holds it.
fn session_file(root: &Path, sid: &str) -> Option<PathBuf> {
    if !safe_id(sid) {
        return None;
    }
    dirs_in(&root.join("storage").join("session"))
        .into_iter()
        .map(|p| p.join(format!("{sid}.json")))
        .find(|p| p.is_file())
}

/// The `sessionID` a part file names (every 1.x part carries it).
fn part_session(part: &Path) -> Option<String> {
    let v: Value = serde_json::from_slice(&std::fs::read(part).ok()?).ok()?;
    string_of(&v, "sessionID")
}

/// The session whose `storage/message/<sid>/` folder holds message `msg`.
fn message_session(root: &Path, msg: &str) -> Option<String> {
    if !safe_id(msg) {
        return None;
    }
    dirs_in(&root.join("storage").join("message"))
        .into_iter()
        .find(|d| d.join(format!("{msg}.json")).is_file())
        .and_then(|d| d.file_name()?.to_str().map(str::to_owned))
}

// ---- shared by the shapes ----

/// OpenCode's placeholder titles (a session before its title is generated).
fn is_placeholder_title(t: &str) -> bool {
    let t = t.trim();
    t.is_empty()
        || t == "Untitled"
        || ["New session - ", "New Session - ", "Child session - "]
            .iter()
            .any(|p| t.starts_with(p))
}

/// `tokens: {input, output, reasoning, cache: {read, write}}`.
fn usage_of(tokens: &Value) -> Option<Usage> {
    if !tokens.is_object() {
        return None;
    }
    let cache = tokens.get("cache").unwrap_or(&Value::Null);
    Some(Usage {
        input_tokens: u64_of(tokens, "input"),
        output_tokens: u64_of(tokens, "output"),
        cache_read_tokens: u64_of(cache, "read"),
        cache_creation_tokens: u64_of(cache, "write"),
        reasoning_tokens: u64_of(tokens, "reasoning"),
    })
}

/// A model name: `{id}` (2.x), `{modelID}` (1.x user messages) or the text itself.
fn model_name(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()).filter(|s| !s.is_empty()),
        _ => string_of(v, "id").or_else(|| string_of(v, "modelID")),
    }
}

/// The text of an error: `{message}`, `{data: {message}}`, a string, or the JSON itself.
fn error_text(e: &Value) -> String {
    match e {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        _ => str_of(e, "message")
            .or_else(|| e.get("data").and_then(|d| str_of(d, "message")))
            .map_or_else(|| e.to_string(), str::to_owned),
    }
}

fn join_lines(a: &mut String, b: &str) {
    if b.is_empty() {
        return;
    }
    if !a.is_empty() {
        a.push('\n');
    }
    a.push_str(b);
}

/// What the session row or file says about a session.
#[derive(Default, Clone)]
struct Sess {
    id: String,
    directory: Option<String>,
    parent: Option<String>,
    title: Option<String>,
    model: Option<String>,
    created: Option<i64>,
    updated: Option<i64>,
}

impl Sess {
    /// A `session_v2` or `session` row.
    fn from_row(row: &Value) -> Sess {
        Sess {
            id: string_of(row, "id").unwrap_or_default(),
            directory: string_of(row, "directory"),
            parent: string_of(row, "parent_id"),
            title: string_of(row, "title").filter(|t| !is_placeholder_title(t)),
            model: row
                .get("model")
                .map(json_column)
                .as_ref()
                .and_then(model_name),
            created: row.get("time_created").and_then(parse_ts),
            updated: row.get("time_updated").and_then(parse_ts),
        }
    }

    fn subagent(&self) -> bool {
        self.parent.is_some()
    }

    /// The session's info; `first_prompt` titles it when OpenCode has not.
    fn info(&self, first_prompt: Option<&str>, model: Option<String>) -> SessionInfo {
        let title = match (&self.title, first_prompt) {
            (Some(t), _) => Some((TitleSource::Generated, text::truncate_chars(t, 200))),
            (None, Some(p)) => Some((TitleSource::FirstPrompt, text::prompt_title(p))),
            (None, None) => None,
        };
        SessionInfo {
            session_id: self.id.clone(),
            project_path: self.directory.clone(),
            model: self.model.clone().or(model),
            title,
            parent_session_id: self.parent.clone(),
            is_subagent: self.subagent(),
            started_at: self.created,
            updated_at: self.updated,
            ..Default::default()
        }
    }

    /// The meta message that keeps the session's own record.
    fn record(&self) -> ParsedMessage {
        let mut m = blank(
            AGENT,
            &self.id,
            SESSION_RECORD.into(),
            Role::System,
            MessageKind::Meta,
        );
        m.text = self.title.clone().unwrap_or_default();
        m.timestamp = self.created;
        m.cwd.clone_from(&self.directory);
        if self.subagent() {
            m.flags.sidechain = true;
            m.agent_id = Some(self.id.clone());
        }
        m
    }
}

/// Sessions seen in one parse: their info, the first prompt and last model seen for each.
#[derive(Default)]
struct Seen {
    order: Vec<String>,
    sessions: HashMap<String, Sess>,
    first_prompt: HashMap<String, String>,
    model: HashMap<String, String>,
}

impl Seen {
    fn add(&mut self, s: Sess) {
        if !self.sessions.contains_key(&s.id) {
            self.order.push(s.id.clone());
        }
        self.sessions.insert(s.id.clone(), s);
    }

    fn infos(&self) -> Vec<SessionInfo> {
        self.order
            .iter()
            .filter_map(|id| {
                let s = self.sessions.get(id)?;
                Some(s.info(
                    self.first_prompt.get(id).map(String::as_str),
                    self.model.get(id).cloned(),
                ))
            })
            .collect()
    }
}

// ---- databases ----

/// Where the reading of a database stands: per table, the rows taken ([`StampMarks`]: by row
/// id, and by `time_updated` for rows the agent updates in place).
#[derive(Default, Serialize, Deserialize)]
struct DbState {
    #[serde(default)]
    sessions: StampMarks,
    #[serde(default)]
    messages: StampMarks,
    #[serde(default)]
    parts: StampMarks,
}

/// One row: its columns as JSON, that JSON's bytes (the row's raw record), and its place among
/// all rows read from the database (where an issue with it is reported).
struct Row {
    json: Value,
    raw: Vec<u8>,
    n: u64,
}

/// Reads a database from the marks in `cursor`, about `max_bytes` of rows.
fn parse_database(
    path: &Path,
    cursor: &Cursor,
    max_bytes: usize,
) -> Result<ParseOutput, ParseError> {
    let db = Db::open(path)?;
    let mut st: DbState = serde_json::from_value(cursor.state.clone()).unwrap_or_default();
    let mut read = DbRead {
        db: &db,
        budget: max_bytes.max(1),
        rows: 0,
        bytes: 0,
        line: cursor.offset,
        emit: Emit::default(),
        seen: Seen::default(),
    };
    let at_end = if db.has_table("session_v2") && db.has_table("session_message") {
        read.v2(&mut st)?
    } else if db.has_table("message") && db.has_table("part") {
        read.v1(&mut st)?
    } else {
        read.emit.issue(
            0,
            "no OpenCode conversation tables (`session_v2` and `session_message`, or `message` \
             and `part`)",
            false,
        );
        true
    };
    let DbRead {
        rows,
        bytes,
        emit,
        seen,
        ..
    } = read;
    drop(db);
    let mut out = emit.out;
    out.sessions = seen.infos();
    out.cursor = Cursor {
        offset: cursor.offset + rows,
        line: 0,
        head: None,
        state: serde_json::to_value(&st).unwrap_or_default(),
        unterminated: false,
    };
    out.bytes = bytes;
    out.at_end = at_end;
    Ok(out)
}

/// One bounded read of a database.
struct DbRead<'a> {
    db: &'a Db,
    /// Row bytes this call may still read.
    budget: usize,
    rows: u64,
    bytes: u64,
    /// Rows read by earlier calls.
    line: u64,
    emit: Emit,
    seen: Seen,
}

impl DbRead<'_> {
    /// Rows of `table` new or changed since `marks`, until the budget is spent. `true` when
    /// none is left.
    fn rows(
        &mut self,
        table: &str,
        marks: &mut StampMarks,
    ) -> Result<(bool, Vec<Row>), ParseError> {
        if self.budget == 0 {
            return Ok((false, Vec::new()));
        }
        let db = self.db;
        let taking = marks
            .read(db.conn(), table, "id", "time_updated", self.budget)
            .map_err(|e| db.error(e))?;
        self.budget = self.budget.saturating_sub(taking.bytes as usize);
        self.bytes += taking.bytes;
        let rows = taking
            .rows
            .into_iter()
            .map(|t| {
                let n = self.line + self.rows;
                self.rows += 1;
                Row {
                    json: t.row,
                    raw: t.raw,
                    n,
                }
            })
            .collect();
        Ok((taking.at_end, rows))
    }

    /// The session row of `id` in `table`, when this read has not seen it yet.
    fn load_session(&mut self, table: &str, id: &str) -> Result<(), ParseError> {
        if self.seen.sessions.contains_key(id) {
            return Ok(());
        }
        let db = self.db;
        let sess = if db.has_table(table) {
            let sql = format!("SELECT * FROM {table} WHERE id = ?1");
            let mut stmt = db.conn().prepare(&sql).map_err(|e| db.error(e))?;
            let mut rows = stmt.query([id]).map_err(|e| db.error(e))?;
            rows.next()
                .map_err(|e| db.error(e))?
                .map(|r| Sess::from_row(&row_json(r)))
        } else {
            None
        };
        self.seen.add(sess.unwrap_or_else(|| Sess {
            id: id.to_owned(),
            ..Default::default()
        }));
        Ok(())
    }

    /// The session rows read: each a meta message with its raw row, and the session's info.
    fn session_rows(&mut self, rows: Vec<Row>) {
        for row in rows {
            let s = Sess::from_row(&row.json);
            if s.id.is_empty() {
                self.emit.issue(row.n, "session row without an id", false);
                continue;
            }
            let mut m = s.record();
            m.seq = 0;
            m.raw = Some(row.raw);
            self.emit.push(m);
            self.seen.add(s);
        }
    }

    /// Pushes the messages of one row: sequenced from `base` (kept within what the store's
    /// signed 64-bit column holds), the first carrying the raw row.
    fn push_row(&mut self, msgs: Vec<(u64, ParsedMessage)>, base: u64, raw: Vec<u8>) {
        let mut raw = Some(raw);
        for (sub, mut m) in msgs {
            m.seq = (base.min(u64::MAX >> 11) << 10) | sub.min(1023);
            m.raw = raw.take();
            self.emit.push(m);
        }
    }

    // ---- 2.x ----

    fn v2(&mut self, st: &mut DbState) -> Result<bool, ParseError> {
        let (sessions_done, srows) = self.rows("session_v2", &mut st.sessions)?;
        self.session_rows(srows);
        if !sessions_done {
            return Ok(false);
        }
        let (done, rows) = self.rows("session_message", &mut st.messages)?;
        // The prompts of every session touched: the `seq` of each of its `user` rows.
        let mut user_seqs: HashMap<String, Vec<i64>> = HashMap::new();
        for row in &rows {
            let sid = str_of(&row.json, "session_id").unwrap_or_default();
            if user_seqs.contains_key(sid) {
                continue;
            }
            self.load_session("session_v2", sid)?;
            let db = self.db;
            let mut stmt = db
                .conn()
                .prepare(
                    "SELECT seq FROM session_message WHERE session_id = ?1 AND type = 'user' \
                     ORDER BY seq",
                )
                .map_err(|e| db.error(e))?;
            let seqs = stmt
                .query_map([sid], |r| r.get::<_, i64>(0))
                .and_then(|r| r.collect::<Result<Vec<_>, _>>())
                .map_err(|e| db.error(e))?;
            user_seqs.insert(sid.to_owned(), seqs);
        }
        for row in rows {
            let sid = str_of(&row.json, "session_id")
                .unwrap_or_default()
                .to_owned();
            let sess = self.seen.sessions.get(&sid).cloned().unwrap_or_default();
            let seqs = user_seqs.get(&sid).map(Vec::as_slice).unwrap_or(&[]);
            self.v2_row(&sess, seqs, row);
        }
        Ok(done)
    }

    fn v2_row(&mut self, sess: &Sess, user_seqs: &[i64], row: Row) {
        let line = row.n;
        let r = &row.json;
        let id = string_of(r, "id").unwrap_or_else(|| format!("row-{line}"));
        let ty = str_of(r, "type").unwrap_or("");
        let seq = r.get("seq").and_then(Value::as_i64).unwrap_or(0);
        let data = r.get("data").map(json_column).unwrap_or(Value::Null);
        if !data.is_object() {
            self.emit.issue(
                line,
                format!("message row {id}: `data` is not a JSON object"),
                true,
            );
        }
        let sub = sess.subagent();
        let number = if sub {
            0
        } else {
            user_seqs.partition_point(|&s| s <= seq) as u32
        };
        let model = data.get("model").and_then(model_name);
        if let Some(m) = &model {
            self.seen.model.insert(sess.id.clone(), m.clone());
        }
        let mk = |mid: String, role: Role, kind: MessageKind| {
            let mut m = blank(AGENT, &sess.id, mid, role, kind);
            m.prompt_number = number;
            m.timestamp = r.get("time_created").and_then(parse_ts);
            m.cwd.clone_from(&sess.directory);
            m.model.clone_from(&model);
            m.flags.sidechain = sub;
            if sub {
                m.agent_id = Some(sess.id.clone());
            }
            m
        };
        let block_id = |i: usize| {
            if i == 0 {
                id.clone()
            } else {
                format!("{id}#{i}")
            }
        };
        let mut msgs: Vec<(u64, ParsedMessage)> = Vec::new();
        match ty {
            "user" => {
                let mut t = str_of(&data, "text").unwrap_or_default().to_owned();
                for f in data
                    .get("files")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let name = str_of(f, "name")
                        .or_else(|| str_of(f, "mime"))
                        .unwrap_or("");
                    join_lines(&mut t, &format!("[attachment: {name}]"));
                }
                let kind = if sub {
                    MessageKind::Meta
                } else {
                    MessageKind::UserPrompt
                };
                if !sub && number == 1 {
                    self.seen
                        .first_prompt
                        .entry(sess.id.clone())
                        .or_insert_with(|| t.clone());
                }
                let mut m = mk(id.clone(), Role::User, kind);
                m.text = t;
                msgs.push((0, m));
            }
            "assistant" => {
                let content = data
                    .get("content")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                for (i, p) in content.iter().enumerate() {
                    let sub_index = 2 * i as u64;
                    let bid = block_id(i);
                    match str_of(p, "type").unwrap_or("") {
                        "text" => {
                            let mut m = mk(bid, Role::Assistant, MessageKind::AssistantText);
                            m.text = str_of(p, "text").unwrap_or_default().to_owned();
                            msgs.push((sub_index, m));
                        }
                        "reasoning" => {
                            let mut m = mk(bid, Role::Assistant, MessageKind::Thinking);
                            m.text = str_of(p, "text").unwrap_or_default().to_owned();
                            msgs.push((sub_index, m));
                        }
                        "tool" => {
                            let (call, result) = v2_tool(p, &bid, &mk);
                            msgs.push((sub_index, call));
                            if let Some(res) = result {
                                msgs.push((sub_index + 1, res));
                            }
                        }
                        _ => {
                            let mut m = mk(bid, Role::Assistant, MessageKind::Meta);
                            m.text = text::blocks_text(p);
                            msgs.push((sub_index, m));
                        }
                    }
                }
                let error = data.get("error").map(error_text).unwrap_or_default();
                if msgs.is_empty() {
                    let mut m = mk(id.clone(), Role::Assistant, MessageKind::Meta);
                    m.text = error;
                    msgs.push((0, m));
                } else if !error.is_empty() {
                    let mut m = mk(format!("{id}#error"), Role::Assistant, MessageKind::Meta);
                    m.text = error;
                    msgs.push((1023, m));
                }
                if let Some((_, first)) = msgs.first_mut() {
                    first.usage = data.get("tokens").and_then(usage_of);
                    first.usage_key = first.usage.map(|_| id.clone());
                }
            }
            "shell" => {
                let mut m = mk(id.clone(), Role::User, MessageKind::Meta);
                m.text = format!("$ {}", str_of(&data, "command").unwrap_or_default());
                let output = data.get("output").unwrap_or(&Value::Null);
                let output = str_of(output, "output").or_else(|| output.as_str());
                join_lines(&mut m.text, output.unwrap_or_default());
                msgs.push((0, m));
            }
            "compaction" => {
                // A summary once the compaction completed; its error (or nothing) before.
                let summary = str_of(&data, "summary").unwrap_or_default();
                let m = if str_of(&data, "status") == Some("completed") || !summary.is_empty() {
                    let mut m = mk(id.clone(), Role::Assistant, MessageKind::CompactionSummary);
                    m.text = summary.to_owned();
                    m
                } else {
                    let mut m = mk(id.clone(), Role::System, MessageKind::Meta);
                    m.text = data.get("error").map(error_text).unwrap_or_default();
                    m
                };
                msgs.push((0, m));
            }
            _ => {
                // `synthetic`, `system`, `skill` (injected text), `idle`, `agent-switched`,
                // `model-switched`, `location-switched` and kinds not known yet.
                let mut m = mk(id.clone(), Role::System, MessageKind::Meta);
                m.text = str_of(&data, "text")
                    .or_else(|| str_of(&data, "outcome"))
                    .unwrap_or_default()
                    .to_owned();
                msgs.push((0, m));
            }
        }
        self.push_row(msgs, seq.max(0) as u64, row.raw);
    }

    // ---- 1.x ----

    fn v1(&mut self, st: &mut DbState) -> Result<bool, ParseError> {
        if self.db.has_table("session") {
            let (done, srows) = self.rows("session", &mut st.sessions)?;
            self.session_rows(srows);
            if !done {
                return Ok(false);
            }
        }
        let (messages_done, mrows) = self.rows("message", &mut st.messages)?;
        let (done, prows) = if messages_done {
            self.rows("part", &mut st.parts)?
        } else {
            (false, Vec::new())
        };
        // The message every row belongs to.
        let mut infos: HashMap<String, MsgRow> = HashMap::new();
        for row in &mrows {
            let m = MsgRow::from_row(&row.json);
            infos.insert(m.id.clone(), m);
        }
        for row in &prows {
            let mid = str_of(&row.json, "message_id").unwrap_or_default();
            if !infos.contains_key(mid) {
                let m = self.load_message(mid)?;
                infos.insert(mid.to_owned(), m);
            }
        }
        // The sessions touched, with their prompts.
        let mut prompts: HashMap<String, Vec<PromptAt>> = HashMap::new();
        for m in infos.values() {
            if prompts.contains_key(&m.session_id) {
                continue;
            }
            self.load_session("session", &m.session_id)?;
            let list = self.v1_prompts(&m.session_id)?;
            prompts.insert(m.session_id.clone(), list);
        }
        for row in mrows {
            let id = str_of(&row.json, "id").unwrap_or_default().to_owned();
            let line = row.n;
            let info = &infos[&id];
            if !info.data.is_object() {
                self.emit.issue(
                    line,
                    format!("message row {id}: `data` is not a JSON object"),
                    true,
                );
            }
            let ctx = self.v1_context(info, &prompts);
            let m = message_record(&ctx, &info.data);
            self.push_row(vec![(0, m)], info.created.max(0) as u64, row.raw);
        }
        for row in prows {
            let r = &row.json;
            let mid = str_of(r, "message_id").unwrap_or_default();
            let line = row.n;
            let pid = string_of(r, "id").unwrap_or_else(|| format!("row-{line}"));
            let data = r.get("data").map(json_column).unwrap_or(Value::Null);
            if !data.is_object() {
                self.emit.issue(
                    line,
                    format!("part row {pid}: `data` is not a JSON object"),
                    true,
                );
            }
            let info = &infos[mid];
            let ctx = self.v1_context(info, &prompts);
            let msgs = part_messages(&ctx, &pid, &data);
            if let Some(p) = msgs
                .iter()
                .find(|m| m.kind == MessageKind::UserPrompt && m.prompt_number == 1)
            {
                self.seen
                    .first_prompt
                    .entry(p.session_id.clone())
                    .or_insert_with(|| p.text.clone());
            }
            let created = r.get("time_created").and_then(Value::as_i64).unwrap_or(0);
            self.push_row(
                msgs.into_iter()
                    .enumerate()
                    .map(|(k, m)| (k as u64, m))
                    .collect(),
                created.max(0) as u64,
                row.raw,
            );
        }
        Ok(done)
    }

    /// A message row by id (a part's, read in an earlier call).
    fn load_message(&self, id: &str) -> Result<MsgRow, ParseError> {
        let db = self.db;
        let mut stmt = db
            .conn()
            .prepare("SELECT * FROM message WHERE id = ?1")
            .map_err(|e| db.error(e))?;
        let mut rows = stmt.query([id]).map_err(|e| db.error(e))?;
        Ok(match rows.next().map_err(|e| db.error(e))? {
            Some(r) => MsgRow::from_row(&row_json(r)),
            None => MsgRow {
                id: id.to_owned(),
                ..Default::default()
            },
        })
    }

    /// The prompts of a 1.x session in order: each `user` message with a text part that is
    /// neither synthetic nor empty, and the first such part (`json_valid` first: a row that is
    /// not JSON must not fail the query).
    fn v1_prompts(&self, sid: &str) -> Result<Vec<PromptAt>, ParseError> {
        if self.seen.sessions.get(sid).is_some_and(|s| s.subagent()) {
            return Ok(Vec::new());
        }
        let db = self.db;
        let sql = "
            SELECT m.time_created, m.id, (
                SELECT p.id FROM part p
                WHERE p.message_id = m.id
                  AND json_extract(CASE WHEN json_valid(p.data) THEN p.data END, '$.type') = 'text'
                  AND coalesce(json_extract(CASE WHEN json_valid(p.data) THEN p.data END,
                                            '$.synthetic'), 0) = 0
                  AND trim(coalesce(json_extract(CASE WHEN json_valid(p.data) THEN p.data END,
                                                 '$.text'), '')) <> ''
                ORDER BY p.id LIMIT 1)
            FROM message m
            WHERE m.session_id = ?1
              AND json_extract(CASE WHEN json_valid(m.data) THEN m.data END, '$.role') = 'user'
            ORDER BY m.time_created, m.id";
        let mut stmt = db.conn().prepare(sql).map_err(|e| db.error(e))?;
        let rows = stmt
            .query_map([sid], |r| {
                Ok(PromptAt {
                    at: (r.get::<_, Option<i64>>(0)?.unwrap_or(0), r.get(1)?),
                    part: r.get(2)?,
                })
            })
            .and_then(|r| r.collect::<Result<Vec<_>, _>>())
            .map_err(|e| db.error(e))?;
        Ok(rows.into_iter().filter(|p| p.part.is_some()).collect())
    }

    fn v1_context<'a>(
        &mut self,
        info: &'a MsgRow,
        prompts: &'a HashMap<String, Vec<PromptAt>>,
    ) -> MsgCtx<'a> {
        let sess = self
            .seen
            .sessions
            .get(&info.session_id)
            .cloned()
            .unwrap_or_default();
        let list = prompts
            .get(&info.session_id)
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let at = (info.created, info.id.clone());
        let number = list.partition_point(|p| p.at <= at) as u32;
        let prompt_part = list
            .iter()
            .find(|p| p.at.1 == info.id)
            .and_then(|p| p.part.as_deref());
        let ctx = MsgCtx::new(
            &info.session_id,
            &info.id,
            &info.data,
            &sess,
            number,
            prompt_part,
        );
        if let Some(m) = &ctx.model
            && ctx.role == Role::Assistant
        {
            self.seen.model.insert(sess.id.clone(), m.clone());
        }
        ctx
    }
}

/// Builds the tool call (and its result, once there is one) of a 2.x tool part.
fn v2_tool(
    p: &Value,
    bid: &str,
    mk: &dyn Fn(String, Role, MessageKind) -> ParsedMessage,
) -> (ParsedMessage, Option<ParsedMessage>) {
    let name = str_of(p, "name").unwrap_or("unknown").to_owned();
    let state = p.get("state").unwrap_or(&Value::Null);
    let input = state.get("input").cloned().unwrap_or(Value::Null);
    let call_id = string_of(p, "id");
    let mut call = mk(bid.to_owned(), Role::Assistant, MessageKind::ToolCall);
    call.text = text::tool_call_text(&name, &input);
    call.tool_call = Some(ToolCall {
        name,
        input,
        call_id: call_id.clone(),
    });
    let status = str_of(state, "status").unwrap_or("");
    let mut output = text::blocks_text(state.get("content").unwrap_or(&Value::Null));
    join_lines(
        &mut output,
        &state.get("error").map(error_text).unwrap_or_default(),
    );
    let done = matches!(status, "completed" | "error") || !output.is_empty();
    let result = done.then(|| {
        let mut m = mk(format!("{bid}/result"), Role::Tool, MessageKind::ToolResult);
        m.text = output;
        m.tool_result = Some(ToolResult {
            call_id,
            is_error: status == "error",
        });
        m
    });
    (call, result)
}

/// A prompt of a 1.x session: `(time_created, message id)` and its prompt part.
struct PromptAt {
    at: (i64, String),
    part: Option<String>,
}

/// A 1.x message row.
#[derive(Default)]
struct MsgRow {
    id: String,
    session_id: String,
    created: i64,
    data: Value,
}

impl MsgRow {
    fn from_row(row: &Value) -> MsgRow {
        MsgRow {
            id: string_of(row, "id").unwrap_or_default(),
            session_id: string_of(row, "session_id").unwrap_or_default(),
            created: row.get("time_created").and_then(Value::as_i64).unwrap_or(0),
            data: row.get("data").map(json_column).unwrap_or(Value::Null),
        }
    }
}

// ---- 1.x messages and parts (database rows and JSON files alike) ----

/// What the parts of one 1.x message share.
struct MsgCtx<'a> {
    sid: &'a str,
    msg_id: &'a str,
    role: Role,
    ts: Option<i64>,
    cwd: Option<String>,
    model: Option<String>,
    number: u32,
    sidechain: bool,
    /// An assistant message holding a compaction summary (`summary: true`).
    summary: bool,
    /// The part that is the message's prompt.
    prompt_part: Option<&'a str>,
}

impl<'a> MsgCtx<'a> {
    fn new(
        sid: &'a str,
        msg_id: &'a str,
        data: &Value,
        sess: &Sess,
        number: u32,
        prompt_part: Option<&'a str>,
    ) -> Self {
        let role = match str_of(data, "role") {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => Role::System,
        };
        let time = data.get("time").unwrap_or(&Value::Null);
        MsgCtx {
            sid,
            msg_id,
            role,
            ts: time.get("created").and_then(parse_ts),
            cwd: data
                .get("path")
                .and_then(|p| string_of(p, "cwd"))
                .or_else(|| sess.directory.clone()),
            model: string_of(data, "modelID").or_else(|| data.get("model").and_then(model_name)),
            number,
            sidechain: sess.subagent(),
            summary: role == Role::Assistant
                && data.get("summary").and_then(Value::as_bool) == Some(true),
            prompt_part: prompt_part.filter(|_| !sess.subagent()),
        }
    }

    fn mk(&self, id: String, role: Role, kind: MessageKind) -> ParsedMessage {
        let mut m = blank(AGENT, self.sid, id, role, kind);
        m.prompt_number = self.number;
        m.timestamp = self.ts;
        m.cwd.clone_from(&self.cwd);
        m.model.clone_from(&self.model);
        m.flags.sidechain = self.sidechain;
        if self.sidechain {
            m.agent_id = Some(self.sid.to_owned());
        }
        m
    }
}

/// The meta message that keeps a 1.x message record (role, model, tokens, cost).
fn message_record(ctx: &MsgCtx<'_>, data: &Value) -> ParsedMessage {
    let mut m = ctx.mk(ctx.msg_id.to_owned(), ctx.role, MessageKind::Meta);
    m.text = data.get("error").map(error_text).unwrap_or_default();
    m.usage = data.get("tokens").and_then(usage_of);
    m.usage_key = m.usage.map(|_| ctx.msg_id.to_owned());
    m
}

/// Whether a 1.x part is typed text: a text part, not synthetic, not empty.
fn is_typed_text(part: &Value) -> bool {
    str_of(part, "type") == Some("text")
        && part.get("synthetic").and_then(Value::as_bool) != Some(true)
        && str_of(part, "text").is_some_and(|t| !t.trim().is_empty())
}

/// The messages of one 1.x part.
fn part_messages(ctx: &MsgCtx<'_>, part_id: &str, p: &Value) -> Vec<ParsedMessage> {
    let id = format!("{}/{part_id}", ctx.msg_id);
    let role = ctx.role;
    let text_of = |k: &str| str_of(p, k).unwrap_or_default().to_owned();
    let mut out = Vec::new();
    match str_of(p, "type").unwrap_or("") {
        "text" => {
            let synthetic = p.get("synthetic").and_then(Value::as_bool) == Some(true);
            let kind = match role {
                Role::User if ctx.prompt_part == Some(part_id) => MessageKind::UserPrompt,
                Role::Assistant if synthetic => MessageKind::Meta,
                Role::Assistant if ctx.summary => MessageKind::CompactionSummary,
                Role::Assistant => MessageKind::AssistantText,
                _ => MessageKind::Meta,
            };
            let mut m = ctx.mk(id, role, kind);
            m.text = text_of("text");
            out.push(m);
        }
        "reasoning" => {
            let mut m = ctx.mk(id, Role::Assistant, MessageKind::Thinking);
            m.text = text_of("text");
            out.push(m);
        }
        "tool" => {
            let name = str_of(p, "tool").unwrap_or("unknown").to_owned();
            let state = p.get("state").unwrap_or(&Value::Null);
            let input = state
                .get("input")
                .or_else(|| state.get("raw"))
                .cloned()
                .unwrap_or(Value::Null);
            let call_id = string_of(p, "callID");
            let mut call = ctx.mk(id.clone(), Role::Assistant, MessageKind::ToolCall);
            call.text = text::tool_call_text(&name, &input);
            call.tool_call = Some(ToolCall {
                name,
                input,
                call_id: call_id.clone(),
            });
            out.push(call);
            let status = str_of(state, "status").unwrap_or("");
            if matches!(status, "completed" | "error") {
                let mut res = ctx.mk(format!("{id}/result"), Role::Tool, MessageKind::ToolResult);
                res.text = match state.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(o) => o.to_string(),
                };
                join_lines(
                    &mut res.text,
                    &state.get("error").map(error_text).unwrap_or_default(),
                );
                res.tool_result = Some(ToolResult {
                    call_id,
                    is_error: status == "error",
                });
                out.push(res);
            }
        }
        ty => {
            // `step-start`, `step-finish`, `snapshot`, `patch`, `file`, `agent`, `subtask`,
            // `retry`, `compaction` and kinds not known yet.
            let mut m = ctx.mk(id, role, MessageKind::Meta);
            m.text = match ty {
                "file" => format!(
                    "[attachment: {}]",
                    str_of(p, "filename")
                        .or_else(|| str_of(p, "mime"))
                        .unwrap_or_default()
                ),
                "subtask" => {
                    let mut t = text_of("description");
                    join_lines(&mut t, str_of(p, "prompt").unwrap_or_default());
                    t
                }
                "agent" => text_of("name"),
                "patch" => p
                    .get("files")
                    .and_then(Value::as_array)
                    .map(|f| {
                        f.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default(),
                "retry" => p.get("error").map(error_text).unwrap_or_default(),
                _ => text_of("text"),
            };
            out.push(m);
        }
    }
    out
}

// ---- 1.x JSON storage ----

/// A file of the storage tree: its name and bytes.
type File = (String, Vec<u8>);

/// Reads a session file with its message and part files. The whole set is one document: it is
/// read again when any of its files changed (their joint digest is the cursor's head).
fn parse_storage(root: &Path, path: &Path, cursor: &Cursor) -> Result<ParseOutput, ParseError> {
    let session = reader::read_all(path).map_err(|source| ParseError::Io {
        path: path.to_owned(),
        source,
    })?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned();
    let sid = serde_json::from_slice::<Value>(&session)
        .ok()
        .and_then(|v| string_of(&v, "id"))
        .filter(|s| safe_id(s))
        .unwrap_or(stem);
    let storage = root.join("storage");
    let messages = read_files(&storage.join("message").join(&sid));
    let parts: Vec<Vec<File>> = messages
        .iter()
        .map(|(name, _)| {
            let mid = name.strip_suffix(".json").unwrap_or(name);
            if safe_id(mid) {
                read_files(&storage.join("part").join(mid))
            } else {
                Vec::new()
            }
        })
        .collect();

    let mut h = Sha256::new();
    let mut feed = |name: &str, bytes: &[u8]| {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    feed("", &session);
    for ((name, bytes), parts) in messages.iter().zip(&parts) {
        feed(name, bytes);
        for (pname, pbytes) in parts {
            feed(pname, pbytes);
        }
    }
    let digest = format!("opencode-storage:{}", reader::hex(&h.finalize()[..16]));
    if cursor.head.as_deref() == Some(digest.as_str()) {
        return Ok(ParseOutput {
            cursor: cursor.clone(),
            at_end: true,
            ..Default::default()
        });
    }
    // The driver decides "unchanged" on the session file alone: it must not here.
    let mut fresh = cursor.clone();
    fresh.head = None;
    let project = |id: &str| -> Option<String> {
        if !safe_id(id) {
            return None;
        }
        let b = std::fs::read(storage.join("project").join(format!("{id}.json"))).ok()?;
        string_of(&serde_json::from_slice(&b).ok()?, "worktree")
    };
    let mut info = None;
    let (mut out, ()) = drive_document(path, &fresh, |_: &mut (), emit, bytes| {
        read_storage(bytes, &sid, &messages, &parts, &project, emit, &mut info)
    })?;
    if out.cursor.head.is_some() {
        out.cursor.head = Some(digest);
    }
    out.sessions.extend(info);
    Ok(out)
}

/// The `.json` files of a folder, by name.
fn read_files(dir: &Path) -> Vec<File> {
    files_in(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            Some((name, std::fs::read(&p).ok()?))
        })
        .collect()
}

/// One decoded storage file.
struct Element<'a> {
    id: String,
    value: Value,
    raw: &'a [u8],
}

/// Decodes a storage file, reporting one that is not a JSON object (a file half-written is read
/// again with the next change).
fn decode_file<'a>(file: &'a File, what: &str, emit: &mut Emit) -> Option<Element<'a>> {
    let (name, bytes) = file;
    match reader::decode_json(bytes) {
        Ok(d) if d.value.is_object() => {
            let stem = name.strip_suffix(".json").unwrap_or(name);
            Some(Element {
                id: string_of(&d.value, "id").unwrap_or_else(|| stem.to_owned()),
                value: d.value,
                raw: bytes,
            })
        }
        Ok(_) => {
            emit.issue(0, format!("{what} {name} is not a JSON object"), false);
            None
        }
        Err(e) => {
            emit.issue(0, format!("{what} {name}: {e}"), false);
            None
        }
    }
}

fn read_storage(
    bytes: &[u8],
    sid: &str,
    message_files: &[File],
    part_files: &[Vec<File>],
    project: &dyn Fn(&str) -> Option<String>,
    emit: &mut Emit,
    info: &mut Option<SessionInfo>,
) -> Read {
    let doc = match reader::decode_json(bytes) {
        Ok(d) if d.value.is_object() => d.value,
        Ok(_) => return Read::Bad("session file is not a JSON object".into()),
        Err(_) => return Read::Incomplete,
    };
    let time = doc.get("time").unwrap_or(&Value::Null);
    let sess = Sess {
        id: sid.to_owned(),
        directory: string_of(&doc, "directory")
            .or_else(|| str_of(&doc, "projectID").and_then(project)),
        parent: string_of(&doc, "parentID"),
        title: string_of(&doc, "title").filter(|t| !is_placeholder_title(t)),
        model: None,
        created: time.get("created").and_then(parse_ts),
        updated: time.get("updated").and_then(parse_ts),
    };
    let mut m = sess.record();
    m.raw = Some(bytes.to_vec());
    emit.push(m);

    // Parts belong to the message whose file name names their folder.
    let mut messages: Vec<(Element<'_>, Vec<Element<'_>>)> = Vec::new();
    for (file, parts) in message_files.iter().zip(part_files) {
        let Some(msg) = decode_file(file, "message", emit) else {
            continue;
        };
        let mut parts: Vec<Element<'_>> = parts
            .iter()
            .filter_map(|p| decode_file(p, "part", emit))
            .collect();
        parts.sort_by(|a, b| a.id.cmp(&b.id));
        messages.push((msg, parts));
    }
    let created = |e: &Element<'_>| {
        e.value
            .get("time")
            .and_then(|t| t.get("created"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    messages.sort_by(|(a, _), (b, _)| (created(a), &a.id).cmp(&(created(b), &b.id)));

    let mut number = 0u32;
    let mut first_prompt = None;
    let mut model = None;
    for (msg, parts) in &messages {
        let prompt_part = (str_of(&msg.value, "role") == Some("user") && !sess.subagent())
            .then(|| parts.iter().find(|p| is_typed_text(&p.value)))
            .flatten();
        if let Some(p) = prompt_part {
            number += 1;
            if number == 1 {
                first_prompt = str_of(&p.value, "text").map(str::to_owned);
            }
        }
        let ctx = MsgCtx::new(
            sid,
            &msg.id,
            &msg.value,
            &sess,
            number,
            prompt_part.map(|p| p.id.as_str()),
        );
        if ctx.role == Role::Assistant && ctx.model.is_some() {
            model.clone_from(&ctx.model);
        }
        let mut m = message_record(&ctx, &msg.value);
        m.raw = Some(msg.raw.to_vec());
        emit.push(m);
        for part in parts {
            let mut msgs = part_messages(&ctx, &part.id, &part.value);
            if let Some(first) = msgs.first_mut() {
                first.raw = Some(part.raw.to_vec());
            }
            for m in msgs {
                emit.push(m);
            }
        }
    }
    *info = Some(sess.info(first_prompt.as_deref(), model));
    Read::Whole
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_titles_are_not_titles() {
        assert!(is_placeholder_title(
            "New session - 2025-01-01T00:00:00.000Z"
        ));
        assert!(is_placeholder_title(
            "Child session - 2025-01-01T00:00:00.000Z"
        ));
        assert!(is_placeholder_title("Untitled"));
        assert!(is_placeholder_title("  "));
        assert!(!is_placeholder_title("Fix the login bug"));
    }

    #[test]
    fn ids_that_could_leave_the_storage_folder_are_refused() {
        assert!(safe_id("ses_0cb9783b5001n0dNVAt61r1gNM"));
        assert!(safe_id("msg-user-001"));
        assert!(!safe_id("../auth"));
        assert!(!safe_id("a/b"));
        assert!(!safe_id(".."));
        assert!(!safe_id(""));
    }

    #[test]
    fn usage_reads_the_nested_cache_counts() {
        let t = serde_json::json!({"input": 10, "output": 20, "reasoning": 3,
                                   "cache": {"read": 5, "write": 7}});
        assert_eq!(
            usage_of(&t),
            Some(Usage {
                input_tokens: 10,
                output_tokens: 20,
                cache_read_tokens: 5,
                cache_creation_tokens: 7,
                reasoning_tokens: 3,
            })
        );
        assert_eq!(usage_of(&Value::Null), None);
    }

    #[test]
    fn models_and_errors_in_their_several_shapes() {
        let s = serde_json::json!({"id": "big-pickle", "providerID": "opencode"});
        assert_eq!(model_name(&s).as_deref(), Some("big-pickle"));
        let u = serde_json::json!({"providerID": "openai", "modelID": "gpt-5"});
        assert_eq!(model_name(&u).as_deref(), Some("gpt-5"));
        let e = serde_json::json!({"name": "APIError", "data": {"message": "rate limited"}});
        assert_eq!(error_text(&e), "rate limited");
        assert_eq!(error_text(&serde_json::json!("boom")), "boom");
    }
}
