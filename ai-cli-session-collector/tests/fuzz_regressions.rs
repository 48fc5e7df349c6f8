//! The bugs `tests/fuzz.rs` found, each reduced to a small input.

use std::path::{Path, PathBuf};

use ai_cli_session_collector::{AdapterRegistry, Cursor, ParseOutput, aggregate_usage, parse_file};

fn write(root: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

fn one_pass(agent: &str, root: &Path, path: &Path) -> ParseOutput {
    let reg = AdapterRegistry::new();
    parse_file(reg.get(agent).unwrap(), root, path).unwrap()
}

fn parse(agent: &str, root: &Path, path: &Path, cursor: &Cursor) -> ParseOutput {
    let reg = AdapterRegistry::new();
    reg.get(agent)
        .unwrap()
        .parse(root, path, cursor, 1 << 20)
        .unwrap()
}

const ROLLOUT: &str =
    "2026/06/05/rollout-2026-06-05T10-28-20-019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f.jsonl";
const ROLLOUT_ID: &str = "019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f";

/// A Codex `session_meta` (or pre-envelope header) without a usable id left the session id
/// empty: its message, and the session, had the id `""`. The file name's id stays.
#[test]
fn codex_session_meta_without_an_id_keeps_the_file_name_id() {
    for first in [
        r#"{"timestamp":"2026-06-05T08:28:20.000Z","type":"session_meta","payload":{"cwd":"/p"}}"#,
        r#"{"timestamp":"2026-06-05T08:28:20.000Z","type":"session_meta","payload":{"id":""}}"#,
        r#"{"id":5,"timestamp":"2026-06-05T08:28:20.000Z"}"#,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let body = format!(
            "{first}\n{}\n",
            r#"{"timestamp":"2026-06-05T08:28:21.000Z","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}}"#
        );
        let path = write(dir.path(), ROLLOUT, body.as_bytes());
        let out = one_pass("codex", dir.path(), &path);
        assert_eq!(out.messages.len(), 2, "{first}");
        for m in &out.messages {
            assert_eq!(m.session_id, ROLLOUT_ID, "{first}");
        }
        assert!(out.sessions.iter().all(|s| s.session_id == ROLLOUT_ID));
    }
}

/// A Gemini record with `"id": ""` became a message with an empty id. It is kept as a
/// non-message record now (its line is stored), in a JSONL file, a `$set.messages` checkpoint
/// and a legacy document alike.
#[test]
fn gemini_empty_message_ids_make_no_messages() {
    let dir = tempfile::tempdir().unwrap();
    let jsonl = write(
        dir.path(),
        "p/chats/session-1.jsonl",
        br#"{"sessionId":"s1"}
{"id":"","type":"user","content":"hi"}
{"$set":{"messages":[{"id":"","type":"gemini","content":"x"},{"id":"m1","type":"user","content":"yo"}]}}
"#,
    );
    let out = one_pass("gemini", dir.path(), &jsonl);
    assert!(out.messages.iter().all(|m| !m.message_id.is_empty()));
    // Every line is stored: one message carries its bytes.
    assert_eq!(out.messages.iter().filter(|m| m.raw.is_some()).count(), 3);
    assert!(out.messages.iter().any(|m| m.message_id == "m1"));

    let doc = write(
        dir.path(),
        "p/chats/session-2.json",
        br#"{"sessionId":"s2","messages":[{"id":"","type":"user","content":"a"},{"id":"m2","type":"user","content":"b"}]}"#,
    );
    let out = one_pass("gemini", dir.path(), &doc);
    let ids: Vec<&str> = out.messages.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids, ["document", "m2"]);
}

/// A Gemini `$set` whose `messages` is not a list was reported as skipped (`kept: false`)
/// although its line is stored.
#[test]
fn gemini_set_with_a_bad_message_list_is_reported_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "p/chats/session-1.jsonl",
        b"{\"$set\":{\"messages\":5}}\n",
    );
    let out = one_pass("gemini", dir.path(), &path);
    assert_eq!(out.messages.len(), 1);
    assert!(out.messages[0].raw.is_some());
    assert_eq!(out.issues.len(), 1);
    assert!(out.issues[0].kept, "{:?}", out.issues);
}

/// An invalid-UTF-8 line that is then skipped (not an object, or not a usable record) was also
/// reported as "decoded with U+FFFD replacements, kept": one line, kept and skipped.
#[test]
fn a_skipped_invalid_utf8_line_is_not_reported_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "-p/0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b.jsonl",
        b"[\"caf\xe9\"]\n{\"type\":\"user\",\"message\":\"caf\xe9\"}\n{\"type\":\"summary\",\"summary\":\"caf\xe9\"}\n",
    );
    let out = one_pass("claude", dir.path(), &path);
    let issues: Vec<(u64, bool)> = out.issues.iter().map(|i| (i.line, i.kept)).collect();
    assert_eq!(issues, [(1, false), (2, false), (3, true)]);
    assert_eq!(out.messages.len(), 1);
    assert_eq!(out.messages[0].line, 3);
}

/// Token counts are whatever the file says: summing two huge ones under different keys
/// overflowed (a panic in debug builds, a wrapped total in release builds).
#[test]
fn usage_totals_saturate() {
    let dir = tempfile::tempdir().unwrap();
    let line = |id: &str| {
        format!(
            r#"{{"type":"assistant","uuid":"{id}","message":{{"id":"{id}","role":"assistant","content":"x","usage":{{"input_tokens":18446744073709551615,"output_tokens":7}}}}}}"#
        )
    };
    let body = format!("{}\n{}\n", line("a"), line("b"));
    let path = write(
        dir.path(),
        "-p/0e9d8c7b-6a5f-4e3d-8c2b-1a0f9e8d7c6b.jsonl",
        body.as_bytes(),
    );
    let out = one_pass("claude", dir.path(), &path);
    let total = aggregate_usage(&out.messages);
    assert_eq!(total.input_tokens, u64::MAX);
    assert_eq!(total.output_tokens, 14);
}

/// A `.jsonl.zst` rewritten shorter, with the same first KiB: its length is not checked before
/// reading (it is not known without decompressing), so the cursor stayed past the end and the
/// new content was never read. Now a read that starts past the end starts over.
#[test]
fn a_compressed_file_rewritten_shorter_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let first = format!(
        r#"{{"timestamp":"2026-06-05T08:28:21.000Z","type":"response_item","payload":{{"type":"message","role":"user","content":[{{"type":"input_text","text":"{}"}}]}}}}"#,
        "a".repeat(1200)
    );
    let second = r#"{"timestamp":"2026-06-05T08:28:22.000Z","type":"event_msg","payload":{"type":"agent_message","message":"done"}}"#;
    let long = format!("{first}\n{second}\n{second}\n");
    let short = format!("{first}\n");
    let path = dir.path().join(format!("{ROLLOUT}.zst"));
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, zstd::encode_all(long.as_bytes(), 1).unwrap()).unwrap();
    let before = one_pass("codex", dir.path(), &path);
    assert_eq!(before.cursor.offset, long.len() as u64);

    std::fs::write(&path, zstd::encode_all(short.as_bytes(), 1).unwrap()).unwrap();
    let after = parse("codex", dir.path(), &path, &before.cursor);
    assert_eq!(after.cursor.offset, short.len() as u64);
    let ids: Vec<&str> = after
        .messages
        .iter()
        .map(|m| m.message_id.as_str())
        .collect();
    assert_eq!(ids, ["L1"]);
}

/// A Gemini document rewritten in place is often caught half-written, and may be shorter than
/// the last complete one: its cursor kept the old size, past the end of the file.
#[test]
fn a_shrunk_half_written_document_keeps_its_cursor_within_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let full = br#"{"sessionId":"s","messages":[{"id":"m1","type":"user","content":"a long first prompt"},{"id":"m2","type":"gemini","content":"an answer"}]}"#;
    let path = write(dir.path(), "p/chats/session-1.json", full);
    let first = one_pass("gemini", dir.path(), &path);
    assert_eq!(first.cursor.offset, full.len() as u64);

    let half = &full[..40];
    std::fs::write(&path, half).unwrap();
    let during = parse("gemini", dir.path(), &path, &first.cursor);
    assert!(during.pending_tail && during.messages.is_empty());
    assert_eq!(during.cursor.offset, half.len() as u64);
    // The state is kept: the prompt keeps its number once the document is whole again.
    assert_eq!(during.cursor.state, first.cursor.state);

    let rewritten = br#"{"sessionId":"s","messages":[{"id":"m1","type":"user","content":"a long first prompt"}]}"#;
    std::fs::write(&path, rewritten).unwrap();
    let done = parse("gemini", dir.path(), &path, &during.cursor);
    assert_eq!(done.cursor.offset, rewritten.len() as u64);
    let m1 = done.messages.iter().find(|m| m.message_id == "m1").unwrap();
    assert_eq!(m1.prompt_number, 1);
}
