//! Antigravity (`antigravity/`): the values SOURCES.md gives for the sample session.

use std::path::{Path, PathBuf};

use ai_cli_session_collector::{
    AdapterRegistry, Env, MessageKind, ParseOutput, ParsedMessage, Role, TitleSource, parse_file,
};

use super::*;

const HOME: &str = "antigravity/home/.gemini";
const ROOT: &str = "antigravity/home/.gemini/antigravity-cli";
const SID: &str = "6f2b9c1e-3d4a-4e5f-8a7b-9c0d1e2f3a4b";
const LOGS: &str = "brain/6f2b9c1e-3d4a-4e5f-8a7b-9c0d1e2f3a4b/.system_generated/logs";
const MODEL: &str = "Gemini 3.5 Flash (High)";

fn full() -> String {
    format!("{LOGS}/transcript_full.jsonl")
}

fn adapter() -> &'static dyn ai_cli_session_collector::ConversationAdapter {
    static REG: std::sync::OnceLock<AdapterRegistry> = std::sync::OnceLock::new();
    REG.get_or_init(AdapterRegistry::new)
        .get("antigravity")
        .unwrap()
}

/// A copy of the sample home in a tempdir: the transcripts, plus the listed other files.
fn copy_home(with: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let src = more().join(HOME);
    let mut files = vec![
        format!("antigravity-cli/{LOGS}/transcript_full.jsonl"),
        format!("antigravity-cli/{LOGS}/transcript.jsonl"),
    ];
    files.extend(with.iter().map(|s| (*s).to_owned()));
    for f in files {
        let to = tmp.path().join(&f);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(&f), &to).unwrap();
    }
    let root = tmp.path().join("antigravity-cli");
    (tmp, root)
}

fn inputs(out: &ParseOutput) -> Vec<serde_json::Value> {
    of_kind(out, MessageKind::ToolCall)
        .iter()
        .map(|m| m.tool_call.as_ref().unwrap().input.clone())
        .collect()
}

#[test]
fn session_identity_prompts_and_model() {
    let out = parse("antigravity", ROOT, &full());
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(out.sessions.len(), 1);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, SID);
    assert!(out.messages.iter().all(|m| m.session_id == SID));
    // history.jsonl's second line carries the conversationId.
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(s.model.as_deref(), Some(MODEL));
    assert_eq!(
        s.title,
        Some((
            TitleSource::FirstPrompt,
            "Run the date tests and tell me what fails.".to_owned()
        ))
    );
    assert_eq!(s.started_at, Some(ms("2026-06-09T10:20:05Z")));
    assert_eq!(s.updated_at, Some(ms("2026-06-09T10:21:36Z")));

    // 12 lines, step_index 0–12 with 4 missing; ids follow the steps.
    let types = record_types(&out);
    assert_eq!(types.len(), 12);
    let first_ids: Vec<&str> = out
        .messages
        .iter()
        .filter(|m| m.raw.is_some())
        .map(|m| m.message_id.as_str())
        .collect();
    assert_eq!(
        first_ids,
        [
            "S0", "S1", "S2", "S3", "S5", "S6", "S7", "S8", "S9", "S10", "S11", "S12"
        ]
    );

    assert_eq!(
        prompt_texts(&out),
        [
            "Run the date tests and tell me what fails.",
            "Fix the test, not the helper."
        ]
    );
    let prompts = of_kind(&out, MessageKind::UserPrompt);
    assert_eq!(
        prompts
            .iter()
            .map(|p| (p.message_id.as_str(), p.prompt_number))
            .collect::<Vec<_>>(),
        [("S0", 1), ("S8", 2)]
    );
    assert!(prompts.iter().all(|p| p.role == Role::User));
    assert!(!has_word(
        &out,
        MessageKind::UserPrompt,
        "ADDITIONAL_METADATA"
    ));
    assert!(!has_word(&out, MessageKind::UserPrompt, "Model Selection"));
    assert!(has_word(&out, MessageKind::UserPrompt, "date tests"));
    assert_eq!(prompts[0].timestamp, Some(ms("2026-06-09T10:20:05Z")));

    // CONVERSATION_HISTORY and SYSTEM_MESSAGE are kept, not prompts.
    assert_eq!(count(&types, "CONVERSATION_HISTORY"), 1);
    assert_eq!(count(&types, "SYSTEM_MESSAGE"), 1);
    let meta: Vec<&ParsedMessage> = of_kind(&out, MessageKind::Meta);
    assert_eq!(
        meta.iter()
            .map(|m| m.message_id.as_str())
            .collect::<Vec<_>>(),
        ["S1", "S9"]
    );
    assert!(meta.iter().all(|m| m.role == Role::System));
    assert!(
        meta[1]
            .text
            .contains("subagents and background tasks have been stopped")
    );
    assert_raw_once(&out, &more().join(ROOT).join(full()));
}

#[test]
fn planner_responses_tools_and_results() {
    let out = parse("antigravity", ROOT, &full());
    let types = record_types(&out);
    assert_eq!(count(&types, "PLANNER_RESPONSE"), 5);
    let answers = of_kind(&out, MessageKind::AssistantText);
    assert_eq!(
        answers
            .iter()
            .map(|m| m.message_id.as_str())
            .collect::<Vec<_>>(),
        ["S2#1", "S7", "S12"],
        "3 planner steps with text, 2 tool-only"
    );
    assert!(has_word(&out, MessageKind::AssistantText, "toISOString"));
    assert!(answers.iter().all(|m| m.model.as_deref() == Some(MODEL)));
    let thinking = of_kind(&out, MessageKind::Thinking);
    assert_eq!(thinking.len(), 1);
    assert_eq!(
        (thinking[0].message_id.as_str(), thinking[0].text.as_str()),
        ("S2", "Run npm test filtered to date.")
    );

    let calls = of_kind(&out, MessageKind::ToolCall);
    let names: Vec<&str> = calls
        .iter()
        .map(|m| m.tool_call.as_ref().unwrap().name.as_str())
        .collect();
    assert_eq!(names, ["run_command", "view_file", "replace_file_content"]);
    let args = inputs(&out);
    assert_eq!(args[0]["WaitMsBeforeAsync"], 5000);
    assert_eq!(args[0]["CommandLine"], "npm test -- date");
    assert_eq!(args[2]["AllowMultiple"], false);

    // Each call is answered by the next step, paired by a derived call id.
    let results = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(results.len(), 3);
    let result_steps: Vec<&str> = results.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(result_steps, ["S3", "S6", "S11"]);
    for (c, r) in calls.iter().zip(&results) {
        let id = c.tool_call.as_ref().unwrap().call_id.clone();
        assert!(id.is_some());
        assert_eq!(r.tool_result.as_ref().unwrap().call_id, id);
        assert_eq!(r.role, Role::Tool);
    }
    // RUN_COMMAND has status DONE although the command failed with exit code 1.
    let errors: Vec<bool> = results
        .iter()
        .map(|r| r.tool_result.as_ref().unwrap().is_error)
        .collect();
    assert_eq!(errors, [true, false, false]);
    assert!(results[0].text.contains("failed with exit code: 1"));
    assert!(results[1].text.contains("formatDate"));
    assert!(results[2].text.contains("[diff_block_start]"));
    assert_eq!(
        results.iter().map(|r| r.prompt_number).collect::<Vec<_>>(),
        [1, 1, 2]
    );
}

#[test]
fn only_one_transcript_is_read_and_both_give_the_same_messages() {
    let root = more().join(ROOT);
    let plain = root.join(LOGS).join("transcript.jsonl");
    assert!(
        !adapter().is_transcript(&root, &plain),
        "transcript_full.jsonl supersedes it"
    );
    let found = adapter().discover(&root);
    assert_eq!(found, [root.join(full())]);

    // Where only transcript.jsonl exists, it is read, its doubly encoded arguments decoded.
    let (tmp, root2) = copy_home(&["antigravity-cli/history.jsonl"]);
    std::fs::remove_file(root2.join(full())).unwrap();
    let plain2 = root2.join(LOGS).join("transcript.jsonl");
    assert!(adapter().is_transcript(&root2, &plain2));
    let a = parse_file(adapter(), &root2, &plain2).unwrap();
    let b = parse("antigravity", ROOT, &full());
    assert_eq!(inputs(&a), inputs(&b));
    let key = |o: &ParseOutput| {
        o.messages
            .iter()
            .map(|m| (m.message_id.clone(), m.kind, m.text.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&a), key(&b));
    assert_eq!(
        a.sessions[0].project_path.as_deref(),
        Some("/home/dev/demo-app")
    );
    drop(tmp);
}

#[test]
fn the_workspace_comes_from_history_or_the_cli_log() {
    let path = |root: &Path| root.join(full());
    // Only the first prompt's line, which has no conversationId: matched by its text and time.
    let (_t1, root) = copy_home(&[]);
    let first = std::fs::read_to_string(more().join(ROOT).join("history.jsonl")).unwrap();
    let first = first.lines().next().unwrap();
    std::fs::write(root.join("history.jsonl"), format!("{first}\n")).unwrap();
    let out = parse_file(adapter(), &root, &path(&root)).unwrap();
    assert_eq!(
        out.sessions[0].project_path.as_deref(),
        Some("/home/dev/demo-app")
    );

    // No history: the CLI log names the project id, the project file its folder.
    let (_t2, root) = copy_home(&["config/projects/9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d.json"]);
    std::fs::create_dir_all(root.join("log")).unwrap();
    std::fs::write(
        root.join("log/cli-20260609_102000.log"),
        format!(
            "I0609 10:20:00 project: using project \"/elsewhere\" (id=9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d)\n\
             I0609 10:20:00 Conversation using project ID: 9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d\n\
             I0609 10:20:01 Created conversation {SID}\n"
        ),
    )
    .unwrap();
    let out = parse_file(adapter(), &root, &path(&root)).unwrap();
    assert_eq!(
        out.sessions[0].project_path.as_deref(),
        Some("/home/dev/demo-app")
    );

    // Neither: unknown, not guessed from the tool paths.
    let (_t3, root) = copy_home(&[]);
    let out = parse_file(adapter(), &root, &path(&root)).unwrap();
    assert_eq!(out.sessions[0].project_path, None);
}

#[test]
fn byte_sized_chunks_give_the_same_messages() {
    let root = more().join(ROOT);
    let whole = parse("antigravity", ROOT, &full());
    let small = chunked("antigravity", &root, &root.join(full()), 1);
    assert_eq!(small.messages, whole.messages);
    assert!(small.issues.is_empty());
    let last = small.sessions.last().unwrap();
    assert_eq!(last.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(last.model.as_deref(), Some(MODEL));
}

#[test]
fn roots_and_garbage() {
    let env = Env {
        home: PathBuf::from("/home/u"),
        vars: Default::default(),
    };
    assert_eq!(
        adapter().default_roots(&env),
        [
            PathBuf::from("/home/u/.gemini/antigravity-cli"),
            PathBuf::from("/home/u/.gemini/antigravity"),
            PathBuf::from("/home/u/.gemini/antigravity-ide"),
        ]
    );
    let (_t, root) = copy_home(&[]);
    std::fs::write(
        root.join(full()),
        b"{\"step_index\":0,\"source\":\"USER_EXPLICIT\",\"type\":\"USER_INPUT\",\"content\":\"hi\"}\n\
          garbage\n[]\n{\"step_index\":1,\"source\":\"MODEL\",\"type\":\"RUN_COMMAND\",\"content\":\"x\"}\n",
    )
    .unwrap();
    let out = parse_file(adapter(), &root, &root.join(full())).unwrap();
    assert_eq!(out.issues.len(), 2, "{:?}", out.issues);
    assert_eq!(prompt_texts(&out), ["hi"]);
    // A result with no open call is kept, unpaired.
    let r = of_kind(&out, MessageKind::ToolResult);
    assert_eq!(r[0].tool_result.as_ref().unwrap().call_id, None);
}

#[test]
fn damaged_transcripts_never_panic() {
    let (_t, root) = copy_home(&["antigravity-cli/history.jsonl"]);
    for name in ["transcript_full.jsonl", "transcript.jsonl"] {
        let src = std::fs::read(more().join(ROOT).join(LOGS).join(name)).unwrap();
        if name == "transcript.jsonl" {
            std::fs::remove_file(root.join(full())).unwrap();
        }
        for bad in mutations(&src, 120) {
            survives("antigravity", &root, &root.join(LOGS).join(name), &bad);
        }
    }
}
