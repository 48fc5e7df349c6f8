//! End-to-end tests of the compact layers: the real `memex` binary on the fixtures with the
//! heuristic provider, the CLI and HTTP interfaces, a kill -9 in the middle of the queue, and a
//! provider outage, with a local server speaking OpenAI's wire format standing in for an LLM.

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};

fn tool_use(session: &str, uuid: &str, id: &str, name: &str, input: Value) -> Value {
    json!({"type": "assistant", "uuid": uuid, "sessionId": session, "cwd": "/work/app",
        "timestamp": "2026-06-05T10:00:01.000Z",
        "message": {"id": format!("msg_{uuid}"), "role": "assistant", "model": "claude-opus-4-7",
            "content": [{"type": "tool_use", "id": id, "name": name, "input": input}]}})
}

fn tool_result(session: &str, uuid: &str, id: &str, output: &str) -> Value {
    json!({"type": "user", "uuid": uuid, "sessionId": session, "cwd": "/work/app",
        "timestamp": "2026-06-05T10:00:02.000Z",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]}})
}

/// A session whose tool calls exercise pruning and merging, and a Chinese session.
fn write_sessions(h: &Home) -> (String, String) {
    let s = "1a1a1a1a-1111-4222-8333-444444444444";
    let mut lines = vec![claude_prompt(
        s,
        "p1",
        "/work/app",
        "fix the failing date test in src/date.ts",
    )];
    let calls: &[(&str, Value, &str)] = &[
        (
            "Read",
            json!({"file_path": "/work/app/src/a.ts"}),
            "export const a = 1",
        ),
        (
            "Read",
            json!({"file_path": "/work/app/src/b.ts"}),
            "export const b = 2",
        ),
        (
            "Read",
            json!({"file_path": "/work/app/src/date.ts"}),
            "export function parse() {}",
        ),
        ("Bash", json!({"command": "true"}), ""),
        (
            "Edit",
            json!({"file_path": "/work/app/src/date.ts", "old_string": "a", "new_string": "b"}),
            "The file has been updated",
        ),
        ("Grep", json!({"pattern": "parse"}), "src/date.ts"),
        (
            "Glob",
            json!({"pattern": "**/*.test.ts"}),
            "src/date.test.ts",
        ),
    ];
    for (i, (name, input, out)) in calls.iter().enumerate() {
        let id = format!("toolu_{i}");
        lines.push(tool_use(s, &format!("c{i}"), &id, name, input.clone()));
        lines.push(tool_result(s, &format!("r{i}"), &id, out));
    }
    lines.push(claude_answer(
        s,
        "a1",
        "/work/app",
        "Fixed the timezone bug in parse. All tests pass.",
    ));
    lines.push(claude_prompt(
        s,
        "p2",
        "/work/app",
        "now add a changelog entry",
    ));
    lines.push(claude_answer(s, "a2", "/work/app", "Added the entry."));
    h.write_claude("/work/app", s, &lines);

    let zh = "2b2b2b2b-1111-4222-8333-444444444444";
    h.write_claude(
        "/work/zh",
        zh,
        &[
            claude_prompt(
                zh,
                "z1",
                "/work/zh",
                "请帮我修复登录页面的认证错误，用户无法登录",
            ),
            claude_answer(
                zh,
                "z2",
                "/work/zh",
                "我已经修复了认证中间件里的令牌校验。现在用户可以正常登录。",
            ),
            claude_prompt(zh, "z3", "/work/zh", "再加一个单元测试覆盖这个问题"),
            claude_answer(zh, "z4", "/work/zh", "已添加单元测试，全部通过。"),
        ],
    );
    (s.to_owned(), zh.to_owned())
}

fn has_cjk(s: &str) -> bool {
    s.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c))
}

#[test]
fn heuristic_layers_cover_every_prompt_and_follow_the_rules() {
    let h = Home::with_fixtures();
    let (s, zh) = write_sessions(&h);
    h.json(&["import", "--json"]);
    let out = h.memex(&["compact", "trigger"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conn = db(&h.data_dir());

    // Every real (active) prompt has its L2; every session with prompts (all idle: the
    // fixtures are old) has an L3 covering its last talk; all written by the heuristic.
    assert_eq!(
        count(&conn, "SELECT COUNT(*) FROM messages m WHERE m.kind = 'user_prompt' AND m.active = 1
           AND NOT EXISTS (SELECT 1 FROM talk_summaries t WHERE t.session_pk = m.session_pk AND t.prompt_number = m.prompt_number)"),
        0
    );
    assert!(count(&conn, "SELECT COUNT(*) FROM talk_summaries") > 20);
    assert_eq!(
        count(&conn, "SELECT COUNT(*) FROM sessions s WHERE s.prompt_count > 0 AND NOT EXISTS
           (SELECT 1 FROM session_summaries x WHERE x.session_pk = s.id
            AND x.talks_covered = (SELECT MAX(prompt_number) FROM talk_summaries t WHERE t.session_pk = s.id))"),
        0
    );
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM talk_summaries WHERE provider != 'heuristic' OR tokens_input != 0"
        ),
        0
    );
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM compact_jobs WHERE state != 'done'"
        ),
        0
    );

    // L1 on the crafted session: three reads merged, the empty Bash pruned, the Edit alone,
    // two searches kept apart (below merge_threshold 3).
    let v = h.json(&["sessions", "show", &s, "--format", "summary", "--json"]);
    let obs = v["observations"].as_array().unwrap();
    let talk1: Vec<&Value> = obs.iter().filter(|o| o["prompt_number"] == 1).collect();
    let shape: Vec<(String, i64)> = talk1
        .iter()
        .map(|o| {
            (
                o["tool_name"].as_str().unwrap().to_owned(),
                o["call_count"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("Read".into(), 3),
            ("Edit".into(), 1),
            ("Grep".into(), 1),
            ("Glob".into(), 1)
        ]
    );
    assert_eq!(
        talk1[0]["files_read"],
        json!([
            "/work/app/src/a.ts",
            "/work/app/src/b.ts",
            "/work/app/src/date.ts"
        ])
    );
    assert_eq!(talk1[1]["files_modified"], json!(["/work/app/src/date.ts"]));
    assert_eq!(talk1[1]["type"], "bugfix", "an edit for a 'fix' request");
    assert_eq!(talk1[0]["type"], "discovery");
    for o in obs {
        assert!(!o["title"].as_str().unwrap().is_empty());
        assert_eq!(o["provider"], "heuristic");
    }
    // The summary view has the documented shape.
    let ss = &v["session_summary"];
    for k in [
        "summary",
        "key_points",
        "files_involved",
        "technologies",
        "provider",
        "model",
        "prompt_version",
        "tokens_input",
        "tokens_output",
        "updated_at",
    ] {
        assert!(ss.get(k).is_some(), "session_summary.{k} missing: {ss}");
    }
    assert_eq!(ss["technologies"], json!(["TypeScript"]));
    let talks = v["talks"].as_array().unwrap();
    assert_eq!(talks.len(), 2);
    assert!(
        talks[0]["completed"]
            .as_str()
            .unwrap()
            .starts_with("Fixed the timezone bug")
    );
    assert_eq!(talks[0]["files_involved"][0], "/work/app/src/date.ts");

    // A Chinese session gets Chinese summaries.
    let v = h.json(&["sessions", "show", &zh, "--format", "summary", "--json"]);
    assert!(
        has_cjk(v["session_summary"]["summary"].as_str().unwrap()),
        "{v}"
    );
    for t in v["talks"].as_array().unwrap() {
        assert!(has_cjk(t["summary"].as_str().unwrap()), "{t}");
    }

    // The layers are searchable, alone and fused with raw.
    let hits = h.json(&["search", "认证", "--level", "talks", "--json"]);
    assert_eq!(hits["results"][0]["session_id"], zh.as_str());
    assert_eq!(hits["results"][0]["level"], "talks");
    assert_eq!(hits["results"][0]["prompt_number"], 1);
    assert!(hits["results"][0].get("message_id").is_none());
    let hits = h.json(&["search", "timezone", "--level", "observations", "--json"]);
    assert!(!hits["results"].as_array().unwrap().is_empty());
    let hits = h.json(&[
        "search",
        "changelog",
        "--level",
        "all",
        "--json",
        "--limit",
        "20",
    ]);
    let levels: std::collections::BTreeSet<&str> = hits["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["level"].as_str().unwrap())
        .collect();
    assert!(
        levels.contains("raw") && levels.contains("talks"),
        "{levels:?}"
    );
    let bad = h.memex(&["search", "x", "--level", "paragraphs"]);
    assert_eq!(bad.status.code(), Some(2));

    // Nothing is done twice: a second trigger queues and changes nothing.
    let before = count(&conn, "SELECT COUNT(*) FROM compact_jobs");
    let rows = count(&conn, "SELECT COUNT(*) FROM talk_summaries");
    let out = h.memex(&["compact", "trigger"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ran 0"),
        "{out:?}"
    );
    assert_eq!(count(&conn, "SELECT COUNT(*) FROM compact_jobs"), before);
    assert_eq!(count(&conn, "SELECT COUNT(*) FROM talk_summaries"), rows);
    let status = h.json(&["compact", "status", "--json"]);
    assert_eq!(status["coverage"]["l3_percent"], 100.0);
    assert!(status["tokens_saved"]["saved"].as_i64().unwrap() > 0);

    // Regeneration rebuilds from raw (here with the same heuristic).
    let out = h.memex(&["compact", "regenerate", "--level", "l2", "--session", &s]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ran 2"),
        "{out:?}"
    );
    let out = h.memex(&["compact", "regenerate", "--level", "l9"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_outage_falls_back_per_row_or_waits_while_ingest_goes_on() {
    // With the heuristic as fallback: rows are written by it, and say why.
    let h = Home::empty();
    let (s, _) = write_sessions(&h);
    let dead = format!("http://{}/v1", closed_port());
    let mut c = h.command(&["compact", "trigger"]);
    c.env("MEMEX_COMPACT_PROVIDER", "openai")
        .env("MEMEX_COMPACT_OPENAI_ENDPOINT", &dead)
        .env("MEMEX_COMPACT_OPENAI_API_KEY", "sk-secret-never-shown")
        .env("MEMEX_COMPACT_FALLBACK", "heuristic");
    h.json(&["import", "--json"]);
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = h.json(&["sessions", "show", &s, "--format", "summary", "--json"]);
    let t = &v["talks"][0];
    assert_eq!(t["provider"], "heuristic");
    assert!(
        t["fallback_reason"]
            .as_str()
            .unwrap()
            .contains("openai is unavailable"),
        "{t}"
    );
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!all.contains("sk-secret-never-shown"));
    let mut c = h.command(&["config", "--json"]);
    let shown = c
        .env("OPENAI_API_KEY", "sk-secret-never-shown")
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(!shown.contains("sk-secret-never-shown"), "{shown}");
    let v: Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(v["settings"]["compact"]["openai"]["api_key"], "(set)");

    // Without a fallback, under the service: jobs wait, raw ingest goes on, and the jobs
    // resume once the provider is back.
    let h = Home::empty();
    let (s, _) = write_sessions(&h);
    let port = closed_port();
    let env = [
        ("MEMEX_COMPACT_PROVIDER", "openai"),
        ("MEMEX_COMPACT_OPENAI_API_KEY", "sk-test"),
        ("MEMEX_COMPACT_CONCURRENCY", "1"),
    ];
    let endpoint = format!("http://{port}/v1");
    let mut env: Vec<(&str, &str)> = env.to_vec();
    env.push(("MEMEX_COMPACT_OPENAI_ENDPOINT", &endpoint));
    let srv = h.serve(&env);
    srv.wait_watching();
    srv.wait_for(30, "jobs waiting for the provider", |s| {
        let st = s.ok("/api/compact/status");
        (st["waiting"].as_i64().unwrap() > 0
            && st["last_error"]["error"]
                .as_str()
                .unwrap_or("")
                .contains("waiting: openai is unavailable"))
        .then_some(())
    });
    assert_eq!(srv.ok("/api/compact/status")["rows"]["talk_summaries"], 0);
    let file = h
        .path()
        .join(".claude/projects/-work-app")
        .join(format!("{s}.jsonl"));
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .unwrap();
    writeln!(
        f,
        "{}",
        claude_prompt(&s, "p3", "/work/app", "ingestcontinues during the outage")
    )
    .unwrap();
    srv.wait_for(10, "raw ingest during the outage", |s| {
        (s.ok("/api/search?q=ingestcontinues")["results"]
            .as_array()
            .unwrap()
            .len()
            == 1)
            .then_some(())
    });
    // The provider comes back; a trigger retries the waiting jobs now.
    let llm = FakeLlm::start_on(&port, Duration::ZERO);
    let res = srv
        .client()
        .post(srv.url("/api/compact/trigger"))
        .json(&json!({}))
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 202);
    // Done, none waiting and none still running (a job in flight has no row yet).
    srv.wait_for(60, "the jobs to resume", |s| {
        let st = s.ok("/api/compact/status");
        let l2 = &st["jobs"]["l2"];
        (l2["done"].as_i64().unwrap() >= 2
            && l2["pending"].as_i64().unwrap_or(0) == 0
            && l2["running"].as_i64().unwrap_or(0) == 0)
            .then_some(st)
    });
    let v = srv.ok(&format!("/api/sessions/{s}/summary"));
    assert_eq!(v["talks"][0]["provider"], "openai");
    assert_eq!(v["talks"][0]["summary"], "fake summary");
    assert_eq!(v["talks"][0]["tokens_input"], 50);
    assert!(!llm.requests.lock().unwrap().is_empty());
    let st = srv.ok("/api/compact/status");
    assert!(
        st["tokens_per_provider_day"][0]["tokens_input"]
            .as_i64()
            .unwrap()
            >= 100,
        "{st}"
    );
}

#[test]
fn kill_9_in_the_middle_of_the_queue_loses_no_job_and_repeats_none() {
    let h = Home::with_fixtures();
    write_sessions(&h);
    // A slow model: the queue is still busy when the service is killed.
    let llm = FakeLlm::start(Duration::from_millis(60));
    let env = [
        ("MEMEX_COMPACT_PROVIDER", "openai"),
        ("MEMEX_COMPACT_OPENAI_ENDPOINT", llm.url.as_str()),
        ("MEMEX_COMPACT_OPENAI_API_KEY", "sk-test"),
        ("MEMEX_COMPACT_CONCURRENCY", "1"),
    ];
    let srv = h.serve(&env);
    srv.wait_for(60, "the queue to be half done", |s| {
        let st = s.ok("/api/compact/status");
        let done: i64 = ["l1", "l2", "l3"]
            .iter()
            .map(|l| st["jobs"][l]["done"].as_i64().unwrap())
            .sum();
        (done >= 10).then_some(())
    });
    srv.kill9();
    let asked_before = llm.requests.lock().unwrap().len();
    let conn = db(&h.data_dir());
    let pending = count(
        &conn,
        "SELECT COUNT(*) FROM compact_jobs WHERE state IN ('pending', 'running')",
    );
    assert!(pending > 0, "the kill must land mid-queue");
    let done_before = count(
        &conn,
        "SELECT COUNT(*) FROM compact_jobs WHERE state = 'done'",
    );

    let srv = h.serve(&env);
    srv.wait_for(120, "the queue to drain", |s| {
        let st = s.ok("/api/compact/status");
        let open: i64 = ["l1", "l2", "l3"]
            .iter()
            .map(|l| {
                st["jobs"][l]["pending"].as_i64().unwrap()
                    + st["jobs"][l]["running"].as_i64().unwrap()
            })
            .sum();
        (open == 0).then_some(())
    });
    let (code, _) = srv.terminate();
    assert!(code.success());
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM compact_jobs WHERE state = 'failed'"
        ),
        0
    );
    // Every real prompt has exactly one L2, written by the model.
    assert_eq!(
        count(&conn, "SELECT COUNT(*) FROM messages m WHERE m.kind = 'user_prompt' AND m.active = 1
           AND NOT EXISTS (SELECT 1 FROM talk_summaries t WHERE t.session_pk = m.session_pk AND t.prompt_number = m.prompt_number)"),
        0
    );
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM talk_summaries WHERE provider != 'openai'"
        ),
        0
    );
    // None done twice: the model was asked again only for what was in flight at the kill
    // (one session's claimed jobs at most), never for a job already recorded as done.
    let done_after = count(
        &conn,
        "SELECT COUNT(*) FROM compact_jobs WHERE state = 'done'",
    );
    let l1_groups = count(&conn, "SELECT COUNT(*) FROM observations");
    let l2 = count(&conn, "SELECT COUNT(*) FROM talk_summaries");
    let l3 = count(&conn, "SELECT COUNT(*) FROM session_summaries");
    let asked = llm.requests.lock().unwrap().len() as i64;
    let rows = l1_groups + l2 + l3;
    assert!(done_after > done_before);
    assert!(
        asked >= rows && asked <= rows + 40,
        "{asked} requests for {rows} rows (asked before the kill: {asked_before})"
    );
    let l2_requests: Vec<String> = llm
        .requests
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.starts_with("Developer: "))
        .cloned()
        .collect();
    let mut per_talk = std::collections::HashMap::new();
    for r in &l2_requests {
        *per_talk.entry(r.clone()).or_insert(0) += 1;
    }
    let repeated = per_talk.values().filter(|n| **n > 1).count();
    assert!(
        repeated <= 2,
        "{repeated} talks were summarised more than once"
    );
}

/// A session of `talks` short talks (prompt and answer), in a project of its own.
fn write_long_session(h: &Home, id: &str, talks: usize) {
    let mut lines = Vec::new();
    for i in 1..=talks {
        lines.push(claude_prompt(
            id,
            &format!("{id}-p{i}"),
            "/work/long",
            &format!("step {i}: rename the helper number {i} in src/lib.rs"),
        ));
        lines.push(claude_answer(
            id,
            &format!("{id}-a{i}"),
            "/work/long",
            &format!("Renamed helper {i}."),
        ));
    }
    h.write_claude("/work/long", id, &lines);
}

const LONG: &str = "3c3c3c3c-1111-4222-8333-444444444444";
const SHORT: &str = "4d4d4d4d-1111-4222-8333-444444444444";

#[test]
fn regenerating_many_talks_with_a_paid_provider_needs_yes() {
    let h = Home::empty();
    write_long_session(&h, LONG, 60);
    write_long_session(&h, SHORT, 2);
    h.json(&["import", "--json"]);
    let out = h.memex(&["compact", "trigger"]);
    assert!(out.status.success(), "{out:?}");
    let conn = db(&h.data_dir());
    let jobs_before = count(&conn, "SELECT COUNT(*) FROM compact_jobs");
    let llm = FakeLlm::start(Duration::ZERO);
    let run = |args: &[&str], paid: bool| {
        let mut c = h.command(args);
        for (k, v) in paid_env(&llm.url) {
            c.env(k, v);
        }
        if !paid {
            c.env_remove("MEMEX_COMPACT_BUDGET_EXEMPT_LOCAL");
        }
        c.output().unwrap()
    };

    // 62 talks with a paid provider: refused, with the count, the provider and the way on.
    let out = run(&["compact", "regenerate"], true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "would queue 62 talks in 2 sessions for the paid provider openai (http://127.0.0.1:"
        ),
        "{err}"
    );
    assert!(
        err.contains("more than 50 talks need confirmation"),
        "{err}"
    );
    assert!(err.contains("hint: add --yes"), "{err}");
    assert!(out.stdout.is_empty());
    // Nothing was queued or asked.
    assert_eq!(
        count(&conn, "SELECT COUNT(*) FROM compact_jobs"),
        jobs_before
    );
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM compact_jobs WHERE state != 'done'"
        ),
        0
    );
    assert!(llm.requests.lock().unwrap().is_empty());
    // One session of the 60 talks: still too many; the short one is not.
    let out = run(&["compact", "regenerate", "--session", LONG], true);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let out = run(
        &["compact", "regenerate", "--level", "l2", "--session", SHORT],
        true,
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(llm.requests.lock().unwrap().len(), 2);

    // The same provider counted as local (a loopback endpoint, exempt): no question asked.
    let out = run(&["compact", "regenerate", "--level", "l2"], false);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("queued 62 jobs, ran 62"),
        "{out:?}"
    );
    assert_eq!(llm.requests.lock().unwrap().len(), 64);

    // Paid, with --yes: queued and written by the provider.
    let out = run(&["compact", "regenerate", "--yes"], true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM talk_summaries WHERE provider = 'openai'"
        ),
        62
    );
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM session_summaries WHERE provider = 'openai'"
        ),
        2
    );
    // Status shows the provider's spend against the default budget.
    let mut c = h.command(&["compact", "status", "--json"]);
    for (k, v) in paid_env(&llm.url) {
        c.env(k, v);
    }
    let st: Value = serde_json::from_slice(&c.output().unwrap().stdout).unwrap();
    assert_eq!(st["daily_token_budget"], 200_000);
    let b = &st["budget"][0];
    assert_eq!(
        (&b["provider"], &b["paid"], &b["limit"], &b["paused"]),
        (
            &json!("openai"),
            &json!(true),
            &json!(200_000),
            &json!(false)
        ),
        "{st}"
    );
    assert!(b["tokens_today"].as_u64().unwrap() >= 70 * 64, "{st}");
}

#[test]
fn the_api_asks_for_confirm_before_a_large_paid_regeneration() {
    let h = Home::empty();
    write_long_session(&h, LONG, 60);
    let llm = FakeLlm::start(Duration::ZERO);
    let env = paid_env(&llm.url);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let srv = h.serve(&env);
    srv.wait_watching();
    // Jobs not done yet: pending or running.
    let pending = |s: &Server| -> i64 {
        let st = s.ok("/api/compact/status");
        ["l1", "l2", "l3"]
            .iter()
            .map(|l| {
                st["jobs"][l]["pending"].as_i64().unwrap()
                    + st["jobs"][l]["running"].as_i64().unwrap()
            })
            .sum()
    };
    srv.wait_for(60, "the first compaction", |s| {
        let st = s.ok("/api/compact/status");
        (pending(s) == 0
            && st["rows"]["talk_summaries"] == 60
            && st["coverage"]["l3_percent"] == 100.0)
            .then_some(())
    });
    let asked = llm.requests.lock().unwrap().len();
    let post = |body: &str| srv.post("/api/compact/regenerate", body);

    let (status, v) = post(r#"{"level": "all"}"#);
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["error"]["code"], "confirmation_required", "{v}");
    let msg = v["error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("would queue 60 talks in 1 session for the paid provider openai")
            && msg.contains("\"confirm\": true"),
        "{msg}"
    );
    assert_eq!(v.as_object().unwrap().len(), 1, "one error shape: {v}");
    assert_eq!(pending(&srv), 0, "nothing queued");

    let (status, v) = post(r#"{"confirm": "yes"}"#);
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"]["code"], "bad_parameter");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`confirm`"),
        "{v}"
    );
    let (status, v) = post(r#"{"confirm": false}"#);
    assert_eq!(status, 409, "{v}");

    // The CLI goes through the service, and forwards --yes as "confirm": true.
    let out = h.memex(&["compact", "regenerate", "--level", "l3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("60 talks") && err.contains("hint: add --yes"),
        "{err}"
    );
    assert_eq!(pending(&srv), 0);
    assert_eq!(llm.requests.lock().unwrap().len(), asked);
    let out = h.memex(&["compact", "regenerate", "--level", "l3", "--yes"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("queued 1 jobs in the running service"),
        "{out:?}"
    );

    let (status, v) = post(r#"{"level": "l2", "confirm": true}"#);
    assert_eq!(status, 202, "{v}");
    assert_eq!(v["queued"], 60);
    srv.wait_for(60, "the regeneration", |s| {
        (pending(s) == 0 && llm.requests.lock().unwrap().len() >= asked + 61).then_some(())
    });
    let st = srv.ok("/api/compact/status");
    assert_eq!(
        st["paid_providers"][0].as_str().unwrap().split(' ').next(),
        Some("openai")
    );
    assert_eq!(st["budget"][0]["limit"], 200_000, "{st}");
}

#[test]
fn jobs_in_flight_at_shutdown_go_back_to_pending_at_once() {
    let h = Home::with_fixtures();
    write_sessions(&h);
    // A model that takes far longer than the shutdown: jobs are claimed and in flight.
    let llm = FakeLlm::start(Duration::from_secs(120));
    let env = [
        ("MEMEX_COMPACT_PROVIDER", "openai"),
        ("MEMEX_COMPACT_OPENAI_ENDPOINT", llm.url.as_str()),
        ("MEMEX_COMPACT_OPENAI_API_KEY", "sk-test"),
        ("MEMEX_COMPACT_CONCURRENCY", "2"),
    ];
    let srv = h.serve(&env);
    srv.wait_for(60, "jobs running", |s| {
        let st = s.ok("/api/compact/status");
        let running: i64 = ["l1", "l2", "l3"]
            .iter()
            .map(|l| st["jobs"][l]["running"].as_i64().unwrap())
            .sum();
        (running > 0 && !llm.requests.lock().unwrap().is_empty()).then_some(())
    });
    let (code, _) = srv.terminate();
    assert!(code.success());
    let conn = db(&h.data_dir());
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM compact_jobs WHERE state = 'running'"
        ),
        0,
        "claimed jobs must be pending again when the service has stopped"
    );
    assert!(
        count(
            &conn,
            "SELECT COUNT(*) FROM compact_jobs WHERE state = 'pending'"
        ) > 0
    );
}
