//! GitHub Copilot CLI: `session-state/<sessionId>/events.jsonl`, one event per line, appended
//! (FORMATS-MORE §3).
//!
//! **Where.** `$COPILOT_HOME/session-state/`, default `~/.copilot/session-state/` on Linux and
//! macOS and `%USERPROFILE%\.copilot\session-state\` on Windows; builds up to 0.0.421 honoured
//! `$XDG_CONFIG_HOME/.copilot` (github/copilot-cli#1954), which is looked into too. Before
//! v1.0.11 a session was one flat `session-state/<id>.jsonl`; both layouts are read. Beside
//! `events.jsonl`, `workspace.yaml` (flat YAML the agent rewrites in place) gives the session's
//! `name` and times: its few keys are parsed by hand, and a change of it re-reads the session
//! (it is a change of `events.jsonl`, see [`CopilotAdapter::source_of`]). `session-store.db`
//! is only a search index and is not read.
//!
//! **Records.** `{type, data, id, timestamp, parentId}`; the event `id` is the message id. The
//! session id is `session.start.data.sessionId` (= the directory name, its fallback); the
//! project is `session.start.data.context.cwd` (a `session.resume` may report another cwd:
//! it moves the messages' `cwd`, not the project). Both the 1.0.9x shape (`arguments` an
//! object, results in `result.content` / `error.message` with `success`) and the 1.0.4x shape
//! (`arguments` a JSON string, `result{result_type, text_result_for_llm}`) are read.
//!
//! **Prompts.** A `user.message` is a prompt when its `source` is absent or `user`, it has no
//! top-level `agentId`, its `content` does not start `<system_notification>`, and its
//! `transformedContent` carries no `<cross_session_message>` envelope outside the typed text.
//! `source: agent-<id>` is the task the agent handed a sub-agent; `autopilot`, `system`,
//! `skill-*`, `instruction-discovery` are injected: all of these are kept as meta.
//!
//! **Tools.** Every `assistant.message` `toolRequests[]` entry is a call (`toolCallId`); its
//! `tool.execution_complete` carries the same id, so calls and results pair by id.
//! `tool.execution_start` repeats the request and is kept as a duplicate meta.
//!
//! **Sub-agents** run inline in the same file: their lines carry a top-level `agentId`, and
//! become sidechain messages of the same session with that `agent_id` (their model comes from
//! their own `session.model_change` / `subagent.started`).
//!
//! **Traps.** `parentId` can name events that were never written: it is kept as the parent
//! id, never followed. Empty `assistant.message` placeholders (no text, no requests) become
//! meta. A resume appends `session.resume` to the same file; the prompt count goes on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl, parse_ts, str_of,
    string_of, u64_of,
};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, ToolCall,
    ToolResult, Usage,
};
use crate::text;

const AGENT: &str = "copilot";
const EVENTS: &str = "events.jsonl";
const WORKSPACE: &str = "workspace.yaml";

pub struct CopilotAdapter;

impl ConversationAdapter for CopilotAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        if let Some(home) = env.var("COPILOT_HOME") {
            return vec![PathBuf::from(home).join("session-state")];
        }
        let mut roots = vec![env.home.join(".copilot").join("session-state")];
        if let Some(xdg) = env.var("XDG_CONFIG_HOME") {
            let old = PathBuf::from(xdg).join(".copilot").join("session-state");
            if !roots.contains(&old) {
                roots.push(old);
            }
        }
        roots
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        let parts: Vec<&str> = rel
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .collect();
        match parts.as_slice() {
            [_, name] => *name == EVENTS,
            [name] => name.ends_with(".jsonl"),
            _ => false,
        }
    }

    /// A rewrite of `workspace.yaml` (a new name) is a change of the session's `events.jsonl`.
    fn source_of(&self, root: &Path, changed: &Path) -> Option<PathBuf> {
        if self.is_transcript(root, changed) {
            return Some(changed.to_owned());
        }
        if changed.file_name()? != WORKSPACE {
            return None;
        }
        let events = changed.with_file_name(EVENTS);
        (self.is_transcript(root, &events) && events.is_file()).then_some(events)
    }

    fn side_files(&self, path: &Path) -> Vec<PathBuf> {
        if path.file_name().is_some_and(|n| n == EVENTS) {
            vec![path.with_file_name(WORKSPACE)]
        } else {
            Vec::new()
        }
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let nested = path.file_name().is_some_and(|n| n == EVENTS);
        let fallback = if nested {
            path.parent().and_then(Path::file_name)
        } else {
            path.file_stem()
        }
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned();
        let mut info = SessionInfo::default();
        let (mut out, st) = drive_jsonl::<State>(path, cursor, max_bytes, |st, emit, rec| {
            handle(st, emit, rec, &mut info, &fallback);
        })?;
        let Some(sid) = st.session_id else {
            return Ok(out);
        };
        info.session_id = sid;
        info.model.clone_from(&st.model);
        info.git_branch.clone_from(&st.branch);
        info.project_path.clone_from(&st.project);
        if nested {
            let ws = crate::reader::read_file(&path.with_file_name(WORKSPACE))
                .map(|s| yaml_scalars(&String::from_utf8_lossy(&s)))
                .unwrap_or_default();
            apply_workspace(&ws, &mut info);
        }
        out.sessions.push(info);
        Ok(out)
    }
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    session_id: Option<String>,
    prompt: u32,
    /// The main agent's current model.
    model: Option<String>,
    /// Sub-agent id → its model.
    #[serde(default)]
    agent_models: BTreeMap<String, String>,
    /// Working directory of the current run (`session.start`, then each `session.resume`).
    cwd: Option<String>,
    branch: Option<String>,
    /// The `session.start` cwd: the session's project.
    project: Option<String>,
    /// Tokens the session's messages carried so far: a `session.shutdown` record's totals
    /// (cumulative across resumes) add what they do not already hold.
    #[serde(default)]
    emitted: Usage,
}

/// What `workspace.yaml` adds: the session's name, and the times and folder when the events
/// did not give them.
fn apply_workspace(ws: &BTreeMap<String, String>, info: &mut SessionInfo) {
    let get = |k: &str| ws.get(k).map(|s| s.trim()).filter(|s| !s.is_empty());
    if let Some(name) = get("name") {
        let src = if get("user_named") == Some("true") {
            TitleSource::Custom
        } else {
            TitleSource::Generated
        };
        info.title = Some((src, text::truncate_chars(name, 200)));
    }
    if info.project_path.is_none() {
        info.project_path = get("cwd").map(str::to_owned);
    }
    if info.git_branch.is_none() {
        info.git_branch = get("branch").map(str::to_owned);
    }
    let ts = |k: &str| get(k).and_then(|s| parse_ts(&Value::String(s.to_owned())));
    if let Some(t) = ts("created_at") {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
    }
    if let Some(t) = ts("updated_at") {
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
}

/// Everything a record's messages share.
struct Ctx<'a> {
    sid: String,
    base_id: String,
    parent_id: Option<String>,
    ts: Option<i64>,
    agent_id: Option<String>,
    st: &'a State,
}

impl Ctx<'_> {
    fn id(&self, block: usize) -> String {
        if block == 0 {
            self.base_id.clone()
        } else {
            format!("{}#{block}", self.base_id)
        }
    }

    fn mk(&self, block: usize, role: Role, kind: MessageKind) -> ParsedMessage {
        let mut m = blank(AGENT, &self.sid, self.id(block), role, kind);
        m.parent_id.clone_from(&self.parent_id);
        m.prompt_number = self.st.prompt;
        m.timestamp = self.ts;
        m.cwd.clone_from(&self.st.cwd);
        m.git_branch.clone_from(&self.st.branch);
        m.flags.sidechain = self.agent_id.is_some();
        m.agent_id.clone_from(&self.agent_id);
        // The model the message's agent runs on at that point.
        m.model = self.model();
        m
    }

    /// The model the record's agent runs on.
    fn model(&self) -> Option<String> {
        match &self.agent_id {
            Some(a) => self.st.agent_models.get(a).cloned(),
            None => self.st.model.clone(),
        }
    }
}

static NULL: Value = Value::Null;

fn handle(
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
    fallback: &str,
) {
    let v = &rec.value;
    let ty = str_of(v, "type").unwrap_or("");
    let data = v.get("data").filter(|d| d.is_object()).unwrap_or(&NULL);
    if st.session_id.is_none() {
        let own = (ty == "session.start")
            .then(|| string_of(data, "sessionId"))
            .flatten();
        st.session_id = Some(own.unwrap_or_else(|| fallback.to_owned()));
    }
    let ts = v.get("timestamp").and_then(parse_ts);
    if let Some(t) = ts {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    let agent_id = string_of(v, "agentId");

    // State changes the record's own messages already reflect.
    let mut prompt = false;
    let mut shutdown = None;
    if ty == "assistant.message" {
        let out = u64_of(data, "outputTokens");
        st.emitted.output_tokens = st.emitted.output_tokens.saturating_add(out);
    }
    match ty {
        "session.start" | "session.resume" => {
            let start = ty == "session.start";
            if start && let Some(t) = data.get("startTime").and_then(parse_ts) {
                info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
            }
            if let Some(c) = data.get("context").filter(|c| c.is_object()) {
                if let Some(cwd) = string_of(c, "cwd") {
                    if start || st.project.is_none() {
                        st.project = Some(cwd.clone());
                    }
                    st.cwd = Some(cwd);
                }
                if let Some(b) = string_of(c, "branch") {
                    st.branch = Some(b);
                }
            }
            if let Some(m) = string_of(data, "selectedModel") {
                st.model = Some(m);
            }
        }
        "session.model_change" | "subagent.started" => {
            let key = if ty == "subagent.started" {
                "model"
            } else {
                "newModel"
            };
            if let Some(m) = string_of(data, key) {
                match &agent_id {
                    Some(a) => {
                        st.agent_models.insert(a.clone(), m);
                    }
                    None => st.model = Some(m),
                }
            }
        }
        "user.message" if is_prompt(data, agent_id.is_some()) => {
            st.prompt += 1;
            prompt = true;
            if st.prompt == 1 {
                let typed = str_of(data, "content").unwrap_or_default();
                info.title = Some((TitleSource::FirstPrompt, text::prompt_title(typed)));
            }
        }
        "assistant.message" if agent_id.is_none() => {
            if let Some(m) = string_of(data, "model") {
                st.model = Some(m);
            }
        }
        "session.shutdown" => shutdown = shutdown_usage(st, data),
        _ => {}
    }

    let cx = Ctx {
        sid: st.session_id.clone().unwrap_or_default(),
        base_id: string_of(v, "id").unwrap_or_else(|| format!("L{}", rec.line)),
        parent_id: string_of(v, "parentId"),
        ts,
        agent_id,
        st,
    };
    match ty {
        "user.message" => {
            let kind = if prompt {
                MessageKind::UserPrompt
            } else {
                MessageKind::Meta
            };
            let mut m = cx.mk(0, Role::User, kind);
            m.text = str_of(data, "content").unwrap_or_default().to_owned();
            emit.push(m);
        }
        "assistant.message" => assistant(&cx, emit, data),
        "assistant.reasoning" => {
            let mut m = cx.mk(0, Role::Assistant, MessageKind::Thinking);
            m.text = str_of(data, "content").unwrap_or_default().to_owned();
            m.model = string_of(data, "model").or_else(|| cx.model());
            emit.push(m);
        }
        "tool.execution_start" => {
            let mut m = cx.mk(0, Role::Assistant, MessageKind::Meta);
            m.text = str_of(data, "toolName").unwrap_or_default().to_owned();
            m.flags.duplicate = true;
            emit.push(m);
        }
        "tool.execution_complete" => {
            let (out, is_error) = tool_output(data);
            let mut m = cx.mk(0, Role::Tool, MessageKind::ToolResult);
            m.text = out;
            m.tool_result = Some(ToolResult {
                call_id: string_of(data, "toolCallId"),
                is_error,
            });
            emit.push(m);
        }
        "session.compaction_complete" => {
            let summary = str_of(data, "summaryContent").unwrap_or_default();
            let kind = if summary.trim().is_empty() {
                MessageKind::Meta
            } else {
                MessageKind::CompactionSummary
            };
            let mut m = cx.mk(0, Role::System, kind);
            m.text = summary.to_owned();
            emit.push(m);
        }
        _ => {
            let mut m = cx.mk(0, Role::System, MessageKind::Meta);
            m.text = match ty {
                "session.start" => str_of(data, "copilotVersion"),
                "session.model_change" => str_of(data, "newModel"),
                "subagent.started" => {
                    str_of(data, "agentDescription").or_else(|| str_of(data, "agentName"))
                }
                _ => str_of(data, "message").or_else(|| str_of(data, "content")),
            }
            .unwrap_or_default()
            .to_owned();
            if let Some(u) = shutdown {
                m.usage = Some(u);
                m.usage_key = Some(format!("shutdown:{}", m.message_id));
            }
            emit.push(m);
        }
    }
}

/// A `session.shutdown` record's token totals (`tokenDetails`: input without cache, cache
/// read, cache write, output; cumulative across resumes), less what the session's messages
/// already carried; `None` when it holds none.
fn shutdown_usage(st: &mut State, data: &Value) -> Option<Usage> {
    let t = data.get("tokenDetails").filter(|t| t.is_object())?;
    let count = |k: &str| t.get(k).map_or(0, |d| u64_of(d, "tokenCount"));
    let total = Usage {
        input_tokens: count("input"),
        output_tokens: count("output"),
        cache_read_tokens: count("cache_read"),
        cache_creation_tokens: count("cache_write"),
        reasoning_tokens: 0,
    };
    let e = st.emitted;
    let add = Usage {
        input_tokens: total.input_tokens.saturating_sub(e.input_tokens),
        output_tokens: total.output_tokens.saturating_sub(e.output_tokens),
        cache_read_tokens: total.cache_read_tokens.saturating_sub(e.cache_read_tokens),
        cache_creation_tokens: total
            .cache_creation_tokens
            .saturating_sub(e.cache_creation_tokens),
        reasoning_tokens: 0,
    };
    st.emitted = Usage {
        input_tokens: e.input_tokens.max(total.input_tokens),
        output_tokens: e.output_tokens.max(total.output_tokens),
        cache_read_tokens: e.cache_read_tokens.max(total.cache_read_tokens),
        cache_creation_tokens: e.cache_creation_tokens.max(total.cache_creation_tokens),
        reasoning_tokens: 0,
    };
    Some(add)
}

/// Whether a `user.message` is something the human typed (FORMATS-MORE §3).
fn is_prompt(data: &Value, from_sub_agent: bool) -> bool {
    let content = str_of(data, "content").unwrap_or_default();
    let source = str_of(data, "source").filter(|s| !s.is_empty());
    let transformed = str_of(data, "transformedContent").unwrap_or_default();
    // The envelope repeats the typed text verbatim: a prompt quoting the tag stays a prompt.
    let cross_session = transformed.contains("<cross_session_message>")
        && transformed
            .replacen(content, "", 1)
            .contains("<cross_session_message>");
    !from_sub_agent
        && source.is_none_or(|s| s == "user")
        && !content.trim_start().starts_with("<system_notification>")
        && !cross_session
        && !content.trim().is_empty()
}

/// An `assistant.message`: reasoning, text and tool requests, one message each.
fn assistant(cx: &Ctx<'_>, emit: &mut Emit, data: &Value) {
    let model = string_of(data, "model").or_else(|| cx.model());
    let mut out: Vec<ParsedMessage> = Vec::new();
    let mut block = 0;
    let mut next = |role: Role, kind: MessageKind| {
        let mut m = cx.mk(block, role, kind);
        block += 1;
        m.model.clone_from(&model);
        m
    };
    if let Some(r) = str_of(data, "reasoningText").filter(|r| !r.trim().is_empty()) {
        let mut m = next(Role::Assistant, MessageKind::Thinking);
        m.text = r.to_owned();
        out.push(m);
    }
    if let Some(c) = str_of(data, "content").filter(|c| !c.trim().is_empty()) {
        let mut m = next(Role::Assistant, MessageKind::AssistantText);
        m.text = c.to_owned();
        out.push(m);
    }
    for req in data
        .get("toolRequests")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = str_of(req, "name").unwrap_or("unknown").to_owned();
        let input = json_or_string(req.get("arguments"));
        let mut m = next(Role::Assistant, MessageKind::ToolCall);
        m.text = text::tool_call_text(&name, &input);
        m.tool_call = Some(ToolCall {
            name,
            input,
            call_id: string_of(req, "toolCallId"),
        });
        out.push(m);
    }
    if out.is_empty() {
        // A streaming placeholder: nothing said yet.
        out.push(next(Role::Assistant, MessageKind::Meta));
    }
    let output_tokens = u64_of(data, "outputTokens");
    if output_tokens > 0 {
        out[0].usage = Some(Usage {
            output_tokens,
            ..Usage::default()
        });
        out[0].usage_key = string_of(data, "messageId").or_else(|| Some(cx.base_id.clone()));
    }
    for m in out {
        emit.push(m);
    }
}

/// A tool's output text (1.0.9x `result.content` / `error.message`, 1.0.4x
/// `result.text_result_for_llm`) and whether it failed.
fn tool_output(data: &Value) -> (String, bool) {
    let result = data.get("result").filter(|r| !r.is_null());
    let error = data.get("error").filter(|e| !e.is_null());
    let mut out = match result {
        Some(Value::String(s)) => s.clone(),
        Some(r) => match r.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(c) if !c.is_null() => text::blocks_text(c),
            _ => str_of(r, "text_result_for_llm")
                .unwrap_or_default()
                .to_owned(),
        },
        None => String::new(),
    };
    if let Some(e) = error {
        let msg = match e {
            Value::String(s) => s.clone(),
            e => str_of(e, "message").map_or_else(|| e.to_string(), str::to_owned),
        };
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&msg);
    }
    let result_type = result.and_then(|r| str_of(r, "result_type"));
    let failed = data.get("success").and_then(Value::as_bool) == Some(false)
        || error.is_some()
        || matches!(
            result_type,
            Some("failure" | "error" | "rejected" | "denied")
        );
    (out, failed)
}

/// Tool arguments: an object, or (1.0.4x) a JSON string parsed when it is JSON.
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

/// The top-level `key: value` scalars of a flat YAML mapping such as `workspace.yaml`: quoted
/// values unquoted, block scalars (`|`, `>`) and indented continuation lines joined, comments
/// and nested or list values skipped. Enough for the few keys read here; not a YAML parser.
fn yaml_scalars(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = s.lines().collect();
    let indented = |l: &str| l.starts_with([' ', '\t']) || l.trim().is_empty();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if indented(line) || line.starts_with(['#', '-']) {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim().trim_matches(['"', '\'']).to_owned();
        let value = value.trim();
        let mut more = Vec::new();
        while i < lines.len() && indented(lines[i]) {
            more.push(lines[i]);
            i += 1;
        }
        if let Some(style) = value.chars().next().filter(|c| matches!(c, '|' | '>')) {
            while more.last().is_some_and(|l| l.trim().is_empty()) {
                more.pop();
            }
            let sep = if style == '>' { " " } else { "\n" };
            let body: Vec<&str> = more.iter().map(|l| l.trim()).collect();
            out.insert(key, body.join(sep));
            continue;
        }
        if value.is_empty() {
            // A nested mapping or list: not a scalar.
            continue;
        }
        let mut joined = value.to_owned();
        for l in more.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
            joined.push(' ');
            joined.push_str(l);
        }
        out.insert(key, unquote(&joined));
    }
    out
}

/// A YAML flow scalar's value: `'…'` (`''` is a quote), `"…"` (backslash escapes), or plain
/// (a ` #` starts a comment).
fn unquote(v: &str) -> String {
    if let Some(inner) = v.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        return inner.replace("''", "'");
    }
    if let Some(inner) = v.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        // YAML double-quoted escapes are a superset of JSON's; JSON covers the common ones.
        return serde_json::from_str::<String>(&format!("\"{inner}\""))
            .unwrap_or_else(|_| inner.to_owned());
    }
    match v.find(" #") {
        Some(i) => v[..i].trim_end().to_owned(),
        None => v.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_yaml_scalars() {
        let y = "id: 4ea1\ncwd: /private/tmp/x\nname: \"Fix the \\\"date\\\" test\"\n\
                 user_named: true # set by /rename\nsummary: |\n  line one\n  line two\n\n\
                 nested:\n  a: 1\nlist:\n- x\nquoted: 'it''s'\nlong: >-\n  folded\n  text\n\
                 created_at: 2026-10-09T13:51:58.059Z\n";
        let m = yaml_scalars(y);
        assert_eq!(m["id"], "4ea1");
        assert_eq!(m["cwd"], "/private/tmp/x");
        assert_eq!(m["name"], "Fix the \"date\" test");
        assert_eq!(m["user_named"], "true");
        assert_eq!(m["summary"], "line one\nline two");
        assert_eq!(m["quoted"], "it's");
        assert_eq!(m["long"], "folded text");
        assert_eq!(m["created_at"], "2026-10-09T13:51:58.059Z");
        assert!(!m.contains_key("nested") && !m.contains_key("list") && !m.contains_key("a"));
    }

    #[test]
    fn injected_user_messages_are_not_prompts() {
        let p = |d: Value, sub: bool| is_prompt(&d, sub);
        assert!(p(serde_json::json!({"content": "hi"}), false));
        assert!(p(
            serde_json::json!({"content": "hi", "source": "user"}),
            false
        ));
        assert!(!p(
            serde_json::json!({"content": "task", "source": "agent-x"}),
            false
        ));
        assert!(!p(serde_json::json!({"content": "task"}), true));
        assert!(!p(
            serde_json::json!({"content": "go", "source": "autopilot"}),
            false
        ));
        assert!(!p(
            serde_json::json!({"content": "<system_notification>done</system_notification>"}),
            false
        ));
        let cross = serde_json::json!({
            "content": "hello",
            "transformedContent": "<cross_session_message>\nfrom_session_id: a\nhello\n</cross_session_message>",
        });
        assert!(!p(cross, false));
        let quoting = serde_json::json!({
            "content": "why does <cross_session_message> appear?",
            "transformedContent": "<current_datetime>x</current_datetime>\n\nwhy does <cross_session_message> appear?",
        });
        assert!(p(quoting, false));
    }

    #[test]
    fn tool_output_shapes() {
        let new = serde_json::json!({"success": false, "error": {"message": "boom"}});
        assert_eq!(tool_output(&new), ("boom".to_owned(), true));
        let old =
            serde_json::json!({"result": {"result_type": "success", "text_result_for_llm": "ok"}});
        assert_eq!(tool_output(&old), ("ok".to_owned(), false));
        let old_fail =
            serde_json::json!({"result": {"result_type": "failure", "text_result_for_llm": "no"}});
        assert_eq!(tool_output(&old_fail), ("no".to_owned(), true));
    }
}
