//! Cline: no licensed real task exists, so these tests read the HAND-MADE task in
//! `tests/data/more-agents/cline/` (see `tests/data/more-agents/SOURCES.md`), laid out as the
//! extension writes it under VS Code's globalStorage.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ai_cli_session_collector::{
    AdapterRegistry, Cursor, Edit, Env, MessageKind, ParseOutput, Role, SourceKind, TitleSource,
    Usage, aggregate_usage, parse_file,
};
use serde_json::Value;

use super::{has_word, of_kind, prompt_texts};

const EXT: &str = "cline/home/.config/Code/User/globalStorage/saoudrizwan.claude-dev";
const TASK: &str = "1781004000000";
const FILE: &str = "api_conversation_history.json";

/// The hand-made fixtures of this crate.
fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/more-agents")
}

fn root() -> PathBuf {
    data().join(EXT).join("tasks")
}

fn parse_task(root: &Path, path: &Path) -> ParseOutput {
    let reg = AdapterRegistry::new();
    let a = reg.get("cline").unwrap();
    assert!(a.is_transcript(root, path), "{}", path.display());
    parse_file(a, root, path).unwrap()
}

fn elements(path: &Path) -> Vec<Value> {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn hand_made_task() {
    let path = root().join(TASK).join(FILE);
    let out = parse_task(&root(), &path);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    assert_eq!(out.sessions.len(), 1);
    let s = &out.sessions[0];
    assert_eq!(s.session_id, TASK);
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/date-cli"));
    assert_eq!(
        s.title,
        Some((
            TitleSource::FirstPrompt,
            "Add a --utc flag to the date CLI so it prints dates in UTC.".into()
        ))
    );
    assert_eq!(s.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
    assert_eq!(
        s.started_at,
        Some(1_781_004_000_000),
        "the task id is its start"
    );
    assert_eq!(s.updated_at, Some(1_781_004_095_000));
    assert!(!s.is_subagent);

    // 10 elements, each carried whole by one message; no `ts`, so ids are positions.
    let els = elements(&path);
    let raws: Vec<(&str, Value)> = out
        .messages
        .iter()
        .filter_map(|m| {
            let r = m.raw.as_ref()?;
            Some((m.message_id.as_str(), serde_json::from_slice(r).unwrap()))
        })
        .collect();
    assert_eq!(raws.len(), 10);
    for (i, ((id, raw), el)) in raws.iter().zip(&els).enumerate() {
        assert_eq!(*id, format!("n{i}"));
        assert_eq!(raw, el);
    }

    // 2 prompts: the `<task>`, and the `<feedback>` inside attempt_completion's text result.
    assert_eq!(
        prompt_texts(&out),
        [
            "Add a --utc flag to the date CLI so it prints dates in UTC.",
            "Also document the new flag in README.md."
        ]
    );
    let p = of_kind(&out, MessageKind::UserPrompt);
    assert_eq!((p[0].message_id.as_str(), p[0].prompt_number), ("n0", 1));
    assert_eq!(
        (p[1].message_id.as_str(), p[1].prompt_number),
        ("n6/prompt", 2)
    );
    assert!(has_word(&out, MessageKind::UserPrompt, "README.md"));
    assert!(has_word(
        &out,
        MessageKind::AssistantText,
        "no Usage section"
    ));

    // Injected user text is kept as Meta: 5 `<environment_details>`, 1 TODO list reminder.
    let meta_starting = |p: &str| {
        out.messages
            .iter()
            .filter(|m| m.text.starts_with(p))
            .inspect(|m| assert_eq!((m.kind, m.role), (MessageKind::Meta, Role::User)))
            .count()
    };
    assert_eq!(meta_starting("<environment_details>"), 5);
    assert_eq!(meta_starting("# TODO LIST UPDATE REQUIRED"), 1);

    // 5 assistant messages with their model; one thinking block.
    let assistant: BTreeSet<&str> = out
        .messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| m.message_id.split('#').next().unwrap())
        .collect();
    assert_eq!(
        assistant,
        ["n1", "n3", "n5", "n7", "n9"].into_iter().collect()
    );
    assert!(
        out.messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .all(|m| m.model.as_deref() == Some("claude-sonnet-4-5-20250929"))
    );
    let thinking = of_kind(&out, MessageKind::Thinking);
    assert_eq!(thinking.len(), 1);
    assert!(thinking[0].text.contains("formatDate"));

    // Text-form results pair by order with the call before them; the failed edit is an error;
    // the last attempt_completion is not answered.
    let calls: Vec<(String, Option<String>)> = of_kind(&out, MessageKind::ToolCall)
        .iter()
        .map(|c| {
            let t = c.tool_call.as_ref().unwrap();
            (t.name.clone(), t.call_id.clone())
        })
        .collect();
    let names: Vec<&str> = calls.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "read_file",
            "replace_in_file",
            "attempt_completion",
            "replace_in_file",
            "attempt_completion"
        ]
    );
    let results: Vec<(Option<String>, bool)> = of_kind(&out, MessageKind::ToolResult)
        .iter()
        .map(|r| {
            let t = r.tool_result.as_ref().unwrap();
            (t.call_id.clone(), t.is_error)
        })
        .collect();
    let expected: Vec<(Option<String>, bool)> = calls[..4]
        .iter()
        .enumerate()
        .map(|(i, (_, id))| (id.clone(), i == 3))
        .collect();
    assert_eq!(results, expected);
    assert_eq!(calls[4].1.as_deref(), Some("toolu_01ClineDone2"));

    // Usage from `metrics.tokens` of each assistant message (the task's totals).
    assert_eq!(
        aggregate_usage(&out.messages),
        Usage {
            input_tokens: 64220,
            output_tokens: 818,
            cache_read_tokens: 50500,
            cache_creation_tokens: 0,
            reasoning_tokens: 0,
        }
    );
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some("/home/dev/date-cli"))
    );
}

/// Copies the extension folder (tasks and state) into a temporary directory.
fn copy_ext(with_state: bool) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let ext = dir.path().join("saoudrizwan.claude-dev");
    let src = data().join(EXT);
    let tdir = ext.join("tasks").join(TASK);
    std::fs::create_dir_all(&tdir).unwrap();
    for e in std::fs::read_dir(src.join("tasks").join(TASK)).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), tdir.join(e.file_name())).unwrap();
    }
    if with_state {
        std::fs::create_dir_all(ext.join("state")).unwrap();
        std::fs::copy(
            src.join("state/taskHistory.json"),
            ext.join("state/taskHistory.json"),
        )
        .unwrap();
    }
    let path = tdir.join(FILE);
    (dir, ext.join("tasks"), path)
}

#[test]
fn project_from_environment_details_without_task_history() {
    let (_dir, root, path) = copy_ext(false);
    let out = parse_task(&root, &path);
    let s = &out.sessions[0];
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/date-cli"));
    assert_eq!(
        s.title.as_ref().map(|t| t.1.as_str()),
        Some("Add a --utc flag to the date CLI so it prints dates in UTC.")
    );
    // task_metadata.json still names the model.
    assert_eq!(s.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
}

#[test]
fn checkpoint_restore_cuts_the_tail() {
    let reg = AdapterRegistry::new();
    let a = reg.get("cline").unwrap();
    let (_dir, root, path) = copy_ext(true);
    assert_eq!(a.source_kind(&path), SourceKind::Document);
    let first = a.parse(&root, &path, &Cursor::default(), 1 << 20).unwrap();
    let again = a.parse(&root, &path, &first.cursor, 1 << 20).unwrap();
    assert!(again.messages.is_empty() && again.edits.is_empty());
    assert_eq!(
        again.sessions[0].project_path.as_deref(),
        Some("/home/dev/date-cli")
    );

    // Restoring a checkpoint drops the last message; the message before it is rewritten.
    let mut els = elements(&path);
    els.pop();
    els[8]["content"][0]["text"] =
        "[replace_in_file for 'README.md'] Result:\nThe user denied this operation and provided the following feedback:\n<feedback>\nAdd a Usage section first.\n</feedback>"
            .into();
    std::fs::write(&path, serde_json::to_vec(&els).unwrap()).unwrap();
    let next = a.parse(&root, &path, &first.cursor, 1 << 20).unwrap();
    let changed = next.messages.iter().find(|m| m.message_id == "n8").unwrap();
    assert_eq!(changed.kind, MessageKind::ToolResult);
    assert!(changed.text.contains("The user denied this operation"));
    assert!(!changed.tool_result.as_ref().unwrap().is_error);
    // A comment on a denied tool is the human's words.
    assert_eq!(
        prompt_texts(&next).last().map(String::as_str),
        Some("Add a Usage section first.")
    );
    assert_eq!(
        next.edits,
        [Edit::Deactivate {
            session_id: TASK.into(),
            message_ids: vec!["n9".into(), "n9#1".into()],
        }]
    );

    // A side file's change re-reads the task.
    let ui = path.with_file_name("ui_messages.json");
    assert_eq!(a.source_of(&root, &ui), Some(path.clone()));
}

#[test]
fn default_roots_cover_the_hosts() {
    let reg = AdapterRegistry::new();
    let a = reg.get("cline").unwrap();
    let env = Env {
        home: "/home/u".into(),
        ..Default::default()
    };
    let roots = a.default_roots(&env);
    for r in [
        "/home/u/.config/Code/User/globalStorage/saoudrizwan.claude-dev/tasks",
        "/home/u/.config/Code - Insiders/User/globalStorage/saoudrizwan.claude-dev/tasks",
        "/home/u/.config/VSCodium/User/globalStorage/saoudrizwan.claude-dev/tasks",
        "/home/u/.config/Cursor/User/globalStorage/saoudrizwan.claude-dev/tasks",
        "/home/u/.config/Windsurf/User/globalStorage/saoudrizwan.claude-dev/tasks",
        "/home/u/Library/Application Support/Code/User/globalStorage/saoudrizwan.claude-dev/tasks",
        "/home/u/AppData/Roaming/Code/User/globalStorage/saoudrizwan.claude-dev/tasks",
        "/home/u/.vscode-remote/data/User/globalStorage/saoudrizwan.claude-dev/tasks",
    ] {
        assert!(roots.contains(&PathBuf::from(r)), "{r}");
    }
    let found = a.discover(&root());
    assert_eq!(found, [root().join(TASK).join(FILE)]);
}
