//! Qwen Code (`qwen/`): the five sample sessions, with every value SOURCES.md gives.

use std::collections::{BTreeMap, BTreeSet};

use ai_cli_session_collector::{
    AdapterRegistry, Cursor, MessageKind, ParseOutput, ParsedMessage, Role, TitleSource,
    aggregate_usage,
};

use super::*;

const ROOT: &str = "qwen/home/.qwen/projects";
const REAL: &str = "-Users-dev-project/chats/e27e6b80-2f13-4be0-ab2c-c349bb717400.jsonl";
const BASIC: &str = "-Users-dev-project/chats/11111111-2222-3333-4444-555555555555.jsonl";
const TOOLS: &str = "-Users-dev-project/chats/aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee.jsonl";
const COMPRESSION: &str = "-Users-dev-project/chats/cccccccc-dddd-eeee-ffff-000000000000.jsonl";
const PR: &str = "-tmp-qwen-fixture-project/chats/3f2c1a9e-8b4d-4e5f-9a6b-1c2d3e4f5a6b.jsonl";
const ALL: [&str; 5] = [REAL, BASIC, TOOLS, COMPRESSION, PR];

/// Parses a sample and checks what holds for every file: no issues, every line stored
/// exactly once with its own bytes, one session named after the file, chunked reading equal to
/// one pass.
fn sample(file: &str) -> ParseOutput {
    let out = parse("qwen", ROOT, file);
    assert!(out.issues.is_empty(), "{file}: {:?}", out.issues);
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
    assert_eq!(raw.len(), lines.len(), "{file}");
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(raw[&(i as u64 + 1)], vec![*l], "{file}: line {}", i + 1);
    }
    let stem = file.rsplit('/').next().unwrap().trim_end_matches(".jsonl");
    assert!(!out.sessions.is_empty());
    assert!(
        out.sessions
            .iter()
            .all(|s| s.session_id == stem && !s.is_subagent)
    );
    assert!(out.messages.iter().all(|m| m.session_id == stem));
    assert!(out.edits.is_empty());

    let reg = AdapterRegistry::new();
    let a = reg.get("qwen").unwrap();
    let root = more().join(ROOT);
    let path = root.join(file);
    let mut cursor = Cursor::default();
    let mut msgs = Vec::new();
    for _ in 0..1000 {
        let c: Cursor = serde_json::from_str(&serde_json::to_string(&cursor).unwrap()).unwrap();
        let o = a.parse(&root, &path, &c, 1).unwrap();
        msgs.extend(o.messages);
        cursor = o.cursor;
        if o.at_end {
            break;
        }
    }
    assert_eq!(msgs, out.messages, "{file}: chunks");
    assert!(
        a.parse(&root, &path, &cursor, 1 << 20)
            .unwrap()
            .messages
            .is_empty()
    );
    out
}

fn raw_json(m: &ParsedMessage) -> serde_json::Value {
    serde_json::from_slice(m.raw.as_ref().unwrap()).unwrap()
}

/// Lines whose record has this `type` (and `subtype`).
fn typed<'a>(out: &'a ParseOutput, ty: &str, sub: Option<&str>) -> Vec<&'a ParsedMessage> {
    out.messages
        .iter()
        .filter(|m| m.raw.is_some())
        .filter(|m| {
            let v = raw_json(m);
            v["type"] == ty && v.get("subtype").and_then(|s| s.as_str()) == sub
        })
        .collect()
}

/// The assistant records (lines) of a file.
fn assistant_records(out: &ParseOutput) -> usize {
    out.messages
        .iter()
        .filter(|m| m.raw.is_some() && m.role == Role::Assistant)
        .count()
}

/// (call id, name) of the calls, and the call ids with a result.
fn calls_and_pairs(out: &ParseOutput) -> (Vec<(String, String)>, BTreeSet<String>) {
    let calls: Vec<(String, String)> = of_kind(out, MessageKind::ToolCall)
        .iter()
        .map(|m| {
            let c = m.tool_call.as_ref().unwrap();
            (c.call_id.clone().unwrap(), c.name.clone())
        })
        .collect();
    let results: BTreeSet<String> = of_kind(out, MessageKind::ToolResult)
        .iter()
        .filter_map(|m| m.tool_result.as_ref()?.call_id.clone())
        .collect();
    let paired = calls
        .iter()
        .map(|(id, _)| id.clone())
        .filter(|id| results.contains(id))
        .collect();
    (calls, paired)
}

fn error_of(out: &ParseOutput, call: &str) -> bool {
    of_kind(out, MessageKind::ToolResult)
        .iter()
        .find(|m| m.tool_result.as_ref().unwrap().call_id.as_deref() == Some(call))
        .unwrap_or_else(|| panic!("no result for {call}"))
        .tool_result
        .as_ref()
        .unwrap()
        .is_error
}

#[test]
fn qwen_discovers_the_five_sessions() {
    let all = parse_all("qwen", ROOT);
    assert_eq!(all.len(), 5);
    for f in ALL {
        assert!(all.iter().any(|(p, _)| p.ends_with(f)), "{f}");
    }
}

#[test]
fn qwen_real_session() {
    let out = sample(REAL);
    let s = &out.sessions[0];
    assert_eq!(s.project_path.as_deref(), Some("/Users/dev/project"));
    assert_eq!(s.model.as_deref(), Some("review-model"));
    assert_eq!(
        s.title,
        Some((
            TitleSource::FirstPrompt,
            "Exercise shell tool then report completion.".into()
        ))
    );
    assert_eq!(s.started_at, Some(1_789_491_070_852));
    assert!(
        out.messages
            .iter()
            .all(|m| raw_json_of_line(&out, m.line)["version"] == "0.23.4")
    );
    assert_eq!(out.messages.iter().filter(|m| m.raw.is_some()).count(), 8);

    // One prompt (real_user).
    assert_eq!(
        prompt_texts(&out),
        ["Exercise shell tool then report completion."]
    );
    assert_eq!(
        raw_json(of_kind(&out, MessageKind::UserPrompt)[0])["provenance"],
        "real_user"
    );
    assert!(has_word(&out, MessageKind::UserPrompt, "shell"));

    // Native system records: Meta, the telemetry without text.
    assert_eq!(typed(&out, "system", Some("attribution_snapshot")).len(), 1);
    let telemetry = typed(&out, "system", Some("ui_telemetry"));
    assert_eq!(telemetry.len(), 3);
    assert!(
        telemetry
            .iter()
            .all(|m| m.kind == MessageKind::Meta && m.text.is_empty())
    );

    // Two assistant records: one call, one answer (found once, as the answer).
    assert_eq!(assistant_records(&out), 2);
    let (calls, paired) = calls_and_pairs(&out);
    assert_eq!(
        calls,
        [("review-shell".to_owned(), "run_shell_command".to_owned())]
    );
    assert_eq!(paired, BTreeSet::from(["review-shell".to_owned()]));
    assert_eq!(
        of_kind(&out, MessageKind::AssistantText)
            .iter()
            .map(|m| m.text.as_str())
            .collect::<Vec<_>>(),
        ["Review response: cedar-42, maple-77; tool-review-ok."]
    );
    assert_eq!(
        out.messages
            .iter()
            .filter(|m| m.text.contains("cedar-42"))
            .count(),
        1
    );
    assert!(has_word(&out, MessageKind::AssistantText, "cedar-42"));

    // One tool_result record (provenance tool_result), its callId the call's id.
    let results = typed(&out, "tool_result", None);
    assert_eq!(results.len(), 1);
    let r = raw_json(results[0]);
    assert_eq!(r["provenance"], "tool_result");
    assert_eq!(r["toolCallResult"]["callId"], "review-shell");
    assert_eq!(results[0].kind, MessageKind::ToolResult);
    assert!(results[0].text.contains("Output: tool-review-ok"));
    assert!(!error_of(&out, "review-shell"));
    assert_eq!(aggregate_usage(&out.messages).input_tokens, 30);
}

fn raw_json_of_line(out: &ParseOutput, line: u64) -> serde_json::Value {
    raw_json(
        out.messages
            .iter()
            .find(|m| m.line == line && m.raw.is_some())
            .unwrap(),
    )
}

#[test]
fn qwen_basic_session() {
    let out = sample(BASIC);
    assert_eq!(
        prompt_texts(&out),
        ["hey what tools do you have", "read the README"]
    );
    let s = &out.sessions[0];
    assert_eq!(s.model.as_deref(), Some("qwen3-coder-plus"));
    assert_eq!(s.git_branch.as_deref(), Some("main"));
    assert_eq!(s.project_path.as_deref(), Some("/Users/dev/project"));

    // The task notification: a `user` record that is not a prompt.
    let notes = typed(&out, "user", Some("notification"));
    assert_eq!(notes.len(), 1);
    assert_eq!(raw_json(notes[0])["provenance"], "system");
    assert_eq!(
        (notes[0].role, notes[0].kind),
        (Role::User, MessageKind::Meta)
    );
    assert!(notes[0].text.contains("<task-notification>"));
    assert_eq!(notes[0].prompt_number, 2);

    assert_eq!(assistant_records(&out), 3);
    let (calls, paired) = calls_and_pairs(&out);
    assert_eq!(calls, [("call_1".to_owned(), "read_file".to_owned())]);
    assert_eq!(paired.len(), 1);
    assert_eq!(typed(&out, "tool_result", None).len(), 1);
    assert!(has_word(&out, MessageKind::ToolResult, "Hello."));
    assert_eq!(of_kind(&out, MessageKind::Thinking).len(), 2);
    assert!(has_word(
        &out,
        MessageKind::AssistantText,
        "README says hello"
    ));
    let u = aggregate_usage(&out.messages);
    assert_eq!(
        (
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.reasoning_tokens
        ),
        (37_512, 397, 100, 35)
    );
}

#[test]
fn qwen_tools_session() {
    let out = sample(TOOLS);
    assert_eq!(prompt_texts(&out), ["edit calc.py and run the tests"]);
    assert_eq!(assistant_records(&out), 2);
    // Four calls in one record.
    let (calls, paired) = calls_and_pairs(&out);
    let names: Vec<&str> = calls.iter().map(|(_, n)| n.as_str()).collect();
    assert_eq!(
        names,
        ["edit", "run_shell_command", "read_file", "todo_write"]
    );
    let lines: BTreeSet<u64> = of_kind(&out, MessageKind::ToolCall)
        .iter()
        .map(|m| m.line)
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(paired.len(), 4);
    // Four tool_result records, provenance system; the missing file is an error.
    let results = typed(&out, "tool_result", None);
    assert_eq!(results.len(), 4);
    assert!(
        results
            .iter()
            .all(|m| raw_json(m)["provenance"] == "system")
    );
    assert!(error_of(&out, "call_missing"));
    for ok in ["call_edit", "call_shell", "call_todo"] {
        assert!(!error_of(&out, ok), "{ok}");
    }
    assert!(has_word(&out, MessageKind::ToolResult, "File not found"));
    assert!(has_word(&out, MessageKind::AssistantText, "tests pass"));
}

#[test]
fn qwen_compression_session() {
    let out = sample(COMPRESSION);
    assert_eq!(
        prompt_texts(&out),
        [
            "Read bigfile.txt lines 1 to 300, then reply just: LOADED",
            "In one word, what file did you read earlier?"
        ]
    );
    assert_eq!(assistant_records(&out), 2);
    assert!(has_word(&out, MessageKind::AssistantText, "bigfile.txt"));
    // The compression record: a summary, its `<state_snapshot>` never a prompt.
    let comp = typed(&out, "system", Some("chat_compression"));
    assert_eq!(comp.len(), 1);
    assert_eq!(comp[0].kind, MessageKind::CompactionSummary);
    assert!(comp[0].text.contains("<state_snapshot>"));
    assert!(!has_word(&out, MessageKind::UserPrompt, "state_snapshot"));
    // `/compress` is a system record, not a prompt.
    let slash = typed(&out, "system", Some("slash_command"));
    assert_eq!(slash.len(), 1);
    assert_eq!(
        (slash[0].kind, slash[0].text.as_str()),
        (MessageKind::Meta, "/compress")
    );
    assert_eq!(of_kind(&out, MessageKind::UserPrompt)[1].prompt_number, 2);
}

#[test]
fn qwen_pr_fixture_session() {
    let out = sample(PR);
    let s = &out.sessions[0];
    assert_eq!(s.project_path.as_deref(), Some("/tmp/qwen-fixture-project"));
    assert_eq!(s.model.as_deref(), Some("qwen3-coder"));
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some("/tmp/qwen-fixture-project"))
    );
    assert_eq!(raw_json(&out.messages[0])["version"], "0.21.4");
    assert_eq!(
        prompt_texts(&out),
        ["Write a hello world script", "Now run it"]
    );
    assert_eq!(assistant_records(&out), 3);
    let (calls, paired) = calls_and_pairs(&out);
    assert_eq!(
        calls,
        [
            ("call_0001".to_owned(), "write_file".to_owned()),
            ("call_0002".to_owned(), "run_shell_command".to_owned())
        ]
    );
    assert_eq!(paired.len(), 2);
    assert_eq!(typed(&out, "tool_result", None).len(), 2);
    assert!(!error_of(&out, "call_0001"));
    assert!(error_of(&out, "call_0002"));
    assert!(has_word(&out, MessageKind::AssistantText, "hello.sh"));
    assert!(has_word(&out, MessageKind::Thinking, "write_file"));
    let answer = of_kind(&out, MessageKind::AssistantText)
        .into_iter()
        .find(|m| m.text.starts_with("Done."))
        .unwrap();
    assert_eq!(answer.prompt_number, 1);
}

/// Lines that are not what Qwen writes are reported or kept, never a panic; a sub-agent
/// transcript is its parent's sub-agent session, without prompts.
#[test]
fn qwen_odd_lines_and_sub_agents() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let chats = root.join("-p/chats");
    std::fs::create_dir_all(&chats).unwrap();
    let path = chats.join("s1.jsonl");
    std::fs::write(
        &path,
        concat!(
            "not json\n",
            "[1]\n",
            r#"{"type":"assistant","uuid":"a","message":"x"}"#,
            "\n",
            r#"{"type":"user","uuid":"b","provenance":"real_user","message":{"parts":"x"}}"#,
            "\n",
            r#"{"type":"user","uuid":"c","message":{"role":"user","parts":[{"text":"old style prompt"}]}}"#,
            "\n",
            r#"{"type":"tool_result","uuid":"d","toolCallResult":{"callId":"k","status":"cancelled","resultDisplay":{"fileDiff":"--- a"}}}"#,
            "\n",
        ),
    )
    .unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("qwen").unwrap();
    let out = ai_cli_session_collector::parse_file(a, root, &path).unwrap();
    assert_eq!(out.issues.iter().filter(|i| !i.kept).count(), 2);
    assert!(out.issues.iter().any(|i| i.kept && i.line == 3));
    // No `provenance` (older files): a user record without subtype is a prompt.
    assert_eq!(prompt_texts(&out), ["old style prompt"]);
    let r = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].text, "--- a");
    assert_eq!(
        r[0].tool_result
            .as_ref()
            .map(|t| (t.call_id.as_deref(), t.is_error)),
        Some((Some("k"), true))
    );
    assert_eq!(out.sessions[0].session_id, "s1");

    let sub_dir = root.join("-p/subagents/s1");
    std::fs::create_dir_all(&sub_dir).unwrap();
    let sub = sub_dir.join("agent-7.jsonl");
    std::fs::write(
        &sub,
        concat!(
            r#"{"type":"user","uuid":"t","sessionId":"s1","provenance":"real_user","message":{"role":"user","parts":[{"text":"find the bug"}]}}"#,
            "\n",
            r#"{"type":"assistant","uuid":"u","sessionId":"s1","model":"m","message":{"role":"model","parts":[{"text":"found"}]}}"#,
            "\n",
        ),
    )
    .unwrap();
    assert!(a.is_transcript(root, &sub));
    let out = ai_cli_session_collector::parse_file(a, root, &sub).unwrap();
    assert!(prompt_texts(&out).is_empty());
    assert!(
        out.messages
            .iter()
            .all(|m| m.flags.sidechain && m.session_id == "agent-7")
    );
    let s = &out.sessions[0];
    assert!(s.is_subagent);
    assert_eq!(s.parent_session_id.as_deref(), Some("s1"));
    assert!(s.title.is_none() && s.model.is_none());
}
