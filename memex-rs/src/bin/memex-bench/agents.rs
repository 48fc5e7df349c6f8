//! The other source kinds, measured: `generate-agents` writes a SQLite corpus shaped like
//! Crush's database (the agent's own columns) and a document corpus shaped like Roo Code's task
//! files, for `import`; `live-db` runs a real `memex serve` on a Crush database and measures
//! the time from a committed row (WAL, as the agent writes) to a search that finds it.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params};
use serde_json::json;

use super::{FILES, Rng, WORDS};

/// Crush's tables as its migrations create them (charmbracelet/crush `internal/db/migrations`).
const CRUSH_SCHEMA: &str = "
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, parent_session_id TEXT, title TEXT NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, cost REAL NOT NULL DEFAULT 0.0,
    updated_at INTEGER NOT NULL, created_at INTEGER NOT NULL,
    summary_message_id TEXT, todos TEXT);
CREATE TABLE messages (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL, parts TEXT NOT NULL default '[]',
    model TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, finished_at INTEGER,
    provider TEXT, is_summary_message INTEGER DEFAULT 0 NOT NULL,
    FOREIGN KEY (session_id) REFERENCES sessions (id) ON DELETE CASCADE);
";

/// Messages per generated session / task.
const PER_SESSION: usize = 40;

fn sentence(rng: &mut Rng, words: usize) -> String {
    (0..words)
        .map(|_| rng.pick(WORDS))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A Crush database of `rows` messages (prompts, answers, tool calls and results).
pub(crate) fn crush_db(path: &Path, rows: usize, rng: &mut Rng) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(path);
    let mut c = Connection::open(path).unwrap();
    c.pragma_update(None, "journal_mode", "wal").unwrap();
    c.execute_batch(CRUSH_SCHEMA).unwrap();
    let tx = c.transaction().unwrap();
    let t0 = 1_780_000_000_i64;
    for s in 0..rows.div_ceil(PER_SESSION) {
        let sid = format!("bench-session-{s:06}");
        let n = PER_SESSION.min(rows - s * PER_SESSION);
        tx.execute(
            "INSERT INTO sessions (id, title, message_count, updated_at, created_at)
             VALUES (?1, ?2, ?3, ?4, ?4)",
            params![sid, sentence(rng, 5), n as i64, t0 + s as i64 * 3600],
        )
        .unwrap();
        for i in 0..n {
            let (role, parts) = match i % 4 {
                0 => (
                    "user",
                    json!([{"type": "text", "data": {"text": sentence(rng, 12)}}]),
                ),
                1 => (
                    "assistant",
                    json!([{"type": "text", "data": {"text": sentence(rng, 40)}},
                        {"type": "tool_call", "data": {"id": format!("call-{s}-{i}"), "name": "view",
                          "input": json!({"file_path": rng.pick(FILES)}).to_string(), "finished": true}}]),
                ),
                2 => (
                    "tool",
                    json!([{"type": "tool_result", "data": {"tool_call_id": format!("call-{s}-{}", i - 1),
                        "name": "view", "content": sentence(rng, 120), "is_error": false}}]),
                ),
                _ => (
                    "assistant",
                    json!([{"type": "text", "data": {"text": sentence(rng, 60)}}]),
                ),
            };
            let at = t0 + s as i64 * 3600 + i as i64;
            tx.execute(
                "INSERT INTO messages (id, session_id, role, parts, model, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, 'claude-sonnet-4-5', ?5, ?5)",
                params![format!("m-{s}-{i}"), sid, role, parts.to_string(), at],
            )
            .unwrap();
        }
    }
    tx.commit().unwrap();
    c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)").unwrap();
}

/// Roo Code task folders holding `rows` messages in all.
fn roo_tasks(dir: &Path, rows: usize, rng: &mut Rng) {
    let t0 = 1_780_000_000_000_i64;
    for t in 0..rows.div_ceil(PER_SESSION) {
        let n = PER_SESSION.min(rows - t * PER_SESSION);
        let mut msgs = Vec::with_capacity(n);
        for i in 0..n {
            let ts = t0 + (t * 3600 + i) as i64 * 1000;
            msgs.push(match i % 4 {
                0 => json!({"role": "user", "ts": ts, "content": [
                    {"type": "text", "text": format!("<task>\n{}\n</task>", sentence(rng, 12))}]}),
                1 => json!({"role": "assistant", "ts": ts, "content": [
                    {"type": "text", "text": sentence(rng, 40)},
                    {"type": "tool_use", "id": format!("toolu-{t}-{i}"), "name": "read_file",
                     "input": {"path": rng.pick(FILES)}}]}),
                2 => json!({"role": "user", "ts": ts, "content": [
                    {"type": "tool_result", "tool_use_id": format!("toolu-{t}-{}", i - 1),
                     "content": [{"type": "text", "text": sentence(rng, 120)}]}]}),
                _ => json!({"role": "assistant", "ts": ts, "content": [
                    {"type": "text", "text": sentence(rng, 60)}]}),
            });
        }
        let task = dir.join(format!("bench-task-{t:06}"));
        std::fs::create_dir_all(&task).unwrap();
        std::fs::write(
            task.join("api_conversation_history.json"),
            serde_json::to_vec(&msgs).unwrap(),
        )
        .unwrap();
    }
}

/// `generate-agents --out DIR --rows N`: `DIR/crush/bench-project` (a project folder with
/// `.crush/crush.db`) and `DIR/roo/tasks`.
pub(crate) fn generate(out: &Path, rows: usize) {
    let mut rng = Rng(0x0a9e_17c0);
    let t = Instant::now();
    crush_db(
        &out.join("crush/bench-project/.crush/crush.db"),
        rows,
        &mut rng,
    );
    roo_tasks(&out.join("roo/tasks"), rows, &mut rng);
    println!(
        "generated {rows} Crush rows and {rows} Roo messages in {:.1}s",
        t.elapsed().as_secs_f64()
    );
}

/// The roots of a `generate-agents` corpus that exist.
pub(crate) fn roots(corpus: &Path) -> Vec<(String, PathBuf)> {
    [
        ("crush", corpus.join("crush/bench-project")),
        ("roo", corpus.join("roo/tasks")),
    ]
    .into_iter()
    .filter(|(_, p)| p.is_dir())
    .map(|(a, p)| (a.to_owned(), p))
    .collect()
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// `live-db --memex BIN [--rows N] [--inserts N]`: a real service on a Crush database of `rows`
/// messages; `inserts` prompts committed one at a time, each timed until search finds it.
pub(crate) fn live(memex: &Path, rows: usize, inserts: usize) {
    let tmp = std::env::temp_dir().join(format!("memex-live-db-{}", std::process::id()));
    let project = tmp.join("project");
    let db = project.join(".crush/crush.db");
    crush_db(&db, rows, &mut Rng(0x11fe_db00));
    let mut child = Command::new(memex)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env_clear()
        .env("HOME", &tmp)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("MEMEX_DATA_DIR", tmp.join("data"))
        .env("MEMEX_AGENTS_CRUSH_ROOTS", &project)
        .env("MEMEX_VECTOR_PROVIDER", "off")
        .env("MEMEX_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start memex serve");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(600))
        .expect("memex serve did not start");
    let client = crate::service_client(&tmp.join("data"), None);
    let get = |p: &str| -> serde_json::Value {
        client
            .get(format!("http://{addr}{p}"))
            .send()
            .and_then(|r| r.json())
            .unwrap_or_default()
    };
    let t = Instant::now();
    while get("/api/health")["phase"] != "watching" {
        std::thread::sleep(Duration::from_millis(20));
    }
    println!(
        "live-db: {rows} rows backfilled, watching after {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let agent = Connection::open(&db).unwrap();
    agent.pragma_update(None, "journal_mode", "wal").unwrap();
    let mut lat = Vec::with_capacity(inserts);
    for i in 0..inserts {
        let word = format!("livedbword{i}x");
        let parts = json!([{"type": "text", "data": {"text": format!("where is {word}")}}]);
        let t = Instant::now();
        agent
            .execute(
                "INSERT INTO messages (id, session_id, role, parts, created_at, updated_at)
                 VALUES (?1, 'bench-session-000000', 'user', ?2, ?3, ?3)",
                params![
                    format!("live-{i}"),
                    parts.to_string(),
                    chrono::Utc::now().timestamp()
                ],
            )
            .unwrap();
        loop {
            let v = get(&format!("/api/search?q={word}&agent=crush&mode=fts"));
            if v["results"].as_array().is_some_and(|r| !r.is_empty()) {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "{word} never found");
            std::thread::sleep(Duration::from_millis(5));
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(50));
    }
    println!(
        "  committed row → searchable: p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms ({inserts} rows)",
        pct(&lat, 0.5),
        pct(&lat, 0.95),
        pct(&lat, 1.0)
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::io::stdout().flush();
    let _ = std::fs::remove_dir_all(&tmp);
}
