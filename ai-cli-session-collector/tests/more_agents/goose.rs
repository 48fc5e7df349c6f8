//! Goose: `sessions.db` (schema v16, hand-made rows) and a legacy `<id>.jsonl` file, with the
//! values SOURCES.md gives; the database read incrementally while another connection writes.

use std::collections::BTreeSet;

use ai_cli_session_collector::{
    Cursor, ParseOutput, ParsedMessage, Role, SessionInfo, SourceKind, TitleSource, aggregate_usage,
};
use rusqlite::Connection;

use super::*;

const ROOT: &str = "goose/home/.local/share/goose/sessions";
const S1: &str = "20260609_1";
const S2: &str = "20260609_2";

fn of_session<'a>(out: &'a ParseOutput, sid: &str) -> Vec<&'a ParsedMessage> {
    out.messages
        .iter()
        .filter(|m| m.session_id == sid)
        .collect()
}

fn info<'a>(out: &'a ParseOutput, sid: &str) -> &'a SessionInfo {
    out.sessions
        .iter()
        .find(|s| s.session_id == sid)
        .unwrap_or_else(|| panic!("no session {sid}"))
}

/// The rows of the messages table behind `msgs`, by the record the first message of each holds.
fn rows<'a>(msgs: &[&'a ParsedMessage]) -> Vec<(&'a ParsedMessage, serde_json::Value)> {
    msgs.iter()
        .filter(|m| m.raw.is_some() && m.message_id.starts_with("msg_"))
        .map(|m| (*m, raw_json(m)))
        .collect()
}

#[test]
fn database_matches_sources() {
    let out = parse("goose", ROOT, "sessions.db");
    assert!(out.issues.is_empty(), "{:?}", out.issues);

    // Every row of the three conversation tables carries its record exactly once.
    let db = more().join(ROOT).join("sessions.db");
    assert_rows_once(&out, &db, &["messages", "sessions", "usage_ledger"], 13);

    // Session 20260609_1: working_dir, name, model, user session.
    let s1 = info(&out, S1);
    assert_eq!(s1.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(
        s1.title,
        Some((TitleSource::Generated, "Fix date test".to_owned()))
    );
    assert_eq!(s1.model.as_deref(), Some("claude-sonnet-4-5"));
    assert!(!s1.is_subagent);
    assert_eq!(s1.parent_session_id, None);
    // created_at / updated_at are SQLite UTC text.
    assert_eq!(s1.started_at, Some(1_781_001_000_000)); // 2026-06-09 10:30:00
    assert_eq!(s1.updated_at, Some(1_781_001_100_000)); // 2026-06-09 10:31:40

    let m1 = of_session(&out, S1);
    let r1 = rows(&m1);
    assert_eq!(r1.len(), 8, "8 message rows");
    let user_rows: Vec<_> = r1.iter().filter(|(_, r)| r["role"] == "user").collect();
    let assistant_rows: Vec<_> = r1
        .iter()
        .filter(|(_, r)| r["role"] == "assistant")
        .collect();
    assert_eq!(user_rows.len(), 4);
    assert_eq!(assistant_rows.len(), 4);
    // Of the 4 user rows, 2 are prompts and 2 carry only a toolResponse.
    let kinds_of_row = |base: &str| -> Vec<MessageKind> {
        m1.iter()
            .filter(|m| m.message_id == base || m.message_id.starts_with(&format!("{base}#")))
            .map(|m| m.kind)
            .collect()
    };
    let user_kinds: Vec<Vec<MessageKind>> = user_rows
        .iter()
        .map(|(m, _)| kinds_of_row(&m.message_id))
        .collect();
    assert_eq!(
        user_kinds,
        vec![
            vec![MessageKind::UserPrompt],
            vec![MessageKind::ToolResult],
            vec![MessageKind::UserPrompt],
            vec![MessageKind::ToolResult],
        ]
    );
    let s1_out = ParseOutput {
        messages: m1.iter().map(|m| (*m).clone()).collect(),
        ..Default::default()
    };
    assert_eq!(
        prompt_texts(&s1_out),
        vec!["Run the date tests", "Fix the test"]
    );
    let prompts = of_kind(&s1_out, MessageKind::UserPrompt);
    assert_eq!(
        prompts.iter().map(|m| m.prompt_number).collect::<Vec<_>>(),
        vec![1, 2]
    );
    // Every message after prompt N carries N.
    let numbers: Vec<(String, u32)> = m1
        .iter()
        .filter(|m| m.message_id.starts_with("msg_"))
        .map(|m| (m.message_id.clone(), m.prompt_number))
        .collect();
    for (id, n) in &numbers {
        let row: u32 = id[15..19].parse().unwrap();
        assert_eq!(*n, if row < 5 { 1 } else { 2 }, "{id}");
    }

    // Tool calls and their results, paired by id.
    let calls = of_kind(&s1_out, MessageKind::ToolCall);
    let results = of_kind(&s1_out, MessageKind::ToolResult);
    assert_eq!(calls.len(), 2);
    assert_eq!(results.len(), 2);
    let call_ids: Vec<_> = calls
        .iter()
        .map(|m| m.tool_call.as_ref().unwrap().call_id.clone().unwrap())
        .collect();
    assert_eq!(call_ids, ["toolu_g1", "toolu_g2"]);
    let result_ids: Vec<_> = results
        .iter()
        .map(|m| m.tool_result.as_ref().unwrap().call_id.clone().unwrap())
        .collect();
    assert_eq!(result_ids, call_ids);
    let g1 = calls[0].tool_call.as_ref().unwrap();
    assert_eq!(g1.name, "developer__shell");
    assert_eq!(g1.input["command"], "npm test -- date");
    assert_eq!(results[0].text, "FAIL src/date.test.ts");
    assert!(!results[0].tool_result.as_ref().unwrap().is_error);
    assert_eq!(results[0].role, Role::Tool);
    // toolu_g2: the call failed to parse (`status: "error"`), its response is an error.
    assert!(calls[1].text.contains("tool arguments were not valid JSON"));
    assert!(results[1].tool_result.as_ref().unwrap().is_error);
    assert_eq!(results[1].text, "tool arguments were not valid JSON");
    // That response is the `userVisible: false` row: not a prompt in any case.
    let hidden = r1
        .iter()
        .find(|(_, r)| {
            serde_json::from_str::<serde_json::Value>(r["metadata_json"].as_str().unwrap()).unwrap()
                ["userVisible"]
                == false
        })
        .unwrap();
    assert_eq!(hidden.0.message_id, "msg_20260609_1_0007");
    assert_eq!(hidden.0.kind, MessageKind::ToolResult);

    // One thinking block; the assistant's text.
    let thinking = of_kind(&s1_out, MessageKind::Thinking);
    assert_eq!(thinking.len(), 1);
    assert_eq!(thinking[0].text, "Local vs UTC.");
    let answers = of_kind(&s1_out, MessageKind::AssistantText);
    assert_eq!(
        answers.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
        [
            "Running the tests.",
            "The test expectation uses local time; formatDate uses UTC.",
            "Updated the test to compute the expected date with toISOString()."
        ]
    );
    assert!(
        answers
            .iter()
            .all(|m| m.model.as_deref() == Some("claude-sonnet-4-5"))
    );
    assert!(has_word(&s1_out, MessageKind::UserPrompt, "date"));
    assert!(has_word(&s1_out, MessageKind::AssistantText, "toISOString"));
    assert!(!has_word(&s1_out, MessageKind::UserPrompt, "toISOString"));
    assert!(
        m1.iter()
            .all(|m| m.cwd.as_deref() == Some("/home/dev/demo-app"))
    );
    assert!(m1.iter().all(|m| !m.flags.sidechain && m.line == 0));

    // Timestamps: seconds, except row 0005 in milliseconds.
    let ts = |id: &str| m1.iter().find(|m| m.message_id == id).unwrap().timestamp;
    assert_eq!(ts("msg_20260609_1_0001"), Some(1_781_001_000_000));
    assert_eq!(ts("msg_20260609_1_0005"), Some(1_781_001_060_000));
    assert_eq!(ts("msg_20260609_1_0006"), Some(1_781_001_062_000));

    // The session's token totals count once; the ledger row is kept, without usage.
    let u = aggregate_usage(m1.iter().copied());
    assert_eq!((u.input_tokens, u.output_tokens), (9100, 170));
    let ledger: Vec<_> = m1
        .iter()
        .filter(|m| m.message_id.starts_with("ledger:"))
        .collect();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].model.as_deref(), Some("claude-sonnet-4-5"));
    assert_eq!(raw_json(ledger[0])["input_tokens"], 4400);
    assert!(ledger[0].usage.is_none());

    // Session 20260609_2: a sub-agent of 20260609_1, whose "prompt" the parent wrote.
    let s2 = info(&out, S2);
    assert!(s2.is_subagent);
    assert_eq!(s2.parent_session_id.as_deref(), Some(S1));
    assert_eq!(
        s2.title,
        Some((TitleSource::Generated, "Subagent: grep usages".to_owned()))
    );
    let m2 = of_session(&out, S2);
    let r2 = rows(&m2);
    assert_eq!(r2.len(), 2);
    assert_eq!(r2[0].1["role"], "user");
    assert_eq!(r2[1].1["role"], "assistant");
    assert!(m2.iter().all(|m| m.kind != MessageKind::UserPrompt));
    assert!(m2.iter().all(|m| m.prompt_number == 0));
    assert!(
        m2.iter()
            .all(|m| m.flags.sidechain && m.agent_id.as_deref() == Some(S2))
    );
    let task = m2
        .iter()
        .find(|m| m.message_id == "msg_20260609_2_0001")
        .unwrap();
    assert_eq!((task.role, task.kind), (Role::User, MessageKind::Meta));
    assert_eq!(task.text, "Find usages of formatDate");
    let answer = m2
        .iter()
        .find(|m| m.kind == MessageKind::AssistantText)
        .unwrap();
    assert_eq!(answer.text, "src/date.ts and src/date.test.ts");
}

#[test]
fn legacy_jsonl_matches_sources() {
    let out = parse("goose", ROOT, "20250724_101500.jsonl");
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(out.sessions.len(), 1);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, "20250724_101500");
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/old-proj"));
    assert_eq!(
        s.title,
        Some((TitleSource::Generated, "Explain makefile".to_owned()))
    );
    assert_eq!(s.started_at, Some(1_753_352_100_000));
    assert_eq!(s.updated_at, Some(1_753_352_104_000));
    // Line 1 is the metadata: message_count 2.
    let meta = &out.messages[0];
    assert_eq!((meta.kind, meta.line), (MessageKind::Meta, 1));
    assert_eq!(raw_json(meta)["message_count"], 2);
    assert_eq!(prompt_texts(&out), ["What does the build target do?"]);
    let answers = of_kind(&out, MessageKind::AssistantText);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].text, "It compiles src/ into dist/ with tsc.");
    assert_eq!(answers[0].prompt_number, 1);
    assert!(has_word(&out, MessageKind::UserPrompt, "build"));
    assert!(has_word(&out, MessageKind::AssistantText, "tsc"));
    assert_eq!(
        out.messages
            .iter()
            .map(|m| m.message_id.as_str())
            .collect::<Vec<_>>(),
        ["metadata", "msg_1", "msg_2"]
    );
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some("/home/dev/old-proj"))
    );
    // Three lines, three records, each once.
    assert_eq!(out.messages.iter().filter(|m| m.raw.is_some()).count(), 3);
    let u = aggregate_usage(&out.messages);
    assert_eq!((u.input_tokens, u.output_tokens), (1400, 100));
}

#[test]
fn legacy_jsonl_in_small_chunks_is_the_same() {
    let reg = AdapterRegistry::new();
    let a = reg.get("goose").unwrap();
    let root = more().join(ROOT);
    let path = root.join("20250724_101500.jsonl");
    assert_eq!(a.source_kind(&path), SourceKind::Lines);
    let whole = parse("goose", ROOT, "20250724_101500.jsonl");
    let mut cursor = Cursor::default();
    let mut chunked = Vec::new();
    for _ in 0..100 {
        let out = a.parse(&root, &path, &cursor, 1).unwrap();
        chunked.extend(out.messages);
        cursor = out.cursor;
        if out.at_end {
            break;
        }
    }
    assert_eq!(chunked, whole.messages);
    let raws = |ms: &[ParsedMessage]| -> Vec<Option<Vec<u8>>> {
        ms.iter().map(|m| m.raw.clone()).collect()
    };
    assert_eq!(raws(&chunked), raws(&whole.messages));
}

#[test]
fn discovery_finds_the_database_and_the_legacy_file() {
    let all = parse_all("goose", ROOT);
    let names: Vec<String> = all
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["20250724_101500.jsonl", "sessions.db"]);
    let reg = AdapterRegistry::new();
    let a = reg.get("goose").unwrap();
    assert_eq!(
        a.source_kind(&more().join(ROOT).join("sessions.db")),
        SourceKind::Database
    );
}

fn add(w: &Connection, mid: &str, sid: &str, role: &str, content: &str, ts: i64) {
    w.execute(
        "INSERT INTO messages (message_id, session_id, role, content_json, created_timestamp, metadata_json)
         VALUES (?1, ?2, ?3, ?4, ?5, '{\"userVisible\":true,\"agentVisible\":true}')",
        rusqlite::params![mid, sid, role, content, ts],
    )
    .unwrap();
}

fn text_content(t: &str) -> String {
    serde_json::json!([{"type": "text", "text": t}]).to_string()
}

#[test]
fn database_read_incrementally_while_goose_writes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let db = root.join("sessions.db");
    std::fs::copy(more().join(ROOT).join("sessions.db"), &db).unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("goose").unwrap();
    assert!(a.is_transcript(root, &db));
    let mut f = Follow::start(a, root, &db);

    let w = writer(&db);
    // A new prompt and the start of its answer.
    add(
        &w,
        "msg_20260609_1_0009",
        S1,
        "user",
        &text_content("Now run the whole suite"),
        1_781_001_200,
    );
    add(
        &w,
        "msg_20260609_1_0010",
        S1,
        "assistant",
        &text_content(""),
        1_781_001_201,
    );
    let d = f.read();
    assert_eq!(
        ids(&d.messages),
        BTreeSet::from([
            "msg_20260609_1_0009".to_owned(),
            "msg_20260609_1_0010".to_owned()
        ])
    );
    let p = d
        .messages
        .iter()
        .find(|m| m.message_id == "msg_20260609_1_0009")
        .unwrap();
    assert_eq!((p.kind, p.prompt_number), (MessageKind::UserPrompt, 3));
    assert!(d.messages.iter().all(|m| m.raw.is_some()));

    // The answer rewritten in place 20 times: each read takes that row again, as one message.
    let last = f.assert_rewritten_in_place("msg_20260609_1_0010", 3, 4, |i| {
        let last = format!("All {i} suites pass{}", ".".repeat(i));
        w.execute(
            "UPDATE messages SET content_json = ?1 WHERE message_id = 'msg_20260609_1_0010'",
            [text_content(&last)],
        )
        .unwrap();
        last
    });
    // The 20th update, not read yet.
    let d = f.read();
    assert_eq!(
        ids(&d.messages),
        BTreeSet::from(["msg_20260609_1_0010".to_owned()])
    );
    assert_eq!(d.messages[0].text, last);
    // Goose flips `userVisible` in place (update_message_metadata): taken again as well.
    w.execute(
        "UPDATE messages SET metadata_json = '{\"userVisible\":false,\"agentVisible\":true}'
         WHERE message_id = 'msg_20260609_1_0008'",
        [],
    )
    .unwrap();
    let d = f.read();
    assert_eq!(
        ids(&d.messages),
        BTreeSet::from(["msg_20260609_1_0008".to_owned()])
    );
    let answer = &f.archive[&(S1.to_owned(), "msg_20260609_1_0010".to_owned())];
    assert_eq!(answer, &(MessageKind::AssistantText, last.clone(), 3));

    // The session renamed by the user: its row is read again.
    let d = f.assert_session_row_again(
        &w,
        "UPDATE sessions SET name = 'Date tests', user_set_name = 1, updated_at = '2026-06-09 10:40:00' WHERE id = ?1",
        S1,
    );
    let s = d.sessions.iter().find(|s| s.session_id == S1).unwrap();
    assert_eq!(
        s.title,
        Some((TitleSource::Custom, "Date tests".to_owned()))
    );

    // The incremental reads and a clean read agree.
    f.assert_clean_read_agrees();
    // Goose rewrites a conversation as new rows (replace_conversation): same ids, same numbers.
    w.execute_batch(&format!(
        "BEGIN;
         CREATE TEMP TABLE keep AS SELECT * FROM messages WHERE session_id = '{S1}' ORDER BY id;
         DELETE FROM messages WHERE session_id = '{S1}';
         INSERT INTO messages (message_id, session_id, role, content_json, created_timestamp, timestamp, tokens, metadata_json)
           SELECT message_id, session_id, role, content_json, created_timestamp, timestamp, tokens, metadata_json FROM keep ORDER BY id;
         COMMIT;"
    ))
    .unwrap();
    let before = f.archive.clone();
    let d = f.read();
    let s1_ids: BTreeSet<String> = before
        .keys()
        .filter(|(s, id)| s == S1 && id.starts_with("msg_"))
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(ids(&d.messages), s1_ids);
    assert_eq!(f.archive, before, "same ids, texts and prompt numbers");

    // The sub-agent session deleted: nothing is reported, the archive keeps what it read (the
    // sub-agent's session row and two messages).
    f.assert_deleted_session_kept(w, S2, 3);
}

#[test]
fn garbage_and_foreign_databases_are_errors_or_issues() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let db = root.join("sessions.db");
    let reg = AdapterRegistry::new();
    let a = reg.get("goose").unwrap();
    std::fs::write(&db, vec![0x5a; 8192]).unwrap();
    assert!(a.parse(root, &db, &Cursor::default(), 1 << 20).is_err());
    // A corrupt copy: the header kept, the pages overwritten.
    let mut bytes = std::fs::read(more().join(ROOT).join("sessions.db")).unwrap();
    for b in bytes.iter_mut().skip(100) {
        *b = 0xa5;
    }
    std::fs::write(&db, &bytes).unwrap();
    let _ = a.parse(root, &db, &Cursor::default(), 1 << 20);
    // A database without Goose's tables.
    let out = parse_foreign_database(a, root, &db, "CREATE TABLE other (x)");
    assert!(!out.issues[0].kept);
    // A legacy file of garbage: issues, no panic.
    let jsonl = root.join("20250101_000000.jsonl");
    std::fs::write(
        &jsonl,
        b"{\"role\":\"user\",\"content\":7}\nnot json\n[1]\n",
    )
    .unwrap();
    let out = a.parse(root, &jsonl, &Cursor::default(), 1 << 20).unwrap();
    assert_eq!(out.issues.len(), 3, "{:?}", out.issues);
}
