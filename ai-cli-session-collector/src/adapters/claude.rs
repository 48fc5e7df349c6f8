//! Claude Code: `~/.claude/projects/<project>/<session>.jsonl`, with sub-agents inline
//! (≤1.0), in `agent-<id>.jsonl` beside the session (2.0) or in `<session>/subagents/` (2.1).
//! FORMATS.md §1.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl_as, files_under,
    parse_ts, str_of, string_of,
};
use crate::loose::{Count, Flag, NotNull, Obj, Str, view};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, ToolCall,
    ToolResult, Usage,
};
use crate::text;

const AGENT: &str = "claude";

pub struct ClaudeAdapter;

/// Files under a project folder that are not transcripts, and folders that hold none.
const NOT_TRANSCRIPTS: &[&str] = &["journal.jsonl", "history.jsonl"];
const NOT_TRANSCRIPT_DIRS: &[&str] = &[
    "tool-results",
    "workflows",
    "memory",
    "file-history",
    "todos",
    "plans",
];

/// How a file relates to its session.
#[derive(Debug, Clone, PartialEq)]
enum FileRole {
    /// `<session>.jsonl`: the session's own transcript.
    Main { stem: String },
    /// A sub-agent transcript; its lines carry the parent's `sessionId`.
    SubAgent {
        agent_id: String,
        parent_dir_session: Option<String>,
    },
}

fn file_role(path: &Path) -> FileRole {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned();
    if let Some(id) = stem.strip_prefix("agent-") {
        let parent_dir_session = path
            .parent()
            .filter(|p| p.file_name().is_some_and(|n| n == "subagents"))
            .and_then(Path::parent)
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .map(str::to_owned);
        FileRole::SubAgent {
            agent_id: id.to_owned(),
            parent_dir_session,
        }
    } else {
        FileRole::Main { stem }
    }
}

fn looks_like_uuid(s: &str) -> bool {
    s.len() == 36 && s.bytes().filter(|&b| b == b'-').count() == 4
}

impl ConversationAdapter for ClaudeAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        if let Some(dirs) = env.var("CLAUDE_CONFIG_DIR") {
            return dirs
                .split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(|d| PathBuf::from(d).join("projects"))
                .collect();
        }
        vec![
            env.home.join(".claude").join("projects"),
            env.home.join(".config").join("claude").join("projects"),
        ]
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name.ends_with(".jsonl")
            && !NOT_TRANSCRIPTS.contains(&name)
            && !rel.components().any(|c| {
                c.as_os_str()
                    .to_str()
                    .is_some_and(|c| NOT_TRANSCRIPT_DIRS.contains(&c))
            })
    }

    fn discover(&self, root: &Path) -> Vec<PathBuf> {
        let mut files = files_under(root, |p| self.is_transcript(root, p));
        // Sessions before their sub-agents, so sub-agent lines find their parent's talks.
        files.sort_by_key(|p| (matches!(file_role(p), FileRole::SubAgent { .. }), p.clone()));
        files
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let role = file_role(path);
        let mut info = SessionInfo::default();
        let (mut out, st) =
            drive_jsonl_as::<State, Line>(path, cursor, max_bytes, |st, emit, rec| {
                handle(&role, st, emit, rec, &mut info);
            })?;
        if let Some(sid) = st.session_id {
            match &role {
                FileRole::SubAgent { .. } => {
                    // A sub-agent never sets its parent's model or title.
                    info.model = None;
                    info.title = None;
                }
                // Only `<session>.jsonl` is the session's own: a copy under another name
                // (`backup.jsonl`, `<session> (1).jsonl`) reports on it like a sub-agent's
                // file, or two files would take the session's path from each other.
                FileRole::Main { stem } => info.own_file = *stem == sid,
            }
            info.session_id = sid;
            out.sessions.push(info);
        }
        Ok(out)
    }
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    session_id: Option<String>,
    prompt: u32,
    /// Prompt uuid → its number: a line written twice is one prompt.
    counted: HashMap<String, u32>,
}

view! {
    /// What the adapter reads of a record. The rest (the copy of a tool's output in
    /// `toolUseResult`, `version`, `userType`, …) is checked as JSON but never built into a
    /// tree: the transcripts are large and this runs for every line.
    struct Line {
        "type" => ty: Str,
        "sessionId" => session_id: Str,
        "uuid" => uuid: Str,
        "parentUuid" => parent_uuid: Str,
        "logicalParentUuid" => logical_parent_uuid: Str,
        "timestamp" => timestamp: Option<Value>,
        "cwd" => cwd: Str,
        "gitBranch" => git_branch: Str,
        "isSidechain" => is_sidechain: Flag,
        "agentId" => agent_id: Str,
        "requestId" => request_id: Str,
        "message" => message: Obj<Message>,
        /// `system` and `queue-operation` text.
        "content" => content: Str,
        "subtype" => subtype: Str,
        "summary" => summary: Str,
        "customTitle" => custom_title: Str,
        "aiTitle" => ai_title: Str,
        "agentName" => agent_name: Str,
        "isMeta" => is_meta: Flag,
        "isVisibleInTranscriptOnly" => is_visible_in_transcript_only: Flag,
        "isCompactSummary" => is_compact_summary: Flag,
        "isApiErrorMessage" => is_api_error_message: Flag,
        "toolUseResult" => tool_use_result: NotNull,
        /// Who sent a `user` line (2.1.x): a person, or another agent (`from`, `senderTaskId`).
        "origin" => origin: Obj<Origin>,
    }
}

view! {
    struct Origin {
        "from" => from: Str,
        "senderTaskId" => sender_task_id: Str,
    }
}

view! {
    /// `message` of a `user` or `assistant` record.
    struct Message {
        "model" => model: Str,
        "id" => id: Str,
        "usage" => usage: Obj<MessageUsage>,
        "content" => content: Option<Value>,
    }
}

view! {
    struct MessageUsage {
        "input_tokens" => input_tokens: Count,
        "output_tokens" => output_tokens: Count,
        "cache_read_input_tokens" => cache_read_input_tokens: Count,
        "cache_creation_input_tokens" => cache_creation_input_tokens: Count,
    }
}

fn handle(
    role: &FileRole,
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_, Line>,
    info: &mut SessionInfo,
) {
    let v = &rec.value;
    let ty = v.ty.get().unwrap_or("");
    let line_sid = v.session_id.get().filter(|s| !s.is_empty());
    if st.session_id.is_none() {
        st.session_id = match role {
            FileRole::Main { stem } if looks_like_uuid(stem) => Some(stem.clone()),
            FileRole::Main { stem } => Some(line_sid.unwrap_or(stem).to_owned()),
            FileRole::SubAgent {
                parent_dir_session: Some(p),
                ..
            } => Some(p.clone()),
            FileRole::SubAgent { .. } => line_sid.map(str::to_owned),
        };
        if st.session_id.is_none() {
            // A 2.0 sub-agent file whose first lines carry no session id: keep them under the
            // file's own name rather than dropping them.
            st.session_id = Some(format!("claude-agent-file-{}", rec.line));
        }
    }
    let sid = st.session_id.clone().unwrap_or_default();
    let (sub_agent_file, file_agent_id) = match role {
        FileRole::SubAgent { agent_id, .. } => (true, Some(agent_id.clone())),
        FileRole::Main { .. } => (false, None),
    };

    let uuid = v.uuid.non_empty();
    let base_id = uuid.clone().unwrap_or_else(|| match role {
        FileRole::Main { stem } => format!("{stem}:L{}", rec.line),
        FileRole::SubAgent { agent_id, .. } => format!("agent-{agent_id}:L{}", rec.line),
    });
    let ts = v.timestamp.as_ref().and_then(parse_ts);
    let cwd = v.cwd.non_empty();
    let branch = v.git_branch.non_empty();
    let sidechain = sub_agent_file || v.is_sidechain.0;
    let agent_id = v.agent_id.non_empty().or(file_agent_id);

    if let Some(t) = ts {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    if info.project_path.is_none() {
        info.project_path.clone_from(&cwd);
    }
    if info.git_branch.is_none() {
        info.git_branch.clone_from(&branch);
    }

    let prompt_now = if sub_agent_file { 0 } else { st.prompt };
    let mk = |id: String, role: Role, kind: MessageKind, prompt: u32| -> ParsedMessage {
        let mut m = blank(AGENT, &sid, id, role, kind);
        m.parent_id = v
            .parent_uuid
            .non_empty()
            .or_else(|| v.logical_parent_uuid.non_empty());
        m.prompt_number = prompt;
        m.timestamp = ts;
        m.cwd.clone_from(&cwd);
        m.git_branch.clone_from(&branch);
        m.flags.sidechain = sidechain;
        m.agent_id.clone_from(&agent_id);
        m
    };
    let block_id = |i: usize| {
        if i == 0 {
            base_id.clone()
        } else {
            format!("{base_id}#{i}")
        }
    };

    match ty {
        "user" | "assistant" => {
            let Some(msg) = v.message.object() else {
                emit.skip(&rec, format!("`{ty}` record has no `message` object"));
                return;
            };
            let content = match &msg.content {
                Some(Value::String(s)) => {
                    Cow::Owned(vec![serde_json::json!({"type": "text", "text": s})])
                }
                Some(Value::Array(a)) => Cow::Borrowed(a.as_slice()),
                None | Some(Value::Null) => Cow::Borrowed(&[][..]),
                Some(_) => {
                    emit.skip(
                        &rec,
                        format!(
                            "`{ty}` record has a `message.content` that is neither text nor a list"
                        ),
                    );
                    return;
                }
            };
            if ty == "user" {
                user_record(
                    st, emit, v, &content, sidechain, prompt_now, info, &mk, &block_id, &base_id,
                );
            } else {
                assistant_record(
                    emit,
                    v,
                    msg,
                    &content,
                    prompt_now,
                    info,
                    sub_agent_file,
                    &mk,
                    &block_id,
                );
            }
        }
        _ => {
            let (role, text) = match ty {
                "system" => (
                    Role::System,
                    v.content
                        .get()
                        .map(str::to_owned)
                        .or_else(|| v.subtype.non_empty())
                        .unwrap_or_default(),
                ),
                "summary" => {
                    let s = v.summary.get().unwrap_or_default().to_owned();
                    offer_title(info, TitleSource::Summary, &s);
                    (Role::System, s)
                }
                "custom-title" => {
                    let s = v.custom_title.get().unwrap_or_default().to_owned();
                    offer_title(info, TitleSource::Custom, &s);
                    (Role::System, s)
                }
                "ai-title" | "agent-name" => {
                    let title = if ty == "ai-title" {
                        &v.ai_title
                    } else {
                        &v.agent_name
                    };
                    let s = title.get().unwrap_or_default().to_owned();
                    offer_title(info, TitleSource::Generated, &s);
                    (Role::System, s)
                }
                "queue-operation" => (Role::User, v.content.get().unwrap_or_default().to_owned()),
                _ => (Role::System, String::new()),
            };
            let mut m = mk(base_id.clone(), role, MessageKind::Meta, prompt_now);
            m.text = text;
            emit.push(m);
        }
    }
}

fn offer_title(info: &mut SessionInfo, src: TitleSource, t: &str) {
    let t = t.trim();
    if t.is_empty() {
        return;
    }
    let better = match &info.title {
        None => true,
        // Custom and generated titles can be renamed later: the latest wins. Summaries: first.
        Some((cur, _)) => src > *cur || (src == *cur && src >= TitleSource::Generated),
    };
    if better {
        info.title = Some((src, text::truncate_chars(t, 200)));
    }
}

#[allow(clippy::too_many_arguments)]
fn user_record(
    st: &mut State,
    emit: &mut Emit,
    v: &Line,
    content: &[Value],
    sidechain: bool,
    prompt_now: u32,
    info: &mut SessionInfo,
    mk: &dyn Fn(String, Role, MessageKind, u32) -> ParsedMessage,
    block_id: &dyn Fn(usize) -> String,
    base_id: &str,
) {
    let has_results = content
        .iter()
        .any(|b| str_of(b, "type") == Some("tool_result"));
    if has_results || v.tool_use_result.0 && !content.is_empty() {
        // A tool-result carrier: one message per result block, other blocks as meta.
        for (i, b) in content.iter().enumerate() {
            if str_of(b, "type") == Some("tool_result") {
                let mut m = mk(block_id(i), Role::Tool, MessageKind::ToolResult, prompt_now);
                m.text = text::blocks_text(b.get("content").unwrap_or(&Value::Null));
                m.tool_result = Some(ToolResult {
                    call_id: string_of(b, "tool_use_id"),
                    is_error: b.get("is_error").and_then(Value::as_bool) == Some(true),
                });
                emit.push(m);
            } else {
                let mut m = mk(block_id(i), Role::User, MessageKind::Meta, prompt_now);
                m.text = text::blocks_text(b);
                emit.push(m);
            }
        }
        if content.is_empty() {
            emit.push(mk(
                block_id(0),
                Role::Tool,
                MessageKind::ToolResult,
                prompt_now,
            ));
        }
        return;
    }
    let body = text::blocks_text_of(content);
    if v.is_compact_summary.0 {
        let mut m = mk(
            block_id(0),
            Role::User,
            MessageKind::CompactionSummary,
            prompt_now,
        );
        m.text = body;
        emit.push(m);
        return;
    }
    // Sent by another agent (a teammate's message, a finished background task) or by a hook,
    // not typed by the person.
    let from_agent = v
        .origin
        .object()
        .is_some_and(|o| o.from.non_empty().is_some() || o.sender_task_id.non_empty().is_some());
    let is_prompt = !sidechain
        && !from_agent
        && !text::is_claude_notice(&body)
        && !v.is_meta.0
        && !v.is_visible_in_transcript_only.0
        && text::has_content_beyond_wrappers(content)
        && !text::is_claude_envelope(&body);
    let (kind, number) = if is_prompt {
        let n = match st.counted.get(base_id) {
            Some(&n) => n,
            None => {
                st.prompt += 1;
                st.counted.insert(base_id.to_owned(), st.prompt);
                st.prompt
            }
        };
        if n == 1 {
            offer_title(info, TitleSource::FirstPrompt, &text::prompt_title(&body));
        }
        (MessageKind::UserPrompt, n)
    } else {
        (MessageKind::Meta, prompt_now)
    };
    let mut m = mk(block_id(0), Role::User, kind, number);
    m.text = body;
    emit.push(m);
}

#[allow(clippy::too_many_arguments)]
fn assistant_record(
    emit: &mut Emit,
    v: &Line,
    msg: &Message,
    content: &[Value],
    prompt_now: u32,
    info: &mut SessionInfo,
    sub_agent_file: bool,
    mk: &dyn Fn(String, Role, MessageKind, u32) -> ParsedMessage,
    block_id: &dyn Fn(usize) -> String,
) {
    let model = msg.model.non_empty();
    let synthetic = model.as_deref() == Some("<synthetic>") || v.is_api_error_message.0;
    let model = model.filter(|m| m != "<synthetic>");
    if !sub_agent_file && model.is_some() {
        info.model.clone_from(&model);
    }
    let usage = msg.usage.object().map(|u| Usage {
        input_tokens: u.input_tokens.0,
        output_tokens: u.output_tokens.0,
        cache_read_tokens: u.cache_read_input_tokens.0,
        cache_creation_tokens: u.cache_creation_input_tokens.0,
        reasoning_tokens: 0,
    });
    let usage_key = msg
        .id
        .non_empty()
        .or_else(|| v.request_id.non_empty())
        .or_else(|| v.uuid.non_empty());
    let mut first = true;
    let mut push = |emit: &mut Emit, mut m: ParsedMessage| {
        m.model.clone_from(&model);
        if first && !synthetic {
            m.usage = usage;
            m.usage_key.clone_from(&usage_key);
        }
        first = false;
        emit.push(m);
    };
    if content.is_empty() {
        push(
            emit,
            mk(block_id(0), Role::Assistant, MessageKind::Meta, prompt_now),
        );
        return;
    }
    for (i, b) in content.iter().enumerate() {
        let bt = str_of(b, "type").unwrap_or("");
        let mut m = match bt {
            "text" if !synthetic => {
                let mut m = mk(
                    block_id(i),
                    Role::Assistant,
                    MessageKind::AssistantText,
                    prompt_now,
                );
                m.text = str_of(b, "text").unwrap_or_default().to_owned();
                m
            }
            "thinking" | "redacted_thinking" => {
                let mut m = mk(
                    block_id(i),
                    Role::Assistant,
                    MessageKind::Thinking,
                    prompt_now,
                );
                m.text = str_of(b, "thinking").unwrap_or_default().to_owned();
                m
            }
            "tool_use" | "server_tool_use" => {
                let mut m = mk(
                    block_id(i),
                    Role::Assistant,
                    MessageKind::ToolCall,
                    prompt_now,
                );
                let name = str_of(b, "name").unwrap_or("unknown").to_owned();
                let input = b.get("input").cloned().unwrap_or(Value::Null);
                m.text = text::tool_call_text(&name, &input);
                m.tool_call = Some(ToolCall {
                    name,
                    input,
                    call_id: string_of(b, "id"),
                });
                m
            }
            "web_search_tool_result" => {
                let mut m = mk(block_id(i), Role::Tool, MessageKind::ToolResult, prompt_now);
                m.text = text::blocks_text(b.get("content").unwrap_or(&Value::Null));
                m.tool_result = Some(ToolResult {
                    call_id: string_of(b, "tool_use_id"),
                    is_error: false,
                });
                m
            }
            _ => {
                let mut m = mk(block_id(i), Role::Assistant, MessageKind::Meta, prompt_now);
                m.text = text::blocks_text(b);
                m
            }
        };
        if m.kind == MessageKind::Meta && synthetic {
            m.text = str_of(b, "text").unwrap_or_default().to_owned();
        }
        push(emit, m);
    }
}

/// Claude Code deletes transcripts older than this many days unless `cleanupPeriodDays` in its
/// settings says otherwise.
pub const DEFAULT_CLEANUP_DAYS: i64 = 30;

/// Claude Code's transcript retention on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleanup {
    /// The settings file consulted.
    pub settings: PathBuf,
    /// `cleanupPeriodDays` as set, or `None` when the default applies.
    pub configured: Option<i64>,
}

impl Cleanup {
    /// The retention in days that applies.
    pub fn days(&self) -> i64 {
        self.configured.unwrap_or(DEFAULT_CLEANUP_DAYS)
    }
}

/// Reads `cleanupPeriodDays` from each Claude Code config folder that exists
/// (`$CLAUDE_CONFIG_DIR`, else `~/.claude` and `~/.config/claude`).
pub fn cleanup_settings(env: &Env) -> Vec<Cleanup> {
    ClaudeAdapter
        .default_roots(env)
        .into_iter()
        .filter_map(|projects| projects.parent().map(Path::to_owned))
        .filter(|dir| dir.is_dir())
        .map(|dir| {
            let settings = dir.join("settings.json");
            let configured = std::fs::read(&settings)
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|v| v.get("cleanupPeriodDays").and_then(|d| d.as_i64()));
            Cleanup {
                settings,
                configured,
            }
        })
        .collect()
}
