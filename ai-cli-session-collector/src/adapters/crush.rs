//! Crush (charmbracelet/crush). FORMATS-MORE §11.
//!
//! **Where.** Crush keeps its data in the project, on every platform: `<project>/.crush/crush.db`
//! (SQLite, WAL mode; the nearest `.crush` up to the project boundary, or
//! `options.data_directory` in `crush.json`, which this adapter does not follow). So Crush has
//! no default roots: its roots are the project folders Memex is told about, and only
//! `<root>/.crush/crush.db` is read there ([`ConversationAdapter::project_files`]). The project
//! of every session is the folder that holds `.crush/` (the database has no cwd column).
//!
//! **What is read.** Only `sessions` and `messages` ([`SourceKind::Database`]; not `files`, the
//! agent's file snapshots, nor `read_files`). Every `messages` row yields one message per part
//! of its `parts` JSON list (`{type, data}`), ids from the row's own `id`; every `sessions` row
//! is kept as a meta message `session` (title, token totals as usage keyed per session).
//!
//! **Prompts.** A `user` row with a `text` part is a prompt, except in a sub-agent session (one
//! with a `parent_session_id`: Crush's agent tool names it after its tool call, the title
//! generator `title-<parent>`), whose "user" text is written by the parent agent; those
//! messages are sidechain with the session's id as `agent_id`. A `shell_command` part (the user
//! ran `!command`) is kept as meta, never a prompt. Rows flagged `is_summary_message` are
//! compaction summaries.
//!
//! **Tools.** `tool_call.id` pairs with `tool_result.tool_call_id` (results sit in `tool` rows);
//! `tool_call.input` is a JSON string, parsed when it is JSON.
//!
//! **Traps.** Assistant rows are inserted when an answer starts and updated in place while it
//! streams (`parts`, `updated_at`, `finished_at`); `updated_at` has no index and only a
//! second's resolution, so rows are read by row id instead: new rows above the highest row id
//! taken, and the last rows (see [`super::goose::WINDOW`]) again on every parse, taken again
//! when they changed, so a streamed answer ends as one message with its final text. The column
//! comments say milliseconds but Crush writes `strftime('%s','now')` seconds; both are
//! accepted. `finish` parts become messages only when they carry an error message. Deleted rows
//! and sessions are not reported: the archive keeps what it read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::goose::{
    Prompts, RowMarks, Taken, at_or_after, epoch_ms, offer_first_prompt, row_digest, usage_of,
    value_text,
};
use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, SourceKind, blank, str_of, string_of, u64_of,
};
use crate::model::{
    Cursor, MessageKind, ParseIssue, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
    ToolCall, ToolResult,
};
use crate::sqlite::{Db, json_column, row_json};
use crate::text;

const AGENT: &str = "crush";

/// The database, relative to a project folder.
const DB: &str = ".crush/crush.db";

pub struct CrushAdapter;

impl ConversationAdapter for CrushAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    /// None: Crush keeps its database in each project, so its roots are project folders.
    fn default_roots(&self, _env: &Env) -> Vec<PathBuf> {
        Vec::new()
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        path.strip_prefix(root)
            .is_ok_and(|rel| rel == Path::new(".crush").join("crush.db"))
    }

    fn source_kind(&self, _path: &Path) -> SourceKind {
        SourceKind::Database
    }

    fn project_files(&self) -> &'static [&'static str] {
        &[DB]
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        // The folder that holds `.crush/`.
        let project = path
            .parent()
            .and_then(Path::parent)
            .map(|p| p.to_string_lossy().into_owned());
        let db = Db::open(path)?;
        let mut st: State = serde_json::from_value(cursor.state.clone()).unwrap_or_default();
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
            out.issues.push(ParseIssue {
                line: 0,
                byte_offset: 0,
                reason: format!("no `{}` table: not a Crush database", missing.join("`, `")),
                kept: false,
            });
            return Ok(out);
        }
        let mut emit = Emit::default();
        let read = read(db.conn(), &mut st, &mut emit, project.as_deref(), max_bytes)
            .map_err(|e| db.error(e))?;
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
}

/// What this adapter remembers of a session between reads.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Sess {
    /// `updated_at` and digest of the row when last read.
    #[serde(default)]
    u: String,
    #[serde(default)]
    h: u64,
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    prompts: Prompts,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    #[serde(default)]
    sessions: BTreeMap<String, Sess>,
    /// The latest session `updated_at` at the last read: sessions at or after it are read again.
    #[serde(default)]
    mark: String,
    #[serde(default)]
    messages: RowMarks,
}

struct Read {
    infos: BTreeMap<String, SessionInfo>,
    rows: u64,
    bytes: u64,
    at_end: bool,
}

fn base_info(id: &str, sess: &Sess, project: Option<&str>) -> SessionInfo {
    SessionInfo {
        session_id: id.to_owned(),
        project_path: project.map(str::to_owned),
        parent_session_id: sess.parent.clone(),
        is_subagent: sess.parent.is_some(),
        ..Default::default()
    }
}

fn read(
    conn: &Connection,
    st: &mut State,
    emit: &mut Emit,
    project: Option<&str>,
    max_bytes: usize,
) -> rusqlite::Result<Read> {
    // One snapshot for the whole read.
    let tx = conn.unchecked_transaction()?;
    let mut infos: BTreeMap<String, SessionInfo> = BTreeMap::new();
    let mut rows = 0u64;
    let mut bytes = 0u64;

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
            infos.insert(id.clone(), session_row(id, &row, raw, sess, project, emit));
        }
    }

    let taking = st.messages.read(&tx, "messages", max_bytes)?;
    if taking.reset {
        for s in st.sessions.values_mut() {
            s.prompts = Prompts::default();
        }
    }
    rows += taking.rows.len() as u64;
    bytes += taking.bytes;
    for t in &taking.rows {
        message_row(t, st, emit, project, &mut infos);
    }
    drop(tx);
    Ok(Read {
        infos,
        rows,
        bytes,
        at_end: taking.at_end,
    })
}

fn time_of(row: &Value, key: &str) -> Option<i64> {
    row.get(key).and_then(Value::as_i64).map(epoch_ms)
}

/// A `sessions` row: remembered, kept as the session's meta message, and its info.
fn session_row(
    id: &str,
    row: &Value,
    raw: Vec<u8>,
    sess: &mut Sess,
    project: Option<&str>,
    emit: &mut Emit,
) -> SessionInfo {
    sess.parent = string_of(row, "parent_session_id");
    let sub = sess.parent.is_some();
    let title = string_of(row, "title")
        .map(|t| t.trim().to_owned())
        // Crush's placeholder until the title is generated.
        .filter(|t| !t.is_empty() && t != "New Session");
    let usage = usage_of(
        u64_of(row, "prompt_tokens"),
        u64_of(row, "completion_tokens"),
        0,
        0,
    );
    let started = time_of(row, "created_at");
    let mut m = blank(AGENT, id, "session".into(), Role::System, MessageKind::Meta);
    m.text = title.clone().unwrap_or_default();
    m.timestamp = started;
    m.cwd = project.map(str::to_owned);
    m.usage = usage;
    m.usage_key = usage.map(|_| format!("session:{id}"));
    m.flags.sidechain = sub;
    m.agent_id = sub.then(|| id.to_owned());
    m.raw = Some(raw);
    emit.push(m);
    SessionInfo {
        title: title.map(|t| (TitleSource::Generated, text::truncate_chars(&t, 200))),
        started_at: started,
        updated_at: time_of(row, "updated_at"),
        ..base_info(id, sess, project)
    }
}

/// What the messages of one row share.
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

fn data(p: &Value) -> &Value {
    p.get("data").unwrap_or(&Value::Null)
}

fn text_part(p: &Value) -> Option<&str> {
    (str_of(p, "type") == Some("text")).then(|| str_of(data(p), "text").unwrap_or_default())
}

/// A `messages` row: one message per part.
fn message_row(
    t: &Taken,
    st: &mut State,
    emit: &mut Emit,
    project: Option<&str>,
    infos: &mut BTreeMap<String, SessionInfo>,
) {
    let row = &t.row;
    let line = t.rowid.max(0) as u64;
    let sid = string_of(row, "session_id").unwrap_or_default();
    let sess = st.sessions.entry(sid.clone()).or_default();
    let info = infos
        .entry(sid.clone())
        .or_insert_with(|| base_info(&sid, sess, project));
    let sub = sess.parent.is_some();
    let mid = string_of(row, "id").unwrap_or_else(|| format!("row:{}", t.rowid));
    let role = str_of(row, "role").unwrap_or("");
    let parts = match row.get("parts").map(json_column) {
        Some(Value::Array(a)) => a,
        other => {
            emit.issue(line, "`parts` is not a JSON list", true);
            other
                .filter(|v| !v.is_null())
                .map(|v| {
                    let s = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                    vec![serde_json::json!({"type": "unreadable", "data": {"text": s}})]
                })
                .unwrap_or_default()
        }
    };
    let summary = row
        .get("is_summary_message")
        .and_then(Value::as_i64)
        .is_some_and(|n| n != 0);
    let prompt = role == "user"
        && !sub
        && !summary
        && parts
            .iter()
            .filter_map(text_part)
            .any(|s| !s.trim().is_empty());
    let number = if prompt {
        sess.prompts.prompt(t.rowid, &mid)
    } else {
        sess.prompts.after(t.rowid)
    };
    let model = string_of(row, "model");
    if role == "assistant" && model.is_some() {
        info.model.clone_from(&model);
    }
    let ctx = Ctx {
        sid: &sid,
        base: &mid,
        number,
        timestamp: time_of(row, "created_at"),
        cwd: project,
        model: model.as_deref(),
        sub,
    };
    let mut msgs = blocks(&ctx, role, &parts, prompt, summary);
    if prompt && number == 1 {
        offer_first_prompt(info, &msgs);
    }
    for (i, m) in msgs.iter_mut().enumerate() {
        m.seq = (line << 10) | (i as u64).min(1023);
    }
    if let Some(first) = msgs.first_mut() {
        first.raw = Some(t.raw.clone());
    }
    for m in msgs {
        emit.push(m);
    }
}

fn blocks(
    c: &Ctx<'_>,
    role: &str,
    parts: &[Value],
    prompt: bool,
    summary: bool,
) -> Vec<ParsedMessage> {
    let row_role = match role {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        _ => Role::System,
    };
    // (part index, message), put in part order at the end.
    let mut out: Vec<(usize, ParsedMessage)> = Vec::new();
    let is_attachment = |p: &Value| matches!(str_of(p, "type"), Some("image_url" | "binary"));
    if prompt {
        // What the human sent: its text and attachments, as one prompt.
        let mut at = None;
        let mut texts = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            if let Some(t) = text_part(p) {
                at.get_or_insert(i);
                texts.push(t);
            } else if is_attachment(p) {
                texts.push("[attachment]");
            }
        }
        let at = at.unwrap_or(0);
        let mut m = c.message(at, Role::User, MessageKind::UserPrompt);
        m.text = texts
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        out.push((at, m));
    }
    for (i, p) in parts.iter().enumerate() {
        let ty = str_of(p, "type").unwrap_or("");
        if prompt && (ty == "text" || is_attachment(p)) {
            continue;
        }
        let d = data(p);
        let m = match ty {
            "text" if summary => {
                let mut m = c.message(i, row_role, MessageKind::CompactionSummary);
                m.text = str_of(d, "text").unwrap_or_default().to_owned();
                m
            }
            "text" if row_role == Role::Assistant => {
                let mut m = c.message(i, Role::Assistant, MessageKind::AssistantText);
                m.text = str_of(d, "text").unwrap_or_default().to_owned();
                m
            }
            "reasoning" => {
                let mut m = c.message(i, Role::Assistant, MessageKind::Thinking);
                m.text = str_of(d, "thinking").unwrap_or_default().to_owned();
                m
            }
            "tool_call" => {
                let name = str_of(d, "name").unwrap_or("unknown").to_owned();
                let input = match d.get("input") {
                    Some(Value::String(s)) => {
                        serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                    }
                    Some(v) => v.clone(),
                    None => Value::Null,
                };
                let mut m = c.message(i, Role::Assistant, MessageKind::ToolCall);
                m.text = text::tool_call_text(&name, &input);
                m.tool_call = Some(ToolCall {
                    name,
                    input,
                    call_id: string_of(d, "id"),
                });
                m
            }
            "tool_result" => {
                let mut m = c.message(i, Role::Tool, MessageKind::ToolResult);
                m.text = str_of(d, "content").unwrap_or_default().to_owned();
                if m.text.is_empty() && str_of(d, "data").is_some_and(|x| !x.is_empty()) {
                    m.text = format!("[{}]", str_of(d, "mime_type").unwrap_or("data"));
                }
                m.tool_result = Some(ToolResult {
                    call_id: string_of(d, "tool_call_id"),
                    is_error: d.get("is_error").and_then(Value::as_bool) == Some(true),
                });
                m
            }
            "shell_command" => {
                // The user ran `!command` in Crush: kept, never a prompt.
                let mut m = c.message(i, Role::User, MessageKind::Meta);
                let cmd = str_of(d, "command").unwrap_or_default();
                let output = str_of(d, "output").unwrap_or_default();
                m.text = format!("$ {cmd}\n{output}").trim_end().to_owned();
                m
            }
            "finish" => {
                // The end of an answer: a message only when it says what went wrong.
                match string_of(d, "message") {
                    Some(msg) => {
                        let mut m = c.message(i, row_role, MessageKind::Meta);
                        m.text = msg;
                        m
                    }
                    None => continue,
                }
            }
            "image_url" | "binary" => {
                let mut m = c.message(i, row_role, MessageKind::Meta);
                m.text = "[attachment]".into();
                m
            }
            _ => {
                let mut m = c.message(i, row_role, MessageKind::Meta);
                m.text = str_of(d, "text")
                    .or_else(|| str_of(d, "content"))
                    .unwrap_or_default()
                    .to_owned();
                m
            }
        };
        out.push((i, m));
    }
    if out.is_empty() {
        // Nothing to show (a `finish` alone, an empty answer just inserted): the row is kept.
        let mut m = c.message(0, row_role, MessageKind::Meta);
        m.text = parts
            .iter()
            .filter_map(|p| str_of(data(p), "reason"))
            .collect::<Vec<_>>()
            .join("\n");
        out.push((0, m));
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_project_database_is_a_transcript() {
        let root = Path::new("/home/dev/demo-app");
        let a = CrushAdapter;
        assert!(a.is_transcript(root, &root.join(".crush/crush.db")));
        assert!(a.is_transcript(root, &root.join(".crush").join("crush.db")));
        assert!(!a.is_transcript(root, &root.join("sub/.crush/crush.db")));
        assert!(!a.is_transcript(root, &root.join(".crush/crush.db-wal")));
        assert!(!a.is_transcript(root, Path::new("/elsewhere/.crush/crush.db")));
        assert_eq!(a.project_files(), &[".crush/crush.db"]);
        assert!(a.default_roots(&Env::default()).is_empty());
        assert_eq!(
            a.source_of(root, &root.join(".crush/crush.db-wal")),
            Some(root.join(".crush/crush.db"))
        );
    }
}
