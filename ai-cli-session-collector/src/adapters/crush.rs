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
//! taken, and the last rows (see `sqlite::WINDOW`) again on every parse, taken again
//! when they changed, so a streamed answer ends as one message with its final text. The column
//! comments say milliseconds but Crush writes `strftime('%s','now')` seconds; both are
//! accepted. `finish` parts become messages only when they carry an error message. Deleted rows
//! and sessions are not reported: the archive keeps what it read.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, RecordCtx, SourceKind, blank, check_project_file,
    offer_first_prompt, str_of, string_of, u64_of, usage_of,
};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
};
use crate::sqlite::{DbRead, SessionMarks, Tables, Taken, epoch_ms, parse_database};
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
        root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        check_project_file(root, path)?;
        // The folder that holds `.crush/`.
        let project = path
            .parent()
            .and_then(Path::parent)
            .map(|p| p.to_string_lossy().into_owned());
        parse_database(
            path,
            cursor,
            &["sessions", "messages"],
            "a Crush database",
            |conn, st: &mut State, emit| read(conn, st, emit, project.as_deref(), max_bytes),
        )
    }
}

/// What this adapter remembers of a session between reads.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Sess {
    #[serde(flatten)]
    marks: SessionMarks,
    #[serde(default)]
    parent: Option<String>,
}

impl AsMut<SessionMarks> for Sess {
    fn as_mut(&mut self) -> &mut SessionMarks {
        &mut self.marks
    }
}

/// What this adapter remembers between reads: the tables' marks, nothing of its own.
type State = Tables<Sess>;

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
) -> rusqlite::Result<DbRead> {
    let mut read = st.read_sessions(conn, |id, row, raw, sess| {
        session_row(id, row, raw, sess, project, emit)
    })?;
    let taking = st.read_messages(conn, max_bytes, &mut read)?;
    for t in &taking.rows {
        message_row(t, st, emit, project, &mut read);
    }
    Ok(read)
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
    // Crush adds each call's price to the session's `cost` (its token columns hold only the
    // last call's counts).
    m.cost_usd = usage.and(crate::adapter::cost_of(row, "cost"));
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
    read: &mut DbRead,
) {
    let row = &t.row;
    let sid = string_of(row, "session_id").unwrap_or_default();
    let sess = st.sessions.entry(sid.clone()).or_default();
    let info = read.info(&sid, || base_info(&sid, sess, project));
    let sub = sess.parent.is_some();
    let mid = string_of(row, "id").unwrap_or_else(|| format!("row:{}", t.rowid));
    let role = str_of(row, "role").unwrap_or("");
    let parts = t.json_list(
        "parts",
        emit,
        |s| serde_json::json!({"type": "unreadable", "data": {"text": s}}),
    );
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
    let number = sess.marks.prompts.number(t.rowid, &mid, prompt);
    let model = string_of(row, "model");
    if role == "assistant" && model.is_some() {
        info.model.clone_from(&model);
    }
    let ctx = RecordCtx {
        agent: AGENT,
        sid: &sid,
        base: &mid,
        number,
        timestamp: time_of(row, "created_at"),
        cwd: project,
        model: model.as_deref(),
        sub,
    };
    let msgs = blocks(&ctx, role, &parts, prompt, summary);
    if prompt && number == 1 {
        offer_first_prompt(info, &msgs);
    }
    t.emit(emit, msgs);
}

fn blocks(
    c: &RecordCtx<'_>,
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
        out.push(c.prompt(parts, |p| match text_part(p) {
            Some(t) => Some((true, t)),
            None => is_attachment(p).then_some((false, "[attachment]")),
        }));
    }
    for (i, p) in parts.iter().enumerate() {
        let ty = str_of(p, "type").unwrap_or("");
        if prompt && (ty == "text" || is_attachment(p)) {
            continue;
        }
        let d = data(p);
        let m = match ty {
            "text" if summary => c.text(
                i,
                row_role,
                MessageKind::CompactionSummary,
                str_of(d, "text").unwrap_or_default(),
            ),
            "text" if row_role == Role::Assistant => c.text(
                i,
                Role::Assistant,
                MessageKind::AssistantText,
                str_of(d, "text").unwrap_or_default(),
            ),
            "reasoning" => c.text(
                i,
                Role::Assistant,
                MessageKind::Thinking,
                str_of(d, "thinking").unwrap_or_default(),
            ),
            "tool_call" => {
                let name = str_of(d, "name").unwrap_or("unknown").to_owned();
                let input = match d.get("input") {
                    Some(Value::String(s)) => {
                        serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                    }
                    Some(v) => v.clone(),
                    None => Value::Null,
                };
                c.tool_call(i, name, input, string_of(d, "id"))
            }
            "tool_result" => {
                let mut text = str_of(d, "content").unwrap_or_default().to_owned();
                if text.is_empty() && str_of(d, "data").is_some_and(|x| !x.is_empty()) {
                    text = format!("[{}]", str_of(d, "mime_type").unwrap_or("data"));
                }
                c.tool_result(
                    i,
                    text,
                    string_of(d, "tool_call_id"),
                    d.get("is_error").and_then(Value::as_bool) == Some(true),
                )
            }
            "shell_command" => {
                // The user ran `!command` in Crush: kept, never a prompt.
                let cmd = str_of(d, "command").unwrap_or_default();
                let output = str_of(d, "output").unwrap_or_default();
                let text = format!("$ {cmd}\n{output}");
                c.text(i, Role::User, MessageKind::Meta, text.trim_end())
            }
            "finish" => {
                // The end of an answer: a message only when it says what went wrong.
                match string_of(d, "message") {
                    Some(msg) => c.text(i, row_role, MessageKind::Meta, msg),
                    None => continue,
                }
            }
            "image_url" | "binary" => c.text(i, row_role, MessageKind::Meta, "[attachment]"),
            _ => c.text(
                i,
                row_role,
                MessageKind::Meta,
                str_of(d, "text")
                    .or_else(|| str_of(d, "content"))
                    .unwrap_or_default(),
            ),
        };
        out.push((i, m));
    }
    if out.is_empty() {
        // Nothing to show (a `finish` alone, an empty answer just inserted): the row is kept.
        let reasons: Vec<&str> = parts
            .iter()
            .filter_map(|p| str_of(data(p), "reason"))
            .collect();
        out.push((
            0,
            c.text(0, row_role, MessageKind::Meta, reasons.join("\n")),
        ));
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
