//! A planted-secret corpus: every redaction rule's example, placed where agents put secrets
//! (prompts, thinking, tool input, tool output after `\n` and ANSI colours, titles; Claude,
//! Codex and Gemini records), imported and compacted through a fake remote provider. No byte
//! of the data folder, no search result, no `sessions show --raw` and no request to the
//! provider may hold one. Then `memex scrub` over an archive written without redaction, and
//! `memex forget`.

use crate::common;

use std::path::Path;

use common::*;
use memex::redact::{RULES, redact_text};
use serde_json::{Value, json};

/// The part of `example` that redaction removes (what must not be found anywhere).
fn secret_part(example: &str) -> String {
    let red = redact_text(example).0.into_owned();
    let (a, b) = (example.as_bytes(), red.as_bytes());
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre.min(b.len())..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let mut start = pre;
    while !example.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = example.len() - suf;
    while !example.is_char_boundary(end) {
        end += 1;
    }
    let part = &example[start..end];
    assert!(
        part.len() >= 8,
        "rule example `{example}`: redaction leaves too little to check ({part:?})"
    );
    part.to_owned()
}

fn secrets() -> Vec<(&'static str, &'static str, String)> {
    RULES
        .iter()
        .map(|r| (r.name, r.example, secret_part(r.example)))
        .collect()
}

/// Every transcript of the corpus, written into `home`.
fn plant(h: &Home) {
    let cwd = "/work/planted";
    let mut claude = Vec::new();
    let mut codex = vec![
        json!({"timestamp": "2026-06-05T10:00:00.000Z", "type": "session_meta",
        "payload": {"id": "019eeeee-0000-7000-8000-00000000c0de", "timestamp": "2026-06-05T10:00:00.000Z",
                    "cwd": cwd, "originator": "codex_cli_rs", "cli_version": "0.135.0"}}),
    ];
    let mut gemini = Vec::new();
    for (i, (name, example, _)) in secrets().into_iter().enumerate() {
        let sid = format!("5ec7e700-0000-4000-8000-{i:012}");
        // The title comes from the first prompt's first line.
        claude.push((
            sid.clone(),
            vec![
                claude_prompt(
                    &sid,
                    &format!("p{i}"),
                    cwd,
                    &format!("{example}\nplease keep this {name} safe"),
                ),
                json!({"type": "assistant", "uuid": format!("t{i}"), "sessionId": sid, "cwd": cwd,
                    "timestamp": "2026-06-05T10:00:05.000Z",
                    "message": {"id": format!("msg_t{i}"), "role": "assistant", "model": "claude-opus-4-7",
                        "content": [{"type": "thinking", "signature": "c2lnbmF0dXJl",
                                     "thinking": format!("The user gave me this:\n{example}\nI will deploy with it.")},
                                    {"type": "tool_use", "id": format!("toolu_{i}"), "name": "Bash",
                                     "input": {"command": format!("deploy --key\n{example}")}}],
                        "usage": {"input_tokens": 10, "output_tokens": 5}}}),
                json!({"type": "user", "uuid": format!("r{i}"), "sessionId": sid, "cwd": cwd,
                    "timestamp": "2026-06-05T10:00:06.000Z",
                    "message": {"role": "user", "content": [{"type": "tool_result",
                        "tool_use_id": format!("toolu_{i}"),
                        "content": format!("deployed\n\u{1b}[31m{example}\u{1b}[0m\tdone")}]}}),
                claude_answer(
                    &sid,
                    &format!("a{i}"),
                    cwd,
                    &format!("Stored it:\n\t{example}"),
                ),
            ],
        ));
        codex.push(
            json!({"timestamp": "2026-06-05T10:01:00.000Z", "type": "response_item",
            "payload": {"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": format!("use\n{example}")}]}}),
        );
        codex.push(json!({"timestamp": "2026-06-05T10:01:01.000Z", "type": "response_item",
            "payload": {"type": "function_call", "name": "exec_command", "call_id": format!("call_{i}"),
                        "arguments": json!({"cmd": format!("echo \"{example}\"")}).to_string()}}));
        codex.push(
            json!({"timestamp": "2026-06-05T10:01:02.000Z", "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": format!("call_{i}"),
                        "output": format!("Output:\n\u{1b}[32m{example}\u{1b}[0m\n")}}),
        );
        gemini.push(
            json!({"id": format!("g{i}"), "timestamp": "2026-06-05T10:02:00.000Z",
            "type": if i % 2 == 0 { "user" } else { "gemini" },
            "content": format!("secret follows\r\n{example}")}),
        );
    }
    // A title whose `<private>` block is cut by the one-line title.
    claude.push((
        "5ec7e700-ffff-4000-8000-000000000000".into(),
        vec![claude_prompt(
            "5ec7e700-ffff-4000-8000-000000000000",
            "pp",
            cwd,
            "<private>my card 4111-1111-PRIVATE-TAIL\nline two</private> fix the build",
        )],
    ));
    for (sid, lines) in claude {
        h.write_claude(cwd, &sid, &lines);
    }
    let dir = h.path().join(".codex/sessions/2026/06/05");
    std::fs::create_dir_all(&dir).unwrap();
    let body: String = codex.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(
        dir.join("rollout-2026-06-05T10-00-00-019eeeee-0000-7000-8000-00000000c0de.jsonl"),
        body,
    )
    .unwrap();
    let dir = h.path().join(".gemini/tmp/0123456789abcdef/chats");
    std::fs::create_dir_all(&dir).unwrap();
    let doc = json!({"sessionId": "9e9e9e9e-0000-4000-8000-000000000001",
        "projectHash": "0123456789abcdef", "startTime": "2026-06-05T10:02:00.000Z",
        "lastUpdated": "2026-06-05T10:02:00.000Z", "messages": gemini});
    std::fs::write(
        dir.join("session-2026-06-05T10-02-9e9e9e9e.json"),
        serde_json::to_vec_pretty(&doc).unwrap(),
    )
    .unwrap();
}

/// Every place in the data folder a secret could hide: each file's bytes, and each raw block
/// decompressed. Returns (where, rule) of every secret found.
fn leaks(data: &Path, extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut texts: Vec<(String, Vec<u8>)> = walkdir(data)
        .into_iter()
        .map(|p| {
            (
                p.display().to_string(),
                std::fs::read(&p).unwrap_or_default(),
            )
        })
        .collect();
    let conn = db(data);
    let mut st = conn.prepare("SELECT id, data FROM raw_blocks").unwrap();
    let blocks: Vec<(i64, Vec<u8>)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    for (id, z) in blocks {
        texts.push((
            format!("raw block {id}"),
            zstd::decode_all(&z[..]).unwrap_or_default(),
        ));
    }
    for (what, s) in extra {
        texts.push((what.to_string(), s.clone().into_bytes()));
    }
    let mut found = Vec::new();
    for (name, _, part) in secrets() {
        for (place, bytes) in &texts {
            if memchr_find(bytes, part.as_bytes()) {
                let detail = if place.ends_with("memex.db") {
                    format!("{place}: {:?} {part:?}", where_in_db(data, &part))
                } else {
                    place.clone()
                };
                found.push((detail, name.to_owned()));
            }
        }
    }
    found
}

#[test]
fn a_planted_secret_corpus_leaves_no_secret_anywhere() {
    let h = Home::empty();
    plant(&h);
    let llm = FakeLlm::start(std::time::Duration::ZERO);
    let env = [
        ("MEMEX_COMPACT_PROVIDER", "openai"),
        ("MEMEX_COMPACT_OPENAI_ENDPOINT", llm.url.as_str()),
        ("MEMEX_COMPACT_OPENAI_API_KEY", "test-key"),
    ];
    let run = |args: &[&str]| {
        let mut c = h.command(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert!(out.status.success(), "memex {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let imported: Value = serde_json::from_str(&run(&["import", "--json"])).unwrap();
    assert!(imported["messages"].as_u64().unwrap() > 100, "{imported}");
    run(&["compact", "trigger"]);
    assert!(
        !llm.requests.lock().unwrap().is_empty(),
        "the fake remote provider wrote the summaries"
    );

    let mut seen = Vec::new();
    let sessions: Value =
        serde_json::from_str(&run(&["sessions", "list", "--limit", "1000", "--json"])).unwrap();
    let ids: Vec<String> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap().to_owned())
        .collect();
    assert!(ids.len() > secrets().len(), "{} sessions", ids.len());
    for id in &ids {
        seen.push((
            "sessions show --raw",
            run(&["sessions", "show", id, "--raw"]),
        ));
        seen.push((
            "sessions show --json",
            run(&["sessions", "show", id, "--json"]),
        ));
    }
    seen.push(("sessions list", sessions.to_string()));
    for (_, _, part) in secrets() {
        let q: String = part
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { ' ' })
            .collect();
        seen.push((
            "search",
            run(&[
                "search",
                q.trim(),
                "--mode",
                "fts",
                "--level",
                "all",
                "--json",
            ]),
        ));
    }
    for r in llm.requests.lock().unwrap().iter() {
        seen.push(("a request to the remote provider", r.clone()));
    }
    let titles = count(
        &db(&h.data_dir()),
        "SELECT COUNT(*) FROM sessions WHERE title LIKE '%PRIVATE-TAIL%' OR title LIKE '%<private>%'",
    );
    assert_eq!(titles, 0, "a title kept the start of a <private> block");
    let found = leaks(&h.data_dir(), &seen);
    assert!(found.is_empty(), "secrets left: {found:?}");
}

#[test]
fn scrub_removes_what_an_archive_without_redaction_kept_and_forget_takes_things_back() {
    let h = Home::empty();
    plant(&h);
    // An archive written with redaction off (or by a version with fewer rules).
    let mut c = h.command(&["import"]);
    let out = c.env("MEMEX_STORE_REDACT", "false").output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let before = leaks(&h.data_dir(), &[]);
    assert!(
        before.len() >= secrets().len(),
        "the unredacted archive holds the planted secrets"
    );
    let report = h.json(&["scrub", "--json"]);
    for (name, _, _) in secrets() {
        assert!(
            report["found"][name].as_u64().unwrap_or(0) > 0,
            "scrub found no `{name}`: {report}"
        );
    }
    assert!(report["raw_records"].as_u64().unwrap() > 0, "{report}");
    let after = leaks(&h.data_dir(), &[]);
    assert!(after.is_empty(), "secrets left after scrub: {after:?}");
    // Again: nothing more to find.
    let again = h.json(&["scrub", "--json"]);
    assert_eq!(again["messages"], 0, "{again}");

    // Forget one session: a dry run counts, the real one removes, an import does not bring it
    // back.
    let data = h.data_dir();
    let sid = "5ec7e700-0000-4000-8000-000000000000";
    let n_msgs = |sid: &str| {
        count(
            &db(&data),
            &format!(
                "SELECT COUNT(*) FROM messages m JOIN sessions s ON s.id = m.session_pk WHERE s.session_id = '{sid}'"
            ),
        )
    };
    let had = n_msgs(sid);
    assert!(had >= 4);
    let dry = h.json(&["forget", "--session", sid, "--dry-run", "--json"]);
    assert_eq!(dry["messages"].as_i64(), Some(had), "{dry}");
    assert_eq!(n_msgs(sid), had, "a dry run changes nothing");
    let out = h.command(&["forget", "--session", sid]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "without a terminal it asks for --yes"
    );
    let done = h.json(&["forget", "--session", sid, "--yes", "--json"]);
    assert_eq!(done["messages"].as_i64(), Some(had), "{done}");
    assert_eq!(done["sessions"], 1);
    assert_eq!(n_msgs(sid), 0);
    let fts_hits = h.json(&[
        "search",
        "safe",
        "--session",
        sid,
        "--mode",
        "fts",
        "--json",
    ]);
    assert_eq!(fts_hits["results"].as_array().map(Vec::len), Some(0));
    // The same files read again from the start (a lost cursor): the session stays forgotten.
    db(&data)
        .execute_batch("UPDATE source_files SET cursor = '{}', size = -1, mtime = -1")
        .unwrap();
    let out = h.command(&["import"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(n_msgs(sid), 0, "an import brought a forgotten session back");
    assert!(
        n_msgs("5ec7e700-0000-4000-8000-000000000001") >= 4,
        "the others stay"
    );

    // A project and a time are counted the same way (dry runs).
    let project = h.json(&[
        "forget",
        "--project",
        "/work/planted",
        "--dry-run",
        "--json",
    ]);
    let planted = count(
        &db(&data),
        "SELECT COUNT(*) FROM sessions WHERE project_path = '/work/planted'",
    );
    assert!(planted > 0);
    assert_eq!(project["sessions"].as_i64(), Some(planted), "{project}");
    let old = h.json(&["forget", "--before", "2000-01-01", "--dry-run", "--json"]);
    assert_eq!(
        (old["sessions"].as_i64(), old["messages"].as_i64()),
        (Some(0), Some(0))
    );
    let all = h.json(&["forget", "--before", "2030-01-01", "--dry-run", "--json"]);
    assert_eq!(
        all["sessions"].as_i64(),
        Some(count(&db(&data), "SELECT COUNT(*) FROM sessions")),
        "{all}"
    );
    let bad = h.memex(&["forget", "--project", "relative/path", "--dry-run"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("absolute"));

    // Forget by text: every message holding it, across agents; the raw records go too.
    let text = "please keep this";
    let before_rows = count(
        &db(&data),
        &format!(
            "SELECT COUNT(*) FROM messages WHERE instr(COALESCE(text, memex_unzstd(text_z)), '{text}') > 0"
        ),
    );
    assert!(before_rows > 0);
    let done = h.json(&["forget", "--match", text, "--yes", "--json"]);
    assert_eq!(done["messages"].as_i64(), Some(before_rows), "{done}");
    let conn = db(&data);
    assert_eq!(
        count(
            &conn,
            &format!(
                "SELECT COUNT(*) FROM messages WHERE instr(COALESCE(text, memex_unzstd(text_z)), '{text}') > 0"
            )
        ),
        0
    );
    let raw_left = leaks_text(&data, text);
    assert!(raw_left.is_empty(), "forgotten text still in {raw_left:?}");
    db(&data)
        .execute_batch("UPDATE source_files SET cursor = '{}', size = -1, mtime = -1")
        .unwrap();
    assert!(h.command(&["import"]).output().unwrap().status.success());
    assert!(
        leaks_text(&data, text).is_empty(),
        "an import brought forgotten messages back"
    );
}

/// Where `text` is still found: files of the data folder and decompressed raw blocks.
fn leaks_text(data: &Path, text: &str) -> Vec<String> {
    let conn = db(data);
    let mut st = conn.prepare("SELECT id, data FROM raw_blocks").unwrap();
    let mut out: Vec<String> = st
        .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|(_, z)| {
            memchr_find(
                &zstd::decode_all(&z[..]).unwrap_or_default(),
                text.as_bytes(),
            )
        })
        .map(|(id, _)| format!("raw block {id}"))
        .collect();
    let n = count(
        &conn,
        &format!(
            "SELECT COUNT(*) FROM messages WHERE instr(COALESCE(text, memex_unzstd(text_z)), '{text}') > 0"
        ),
    );
    if n > 0 {
        out.push(format!("{n} messages"));
    }
    out
}
