//! Amp (Sourcegraph), legacy local threads, FORMATS-MORE §13.
//!
//! **Where.** One `T-<uuid v7>.json` per thread in `$XDG_DATA_HOME/amp/threads` (else
//! `~/.local/share/amp/threads`) on Linux and macOS, `%LOCALAPPDATA%\amp\threads` on Windows.
//! Builds since 2026-03-31 keep threads on the server only; what is left on disk is read.
//!
//! **What is read.** The whole thread document, rewritten on every change (`v` counts the
//! revisions). `messages[]` are `{role, messageId, content[]}`: user prompts add `meta.sentAt`
//! (epoch ms), assistant messages `usage{model, …tokens, timestamp}` and `state`. Blocks:
//! `text`, `thinking`, `tool_use{id, name, input}`, `tool_result{toolUseID, run{status,
//! result}}`; `role: "info"` messages with a `summary` block (thread compaction) are compaction
//! summaries. The project is the first `env.initial.trees[].uri` (`file://…`), the title the
//! thread's `title`.
//!
//! **Ids.** A message's id is its `messageId`, an integer the thread hands out from its own
//! `nextMessageId` counter, which is stored in the file and only grows: an id is not an index
//! (a message edited or removed later does not renumber the ones after it, and new messages get
//! new numbers), so it is stable across rewrites. Blocks are `<messageId>#<block>`.
//!
//! **Prompts.** A `role: "user"` message with a `text` block; its text blocks together are one
//! prompt. Tool results also come as `role: "user"` messages and are never prompts.
//!
//! **Tools.** `tool_use.id` pairs with `tool_result.toolUseID`; a result whose `run.status` is
//! `error`, `cancelled` or `rejected-by-user` is an error.
//!
//! **Trap.** The file holds device identifiers (`env.initial.platform.installationID`,
//! `deviceFingerprint`). The thread's fields besides `messages` are kept on one `thread` Meta
//! message, without those two.

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

const AGENT: &str = "amp";

/// Identifiers of the user's machine in `env.initial.platform`, left out of the archive.
const DEVICE_IDS: &[&str] = &["installationID", "deviceFingerprint"];

pub struct AmpAdapter;

impl ConversationAdapter for AmpAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let data = env
            .var("XDG_DATA_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join(".local").join("share"));
        let local = env
            .var("LOCALAPPDATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join("AppData").join("Local"));
        vec![
            data.join("amp").join("threads"),
            local.join("amp").join("threads"),
        ]
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        rel.components().count() == 1 && name.starts_with("T-") && name.ends_with(".json")
    }

    fn source_kind(&self, _path: &Path) -> SourceKind {
        SourceKind::Document
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        _max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("thread")
            .to_owned();
        let mut info: Option<SessionInfo> = None;
        let (mut out, ()) = drive_document::<()>(path, cursor, |_, emit, bytes| {
            read_thread(&stem, emit, bytes, &mut info)
        })?;
        out.sessions.extend(info);
        Ok(out)
    }
}

fn read_thread(stem: &str, emit: &mut Emit, bytes: &[u8], info: &mut Option<SessionInfo>) -> Read {
    let doc = match decode_document(bytes) {
        Ok(v) => v,
        Err(r) => return r,
    };
    let Some(o) = doc.as_object() else {
        return Read::Bad("thread is not a JSON object".into());
    };
    let sid = string_of(&doc, "id").unwrap_or_else(|| stem.to_owned());
    let cwd = project_of(&doc);
    let mut si = SessionInfo {
        session_id: sid.clone(),
        project_path: cwd.clone(),
        title: string_of(&doc, "title")
            .map(|t| (TitleSource::Generated, text::truncate_chars(t.trim(), 200))),
        started_at: doc.get("created").and_then(parse_ts),
        ..Default::default()
    };
    si.updated_at = si.started_at;

    // The thread's own fields ride on one meta message.
    let mut thread = o.clone();
    thread.remove("messages");
    if let Some(p) = thread
        .get_mut("env")
        .and_then(|e| e.get_mut("initial"))
        .and_then(|i| i.get_mut("platform"))
        .and_then(Value::as_object_mut)
    {
        for k in DEVICE_IDS {
            p.remove(*k);
        }
    }
    let mut m = blank(
        AGENT,
        &sid,
        "thread".into(),
        Role::System,
        MessageKind::Meta,
    );
    m.cwd.clone_from(&cwd);
    m.text = si
        .title
        .as_ref()
        .map(|(_, t)| t.clone())
        .unwrap_or_default();
    m.raw = Some(serde_json::to_vec(&Value::Object(thread)).unwrap_or_default());
    emit.push(m);

    let mut t = Thread {
        sid: &sid,
        cwd,
        prompt: 0,
        info: &mut si,
    };
    match o.get("messages") {
        Some(Value::Array(list)) => {
            for (i, msg) in list.iter().enumerate() {
                let before = emit.out.messages.len();
                t.message(emit, i, msg);
                if let Some(first) = emit.out.messages.get_mut(before) {
                    first.raw = Some(serde_json::to_vec(msg).unwrap_or_default());
                }
            }
        }
        None | Some(Value::Null) => {}
        Some(_) => emit.issue(0, "thread `messages` is not a list", true),
    }
    if si.title.is_none() {
        si.title = emit
            .out
            .messages
            .iter()
            .find(|m| m.kind == MessageKind::UserPrompt)
            .map(|m| (TitleSource::FirstPrompt, text::prompt_title(&m.text)));
    }
    *info = Some(si);
    Read::Whole
}

/// The JSON value of the whole thread: half a document is still being written.
fn decode_document(bytes: &[u8]) -> Result<Value, Read> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) => Ok(v),
        Err(e) if e.is_eof() => Err(Read::Incomplete),
        Err(_) => reader::decode_json(bytes)
            .map(|d| d.value)
            .map_err(|e| Read::Bad(e.to_string())),
    }
}

/// The first workspace tree's `file://` URI as a path.
fn project_of(doc: &Value) -> Option<String> {
    let trees = doc.get("env")?.get("initial")?.get("trees")?.as_array()?;
    trees.iter().find_map(|t| {
        let uri = str_of(t, "uri")?;
        let rest = uri.strip_prefix("file://")?;
        let rest = rest.strip_prefix("localhost").unwrap_or(rest);
        let path = percent_decode(rest);
        // `file:///C:/x` on Windows.
        let path = match path.as_bytes() {
            [b'/', d, b':', ..] if d.is_ascii_alphabetic() => path[1..].to_owned(),
            _ => path,
        };
        Some(path).filter(|p| !p.is_empty())
    })
}

/// `%XX` escapes of a URI path decoded (invalid sequences kept as they are).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && let Some(h) = b.get(i + 1..i + 3)
            && let Ok(v) = u8::from_str_radix(std::str::from_utf8(h).unwrap_or("zz"), 16)
        {
            out.push(v);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

struct Thread<'a> {
    sid: &'a str,
    cwd: Option<String>,
    prompt: u32,
    info: &'a mut SessionInfo,
}

impl Thread<'_> {
    fn mk(&self, id: String, ts: Option<i64>, role: Role, kind: MessageKind) -> ParsedMessage {
        let mut m = blank(AGENT, self.sid, id, role, kind);
        m.prompt_number = self.prompt;
        m.timestamp = ts;
        m.cwd.clone_from(&self.cwd);
        m
    }

    fn message(&mut self, emit: &mut Emit, index: usize, msg: &Value) {
        let id = match msg.get("messageId") {
            Some(Value::Number(n)) => n.to_string(),
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                emit.issue(index as u64, "thread message without a `messageId`", true);
                format!("i{index}")
            }
        };
        let role = str_of(msg, "role").unwrap_or("");
        let usage_v = msg.get("usage").filter(|u| u.is_object());
        let ts = msg
            .get("meta")
            .and_then(|m| m.get("sentAt"))
            .and_then(parse_ts)
            .or_else(|| usage_v.and_then(|u| u.get("timestamp")).and_then(parse_ts));
        if let Some(t) = ts {
            let i = &mut *self.info;
            i.started_at = Some(i.started_at.map_or(t, |s| s.min(t)));
            i.updated_at = Some(i.updated_at.map_or(t, |u| u.max(t)));
        }
        let blocks: &[Value] = msg
            .get("content")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        let block_id = |j: usize| {
            if j == 0 {
                id.clone()
            } else {
                format!("{id}#{j}")
            }
        };
        let before = emit.out.messages.len();
        match role {
            "user" => self.user(emit, blocks, ts, &block_id),
            "assistant" => {
                let model = usage_v.and_then(|u| string_of(u, "model"));
                if model.is_some() {
                    self.info.model.clone_from(&model);
                }
                let usage = usage_v.map(|u| Usage {
                    input_tokens: u64_of(u, "inputTokens"),
                    output_tokens: u64_of(u, "outputTokens"),
                    cache_read_tokens: u64_of(u, "cacheReadInputTokens"),
                    cache_creation_tokens: u64_of(u, "cacheCreationInputTokens"),
                    reasoning_tokens: 0,
                });
                self.assistant(emit, blocks, ts, &block_id);
                for (i, m) in emit.out.messages[before..].iter_mut().enumerate() {
                    m.model.clone_from(&model);
                    if i == 0 {
                        m.usage = usage;
                        m.usage_key = usage.map(|_| format!("{}:{id}", self.sid));
                    }
                }
            }
            _ => {
                let summary = blocks.iter().find_map(|b| {
                    (str_of(b, "type") == Some("summary")).then(|| b.get("summary"))?
                });
                let (kind, txt) = match summary {
                    Some(s) if str_of(s, "type") == Some("message") => (
                        MessageKind::CompactionSummary,
                        str_of(s, "summary").unwrap_or_default().to_owned(),
                    ),
                    _ => (MessageKind::Meta, text::blocks_text_of(blocks)),
                };
                let mut m = self.mk(id.clone(), ts, Role::System, kind);
                m.text = txt;
                emit.push(m);
            }
        }
        if emit.out.messages.len() == before {
            let role = Role::parse(role).unwrap_or(Role::System);
            let m = self.mk(id, ts, role, MessageKind::Meta);
            emit.push(m);
        }
    }

    fn user(
        &mut self,
        emit: &mut Emit,
        blocks: &[Value],
        ts: Option<i64>,
        block_id: &dyn Fn(usize) -> String,
    ) {
        let typed: Vec<&str> = blocks
            .iter()
            .filter(|b| str_of(b, "type") == Some("text"))
            .filter_map(|b| str_of(b, "text"))
            .collect();
        let mut prompt_done = false;
        for (j, b) in blocks.iter().enumerate() {
            match str_of(b, "type").unwrap_or("") {
                "text" if !prompt_done => {
                    prompt_done = true;
                    let body = typed.join("\n");
                    let kind = if body.trim().is_empty() {
                        MessageKind::Meta
                    } else {
                        self.prompt += 1;
                        MessageKind::UserPrompt
                    };
                    let mut m = self.mk(block_id(j), ts, Role::User, kind);
                    m.text = body;
                    emit.push(m);
                }
                // Joined into the prompt above.
                "text" => {}
                "tool_result" => {
                    let run = b.get("run").unwrap_or(&Value::Null);
                    let status = str_of(run, "status").unwrap_or("");
                    let mut m = self.mk(block_id(j), ts, Role::Tool, MessageKind::ToolResult);
                    m.text = run_output(run);
                    m.tool_result = Some(ToolResult {
                        call_id: string_of(b, "toolUseID").or_else(|| string_of(b, "tool_use_id")),
                        is_error: matches!(status, "error" | "cancelled" | "rejected-by-user"),
                    });
                    emit.push(m);
                }
                _ => {
                    let mut m = self.mk(block_id(j), ts, Role::User, MessageKind::Meta);
                    m.text = text::blocks_text(b);
                    emit.push(m);
                }
            }
        }
    }

    fn assistant(
        &mut self,
        emit: &mut Emit,
        blocks: &[Value],
        ts: Option<i64>,
        block_id: &dyn Fn(usize) -> String,
    ) {
        for (j, b) in blocks.iter().enumerate() {
            let bid = block_id(j);
            let m = match str_of(b, "type").unwrap_or("") {
                "text" => {
                    let mut m = self.mk(bid, ts, Role::Assistant, MessageKind::AssistantText);
                    m.text = str_of(b, "text").unwrap_or_default().to_owned();
                    m
                }
                "thinking" | "redacted_thinking" => {
                    let mut m = self.mk(bid, ts, Role::Assistant, MessageKind::Thinking);
                    m.text = str_of(b, "thinking").unwrap_or_default().to_owned();
                    m
                }
                "tool_use" => {
                    let name = str_of(b, "name").unwrap_or("unknown").to_owned();
                    let input = b.get("input").cloned().unwrap_or(Value::Null);
                    let mut m = self.mk(bid, ts, Role::Assistant, MessageKind::ToolCall);
                    m.text = text::tool_call_text(&name, &input);
                    m.tool_call = Some(ToolCall {
                        name,
                        input,
                        call_id: string_of(b, "id"),
                    });
                    m
                }
                _ => {
                    let mut m = self.mk(bid, ts, Role::Assistant, MessageKind::Meta);
                    m.text = text::blocks_text(b);
                    m
                }
            };
            emit.push(m);
        }
    }
}

/// The readable output of a tool run: the result's text (`content`, `output`, `diff`, or the
/// result itself), else its error or progress, else the whole result as JSON.
fn run_output(run: &Value) -> String {
    let pick = |v: &Value| -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            Value::Object(o) => ["content", "output", "diff", "message", "text"]
                .iter()
                .find_map(|k| o.get(*k).and_then(Value::as_str).map(str::to_owned))
                .or_else(|| Some(v.to_string())),
            Value::Null => None,
            Value::Array(_) => Some(text::blocks_text(v)).filter(|t| !t.is_empty()),
            other => Some(other.to_string()),
        }
    };
    run.get("result")
        .and_then(pick)
        .or_else(|| run.get("error").and_then(pick))
        .or_else(|| run.get("progress").and_then(pick).filter(|p| p != "{}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn project_from_file_uri() {
        let doc = serde_json::json!({"env": {"initial": {"trees": [
            {"uri": "file:///Users/me/my%20app"}]}}});
        assert_eq!(project_of(&doc).as_deref(), Some("/Users/me/my app"));
        let win = serde_json::json!({"env": {"initial": {"trees": [{"uri": "file:///C:/dev/x"}]}}});
        assert_eq!(project_of(&win).as_deref(), Some("C:/dev/x"));
        assert_eq!(project_of(&serde_json::json!({})), None);
    }

    #[test]
    fn run_outputs() {
        let r = serde_json::json!({"status": "done", "result": {"absolutePath": "/a", "content": "1: x"}});
        assert_eq!(run_output(&r), "1: x");
        let e = serde_json::json!({"status": "error", "error": {"message": "boom"}});
        assert_eq!(run_output(&e), "boom");
        assert_eq!(
            run_output(&serde_json::json!({"status": "in-progress", "progress": {}})),
            ""
        );
    }
}
