//! Team memory as a team uses it (README "Share with your team"): a PostgreSQL with pgvector
//! started in a temporary folder, one command to create the team archive, one per member to
//! join, one to share a project; three members with their own HOMEs and archives; and what a
//! member who does not belong to a project, a revoked token and bad input get.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use memex_sync::pg_server::PgServer;
use serde_json::{Value, json};

use crate::common::{Home, claude_answer, claude_prompt};

fn ok(h: &Home, args: &[&str]) -> String {
    let out = h.memex(args);
    assert!(
        out.status.success(),
        "memex {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(h: &Home, args: &[&str]) -> String {
    let out = h.memex(args);
    assert_eq!(out.status.code(), Some(2), "memex {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `memex args` with `input` on stdin.
fn with_stdin(h: &Home, args: &[&str], input: &str) -> std::process::Output {
    let mut child = h
        .command(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn tool_use(session: &str, uuid: &str, cwd: &str, id: &str, command: &str) -> Value {
    json!({"type": "assistant", "uuid": uuid, "sessionId": session, "cwd": cwd,
        "timestamp": "2026-06-05T10:00:01.000Z",
        "message": {"id": format!("msg_{uuid}"), "role": "assistant", "model": "claude-opus-4-7",
            "content": [{"type": "tool_use", "id": id, "name": "Bash", "input": {"command": command}}]}})
}

fn tool_result(session: &str, uuid: &str, cwd: &str, id: &str, output: &str) -> Value {
    json!({"type": "user", "uuid": uuid, "sessionId": session, "cwd": cwd,
        "timestamp": "2026-06-05T10:00:02.000Z",
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": output}]}})
}

/// A session on the payment webhook in `/work/payments`, with words planted only in a tool's
/// output (`quokkaledger`) and in a middle message (`wombatcipher`).
fn payments_session(h: &Home, session: &str) {
    let cwd = "/work/payments";
    h.write_claude(
        cwd,
        session,
        &[
            claude_prompt(session, "p1", cwd, "fix the flaky payment webhook retries"),
            claude_answer(session, "a0", cwd, "Looking at wombatcipher first."),
            tool_use(session, "c1", cwd, "toolu_1", "cargo test webhook"),
            tool_result(
                session,
                "r1",
                cwd,
                "toolu_1",
                "test webhook::retry ... quokkaledger FAILED",
            ),
            claude_answer(
                session,
                "a1",
                cwd,
                "The webhook handler now retries with exponential backoff; tests pass.",
            ),
        ],
    );
}

fn search(h: &Home, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["search"];
    all.extend_from_slice(args);
    all.push("--json");
    let out: Value = serde_json::from_str(&ok(h, &all)).unwrap();
    out["results"].as_array().unwrap().clone()
}

#[test]
fn a_team_shares_what_each_member_chooses() {
    let pg = PgServer::start_vector();
    let url = pg.url();
    let alice = Home::empty();
    let bob = Home::empty();
    let carol = Home::empty();
    payments_session(&alice, "5a5a5a5a-1111-4222-8333-444444444444");
    bob.write_claude(
        "/home/bob/infra",
        "6b6b6b6b-1111-4222-8333-444444444444",
        &[
            claude_prompt(
                "6b6b6b6b-1111-4222-8333-444444444444",
                "b1",
                "/home/bob/infra",
                "why does the payment webhook time out behind the proxy",
            ),
            claude_answer(
                "6b6b6b6b-1111-4222-8333-444444444444",
                "b2",
                "/home/bob/infra",
                "The proxy closes idle connections after 30 s; raise its timeout.",
            ),
        ],
    );
    for h in [&alice, &bob] {
        ok(h, &["import"]);
        ok(h, &["compact", "trigger"]);
    }

    // One command makes the team archive; one per member joins it.
    let made = ok(&alice, &["team", "create", &url, "--name", "alice"]);
    assert!(made.contains("admin `alice`"), "{made}");
    let refused_again = refused(&bob, &["team", "create", &url]);
    assert!(
        refused_again.contains("holds a Memex team archive already"),
        "{refused_again}"
    );
    let t: Value =
        serde_json::from_str(&ok(&alice, &["team", "token", "add", "bob", "--json"])).unwrap();
    let bob_token = t["token"].as_str().unwrap().to_owned();
    let out = with_stdin(
        &bob,
        &["team", "join", &url, "--token", "-"],
        &format!("{bob_token}\n"),
    );
    assert!(out.status.success(), "{out:?}");
    let t: Value =
        serde_json::from_str(&ok(&alice, &["team", "token", "add", "carol", "--json"])).unwrap();
    let carol_token = t["token"].as_str().unwrap().to_owned();
    // The token file is the member's own.
    let file = carol.path().join("carol.token");
    std::fs::write(&file, &carol_token).unwrap();
    ok(
        &carol,
        &["team", "join", &url, "--token", file.to_str().unwrap()],
    );
    // A token mistyped is refused with what is wrong, never echoed.
    let bad = with_stdin(
        &carol,
        &["team", "join", &url, "--token", "-"],
        &carol_token[..40],
    );
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("64 hex digits") && !err.contains(&carol_token[4..40]),
        "{err}"
    );

    // Nothing leaves a machine before its user says so.
    let p: Value = serde_json::from_str(&ok(&alice, &["share", "push", "--json"])).unwrap();
    assert_eq!(p["items"], 0);
    assert!(!pg.dump().contains("webhook"));

    // Alice shares her payments project at `summaries`: summaries, no message text.
    let said = ok(&alice, &["share", "/work/payments", "--level", "summaries"]);
    assert!(
        said.contains("summaries") && said.contains("wait to go"),
        "{said}"
    );
    let p: Value = serde_json::from_str(&ok(&alice, &["share", "push", "--json"])).unwrap();
    assert!(p["items"].as_u64().unwrap() >= 2, "{p}");
    let dump = pg.dump();
    assert!(dump.contains("webhook"), "the summaries are there");
    for planted in ["quokkaledger", "wombatcipher"] {
        assert!(!dump.contains(planted), "`{planted}` is only in messages");
    }
    let status: Value = serde_json::from_str(&ok(&alice, &["share", "status", "--json"])).unwrap();
    assert_eq!(status["waiting"]["rows"], 0, "{status}");
    assert_eq!(status["team_holds"][0]["project"], "payments", "{status}");

    // Bob does not belong to `payments` yet: nothing of it, by any word, at any level.
    assert!(search(&bob, &["webhook", "--scope", "team", "--level", "all"]).is_empty());
    ok(&alice, &["team", "access", "bob", "payments"]);
    let hits = search(&bob, &["webhook", "--scope", "team", "--level", "all"]);
    assert!(!hits.is_empty());
    assert!(
        hits.iter()
            .all(|h| h["member"] == "alice" && h["scope"] == "team")
    );
    assert!(hits.iter().all(|h| h["level"] != "raw"));
    // Carol was given no project: her token sees nothing.
    assert!(search(&carol, &["webhook", "--scope", "team", "--level", "all"]).is_empty());

    // Full: the messages too; bob finds the tool's output, and both memories fused.
    ok(&alice, &["share", "/work/payments", "--level", "full"]);
    ok(&alice, &["share", "push"]);
    let hits = search(&bob, &["quokkaledger", "--scope", "team"]);
    assert_eq!(hits.len(), 1, "{hits:?}");
    let both = search(
        &bob,
        &[
            "webhook", "--scope", "all", "--mode", "fts", "--limit", "50",
        ],
    );
    let scopes: std::collections::BTreeSet<&str> =
        both.iter().filter_map(|h| h["scope"].as_str()).collect();
    assert_eq!(scopes, ["local", "team"].into(), "{both:?}");
    let by_member = search(&bob, &["webhook", "--scope", "team", "--member", "bob"]);
    assert!(by_member.is_empty(), "bob shared nothing");

    // Lowered again: the messages leave the team archive.
    ok(&alice, &["share", "/work/payments", "--level", "summaries"]);
    let p: Value = serde_json::from_str(&ok(&alice, &["share", "push", "--json"])).unwrap();
    assert!(p["removed_items"].as_u64().unwrap() >= 3, "{p}");
    assert!(search(&bob, &["quokkaledger", "--scope", "team"]).is_empty());

    // Revoked: refused at once, for search and for push.
    ok(&alice, &["team", "token", "revoke", "bob"]);
    let err = refused(&bob, &["search", "webhook", "--scope", "team"]);
    assert!(err.contains("not valid for this team"), "{err}");
    assert!(!err.contains(&bob_token[4..]));
    let err = refused(&bob, &["share", "push"]);
    assert!(err.contains("not valid for this team"), "{err}");
    let list = ok(&alice, &["team", "token", "list"]);
    assert!(
        list.contains("REVOKED") && !list.contains(&bob_token[12..]),
        "{list}"
    );
    // Only an admin hands out tokens.
    let err = refused(&carol, &["team", "token", "add", "mallory"]);
    assert!(err.contains("not an admin"), "{err}");

    // Withdrawn: `hidden` takes everything back.
    ok(&alice, &["share", "/work/payments", "--level", "hidden"]);
    ok(&alice, &["share", "push"]);
    assert!(!pg.dump().contains("webhook"));

    // Bad input is named.
    let err = refused(&alice, &["search", "x", "--member", "bob"]);
    assert!(err.contains("--member"), "{err}");
    let out = alice.memex(&["share", "/work/payments", "--level", "everything"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("summaries"));
    let err = refused(
        &alice,
        &[
            "share",
            "relative/../..",
            "--level",
            "full",
            "--as",
            "bad\nname",
        ],
    );
    assert!(err.contains("control characters"), "{err}");
    let err = refused(&Home::empty(), &["share", "push"]);
    assert!(err.contains("not in a team"), "{err}");
}

/// The service pushes on its own: a level set while `memex serve` runs reaches the team within
/// seconds, and so does what the member's agent writes next.
#[test]
fn a_running_service_shares_new_work_on_its_own() {
    let pg = PgServer::start_vector();
    let url = pg.url();
    let alice = Home::empty();
    let bob = Home::empty();
    payments_session(&alice, "7c7c7c7c-1111-4222-8333-444444444444");
    ok(&alice, &["team", "create", &url, "--name", "alice"]);
    let t: Value = serde_json::from_str(&ok(
        &alice,
        &[
            "team",
            "token",
            "add",
            "bob",
            "--project",
            "payments",
            "--json",
        ],
    ))
    .unwrap();
    let out = with_stdin(
        &bob,
        &["team", "join", &url, "--token", "-"],
        t["token"].as_str().unwrap(),
    );
    assert!(out.status.success(), "{out:?}");

    let server = alice.serve(&[]);
    ok(&alice, &["share", "/work/payments", "--level", "full"]);
    let wait = |word: &str| {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(60) {
            if !search(&bob, &[word, "--scope", "team"]).is_empty() {
                return start.elapsed();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("`{word}` never reached the team: {}", server.log());
    };
    wait("quokkaledger");
    // The member's agent goes on: its next prompt is shared as it is archived.
    alice.write_claude(
        "/work/payments",
        "8d8d8d8d-1111-4222-8333-444444444444",
        &[claude_prompt(
            "8d8d8d8d-1111-4222-8333-444444444444",
            "n1",
            "/work/payments",
            "now make the refund path idempotent with platypuskey",
        )],
    );
    wait("platypuskey");
}
