//! Kiro CLI (`kiro/`): the v2 transcript and its sidecar, with every value SOURCES.md gives.

use std::collections::BTreeMap;
use std::path::Path;

use ai_cli_session_collector::{
    AdapterRegistry, Cursor, MessageKind, ParseOutput, ParsedMessage, Role, TitleSource,
    aggregate_usage,
};

use super::*;

const ROOT: &str = "kiro/home/.kiro/sessions/cli";
const SID: &str = "5a1e2b3c-4d5e-4f60-8172-839405162738";

fn file() -> String {
    format!("{SID}.jsonl")
}

fn raw_json(m: &ParsedMessage) -> serde_json::Value {
    serde_json::from_slice(m.raw.as_ref().unwrap()).unwrap()
}

/// Every line once with its own bytes, the sidecar once, whole.
fn assert_raw_once(out: &ParseOutput, dir: &Path) {
    let bytes = std::fs::read(dir.join(file())).unwrap();
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
    let sidecar = std::fs::read(dir.join(format!("{SID}.json"))).unwrap();
    assert_eq!(raw.remove(&0), Some(vec![sidecar.as_slice()]));
    assert_eq!(raw.len(), lines.len());
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(raw[&(i as u64 + 1)], vec![*l], "line {}", i + 1);
    }
}

/// Parses from `cursor` one line per call until the end: (messages, last cursor).
fn chunks(dir: &Path, cursor: Cursor) -> (Vec<ParsedMessage>, Cursor) {
    let reg = AdapterRegistry::new();
    let a = reg.get("kiro").unwrap();
    let path = dir.join(file());
    let mut cursor = cursor;
    let mut msgs = Vec::new();
    for _ in 0..1000 {
        let c: Cursor = serde_json::from_str(&serde_json::to_string(&cursor).unwrap()).unwrap();
        let out = a.parse(dir, &path, &c, 1).unwrap();
        msgs.extend(out.messages);
        cursor = out.cursor;
        if out.at_end {
            break;
        }
    }
    (msgs, cursor)
}

#[test]
fn kiro_session_follows_sources_md() {
    let out = parse("kiro", ROOT, &file());
    let dir = more().join(ROOT);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert!(out.edits.is_empty());
    assert_raw_once(&out, &dir);
    assert_eq!(parse_all("kiro", ROOT).len(), 1);

    // Session id = file stem = sidecar `session_id`; cwd and model from the sidecar only.
    let sidecar: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(format!("{SID}.json"))).unwrap()).unwrap();
    assert_eq!(sidecar["session_id"], SID);
    assert_eq!(out.sessions.len(), 1);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, SID);
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(s.model.as_deref(), Some("claude-sonnet-4-5"));
    assert!(!s.is_subagent && s.parent_session_id.is_none());
    assert_eq!(
        s.title,
        Some((TitleSource::FirstPrompt, "Run the date tests".into()))
    );
    assert_eq!(s.started_at, Some(1_781_003_000_125));
    // The last turn's end, from the sidecar.
    assert_eq!(s.updated_at, Some(1_781_003_103_000));
    assert!(out.messages.iter().all(|m| m.session_id == SID));
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some("/home/dev/demo-app"))
    );

    // Two prompts; `meta.timestamp` in seconds, once fractional, once whole.
    assert_eq!(
        prompt_texts(&out),
        ["Run the date tests", "Explain the fix"]
    );
    let prompts = of_kind(&out, MessageKind::UserPrompt);
    assert_eq!(
        prompts.iter().map(|m| m.timestamp).collect::<Vec<_>>(),
        [Some(1_781_003_000_125), Some(1_781_003_100_000)]
    );
    assert_eq!(
        prompts.iter().map(|m| m.prompt_number).collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(has_word(&out, MessageKind::UserPrompt, "date tests"));

    // Three AssistantMessage records, without timestamps.
    let assistant: Vec<&ParsedMessage> = out
        .messages
        .iter()
        .filter(|m| m.raw.is_some() && m.line > 0 && raw_json(m)["kind"] == "AssistantMessage")
        .collect();
    assert_eq!(assistant.len(), 3);
    assert!(
        out.messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .all(|m| m.timestamp.is_none())
    );
    assert_eq!(
        of_kind(&out, MessageKind::AssistantText)
            .iter()
            .map(|m| (m.text.as_str(), m.prompt_number))
            .collect::<Vec<_>>(),
        [
            ("Running them now.", 1),
            (
                "One test fails: the expected date is computed in local time.",
                1
            ),
            (
                "Build the expectation with toISOString() so both sides use UTC.",
                2
            )
        ]
    );
    assert!(has_word(&out, MessageKind::AssistantText, "toISOString"));

    // One `shell` call, answered by id; `status: success` despite `exit_status: 1`.
    let calls = of_kind(&out, MessageKind::ToolCall);
    assert_eq!(calls.len(), 1);
    let call = calls[0].tool_call.as_ref().unwrap();
    assert_eq!(
        (call.name.as_str(), call.call_id.as_deref()),
        ("shell", Some("tooluse_k1"))
    );
    assert_eq!(call.input["command"], "npm test -- date");
    let results = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(results.len(), 1);
    let r = results[0].tool_result.as_ref().unwrap();
    assert_eq!(r.call_id.as_deref(), Some("tooluse_k1"));
    assert!(!r.is_error);
    assert!(results[0].text.contains("exit status: 1"));
    assert_eq!(raw_json(results[0])["kind"], "ToolResults");

    // One thinking block.
    let thinking = of_kind(&out, MessageKind::Thinking);
    assert_eq!(thinking.len(), 1);
    assert_eq!(thinking[0].text, "UTC vs local.");

    let side = out
        .messages
        .iter()
        .find(|m| m.message_id == "sidecar")
        .unwrap();
    assert_eq!(
        (side.kind, side.text.as_str()),
        (
            MessageKind::Meta,
            "cwd /home/dev/demo-app; model claude-sonnet-4-5; 2 turns"
        )
    );
    // Turn token counts from the sidecar, once per turn.
    let u = aggregate_usage(&out.messages);
    assert_eq!((u.input_tokens, u.output_tokens), (5_120 + 5_400, 96 + 40));
    let turn2 = out
        .messages
        .iter()
        .find(|m| m.message_id == "turn:2")
        .unwrap();
    assert_eq!(turn2.timestamp, Some(1_781_003_103_000));
    assert_eq!(turn2.prompt_number, 2);

    // A change of the sidecar is a change of the transcript.
    let reg = AdapterRegistry::new();
    let a = reg.get("kiro").unwrap();
    assert_eq!(
        a.source_of(&dir, &dir.join(format!("{SID}.json"))),
        Some(dir.join(file()))
    );
}

#[test]
fn kiro_chunks_equal_one_pass_and_sidecar_changes_are_read() {
    let whole = parse("kiro", ROOT, &file());
    let (msgs, cursor) = chunks(&more().join(ROOT), Cursor::default());
    assert_eq!(msgs, whole.messages);
    // Nothing new after the end.
    let (again, _) = chunks(&more().join(ROOT), cursor.clone());
    assert!(again.is_empty());

    // The sidecar rewritten (a third turn, another model): only its messages come again.
    let tmp = tempfile::tempdir().unwrap();
    let src = more().join(ROOT);
    std::fs::copy(src.join(file()), tmp.path().join(file())).unwrap();
    let mut side: serde_json::Value =
        serde_json::from_slice(&std::fs::read(src.join(format!("{SID}.json"))).unwrap()).unwrap();
    side["session_state"]["rts_model_state"]["model_info"]["model_id"] = "claude-opus-4-1".into();
    side["session_state"]["conversation_metadata"]["user_turn_metadatas"]
        .as_array_mut()
        .unwrap()
        .push(
            serde_json::json!({"input_token_count": 7, "output_token_count": 3,
            "end_timestamp": 1781003200, "message_ids": []}),
        );
    std::fs::write(
        tmp.path().join(format!("{SID}.json")),
        serde_json::to_vec(&side).unwrap(),
    )
    .unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("kiro").unwrap();
    let out = a
        .parse(tmp.path(), &tmp.path().join(file()), &cursor, 1 << 20)
        .unwrap();
    let ids: Vec<&str> = out.messages.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, ["sidecar", "turn:1", "turn:2", "turn:3"]);
    assert_eq!(out.sessions[0].model.as_deref(), Some("claude-opus-4-1"));
    assert_eq!(out.sessions[0].updated_at, Some(1_781_003_200_000));

    // A half-written sidecar waits; the lines are still read.
    std::fs::write(tmp.path().join(format!("{SID}.json")), b"{\"session_id\":").unwrap();
    let out = a
        .parse(
            tmp.path(),
            &tmp.path().join(file()),
            &Cursor::default(),
            1 << 20,
        )
        .unwrap();
    assert!(out.messages.iter().all(|m| m.line > 0));
    assert_eq!(prompt_texts(&out).len(), 2);
}

/// Lines that are not what Kiro writes are reported or kept, never a panic; a sidecar with a
/// parent makes a sub-agent session without prompts.
#[test]
fn kiro_odd_lines_and_sub_agents() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("child.jsonl");
    std::fs::write(
        &path,
        concat!(
            "not json\n",
            "7\n",
            r#"{"version":"v1","kind":"Prompt","data":{"message_id":"p","content":"x"}}"#,
            "\n",
            r#"{"version":"v1","kind":"Prompt","data":{"message_id":"q","content":[{"kind":"text","data":"grep usages"}],"meta":{"timestamp":1781003000}}}"#,
            "\n",
            r#"{"version":"v1","kind":"Clear","data":{}}"#,
            "\n",
            r#"{"version":"v1","kind":"ToolResults","data":{"message_id":"r","content":[{"kind":"toolResult","data":{"toolUseId":"t","content":[{"kind":"text","data":"denied"}],"status":"error"}}]}}"#,
            "\n",
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("child.json"),
        r#"{"session_id":"child","cwd":"/w","parent_session_id":"parent-1"}"#,
    )
    .unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("kiro").unwrap();
    let out = ai_cli_session_collector::parse_file(a, dir.path(), &path).unwrap();
    assert_eq!(out.issues.iter().filter(|i| !i.kept).count(), 2);
    assert!(out.issues.iter().any(|i| i.kept && i.line == 3));
    assert!(prompt_texts(&out).is_empty());
    assert!(
        out.messages
            .iter()
            .filter(|m| m.line > 0)
            .all(|m| m.flags.sidechain)
    );
    let r = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(r[0].text, "denied");
    assert!(r[0].tool_result.as_ref().unwrap().is_error);
    let s = &out.sessions[0];
    assert!(s.is_subagent);
    assert_eq!(s.parent_session_id.as_deref(), Some("parent-1"));
    assert!(s.title.is_none());
    assert_eq!(s.project_path.as_deref(), Some("/w"));
}

/// The store reads a source again only when its stamp changes: a rewritten sidecar must change
/// the transcript's stamp (and map back to it), or a new model or cwd would wait for the next
/// prompt.
#[test]
fn kiro_sidecar_changes_the_transcripts_stamp() {
    let reg = AdapterRegistry::new();
    let a = reg.get("kiro").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for f in [file(), format!("{SID}.json")] {
        std::fs::copy(more().join(ROOT).join(&f), tmp.path().join(&f)).unwrap();
    }
    let transcript = tmp.path().join(file());
    let sidecar = tmp.path().join(format!("{SID}.json"));
    assert_eq!(
        a.source_of(tmp.path(), &sidecar).as_deref(),
        Some(transcript.as_path())
    );
    let before = a.stamp(tmp.path(), &transcript).unwrap();
    let mut side = std::fs::read(&sidecar).unwrap();
    side.extend_from_slice(b"\n");
    std::fs::write(&sidecar, side).unwrap();
    let after = a.stamp(tmp.path(), &transcript).unwrap();
    assert_ne!(
        before, after,
        "the sidecar is part of the transcript's stamp"
    );
}
