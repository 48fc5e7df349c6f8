//! Cursor IDE (`cursor/ide/`, `cursor/ide-legacy-2024/`): SOURCES.md "Cursor IDE".

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ai_cli_session_collector::{
    AdapterRegistry, ConversationAdapter, Cursor, Edit, Env, MessageKind, ParseOutput,
    ParsedMessage, Role, SessionInfo, SourceKind, TitleSource,
};
use serde_json::Value;

use super::*;

const AGENT: &str = "cursor-ide";
const IDE: &str = "cursor/ide/home/.config/Cursor/User";
const GLOBAL: &str = "globalStorage/state.vscdb";
const WS: &str = "workspaceStorage/3f1c0a9d2b7e4c5f8a6d1e2b3c4d5e6f/state.vscdb";
const LEGACY: &str = "cursor/ide-legacy-2024/home/AppData/Roaming/Cursor/User";
const LEGACY_DB: &str = "workspaceStorage/unknown-workspace-id/state.vscdb";
const C3: &str = "7b0e3d52-6c1a-4f0e-9a7d-2f4b8c1d9e01";
const C1: &str = "2c9d41f0-8e2b-4b7a-a1c3-5d6e7f809a1b";

fn in_session<'a>(out: &'a ParseOutput, sid: &str) -> Vec<&'a ParsedMessage> {
    out.messages
        .iter()
        .filter(|m| m.session_id == sid)
        .collect()
}

fn by_id<'a>(out: &'a ParseOutput, sid: &str, id: &str) -> &'a ParsedMessage {
    out.messages
        .iter()
        .find(|m| m.session_id == sid && m.message_id == id)
        .unwrap_or_else(|| panic!("no message {id} in {sid}"))
}

/// The session infos of one session, merged the way the store merges them (first project wins,
/// the latest title/model/time).
fn info(out: &ParseOutput, sid: &str) -> SessionInfo {
    merged(out.sessions.iter(), sid)
}

fn merged<'a>(infos: impl Iterator<Item = &'a SessionInfo>, sid: &str) -> SessionInfo {
    let mut m = SessionInfo::default();
    let mut seen = false;
    for i in infos.filter(|i| i.session_id == sid) {
        seen = true;
        m.session_id = i.session_id.clone();
        m.project_path = m.project_path.or_else(|| i.project_path.clone());
        m.model = i.model.clone().or(m.model);
        m.title = i.title.clone().or(m.title);
        m.started_at = m.started_at.or(i.started_at);
        m.updated_at = i.updated_at.or(m.updated_at);
    }
    assert!(seen, "no session info for {sid}");
    m
}

/// Every record read, once: its raw bytes parsed as JSON.
fn raws(out: &ParseOutput) -> Vec<Value> {
    out.messages
        .iter()
        .filter_map(|m| m.raw.as_ref())
        .map(|r| serde_json::from_slice(r).expect("raw is JSON"))
        .collect()
}

/// Whether any string anywhere in `v` contains `needle`.
fn holds(v: &Value, needle: &str) -> bool {
    match v {
        Value::String(s) => {
            s.contains(needle)
                || serde_json::from_str::<Value>(s)
                    .is_ok_and(|inner| !matches!(inner, Value::String(_)) && holds(&inner, needle))
        }
        Value::Array(a) => a.iter().any(|x| holds(x, needle)),
        Value::Object(o) => o.values().any(|x| holds(x, needle)),
        _ => false,
    }
}

#[test]
fn modern_global_db_v3_composer_matches_sources() {
    let out = parse(AGENT, IDE, GLOBAL);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let ids: BTreeSet<&str> = out.sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(ids, BTreeSet::from([C1, C3]));

    let s = info(&out, C3);
    assert_eq!(
        s.title,
        Some((
            TitleSource::Generated,
            "Fix the CI-only date test failure".into()
        ))
    );
    assert_eq!(s.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(s.model.as_deref(), Some("claude-4.5-sonnet"));
    assert_eq!(s.started_at, Some(1_781_000_000_000));
    assert_eq!(s.updated_at, Some(1_781_000_095_500));

    let c3 = in_session(&out, C3);
    let prompts: Vec<(&str, &str, u32)> = c3
        .iter()
        .filter(|m| m.kind == MessageKind::UserPrompt)
        .map(|m| (m.message_id.as_str(), m.text.as_str(), m.prompt_number))
        .collect();
    assert_eq!(
        prompts,
        [
            (
                "c3-u1",
                "The formatDate test only fails in CI. Find out why.",
                1
            ),
            ("c3-u2", "Make the test timezone-independent.", 2)
        ]
    );
    // Five rendered assistant bubbles, in header order.
    let mut shown: Vec<&&ParsedMessage> = c3
        .iter()
        .filter(|m| matches!(m.kind, MessageKind::AssistantText | MessageKind::ToolCall))
        .collect();
    shown.sort_by_key(|m| m.seq);
    let shown: Vec<(&str, MessageKind, u32)> = shown
        .iter()
        .map(|m| (m.message_id.as_str(), m.kind, m.prompt_number))
        .collect();
    assert_eq!(
        shown,
        [
            ("c3-a1", MessageKind::AssistantText, 1),
            ("c3-t1", MessageKind::ToolCall, 1),
            ("c3-a2", MessageKind::AssistantText, 1),
            ("c3-t2", MessageKind::ToolCall, 2),
            ("c3-a3", MessageKind::AssistantText, 2),
        ]
    );
    for m in c3
        .iter()
        .filter(|m| m.role == Role::Assistant && m.kind != MessageKind::Meta)
    {
        assert_eq!(
            m.model.as_deref(),
            Some("claude-4.5-sonnet"),
            "{}",
            m.message_id
        );
    }
    assert!(
        c3.iter()
            .all(|m| m.cwd.as_deref() == Some("/home/dev/demo-app"))
    );

    // `c3-x1` has no `grouping.isRenderable`: a record, not conversation.
    let x1: Vec<&&ParsedMessage> = c3
        .iter()
        .filter(|m| m.message_id.starts_with("c3-x1"))
        .collect();
    assert_eq!(x1.len(), 1);
    assert_eq!(x1[0].kind, MessageKind::Meta);
    assert!(x1[0].raw.is_some());

    // Tools: data in `toolFormerData`, call and result paired by id.
    let t1 = by_id(&out, C3, "c3-t1");
    let call = t1.tool_call.as_ref().unwrap();
    assert_eq!(call.name, "run_terminal_cmd");
    assert_eq!(call.input["command"], "TZ=UTC npm test -- date");
    let r1 = by_id(&out, C3, "c3-t1#result");
    assert_eq!(r1.kind, MessageKind::ToolResult);
    let res = r1.tool_result.as_ref().unwrap();
    assert_eq!(res.call_id, call.call_id);
    assert!(
        !res.is_error,
        "completed, the command's exit code 1 is output"
    );
    assert!(
        r1.text.contains("expected 2026-06-09 got 2026-06-08"),
        "{}",
        r1.text
    );
    assert!(r1.text.contains("exitCode: 1"), "{}", r1.text);
    let t2 = by_id(&out, C3, "c3-t2");
    assert_eq!(t2.tool_call.as_ref().unwrap().name, "edit_file");
    assert_eq!(
        t2.tool_call.as_ref().unwrap().input["target_file"],
        "src/date.test.ts"
    );
    let r2 = by_id(&out, C3, "c3-t2#result");
    assert!(r2.tool_result.as_ref().unwrap().is_error);
    assert_eq!(
        r2.tool_result.as_ref().unwrap().call_id,
        t2.tool_call.as_ref().unwrap().call_id
    );
    assert!(r2.text.contains("Edit rejected: file changed on disk"));
    assert_eq!(of_kind(&out, MessageKind::ToolCall).len(), 3);
    assert_eq!(of_kind(&out, MessageKind::ToolResult).len(), 3);

    // One thinking block.
    let th: Vec<&&ParsedMessage> = c3
        .iter()
        .filter(|m| m.kind == MessageKind::Thinking)
        .collect();
    assert_eq!(th.len(), 1);
    assert_eq!(th[0].message_id, "c3-a1#thinking");
    assert!(th[0].text.contains("CI runs in UTC"));
    assert!(th[0].seq < by_id(&out, C3, "c3-a1").seq);

    // Times: ISO `createdAt`, fractional `timingInfo` floats, carried over where absent.
    assert_eq!(by_id(&out, C3, "c3-u1").timestamp, Some(1_781_000_000_000));
    assert_eq!(by_id(&out, C3, "c3-a1").timestamp, Some(1_781_000_001_000));
    assert_eq!(by_id(&out, C3, "c3-t1").timestamp, Some(1_781_000_004_000));
    assert_eq!(by_id(&out, C3, "c3-a2").timestamp, Some(1_781_000_004_000));
    assert_eq!(by_id(&out, C3, "c3-u2").timestamp, Some(1_781_000_070_000));

    assert!(has_word(
        &out,
        MessageKind::UserPrompt,
        "timezone-independent"
    ));
    assert!(has_word(&out, MessageKind::AssistantText, "UTC"));
    assert!(!has_word(&out, MessageKind::UserPrompt, "UTC"));
}

#[test]
fn modern_global_db_v1_composer_reads_tools_from_the_capability_map() {
    let out = parse(AGENT, IDE, GLOBAL);
    let s = info(&out, C1);
    assert_eq!(
        s.title,
        Some((TitleSource::Generated, "Explain the date helper".into()))
    );
    // No `workspaceIdentifier`: the project comes from the workspace database.
    assert_eq!(s.project_path, None);
    assert_eq!(s.started_at, Some(1_780_900_000_000));
    assert_eq!(s.updated_at, Some(1_780_900_030_000));
    let c1 = in_session(&out, C1);
    let prompts: Vec<&str> = c1
        .iter()
        .filter(|m| m.kind == MessageKind::UserPrompt)
        .map(|m| m.text.as_str())
        .collect();
    assert_eq!(prompts, ["What does formatDate in src/date.ts do?"]);
    let shown: Vec<&str> = c1
        .iter()
        .filter(|m| matches!(m.kind, MessageKind::AssistantText | MessageKind::ToolCall))
        .map(|m| m.message_id.as_str())
        .collect();
    assert_eq!(shown, ["c1-t1", "c1-a1"]);
    let t = by_id(&out, C1, "c1-t1");
    let call = t.tool_call.as_ref().unwrap();
    assert_eq!(call.name, "read_file");
    assert_eq!(call.input["target_file"], "src/date.ts");
    let r = by_id(&out, C1, "c1-t1#result");
    assert_eq!(r.tool_result.as_ref().unwrap().call_id, call.call_id);
    assert!(!r.tool_result.as_ref().unwrap().is_error);
    assert!(r.text.contains("toISOString"), "{}", r.text);
    assert!(
        by_id(&out, C1, "c1-a1")
            .text
            .starts_with("It returns the UTC calendar date")
    );
    // No bubble time at all: the composer's creation time, so header order stands.
    assert!(c1.iter().all(|m| m.message_id == "composer"
        || (m.timestamp == Some(1_780_900_000_000) && m.prompt_number == 1)));
}

#[test]
fn modern_global_db_keeps_every_conversation_row_once_and_nothing_else() {
    let out = parse(AGENT, IDE, GLOBAL);
    let raws = raws(&out);
    let keys: Vec<&str> = raws.iter().map(|r| r["key"].as_str().unwrap()).collect();
    let distinct: BTreeSet<&str> = keys.iter().copied().collect();
    assert_eq!(keys.len(), distinct.len(), "a row carried twice");
    let db = rusqlite::Connection::open_with_flags(
        more().join(IDE).join(GLOBAL),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let expected: BTreeSet<String> = db
        .prepare(
            "SELECT key FROM cursorDiskKV WHERE key LIKE 'composerData:%' OR key LIKE 'bubbleId:%'",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // 2 composers, 8 + 3 bubbles.
    assert_eq!(expected.len(), 13);
    let got: BTreeSet<String> = distinct.iter().map(|s| (*s).to_owned()).collect();
    assert_eq!(got, expected);
    // Each raw is its row: the value as stored.
    for r in &raws {
        let key = r["key"].as_str().unwrap();
        let stored: String = db
            .query_row(
                "SELECT value FROM cursorDiskKV WHERE key = ?1",
                [key],
                |x| x.get(0),
            )
            .unwrap();
        assert_eq!(r["value"].as_str().unwrap(), stored);
    }
    // Skipped on purpose: checkpoints, request contexts, the lazily flushed headers.
    for r in &raws {
        for skip in [
            "checkpointId:",
            "messageRequestContext:",
            "composer.composerHeaders",
        ] {
            assert!(!holds(r, skip), "{skip} read");
        }
    }
}

#[test]
fn modern_workspace_db_maps_composers_to_its_folder() {
    let out = parse(AGENT, IDE, WS);
    assert!(out.messages.is_empty());
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    // `allComposers` (Cursor 2), `selectedComposerIds` and the chat view panes (Cursor 3).
    for sid in [C1, C3] {
        assert_eq!(
            info(&out, sid).project_path.as_deref(),
            Some("/home/dev/demo-app")
        );
    }
    // The whole folder: the global database first, then the workspace gives C1 its project.
    let all = parse_all(AGENT, IDE);
    let files: Vec<PathBuf> = all.iter().map(|(p, _)| p.clone()).collect();
    assert_eq!(
        files,
        [more().join(IDE).join(GLOBAL), more().join(IDE).join(WS)]
    );
    // The global database holds the composers' messages: it names their source file, the
    // workspace's list of them does not.
    assert!(!all[0].1.sessions.is_empty() && all[0].1.sessions.iter().all(|s| s.own_file));
    assert!(out.sessions.iter().all(|s| !s.own_file));
    let infos: Vec<&SessionInfo> = all.iter().flat_map(|(_, o)| o.sessions.iter()).collect();
    let c1 = merged(infos.iter().copied(), C1);
    assert_eq!(c1.project_path.as_deref(), Some("/home/dev/demo-app"));
    assert_eq!(c1.title.unwrap().1, "Explain the date helper");
}

#[test]
fn legacy_2024_workspace_db_matches_sources() {
    let out = parse(AGENT, LEGACY, LEGACY_DB);
    assert!(out.issues.is_empty(), "{:?}", out.issues);
    let composers: BTreeSet<&str> = out
        .messages
        .iter()
        .filter(|m| m.message_id == "composer")
        .map(|m| m.session_id.as_str())
        .collect();
    let tabs: BTreeSet<&str> = out
        .messages
        .iter()
        .filter(|m| m.message_id == "tab")
        .map(|m| m.session_id.as_str())
        .collect();
    assert_eq!(composers.len(), 26);
    assert_eq!(tabs.len(), 5);
    let sessions: BTreeSet<&str> = out.sessions.iter().map(|s| s.session_id.as_str()).collect();
    assert_eq!(sessions.len(), 31);
    assert!(out.sessions.iter().all(|s| s.project_path.is_none()));
    // A workspace's conversations name their file only while nothing else has: an inline
    // composer may also be in the global database, which then names it.
    assert!(out.sessions.iter().all(|s| !s.own_file));

    // Composers: inline `conversation`, 41 user and 41 assistant bubbles.
    let count = |set: &BTreeSet<&str>, kind: MessageKind| {
        out.messages
            .iter()
            .filter(|m| set.contains(m.session_id.as_str()) && m.kind == kind)
            .count()
    };
    assert_eq!(count(&composers, MessageKind::UserPrompt), 41);
    assert_eq!(count(&composers, MessageKind::AssistantText), 41);
    let cf = "cf2ead9f-6bf9-41d0-829e-a7fcae7ddb5a";
    assert_eq!(
        info(&out, cf).title,
        Some((
            TitleSource::Generated,
            "create a dedicated page for the copilot icon from the".into()
        ))
    );
    let cf_prompts: Vec<u32> = in_session(&out, cf)
        .iter()
        .filter(|m| m.kind == MessageKind::UserPrompt)
        .map(|m| m.prompt_number)
        .collect();
    assert_eq!(cf_prompts, [1, 2]);
    assert_eq!(
        by_id(&out, cf, "16c0c26b-ae7b-422e-b4da-d06d3ae44fc5").text,
        "create a dedicated page for the copilot icon from the menu.\nThis will be a AI chat"
    );
    assert_eq!(info(&out, cf).started_at, Some(1_731_797_537_671));
    assert_eq!(info(&out, cf).updated_at, Some(1_731_797_581_874));
    // A composer without a name is titled by its first prompt.
    let unnamed = info(&out, "090e988a-b2e3-4fcc-84e0-62a9401ae6ea");
    assert_eq!(unnamed.title.unwrap().0, TitleSource::FirstPrompt);

    // The old chat panel: 5 tabs, 49 bubbles (27 `user`, of which 5 empty drafts, 22 `ai`).
    let tab_bubbles: Vec<&ParsedMessage> = out
        .messages
        .iter()
        .filter(|m| tabs.contains(m.session_id.as_str()) && m.message_id != "tab")
        .collect();
    assert_eq!(tab_bubbles.len(), 49);
    assert_eq!(
        tab_bubbles.iter().filter(|m| m.role == Role::User).count(),
        27
    );
    assert_eq!(count(&tabs, MessageKind::UserPrompt), 22);
    assert_eq!(
        tab_bubbles
            .iter()
            .filter(|m| m.role == Role::User && m.kind == MessageKind::Meta)
            .count(),
        5
    );
    assert_eq!(count(&tabs, MessageKind::AssistantText), 22);
    let first_tab = "2aa483d1-573c-4039-ae4e-7415e28d2605";
    let t = info(&out, first_tab);
    assert_eq!(
        t.title,
        Some((
            TitleSource::Generated,
            "Ionic App Sidebar Customization Guide".into()
        ))
    );
    assert_eq!(t.updated_at, Some(1_731_818_231_743));
    assert_eq!(t.model.as_deref(), Some("claude-3.5-sonnet"));
    assert!(
        prompt_texts(&out)
            .iter()
            .any(|p| p.starts_with("We are building an ionic app for android"))
    );

    // `aiService.prompts` (66 records) is the input box's recall list: not counted again.
    let db = rusqlite::Connection::open_with_flags(
        more().join(LEGACY).join(LEGACY_DB),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    let recall: String = db
        .query_row(
            "SELECT value FROM ItemTable WHERE key = 'aiService.prompts'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let recall: Vec<Value> = serde_json::from_str(&recall).unwrap();
    assert_eq!(recall.len(), 66);
    assert!(recall.iter().all(|r| r.get("commandType").is_some()));
    assert_eq!(of_kind(&out, MessageKind::UserPrompt).len(), 41 + 22);

    // Every record once: 26 composers, 82 bubbles, 5 tabs, 49 tab bubbles; Windows paths kept.
    let raws = raws(&out);
    assert_eq!(raws.len(), 26 + 82 + 5 + 49);
    assert!(raws.iter().any(|r| holds(r, r"C:\Users\ydebray")));
    assert!(has_word(&out, MessageKind::AssistantText, "ionic"));

    // Read again: nothing new; read one key at a time: the same.
    let root = more().join(LEGACY);
    let path = root.join(LEGACY_DB);
    let again = read_from(&root, &path, &out.cursor, 4 << 20);
    assert!(again.messages.is_empty() && again.sessions.is_empty());
    let small = read_from(&root, &path, &Cursor::default(), 1);
    assert_eq!(texts(&small), texts(&out));
}

/// A writable copy of a fixture folder.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
            let mut p = std::fs::metadata(&dest).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            p.set_readonly(false);
            std::fs::set_permissions(&dest, p).unwrap();
        }
    }
}

fn adapter() -> &'static dyn ConversationAdapter {
    static REG: std::sync::OnceLock<AdapterRegistry> = std::sync::OnceLock::new();
    REG.get_or_init(AdapterRegistry::new).get(AGENT).unwrap()
}

/// Reads `path` from `cursor` to its end, `max_bytes` at a time.
fn read_from(root: &Path, path: &Path, cursor: &Cursor, max_bytes: usize) -> ParseOutput {
    let a = adapter();
    let mut all = ParseOutput::default();
    let mut c = cursor.clone();
    for _ in 0..10_000 {
        let out = a.parse(root, path, &c, max_bytes).unwrap();
        let progressed = out.cursor.offset != c.offset;
        all.messages.extend(out.messages);
        all.sessions.extend(out.sessions);
        all.edits.extend(out.edits);
        all.issues.extend(out.issues);
        c = out.cursor;
        if out.at_end || !progressed {
            break;
        }
    }
    all.cursor = c;
    all
}

fn texts(out: &ParseOutput) -> BTreeMap<(String, String), String> {
    out.messages
        .iter()
        .map(|m| ((m.session_id.clone(), m.message_id.clone()), m.text.clone()))
        .collect()
}

fn bubble_row(id: &str, text: &str) -> String {
    serde_json::json!({
        "_v": 3, "bubbleId": id, "type": 2, "unifiedMode": 2, "text": text,
        "modelInfo": {"modelName": "claude-4.5-sonnet"}
    })
    .to_string()
}

#[test]
fn global_db_is_read_incrementally_while_cursor_rewrites_rows() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("User");
    copy_tree(&more().join(IDE), &root);
    let path = root.join(GLOBAL);
    let w = rusqlite::Connection::open(&path).unwrap();
    // Cursor runs its databases in WAL mode.
    let mode: String = w
        .query_row("PRAGMA journal_mode=wal", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");

    let first = read_from(&root, &path, &Cursor::default(), 4 << 20);
    assert_eq!(
        first.messages.len(),
        parse(AGENT, IDE, GLOBAL).messages.len()
    );
    // Read in the smallest steps (one composer per call), it is the same.
    let small = read_from(&root, &path, &Cursor::default(), 1);
    assert_eq!(texts(&small), texts(&first));
    assert_eq!(small.messages.len(), first.messages.len());

    // Nothing changed: nothing comes back.
    let again = read_from(&root, &path, &first.cursor, 4 << 20);
    assert!(again.messages.is_empty(), "{:?}", again.messages);
    assert!(again.sessions.is_empty());
    assert!(again.edits.is_empty());

    let mut seen = texts(&first);
    let mut cursor = again.cursor;
    let key = format!("bubbleId:{C3}:c3-a3");
    for i in 0..20 {
        let text = format!("Streaming the answer, part {i}: the test now uses UTC date parts.");
        if i % 2 == 0 {
            // How Cursor writes: an INSERT that replaces the row (a new row id).
            w.execute(
                "INSERT INTO cursorDiskKV (key, value) VALUES (?1, ?2)",
                rusqlite::params![key, bubble_row("c3-a3", &text)],
            )
            .unwrap();
        } else {
            // An UPDATE in place keeps the row id: the active composer is read in full anyway.
            w.execute(
                "UPDATE cursorDiskKV SET value = ?2 WHERE key = ?1",
                rusqlite::params![key, bubble_row("c3-a3", &text)],
            )
            .unwrap();
        }
        let out = read_from(&root, &path, &cursor, 4 << 20);
        let got: Vec<(&str, &str, &str)> = out
            .messages
            .iter()
            .map(|m| {
                (
                    m.session_id.as_str(),
                    m.message_id.as_str(),
                    m.text.as_str(),
                )
            })
            .collect();
        assert_eq!(got, [(C3, "c3-a3", text.as_str())], "change {i}");
        let m = &out.messages[0];
        assert_eq!(m.kind, MessageKind::AssistantText);
        assert_eq!(m.prompt_number, 2);
        assert!(
            m.raw
                .as_ref()
                .is_some_and(|r| String::from_utf8_lossy(r).contains(&text))
        );
        seen.extend(texts(&out));
        cursor = out.cursor;
    }

    // A new bubble: its row, and the composer's header list that names it.
    w.execute(
        "INSERT INTO cursorDiskKV (key, value) VALUES (?1, ?2)",
        rusqlite::params![
            format!("bubbleId:{C3}:c3-a4"),
            bubble_row("c3-a4", "Saved and retried: the edit applied.")
        ],
    )
    .unwrap();
    let ckey = format!("composerData:{C3}");
    let comp: String = w
        .query_row(
            "SELECT value FROM cursorDiskKV WHERE key = ?1",
            [&ckey],
            |r| r.get(0),
        )
        .unwrap();
    let mut comp: Value = serde_json::from_str(&comp).unwrap();
    comp["lastUpdatedAt"] = 1_781_000_120_000i64.into();
    comp["fullConversationHeadersOnly"]
        .as_array_mut()
        .unwrap()
        .push(
            serde_json::json!({"bubbleId": "c3-a4", "type": 2, "grouping": {"isRenderable": true}}),
        );
    w.execute(
        "INSERT INTO cursorDiskKV (key, value) VALUES (?1, ?2)",
        rusqlite::params![ckey, comp.to_string()],
    )
    .unwrap();
    let out = read_from(&root, &path, &cursor, 4 << 20);
    let ids: BTreeSet<&str> = out.messages.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, BTreeSet::from(["composer", "c3-a4"]));
    assert_eq!(by_id(&out, C3, "c3-a4").prompt_number, 2);
    assert_eq!(info(&out, C3).updated_at, Some(1_781_000_120_000));
    seen.extend(texts(&out));
    cursor = out.cursor;

    // A rewind: Cursor drops bubbles from the header list; they are deactivated.
    comp["fullConversationHeadersOnly"]
        .as_array_mut()
        .unwrap()
        .pop();
    w.execute(
        "INSERT INTO cursorDiskKV (key, value) VALUES (?1, ?2)",
        rusqlite::params![ckey, comp.to_string()],
    )
    .unwrap();
    let out = read_from(&root, &path, &cursor, 4 << 20);
    assert!(
        out.edits
            .iter()
            .any(|e| matches!(e, Edit::Deactivate { session_id, message_ids }
            if session_id == C3 && message_ids.contains(&"c3-a4".to_owned())))
    );
    // Put it back for the comparison below.
    comp["fullConversationHeadersOnly"]
        .as_array_mut()
        .unwrap()
        .push(
            serde_json::json!({"bubbleId": "c3-a4", "type": 2, "grouping": {"isRenderable": true}}),
        );
    w.execute(
        "INSERT INTO cursorDiskKV (key, value) VALUES (?1, ?2)",
        rusqlite::params![ckey, comp.to_string()],
    )
    .unwrap();
    let out = read_from(&root, &path, &out.cursor, 4 << 20);
    seen.extend(texts(&out));
    drop(w);

    // The incremental reads add up to a clean read of the database as it is now.
    let clean = read_from(&root, &path, &Cursor::default(), 4 << 20);
    assert_eq!(seen, texts(&clean));
}

#[test]
fn credentials_next_to_conversations_are_never_read() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("User");
    copy_tree(&more().join(IDE), &root);
    let secret = "sk-SECRET-cursor-access-token-0123456789";
    for (file, tables) in [
        (GLOBAL, &["ItemTable", "cursorDiskKV"][..]),
        (WS, &["ItemTable", "cursorDiskKV"][..]),
    ] {
        let w = rusqlite::Connection::open(root.join(file)).unwrap();
        for t in tables {
            for key in [
                "cursorAuth/accessToken",
                "cursorAuth/refreshToken",
                "composerData",
                "bubbleId",
                "composer.composerDataX",
            ] {
                w.execute(
                    &format!("INSERT INTO {t} (key, value) VALUES (?1, ?2)"),
                    rusqlite::params![key, format!("{{\"token\":\"{secret}\"}}")],
                )
                .unwrap();
            }
        }
    }
    let a = adapter();
    let files = a.discover(&root);
    assert_eq!(files.len(), 2);
    let mut messages = 0;
    for f in files {
        let out = ai_cli_session_collector::parse_file(a, &root, &f).unwrap();
        messages += out.messages.len();
        for m in &out.messages {
            assert!(!m.text.contains(secret));
            assert!(
                !m.raw
                    .as_ref()
                    .is_some_and(|r| String::from_utf8_lossy(r).contains(secret))
            );
            assert!(!format!("{m:?}").contains(secret));
        }
        for i in &out.issues {
            assert!(!i.reason.contains(secret));
        }
        for s in &out.sessions {
            assert!(!format!("{s:?}").contains(secret));
        }
        assert!(!serde_json::to_string(&out.cursor).unwrap().contains(secret));
    }
    assert!(messages > 0);
}

#[test]
fn broken_databases_are_errors_or_issues_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("User");
    let a = adapter();
    // Not a database at all.
    let garbage = root.join(GLOBAL);
    std::fs::create_dir_all(garbage.parent().unwrap()).unwrap();
    std::fs::write(
        &garbage,
        b"\x00\x01 definitely not SQLite, just bytes that go on and on",
    )
    .unwrap();
    assert!(
        a.parse(&root, &garbage, &Cursor::default(), 1 << 20)
            .is_err()
    );

    // A database without the tables: an issue.
    let ws = root.join("workspaceStorage/w1/state.vscdb");
    std::fs::create_dir_all(ws.parent().unwrap()).unwrap();
    rusqlite::Connection::open(&ws)
        .unwrap()
        .execute_batch("CREATE TABLE other (x)")
        .unwrap();
    let out = a.parse(&root, &ws, &Cursor::default(), 1 << 20).unwrap();
    assert!(out.messages.is_empty());
    assert_eq!(out.issues.len(), 1);

    // Rows that are not JSON: kept as records, reported.
    std::fs::remove_file(&garbage).unwrap();
    let w = rusqlite::Connection::open(&garbage).unwrap();
    w.execute_batch(
        "CREATE TABLE ItemTable (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);
         CREATE TABLE cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);
         INSERT INTO cursorDiskKV VALUES ('composerData:k', '{\"fullConversationHeadersOnly\":[{\"bubbleId\":\"b1\"},{\"bubbleId\":\"b2\"}],\"capabilities\":[{\"data\":{\"bubbleDataMap\":\"{not json\"}}]}');
         INSERT INTO cursorDiskKV VALUES ('bubbleId:k:b1', '{\"type\": 1, \"text\": \"hi\"');
         INSERT INTO cursorDiskKV VALUES ('bubbleId:k:b2', x'ff00ff');
         INSERT INTO cursorDiskKV VALUES ('composerData:n', NULL);
         INSERT INTO cursorDiskKV VALUES ('composerData:s', '\"just a string\"');",
    )
    .unwrap();
    drop(w);
    let out = a
        .parse(&root, &garbage, &Cursor::default(), 1 << 20)
        .unwrap();
    assert_eq!(out.issues.len(), 3, "{:?}", out.issues);
    assert!(out.issues.iter().all(|i| i.kept));
    assert_eq!(out.messages.iter().filter(|m| m.raw.is_some()).count(), 4);
    assert!(of_kind(&out, MessageKind::UserPrompt).is_empty());
}

#[test]
fn roots_files_and_kind() {
    let a = adapter();
    let env = Env {
        home: PathBuf::from("/h"),
        vars: Default::default(),
    };
    let roots = a.default_roots(&env);
    for r in [
        "/h/.config/Cursor/User",
        "/h/Library/Application Support/Cursor/User",
        "/h/AppData/Roaming/Cursor/User",
    ] {
        assert!(roots.contains(&PathBuf::from(r)), "{roots:?}");
    }
    let env = Env {
        home: PathBuf::from("/h"),
        vars: [
            ("XDG_CONFIG_HOME".to_owned(), "/xdg".to_owned()),
            ("APPDATA".to_owned(), "/appdata".to_owned()),
        ]
        .into(),
    };
    let roots = a.default_roots(&env);
    assert!(roots.contains(&PathBuf::from("/xdg/Cursor/User")));
    assert!(roots.contains(&PathBuf::from("/appdata/Cursor/User")));

    let root = Path::new("/h/.config/Cursor/User");
    let g = root.join(GLOBAL);
    let w = root.join("workspaceStorage/abc/state.vscdb");
    assert!(a.is_transcript(root, &g));
    assert!(a.is_transcript(root, &w));
    assert!(!a.is_transcript(root, &root.join("globalStorage/state.vscdb.backup")));
    assert!(!a.is_transcript(root, &root.join("History/abc/state.vscdb")));
    assert!(!a.is_transcript(Path::new("/elsewhere"), &g));
    assert_eq!(a.source_kind(&g), SourceKind::Database);
    assert_eq!(
        a.source_of(root, &root.join("globalStorage/state.vscdb-wal")),
        Some(g)
    );
    assert_eq!(
        a.source_of(root, &root.join("workspaceStorage/abc/state.vscdb-wal")),
        Some(w)
    );
}
