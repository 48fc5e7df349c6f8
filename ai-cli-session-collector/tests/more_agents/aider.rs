//! Aider (`aider/`): every value SOURCES.md gives for the author's own chat history, plus the
//! document behaviour (re-read, append only adds, garbage) and the project-file roots.

use std::collections::{BTreeMap, BTreeSet};

use ai_cli_session_collector::{Cursor, Env, Role, SourceKind, TitleSource, Usage};
use chrono::TimeZone;

use super::*;

const ROOT: &str = "aider/Users/gauthier/Projects/aider";
const FILE: &str = ".aider.chat.history.md";

/// A header's time, read in this machine's zone as the adapter does.
fn local(stamp: &str) -> i64 {
    let t = chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S").unwrap();
    chrono::Local
        .from_local_datetime(&t)
        .earliest()
        .unwrap()
        .timestamp_millis()
}

fn file_bytes() -> Vec<u8> {
    std::fs::read(more().join(ROOT).join(FILE)).unwrap()
}

/// The user blocks (`####` runs) of the file, in order.
fn user_blocks(out: &ParseOutput) -> Vec<&ParsedMessage> {
    out.messages
        .iter()
        .filter(|m| m.role == Role::User)
        .collect()
}

#[test]
fn author_history() {
    let out = parse("aider", ROOT, FILE);
    assert!(out.issues.is_empty(), "{:?}", out.issues);

    // 27 sessions, one per header, with unique ids; 10 have no `####` line (SOURCES.md says
    // 8; the file has 10: 19:33:02, 20:40:10, 20:41:15, 20:42:31, 08:28:28, 08:40:35,
    // 08:41:45, 08:42:43, 17:35:53, 17:40:22).
    assert_eq!(out.sessions.len(), 27);
    let ids: BTreeSet<&str> = out.sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids.len(), 27);
    let with_user: BTreeSet<&str> = user_blocks(&out)
        .iter()
        .map(|m| m.session_id.as_str())
        .collect();
    assert_eq!(27 - with_user.len(), 10);
    let first = &out.sessions[0];
    assert_eq!(first.started_at, Some(local("2024-08-05 19:33:02")));
    assert!(first.session_id.starts_with("20240805T193302-"));
    assert_eq!(first.model.as_deref(), Some("claude-3-5-sonnet-20240620"));
    assert_eq!(out.sessions[2].model.as_deref(), Some("gpt-4o-mini"));
    assert_eq!(
        out.sessions[26].started_at,
        Some(local("2024-08-09 18:20:03"))
    );

    // The project is the folder the history is in (`/Users/gauthier/Projects/aider` in the
    // fixture tree); the history itself names it only in aider's launch lines.
    let project = more().join(ROOT).to_string_lossy().into_owned();
    assert!(project.ends_with("/Users/gauthier/Projects/aider"));
    assert!(
        out.sessions
            .iter()
            .all(|s| s.project_path.as_deref() == Some(project.as_str()))
    );
    assert!(
        out.messages
            .iter()
            .all(|m| m.cwd.as_deref() == Some(project.as_str()))
    );
    let launch = out
        .messages
        .iter()
        .filter(|m| {
            m.kind == MessageKind::Meta
                && m.text
                    .starts_with("/Users/gauthier/Projects/aider/.venv/bin/aider")
        })
        .count();
    assert!(launch >= 20, "{launch}");

    // 71 user blocks: 37 slash commands, 1 lint prompt (44 lines), 18 `/ask` echoes, 15 prompts.
    let blocks = user_blocks(&out);
    assert_eq!(blocks.len(), 71);
    let slash: Vec<_> = blocks.iter().filter(|m| m.text.starts_with('/')).collect();
    assert_eq!(slash.len(), 37);
    let lint: Vec<_> = blocks
        .iter()
        .filter(|m| m.text.starts_with("# Fix any errors below"))
        .collect();
    assert_eq!(lint.len(), 1);
    assert_eq!(lint[0].text.lines().count(), 44);
    let echoes: Vec<_> = blocks.iter().filter(|m| m.text.starts_with(' ')).collect();
    assert_eq!(echoes.len(), 18);
    assert!(echoes.iter().all(|m| m.text == " hi"));
    for m in slash.iter().chain(&lint).chain(&echoes) {
        assert_eq!(m.kind, MessageKind::Meta, "{:?}", m.text);
    }
    assert_eq!(
        prompt_texts(&out),
        [
            "Use the Spinner instead of the inlined custom spinner",
            "hi",
            "hi",
            "don't use confirm(), just prompt()",
            "don't use confirm(), just prompt() with default=y",
            "any of the `abs_read_only_fnames` that are actually part of the repo should get passed into the repomap along with the `abs_fnames`",
            "in cmd_diff, can the pager handle colorized output?",
            "add --mini to set model to gpt-4o-mini",
            "add --mini to set model to gpt-4o-mini",
            "in cmd_diff, can use ansisource since the git output might be colorized",
            "in cmd_diff, can use ansisource since the git output might be colorized",
            "go ahead",
            "use FileSource to paginate the diff",
            "use FileSource to paginate the diff",
            "switch cmd_diff to use self.io.console.pager",
        ]
    );
    // Prompts are numbered per session; the title is a session's first prompt.
    let spinner = &out.sessions[1];
    assert_eq!(
        spinner.title,
        Some((
            TitleSource::FirstPrompt,
            "Use the Spinner instead of the inlined custom spinner".into()
        ))
    );
    let mut per_session: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for p in of_kind(&out, MessageKind::UserPrompt) {
        per_session
            .entry(&p.session_id)
            .or_default()
            .push(p.prompt_number);
    }
    for numbers in per_session.values() {
        assert_eq!(*numbers, (1..=numbers.len() as u32).collect::<Vec<_>>());
    }

    // The reply in session 19:33:32 is one assistant message with its SEARCH/REPLACE block.
    let replies: Vec<_> = of_kind(&out, MessageKind::AssistantText)
        .into_iter()
        .filter(|m| m.session_id == spinner.session_id)
        .collect();
    assert_eq!(replies.len(), 1);
    assert!(
        replies[0]
            .text
            .starts_with("Certainly! I'll modify the `run_install` function")
    );
    assert!(
        replies[0]
            .text
            .contains("<<<<<<< SEARCH\ndef run_install(cmd):")
    );
    assert!(replies[0].text.contains("\n>>>>>>> REPLACE\n```\n"));
    assert_eq!(replies[0].prompt_number, 1);
    assert!(has_word(
        &out,
        MessageKind::AssistantText,
        "self.io.tool_output(\"... done.\")"
    ));
    assert!(has_word(&out, MessageKind::UserPrompt, "colorized"));

    // Usage from the 37 `> Tokens:` lines, one status message each.
    let with_usage: Vec<_> = out.messages.iter().filter(|m| m.usage.is_some()).collect();
    assert_eq!(with_usage.len(), 37);
    assert!(with_usage.iter().all(|m| m.text.starts_with("Tokens: ")
        && m.kind == MessageKind::Meta
        && m.usage_key.as_deref() == Some(m.message_id.as_str())));
    let spinner_usage = with_usage
        .iter()
        .find(|m| m.session_id == spinner.session_id)
        .unwrap();
    assert_eq!(
        spinner_usage.usage,
        Some(Usage {
            input_tokens: 5244,
            output_tokens: 604,
            ..Default::default()
        })
    );
    assert_eq!(
        spinner_usage.model.as_deref(),
        Some("claude-3-5-sonnet-20240620")
    );
    // Aider prices each request itself (`Cost: $0.02 request, $0.02 session.`).
    assert_eq!(spinner_usage.cost_usd, Some(0.02));
    assert!(with_usage.iter().all(|m| m.cost_usd.is_some()));

    // No per-message timestamps: every message has its session's start.
    for s in &out.sessions {
        assert!(
            out.messages
                .iter()
                .filter(|m| m.session_id == s.session_id)
                .all(|m| m.timestamp == s.started_at)
        );
    }

    // Every `####` and `>` line of the fixture ends with two spaces (but the first line of the
    // multi-line repo-map message).
    let text = String::from_utf8(file_bytes()).unwrap();
    let odd: Vec<&str> = text
        .lines()
        .filter(|l| (l.starts_with("####") || l.starts_with("> ")) && !l.ends_with("  "))
        .collect();
    assert_eq!(
        odd,
        ["> Here are summaries of some files present in my git repository."]
    );
    let repo_map = out
        .messages
        .iter()
        .find(|m| m.text.starts_with("Here are summaries"))
        .unwrap();
    assert_eq!(repo_map.kind, MessageKind::Meta);
    assert!(repo_map.text.ends_with("tests/scrape/test_scrape.py"));
}

#[test]
fn every_byte_is_kept_once() {
    let out = parse("aider", ROOT, FILE);
    let mut joined = Vec::new();
    for m in &out.messages {
        joined.extend_from_slice(m.raw.as_ref().expect("every element carries its bytes"));
    }
    let bytes = file_bytes();
    // All but the blank line at the very end, which waits for what aider writes next.
    let last = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .unwrap();
    let kept = last
        + bytes[last..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(bytes.len() - last, |p| p + 1);
    assert!(kept < bytes.len());
    assert_eq!(joined, bytes[..kept]);
    let ids: BTreeSet<(&str, &str)> = out
        .messages
        .iter()
        .map(|m| (m.session_id.as_str(), m.message_id.as_str()))
        .collect();
    assert_eq!(ids.len(), out.messages.len());
}

#[test]
fn appending_only_adds() {
    let reg = AdapterRegistry::new();
    let a = reg.get("aider").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE);
    std::fs::copy(more().join(ROOT).join(FILE), &path).unwrap();
    assert_eq!(a.source_kind(&path), SourceKind::Document);
    assert_eq!(a.discover(dir.path()), std::slice::from_ref(&path));

    let first = a
        .parse(dir.path(), &path, &Cursor::default(), 1 << 20)
        .unwrap();
    let again = a.parse(dir.path(), &path, &first.cursor, 1 << 20).unwrap();
    assert!(again.messages.is_empty() && again.edits.is_empty());

    // aider appends a new run.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(
        &mut f,
        b"\n# aider chat started at 2024-08-10 09:00:00\n\n> Aider v0.48.2-dev  \n> Model: gpt-4o with diff edit format  \n\n#### add a test for cmd_diff  \n\nHere is the test.\n\n> Tokens: 1,000 sent, 20 received. Cost: $0.01 message, $0.01 session.  \n",
    )
    .unwrap();
    drop(f);
    let next = a.parse(dir.path(), &path, &first.cursor, 1 << 20).unwrap();
    assert!(next.edits.is_empty());
    let key = |m: &ParsedMessage| {
        (
            m.session_id.clone(),
            m.message_id.clone(),
            m.text.clone(),
            m.raw.clone(),
            m.prompt_number,
        )
    };
    let old: BTreeSet<_> = first.messages.iter().map(key).collect();
    let new: BTreeSet<_> = next.messages.iter().map(key).collect();
    assert!(old.is_subset(&new), "an append changed what was read");
    let added: Vec<_> = next
        .messages
        .iter()
        .filter(|m| !old.contains(&key(m)))
        .collect();
    assert_eq!(added.len(), 6);
    assert!(
        added
            .iter()
            .all(|m| m.session_id.starts_with("20240810T090000-"))
    );
    let s = next.sessions.last().unwrap();
    assert_eq!(s.model.as_deref(), Some("gpt-4o"));
    assert_eq!(
        s.title.as_ref().map(|t| t.1.as_str()),
        Some("add a test for cmd_diff")
    );
    assert_eq!(next.sessions.len(), 28);
    let p = added
        .iter()
        .find(|m| m.kind == MessageKind::UserPrompt)
        .unwrap();
    assert_eq!(
        (p.message_id.as_str(), p.prompt_number),
        ("2024-08-10T09:00:00#3", 1)
    );

    // Not a history at all: read, never a panic.
    std::fs::write(&path, b"\x00\xff\xfe garbage\n####\n> \n").unwrap();
    let odd = a
        .parse(dir.path(), &path, &Cursor::default(), 1 << 20)
        .unwrap();
    assert!(
        odd.messages
            .iter()
            .all(|m| m.session_id.starts_with("preamble-"))
    );
    assert!(odd.messages.iter().all(|m| m.kind == MessageKind::Meta));
}

#[test]
fn roots_are_project_folders() {
    let reg = AdapterRegistry::new();
    let a = reg.get("aider").unwrap();
    assert!(a.default_roots(&Env::default()).is_empty());
    assert_eq!(a.project_files(), [FILE]);
    let root = more().join(ROOT);
    assert!(a.is_transcript(&root, &root.join(FILE)));
    assert!(!a.is_transcript(&root, &root.join("sub").join(FILE)));
    assert!(!a.is_transcript(&root, &root.join(".aider.input.history")));
    assert_eq!(parse_all("aider", ROOT).len(), 1);
}

/// A repository can put anything in a project folder: a history file that is a link (to a
/// credentials file, say), or under a linked folder, is neither found nor read.
#[cfg(unix)]
#[test]
fn linked_project_files_are_never_read() {
    let reg = AdapterRegistry::new();
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("credentials");
    std::fs::write(&secret, "#### aws_secret_access_key = wJalrXUtnFEMI\n").unwrap();
    for agent in ["aider", "crush"] {
        let a = reg.get(agent).unwrap();
        let project = dir.path().join(format!("repo-{agent}"));
        let file = project.join(a.project_files()[0]);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&secret, &file).unwrap();
        assert!(a.discover(&project).is_empty(), "{agent}: found a link");
        let err = a
            .parse(&project, &file, &Cursor::default(), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(err.contains("symbolic link"), "{agent}: {err}");
    }
    // A linked folder on the way to the file.
    let a = reg.get("crush").unwrap();
    let elsewhere = dir.path().join("elsewhere/.crush");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::copy(
        more().join("crush/project/home/dev/demo-app/.crush/crush.db"),
        elsewhere.join("crush.db"),
    )
    .unwrap();
    let project = dir.path().join("repo-linked-dir");
    std::fs::create_dir_all(&project).unwrap();
    std::os::unix::fs::symlink(&elsewhere, project.join(".crush")).unwrap();
    assert!(a.discover(&project).is_empty());
    let file = project.join(".crush/crush.db");
    assert!(
        a.parse(&project, &file, &Cursor::default(), 1 << 20)
            .is_err()
    );
    // The same file as a plain file in its project is read.
    let plain = dir.path().join("elsewhere");
    assert_eq!(a.discover(&plain), [plain.join(".crush/crush.db")]);
    assert!(
        a.parse(
            &plain,
            &plain.join(".crush/crush.db"),
            &Cursor::default(),
            1 << 20
        )
        .is_ok()
    );
}
