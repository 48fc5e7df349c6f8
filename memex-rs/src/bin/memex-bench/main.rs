//! Benchmarks on a generated corpus (numbers go to BENCHMARKS.md, never into tests).
//!
//! ```text
//! memex-bench generate --out DIR --messages N   realistic Claude / Codex / Gemini transcripts
//! memex-bench import   --corpus DIR --data DIR  import speed, peak RSS, store size ÷ source size
//! memex-bench search   --corpus DIR --data DIR  raw FTS p50/p99 over a fixed query set, and rg
//!                      (champion lists brought up to date first; `--no-lists` skips that)
//! memex-bench compact  --data DIR [--workers N]  heuristic L1/L2/L3 over a whole archive
//! memex-bench talk-cost --data DIR              tokens an LLM would spend per talk (no model)
//! memex-bench live     --memex BIN --corpus DIR --data DIR
//!                      a real `memex serve` on that archive: append → searchable latency,
//!                      idle and burst RSS, HTTP search throughput, shutdown time
//! memex-bench generate-agents --out DIR --rows N   a Crush database and Roo task documents
//! memex-bench live-db  --memex BIN [--rows N]      committed SQLite row → searchable latency
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ai_cli_session_collector::AdapterRegistry;
use memex::search::{Mode, SearchParams, Semantic, search};
use memex::store::{self, ingest};

/// Deterministic xorshift: the same corpus on every machine.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

const WORDS: &[&str] = &[
    "the",
    "test",
    "function",
    "returns",
    "error",
    "because",
    "timezone",
    "parser",
    "config",
    "value",
    "database",
    "migration",
    "webhook",
    "signature",
    "retry",
    "backoff",
    "request",
    "response",
    "cache",
    "invalidate",
    "session",
    "token",
    "refresh",
    "handler",
    "router",
    "middleware",
    "component",
    "state",
    "render",
    "build",
    "deploy",
    "pipeline",
    "docker",
    "image",
    "layer",
    "index",
    "query",
    "latency",
    "throughput",
    "memory",
    "leak",
    "allocation",
    "thread",
    "lock",
    "mutex",
    "async",
    "await",
    "future",
    "stream",
    "buffer",
    "encoding",
    "utf8",
    "json",
    "schema",
    "field",
    "type",
    "struct",
    "enum",
    "trait",
    "module",
    "crate",
    "package",
    "dependency",
    "version",
    "upgrade",
    "regression",
    "flaky",
    "timeout",
    "assert",
    "expected",
    "received",
    "null",
    "undefined",
    "promise",
    "callback",
    "closure",
    "iterator",
];
const FILES: &[&str] = &[
    "src/date.ts",
    "src/api/webhook.rs",
    "src/db/migrate.py",
    "lib/parser.go",
    "app/models/user.rb",
    "src/components/Header.tsx",
    "tests/test_auth.py",
    "Cargo.toml",
    "package.json",
    "src/cache.rs",
];
const PROMPTS: &[&str] = &[
    "Fix the failing timezone test in the date formatter",
    "Why does the webhook signature check fail in production?",
    "Refactor the parser so that it streams instead of buffering",
    "Add a database migration for the new sessions table",
    "The retry backoff is too aggressive, tone it down",
    "Investigate the memory leak in the cache layer",
    "Upgrade the dependency and fix the TypeError it causes",
    "Write tests for the refresh token handler",
    "请帮我修复用户认证失败的问题",
    "Explain how the router middleware chain works",
];

fn sentence(r: &mut Rng, words: usize) -> String {
    let mut s = String::new();
    for i in 0..words {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(r.pick(WORDS));
    }
    s.push('.');
    s
}

fn paragraph(r: &mut Rng, sentences: usize) -> String {
    (0..sentences)
        .map(|_| {
            let n = 6 + r.below(12);
            sentence(r, n)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn tool_output(r: &mut Rng) -> String {
    // Mostly short, sometimes long (file reads, test logs).
    let lines = if r.below(10) == 0 {
        60 + r.below(120)
    } else {
        2 + r.below(12)
    };
    (0..lines)
        .map(|i| {
            let file = r.pick(FILES);
            let n = 4 + r.below(8);
            format!("{:>4}  {file} {}", i + 1, sentence(r, n))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ts(base: i64, i: usize) -> String {
    chrono::DateTime::from_timestamp_millis(base + i as i64 * 4000)
        .unwrap()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Writes one Claude session (and sometimes a sub-agent file); returns messages written.
fn claude_session(r: &mut Rng, root: &Path, n: usize, target: usize, base: i64) -> usize {
    let project = format!("/home/dev/proj{}", n % 40);
    let dir = root.join(project.replace('/', "-"));
    std::fs::create_dir_all(&dir).unwrap();
    let sid = format!(
        "{:08x}-0000-4000-8000-{:012x}",
        n,
        r.next() & 0xffff_ffff_ffff
    );
    let mut f =
        std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{sid}.jsonl"))).unwrap());
    let mut count = 0;
    let mut i = 0;
    let env = |uuid: &str, parent: &str, i: usize| {
        serde_json::json!({"uuid": uuid, "parentUuid": parent, "sessionId": sid, "cwd": project,
            "gitBranch": "main", "version": "2.1.120", "timestamp": ts(base, i), "isSidechain": false, "userType": "external"})
    };
    let mut parent = String::new();
    while count < target {
        let uuid = format!("{sid}-{i}");
        let mut l = env(&uuid, &parent, i);
        l["type"] = "user".into();
        l["message"] = serde_json::json!({"role": "user", "content": format!("{} ({})", r.pick(PROMPTS), sentence(r, 8))});
        writeln!(f, "{l}").unwrap();
        parent = uuid;
        count += 1;
        i += 1;
        let msg_id = format!("msg_{n}_{i}");
        // thinking, text, then a few tool calls with results
        for (kind, body) in [("thinking", paragraph(r, 2)), ("text", paragraph(r, 3))] {
            let uuid = format!("{sid}-{i}");
            let mut l = env(&uuid, &parent, i);
            l["type"] = "assistant".into();
            let block = if kind == "thinking" {
                serde_json::json!({"type": "thinking", "thinking": body, "signature": "EpwBCkYIBRgCKkDemo"})
            } else {
                serde_json::json!({"type": "text", "text": body})
            };
            l["message"] = serde_json::json!({"id": msg_id, "model": "claude-opus-4-7", "role": "assistant", "type": "message",
                "content": [block], "usage": {"input_tokens": 6, "output_tokens": 40 + i, "cache_read_input_tokens": 9000}});
            writeln!(f, "{l}").unwrap();
            parent = uuid;
            count += 1;
            i += 1;
        }
        for _ in 0..(1 + r.below(4)) {
            let call = format!("toolu_{n}_{i}");
            let uuid = format!("{sid}-{i}");
            let mut l = env(&uuid, &parent, i);
            l["type"] = "assistant".into();
            let (name, input) = match r.below(3) {
                0 => (
                    "Read",
                    serde_json::json!({"file_path": format!("{project}/{}", r.pick(FILES))}),
                ),
                1 => (
                    "Bash",
                    serde_json::json!({"command": format!("npm test -- {}", r.pick(WORDS)), "description": sentence(r, 5)}),
                ),
                _ => (
                    "Edit",
                    serde_json::json!({"file_path": format!("{project}/{}", r.pick(FILES)), "old_string": sentence(r, 6), "new_string": sentence(r, 6)}),
                ),
            };
            l["message"] = serde_json::json!({"id": format!("msg_{n}_{i}"), "model": "claude-opus-4-7", "role": "assistant",
                "content": [{"type": "tool_use", "id": call, "name": name, "input": input}], "usage": {"input_tokens": 3, "output_tokens": 20}});
            writeln!(f, "{l}").unwrap();
            parent = uuid;
            count += 1;
            i += 1;
            let uuid = format!("{sid}-{i}");
            let mut l = env(&uuid, &parent, i);
            l["type"] = "user".into();
            let out = tool_output(r);
            l["message"] = serde_json::json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call, "content": out}]});
            l["toolUseResult"] = serde_json::json!({"stdout": out.len(), "interrupted": false});
            writeln!(f, "{l}").unwrap();
            parent = uuid;
            count += 1;
            i += 1;
        }
    }
    count
}

fn codex_session(r: &mut Rng, root: &Path, n: usize, target: usize, base: i64) -> usize {
    let dir = root.join("2026/06/05");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = format!("019e9a10-0000-7000-8000-{:012x}", n);
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(dir.join(format!("rollout-2026-06-05T10-00-00-{sid}.jsonl")))
            .unwrap(),
    );
    let line = |f: &mut dyn Write, i: usize, ty: &str, p: serde_json::Value| {
        writeln!(
            f,
            "{}",
            serde_json::json!({"timestamp": ts(base, i), "type": ty, "payload": p})
        )
        .unwrap();
    };
    line(
        &mut f,
        0,
        "session_meta",
        serde_json::json!({"id": sid, "timestamp": ts(base, 0), "cwd": format!("/home/dev/proj{}", n % 40), "originator": "codex_cli_rs", "cli_version": "0.135.0", "source": "cli"}),
    );
    let mut count = 1;
    let mut i = 1;
    let mut total = 0u64;
    while count < target {
        let prompt = format!("{} ({})", r.pick(PROMPTS), sentence(r, 6));
        line(
            &mut f,
            i,
            "event_msg",
            serde_json::json!({"type": "task_started", "turn_id": format!("t{i}")}),
        );
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}),
        );
        line(
            &mut f,
            i,
            "event_msg",
            serde_json::json!({"type": "user_message", "message": prompt}),
        );
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": paragraph(r, 1)}], "encrypted_content": "gAAAAA"}),
        );
        let call = format!("call_{n}_{i}");
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "function_call", "name": "exec_command", "arguments": format!("{{\"cmd\":\"npm test -- {}\"}}", r.pick(WORDS)), "call_id": call}),
        );
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "function_call_output", "call_id": call, "output": format!("Process exited with code 0\nOutput:\n{}", tool_output(r))}),
        );
        line(
            &mut f,
            i,
            "response_item",
            serde_json::json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": paragraph(r, 3)}]}),
        );
        total += 20_000;
        line(
            &mut f,
            i,
            "event_msg",
            serde_json::json!({"type": "token_count", "info": {"total_token_usage": {"input_tokens": total, "output_tokens": total / 50}}}),
        );
        count += 8;
        i += 1;
    }
    count
}

fn gemini_session(r: &mut Rng, root: &Path, n: usize, target: usize, base: i64) -> usize {
    let dir = root.join(format!("proj{}", n % 40)).join("chats");
    std::fs::create_dir_all(&dir).unwrap();
    let sid = format!("3f2a9c1b-0000-4000-8000-{:012x}", n);
    let mut f = std::io::BufWriter::new(
        std::fs::File::create(dir.join(format!("session-2026-06-10T07-15-{n:08x}.jsonl"))).unwrap(),
    );
    writeln!(f, "{}", serde_json::json!({"sessionId": sid, "projectHash": "0".repeat(64), "startTime": ts(base, 0), "lastUpdated": ts(base, 0), "kind": "main"})).unwrap();
    let mut count = 1;
    let mut i = 1;
    while count < target {
        writeln!(f, "{}", serde_json::json!({"id": format!("u{i}"), "timestamp": ts(base, i), "type": "user", "content": [{"text": format!("{} ({})", r.pick(PROMPTS), sentence(r, 6))}]})).unwrap();
        let call = format!("read_file_{i}");
        let g = serde_json::json!({"id": format!("g{i}"), "timestamp": ts(base, i), "type": "gemini", "content": paragraph(r, 3), "model": "gemini-2.5-pro",
            "thoughts": [{"subject": "Plan", "description": sentence(r, 10)}],
            "tokens": {"input": 9000, "output": 120, "cached": 8000, "thoughts": 40, "total": 9160},
            "toolCalls": [{"id": call, "name": "read_file", "args": {"file_path": r.pick(FILES)}, "status": "success",
                "result": [{"functionResponse": {"id": call, "name": "read_file", "response": {"output": tool_output(r)}}}]}]});
        writeln!(f, "{g}").unwrap();
        writeln!(
            f,
            "{}",
            serde_json::json!({"$set": {"lastUpdated": ts(base, i)}})
        )
        .unwrap();
        count += 7;
        i += 1;
    }
    count
}

fn generate(out: &Path, messages: usize) {
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let base = 1_780_000_000_000i64;
    let (claude, codex, gemini) = (out.join("claude"), out.join("codex"), out.join("gemini"));
    let mut written = 0;
    let mut n = 0;
    while written < messages {
        let target = 50 + r.below(400);
        written += match n % 10 {
            0..=6 => claude_session(&mut r, &claude, n, target, base + n as i64 * 3_600_000),
            7 | 8 => codex_session(&mut r, &codex, n, target, base + n as i64 * 3_600_000),
            _ => gemini_session(&mut r, &gemini, n, target, base + n as i64 * 3_600_000),
        };
        n += 1;
    }
    let bytes = dir_bytes(out);
    println!(
        "generated {written} records in {n} sessions, {:.1} MB",
        bytes as f64 / 1e6
    );
}

fn dir_bytes(p: &Path) -> u64 {
    walk(p)
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
    }
    out
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
            })
        })
        .unwrap_or(0.0)
        / 1024.0
}

/// Copies a folder tree (the fixtures are read-only; copies need not be).
fn copy_tree(from: &Path, to: &Path) {
    for f in walk(from) {
        let dest = to.join(f.strip_prefix(from).unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(&dest, std::fs::read(&f).unwrap()).unwrap();
    }
}

/// Imports `roots` into `data` with default options.
fn import_roots(roots: &[(String, PathBuf)], data: &Path) {
    let registry = Arc::new(AdapterRegistry::new());
    let (writer, handle) = store::Writer::start(data).unwrap();
    let jobs = ingest::discover(&registry, roots);
    let opts = ingest::IngestOptions {
        redact: true,
        fts_max_bytes: 1 << 20,
        batch_bytes: 8 << 20,
        threads: 1,
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rep = ingest::import(&writer, data, registry, jobs, &opts, &stop, &|_| {}).unwrap();
    println!("imported {} files, {} messages", rep.files, rep.messages);
    drop(writer);
    handle.join().unwrap();
}

fn roots(corpus: &Path) -> Vec<(String, PathBuf)> {
    let mut roots = vec![
        ("claude".into(), corpus.join("claude")),
        ("codex".into(), corpus.join("codex")),
        ("gemini".into(), corpus.join("gemini")),
    ];
    // A `generate-agents` corpus: the database and document source kinds.
    roots.extend(agents::roots(corpus));
    roots
}

fn import(corpus: &Path, data: &Path, threads: usize, pre: Option<String>) {
    let registry = Arc::new(AdapterRegistry::new());
    let (writer, handle) = store::Writer::start(data).unwrap();
    if let Some(sql) = pre {
        // Tuning experiments: settings applied on the writer connection before the import.
        writer
            .call(move |c| c.execute_batch(&sql))
            .unwrap()
            .unwrap();
    }
    let jobs = ingest::discover(&registry, &roots(corpus));
    let opts = ingest::IngestOptions {
        redact: true,
        fts_max_bytes: 1 << 20,
        batch_bytes: 8 << 20,
        threads,
    };
    let t = Instant::now();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rep = ingest::import(&writer, data, registry, jobs, &opts, &stop, &|_| {}).unwrap();
    let secs = t.elapsed().as_secs_f64();
    writer
        .call(|c| c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)"))
        .unwrap()
        .unwrap();
    drop(writer);
    handle.join().unwrap();
    let src = dir_bytes(corpus);
    let db: u64 = ["memex.db", "memex.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(data.join(f)).ok())
        .map(|m| m.len())
        .sum();
    println!(
        "import: {} files, {} messages, {} prompts in {secs:.1}s with {threads} parser thread(s)",
        rep.files, rep.messages, rep.prompts
    );
    println!(
        "  {:.0} msgs/s, {:.1} MB/s of source",
        rep.messages as f64 / secs,
        src as f64 / 1e6 / secs
    );
    println!("  peak RSS {:.0} MB", peak_rss_mb());
    println!(
        "  store {:.1} MB / source {:.1} MB = {:.2}x",
        db as f64 / 1e6,
        src as f64 / 1e6,
        db as f64 / src as f64
    );
}

const QUERIES: &[&str] = &[
    "timezone",
    "webhook signature",
    "memory leak",
    "TypeError",
    "src/date.ts",
    "retry backoff",
    "认证",
    "database migration",
    "flaky regression",
    "refresh token handler",
    "zzzunmatched",
    "npm test",
];

/// Single words each in a quarter of the generated messages: what a search ranks over all
/// their matches with the champion lists.
const COMMON_WORDS: &[&str] = &[
    "cache",
    "webhook",
    "migration",
    "pipeline",
    "iterator",
    "handler",
];

/// Questions as people ask them: no message has every word, so these rank partial matches
/// (the rows with the most of the significant words, then BM25).
const QUESTIONS: &[&str] = &[
    "how did we fix the flaky regression in the refresh token handler?",
    "why does the webhook signature check fail after the database migration",
    "what was the retry backoff we chose for the memory leak",
    "认证失败的时候我们怎么处理的",
];

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Runs a search once to warm up, then `runs` times: its hit count and the latencies in ms.
fn time_search(
    conn: &rusqlite::Connection,
    sem: &Semantic<'_>,
    p: &SearchParams,
    runs: usize,
) -> (usize, Vec<f64>) {
    let hits = search(conn, sem, p).unwrap().results.len();
    let lat = (0..runs)
        .map(|_| {
            let t = Instant::now();
            search(conn, sem, p).unwrap();
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    (hits, lat)
}

/// Times the fixed queries, or only `query` when given (to profile one); first brings the
/// champion lists up to date (as the service does once ingest settles) and says how long that
/// took, unless `lists` is false (to time a search without the lists, on an archive that has
/// none yet).
fn bench_search(corpus: &Path, data: &Path, runs: usize, lists: bool, query: Option<String>) {
    let mut conn = store::connect(&store::db_path(data)).unwrap();
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    if lists {
        let t = Instant::now();
        let done = memex::search::champions::refresh(&mut conn).unwrap();
        println!(
            "champion lists: {} common words, {} made or brought up to date in {:.1} s",
            done.words,
            done.updated,
            t.elapsed().as_secs_f64()
        );
    }
    let have: i64 = conn
        .query_row("SELECT COUNT(*) FROM fts_champions", [], |r| r.get(0))
        .unwrap();
    println!("search over {n} messages ({have} champion lists), {runs} runs per query, limit 10");
    if let Some(q) = query {
        time_queries(&conn, &[q.as_str()], runs, None, "runs");
        return;
    }
    time_queries(&conn, QUERIES, runs, Some(corpus), "queries");
    time_queries(&conn, QUESTIONS, runs, None, "questions");
    time_queries(&conn, COMMON_WORDS, runs, None, "common words");
}

/// Times each query (words only, limit 10) `runs` times and prints its p50 and p99, and all of
/// them together; with `rg`'s time over the corpus beside each when `rg_corpus` is given.
fn time_queries(
    conn: &rusqlite::Connection,
    queries: &[&str],
    runs: usize,
    rg_corpus: Option<&Path>,
    what: &str,
) {
    let mut all = Vec::new();
    for q in queries {
        let p = SearchParams {
            query: q.to_string(),
            limit: 10,
            filter: Default::default(),
            level: Default::default(),
            mode: Mode::Fts,
        };
        let off = Semantic::Off("full-text benchmark".into());
        let (hits, lat) = time_search(conn, &off, &p, runs);
        let rg = rg_corpus.map(|corpus| {
            let mut rg = Vec::new();
            for _ in 0..3 {
                let t = Instant::now();
                let ran = std::process::Command::new("rg")
                    .args(["-uuu", "-F", "-c", "-i", q])
                    .arg(corpus)
                    .output();
                // Exit 0: matches, 1: none; anything else (or no rg at all) is not a timing.
                if !ran.is_ok_and(|o| matches!(o.status.code(), Some(0 | 1))) {
                    return "   rg: not installed or failed".to_owned();
                }
                rg.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            format!("   rg -uuu -F -i median {:>7.1} ms", pct(&mut rg, 0.5))
        });
        println!(
            "  {:<40} hits {hits:>2}  p50 {:>7.2} ms  p99 {:>7.2} ms{}",
            q.chars().take(40).collect::<String>(),
            pct(&mut lat.clone(), 0.5),
            pct(&mut lat.clone(), 0.99),
            rg.unwrap_or_default()
        );
        all.extend(lat);
    }
    println!(
        "  all {what}: p50 {:.2} ms, p99 {:.2} ms",
        pct(&mut all.clone(), 0.5),
        pct(&mut all, 0.99)
    );
}

mod agents;
mod eval;
mod inject;
mod live;
mod vec;

/// The async runtime the benchmarks drive the store and LanceDB with: two workers, like the
/// service on this machine class.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Default settings for the archive in `data`, the model from `MEMEX_MODEL_DIR` when set.
fn settings_for(data: &Path) -> memex::config::Settings {
    let mut s = memex::config::Settings::default();
    s.data.dir = data.display().to_string();
    if let Ok(d) = std::env::var("MEMEX_MODEL_DIR") {
        s.vector.model_dir = d;
    }
    // Which local model (`[vector] model`): the default, or e.g. `multilingual-e5-small`.
    if let Ok(m) = std::env::var("MEMEX_VECTOR_MODEL") {
        s.vector.model = m;
    }
    // Another similarity floor than the model's own, to measure one before choosing it.
    if let Ok(f) = std::env::var("MEMEX_VECTOR_MIN_SIMILARITY") {
        s.vector.min_similarity = Some(f.parse().expect("MEMEX_VECTOR_MIN_SIMILARITY: a cosine"));
    }
    s
}

/// Heuristic compaction of every session of an archive, as the service's workers do it.
fn bench_compact(data: &Path, workers: usize) {
    use memex::compact::queue::{self, Compactor};
    let (writer, handle) = store::Writer::start(data).unwrap();
    let runtime = crate::runtime();
    let c = Compactor::new(
        memex::compact::Engine::new(memex::config::CompactSettings::default()),
        writer.clone(),
        store::ReadPool::new(data),
        5,
    );
    let t = Instant::now();
    let (_, planned) = runtime.block_on(c.start()).unwrap();
    let plan_secs = t.elapsed().as_secs_f64();
    let t = Instant::now();
    runtime.block_on(async {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = tokio::sync::watch::channel(false);
        let tasks: Vec<_> = (0..workers)
            .map(|_| tokio::spawn(c.clone().worker(stop.clone(), rx.clone())))
            .collect();
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let open = c
                .writer
                .run(|conn| {
                    conn.query_row(
                        "SELECT COUNT(*) FROM compact_jobs WHERE state IN ('pending', 'running')",
                        [],
                        |r| r.get::<_, i64>(0),
                    )
                })
                .await
                .unwrap()
                .unwrap();
            if open == 0 {
                break;
            }
        }
        let _ = tx.send(true);
        for t in tasks {
            let _ = t.await;
        }
    });
    let secs = t.elapsed().as_secs_f64();
    let st = runtime
        .block_on(c.writer.run(|conn| queue::status(conn)))
        .unwrap()
        .unwrap();
    let (sessions, talks, obs) = (
        st.rows["session_summaries"],
        st.rows["talk_summaries"],
        st.rows["observations"],
    );
    println!("compact (heuristic, {workers} workers): planned {planned} jobs in {plan_secs:.1}s");
    println!(
        "  {sessions} session summaries, {talks} talk summaries, {obs} observations in {secs:.1}s"
    );
    println!(
        "  {:.0} sessions/s, {:.0} talks/s, {:.0} observations/s; peak RSS {:.0} MB",
        sessions as f64 / secs,
        talks as f64 / secs,
        obs as f64 / secs,
        peak_rss_mb()
    );
    println!(
        "  tokens saved: {}",
        serde_json::to_string(&st.tokens_saved).unwrap_or_default()
    );
    drop(c);
    drop(writer);
    handle.join().unwrap();
}

/// What compacting each talk of an archive through an LLM would cost, in tokens: the prompts
/// the engine would send (L1 per observation group, L2 per talk, L3 per session) estimated
/// like unreported usage is, plus the heuristic's own rows as the answer's size. No model is
/// called. For `[compact] daily_token_budget` and the regeneration guard.
fn talk_cost(data: &Path) {
    use memex::compact::heuristic::{self, estimate_tokens};
    use memex::compact::{prompt, queue};
    let conn = store::open(data).unwrap();
    let settings = memex::config::CompactSettings::default();
    // A model's answer is about the size of the heuristic's row (the same fields).
    fn json<T: serde::Serialize>(v: &T) -> u64 {
        estimate_tokens(&serde_json::to_string(v).unwrap_or_default())
    }
    let sessions: Vec<(i64, i64)> = conn
        .prepare("SELECT id, prompt_count FROM sessions WHERE prompt_count > 0")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let (mut l1, mut l2, mut l3) = (Vec::new(), Vec::new(), Vec::new());
    let mut groups = 0;
    for (pk, prompts) in &sessions {
        let d = queue::load_session(&conn, *pk, (1, *prompts)).unwrap();
        let mut summaries = Vec::new();
        for t in d.talks.values() {
            let lang = prompt::language(t.lang, &settings.language);
            let mut cost = 0;
            for g in heuristic::group_calls(&t.calls, &settings.l1) {
                groups += 1;
                cost += estimate_tokens(&prompt::l1_system(&lang))
                    + estimate_tokens(&prompt::l1_user(t, &g))
                    + json(&heuristic::observation(&g, t));
            }
            l1.push(cost);
            let summary = heuristic::talk_summary(t);
            l2.push(
                estimate_tokens(&prompt::l2_system(&lang))
                    + estimate_tokens(&prompt::l2_user(t))
                    + json(&summary),
            );
            summaries.push(summary);
        }
        if !summaries.is_empty() {
            let lang = prompt::language(d.lang, &settings.language);
            let s = heuristic::session_summary(&summaries, d.lang, d.project.as_deref());
            l3.push(
                estimate_tokens(&prompt::l3_system(&lang))
                    + estimate_tokens(&prompt::l3_user(&summaries, d.project.as_deref()))
                    + json(&s),
            );
        }
    }
    let both: Vec<u64> = l1.iter().zip(&l2).map(|(a, b)| a + b).collect();
    let line = |name: &str, v: &[u64]| {
        let mut v = v.to_vec();
        v.sort_unstable();
        let q = |p: f64| {
            v.get(((v.len().max(1) - 1) as f64 * p) as usize)
                .copied()
                .unwrap_or(0)
        };
        let mean = v.iter().sum::<u64>() / v.len().max(1) as u64;
        println!(
            "  {name:<12} mean {mean:>6}  p50 {:>6}  p90 {:>6}  max {:>6}",
            q(0.5),
            q(0.9),
            q(1.0)
        );
    };
    println!(
        "talk cost (estimated tokens in + out): {} sessions, {} talks, {groups} observation groups",
        l3.len(),
        l2.len()
    );
    line("L1 per talk", &l1);
    line("L2 per talk", &l2);
    line("L1+L2", &both);
    line("L3 per sess.", &l3);
}

/// Redaction throughput over a corpus's records, as import runs it: each line's raw bytes, and
/// the same line as text (the message text and tool input are redacted as text).
fn bench_redact(corpus: &Path) {
    use memex::redact;
    let lines: Vec<Vec<u8>> = walk(corpus)
        .iter()
        .filter_map(|f| std::fs::read(f).ok())
        .flat_map(|b| {
            b.split(|c| *c == b'\n')
                .filter(|l| !l.is_empty())
                .map(<[u8]>::to_vec)
                .collect::<Vec<_>>()
        })
        .collect();
    let bytes: usize = lines.iter().map(Vec::len).sum();
    let texts: Vec<String> = lines
        .iter()
        .map(|l| String::from_utf8_lossy(l).into_owned())
        .collect();
    for pass in 1..=2 {
        let t = std::time::Instant::now();
        let mut found = 0u64;
        for l in &lines {
            found += u64::from(redact::redact_bytes(l).1);
        }
        let raw = t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        for l in &texts {
            found += u64::from(redact::redact_text(l).1);
        }
        let text = t.elapsed().as_secs_f64();
        println!(
            "pass {pass}: {} lines, {:.1} MB: raw bytes {:.0} MB/s, text {:.0} MB/s ({found} secrets)",
            lines.len(),
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / raw,
            bytes as f64 / 1e6 / text
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let path =
        |name: &str| PathBuf::from(arg(name).unwrap_or_else(|| panic!("{name} is required")));
    match args.get(1).map(String::as_str) {
        Some("generate") => generate(
            &path("--out"),
            arg("--messages").map_or(1_000_000, |m| m.parse().expect("--messages N")),
        ),
        Some("import") => import(
            &path("--corpus"),
            &path("--data"),
            arg("--threads").map_or_else(
                || memex::config::Settings::default().import_threads(),
                |t| t.parse().expect("--threads N"),
            ),
            arg("--pre"),
        ),
        Some("search") => bench_search(
            &path("--corpus"),
            &path("--data"),
            arg("--runs").map_or(50, |t| t.parse().expect("--runs N")),
            !args.iter().any(|a| a == "--no-lists"),
            arg("--query"),
        ),
        Some("compact") => bench_compact(
            &path("--data"),
            arg("--workers").map_or(2, |n| n.parse().expect("--workers N")),
        ),
        Some("talk-cost") => talk_cost(&path("--data")),
        Some("redact") => bench_redact(&path("--corpus")),
        Some("embed") => vec::embed(arg("--texts").map_or(2000, |n| n.parse().expect("--texts N"))),
        Some("vectors") => vec::index(
            &path("--data"),
            &arg("--provider").unwrap_or_else(|| "local".into()),
            arg("--batch").map_or(256, |n| n.parse().expect("--batch N")),
        ),
        Some("hybrid") => vec::latency(
            &path("--data"),
            arg("--runs").map_or(20, |t| t.parse().expect("--runs N")),
        ),
        Some("eval") => eval::run(
            &path("--work"),
            arg("--distractors").map_or(20_000, |n| n.parse().expect("--distractors N")),
            args.iter().any(|a| a == "--reuse"),
        ),
        Some("inject") => inject::run(
            &path("--work"),
            arg("--distractors").map_or(20_000, |n| n.parse().expect("--distractors N")),
            arg("--memex").map(PathBuf::from),
            arg("--runs").map_or(200, |n| n.parse().expect("--runs N")),
            args.iter().any(|a| a == "--reuse"),
        ),
        Some("generate-agents") => agents::generate(
            &path("--out"),
            arg("--rows").map_or(100_000, |m| m.parse().expect("--rows N")),
        ),
        Some("live-db") => agents::live(
            &path("--memex"),
            arg("--rows").map_or(100_000, |m| m.parse().expect("--rows N")),
            arg("--inserts").map_or(100, |m| m.parse().expect("--inserts N")),
        ),
        Some("live") => live::run(live::Options {
            memex: path("--memex"),
            corpus: path("--corpus"),
            data: path("--data"),
            appends: arg("--appends").map_or(300, |n| n.parse().expect("--appends N")),
            burst: arg("--burst").map_or(50_000, |n| n.parse().expect("--burst N")),
            clients: arg("--clients").map_or(4, |n| n.parse().expect("--clients N")),
            seconds: arg("--seconds").map_or(10, |n| n.parse().expect("--seconds N")),
        }),
        _ => {
            eprintln!(
                "usage: memex-bench generate --out DIR [--messages N] | import --corpus DIR --data DIR [--threads N] | search --corpus DIR --data DIR [--runs N] [--no-lists] [--query Q] | compact --data DIR [--workers N] | talk-cost --data DIR | redact --corpus DIR | embed [--texts N] | vectors --data DIR [--provider local|hashing] [--batch N] | hybrid --data DIR [--runs N] | eval --work DIR [--distractors N] [--reuse] | inject --work DIR [--distractors N] [--memex BIN] [--runs N] [--reuse] | live --memex BIN --corpus DIR --data DIR [--appends N] [--burst N] [--clients N] [--seconds N] | generate-agents --out DIR [--rows N] | live-db --memex BIN [--rows N] [--inserts N]"
            );
            std::process::exit(2);
        }
    }
}
