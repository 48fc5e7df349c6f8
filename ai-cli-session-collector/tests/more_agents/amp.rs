//! Amp legacy local threads (`amp/`): every value SOURCES.md gives, plus the document
//! behaviour (re-read, rewrite, half-written, garbage) and the default roots.

use std::collections::BTreeSet;

use ai_cli_session_collector::{
    Cursor, Edit, Env, Role, SourceKind, TitleSource, Usage, aggregate_usage,
};
use serde_json::Value;

use super::*;

const ROOT: &str = "amp/home/.local/share/amp/threads";
const T1: &str = "T-019ca1ce-3ae2-7686-a41e-ccc078837f8a.json";
const T2: &str = "T-019ca1f6-7f21-77b5-a308-65416ebbdf48.json";

/// The part of a message id before its block suffix: the thread's `messageId`.
fn base(id: &str) -> &str {
    id.split('#').next().unwrap_or(id)
}

/// Checks that every thread message is carried (raw) by exactly one parsed message, byte for
/// byte its JSON, and that the thread's own fields ride on the `thread` meta message without
/// the device identifiers. Returns the thread's `v`.
fn check_raw(out: &ParseOutput, file: &str) -> u64 {
    let doc: Value =
        serde_json::from_slice(&std::fs::read(more().join(ROOT).join(file)).unwrap()).unwrap();
    let with_raw: Vec<&ParsedMessage> = out.messages.iter().filter(|m| m.raw.is_some()).collect();
    let msgs = doc["messages"].as_array().unwrap();
    assert_eq!(
        with_raw.len(),
        msgs.len() + 1,
        "one raw per message plus the thread"
    );
    let thread: Value = serde_json::from_slice(with_raw[0].raw.as_ref().unwrap()).unwrap();
    assert_eq!(with_raw[0].message_id, "thread");
    assert!(thread.get("messages").is_none());
    let platform = &thread["env"]["initial"]["platform"];
    assert!(platform.get("installationID").is_none());
    assert!(platform.get("deviceFingerprint").is_none());
    assert_eq!(
        platform["client"],
        doc["env"]["initial"]["platform"]["client"]
    );
    for (m, el) in with_raw[1..].iter().zip(msgs) {
        let raw: Value = serde_json::from_slice(m.raw.as_ref().unwrap()).unwrap();
        assert_eq!(&raw, el);
        assert_eq!(
            m.message_id,
            el["messageId"].to_string(),
            "the id is the messageId"
        );
    }
    thread["v"].as_u64().unwrap()
}

fn assistant_records(out: &ParseOutput) -> BTreeSet<&str> {
    out.messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| base(&m.message_id))
        .collect()
}

#[test]
fn jokes_plan_thread() {
    let out = parse("amp", ROOT, T1);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(out.sessions.len(), 1);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, "T-019ca1ce-3ae2-7686-a41e-ccc078837f8a");
    assert_eq!(
        s.title,
        Some((
            TitleSource::Generated,
            "Add jokes CLI with CSV data source".into()
        ))
    );
    assert_eq!(
        s.project_path.as_deref(),
        Some("/Users/svarlamov/projects/testing-git-amp")
    );
    assert_eq!(s.model.as_deref(), Some("claude-opus-4-6"));
    assert_eq!(s.started_at, Some(1_772_241_173_221));
    assert_eq!(s.updated_at, Some(1_772_241_218_820));
    assert!(!s.is_subagent);
    assert_eq!(check_raw(&out, T1), 220);

    // 6 messages, the `messageId` counter 0..5.
    let ids: BTreeSet<&str> = out
        .messages
        .iter()
        .filter(|m| m.message_id != "thread")
        .map(|m| base(&m.message_id))
        .collect();
    assert_eq!(ids, ["0", "1", "2", "3", "4", "5"].into_iter().collect());

    // 1 prompt, with `meta.sentAt` as its time.
    let prompts = of_kind(&out, MessageKind::UserPrompt);
    assert_eq!(prompts.len(), 1);
    assert!(
        prompts[0]
            .text
            .starts_with("Create a plan to add a jokes.csv and a cli")
    );
    assert_eq!(prompts[0].timestamp, Some(1_772_241_201_792));
    assert_eq!(prompts[0].prompt_number, 1);
    assert!(
        out.messages
            .iter()
            .filter(|m| m.message_id != "thread")
            .all(|m| m.prompt_number == 1)
    );

    // 3 assistant messages, with `usage.timestamp` (ISO) as their time and the model.
    assert_eq!(
        assistant_records(&out),
        ["1", "3", "5"].into_iter().collect()
    );
    let last = out.messages.iter().find(|m| m.message_id == "5").unwrap();
    assert_eq!(last.kind, MessageKind::AssistantText);
    assert_eq!(last.timestamp, Some(1_772_241_218_820));
    assert_eq!(last.model.as_deref(), Some("claude-opus-4-6"));
    assert!(has_word(
        &out,
        MessageKind::AssistantText,
        "Random Joke CLI"
    ));
    assert!(has_word(&out, MessageKind::UserPrompt, "jokes.csv"));

    // The thinking block (SOURCES.md calls it empty; it has text, and the block that is empty
    // is the "\n\n" text block before it).
    let thinking = of_kind(&out, MessageKind::Thinking);
    assert_eq!(thinking.len(), 1);
    assert!(
        thinking[0]
            .text
            .starts_with("The user wants me to create a plan")
    );
    let blank_text: Vec<_> = of_kind(&out, MessageKind::AssistantText)
        .into_iter()
        .filter(|m| m.text.trim().is_empty())
        .collect();
    assert_eq!(blank_text.len(), 1);
    assert_eq!(blank_text[0].message_id, "1");

    // 4 Read calls answered by 4 results (by `toolUseID`) in 2 user messages.
    let calls = of_kind(&out, MessageKind::ToolCall);
    assert_eq!(calls.len(), 4);
    assert!(
        calls
            .iter()
            .all(|c| c.tool_call.as_ref().unwrap().name == "Read")
    );
    let results = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(results.len(), 4);
    for c in &calls {
        let id = c.tool_call.as_ref().unwrap().call_id.clone();
        assert!(id.is_some());
        let r: Vec<_> = results
            .iter()
            .filter(|r| r.tool_result.as_ref().unwrap().call_id == id)
            .collect();
        assert_eq!(r.len(), 1, "{id:?}");
        assert!(!r[0].tool_result.as_ref().unwrap().is_error);
        assert_eq!(r[0].role, Role::Tool);
    }
    let carriers: BTreeSet<&str> = results.iter().map(|r| base(&r.message_id)).collect();
    assert_eq!(carriers, ["2", "4"].into_iter().collect());
    assert!(
        results
            .iter()
            .any(|r| r.text.contains("Why do programmers prefer dark mode?"))
    );

    // Usage per assistant message, keyed by it.
    assert_eq!(
        aggregate_usage(&out.messages),
        Usage {
            input_tokens: 5,
            output_tokens: 555,
            cache_read_tokens: 39744,
            cache_creation_tokens: 7226,
            reasoning_tokens: 0,
        }
    );
}

#[test]
fn append_joke_thread() {
    let out = parse("amp", ROOT, T2);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, "T-019ca1f6-7f21-77b5-a308-65416ebbdf48");
    assert_eq!(
        s.title,
        Some((
            TitleSource::Generated,
            "Read jokes CSV and append new row".into()
        ))
    );
    assert_eq!(
        s.project_path.as_deref(),
        Some("/Users/svarlamov/projects/testing-git-amp")
    );
    assert_eq!(check_raw(&out, T2), 85);
    assert_eq!(
        prompt_texts(&out),
        ["Read jokes.csv and append one new joke row"]
    );
    assert_eq!(
        of_kind(&out, MessageKind::UserPrompt)[0].timestamp,
        Some(1_772_243_812_139)
    );
    assert_eq!(
        assistant_records(&out),
        ["1", "3", "5"].into_iter().collect()
    );
    let calls = of_kind(&out, MessageKind::ToolCall);
    let names: Vec<&str> = calls
        .iter()
        .map(|c| c.tool_call.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(names, ["Read", "edit_file"]);
    let results = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(results.len(), 2);
    for (c, r) in calls.iter().zip(&results) {
        assert_eq!(
            c.tool_call.as_ref().unwrap().call_id,
            r.tool_result.as_ref().unwrap().call_id
        );
    }
    assert!(
        results[1]
            .text
            .contains("+14,Why do programmers hate nature?")
    );
    assert!(has_word(
        &out,
        MessageKind::AssistantText,
        "Appended joke #14"
    ));
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some("/Users/svarlamov/projects/testing-git-amp"))
    );
}

#[test]
fn discovery_and_roots() {
    let all = parse_all("amp", ROOT);
    let names: Vec<String> = all
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, [T1, T2]);
    let reg = AdapterRegistry::new();
    let a = reg.get("amp").unwrap();
    let root = more().join(ROOT);
    assert_eq!(a.source_kind(&root.join(T1)), SourceKind::Document);
    assert!(!a.is_transcript(&root, &root.join("notes.json")));
    assert!(!a.is_transcript(&root, &root.join("sub").join(T1)));

    let mut env = Env {
        home: "/home/u".into(),
        ..Default::default()
    };
    let roots = a.default_roots(&env);
    assert!(roots.contains(&PathBuf::from("/home/u/.local/share/amp/threads")));
    assert!(roots.contains(&PathBuf::from("/home/u/AppData/Local/amp/threads")));
    env.vars.insert("XDG_DATA_HOME".into(), "/data".into());
    env.vars
        .insert("LOCALAPPDATA".into(), "C:/Users/u/AppData/Local".into());
    let roots = a.default_roots(&env);
    assert!(roots.contains(&PathBuf::from("/data/amp/threads")));
    assert!(roots.contains(&PathBuf::from("C:/Users/u/AppData/Local/amp/threads")));
    assert!(!roots.contains(&PathBuf::from("/home/u/.local/share/amp/threads")));
}

#[test]
fn rewritten_thread_keeps_ids() {
    let reg = AdapterRegistry::new();
    let a = reg.get("amp").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(T1);
    std::fs::copy(more().join(ROOT).join(T1), &path).unwrap();

    let first = a
        .parse(dir.path(), &path, &Cursor::default(), 1 << 20)
        .unwrap();
    assert_eq!(first.messages.len(), parse("amp", ROOT, T1).messages.len());
    // Unchanged: nothing new.
    let again = a.parse(dir.path(), &path, &first.cursor, 1 << 20).unwrap();
    assert!(again.messages.is_empty() && again.edits.is_empty() && again.issues.is_empty());

    // Amp rewrites the thread: message 4 (a tool result) is gone, message 5 has new text.
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    doc["v"] = 221.into();
    let msgs = doc["messages"].as_array_mut().unwrap();
    msgs.remove(4);
    msgs[4]["content"][0]["text"] = "Here's the revised plan.".into();
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();

    let next = a.parse(dir.path(), &path, &first.cursor, 1 << 20).unwrap();
    let changed = next.messages.iter().find(|m| m.message_id == "5").unwrap();
    assert_eq!(changed.text, "Here's the revised plan.");
    assert_eq!(changed.kind, MessageKind::AssistantText);
    // Every other id is as it was.
    let before: BTreeSet<&str> = first
        .messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect();
    let after: BTreeSet<&str> = next
        .messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect();
    assert!(after.is_subset(&before));
    assert_eq!(
        next.edits,
        [Edit::Deactivate {
            session_id: "T-019ca1ce-3ae2-7686-a41e-ccc078837f8a".into(),
            message_ids: vec!["4".into()],
        }]
    );
    let thread = next
        .messages
        .iter()
        .find(|m| m.message_id == "thread")
        .unwrap();
    let raw: Value = serde_json::from_slice(thread.raw.as_ref().unwrap()).unwrap();
    assert_eq!(raw["v"], 221);
}

#[test]
fn half_written_and_garbage_threads() {
    let reg = AdapterRegistry::new();
    let a = reg.get("amp").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(more().join(ROOT).join(T1)).unwrap();

    let half = dir.path().join("T-half.json");
    std::fs::write(&half, &bytes[..bytes.len() / 2]).unwrap();
    let out = a
        .parse(dir.path(), &half, &Cursor::default(), 1 << 20)
        .unwrap();
    assert!(out.pending_tail, "a half-written thread waits for the rest");
    assert!(out.messages.is_empty() && out.issues.is_empty());
    assert_eq!(out.cursor, Cursor::default());

    let garbage = dir.path().join("T-garbage.json");
    std::fs::write(&garbage, b"\x00\xffnot json at all}").unwrap();
    let out = a
        .parse(dir.path(), &garbage, &Cursor::default(), 1 << 20)
        .unwrap();
    assert!(out.messages.is_empty());
    assert_eq!(out.issues.len(), 1);
    assert!(!out.issues[0].kept);

    let list = dir.path().join("T-list.json");
    std::fs::write(&list, b"[1, 2]").unwrap();
    let out = a
        .parse(dir.path(), &list, &Cursor::default(), 1 << 20)
        .unwrap();
    assert!(out.messages.is_empty() && out.issues.len() == 1);

    // Odd shapes inside a thread are kept, not dropped.
    let odd = dir.path().join("T-odd.json");
    std::fs::write(
        &odd,
        br#"{"id":"T-odd","messages":[{"role":"user","content":"not a list"},{"role":"assistant","messageId":1,"content":[{"type":"mystery"}]},7]}"#,
    )
    .unwrap();
    let out = a
        .parse(dir.path(), &odd, &Cursor::default(), 1 << 20)
        .unwrap();
    assert_eq!(out.messages.iter().filter(|m| m.raw.is_some()).count(), 4);
    assert!(out.messages.iter().all(|m| m.session_id == "T-odd"));
}
