//! Cursor CLI (`cursor-agent`): `projects/<enc>/agent-transcripts/<chatId>/<chatId>.jsonl`
//! (older builds: `agent-transcripts/<chatId>.jsonl`), appended; sub-agents in
//! `agent-transcripts/<parentChatId>/subagents/<childId>.jsonl` (FORMATS-MORE §1).
//!
//! **Where.** `~/.cursor/projects/` on Linux and macOS (`%USERPROFILE%\.cursor\projects\` on
//! Windows, unverified); `CURSOR_CONFIG_DIR` replaces `~/.cursor`. Any `.jsonl` under an
//! `agent-transcripts` folder is a transcript. Per chat, `chats/<md5(project)>/<chatId>/store.db`
//! beside `projects/` holds a `meta` row (key `0`, hex-encoded JSON) with the chat's `name`,
//! `createdAt` and `lastUsedModel`: it is opened read-only for that one row (never the `blobs`
//! table) on each read of the transcript (a sub-agent without a folder of its own takes its
//! parent chat's md5 folder for the project only). A change of `store.db` alone is not watched: its
//! name and model are picked up with the transcript's next line.
//!
//! **Records.** `{"role", "message": {"content": [blocks]}}` with Anthropic-shaped blocks
//! (`text`, `thinking`, `tool_use`); no ids, no timestamps, no cwd, no model. Message ids are
//! derived from the line's position (`L<line>`, `L<line>#<block>`): the file is only appended
//! to, so they are stable. Records of other shapes (`turn_ended`, …) are kept as meta.
//!
//! **Prompts.** A `user` line of a chat's own transcript; its text is what `<user_query>…
//! </user_query>` wraps (the whole text when it has no such tags). A sub-agent file's `user`
//! line is the task its parent agent wrote: meta, not a prompt.
//!
//! **Tools.** `tool_use` blocks carry no id and the transcript holds no results (they live
//! only in `store.db` protobuf blobs): calls are stored unpaired, with no call id. A
//! `tool_result` block, should a build write one, is stored as a result.
//!
//! **Project.** The transcript has no cwd, and `<enc>` is the project path without its
//! leading `/` and with every `/` turned into `-` (lossy: `a-b` may be `a/b`). It is decoded
//! only where something confirms it: the chat's `chats/<md5>` folder name (the candidate
//! whose md5 matches), an absolute path in a tool input whose folder encodes to `<enc>`, or a
//! folder on this machine that exists under exactly that spelling. Otherwise it is unknown.
//!
//! **Times.** The chat's start is the meta's `createdAt`; the transcript's modification time
//! is when it was last updated. Messages have no timestamp.

use std::path::{Path, PathBuf};

use rusqlite::OptionalExtension;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl, mtime_ms, parse_ts,
    str_of, string_of,
};
use crate::model::{
    Cursor, MessageKind, ParseIssue, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
    ToolCall, ToolResult,
};
use crate::sqlite::Db;
use crate::text;

const AGENT: &str = "cursor";
const TRANSCRIPTS: &str = "agent-transcripts";

pub struct CursorAdapter;

impl ConversationAdapter for CursorAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let base = env
            .var("CURSOR_CONFIG_DIR")
            .map_or_else(|| env.home.join(".cursor"), PathBuf::from);
        vec![base.join("projects")]
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        path.extension().is_some_and(|e| e == "jsonl")
            && rel
                .parent()
                .is_some_and(|p| p.components().any(|c| c.as_os_str() == TRANSCRIPTS))
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let ctx = FileContext::new(path);
        let store = ctx.store_db(&ctx.chat_id);
        // A sub-agent shares its parent chat's project (and md5 folder).
        let project_hash = store
            .as_ref()
            .map(|(h, _)| h.clone())
            .or_else(|| ctx.store_db(ctx.parent.as_deref()?).map(|(h, _)| h));
        let mut issues = Vec::new();
        let meta = store.as_ref().and_then(|(_, db)| match chat_meta(db) {
            Ok(m) => m,
            Err(e) => {
                issues.push(ParseIssue {
                    line: 0,
                    byte_offset: 0,
                    reason: format!("chat metadata not read: {e}"),
                    kept: false,
                });
                None
            }
        });
        let mut info = SessionInfo::default();
        let (mut out, st) = drive_jsonl::<State>(path, cursor, max_bytes, |st, emit, rec| {
            if !st.resolved
                && st.project.is_none()
                && let Some(hash) = &project_hash
            {
                // Once per file: what the chat's md5 folder confirms.
                st.resolved = true;
                st.project = ctx.enc.as_deref().and_then(|e| md5_decode(e, hash));
            }
            handle(&ctx, st, emit, rec, &mut info);
        })?;
        out.issues.splice(0..0, issues);
        let mut project = st.project.clone();
        if project.is_none() {
            project = ctx.enc.as_deref().and_then(probe_decode);
        }
        if project != st.project {
            // Persist what the file system confirmed, so later reads agree.
            let mut s = st;
            s.project.clone_from(&project);
            out.cursor.state = serde_json::to_value(&s).unwrap_or_default();
        }
        info.session_id.clone_from(&ctx.chat_id);
        info.project_path = project;
        info.is_subagent = ctx.parent.is_some();
        info.parent_session_id.clone_from(&ctx.parent);
        if let Some(m) = &meta {
            info.model = string_of(m, "lastUsedModel");
            info.started_at = m.get("createdAt").and_then(parse_ts);
            if let Some(name) = string_of(m, "name") {
                info.title = Some((TitleSource::Generated, text::truncate_chars(&name, 200)));
            }
        }
        if let Ok(md) = std::fs::metadata(path) {
            let t = mtime_ms(&md);
            info.updated_at = Some(info.started_at.map_or(t, |s| s.max(t)));
        }
        out.sessions.push(info);
        Ok(out)
    }
}

/// What the transcript's location says about its chat.
struct FileContext {
    chat_id: String,
    /// `agent-transcripts/<parent>/subagents/<child>.jsonl`: the parent chat.
    parent: Option<String>,
    /// The encoded project folder name.
    enc: Option<String>,
    /// The folder that holds `projects/` and `chats/` (`~/.cursor`).
    base: Option<PathBuf>,
}

impl FileContext {
    fn new(path: &Path) -> Self {
        let name = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_owned);
        let chat_id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let parent = path
            .parent()
            .filter(|p| p.file_name().is_some_and(|n| n == "subagents"))
            .and_then(Path::parent)
            .and_then(name);
        let transcripts = path
            .ancestors()
            .skip(1)
            .find(|a| a.file_name().is_some_and(|n| n == TRANSCRIPTS));
        let enc_dir = transcripts.and_then(Path::parent);
        FileContext {
            chat_id,
            parent,
            enc: enc_dir.and_then(name),
            base: enc_dir
                .and_then(Path::parent)
                .and_then(Path::parent)
                .map(Path::to_owned),
        }
    }

    /// `chats/<md5 folder>/<chat>/store.db`, with the md5 folder's name.
    fn store_db(&self, chat: &str) -> Option<(String, PathBuf)> {
        let chats = self.base.as_ref()?.join("chats");
        std::fs::read_dir(chats)
            .ok()?
            .filter_map(Result::ok)
            .find_map(|e| {
                let db = e.path().join(chat).join("store.db");
                let hash = e.file_name().to_str()?.to_owned();
                db.is_file().then_some((hash, db))
            })
    }
}

/// The `meta` row `0` of a chat's `store.db`: hex-encoded JSON (plain JSON accepted too).
fn chat_meta(path: &Path) -> Result<Option<Value>, ParseError> {
    let db = Db::open(path)?;
    if !db.has_table("meta") {
        return Ok(None);
    }
    let raw: Option<rusqlite::types::Value> = db
        .conn()
        .query_row("SELECT value FROM meta WHERE key = '0'", [], |r| r.get(0))
        .optional()
        .map_err(|e| db.error(e))?;
    db.finish()?;
    let bytes = match raw {
        Some(rusqlite::types::Value::Text(t)) => t.into_bytes(),
        Some(rusqlite::types::Value::Blob(b)) => b,
        _ => return Ok(None),
    };
    let t = bytes.trim_ascii();
    let json = if t.starts_with(b"{") {
        t.to_vec()
    } else {
        match unhex(t) {
            Some(j) => j,
            None => return Ok(None),
        }
    };
    Ok(serde_json::from_slice(&json).ok().filter(Value::is_object))
}

fn unhex(s: &[u8]) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let nib = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    s.chunks(2)
        .map(|p| Some(nib(p[0])? << 4 | nib(p[1])?))
        .collect()
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    prompt: u32,
    /// The project path, once something confirmed it.
    project: Option<String>,
    /// Whether the md5 folder was consulted.
    resolved: bool,
}

fn handle(
    ctx: &FileContext,
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
) {
    let v = &rec.value;
    let base_id = format!("L{}", rec.line);
    let sub = ctx.parent.is_some();
    let mk = |block: usize, role: Role, kind: MessageKind, prompt: u32| {
        let id = if block == 0 {
            base_id.clone()
        } else {
            format!("{base_id}#{block}")
        };
        let mut m = blank(AGENT, &ctx.chat_id, id, role, kind);
        m.prompt_number = prompt;
        m.flags.sidechain = sub;
        if sub {
            m.agent_id = Some(ctx.chat_id.clone());
        }
        m
    };
    let role = str_of(v, "role").unwrap_or("");
    let blocks: Vec<Value> = match v.get("message").and_then(|m| m.get("content")) {
        Some(Value::Array(a)) => a.clone(),
        Some(Value::String(s)) => vec![serde_json::json!({"type": "text", "text": s})],
        _ => Vec::new(),
    };
    if !matches!(role, "user" | "assistant") || v.get("message").is_none() {
        // Control records (`turn_ended`, …).
        let mut m = mk(0, Role::System, MessageKind::Meta, st.prompt);
        m.text = str_of(v, "type").unwrap_or_default().to_owned();
        emit.push(m);
        return;
    }
    let mut out: Vec<ParsedMessage> = Vec::new();
    if role == "user" {
        let typed: Vec<&str> = blocks
            .iter()
            .filter(|b| str_of(b, "type") == Some("text"))
            .filter_map(|b| str_of(b, "text"))
            .collect();
        let typed = user_query(&typed.join("\n"));
        let is_prompt = !sub && !typed.trim().is_empty() && !text::only_injected(&typed);
        if is_prompt {
            st.prompt += 1;
            if st.prompt == 1 {
                info.title = Some((TitleSource::FirstPrompt, text::prompt_title(&typed)));
            }
        }
        let kind = if is_prompt {
            MessageKind::UserPrompt
        } else {
            MessageKind::Meta
        };
        let mut m = mk(0, Role::User, kind, st.prompt);
        m.text = typed;
        out.push(m);
        for b in blocks
            .iter()
            .filter(|b| str_of(b, "type") == Some("tool_result"))
        {
            out.push(tool_result(&mk, out.len(), b, st.prompt));
        }
    } else {
        for b in &blocks {
            let i = out.len();
            let m = match str_of(b, "type").unwrap_or("") {
                "text" => {
                    let t = str_of(b, "text").unwrap_or_default();
                    if t.trim().is_empty() {
                        continue;
                    }
                    let mut m = mk(i, Role::Assistant, MessageKind::AssistantText, st.prompt);
                    m.text = t.to_owned();
                    m
                }
                "thinking" | "reasoning" => {
                    let mut m = mk(i, Role::Assistant, MessageKind::Thinking, st.prompt);
                    m.text = str_of(b, "thinking")
                        .or_else(|| str_of(b, "text"))
                        .unwrap_or_default()
                        .to_owned();
                    m
                }
                "tool_use" | "tool_call" => {
                    let name = str_of(b, "name").unwrap_or("unknown").to_owned();
                    let input = b.get("input").cloned().unwrap_or(Value::Null);
                    if st.project.is_none() {
                        st.project = ctx.enc.as_deref().and_then(|e| path_decode(e, &input));
                    }
                    let mut m = mk(i, Role::Assistant, MessageKind::ToolCall, st.prompt);
                    m.text = text::tool_call_text(&name, &input);
                    m.tool_call = Some(ToolCall {
                        name,
                        input,
                        call_id: string_of(b, "id"),
                    });
                    m
                }
                "tool_result" => tool_result(&mk, i, b, st.prompt),
                _ => {
                    let mut m = mk(i, Role::Assistant, MessageKind::Meta, st.prompt);
                    m.text = text::blocks_text(b);
                    m
                }
            };
            out.push(m);
        }
        if out.is_empty() {
            out.push(mk(0, Role::Assistant, MessageKind::Meta, st.prompt));
        }
    }
    for m in out {
        emit.push(m);
    }
}

fn tool_result(
    mk: &dyn Fn(usize, Role, MessageKind, u32) -> ParsedMessage,
    i: usize,
    b: &Value,
    prompt: u32,
) -> ParsedMessage {
    let mut m = mk(i, Role::Tool, MessageKind::ToolResult, prompt);
    m.text = text::blocks_text(b.get("content").unwrap_or(&Value::Null));
    m.tool_result = Some(ToolResult {
        call_id: string_of(b, "tool_use_id"),
        is_error: b.get("is_error").and_then(Value::as_bool) == Some(true),
    });
    m
}

/// The text `<user_query>…</user_query>` wraps, trimmed; the whole text when it has none.
fn user_query(s: &str) -> String {
    const OPEN: &str = "<user_query>";
    const CLOSE: &str = "</user_query>";
    match s.find(OPEN) {
        Some(i) => {
            let rest = &s[i + OPEN.len()..];
            rest[..rest.find(CLOSE).unwrap_or(rest.len())]
                .trim()
                .to_owned()
        }
        None => s.trim().to_owned(),
    }
}

/// Cursor's project folder name: the path without its leading separator, every separator `-`.
fn encode(path: &str) -> String {
    path.trim_start_matches(['/', '\\'])
        .trim_end_matches(['/', '\\'])
        .replace(['/', '\\'], "-")
}

/// The folder of an absolute path in a tool input (at any depth) that encodes to `enc`.
fn path_decode(enc: &str, input: &Value) -> Option<String> {
    match input {
        Value::String(s) if s.starts_with('/') => s
            .char_indices()
            .filter(|&(_, c)| c == '/')
            .map(|(i, _)| &s[..i])
            .chain(std::iter::once(s.as_str()))
            .find(|p| !p.is_empty() && encode(p) == enc)
            .map(str::to_owned),
        Value::Array(a) => a.iter().find_map(|x| path_decode(enc, x)),
        Value::Object(o) => o.values().find_map(|x| path_decode(enc, x)),
        _ => None,
    }
}

/// The decoding of `enc` (each `-` a `/` or itself) whose md5 is the chat folder's `hash`.
fn md5_decode(enc: &str, hash: &str) -> Option<String> {
    let parts: Vec<&str> = enc.split('-').collect();
    let k = parts.len() - 1;
    if k > 16 || hash.len() != 32 {
        return None;
    }
    let hash = hash.to_ascii_lowercase();
    (0u32..1 << k).find_map(|mask| {
        let mut p = String::with_capacity(enc.len() + 1);
        p.push('/');
        p.push_str(parts[0]);
        for (j, part) in parts[1..].iter().enumerate() {
            // Bit clear: a separator (the likelier reading, tried first).
            p.push(if mask >> j & 1 == 0 { '/' } else { '-' });
            p.push_str(part);
        }
        (crate::reader::hex(&md5(p.as_bytes())) == hash).then_some(p)
    })
}

/// The decoding of `enc` that names a folder on this machine, walking folders that exist.
fn probe_decode(enc: &str) -> Option<String> {
    fn walk(dir: &Path, seg: &str, rest: &[&str]) -> Option<PathBuf> {
        let here = dir.join(seg);
        let Some((next, more)) = rest.split_first() else {
            return here.is_dir().then_some(here);
        };
        if here.is_dir()
            && let Some(p) = walk(&here, next, more)
        {
            return Some(p);
        }
        walk(dir, &format!("{seg}-{next}"), more)
    }
    let parts: Vec<&str> = enc.split('-').collect();
    if parts.len() > 64 || parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    let found = walk(Path::new("/"), parts[0], &parts[1..])?;
    found.to_str().map(str::to_owned)
}

/// MD5 (RFC 1321): the digest Cursor names a project's `chats/` folder with.
fn md5(input: &[u8]) -> [u8; 16] {
    const S: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut msg = input.to_vec();
    let bit_len = (input.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_le_bytes());
    let (mut a0, mut b0, mut c0, mut d0) = (
        0x6745_2301u32,
        0xefcd_ab89u32,
        0x98ba_dcfeu32,
        0x1032_5476u32,
    );
    for chunk in msg.chunks(64) {
        let w: Vec<u32> = chunk
            .chunks(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let (mut a, mut b, mut c, mut d) = (a0, b0, c0, d0);
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(w[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(S[i]));
        }
        a0 = a0.wrapping_add(a);
        b0 = b0.wrapping_add(b);
        c0 = c0.wrapping_add(c);
        d0 = d0.wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, v) in [a0, b0, c0, d0].iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_matches_rfc_1321() {
        let h = |s: &str| crate::reader::hex(&md5(s.as_bytes()));
        assert_eq!(h(""), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(h("abc"), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            h("12345678901234567890123456789012345678901234567890123456789012345678901234567890"),
            "57edf4a22be3c955ac49da2e2107b67a"
        );
        // The fixture's chats folder (SOURCES.md).
        assert_eq!(h("/Users/test/project"), "ef8e68efc0e57893bcf2516655bb7c04");
    }

    #[test]
    fn project_decoding_needs_confirmation() {
        let hash = crate::reader::hex(&md5(b"/Users/x/my-app"));
        assert_eq!(
            md5_decode("Users-x-my-app", &hash).as_deref(),
            Some("/Users/x/my-app")
        );
        assert_eq!(md5_decode("Users-x-my-app", "0".repeat(32).as_str()), None);
        let input = serde_json::json!({"path": "/Users/x/my-app/src/a.rs", "n": 3});
        assert_eq!(
            path_decode("Users-x-my-app", &input).as_deref(),
            Some("/Users/x/my-app")
        );
        assert_eq!(path_decode("Users-x-other", &input), None);
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a-b").join("c");
        std::fs::create_dir_all(&dir).unwrap();
        let enc = encode(dir.to_str().unwrap());
        assert_eq!(probe_decode(&enc).as_deref(), dir.to_str());
    }

    #[test]
    fn user_query_is_unwrapped() {
        assert_eq!(
            user_query("<user_query>\nhi there\n</user_query>"),
            "hi there"
        );
        assert_eq!(user_query("  plain  "), "plain");
    }
}
