//! Pi (`pi/`): the three sample sessions, with every value SOURCES.md gives.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use ai_cli_session_collector::{
    AdapterRegistry, Cursor, Edit, MessageKind, ParseOutput, ParsedMessage, Role, TitleSource,
    aggregate_usage,
};

use super::*;

const ROOT: &str = "pi/home/.pi/agent/sessions";
const REAL: &str = "--test-proj--/2026-07-09T21-27-45-067Z_real-world-uuid.jsonl";
const BRANCH: &str = "--test--/2026-07-09T10-00-00-000Z_branch-uuid.jsonl";
const V1: &str = "--test--/2026-07-09T10-00-00-000Z_v1-uuid.jsonl";

/// Every line of the file is stored (carries raw) exactly once, and the raw is the line.
fn assert_raw_once(out: &ParseOutput, file: &str) {
    let bytes = std::fs::read(more().join(ROOT).join(file)).unwrap();
    let lines: Vec<&[u8]> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .collect();
    let mut raw: BTreeMap<u64, Vec<&[u8]>> = BTreeMap::new();
    for m in &out.messages {
        if let Some(r) = &m.raw {
            raw.entry(m.line).or_default().push(r);
        }
    }
    assert_eq!(raw.len(), lines.len(), "{file}: lines stored");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(raw[&(i as u64 + 1)], vec![*l], "{file}: line {}", i + 1);
    }
}

/// The records (lines) whose messages have this role.
fn records(out: &ParseOutput, role: Role) -> usize {
    out.messages
        .iter()
        .filter(|m| m.raw.is_some() && m.role == role)
        .count()
}

/// What the store ends with: the last copy of each message, and whether it is still active.
fn final_view(out: &ParseOutput) -> BTreeMap<String, (ParsedMessage, bool)> {
    let mut view: BTreeMap<String, (ParsedMessage, bool)> = BTreeMap::new();
    for m in &out.messages {
        view.insert(m.message_id.clone(), (m.clone(), true));
    }
    for e in &out.edits {
        if let Edit::Deactivate { message_ids, .. } = e {
            for id in message_ids {
                view.get_mut(id).expect("deactivated id was emitted").1 = false;
            }
        }
    }
    view
}

/// Active messages of one kind, in file order.
fn active_texts(out: &ParseOutput, kind: MessageKind) -> Vec<String> {
    let mut v: Vec<(u64, String)> = final_view(out)
        .into_values()
        .filter(|(m, active)| *active && m.kind == kind)
        .map(|(m, _)| (m.seq, m.text))
        .collect();
    v.sort();
    v.into_iter().map(|(_, t)| t).collect()
}

fn by_id<'a>(out: &'a ParseOutput, id: &str) -> &'a ParsedMessage {
    out.messages
        .iter()
        .find(|m| m.message_id == id)
        .unwrap_or_else(|| panic!("no message {id}"))
}

/// Tool calls whose id has a result.
fn tool_pairs(out: &ParseOutput) -> BTreeSet<String> {
    let results: BTreeSet<&str> = out
        .messages
        .iter()
        .filter_map(|m| m.tool_result.as_ref()?.call_id.as_deref())
        .collect();
    out.messages
        .iter()
        .filter_map(|m| m.tool_call.as_ref()?.call_id.clone())
        .filter(|c| results.contains(c.as_str()))
        .collect()
}

/// Reads the file one line per call (cursor round-tripped through JSON, as the store keeps
/// it): the same messages and edits as one pass.
fn assert_chunks_equal_one_pass(file: &str) {
    let reg = AdapterRegistry::new();
    let a = reg.get("pi").unwrap();
    let root = more().join(ROOT);
    let path = root.join(file);
    let whole = parse("pi", ROOT, file);
    let mut cursor = Cursor::default();
    let (mut msgs, mut edits) = (Vec::new(), Vec::new());
    for _ in 0..1000 {
        let c: Cursor = serde_json::from_str(&serde_json::to_string(&cursor).unwrap()).unwrap();
        let out = a.parse(&root, &path, &c, 1).unwrap();
        msgs.extend(out.messages);
        edits.extend(out.edits);
        cursor = out.cursor;
        if out.at_end {
            break;
        }
    }
    assert_eq!(msgs, whole.messages, "{file}");
    assert_eq!(edits, whole.edits, "{file}");
    // Nothing new after the end.
    let again = a.parse(&root, &path, &cursor, 1 << 20).unwrap();
    assert!(
        again.messages.is_empty() && again.edits.is_empty(),
        "{file}"
    );
}

fn raw_json(m: &ParsedMessage) -> serde_json::Value {
    serde_json::from_slice(m.raw.as_ref().unwrap()).unwrap()
}

#[test]
fn pi_discovers_the_three_sessions() {
    let all = parse_all("pi", ROOT);
    assert_eq!(all.len(), 3);
    let reg = AdapterRegistry::new();
    let a = reg.get("pi").unwrap();
    let root = more().join(ROOT);
    assert!(!a.is_transcript(&root, Path::new("/elsewhere/x.jsonl")));
    assert!(!a.is_transcript(&root, &root.join("--test--/notes.txt")));
}

#[test]
fn pi_real_world_session() {
    let out = parse("pi", ROOT, REAL);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_raw_once(&out, REAL);
    assert_chunks_equal_one_pass(REAL);

    // Header: version 3, id, cwd.
    let header = raw_json(&out.messages[0]);
    assert_eq!(header["type"], "session");
    assert_eq!(header["version"], 3);
    let s = &out.sessions[0];
    assert!(
        out.sessions
            .iter()
            .all(|x| x.session_id == "real-world-uuid")
    );
    assert_eq!(s.session_id, "real-world-uuid");
    assert_eq!(s.project_path.as_deref(), Some("/test/proj"));
    assert_eq!(
        s.model.as_deref(),
        Some("accounts/fireworks/routers/glm-5p2-fast")
    );
    assert_eq!(
        s.title,
        Some((
            TitleSource::FirstPrompt,
            "Read README.md and NOTES.md, then tell me what this project is about.".into()
        ))
    );
    assert!(!s.is_subagent && s.parent_session_id.is_none());
    assert_eq!(s.started_at, Some(1_783_632_465_067));
    assert_eq!(s.updated_at, Some(1_783_632_692_644));
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some("/test/proj"))
    );

    // Two model changes, kept as Meta.
    let changes: Vec<&str> = out
        .messages
        .iter()
        .filter(|m| m.raw.is_some() && raw_json(m)["type"] == "model_change")
        .map(|m| {
            assert_eq!(m.kind, MessageKind::Meta);
            m.text.as_str()
        })
        .collect();
    assert_eq!(
        changes,
        [
            "fireworks/accounts/fireworks/routers/glm-5p2-fast",
            "fireworks/accounts/fireworks/routers/kimi-k2p6-fast"
        ]
    );

    // Two prompts.
    assert_eq!(
        prompt_texts(&out),
        [
            "Read README.md and NOTES.md, then tell me what this project is about.",
            "summarize it now"
        ]
    );
    let numbers: Vec<u32> = of_kind(&out, MessageKind::UserPrompt)
        .iter()
        .map(|m| m.prompt_number)
        .collect();
    assert_eq!(numbers, [1, 2]);
    assert!(has_word(&out, MessageKind::UserPrompt, "NOTES.md"));

    // Three assistant messages; the one after the model switch has no content.
    assert_eq!(records(&out, Role::Assistant), 3);
    let failed = by_id(&out, "59c6b470");
    assert_eq!(
        (failed.role, failed.kind),
        (Role::Assistant, MessageKind::Meta)
    );
    assert!(failed.text.contains("max_tokens"));
    assert_eq!(
        failed.model.as_deref(),
        Some("accounts/fireworks/routers/kimi-k2p6-fast")
    );
    let answers = of_kind(&out, MessageKind::AssistantText);
    assert_eq!(answers.len(), 1);
    assert!(has_word(&out, MessageKind::AssistantText, "pi-format-demo"));
    assert_eq!(
        answers[0].model.as_deref(),
        Some("accounts/fireworks/routers/glm-5p2-fast")
    );
    assert_eq!(answers[0].prompt_number, 1);
    assert_eq!(
        of_kind(&out, MessageKind::Thinking)[0].text,
        "Let me read both files."
    );

    // Two `read` calls, answered by two results, by id.
    let calls = of_kind(&out, MessageKind::ToolCall);
    assert_eq!(calls.len(), 2);
    for (c, path) in calls.iter().zip(["README.md", "NOTES.md"]) {
        let tc = c.tool_call.as_ref().unwrap();
        assert_eq!(tc.name, "read");
        assert_eq!(tc.input["path"], path);
    }
    let results = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(results.len(), 2);
    assert!(
        results
            .iter()
            .all(|r| !r.tool_result.as_ref().unwrap().is_error && r.role == Role::Tool)
    );
    assert!(results[0].text.starts_with("# Pi Format Demo"));
    assert_eq!(
        tool_pairs(&out),
        BTreeSet::from([
            "chatcmpl-tool-98ce2a0a927d46e3".to_owned(),
            "chatcmpl-tool-a9feabf97b73ab10".to_owned()
        ])
    );

    // The user's own shell command: Meta, not a prompt.
    let bash = by_id(&out, "82b67245");
    assert_eq!((bash.role, bash.kind), (Role::User, MessageKind::Meta));
    assert!(bash.text.starts_with("$ ls -la\ntotal 24"));
    assert_eq!(bash.prompt_number, 1);

    // One compaction.
    let summaries = of_kind(&out, MessageKind::CompactionSummary);
    assert_eq!(summaries.len(), 1);
    assert!(summaries[0].text.starts_with("## Goal"));
    let c = raw_json(summaries[0]);
    assert_eq!(c["tokensBefore"], 325_177);
    assert_eq!(c["firstKeptEntryId"], "59c6b470");

    // Usage: one key per response.
    let u = aggregate_usage(&out.messages);
    assert_eq!(
        (u.input_tokens, u.output_tokens, u.cache_read_tokens),
        (16_570 + 1_297, 29 + 328, 16_569)
    );
    // Pi prices each response itself (`usage.cost.total`, in dollars).
    let costs: Vec<f64> = out.messages.iter().filter_map(|m| m.cost_usd).collect();
    assert_eq!(costs, vec![0.0349884, 0.00836799, 0.0]);

    // A straight line: nothing abandoned.
    assert!(out.edits.is_empty());
}

#[test]
fn pi_branching_counts_only_the_active_path() {
    let out = parse("pi", ROOT, BRANCH);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_raw_once(&out, BRANCH);
    assert_chunks_equal_one_pass(BRANCH);
    assert_eq!(out.sessions[0].session_id, "branch-uuid");
    assert_eq!(out.sessions[0].project_path.as_deref(), Some("/test"));
    assert_eq!(out.sessions[0].model.as_deref(), Some("m"));

    // Three user messages in the file ...
    assert_eq!(records(&out, Role::User), 3);
    // ... two prompts and two answers on the active path.
    assert_eq!(
        active_texts(&out, MessageKind::UserPrompt),
        ["common prompt", "right branch prompt"]
    );
    assert_eq!(
        active_texts(&out, MessageKind::AssistantText),
        ["common answer", "right branch answer"]
    );
    // The abandoned prompt is stored, deactivated and no longer a prompt.
    let view = final_view(&out);
    let (left, active) = &view["u2left"];
    assert!(!active);
    assert_eq!(left.kind, MessageKind::Meta);
    assert_eq!(left.text, "left branch prompt");
    assert_eq!(
        out.edits,
        [Edit::Deactivate {
            session_id: "branch-uuid".into(),
            message_ids: vec!["u2left".into()]
        }]
    );
    // Prompt numbers follow the path: the right branch's prompt is the second.
    assert_eq!(view["u2right"].0.prompt_number, 2);
    assert_eq!(view["a2right"].0.prompt_number, 2);
    assert_eq!(view["a2right"].0.parent_id.as_deref(), Some("u2right"));
    let sessions_title = out.sessions.iter().find_map(|s| s.title.clone());
    assert_eq!(
        sessions_title,
        Some((TitleSource::FirstPrompt, "common prompt".into()))
    );
}

#[test]
fn pi_version_one_file_without_ids() {
    let out = parse("pi", ROOT, V1);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_raw_once(&out, V1);
    assert_chunks_equal_one_pass(V1);
    assert_eq!(out.sessions[0].session_id, "v1-uuid");
    assert_eq!(out.sessions[0].project_path.as_deref(), Some("/test"));
    for m in &out.messages {
        if m.raw.is_some() {
            assert!(raw_json(m).get("parentId").is_none());
        }
    }
    assert_eq!(prompt_texts(&out), ["legacy prompt", "legacy prompt two"]);
    assert_eq!(
        of_kind(&out, MessageKind::AssistantText)
            .iter()
            .map(|m| (m.text.as_str(), m.prompt_number))
            .collect::<Vec<_>>(),
        [("legacy answer", 1), ("legacy answer two", 2)]
    );
    let summaries = of_kind(&out, MessageKind::CompactionSummary);
    assert_eq!(summaries.len(), 1);
    assert_eq!(summaries[0].text, "legacy compaction summary");
    assert_eq!(raw_json(summaries[0])["firstKeptEntryIndex"], 1);
    // Ids from positions: a linear file, nothing abandoned.
    assert_eq!(by_id(&out, "L2").kind, MessageKind::UserPrompt);
    assert!(out.edits.is_empty());
}

/// The store's view after each output in turn: messages upserted (active again), then edits.
fn apply(view: &mut BTreeMap<String, (ParsedMessage, bool)>, out: &ParseOutput) {
    for m in &out.messages {
        view.insert(m.message_id.clone(), (m.clone(), true));
    }
    for e in &out.edits {
        if let Edit::Deactivate { message_ids, .. } = e {
            for id in message_ids {
                if let Some(v) = view.get_mut(id) {
                    v.1 = false;
                }
            }
        }
    }
}

/// Writes a session of entries `(parent choice, target, is user)`: entry `i` is `e<i>`; its
/// parent is `null`, the previous entry, an earlier entry, an unknown id or missing.
fn tree_session(spec: &[(u8, usize, bool)]) -> (String, Vec<String>) {
    let mut lines = vec![r#"{"type":"session","version":3,"id":"t","cwd":"/t"}"#.to_owned()];
    // Pi's reading of the tree: (parent) per entry, as the adapter documents it.
    let mut parents: Vec<Option<usize>> = Vec::new();
    for (i, &(choice, target, user)) in spec.iter().enumerate() {
        let prev = i.checked_sub(1);
        let (json_parent, parent) = match choice % 5 {
            0 => (Some(serde_json::Value::Null), None),
            1 => (prev.map(|p| format!("e{p}").into()), prev),
            2 if i > 0 => (Some(format!("e{}", target % i).into()), Some(target % i)),
            3 => (Some("zz".into()), prev),
            _ => (None, prev),
        };
        parents.push(parent);
        let message = if user {
            serde_json::json!({"role":"user","content":format!("p{i}")})
        } else {
            serde_json::json!({"role":"assistant","content":[{"type":"text","text":format!("a{i}")}]})
        };
        let mut v = serde_json::json!({"type":"message","id":format!("e{i}"),"message":message});
        if let Some(p) = json_parent {
            v["parentId"] = p;
        }
        lines.push(v.to_string());
    }
    let mut path = Vec::new();
    let mut cur = spec.len().checked_sub(1);
    while let Some(i) = cur {
        path.push(i);
        cur = parents[i];
    }
    path.reverse();
    let prompts = path
        .into_iter()
        .filter(|&i| spec[i].2)
        .map(|i| format!("p{i}"))
        .collect();
    (lines.join("\n") + "\n", prompts)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever the branching, read in one pass or line by line, the store ends with exactly
    /// the prompts of the path from the last entry back to the root.
    #[test]
    fn pi_active_prompts_are_the_last_path(
        spec in proptest::collection::vec((0u8..5, 0usize..16, proptest::bool::ANY), 1..14)
    ) {
        let (content, want) = tree_session(&spec);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("2026-01-01T00-00-00-000Z_t.jsonl");
        std::fs::write(&path, content).unwrap();
        let reg = AdapterRegistry::new();
        let a = reg.get("pi").unwrap();
        let active_prompts = |view: &BTreeMap<String, (ParsedMessage, bool)>| {
            let mut p: Vec<(u64, String)> = view
                .values()
                .filter(|(m, on)| *on && m.kind == MessageKind::UserPrompt)
                .map(|(m, _)| (m.seq, m.text.clone()))
                .collect();
            p.sort();
            p.into_iter().map(|(_, t)| t).collect::<Vec<_>>()
        };
        let mut whole = BTreeMap::new();
        let out = ai_cli_session_collector::parse_file(a, dir.path(), &path).unwrap();
        proptest::prop_assert!(out.issues.is_empty());
        apply(&mut whole, &out);
        proptest::prop_assert_eq!(&active_prompts(&whole), &want);

        let mut chunked = BTreeMap::new();
        let mut cursor = Cursor::default();
        loop {
            let out = a.parse(dir.path(), &path, &cursor, 1).unwrap();
            apply(&mut chunked, &out);
            cursor = out.cursor;
            if out.at_end {
                break;
            }
        }
        proptest::prop_assert_eq!(&active_prompts(&chunked), &want);
        // Both readings end with the same messages, equally active.
        let summary = |v: &BTreeMap<String, (ParsedMessage, bool)>| {
            v.iter()
                .map(|(id, (m, on))| (id.clone(), m.kind, m.prompt_number, *on))
                .collect::<Vec<_>>()
        };
        proptest::prop_assert_eq!(summary(&whole), summary(&chunked));
    }
}

/// Lines that are not what Pi writes are reported or kept, never a panic.
#[test]
fn pi_odd_lines_are_reported_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("2026-01-01T00-00-00-000Z_odd.jsonl");
    let mut bytes =
        b"not json\n[1,2]\n{\"type\":\"message\",\"id\":\"x\",\"message\":5}\n".to_vec();
    bytes.extend_from_slice(b"{\"type\":\"message\",\"id\":\"y\",\"parentId\":7,\"message\":{\"role\":\"assistant\",\"content\":{}}}\n");
    bytes.extend_from_slice(b"{\"type\":\"message\",\"id\":\"z\",\"message\":{\"role\":\"user\",\"content\":\"caf\xe9\"}}\n");
    bytes.extend_from_slice(b"{\"type\":\"message\",\"id\":\"w\",\"message\":{\"role\":\"user\"");
    std::fs::write(&path, bytes).unwrap();
    let reg = AdapterRegistry::new();
    let out =
        ai_cli_session_collector::parse_file(reg.get("pi").unwrap(), dir.path(), &path).unwrap();
    // The two undecodable lines skipped, the `message: 5` kept with a note, the bad UTF-8 kept.
    assert_eq!(out.issues.iter().filter(|i| !i.kept).count(), 2);
    assert!(out.issues.iter().any(|i| i.kept && i.line == 3));
    assert_eq!(prompt_texts(&out), ["caf\u{fffd}"]);
    // The half-written last line waits.
    assert!(out.pending_tail);
    assert!(out.messages.iter().all(|m| m.message_id != "w"));
    assert_eq!(out.sessions[0].session_id, "odd");
}
