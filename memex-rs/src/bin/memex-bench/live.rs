//! `memex-bench live`: the real `memex serve` on a generated archive, measured from outside the
//! way a user meets it. The corpus is left untouched: appends go to an extra Claude root in a
//! temporary folder (its few messages do land in the archive).

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) struct Options {
    pub memex: PathBuf,
    pub corpus: PathBuf,
    pub data: PathBuf,
    pub appends: usize,
    pub burst: usize,
    pub clients: usize,
    pub seconds: u64,
}

/// `VmRSS` and `VmHWM` of a process, in MB.
fn rss_mb(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 1024.0
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn prompt(session: &str, uuid: &str, text: &str) -> String {
    let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    format!(
        "{}\n",
        serde_json::json!({"type": "user", "uuid": uuid, "sessionId": session, "cwd": "/bench/live",
            "timestamp": ts, "message": {"role": "user", "content": text}})
    )
}

fn append(path: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

struct Service {
    child: Child,
    addr: String,
}

fn start(o: &Options, home: &Path, live_root: &Path) -> Service {
    let mut child = Command::new(&o.memex)
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env_clear()
        .env("HOME", home)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("MEMEX_DATA_DIR", &o.data)
        .env(
            "MEMEX_SOURCES_CLAUDE",
            format!(
                "{},{}",
                o.corpus.join("claude").display(),
                live_root.display()
            ),
        )
        .env("MEMEX_SOURCES_CODEX", o.corpus.join("codex"))
        .env("MEMEX_SOURCES_GEMINI", o.corpus.join("gemini"))
        .env("MEMEX_LOG", "warn")
        // Settings under test (e.g. MEMEX_IMPORT_BATCH_BYTES) pass through.
        .envs(std::env::vars().filter(|(k, _)| {
            k.starts_with("MEMEX_") && !k.starts_with("MEMEX_BENCH") && k != "MEMEX_DATA_DIR"
        }))
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
            } else {
                eprintln!("  serve: {line}");
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(600))
        .expect("memex serve did not start");
    Service { child, addr }
}

pub(crate) fn run(o: Options) {
    let tmp = std::env::temp_dir().join(format!("memex-live-bench-{}", std::process::id()));
    let live_root = tmp.join("claude-live");
    let project = live_root.join("-bench-live");
    std::fs::create_dir_all(&project).unwrap();
    let t = Instant::now();
    let svc = start(&o, &tmp, &live_root);
    let client = crate::service_client(&o.data, Some(Duration::from_secs(30)));
    let pid = svc.child.id();
    let url = |p: &str| format!("http://{}{p}", svc.addr);
    let get = |p: &str| -> serde_json::Value {
        client
            .get(url(p))
            .send()
            .and_then(|r| r.json())
            .unwrap_or_default()
    };
    while get("/api/health")["phase"] != "watching" {
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = get("/api/stats");
    println!(
        "serve: {} messages in the archive; start-up to watching (backfill of unchanged files) {:.2} s",
        stats["messages"],
        t.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs(5));
    let (idle, hwm) = rss_mb(pid);
    println!("idle RSS after start-up: {idle:.1} MB (peak so far {hwm:.1} MB)");

    // Append → visible through GET /api/search.
    let run_id = std::process::id();
    let session = format!("00000000-0000-4000-8000-{:012x}", run_id);
    let file = project.join(format!("{session}.jsonl"));
    let mut lat = Vec::with_capacity(o.appends);
    for i in 0..o.appends {
        let token = format!("livebench{run_id}x{i}");
        let t = Instant::now();
        append(&file, &prompt(&session, &format!("l{i}"), &token));
        loop {
            let v = get(&format!("/api/search?q={token}&limit=1"));
            if v["results"].as_array().is_some_and(|r| !r.is_empty()) {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "append {i} never became visible"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(20 + (i as u64 * 7) % 30));
    }
    println!(
        "append → searchable over {} appends: p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        lat.len(),
        pct(&lat, 0.5),
        pct(&lat, 0.95),
        pct(&lat, 0.99),
        pct(&lat, 1.0)
    );
    let lag = get("/api/stats")["ingest"]["lag"].clone();
    println!("  service's own ingest lag (first event → committed): {lag}");

    // A burst: many lines written as fast as possible over a few sessions.
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let done = done.clone();
        let peak = peak.clone();
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let (rss, _) = rss_mb(pid);
                peak.fetch_max((rss * 1024.0) as u64, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let before = get("/api/stats")["messages"].as_u64().unwrap_or(0);
    let t = Instant::now();
    let mut bytes = 0usize;
    let filler = "tool output line with some realistic length ".repeat(10);
    let mut buffers: Vec<String> = vec![String::new(); 5];
    for i in 0..o.burst {
        let s = format!("00000000-0000-4000-9000-{:012x}", i % 5);
        buffers[i % 5].push_str(&prompt(
            &s,
            &format!("b{run_id}x{i}"),
            &format!("burst {i} {filler}"),
        ));
        if buffers[i % 5].len() > 64 << 10 {
            let path = project.join(format!("{s}.jsonl"));
            bytes += buffers[i % 5].len();
            append(&path, &buffers[i % 5]);
            buffers[i % 5].clear();
        }
    }
    for (k, b) in buffers.iter().enumerate() {
        let s = format!("00000000-0000-4000-9000-{k:012x}");
        bytes += b.len();
        append(&project.join(format!("{s}.jsonl")), b);
    }
    let written = t.elapsed();
    let target = before + o.burst as u64;
    while get("/api/stats")["messages"].as_u64().unwrap_or(0) < target {
        std::thread::sleep(Duration::from_millis(10));
    }
    let caught_up = t.elapsed();
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    println!(
        "burst: {} lines ({:.1} MB) written in {:.2} s, all searchable after {:.2} s ({:.0} msgs/s); RSS peak during the burst {:.1} MB",
        o.burst,
        bytes as f64 / 1e6,
        written.as_secs_f64(),
        caught_up.as_secs_f64(),
        o.burst as f64 / caught_up.as_secs_f64(),
        peak.load(Ordering::Relaxed) as f64 / 1024.0
    );
    std::thread::sleep(Duration::from_secs(5));
    println!("idle RSS after the burst: {:.1} MB", rss_mb(pid).0);

    let mut stats_ms = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        get("/api/stats");
        stats_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "GET /api/stats: p50 {:.1} ms, max {:.1} ms",
        pct(&stats_ms, 0.5),
        pct(&stats_ms, 1.0)
    );

    // HTTP search throughput with concurrent keep-alive clients.
    const QUERIES: &[&str] = &[
        "timezone",
        "webhook%20signature",
        "memory%20leak",
        "TypeError",
        "retry%20backoff",
        "database%20migration",
        "refresh%20token%20handler",
        "npm%20test",
    ];
    let lat = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let deadline = t + Duration::from_secs(o.seconds);
    std::thread::scope(|scope| {
        for c in 0..o.clients {
            let lat = lat.clone();
            let errors = errors.clone();
            let url = url("/api/search?limit=10&q=");
            let data = &o.data;
            scope.spawn(move || {
                let client = crate::service_client(data, None);
                let mut mine = Vec::new();
                let mut i = c;
                while Instant::now() < deadline {
                    let q = QUERIES[i % QUERIES.len()];
                    i += 1;
                    let t = Instant::now();
                    match client.get(format!("{url}{q}")).send() {
                        Ok(r) if r.status().is_success() => {
                            let _ = r.bytes();
                            mine.push(t.elapsed().as_secs_f64() * 1000.0);
                        }
                        _ => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                lat.lock().unwrap().extend(mine);
            });
        }
    });
    let secs = t.elapsed().as_secs_f64();
    let lat = lat.lock().unwrap();
    println!(
        "HTTP search, {} keep-alive clients for {:.0} s: {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
        o.clients,
        secs,
        lat.len() as f64 / secs,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        errors.load(Ordering::Relaxed)
    );
    println!(
        "  service address for an external load tool: http://{}/api/search?q=timezone",
        svc.addr
    );
    if std::env::var_os("MEMEX_BENCH_HOLD").is_some() {
        println!("  holding the service (MEMEX_BENCH_HOLD); press Enter to stop it");
        let _ = std::io::stdin().read_line(&mut String::new());
    }

    let mut child = svc.child;
    let t = Instant::now();
    // SAFETY: kill(2) on our own child's pid, which has not been reaped yet.
    unsafe {
        libc::kill(pid as i32, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    println!(
        "SIGTERM → exit {:?} in {:.0} ms",
        status.code(),
        t.elapsed().as_secs_f64() * 1000.0
    );
    let _ = std::fs::remove_dir_all(&tmp);
}
