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

pub(crate) fn ok(h: &Home, args: &[&str]) -> String {
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

/// `admin` makes a token for `name` (reading `projects`), and `member` joins with it on stdin;
/// the token.
pub(crate) fn hand_token(
    admin: &Home,
    member: &Home,
    url: &str,
    name: &str,
    projects: &[&str],
) -> String {
    let mut args = vec!["team", "token", "add", name, "--json"];
    for p in projects {
        args.extend(["--project", p]);
    }
    let t: Value = serde_json::from_str(&ok(admin, &args)).unwrap();
    let token = t["token"].as_str().unwrap().to_owned();
    let out = with_stdin(member, &["team", "join", url, "--token", "-"], &token);
    assert!(out.status.success(), "{out:?}");
    token
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
pub(crate) fn payments_session(h: &Home, session: &str) {
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
    hand_token(&alice, &bob, &url, "bob", &["payments"]);

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
    // The sharing page says the same as `memex share status`.
    let page = server
        .client()
        .get(server.url("/share"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        page.contains("You share as <strong>alice</strong>"),
        "{page}"
    );
    assert!(
        page.contains("<code>/work/payments</code>") && page.contains(">full<"),
        "{page}"
    );
    assert!(page.contains("<td>payments</td><td>2</td>"), "{page}");
}

/// The team's side through every surface of a member's service: HTTP (`scope`, `member`), the
/// web page's scope switch and member badge, MCP's `search_history`; what they refuse, and a
/// revoked token failing at once.
#[test]
fn every_surface_searches_the_team_and_refuses_what_it_should() {
    let pg = PgServer::start_vector();
    let url = pg.url();
    let alice = Home::empty();
    let bob = Home::empty();
    let loner = Home::empty();
    payments_session(&alice, "9e9e9e9e-1111-4222-8333-444444444444");
    bob.write_claude(
        "/home/bob/infra",
        "6b6b6b6b-1111-4222-8333-444444444444",
        &[claude_prompt(
            "6b6b6b6b-1111-4222-8333-444444444444",
            "b1",
            "/home/bob/infra",
            "the payment webhook times out behind the proxy",
        )],
    );
    ok(&alice, &["import"]);
    ok(&bob, &["import"]);
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
    let bob_token = t["token"].as_str().unwrap().to_owned();
    let out = with_stdin(&bob, &["team", "join", &url, "--token", "-"], &bob_token);
    assert!(out.status.success(), "{out:?}");
    ok(&alice, &["share", "/work/payments", "--level", "full"]);
    ok(&alice, &["share", "push"]);

    let server = bob.serve(&[]);
    // HTTP.
    let v = server.ok("/api/search?q=quokkaledger&scope=team");
    assert_eq!(v["scope"], "team");
    let hits = v["results"].as_array().unwrap();
    assert_eq!(hits.len(), 1, "{v}");
    assert_eq!(hits[0]["member"], "alice");
    let v = server.ok("/api/search?q=webhook&scope=all&mode=fts&limit=50");
    let scopes: std::collections::BTreeSet<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["scope"].as_str())
        .collect();
    assert_eq!(scopes, ["local", "team"].into(), "{v}");
    let v = server.ok("/api/search?q=webhook&scope=team&member=bob");
    assert!(
        v["results"].as_array().unwrap().is_empty(),
        "bob shared nothing"
    );
    for (query, named) in [
        ("q=webhook&scope=everyone", "`scope`"),
        ("q=webhook&member=alice", "`member`"),
        ("q=webhook&scope=team&member=al%0Aice", "`member`"),
    ] {
        let (status, v) = server.get(&format!("/api/search?{query}"));
        assert_eq!(status, 400, "{query}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(named),
            "{query}: {v}"
        );
    }
    // The web page: the switch, and who shared each hit.
    let page = server
        .client()
        .get(server.url("/?q=quokkaledger&scope=team"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        page.contains("name=\"scope\"") && page.contains("shared by alice"),
        "{page}"
    );

    // MCP, as an agent asks.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let home = bob.path().to_owned();
    rt.block_on(async {
        use rmcp::ServiceExt;
        use rmcp::model::CallToolRequestParams;
        use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
        let transport = TokioChildProcess::new(
            tokio::process::Command::new(env!("CARGO_BIN_EXE_memex")).configure(|cmd| {
                cmd.arg("mcp")
                    .env_clear()
                    .env("HOME", &home)
                    .env("PATH", std::env::var_os("PATH").unwrap_or_default());
            }),
        )
        .unwrap();
        let client = ().serve(transport).await.unwrap();
        let call = |args: Value| {
            let client = &client;
            async move {
                match client
                    .call_tool(
                        CallToolRequestParams::new("search_history")
                            .with_arguments(args.as_object().cloned().unwrap()),
                    )
                    .await
                {
                    Ok(res) => {
                        let text = res.content[0].as_text().unwrap().text.clone();
                        (res.is_error == Some(true), text)
                    }
                    Err(e) => (true, e.to_string()),
                }
            }
        };
        let (err, text) = call(json!({"query": "quokkaledger", "scope": "team"})).await;
        assert!(!err, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["results"][0]["member"], "alice", "{v}");
        let (err, text) = call(json!({"query": "webhook", "scope": "nobody"})).await;
        assert!(err && text.contains("scope"), "{text}");
        client.cancel().await.unwrap();
    });

    // Revoked: the very next search is refused, and the answer holds no token.
    ok(&alice, &["team", "token", "revoke", "bob"]);
    let (status, v) = server.get("/api/search?q=quokkaledger&scope=team");
    assert_eq!(status, 502, "{v}");
    assert_eq!(v["error"]["code"], "team_unavailable");
    assert!(!v.to_string().contains(&bob_token[4..]));
    // At scope all, the local answer stands and says why the team's is missing.
    let v = server.ok("/api/search?q=webhook&scope=all&mode=fts");
    assert!(v["notice"].as_str().unwrap().contains("not valid"), "{v}");
    assert!(!v["results"].as_array().unwrap().is_empty());
    drop(server);

    // A machine in no team is told so.
    let server = loner.serve(&[]);
    let (status, v) = server.get("/api/search?q=webhook&scope=team");
    assert_eq!(status, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("no team"),
        "{v}"
    );
}

/// `memex serve --team URL` on a free port of 127.0.0.1, until dropped; its stderr is kept.
pub(crate) struct TeamServer {
    child: std::process::Child,
    pub(crate) addr: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl TeamServer {
    pub(crate) fn start(h: &Home, url: &str) -> TeamServer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut child = h
            .command(&["serve", "--team", url, "--bind", &addr])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (l, mut err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                l.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let start = Instant::now();
        while reqwest::blocking::get(format!("http://{addr}/api/health")).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "the team server did not start: {}",
                log.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        TeamServer { child, addr, log }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// GET with a token (or none): status and JSON.
    fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let mut r = reqwest::blocking::Client::new().get(self.url(path));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let res = r.send().unwrap();
        let status = res.status().as_u16();
        let text = res.text().unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }
}

impl Drop for TeamServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The team server for members without an archive: each token sees its projects only, through
/// HTTP, MCP over Streamable HTTP and the web pages; the local API's guards, and the team
/// server's own (no token in a URL, guessing slowed, refusals logged without the token).
#[test]
fn the_team_server_shows_each_member_only_their_projects() {
    let pg = PgServer::start_vector();
    let url = pg.url();
    let alice = Home::empty();
    payments_session(&alice, "1f1f1f1f-1111-4222-8333-444444444444");
    let ops = "2e2e2e2e-1111-4222-8333-444444444444";
    alice.write_claude(
        "/work/ops",
        ops,
        &[
            claude_prompt(
                ops,
                "o1",
                "/work/ops",
                "rotate the narwhalvault credentials",
            ),
            claude_answer(
                ops,
                "o2",
                "/work/ops",
                "Rotated; narwhalvault is on the new keys.",
            ),
        ],
    );
    ok(&alice, &["import"]);
    ok(&alice, &["team", "create", &url, "--name", "alice"]);
    ok(&alice, &["share", "/work/payments", "--level", "full"]);
    ok(&alice, &["share", "/work/ops", "--level", "full"]);
    ok(&alice, &["share", "push"]);
    let token = |name: &str, project: Option<&str>| -> String {
        let mut args = vec!["team", "token", "add", name, "--json"];
        if let Some(p) = project {
            args.extend(["--project", p]);
        }
        let t: Value = serde_json::from_str(&ok(&alice, &args)).unwrap();
        t["token"].as_str().unwrap().to_owned()
    };
    let bob = token("bob", Some("payments"));
    let carol = token("carol", None);

    let server = TeamServer::start(&Home::empty(), &url);
    // Bob reads payments, and nothing of ops: not in search, lists, counts or by its id.
    let (s, v) = server.get("/api/search?q=quokkaledger", Some(&bob));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["results"].as_array().unwrap().len(), 1);
    assert_eq!(v["results"][0]["member"], "alice");
    for q in ["narwhalvault", "rotate", "credentials"] {
        let (_, v) = server.get(&format!("/api/search?q={q}&level=all"), Some(&bob));
        assert!(v["results"].as_array().unwrap().is_empty(), "{q}: {v}");
    }
    let (_, v) = server.get("/api/projects", Some(&bob));
    assert_eq!(v["projects"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["projects"][0]["project"], "payments");
    let (_, v) = server.get("/api/sessions?limit=100", Some(&bob));
    assert!(
        v["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["project"] == "payments")
    );
    let (s, ops_answer) = server.get(&format!("/api/sessions/{ops}"), Some(&bob));
    let (s2, none_answer) = server.get(
        "/api/sessions/3d3d3d3d-0000-4000-8000-000000000000",
        Some(&bob),
    );
    assert_eq!((s, s2), (404, 404));
    assert_eq!(
        ops_answer["error"]["code"], none_answer["error"]["code"],
        "a session one may not read looks like one that does not exist"
    );
    let (s, v) = server.get("/api/sessions?project=ops", Some(&bob));
    assert_eq!(s, 200);
    assert!(v["sessions"].as_array().unwrap().is_empty());
    // Carol belongs to no project: nothing at all.
    let (_, v) = server.get("/api/search?q=webhook&level=all", Some(&carol));
    assert!(v["results"].as_array().unwrap().is_empty(), "{v}");

    // MCP over Streamable HTTP, with the official Python SDK's client.
    let mcp = |token: &str, query: &str| -> Value {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/clients/mcp_http_client.py");
        let out = std::process::Command::new(crate::common::python_with_mcp())
            .arg(script)
            .arg(server.url("/mcp"))
            .arg(token)
            .arg(query)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "python: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let r = mcp(&bob, "webhook");
    assert_eq!(r["server"], "memex-team");
    assert_eq!(
        r["tools"],
        json!(["get_session", "list_projects", "search_history"])
    );
    assert!(!r["hits"].as_array().unwrap().is_empty());
    assert!(
        r["hits"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["project"] == "payments")
    );
    assert_eq!(r["projects"], json!(["payments"]));
    assert!(r["bad_call"].as_str().unwrap().contains("level"), "{r}");
    assert!(
        r["guessed"].as_str().unwrap().contains("no shared session"),
        "{r}"
    );
    let r = mcp(&bob, "narwhalvault");
    assert!(r["hits"].as_array().unwrap().is_empty(), "{r}");

    // The web pages: sign in with the token, search, see who shared what.
    let web = reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let res = web.get(server.url("/?q=webhook")).send().unwrap();
    assert_eq!(
        res.status().as_u16(),
        303,
        "signed out: to the sign-in page"
    );
    let res = web
        .post(server.url("/login"))
        .json(&json!({"token": bob}))
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 204);
    let cookie = res.headers()[reqwest::header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();
    let signed_in = |path: &str| {
        web.get(server.url(path))
            .header("Cookie", &session)
            .send()
            .unwrap()
    };
    let page = signed_in("/?q=quokkaledger").text().unwrap();
    assert!(page.contains("<td class=\"member\">alice</td>"), "{page}");
    let page = signed_in("/?q=narwhalvault").text().unwrap();
    assert!(page.contains("Nothing found in your projects"), "{page}");

    // Hostile callers. A token in the URL, wherever: refused, before anything else.
    for path in [
        format!("/api/search?q=webhook&token={bob}"),
        format!("/api/search?q={bob}"),
        format!("/?access_token={bob}"),
    ] {
        let (s, v) = server.get(&path, None);
        assert_eq!(s, 400, "{path}: {v}");
        assert_eq!(v["error"]["code"], "token_in_url");
    }
    // Another name (DNS rebinding), another site, a body that is not JSON.
    let c = reqwest::blocking::Client::new();
    let res = c
        .get(server.url("/api/search?q=webhook"))
        .bearer_auth(&bob)
        .header("Host", "evil.example")
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 421);
    let res = c
        .post(server.url("/mcp"))
        .bearer_auth(&bob)
        .header("Origin", "https://evil.example")
        .header("Content-Type", "application/json")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 403);
    let res = c
        .post(server.url("/mcp"))
        .bearer_auth(&bob)
        .header("Content-Type", "text/plain")
        .body("{}")
        .send()
        .unwrap();
    assert_eq!(res.status().as_u16(), 415);
    // A body over the limit is refused by its declared length, before it is read.
    let mut conn = std::net::TcpStream::connect(&server.addr).unwrap();
    write!(
        conn,
        "POST /login HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        server.addr,
        64 << 20
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut conn, &mut answer).ok();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    // The local API's bad input, here: each named.
    for (path, named) in [
        ("/api/search?q=x&limit=ten", "limit"),
        ("/api/search?q=x&level=paragraphs", "level"),
        ("/api/search?q=x&scope=local", "scope"),
        ("/api/search?q=x&host=laptop", "host"),
        ("/api/search?q=x&since=soon", "since"),
        ("/api/search?q=x&member=a%0Ab", "member"),
        ("/api/search", "q"),
        ("/api/sessions?limit=0", "limit"),
        ("/api/sessions?agent=nobody", "agent"),
    ] {
        let (s, v) = server.get(path, Some(&bob));
        assert_eq!(s, 400, "{path}: {v}");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(named),
            "{path}: {v}"
        );
    }
    let long = "x".repeat(3000);
    let (s, _) = server.get(&format!("/api/search?q={long}"), Some(&bob));
    assert_eq!(s, 400);
    let (s, _) = server.get(&format!("/api/sessions/{}", "y".repeat(300)), Some(&bob));
    assert_eq!(s, 400);

    // No token, a malformed one, an unknown one: 401; a revoked one at once.
    let (s, _) = server.get("/api/search?q=webhook", None);
    assert_eq!(s, 401);
    let (s, _) = server.get("/api/search?q=webhook", Some("mxt_short"));
    assert_eq!(s, 401);
    ok(&alice, &["team", "token", "revoke", "bob"]);
    let (s, _) = server.get("/api/search?q=webhook", Some(&bob));
    assert_eq!(s, 401, "revoked: refused at once");
    let page = signed_in("/?q=webhook");
    assert_eq!(
        page.status().as_u16(),
        303,
        "the browser's sign-in ends with its token"
    );

    // Guessing is slowed, then refused outright; carol's own address is the same, so she waits
    // too (the lockout is per address).
    let guesses: Vec<_> = (0..12)
        .map(|_| {
            let url = server.url("/api/projects");
            std::thread::spawn(move || {
                let t = format!("mxt_{}", "0".repeat(64));
                let start = Instant::now();
                let s = reqwest::blocking::Client::new()
                    .get(url)
                    .bearer_auth(t)
                    .send()
                    .unwrap()
                    .status()
                    .as_u16();
                (s, start.elapsed())
            })
        })
        .collect();
    let answers: Vec<(u16, Duration)> = guesses.into_iter().map(|g| g.join().unwrap()).collect();
    assert!(
        answers.iter().all(|(s, _)| *s == 401 || *s == 429),
        "{answers:?}"
    );
    assert!(
        answers
            .iter()
            .filter(|(s, _)| *s == 401)
            .all(|(_, t)| *t >= Duration::from_millis(100)),
        "each refused token costs a wait: {answers:?}"
    );
    let (s, v) = server.get("/api/projects", Some(&carol));
    assert_eq!(s, 429, "{v}");
    // Every refusal is in the log, never a token.
    let log = server.log.lock().unwrap().clone();
    assert!(log.matches("team server: refused").count() >= 12, "{log}");
    for t in [&bob, &carol] {
        assert!(!log.contains(&t[4..]), "a token in the log");
    }
}

/// Smart injection looks in the team archive when the user turns it on: a member's prompt gets
/// what a colleague's agent learned, in a block of its own that says who shared it (real
/// embedding model on both machines; the colleague's vectors travel with their rows).
#[test]
fn smart_injection_brings_the_teams_memory_and_says_whose_it_is() {
    let pg = PgServer::start_vector();
    let url = pg.url();
    let model = crate::common::model_dir();
    let model = model.to_str().unwrap();
    let alice = Home::empty();
    let bob = Home::empty();
    payments_session(&alice, "4a4a4a4a-1111-4222-8333-444444444444");
    bob.write_claude(
        "/home/bob/infra",
        "6b6b6b6b-1111-4222-8333-444444444444",
        &[claude_prompt(
            "6b6b6b6b-1111-4222-8333-444444444444",
            "b1",
            "/home/bob/infra",
            "resize the grafana dashboards for the new monitors",
        )],
    );
    ok(&alice, &["import"]);
    ok(&alice, &["compact", "trigger"]);
    ok(&alice, &["team", "create", &url, "--name", "alice"]);
    hand_token(&alice, &bob, &url, "bob", &["payments"]);
    ok(&alice, &["share", "/work/payments", "--level", "full"]);

    // Alice's service embeds her rows and sends them with their vectors.
    let a = alice.serve(&[("MEMEX_MODEL_DIR", model)]);
    let (client, conn) = {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let (c, conn) = rt
            .block_on(tokio_postgres::connect(&url, tokio_postgres::NoTls))
            .unwrap();
        ((c, rt), conn)
    };
    let (c, rt) = client;
    rt.spawn(conn);
    a.wait_for(
        180,
        "alice's talk summaries in the team archive with their vectors",
        |_| {
            let n: i64 = rt
            .block_on(c.query_one(
                "SELECT count(*) FROM memex_team_vectors v JOIN memex_team_items i ON i.id = v.item
                 WHERE i.layer = 2",
                &[],
            ))
            .map(|r| r.get(0))
            .unwrap_or(0);
            (n > 0).then_some(())
        },
    );

    let b = bob.serve(&[
        ("MEMEX_MODEL_DIR", model),
        ("MEMEX_INJECT_ENABLED", "true"),
        ("MEMEX_INJECT_TEAM", "true"),
        ("MEMEX_INJECT_TEAM_THRESHOLD", "0.05"),
    ]);
    let ask = |prompt: &str| -> Value {
        let res = b
            .client()
            .post(b.url("/api/inject"))
            .json(
                &json!({"mode": "smart", "cwd": "/home/bob/infra", "prompt": prompt,
                          "session_id": "7d7d7d7d-1111-4222-8333-444444444444"}),
            )
            .send()
            .unwrap();
        assert_eq!(res.status().as_u16(), 200);
        res.json().unwrap()
    };
    let v = ask("the payment webhook retries are flaky again; how did we fix the retry backoff?");
    let team: Vec<&Value> = v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["member"] == "alice")
        .collect();
    assert!(!team.is_empty(), "{v}");
    assert!(team.iter().all(|i| i["project"] == "payments"));
    let context = v["context"].as_str().unwrap();
    assert!(
        context.contains("what your team shared") && context.contains("shared by alice"),
        "{context}"
    );
    drop(b);

    // Off (the default): the same prompt gets nothing of the team's.
    let b = bob.serve(&[("MEMEX_MODEL_DIR", model), ("MEMEX_INJECT_ENABLED", "true")]);
    let res: Value = b
        .client()
        .post(b.url("/api/inject"))
        .json(&json!({"mode": "smart", "cwd": "/home/bob/infra",
                      "prompt": "the payment webhook retries are flaky again; how did we fix the retry backoff?",
                      "session_id": "7e7e7e7e-1111-4222-8333-444444444444"}))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(
        res["items"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["member"].is_null()),
        "{res}"
    );
    drop(a);
}
