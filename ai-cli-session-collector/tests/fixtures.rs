//! Every fixture in `../shared/fixtures` parses, with the counts SOURCES.md states.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ai_cli_session_collector::{
    AdapterRegistry, Cursor, Edit, MessageKind, ParseOutput, ParsedMessage, TitleSource,
    aggregate_usage, parse_file,
};

fn fixtures() -> PathBuf {
    std::env::var_os("MEMEX_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
        PathBuf::from,
    )
}

fn parse(agent: &str, root: &str, file: &str) -> ParseOutput {
    let reg = AdapterRegistry::new();
    let a = reg.get(agent).unwrap();
    let root = fixtures().join(root);
    let path = root.join(file);
    assert!(path.exists(), "missing fixture {}", path.display());
    parse_file(a, &root, &path).unwrap()
}

/// Distinct prompts: (message id → prompt number).
fn prompts(out: &ParseOutput) -> BTreeMap<String, u32> {
    out.messages
        .iter()
        .filter(|m| m.kind == MessageKind::UserPrompt)
        .map(|m| (m.message_id.clone(), m.prompt_number))
        .collect()
}

fn by_id<'a>(out: &'a ParseOutput, id: &str) -> &'a ParsedMessage {
    out.messages
        .iter()
        .rev()
        .find(|m| m.message_id == id)
        .unwrap_or_else(|| panic!("no message {id}"))
}

/// Tool calls whose call id has a result in the same output.
fn tool_pairs(out: &ParseOutput) -> usize {
    let results: BTreeSet<&str> = out
        .messages
        .iter()
        .filter_map(|m| m.tool_result.as_ref()?.call_id.as_deref())
        .collect();
    out.messages
        .iter()
        .filter_map(|m| m.tool_call.as_ref()?.call_id.as_deref())
        .collect::<BTreeSet<_>>()
        .iter()
        .filter(|c| results.contains(*c))
        .count()
}

/// Lines that are non-blank and decode as JSON: each must be stored (carry raw) exactly once.
fn decodable_lines(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut n = bytes[..complete]
        .split(|&b| b == b'\n')
        .filter(|l| {
            !l.trim_ascii().is_empty()
                && ai_cli_session_collector::reader::decode_json(l)
                    .is_ok_and(|d| d.value.is_object())
        })
        .count();
    let tail = bytes[complete..].trim_ascii();
    if !tail.is_empty() && serde_json::from_slice::<serde_json::Value>(tail).is_ok() {
        n += 1;
    }
    n
}

#[test]
fn every_fixture_parses_with_the_documented_prompt_counts() {
    // (agent, root, file, prompts) straight from SOURCES.md.
    let table: &[(&str, &str, &str, u32)] = &[
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-claude-code-log-sample/07f2e15c-a38b-454b-9148-60edc06de401.jsonl",
            1,
        ),
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-claude-code-log-sample/71c9afe9-d9cc-4583-86b3-e62ba682b83a.jsonl",
            1,
        ),
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-claude-code-log-sample/4e27c414-a885-46a0-b5c8-d58e1417377d.jsonl",
            0,
        ),
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-danieldemmel-me-next/4379d1bf-ccb1-414e-a856-9791b73f3af2.jsonl",
            1,
        ),
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-danieldemmel-me-next/3680252d-d4e3-4416-bddd-8f5b5b4fdb7f.jsonl",
            0,
        ),
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-danieldemmel-me-next/5ed31c36-bca8-40fd-8d24-f1a1f0af7901.jsonl",
            1,
        ),
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-danieldemmel-me-next/agent-c3d572ee.jsonl",
            0,
        ),
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-danieldemmel-me-next/agent-c63fe96c.jsonl",
            0,
        ),
        (
            "claude",
            "claude/projects",
            "-Users-dain-workspace-JSSoundRecorder/2c5941bd-b9de-41d6-9414-221d175776f7.jsonl",
            0,
        ),
        (
            "claude",
            "claude/projects",
            "-src-experiments-claude_p/29ccd257-68b1-427f-ae5f-6524b7cb6f20.jsonl",
            1,
        ),
        (
            "claude",
            "claude/projects",
            "-src-experiments-claude_p/29ccd257-68b1-427f-ae5f-6524b7cb6f20/subagents/agent-a2271d1.jsonl",
            0,
        ),
        (
            "claude",
            "claude/projects",
            "-experiments-ideas/03eb5929-52b3-4b13-ada3-b93ae35806b8.jsonl",
            7,
        ),
        (
            "claude",
            "claude/projects",
            "-experiments-worktrees/ef958aa1-0e93-49f0-bb71-150f63befcd1.jsonl",
            2,
        ),
        (
            "claude",
            "claude/projects",
            "-experiments-worktrees/ef958aa1-0e93-49f0-bb71-150f63befcd1/subagents/agent-a36efb2a1231c41e2.jsonl",
            0,
        ),
        (
            "claude",
            "claude/misc",
            "claude-code-log_sidechain_v1.0.35.jsonl",
            0,
        ),
        (
            "claude",
            "claude/misc",
            "git-ai_example-claude-code_v1.0.111.jsonl",
            1,
        ),
        (
            "claude",
            "claude/misc",
            "git-ai_claude-code-with-thinking_v2.0.69.jsonl",
            1,
        ),
        (
            "claude",
            "claude/misc",
            "agent-sessions_schema-coverage_small.jsonl",
            0,
        ),
        (
            "claude",
            "claude/handwritten/projects",
            "-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl",
            4,
        ),
        (
            "claude",
            "claude/handwritten/projects",
            "-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c/subagents/agent-a1b2c3d4e5f60718.jsonl",
            0,
        ),
        (
            "claude",
            "claude/handwritten/projects",
            "-home-dev-demo-app/0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b.jsonl",
            1,
        ),
        (
            "claude",
            "claude/handwritten/projects",
            "-home-dev-demo-app/5c4b3a29-1807-4f6e-9d5c-4b3a29180706.jsonl",
            1,
        ),
        (
            "codex",
            "codex/misc",
            "agent-history_codex_session_with_compaction.jsonl",
            4,
        ),
        (
            "codex",
            "codex/misc",
            "agent-history_codex_with_escalation.jsonl",
            5,
        ),
        (
            "codex",
            "codex/misc",
            "git-ai_codex-session-simple.jsonl",
            1,
        ),
        (
            "codex",
            "codex/misc",
            "agent-sessions_schema-coverage_small.jsonl",
            1,
        ),
        (
            "codex",
            "codex/handwritten/sessions",
            "2025/08/20/rollout-2025-08-20T15-20-47-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl",
            1,
        ),
        (
            "codex",
            "codex/handwritten/sessions",
            "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl",
            4,
        ),
        (
            "codex",
            "codex/handwritten/sessions",
            "2026/06/05/rollout-2026-06-05T10-45-02-019e9a55-0b1c-7e2d-8f3a-4b5c6d7e8f90.jsonl",
            0,
        ),
        (
            "codex",
            "codex/handwritten/sessions",
            "2026/06/05/rollout-2026-06-05T14-00-00-019e9b02-7a8b-7c9d-8e0f-1a2b3c4d5e6f.jsonl",
            1,
        ),
        (
            "gemini",
            "gemini/misc",
            "git-ai_gemini-session-simple_legacy.json",
            1,
        ),
        (
            "gemini",
            "gemini/misc",
            "agent-sessions_jsonl_v040.jsonl",
            1,
        ),
        (
            "gemini",
            "gemini/misc",
            "agent-history_gemini_golden_legacy.json",
            2,
        ),
        (
            "gemini",
            "gemini/handwritten/gemini-home/tmp",
            "demo-app/chats/session-2026-06-10T07-15-3f2a9c1b.jsonl",
            4,
        ),
        (
            "gemini",
            "gemini/handwritten/gemini-home/tmp",
            "demo-app/chats/3f2a9c1b-8d7e-4c6b-a5f4-e3d2c1b0a9f8/9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b.jsonl",
            0,
        ),
        (
            "gemini",
            "gemini/handwritten/gemini-home/tmp",
            "254cb6c43af8df29db159b576f51396662bd28293277c6acd5b51d78fcb88194/chats/session-2025-11-02T14-05-7d3c2a10.json",
            2,
        ),
    ];
    for &(agent, root, file, want) in table {
        let out = parse(agent, root, file);
        let p = prompts(&out);
        let numbers: BTreeSet<u32> = p.values().copied().collect();
        assert_eq!(p.len() as u32, want, "{file}: prompts {p:?}");
        assert_eq!(numbers, (1..=want).collect(), "{file}: numbering");
        let max = out
            .messages
            .iter()
            .map(|m| m.prompt_number)
            .max()
            .unwrap_or(0);
        assert_eq!(max, want, "{file}: highest prompt_number");
        // Lossless: every decodable line of a JSONL file is stored once, raw bytes and all.
        if file.ends_with(".jsonl") {
            let raws = out.messages.iter().filter(|m| m.raw.is_some()).count();
            let skipped_objects = out
                .issues
                .iter()
                .filter(|i| !i.kept && i.reason.contains("record has"))
                .count();
            assert_eq!(
                raws + skipped_objects,
                decodable_lines(&fixtures().join(root).join(file)),
                "{file}: lines stored"
            );
        }
        assert!(
            out.messages
                .iter()
                .all(|m| m.agent == agent && !m.session_id.is_empty()),
            "{file}"
        );
    }
}

#[test]
fn claude_handwritten_session_follows_sources_md() {
    let out = parse(
        "claude",
        "claude/handwritten/projects",
        "-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl",
    );
    let p = prompts(&out);
    let want: BTreeMap<String, u32> = [("u-0001", 1), ("u-0007", 2), ("u-0008", 3), ("u-0011", 4)]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    assert_eq!(p, want);
    for id in [
        "u-0002", "u-0003", "u-0009", "u-0004", "u-0005", "u-0006", "u-0010", "cs-0001",
    ] {
        assert_ne!(by_id(&out, id).kind, MessageKind::UserPrompt, "{id}");
    }
    assert_eq!(by_id(&out, "cs-0001").kind, MessageKind::CompactionSummary);
    // Tool pairs, the failed Bash and the rejected Edit.
    assert_eq!(tool_pairs(&out), 3);
    let bash = by_id(&out, "u-0002");
    assert_eq!(bash.kind, MessageKind::ToolResult);
    assert!(bash.tool_result.as_ref().unwrap().is_error);
    assert_eq!(
        bash.tool_result.as_ref().unwrap().call_id.as_deref(),
        Some("toolu_01DemoBash")
    );
    assert!(
        by_id(&out, "u-0009")
            .text
            .starts_with("The user doesn't want to proceed")
    );
    // msg_01DemoA is on three lines: its usage counts once, with the final output_tokens.
    let demo_a: Vec<&ParsedMessage> = out
        .messages
        .iter()
        .filter(|m| m.usage_key.as_deref() == Some("msg_01DemoA"))
        .collect();
    assert_eq!(demo_a.len(), 3);
    assert_eq!(aggregate_usage(demo_a.iter().copied()).output_tokens, 88);
    // The synthetic API error carries no usage and no model.
    let err = by_id(&out, "a-0008");
    assert!(err.usage.is_none() && err.model.is_none());
    let s = out.sessions.last().unwrap();
    assert_eq!(s.session_id, "7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c");
    assert_eq!(
        s.title,
        Some((
            TitleSource::Generated,
            "Fix timezone-dependent date tests".into()
        ))
    );
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(s.git_branch.as_deref(), Some("main"));
    assert_eq!(s.model.as_deref(), Some("claude-opus-4-7"));
    // The sub-agent in `subagents/` belongs to the parent session.
    let sub = parse(
        "claude",
        "claude/handwritten/projects",
        "-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c/subagents/agent-a1b2c3d4e5f60718.jsonl",
    );
    assert!(sub.messages.iter().all(|m| m.session_id == s.session_id
        && m.flags.sidechain
        && m.agent_id.as_deref() == Some("a1b2c3d4e5f60718")));
    assert_eq!(tool_pairs(&sub), 1);
    assert_eq!(by_id(&sub, "sa-u2").kind, MessageKind::ToolResult);
    assert_eq!(
        sub.sessions[0].model, None,
        "a sub-agent never sets the parent's model"
    );
    assert!(
        s.own_file && !sub.sessions[0].own_file,
        "only the session's own file names its source"
    );
}

#[test]
fn a_claude_transcript_copied_under_another_name_is_not_the_sessions_own() {
    let sid = "7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c";
    let src = fixtures().join(format!(
        "claude/handwritten/projects/-home-dev-demo-app/{sid}.jsonl"
    ));
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("-home-dev-demo-app");
    std::fs::create_dir_all(&project).unwrap();
    let reg = AdapterRegistry::new();
    let claude = reg.get("claude").unwrap();
    let own_file = |name: &str| {
        let path = project.join(name);
        std::fs::copy(&src, &path).unwrap();
        let out = parse_file(claude, dir.path(), &path).unwrap();
        let s = out.sessions.last().unwrap();
        assert_eq!(s.session_id, sid, "{name}: the lines' session");
        assert!(!out.messages.is_empty());
        s.own_file
    };
    assert!(own_file(&format!("{sid}.jsonl")));
    // A copy the user made: its lines name the session, its name does not.
    assert!(!own_file("backup.jsonl"));
    assert!(!own_file(&format!("{sid} (1).jsonl")));
}

#[test]
fn claude_sub_agent_layouts_attach_to_their_parent() {
    // 2.0: agent-<id>.jsonl beside the session, linked by the lines' sessionId.
    let warm = parse(
        "claude",
        "claude/projects",
        "-Users-dain-workspace-danieldemmel-me-next/agent-c3d572ee.jsonl",
    );
    assert!(
        warm.messages
            .iter()
            .all(|m| m.session_id == "5ed31c36-bca8-40fd-8d24-f1a1f0af7901"
                && m.flags.sidechain
                && m.agent_id.as_deref() == Some("c3d572ee"))
    );
    // 2.1: <session>/subagents/agent-<id>.jsonl.
    let sub = parse(
        "claude",
        "claude/projects",
        "-src-experiments-claude_p/29ccd257-68b1-427f-ae5f-6524b7cb6f20/subagents/agent-a2271d1.jsonl",
    );
    assert_eq!(sub.messages.iter().filter(|m| m.raw.is_some()).count(), 59);
    assert!(
        sub.messages
            .iter()
            .all(|m| m.session_id == "29ccd257-68b1-427f-ae5f-6524b7cb6f20")
    );
    // ≤1.0: inline sidechain lines in the session file, in the talk that spawned them.
    let inline = parse(
        "claude",
        "claude/misc",
        "claude-code-log_sidechain_v1.0.35.jsonl",
    );
    assert!(inline.messages.iter().any(|m| m.flags.sidechain));
    assert!(inline.messages.iter().any(|m| !m.flags.sidechain));
}

#[test]
fn claude_usage_is_counted_once_per_api_message() {
    let out = parse(
        "claude",
        "claude/misc",
        "git-ai_example-claude-code_v1.0.111.jsonl",
    );
    let keys: BTreeSet<&str> = out
        .messages
        .iter()
        .filter_map(|m| m.usage_key.as_deref())
        .collect();
    let lines_with_usage = out.messages.iter().filter(|m| m.usage.is_some()).count();
    assert!(
        lines_with_usage > keys.len(),
        "the fixture repeats usage on several lines"
    );
    let naive: u64 = out
        .messages
        .iter()
        .filter_map(|m| m.usage)
        .map(|u| u.output_tokens)
        .sum();
    assert!(aggregate_usage(&out.messages).output_tokens < naive);
}

#[test]
fn claude_bad_input_is_reported_and_the_rest_parsed() {
    let out = parse(
        "claude",
        "claude/handwritten/projects",
        "-home-dev-demo-app/5c4b3a29-1807-4f6e-9d5c-4b3a29180706.jsonl",
    );
    let issues: Vec<(u64, bool)> = out.issues.iter().map(|i| (i.line, i.kept)).collect();
    // Line 2 (invalid UTF-8) is decoded lossily and kept; 3 (wrong type) and 4 (`[]`) skipped.
    assert_eq!(issues, vec![(2, true), (3, false), (4, false)]);
    assert!(out.issues[1].reason.contains("message"));
    assert!(by_id(&out, "b-0002").text.contains('\u{fffd}'));
    assert_eq!(prompts(&out).len(), 1);
    assert!(out.messages.iter().any(|m| m.kind == MessageKind::AssistantText
        && m.text.starts_with("The log contains")));
    // The stored raw bytes are the original ones, invalid UTF-8 included.
    assert!(by_id(&out, "b-0002").raw.as_ref().unwrap().contains(&0xe9));
}

#[test]
fn claude_lone_surrogates_and_partial_tail() {
    let out = parse(
        "claude",
        "claude/handwritten/projects",
        "-home-dev-demo-app/0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b.jsonl",
    );
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(out.messages.len(), 3);
    assert!(out.pending_tail);
    assert!(by_id(&out, "e-0002").text.ends_with('\u{fffd}'));
    assert!(!by_id(&out, "e-0003").text.is_ascii());
}

#[test]
fn codex_prompts_forks_subagents_usage_and_rollback() {
    let root = "codex/handwritten/sessions";
    let out = parse(
        root.split('/').next().unwrap(),
        root,
        "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl",
    );
    let texts: Vec<String> = out
        .messages
        .iter()
        .filter(|m| m.kind == MessageKind::UserPrompt)
        .map(|m| m.text.clone())
        .collect();
    assert_eq!(texts[0], "Fix the failing date test");
    assert!(texts[1].contains("why is the header date cut off here?"));
    assert_eq!(texts[2], "Add a regression test for ISO timestamps");
    assert_eq!(texts[3], "Check whether Node 24 changed Date.toISOString");
    // Cumulative token counts: the final total, not a sum.
    let u = aggregate_usage(&out.messages);
    assert_eq!(
        (
            u.input_tokens,
            u.cache_read_tokens,
            u.output_tokens,
            u.reasoning_tokens
        ),
        (101500, 93000, 1040, 420)
    );
    assert!(matches!(
        out.edits[..],
        [Edit::DeactivateTalks {
            from_prompt: 2,
            to_prompt: 2,
            ..
        }]
    ));
    let s = out.sessions.last().unwrap();
    assert_eq!(
        (s.model.as_deref(), s.git_branch.as_deref()),
        (Some("gpt-5.5"), Some("fix/dates"))
    );
    assert!(
        out.messages
            .iter()
            .any(|m| m.kind == MessageKind::CompactionSummary || m.text.is_empty())
    );
    // The echo of every prompt is kept, flagged as a duplicate, never a second prompt.
    assert_eq!(
        out.messages
            .iter()
            .filter(|m| m.flags.duplicate && m.text == "Fix the failing date test")
            .count(),
        1
    );

    let fork = parse(
        "codex",
        root,
        "2026/06/05/rollout-2026-06-05T14-00-00-019e9b02-7a8b-7c9d-8e0f-1a2b3c4d5e6f.jsonl",
    );
    assert!(
        fork.messages
            .iter()
            .all(|m| m.session_id == "019e9b02-7a8b-7c9d-8e0f-1a2b3c4d5e6f")
    );
    assert!(
        fork.messages
            .iter()
            .any(|m| m.flags.inherited && m.text == "Fix the failing date test")
    );
    assert_eq!(prompts(&fork).len(), 1);
    assert!(fork.pending_tail);
    let fs = fork.sessions.last().unwrap();
    assert_eq!(
        fs.parent_session_id.as_deref(),
        Some("019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f")
    );

    let sub = parse(
        "codex",
        root,
        "2026/06/05/rollout-2026-06-05T10-45-02-019e9a55-0b1c-7e2d-8f3a-4b5c6d7e8f90.jsonl",
    );
    let ss = sub.sessions.last().unwrap();
    assert!(ss.is_subagent);
    assert_eq!(
        ss.parent_session_id.as_deref(),
        Some("019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f")
    );

    let legacy = parse(
        "codex",
        root,
        "2025/08/20/rollout-2025-08-20T15-20-47-5973b6c0-94b8-487b-a530-2aeb6098ae0e.jsonl",
    );
    let ls = legacy.sessions.last().unwrap();
    assert_eq!(ls.session_id, "5973b6c0-94b8-487b-a530-2aeb6098ae0e");
    assert_eq!(ls.project_path.as_deref(), Some("/home/dev/old-proj"));
    assert_eq!(ls.git_branch.as_deref(), Some("main"));
    let result = legacy
        .messages
        .iter()
        .find(|m| m.kind == MessageKind::ToolResult)
        .unwrap();
    assert_eq!(result.text, "main.py\nutil.py\n");
    assert_eq!(tool_pairs(&legacy), 1);
}

#[test]
fn codex_reads_zstd_and_skips_it_when_the_plain_file_exists() {
    let src = fixtures().join("codex/handwritten/sessions/2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let day = dir.path().join("2026/06/05");
    std::fs::create_dir_all(&day).unwrap();
    let zst =
        day.join("rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl.zst");
    std::fs::write(
        &zst,
        zstd::encode_all(&std::fs::read(&src).unwrap()[..], 3).unwrap(),
    )
    .unwrap();
    let reg = AdapterRegistry::new();
    let codex = reg.get("codex").unwrap();
    assert_eq!(codex.discover(dir.path()), vec![zst.clone()]);
    let z = parse_file(codex, dir.path(), &zst).unwrap();
    assert_eq!(prompts(&z).len(), 4);
    std::fs::copy(&src, zst.with_extension("")).unwrap();
    assert_eq!(codex.discover(dir.path()), vec![zst.with_extension("")]);
    let plain = parse_file(codex, dir.path(), &zst.with_extension("")).unwrap();
    let ids = |o: &ParseOutput| {
        o.messages
            .iter()
            .map(|m| m.message_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(&z),
        ids(&plain),
        "same ids whichever form the rollout has"
    );
}

#[test]
fn gemini_upserts_rewinds_checkpoints_and_projects() {
    let root = "gemini/handwritten/gemini-home/tmp";
    let out = parse(
        "gemini",
        root,
        "demo-app/chats/session-2026-06-10T07-15-3f2a9c1b.jsonl",
    );
    let p: BTreeMap<u32, String> = out
        .messages
        .iter()
        .filter(|m| m.kind == MessageKind::UserPrompt)
        .map(|m| (m.prompt_number, m.text.clone()))
        .collect();
    assert_eq!(p[&1], "Explain @src/date.ts");
    assert_eq!(p[&2], "Rewrite it to keep the time too");
    assert_eq!(p[&3], "Use Intl.DateTimeFormat with timeZone UTC instead");
    assert_eq!(p[&4], "Run the tests");
    // `$rewindTo` removed prompt 2 and what followed; the checkpoint dropped earlier turns.
    let deactivated: BTreeSet<&str> = out
        .edits
        .iter()
        .flat_map(|e| match e {
            Edit::Deactivate { message_ids, .. } => {
                message_ids.iter().map(String::as_str).collect()
            }
            _ => vec![],
        })
        .collect();
    assert!(deactivated.contains("e6f8a0b2-5c7d-4e9f-b13a-4c6d8e0f2a3b"));
    assert!(deactivated.contains("6b1f0c2e-1d3a-4e5b-9c7d-8e9f0a1b2c3d"));
    assert!(
        !deactivated.contains("1b2c3d4e-8f9a-4b1c-a2d3-7e8f9a0b1c2d"),
        "prompt 3 survives"
    );
    // The last copy of a re-written message wins: the answer of prompt 3 has its tokens.
    let answer = by_id(&out, "2c3d4e5f-9a0b-4c2d-b3e4-8f9a0b1c2d3e");
    let u = answer.usage.unwrap();
    assert_eq!(
        (
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.reasoning_tokens
        ),
        (9702, 52, 9100, 60)
    );
    // The functionResponse-only user message is a tool result, not a prompt.
    assert_eq!(
        by_id(&out, "c4d6e8f0-3a5b-4c7d-9e1f-2a4b6c8d0e1f").kind,
        MessageKind::Meta
    );
    let s = out.sessions.last().unwrap();
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(
        s.title,
        Some((TitleSource::Generated, "Fix the ISO date formatter".into()))
    );

    let sub = parse(
        "gemini",
        root,
        "demo-app/chats/3f2a9c1b-8d7e-4c6b-a5f4-e3d2c1b0a9f8/9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b.jsonl",
    );
    let ss = sub.sessions.last().unwrap();
    assert!(ss.is_subagent);
    assert_eq!(
        ss.parent_session_id.as_deref(),
        Some("3f2a9c1b-8d7e-4c6b-a5f4-e3d2c1b0a9f8")
    );

    let legacy = parse(
        "gemini",
        root,
        "254cb6c43af8df29db159b576f51396662bd28293277c6acd5b51d78fcb88194/chats/session-2025-11-02T14-05-7d3c2a10.json",
    );
    let ls = legacy.sessions.last().unwrap();
    assert_eq!(
        ls.project_path, None,
        "a hash folder names no path by itself"
    );
    assert_eq!(
        ls.project_hash.as_deref(),
        Some("254cb6c43af8df29db159b576f51396662bd28293277c6acd5b51d78fcb88194")
    );
    assert_eq!(tool_pairs(&legacy), 1);

    let misc = parse(
        "gemini",
        "gemini/misc",
        "git-ai_gemini-session-simple_legacy.json",
    );
    let prompt = misc
        .messages
        .iter()
        .find(|m| m.kind == MessageKind::UserPrompt)
        .unwrap();
    assert!(
        !prompt
            .text
            .contains("--- Content from referenced files ---"),
        "{}",
        prompt.text
    );
    assert!(
        misc.messages
            .iter()
            .any(|m| m.tool_result.as_ref().is_some_and(|r| r.is_error))
    );
}

/// Parsing in tiny chunks from cursors gives exactly what one pass gives.
#[test]
fn incremental_parsing_equals_one_pass() {
    let reg = AdapterRegistry::new();
    let cases = [
        (
            "claude",
            "claude/handwritten/projects",
            "-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl",
        ),
        (
            "codex",
            "codex/handwritten/sessions",
            "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl",
        ),
        (
            "gemini",
            "gemini/handwritten/gemini-home/tmp",
            "demo-app/chats/session-2026-06-10T07-15-3f2a9c1b.jsonl",
        ),
    ];
    for (agent, root, file) in cases {
        let a = reg.get(agent).unwrap();
        let root = fixtures().join(root);
        let path = root.join(file);
        let whole = parse_file(a, &root, &path).unwrap();
        let mut cursor = Cursor::default();
        let mut msgs = Vec::new();
        let mut edits = Vec::new();
        loop {
            // A round-trip through JSON, as the store persists cursors.
            let c: Cursor = serde_json::from_str(&serde_json::to_string(&cursor).unwrap()).unwrap();
            let out = a.parse(&root, &path, &c, 1).unwrap();
            msgs.extend(out.messages);
            edits.extend(out.edits);
            let done = out.at_end;
            cursor = out.cursor;
            if done {
                break;
            }
        }
        assert_eq!(msgs, whole.messages, "{file}");
        assert_eq!(edits, whole.edits, "{file}");
    }
}

/// A writer that is half-way through a line: nothing of it is read until the line is complete,
/// and a rewritten (shrunk) file is read again from the start.
#[test]
fn partial_lines_wait_and_rewrites_restart() {
    let reg = AdapterRegistry::new();
    let a = reg.get("claude").unwrap();
    let src = std::fs::read(fixtures().join(
        "claude/handwritten/projects/-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl",
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proj = dir.path().join("-p");
    std::fs::create_dir(&proj).unwrap();
    let path = proj.join("7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl");
    let cut = src.len() / 2;
    std::fs::write(&path, &src[..cut]).unwrap();
    let first = a
        .parse(dir.path(), &path, &Cursor::default(), 1 << 20)
        .unwrap();
    assert!(first.pending_tail);
    assert!((first.cursor.offset as usize) < cut);
    std::fs::write(&path, &src).unwrap();
    let second = a.parse(dir.path(), &path, &first.cursor, 1 << 20).unwrap();
    let whole = parse_file(a, dir.path(), &path).unwrap();
    let mut joined = first.messages.clone();
    joined.extend(second.messages);
    assert_eq!(joined, whole.messages);
    // Shrink: the cursor is past the end, so the file is read from the start again.
    std::fs::write(&path, &src[..src.len() / 4]).unwrap();
    let third = a.parse(dir.path(), &path, &second.cursor, 1 << 20).unwrap();
    assert_eq!(third.messages.first().map(|m| m.line), Some(1));
}

/// A record complete but for its newline is read at once; the newline that arrives later
/// ends that line and is not a line of its own, so line-based ids (Codex `L<line>`) stay those
/// of a one-pass read. Every possible cut point of every line is tried.
#[test]
fn a_newline_arriving_after_its_record_does_not_shift_line_numbers() {
    let reg = AdapterRegistry::new();
    let a = reg.get("codex").unwrap();
    let root = fixtures().join("codex/handwritten/sessions");
    let src =
        std::fs::read(root.join(
            "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl",
        ))
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let day = dir.path().join("2026/06/05");
    std::fs::create_dir_all(&day).unwrap();
    let path = day.join("rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl");
    std::fs::write(&path, &src).unwrap();
    let whole = parse_file(a, dir.path(), &path).unwrap();
    let ids = |msgs: &[ai_cli_session_collector::ParsedMessage]| {
        msgs.iter()
            .map(|m| (m.message_id.clone(), m.line))
            .collect::<Vec<_>>()
    };
    // Cut just before each newline: the record is complete, its newline not yet written.
    let cuts: Vec<usize> = src
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == b'\n')
        .map(|(i, _)| i)
        .collect();
    for cut in cuts {
        std::fs::write(&path, &src[..cut]).unwrap();
        let first = a
            .parse(dir.path(), &path, &Cursor::default(), 1 << 20)
            .unwrap();
        let c: Cursor =
            serde_json::from_str(&serde_json::to_string(&first.cursor).unwrap()).unwrap();
        std::fs::write(&path, &src).unwrap();
        let mut msgs = first.messages;
        let mut cursor = c;
        loop {
            let out = a.parse(dir.path(), &path, &cursor, 1 << 20).unwrap();
            let progressed = out.cursor.offset != cursor.offset;
            msgs.extend(out.messages);
            cursor = out.cursor;
            if out.at_end || !progressed {
                break;
            }
        }
        assert_eq!(ids(&msgs), ids(&whole.messages), "cut at byte {cut}");
        assert_eq!(cursor.line, whole.cursor.line, "cut at byte {cut}");
    }
}

/// A compact, stable view of a parse for snapshots: no raw bytes, texts cut short.
fn snapshot_view(out: &ParseOutput) -> Vec<String> {
    out.messages
        .iter()
        .map(|m| {
            let mut text: String = m.text.chars().take(60).collect();
            text = text.replace('\n', "⏎");
            let tool = m
                .tool_call
                .as_ref()
                .map(|t| t.name.clone())
                .unwrap_or_default();
            let flags = format!(
                "{}{}{}",
                if m.flags.sidechain { "S" } else { "" },
                if m.flags.inherited { "I" } else { "" },
                if m.flags.duplicate { "D" } else { "" }
            );
            format!(
                "L{:<3} p{} {:<18} {:<9} {:<3} {:<12} {}",
                m.line,
                m.prompt_number,
                m.kind.as_str(),
                m.role.as_str(),
                flags,
                tool,
                text
            )
        })
        .collect()
}

#[test]
fn snapshots_of_the_unified_model() {
    let cases = [
        (
            "claude",
            "claude/handwritten/projects",
            "-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl",
            "claude_handwritten",
        ),
        (
            "claude",
            "claude/misc",
            "git-ai_claude-code-with-thinking_v2.0.69.jsonl",
            "claude_thinking",
        ),
        (
            "codex",
            "codex/handwritten/sessions",
            "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl",
            "codex_modern",
        ),
        (
            "codex",
            "codex/handwritten/sessions",
            "2026/06/05/rollout-2026-06-05T14-00-00-019e9b02-7a8b-7c9d-8e0f-1a2b3c4d5e6f.jsonl",
            "codex_fork",
        ),
        (
            "gemini",
            "gemini/handwritten/gemini-home/tmp",
            "demo-app/chats/session-2026-06-10T07-15-3f2a9c1b.jsonl",
            "gemini_jsonl",
        ),
        (
            "gemini",
            "gemini/misc",
            "agent-history_gemini_golden_legacy.json",
            "gemini_legacy",
        ),
    ];
    for (agent, root, file, name) in cases {
        let out = parse(agent, root, file);
        insta::assert_yaml_snapshot!(name, snapshot_view(&out));
        insta::assert_yaml_snapshot!(format!("{name}_sessions"), out.sessions.last(), {
            ".started_at" => "[timestamp]",
            ".updated_at" => "[timestamp]",
        });
    }
}

#[test]
fn discovery_skips_what_is_not_a_transcript() {
    let reg = AdapterRegistry::new();
    let claude = reg.get("claude").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("-p/abc/subagents");
    std::fs::create_dir_all(&s).unwrap();
    std::fs::create_dir_all(dir.path().join("-p/abc/tool-results")).unwrap();
    for f in [
        "-p/abc.jsonl",
        "-p/abc/subagents/agent-1.jsonl",
        "-p/abc/subagents/journal.jsonl",
        "-p/abc/tool-results/x.jsonl",
        "-p/abc/subagents/agent-1.meta.json",
    ] {
        std::fs::write(dir.path().join(f), b"").unwrap();
    }
    let found: Vec<String> = claude
        .discover(dir.path())
        .iter()
        .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(
        found,
        vec!["-p/abc.jsonl", "-p/abc/subagents/agent-1.jsonl"]
    );

    let gemini = reg.get("gemini").unwrap();
    let groot = fixtures().join("gemini/handwritten/gemini-home/tmp");
    let g: Vec<String> = gemini
        .discover(&groot)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(g.len(), 3, "{g:?}");
    assert!(!g.iter().any(|n| n == "logs.json"));
}

mod never_panics {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048), cut in 0usize..64) {
            let reg = AdapterRegistry::new();
            let dir = tempfile::tempdir().unwrap();
            for (adapter, rel) in [
                ("claude", "p/0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b.jsonl"),
                ("codex", "2026/01/01/rollout-2026-01-01T00-00-00-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl"),
                ("gemini", "p/chats/session-x.jsonl"),
                ("gemini", "p/chats/session-y.json"),
            ] {
                let path = dir.path().join(rel);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &bytes).unwrap();
                let a = reg.get(adapter).unwrap();
                let out = parse_file(a, dir.path(), &path).unwrap();
                prop_assert!(out.cursor.offset <= bytes.len() as u64);
                // And from an arbitrary (possibly mid-line) cursor.
                let c = Cursor { offset: cut.min(bytes.len()) as u64, ..Default::default() };
                let _ = a.parse(dir.path(), &path, &c, 16).unwrap();
            }
        }

        #[test]
        fn json_shaped_lines(lines in proptest::collection::vec(json_line(), 0..20)) {
            let reg = AdapterRegistry::new();
            let dir = tempfile::tempdir().unwrap();
            let body = lines.join("\n") + "\n";
            for (adapter, rel) in [
                ("claude", "p/0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b.jsonl"),
                ("codex", "rollout-x-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl"),
                ("gemini", "p/chats/session-x.jsonl"),
            ] {
                let path = dir.path().join(rel);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &body).unwrap();
                let out = parse_file(reg.get(adapter).unwrap(), dir.path(), &path).unwrap();
                prop_assert_eq!(out.cursor.offset, body.len() as u64);
            }
        }
    }

    /// Lines that look like transcript records with fields of random types.
    fn json_line() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            "[a-z<>/ ]{0,12}".prop_map(serde_json::Value::from),
        ];
        let value = leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("type".to_owned()),
                        Just("message".to_owned()),
                        Just("content".to_owned()),
                        Just("payload".to_owned()),
                        Just("id".to_owned()),
                        Just("toolCalls".to_owned()),
                        Just("$set".to_owned()),
                        Just("$rewindTo".to_owned()),
                        Just("text".to_owned()),
                        Just("messages".to_owned()),
                        Just("timestamp".to_owned()),
                        Just("uuid".to_owned()),
                    ],
                    inner,
                    0..5,
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        });
        let ty = prop_oneof![
            Just("user"),
            Just("assistant"),
            Just("system"),
            Just("summary"),
            Just("session_meta"),
            Just("response_item"),
            Just("event_msg"),
            Just("gemini"),
            Just("message"),
            Just("function_call"),
        ];
        (ty, value.clone(), value).prop_map(|(t, a, b)| {
            serde_json::json!({"type": t, "message": a, "payload": b.clone(), "content": b, "id": "x"}).to_string()
        })
    }
}
