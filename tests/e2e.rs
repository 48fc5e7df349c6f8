//! End-to-end: the real `memex` binary in a temporary HOME holding the shared fixtures, checked
//! against the CLI contract.

use crate::common;

use common::*;
use serde_json::{Value, json};

fn search_hits(v: &Value) -> &Vec<Value> {
    v["results"].as_array().expect("results array")
}

#[test]
fn import_reports_the_contract_and_is_idempotent() {
    let h = Home::with_fixtures();
    let first = h.json(&["import", "--json"]);
    for key in [
        "files",
        "sessions",
        "messages",
        "prompts",
        "bad_lines",
        "errors",
    ] {
        assert!(
            first.get(key).is_some(),
            "import --json lacks {key}: {first}"
        );
    }
    assert_eq!(first["files"], 29, "{first}");
    assert!(first["messages"].as_u64().unwrap() > 700);
    // SOURCES.md: 22 Claude prompts (1+1+1+1+1+7+2 real, 4+1+1 hand-written, 1+1 misc),
    // 6 Codex (1+4+0+1), 6 Gemini (4 + 2).
    assert_eq!(first["prompts"], 22 + 6 + 6, "{first}");
    assert_eq!(first["bad_lines"], 2);
    let errors = first["errors"].as_array().unwrap();
    assert!(errors.iter().any(|e| {
        e["file"]
            .as_str()
            .unwrap()
            .ends_with("5c4b3a29-1807-4f6e-9d5c-4b3a29180706.jsonl")
            && e["line"] == 3
    }));

    let status1 = h.json(&["status", "--json"]);
    let again = h.json(&["import", "--json"]);
    assert_eq!(
        again["messages"], 0,
        "re-import stores nothing new: {again}"
    );
    assert_eq!(again["prompts"], 0);
    // Touching every file forces a re-read from the stored cursors: still nothing new.
    for f in walkdir(&h.path().join(".claude")) {
        let body = std::fs::read(&f).unwrap();
        std::fs::write(&f, body).unwrap();
    }
    let third = h.json(&["import", "--json"]);
    assert_eq!(third["messages"], 0, "{third}");
    let status2 = h.json(&["status", "--json"]);
    assert_eq!(status1["messages"], status2["messages"]);
    assert_eq!(status1["sessions"], status2["sessions"]);
    for key in [
        "sessions",
        "messages",
        "agents",
        "data_dir",
        "database_bytes",
    ] {
        assert!(status2.get(key).is_some(), "status --json lacks {key}");
    }
    let agents: Vec<&str> = status2["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["agent"].as_str().unwrap())
        .collect();
    assert_eq!(agents, vec!["claude", "codex", "gemini"]);

    // A Gemini session in a sha256-named folder gets its path from another agent's session.
    let old = h.json(&[
        "sessions",
        "show",
        "7d3c2a10-6e5f-4b4a-9d8c-7b6a5f4e3d2c",
        "--json",
    ]);
    assert_eq!(old["session"]["project"], "/home/dev/old-proj");
}

#[test]
fn search_returns_the_documented_fields_and_filters() {
    let h = Home::with_fixtures();
    h.json(&["import", "--json"]);
    let v = h.json(&["search", "timezone", "--json", "--limit", "5"]);
    let hits = search_hits(&v);
    assert!(!hits.is_empty() && hits.len() <= 5);
    for hit in hits {
        for key in [
            "session_id",
            "message_id",
            "agent",
            "project",
            "role",
            "prompt_number",
            "timestamp",
            "snippet",
            "score",
            "level",
        ] {
            assert!(hit.get(key).is_some(), "hit lacks {key}: {hit}");
        }
        assert_eq!(hit["level"], "raw");
        assert!(
            hit["snippet"]
                .as_str()
                .unwrap()
                .to_lowercase()
                .contains("**timezone**"),
            "{hit}"
        );
    }
    let codex = h.json(&[
        "search",
        "Intl.DateTimeFormat",
        "--agent",
        "codex",
        "--json",
    ]);
    assert!(search_hits(&codex).iter().all(|x| x["agent"] == "codex"));
    assert!(!search_hits(&codex).is_empty());
    let proj = h.json(&[
        "search",
        "formatter",
        "--project",
        "/home/dev/demo-app",
        "--json",
        "--limit",
        "50",
    ]);
    assert!(!search_hits(&proj).is_empty());
    assert!(
        search_hits(&proj)
            .iter()
            .all(|x| x["project"] == "/home/dev/demo-app")
    );
    let sess = h.json(&[
        "search",
        "formatter",
        "--session",
        "7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c",
        "--json",
    ]);
    assert!(
        search_hits(&sess)
            .iter()
            .all(|x| x["session_id"] == "7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c")
    );
    let before = h.json(&["search", "formatter", "--until", "2026-01-01", "--json"]);
    assert!(
        search_hits(&before)
            .iter()
            .all(|x| x["timestamp"].as_str().unwrap() < "2026-01-01")
    );
    let bad = h.memex(&["search", "x", "--since", "yesterday-ish"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--since"));
    let bad = h.memex(&["search", "x", "--agent", "windsurf"]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown agent `windsurf`"));
}

#[test]
fn no_query_a_user_types_is_an_error() {
    let h = Home::with_fixtures();
    h.json(&["import", "--json"]);
    for q in [
        "\"unbalanced",
        "AND OR NOT",
        "foo*bar:",
        "(((",
        "NEAR(a b",
        "*",
        "\"\"",
        "'; DROP TABLE messages; --",
        "a:b:c",
        "^",
        "-x",
        "{}",
        "col:value",
    ] {
        let v = h.json(&["search", "--json", "--", q]);
        assert!(v["results"].is_array(), "{q}: {v}");
    }
    // Literal operator words are searched as words.
    let v = h.json(&["search", "NOT", "--json"]);
    assert!(v["results"].is_array());
}

#[test]
fn chinese_text_is_found_by_a_chinese_word() {
    let h = Home::empty();
    let s = "11111111-2222-4333-8444-555555555555";
    h.write_claude(
        "/home/dev/认证服务",
        s,
        &[
            claude_prompt(
                s,
                "zh-1",
                "/home/dev/auth",
                "请帮我修复用户认证失败的问题，登录后令牌过期太快",
            ),
            claude_answer(
                s,
                "zh-2",
                "/home/dev/auth",
                "我已经把令牌的过期时间改成了一小时。",
            ),
        ],
    );
    h.json(&["import", "--json"]);
    let v = h.json(&["search", "认证", "--json"]);
    let hits = search_hits(&v);
    assert_eq!(hits.len(), 1, "{v}");
    assert_eq!(hits[0]["message_id"], "zh-1");
    assert!(hits[0]["snippet"].as_str().unwrap().contains("**认证**"));
    // Every bigram first; then rows with some of them, which name them.
    let v = h.json(&["search", "令牌过期", "--json"]);
    let hits = search_hits(&v);
    assert_eq!(hits[0]["message_id"], "zh-1", "{v}");
    assert_eq!(hits[0]["terms"], json!(["令牌", "牌过", "过期"]));
    assert_eq!(hits[1]["message_id"], "zh-2", "{v}");
    assert_eq!(hits[1]["terms"], json!(["令牌", "过期"]));
    assert_eq!(search_hits(&h.json(&["search", "令牌", "--json"])).len(), 2);
    assert_eq!(
        search_hits(&h.json(&["search", "证", "--json"])).len(),
        1,
        "a single character"
    );
    // No row says 认证成功: the one that shares a word comes back as partial, not nothing.
    let v = h.json(&["search", "认证成功", "--json"]);
    assert_eq!(search_hits(&v).len(), 1, "{v}");
    assert_eq!(search_hits(&v)[0]["terms"], json!(["认证"]));
}

#[test]
fn a_partial_last_line_is_stored_once_when_completed() {
    let h = Home::empty();
    let s = "22222222-2222-4333-8444-555555555555";
    let p = h.write_claude(
        "/home/dev/app",
        s,
        &[claude_prompt(
            s,
            "p-1",
            "/home/dev/app",
            "first prompt about pelicans",
        )],
    );
    let second = claude_answer(s, "p-2", "/home/dev/app", "an answer about flamingos").to_string();
    let (head, tail) = second.split_at(second.len() / 2);
    let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
    use std::io::Write;
    f.write_all(head.as_bytes()).unwrap();
    f.flush().unwrap();
    let a = h.json(&["import", "--json"]);
    assert_eq!(a["messages"], 1, "the half line waits: {a}");
    assert!(search_hits(&h.json(&["search", "flamingos", "--json"])).is_empty());
    f.write_all(format!("{tail}\n").as_bytes()).unwrap();
    f.flush().unwrap();
    let b = h.json(&["import", "--json"]);
    assert_eq!(b["messages"], 1, "{b}");
    assert_eq!(b["bad_lines"], 0);
    assert_eq!(
        search_hits(&h.json(&["search", "flamingos", "--json"])).len(),
        1
    );
    let c = h.json(&["import", "--json"]);
    assert_eq!(c["messages"], 0);
    let show = h.json(&["sessions", "show", s, "--json"]);
    assert_eq!(show["messages"].as_array().unwrap().len(), 2);
}

#[test]
fn secrets_never_reach_the_archive() {
    let h = Home::empty();
    let s = "33333333-2222-4333-8444-555555555555";
    let openai = "sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa";
    let github = "ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa12";
    let aws = "AKIAZX9YW8VU7TS6RQ5P";
    h.write_claude(
        "/home/dev/app",
        s,
        &[
            claude_prompt(
                s,
                "r-1",
                "/home/dev/app",
                &format!("deploy with OPENAI_API_KEY={openai} and token {github}"),
            ),
            serde_json::json!({
                "type": "assistant", "uuid": "r-2", "sessionId": s, "cwd": "/home/dev/app",
                "timestamp": "2026-06-05T10:00:05.000Z",
                "message": {"id": "msg_r2", "role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_r", "name": "Bash",
                     "input": {"command": format!("aws configure set aws_access_key_id {aws}")}}]}
            }),
            claude_prompt(
                s,
                "r-3",
                "/home/dev/app",
                "my address is <private>221B Baker Street</private>, remember the deploy",
            ),
        ],
    );
    h.json(&["import", "--json"]);
    for secret in [openai, github, aws, "221B Baker Street", "Zx9Yw8Vu7Ts6"] {
        assert!(
            search_hits(&h.json(&["search", secret, "--json"])).is_empty(),
            "{secret} found by search"
        );
    }
    let show = h.memex(&["sessions", "show", s, "--json"]);
    let text = String::from_utf8_lossy(&show.stdout);
    assert!(text.contains("[REDACTED_SECRET]") && text.contains("[REDACTED]"));
    for secret in [openai, github, aws, "221B Baker"] {
        assert!(!text.contains(secret), "{secret} in sessions show");
    }
    // Grep every byte of the data directory, decompressing the stored columns too.
    for f in walkdir(&h.data_dir()) {
        let bytes = std::fs::read(&f).unwrap();
        for secret in [openai, github, aws, "221B Baker"] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} in {}",
                f.display()
            );
        }
    }
    // The stored original records, decompressed: redacted, still valid JSON.
    let raw = h.memex(&["sessions", "show", s, "--raw"]);
    assert!(raw.status.success());
    let raws: Vec<&[u8]> = raw
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(raws.len(), 3);
    for raw in raws {
        let raw = String::from_utf8(raw.to_vec()).unwrap();
        serde_json::from_str::<Value>(&raw).expect("redacted raw stays valid JSON");
        for secret in [openai, github, aws, "221B Baker"] {
            assert!(!raw.contains(secret), "{secret} in raw JSON");
        }
    }
    let conn = rusqlite::Connection::open(h.data_dir().join("memex.db")).unwrap();
    let mut st = conn.prepare("SELECT data FROM raw_blocks").unwrap();
    let blocks: Vec<Vec<u8>> = st
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert!(!blocks.is_empty());
    for z in blocks {
        let block = zstd::decode_all(&z[..]).unwrap();
        for secret in [openai, github, aws, "221B Baker"] {
            assert!(
                !block.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} in a raw block"
            );
        }
    }
    let status = h.json(&["status", "--json"]);
    assert_eq!(
        status["redactions"], 4,
        "two keys, one AWS key, one private block"
    );
}

#[test]
fn sessions_list_and_show_follow_the_contract() {
    let h = Home::with_fixtures();
    h.json(&["import", "--json"]);
    let v = h.json(&["sessions", "list", "--json", "--limit", "100"]);
    let sessions = v["sessions"].as_array().unwrap();
    assert!(sessions.len() >= 20);
    for s in sessions {
        for key in [
            "session_id",
            "agent",
            "project",
            "title",
            "started_at",
            "updated_at",
            "messages",
            "prompts",
        ] {
            assert!(s.get(key).is_some(), "session lacks {key}: {s}");
        }
    }
    let updated: Vec<&str> = sessions
        .iter()
        .filter_map(|s| s["updated_at"].as_str())
        .collect();
    assert!(
        updated.windows(2).all(|w| w[0] >= w[1]),
        "most recent first"
    );
    let claude = h.json(&["sessions", "list", "--agent", "claude", "--json"]);
    assert!(
        claude["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["agent"] == "claude")
    );

    let show = h.json(&[
        "sessions",
        "show",
        "7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c",
        "--json",
    ]);
    assert_eq!(
        show["session"]["title"],
        "Fix timezone-dependent date tests"
    );
    assert_eq!(show["session"]["prompts"], 4);
    let msgs = show["messages"].as_array().unwrap();
    for key in [
        "message_id",
        "role",
        "kind",
        "prompt_number",
        "timestamp",
        "text",
        "tool_name",
        "tool_input",
        "tool_output",
    ] {
        assert!(msgs[0].get(key).is_some(), "message lacks {key}");
    }
    // The sub-agent's messages are attached to the parent, inside the talk that spawned it.
    let sub: Vec<&Value> = msgs
        .iter()
        .filter(|m| m["agent_id"] == "a1b2c3d4e5f60718")
        .collect();
    assert_eq!(sub.len(), 4);
    assert!(
        sub.iter()
            .all(|m| m["prompt_number"] == 1 && m["sidechain"] == true)
    );
    let bash = msgs.iter().find(|m| m["message_id"] == "u-0002").unwrap();
    assert_eq!(bash["kind"], "tool_result");
    assert!(
        bash["tool_output"]
            .as_str()
            .unwrap()
            .starts_with("FAIL src/date.test.ts")
    );
    let call = msgs.iter().find(|m| m["tool_name"] == "Bash").unwrap();
    assert_eq!(call["tool_input"]["command"], "npm test -- date");
    // Usage counted once per API message.
    assert!(show["session"]["usage"]["output_tokens"].as_i64().unwrap() > 0);
    // A unique prefix works; the readable form prints the talks.
    let text = h.memex(&["sessions", "show", "7d2f4c1e"]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Fix timezone-dependent date tests") && text.contains("## [4] user"));
    let missing = h.memex(&["sessions", "show", "no-such-session"]);
    assert_eq!(missing.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("hint:"));
}

#[test]
fn deleted_sources_keep_their_messages() {
    let h = Home::with_fixtures();
    h.json(&["import", "--json"]);
    let before = h.json(&["status", "--json"]);
    std::fs::remove_file(
        h.path()
            .join(".claude/projects/-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl"),
    )
    .unwrap();
    h.json(&["import", "--json"]);
    let after = h.json(&["status", "--json"]);
    assert_eq!(before["messages"], after["messages"]);
    assert_eq!(after["source_files_gone"], 1);
    let kept = h.json(&[
        "search",
        "timezone",
        "--session",
        "7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c",
        "--json",
    ]);
    assert!(
        !search_hits(&kept).is_empty(),
        "a deleted file's messages are still found"
    );
}

#[test]
fn config_layers_and_bad_values() {
    let h = Home::empty();
    let cfg = h.path().join("memex.toml");
    std::fs::write(&cfg, "[store]\nredact = \"sometimes\"\n").unwrap();
    let out = h.memex(&["--config", cfg.to_str().unwrap(), "config"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("redact") && err.contains("hint:"), "{err}");
    std::fs::write(&cfg, "[import]\nthreads = 3\n").unwrap();
    let v = h.json(&["--config", cfg.to_str().unwrap(), "config", "--json"]);
    assert_eq!(v["settings"]["import"]["threads"], 3);
    assert_eq!(v["settings"]["store"]["redact"], true);
    let text = h.memex(&["config"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("[store]"));
    let missing = h.memex(&["--config", "/nonexistent/memex.toml", "status"]);
    assert_eq!(missing.status.code(), Some(2));
    // Sources from config replace the default roots.
    let elsewhere = h.path().join("elsewhere");
    let s = "44444444-2222-4333-8444-555555555555";
    std::fs::create_dir_all(elsewhere.join("-p")).unwrap();
    std::fs::write(
        elsewhere.join(format!("-p/{s}.jsonl")),
        format!(
            "{}\n",
            claude_prompt(s, "c-1", "/p", "configured roots work")
        ),
    )
    .unwrap();
    std::fs::write(
        &cfg,
        format!("[sources]\nclaude = [\"{}\"]\n", elsewhere.display()),
    )
    .unwrap();
    let v = h.json(&["--config", cfg.to_str().unwrap(), "import", "--json"]);
    assert_eq!(v["messages"], 1);
}

/// Lossless: the records a session's files hold come back byte for byte (minus the lines that
/// were reported bad), invalid UTF-8 included, sub-agent files under their parent.
#[test]
fn raw_records_round_trip_byte_for_byte() {
    let h = Home::with_fixtures();
    h.json(&["import", "--json"]);
    let lines = |rel: &str| -> Vec<Vec<u8>> {
        std::fs::read(h.path().join(".claude/projects").join(rel))
            .unwrap()
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let raw = |id: &str| -> Vec<Vec<u8>> {
        let out = h.memex(&["sessions", "show", id, "--raw"]);
        assert!(out.status.success());
        out.stdout
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    };
    let mut want = lines("-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c.jsonl");
    want.extend(lines("-home-dev-demo-app/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c/subagents/agent-a1b2c3d4e5f60718.jsonl"));
    let mut got = raw("7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c");
    want.sort();
    got.sort();
    assert_eq!(got, want);
    // Lines 3 and 4 of this file are bad and reported; the others, invalid UTF-8 and all, stay.
    let bad = lines("-home-dev-demo-app/5c4b3a29-1807-4f6e-9d5c-4b3a29180706.jsonl");
    let got = raw("5c4b3a29-1807-4f6e-9d5c-4b3a29180706");
    assert_eq!(got, vec![bad[0].clone(), bad[1].clone(), bad[4].clone()]);
    assert!(got[1].contains(&0xe9));
}

/// Among messages that contain every word, the ones where the words matter most come first.
#[test]
fn search_ranks_by_relevance_and_requires_every_word() {
    let h = Home::empty();
    let s = "66666666-2222-4333-8444-555555555555";
    let filler = "the build ran the usual steps and printed the usual lines ".repeat(30);
    h.write_claude(
        "/home/dev/app",
        s,
        &[
            claude_prompt(
                s,
                "long",
                "/home/dev/app",
                &format!("{filler} pelican {filler}"),
            ),
            claude_answer(
                s,
                "dense",
                "/home/dev/app",
                "pelican pelican: the pelican parser fails on pelican input",
            ),
            claude_prompt(s, "other", "/home/dev/app", "flamingo parser notes"),
        ],
    );
    h.json(&["import", "--json"]);
    let v = h.json(&["search", "pelican", "--json"]);
    let ids: Vec<&str> = search_hits(&v)
        .iter()
        .map(|x| x["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["dense", "long"]);
    let scores: Vec<f64> = search_hits(&v)
        .iter()
        .map(|x| x["score"].as_f64().unwrap())
        .collect();
    assert!(scores[0] > scores[1], "{scores:?}");
    // Rows with every word first; then rows with some, each naming the words it has.
    let both = h.json(&["search", "pelican parser", "--json"]);
    let hits = search_hits(&both);
    let ids: Vec<&str> = hits
        .iter()
        .map(|x| x["message_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids[0], "dense", "{both}");
    assert_eq!(hits[0]["terms"], json!(["pelican", "parser"]));
    let mut rest = ids[1..].to_vec();
    rest.sort();
    assert_eq!(rest, ["long", "other"]);
    assert_eq!(hits[1]["terms"].as_array().unwrap().len(), 1);
}

/// A question in words finds what it is about (no false absence), in the words side alone; and
/// when filters are why nothing came back, the answer says so instead of "never happened".
#[test]
fn a_question_finds_its_answer_by_its_words_and_empty_answers_say_why() {
    let h = Home::empty();
    let s = "77777777-2222-4333-8444-555555555555";
    h.write_claude(
        "/home/dev/app",
        s,
        &[
            claude_prompt(
                s,
                "p1",
                "/home/dev/app",
                "the flaky checkout test fails on CI again",
            ),
            claude_answer(
                s,
                "a1",
                "/home/dev/app",
                "Fixed: the checkout test waited on a timer; it now awaits the payment mock.",
            ),
            claude_prompt(s, "p2", "/home/dev/app", "修复登录页面的验证码刷新问题"),
        ],
    );
    h.json(&["import", "--json"]);
    // No message has "how", "did", "we" and "bisect": every word required would answer nothing.
    let v = h.json(&[
        "search",
        "how did we bisect the flaky checkout test?",
        "--mode",
        "fts",
        "--json",
    ]);
    let hits = search_hits(&v);
    assert!(!hits.is_empty(), "{v}");
    assert_eq!(hits[0]["message_id"], "p1", "{v}");
    assert_eq!(
        hits[0]["terms"],
        json!(["flaky", "checkout", "test"]),
        "{v}"
    );
    // The answer says that no row has all of it, and which word is nowhere.
    let n = v["notice"].as_str().unwrap();
    assert!(n.contains("no result has every word"), "{n}");
    assert!(n.contains("nowhere in the archive: `bisect`"), "{n}");
    assert!(hits.iter().any(|x| x["message_id"] == "a1"));
    // A bare word finds its other forms: "fix" is in the answer as "Fixed", "tests" as "test".
    let v = h.json(&[
        "search",
        "how did we fix the checkout tests?",
        "--mode",
        "fts",
        "--json",
    ]);
    let hits = search_hits(&v);
    assert_eq!(hits[0]["message_id"], "a1", "{v}");
    assert_eq!(hits[0]["terms"], json!(["fix", "checkout", "tests"]), "{v}");
    assert!(v["notice"].is_null(), "{v}");
    // Quoted, a word is only itself.
    let v = h.json(&["search", "\"fix\"", "--mode", "fts", "--json"]);
    assert!(search_hits(&v).is_empty(), "{v}");
    // Within a filter too (partial matches looked for among the filter's rows).
    let v = h.json(&[
        "search",
        "how did we bisect the flaky checkout test?",
        "--project",
        "/home/dev/app",
        "--mode",
        "fts",
        "--json",
    ]);
    assert_eq!(search_hits(&v)[0]["message_id"], "p1", "{v}");
    // A question about what never came up, though one of its words did: a row needs at least
    // half of the words to be an answer, and the answer says why it is empty.
    let v = h.json(&[
        "search",
        "how did we pair the bluetooth kiosk at checkout?",
        "--mode",
        "fts",
        "--json",
    ]);
    assert!(search_hits(&v).is_empty(), "{v}");
    assert_eq!(
        v["notice"],
        "no row has at least 2 of the 4 words of the query together; in the archive apart: \
         `checkout`; nowhere in the archive: `pair`, `bluetooth`, `kiosk`",
        "{v}"
    );
    // A question none of whose words ever came up says so too.
    let v = h.json(&[
        "search",
        "how did we pair the bluetooth kiosk?",
        "--mode",
        "fts",
        "--json",
    ]);
    assert!(search_hits(&v).is_empty(), "{v}");
    assert_eq!(
        v["notice"], "no word of the query is in the archive: `pair`, `bluetooth`, `kiosk`",
        "{v}"
    );
    // A Chinese question: its question words dropped, its words found.
    let v = h.json(&[
        "search",
        "我们之前怎么修复验证码的",
        "--mode",
        "fts",
        "--json",
    ]);
    assert_eq!(search_hits(&v)[0]["message_id"], "p2", "{v}");
    // Filters that hide the matches, or match no session at all, are named.
    let v = h.json(&[
        "search",
        "checkout",
        "--project",
        "/home/dev/elsewhere",
        "--mode",
        "fts",
        "--json",
    ]);
    assert!(search_hits(&v).is_empty());
    assert!(
        v["notice"]
            .as_str()
            .unwrap()
            .contains("no session of project `/home/dev/elsewhere`"),
        "{v}"
    );
    let v = h.json(&[
        "search", "checkout", "--agent", "codex", "--mode", "fts", "--json",
    ]);
    assert!(
        v["notice"].as_str().unwrap().contains("agent `codex`"),
        "{v}"
    );
    let v = h.json(&[
        "search",
        "checkout",
        "--until",
        "2020-01-01",
        "--mode",
        "fts",
        "--json",
    ]);
    assert!(
        v["notice"]
            .as_str()
            .unwrap()
            .contains("matches outside them"),
        "{v}"
    );
    // Nothing anywhere: no notice pretends otherwise.
    let v = h.json(&[
        "search", "zeppelin", "--agent", "claude", "--mode", "fts", "--json",
    ]);
    assert!(v["notice"].is_null(), "{v}");
    let out = h.memex(&[
        "search",
        "checkout",
        "--until",
        "2020-01-01",
        "--mode",
        "fts",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("matches outside them"));
}

/// The verdict at the end of a long log is found by its words; an archive indexed before this
/// (head only) catches up with `memex reindex --words`.
#[test]
fn the_end_of_a_long_text_is_found_and_old_archives_catch_up() {
    let h = Home::empty();
    let s = "88888888-2222-4333-8444-555555555555";
    let log = format!(
        "cargo test\n{}test result: FAILED. quuxotic_failure in checkout::pay",
        "test checkout::step ... ok\n".repeat(50_000)
    );
    assert!(log.len() > 1 << 20);
    h.write_claude(
        "/home/dev/app",
        s,
        &[
            claude_prompt(s, "p1", "/home/dev/app", "run the tests"),
            claude_answer(s, "a1", "/home/dev/app", &log),
        ],
    );
    h.json(&["import", "--json"]);
    let find = || {
        let v = h.json(&["search", "quuxotic_failure", "--mode", "fts", "--json"]);
        search_hits(&v)
            .iter()
            .map(|x| x["message_id"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(find(), ["a1"]);
    // As an archive written before: only the first MiB indexed.
    let c = common::db(&h.data_dir());
    let id: i64 = c
        .query_row("SELECT id FROM messages WHERE message_id = 'a1'", [], |r| {
            r.get(0)
        })
        .unwrap();
    c.execute("DELETE FROM messages_fts WHERE rowid = ?1", [id])
        .unwrap();
    c.execute(
        "INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)",
        rusqlite::params![id, &log[..1 << 20]],
    )
    .unwrap();
    drop(c);
    assert!(find().is_empty());
    let out = h.memex(&["reindex", "--words"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("of 1 messages"),
        "{out:?}"
    );
    assert_eq!(find(), ["a1"]);
    // Asked to rebuild nothing: the flags are named.
    let out = h.memex(&["reindex"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--words"));
}

/// A Chinese word written against Latin text or split by punctuation is found, quoted or not
/// (the index splits CJK runs there).
#[test]
fn cjk_next_to_latin_or_punctuation_is_found() {
    let h = Home::empty();
    let s = "99999999-2222-4333-8444-555555555555";
    h.write_claude(
        "/home/dev/app",
        s,
        &[
            claude_prompt(s, "m1", "/home/dev/app", "用 修复redis缓存 解决了超时"),
            claude_prompt(s, "m2", "/home/dev/app", "登录失败，验证码错误"),
        ],
    );
    h.json(&["import", "--json"]);
    for (q, id) in [
        ("修复redis缓存 超时", "m1"),
        ("\"修复redis缓存\"", "m1"),
        ("登录失败，验证码错误", "m2"),
        ("\"失败，验证码\"", "m2"),
    ] {
        let v = h.json(&["search", q, "--mode", "fts", "--json"]);
        let hits = search_hits(&v);
        assert!(!hits.is_empty(), "{q}: {v}");
        assert_eq!(hits[0]["message_id"], id, "{q}: {v}");
        assert!(v["notice"].is_null(), "{q}: every word is there: {v}");
    }
}
