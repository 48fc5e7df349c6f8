//! Roo Code (VS Code extension `rooveterinaryinc.roo-cline`), FORMATS-MORE §8, and the task
//! reader it shares with Cline (`cline.rs`, §7).
//!
//! **Where.** `<host>/User/globalStorage/rooveterinaryinc.roo-cline/tasks/<taskId>/`, where the
//! host folder is VS Code's (`Code`, `Code - Insiders`, `VSCodium`) or a fork's (`Cursor`,
//! `Windsurf`) under `$XDG_CONFIG_HOME` or `~/.config` (Linux), `~/Library/Application Support`
//! (macOS) or `%APPDATA%` (Windows), plus the remote servers' `~/.vscode-remote/data/User` and
//! `~/.vscode-server/data/User`. A root is such a `tasks` folder.
//!
//! **What is read.** `api_conversation_history.json`, a document rewritten whole (atomic
//! write) on every change, in two shapes under one name: the legacy JSON array of Anthropic
//! messages and the v2 envelope `{"version": 2, "messages": [...]}` of AI-SDK messages (roles
//! `user`/`assistant`/`tool`, parts `text`, `reasoning`, `tool-call`, `tool-result`, legacy
//! blocks still accepted), with top-level `{type: "reasoning"}` items that have no role.
//! Beside it, `history_item.json` gives the title (`task`), the project (`workspace`), the last
//! update (`ts`) and the parent of a sub-task (`parentTaskId`), and `ui_messages.json` the
//! first and last event times; a change of either re-reads the task (`source_of`).
//!
//! **Ids.** Every element keeps an id derived from its own `ts` (epoch ms; `<ts>.<n>` for the
//! n-th repeat of one `ts`), or for an element without one from the last `ts` before it plus
//! its distance (`<ts>+<k>`, `n<k>` before any `ts`): condensing inserts summaries and
//! truncation markers into the middle of the file, which an index would shift. Blocks of an
//! element are `<id>#<block>`.
//!
//! **Prompts.** A human's words arrive wrapped: `<task>` (the first message), `<user_message>`
//! and `<feedback>` (later input, also inside the result of `attempt_completion` /
//! `ask_followup_question` or of a tool the user denied with a comment), `<answer>` (a reply
//! to a follow-up question). The wrapped text is the prompt. `<environment_details>`,
//! `[TASK RESUMPTION]` notices without a wrapped message and other unwrapped user text are
//! injected by the extension (Meta). Summaries (`isSummary`) are compaction summaries, never
//! prompts; messages hidden by `condenseParent`/`truncationParent` stay in the file and are
//! kept like any other. A sub-task's (`parentTaskId`) user text is the parent agent's
//! instruction: no prompts there, every message is a sidechain.
//!
//! **Tools.** `tool_use`/`tool_result` pair by `tool_use_id`, v2 `tool-call`/`tool-result` by
//! `toolCallId`. A v2 error is only an `[ERROR]` prefix of the result text; a failed tool's
//! result text starts with "The tool execution failed". Results without an
//! id (Cline's `[<tool> for '<arg>'] Result:` text blocks) pair by order with the calls of the
//! assistant message before them, by tool name first.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, blank, parse_ts, str_of, string_of, u64_of,
};
use crate::document::{Read, drive_document};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, ToolCall,
    ToolResult, Usage,
};
use crate::{SourceKind, reader, text};

/// The task document every task folder holds.
pub(crate) const TASK_FILE: &str = "api_conversation_history.json";
/// Files beside the task document whose change is a change of the task.
const SIDE_FILES: &[&str] = &[
    "history_item.json",
    "ui_messages.json",
    "task_metadata.json",
];

/// VS Code and the forks that run its extensions, by their folder names.
const HOSTS: &[&str] = &["Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf"];

pub struct RooAdapter;

impl TaskExtension for RooAdapter {
    const AGENT: &'static str = "roo";
    const EXTENSION: &'static str = "rooveterinaryinc.roo-cline";

    fn meta(dir: &Path) -> TaskMeta {
        let mut meta = TaskMeta::default();
        if let Some(h) = read_json(&dir.join("history_item.json")) {
            meta.title = string_of(&h, "task");
            meta.cwd = string_of(&h, "workspace");
            meta.updated_at = h.get("ts").and_then(parse_ts);
            meta.parent = string_of(&h, "parentTaskId");
        }
        meta
    }
}

/// A VS Code extension that keeps its tasks in folders like Roo Code's (Roo Code, Cline): the
/// roots, the files, what a change is and the task document are read alike; only where the
/// task's metadata comes from differs.
pub(crate) trait TaskExtension: Send + Sync {
    /// The agent's name.
    const AGENT: &'static str;
    /// The extension's id, its folder under `globalStorage`.
    const EXTENSION: &'static str;
    /// What the extension keeps about the task in folder `dir` besides the document (the UI
    /// event times are added to it alike).
    fn meta(dir: &Path) -> TaskMeta;
}

impl<T: TaskExtension> ConversationAdapter for T {
    fn name(&self) -> &'static str {
        T::AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        host_task_roots(env, T::EXTENSION)
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        is_task_file(root, path)
    }

    fn source_kind(&self, _path: &Path) -> SourceKind {
        SourceKind::Document
    }

    fn source_of(&self, root: &Path, changed: &Path) -> Option<PathBuf> {
        task_source_of(root, changed)
    }

    fn side_files(&self, path: &Path) -> Vec<PathBuf> {
        SIDE_FILES.iter().map(|f| path.with_file_name(f)).collect()
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        _max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let dir = path.parent().unwrap_or(Path::new(""));
        let mut meta = T::meta(dir);
        meta.add_ui_times(dir);
        parse_task(T::AGENT, path, cursor, &meta)
    }
}

/// The `tasks` folders of `extension` under every VS Code-like host on Linux, macOS and
/// Windows (whether or not they exist).
fn host_task_roots(env: &Env, extension: &str) -> Vec<PathBuf> {
    let config = env
        .var("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| env.home.join(".config"));
    let mac = env.home.join("Library").join("Application Support");
    let appdata = env
        .var("APPDATA")
        .map(PathBuf::from)
        .unwrap_or_else(|| env.home.join("AppData").join("Roaming"));
    let mut users = Vec::new();
    for base in [&config, &mac, &appdata] {
        for host in HOSTS {
            users.push(base.join(host).join("User"));
        }
    }
    users.push(env.home.join(".vscode-remote").join("data").join("User"));
    users.push(env.home.join(".vscode-server").join("data").join("User"));
    let mut roots: Vec<PathBuf> = users
        .into_iter()
        .map(|u| u.join("globalStorage").join(extension).join("tasks"))
        .collect();
    roots.dedup();
    roots
}

/// `<root>/<taskId>/api_conversation_history.json`.
fn is_task_file(root: &Path, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(root) else {
        return false;
    };
    rel.components().count() == 2 && path.file_name().is_some_and(|n| n == TASK_FILE)
}

/// The task document that a change of `changed` (the document or a file beside it) re-reads.
fn task_source_of(root: &Path, changed: &Path) -> Option<PathBuf> {
    if is_task_file(root, changed) {
        return Some(changed.to_owned());
    }
    let name = changed.file_name()?.to_str()?;
    if !SIDE_FILES.contains(&name) {
        return None;
    }
    let doc = changed.with_file_name(TASK_FILE);
    (is_task_file(root, &doc) && doc.is_file()).then_some(doc)
}

/// A JSON file beside the task, if it is there and readable.
pub(crate) fn read_json(path: &Path) -> Option<Value> {
    let bytes = crate::reader::read_file(path).ok()?;
    reader::decode_json(&bytes).ok().map(|d| d.value)
}

/// What the files beside a task document say about the task.
#[derive(Debug, Default, Clone)]
pub(crate) struct TaskMeta {
    pub title: Option<String>,
    pub cwd: Option<String>,
    pub model: Option<String>,
    pub started_at: Option<i64>,
    pub updated_at: Option<i64>,
    /// The task that started this one as a sub-task.
    pub parent: Option<String>,
}

impl TaskMeta {
    /// Widens the task's time span by the first and last `ts` of `ui_messages.json`.
    pub(crate) fn add_ui_times(&mut self, dir: &Path) {
        let Some(Value::Array(ui)) = read_json(&dir.join("ui_messages.json")) else {
            return;
        };
        for t in ui.iter().filter_map(|m| m.get("ts").and_then(parse_ts)) {
            self.started_at = Some(self.started_at.map_or(t, |s| s.min(t)));
            self.updated_at = Some(self.updated_at.map_or(t, |u| u.max(t)));
        }
    }
}

/// Parses one task document of `agent` (Roo or Cline) with what its side files said.
pub(crate) fn parse_task(
    agent: &'static str,
    path: &Path,
    cursor: &Cursor,
    meta: &TaskMeta,
) -> Result<ParseOutput, ParseError> {
    let sid = path
        .parent()
        .and_then(Path::file_name)
        .and_then(|n| n.to_str())
        .unwrap_or("task")
        .to_owned();
    let mut info = SessionInfo {
        session_id: sid.clone(),
        project_path: meta.cwd.clone(),
        model: meta.model.clone(),
        title: meta
            .title
            .as_deref()
            .map(text::prompt_title)
            .filter(|t| !t.is_empty())
            .map(|t| (TitleSource::FirstPrompt, t)),
        parent_session_id: meta.parent.clone(),
        is_subagent: meta.parent.is_some(),
        started_at: meta.started_at,
        updated_at: meta.updated_at,
        ..Default::default()
    };
    let (mut out, ()) = drive_document::<()>(path, cursor, |_, emit, bytes| {
        read_task(agent, &sid, meta, emit, bytes, &mut info)
    })?;
    out.sessions.push(info);
    Ok(out)
}

/// The JSON value of a whole document: half a document is still being written.
pub(crate) fn decode_document(bytes: &[u8]) -> Result<Value, Read> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => Ok(v),
        Err(e) if e.is_eof() => Err(Read::Incomplete),
        Err(_) => reader::decode_json(bytes)
            .map(|d| d.value)
            .map_err(|e| Read::Bad(e.to_string())),
    }
}

fn read_task(
    agent: &'static str,
    sid: &str,
    meta: &TaskMeta,
    emit: &mut Emit,
    bytes: &[u8],
    info: &mut SessionInfo,
) -> Read {
    let doc = match decode_document(bytes) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let list = match &doc {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("messages") {
            Some(Value::Array(a)) => a,
            _ => return Read::Bad("task document is an object without a `messages` list".into()),
        },
        _ => return Read::Bad("task document is neither a list nor an object".into()),
    };
    let mut t = Task {
        agent,
        sid,
        meta,
        subagent: meta.parent.is_some(),
        prompt: 0,
        calls: HashMap::new(),
        pending: VecDeque::new(),
        ids: Ids::default(),
        model: None,
        first_prompt: None,
        env_cwd: None,
        first_ts: None,
        last_ts: None,
    };
    for (i, el) in list.iter().enumerate() {
        let before = emit.out.messages.len();
        t.element(emit, i, el);
        if let Some(first) = emit.out.messages.get_mut(before) {
            first.raw = Some(serde_json::to_vec(el).unwrap_or_default());
        }
    }
    if info.project_path.is_none() {
        info.project_path.clone_from(&t.env_cwd);
    }
    if info.model.is_none() {
        info.model = t.model;
    }
    if info.title.is_none()
        && let Some(p) = t.first_prompt
    {
        info.title = Some((TitleSource::FirstPrompt, p));
    }
    if let Some(f) = t.first_ts {
        info.started_at = Some(info.started_at.map_or(f, |s| s.min(f)));
    }
    if let Some(l) = t.last_ts {
        info.updated_at = Some(info.updated_at.map_or(l, |u| u.max(l)));
    }
    Read::Whole
}

/// Stable element ids (see the module doc).
#[derive(Default)]
struct Ids {
    /// The id of the last element that had a `ts`.
    anchor: Option<String>,
    since: u32,
    repeats: HashMap<i64, u32>,
}

impl Ids {
    fn next(&mut self, ts: Option<i64>) -> String {
        match ts {
            Some(t) => {
                let n = self.repeats.entry(t).or_insert(0);
                let id = if *n == 0 {
                    t.to_string()
                } else {
                    format!("{t}.{n}")
                };
                *n += 1;
                self.anchor = Some(id.clone());
                self.since = 0;
                id
            }
            None => {
                self.since += 1;
                match &self.anchor {
                    Some(a) => format!("{a}+{}", self.since),
                    None => format!("n{}", self.since - 1),
                }
            }
        }
    }
}

/// Tools whose result carries what the human answered.
const HUMAN_TOOLS: &[&str] = &[
    "attempt_completion",
    "ask_followup_question",
    "plan_mode_respond",
    "act_mode_respond",
];

/// Wrappers around text a human typed.
const PROMPT_TAGS: &[&str] = &["task", "user_message", "feedback", "answer"];

/// The text inside every `<task>`, `<user_message>`, `<feedback>` or `<answer>` element of
/// `s`, in order, joined by blank lines; `None` when there is none with text.
pub(crate) fn wrapped_prompt(s: &str) -> Option<String> {
    let mut parts = Vec::new();
    let mut rest = s;
    loop {
        let next = PROMPT_TAGS
            .iter()
            .filter_map(|tag| rest.find(&format!("<{tag}>")).map(|i| (i, *tag)))
            .min();
        let Some((i, tag)) = next else { break };
        let body = &rest[i + tag.len() + 2..];
        let close = format!("</{tag}>");
        let Some(j) = body.find(&close) else { break };
        let inner = body[..j].trim();
        if !inner.is_empty() {
            parts.push(inner.to_owned());
        }
        rest = &body[j + close.len()..];
    }
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// The working directory an `<environment_details>` block names (Cline: `# Current Working
/// Directory (<path>) Files`, Roo: `# Current Workspace Directory (<path>) Files`).
pub(crate) fn environment_cwd(s: &str) -> Option<String> {
    s.lines().find_map(|l| {
        let rest = l
            .strip_prefix("# Current Working Directory (")
            .or_else(|| l.strip_prefix("# Current Workspace Directory ("))?;
        let end = rest.rfind(')')?;
        Some(rest[..end].trim().to_owned()).filter(|p| !p.is_empty())
    })
}

/// A Cline text-form tool result: `[<tool> for '<arg>'] Result:` on its first line; returns
/// the tool's name and the output after that line.
fn text_result(s: &str) -> Option<(&str, &str)> {
    let first = s.lines().next()?;
    let inner = first.strip_prefix('[')?.strip_suffix("] Result:")?;
    let name = inner.split(" for ").next().unwrap_or(inner).trim();
    let body = s
        .get(first.len()..)
        .unwrap_or("")
        .trim_start_matches(['\r', '\n']);
    (!name.is_empty()).then_some((name, body))
}

struct Task<'a> {
    agent: &'static str,
    sid: &'a str,
    meta: &'a TaskMeta,
    subagent: bool,
    prompt: u32,
    /// Call id → tool name.
    calls: HashMap<String, String>,
    /// Calls of the last assistant message not answered yet: (id, name), in order.
    pending: VecDeque<(Option<String>, String)>,
    ids: Ids,
    model: Option<String>,
    first_prompt: Option<String>,
    env_cwd: Option<String>,
    first_ts: Option<i64>,
    last_ts: Option<i64>,
}

impl Task<'_> {
    fn element(&mut self, emit: &mut Emit, index: usize, el: &Value) {
        let ts = el.get("ts").and_then(parse_ts);
        if let Some(t) = ts {
            self.first_ts = Some(self.first_ts.map_or(t, |f| f.min(t)));
            self.last_ts = Some(self.last_ts.map_or(t, |l| l.max(t)));
        }
        let id = self.ids.next(ts);
        if !el.is_object() {
            emit.issue(index as u64, "task element is not a JSON object", true);
            let m = self.mk(&id, ts, Role::System, MessageKind::Meta);
            emit.push(m);
            return;
        }
        let role = str_of(el, "role").unwrap_or("");
        let blocks: Vec<Value> = match el.get("content") {
            Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
            Some(Value::Array(a)) => a.clone(),
            _ => Vec::new(),
        };
        let block_id = |j: usize| {
            if j == 0 {
                id.clone()
            } else {
                format!("{id}#{j}")
            }
        };
        let summary = el.get("isSummary").and_then(Value::as_bool) == Some(true);
        let marker = el.get("isTruncationMarker").and_then(Value::as_bool) == Some(true);
        let before = emit.out.messages.len();
        match role {
            _ if str_of(el, "type") == Some("reasoning") && el.get("role").is_none() => {
                let mut m = self.mk(&id, ts, Role::Assistant, MessageKind::Thinking);
                m.text = reasoning_text(el);
                emit.push(m);
            }
            _ if summary || marker => {
                let kind = if summary {
                    MessageKind::CompactionSummary
                } else {
                    MessageKind::Meta
                };
                let role = Role::parse(role).unwrap_or(Role::System);
                let mut m = self.mk(&id, ts, role, kind);
                m.text = text::blocks_text(&Value::Array(blocks));
                emit.push(m);
            }
            "assistant" => self.assistant(emit, el, &id, ts, &blocks, &block_id),
            "user" | "tool" => self.user(emit, &blocks, ts, &block_id),
            _ => {
                emit.issue(
                    index as u64,
                    format!("task element with role `{role}`"),
                    true,
                );
                let mut m = self.mk(&id, ts, Role::System, MessageKind::Meta);
                m.text = text::blocks_text(&Value::Array(blocks));
                emit.push(m);
            }
        }
        if emit.out.messages.len() == before {
            // An element with no content still keeps its bytes.
            let role = Role::parse(role).unwrap_or(Role::System);
            let m = self.mk(&id, ts, role, MessageKind::Meta);
            emit.push(m);
        }
    }

    fn mk(&self, id: &str, ts: Option<i64>, role: Role, kind: MessageKind) -> ParsedMessage {
        let mut m = blank(self.agent, self.sid, id.to_owned(), role, kind);
        m.prompt_number = self.prompt;
        m.timestamp = ts;
        m.cwd.clone_from(&self.meta.cwd);
        m.flags.sidechain = self.subagent;
        m
    }

    fn assistant(
        &mut self,
        emit: &mut Emit,
        el: &Value,
        id: &str,
        ts: Option<i64>,
        blocks: &[Value],
        block_id: &dyn Fn(usize) -> String,
    ) {
        self.pending.clear();
        let model = el
            .get("modelInfo")
            .and_then(|i| string_of(i, "modelId"))
            .or_else(|| string_of(el, "model"));
        if model.is_some() {
            self.model.clone_from(&model);
        }
        let usage = el
            .get("metrics")
            .and_then(|m| m.get("tokens"))
            .filter(|t| t.is_object())
            .map(|t| Usage {
                input_tokens: u64_of(t, "prompt"),
                output_tokens: u64_of(t, "completion"),
                cache_read_tokens: u64_of(t, "cached"),
                cache_creation_tokens: 0,
                reasoning_tokens: 0,
            });
        let start = emit.out.messages.len();
        if let Some(r) = str_of(el, "reasoning_content").filter(|r| !r.is_empty()) {
            let mut m = self.mk(
                &format!("{id}/reasoning"),
                ts,
                Role::Assistant,
                MessageKind::Thinking,
            );
            m.text = r.to_owned();
            emit.push(m);
        }
        for (j, b) in blocks.iter().enumerate() {
            let bid = block_id(j);
            let m = match str_of(b, "type").unwrap_or("") {
                "text" => {
                    let mut m = self.mk(&bid, ts, Role::Assistant, MessageKind::AssistantText);
                    m.text = str_of(b, "text").unwrap_or_default().to_owned();
                    m
                }
                "thinking" | "redacted_thinking" | "reasoning" => {
                    let mut m = self.mk(&bid, ts, Role::Assistant, MessageKind::Thinking);
                    m.text = str_of(b, "thinking")
                        .or_else(|| str_of(b, "text"))
                        .unwrap_or_default()
                        .to_owned();
                    m
                }
                "tool_use" | "tool-call" => {
                    let name = str_of(b, "name")
                        .or_else(|| str_of(b, "toolName"))
                        .unwrap_or("unknown")
                        .to_owned();
                    let call_id = string_of(b, "id").or_else(|| string_of(b, "toolCallId"));
                    let input = b
                        .get("input")
                        .or_else(|| b.get("args"))
                        .cloned()
                        .unwrap_or(Value::Null);
                    if let Some(c) = &call_id {
                        self.calls.insert(c.clone(), name.clone());
                    }
                    self.pending.push_back((call_id.clone(), name.clone()));
                    let mut m = self.mk(&bid, ts, Role::Assistant, MessageKind::ToolCall);
                    m.text = text::tool_call_text(&name, &input);
                    m.tool_call = Some(ToolCall {
                        name,
                        input,
                        call_id,
                    });
                    m
                }
                _ => {
                    let mut m = self.mk(&bid, ts, Role::Assistant, MessageKind::Meta);
                    m.text = text::blocks_text(&Value::Array(vec![b.clone()]));
                    m
                }
            };
            emit.push(m);
        }
        for (i, m) in emit.out.messages[start..].iter_mut().enumerate() {
            m.model.clone_from(&model);
            if i == 0 {
                m.usage = usage;
                m.usage_key = usage.map(|_| format!("{}:{id}", self.sid));
                // Cline's price of the request, in dollars.
                m.cost_usd = usage.and(
                    el.get("metrics")
                        .and_then(|x| crate::adapter::cost_of(x, "cost")),
                );
            }
        }
    }

    fn user(
        &mut self,
        emit: &mut Emit,
        blocks: &[Value],
        ts: Option<i64>,
        block_id: &dyn Fn(usize) -> String,
    ) {
        for (j, b) in blocks.iter().enumerate() {
            let bid = block_id(j);
            match str_of(b, "type").unwrap_or("") {
                "tool_result" | "tool-result" => {
                    let call_id =
                        string_of(b, "tool_use_id").or_else(|| string_of(b, "toolCallId"));
                    let (output, error_output) = result_output(b);
                    let (call_id, name) = self.answer(call_id, str_of(b, "toolName"));
                    let failed = error_output
                        || b.get("is_error").and_then(Value::as_bool) == Some(true)
                        || is_error_text(&output);
                    self.push_result(emit, &bid, ts, call_id, name.as_deref(), output, failed);
                }
                "text" => {
                    let s = str_of(b, "text").unwrap_or_default();
                    if let Some((name, body)) = text_result(s) {
                        let (call_id, name) = self.answer(None, Some(name));
                        let failed = is_error_text(body);
                        self.push_result(
                            emit,
                            &bid,
                            ts,
                            call_id,
                            name.as_deref(),
                            s.to_owned(),
                            failed,
                        );
                        continue;
                    }
                    let trimmed = s.trim_start();
                    if trimmed.starts_with("<environment_details>") {
                        if self.env_cwd.is_none() {
                            self.env_cwd = environment_cwd(s);
                        }
                        let mut m = self.mk(&bid, ts, Role::User, MessageKind::Meta);
                        m.text = s.to_owned();
                        emit.push(m);
                        continue;
                    }
                    match wrapped_prompt(s).filter(|_| !self.subagent) {
                        Some(p) => self.push_prompt(emit, &bid, ts, p),
                        None => {
                            let mut m = self.mk(&bid, ts, Role::User, MessageKind::Meta);
                            m.text = s.to_owned();
                            emit.push(m);
                        }
                    }
                }
                _ => {
                    let mut m = self.mk(&bid, ts, Role::User, MessageKind::Meta);
                    m.text = text::blocks_text(&Value::Array(vec![b.clone()]));
                    emit.push(m);
                }
            }
        }
    }

    /// The call a result answers: its own id, else the first pending call of that tool's
    /// name, else the first pending call.
    fn answer(
        &mut self,
        id: Option<String>,
        name: Option<&str>,
    ) -> (Option<String>, Option<String>) {
        if let Some(id) = id {
            self.pending
                .retain(|(c, _)| c.as_deref() != Some(id.as_str()));
            let name = self.calls.get(&id).cloned().or(name.map(str::to_owned));
            return (Some(id), name);
        }
        let at = name
            .and_then(|n| self.pending.iter().position(|(_, p)| p == n))
            .or((!self.pending.is_empty()).then_some(0));
        match at.and_then(|i| self.pending.remove(i)) {
            Some((c, n)) => (c, Some(n)),
            None => (None, name.map(str::to_owned)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn push_result(
        &mut self,
        emit: &mut Emit,
        bid: &str,
        ts: Option<i64>,
        call_id: Option<String>,
        tool: Option<&str>,
        output: String,
        failed: bool,
    ) {
        // A human's answer inside the result: of a tool that asks the human, or a tool the
        // human denied or approved with a comment ("The user denied this operation and
        // provided the following feedback: <feedback>…").
        let body = text_result(&output)
            .map_or(output.as_str(), |(_, b)| b)
            .trim_start();
        let human = tool.is_some_and(|t| HUMAN_TOOLS.contains(&t))
            || PROMPT_TAGS
                .iter()
                .any(|t| body.strip_prefix('<').is_some_and(|b| b.starts_with(t)))
            || body.starts_with("The user ");
        let prompt = (human && !self.subagent)
            .then(|| wrapped_prompt(body))
            .flatten();
        let mut m = self.mk(bid, ts, Role::Tool, MessageKind::ToolResult);
        m.text = output;
        m.tool_result = Some(ToolResult {
            call_id,
            is_error: failed,
        });
        emit.push(m);
        if let Some(p) = prompt {
            self.push_prompt(emit, &format!("{bid}/prompt"), ts, p);
        }
    }

    fn push_prompt(&mut self, emit: &mut Emit, id: &str, ts: Option<i64>, p: String) {
        self.prompt += 1;
        if self.first_prompt.is_none() {
            self.first_prompt = Some(text::prompt_title(&p)).filter(|t| !t.is_empty());
        }
        let mut m = self.mk(id, ts, Role::User, MessageKind::UserPrompt);
        m.text = p;
        emit.push(m);
    }
}

/// Whether a result's text says the tool failed: Roo's `[ERROR]` prefix, or the message both
/// extensions give a failed tool ("The tool execution failed with the following error:").
fn is_error_text(s: &str) -> bool {
    let s = s.trim_start();
    s.starts_with("[ERROR]") || s.starts_with("The tool execution failed")
}

/// The text of a `tool_result` (Anthropic `content`) or `tool-result` (AI-SDK `output`) block,
/// and whether the output itself says it is an error (`error-text`, `error-json`).
fn result_output(b: &Value) -> (String, bool) {
    if let Some(c) = b.get("content") {
        return (text::blocks_text(c), false);
    }
    let Some(o) = b.get("output") else {
        return (String::new(), false);
    };
    let ty = str_of(o, "type").unwrap_or("");
    let text = match o.get("value") {
        Some(Value::String(s)) => s.clone(),
        Some(v @ Value::Array(_)) => text::blocks_text(v),
        Some(Value::Null) | None if o.is_string() => o.as_str().unwrap_or_default().to_owned(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    };
    (text, ty.starts_with("error"))
}

/// The readable part of a top-level reasoning item: its summary texts (the rest is encrypted).
fn reasoning_text(el: &Value) -> String {
    let mut parts: Vec<String> = el
        .get("summary")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| str_of(s, "text").map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if let Some(t) = str_of(el, "text") {
        parts.push(t.to_owned());
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_survive_insertions() {
        let mut a = Ids::default();
        let before: Vec<String> = [Some(10), None, Some(20), Some(20), None, None]
            .into_iter()
            .map(|t| a.next(t))
            .collect();
        assert_eq!(before, ["10", "10+1", "20", "20.1", "20.1+1", "20.1+2"]);
        // A summary inserted between 10 and 20 leaves every other id as it was.
        let mut b = Ids::default();
        let after: Vec<String> = [Some(10), None, Some(15), Some(20), Some(20), None, None]
            .into_iter()
            .map(|t| b.next(t))
            .collect();
        for id in &before {
            assert!(after.contains(id), "{id} lost in {after:?}");
        }
        let mut d = Ids::default();
        let ids: Vec<String> = [Some(20), None, Some(20), None]
            .into_iter()
            .map(|t| d.next(t))
            .collect();
        assert_eq!(ids, ["20", "20+1", "20.1", "20.1+1"]);
        let mut c = Ids::default();
        assert_eq!(c.next(None), "n0");
        assert_eq!(c.next(None), "n1");
    }

    #[test]
    fn prompts_are_the_wrapped_text() {
        assert_eq!(
            wrapped_prompt("<task>\nFix it\n</task>").as_deref(),
            Some("Fix it")
        );
        assert_eq!(
            wrapped_prompt(
                "[TASK RESUMPTION] This task was interrupted.\n\nNew instructions for task continuation:\n<user_message>\nGo on\n</user_message>"
            )
            .as_deref(),
            Some("Go on")
        );
        assert_eq!(wrapped_prompt("<feedback>\n\n</feedback>"), None);
        assert_eq!(wrapped_prompt("<task>unclosed"), None);
        assert_eq!(wrapped_prompt("plain text"), None);
    }

    #[test]
    fn text_results_name_their_tool() {
        assert_eq!(
            text_result("[read_file for 'src/a.ts'] Result:\n1 | x"),
            Some(("read_file", "1 | x"))
        );
        assert_eq!(
            text_result("[attempt_completion] Result:\n<feedback>\nmore\n</feedback>"),
            Some(("attempt_completion", "<feedback>\nmore\n</feedback>"))
        );
        assert_eq!(text_result("[note] something"), None);
    }

    #[test]
    fn environment_names_the_directory() {
        assert_eq!(
            environment_cwd(
                "<environment_details>\n# Current Working Directory (/home/dev/app) Files\na.ts\n</environment_details>"
            )
            .as_deref(),
            Some("/home/dev/app")
        );
        assert_eq!(environment_cwd("# Current Time\nnow"), None);
    }
}
