//! Pi (pi-coding-agent): one append-only JSONL file per session, a tree of entries whose
//! active conversation is the path from the last entry back through `parentId`.
//! FORMATS-MORE.md §14.
//!
//! **Where.** `~/.pi/agent/sessions/--<encoded cwd>--/<timestamp>_<sessionId>.jsonl` on Linux,
//! macOS and Windows alike (the home folder is `USERPROFILE` there). `PI_CODING_AGENT_DIR`
//! replaces `~/.pi/agent`; `PI_CODING_AGENT_SESSION_DIR` names the sessions folder itself
//! (flat, all projects). Both may start with `~`. A `sessionDir` set in Pi's `settings.json`
//! is not looked up: pass that folder as a root.
//!
//! **What is read.** Line 1 is the header `{"type":"session","version","id","cwd",
//! "parentSession"?}` (session id, project, the session it was forked from); every other line
//! is an entry: `message` (roles `user`, `assistant`, `toolResult`, `bashExecution`, `custom`,
//! `branchSummary`, `compactionSummary`), `compaction`, `branch_summary`, `model_change`,
//! `thinking_level_change`, `session_info` (a user-set name: the title), `label`, `custom`,
//! `custom_message`. Every line is kept with its raw bytes; what is not conversation is Meta.
//!
//! **Prompts.** A `user` message with text or an image, on the active path. `bashExecution`
//! (a shell command the user ran with `!`) is Meta. The prompt number of an entry is the number
//! of prompts on its own path from the root, so it never changes when the leaf moves.
//!
//! **Branches.** An entry whose `parentId` is not the current leaf starts another branch: the
//! entries of the old path that are not on the new one are abandoned (they stay in the file,
//! and in the archive, but are deactivated with [`Edit::Deactivate`] and their prompts are
//! sent again as Meta, so they are not counted), and abandoned entries that are on the new path
//! again are restored (sent again, read back from the file at the offset the cursor keeps, as
//! they were). `parentId: null` starts a new root (Pi's `resetLeaf`); a `parentId` that names
//! no entry of the file (a line lost to corruption) is taken as the current leaf rather than
//! abandoning the whole conversation. Version-1 files have no `id`/`parentId`: their entries
//! follow each other and are named `L<line>`.
//!
//! **Tools.** `toolCall{id,name,arguments}` blocks of assistant messages pair with
//! `toolResult{toolCallId,isError}` messages by id.
//!
//! **Traps.** Pi migrates old files in place (version 1 → 3 gives every entry a new random
//! id): a file whose head changed is read again from the start, and the messages the previous
//! reading produced that do not come back are deactivated. An assistant message can have empty
//! content (a failed request, `stopReason: "error"`): it is Meta holding the error, and its model
//! is not taken as the session's model. Compaction (`compaction{summary, firstKeptEntryId |
//! firstKeptEntryIndex, tokensBefore}`) summarises context; the entries it covers stay active.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl, expand_home, parse_ts,
    still_same_file, str_of, string_of, tool_call_of, u64_of,
};
use crate::model::{
    Cursor, Edit, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
    ToolResult, Usage,
};
use crate::{reader, text};

const AGENT: &str = "pi";

pub struct PiAdapter;

impl ConversationAdapter for PiAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        if let Some(dir) = env.var("PI_CODING_AGENT_SESSION_DIR") {
            return vec![expand_home(dir, env)];
        }
        let agent = env.var("PI_CODING_AGENT_DIR").map_or_else(
            || env.home.join(".pi").join("agent"),
            |d| expand_home(d, env),
        );
        vec![agent.join("sessions")]
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        // `<root>/--<cwd>--/<file>.jsonl`, or `<root>/<file>.jsonl` in a flat session folder.
        path.extension().is_some_and(|e| e == "jsonl") && rel.components().count() <= 2
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        // A file rewritten in place (a migration) is read from the start by the driver; what
        // the previous reading held is remembered to deactivate what does not come back.
        let before: Option<State> = (cursor.offset > 0
            && !still_same_file(path, cursor).unwrap_or(true))
        .then(|| serde_json::from_value(cursor.state.clone()).ok())
        .flatten();
        let fallback = session_id_from_name(path);
        let mut info = SessionInfo::default();
        let mut pending = Pending::default();
        let (mut out, st) = drive_jsonl::<State>(path, cursor, max_bytes, |st, emit, rec| {
            handle(path, st, emit, rec, &mut info, &mut pending, &fallback);
        })?;
        // Copies of earlier entries keep their own place.
        for (i, line, block) in pending.copies {
            if let Some(m) = out.messages.get_mut(i) {
                m.line = line;
                m.seq = (line << 10) | block.min(1023);
            }
        }
        // Edits are applied after every message of the output: an entry abandoned and then
        // restored within this output must not end deactivated.
        for (sid, keys) in pending.deactivated {
            let ids: Vec<String> = keys
                .iter()
                .filter_map(|k| st.nodes.get(k).filter(|n| !n.active).map(|n| (k, n)))
                .flat_map(|(k, n)| node_ids(k, n.msgs))
                .collect();
            if !ids.is_empty() {
                out.edits.push(Edit::Deactivate {
                    session_id: sid,
                    message_ids: ids,
                });
            }
        }
        if let Some(old) = before {
            forget_rewritten(&old, &mut out);
        }
        if let Some(sid) = st.session_id {
            info.session_id = sid;
            out.sessions.push(info);
        }
        Ok(out)
    }
}

/// The session id in `<timestamp>_<sessionId>.jsonl` (the whole stem when there is no `_`).
fn session_id_from_name(path: &Path) -> String {
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    match stem.split_once('_') {
        Some((_, id)) if !id.is_empty() => id.to_owned(),
        _ => stem.to_owned(),
    }
}

/// One entry of the session tree, as the cursor remembers it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Node {
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
    /// Prompts on the path from the root through this entry.
    #[serde(rename = "n", default)]
    prompt: u32,
    /// Messages the entry produced (`key`, `key#1`, …).
    #[serde(rename = "m", default)]
    msgs: u64,
    #[serde(rename = "a", default)]
    active: bool,
    /// Where its line starts, to read it again when its branch comes back.
    #[serde(rename = "o", default)]
    offset: u64,
    #[serde(rename = "l", default)]
    line: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    session_id: Option<String>,
    cwd: Option<String>,
    nodes: HashMap<String, Node>,
    /// The last entry: the end of the active path.
    leaf: Option<String>,
    /// An assistant message with content has named the session's model.
    answered: bool,
}

/// What one parse call owes its output after the driver is done.
#[derive(Default)]
struct Pending {
    /// Earlier entries sent again: (index in the output, their line, their block).
    copies: Vec<(usize, u64, u64)>,
    /// Entries abandoned by each branch switch, with their session.
    deactivated: Vec<(String, Vec<String>)>,
}

/// The message ids of an entry: the first block is the entry's own id.
fn block_id(key: &str, i: usize) -> String {
    if i == 0 {
        key.to_owned()
    } else {
        format!("{key}#{i}")
    }
}

fn node_ids(key: &str, msgs: u64) -> Vec<String> {
    (0..msgs.max(1) as usize)
        .map(|i| block_id(key, i))
        .collect()
}

/// Deactivates what a previous reading of a rewritten file produced and this one did not.
fn forget_rewritten(old: &State, out: &mut ParseOutput) {
    let Some(sid) = old.session_id.clone() else {
        return;
    };
    let now: HashSet<&str> = out.messages.iter().map(|m| m.message_id.as_str()).collect();
    let mut nodes: Vec<(&String, &Node)> = old.nodes.iter().collect();
    nodes.sort_by_key(|(_, n)| n.line);
    let gone: Vec<String> = nodes
        .into_iter()
        .flat_map(|(k, n)| node_ids(k, n.msgs))
        .filter(|id| !now.contains(id.as_str()))
        .collect();
    if !gone.is_empty() {
        // Ids that come back in a later chunk are active again when stored again.
        out.edits.push(Edit::Deactivate {
            session_id: sid,
            message_ids: gone,
        });
    }
}

/// The entries from `from` back to the root, leaf first.
fn path_of(nodes: &HashMap<String, Node>, from: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut cur = from.map(str::to_owned);
    while let Some(id) = cur {
        if !seen.insert(id.clone()) {
            break;
        }
        let Some(n) = nodes.get(&id) else { break };
        cur = n.parent.clone();
        out.push(id);
    }
    out
}

/// The session facts a message needs.
struct Ctx<'a> {
    sid: &'a str,
    cwd: Option<&'a str>,
}

fn handle(
    path: &Path,
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
    pending: &mut Pending,
    fallback: &str,
) {
    let v = &rec.value;
    let ty = str_of(v, "type").unwrap_or("");
    if let Some(t) = v.get("timestamp").and_then(parse_ts) {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    if ty == "session" {
        header(st, emit, &rec, info, fallback);
        return;
    }
    let sid = st
        .session_id
        .get_or_insert_with(|| fallback.to_owned())
        .clone();
    let key = string_of(v, "id").unwrap_or_else(|| format!("L{}", rec.line));
    let parent = match v.get("parentId") {
        Some(Value::String(p)) if *p != key && st.nodes.contains_key(p) => Some(p.clone()),
        // `null`: a new root (Pi's reset of the leaf).
        Some(Value::Null) => None,
        // Version 1 (no `parentId`), or a parent this file does not hold: the next entry.
        _ => st.leaf.clone().filter(|l| *l != key),
    };

    // A new branch: leave the old path, come back to the abandoned entries of the new one.
    let mut restored = Vec::new();
    if parent != st.leaf {
        let old = path_of(&st.nodes, st.leaf.as_deref());
        let new = path_of(&st.nodes, parent.as_deref());
        let on_new: HashSet<&String> = new.iter().collect();
        let abandoned: Vec<String> = old.into_iter().filter(|k| !on_new.contains(k)).collect();
        for k in &abandoned {
            if let Some(n) = st.nodes.get_mut(k) {
                n.active = false;
            }
        }
        for k in new.iter().rev() {
            if let Some(n) = st.nodes.get_mut(k).filter(|n| !n.active) {
                n.active = true;
                restored.push(k.clone());
            }
        }
        if !abandoned.is_empty() {
            pending.deactivated.push((sid.clone(), abandoned.clone()));
        }
        // Abandoned prompts are sent again as Meta (the edit alone leaves them counted).
        restored.extend(
            abandoned
                .into_iter()
                .rev()
                .filter(|k| st.nodes.get(k).is_some_and(|n| n.prompt_here(&st.nodes))),
        );
    }

    let base = parent
        .as_ref()
        .and_then(|p| st.nodes.get(p))
        .map_or(0, |n| n.prompt);
    let prompt = is_prompt_entry(v);
    let number = base + u32::from(prompt);
    let ctx = Ctx {
        sid: &sid,
        cwd: st.cwd.as_deref(),
    };
    let msgs = entry_messages(&ctx, v, &key, parent.as_deref(), number, true);
    if ty == "message" && !v.get("message").is_some_and(Value::is_object) {
        emit.note(&rec, "`message` entry without a `message` object");
    }
    session_facts(st, v, info, prompt, number, &msgs);
    let n = msgs.len() as u64;
    for m in msgs {
        emit.push(m);
    }
    st.nodes.insert(
        key.clone(),
        Node {
            parent,
            prompt: number,
            msgs: n,
            active: true,
            offset: rec.offset,
            line: rec.line,
        },
    );
    st.leaf = Some(key);

    for k in restored {
        resend(path, st, emit, pending, &k);
    }
}

impl Node {
    /// Whether this entry is a prompt: it has one more prompt than its parent.
    fn prompt_here(&self, nodes: &HashMap<String, Node>) -> bool {
        let base = self
            .parent
            .as_ref()
            .and_then(|p| nodes.get(p))
            .map_or(0, |p| p.prompt);
        self.prompt > base
    }
}

/// Sends an earlier entry again, read back from the file: restored to its branch (active) or
/// with its prompt demoted (abandoned).
fn resend(path: &Path, st: &State, emit: &mut Emit, pending: &mut Pending, key: &str) {
    let Some(node) = st.nodes.get(key) else {
        return;
    };
    let Some(v) = read_entry(path, node.offset) else {
        emit.issue(
            node.line,
            "entry could not be read again to change its branch",
            true,
        );
        return;
    };
    let same = string_of(&v, "id").unwrap_or_else(|| format!("L{}", node.line)) == key;
    if !same {
        emit.issue(
            node.line,
            "entry changed before its branch could be changed",
            true,
        );
        return;
    }
    let sid = st.session_id.clone().unwrap_or_default();
    let ctx = Ctx {
        sid: &sid,
        cwd: st.cwd.as_deref(),
    };
    let msgs = entry_messages(
        &ctx,
        &v,
        key,
        node.parent.as_deref(),
        node.prompt,
        node.active,
    );
    for (b, m) in msgs.into_iter().enumerate() {
        pending
            .copies
            .push((emit.out.messages.len(), node.line, b as u64));
        emit.push(m);
    }
}

/// The JSON entry on the line that starts at `offset`.
fn read_entry(path: &Path, offset: u64) -> Option<Value> {
    let chunk = reader::read_lines(path, offset, 1).ok()?;
    let bytes = if chunk.data.is_empty() {
        reader::read_lines_tail(path, offset).ok()?
    } else {
        chunk.data
    };
    let line = bytes.split(|&b| b == b'\n').next()?;
    reader::decode_json(line.trim_ascii())
        .ok()
        .map(|d| d.value)
        .filter(Value::is_object)
}

fn header(
    st: &mut State,
    emit: &mut Emit,
    rec: &Record<'_>,
    info: &mut SessionInfo,
    fallback: &str,
) {
    let v = &rec.value;
    if st.session_id.is_none() {
        st.session_id = Some(string_of(v, "id").unwrap_or_else(|| fallback.to_owned()));
    }
    if let Some(c) = string_of(v, "cwd") {
        st.cwd.get_or_insert(c);
    }
    info.project_path.clone_from(&st.cwd);
    // `parentSession`: the file this session was forked from.
    if let Some(p) = str_of(v, "parentSession").filter(|p| !p.is_empty()) {
        info.parent_session_id = Some(session_id_from_name(Path::new(p)));
    }
    let sid = st.session_id.clone().unwrap_or_default();
    let mut m = blank(
        AGENT,
        &sid,
        format!("L{}", rec.line),
        Role::System,
        MessageKind::Meta,
    );
    m.timestamp = v.get("timestamp").and_then(parse_ts);
    m.cwd.clone_from(&st.cwd);
    emit.push(m);
}

/// A `user` message that holds something typed (text) or attached (an image).
fn is_prompt_entry(v: &Value) -> bool {
    if str_of(v, "type") != Some("message") {
        return false;
    }
    let Some(msg) = v.get("message") else {
        return false;
    };
    let body = text::blocks_text(msg.get("content").unwrap_or(&Value::Null));
    str_of(msg, "role") == Some("user") && !body.trim().is_empty() && !text::is_bare_command(&body)
}

/// What the session learns from an entry: model, title.
fn session_facts(
    st: &mut State,
    v: &Value,
    info: &mut SessionInfo,
    prompt: bool,
    number: u32,
    msgs: &[ParsedMessage],
) {
    match str_of(v, "type").unwrap_or("") {
        "model_change" if !st.answered => {
            if let Some(m) = string_of(v, "modelId") {
                info.model = Some(m);
            }
        }
        "session_info" => {
            if let Some(name) = str_of(v, "name").map(str::trim).filter(|n| !n.is_empty()) {
                info.title = Some((TitleSource::Custom, text::truncate_chars(name, 200)));
            }
        }
        "message" => {
            let msg = v.get("message").unwrap_or(&Value::Null);
            let has_content = msg
                .get("content")
                .and_then(Value::as_array)
                .is_some_and(|c| !c.is_empty());
            if str_of(msg, "role") == Some("assistant")
                && has_content
                && let Some(m) = string_of(msg, "model")
            {
                info.model = Some(m);
                st.answered = true;
            }
            if prompt && number == 1 {
                let custom = info
                    .title
                    .as_ref()
                    .is_some_and(|(s, _)| *s > TitleSource::FirstPrompt);
                if let (false, Some(m)) = (custom, msgs.first()) {
                    info.title = Some((TitleSource::FirstPrompt, text::prompt_title(&m.text)));
                }
            }
        }
        _ => {}
    }
}

/// The messages of one entry (one per content block), without line, seq and raw. `counted`:
/// the entry is on the active path, so a prompt is a prompt.
fn entry_messages(
    ctx: &Ctx<'_>,
    v: &Value,
    key: &str,
    parent: Option<&str>,
    number: u32,
    counted: bool,
) -> Vec<ParsedMessage> {
    let ts = v.get("timestamp").and_then(parse_ts);
    let new = |i: usize, role: Role, kind: MessageKind, body: String| {
        let mut m = blank(AGENT, ctx.sid, block_id(key, i), role, kind);
        m.parent_id = parent.map(str::to_owned);
        m.prompt_number = number;
        m.timestamp = ts;
        m.cwd = ctx.cwd.map(str::to_owned);
        m.text = body;
        m
    };
    let s = |k: &str| str_of(v, k).unwrap_or_default().to_owned();
    match str_of(v, "type").unwrap_or("") {
        "message" => {
            let Some(msg) = v.get("message").filter(|m| m.is_object()) else {
                return vec![new(0, Role::System, MessageKind::Meta, String::new())];
            };
            let ts = ts.or_else(|| msg.get("timestamp").and_then(parse_ts));
            let mut out = agent_message(msg, &new, counted);
            for m in &mut out {
                m.timestamp = ts;
            }
            out
        }
        "compaction" | "branch_summary" => {
            vec![new(
                0,
                Role::System,
                MessageKind::CompactionSummary,
                s("summary"),
            )]
        }
        "model_change" => {
            let body = match (str_of(v, "provider"), str_of(v, "modelId")) {
                (Some(p), Some(m)) => format!("{p}/{m}"),
                (_, m) => m.unwrap_or_default().to_owned(),
            };
            vec![new(0, Role::System, MessageKind::Meta, body)]
        }
        "thinking_level_change" => {
            vec![new(0, Role::System, MessageKind::Meta, s("thinkingLevel"))]
        }
        "session_info" => vec![new(0, Role::System, MessageKind::Meta, s("name"))],
        "label" => vec![new(0, Role::System, MessageKind::Meta, s("label"))],
        "custom_message" => {
            let body = text::blocks_text(v.get("content").unwrap_or(&Value::Null));
            vec![new(0, Role::System, MessageKind::Meta, body)]
        }
        // `custom` (extension state, not in the model's context) and anything newer.
        _ => vec![new(0, Role::System, MessageKind::Meta, String::new())],
    }
}

/// The messages of a `message` entry's `AgentMessage`.
fn agent_message(
    msg: &Value,
    new: &dyn Fn(usize, Role, MessageKind, String) -> ParsedMessage,
    counted: bool,
) -> Vec<ParsedMessage> {
    let content = msg.get("content").unwrap_or(&Value::Null);
    let s = |k: &str| str_of(msg, k).unwrap_or_default().to_owned();
    match str_of(msg, "role").unwrap_or("") {
        "user" => {
            let body = text::blocks_text(content);
            let kind = if counted && !body.trim().is_empty() && !text::is_bare_command(&body) {
                MessageKind::UserPrompt
            } else {
                MessageKind::Meta
            };
            vec![new(0, Role::User, kind, body)]
        }
        "assistant" => assistant(msg, new),
        "toolResult" => {
            let mut m = new(
                0,
                Role::Tool,
                MessageKind::ToolResult,
                text::blocks_text(content),
            );
            m.tool_result = Some(ToolResult {
                call_id: string_of(msg, "toolCallId"),
                is_error: msg.get("isError").and_then(Value::as_bool) == Some(true),
            });
            vec![m]
        }
        "bashExecution" => {
            let body = format!("$ {}\n{}", s("command"), s("output"));
            vec![new(
                0,
                Role::User,
                MessageKind::Meta,
                body.trim_end().to_owned(),
            )]
        }
        "branchSummary" | "compactionSummary" => {
            vec![new(
                0,
                Role::System,
                MessageKind::CompactionSummary,
                s("summary"),
            )]
        }
        // `custom` (v3) / `hookMessage` (v2): extension messages.
        _ => vec![new(
            0,
            Role::System,
            MessageKind::Meta,
            text::blocks_text(content),
        )],
    }
}

fn assistant(
    msg: &Value,
    new: &dyn Fn(usize, Role, MessageKind, String) -> ParsedMessage,
) -> Vec<ParsedMessage> {
    let model = string_of(msg, "model");
    let blocks = msg
        .get("content")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut out: Vec<ParsedMessage> = if blocks.is_empty() {
        // A request that failed: no content, the error instead.
        let body = str_of(msg, "errorMessage").unwrap_or_default().to_owned();
        vec![new(0, Role::Assistant, MessageKind::Meta, body)]
    } else {
        blocks
            .iter()
            .enumerate()
            .map(|(i, b)| match str_of(b, "type").unwrap_or("") {
                "text" => new(
                    i,
                    Role::Assistant,
                    MessageKind::AssistantText,
                    str_of(b, "text").unwrap_or_default().to_owned(),
                ),
                "thinking" => new(
                    i,
                    Role::Assistant,
                    MessageKind::Thinking,
                    str_of(b, "thinking").unwrap_or_default().to_owned(),
                ),
                "toolCall" => tool_call_of(b, "arguments", "id", |text| {
                    new(i, Role::Assistant, MessageKind::ToolCall, text)
                }),
                _ => new(i, Role::Assistant, MessageKind::Meta, text::blocks_text(b)),
            })
            .collect()
    };
    for m in &mut out {
        m.model.clone_from(&model);
    }
    if let (Some(u), Some(first)) = (msg.get("usage").filter(|u| u.is_object()), out.first_mut()) {
        first.usage = Some(Usage {
            input_tokens: u64_of(u, "input"),
            output_tokens: u64_of(u, "output"),
            cache_read_tokens: u64_of(u, "cacheRead"),
            cache_creation_tokens: u64_of(u, "cacheWrite"),
            reasoning_tokens: u64_of(u, "reasoning"),
        });
        // One entry is one API response.
        first.usage_key = Some(first.message_id.clone());
        // Pi prices each response itself: `usage.cost.total`, in dollars.
        first.cost_usd = u
            .get("cost")
            .and_then(|c| crate::adapter::cost_of(c, "total"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Env {
        Env {
            home: PathBuf::from("/home/u"),
            vars: vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn roots_follow_the_override_variables() {
        let a = PiAdapter;
        assert_eq!(
            a.default_roots(&env(&[])),
            vec![PathBuf::from("/home/u/.pi/agent/sessions")]
        );
        assert_eq!(
            a.default_roots(&env(&[("PI_CODING_AGENT_DIR", "~/pi")])),
            vec![PathBuf::from("/home/u/pi/sessions")]
        );
        assert_eq!(
            a.default_roots(&env(&[
                ("PI_CODING_AGENT_DIR", "/x"),
                ("PI_CODING_AGENT_SESSION_DIR", "/flat")
            ])),
            vec![PathBuf::from("/flat")]
        );
    }

    #[test]
    fn session_ids_come_from_file_names() {
        assert_eq!(
            session_id_from_name(Path::new("/s/--a--/2026-07-09T10-00-00-000Z_abc-1.jsonl")),
            "abc-1"
        );
        assert_eq!(session_id_from_name(Path::new("plain.jsonl")), "plain");
    }

    fn write(lines: &[&str]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("2026-01-01T00-00-00-000Z_s.jsonl");
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        (dir, path)
    }

    fn user(id: &str, parent: Option<&str>, t: &str) -> String {
        serde_json::json!({"type":"message","id":id,"parentId":parent,
            "message":{"role":"user","content":t}})
        .to_string()
    }

    /// Going back to an abandoned branch and continuing it restores that branch.
    #[test]
    fn a_branch_that_comes_back_is_restored() {
        let l = [
            r#"{"type":"session","version":3,"id":"s","cwd":"/p"}"#.to_owned(),
            user("u1", None, "one"),
            user("u2", Some("u1"), "left"),
            user("u3", Some("u1"), "right"),
            user("u4", Some("u2"), "left again"),
        ];
        let (dir, path) = write(&l.iter().map(String::as_str).collect::<Vec<_>>());
        let a = PiAdapter;
        // Read line by line, so each switch is its own output, as the store sees them.
        let mut cursor = Cursor::default();
        let mut active: HashMap<String, (bool, MessageKind)> = HashMap::new();
        loop {
            let out = a.parse(dir.path(), &path, &cursor, 1).unwrap();
            for m in &out.messages {
                active.insert(m.message_id.clone(), (true, m.kind));
            }
            for e in &out.edits {
                if let Edit::Deactivate { message_ids, .. } = e {
                    for id in message_ids {
                        active.get_mut(id).unwrap().0 = false;
                    }
                }
            }
            cursor = out.cursor;
            if out.at_end {
                break;
            }
        }
        assert_eq!(active["u2"], (true, MessageKind::UserPrompt));
        assert_eq!(active["u3"], (false, MessageKind::Meta));
        assert_eq!(active["u4"], (true, MessageKind::UserPrompt));

        // In one output the edit must not deactivate what came back.
        let whole = crate::parse_file(&a, dir.path(), &path).unwrap();
        let gone: Vec<&String> = whole
            .edits
            .iter()
            .flat_map(|e| match e {
                Edit::Deactivate { message_ids, .. } => message_ids.iter().collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(gone, vec!["u3"]);
        let u4 = whole
            .messages
            .iter()
            .find(|m| m.message_id == "u4")
            .unwrap();
        assert_eq!(u4.prompt_number, 3);
    }

    #[test]
    fn a_lost_parent_does_not_abandon_the_conversation() {
        let l = [user("u1", None, "one"), user("u2", Some("missing"), "two")];
        let (dir, path) = write(&l.iter().map(String::as_str).collect::<Vec<_>>());
        let out = crate::parse_file(&PiAdapter, dir.path(), &path).unwrap();
        assert!(out.edits.is_empty());
        let numbers: Vec<u32> = out.messages.iter().map(|m| m.prompt_number).collect();
        assert_eq!(numbers, vec![1, 2]);
    }

    #[test]
    fn a_migrated_file_deactivates_the_ids_it_lost() {
        let (dir, path) = write(&[
            r#"{"type":"session","id":"s","cwd":"/p"}"#,
            r#"{"type":"message","message":{"role":"user","content":"hi"}}"#,
        ]);
        let first = crate::parse_file(&PiAdapter, dir.path(), &path).unwrap();
        assert!(first.messages.iter().any(|m| m.message_id == "L2"));
        std::fs::write(
            &path,
            [
                r#"{"type":"session","version":3,"id":"s","cwd":"/p"}"#,
                r#"{"type":"message","id":"ab12cd34","parentId":null,"message":{"role":"user","content":"hi"}}"#,
            ]
            .join("\n")
                + "\n",
        )
        .unwrap();
        let again = PiAdapter
            .parse(dir.path(), &path, &first.cursor, 1 << 20)
            .unwrap();
        assert!(again.messages.iter().any(|m| m.message_id == "ab12cd34"));
        assert_eq!(
            again.edits,
            vec![Edit::Deactivate {
                session_id: "s".into(),
                message_ids: vec!["L2".into()]
            }]
        );
    }
}
