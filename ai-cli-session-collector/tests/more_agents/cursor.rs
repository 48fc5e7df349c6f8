//! Cursor CLI (`cursor/cli/`): the values SOURCES.md gives for each sample file.

use std::path::PathBuf;

use ai_cli_session_collector::{
    AdapterRegistry, MessageKind, ParseOutput, ParsedMessage, Role, TitleSource, parse_file,
};

use super::*;

const ROOT: &str = "cursor/cli/home/.cursor/projects";
const GITAI_ID: &str = "3b1f2c9e-0000-4000-8000-00000000c0c1";
const GITAI: &str = "Users-aidancunniffe-Desktop-testing-gitflows-git-ai/agent-transcripts/\
                     3b1f2c9e-0000-4000-8000-00000000c0c1/3b1f2c9e-0000-4000-8000-00000000c0c1.jsonl";
const CHAT_ID: &str = "a1b2c3d4-e5f6-7890-abcd-ef1234567890";
const CHAT: &str = "Users-test-project/agent-transcripts/a1b2c3d4-e5f6-7890-abcd-ef1234567890/\
                    a1b2c3d4-e5f6-7890-abcd-ef1234567890.jsonl";
const SUB_ID: &str = "5d6e7f80-1a2b-4c3d-9e8f-0a1b2c3d4e5f";
const SUB: &str = "Users-test-project/agent-transcripts/a1b2c3d4-e5f6-7890-abcd-ef1234567890/\
                   subagents/5d6e7f80-1a2b-4c3d-9e8f-0a1b2c3d4e5f.jsonl";

/// The roles of the file's lines, one per record (from the raw each record's first message
/// carries).
fn record_roles(out: &ParseOutput) -> Vec<String> {
    out.messages
        .iter()
        .filter_map(|m| m.raw.as_ref())
        .map(|raw| {
            let v: serde_json::Value = serde_json::from_slice(raw).unwrap();
            v["role"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

fn roles(out: &ParseOutput, role: &str) -> usize {
    record_roles(out).iter().filter(|r| *r == role).count()
}

fn tool_names<'a>(ms: &[&'a ParsedMessage]) -> Vec<&'a str> {
    ms.iter()
        .map(|m| m.tool_call.as_ref().unwrap().name.as_str())
        .collect()
}

#[test]
fn git_ai_transcript() {
    let out = parse("cursor", ROOT, GITAI);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(out.sessions.len(), 1);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, GITAI_ID);
    // No cwd in the file and no chats/ folder for it: the tool paths confirm the decoding.
    assert_eq!(
        s.project_path.as_deref(),
        Some("/Users/aidancunniffe/Desktop/testing-gitflows-git-ai")
    );
    assert!(!s.is_subagent && s.parent_session_id.is_none());
    assert_eq!(s.model, None);
    assert_eq!(s.started_at, None);
    assert_eq!(
        s.title,
        Some((
            TitleSource::FirstPrompt,
            "Generate a file with all the HBO shows from the 90's in it".to_owned()
        ))
    );
    assert!(out.messages.iter().all(|m| m.session_id == GITAI_ID));

    assert_eq!(record_roles(&out).len(), 11);
    assert_eq!(roles(&out, "assistant"), 10);
    assert_eq!(
        prompt_texts(&out),
        ["Generate a file with all the HBO shows from the 90's in it"]
    );
    assert!(has_word(&out, MessageKind::UserPrompt, "HBO"));
    assert!(!has_word(&out, MessageKind::UserPrompt, "user_query"));
    let answers = of_kind(&out, MessageKind::AssistantText);
    assert_eq!(answers.len(), 10, "one text block per assistant line");
    assert!(has_word(&out, MessageKind::AssistantText, "Tintin"));
    assert!(answers.iter().all(|m| m.prompt_number == 1));

    let calls = of_kind(&out, MessageKind::ToolCall);
    let mut names = tool_names(&calls);
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "Grep",
            "Read",
            "Read",
            "Read",
            "WebFetch",
            "WebSearch",
            "WebSearch",
            "WebSearch",
            "WebSearch",
            "Write"
        ]
    );
    // No ids in the transcript: nothing to pair, and no results at all.
    assert!(
        calls
            .iter()
            .all(|c| c.tool_call.as_ref().unwrap().call_id.is_none())
    );
    assert!(of_kind(&out, MessageKind::ToolResult).is_empty());
    // No ids, no timestamps, no model: ids come from line positions.
    assert!(out.messages.iter().all(|m| m.timestamp.is_none()));
    assert!(out.messages.iter().all(|m| m.model.is_none()));
    assert_eq!(out.messages[0].message_id, "L1");
    assert_eq!(
        out.messages
            .iter()
            .filter(|m| m.line == 2)
            .map(|m| m.message_id.as_str())
            .collect::<Vec<_>>(),
        ["L2", "L2#1", "L2#2"]
    );
    assert_raw_once(&out, &more().join(ROOT).join(GITAI));
}

#[test]
fn test_session_with_its_store_db() {
    let out = parse("cursor", ROOT, CHAT);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, CHAT_ID);
    // chats/ef8e68ef… is md5("/Users/test/project").
    assert_eq!(s.project_path.as_deref(), Some("/Users/test/project"));
    // store.db meta row 0 (hex JSON).
    assert_eq!(
        s.title,
        Some((TitleSource::Generated, "Test Session".to_owned()))
    );
    assert_eq!(s.model.as_deref(), Some("claude-4-sonnet"));
    assert_eq!(s.started_at, Some(1_775_522_590_321));
    assert!(s.updated_at >= s.started_at);

    assert_eq!(record_roles(&out).len(), 6);
    assert_eq!(roles(&out, "assistant"), 4);
    assert_eq!(
        prompt_texts(&out),
        ["run ls command", "now show me the git status"]
    );
    let prompts = of_kind(&out, MessageKind::UserPrompt);
    assert_eq!(
        prompts.iter().map(|p| p.prompt_number).collect::<Vec<_>>(),
        [1, 2]
    );
    let calls = of_kind(&out, MessageKind::ToolCall);
    assert_eq!(tool_names(&calls), ["Shell", "Shell"]);
    assert_eq!(
        calls[1].tool_call.as_ref().unwrap().input["command"],
        "git status"
    );
    assert_eq!(
        calls.iter().map(|c| c.prompt_number).collect::<Vec<_>>(),
        [1, 2]
    );
    let answers = of_kind(&out, MessageKind::AssistantText);
    assert_eq!(answers.len(), 4);
    assert_eq!(answers.iter().filter(|m| m.text == "[REDACTED]").count(), 1);
    assert!(has_word(&out, MessageKind::AssistantText, "clean"));
    assert!(has_word(&out, MessageKind::UserPrompt, "git"));
    assert!(
        out.messages
            .iter()
            .all(|m| !m.flags.sidechain && m.agent_id.is_none())
    );
    assert_raw_once(&out, &more().join(ROOT).join(CHAT));
}

#[test]
fn sub_agent_file() {
    let out = parse("cursor", ROOT, SUB);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, SUB_ID);
    assert!(s.is_subagent);
    assert_eq!(s.parent_session_id.as_deref(), Some(CHAT_ID));
    // The parent chat's md5 folder gives the project; the sub-agent has no meta of its own.
    assert_eq!(s.project_path.as_deref(), Some("/Users/test/project"));
    assert_eq!((s.title.as_ref(), s.model.as_ref()), (None, None));

    assert_eq!(roles(&out, "user"), 1);
    assert_eq!(roles(&out, "assistant"), 2);
    // The one user line is the parent agent's task, not a human prompt.
    assert!(prompt_texts(&out).is_empty());
    let task = &out.messages[0];
    assert_eq!((task.role, task.kind), (Role::User, MessageKind::Meta));
    assert_eq!(
        task.text,
        "Run ls -la in the workspace directory and return the output."
    );
    assert_eq!(tool_names(&of_kind(&out, MessageKind::ToolCall)), ["Shell"]);
    assert_eq!(of_kind(&out, MessageKind::AssistantText).len(), 1);
    assert!(has_word(&out, MessageKind::AssistantText, "12 entries"));
    assert!(out.messages.iter().all(|m| m.flags.sidechain));
    assert!(
        out.messages
            .iter()
            .all(|m| m.agent_id.as_deref() == Some(SUB_ID))
    );
    assert!(out.messages.iter().all(|m| m.prompt_number == 0));
    assert_raw_once(&out, &more().join(ROOT).join(SUB));
}

#[test]
fn byte_sized_chunks_give_the_same_messages() {
    let root = more().join(ROOT);
    for f in [GITAI, CHAT, SUB] {
        let whole = parse("cursor", ROOT, f);
        let small = chunked("cursor", &root, &root.join(f), 1);
        assert_eq!(small.messages, whole.messages, "{f}");
        let last = small.sessions.last().unwrap();
        assert_eq!(last.project_path, whole.sessions[0].project_path, "{f}");
        assert_eq!(
            last.title.is_some(),
            whole.sessions[0].title.is_some(),
            "{f}"
        );
    }
}

#[test]
fn roots_and_discovery() {
    let reg = AdapterRegistry::new();
    let a = reg.get("cursor").unwrap();
    assert_eq!(
        a.default_roots(&env(&[])),
        [PathBuf::from("/home/u/.cursor/projects")]
    );
    assert_eq!(
        a.default_roots(&env(&[("CURSOR_CONFIG_DIR", "/cfg/cursor")])),
        [PathBuf::from("/cfg/cursor/projects")]
    );
    let root = more().join(ROOT);
    let found = a.discover(&root);
    assert_eq!(found.len(), 3, "{found:?}");
    // Chats before the sub-agents that hang off them.
    assert!(found[2].ends_with(SUB));
    assert!(a.is_transcript(&root, &root.join("p/agent-transcripts/old-chat.jsonl")));
    assert!(!a.is_transcript(&root, &root.join("p/agent-tools/x.jsonl")));
}

#[test]
fn a_broken_store_db_is_an_issue_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join(".cursor");
    let src = more().join("cursor/cli/home/.cursor");
    let chat = base.join("projects").join(CHAT);
    std::fs::create_dir_all(chat.parent().unwrap()).unwrap();
    std::fs::copy(src.join("projects").join(CHAT), &chat).unwrap();
    let db_dir = base
        .join("chats/ef8e68efc0e57893bcf2516655bb7c04")
        .join(CHAT_ID);
    std::fs::create_dir_all(&db_dir).unwrap();
    std::fs::write(
        db_dir.join("store.db"),
        b"garbage, not a database, long enough to be read as a header ......",
    )
    .unwrap();
    let reg = AdapterRegistry::new();
    let a = reg.get("cursor").unwrap();
    let out = parse_file(a, &base.join("projects"), &chat).unwrap();
    assert_eq!(out.issues.len(), 1, "{:?}", out.issues);
    assert!(
        out.issues[0].reason.contains("store.db"),
        "{:?}",
        out.issues
    );
    assert_eq!(prompt_texts(&out).len(), 2);
    let s = &out.sessions[0];
    assert_eq!(
        s.title.as_ref().map(|t| t.0),
        Some(TitleSource::FirstPrompt)
    );
    // The md5 folder's name still confirms the project.
    assert_eq!(s.project_path.as_deref(), Some("/Users/test/project"));

    // A garbage transcript line is an issue too.
    std::fs::write(
        &chat,
        b"{\"role\":\"user\",\"message\":{\"content\":\"hi\"}}\nnope\n",
    )
    .unwrap();
    let out = parse_file(a, &base.join("projects"), &chat).unwrap();
    assert_eq!(prompt_texts(&out), ["hi"]);
    assert!(out.issues.iter().any(|i| i.line == 2 && !i.kept));
}

#[test]
fn damaged_transcripts_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join(".cursor/projects");
    let src_base = more().join("cursor/cli/home/.cursor");
    let db = "chats/ef8e68efc0e57893bcf2516655bb7c04/a1b2c3d4-e5f6-7890-abcd-ef1234567890/store.db";
    std::fs::create_dir_all(tmp.path().join(".cursor").join(db).parent().unwrap()).unwrap();
    std::fs::copy(src_base.join(db), tmp.path().join(".cursor").join(db)).unwrap();
    for f in [GITAI, CHAT, SUB] {
        let path = root.join(f);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let src = std::fs::read(more().join(ROOT).join(f)).unwrap();
        for bad in mutations(&src, 120) {
            survives("cursor", &root, &path, &bad);
        }
    }
}
