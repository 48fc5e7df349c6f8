//! Qwen Code: one append-only JSONL file per session, Gemini-shaped messages in a Claude-like
//! envelope. FORMATS-MORE.md §5.
//!
//! **Where.** `~/.qwen/projects/<sanitized cwd>/chats/<sessionId>.jsonl` on Linux, macOS and
//! Windows (the home folder is `USERPROFILE` there). `QWEN_RUNTIME_DIR`, else `QWEN_HOME`,
//! replaces `~/.qwen` (both may start with `~`). The folder name is lossy (every character
//! outside `[A-Za-z0-9]` became `-`): the project is the records' `cwd`. Not transcripts:
//! `<id>.ledger.jsonl`, `<id>.runtime.json`, locks. Sub-agent transcripts, under
//! `<project>/subagents/<parent sessionId>/` (layout from FORMATS-MORE, not sampled), are read
//! as sub-agent sessions of that parent: their messages are sidechain, their "user" text is
//! the parent agent's task, never a prompt.
//!
//! **What is read.** Every line `{uuid, parentUuid, sessionId, timestamp, type, subtype?,
//! provenance, cwd, version, gitBranch?, model?, usageMetadata?, message{role, parts[]},
//! toolCallResult?, systemPayload?}`; one message per part (`#i` after the first), each record's
//! raw bytes on its first message.
//!
//! **Prompts.** `type: user` with `provenance: real_user` (or, in files written before
//! `provenance` existed, a `user` record without `subtype` that holds text). `provenance:
//! system` user records (task notifications, injected context) are Meta; slash commands are
//! `system/slash_command` records (Meta). The typed text is kept without the `@file` contents
//! Qwen appends after `--- Content from referenced files ---` (the raw record keeps them).
//!
//! **Tools.** `functionCall{id,name,args}` parts of assistant records; results are separate
//! `tool_result` records, possibly out of order, paired by `functionResponse.id`, else
//! `toolCallResult.callId`. A result is an error when its response holds `error` or
//! `toolCallResult.status` is `error`/`cancelled`. Tool names are kept as recorded (`replace`,
//! `search_file_content` and `task` are older names of `edit`, `grep_search` and `agent`).
//!
//! **Traps.** `system/ui_telemetry` records repeat tool arguments and even the answer text
//! (`response_text`): Meta with no text, so the answer is found once. `system/chat_compression`
//! is the compaction summary (the text of its `compressedHistory`, a `<state_snapshot>`); the
//! turns it replaces stay in the file and stay active. Rewinds are expressed through
//! `parentUuid`; the archive keeps the records in file order and does not project the active
//! branch (no sample shows a rewind).

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl, expand_home, parse_ts,
    str_of, string_of, tool_call_of, u64_of,
};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, ToolResult,
    Usage,
};
use crate::text;

const AGENT: &str = "qwen";

pub struct QwenAdapter;

impl ConversationAdapter for QwenAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let home = env
            .var("QWEN_RUNTIME_DIR")
            .or_else(|| env.var("QWEN_HOME"))
            .map_or_else(|| env.home.join(".qwen"), |d| expand_home(d, env));
        vec![home.join("projects")]
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !name.ends_with(".jsonl") || name.ends_with(".ledger.jsonl") {
            return false;
        }
        let parts = normal_parts(rel);
        match parts.get(1).copied() {
            Some("chats") => parts.len() == 3,
            Some("subagents") => parts.len() >= 4,
            _ => false,
        }
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
        let (mut out, st) = drive_jsonl::<State>(path, cursor, max_bytes, |st, emit, rec| {
            handle(&ctx, st, emit, rec, &mut info);
        })?;
        if let Some(sid) = st.session_id {
            info.session_id = sid;
            info.is_subagent = ctx.parent.is_some();
            info.parent_session_id.clone_from(&ctx.parent);
            if ctx.parent.is_some() {
                // A sub-agent never names its parent's title.
                info.title = None;
            }
            out.sessions.push(info);
        }
        Ok(out)
    }
}

fn normal_parts(rel: &Path) -> Vec<&str> {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect()
}

/// What the file's place says about its session.
struct FileContext {
    stem: String,
    /// `<project>/subagents/<parent>/…`: the parent session of a sub-agent transcript.
    parent: Option<String>,
}

impl FileContext {
    fn new(root: &Path, path: &Path) -> Self {
        let rel = path.strip_prefix(root).unwrap_or(path);
        let parts = normal_parts(rel);
        let parent =
            (parts.get(1) == Some(&"subagents") && parts.len() >= 4).then(|| parts[2].to_owned());
        FileContext {
            stem: path
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or_default()
                .to_owned(),
            parent,
        }
    }
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    session_id: Option<String>,
    prompt: u32,
}

fn handle(
    ctx: &FileContext,
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
) {
    let v = &rec.value;
    if st.session_id.is_none() {
        let own = string_of(v, "sessionId").filter(|s| ctx.parent.as_ref() != Some(s));
        st.session_id = Some(own.unwrap_or_else(|| ctx.stem.clone()));
    }
    let sid = st.session_id.clone().unwrap_or_default();
    let ts = v.get("timestamp").and_then(parse_ts);
    let cwd = string_of(v, "cwd");
    let branch = string_of(v, "gitBranch");
    let model = string_of(v, "model");
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
    let key = string_of(v, "uuid").unwrap_or_else(|| format!("L{}", rec.line));
    let ty = str_of(v, "type").unwrap_or("");
    let subtype = str_of(v, "subtype");
    let parts: &[Value] = v
        .get("message")
        .and_then(|m| m.get("parts"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    if v.get("message").is_some_and(|m| !m.is_object()) {
        emit.note(&rec, "`message` is not an object");
    }

    let sidechain = ctx.parent.is_some();
    let number = st.prompt;
    let new = |i: usize, role: Role, kind: MessageKind, body: String, number: u32| {
        let id = if i == 0 {
            key.clone()
        } else {
            format!("{key}#{i}")
        };
        let mut m = blank(AGENT, &sid, id, role, kind);
        m.parent_id = string_of(v, "parentUuid");
        m.prompt_number = number;
        m.timestamp = ts;
        m.cwd.clone_from(&cwd);
        m.git_branch.clone_from(&branch);
        m.flags.sidechain = sidechain;
        if sidechain {
            m.agent_id = Some(ctx.stem.clone());
        }
        m.text = body;
        m
    };
    let has_responses = parts.iter().any(|p| p.get("functionResponse").is_some());

    match ty {
        "user" if !has_responses => {
            let (body, _) = parts_text(parts);
            let typed = text::strip_file_expansion(&body);
            let provenance = str_of(v, "provenance");
            let real = match provenance {
                Some(p) => p == "real_user",
                None => subtype.is_none(),
            };
            if real && !sidechain && !typed.trim().is_empty() {
                st.prompt += 1;
                if st.prompt == 1 {
                    info.title = Some((TitleSource::FirstPrompt, text::prompt_title(&typed)));
                }
                emit.push(new(
                    0,
                    Role::User,
                    MessageKind::UserPrompt,
                    typed,
                    st.prompt,
                ));
            } else {
                emit.push(new(0, Role::User, MessageKind::Meta, body, number));
            }
        }
        "assistant" => {
            if model.is_some() && !sidechain {
                info.model.clone_from(&model);
            }
            let mut out = assistant_parts(parts, &|i, role, kind, body| {
                new(i, role, kind, body, number)
            });
            for m in &mut out {
                m.model.clone_from(&model);
            }
            if let (Some(u), Some(first)) = (
                v.get("usageMetadata").filter(|u| u.is_object()),
                out.first_mut(),
            ) {
                first.usage = Some(Usage {
                    // Tool-use prompt tokens are prompt tokens too, billed as input.
                    input_tokens: u64_of(u, "promptTokenCount")
                        .saturating_add(u64_of(u, "toolUsePromptTokenCount")),
                    output_tokens: u64_of(u, "candidatesTokenCount"),
                    cache_read_tokens: u64_of(u, "cachedContentTokenCount"),
                    cache_creation_tokens: 0,
                    reasoning_tokens: u64_of(u, "thoughtsTokenCount"),
                });
                first.usage_key = Some(key.clone());
            }
            out.into_iter().for_each(|m| emit.push(m));
        }
        // `tool_result` records, and `user` records carrying function responses.
        "tool_result" | "user" => {
            let tcr = v.get("toolCallResult").unwrap_or(&Value::Null);
            let status_failed = matches!(str_of(tcr, "status"), Some("error" | "cancelled"));
            let fallback_id = string_of(tcr, "callId");
            let mut pushed = false;
            for (i, p) in parts.iter().enumerate() {
                let (role, kind, body) = match p.get("functionResponse") {
                    Some(fr) => {
                        let (body, failed) = response_output(fr);
                        let mut m = new(i, Role::Tool, MessageKind::ToolResult, body, number);
                        m.tool_result = Some(ToolResult {
                            call_id: string_of(fr, "id").or_else(|| fallback_id.clone()),
                            is_error: failed || status_failed,
                        });
                        emit.push(m);
                        pushed = true;
                        continue;
                    }
                    None => (
                        Role::User,
                        MessageKind::Meta,
                        parts_text(std::slice::from_ref(p)).0,
                    ),
                };
                emit.push(new(i, role, kind, body, number));
                pushed = true;
            }
            if !pushed {
                // Only the envelope's result: its display text.
                let body = match tcr.get("resultDisplay") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(d) => str_of(d, "fileDiff").map_or_else(|| d.to_string(), str::to_owned),
                };
                let mut m = new(0, Role::Tool, MessageKind::ToolResult, body, number);
                m.tool_result = Some(ToolResult {
                    call_id: fallback_id,
                    is_error: status_failed,
                });
                emit.push(m);
            }
        }
        "system" => {
            let payload = v.get("systemPayload").unwrap_or(&Value::Null);
            match subtype {
                Some("chat_compression") => {
                    let body = payload
                        .get("compressedHistory")
                        .and_then(Value::as_array)
                        .map(|h| {
                            h.iter()
                                .filter_map(|c| c.get("parts").and_then(Value::as_array))
                                .map(|p| parts_text(p).0)
                                .filter(|t| !t.is_empty())
                                .collect::<Vec<_>>()
                                .join("\n")
                        })
                        .unwrap_or_default();
                    emit.push(new(
                        0,
                        Role::System,
                        MessageKind::CompactionSummary,
                        body,
                        number,
                    ));
                }
                Some("slash_command") => {
                    let body = str_of(payload, "rawCommand").unwrap_or_default().to_owned();
                    emit.push(new(0, Role::User, MessageKind::Meta, body, number));
                }
                Some("notification") => {
                    let body = str_of(payload, "displayText")
                        .unwrap_or_default()
                        .to_owned();
                    emit.push(new(0, Role::System, MessageKind::Meta, body, number));
                }
                // `ui_telemetry` (repeats arguments and answers), `attribution_snapshot`, …
                _ => emit.push(new(
                    0,
                    Role::System,
                    MessageKind::Meta,
                    String::new(),
                    number,
                )),
            }
        }
        _ => emit.push(new(
            0,
            Role::System,
            MessageKind::Meta,
            String::new(),
            number,
        )),
    }
}

/// The text of parts, without thought parts; `(text, thoughts)`. Attachments are marked.
fn parts_text(parts: &[Value]) -> (String, String) {
    let mut t = String::new();
    let mut th = Vec::new();
    for p in parts {
        match p.get("text").and_then(Value::as_str) {
            Some(s) if p.get("thought").and_then(Value::as_bool) == Some(true) => {
                th.push(s.to_owned());
            }
            Some(s) => t.push_str(s),
            None if p.get("inlineData").is_some() || p.get("fileData").is_some() => {
                if !t.is_empty() && !t.ends_with('\n') {
                    t.push('\n');
                }
                t.push_str("[attachment]");
            }
            None => {}
        }
    }
    (t, th.join("\n"))
}

/// A function response's model-facing output, and whether it is an error.
fn response_output(fr: &Value) -> (String, bool) {
    let r = fr.get("response").unwrap_or(&Value::Null);
    let as_text = |x: &Value| x.as_str().map_or_else(|| x.to_string(), str::to_owned);
    match r {
        Value::Object(o) => match (o.get("output"), o.get("error")) {
            (_, Some(e)) if !e.is_null() => (as_text(e), true),
            (Some(out), _) => (as_text(out), false),
            _ => (r.to_string(), false),
        },
        Value::Null => (String::new(), false),
        other => (as_text(other), false),
    }
}

/// One message per part of an assistant (`model`) record.
fn assistant_parts(
    parts: &[Value],
    new: &dyn Fn(usize, Role, MessageKind, String) -> ParsedMessage,
) -> Vec<ParsedMessage> {
    if parts.is_empty() {
        return vec![new(0, Role::Assistant, MessageKind::Meta, String::new())];
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if let Some(fc) = p.get("functionCall") {
                return tool_call_of(fc, "args", "id", |text| {
                    new(i, Role::Assistant, MessageKind::ToolCall, text)
                });
            }
            match p.get("text").and_then(Value::as_str) {
                Some(s) if p.get("thought").and_then(Value::as_bool) == Some(true) => {
                    new(i, Role::Assistant, MessageKind::Thinking, s.to_owned())
                }
                Some(s) => new(i, Role::Assistant, MessageKind::AssistantText, s.to_owned()),
                None => new(
                    i,
                    Role::Assistant,
                    MessageKind::Meta,
                    parts_text(std::slice::from_ref(p)).0,
                ),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_follow_the_override_variables() {
        let mut env = Env {
            home: PathBuf::from("/home/u"),
            ..Default::default()
        };
        let a = QwenAdapter;
        assert_eq!(
            a.default_roots(&env),
            vec![PathBuf::from("/home/u/.qwen/projects")]
        );
        env.vars.insert("QWEN_HOME".into(), "~/q".into());
        assert_eq!(
            a.default_roots(&env),
            vec![PathBuf::from("/home/u/q/projects")]
        );
        env.vars.insert("QWEN_RUNTIME_DIR".into(), "/rt".into());
        assert_eq!(a.default_roots(&env), vec![PathBuf::from("/rt/projects")]);
    }

    #[test]
    fn only_chat_files_and_sub_agent_files_are_transcripts() {
        let a = QwenAdapter;
        let root = Path::new("/r");
        assert!(a.is_transcript(root, Path::new("/r/-p/chats/abc.jsonl")));
        assert!(!a.is_transcript(root, Path::new("/r/-p/chats/abc.ledger.jsonl")));
        assert!(!a.is_transcript(root, Path::new("/r/-p/chats/abc.runtime.json")));
        assert!(!a.is_transcript(root, Path::new("/r/-p/chats/x/abc.jsonl")));
        assert!(a.is_transcript(root, Path::new("/r/-p/subagents/abc/agent-1.jsonl")));
    }

    #[test]
    fn file_expansions_are_not_part_of_the_prompt() {
        let s = "explain @a.rs\n--- Content from referenced files ---\nContent from @a.rs:\nfn x(){}\n--- End of content ---";
        assert_eq!(text::strip_file_expansion(s), "explain @a.rs");
    }
}
