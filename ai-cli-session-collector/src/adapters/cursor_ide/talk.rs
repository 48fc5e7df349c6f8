//! One conversation, whatever database and layout it came from: its bubbles in order, turned
//! into records with their tool calls and results.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::Value;

use super::{ABSOLUTE_MS, AGENT, ConvState, Out, State, fingerprint, hash_bytes};
use crate::adapter::{blank, parse_ts, str_of, u64_of};
use crate::model::{
    Edit, MessageKind, ParsedMessage, Role, SessionInfo, TitleSource, ToolCall, ToolResult, Usage,
};
use crate::text;

/// A conversation as read, whatever database and layout it came from.
pub(super) struct Talk {
    pub(super) sid: String,
    /// Message id of the conversation's own record.
    pub(super) meta_id: &'static str,
    pub(super) meta_raw: Vec<u8>,
    pub(super) meta_line: u64,
    pub(super) name: Option<String>,
    pub(super) created: Option<i64>,
    pub(super) updated: Option<i64>,
    pub(super) project: Option<String>,
    pub(super) model: Option<String>,
    /// V1 tool payloads by bubble id.
    pub(super) tools: HashMap<String, Value>,
    pub(super) bubbles: Vec<Bubble>,
}

impl Talk {
    /// A conversation record that could not be read: kept, nothing else.
    pub(super) fn bare(sid: &str, meta_id: &'static str, raw: Vec<u8>, line: u64) -> Talk {
        Talk {
            sid: sid.to_owned(),
            meta_id,
            meta_raw: raw,
            meta_line: line,
            name: None,
            created: None,
            updated: None,
            project: None,
            model: None,
            tools: HashMap::new(),
            bubbles: Vec::new(),
        }
    }
}

pub(super) struct Bubble {
    pub(super) id: String,
    /// `None`: the row is not JSON.
    pub(super) v: Option<Value>,
    /// The record: the row (`key`, `value`) or the inline element.
    pub(super) raw: Vec<u8>,
    /// Row id (0 for an inline element), for issues.
    pub(super) line: u64,
    pub(super) rendered: bool,
}

/// What the bubbles of a conversation add up to while they are turned into messages.
#[derive(Default)]
struct Walk {
    prompt: u32,
    first_prompt: Option<String>,
    last_model: Option<String>,
}

/// One record's id, its messages, and (row id, reason) when part of it could not be used.
type Record = (String, Vec<ParsedMessage>, Option<(u64, String)>);

/// The database a conversation was read from. The global one holds the composers' own
/// transcripts and names their source file; a workspace's names a conversation only while
/// nothing else has (its list of composers repeats the global ones', and an old inline
/// composer may have moved to the global database since).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    Global,
    Workspace,
}

/// Turns a conversation into messages and emits the records whose messages changed since the
/// cursor's last read, the session info when it changed, and deactivates vanished bubbles.
pub(super) fn emit_talk(
    st: &mut State,
    out: &mut Out,
    t: Talk,
    meta_issue: Option<String>,
    origin: Origin,
) {
    let mut groups: Vec<Record> = Vec::new();
    let mut meta = blank(
        AGENT,
        &t.sid,
        t.meta_id.to_owned(),
        Role::System,
        MessageKind::Meta,
    );
    meta.text = t.name.clone().unwrap_or_default();
    meta.timestamp = t.created;
    meta.cwd.clone_from(&t.project);
    meta.raw = Some(t.meta_raw.clone());
    groups.push((
        t.meta_id.to_owned(),
        vec![meta],
        meta_issue.map(|r| (t.meta_line, r)),
    ));
    let mut walk = Walk::default();
    let mut last_ts = t.created;
    let mut first_ts = None;
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, b) in t.bubbles.iter().enumerate() {
        if !seen.insert(b.id.as_str()) {
            continue;
        }
        let own = b.v.as_ref().and_then(bubble_time);
        let ts = match (own, last_ts) {
            (Some(o), Some(l)) => Some(o.max(l)),
            (o, l) => o.or(l),
        };
        last_ts = ts;
        first_ts = first_ts.or(ts);
        let base = (i as u64 + 1) << 10;
        let (msgs, issue) = bubble_messages(&t, b, ts, base, &mut walk);
        groups.push((b.id.clone(), msgs, issue.map(|r| (b.line, r))));
    }

    st.clock += 1;
    let clock = st.clock;
    let conv = st.convs.remove(&t.sid);
    let known = conv.as_ref().map(|c| &c.recs);
    let mut recs = BTreeMap::new();
    let mut changed = false;
    for (id, msgs, issue) in groups {
        let fp = fingerprint(&msgs);
        let same = known.and_then(|k| k.get(&id)) == Some(&fp);
        recs.insert(id, fp);
        if same {
            continue;
        }
        changed = true;
        if let Some((line, reason)) = issue {
            out.emit.issue(line, reason, true);
        }
        for m in msgs {
            out.emit.push(m);
        }
    }
    if let Some(known) = known {
        let gone: Vec<String> = known
            .keys()
            .filter(|k| !recs.contains_key(*k))
            .flat_map(|k| {
                if k == t.meta_id {
                    vec![k.clone()]
                } else {
                    ["", "#thinking", "#text", "#result"]
                        .iter()
                        .map(|s| format!("{k}{s}"))
                        .collect()
                }
            })
            .collect();
        if !gone.is_empty() {
            changed = true;
            out.emit.out.edits.push(Edit::Deactivate {
                session_id: t.sid.clone(),
                message_ids: gone,
            });
        }
    }

    let title = match (&t.name, &walk.first_prompt) {
        (Some(n), _) => Some((TitleSource::Generated, text::truncate_chars(n, 200))),
        (None, Some(p)) => Some((TitleSource::FirstPrompt, text::prompt_title(p))),
        (None, None) => None,
    };
    let info = SessionInfo {
        session_id: t.sid.clone(),
        project_path: t.project.clone(),
        model: t.model.clone().or(walk.last_model),
        title,
        started_at: t.created.or(first_ts),
        updated_at: t.updated.or(last_ts),
        own_file: origin == Origin::Global,
        ..Default::default()
    };
    let ih = hash_bytes(&serde_json::to_vec(&info).unwrap_or_default());
    let mut when = conv.as_ref().map_or(clock, |c| c.t);
    if changed || conv.as_ref().is_none_or(|c| c.info != ih) {
        when = clock;
        out.sessions.push(info);
    }
    st.convs.insert(
        t.sid.clone(),
        ConvState {
            t: when,
            u: t.updated.or(last_ts).unwrap_or(0),
            info: ih,
            recs,
        },
    );
}

/// A bubble's own time: `createdAt`, else the first absolute `timingInfo` field.
pub(super) fn bubble_time(v: &Value) -> Option<i64> {
    if let Some(t) = v.get("createdAt").and_then(parse_ts) {
        return Some(t);
    }
    let ti = v.get("timingInfo")?;
    [
        "clientStartTime",
        "clientRpcSendTime",
        "clientSettleTime",
        "clientEndTime",
    ]
    .iter()
    .filter_map(|k| ti.get(*k).and_then(Value::as_f64))
    .find(|t| *t >= ABSOLUTE_MS)
    .map(|t| t as i64)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Speaker {
    User,
    Assistant,
    Other,
}

fn speaker(v: &Value) -> Speaker {
    match v.get("type") {
        Some(Value::Number(n)) if n.as_i64() == Some(1) => Speaker::User,
        Some(Value::Number(n)) if n.as_i64() == Some(2) => Speaker::Assistant,
        Some(Value::String(s)) if s == "user" => Speaker::User,
        Some(Value::String(s)) if s == "ai" || s == "assistant" => Speaker::Assistant,
        _ => Speaker::Other,
    }
}

fn nonempty(v: &Value, key: &str) -> Option<String> {
    str_of(v, key)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned)
}

/// The messages of one bubble, and why part of it could not be used.
fn bubble_messages(
    t: &Talk,
    b: &Bubble,
    ts: Option<i64>,
    base: u64,
    walk: &mut Walk,
) -> (Vec<ParsedMessage>, Option<String>) {
    let new = |id: String, role: Role, kind: MessageKind, sub: u64| {
        let mut m = blank(AGENT, &t.sid, id, role, kind);
        m.timestamp = ts;
        m.cwd.clone_from(&t.project);
        m.seq = base | sub;
        m
    };
    let Some(v) = &b.v else {
        let mut m = new(b.id.clone(), Role::System, MessageKind::Meta, 1);
        m.prompt_number = walk.prompt;
        m.raw = Some(b.raw.clone());
        return (vec![m], Some(format!("bubble {} is not JSON", b.id)));
    };
    let who = speaker(v);
    let role = match who {
        Speaker::User => Role::User,
        Speaker::Assistant => Role::Assistant,
        Speaker::Other => Role::System,
    };
    let text = nonempty(v, "text")
        .or_else(|| nonempty(v, "rawText"))
        .unwrap_or_default();
    if !b.rendered {
        // Not shown by Cursor: kept as a record, not as conversation.
        let mut m = new(b.id.clone(), role, MessageKind::Meta, 1);
        m.prompt_number = walk.prompt;
        m.raw = Some(b.raw.clone());
        return (vec![m], None);
    }
    let mut msgs = Vec::new();
    match who {
        Speaker::User => {
            let kind = if text.trim().is_empty() {
                MessageKind::Meta
            } else {
                walk.prompt += 1;
                walk.first_prompt.get_or_insert_with(|| text.clone());
                MessageKind::UserPrompt
            };
            let mut m = new(b.id.clone(), Role::User, kind, 1);
            m.text = text;
            m.raw = Some(b.raw.clone());
            msgs.push(m);
        }
        Speaker::Other => {
            let mut m = new(b.id.clone(), Role::System, MessageKind::Meta, 1);
            m.text = text;
            m.raw = Some(b.raw.clone());
            msgs.push(m);
        }
        Speaker::Assistant => {
            let model = v
                .get("modelInfo")
                .and_then(|m| str_of(m, "modelName"))
                .or_else(|| str_of(v, "modelType"))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .or_else(|| t.model.clone());
            if model.is_some() {
                walk.last_model.clone_from(&model);
            }
            let thinking = match v.get("thinking") {
                Some(Value::String(s)) => Some(s.as_str()),
                Some(th) => str_of(th, "text"),
                None => None,
            }
            .filter(|s| !s.trim().is_empty());
            if let Some(th) = thinking {
                let mut m = new(
                    format!("{}#thinking", b.id),
                    Role::Assistant,
                    MessageKind::Thinking,
                    0,
                );
                m.text = th.to_owned();
                msgs.push(m);
            }
            let tool = v
                .get("toolFormerData")
                .filter(|d| d.as_object().is_some_and(|o| !o.is_empty()))
                .or_else(|| t.tools.get(&b.id));
            let mut main = match tool {
                Some(tool) => {
                    let (call, result) = tool_messages(tool, &b.id, &new);
                    if !text.is_empty() {
                        let mut m = new(
                            format!("{}#text", b.id),
                            Role::Assistant,
                            MessageKind::AssistantText,
                            2,
                        );
                        m.text = text;
                        msgs.push(m);
                    }
                    msgs.extend(result);
                    call
                }
                None if !text.is_empty() => {
                    let mut m = new(b.id.clone(), Role::Assistant, MessageKind::AssistantText, 1);
                    m.text = text;
                    m
                }
                None => new(b.id.clone(), Role::Assistant, MessageKind::Meta, 1),
            };
            main.raw = Some(b.raw.clone());
            if let Some(tc) = v.get("tokenCount") {
                let u = Usage {
                    input_tokens: u64_of(tc, "inputTokens"),
                    output_tokens: u64_of(tc, "outputTokens"),
                    ..Default::default()
                };
                if u != Usage::default() {
                    main.usage = Some(u);
                    main.usage_key = Some(b.id.clone());
                }
            }
            msgs.push(main);
            for m in &mut msgs {
                m.model.clone_from(&model);
            }
        }
    }
    for m in &mut msgs {
        m.prompt_number = walk.prompt;
    }
    msgs.sort_by_key(|m| m.seq);
    (msgs, None)
}

/// A tool payload (`{tool, name, rawArgs, params, result, status, error, …}`) as its call and,
/// once it has one, its result.
fn tool_messages(
    tool: &Value,
    bid: &str,
    new: &dyn Fn(String, Role, MessageKind, u64) -> ParsedMessage,
) -> (ParsedMessage, Option<ParsedMessage>) {
    let name = str_of(tool, "name").filter(|s| !s.is_empty()).map_or_else(
        || match tool.get("tool") {
            Some(n) if !n.is_null() => format!("tool {n}"),
            _ => "unknown".to_owned(),
        },
        str::to_owned,
    );
    let input = ["rawArgs", "params"]
        .iter()
        .find_map(|k| tool.get(*k).filter(|v| !v.is_null()))
        .map_or(Value::Null, |v| match v {
            Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
            other => other.clone(),
        });
    let call_id = str_of(tool, "toolCallId")
        .filter(|s| !s.is_empty())
        .map_or_else(|| bid.to_owned(), str::to_owned);
    let mut call = new(bid.to_owned(), Role::Assistant, MessageKind::ToolCall, 1);
    call.text = text::tool_call_text(&name, &input);
    call.tool_call = Some(ToolCall {
        name,
        input,
        call_id: Some(call_id.clone()),
    });
    let status = str_of(tool, "status").unwrap_or("");
    let error = str_of(tool, "error").filter(|s| !s.is_empty());
    let result = tool.get("result").filter(|r| match r {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        _ => true,
    });
    let finished = matches!(status, "completed" | "error" | "cancelled");
    if result.is_none() && error.is_none() && !finished {
        return (call, None);
    }
    let mut parts = Vec::new();
    if let Some(e) = error {
        parts.push(e.to_owned());
    }
    if let Some(r) = result {
        let r = match r {
            Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| r.clone()),
            other => other.clone(),
        };
        let t = result_text(&r);
        if !t.is_empty() {
            parts.push(t);
        }
    }
    if parts.is_empty() && !status.is_empty() {
        parts.push(status.to_owned());
    }
    let failed = matches!(status, "error" | "cancelled")
        || tool.get("tool").and_then(Value::as_i64) == Some(0);
    let mut res = new(
        format!("{bid}#result"),
        Role::Tool,
        MessageKind::ToolResult,
        3,
    );
    res.text = parts.join("\n");
    res.tool_result = Some(ToolResult {
        call_id: Some(call_id),
        is_error: failed,
    });
    (call, Some(res))
}

/// Searchable text of a tool result: its strings (keys in order), then its scalar fields.
pub(super) fn result_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .map(result_text)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let mut lines: Vec<String> = keys
                .iter()
                .filter(|k| {
                    matches!(
                        o[**k],
                        Value::String(_) | Value::Array(_) | Value::Object(_)
                    )
                })
                .map(|k| result_text(&o[*k]))
                .filter(|s| !s.is_empty())
                .collect();
            lines.extend(
                keys.iter()
                    .filter(|k| matches!(o[**k], Value::Number(_) | Value::Bool(_)))
                    .map(|k| format!("{k}: {}", o[*k])),
            );
            lines.join("\n")
        }
        other => other.to_string(),
    }
}
