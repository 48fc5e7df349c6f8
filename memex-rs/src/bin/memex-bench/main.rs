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

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use ai_cli_session_collector::AdapterRegistry;
use memex::search::{Mode, SearchParams, Semantic, search};
use memex::store::{self, ingest};

mod corpus;
use corpus::{FILES, PROMPTS, Rng, WORDS, generate, paragraph, sentence};

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
    let jobs = ingest::discover(&registry, roots);
    let rep = import_jobs(data, registry, jobs);
    println!("imported {} files, {} messages", rep.files, rep.messages);
}

/// Imports the files of `jobs` into `data` with default options, one parser thread.
fn import_jobs(
    data: &Path,
    registry: Arc<AdapterRegistry>,
    jobs: Vec<ingest::Job>,
) -> ingest::ImportReport {
    let (writer, handle) = store::Writer::start(data).unwrap();
    let opts = ingest::IngestOptions {
        redact: true,
        fts_max_bytes: 1 << 20,
        batch_bytes: 8 << 20,
        threads: 1,
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rep = ingest::import(&writer, data, registry, jobs, &opts, &stop, &|_| {}).unwrap();
    drop(writer);
    handle.join().unwrap();
    rep
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
        .call(|c| {
            let _paused = store::checkpoint::pause();
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
        })
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

pub(crate) const QUERIES: &[&str] = &[
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
pub(crate) const COMMON_WORDS: &[&str] = &[
    "cache",
    "webhook",
    "migration",
    "pipeline",
    "iterator",
    "handler",
];

/// Questions as people ask them: no message has every word, so these rank partial matches
/// (the rows with the most of the significant words, then BM25).
pub(crate) const QUESTIONS: &[&str] = &[
    "how did we fix the flaky regression in the refresh token handler?",
    "why does the webhook signature check fail after the database migration",
    "what was the retry backoff we chose for the memory leak",
    "认证失败的时候我们怎么处理的",
];

/// A client of the `memex serve` of the data folder `data`, sending its owner's token (written
/// by the service before it listens), as every TCP caller of the service must.
fn service_client(data: &Path, timeout: Option<std::time::Duration>) -> reqwest::blocking::Client {
    let secret =
        memex::owner::load(data, "").expect("the service keeps its token in the data folder");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", secret.as_str())
            .parse()
            .expect("a token is a header value"),
    );
    let mut b = reqwest::blocking::Client::builder().default_headers(headers);
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    b.build().expect("an HTTP client")
}

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
            ..Default::default()
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
mod summaries;
mod sync;
mod team;
mod usage;
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
    // `int8` (the default) or `f32`, to compare what the two precisions retrieve.
    if let Ok(p) = std::env::var("MEMEX_VECTOR_PRECISION") {
        s.vector.precision = p;
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
            let sizes: Vec<u64> = d.talks.values().map(|t| t.raw_tokens).collect();
            let s = heuristic::session_summary(&summaries, &sizes, d.lang, d.project.as_deref());
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
        Some("summaries") => {
            let totals = summaries::run(
                &arg("--facts").map_or_else(
                    || Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/summary-facts"),
                    PathBuf::from,
                ),
                &arg("--fixtures")
                    .or_else(|| std::env::var("MEMEX_FIXTURES").ok())
                    .map_or_else(
                        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
                        PathBuf::from,
                    ),
                &arg("--work").map_or_else(
                    || std::env::temp_dir().join("memex-summaries"),
                    PathBuf::from,
                ),
                args.iter().any(|a| a == "--show"),
            );
            if !totals.meets_targets() {
                eprintln!(
                    "summaries: below the targets (80 % of facts, 0 filler/boilerplate/leaks)"
                );
                std::process::exit(1);
            }
        }
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
        Some("sync") => sync::run(sync::Options {
            memex: path("--memex"),
            data: path("--data"),
            url: arg("--url").expect("--url postgres://… or file:///…"),
            lines: arg("--lines").map_or(100, |n| n.parse().expect("--lines N")),
        }),
        Some("team") => team::run(team::Options {
            data: &path("--data"),
            url: arg("--url").expect("--url postgres://… (an empty database with pgvector)"),
            members: arg("--members").map_or(10, |n| n.parse().expect("--members N")),
            runs: arg("--runs").map_or(5, |n| n.parse().expect("--runs N")),
            vectors: args.iter().any(|a| a == "--vectors"),
            reuse: args.iter().any(|a| a == "--reuse"),
        }),
        Some("usage") => usage::run(usage::Options {
            memex: path("--memex"),
            data: path("--data"),
            claude: path("--claude"),
            ccusage: path("--ccusage"),
            runs: arg("--runs").map_or(10, |n| n.parse().expect("--runs N")),
        }),
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
                "usage: memex-bench generate --out DIR [--messages N] | import --corpus DIR --data DIR [--threads N] | search --corpus DIR --data DIR [--runs N] [--no-lists] [--query Q] | compact --data DIR [--workers N] | talk-cost --data DIR | redact --corpus DIR | embed [--texts N] | vectors --data DIR [--provider local|hashing] [--batch N] | hybrid --data DIR [--runs N] | eval --work DIR [--distractors N] [--reuse] | inject --work DIR [--distractors N] [--memex BIN] [--runs N] [--reuse] | summaries [--facts DIR] [--fixtures DIR] [--work DIR] [--show] | live --memex BIN --corpus DIR --data DIR [--appends N] [--burst N] [--clients N] [--seconds N] | sync --memex BIN --data DIR --url URL [--lines N] | team --data DIR --url URL [--members N] [--runs N] [--vectors] [--reuse] | generate-agents --out DIR [--rows N] | live-db --memex BIN [--rows N] [--inserts N] | usage --memex BIN --data DIR --claude DIR --ccusage INDEX_JS [--runs N]"
            );
            std::process::exit(2);
        }
    }
}
