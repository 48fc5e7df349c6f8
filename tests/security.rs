//! The local API against a hostile caller: a web page in the user's browser (DNS rebinding,
//! cross-site requests), oversized queries, a wrong token. A real `memex serve` on 127.0.0.1.
//! (Another user of the machine and a squatter on the port: `tests/owner.rs`.)

use crate::common;

use std::io::{Read, Write};

use common::*;
use serde_json::Value;

/// Sends `head` (request line and headers, without the blank line) and `body` over a plain
/// socket, so every header is exactly what a hostile client would send. Returns the status, the
/// response headers (lower case) and the body.
fn raw(addr: &str, head: &str, body: &str) -> (u16, String, String) {
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        conn,
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = Vec::new();
    conn.read_to_end(&mut out).unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (headers, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = headers
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, headers.to_ascii_lowercase(), body.to_owned())
}

fn error_code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    v["error"]["code"].as_str().unwrap_or("").to_owned()
}

/// Compaction jobs queued through the API (trigger, regenerate): what a cross-site request
/// would spend money on.
fn api_jobs(h: &Home) -> i64 {
    count(
        &db(&h.data_dir()),
        "SELECT COUNT(*) FROM compact_jobs WHERE reason IN ('api', 'regenerate')",
    )
}

#[test]
fn a_web_page_cannot_read_or_change_the_archive() {
    let h = Home::with_fixtures();
    let s = h.serve(&[]);
    s.wait_watching();
    let port = s.addr.rsplit_once(':').unwrap().1.to_owned();

    // DNS rebinding: the page's own name arrives in Host.
    for path in ["/api/sessions", "/api/search?q=test", "/api/health"] {
        let (code, _, body) = raw(
            &s.addr,
            &format!("GET {path} HTTP/1.1\r\nHost: evil.example:{port}"),
            "",
        );
        assert_eq!(code, 421, "{path}: {body}");
        assert_eq!(error_code(&body), "host_not_allowed");
        assert!(body.contains("evil.example"), "{body}");
    }
    // The service's own names are served, to a caller with its token (a page has none).
    let bearer = format!("Authorization: Bearer {}", s.token);
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LocalHost:{port}"),
    ] {
        let (code, _, body) = raw(
            &s.addr,
            &format!("GET /api/sessions HTTP/1.1\r\nHost: {host}\r\n{bearer}"),
            "",
        );
        assert_eq!(code, 200, "{host}: {body}");
        assert!(body.contains("sessions"));
        let (code, _, body) = raw(
            &s.addr,
            &format!("GET /api/sessions HTTP/1.1\r\nHost: {host}"),
            "",
        );
        assert_eq!(
            (code, error_code(&body).as_str()),
            (401, "unauthorized"),
            "{host}: {body}"
        );
    }
    let (code, _, body) = raw(&s.addr, "GET /api/sessions HTTP/1.0", "");
    assert_eq!(
        (code, error_code(&body).as_str()),
        (421, "host_not_allowed")
    );

    // A cross-site "simple request" (text/plain, no preflight) queues nothing, even with the
    // token (which a page does not have).
    let own = format!("Host: 127.0.0.1:{port}\r\n{bearer}");
    let (code, headers, body) = raw(
        &s.addr,
        &format!(
            "POST /api/compact/regenerate HTTP/1.1\r\n{own}\r\nOrigin: http://evil.example\r\nContent-Type: text/plain"
        ),
        r#"{"level":"all"}"#,
    );
    assert_eq!(code, 403, "{body}");
    assert_eq!(error_code(&body), "origin_not_allowed");
    assert!(
        !headers.contains("access-control-allow-origin"),
        "{headers}"
    );
    // The same without Origin (an old browser, a form): not JSON, not accepted.
    for ct in ["text/plain", "application/x-www-form-urlencoded", ""] {
        let ct_line = if ct.is_empty() {
            String::new()
        } else {
            format!("\r\nContent-Type: {ct}")
        };
        for path in [
            "/api/compact/regenerate",
            "/api/compact/trigger",
            "/api/inject",
        ] {
            let (code, _, body) = raw(
                &s.addr,
                &format!("POST {path} HTTP/1.1\r\n{own}{ct_line}"),
                r#"{"level":"all"}"#,
            );
            assert_eq!(code, 415, "{path} {ct}: {body}");
            assert_eq!(error_code(&body), "unsupported_media_type");
        }
    }
    // JSON, but from another origin.
    let (code, _, body) = raw(
        &s.addr,
        &format!(
            "POST /api/compact/trigger HTTP/1.1\r\n{own}\r\nOrigin: http://evil.example\r\nContent-Type: application/json"
        ),
        "{}",
    );
    assert_eq!(
        (code, error_code(&body).as_str()),
        (403, "origin_not_allowed")
    );
    let (code, _, _) = raw(
        &s.addr,
        &format!(
            "POST /api/compact/trigger HTTP/1.1\r\n{own}\r\nOrigin: null\r\nContent-Type: application/json"
        ),
        "{}",
    );
    assert_eq!(code, 403);
    assert_eq!(api_jobs(&h), 0, "no request above may queue work");
    // A cross-site GET (an <img>, a link) is refused; no CORS headers for anyone.
    let (code, headers, _) = raw(
        &s.addr,
        &format!("GET /api/sessions HTTP/1.1\r\n{own}\r\nSec-Fetch-Site: cross-site"),
        "",
    );
    assert_eq!(code, 403);
    assert!(!headers.contains("access-control-allow-origin"));
    let (code, headers, _) = raw(
        &s.addr,
        &format!(
            "OPTIONS /api/search HTTP/1.1\r\n{own}\r\nOrigin: http://evil.example\r\nAccess-Control-Request-Method: GET"
        ),
        "",
    );
    assert_eq!(code, 403);
    assert!(!headers.contains("access-control-allow"), "{headers}");
    // The service's own origin (its web pages) may post JSON.
    let (code, _, body) = raw(
        &s.addr,
        &format!(
            "POST /api/compact/trigger HTTP/1.1\r\n{own}\r\nOrigin: http://127.0.0.1:{port}\r\nContent-Type: application/json; charset=utf-8"
        ),
        "{}",
    );
    assert_eq!(code, 202, "{body}");

    // Cost: a query is bounded in terms, not only in bytes.
    let many: Vec<String> = (0..33).map(|i| format!("w{i}")).collect();
    let (code, v) = s.get(&format!("/api/search?q={}", many.join("+")));
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("32"),
        "{v}"
    );
    let (code, _) = s.get(&format!("/api/search?q={}", many[..32].join("+")));
    assert_eq!(code, 200);
}

#[test]
fn listed_origins_get_cors_and_a_token_is_matched_in_any_case() {
    let h = Home::with_fixtures();
    let s = h.serve(&[
        ("MEMEX_API_CORS_ORIGINS", "https://app.example"),
        ("MEMEX_API_TOKEN", "tok-123-of-twenty-four-chars"),
    ]);
    let port = s.addr.rsplit_once(':').unwrap().1.to_owned();
    let own = format!("Host: 127.0.0.1:{port}");
    let (code, headers, _) = raw(
        &s.addr,
        &format!(
            "OPTIONS /api/search HTTP/1.1\r\n{own}\r\nOrigin: https://app.example\r\nAccess-Control-Request-Method: GET"
        ),
        "",
    );
    assert_eq!(code, 204);
    assert!(
        headers.contains("access-control-allow-origin: https://app.example"),
        "{headers}"
    );
    for auth in [
        "Bearer tok-123-of-twenty-four-chars",
        "bearer tok-123-of-twenty-four-chars",
        "BEARER tok-123-of-twenty-four-chars",
    ] {
        let (code, headers, body) = raw(
            &s.addr,
            &format!(
                "GET /api/sessions HTTP/1.1\r\n{own}\r\nOrigin: https://app.example\r\nAuthorization: {auth}"
            ),
            "",
        );
        assert_eq!(code, 200, "{auth}: {body}");
        assert!(headers.contains("access-control-allow-origin: https://app.example"));
    }
    let (code, _, body) = raw(
        &s.addr,
        &format!(
            "GET /api/sessions HTTP/1.1\r\n{own}\r\nAuthorization: Bearer tok-124-of-twenty-four-chars"
        ),
        "",
    );
    assert_eq!((code, error_code(&body).as_str()), (401, "unauthorized"));
    // Another origin still gets nothing, token or not.
    let (code, _, _) = raw(
        &s.addr,
        &format!(
            "GET /api/sessions HTTP/1.1\r\n{own}\r\nOrigin: https://other.example\r\nAuthorization: Bearer tok-123-of-twenty-four-chars"
        ),
        "",
    );
    assert_eq!(code, 403);

    // `*` relaxes the Host check only with a token, and only when the user says so.
    let out = h
        .command(&["config"])
        .env("MEMEX_API_ALLOWED_HOSTS", "*")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("api.allowed_hosts"));
}

fn modes(dir: &std::path::Path) -> Vec<(String, u32)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = vec![(
        dir.display().to_string(),
        std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
    )];
    for p in walkdir(dir) {
        let m = std::fs::symlink_metadata(&p).unwrap();
        out.push((p.display().to_string(), m.permissions().mode() & 0o777));
    }
    out
}

#[test]
fn the_data_folder_is_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let h = Home::with_fixtures();
    // The user's shell has the common umask 022.
    let run = |args: &str| {
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &format!("umask 022 && exec \"$0\" {args}"),
                env!("CARGO_BIN_EXE_memex"),
            ])
            .env_clear()
            .env("HOME", h.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    run("import");
    let data = h.data_dir();
    let seen = modes(&data);
    assert!(seen.len() >= 3, "{seen:?}");
    for (path, mode) in &seen {
        let want = if std::path::Path::new(path).is_dir() {
            0o700
        } else {
            0o600
        };
        assert_eq!(*mode, want, "{path} is {mode:o}");
    }
    // A data folder written by an earlier version (or by hand) is tightened at start.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        data.join("memex.db"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::create_dir_all(data.join("logs")).unwrap();
    std::fs::set_permissions(data.join("logs"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(data.join("logs/old.log"), "x").unwrap();
    std::fs::set_permissions(
        data.join("logs/old.log"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    run("status");
    for (path, mode) in modes(&data) {
        assert_eq!(mode & 0o077, 0, "{path} is {mode:o}");
    }
}

fn hostile_value(rng: &mut Rng) -> String {
    match rng.below(10) {
        0 => String::new(),
        1 => "%FF%FE%00".into(),
        2 => "x".repeat(rng.below(5000) as usize),
        3 => "-1".into(),
        4 => "99999999999999999999".into(),
        5 => "%E8%AA%8D%E8%A8%BC%20%E5%A4%B1%E6%95%97".into(),
        6 => "%22%5C%27%3B--".into(),
        7 => "7d".into(),
        8 => rng
            .pick(&[
                "raw", "all", "talks", "hybrid", "fts", "vector", "summary", "claude",
            ])
            .into(),
        _ => format!("{}", rng.next()),
    }
}

fn hostile_body(rng: &mut Rng) -> String {
    match rng.below(9) {
        0 => String::new(),
        1 => "{".repeat(rng.below(3000) as usize),
        2 => "[1, 2".into(),
        3 => (0..rng.below(200))
            .map(|_| char::from(b' ' + (rng.next() % 95) as u8))
            .collect(),
        4 => r#"{"level": 5, "session": [], "since": {}}"#.into(),
        5 => r#"{"mode": "smart", "cwd": "/p", "prompt": "why does the build fail again", "max_results": -3}"#.into(),
        6 => r#"{"session": "nope", "match": "abcd"}"#.into(),
        7 => format!("{{\"q\": \"{}\"}}", "z".repeat(rng.below(100_000) as usize)),
        _ => r#"{"dry_run": "yes", "before": "yesterday"}"#.into(),
    }
}

/// Every endpoint, with random and hostile parameters, bodies and headers: never a 5xx, never
/// a panic, always the JSON error shape; the service is healthy afterwards.
#[test]
fn random_and_hostile_requests_get_json_errors_and_never_a_5xx() {
    let h = Home::with_fixtures();
    let s = h.serve(&[]);
    s.wait_watching();
    let port = s.addr.rsplit_once(':').unwrap().1.to_owned();
    let paths = [
        "/api/health",
        "/api/stats",
        "/api/search",
        "/api/sessions",
        "/api/sessions/%FF",
        "/api/sessions/abcd",
        "/api/sessions/abcd/summary",
        "/api/compact/trigger",
        "/api/compact/session/abcd",
        "/api/compact/regenerate",
        "/api/compact/status",
        "/api/inject",
        "/api/forget",
        "/api/scrub",
        "/api/nope",
        "/",
        "/api/sessions/..%2F..%2Fetc%2Fpasswd",
        "/search",
        "/sessions",
        "/sessions/abcd",
        "/sessions/%FF",
        "/projects",
        "/dashboard",
        "/assets/memex.css",
        "/api/sessions/abcd/export",
    ];
    let keys = [
        "q", "limit", "agent", "project", "session", "since", "until", "level", "mode", "format",
        "offset", "bogus", "q[]", "page", "talk", "from", "fragment",
    ];
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for i in 0..1500 {
        let method = rng.pick(&["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH"]);
        let path = rng.pick(&paths);
        let mut query = String::new();
        for _ in 0..rng.below(4) {
            let k = rng.pick(&keys);
            query.push_str(&format!("{k}={}&", hostile_value(&mut rng)));
        }
        let target = if query.is_empty() {
            path.to_owned()
        } else {
            format!("{path}?{query}")
        };
        let mut head = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}");
        if rng.below(3) > 0 {
            let ct = rng.pick(&[
                "application/json",
                "application/json; charset=utf-8",
                "text/plain",
                "application/jsonx",
                "",
                "multipart/form-data; boundary=x",
            ]);
            head.push_str(&format!("\r\nContent-Type: {ct}"));
        }
        // Mostly the owner's token, so that every handler is reached; sometimes a wrong one.
        match rng.below(6) {
            0 => {
                let auth = rng.pick(&[
                    "Bearer",
                    "Bearer x",
                    "Basic Zm9vOmJhcg==",
                    "bearer  ",
                    "Bearer é",
                ]);
                head.push_str(&format!("\r\nAuthorization: {auth}"));
            }
            1 => {}
            _ => head.push_str(&format!("\r\nAuthorization: Bearer {}", s.token)),
        }
        if rng.below(10) == 0 {
            head.push_str("\r\nOrigin: http://evil.example");
        }
        let body = if method == "GET" && rng.below(4) > 0 {
            String::new()
        } else {
            hostile_body(&mut rng)
        };
        let (code, headers, text) = raw(&s.addr, &head, &body);
        assert!(
            (200..500).contains(&code),
            "request {i}: {method} {target} ({body:.80}) → {code}: {text:.300}"
        );
        if method == "HEAD" {
            continue;
        }
        // The web pages answer in HTML, with their policy, errors included (a refusal by the
        // guard is JSON, like the API's).
        let html = headers
            .to_ascii_lowercase()
            .contains("content-type: text/html");
        // A page asked for without the token: the sign-in page.
        if !path.starts_with("/api")
            && code == 303
            && headers.to_ascii_lowercase().contains("location: /login")
        {
            continue;
        }
        if !path.starts_with("/api") && (html || path.starts_with("/assets")) {
            if html {
                assert!(
                    headers
                        .to_ascii_lowercase()
                        .contains("content-security-policy: default-src 'none'"),
                    "request {i}: {method} {target} → {code} without the page policy\n{headers}"
                );
                assert!(!text.contains("<script>"), "request {i}: {target}");
            }
            continue;
        }
        if code >= 400 {
            let v: Value = serde_json::from_str(&text).unwrap_or_default();
            assert!(
                v["error"]["code"].is_string() && v["error"]["message"].is_string(),
                "request {i}: {method} {target} ({body:.80}) → {code} without the error shape: {text:.300}\n{headers}"
            );
        } else if code != 204 {
            let v: Result<Value, _> = serde_json::from_str(&text);
            assert!(
                v.is_ok(),
                "request {i}: {method} {target} → {code}, not JSON: {text:.300}"
            );
        }
    }
    let (code, _) = s.get("/api/health");
    assert_eq!(code, 200);
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

/// `memex forget` and `memex scrub` while the service runs: the CLI hands them to it.
#[test]
fn forget_and_scrub_go_through_a_running_service() {
    let h = Home::with_fixtures();
    let s = h.serve(&[]);
    s.wait_watching();
    let list = s.ok("/api/sessions?limit=1");
    let id = list["sessions"][0]["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let post = |path: &str, body: &str| s.post(path, body);
    let (code, dry) = post(
        "/api/forget",
        &format!(r#"{{"session": "{id}", "dry_run": true}}"#),
    );
    assert_eq!(code, 200, "{dry}");
    let n = dry["messages"].as_i64().unwrap();
    assert!(n > 0 && dry["dry_run"] == true, "{dry}");
    let (code, v) = post("/api/forget", r#"{"session": "x", "project": "/p"}"#);
    assert_eq!(
        (code, v["error"]["code"].as_str()),
        (400, Some("bad_parameter"))
    );
    // The CLI, with the service holding the archive.
    let out = h.memex(&["forget", "--session", &id, "--yes", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(done["messages"].as_i64(), Some(n), "{done}");
    let (code, _) = s.get(&format!("/api/sessions/{id}"));
    assert_eq!(code, 404);
    let out = h.memex(&["scrub", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["found"].is_object(), "{report}");
    let (code, _) = s.get("/api/health");
    assert_eq!(code, 200);
}

/// A "service" on loopback that answers every request with `status` and `body`, and records
/// each request's line and its `Authorization` header. With the owner's `secret` it answers
/// the proof a client asks first (a service of the owner's that then fails); without it, it is a
/// squatter that cannot.
fn fake_service(
    status: &str,
    body: &'static str,
    secret: Option<memex::owner::Secret>,
) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (status, log) = (status.to_owned(), seen.clone());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { break };
            let mut buf = [0u8; 8192];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            let line = head.lines().next().unwrap_or("").to_owned();
            let auth = head
                .lines()
                .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
                .unwrap_or("");
            log.lock().unwrap().push(format!("{line} {auth}"));
            let proof = line
                .split("/api/proof?challenge=")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .zip(secret.as_ref())
                .map(|(c, k)| format!(r#"{{"proof":"{}"}}"#, k.proof(port, c)));
            let (status, body) = match &proof {
                Some(p) => ("200 OK", p.as_str()),
                None => (status.as_str(), body),
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, seen)
}

#[test]
fn a_search_never_trusts_a_failing_service_and_says_so() {
    let h = Home::with_fixtures();
    assert!(h.memex(&["import"]).status.success());
    let local = h.json(&["search", "--json", "--mode", "fts", "timezone"]);
    assert!(!local["results"].as_array().unwrap().is_empty(), "{local}");
    // A service of this data folder ran here once: its secret is in the folder.
    let secret = memex::owner::load_or_create(&h.data_dir(), "").unwrap();

    // The data directory's lock names a service of the owner's that fails every request.
    let (addr, seen) = fake_service(
        "500 Internal Server Error",
        r#"{"error":{"code":"internal","message":"boom"}}"#,
        Some(secret.clone()),
    );
    let mut lock = memex::store::lock::acquire(&h.data_dir(), "test").unwrap();
    lock.describe(&format!("{}{addr}", memex::store::lock::SERVE_ON));
    let out = h.memex(&["search", "--json", "timezone"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("asked the running service at {addr}")) && err.contains("boom"),
        "{err}"
    );
    // It was asked for its proof, then once with the query and the token, and the answer came
    // from the archive itself.
    let asked = seen.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[0].starts_with("GET /api/proof?challenge="),
        "{asked:?}"
    );
    assert!(!asked[0].contains(secret.as_str()), "{asked:?}");
    assert!(
        asked[1].starts_with("GET /api/search?q=timezone")
            && asked[1].contains(&format!("Bearer {}", secret.as_str())),
        "{asked:?}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["results"][0]["session_id"],
        local["results"][0]["session_id"]
    );
    // Words alone never ask it.
    assert!(
        h.memex(&["search", "--mode", "fts", "timezone"])
            .status
            .success()
    );
    assert_eq!(seen.lock().unwrap().len(), 2);

    // A listener that cannot prove it holds the secret (another user's program on the port)
    // gets the challenge and nothing else: no query, no token.
    let (squatter, heard) = fake_service("200 OK", r#"{"results":[], "mode":"hybrid"}"#, None);
    lock.describe(&format!("{}{squatter}", memex::store::lock::SERVE_ON));
    let out = h.memex(&["search", "--json", "timezone"]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did not prove"), "{err}");
    let heard = heard.lock().unwrap().clone();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert!(
        heard[0].starts_with("GET /api/proof?challenge=") && !heard[0].contains("Bearer"),
        "{heard:?}"
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["results"][0]["session_id"],
        local["results"][0]["session_id"]
    );

    // A service that answers what this version does not read is not believed either.
    let (odd, _) = fake_service("200 OK", r#"{"results":"all of them"}"#, Some(secret));
    lock.describe(&format!("{}{odd}", memex::store::lock::SERVE_ON));
    let out = h.memex(&["search", "--json", "timezone"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not read"));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["results"].is_array(), "{v}");
    drop(lock);
}
