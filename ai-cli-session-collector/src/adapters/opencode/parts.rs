//! 1.x messages and parts, the same whether they come from database rows or JSON files.

use serde_json::Value;

use super::{AGENT, Sess, error_text, join_lines, model_name, usage_of};
use crate::adapter::{blank, parse_ts, str_of, string_of};
use crate::model::{MessageKind, ParsedMessage, Role, ToolCall, ToolResult};
use crate::text;

/// What the parts of one 1.x message share.
pub(super) struct MsgCtx<'a> {
    sid: &'a str,
    msg_id: &'a str,
    pub(super) role: Role,
    ts: Option<i64>,
    cwd: Option<String>,
    pub(super) model: Option<String>,
    number: u32,
    sidechain: bool,
    /// An assistant message holding a compaction summary (`summary: true`).
    summary: bool,
    /// The part that is the message's prompt.
    prompt_part: Option<&'a str>,
}

impl<'a> MsgCtx<'a> {
    pub(super) fn new(
        sid: &'a str,
        msg_id: &'a str,
        data: &Value,
        sess: &Sess,
        number: u32,
        prompt_part: Option<&'a str>,
    ) -> Self {
        let role = match str_of(data, "role") {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => Role::System,
        };
        let time = data.get("time").unwrap_or(&Value::Null);
        MsgCtx {
            sid,
            msg_id,
            role,
            ts: time.get("created").and_then(parse_ts),
            cwd: data
                .get("path")
                .and_then(|p| string_of(p, "cwd"))
                .or_else(|| sess.directory.clone()),
            model: string_of(data, "modelID").or_else(|| data.get("model").and_then(model_name)),
            number,
            sidechain: sess.subagent(),
            summary: role == Role::Assistant
                && data.get("summary").and_then(Value::as_bool) == Some(true),
            prompt_part: prompt_part.filter(|_| !sess.subagent()),
        }
    }

    fn mk(&self, id: String, role: Role, kind: MessageKind) -> ParsedMessage {
        let mut m = blank(AGENT, self.sid, id, role, kind);
        m.prompt_number = self.number;
        m.timestamp = self.ts;
        m.cwd.clone_from(&self.cwd);
        m.model.clone_from(&self.model);
        m.flags.sidechain = self.sidechain;
        if self.sidechain {
            m.agent_id = Some(self.sid.to_owned());
        }
        m
    }
}

/// The meta message that keeps a 1.x message record (role, model, tokens, cost).
pub(super) fn message_record(ctx: &MsgCtx<'_>, data: &Value) -> ParsedMessage {
    let mut m = ctx.mk(ctx.msg_id.to_owned(), ctx.role, MessageKind::Meta);
    m.text = data.get("error").map(error_text).unwrap_or_default();
    m.usage = data.get("tokens").and_then(usage_of);
    m.usage_key = m.usage.map(|_| ctx.msg_id.to_owned());
    // OpenCode's own price of the message, in dollars (summed over its steps).
    m.cost_usd = m.usage.and(crate::adapter::cost_of(data, "cost"));
    m
}

/// Whether a 1.x part is typed text: a text part, not synthetic, not empty.
pub(super) fn is_typed_text(part: &Value) -> bool {
    str_of(part, "type") == Some("text")
        && part.get("synthetic").and_then(Value::as_bool) != Some(true)
        && str_of(part, "text").is_some_and(|t| !t.trim().is_empty())
}

/// The messages of one 1.x part.
pub(super) fn part_messages(ctx: &MsgCtx<'_>, part_id: &str, p: &Value) -> Vec<ParsedMessage> {
    let id = format!("{}/{part_id}", ctx.msg_id);
    let role = ctx.role;
    let text_of = |k: &str| str_of(p, k).unwrap_or_default().to_owned();
    let mut out = Vec::new();
    match str_of(p, "type").unwrap_or("") {
        "text" => {
            let synthetic = p.get("synthetic").and_then(Value::as_bool) == Some(true);
            let kind = match role {
                Role::User if ctx.prompt_part == Some(part_id) => MessageKind::UserPrompt,
                Role::Assistant if synthetic => MessageKind::Meta,
                Role::Assistant if ctx.summary => MessageKind::CompactionSummary,
                Role::Assistant => MessageKind::AssistantText,
                _ => MessageKind::Meta,
            };
            let mut m = ctx.mk(id, role, kind);
            m.text = text_of("text");
            out.push(m);
        }
        "reasoning" => {
            let mut m = ctx.mk(id, Role::Assistant, MessageKind::Thinking);
            m.text = text_of("text");
            out.push(m);
        }
        "tool" => {
            let name = str_of(p, "tool").unwrap_or("unknown").to_owned();
            let state = p.get("state").unwrap_or(&Value::Null);
            let input = state
                .get("input")
                .or_else(|| state.get("raw"))
                .cloned()
                .unwrap_or(Value::Null);
            let call_id = string_of(p, "callID");
            let mut call = ctx.mk(id.clone(), Role::Assistant, MessageKind::ToolCall);
            call.text = text::tool_call_text(&name, &input);
            call.tool_call = Some(ToolCall {
                name,
                input,
                call_id: call_id.clone(),
            });
            out.push(call);
            let status = str_of(state, "status").unwrap_or("");
            if matches!(status, "completed" | "error") {
                let mut res = ctx.mk(format!("{id}/result"), Role::Tool, MessageKind::ToolResult);
                res.text = match state.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Null) | None => String::new(),
                    Some(o) => o.to_string(),
                };
                join_lines(
                    &mut res.text,
                    &state.get("error").map(error_text).unwrap_or_default(),
                );
                res.tool_result = Some(ToolResult {
                    call_id,
                    is_error: status == "error",
                });
                out.push(res);
            }
        }
        ty => {
            // `step-start`, `step-finish`, `snapshot`, `patch`, `file`, `agent`, `subtask`,
            // `retry`, `compaction` and kinds not known yet.
            let mut m = ctx.mk(id, role, MessageKind::Meta);
            m.text = match ty {
                "file" => format!(
                    "[attachment: {}]",
                    str_of(p, "filename")
                        .or_else(|| str_of(p, "mime"))
                        .unwrap_or_default()
                ),
                "subtask" => {
                    let mut t = text_of("description");
                    join_lines(&mut t, str_of(p, "prompt").unwrap_or_default());
                    t
                }
                "agent" => text_of("name"),
                "patch" => p
                    .get("files")
                    .and_then(Value::as_array)
                    .map(|f| {
                        f.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default(),
                "retry" => p.get("error").map(error_text).unwrap_or_default(),
                _ => text_of("text"),
            };
            out.push(m);
        }
    }
    out
}
