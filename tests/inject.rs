//! End-to-end tests of the Claude Code hooks: `memex inject`, `memex-inject`, `memex hook
//! stop` and `memex hooks install | uninstall`, driven as Claude Code drives them (hook JSON on
//! stdin, a running `memex serve`, real settings files).

use crate::common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Home, Server, count, db, hook};
use serde_json::{Value, json};

const PROJECT: &str = "/home/dev/payments";
const SESSION: &str = "5f0c1a2b-3c4d-4e5f-8a6b-7c8d9e0f1a2b";
const LATER: &str = "9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a";
/// Two more sessions of the same project, each asking for the first time.
const LATER_B: &str = "8c7b6a5f-4e3d-4c2b-9a1f-0e9d8c7b6a5f";
const LATER_C: &str = "7b6a5f4e-3d2c-4b1a-8f0e-9d8c7b6a5f4e";

fn memex() -> &'static str {
    env!("CARGO_BIN_EXE_memex")
}

fn prompt_json(session: &str, cwd: &str, prompt: &str) -> String {
    json!({
        "session_id": session,
        "transcript_path": format!("/home/dev/.claude/projects/x/{session}.jsonl"),
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "UserPromptSubmit",
        "prompt": prompt
    })
    .to_string()
}

fn start_json(session: &str, cwd: &str) -> String {
    json!({
        "session_id": session,
        "transcript_path": format!("/home/dev/.claude/projects/x/{session}.jsonl"),
        "cwd": cwd,
        "hook_event_name": "SessionStart",
        "source": "startup",
        "model": "claude-sonnet-4-5"
    })
    .to_string()
}

/// The `additionalContext` of a hook's stdout, checking the whole contract: exit 0, one JSON
/// object with exactly `hookSpecificOutput.{hookEventName, additionalContext}`.
fn context(out: &Output, event: &str) -> String {
    assert!(out.status.success(), "exit {:?}", out.status);
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let v: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout}"));
    let o = v.as_object().unwrap();
    assert_eq!(o.len(), 1, "{v}");
    let h = v["hookSpecificOutput"].as_object().unwrap();
    assert_eq!(h.len(), 2, "{v}");
    assert_eq!(h["hookEventName"], event);
    let c = h["additionalContext"].as_str().unwrap().to_owned();
    assert!(!c.is_empty());
    c
}

fn silent(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout.is_empty(),
        "expected nothing on stdout, got: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A payments session: a webhook-signature fix with an edit (L1), its talk (L2) and, once
/// compacted, its session summary (L3).
fn write_session(home: &Home) {
    let call = "toolu_01";
    home.write_claude(
        PROJECT,
        SESSION,
        &[
            common::claude_prompt(
                SESSION,
                "u1",
                PROJECT,
                "Stripe changed how webhook signatures are computed for v2 events. Update verify_signature to use the new scheme.",
            ),
            json!({
                "type": "assistant", "uuid": "a1", "parentUuid": "u1", "sessionId": SESSION,
                "cwd": PROJECT, "timestamp": "2026-06-05T10:00:05.000Z",
                "message": {"id": "msg_a1", "role": "assistant", "model": "claude-opus-4-7",
                    "content": [
                        {"type": "text", "text": "verify_signature now reads the Stripe-Signature header, takes the t= timestamp and v1= digest, and compares an HMAC-SHA256 of timestamp.payload in constant time. Events older than five minutes are rejected."},
                        {"type": "tool_use", "id": call, "name": "Edit", "input": {
                            "file_path": format!("{PROJECT}/src/billing/webhooks.rs"),
                            "old_string": "", "new_string": "let expected = hmac_sha256(secret, format!(\"{t}.{body}\"));"}}
                    ],
                    "usage": {"input_tokens": 10, "output_tokens": 5}}
            }),
            json!({
                "type": "user", "uuid": "u2", "parentUuid": "a1", "sessionId": SESSION,
                "cwd": PROJECT, "timestamp": "2026-06-05T10:00:07.000Z",
                "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                    "content": format!("The file {PROJECT}/src/billing/webhooks.rs has been updated.")}]}
            }),
            common::claude_answer(
                SESSION,
                "a2",
                PROJECT,
                "Added tests for a tampered body and a replayed event.",
            ),
        ],
    );
}

fn served(home: &Home, extra: &[(&str, &str)]) -> Server {
    let model = common::model_dir();
    let mut env = vec![("MEMEX_MODEL_DIR", model.to_str().unwrap())];
    env.extend_from_slice(extra);
    let s = home.serve(&env);
    s.wait_watching();
    s
}

#[test]
fn hooks_inject_memory_through_the_running_service() {
    let home = Home::with_fixtures();
    write_session(&home);
    let s = served(&home, &[]);
    let addr = s.addr.clone();
    let on = [
        ("MEMEX_API_BIND", addr.as_str()),
        ("MEMEX_INJECT_ENABLED", "true"),
    ];

    // The Stop hook compacts the session (L3 included) through the service.
    let stop = hook(
        &home,
        memex(),
        &["hook", "stop"],
        &on,
        &json!({"session_id": SESSION, "transcript_path": "/x.jsonl", "cwd": PROJECT,
                "hook_event_name": "Stop", "stop_hook_active": false})
        .to_string(),
    );
    silent(&stop);
    // Embedding every fixture message with the real model takes most of a minute on two
    // cores, longer while other tests of the binary run: the bound leaves room for that.
    s.wait_for(180, "the L3 of the session and every vector", |s| {
        let st = s.ok("/api/stats");
        let conn = db(&home.data_dir());
        let l3 = count(
            &conn,
            &format!(
                "SELECT COUNT(*) FROM session_summaries x JOIN sessions s ON s.id = x.session_pk
                 WHERE s.session_id = '{SESSION}'"
            ),
        );
        (l3 == 1 && st["vectors"]["backlog"] == 0).then_some(())
    });

    // Smart: a later prompt about the same thing gets the earlier work, with the MCP hint.
    let later = "The Stripe webhook signature check fails again since the upgrade; how did we verify signatures last time?";
    let out = hook(
        &home,
        memex(),
        &["inject", "--mode", "smart"],
        &on,
        &prompt_json(LATER, PROJECT, later),
    );
    let c = context(&out, "UserPromptSubmit");
    assert!(c.contains(SESSION), "{c}");
    assert!(c.contains("verify_signature"), "{c}");
    assert!(
        c.contains(&format!("get_session(session_id=\"{SESSION}\"")),
        "{c}"
    );
    assert!(c.starts_with("<memex-memory>"), "{c}");
    assert!(c.len() <= memex::inject::MAX_CONTEXT_CHARS);
    // The same through the `memex-inject` binary the RFC names (another session asking).
    let out2 = hook(
        &home,
        env!("CARGO_BIN_EXE_memex-inject"),
        &["--mode=smart"],
        &on,
        &prompt_json(LATER_B, PROJECT, later),
    );
    assert_eq!(context(&out2, "UserPromptSubmit"), c);
    // Never twice in one session: asked again, the session has it already.
    let conn = db(&home.data_dir());
    s.wait_for(10, "the first injection logged", |_| {
        (count(
            &conn,
            &format!("SELECT COUNT(*) FROM injections WHERE session_id = '{LATER}' AND items > 0"),
        ) == 1)
            .then_some(())
    });
    silent(&hook(
        &home,
        memex(),
        &["inject", "--mode", "smart"],
        &on,
        &prompt_json(LATER, PROJECT, later),
    ));
    // Once the agent compacts that session's context, what it was given is gone from the
    // model's view: it may be given again.
    let now = chrono::Utc::now() + chrono::Duration::seconds(5);
    home.write_claude(
        PROJECT,
        LATER,
        &[json!({"type": "user", "uuid": "c1", "sessionId": LATER, "cwd": PROJECT,
                 "isCompactSummary": true, "timestamp": now.to_rfc3339(),
                 "message": {"role": "user", "content": "This session is being continued from a previous conversation."}})],
    );
    s.wait_for(30, "the compaction stored", |_| {
        (count(
            &conn,
            "SELECT COUNT(*) FROM messages WHERE kind = 'compaction_summary'",
        ) > 0)
            .then_some(())
    });
    let again = hook(
        &home,
        memex(),
        &["inject", "--mode", "smart"],
        &on,
        &prompt_json(LATER, PROJECT, later),
    );
    assert!(context(&again, "UserPromptSubmit").contains(SESSION));

    // Nothing: the session's own history, another project, a topic absent from the archive,
    // a sub-agent, a slash command, a short prompt, injection off.
    silent(&hook(
        &home,
        memex(),
        &["inject", "--mode", "smart"],
        &on,
        &prompt_json(SESSION, PROJECT, later),
    ));
    silent(&hook(
        &home,
        memex(),
        &["inject", "--mode", "smart"],
        &on,
        &prompt_json(LATER, "/home/dev/another-project", later),
    ));
    silent(&hook(
        &home,
        memex(),
        &["inject", "--mode", "smart"],
        &on,
        &prompt_json(
            LATER,
            PROJECT,
            "Configure the Zigbee door sensors in Home Assistant to switch on the porch light",
        ),
    ));
    let mut sub: Value = serde_json::from_str(&prompt_json(LATER, PROJECT, later)).unwrap();
    sub["agent_id"] = json!("a2271d1");
    sub["agent_type"] = json!("Explore");
    silent(&hook(
        &home,
        memex(),
        &["inject", "--mode", "smart"],
        &on,
        &sub.to_string(),
    ));
    for p in ["/compact keep the webhook signature details", "ok thanks"] {
        silent(&hook(
            &home,
            memex(),
            &["inject", "--mode", "smart"],
            &on,
            &prompt_json(LATER, PROJECT, p),
        ));
    }
    silent(&hook(
        &home,
        memex(),
        &["inject", "--mode", "smart"],
        &[("MEMEX_API_BIND", addr.as_str())],
        &prompt_json(LATER, PROJECT, later),
    ));
    // Every project: found from another folder too.
    let all = [
        ("MEMEX_API_BIND", addr.as_str()),
        ("MEMEX_INJECT_ENABLED", "true"),
        ("MEMEX_INJECT_PROJECT_SCOPE", "all"),
        ("MEMEX_INJECT_RECORD_PROMPTS", "true"),
    ];
    let secret_prompt = format!("{later} The key is sk-ant-api03-{}", "x".repeat(40));
    let c = context(
        &hook(
            &home,
            memex(),
            &["inject", "--mode", "smart"],
            &all,
            &prompt_json(LATER_C, "/home/dev/another-project", &secret_prompt),
        ),
        "UserPromptSubmit",
    );
    assert!(c.contains(SESSION), "{c}");

    // Full: the project's recent session summaries at SessionStart.
    let out = hook(
        &home,
        memex(),
        &["inject", "--mode", "full"],
        &on,
        &start_json(LATER, PROJECT),
    );
    let c = context(&out, "SessionStart");
    assert!(
        c.contains(SESSION) && c.contains("format=\"summary\""),
        "{c}"
    );
    assert!(c.to_lowercase().contains("stripe"), "{c}");
    // Not its own summary; nothing for a project without history.
    silent(&hook(
        &home,
        memex(),
        &["inject", "--mode", "full"],
        &on,
        &start_json(SESSION, PROJECT),
    ));
    silent(&hook(
        &home,
        memex(),
        &["inject", "--mode", "full"],
        &on,
        &start_json(LATER, "/home/dev/another-project"),
    ));

    // Each call that reached the service is logged; the prompt only when asked, redacted.
    let conn = db(&home.data_dir());
    s.wait_for(10, "the injection log", |_| {
        (count(&conn, "SELECT COUNT(*) FROM injections") == 11).then_some(())
    });
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM injections WHERE prompt IS NOT NULL"
        ),
        1
    );
    let stored: String = conn
        .query_row(
            "SELECT prompt FROM injections WHERE prompt IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        !stored.contains("sk-ant-api03") && stored.contains("webhook"),
        "{stored}"
    );
    let st = s.ok("/api/stats")["injections"].clone();
    // Smart: 2 with items (both binaries), 1 asked again (nothing new), 1 again after the
    // compaction (items), 1 own-session, 1 other project, 1 absent topic, 1 in all projects
    // with items; the sub-agent, slash, short and disabled ones never came.
    assert_eq!(st["smart"]["calls"], 8, "{st}");
    assert_eq!(st["smart"]["with_items"], 4, "{st}");
    assert_eq!(st["smart"]["hit_rate"], 0.5, "{st}");
    assert_eq!(st["full"]["calls"], 3, "{st}");
    assert_eq!(st["full"]["with_items"], 1, "{st}");
    assert!(st["tokens_total"].as_i64().unwrap() > 0, "{st}");
    assert!(st["latency_ms"]["p95"].as_f64().unwrap() > 0.0, "{st}");
    assert_eq!(st["per_day"][0]["injections"], 11, "{st}");
    let cli = home.json(&["stats", "--json"]);
    assert_eq!(cli["injections"]["smart"]["with_items"], 4);
    assert!(cli["archive"]["sessions"].as_i64().unwrap() > 5);
    let text = home.memex(&["stats"]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("hit rate 50%"), "{text}");

    // The API names what is wrong in a bad request.
    let bad = s
        .client()
        .post(s.url("/api/inject"))
        .json(&json!({"mode": "smart", "cwd": "relative/path", "prompt": "x"}))
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let v: Value = bad.json().unwrap();
    assert!(
        v["error"]["message"].as_str().unwrap().contains("cwd"),
        "{v}"
    );
    let trailing = s
        .client()
        .post(s.url("/api/inject"))
        .header("content-type", "application/json")
        .body(format!(
            "{}garbage",
            json!({"mode": "smart", "cwd": PROJECT, "prompt": "x"})
        ))
        .send()
        .unwrap();
    assert_eq!(trailing.status().as_u16(), 400);
    let bad = s
        .client()
        .post(s.url("/api/inject"))
        .json(&json!({"mode": "smart", "cwd": PROJECT, "prompt": "x", "explain": "yes"}))
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let v: Value = bad.json().unwrap();
    assert!(
        v["error"]["message"].as_str().unwrap().contains("explain"),
        "{v}"
    );

    // --explain says why, candidate by candidate: its score parts and what became of it (on
    // stderr).
    let explain = |session: &str, prompt: &str| {
        let out = hook(
            &home,
            memex(),
            &["inject", "--mode", "smart", "--explain"],
            &on,
            &prompt_json(session, PROJECT, prompt),
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // In the session the `memex-inject` binary served above, which has not compacted since:
    // what was given before is not given again (other talks above the threshold may be).
    let why = explain(LATER_B, later);
    let candidates: Vec<&str> = why.lines().filter(|l| l.contains("candidate: ")).collect();
    assert!(!candidates.is_empty() && candidates.len() <= 5, "{why}");
    assert!(
        candidates.iter().any(|l| l.contains(SESSION)
            && l.contains("similarity 0.")
            && l.contains(", words ")
            && l.ends_with("already given to this session")),
        "{why}"
    );
    let why = explain(
        LATER,
        "Configure the Zigbee door sensors in Home Assistant to switch on the porch light",
    );
    assert!(why.contains(": below the threshold"), "{why}");
    assert!(!why.contains(": injected"), "{why}");
}

/// One JSON object on stdout, exit 0.
fn stdout_json(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}): {stdout}"))
}

/// The hook inputs other agents document (Codex CLI, Gemini CLI, Cursor, Copilot CLI), piped
/// into `memex inject --agent …` and `memex hook stop --agent …` against a running service: each
/// answer has exactly the shape that agent reads context from.
#[test]
fn other_agents_hooks_follow_their_documented_contracts() {
    let home = Home::empty();
    write_session(&home);
    let s = served(&home, &[]);
    let addr = s.addr.clone();
    let on = [
        ("MEMEX_API_BIND", addr.as_str()),
        ("MEMEX_INJECT_ENABLED", "true"),
    ];
    let run = |args: &[&str], input: Value| hook(&home, memex(), args, &on, &input.to_string());
    let later = "The Stripe webhook signature check fails again since the upgrade; how did we verify signatures last time?";

    // Codex CLI's Stop hook compacts the session, as Claude Code's does.
    let stop = run(
        &["hook", "stop", "--agent", "codex", "--explain"],
        json!({"session_id": SESSION, "turn_id": "t1", "transcript_path": null, "cwd": PROJECT,
               "hook_event_name": "Stop", "model": "gpt-5-codex", "permission_mode": "default",
               "stop_hook_active": false, "last_assistant_message": "done"}),
    );
    silent(&stop);
    assert!(String::from_utf8_lossy(&stop.stderr).contains("queued"));
    s.wait_for(120, "the L3 of the session and every vector", |s| {
        let conn = db(&home.data_dir());
        let l3 = count(&conn, "SELECT COUNT(*) FROM session_summaries");
        (l3 == 1 && s.ok("/api/stats")["vectors"]["backlog"] == 0).then_some(())
    });

    // Codex CLI: Claude Code's shape, and not one key more (Codex refuses unknown keys). Each
    // agent asks from a session of its own (a session never gets the same item twice).
    let codex = stdout_json(&run(
        &["inject", "--agent", "codex", "--mode", "smart"],
        json!({"session_id": LATER, "turn_id": "t2", "transcript_path": null, "cwd": PROJECT,
               "hook_event_name": "UserPromptSubmit", "model": "gpt-5-codex",
               "permission_mode": "default", "prompt": later}),
    ));
    let h = codex["hookSpecificOutput"].as_object().unwrap();
    assert_eq!(codex.as_object().unwrap().len(), 1, "{codex}");
    assert_eq!(h.len(), 2, "{codex}");
    assert_eq!(h["hookEventName"], "UserPromptSubmit");
    assert!(h["additionalContext"].as_str().unwrap().contains(SESSION));
    let codex_start = stdout_json(&run(
        &["inject", "--agent", "codex", "--mode", "full"],
        json!({"session_id": LATER, "transcript_path": null, "cwd": PROJECT,
               "hook_event_name": "SessionStart", "model": "gpt-5-codex",
               "permission_mode": "default", "source": "startup"}),
    ));
    assert_eq!(
        codex_start["hookSpecificOutput"]["hookEventName"],
        "SessionStart"
    );

    // Gemini CLI: BeforeAgent and SessionStart, always as JSON (plain text would reach the
    // user, not the model); AfterAgent compacts.
    let gemini = stdout_json(&run(
        &["inject", "--agent", "gemini", "--mode", "smart"],
        json!({"session_id": LATER_B, "transcript_path": "/home/dev/.gemini/tmp/h/chats/session-x.jsonl",
               "cwd": PROJECT, "hook_event_name": "BeforeAgent",
               "timestamp": "2026-11-30T10:00:00.000Z", "prompt": later}),
    ));
    assert_eq!(gemini["hookSpecificOutput"]["hookEventName"], "BeforeAgent");
    assert!(
        gemini["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .contains("verify_signature")
    );
    let gemini_start = stdout_json(&run(
        &["inject", "--agent", "gemini", "--mode", "full"],
        json!({"session_id": LATER, "cwd": PROJECT, "hook_event_name": "SessionStart",
               "source": "startup", "timestamp": "2026-11-30T10:00:00.000Z"}),
    ));
    assert_eq!(
        gemini_start["hookSpecificOutput"]["hookEventName"],
        "SessionStart"
    );
    let after = run(
        &["hook", "stop", "--agent", "gemini", "--explain"],
        json!({"session_id": SESSION, "cwd": PROJECT, "hook_event_name": "AfterAgent",
               "prompt": "p", "prompt_response": "r", "stop_hook_active": false}),
    );
    silent(&after);
    assert!(String::from_utf8_lossy(&after.stderr).contains("queued"));

    // Cursor: the conversation id and the first workspace root stand for session and folder.
    let cursor = stdout_json(&run(
        &["inject", "--agent", "cursor", "--mode", "smart"],
        json!({"conversation_id": LATER_C, "generation_id": "g1", "model": "claude-sonnet-4",
               "hook_event_name": "beforeSubmitPrompt", "cursor_version": "2.0.77",
               "workspace_roots": [PROJECT], "user_email": null, "transcript_path": null,
               "prompt": later, "attachments": []}),
    ));
    assert_eq!(cursor["continue"], true, "{cursor}");
    assert!(
        cursor["additional_context"]
            .as_str()
            .unwrap()
            .contains(SESSION)
    );
    assert_eq!(cursor.as_object().unwrap().len(), 2, "{cursor}");
    let cursor_start = stdout_json(&run(
        &["inject", "--agent", "cursor", "--mode", "full"],
        json!({"conversation_id": LATER, "session_id": LATER, "hook_event_name": "sessionStart",
               "workspace_roots": [PROJECT], "is_background_agent": false,
               "composer_mode": "agent"}),
    ));
    assert_eq!(cursor_start.as_object().unwrap().len(), 1, "{cursor_start}");
    assert!(
        cursor_start["additional_context"]
            .as_str()
            .unwrap()
            .contains(SESSION)
    );
    // Its own conversation gets nothing of itself.
    silent(&run(
        &["inject", "--agent", "cursor", "--mode", "smart"],
        json!({"conversation_id": SESSION, "hook_event_name": "beforeSubmitPrompt",
               "workspace_roots": [PROJECT], "prompt": later}),
    ));
    let cursor_stop = run(
        &["hook", "stop", "--agent", "cursor", "--explain"],
        json!({"conversation_id": SESSION, "generation_id": "g2", "hook_event_name": "stop",
               "status": "completed", "loop_count": 0, "workspace_roots": [PROJECT]}),
    );
    silent(&cursor_stop);
    assert!(String::from_utf8_lossy(&cursor_stop.stderr).contains("queued"));
    // Cursor running Claude Code's hooks (its third-party hooks setting) is left to its own.
    let twice = run(
        &["inject", "--mode", "smart", "--explain"],
        json!({"conversation_id": LATER, "hook_event_name": "beforeSubmitPrompt",
               "workspace_roots": [PROJECT], "prompt": later}),
    );
    silent(&twice);
    assert!(String::from_utf8_lossy(&twice.stderr).contains("--agent cursor"));

    // Copilot CLI: camelCase fields; context only at sessionStart (it drops what a prompt hook
    // prints); agentStop compacts.
    let copilot = stdout_json(&run(
        &["inject", "--agent", "copilot", "--mode", "full"],
        json!({"sessionId": LATER, "timestamp": 1774281852263_i64, "cwd": PROJECT,
               "source": "new", "initialPrompt": "fix the webhook"}),
    ));
    assert_eq!(copilot.as_object().unwrap().len(), 1, "{copilot}");
    assert!(
        copilot["additionalContext"]
            .as_str()
            .unwrap()
            .contains(SESSION)
    );
    let refused = run(
        &[
            "inject",
            "--agent",
            "copilot",
            "--mode",
            "smart",
            "--explain",
        ],
        json!({"sessionId": LATER, "cwd": PROJECT, "prompt": later}),
    );
    silent(&refused);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("sessionStart"));
    let copilot_stop = run(
        &["hook", "stop", "--agent", "copilot", "--explain"],
        json!({"sessionId": SESSION, "timestamp": 1774281852263_i64, "cwd": PROJECT,
               "transcriptPath": "/home/dev/.copilot/session-state/x/events.jsonl"}),
    );
    silent(&copilot_stop);
    assert!(String::from_utf8_lossy(&copilot_stop.stderr).contains("queued"));

    // OpenCode has plugins, not command hooks: the plugin Memex prints, run by Node as OpenCode
    // runs it (Bun takes the same module), with a wrapper that logs each call of the binary.
    opencode_plugin_calls_memex(&home, &on, later);

    // A hostile input names its fault and prints nothing.
    let bad = run(
        &[
            "inject",
            "--agent",
            "cursor",
            "--mode",
            "smart",
            "--explain",
        ],
        json!({"conversation_id": {"$ne": 1}, "workspace_roots": [PROJECT], "prompt": later}),
    );
    silent(&bad);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("conversation_id"));
    let unknown = hook(
        &home,
        memex(),
        &["inject", "--agent", "vim", "--mode", "smart"],
        &on,
        "{}",
    );
    // A usage error too exits 0: exit code 2 would block the prompt in several agents.
    assert!(unknown.status.success() && unknown.stdout.is_empty());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("cursor"));
}

fn opencode_plugin_calls_memex(home: &Home, env: &[(&str, &str)], prompt: &str) {
    let printed = home.memex(&["hooks", "plugin", "opencode"]);
    assert!(printed.status.success());
    let plugin = String::from_utf8(printed.stdout).unwrap();
    assert!(plugin.contains(memex()), "runs this binary by its path");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("memex.mjs"), &plugin).unwrap();
    let log = dir.path().join("calls.log");
    let wrapper = dir.path().join("memex-logged");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ninput=$(cat)\nprintf '%s\\t%s\\n' \"$*\" \"$input\" >> '{}'\n\
             printf '%s' \"$input\" | exec '{}' \"$@\"\n",
            log.display(),
            memex()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    std::fs::write(
        dir.path().join("driver.mjs"),
        r#"import { MemexPlugin } from "./memex.mjs";
const e = process.env;
const client = { session: { get: async ({ path }) =>
  ({ data: path.id === "ses_child" ? { id: path.id, parentID: e.SESSION } : { id: path.id } }) } };
const hooks = await MemexPlugin({ client, directory: e.PROJECT, worktree: e.PROJECT });
const msg = { message: { id: "msg_1" }, parts: [{ id: "prt_1", type: "text", text: e.PROMPT }] };
await hooks["chat.message"]({ sessionID: e.LATER, messageID: "msg_1" }, msg);
const child = { message: { id: "msg_2" }, parts: [{ id: "prt_2", type: "text", text: e.PROMPT }] };
await hooks["chat.message"]({ sessionID: "ses_child", messageID: "msg_2" }, child);
const first = { system: ["base"] };
await hooks["experimental.chat.system.transform"]({ sessionID: e.LATER, model: {} }, first);
const second = { system: ["base"] };
await hooks["experimental.chat.system.transform"]({ sessionID: e.LATER, model: {} }, second);
await hooks.event({ event: { type: "session.idle", properties: { sessionID: e.SESSION } } });
console.log(JSON.stringify({ parts: msg.parts, child: child.parts, first: first.system,
  second: second.system }));
"#,
    )
    .unwrap();
    let mut cmd = Command::new(which_node());
    cmd.arg(dir.path().join("driver.mjs"))
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("MEMEX_BIN", &wrapper)
        .env("PROJECT", PROJECT)
        .env("PROMPT", prompt)
        .env("LATER", "ses_later")
        .env("SESSION", SESSION);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "node: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let parts = v["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{v}");
    assert_eq!(parts[0]["synthetic"], true);
    assert_eq!(parts[0]["type"], "text");
    assert_eq!(parts[0]["messageID"], "msg_1");
    assert!(parts[0]["text"].as_str().unwrap().contains(SESSION), "{v}");
    assert_eq!(parts[1]["id"], "prt_1", "the prompt itself stays as it was");
    assert_eq!(
        v["child"].as_array().unwrap().len(),
        1,
        "a sub-agent gets nothing"
    );
    for key in ["first", "second"] {
        let system = v[key].as_array().unwrap();
        assert_eq!(system.len(), 2, "{v}");
        assert!(system[1].as_str().unwrap().contains(SESSION), "{v}");
    }
    // One call per prompt, one per session for the summaries (kept), one per finished turn.
    let calls = std::fs::read_to_string(&log).unwrap();
    let calls: Vec<(&str, Value)> = calls
        .lines()
        .map(|l| {
            let (args, input) = l.split_once('\t').unwrap();
            (args, serde_json::from_str(input).unwrap())
        })
        .collect();
    let args: Vec<&str> = calls.iter().map(|c| c.0).collect();
    assert_eq!(
        args,
        ["inject --mode smart", "inject --mode full", "hook stop"],
        "{calls:?}"
    );
    assert_eq!(calls[0].1["session_id"], "ses_later");
    assert_eq!(calls[0].1["cwd"], PROJECT);
    assert_eq!(calls[0].1["prompt"], prompt);
    assert_eq!(calls[2].1["session_id"], SESSION);
}

/// Node, which runs the OpenCode plugin in the tests (`.ci/run` installs Debian's `nodejs`).
fn which_node() -> std::path::PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .flat_map(|d| [d.join("node"), d.join("nodejs")])
        .find(|p| p.is_file())
        .expect("node is needed to test the OpenCode plugin: apt-get install nodejs")
}

#[test]
fn hooks_stay_silent_and_quick_when_anything_is_wrong() {
    let home = Home::empty();
    let closed = common::closed_port();
    let on = [
        ("MEMEX_API_BIND", closed.as_str()),
        ("MEMEX_INJECT_ENABLED", "true"),
    ];
    let input = prompt_json(LATER, PROJECT, "why does the webhook signature check fail?");
    let timed = |args: &[&str], env: &[(&str, &str)], input: &str| {
        let t = Instant::now();
        let out = hook(&home, memex(), args, env, input);
        (out, t.elapsed())
    };
    // No service.
    for args in [
        &["inject", "--mode", "smart"][..],
        &["inject", "--mode", "full"],
        &["hook", "stop"],
    ] {
        let (out, took) = timed(args, &on, &input);
        silent(&out);
        assert!(took < Duration::from_millis(1500), "{args:?} took {took:?}");
    }
    // Not JSON, the wrong types, a bad option, a bad config value: still exit 0, silent.
    silent(&timed(&["inject", "--mode", "smart"], &on, "{not json").0);
    silent(&timed(&["inject", "--mode", "smart"], &on, r#"{"prompt": 42}"#).0);
    silent(&timed(&["inject", "--mode", "bogus"], &on, &input).0);
    silent(&timed(&["inject"], &on, &input).0);
    let mut bad_config = on.to_vec();
    bad_config.push(("MEMEX_INJECT_MAX_RESULTS", "many"));
    silent(&timed(&["inject", "--mode", "smart"], &bad_config, &input).0);
    // --explain says why, on stderr only.
    let (out, _) = timed(&["inject", "--mode", "smart", "--explain"], &on, &input);
    silent(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no service is running"), "{err}");

    // A service ran here once (its secret is in the data folder) and the port now holds a
    // program that accepts the connection and never answers: the budget still holds.
    std::fs::create_dir_all(home.data_dir()).unwrap();
    memex::owner::load_or_create(&home.data_dir(), "").unwrap();
    let hanging = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = hanging.local_addr().unwrap().to_string();
    let held = std::thread::spawn(move || {
        let conns: Vec<_> = hanging.incoming().take(1).collect();
        std::thread::sleep(Duration::from_secs(3));
        drop(conns);
    });
    let (out, took) = timed(
        &["inject", "--mode", "smart"],
        &[
            ("MEMEX_API_BIND", addr.as_str()),
            ("MEMEX_INJECT_ENABLED", "true"),
            ("MEMEX_INJECT_TIMEOUT_MS", "500"),
        ],
        &input,
    );
    silent(&out);
    assert!(took < Duration::from_millis(1200), "took {took:?}");
    held.join().unwrap();

    // Stdin that is never closed: given up at the budget.
    let t = Instant::now();
    let mut child = home
        .command(&["inject", "--mode", "smart"])
        .env("MEMEX_API_BIND", &closed)
        .env("MEMEX_INJECT_ENABLED", "true")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let open_stdin = child.stdin.take().unwrap();
    let out = child.wait_with_output().unwrap();
    drop(open_stdin);
    silent(&out);
    assert!(
        t.elapsed() < Duration::from_millis(1500),
        "{:?}",
        t.elapsed()
    );
}

fn settings_fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/claude-settings")
        .join(name)
}

fn backups(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut b: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".memex-backup-"))
        .collect();
    b.sort();
    b
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// The Memex commands a settings file holds, per event.
fn memex_commands(v: &Value, event: &str) -> Vec<String> {
    v["hooks"][event]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["hooks"].as_array().cloned().unwrap_or_default())
        .filter_map(|h| h["command"].as_str().map(str::to_owned))
        .filter(|c| c.contains(" inject --mode") || c.contains(" hook stop"))
        .collect()
}

#[test]
fn hooks_install_merges_claude_settings() {
    let home = Home::empty();
    let claude = home.path().join(".claude");
    let user = claude.join("settings.json");

    // No settings yet: created with the default hooks, in Claude Code's schema.
    let out = home.memex(&["hooks", "install"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("injection is off"), "{text}");
    let v = read_json(&user);
    let group = &v["hooks"]["UserPromptSubmit"][0];
    assert_eq!(group["matcher"], "");
    let entry = &group["hooks"][0];
    assert_eq!(entry["type"], "command");
    assert_eq!(entry["timeout"], 5);
    let cmd = entry["command"].as_str().unwrap();
    assert!(cmd.ends_with(" inject --mode smart"), "{cmd}");
    assert_eq!(memex_commands(&v, "Stop").len(), 1);
    assert!(v["hooks"].get("SessionStart").is_none());
    assert!(backups(&claude).is_empty());
    // The installed command runs as Claude Code would run it (through sh): exit 0, silent.
    let run = Command::new("sh")
        .args(["-c", cmd])
        .env_clear()
        .env("HOME", home.path())
        .env("MEMEX_INJECT_ENABLED", "true")
        .env("MEMEX_API_BIND", common::closed_port())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    silent(&run);

    // Again: nothing changes, no backup.
    let before = std::fs::read(&user).unwrap();
    let out = home.memex(&["hooks", "install"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("already installed"));
    assert_eq!(std::fs::read(&user).unwrap(), before);
    assert!(backups(&claude).is_empty());

    // Existing settings with other hooks: everything kept, in order; a backup of the old file.
    std::fs::copy(settings_fixture("existing-hooks.json"), &user).unwrap();
    let original = std::fs::read(&user).unwrap();
    let out = home.memex(&["hooks", "install", "--modes", "full,smart,stop"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = read_json(&user);
    let old: Value = serde_json::from_slice(&original).unwrap();
    for key in [
        "$schema",
        "model",
        "permissions",
        "env",
        "cleanupPeriodDays",
    ] {
        assert_eq!(v[key], old[key], "{key}");
    }
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    let old_keys: Vec<&String> = old.as_object().unwrap().keys().collect();
    assert_eq!(keys, old_keys, "key order kept");
    assert_eq!(v["hooks"]["PreToolUse"], old["hooks"]["PreToolUse"]);
    assert_eq!(v["hooks"]["Notification"], old["hooks"]["Notification"]);
    let ups = v["hooks"]["UserPromptSubmit"].as_array().unwrap();
    assert_eq!(ups[0], old["hooks"]["UserPromptSubmit"][0], "theirs first");
    assert_eq!(ups.len(), 2);
    assert_eq!(memex_commands(&v, "SessionStart").len(), 1);
    assert_eq!(memex_commands(&v, "UserPromptSubmit").len(), 1);
    assert_eq!(memex_commands(&v, "Stop").len(), 1);
    let b = backups(&claude);
    assert_eq!(b.len(), 1);
    assert_eq!(std::fs::read(&b[0]).unwrap(), original);

    // Uninstall removes only Memex's entries: the original settings again.
    let out = home.memex(&["hooks", "uninstall"]);
    assert!(out.status.success());
    assert_eq!(read_json(&user), old);
    assert_eq!(backups(&claude).len(), 2);
    let out = home.memex(&["hooks", "uninstall"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("no Memex hooks"));

    // Not valid JSON: refused, with the reason; the file is not touched.
    std::fs::copy(settings_fixture("invalid.json"), &user).unwrap();
    let invalid = std::fs::read(&user).unwrap();
    let out = home.memex(&["hooks", "install"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not valid JSON") && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!(std::fs::read(&user).unwrap(), invalid);
    assert_eq!(home.memex(&["hooks", "uninstall"]).status.code(), Some(2));
    assert_eq!(std::fs::read(&user).unwrap(), invalid);
    assert_eq!(backups(&claude).len(), 2);

    // An empty file counts as no settings.
    std::fs::copy(settings_fixture("empty.json"), &user).unwrap();
    assert!(
        home.memex(&["hooks", "install", "--modes", "smart"])
            .status
            .success()
    );
    assert_eq!(
        memex_commands(&read_json(&user), "UserPromptSubmit").len(),
        1
    );

    // Bad modes are named.
    let out = home.memex(&["hooks", "install", "--modes", "smart,later"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("later"));

    // Project scope: the settings of the git work tree holding the current folder.
    let repo = home.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    let out = home
        .command(&["hooks", "install", "--scope", "project", "--modes", "full"])
        .current_dir(repo.join("src/deep"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = read_json(&repo.join(".claude/settings.json"));
    assert_eq!(memex_commands(&v, "SessionStart").len(), 1);
    let status = home
        .command(&["hooks", "status"])
        .current_dir(&repo)
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("SessionStart") && status.contains("injection off"),
        "{status}"
    );
}
