//! Gemini CLI: `~/.gemini/tmp/<project>/chats/session-*.json` (whole document rewritten in
//! place, ≤ v0.38) and `.jsonl` (appended, message ids re-written, `$set`, `$rewindTo`,
//! ≥ v0.39); sub-agent sessions in `chats/<parentSessionId>/`. FORMATS.md §3.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl, parse_ts, str_of,
    string_of, u64_of,
};
use crate::model::{
    Cursor, Edit, MessageKind, ParseIssue, ParseOutput, Role, SessionInfo, TitleSource, ToolCall,
    ToolResult, Usage,
};
use crate::{reader, text};

const AGENT: &str = "gemini";

pub struct GeminiAdapter;

impl ConversationAdapter for GeminiAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let home = env
            .var("GEMINI_CLI_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.clone());
        vec![home.join(".gemini").join("tmp")]
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.contains(".tmp-") || name.contains(".unreadable-") {
            return false;
        }
        let in_chats = rel
            .components()
            .any(|c| matches!(c, Component::Normal(n) if n == "chats"));
        if !in_chats {
            return false;
        }
        if name.ends_with(".jsonl") {
            return true;
        }
        // A migrated `.json` session is superseded by its `.jsonl` twin.
        name.ends_with(".json") && !path.with_extension("jsonl").exists()
    }

    fn parse(
        &self,
        root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let ctx = FileContext::new(root, path);
        let mut info = SessionInfo::default();
        let (mut out, st) = if path.extension().is_some_and(|e| e == "json") {
            parse_document(&ctx, path, cursor, &mut info)?
        } else {
            drive_jsonl::<State>(path, cursor, max_bytes, |st, emit, rec| {
                jsonl_record(&ctx, st, emit, rec, &mut info);
            })?
        };
        if let Some(sid) = st.session_id {
            info.session_id = sid;
            info.project_path.clone_from(&ctx.project_path);
            info.project_hash = st.project_hash.or(ctx.dir_hash.clone());
            info.is_subagent = st.subagent || ctx.parent_session.is_some();
            info.parent_session_id.clone_from(&ctx.parent_session);
            out.sessions.push(info);
        }
        Ok(out)
    }
}

/// What the file's location says about its session.
struct FileContext {
    stem: String,
    project_path: Option<String>,
    /// The project folder's name when it is the sha256 of the project path (≤ v0.28).
    dir_hash: Option<String>,
    /// `chats/<parentSessionId>/<id>.jsonl`: a sub-agent session (≥ v0.37).
    parent_session: Option<String>,
}

impl FileContext {
    fn new(root: &Path, path: &Path) -> Self {
        let rel = path.strip_prefix(root).unwrap_or(path);
        let parts: Vec<&str> = rel
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .collect();
        let project_dir = parts.first().copied().unwrap_or("");
        let chats = parts.iter().position(|p| *p == "chats");
        let parent_session = chats
            .filter(|&i| parts.len() > i + 2)
            .map(|i| parts[i + 1].to_owned());
        let pdir = root.join(project_dir);
        let project_path = crate::reader::read_file(&pdir.join(".project_root"))
            .ok()
            .map(|s| String::from_utf8_lossy(&s).trim().to_owned())
            .filter(|s| !s.is_empty())
            .or_else(|| registry_lookup(root, project_dir));
        let dir_hash = (project_dir.len() == 64
            && project_dir.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| project_dir.to_owned());
        FileContext {
            stem: path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned(),
            project_path,
            dir_hash,
            parent_session,
        }
    }
}

/// `~/.gemini/projects.json`: `{"projects": {"<abs path>": "<slug>"}}`, read backwards.
fn registry_lookup(root: &Path, slug: &str) -> Option<String> {
    let reg = root.parent()?.join("projects.json");
    let v: Value = serde_json::from_slice(&crate::reader::read_file(&reg).ok()?).ok()?;
    v.get("projects")?
        .as_object()?
        .iter()
        .find(|(_, s)| s.as_str() == Some(slug))
        .map(|(p, _)| p.clone())
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    session_id: Option<String>,
    project_hash: Option<String>,
    subagent: bool,
    prompt: u32,
    /// Message id → (prompt number at first sight, whether it is a prompt).
    numbers: HashMap<String, (u32, bool)>,
    /// Ids of the current conversation, in order.
    order: Vec<String>,
    /// Message id → the ids of the extra messages it produced (thoughts, calls, results).
    children: HashMap<String, Vec<String>>,
}

fn session_fields(st: &mut State, v: &Value, info: &mut SessionInfo) {
    if st.session_id.is_none() {
        st.session_id = string_of(v, "sessionId");
    }
    if let Some(h) = string_of(v, "projectHash") {
        st.project_hash = Some(h);
    }
    if str_of(v, "kind") == Some("subagent") {
        st.subagent = true;
    }
    if let Some(t) = v.get("startTime").and_then(parse_ts) {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
    }
    if let Some(t) = v.get("lastUpdated").and_then(parse_ts) {
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    if let Some(s) = string_of(v, "summary") {
        info.title = Some((TitleSource::Generated, text::truncate_chars(&s, 200)));
    }
}

fn ensure_session(st: &mut State, ctx: &FileContext) -> String {
    st.session_id
        .get_or_insert_with(|| ctx.stem.clone())
        .clone()
}

fn jsonl_record(
    ctx: &FileContext,
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
) {
    let v = &rec.value;
    let Some(o) = v.as_object() else {
        emit.skip(&rec, "record is not a JSON object");
        return;
    };
    if let Some(set) = o.get("$set") {
        if !set.is_object() {
            emit.skip(&rec, "`$set` is not an object");
            return;
        }
        session_fields(st, set, info);
        record_meta(ctx, st, emit, &rec, String::new());
        if let Some(list) = set.get("messages") {
            match list.as_array() {
                Some(list) => checkpoint(ctx, st, emit, list, info),
                // The record itself is kept (its meta message carries the line).
                None => emit.note(&rec, "`$set.messages` is not a list"),
            }
        }
        return;
    }
    if let Some(target) = o.get("$rewindTo") {
        let sid = ensure_session(st, ctx);
        let target = target.as_str().unwrap_or_default();
        let from = st.order.iter().position(|i| i == target).unwrap_or(0);
        let removed: Vec<String> = st.order.drain(from..).collect();
        deactivate(st, emit, &sid, removed);
        record_meta(ctx, st, emit, &rec, format!("rewind to {target}"));
        return;
    }
    if has_message_id(v) && o.get("type").is_some() {
        message(ctx, st, emit, v, info);
        return;
    }
    // Metadata line (normally the first).
    session_fields(st, v, info);
    record_meta(ctx, st, emit, &rec, String::new());
}

/// Whether a record is a message: it has an id (an empty one cannot identify a message; such a
/// record is kept like any other non-message record).
fn has_message_id(v: &Value) -> bool {
    str_of(v, "id").is_some_and(|id| !id.is_empty())
}

/// The meta message that keeps a non-message record (metadata, `$set`, `$rewindTo`).
fn record_meta(ctx: &FileContext, st: &mut State, emit: &mut Emit, rec: &Record<'_>, text: String) {
    let sid = ensure_session(st, ctx);
    let mut m = blank(
        AGENT,
        &sid,
        format!("L{}", rec.line),
        Role::System,
        MessageKind::Meta,
    );
    m.prompt_number = st.prompt;
    m.text = text;
    emit.push(m);
}

fn deactivate(st: &State, emit: &mut Emit, sid: &str, ids: Vec<String>) {
    if ids.is_empty() {
        return;
    }
    let mut all = Vec::new();
    for id in ids {
        if let Some(c) = st.children.get(&id) {
            all.extend(c.iter().cloned());
        }
        all.push(id);
    }
    emit.out.edits.push(Edit::Deactivate {
        session_id: sid.to_owned(),
        message_ids: all,
    });
}

/// A `$set.messages` checkpoint (or a legacy document): the list replaces the conversation.
fn checkpoint(
    ctx: &FileContext,
    st: &mut State,
    emit: &mut Emit,
    list: &[Value],
    info: &mut SessionInfo,
) {
    let sid = ensure_session(st, ctx);
    let keep: HashSet<&str> = list.iter().filter_map(|m| str_of(m, "id")).collect();
    let dropped: Vec<String> = st
        .order
        .iter()
        .filter(|i| !keep.contains(i.as_str()))
        .cloned()
        .collect();
    deactivate(st, emit, &sid, dropped);
    st.order.clear();
    for m in list {
        if has_message_id(m) {
            message(ctx, st, emit, m, info);
        }
    }
}

/// Text of a part list (or string), without thought parts; `(text, thoughts)`.
fn parts_text(v: &Value) -> (String, String) {
    match v {
        Value::String(s) => (s.clone(), String::new()),
        Value::Array(parts) => {
            let mut t = Vec::new();
            let mut th = Vec::new();
            for p in parts {
                let Some(s) = p.get("text").and_then(Value::as_str) else {
                    if p.get("inlineData").is_some() || p.get("fileData").is_some() {
                        t.push("[attachment]".to_owned());
                    }
                    continue;
                };
                if p.get("thought").and_then(Value::as_bool) == Some(true) {
                    th.push(s.to_owned());
                } else {
                    t.push(s.to_owned());
                }
            }
            (t.concat(), th.join("\n"))
        }
        _ => (String::new(), String::new()),
    }
}

fn is_ignored_user_text(t: &str) -> bool {
    let t = t.trim();
    t.is_empty()
        || t.starts_with('/')
        || t.starts_with('?')
        || t.starts_with("<session_context>")
        || t.starts_with("<hook_context>")
        || t.starts_with("<state_snapshot>")
        || t.starts_with("I ran the following shell command:")
}

fn function_response_output(fr: &Value) -> String {
    let r = fr.get("response").unwrap_or(&Value::Null);
    match r {
        Value::Object(o) => o
            .get("output")
            .or_else(|| o.get("error"))
            .or_else(|| o.get("content"))
            .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_owned))
            .unwrap_or_else(|| r.to_string()),
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn message(ctx: &FileContext, st: &mut State, emit: &mut Emit, v: &Value, info: &mut SessionInfo) {
    let sid = ensure_session(st, ctx);
    let id = str_of(v, "id").unwrap_or_default().to_owned();
    let ty = str_of(v, "type").unwrap_or("");
    let ts = v.get("timestamp").and_then(parse_ts);
    if let Some(t) = ts {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    if !st.order.contains(&id) {
        st.order.push(id.clone());
    }
    let content = v.get("content").unwrap_or(&Value::Null);
    let (body, thought_parts) = parts_text(content);
    let only_responses = content
        .as_array()
        .is_some_and(|a| !a.is_empty() && a.iter().all(|p| p.get("functionResponse").is_some()));

    // The prompt number: fixed the first time an id is seen.
    let known = st.numbers.get(&id).copied();
    let (number, is_prompt) = match known {
        Some(k) => k,
        None => {
            let display = v
                .get("displayContent")
                .map(|d| parts_text(d).0)
                .filter(|d| !d.trim().is_empty());
            let typed = display.unwrap_or_else(|| text::strip_file_expansion(&body));
            let prompt = ty == "user"
                && !only_responses
                && !st.subagent
                && ctx.parent_session.is_none()
                && !is_ignored_user_text(&typed);
            if prompt {
                st.prompt += 1;
                if st.prompt == 1 {
                    let t = text::prompt_title(&typed);
                    if info
                        .title
                        .as_ref()
                        .is_none_or(|(s, _)| *s < TitleSource::FirstPrompt)
                    {
                        info.title = Some((TitleSource::FirstPrompt, t));
                    }
                }
            }
            let k = (st.prompt, prompt);
            st.numbers.insert(id.clone(), k);
            k
        }
    };
    let (role, kind) = match ty {
        "user" if is_prompt => (Role::User, MessageKind::UserPrompt),
        "user" if body.trim_start().starts_with("<state_snapshot>") => {
            (Role::User, MessageKind::CompactionSummary)
        }
        "user" => (Role::User, MessageKind::Meta),
        "gemini" => (Role::Assistant, MessageKind::AssistantText),
        _ => (Role::System, MessageKind::Meta),
    };
    let model = string_of(v, "model");
    if model.is_some() {
        info.model.clone_from(&model);
    }
    let new = |mid: String, role: Role, kind: MessageKind| {
        let mut m = blank(AGENT, &sid, mid, role, kind);
        m.prompt_number = number;
        m.timestamp = ts;
        m.cwd.clone_from(&ctx.project_path);
        m.model.clone_from(&model);
        m.flags.sidechain = st.subagent;
        m
    };
    let mut main = new(id.clone(), role, kind);
    main.text = match (ty, is_prompt) {
        ("user", true) => v
            .get("displayContent")
            .map(|d| parts_text(d).0)
            .filter(|d| !d.trim().is_empty())
            .unwrap_or_else(|| text::strip_file_expansion(&body)),
        _ => body,
    };
    if let Some(t) = v.get("tokens").filter(|t| t.is_object()) {
        main.usage = Some(Usage {
            // Tool-use prompt tokens (`tool`) are prompt tokens too, billed as input.
            input_tokens: u64_of(t, "input").saturating_add(u64_of(t, "tool")),
            output_tokens: u64_of(t, "output"),
            cache_read_tokens: u64_of(t, "cached"),
            cache_creation_tokens: 0,
            reasoning_tokens: u64_of(t, "thoughts"),
        });
        main.usage_key = Some(id.clone());
    }
    emit.push(main);

    let mut children = Vec::new();
    // Thoughts: `thoughts[]` (subject/description) and `thought: true` parts.
    let mut thinking: Vec<String> = v
        .get("thoughts")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|t| {
                    let s = str_of(t, "subject").unwrap_or_default();
                    let d = str_of(t, "description").unwrap_or_default();
                    if s.is_empty() {
                        d.to_owned()
                    } else {
                        format!("{s}: {d}")
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if !thought_parts.is_empty() {
        thinking.push(thought_parts);
    }
    if !thinking.is_empty() {
        let mid = format!("{id}/thought");
        let mut m = new(mid.clone(), Role::Assistant, MessageKind::Thinking);
        m.text = thinking.join("\n");
        emit.push(m);
        children.push(mid);
    }
    // Tool calls with their embedded results.
    let mut statuses: HashMap<String, bool> = HashMap::new();
    if let Some(calls) = v.get("toolCalls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            let name = str_of(c, "name").unwrap_or("unknown").to_owned();
            let call_id = string_of(c, "id");
            let mid = call_id
                .as_ref()
                .map_or_else(|| format!("{id}/call/{i}"), |c| format!("call:{c}"));
            let input = c.get("args").cloned().unwrap_or(Value::Null);
            let mut m = new(mid.clone(), Role::Assistant, MessageKind::ToolCall);
            m.text = text::tool_call_text(&name, &input);
            m.tool_call = Some(ToolCall {
                name,
                input,
                call_id: call_id.clone(),
            });
            emit.push(m);
            children.push(mid);
            let failed = matches!(str_of(c, "status"), Some("error") | Some("cancelled"));
            if let Some(cid) = &call_id {
                statuses.insert(cid.clone(), failed);
            }
            let responses: Vec<&Value> = c
                .get("result")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(|p| p.get("functionResponse")).collect())
                .unwrap_or_default();
            for fr in responses {
                // Match on the response's own id: one call's result can hold them all.
                let rid = string_of(fr, "id").or_else(|| call_id.clone());
                if rid.is_some() && rid != call_id {
                    continue;
                }
                children.push(push_result(&new, emit, &id, i, rid, fr, failed));
            }
        }
    }
    // ≥ v0.44: tool responses as a user message of `functionResponse` parts.
    if let Some(parts) = content.as_array() {
        for (i, p) in parts.iter().enumerate() {
            if let Some(fr) = p.get("functionResponse") {
                let rid = string_of(fr, "id");
                let failed = rid
                    .as_ref()
                    .and_then(|r| statuses.get(r))
                    .copied()
                    .unwrap_or(false);
                children.push(push_result(&new, emit, &id, i, rid, fr, failed));
            }
        }
    }
    if !children.is_empty() {
        st.children.insert(id, children);
    }
}

fn push_result(
    new: &dyn Fn(String, Role, MessageKind) -> crate::ParsedMessage,
    emit: &mut Emit,
    id: &str,
    i: usize,
    rid: Option<String>,
    fr: &Value,
    failed: bool,
) -> String {
    // Keyed by the call id, so the copy inside `toolCalls[].result` and the later
    // `functionResponse` message are one message.
    let mid = rid
        .as_ref()
        .map_or_else(|| format!("{id}/result/{i}"), |r| format!("result:{r}"));
    let mut m = new(mid.clone(), Role::Tool, MessageKind::ToolResult);
    m.text = function_response_output(fr);
    m.tool_result = Some(ToolResult {
        call_id: rid,
        is_error: failed,
    });
    emit.push(m);
    mid
}

/// A legacy whole-file JSON session: re-read on every change and treated as a checkpoint of the
/// conversation, so ids keep their prompt numbers and vanished messages are marked inactive.
fn parse_document(
    ctx: &FileContext,
    path: &Path,
    cursor: &Cursor,
    info: &mut SessionInfo,
) -> Result<(ParseOutput, State), ParseError> {
    let io = |source| ParseError::Io {
        path: path.to_owned(),
        source,
    };
    let bytes = reader::read_all(path).map_err(io)?;
    let len = bytes.len() as u64;
    let unchanged = cursor.offset == len
        && cursor
            .head
            .as_deref()
            .is_some_and(|h| reader::head_matches(path, h).unwrap_or(false));
    let mut st: State = serde_json::from_value(cursor.state.clone()).unwrap_or_default();
    let mut out = ParseOutput {
        cursor: cursor.clone(),
        at_end: true,
        ..Default::default()
    };
    if out.cursor.offset > len {
        // Shorter than when last read, and (if it is read below) unreadable: the cursor keeps
        // the state, but its size and head no longer describe the file.
        out.cursor.offset = len;
        out.cursor.head = None;
    }
    if unchanged || bytes.trim_ascii().is_empty() {
        return Ok((out, st));
    }
    let doc = match reader::decode_json(&bytes) {
        Ok(d) if d.value.is_object() => d.value,
        Ok(_) => {
            out.issues.push(ParseIssue {
                line: 1,
                byte_offset: 0,
                reason: "session document is not a JSON object".into(),
                kept: false,
            });
            return Ok((out, st));
        }
        Err(_) => {
            // Gemini rewrites the file in place without a temp file: a half-written document
            // is normal. Wait for the next change.
            out.pending_tail = true;
            return Ok((out, st));
        }
    };
    let mut emit = Emit::default();
    session_fields(&mut st, &doc, info);
    let sid = ensure_session(&mut st, ctx);
    // The document itself, byte for byte, rides on one meta message.
    let mut m = blank(
        AGENT,
        &sid,
        "document".into(),
        Role::System,
        MessageKind::Meta,
    );
    m.raw = Some(bytes);
    emit.push(m);
    let list = doc
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    checkpoint(ctx, &mut st, &mut emit, &list, info);
    for (i, m) in emit.out.messages.iter_mut().enumerate() {
        m.seq = i as u64;
    }
    out.messages = emit.out.messages;
    out.edits = emit.out.edits;
    out.bytes = len;
    out.cursor = Cursor {
        offset: len,
        line: 0,
        head: Some(reader::head_fingerprint(path, len).map_err(io)?),
        state: serde_json::to_value(&st).unwrap_or_default(),
        unterminated: false,
    };
    Ok((out, st))
}
