//! End-to-end tests of `memex serve`: the real binary in a temporary HOME, on an ephemeral port,
//! observed through its HTTP API while transcripts are appended, created, rewritten and
//! deleted; and killed with SIGKILL at random moments.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn now_iso() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn append(path: &Path, lines: &[Value]) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

fn live_prompt(session: &str, uuid: &str, text: &str) -> Value {
    json!({
        "type": "user", "uuid": uuid, "sessionId": session, "cwd": "/work/live",
        "timestamp": now_iso(), "message": {"role": "user", "content": text}
    })
}

fn hits(s: &Server, q: &str) -> usize {
    s.ok(&format!("/api/search?q={q}&limit=100"))["results"]
        .as_array()
        .unwrap()
        .len()
}

/// Every stored message of an archive, in a comparable form.
fn archive_rows(data_dir: &Path) -> Vec<(String, String, String, String, i64, String)> {
    let conn = memex::store::connect(&memex::store::db_path(data_dir)).unwrap();
    let mut st = conn
        .prepare(
            "SELECT s.agent, s.session_id, m.message_id, m.kind, m.prompt_number,
                    COALESCE(m.text, memex_unzstd(m.text_z), '')
             FROM messages m JOIN sessions s ON s.id = m.session_pk
             ORDER BY 1, 2, 3",
        )
        .unwrap();
    st.query_map([], |r| {
        Ok((
            r.get(0)?,
            r.get(1)?,
            r.get(2)?,
            r.get(3)?,
            r.get(4)?,
            r.get(5)?,
        ))
    })
    .unwrap()
    .collect::<Result<_, _>>()
    .unwrap()
}

/// The message ids the full-text index finds for a word.
fn fts_ids(data_dir: &Path, word: &str) -> Vec<String> {
    let conn = memex::store::connect(&memex::store::db_path(data_dir)).unwrap();
    let mut st = conn
        .prepare(
            "SELECT m.message_id FROM messages_fts f JOIN messages m ON m.id = f.rowid
             WHERE messages_fts MATCH ?1 ORDER BY 1",
        )
        .unwrap();
    st.query_map([word], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[test]
fn serve_backfills_then_follows_appends_new_folders_rewrites_and_deletions() {
    let h = Home::with_fixtures();
    // Codex is "installed later": its folder does not exist when the service starts.
    let codex_fixtures = h.path().join("codex-later");
    std::fs::rename(h.path().join(".codex"), &codex_fixtures).unwrap();

    let s = h.serve(&[]);
    s.wait_watching();
    let health = s.ok("/api/health");
    assert_eq!(health["status"], "ok");
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"));
    let roots = health["watcher"]["roots"].as_array().unwrap();
    let state_of = |path: &str| {
        roots
            .iter()
            .find(|r| r["path"].as_str().unwrap().ends_with(path))
            .map(|r| r["state"].clone())
    };
    assert_eq!(state_of(".claude/projects"), Some(json!("watching")));
    assert_eq!(state_of(".codex/sessions"), Some(json!("waiting")));

    // The backfill equals a one-shot import of the same files.
    let reference = Home::with_fixtures();
    std::fs::remove_dir_all(reference.path().join(".codex")).unwrap();
    let imported = reference.json(&["import", "--json"]);
    let stats = s.ok("/api/stats");
    assert_eq!(stats["messages"], imported["messages"], "{stats}");
    assert!(stats["messages"].as_u64().unwrap() > 100);

    // An append to an existing session is searchable shortly after.
    let session = "7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c";
    let file = h
        .path()
        .join(".claude/projects/-home-dev-demo-app")
        .join(format!("{session}.jsonl"));
    append(
        &file,
        &[live_prompt(session, "live-1", "quokkafish migration plan")],
    );
    s.wait_for(10, "the appended prompt", |s| {
        (hits(s, "quokkafish") == 1).then_some(())
    });

    // A new project folder with a new session.
    let new_dir = h.path().join(".claude/projects/-work-brand-new");
    std::fs::create_dir_all(&new_dir).unwrap();
    let new_session = "0a0a0a0a-1111-4222-8333-444444444444";
    append(
        &new_dir.join(format!("{new_session}.jsonl")),
        &[
            live_prompt(new_session, "n1", "platypusdelta first prompt"),
            live_prompt(new_session, "n2", "platypusdelta second prompt"),
        ],
    );
    s.wait_for(10, "the new session", |s| {
        (hits(s, "platypusdelta") == 2).then_some(())
    });

    // Codex appears: its root is picked up with everything already in it.
    std::fs::rename(&codex_fixtures, h.path().join(".codex")).unwrap();
    s.wait_for(10, "the codex sessions", |s| {
        let st = s.ok("/api/stats");
        st["agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["agent"] == "codex" && a["messages"].as_u64().unwrap() > 0)
            .then_some(())
    });
    let roots = s.ok("/api/health")["watcher"]["roots"].clone();
    assert!(
        roots.as_array().unwrap().iter().any(|r| r["path"]
            .as_str()
            .unwrap()
            .ends_with(".codex/sessions")
            && r["state"] == "watching"),
        "{roots}"
    );

    // Every Codex file is in (they arrive over several batches): the archive now holds what a
    // one-shot import of all the fixtures holds, plus the three live prompts.
    let everything = Home::with_fixtures().json(&["import", "--json"])["messages"]
        .as_u64()
        .unwrap();
    s.wait_for(10, "all of the codex sessions", |s| {
        (s.ok("/api/stats")["messages"].as_u64() == Some(everything + 3)).then_some(())
    });

    // A rewritten file (same records, rewritten in place by an editor) adds nothing.
    let before = s.ok("/api/stats")["messages"].clone();
    let body = std::fs::read(&file).unwrap();
    std::fs::write(&file, &body[..body.len() / 2]).unwrap();
    std::fs::write(&file, &body).unwrap();
    append(
        &file,
        &[live_prompt(session, "live-2", "wombatkernel after rewrite")],
    );
    s.wait_for(10, "the prompt after the rewrite", |s| {
        (hits(s, "wombatkernel") == 1).then_some(())
    });
    let after = s.ok("/api/stats")["messages"].clone();
    assert_eq!(after.as_u64().unwrap(), before.as_u64().unwrap() + 1);
    assert_eq!(hits(&s, "quokkafish"), 1, "no duplicate after the rewrite");

    // A deleted transcript keeps its messages; status names the session.
    std::fs::remove_file(&file).unwrap();
    s.wait_for(10, "the deletion", |s| {
        (s.ok("/api/stats")["source_files_gone"] == 1).then_some(())
    });
    assert_eq!(hits(&s, "quokkafish"), 1);
    assert_eq!(s.ok("/api/stats")["messages"], after);
    let status = h.json(&["status", "--json"]);
    assert_eq!(status["sessions_with_source_gone"], 1, "{status}");
    assert_eq!(status["sessions_source_gone"][0]["session_id"], session);
    assert!(
        status["service"]["running"]
            .as_str()
            .unwrap()
            .contains(&format!("pid {}", s.pid())),
        "{status}"
    );

    let lag = s.ok("/api/stats")["ingest"]["lag"].clone();
    assert!(lag["samples"].as_u64().unwrap() >= 3, "{lag}");

    let (code, took) = s.terminate();
    assert!(code.success(), "exit status {code:?}");
    assert!(took < Duration::from_secs(5), "stopped in {took:?}");
    let logs: Vec<PathBuf> = std::fs::read_dir(h.data_dir().join("logs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(logs.len(), 1);
    let log = std::fs::read_to_string(&logs[0]).unwrap();
    assert!(log.contains("backfill done"), "{log}");
}

#[test]
fn idle_sessions_get_their_event_once_and_status_shows_it() {
    let h = Home::with_fixtures();
    let s = h.serve(&[]);
    s.wait_watching();
    // The fixtures are old: their sessions are idle, and each gets its event.
    let status = s.wait_for(10, "the idle events", |_| {
        let st = h.json(&["status", "--json"]);
        (st["activity"]["idle_event_pending"] == 0).then_some(st)
    });
    let sent = status["activity"]["idle_event_sent"].as_u64().unwrap();
    assert!(sent > 10, "{status}");
    let stats = s.ok("/api/stats");
    assert_eq!(stats["sessions_tracker"]["idle_events_since_start"], sent);
    // The tracker also counts sessions whose messages carry no time as active from when they
    // arrived; the archive alone cannot know that, so compare changes, not counts.
    let active = stats["sessions_tracker"]["active_sessions"]
        .as_u64()
        .unwrap();
    let db_active = status["activity"]["active"].as_u64().unwrap();
    // A session active now is tracked as active, and gets no idle event yet.
    h.write_claude(
        "/work/live",
        "0b0b0b0b-1111-4222-8333-444444444444",
        &[live_prompt(
            "0b0b0b0b-1111-4222-8333-444444444444",
            "a1",
            "fresh activity",
        )],
    );
    s.wait_for(10, "the active session", |s| {
        (s.ok("/api/stats")["sessions_tracker"]["active_sessions"] == active + 1).then_some(())
    });
    let status = h.json(&["status", "--json"]);
    assert_eq!(status["activity"]["active"], db_active + 1, "{status}");
    assert_eq!(status["activity"]["idle_event_sent"], sent, "{status}");
    let (code, _) = s.terminate();
    assert!(code.success());
    // A restart sends no event twice.
    let s = h.serve(&[]);
    s.wait_watching();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        s.ok("/api/stats")["sessions_tracker"]["idle_events_since_start"],
        0
    );
}

#[test]
fn a_burst_of_appends_is_one_ingest_and_a_folder_moved_away_keeps_its_messages() {
    let h = Home::with_fixtures();
    let s = h.serve(&[("MEMEX_WATCH_DEBOUNCE_MS", "400")]);
    s.wait_watching();
    let ingests = |s: &Server| {
        s.ok("/api/stats")["ingest"]["since_start"]["ingests"]
            .as_u64()
            .unwrap()
    };
    let before = ingests(&s);
    let dir = h.path().join(".claude/projects/-work-burst");
    std::fs::create_dir_all(&dir).unwrap();
    s.wait_for(10, "the new folder's scan", |s| {
        (ingests(s) > before).then_some(())
    });
    let before = ingests(&s);
    let session = "0d0d0d0d-1111-4222-8333-444444444444";
    let file = dir.join(format!("{session}.jsonl"));
    for i in 0..100 {
        append(
            &file,
            &[live_prompt(
                session,
                &format!("b{i}"),
                &format!("burstword number {i}"),
            )],
        );
    }
    s.wait_for(10, "the burst", |s| {
        (hits(s, "burstword") == 100).then_some(())
    });
    let used = ingests(&s) - before;
    assert!(
        used <= 2,
        "100 appends in one debounce window took {used} ingests"
    );

    // The whole project folder is moved out of the watched tree: its messages stay.
    let messages = s.ok("/api/stats")["messages"].clone();
    std::fs::rename(&dir, h.path().join("moved-away")).unwrap();
    s.wait_for(10, "the folder's file marked gone", |s| {
        (s.ok("/api/stats")["source_files_gone"] == 1).then_some(())
    });
    assert_eq!(s.ok("/api/stats")["messages"], messages);
    assert_eq!(hits(&s, "burstword"), 100);
    let (code, took) = s.signal(libc::SIGINT);
    assert!(code.success(), "SIGINT: {code:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn status_warns_about_claude_purging_transcripts() {
    let h = Home::with_fixtures();
    let text = String::from_utf8(h.memex(&["status"]).stdout).unwrap();
    assert!(
        text.contains("deletes transcripts older than 30 days (the default"),
        "{text}"
    );
    std::fs::write(
        h.path().join(".claude/settings.json"),
        r#"{"cleanupPeriodDays": 7, "model": "opus"}"#,
    )
    .unwrap();
    let text = String::from_utf8(h.memex(&["status"]).stdout).unwrap();
    assert!(
        text.contains("older than 7 days (cleanupPeriodDays in"),
        "{text}"
    );
    assert!(text.contains("Memex keeps every message"), "{text}");
    let v = h.json(&["status", "--json"]);
    assert_eq!(v["claude_cleanup"][0]["cleanup_period_days"], 7);
    assert_eq!(v["service"]["running"], Value::Null);
    std::fs::write(
        h.path().join(".claude/settings.json"),
        r#"{"cleanupPeriodDays": 100000}"#,
    )
    .unwrap();
    let text = String::from_utf8(h.memex(&["status"]).stdout).unwrap();
    assert!(!text.contains("warning: Claude Code"), "{text}");
}

#[test]
fn one_service_per_data_directory() {
    let h = Home::with_fixtures();
    let s = h.serve(&[]);
    let Err((code, log)) = h.try_serve(&[]) else {
        panic!("a second service started");
    };
    assert_eq!(code.code(), Some(3), "{log}");
    assert!(log.contains(&format!("pid {}", s.pid())), "{log}");
    let out = h.memex(&["import"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("pid {}", s.pid())));
    // Readers are welcome while it runs.
    let out = h.memex(&["search", "test"]);
    assert!(out.status.success());
}

#[test]
fn polling_mode_follows_appends() {
    let h = Home::with_fixtures();
    let s = h.serve(&[
        ("MEMEX_WATCH_POLL", "true"),
        ("MEMEX_WATCH_POLL_INTERVAL_MS", "200"),
    ]);
    s.wait_watching();
    assert_eq!(s.ok("/api/health")["watcher"]["mode"], "poll");
    let session = "0c0c0c0c-1111-4222-8333-444444444444";
    h.write_claude(
        "/work/poll",
        session,
        &[live_prompt(session, "p1", "narwhalpolling works")],
    );
    s.wait_for(10, "the polled file", |s| {
        (hits(s, "narwhalpolling") == 1).then_some(())
    });
}

#[test]
fn a_common_words_best_message_is_found_however_old_once_the_service_has_ranked_it() {
    // 600 messages that all say `deploy`: the oldest says little else, the newer ones say it
    // once in a long text. A search reads the newest 300 matches; the service's champion lists
    // bring the best of all of them.
    let h = Home::empty();
    let session = "0d0d0d0d-1111-4222-8333-444444444444";
    let filler = "the build ran the linter over every crate then packed the image and pushed \
                  it to the registry where the staging cluster pulled it later";
    let mut lines = vec![claude_prompt(
        session,
        "p0",
        "/work/deploy",
        "deploy deploy: the deploy failed",
    )];
    for i in 1..600 {
        let text = format!("{filler} before the deploy of change {i}, {filler}");
        lines.push(claude_answer(
            session,
            &format!("a{i}"),
            "/work/deploy",
            &text,
        ));
    }
    h.write_claude("/work/deploy", session, &lines);
    let s = h.serve(&[]);
    s.wait_watching();
    let top = s.wait_for(30, "the oldest message at the top", |s| {
        let r = s.ok("/api/search?q=deploy&mode=fts&limit=3");
        let first = r["results"][0].clone();
        first["snippet"]
            .as_str()
            .is_some_and(|t| t.contains("failed"))
            .then_some(r)
    });
    assert_eq!(top["results"][0]["terms"], json!(["deploy"]), "{top}");
    assert_eq!(top["results"].as_array().unwrap().len(), 3, "{top}");
    assert!(s.log().contains("champion lists refreshed"), "{}", s.log());
}

#[test]
fn bad_requests_get_a_clear_json_error_and_the_right_status() {
    let h = Home::with_fixtures();
    let s = h.serve(&[]);
    s.wait_watching();
    let cases: &[(&str, u16, &str, &str)] = &[
        ("/api/search", 400, "bad_parameter", "`q` is required"),
        ("/api/search?q=", 400, "bad_parameter", "`q` is required"),
        ("/api/search?q=x&limit=0", 400, "bad_parameter", "`limit`"),
        ("/api/search?q=x&limit=abc", 400, "bad_parameter", "`limit`"),
        ("/api/search?q=x&limit=-5", 400, "bad_parameter", "`limit`"),
        (
            "/api/search?q=x&agent=windsurf",
            400,
            "bad_parameter",
            "`agent`",
        ),
        (
            "/api/search?q=x&since=yesterday-ish",
            400,
            "bad_parameter",
            "`since`",
        ),
        (
            "/api/search?q=x&until=2026-13-45",
            400,
            "bad_parameter",
            "`until`",
        ),
        (
            "/api/search?q=x&level=vectors",
            400,
            "bad_parameter",
            "`level`",
        ),
        (
            "/api/search?q=x&colour=red",
            400,
            "bad_parameter",
            "unknown parameter `colour`",
        ),
        ("/api/sessions?limit=5000", 400, "bad_parameter", "`limit`"),
        ("/api/sessions?offset=x", 400, "bad_parameter", "`offset`"),
        (
            "/api/sessions/does-not-exist",
            404,
            "session_not_found",
            "does-not-exist",
        ),
        (
            "/api/sessions/7d2f4c1e-5b6a-4f3e-9c8d-2a1b0e9f8d7c?format=pdf",
            400,
            "bad_parameter",
            "`format`",
        ),
        ("/api/nothing-here", 404, "not_found", "no such endpoint"),
        (
            "/api/stats?verbose=1",
            400,
            "bad_parameter",
            "unknown parameter `verbose`",
        ),
    ];
    for (path, status, code, message) in cases {
        let (got, body) = s.get(path);
        assert_eq!(got, *status, "{path}: {body}");
        assert_eq!(body["error"]["code"], *code, "{path}: {body}");
        let m = body["error"]["message"].as_str().unwrap();
        assert!(m.contains(message), "{path}: {m}");
    }
    let long = "a".repeat(3000);
    let (got, body) = s.get(&format!("/api/search?q={long}"));
    assert_eq!(
        (got, body["error"]["code"].as_str()),
        (400, Some("bad_parameter"))
    );
    // Queries no parser would like are still answered.
    for q in [
        "%22unbalanced",
        "NEAR(",
        "a%20OR",
        "*",
        "%E8%AE%A4%E8%AF%81",
        "%FF%FE",
    ] {
        let (got, body) = s.get(&format!("/api/search?q={q}"));
        assert_eq!(got, 200, "{q}: {body}");
    }
    // An oversized body is refused from its headers, before it is read.
    let mut conn = std::net::TcpStream::connect(&s.addr).unwrap();
    write!(
        conn,
        "POST /api/search HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{\"q\":",
        s.addr,
        s.token,
        2 << 20
    )
    .unwrap();
    let mut head = vec![0u8; 4096];
    let n = std::io::Read::read(&mut conn, &mut head).unwrap();
    let response = String::from_utf8_lossy(&head[..n]);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(
        response.contains(r#""code":"payload_too_large""#),
        "{response}"
    );
    let res = s.client().delete(s.url("/api/sessions")).send().unwrap();
    assert_eq!(res.status().as_u16(), 405);
    let body: Value = res.json().unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    // Valid requests, same contract as the CLI.
    let one = s.ok("/api/sessions?limit=1&agent=claude");
    let id = one["sessions"][0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let full = s.ok(&format!("/api/sessions/{id}?format=raw"));
    assert_eq!(full["session"]["session_id"], id.as_str());
    assert_eq!(
        full["messages"].as_array().unwrap().len() as u64,
        full["session"]["messages"].as_u64().unwrap()
    );
    let http = s.ok("/api/search?q=timezone&limit=3&agent=claude");
    let cli = h.json(&[
        "search", "timezone", "--limit", "3", "--agent", "claude", "--json",
    ]);
    assert_eq!(http, cli);
    // The service is still fine after all of that.
    assert_eq!(s.ok("/api/health")["status"], "ok");
}

#[test]
fn a_token_guards_the_api_and_is_required_off_loopback() {
    let h = Home::with_fixtures();
    let out = h.memex(&["serve", "--bind", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("without a token") && err.contains("MEMEX_API_TOKEN"),
        "{err}"
    );

    let token = "s3cret-token-of-24-chars-or-more";
    let s = h.serve(&[("MEMEX_API_TOKEN", token)]);
    // A client of its own, without the token the helper's client sends.
    let bare = reqwest::blocking::Client::new();
    let res = bare.get(s.url("/api/health")).send().unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let body: Value = res.json().unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let res = bare
        .get(s.url("/api/health"))
        .bearer_auth("wrong")
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 401);
    let res = bare
        .get(s.url("/api/health"))
        .bearer_auth(token)
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    // The configured token is the secret: no file is made.
    assert!(!s.data_dir.join("api-token").exists());
    // `memex config` never shows it.
    let mut c = h.command(&["config"]);
    let out = c.env("MEMEX_API_TOKEN", token).output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(!shown.contains(token) && shown.contains("(set)"), "{shown}");
}

/// Writes transcripts the way agents do, until told to stop: appends to Claude sessions and a
/// Codex rollout, new session files, and lines written in two pieces.
fn agent_writer(home: PathBuf, seed: u64, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) {
    let mut rng = Rng(seed | 1);
    let claude = home.join(".claude/projects/-work-kill");
    std::fs::create_dir_all(&claude).unwrap();
    let codex_dir = home.join(".codex/sessions/2026/11/29");
    std::fs::create_dir_all(&codex_dir).unwrap();
    let codex =
        codex_dir.join("rollout-2026-11-29T10-00-00-019eaaaa-0000-7000-8000-000000000001.jsonl");
    append(
        &codex,
        &[
            json!({"timestamp": now_iso(), "type": "session_meta", "payload": {
            "id": "019eaaaa-0000-7000-8000-000000000001", "timestamp": now_iso(),
            "cwd": "/work/kill", "originator": "codex_cli_rs", "cli_version": "0.135.0"}}),
        ],
    );
    let mut sessions: Vec<String> = Vec::new();
    let mut n = 0u64;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        n += 1;
        let text = format!(
            "killtest line {n} {}",
            "payload ".repeat(rng.below(40) as usize)
        );
        let (path, line) = match rng.below(10) {
            0 | 1 => {
                let role = if n.is_multiple_of(2) {
                    "user"
                } else {
                    "assistant"
                };
                let kind = if role == "user" {
                    "input_text"
                } else {
                    "output_text"
                };
                (
                    codex.clone(),
                    json!({"timestamp": now_iso(), "type": "response_item", "payload": {
                        "type": "message", "role": role, "content": [{"type": kind, "text": text}]}}),
                )
            }
            2 => {
                let sid = format!("{:08x}-1111-4222-8333-{:012x}", n, rng.below(1 << 40));
                sessions.push(sid.clone());
                (
                    claude.join(format!("{sid}.jsonl")),
                    live_prompt(&sid, &format!("u{n}"), &text),
                )
            }
            _ => {
                if sessions.is_empty() {
                    continue;
                }
                let sid = sessions[rng.below(sessions.len() as u64) as usize].clone();
                let line = if n.is_multiple_of(3) {
                    live_prompt(&sid, &format!("u{n}"), &text)
                } else {
                    json!({"type": "assistant", "uuid": format!("a{n}"), "sessionId": sid,
                        "cwd": "/work/kill", "timestamp": now_iso(),
                        "message": {"id": format!("msg_{n}"), "role": "assistant",
                            "model": "claude-opus-4-7",
                            "content": [{"type": "text", "text": text}],
                            "usage": {"input_tokens": 3, "output_tokens": 2}}})
                };
                (claude.join(format!("{sid}.jsonl")), line)
            }
        };
        let bytes = format!("{line}\n").into_bytes();
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&path)
            .unwrap();
        if rng.below(4) == 0 {
            // Half a line now, the rest a moment later, as a writer flushing mid-record does;
            // often the whole record with only its newline still to come.
            let cut = if rng.below(3) == 0 {
                bytes.len() - 1
            } else {
                1 + rng.below(bytes.len() as u64 - 1) as usize
            };
            f.write_all(&bytes[..cut]).unwrap();
            f.flush().unwrap();
            std::thread::sleep(Duration::from_millis(rng.below(5)));
            f.write_all(&bytes[cut..]).unwrap();
        } else {
            f.write_all(&bytes).unwrap();
        }
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
    }
}

#[test]
fn kill_9_at_random_moments_then_restart_equals_a_clean_import() {
    let h = Home::with_fixtures();
    let seed = std::env::var("MEMEX_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("kill -9 test seed: {seed} (replay with MEMEX_KILL_SEED={seed})");
    let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let home = h.path().to_owned();
        let stop = stop.clone();
        std::thread::spawn(move || agent_writer(home, seed, stop))
    };
    let kills = 20;
    for i in 0..kills {
        let s = h.serve(&[("MEMEX_LOG", "warn")]);
        // Some kills land during start-up and backfill, most while following appends.
        let wait = if i % 5 == 0 {
            rng.below(30)
        } else {
            rng.below(700)
        };
        std::thread::sleep(Duration::from_millis(wait));
        s.kill9();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();

    // What a clean import of the final files gives.
    let clean_dir = h.path().join("clean-import");
    let out = h.memex(&[
        "--data-dir",
        clean_dir.to_str().unwrap(),
        "import",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let expected = archive_rows(&clean_dir);
    assert!(
        expected.len() > 500,
        "the writer wrote too little: {}",
        expected.len()
    );

    // One more start catches up; then the two archives must be the same.
    let s = h.serve(&[]);
    let target = expected.len() as u64;
    s.wait_for(60, "the catch-up", |s| {
        (s.ok("/api/stats")["messages"].as_u64() == Some(target)).then_some(())
    });
    let (code, took) = s.terminate();
    assert!(
        code.success() && took < Duration::from_secs(5),
        "{code:?} {took:?}"
    );
    let got = archive_rows(&h.data_dir());
    if got != expected {
        let missing: Vec<_> = expected
            .iter()
            .filter(|r| !got.contains(r))
            .take(5)
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|r| !expected.contains(r))
            .take(5)
            .collect();
        panic!(
            "seed {seed}: archive differs from a clean import ({} vs {} rows)\nmissing: {missing:#?}\nextra: {extra:#?}",
            got.len(),
            expected.len()
        );
    }
    let indexed = fts_ids(&h.data_dir(), "killtest");
    assert_eq!(indexed.len(), fts_ids(&clean_dir, "killtest").len());
    assert_eq!(indexed, fts_ids(&clean_dir, "killtest"));
}
