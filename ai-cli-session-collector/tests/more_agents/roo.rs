//! Roo Code (`roo/`): every value SOURCES.md gives for the legacy-array task and the v2 task,
//! plus the document behaviour (re-read, rewrite, half-written), side files and roots.

use std::collections::BTreeSet;

use ai_cli_session_collector::{Cursor, Edit, Env, Role, SourceKind, TitleSource};
use serde_json::Value;

use super::*;

const ROOT: &str = "roo/home/.config/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks";
const LEGACY: &str = "0198f2a1-7c3e-7b1d-9e2f-3a4b5c6d7e8f";
const V2: &str = "0198f2b5-1a2b-7c3d-8e4f-5a6b7c8d9e0f";
const FILE: &str = "api_conversation_history.json";

fn task(id: &str) -> String {
    format!("{id}/{FILE}")
}

fn elements(id: &str) -> Vec<Value> {
    let doc: Value =
        serde_json::from_slice(&std::fs::read(more().join(ROOT).join(task(id))).unwrap()).unwrap();
    match doc {
        Value::Array(a) => a,
        Value::Object(mut o) => match o.remove("messages") {
            Some(Value::Array(a)) => a,
            _ => panic!("no messages"),
        },
        _ => panic!("not a task"),
    }
}

/// Every element of the document is carried (raw) by exactly one message, in order.
fn check_raw(out: &ParseOutput, id: &str) {
    let els = elements(id);
    let raws: Vec<Value> = out
        .messages
        .iter()
        .filter_map(|m| m.raw.as_ref())
        .map(|r| serde_json::from_slice(r).unwrap())
        .collect();
    assert_eq!(raws, els);
}

/// Distinct elements (ids without their block suffix) that produced assistant messages.
fn assistant_elements(out: &ParseOutput) -> BTreeSet<&str> {
    out.messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.message_id.split(['#', '/']).next().unwrap())
        .collect()
}

#[test]
fn legacy_array_task() {
    let out = parse("roo", ROOT, &task(LEGACY));
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(out.sessions.len(), 1);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, LEGACY);
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(
        s.title,
        Some((
            TitleSource::FirstPrompt,
            "Why does the formatDate test fail in CI?".into()
        ))
    );
    assert_eq!(s.started_at, Some(1_781_001_000_000));
    assert_eq!(s.updated_at, Some(1_781_001_065_000));
    assert!(!s.is_subagent && s.parent_session_id.is_none());

    // 6 messages, each kept whole, ids from their `ts`.
    check_raw(&out, LEGACY);
    let ids: Vec<&str> = out
        .messages
        .iter()
        .filter(|m| m.raw.is_some())
        .map(|m| m.message_id.as_str())
        .collect();
    assert_eq!(
        ids,
        [
            "1781001000000",
            "1781001004000",
            "1781001005000",
            "1781001009000",
            "1781001060000",
            "1781001065000"
        ]
    );

    // 2 prompts: the `<task>` and the follow-up inside attempt_completion's result.
    assert_eq!(
        prompt_texts(&out),
        [
            "Why does the formatDate test fail in CI?",
            "Please also fix it."
        ]
    );
    let prompts = of_kind(&out, MessageKind::UserPrompt);
    assert_eq!(
        prompts.iter().map(|p| p.prompt_number).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(prompts[0].timestamp, Some(1_781_001_000_000));
    assert_eq!(prompts[1].timestamp, Some(1_781_001_060_000));
    assert_eq!(prompts[1].message_id, "1781001060000/prompt");
    let last = out.messages.last().unwrap();
    assert_eq!(
        (last.kind, last.prompt_number),
        (MessageKind::AssistantText, 2)
    );

    // 3 assistant messages.
    assert_eq!(
        assistant_elements(&out),
        ["1781001004000", "1781001009000", "1781001065000"]
            .into_iter()
            .collect()
    );
    assert!(has_word(&out, MessageKind::AssistantText, "toISOString"));
    assert!(has_word(&out, MessageKind::UserPrompt, "formatDate"));

    // 2 tool_use, each answered by the tool_result with its id.
    let calls = of_kind(&out, MessageKind::ToolCall);
    let named: Vec<(&str, Option<&str>)> = calls
        .iter()
        .map(|c| {
            let t = c.tool_call.as_ref().unwrap();
            (t.name.as_str(), t.call_id.as_deref())
        })
        .collect();
    assert_eq!(
        named,
        [
            ("read_file", Some("toolu_01RooRead")),
            ("attempt_completion", Some("toolu_01RooDone"))
        ]
    );
    let results: Vec<(Option<&str>, bool)> = of_kind(&out, MessageKind::ToolResult)
        .iter()
        .map(|r| {
            let t = r.tool_result.as_ref().unwrap();
            (t.call_id.as_deref(), t.is_error)
        })
        .collect();
    assert_eq!(
        results,
        [
            (Some("toolu_01RooRead"), false),
            (Some("toolu_01RooDone"), false)
        ]
    );

    // Every user message's `<environment_details>` block: kept, never a prompt.
    let env: Vec<_> = out
        .messages
        .iter()
        .filter(|m| m.text.starts_with("<environment_details>"))
        .collect();
    assert_eq!(env.len(), 3);
    assert!(
        env.iter()
            .all(|m| m.kind == MessageKind::Meta && m.role == Role::User)
    );
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some("/home/dev/demo-app"))
    );
}

#[test]
fn v2_envelope_task() {
    let out = parse("roo", ROOT, &task(V2));
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, V2);
    assert_eq!(
        s.title,
        Some((
            TitleSource::FirstPrompt,
            "Rename formatDate to toIsoDay.".into()
        ))
    );
    assert_eq!(s.started_at, Some(1_781_002_000_000));
    assert_eq!(s.updated_at, Some(1_781_002_010_000));
    check_raw(&out, V2);

    assert_eq!(prompt_texts(&out), ["Rename formatDate to toIsoDay."]);
    assert_eq!(
        assistant_elements(&out),
        [
            "1781002002000",
            "1781002003000",
            "1781002006000",
            "1781002010000"
        ]
        .into_iter()
        .collect(),
        "3 assistant messages and the reasoning item"
    );
    // The top-level reasoning item (no role): its summary is the thinking.
    let thinking = of_kind(&out, MessageKind::Thinking);
    assert_eq!(thinking.len(), 1);
    assert_eq!(thinking[0].message_id, "1781002002000");
    assert_eq!(
        thinking[0].text,
        "Need to rename the export and its import."
    );
    assert!(elements(V2)[1].get("role").is_none());
    let assistant_messages = elements(V2)
        .iter()
        .filter(|e| e["role"] == "assistant")
        .count();
    assert_eq!(assistant_messages, 3);

    // 2 tool-call parts linked by toolCallId to the 2 `role: "tool"` messages; the second
    // result is an error by its `[ERROR]` prefix only.
    let calls = of_kind(&out, MessageKind::ToolCall);
    let names: Vec<(&str, Option<&str>)> = calls
        .iter()
        .map(|c| {
            let t = c.tool_call.as_ref().unwrap();
            (t.name.as_str(), t.call_id.as_deref())
        })
        .collect();
    assert_eq!(
        names,
        [
            ("search_files", Some("call_grep_1")),
            ("apply_diff", Some("call_apply_1"))
        ]
    );
    assert_eq!(
        calls[0].tool_call.as_ref().unwrap().input["regex"],
        "formatDate"
    );
    let results = of_kind(&out, MessageKind::ToolResult);
    let got: Vec<(&str, Option<&str>, bool)> = results
        .iter()
        .map(|r| {
            let t = r.tool_result.as_ref().unwrap();
            (r.message_id.as_str(), t.call_id.as_deref(), t.is_error)
        })
        .collect();
    assert_eq!(
        got,
        [
            ("1781002004000", Some("call_grep_1"), false),
            ("1781002007000", Some("call_apply_1"), true)
        ]
    );
    assert!(results.iter().all(|r| r.role == Role::Tool));
    assert!(results[0].text.contains("src/date.test.ts:2"));
    assert!(results[1].text.starts_with("[ERROR] apply_diff failed"));
    assert!(has_word(
        &out,
        MessageKind::AssistantText,
        "larger search block"
    ));
    assert!(has_word(&out, MessageKind::UserPrompt, "toIsoDay"));
}

#[test]
fn discovery_side_files_and_roots() {
    let found: Vec<String> = parse_all("roo", ROOT)
        .iter()
        .map(|(p, _)| {
            p.parent()
                .unwrap()
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    assert_eq!(found, [LEGACY, V2]);

    let reg = AdapterRegistry::new();
    let a = reg.get("roo").unwrap();
    let root = more().join(ROOT);
    let doc = root.join(task(LEGACY));
    assert_eq!(a.source_kind(&doc), SourceKind::Document);
    for side in ["history_item.json", "ui_messages.json"] {
        let changed = root.join(LEGACY).join(side);
        assert!(!a.is_transcript(&root, &changed));
        assert_eq!(a.source_of(&root, &changed), Some(doc.clone()), "{side}");
    }
    assert_eq!(
        a.source_of(&root, &root.join(LEGACY).join("other.txt")),
        None
    );

    let mut env = Env {
        home: "/home/u".into(),
        ..Default::default()
    };
    let roots = a.default_roots(&env);
    for r in [
        "/home/u/.config/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
        "/home/u/.config/Code - Insiders/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
        "/home/u/.config/VSCodium/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
        "/home/u/.config/Cursor/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
        "/home/u/Library/Application Support/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
        "/home/u/AppData/Roaming/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
        "/home/u/.vscode-remote/data/User/globalStorage/rooveterinaryinc.roo-cline/tasks",
    ] {
        assert!(roots.contains(&PathBuf::from(r)), "{r}");
    }
    env.vars.insert("XDG_CONFIG_HOME".into(), "/cfg".into());
    env.vars
        .insert("APPDATA".into(), "C:/Users/u/AppData/Roaming".into());
    let roots = a.default_roots(&env);
    assert!(roots.contains(&PathBuf::from(
        "/cfg/Code/User/globalStorage/rooveterinaryinc.roo-cline/tasks"
    )));
    assert!(roots.contains(&PathBuf::from(
        "C:/Users/u/AppData/Roaming/Windsurf/User/globalStorage/rooveterinaryinc.roo-cline/tasks"
    )));
}

fn copy_task(id: &str) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("tasks");
    let tdir = root.join(id);
    std::fs::create_dir_all(&tdir).unwrap();
    for e in std::fs::read_dir(more().join(ROOT).join(id)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), tdir.join(e.file_name())).unwrap();
    }
    let path = tdir.join(FILE);
    (dir, root, path)
}

#[test]
fn rewritten_task_keeps_ids() {
    let reg = AdapterRegistry::new();
    let a = reg.get("roo").unwrap();
    let (_dir, root, path) = copy_task(LEGACY);
    let first = a.parse(&root, &path, &Cursor::default(), 1 << 20).unwrap();
    assert_eq!(
        first.messages.len(),
        parse("roo", ROOT, &task(LEGACY)).messages.len()
    );
    let again = a.parse(&root, &path, &first.cursor, 1 << 20).unwrap();
    assert!(again.messages.is_empty() && again.edits.is_empty());
    // The side files still tell the task's project and title.
    assert_eq!(
        again.sessions[0].project_path.as_deref(),
        Some("/home/dev/demo-app")
    );

    // Roo rewrites the file: the read_file result is gone (a condense dropped it) and the
    // last answer changed.
    let mut els = elements(LEGACY);
    els.remove(2);
    els[4]["content"][0]["text"] = "Fixed with a UTC expectation.".into();
    std::fs::write(&path, serde_json::to_vec(&els).unwrap()).unwrap();
    let next = a.parse(&root, &path, &first.cursor, 1 << 20).unwrap();
    let changed = next
        .messages
        .iter()
        .find(|m| m.message_id == "1781001065000")
        .unwrap();
    assert_eq!(changed.text, "Fixed with a UTC expectation.");
    assert_eq!(
        next.edits,
        [Edit::Deactivate {
            session_id: LEGACY.into(),
            message_ids: vec!["1781001005000".into(), "1781001005000#1".into()],
        }]
    );
    // The prompt after the removed element keeps its id and number.
    let p = of_kind(&next, MessageKind::UserPrompt);
    assert_eq!(p[1].message_id, "1781001060000/prompt");
    assert_eq!(p[1].prompt_number, 2);

    // Half written: wait. Garbage: an issue.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 10]).unwrap();
    let half = a.parse(&root, &path, &next.cursor, 1 << 20).unwrap();
    assert!(half.pending_tail && half.messages.is_empty() && half.edits.is_empty());
    std::fs::write(&path, b"{\"version\": 2, \"messages\": 7}").unwrap();
    let bad = a.parse(&root, &path, &next.cursor, 1 << 20).unwrap();
    assert!(bad.messages.is_empty() && bad.issues.len() == 1 && !bad.issues[0].kept);
}

#[test]
fn sub_task_has_no_prompts() {
    let reg = AdapterRegistry::new();
    let a = reg.get("roo").unwrap();
    let (_dir, root, path) = copy_task(LEGACY);
    let hist = path.with_file_name("history_item.json");
    let mut h: Value = serde_json::from_slice(&std::fs::read(&hist).unwrap()).unwrap();
    h["parentTaskId"] = "0198f29f-0000-7000-8000-000000000000".into();
    std::fs::write(&hist, serde_json::to_vec(&h).unwrap()).unwrap();
    let out = a.parse(&root, &path, &Cursor::default(), 1 << 20).unwrap();
    let s = &out.sessions[0];
    assert!(s.is_subagent);
    assert_eq!(
        s.parent_session_id.as_deref(),
        Some("0198f29f-0000-7000-8000-000000000000")
    );
    assert!(of_kind(&out, MessageKind::UserPrompt).is_empty());
    assert!(
        out.messages
            .iter()
            .all(|m| m.flags.sidechain && m.prompt_number == 0)
    );
    assert_eq!(of_kind(&out, MessageKind::ToolCall).len(), 2);
}
