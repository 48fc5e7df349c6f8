//! OpenCode (`opencode/`): SOURCES.md "OpenCode", all three shapes (2.x database, 1.x
//! database, 1.x JSON storage), and how each is read again after the agent changed it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ai_cli_session_collector::{
    AdapterRegistry, ConversationAdapter, Cursor, Edit, Env, MessageKind, ParseOutput,
    ParsedMessage, Role, SessionInfo, SourceKind, TitleSource, Usage, aggregate_usage, parse_file,
};
use serde_json::Value;

use super::*;

const AGENT: &str = "opencode";
const V2: &str = "opencode/v2-sqlite/home/.local/share/opencode";
const V1DB: &str = "opencode/v1-sqlite-gitai/home/.local/share/opencode";
const V1JSON: &str = "opencode/v1-json/home/.local/share/opencode";
const DB: &str = "opencode.db";
const JSON_SESSION: &str =
    "storage/session/4b0ea68d7af9a6031a7ffda7ad66e0cb83315750/test-session-123.json";
const COLORS: &str = "ses_f34687c4effe4c1OUSq8A7KEeN";
const MAGIC: &str = "ses_f34a1dc63ffe0cCnMWOTpjumbx";
const V1SID: &str = "test-session-123";

fn adapter() -> &'static dyn ConversationAdapter {
    static REG: std::sync::OnceLock<AdapterRegistry> = std::sync::OnceLock::new();
    REG.get_or_init(AdapterRegistry::new).get(AGENT).unwrap()
}

fn in_session<'a>(out: &'a ParseOutput, sid: &str) -> Vec<&'a ParsedMessage> {
    out.messages
        .iter()
        .filter(|m| m.session_id == sid)
        .collect()
}

fn kinds<'a>(msgs: &[&'a ParsedMessage], kind: MessageKind) -> Vec<&'a ParsedMessage> {
    msgs.iter().copied().filter(|m| m.kind == kind).collect()
}

fn by_id<'a>(out: &'a ParseOutput, sid: &str, id: &str) -> &'a ParsedMessage {
    out.messages
        .iter()
        .find(|m| m.session_id == sid && m.message_id == id)
        .unwrap_or_else(|| panic!("no message {id} in {sid}"))
}

fn info<'a>(out: &'a ParseOutput, sid: &str) -> &'a SessionInfo {
    out.sessions
        .iter()
        .rev()
        .find(|i| i.session_id == sid)
        .unwrap_or_else(|| panic!("no session info for {sid}"))
}

/// Every record read, once: its raw bytes parsed as JSON.
fn raws(msgs: &[&ParsedMessage]) -> Vec<Value> {
    msgs.iter()
        .filter_map(|m| m.raw.as_ref())
        .map(|r| serde_json::from_slice(r).expect("raw is JSON"))
        .collect()
}

/// The raw `session_message` rows of one type.
fn rows_of(msgs: &[&ParsedMessage], ty: &str) -> Vec<Value> {
    raws(msgs).into_iter().filter(|r| r["type"] == ty).collect()
}

/// Tool calls whose call id has a result among `msgs`: (name, result text, is_error).
fn pairs(msgs: &[&ParsedMessage]) -> Vec<(String, String, bool)> {
    kinds(msgs, MessageKind::ToolCall)
        .into_iter()
        .map(|c| {
            let tc = c.tool_call.as_ref().unwrap();
            let id = tc.call_id.as_deref().expect("call id");
            let r: Vec<_> = msgs
                .iter()
                .filter(|m| {
                    m.tool_result
                        .as_ref()
                        .is_some_and(|r| r.call_id.as_deref() == Some(id))
                })
                .collect();
            assert_eq!(r.len(), 1, "call {id} has exactly one result");
            assert_eq!(r[0].kind, MessageKind::ToolResult);
            (
                tc.name.clone(),
                r[0].text.clone(),
                r[0].tool_result.as_ref().unwrap().is_error,
            )
        })
        .collect()
}

fn parse_at(root: &Path, path: &Path, cursor: &Cursor, max: usize) -> ParseOutput {
    adapter().parse(root, path, cursor, max).unwrap()
}

/// (session, message id) → (kind, text), later outputs overriding earlier ones: what the store
/// holds after upserting them in order.
fn upserted<'a>(
    outs: impl IntoIterator<Item = &'a ParseOutput>,
) -> BTreeMap<(String, String), (MessageKind, String)> {
    let mut map = BTreeMap::new();
    for out in outs {
        for m in &out.messages {
            map.insert(
                (m.session_id.clone(), m.message_id.clone()),
                (m.kind, m.text.clone()),
            );
        }
    }
    map
}

/// The distinct message ids of an output, and how many of its messages carry raw bytes.
fn ids_and_raws(out: &ParseOutput) -> (BTreeSet<String>, usize) {
    (
        out.messages.iter().map(|m| m.message_id.clone()).collect(),
        out.messages.iter().filter(|m| m.raw.is_some()).count(),
    )
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&dst).unwrap();
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// A copy of a fixture database in a temp folder, and a writer connection in WAL mode (the
/// journal mode OpenCode uses).
fn writable_copy(root: &str) -> (tempfile::TempDir, PathBuf, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB);
    std::fs::copy(more().join(root).join(DB), &path).unwrap();
    let w = rusqlite::Connection::open(&path).unwrap();
    let mode: String = w
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    (dir, path, w)
}

// ---- SOURCES.md values ----

#[test]
fn v2_database_follows_sources_md() {
    let out = parse(AGENT, V2, DB);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(adapter().source_kind(Path::new(DB)), SourceKind::Database);
    let sids: BTreeSet<&str> = out.messages.iter().map(|m| m.session_id.as_str()).collect();
    assert_eq!(sids, BTreeSet::from([COLORS, MAGIC]));

    // Every row (2 `session_v2`, 4 + 7 `session_message`) is stored exactly once.
    let all: Vec<&ParsedMessage> = out.messages.iter().collect();
    let rows = raws(&all);
    assert_eq!(rows.len(), 13);
    let row_ids: BTreeSet<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(row_ids.len(), 13, "no row twice");
    assert!(rows.iter().all(|r| r.get("memex_mark_t").is_none()
        && r.get("memex_mark_id").is_none()
        && r.get("time_updated").is_some()));
    assert!(out.messages.iter().all(|m| m.line == 0));

    // Session "Color preference".
    let s = info(&out, COLORS);
    assert_eq!(s.project_path.as_deref(), Some("/Users/dev/oc-tools"));
    assert_eq!(
        s.title,
        Some((
            TitleSource::Generated,
            "Color preference: red, green or blue".into()
        ))
    );
    assert_eq!(s.model.as_deref(), Some("big-pickle"));
    assert!(!s.is_subagent && s.parent_session_id.is_none());
    assert_eq!(s.started_at, Some(1790122099689));
    let c = in_session(&out, COLORS);
    let record = by_id(&out, COLORS, "session");
    assert!(
        String::from_utf8_lossy(record.raw.as_ref().unwrap()).contains("\"version\":\"2.0.14\"")
    );
    let prompts = kinds(&c, MessageKind::UserPrompt);
    assert_eq!(prompts.len(), 1);
    assert_eq!(
        prompts[0].text,
        "Use your question tool to ask me which color I prefer: red, green or blue. Then tell \
         me what I picked."
    );
    assert_eq!(prompts[0].message_id, "msg_0cb9783b5001n0dNVAt61r1gNM");
    assert_eq!(rows_of(&c, "assistant").len(), 2);
    assert_eq!(rows_of(&c, "idle").len(), 1);
    // Sparse `seq` 4, 5, 16, 23 orders the rows.
    let seqs: BTreeSet<u64> = c
        .iter()
        .filter(|m| m.message_id != "session")
        .map(|m| m.seq >> 10)
        .collect();
    assert_eq!(seqs, BTreeSet::from([4, 5, 16, 23]));
    // The question tool was answered without running: its answer is its result.
    let p = pairs(&c);
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].0, "question");
    assert!(p[0].1.contains("\"Green\""), "{}", p[0].1);
    assert!(!p[0].2);
    let call = kinds(&c, MessageKind::ToolCall)[0];
    assert_eq!(
        call.tool_call.as_ref().unwrap().call_id.as_deref(),
        Some("call_81b04a5712ec4b2ba3045ad5")
    );
    assert!(call.text.contains("Which color do you prefer?"));
    let answer = kinds(&c, MessageKind::AssistantText);
    assert_eq!(answer.len(), 1);
    assert!(answer[0].text.starts_with("You picked **Green** 🌿"));
    assert_eq!(answer[0].message_id, "msg_0cb97c3d4001T5mDYgVkqZF5Gi#1");
    assert_eq!(kinds(&c, MessageKind::Thinking).len(), 2);
    assert!(
        c.iter()
            .filter(|m| m.message_id != "session")
            .all(|m| m.prompt_number == 1)
    );
    assert!(
        c.iter()
            .all(|m| m.cwd.as_deref() == Some("/Users/dev/oc-tools"))
    );
    assert_eq!(answer[0].model.as_deref(), Some("big-pickle"));
    assert_eq!(
        aggregate_usage(c.iter().copied()),
        Usage {
            input_tokens: 8446 + 174,
            output_tokens: 138 + 26,
            cache_read_tokens: 8448,
            ..Default::default()
        }
    );

    // Session "Magic passphrase": a typed prompt, a shell command, its synthetic echo, and
    // `/review` stored expanded (no marker: it is what the human sent).
    let s = info(&out, MAGIC);
    assert_eq!(s.project_path.as_deref(), Some("/Users/dev/oc-tools"));
    assert_eq!(
        s.title,
        Some((
            TitleSource::Generated,
            "Magic passphrase PURPLE-ELEPHANT-42".into()
        ))
    );
    let m = in_session(&out, MAGIC);
    let seqs: BTreeSet<u64> = m
        .iter()
        .filter(|m| m.message_id != "session")
        .map(|m| m.seq >> 10)
        .collect();
    assert_eq!(seqs, BTreeSet::from([4, 7, 14, 16, 21, 22, 23]));
    assert_eq!(rows_of(&m, "user").len(), 2);
    let prompts = kinds(&m, MessageKind::UserPrompt);
    assert_eq!(prompts.len(), 2);
    assert_eq!(
        prompts[0].text,
        "The magic passphrase is PURPLE-ELEPHANT-42. Just acknowledge it briefly."
    );
    assert!(prompts[1].text.starts_with("You are a code reviewer."));
    assert_eq!(
        prompts.iter().map(|p| p.prompt_number).collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(has_word(
        &out,
        MessageKind::UserPrompt,
        "PURPLE-ELEPHANT-42"
    ));
    assert!(has_word(&out, MessageKind::AssistantText, "Acknowledged"));
    let shell = by_id(&out, MAGIC, "msg_0cb5e54ee001uW31AqH3fKMHuz");
    assert_eq!((shell.kind, shell.role), (MessageKind::Meta, Role::User));
    assert!(shell.text.contains("echo hello from user shell && ls *.py"));
    assert!(shell.text.contains("farewell.py"));
    assert_eq!(rows_of(&m, "shell").len(), 1);
    let synthetic = by_id(&out, MAGIC, "msg_0cb5e5501001g5PyW1VNfUmmH3");
    assert_eq!(synthetic.kind, MessageKind::Meta);
    assert!(
        synthetic
            .text
            .starts_with("The following shell command was executed by the user")
    );
    assert_eq!(synthetic.prompt_number, 1);
    assert_eq!(rows_of(&m, "assistant").len(), 2);
    let p = pairs(&m);
    assert_eq!(p.len(), 3);
    assert!(p.iter().all(|(name, _, err)| name == "shell" && !err));
    assert!(
        p.iter()
            .any(|(_, out, _)| out.contains("+def farewell(name):"))
    );
    assert!(p.iter().any(|(_, out, _)| out.contains("(no output)")));
    let review = kinds(&m, MessageKind::ToolCall);
    assert!(review.iter().all(|c| c.prompt_number == 2));
    assert_eq!(
        review[0].tool_call.as_ref().unwrap().input["command"],
        "git status --short"
    );
}

#[test]
fn v1_database_follows_sources_md() {
    let out = parse(AGENT, V1DB, DB);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let s = info(&out, V1SID);
    assert_eq!(s.project_path.as_deref(), Some("/Users/test/project"));
    // `parent_id` is set: by OpenCode's rules a child (sub-agent) session.
    assert!(s.is_subagent);
    assert_eq!(s.parent_session_id.as_deref(), Some("parent-session-456"));
    assert_eq!(
        s.title,
        Some((TitleSource::Generated, "Test Session".into()))
    );
    assert_eq!(s.model.as_deref(), Some("gpt-5"));
    assert_eq!(s.started_at, Some(1706459830000));
    assert!(out.messages.iter().all(|m| m.session_id == V1SID));
    let all: Vec<&ParsedMessage> = out.messages.iter().collect();

    // 1 session row, 2 message rows, 4 part rows: each stored once.
    let rows = raws(&all);
    assert_eq!(rows.len(), 7);
    assert_eq!(
        rows.iter()
            .filter(|r| r.get("message_id").is_some())
            .count(),
        4
    );
    assert_eq!(rows.iter().filter(|r| r.get("slug").is_some()).count(), 1);
    let user = by_id(&out, V1SID, "msg-user-sql-001");
    let assistant = by_id(&out, V1SID, "msg-assistant-sql-001");
    assert_eq!((user.role, user.kind), (Role::User, MessageKind::Meta));
    assert_eq!(
        (assistant.role, assistant.kind),
        (Role::Assistant, MessageKind::Meta)
    );
    assert_eq!(
        assistant.usage.map(|u| (u.input_tokens, u.output_tokens)),
        Some((10, 20))
    );

    // The child session's user text is its parent's task, not a human prompt.
    assert!(prompt_texts(&out).is_empty());
    let task = by_id(&out, V1SID, "msg-user-sql-001/prt-sql-001");
    assert_eq!((task.role, task.kind), (Role::User, MessageKind::Meta));
    assert_eq!(
        task.text,
        "Please update index.ts using sqlite transcript data"
    );
    assert!(
        out.messages
            .iter()
            .all(|m| m.flags.sidechain && m.prompt_number == 0)
    );
    let texts: Vec<&str> = of_kind(&out, MessageKind::AssistantText)
        .iter()
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(
        texts,
        [
            "I will make the edit from sqlite.",
            "Done from sqlite source."
        ]
    );
    assert!(has_word(&out, MessageKind::AssistantText, "sqlite"));
    let p = pairs(&all);
    assert_eq!(p, [("edit".to_owned(), "Edit applied".to_owned(), false)]);
    let call = by_id(&out, V1SID, "msg-assistant-sql-001/prt-sql-003");
    assert_eq!(
        call.tool_call.as_ref().unwrap().call_id.as_deref(),
        Some("call-sql-001")
    );
    assert_eq!(
        call.tool_call.as_ref().unwrap().input["filePath"],
        "/Users/test/project/index.ts"
    );
    assert!(
        out.messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .all(|m| m.cwd.as_deref() == Some("/Users/test/project")
                && m.model.as_deref() == Some("gpt-5"))
    );
}

#[test]
fn v1_json_storage_follows_sources_md() {
    let out = parse(AGENT, V1JSON, JSON_SESSION);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(
        adapter().source_kind(Path::new(JSON_SESSION)),
        SourceKind::Document
    );
    let s = info(&out, V1SID);
    assert_eq!(s.project_path.as_deref(), Some("/Users/test/project"));
    assert_eq!(
        s.title,
        Some((
            TitleSource::Generated,
            "Update the comment in index.ts".into()
        ))
    );
    assert_eq!(s.model.as_deref(), Some("claude-3-5-sonnet-20241022"));
    assert!(!s.is_subagent);
    assert_eq!(
        (s.started_at, s.updated_at),
        (Some(1706459830000), Some(1706459835000))
    );

    assert_eq!(
        prompt_texts(&out),
        ["Update the comment in index.ts to say 'Hello World'"]
    );
    let prompt = &of_kind(&out, MessageKind::UserPrompt)[0];
    assert_eq!(prompt.message_id, "msg-user-001/prt-001");
    assert_eq!(prompt.prompt_number, 1);
    assert!(has_word(&out, MessageKind::UserPrompt, "Hello World"));
    assert!(has_word(
        &out,
        MessageKind::AssistantText,
        "updated the comment"
    ));

    // One assistant message of 4 parts: text, tool `edit`, text, empty synthetic text.
    let parts: Vec<&ParsedMessage> = out
        .messages
        .iter()
        .filter(|m| m.message_id.starts_with("msg-assistant-001/") && m.raw.is_some())
        .collect();
    let kinds_of: Vec<MessageKind> = parts.iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds_of,
        [
            MessageKind::AssistantText,
            MessageKind::ToolCall,
            MessageKind::AssistantText,
            MessageKind::Meta
        ]
    );
    assert_eq!(parts[3].text, "");
    let all: Vec<&ParsedMessage> = out.messages.iter().collect();
    assert_eq!(
        pairs(&all),
        [(
            "edit".to_owned(),
            "Edit applied successfully.".to_owned(),
            false
        )]
    );
    let call = by_id(&out, V1SID, "msg-assistant-001/prt-002");
    assert_eq!(
        call.tool_call.as_ref().unwrap().call_id.as_deref(),
        Some("call-001")
    );
    assert!(
        out.messages
            .iter()
            .all(|m| m.prompt_number == 1 || m.message_id == "session")
    );
    assert!(out.messages.iter().all(|m| !m.flags.sidechain));

    // The session file, 2 message files and 5 part files: each stored once, byte for byte.
    let storage = more().join(V1JSON).join("storage");
    let mut files: Vec<Vec<u8>> =
        vec![std::fs::read(more().join(V1JSON).join(JSON_SESSION)).unwrap()];
    for dir in [
        "message/test-session-123",
        "part/msg-user-001",
        "part/msg-assistant-001",
    ] {
        for e in std::fs::read_dir(storage.join(dir)).unwrap() {
            files.push(std::fs::read(e.unwrap().path()).unwrap());
        }
    }
    let mut stored: Vec<Vec<u8>> = out.messages.iter().filter_map(|m| m.raw.clone()).collect();
    files.sort();
    stored.sort();
    assert_eq!(stored.len(), 8);
    assert_eq!(stored, files);
}

// ---- reading again after the agent wrote ----

#[test]
fn v2_database_rows_inserted_and_rewritten_in_place_come_back_under_their_ids() {
    let (dir, path, w) = writable_copy(V2);
    let root = dir.path();
    let first = parse_file(adapter(), root, &path).unwrap();
    assert_eq!(
        first.messages.iter().filter(|m| m.raw.is_some()).count(),
        13
    );
    let mut outs = vec![first.clone()];
    let mut cursor = first.cursor.clone();

    // Nothing changed: nothing comes back.
    let again = parse_at(root, &path, &cursor, 1 << 20);
    assert!(again.messages.is_empty() && again.at_end);
    cursor = again.cursor;

    // A new prompt in the first session.
    let t0 = 1_790_122_200_000_i64;
    w.execute(
        "INSERT INTO session_message (id, session_id, type, seq, time_created, time_updated, data)
         VALUES ('msg_test_user', ?1, 'user', 30, ?2, ?2,
                 '{\"text\":\"Now pick a shade of green\",\"files\":[],\"agents\":[]}')",
        rusqlite::params![COLORS, t0],
    )
    .unwrap();
    let out = parse_at(root, &path, &cursor, 1 << 20);
    let (ids, raw) = ids_and_raws(&out);
    assert_eq!(ids, BTreeSet::from(["msg_test_user".to_owned()]));
    assert_eq!(raw, 1);
    let p = &out.messages[0];
    assert_eq!((p.kind, p.prompt_number), (MessageKind::UserPrompt, 2));
    assert_eq!(p.seq >> 10, 30);
    assert_eq!(
        info(&out, COLORS).project_path.as_deref(),
        Some("/Users/dev/oc-tools")
    );
    cursor = out.cursor.clone();
    outs.push(out);

    // An assistant step inserted, then rewritten 20 times while it streams.
    let data = |k: usize| {
        let mut content =
            vec![serde_json::json!({"type": "reasoning", "text": "The user wants a shade."})];
        if k > 0 {
            let words: Vec<String> = (1..=k).map(|i| i.to_string()).collect();
            content.push(
                serde_json::json!({"type": "text", "text": format!("Shade {}", words.join(" "))}),
            );
        }
        if k >= 10 {
            let (status, result) = if k >= 15 {
                (
                    "completed",
                    serde_json::json!([{"type": "text", "text": "mint\nsage"}]),
                )
            } else {
                ("running", serde_json::json!([]))
            };
            content.push(
                serde_json::json!({"type": "tool", "id": "call_shade", "name": "read",
                "executed": true, "state": {"status": status, "input": {"path": "shades.txt"},
                "content": result}}),
            );
        }
        serde_json::json!({"agent": "build", "content": content,
            "model": {"id": "big-pickle", "providerID": "opencode"},
            "tokens": {"input": 100, "output": k, "reasoning": 0, "cache": {"read": 0, "write": 0}}})
        .to_string()
    };
    w.execute(
        "INSERT INTO session_message (id, session_id, type, seq, time_created, time_updated, data)
         VALUES ('msg_test_asst', ?1, 'assistant', 31, ?2, ?2, ?3)",
        rusqlite::params![COLORS, t0 + 1, data(0)],
    )
    .unwrap();
    let out = parse_at(root, &path, &cursor, 1 << 20);
    assert_eq!(
        ids_and_raws(&out),
        (BTreeSet::from(["msg_test_asst".to_owned()]), 1)
    );
    assert_eq!(out.messages[0].kind, MessageKind::Thinking);
    cursor = out.cursor.clone();
    outs.push(out);
    for k in 1..=20 {
        w.execute(
            "UPDATE session_message SET data = ?1, time_updated = ?2 WHERE id = 'msg_test_asst'",
            rusqlite::params![data(k), t0 + 1 + k as i64],
        )
        .unwrap();
        let out = parse_at(root, &path, &cursor, 1 << 20);
        let (ids, raw) = ids_and_raws(&out);
        assert_eq!(raw, 1, "one row came back after update {k}");
        assert!(
            ids.iter().all(|i| i.starts_with("msg_test_asst")),
            "{ids:?}"
        );
        assert!(ids.contains("msg_test_asst#1"));
        let text = &by_id(&out, COLORS, "msg_test_asst#1").text;
        assert!(text.ends_with(&format!(" {k}")), "{text}");
        assert_eq!(ids.contains("msg_test_asst#2"), k >= 10);
        assert_eq!(ids.contains("msg_test_asst#2/result"), k >= 15);
        assert!(out.messages.iter().all(|m| m.prompt_number == 2));
        cursor = out.cursor.clone();
        outs.push(out);
    }
    // The title arrives later, on the session row.
    w.execute(
        "UPDATE session_v2 SET title = 'Green shades', time_updated = ?2 WHERE id = ?1",
        rusqlite::params![COLORS, t0 + 100],
    )
    .unwrap();
    let out = parse_at(root, &path, &cursor, 1 << 20);
    assert_eq!(
        ids_and_raws(&out),
        (BTreeSet::from(["session".to_owned()]), 1)
    );
    assert_eq!(
        info(&out, COLORS).title,
        Some((TitleSource::Generated, "Green shades".into()))
    );
    outs.push(out);

    // What the incremental reads left equals one read of the final database.
    let fresh = parse_file(adapter(), root, &path).unwrap();
    assert_eq!(upserted(&outs), upserted([&fresh]));
    assert_eq!(
        by_id(&fresh, COLORS, "msg_test_asst#1").text,
        format!(
            "Shade {}",
            (1..=20)
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(" ")
        )
    );
    let result = by_id(&fresh, COLORS, "msg_test_asst#2/result");
    assert_eq!(result.text, "mint\nsage");
    assert_eq!(
        result.tool_result.as_ref().unwrap().call_id.as_deref(),
        Some("call_shade")
    );
    assert_eq!(
        aggregate_usage(
            fresh
                .messages
                .iter()
                .filter(|m| m.message_id.starts_with("msg_test_asst"))
        )
        .output_tokens,
        20
    );
}

#[test]
fn v2_rows_committed_late_with_older_stamps_are_still_taken_once() {
    let (dir, path, w) = writable_copy(V2);
    let root = dir.path();
    let first = parse_file(adapter(), root, &path).unwrap();
    let mut outs = vec![first.clone()];
    let top: i64 = w
        .query_row("SELECT max(time_updated) FROM session_message", [], |r| {
            r.get(0)
        })
        .unwrap();

    // A row whose stamp is older than every row already read (its writer stamped it, then
    // committed after the others): it has the next row id, so it is read.
    w.execute(
        "INSERT INTO session_message (id, session_id, type, seq, time_created, time_updated, data)
         VALUES ('msg_late', ?1, 'user', 40, 1000, 1000,
                 '{\"text\":\"A prompt stamped long ago\",\"files\":[],\"agents\":[]}')",
        [COLORS],
    )
    .unwrap();
    let out = parse_at(root, &path, &first.cursor, 1 << 20);
    assert_eq!(
        ids_and_raws(&out),
        (BTreeSet::from(["msg_late".to_owned()]), 1)
    );
    let mut cursor = out.cursor.clone();
    outs.push(out);

    // An old row rewritten in place with a stamp just under the latest one (inside the
    // window): taken again once, and not again while it stays as it is.
    let old: String = w
        .query_row(
            "SELECT id FROM session_message WHERE type = 'assistant' ORDER BY rowid LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    w.execute(
        "UPDATE session_message SET time_updated = ?1,
                data = json_set(data, '$.tokens.output', 777) WHERE id = ?2",
        rusqlite::params![top - 1, old],
    )
    .unwrap();
    let out = parse_at(root, &path, &cursor, 1 << 20);
    let (ids, raw) = ids_and_raws(&out);
    assert_eq!(raw, 1, "{ids:?}");
    assert!(ids.iter().all(|i| i.starts_with(&old)), "{ids:?}");
    cursor = out.cursor.clone();
    outs.push(out);
    let again = parse_at(root, &path, &cursor, 1 << 20);
    assert!(again.messages.is_empty(), "nothing changed");
    outs.push(again);

    let fresh = parse_file(adapter(), root, &path).unwrap();
    assert_eq!(upserted(&outs), upserted([&fresh]));
}

/// OpenCode deletes its newest rows on a revert; SQLite then gives their row ids to the next
/// rows. Those are read as new (even with old stamps), the rows kept are not read again, and
/// another database put in the same place is read from its start.
#[test]
fn v2_row_ids_reused_after_a_revert_are_read_as_new_rows() {
    let (dir, path, w) = writable_copy(V2);
    let root = dir.path();
    let first = parse_file(adapter(), root, &path).unwrap();
    let mut outs = vec![first.clone()];
    let newest: Vec<String> = {
        let mut st = w
            .prepare("SELECT id FROM session_message ORDER BY rowid DESC LIMIT 2")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    for id in &newest {
        w.execute("DELETE FROM session_message WHERE id = ?1", [id])
            .unwrap();
    }
    let after_delete = parse_at(root, &path, &first.cursor, 1 << 20);
    assert!(
        after_delete.messages.is_empty(),
        "rows kept are not read again: {:?}",
        ids_and_raws(&after_delete).0
    );
    // Three rows in their place, stamped long ago (outside any window).
    for (i, seq) in [50, 51, 52].iter().enumerate() {
        w.execute(
            "INSERT INTO session_message (id, session_id, type, seq, time_created, time_updated, data)
             VALUES (?1, ?2, 'user', ?3, 1000, 1000, ?4)",
            rusqlite::params![
                format!("msg_reused_{i}"),
                COLORS,
                seq,
                format!("{{\"text\":\"reused row {i}\",\"files\":[],\"agents\":[]}}")
            ],
        )
        .unwrap();
    }
    let out = parse_at(root, &path, &after_delete.cursor, 1 << 20);
    assert_eq!(
        ids_and_raws(&out),
        (
            BTreeSet::from(["msg_reused_0", "msg_reused_1", "msg_reused_2"].map(String::from)),
            3
        )
    );
    outs.push(after_delete);
    outs.push(out.clone());
    let again = parse_at(root, &path, &out.cursor, 1 << 20);
    assert!(again.messages.is_empty());

    // Another database in the same place (fewer rows, other keys): read from its start.
    drop(w);
    std::fs::remove_file(&path).unwrap();
    let _ = std::fs::remove_file(path.with_extension("db-wal"));
    let _ = std::fs::remove_file(path.with_extension("db-shm"));
    std::fs::copy(more().join(V2).join(DB), &path).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch(
            "DELETE FROM session_message WHERE rowid > 3;
             UPDATE session_message SET id = 'other_' || id;",
        )
        .unwrap();
    drop(other);
    let replaced = parse_at(root, &path, &again.cursor, 1 << 20);
    let (ids, _) = ids_and_raws(&replaced);
    assert!(
        ids.iter().filter(|i| i.starts_with("other_")).count() >= 3,
        "{ids:?}"
    );
}

#[test]
fn v1_database_parts_inserted_and_rewritten_in_place_come_back_under_their_ids() {
    let (dir, path, w) = writable_copy(V1DB);
    let root = dir.path();
    let first = parse_file(adapter(), root, &path).unwrap();
    let mut outs = vec![first.clone()];
    let mut cursor = first.cursor.clone();
    let t0 = 1_706_460_000_000_i64;

    // A part appended to the assistant message.
    w.execute(
        "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data)
         VALUES ('prt-sql-005', 'msg-assistant-sql-001', ?1, ?2, ?2,
                 '{\"type\":\"text\",\"text\":\"One more thing.\"}')",
        rusqlite::params![V1SID, t0],
    )
    .unwrap();
    let out = parse_at(root, &path, &cursor, 1 << 20);
    assert_eq!(
        ids_and_raws(&out),
        (
            BTreeSet::from(["msg-assistant-sql-001/prt-sql-005".to_owned()]),
            1
        )
    );
    assert_eq!(out.messages[0].kind, MessageKind::AssistantText);
    assert_eq!(out.messages[0].model.as_deref(), Some("gpt-5"));
    cursor = out.cursor.clone();
    outs.push(out);

    // The last text part rewritten 20 times while it streams.
    for k in 1..=20 {
        let data = serde_json::json!({"type": "text", "text": format!("Done from sqlite source, pass {k}.")});
        w.execute(
            "UPDATE part SET data = ?1, time_updated = ?2 WHERE id = 'prt-sql-004'",
            rusqlite::params![data.to_string(), t0 + k],
        )
        .unwrap();
        let out = parse_at(root, &path, &cursor, 1 << 20);
        assert_eq!(
            ids_and_raws(&out),
            (
                BTreeSet::from(["msg-assistant-sql-001/prt-sql-004".to_owned()]),
                1
            ),
            "update {k}"
        );
        assert_eq!(
            out.messages[0].text,
            format!("Done from sqlite source, pass {k}.")
        );
        cursor = out.cursor.clone();
        outs.push(out);
    }

    // A new top-level session: its typed text is prompt 1 and titles it.
    w.execute_batch(&format!(
        "INSERT INTO session (id, project_id, parent_id, slug, directory, title, version,
                              time_created, time_updated)
         VALUES ('ses-top', 'proj-001', NULL, 'top', '/Users/test/other',
                 'New session - 2024-01-28T17:00:00.000Z', '1.2.0', {t}, {t});
         INSERT INTO message (id, session_id, time_created, time_updated, data)
         VALUES ('msg-top-user', 'ses-top', {t}, {t}, '{{\"role\":\"user\",\"time\":{{\"created\":{t}}}}}');
         INSERT INTO part (id, message_id, session_id, time_created, time_updated, data)
         VALUES ('prt-top-0', 'msg-top-user', 'ses-top', {t}, {t},
                 '{{\"type\":\"text\",\"text\":\"<file>ctx</file>\",\"synthetic\":true}}'),
                ('prt-top-1', 'msg-top-user', 'ses-top', {t}, {t},
                 '{{\"type\":\"text\",\"text\":\"Rename the sqlite helper\"}}');",
        t = t0 + 50
    ))
    .unwrap();
    let out = parse_at(root, &path, &cursor, 1 << 20);
    assert_eq!(prompt_texts(&out), ["Rename the sqlite helper"]);
    assert_eq!(
        by_id(&out, "ses-top", "msg-top-user/prt-top-1").prompt_number,
        1
    );
    assert_eq!(
        by_id(&out, "ses-top", "msg-top-user/prt-top-0").kind,
        MessageKind::Meta
    );
    let top = info(&out, "ses-top");
    assert_eq!(
        top.title,
        Some((TitleSource::FirstPrompt, "Rename the sqlite helper".into()))
    );
    assert!(!top.is_subagent);
    assert_eq!(top.project_path.as_deref(), Some("/Users/test/other"));
    assert_eq!(ids_and_raws(&out).1, 4);
    outs.push(out);

    let fresh = parse_file(adapter(), root, &path).unwrap();
    assert_eq!(upserted(&outs), upserted([&fresh]));
    assert_eq!(
        by_id(&fresh, V1SID, "msg-assistant-sql-001/prt-sql-004").text,
        "Done from sqlite source, pass 20."
    );
}

#[test]
fn database_reads_bounded_to_one_row_equal_one_pass() {
    for root in [V2, V1DB] {
        let root = more().join(root);
        let path = root.join(DB);
        let one = parse_file(adapter(), &root, &path).unwrap();
        let mut outs = Vec::new();
        let mut cursor = Cursor::default();
        for _ in 0..100 {
            let out = parse_at(&root, &path, &cursor, 1);
            assert!(ids_and_raws(&out).1 <= 1, "one row per call");
            let end = out.at_end;
            cursor = out.cursor.clone();
            outs.push(out);
            if end {
                break;
            }
        }
        assert!(outs.last().unwrap().at_end);
        assert_eq!(upserted(&outs), upserted([&one]));
        let raws_n: usize = outs.iter().map(|o| ids_and_raws(o).1).sum();
        assert_eq!(raws_n, ids_and_raws(&one).1);
        assert_eq!(cursor.offset, raws_n as u64);
    }
}

#[test]
fn json_storage_is_reread_when_any_of_its_files_changes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_tree(&more().join(V1JSON), root);
    let session = root.join(JSON_SESSION);
    let first = parse_at(root, &session, &Cursor::default(), 1 << 20);
    assert_eq!(ids_and_raws(&first).1, 8);

    // Unchanged: nothing new.
    let again = parse_at(root, &session, &first.cursor, 1 << 20);
    assert!(again.messages.is_empty() && again.edits.is_empty());
    assert_eq!(again.cursor, first.cursor);

    // The session file stays as it is; one part is removed and another rewritten.
    let parts = root.join("storage/part/msg-assistant-001");
    std::fs::remove_file(parts.join("prt-003.json")).unwrap();
    let p1 = std::fs::read_to_string(parts.join("prt-001.json")).unwrap();
    std::fs::write(
        parts.join("prt-001.json"),
        p1.replace("I'll update the comment", "I will now update the comment"),
    )
    .unwrap();
    let out = parse_at(root, &session, &again.cursor, 1 << 20);
    let changed = by_id(&out, V1SID, "msg-assistant-001/prt-001");
    assert_eq!(
        changed.text,
        "I will now update the comment in index.ts for you."
    );
    assert_eq!(changed.kind, MessageKind::AssistantText);
    assert_eq!(
        out.edits,
        [Edit::Deactivate {
            session_id: V1SID.into(),
            message_ids: vec!["msg-assistant-001/prt-003".into()],
        }]
    );
    let before: BTreeSet<String> = ids_and_raws(&first).0;
    let now: BTreeSet<String> = ids_and_raws(&out).0;
    assert_eq!(
        before.difference(&now).collect::<Vec<_>>(),
        ["msg-assistant-001/prt-003"]
    );
    assert!(now.is_subset(&before));

    // A new message with its part: read through its session file.
    std::fs::write(
        root.join("storage/message/test-session-123/msg-user-002.json"),
        r#"{"id":"msg-user-002","sessionID":"test-session-123","role":"user","time":{"created":1706459900000}}"#,
    )
    .unwrap();
    std::fs::create_dir_all(root.join("storage/part/msg-user-002")).unwrap();
    std::fs::write(
        root.join("storage/part/msg-user-002/prt-009.json"),
        r#"{"id":"prt-009","sessionID":"test-session-123","messageID":"msg-user-002","type":"text","text":"Now add a test"}"#,
    )
    .unwrap();
    let out = parse_at(root, &session, &out.cursor, 1 << 20);
    assert_eq!(
        prompt_texts(&out),
        [
            "Update the comment in index.ts to say 'Hello World'",
            "Now add a test"
        ]
    );
    assert_eq!(by_id(&out, V1SID, "msg-user-002/prt-009").prompt_number, 2);

    // A session file being written is waited for.
    std::fs::write(&session, b"{\"id\": \"test-session-123\", \"ti").unwrap();
    let half = parse_at(root, &session, &out.cursor, 1 << 20);
    assert!(half.messages.is_empty() && half.pending_tail);
    // One that is not a session is reported, not read.
    std::fs::write(&session, b"[1, 2]").unwrap();
    let bad = parse_at(root, &session, &half.cursor, 1 << 20);
    assert!(bad.messages.is_empty());
    assert_eq!(bad.issues.len(), 1);
    // A part file that is not JSON is reported; the rest is read.
    std::fs::write(
        &session,
        std::fs::read(more().join(V1JSON).join(JSON_SESSION)).unwrap(),
    )
    .unwrap();
    std::fs::write(parts.join("prt-004.json"), b"{\"type\": \"te").unwrap();
    let partial = parse_at(root, &session, &bad.cursor, 1 << 20);
    assert_eq!(partial.issues.len(), 1, "{:?}", partial.issues);
    assert!(partial.issues[0].reason.contains("prt-004.json"));
    assert_eq!(prompt_texts(&partial).len(), 2);
}

#[test]
fn changes_map_to_their_source_and_credentials_are_never_sources() {
    let a = adapter();
    let json = tempfile::tempdir().unwrap();
    copy_tree(&more().join(V1JSON), json.path());
    let root = json.path();
    let session = root.join(JSON_SESSION);
    assert_eq!(a.source_of(root, &session), Some(session.clone()));
    for changed in [
        "storage/message/test-session-123/msg-assistant-001.json",
        // Fixture parts carry no `sessionID`: found through their message's folder.
        "storage/part/msg-assistant-001/prt-002.json",
        // A part that was deleted: the same.
        "storage/part/msg-user-001/prt-404.json",
    ] {
        assert_eq!(
            a.source_of(root, &root.join(changed)),
            Some(session.clone()),
            "{changed}"
        );
    }
    // A part naming its session.
    std::fs::create_dir_all(root.join("storage/part/msg-elsewhere")).unwrap();
    let named = root.join("storage/part/msg-elsewhere/prt-1.json");
    std::fs::write(&named, r#"{"id":"prt-1","sessionID":"test-session-123","messageID":"msg-elsewhere","type":"text","text":"x"}"#).unwrap();
    assert_eq!(a.source_of(root, &named), Some(session.clone()));
    std::fs::write(&named, r#"{"sessionID":"../../../auth"}"#).unwrap();
    assert_eq!(a.source_of(root, &named), None);
    for other in [
        "auth.json",
        "storage/project/4b0ea68d7af9a6031a7ffda7ad66e0cb83315750.json",
        "storage/message/no-such-session/msg-1.json",
        "storage/todo/test-session-123.json",
        "snapshot/abc/objects/12",
        "log/opencode.log",
    ] {
        assert_eq!(a.source_of(root, &root.join(other)), None, "{other}");
        assert!(!a.is_transcript(root, &root.join(other)), "{other}");
    }
    assert_eq!(a.discover(root), std::slice::from_ref(&session));

    // Once the database exists, the JSON tree is migrated data: not read again.
    std::fs::copy(more().join(V1DB).join(DB), root.join(DB)).unwrap();
    assert!(!a.is_transcript(root, &session));
    assert_eq!(
        a.source_of(
            root,
            &root.join("storage/part/msg-assistant-001/prt-002.json")
        ),
        None
    );
    assert_eq!(a.discover(root), [root.join(DB)]);
    assert_eq!(
        a.source_of(root, &root.join("opencode.db-wal")),
        Some(root.join(DB))
    );
    assert!(a.is_transcript(root, &root.join("opencode-beta.db")));
    assert!(!a.is_transcript(root, &root.join("opencode.db-wal")));
    assert!(!a.is_transcript(root, &root.join("opencode.db-shm")));
    assert!(!a.is_transcript(root, &root.join("storage/opencode.db")));
    assert_eq!(a.discover(&more().join(V2)), [more().join(V2).join(DB)]);
}

#[test]
fn default_roots_follow_xdg_and_opencode_db() {
    let a = adapter();
    let env = |vars: &[(&str, &str)]| Env {
        home: PathBuf::from("/home/u"),
        vars: vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    assert_eq!(
        a.default_roots(&env(&[])),
        [PathBuf::from("/home/u/.local/share/opencode")]
    );
    assert_eq!(
        a.default_roots(&env(&[
            ("XDG_DATA_HOME", "/data"),
            ("APPDATA", "C:/Users/u/AppData/Roaming")
        ])),
        [PathBuf::from("/data/opencode")]
    );
    assert_eq!(
        a.default_roots(&env(&[("OPENCODE_DB", "opencode-beta.db")])),
        [PathBuf::from("/home/u/.local/share/opencode")]
    );
    assert_eq!(
        a.default_roots(&env(&[("OPENCODE_DB", "/srv/oc/agent.db")])),
        [
            PathBuf::from("/home/u/.local/share/opencode"),
            PathBuf::from("/srv/oc")
        ]
    );
    assert_eq!(
        a.default_roots(&env(&[("OPENCODE_DB", ":memory:")])).len(),
        1
    );
}

#[test]
fn damaged_databases_are_errors_or_issues_never_panics() {
    let a = adapter();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let path = root.join(DB);

    // Not a database at all.
    std::fs::write(
        &path,
        b"this is not sqlite, just text that is long enough to be read",
    )
    .unwrap();
    assert!(a.parse(root, &path, &Cursor::default(), 1 << 20).is_err());

    // A database without OpenCode's tables (and with a credential table, never read).
    std::fs::remove_file(&path).unwrap();
    let w = rusqlite::Connection::open(&path).unwrap();
    w.execute_batch("CREATE TABLE credential (id TEXT, secret TEXT); INSERT INTO credential VALUES ('k', 'sk-live');")
        .unwrap();
    drop(w);
    let out = a.parse(root, &path, &Cursor::default(), 1 << 20).unwrap();
    assert!(out.messages.is_empty() && out.at_end);
    assert_eq!(out.issues.len(), 1);
    assert!(!out.issues[0].kept);

    // A 2.x row whose `data` is not JSON, and a 1.x part whose data is not JSON either: kept
    // as meta with their raw row, reported.
    let (dir2, path2, w) = writable_copy(V2);
    w.execute(
        "INSERT INTO session_message (id, session_id, type, seq, time_created, time_updated, data)
         VALUES ('msg_bad', ?1, 'assistant', 40, 1, 1790122300000, 'not json {')",
        [COLORS],
    )
    .unwrap();
    let out = parse_file(a, dir2.path(), &path2).unwrap();
    let bad = by_id(&out, COLORS, "msg_bad");
    assert_eq!(bad.kind, MessageKind::Meta);
    assert!(bad.raw.is_some());
    assert_eq!(out.issues.len(), 1);
    assert!(out.issues[0].kept && out.issues[0].reason.contains("msg_bad"));

    let (dir3, path3, w) = writable_copy(V1DB);
    w.execute(
        "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data)
         VALUES ('prt-bad', 'msg-user-sql-001', ?1, 1, 1706460000000, '{\"type\":')",
        [V1SID],
    )
    .unwrap();
    let out = parse_file(a, dir3.path(), &path3).unwrap();
    assert!(by_id(&out, V1SID, "msg-user-sql-001/prt-bad").raw.is_some());
    assert_eq!(out.issues.len(), 1);
    assert_eq!(ids_and_raws(&out).1, 8);

    // Update times that are not integers (text, a fraction) still end the reading, one row
    // per call, every row once.
    w.execute_batch(
        "UPDATE part SET time_updated = 'later' WHERE id = 'prt-sql-002';
         UPDATE part SET time_updated = 1706459833000.5 WHERE id = 'prt-sql-003';",
    )
    .unwrap();
    let mut cursor = Cursor::default();
    let mut stored = 0;
    for _ in 0..50 {
        let out = a.parse(dir3.path(), &path3, &cursor, 1).unwrap();
        stored += ids_and_raws(&out).1;
        cursor = out.cursor;
        if out.at_end {
            break;
        }
    }
    assert_eq!(stored, 8);
    let again = a.parse(dir3.path(), &path3, &cursor, 1 << 20).unwrap();
    assert!(again.messages.is_empty() && again.at_end);
}
