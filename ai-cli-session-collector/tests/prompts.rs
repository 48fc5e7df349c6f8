//! What counts as a prompt: what a person typed and sent. Text an agent, a hook, an editor or
//! another agent puts into a user turn is kept (as Meta) but is neither a prompt nor a title.
//! Hand-made lines in each agent's own layout, written to a temporary folder.

use std::path::Path;

use ai_cli_session_collector::{AdapterRegistry, MessageKind, ParseOutput, parse_file};

fn parse(agent: &str, root: &Path, rel: &str, content: &str) -> ParseOutput {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, content).unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get(agent).unwrap();
    assert!(a.is_transcript(root, &path), "{agent} does not read {rel}");
    parse_file(a, root, &path).unwrap()
}

fn prompts(out: &ParseOutput) -> Vec<(u32, String)> {
    out.messages
        .iter()
        .filter(|m| m.kind == MessageKind::UserPrompt)
        .map(|m| (m.prompt_number, m.text.clone()))
        .collect()
}

fn title(out: &ParseOutput) -> String {
    out.sessions[0]
        .title
        .clone()
        .map(|t| t.1)
        .unwrap_or_default()
}

#[test]
fn claude_notifications_hooks_and_other_agents_are_not_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let sid = "5b9e3c1a-0000-4000-8000-000000000001";
    let line = |uuid: &str, parent: &str, extra: &str, content: &str| {
        format!(
            r#"{{"type":"user","sessionId":"{sid}","uuid":"{uuid}","parentUuid":{parent},"timestamp":"2026-11-02T10:00:0{n}.000Z","cwd":"/p","isSidechain":false{extra},"message":{{"role":"user","content":{content}}}}}"#,
            n = uuid.len() % 10
        )
    };
    let lines = [
        line(
            "u1",
            "null",
            "",
            r#""<ide_opened_file>The user opened the file /p/a.rs in the IDE. This may or may not be related to the current task.</ide_opened_file>why does parse() panic on empty input?""#,
        ),
        line(
            "u22",
            r#""u1""#,
            "",
            r#""<task-notification>\n<task-id>b7</task-id>\n<status>completed</status>\n</task-notification>""#,
        ),
        line(
            "u333",
            r#""u22""#,
            "",
            r#""Stop hook feedback:\n- cargo test failed: 2 tests""#,
        ),
        line(
            "u4444",
            r#""u333""#,
            r#","origin":{"kind":"teammate","from":"alice","senderTaskId":"3"}"#,
            r#""alice: research-plan-mode.md is committed on my branch""#,
        ),
        line(
            "u55555",
            r#""u4444""#,
            r#","origin":{"kind":"human"}"#,
            r#""now add a test for it""#,
        ),
    ]
    .join("\n")
        + "\n";
    let out = parse("claude", dir.path(), &format!("-p/{sid}.jsonl"), &lines);
    assert_eq!(
        prompts(&out),
        [
            (
                1,
                "<ide_opened_file>The user opened the file /p/a.rs in the IDE. This may or may not \
                 be related to the current task.</ide_opened_file>why does parse() panic on empty \
                 input?"
                    .to_owned()
            ),
            (2, "now add a test for it".to_owned())
        ],
        "the stored prompt keeps every byte; only what a person sent is a prompt"
    );
    // Kept, as context of the first talk.
    let meta: Vec<&str> = out
        .messages
        .iter()
        .filter(|m| m.kind == MessageKind::Meta)
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(meta.len(), 3, "{meta:?}");
    assert!(
        out.messages
            .iter()
            .filter(|m| m.kind == MessageKind::Meta)
            .all(|m| m.prompt_number == 1)
    );
    assert_eq!(title(&out), "why does parse() panic on empty input?");
}

#[test]
fn pi_bare_commands_are_not_prompts_nor_titles() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        r#"{"type":"session","version":3,"id":"bare-cmd","timestamp":"2026-11-02T10:00:00.000Z","cwd":"/p"}"#,
        r#"{"type":"message","id":"m1","parentId":null,"timestamp":"2026-11-02T10:00:01.000Z","message":{"role":"user","content":[{"type":"text","text":"/mode"}]}}"#,
        r#"{"type":"message","id":"m2","parentId":"m1","timestamp":"2026-11-02T10:00:02.000Z","message":{"role":"user","content":[{"type":"text","text":"rename the config loader to Settings::load"}]}}"#,
        r#"{"type":"message","id":"m3","parentId":"m2","timestamp":"2026-11-02T10:00:03.000Z","message":{"role":"assistant","content":[{"type":"text","text":"Renamed."}],"stopReason":"stop"}}"#,
    ]
    .join("\n")
        + "\n";
    let out = parse(
        "pi",
        dir.path(),
        "--p--/2026-11-02T10-00-00-000Z_bare-cmd.jsonl",
        &lines,
    );
    assert_eq!(
        prompts(&out),
        [(1, "rename the config loader to Settings::load".to_owned())]
    );
    assert_eq!(title(&out), "rename the config loader to Settings::load");
}

#[test]
fn cursor_notifications_alone_are_not_prompts() {
    let dir = tempfile::tempdir().unwrap();
    let id = "7c0d0000-0000-4000-8000-000000000002";
    let lines = [
        r#"{"role":"user","message":{"content":[{"type":"text","text":"<user_query>\nadd a --json flag to the list command\n</user_query>"}]}}"#,
        r#"{"role":"assistant","message":{"content":[{"type":"text","text":"Added the flag in cli.rs."}]}}"#,
        r#"{"role":"user","message":{"content":[{"type":"text","text":"<system_notification>The background shell exited with code 0.</system_notification>"}]}}"#,
        r#"{"role":"assistant","message":{"content":[{"type":"text","text":"The build passed."}]}}"#,
    ]
    .join("\n")
        + "\n";
    let out = parse(
        "cursor",
        dir.path(),
        &format!("p/agent-transcripts/{id}/{id}.jsonl"),
        &lines,
    );
    assert_eq!(
        prompts(&out),
        [(1, "add a --json flag to the list command".to_owned())]
    );
}
