//! Crush: a project's `.crush/crush.db` (hand-made rows, upstream columns), with the values
//! SOURCES.md gives; the database read incrementally while another connection writes.

use std::collections::BTreeSet;
use std::path::PathBuf;

use ai_cli_session_collector::{Cursor, ParseOutput, ParsedMessage, Role, SourceKind, TitleSource};
use rusqlite::Connection;

use super::*;

/// The project folder (what a Crush root is).
const PROJECT: &str = "crush/project/home/dev/demo-app";
const S1: &str = "b7a1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d";
const S2: &str = "c8b2d3e4-f5a6-4b7c-9d8e-0f1a2b3c4d5e";

fn session(out: &ParseOutput, sid: &str) -> ParseOutput {
    ParseOutput {
        messages: out
            .messages
            .iter()
            .filter(|m| m.session_id == sid)
            .cloned()
            .collect(),
        ..Default::default()
    }
}

/// The message rows behind `out`: (first message, record).
fn rows(out: &ParseOutput) -> Vec<(&ParsedMessage, serde_json::Value)> {
    out.messages
        .iter()
        .filter(|m| m.raw.is_some() && m.message_id != "session")
        .map(|m| (m, raw_json(m)))
        .collect()
}

#[test]
fn database_matches_sources() {
    let out = parse("crush", PROJECT, ".crush/crush.db");
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let project = more().join(PROJECT);
    let project_path = project.to_string_lossy().into_owned();
    assert!(project_path.ends_with("/home/dev/demo-app"));

    // Every row of `sessions` and `messages` carries its record exactly once.
    let db = project.join(".crush/crush.db");
    assert_rows_once(&out, &db, &["messages", "sessions"], 10);

    // The project is the folder holding `.crush/`: the database has no cwd column.
    let s1 = out.sessions.iter().find(|s| s.session_id == S1).unwrap();
    assert_eq!(s1.project_path.as_deref(), Some(project_path.as_str()));
    assert_eq!(
        s1.title,
        Some((TitleSource::Generated, "Fix CI date test".to_owned()))
    );
    assert!(!s1.is_subagent);
    assert_eq!(s1.model.as_deref(), Some("claude-sonnet-4-5"));
    // created_at / updated_at are epoch seconds.
    assert_eq!(s1.started_at, Some(1_781_004_000_000));
    assert_eq!(s1.updated_at, Some(1_781_004_100_000));

    let o1 = session(&out, S1);
    let r1 = rows(&o1);
    assert_eq!(r1.len(), 6, "6 messages");
    let roles: Vec<&str> = r1
        .iter()
        .map(|(_, r)| r["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles.iter().filter(|r| **r == "user").count(), 3);
    assert_eq!(roles.iter().filter(|r| **r == "assistant").count(), 2);
    assert_eq!(roles.iter().filter(|r| **r == "tool").count(), 1);
    // `parts` is a JSON list of {type, data}.
    for (_, r) in &r1 {
        let parts: serde_json::Value = serde_json::from_str(r["parts"].as_str().unwrap()).unwrap();
        assert!(
            parts
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["type"].is_string() && p.get("data").is_some())
        );
    }
    assert_eq!(
        prompt_texts(&o1),
        ["Why does the date test fail in CI?", "Fix it"]
    );
    let prompts = of_kind(&o1, MessageKind::UserPrompt);
    assert_eq!(
        prompts.iter().map(|m| m.prompt_number).collect::<Vec<_>>(),
        [1, 2]
    );
    // The user-run `shell_command` is kept, and is not a prompt.
    let shell = o1.messages.iter().find(|m| m.message_id == "m5").unwrap();
    assert_eq!((shell.role, shell.kind), (Role::User, MessageKind::Meta));
    assert!(shell.text.contains("git status --short"));
    assert_eq!(shell.prompt_number, 1);

    // One tool call, answered in the `tool` message by its id.
    let calls = of_kind(&o1, MessageKind::ToolCall);
    let results = of_kind(&o1, MessageKind::ToolResult);
    assert_eq!((calls.len(), results.len()), (1, 1));
    let call = calls[0].tool_call.as_ref().unwrap();
    assert_eq!(call.call_id.as_deref(), Some("call_c1"));
    assert_eq!(call.name, "bash");
    assert_eq!(call.input["command"], "TZ=UTC npm test -- date");
    let result = results[0].tool_result.as_ref().unwrap();
    assert_eq!(result.call_id.as_deref(), Some("call_c1"));
    assert!(!result.is_error);
    assert_eq!(results[0].role, Role::Tool);
    assert_eq!(results[0].message_id, "m3");
    assert_eq!(results[0].text, "FAIL src/date.test.ts");

    let thinking = of_kind(&o1, MessageKind::Thinking);
    assert_eq!(thinking.len(), 1);
    assert_eq!(thinking[0].text, "Check timezone handling.");
    let answers = of_kind(&o1, MessageKind::AssistantText);
    assert_eq!(
        answers.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
        [
            "Let me run it.",
            "The expectation is computed in local time."
        ]
    );
    assert!(
        answers
            .iter()
            .all(|m| m.model.as_deref() == Some("claude-sonnet-4-5") && m.prompt_number == 1)
    );
    assert!(has_word(&o1, MessageKind::UserPrompt, "CI"));
    assert!(has_word(&o1, MessageKind::AssistantText, "expectation"));
    assert!(!has_word(&o1, MessageKind::UserPrompt, "expectation"));
    assert!(
        o1.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some(project_path.as_str()) && m.line == 0)
    );
    let ts = |id: &str| {
        o1.messages
            .iter()
            .find(|m| m.message_id == id)
            .unwrap()
            .timestamp
    };
    assert_eq!(ts("m1"), Some(1_781_004_000_000));
    assert_eq!(ts("m6"), Some(1_781_004_060_000));
    let u = ai_cli_session_collector::aggregate_usage(&o1.messages);
    assert_eq!((u.input_tokens, u.output_tokens), (9100, 210));

    // The sub-agent session: its parent, one agent-issued "prompt" and one answer.
    let s2 = out.sessions.iter().find(|s| s.session_id == S2).unwrap();
    assert!(s2.is_subagent);
    assert_eq!(s2.parent_session_id.as_deref(), Some(S1));
    assert_eq!(s2.model.as_deref(), Some("claude-haiku-4-5"));
    let o2 = session(&out, S2);
    assert_eq!(rows(&o2).len(), 2);
    assert!(prompt_texts(&o2).is_empty());
    let task = o2.messages.iter().find(|m| m.message_id == "s2m1").unwrap();
    assert_eq!((task.role, task.kind), (Role::User, MessageKind::Meta));
    assert_eq!(task.text, "Find usages of formatDate");
    let answers = of_kind(&o2, MessageKind::AssistantText);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].text, "src/date.ts, src/date.test.ts");
    assert!(
        o2.messages.iter().all(|m| m.flags.sidechain
            && m.agent_id.as_deref() == Some(S2)
            && m.prompt_number == 0)
    );
}

#[test]
fn a_root_is_a_project_folder() {
    let reg = AdapterRegistry::new();
    let a = reg.get("crush").unwrap();
    let project = more().join(PROJECT);
    assert_eq!(a.project_files(), [".crush/crush.db"]);
    assert_eq!(a.discover(&project), [project.join(".crush/crush.db")]);
    assert_eq!(
        a.source_kind(&project.join(".crush/crush.db")),
        SourceKind::Database
    );
    // Only `<root>/.crush/crush.db`: not a database further down, nor the root's parent's.
    assert!(a.discover(&more().join("crush/project")).is_empty());
    assert!(a.default_roots(&Default::default()).is_empty());
    let all = parse_all("crush", PROJECT);
    assert_eq!(all.len(), 1);
}

fn add(w: &Connection, id: &str, sid: &str, role: &str, parts: serde_json::Value) {
    w.execute(
        "INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at, provider)
         VALUES (?1, ?2, ?3, ?4, 'claude-sonnet-4-5', strftime('%s','now'), strftime('%s','now'), 'anthropic')",
        rusqlite::params![id, sid, role, parts.to_string()],
    )
    .unwrap();
}

fn text(t: &str) -> serde_json::Value {
    serde_json::json!([{"type": "text", "data": {"text": t}}])
}

#[test]
fn database_read_incrementally_while_crush_writes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let db: PathBuf = root.join(".crush").join("crush.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    std::fs::copy(more().join(PROJECT).join(".crush/crush.db"), &db).unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("crush").unwrap();
    assert_eq!(a.discover(root), std::slice::from_ref(&db));
    let mut f = Follow::start(a, root, &db);

    // Crush in WAL mode: the prompt, then the answer's row inserted empty as streaming starts.
    let w = writer(&db);
    add(&w, "m7", S1, "user", text("Run it again"));
    add(&w, "m8", S1, "assistant", serde_json::json!([]));
    let d = f.read();
    assert_eq!(
        ids(&d.messages),
        BTreeSet::from(["m7".to_owned(), "m8".to_owned()])
    );
    let p = d.messages.iter().find(|m| m.message_id == "m7").unwrap();
    assert_eq!((p.kind, p.prompt_number), (MessageKind::UserPrompt, 3));

    // The answer streamed into its row: 20 updates in place, within the same seconds.
    let last = f.assert_rewritten_in_place("m8", 3, 5, |i| {
        let last = format!("Still failing{}", " and failing".repeat(i));
        let mut parts = text(&last);
        if i == 20 {
            parts.as_array_mut().unwrap().push(
                serde_json::json!({"type": "finish", "data": {"reason": "end_turn", "time": 1}}),
            );
        }
        w.execute(
            "UPDATE messages SET parts = ?1, updated_at = strftime('%s','now') WHERE id = 'm8'",
            [parts.to_string()],
        )
        .unwrap();
        last
    });
    let d = f.read();
    assert_eq!(ids(&d.messages), BTreeSet::from(["m8".to_owned()]));
    assert_eq!(
        f.archive[&(S1.to_owned(), "m8".to_owned())],
        (MessageKind::AssistantText, last.clone(), 3)
    );
    assert_eq!(
        f.archive
            .keys()
            .filter(|(_, id)| id.starts_with("m8"))
            .count(),
        1,
        "one message for the streamed row"
    );

    // Crush's triggers bump the session: its row is read again.
    let d = f.assert_session_row_again(
        &w,
        "UPDATE sessions SET message_count = 8, completion_tokens = 400, updated_at = strftime('%s','now') WHERE id = ?1",
        S1,
    );
    assert_eq!(d.messages[0].usage.unwrap().output_tokens, 400);

    // The incremental reads and a clean read agree.
    f.assert_clean_read_agrees();

    // The sub-agent session deleted (ON DELETE CASCADE is Crush's; done by hand here): nothing is
    // reported, the archive keeps what it read.
    f.assert_deleted_session_kept(w, S2, 3);
}

#[test]
fn garbage_and_foreign_databases_are_errors_or_issues() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let db = root.join(".crush").join("crush.db");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("crush").unwrap();
    std::fs::write(
        &db,
        b"SQLite format 3\0 but then nothing that a database holds",
    )
    .unwrap();
    assert!(a.parse(root, &db, &Cursor::default(), 1 << 20).is_err());
    let out = parse_foreign_database(
        a,
        root,
        &db,
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, updated_at INTEGER)",
    );
    assert!(out.issues[0].reason.contains("messages"));
    // A row whose `parts` is not JSON: kept, with an issue.
    let w = Connection::open(&db).unwrap();
    w.execute_batch(
        "CREATE TABLE messages (id TEXT PRIMARY KEY, session_id TEXT, role TEXT, parts TEXT, created_at INTEGER);
         INSERT INTO sessions VALUES ('s', 1);
         INSERT INTO messages VALUES ('x', 's', 'user', '[{\"type\":', 1);",
    )
    .unwrap();
    let out = a.parse(root, &db, &Cursor::default(), 1 << 20).unwrap();
    assert_eq!(out.issues.len(), 1);
    assert!(out.issues[0].kept);
    let x = out.messages.iter().find(|m| m.message_id == "x").unwrap();
    assert!(x.raw.is_some());
    assert_eq!(x.kind, MessageKind::Meta);
}
