//! GitHub Copilot CLI (`copilot/`): the values SOURCES.md gives for each sample file.

use std::path::PathBuf;

use ai_cli_session_collector::{
    AdapterRegistry, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
    parse_file,
};

use super::*;

const ROOT: &str = "copilot/home/.copilot/session-state";
const TOOLS: &str = "4ea18a78-3f3c-4f67-a61e-21fab96427be";
const GITAI: &str = "301561f1-558a-43e9-a144-82d3ca12ab62";
const SUB_AGENT: &str = "47a0fd49-8a0b-4efa-afa4-7a2981722969";

fn events(session: &str) -> String {
    format!("{session}/events.jsonl")
}

/// The one session a file describes, its chunks' infos merged as the store would.
fn session(out: &ParseOutput) -> SessionInfo {
    let ids: std::collections::BTreeSet<&str> =
        out.sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids.len(), 1, "one session per file: {ids:?}");
    let mut s = out.sessions[0].clone();
    for o in &out.sessions[1..] {
        s.project_path = s.project_path.take().or(o.project_path.clone());
        s.model = o.model.clone().or(s.model.take());
        s.git_branch = s.git_branch.take().or(o.git_branch.clone());
        s.title = match (s.title.take(), o.title.clone()) {
            (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
            (a, b) => a.or(b),
        };
        s.started_at = s
            .started_at
            .min(o.started_at)
            .or(s.started_at.or(o.started_at));
        s.updated_at = s.updated_at.max(o.updated_at);
    }
    s
}

fn call_ids(ms: &[&ParsedMessage]) -> Vec<String> {
    ms.iter()
        .map(|m| m.tool_call.as_ref().unwrap().call_id.clone().unwrap())
        .collect()
}

#[test]
fn tools_excerpt_sessions_prompts_and_sub_agent() {
    let out = parse("copilot", ROOT, &events(TOOLS));
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let s = session(&out);
    assert_eq!(s.session_id, TOOLS);
    assert!(out.messages.iter().all(|m| m.session_id == TOOLS));
    assert_eq!(
        s.project_path.as_deref(),
        Some("/private/tmp/copilot-tools-exercise")
    );
    assert_eq!(s.model.as_deref(), Some("claude-sonnet-5.5"));
    assert!(!s.is_subagent && s.parent_session_id.is_none());
    // workspace.yaml has no `name`: the first prompt titles the session.
    let (src, title) = s.title.clone().unwrap();
    assert_eq!(src, TitleSource::FirstPrompt);
    assert!(
        title.starts_with("Please use each of the tools in ./tools.txt"),
        "{title}"
    );
    assert_eq!(s.started_at, Some(ms("2026-10-09T13:51:58.059Z")));
    assert_eq!(s.updated_at, Some(ms("2026-10-09T13:53:08.590Z")));
    // The version rides on the session.start record.
    let start = &out.messages[0];
    assert_eq!(
        (start.kind, start.text.as_str()),
        (MessageKind::Meta, "1.0.95-2")
    );

    // Two human prompts, typed text only (not the `<current_datetime>` model copy).
    let prompts = of_kind(&out, MessageKind::UserPrompt);
    assert_eq!(prompts.len(), 2);
    assert!(
        prompts[0]
            .text
            .starts_with("Please use each of the tools in ./tools.txt")
    );
    assert!(
        prompts[1]
            .text
            .starts_with("Continue the demo with the tools not used yet")
    );
    assert_eq!(
        prompts.iter().map(|p| p.prompt_number).collect::<Vec<_>>(),
        [1, 2]
    );
    assert!(
        prompt_texts(&out)
            .iter()
            .all(|t| !t.contains("<current_datetime>"))
    );
    assert!(
        prompts
            .iter()
            .all(|p| p.role == Role::User && !p.flags.sidechain)
    );
    assert!(
        prompts
            .iter()
            .all(|p| p.model.as_deref() == Some("claude-sonnet-5.5"))
    );
    assert!(has_word(&out, MessageKind::UserPrompt, "web_fetch"));

    // The sub-agent's task: a user.message with `source: agent-…` and a top-level agentId.
    let tasks: Vec<&ParsedMessage> = out
        .messages
        .iter()
        .filter(|m| m.role == Role::User && m.kind != MessageKind::UserPrompt)
        .collect();
    assert_eq!(tasks.len(), 1);
    let task = tasks[0];
    assert_eq!(task.kind, MessageKind::Meta);
    assert!(
        task.text
            .starts_with("List the files in /private/tmp/copilot-tools-exercise")
    );
    assert!(task.flags.sidechain);
    assert_eq!(task.agent_id.as_deref(), Some(SUB_AGENT));
    assert_eq!(task.model.as_deref(), Some("gpt-5.6-luna"));
    assert_eq!(task.prompt_number, 1);
    // Every line of the sub-agent (started, model change, task, turn start) is sidechain.
    let side: Vec<&ParsedMessage> = out.messages.iter().filter(|m| m.flags.sidechain).collect();
    assert_eq!(side.len(), 4);
    assert!(
        side.iter()
            .all(|m| m.agent_id.as_deref() == Some(SUB_AGENT))
    );
    assert!(
        side.iter()
            .all(|m| m.model.as_deref() == Some("gpt-5.6-luna"))
    );

    // Lifecycle records, each kept once.
    let types = record_types(&out);
    assert_eq!(types.len(), 24);
    assert_eq!(count(&types, "assistant.message"), 3);
    assert_eq!(count(&types, "session.resume"), 1);
    assert_eq!(count(&types, "assistant.turn_start"), 4);
    assert_eq!(count(&types, "assistant.turn_end"), 3);
    assert_eq!(count(&types, "tool.execution_complete"), 4);
    assert_eq!(count(&types, "user.message"), 3);
    let cwd = Some("/private/tmp/copilot-tools-exercise");
    assert!(out.messages.iter().all(|m| m.cwd.as_deref() == cwd));
    assert_raw_once(&out, &more().join(ROOT).join(events(TOOLS)));
}

#[test]
fn tools_excerpt_answers_tool_calls_and_results() {
    let out = parse("copilot", ROOT, &events(TOOLS));
    // Three assistant.message records: two hold only tool requests, one the final answer.
    let answers = of_kind(&out, MessageKind::AssistantText);
    assert_eq!(answers.len(), 1);
    assert!(answers[0].text.starts_with("Round two is done."));
    assert_eq!(answers[0].model.as_deref(), Some("claude-sonnet-5.5"));
    assert_eq!(answers[0].prompt_number, 2);
    assert!(has_word(&out, MessageKind::AssistantText, "octocat"));

    let calls = of_kind(&out, MessageKind::ToolCall);
    let names: Vec<&str> = calls
        .iter()
        .map(|m| m.tool_call.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "view",
            "view",
            "list_agents",
            "github-mcp-server-search_users",
            "github-mcp-server-get_file_contents",
            "github-mcp-server-list_copilot_spaces",
            "github-mcp-server-search_code",
            "skill",
        ]
    );
    assert_eq!(calls[0].prompt_number, 1);
    assert!(calls[1..].iter().all(|c| c.prompt_number == 2));
    assert_eq!(calls[2].tool_call.as_ref().unwrap().input["scope"], "all");
    assert!(
        calls
            .iter()
            .all(|c| c.role == Role::Assistant && !c.flags.sidechain)
    );

    let results = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(results.len(), 4);
    let ids = call_ids(&calls);
    let paired: Vec<&str> = results
        .iter()
        .map(|r| r.tool_result.as_ref().unwrap().call_id.as_deref().unwrap())
        .collect();
    assert!(
        paired.iter().all(|r| ids.iter().any(|c| c == r)),
        "{paired:?}"
    );
    assert_eq!(
        paired,
        [
            "toolu_01EiPa4ioJK2AGVEGthpe6o2",
            "toolu_01Pj1cGwyEuWP2LJtT3YmqBc",
            "toolu_01KzaKfwdrcPL1jFVvK1Ps6a",
            "toolu_01WK6GxmL2DD6g7VNiknLHn7",
        ]
    );
    // Four requests have no result line in the excerpt.
    assert_eq!(
        ids.iter().filter(|c| !paired.contains(&c.as_str())).count(),
        4
    );
    let errors: Vec<bool> = results
        .iter()
        .map(|r| r.tool_result.as_ref().unwrap().is_error)
        .collect();
    assert_eq!(errors, [false, false, true, false]);
    assert!(
        results[2]
            .text
            .contains("Failed to retrieve your Copilot spaces")
    );
    assert!(results[0].text.starts_with("bash\nread_bash\n"));
    assert!(results[1].text.contains("\"login\":\"octocat\""));
    assert!(results.iter().all(|r| r.role == Role::Tool));
}

#[test]
fn git_ai_older_shapes() {
    let out = parse("copilot", ROOT, &events(GITAI));
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let s = session(&out);
    assert_eq!(s.session_id, GITAI);
    assert_eq!(s.project_path.as_deref(), Some("/Users/test/project"));
    assert_eq!(s.git_branch.as_deref(), Some("master"));
    assert_eq!(s.model.as_deref(), Some("gpt-4.1"));
    assert_eq!(
        s.title,
        Some((
            TitleSource::FirstPrompt,
            "create a hello world file".to_owned()
        ))
    );
    assert_eq!(s.started_at, Some(ms("2026-05-12T00:21:05.216Z")));
    assert_eq!(s.updated_at, Some(ms("2026-05-12T00:21:12.500Z")));
    assert_eq!(out.messages[0].text, "1.0.45");
    assert_eq!(record_types(&out).len(), 6);
    assert_eq!(prompt_texts(&out), ["create a hello world file"]);
    let answers = of_kind(&out, MessageKind::AssistantText);
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].text, "I'll create a hello world file for you.");
    assert!(has_word(&out, MessageKind::AssistantText, "hello world"));
    assert!(has_word(&out, MessageKind::UserPrompt, "hello"));
    // `arguments` was a JSON string: it is stored as the object it encodes.
    let calls = of_kind(&out, MessageKind::ToolCall);
    assert_eq!(calls.len(), 1);
    let call = calls[0].tool_call.as_ref().unwrap();
    assert_eq!(call.name, "create");
    assert_eq!(call.call_id.as_deref(), Some("tool-1"));
    assert_eq!(call.input["path"], "/Users/test/project/hello.py");
    assert_eq!(call.input["file_text"], "print('hello world')\n");
    let results = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(results.len(), 1);
    let r = results[0].tool_result.as_ref().unwrap();
    assert_eq!((r.call_id.as_deref(), r.is_error), (Some("tool-1"), false));
    assert_eq!(results[0].text, "Created file /Users/test/project/hello.py");
    // tool.execution_start repeats the request: kept, marked as a duplicate.
    let dups: Vec<&ParsedMessage> = out.messages.iter().filter(|m| m.flags.duplicate).collect();
    assert_eq!(dups.len(), 1);
    assert_eq!(dups[0].kind, MessageKind::Meta);
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some("/Users/test/project"))
    );
    assert!(
        out.messages
            .iter()
            .all(|m| m.git_branch.as_deref() == Some("master"))
    );
    assert_raw_once(&out, &more().join(ROOT).join(events(GITAI)));
}

#[test]
fn byte_sized_chunks_give_the_same_messages() {
    let root = more().join(ROOT);
    for s in [TOOLS, GITAI] {
        let path = root.join(events(s));
        let whole = parse("copilot", ROOT, &events(s));
        let small = chunked("copilot", &root, &path, 1);
        assert_eq!(small.messages, whole.messages, "{s}");
        assert_eq!(session(&small), session(&whole), "{s}");
    }
}

#[test]
fn roots_layouts_and_the_workspace_file() {
    let reg = AdapterRegistry::new();
    let a = reg.get("copilot").unwrap();
    assert_eq!(
        a.default_roots(&env(&[])),
        [PathBuf::from("/home/u/.copilot/session-state")]
    );
    assert_eq!(
        a.default_roots(&env(&[("COPILOT_HOME", "/data/cp")])),
        [PathBuf::from("/data/cp/session-state")]
    );
    assert_eq!(
        a.default_roots(&env(&[("XDG_CONFIG_HOME", "/home/u/.config")])),
        [
            PathBuf::from("/home/u/.copilot/session-state"),
            PathBuf::from("/home/u/.config/.copilot/session-state"),
        ]
    );

    let root = more().join(ROOT);
    let found = a.discover(&root);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found.iter().all(|p| p.ends_with("events.jsonl")));
    let ws = root.join(TOOLS).join("workspace.yaml");
    assert!(!a.is_transcript(&root, &ws));
    assert!(
        a.is_transcript(&root, &root.join("0a1b.jsonl")),
        "flat pre-1.0.11 layout"
    );
    assert!(!a.is_transcript(&root, &root.join(TOOLS).join("files/x.jsonl")));
    assert_eq!(a.source_of(&root, &ws), Some(root.join(events(TOOLS))));
}

#[test]
fn a_named_workspace_titles_the_session() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(TOOLS);
    std::fs::create_dir_all(&dir).unwrap();
    let src = more().join(ROOT).join(TOOLS);
    std::fs::copy(src.join("events.jsonl"), dir.join("events.jsonl")).unwrap();
    let yaml = std::fs::read_to_string(src.join("workspace.yaml")).unwrap();
    std::fs::write(
        dir.join("workspace.yaml"),
        format!("{yaml}name: \"Tool tour\"\nuser_named: true\n"),
    )
    .unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("copilot").unwrap();
    let out = parse_file(a, tmp.path(), &dir.join("events.jsonl")).unwrap();
    assert_eq!(
        session(&out).title,
        Some((TitleSource::Custom, "Tool tour".to_owned()))
    );
}

#[test]
fn garbage_lines_are_issues_not_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("s1");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("events.jsonl");
    std::fs::write(
        &file,
        b"not json\n[1,2]\n{\"type\":\"user.message\",\"data\":{\"content\":\"hi\"},\"id\":\"u1\"}\n\xff\xfe\n",
    )
    .unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("copilot").unwrap();
    let out = parse_file(a, tmp.path(), &file).unwrap();
    assert_eq!(out.issues.len(), 3, "{:?}", out.issues);
    assert_eq!(prompt_texts(&out), ["hi"]);
    // Without a session.start the folder names the session.
    assert_eq!(out.messages[0].session_id, "s1");
}

#[test]
fn damaged_transcripts_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    for s in [TOOLS, GITAI] {
        let dir = tmp.path().join(s);
        std::fs::create_dir_all(&dir).unwrap();
        let src = std::fs::read(more().join(ROOT).join(events(s))).unwrap();
        let yaml = std::fs::read(more().join(ROOT).join(TOOLS).join("workspace.yaml")).unwrap();
        for (i, (bad, bad_yaml)) in mutations(&src, 120)
            .into_iter()
            .zip(mutations(&yaml, 120).into_iter().cycle())
            .enumerate()
        {
            std::fs::write(
                dir.join("workspace.yaml"),
                if i % 3 == 0 { &bad_yaml } else { &yaml },
            )
            .unwrap();
            survives("copilot", tmp.path(), &dir.join("events.jsonl"), &bad);
        }
    }
}

/// A Copilot CLI session's `session.shutdown` record holds its token totals (cumulative across
/// resumes); its messages carry only output tokens. The session's usage is the totals, each
/// token counted once: a real session whose shutdown said input 25, cache read 68,028, cache
/// write 30,663 and output 747 was stored with output 747 and nothing else.
#[test]
fn copilot_session_totals_come_from_the_shutdown_record() {
    let dir = tempfile::tempdir().unwrap();
    let sid = "5b0c3a1e-0000-4000-8000-00000000c0de";
    let folder = dir.path().join(sid);
    std::fs::create_dir_all(&folder).unwrap();
    let rec = |ty: &str, data: serde_json::Value, n: u32| {
        serde_json::json!({"type": ty, "data": data, "id": format!("e{n}"),
            "timestamp": format!("2026-10-09T13:5{n}:00.000Z"), "parentId": null})
        .to_string()
    };
    let details = |i: u64, cr: u64, cw: u64, o: u64| {
        serde_json::json!({"tokenDetails": {
            "input": {"tokenCount": i}, "cache_read": {"tokenCount": cr},
            "cache_write": {"tokenCount": cw}, "output": {"tokenCount": o}},
            "totalPremiumRequests": 1})
    };
    let mut lines = vec![
        rec(
            "session.start",
            serde_json::json!({"sessionId": sid, "copilotVersion": "1.0.95-2",
            "context": {"cwd": "/tmp/p"}}),
            0,
        ),
        rec(
            "session.model_change",
            serde_json::json!({"newModel": "claude-sonnet-4.5"}),
            1,
        ),
        rec(
            "user.message",
            serde_json::json!({"content": "list the files"}),
            2,
        ),
        rec(
            "assistant.message",
            serde_json::json!({"messageId": "a1", "content": "Looking.",
            "outputTokens": 700}),
            3,
        ),
        rec(
            "assistant.message",
            serde_json::json!({"messageId": "a2", "content": "Done.",
            "outputTokens": 47}),
            4,
        ),
        rec("session.shutdown", details(25, 68_028, 30_663, 747), 5),
    ];
    let path = folder.join("events.jsonl");
    let write = |lines: &[String]| std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    write(&lines);
    let reg = AdapterRegistry::new();
    let a = reg.get("copilot").unwrap();
    let out = parse_file(a, dir.path(), &path).unwrap();
    let u = ai_cli_session_collector::aggregate_usage(&out.messages);
    assert_eq!(
        (
            u.input_tokens,
            u.cache_read_tokens,
            u.cache_creation_tokens,
            u.output_tokens
        ),
        (25, 68_028, 30_663, 747)
    );
    let shut = out
        .messages
        .iter()
        .find(|m| {
            m.usage_key
                .as_deref()
                .is_some_and(|k| k.starts_with("shutdown:"))
        })
        .expect("the shutdown record carries the totals");
    assert_eq!(shut.model.as_deref(), Some("claude-sonnet-4.5"));
    assert_eq!(
        shut.usage.unwrap().output_tokens,
        0,
        "the messages carried the output"
    );

    // Resumed: a second shutdown's totals include the first run's; read at once and read on
    // from where the first pass stopped, the session holds the second totals.
    lines.push(rec(
        "session.resume",
        serde_json::json!({"context": {"cwd": "/tmp/p"}}),
        6,
    ));
    lines.push(rec(
        "assistant.message",
        serde_json::json!({"messageId": "a3", "content": "Again.",
        "outputTokens": 53}),
        7,
    ));
    lines.push(rec("session.shutdown", details(40, 90_000, 31_000, 800), 8));
    write(&lines);
    let all = parse_file(a, dir.path(), &path).unwrap();
    let u = ai_cli_session_collector::aggregate_usage(&all.messages);
    assert_eq!(
        (
            u.input_tokens,
            u.cache_read_tokens,
            u.cache_creation_tokens,
            u.output_tokens
        ),
        (40, 90_000, 31_000, 800)
    );
    let more = a.parse(dir.path(), &path, &out.cursor, 4 << 20).unwrap();
    assert!(!more.messages.is_empty());
    let both: Vec<_> = out.messages.iter().chain(&more.messages).cloned().collect();
    assert_eq!(ai_cli_session_collector::aggregate_usage(&both), u);
}
