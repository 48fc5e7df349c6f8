//! Codex CLI: `~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl[.zst]` and
//! `archived_sessions/`, in the pre-envelope (mid-2025) and envelope formats. FORMATS.md §2.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl, parse_ts, str_of,
    string_of, u64_of,
};
use crate::model::{
    Cursor, Edit, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
    ToolCall, ToolResult, Usage,
};
use crate::text;

const AGENT: &str = "codex";

pub struct CodexAdapter;

impl ConversationAdapter for CodexAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let home = env
            .var("CODEX_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join(".codex"));
        vec![home.join("sessions"), home.join("archived_sessions")]
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        if !path.starts_with(root) {
            return false;
        }
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.starts_with("rollout-") {
            return false;
        }
        if name.ends_with(".jsonl") {
            return true;
        }
        // A compressed rollout counts only while its plain twin does not exist: Codex turns it
        // back into a plain file before appending.
        name.ends_with(".jsonl.zst") && !path.with_extension("").exists()
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let fallback_id = session_id_from_name(path);
        let mut info = SessionInfo::default();
        let (mut out, st) = drive_jsonl::<State>(path, cursor, max_bytes, |st, emit, rec| {
            handle(st, emit, rec, &mut info, &fallback_id);
        })?;
        if let Some(sid) = st.session_id {
            info.session_id = sid;
            info.is_subagent = st.subagent;
            info.parent_session_id = st.parent;
            out.sessions.push(info);
        }
        Ok(out)
    }
}

/// The thread uuid at the end of `rollout-<time>-<uuid>.jsonl[.zst]`.
fn session_id_from_name(path: &Path) -> String {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let stem = name
        .trim_end_matches(".zst")
        .trim_end_matches(".jsonl")
        .trim_end_matches(".json");
    if stem.len() >= 36 && stem.is_char_boundary(stem.len() - 36) {
        stem[stem.len() - 36..].to_owned()
    } else {
        stem.to_owned()
    }
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    session_id: Option<String>,
    /// Pre-envelope file: bare items, no per-line timestamps.
    legacy: bool,
    /// When this thread began; copied parent lines are older.
    start_ts: Option<i64>,
    /// Inside a fork's copy of its parent's lines.
    inherited: bool,
    /// The file has `event_msg` lines, so prompts are the `user_message` events.
    events: bool,
    prompt: u32,
    /// sha256 of the last prompt counted from a `response_item`, to recognise its event echo.
    /// A digest, not the text: the cursor is stored, and must not keep a prompt's secrets.
    /// (Cursors written before held the trimmed text itself; both are recognised.)
    last_item_prompt: Option<String>,
    subagent: bool,
    parent: Option<String>,
    model: Option<String>,
    cwd: Option<String>,
    branch: Option<String>,
}

/// What the state keeps of a prompt to recognise its echo.
fn prompt_digest(text: &str) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(text.trim().as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn handle(
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
    fallback: &str,
) {
    let v = &rec.value;
    let ty = str_of(v, "type");
    let payload = v.get("payload");
    if st.session_id.is_none() {
        st.session_id = Some(fallback.to_owned());
    }
    if rec.line == 1 && ty.is_none() && v.get("id").is_some() {
        // Pre-envelope header: `{id, timestamp, instructions, git?, cwd?}`.
        st.legacy = true;
        session_meta(st, v, v.get("timestamp"), info);
        meta(st, emit, &rec, Role::System, String::new(), None);
        return;
    }
    let ts = v.get("timestamp").and_then(parse_ts);
    if st.inherited && ts.is_some_and(|t| st.start_ts.is_some_and(|s| t >= s)) {
        st.inherited = false;
    }
    if let (Some(t), false) = (ts, st.inherited) {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    match (ty, payload) {
        (Some("session_meta"), Some(p)) => {
            let id = string_of(p, "id").or_else(|| string_of(p, "session_id"));
            if st.start_ts.is_none() {
                session_meta(st, p, p.get("timestamp").or(v.get("timestamp")), info);
            } else if id.is_some() && id != st.session_id {
                // A fork copies its parent's lines, parent session_meta first.
                st.inherited = true;
            }
            meta(st, emit, &rec, Role::System, String::new(), ts);
        }
        (Some("turn_context"), Some(p)) => {
            if !st.inherited {
                if let Some(m) = string_of(p, "model") {
                    info.model = Some(m.clone());
                    st.model = Some(m);
                }
                if let Some(c) = string_of(p, "cwd") {
                    info.project_path.get_or_insert_with(|| c.clone());
                    st.cwd = Some(c);
                }
            }
            meta(st, emit, &rec, Role::System, String::new(), ts);
        }
        (Some("response_item"), Some(p)) => item(st, emit, &rec, p, ts, info),
        (Some("event_msg"), Some(p)) => {
            st.events = true;
            event(st, emit, &rec, p, ts, info);
        }
        (Some("compacted"), Some(p)) => {
            let text = str_of(p, "message").unwrap_or_default().to_owned();
            let kind = if text.trim().is_empty() {
                MessageKind::Meta
            } else {
                MessageKind::CompactionSummary
            };
            let mut m = mk(st, &rec, 0, Role::System, kind, ts);
            m.text = text;
            emit.push(m);
        }
        (None, _) if st.legacy => {
            if v.get("record_type").is_some() {
                meta(st, emit, &rec, Role::System, String::new(), ts);
            } else {
                item(st, emit, &rec, v, ts, info);
            }
        }
        (Some(_), _) if st.legacy && payload.is_none() => item(st, emit, &rec, v, ts, info),
        _ => meta(st, emit, &rec, Role::System, String::new(), ts),
    }
}

fn session_meta(st: &mut State, p: &Value, ts: Option<&Value>, info: &mut SessionInfo) {
    // Without an id (damaged line) the session keeps the one it has: the file name's.
    if let Some(id) = string_of(p, "id").or_else(|| string_of(p, "session_id")) {
        st.session_id = Some(id);
    }
    st.start_ts = ts.and_then(parse_ts).or(Some(i64::MIN));
    if let Some(t) = ts.and_then(parse_ts) {
        info.started_at = Some(t);
        // Pre-envelope files have no other timestamp: the session was active at least then.
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    if let Some(c) = string_of(p, "cwd") {
        info.project_path = Some(c.clone());
        st.cwd = Some(c);
    }
    if let Some(b) = p.get("git").and_then(|g| string_of(g, "branch")) {
        info.git_branch = Some(b.clone());
        st.branch = Some(b);
    }
    let spawn = p
        .get("source")
        .and_then(|s| s.get("subagent"))
        .filter(|s| !s.is_null());
    st.subagent = spawn.is_some();
    st.parent = spawn
        .and_then(|s| s.get("thread_spawn"))
        .and_then(|t| string_of(t, "parent_thread_id"))
        .or_else(|| string_of(p, "parent_thread_id"))
        .or_else(|| string_of(p, "forked_from_id"));
}

fn mk(
    st: &State,
    rec: &Record<'_>,
    block: usize,
    role: Role,
    kind: MessageKind,
    ts: Option<i64>,
) -> ParsedMessage {
    let id = if block == 0 {
        format!("L{}", rec.line)
    } else {
        format!("L{}#{block}", rec.line)
    };
    let mut m = blank(
        AGENT,
        st.session_id.as_deref().unwrap_or_default(),
        id,
        role,
        kind,
    );
    m.prompt_number = if st.inherited { 0 } else { st.prompt };
    m.timestamp = ts;
    m.cwd.clone_from(&st.cwd);
    m.git_branch.clone_from(&st.branch);
    m.flags.inherited = st.inherited;
    m
}

fn meta(st: &State, emit: &mut Emit, rec: &Record<'_>, role: Role, text: String, ts: Option<i64>) {
    let mut m = mk(st, rec, 0, role, MessageKind::Meta, ts);
    m.text = text;
    emit.push(m);
}

/// Counts a new prompt and returns its number.
fn new_prompt(st: &mut State, info: &mut SessionInfo, text: &str) -> u32 {
    st.prompt += 1;
    if st.prompt == 1 {
        info.title = Some((TitleSource::FirstPrompt, text::prompt_title(text)));
    }
    st.prompt
}

fn item(
    st: &mut State,
    emit: &mut Emit,
    rec: &Record<'_>,
    p: &Value,
    ts: Option<i64>,
    info: &mut SessionInfo,
) {
    let pt = str_of(p, "type").unwrap_or("");
    let mut m = match pt {
        "message" => {
            let role = str_of(p, "role").unwrap_or("");
            let body = text::blocks_text(p.get("content").unwrap_or(&Value::Null));
            match role {
                "user" => {
                    let prompt = !st.inherited
                        && !st.subagent
                        && !st.events
                        && !text::is_codex_injected(&body)
                        && !body.trim().is_empty();
                    if let Some(c) = text::environment_cwd(&body).filter(|_| !st.inherited) {
                        info.project_path.get_or_insert_with(|| c.clone());
                        st.cwd.get_or_insert(c);
                    }
                    let mut m = mk(st, rec, 0, Role::User, MessageKind::Meta, ts);
                    if prompt {
                        m.kind = MessageKind::UserPrompt;
                        m.prompt_number = new_prompt(st, info, &body);
                        st.last_item_prompt = Some(prompt_digest(&body));
                    } else if st.events && !text::is_codex_injected(&body) {
                        // The `user_message` event that follows is the prompt of record.
                        m.flags.duplicate = true;
                    }
                    m.text = body;
                    m
                }
                "assistant" => {
                    let mut m = mk(st, rec, 0, Role::Assistant, MessageKind::AssistantText, ts);
                    m.text = body;
                    m
                }
                _ => {
                    let mut m = mk(st, rec, 0, Role::System, MessageKind::Meta, ts);
                    m.text = body;
                    m
                }
            }
        }
        "reasoning" => {
            let mut m = mk(st, rec, 0, Role::Assistant, MessageKind::Thinking, ts);
            let mut t = text::blocks_text(p.get("summary").unwrap_or(&Value::Null));
            let c = text::blocks_text(p.get("content").unwrap_or(&Value::Null));
            if !c.is_empty() {
                if !t.is_empty() {
                    t.push('\n');
                }
                t.push_str(&c);
            }
            m.text = t;
            m
        }
        "function_call" | "custom_tool_call" | "local_shell_call" | "web_search_call"
        | "tool_search_call" => {
            let name = match pt {
                "local_shell_call" => "local_shell".to_owned(),
                "web_search_call" => "web_search".to_owned(),
                "tool_search_call" => "tool_search".to_owned(),
                _ => str_of(p, "name").unwrap_or("unknown").to_owned(),
            };
            let input = match pt {
                "function_call" => json_or_string(p.get("arguments")),
                "custom_tool_call" => json_or_string(p.get("input")),
                _ => p
                    .get("action")
                    .or_else(|| p.get("arguments"))
                    .cloned()
                    .unwrap_or(Value::Null),
            };
            let mut m = mk(st, rec, 0, Role::Assistant, MessageKind::ToolCall, ts);
            m.text = text::tool_call_text(&name, &input);
            m.tool_call = Some(ToolCall {
                name,
                input,
                call_id: string_of(p, "call_id").or_else(|| string_of(p, "id")),
            });
            m
        }
        "function_call_output" | "custom_tool_call_output" | "tool_search_output" => {
            let (out, is_error) = tool_output(p.get("output").unwrap_or(&Value::Null));
            let mut m = mk(st, rec, 0, Role::Tool, MessageKind::ToolResult, ts);
            m.text = out;
            m.tool_result = Some(ToolResult {
                call_id: string_of(p, "call_id"),
                is_error,
            });
            m
        }
        _ => {
            let mut m = mk(st, rec, 0, Role::System, MessageKind::Meta, ts);
            m.text = text::blocks_text(p.get("content").unwrap_or(&Value::Null));
            m
        }
    };
    if m.role == Role::Assistant {
        m.model.clone_from(&st.model);
    }
    emit.push(m);
}

fn event(
    st: &mut State,
    emit: &mut Emit,
    rec: &Record<'_>,
    p: &Value,
    ts: Option<i64>,
    info: &mut SessionInfo,
) {
    let et = str_of(p, "type").unwrap_or("");
    let mut m = mk(st, rec, 0, Role::System, MessageKind::Meta, ts);
    match et {
        "user_message" => {
            let text = str_of(p, "message").unwrap_or_default().to_owned();
            m.role = Role::User;
            let plain = str_of(p, "kind").is_none_or(|k| k == "plain");
            let echo = st.last_item_prompt.take();
            if echo
                .as_deref()
                .is_some_and(|e| e == prompt_digest(&text) || e == text.trim())
            {
                // The prompt was already counted from its response_item copy.
                m.flags.duplicate = true;
            } else if plain
                && !st.inherited
                && !st.subagent
                && !text::is_codex_injected(&text)
                && !text.trim().is_empty()
            {
                m.kind = MessageKind::UserPrompt;
                m.prompt_number = new_prompt(st, info, &text);
            }
            m.text = text;
        }
        "agent_message" | "agent_reasoning" | "agent_reasoning_raw_content" => {
            m.role = Role::Assistant;
            m.text = str_of(p, "message")
                .or_else(|| str_of(p, "text"))
                .unwrap_or_default()
                .to_owned();
            m.flags.duplicate = true;
        }
        "token_count" => {
            if let Some(t) = p.get("info").and_then(|i| i.get("total_token_usage"))
                && !st.inherited
            {
                m.usage = Some(Usage {
                    input_tokens: u64_of(t, "input_tokens"),
                    output_tokens: u64_of(t, "output_tokens"),
                    cache_read_tokens: u64_of(t, "cached_input_tokens"),
                    cache_creation_tokens: u64_of(t, "cache_write_input_tokens"),
                    reasoning_tokens: u64_of(t, "reasoning_output_tokens"),
                });
                // Cumulative for the thread: the maximum is the total.
                m.usage_key = Some("thread-total".into());
                // The model that spent them: the turn's.
                m.model.clone_from(&st.model);
            }
        }
        "thread_rolled_back" => {
            let n = u64_of(p, "num_turns") as u32;
            if n > 0 && !st.inherited && st.prompt > 0 {
                emit.out.edits.push(Edit::DeactivateTalks {
                    session_id: m.session_id.clone(),
                    from_prompt: st.prompt.saturating_sub(n) + 1,
                    to_prompt: st.prompt,
                });
            }
        }
        "thread_name_updated" => {
            if let Some(n) = string_of(p, "thread_name").or_else(|| string_of(p, "name")) {
                info.title = Some((TitleSource::Custom, text::truncate_chars(&n, 200)));
                m.text = n;
            }
        }
        _ => {}
    }
    emit.push(m);
}

/// A JSON-string input parsed when it is JSON, kept as a string otherwise.
fn json_or_string(v: Option<&Value>) -> Value {
    match v {
        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
            .ok()
            .filter(|x| x.is_object() || x.is_array())
            .unwrap_or_else(|| Value::String(s.clone())),
        Some(x) => x.clone(),
        None => Value::Null,
    }
}

/// The text of a tool output in its several styles, and whether it reports failure.
fn tool_output(v: &Value) -> (String, bool) {
    let s = match v {
        Value::String(s) => s.clone(),
        other => return (text::blocks_text(other), false),
    };
    // Older shell tool: JSON in a string with `metadata.exit_code`.
    if s.starts_with('{')
        && let Ok(j) = serde_json::from_str::<Value>(&s)
        && let Some(out) = str_of(&j, "output")
    {
        let code = j
            .get("metadata")
            .and_then(|m| m.get("exit_code"))
            .and_then(Value::as_i64);
        return (out.to_owned(), code.is_some_and(|c| c != 0));
    }
    let code = s.lines().take(6).find_map(|l| {
        l.strip_prefix("Exit code: ")
            .or_else(|| l.strip_prefix("Process exited with code "))
            .and_then(|c| c.trim().parse::<i64>().ok())
    });
    (s, code.is_some_and(|c| c != 0))
}
