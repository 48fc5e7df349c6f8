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
//! above the highest row id taken, and the last `sqlite::WINDOW` rows are
//! read again on every parse and taken again when their content changed. An in-place change to
//! an older row is not seen. Deleted rows and sessions are not reported: the archive keeps what
//! it read.

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, RecordCtx, SourceKind, blank, drive_jsonl,
    offer_first_prompt, str_of, string_of, u64_of, usage_of,
};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
};
use crate::sqlite::{
    DbRead, SessionMarks, Tables, Taken, epoch_ms, has_table, json_column, parse_database, row_json,
};
use crate::text;

const AGENT: &str = "goose";

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
            parse_database(
                path,
                cursor,
                &["sessions", "messages"],
                "a Goose sessions database",
                |conn, st, emit| read_database(conn, st, emit, max_bytes),
            )
        } else {
            parse_legacy(path, cursor, max_bytes)
        }
    }
}

// ---- the database ----

/// What this adapter remembers of a session between reads.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Sess {
    #[serde(flatten)]
    marks: SessionMarks,
    #[serde(default)]
    sub: bool,
    #[serde(default)]
    parent: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

impl AsMut<SessionMarks> for Sess {
    fn as_mut(&mut self) -> &mut SessionMarks {
        &mut self.marks
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct DbState {
    #[serde(flatten)]
    tables: Tables<Sess>,
    /// The highest `usage_ledger` id read.
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

fn read_database(
    conn: &Connection,
    st: &mut DbState,
    emit: &mut Emit,
    max_bytes: usize,
) -> rusqlite::Result<DbRead> {
    // Sessions: the rows whose stamp moved (or is at the last read's latest) are read whole.
    let mut read = st.tables.read_sessions(conn, |id, row, raw, sess| {
        session_row(id, row, raw, sess, emit)
    })?;

    // Messages: new rows, and the last rows again where they changed.
    let taking = st.tables.read_messages(conn, max_bytes, &mut read)?;
    if taking.reset {
        st.ledger = 0;
    }
    for t in &taking.rows {
        message_row(t, &mut st.tables, emit, &mut read);
    }

    // The usage ledger (schema ≥ 15): appended, never updated; read once the messages are.
    if taking.at_end && has_table(conn, "usage_ledger") {
        let mut s = conn.prepare("SELECT * FROM usage_ledger WHERE id > ?1 ORDER BY id")?;
        let mut q = s.query([st.ledger])?;
        while let Some(r) = q.next()? {
            let row = row_json(r);
            let id = row.get("id").and_then(Value::as_i64).unwrap_or(0);
            st.ledger = st.ledger.max(id);
            let raw = serde_json::to_vec(&row).unwrap_or_default();
            read.rows += 1;
            read.bytes += raw.len() as u64;
            ledger_row(id, &row, raw, &st.tables, emit, &mut read);
        }
    }
    Ok(read)
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
    st: &Tables<Sess>,
    emit: &mut Emit,
    read: &mut DbRead,
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
    read.info(&sid, || base_info(&sid, &sess));
}

/// A `messages` row: one message per content part.
fn message_row(t: &Taken, st: &mut Tables<Sess>, emit: &mut Emit, read: &mut DbRead) {
    let row = &t.row;
    let sid = string_of(row, "session_id").unwrap_or_default();
    let sess = st.sessions.entry(sid.clone()).or_default();
    let info = read.info(&sid, || base_info(&sid, sess));
    let mid = string_of(row, "message_id").unwrap_or_else(|| format!("row:{}", t.rowid));
    let role = str_of(row, "role").unwrap_or("");
    let meta = row
        .get("metadata_json")
        .map(json_column)
        .unwrap_or_default();
    let content = t.json_list(
        "content_json",
        emit,
        |s| serde_json::json!({"type": "unreadable", "text": s}),
    );
    let visible = meta.get("userVisible").and_then(Value::as_bool) != Some(false);
    let prompt = role == "user" && visible && !sess.sub && has_text(&content);
    let number = sess.marks.prompts.number(t.rowid, &mid, prompt);
    let model = meta
        .get("inference")
        .and_then(|i| string_of(i, "resolvedModel").or_else(|| string_of(i, "requestedModel")))
        .or_else(|| sess.model.clone());
    let ctx = RecordCtx {
        agent: AGENT,
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
    let msgs = blocks(&ctx, role, &content, prompt);
    if prompt && number == 1 {
        offer_first_prompt(info, &msgs);
    }
    t.emit(emit, msgs);
}

// ---- content parts (database rows and legacy lines alike) ----

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

fn blocks(c: &RecordCtx<'_>, role: &str, content: &[Value], prompt: bool) -> Vec<ParsedMessage> {
    let row_role = match role {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        _ => Role::System,
    };
    // (part index, message), put in part order at the end.
    let mut out: Vec<(usize, ParsedMessage)> = Vec::new();
    if prompt {
        // What the human sent: its text and images, as one prompt.
        out.push(c.prompt(content, |p| match str_of(p, "type") {
            Some("text") => Some((true, str_of(p, "text").unwrap_or_default())),
            Some("image") => Some((false, "[image]")),
            _ => None,
        }));
    }
    for (i, p) in content.iter().enumerate() {
        let ty = str_of(p, "type").unwrap_or("");
        if prompt && matches!(ty, "text" | "image") {
            continue;
        }
        let m = match ty {
            "text" if row_role == Role::Assistant => c.text(
                i,
                Role::Assistant,
                MessageKind::AssistantText,
                str_of(p, "text").unwrap_or_default(),
            ),
            "thinking" | "redactedThinking" | "reasoning" => c.text(
                i,
                Role::Assistant,
                MessageKind::Thinking,
                str_of(p, "thinking")
                    .or_else(|| str_of(p, "text"))
                    .unwrap_or_default(),
            ),
            "toolRequest" | "frontendToolRequest" => tool_request(c, i, p),
            "toolResponse" => tool_response(c, i, p),
            "image" => c.text(i, row_role, MessageKind::Meta, "[image]"),
            _ => c.text(i, row_role, MessageKind::Meta, part_text(p)),
        };
        out.push((i, m));
    }
    if out.is_empty() {
        out.push((0, c.message(0, row_role, MessageKind::Meta)));
    }
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, m)| m).collect()
}

fn tool_request(c: &RecordCtx<'_>, i: usize, p: &Value) -> ParsedMessage {
    let call = p.get("toolCall").unwrap_or(&Value::Null);
    let (name, input) = match (str_of(call, "status"), call.get("value")) {
        (Some("success") | None, Some(v)) if v.is_object() => (
            str_of(v, "name").unwrap_or("unknown").to_owned(),
            v.get("arguments").cloned().unwrap_or(Value::Null),
        ),
        // Goose could not read the call: its error is all there is.
        _ => ("unknown".to_owned(), call.clone()),
    };
    c.tool_call(i, name, input, string_of(p, "id"))
}

fn tool_response(c: &RecordCtx<'_>, i: usize, p: &Value) -> ParsedMessage {
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
    c.tool_result(i, body, string_of(p, "id"), is_error)
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
    let ctx = RecordCtx {
        agent: AGENT,
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
