//! `memex-bench sync`: the real `memex` binary syncing a generated archive through a target
//! (PostgreSQL or a folder) the way a user runs it. Machine A is a copy of an imported archive;
//! machine B starts empty. Measures the first push and the first pull (wall time, MB/s of
//! sealed batches, messages/s, peak RSS), what the target stores per message, and then, with
//! both services running, the time from a line appended on A to a search hit on B.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) struct Options {
    pub memex: PathBuf,
    /// An imported archive (its folder); machine A syncs it as it is.
    pub data: PathBuf,
    /// `postgres://…` or `file:///…`, empty (`memex sync setup` prepares it).
    pub url: String,
    pub lines: usize,
}

/// A machine: a HOME and a data folder.
struct Machine {
    home: PathBuf,
    data: PathBuf,
}

impl Machine {
    fn command(&self, memex: &Path, args: &[&str]) -> Command {
        let mut c = Command::new(memex);
        c.args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("MEMEX_DATA_DIR", &self.data)
            .env("MEMEX_LOG", "warn");
        c
    }

    fn ok(&self, memex: &Path, args: &[&str]) -> String {
        let out = self.command(memex, args).output().expect("run memex");
        assert!(
            out.status.success(),
            "memex {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `memex args` to its end: its JSON output, wall time and peak RSS (MB).
    fn timed(&self, memex: &Path, args: &[&str]) -> (serde_json::Value, f64, f64) {
        let t = Instant::now();
        // Reaped below with wait4(2), which also gives its peak RSS.
        #[allow(clippy::zombie_processes)]
        let child = self
            .command(memex, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run memex");
        let pid = child.id() as libc::pid_t;
        let mut out = String::new();
        std::io::Read::read_to_string(&mut child.stdout.expect("piped"), &mut out)
            .expect("read memex's output");
        let mut status = 0;
        // SAFETY: `rusage` is plain data, valid when zeroed.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: wait4 on our own child, not reaped yet, with valid out-pointers.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        assert!(rc == pid && status == 0, "memex {args:?} failed ({status})");
        let wall = t.elapsed().as_secs_f64();
        let v = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        (v, wall, usage.ru_maxrss as f64 / 1024.0)
    }
}

fn dir_bytes(p: &Path) -> u64 {
    std::fs::read_dir(p)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// What the target stores, in bytes: PostgreSQL's table with its TOAST and index (through
/// `psql`), or the folder's files.
fn target_bytes(url: &str) -> Option<u64> {
    if let Some(folder) = url.strip_prefix("file://") {
        return Some(dir_bytes(Path::new(folder)));
    }
    let out = Command::new("psql")
        .args([
            url,
            "-Atc",
            "SELECT pg_total_relation_size('memex_sync_batches')",
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

fn serve(memex: &Path, m: &Machine, claude: &Path) -> Child {
    let mut child = m
        .command(memex, &["serve", "--bind", "127.0.0.1:0"])
        .env("MEMEX_SOURCES_CLAUDE", claude)
        .env("MEMEX_SOURCES_CODEX", claude.join("none"))
        .env("MEMEX_SOURCES_GEMINI", claude.join("none"))
        .env("MEMEX_VECTOR_PROVIDER", "off")
        .env("MEMEX_SYNC_INTERVAL_SECS", "5")
        .env("MEMEX_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start memex serve");
    let stderr = child.stderr.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("listening on http://") {
                let _ = tx.send(());
            } else if line.contains("WARN") || line.contains("ERROR") {
                eprintln!("  serve: {line}");
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(600))
        .expect("memex serve did not start");
    child
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child, not reaped yet.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
}

fn prompt(session: &str, uuid: &str, text: &str) -> String {
    let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    format!(
        "{}\n",
        serde_json::json!({"type": "user", "uuid": uuid, "sessionId": session, "cwd": "/bench/sync",
            "timestamp": ts, "message": {"role": "user", "content": text}})
    )
}

pub(crate) fn run(o: Options) {
    let tmp = std::env::temp_dir().join(format!("memex-sync-bench-{}", std::process::id()));
    let a = Machine {
        home: tmp.join("home-a"),
        data: o.data.clone(),
    };
    let b = Machine {
        home: tmp.join("home-b"),
        data: tmp.join("data-b"),
    };
    for d in [&a.home, &b.home] {
        std::fs::create_dir_all(d).expect("make a HOME");
    }
    let key = tmp.join("sync.key");
    let archive = std::fs::metadata(memex::store::db_path(&a.data)).map_or(0, |m| m.len());
    a.ok(
        &o.memex,
        &[
            "sync",
            "setup",
            &o.url,
            "--key-out",
            key.to_str().expect("a UTF-8 path"),
        ],
    );
    let (pushed, wall, rss) = a.timed(&o.memex, &["sync", "--push", "--json"]);
    let p = &pushed["pushed"];
    let (messages, bytes) = (
        p["messages"].as_u64().unwrap_or(0),
        p["bytes"].as_u64().unwrap_or(0),
    );
    println!(
        "first push: {messages} messages in {} batches, {:.1} MB sealed, {wall:.1} s: {:.1} MB/s, {:.0} messages/s; peak RSS {rss:.0} MB",
        p["batches"],
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / wall,
        messages as f64 / wall
    );
    if let Some(stored) = target_bytes(&o.url) {
        println!(
            "the target stores {:.1} MB: {:.0} bytes per message (the local archive file: {:.1} MB, {:.0} bytes per message)",
            stored as f64 / 1e6,
            stored as f64 / messages.max(1) as f64,
            archive as f64 / 1e6,
            archive as f64 / messages.max(1) as f64
        );
    }
    b.ok(
        &o.memex,
        &[
            "sync",
            "join",
            &o.url,
            "--key",
            key.to_str().expect("a UTF-8 path"),
        ],
    );
    let (pulled, wall, rss) = b.timed(&o.memex, &["sync", "--pull", "--json"]);
    let p = &pulled["pulled"];
    let taken = p["messages"].as_u64().unwrap_or(0);
    println!(
        "first pull: {taken} messages in {} batches, {wall:.1} s: {:.1} MB/s sealed, {:.0} messages/s; peak RSS {rss:.0} MB",
        p["batches"],
        bytes as f64 / 1e6 / wall,
        taken as f64 / wall
    );

    // Both services: a line appended on A, found on B.
    let claude_a = tmp.join("claude-a");
    let project = claude_a.join("-bench-sync");
    std::fs::create_dir_all(&project).expect("make the live root");
    let claude_b = tmp.join("claude-b");
    std::fs::create_dir_all(&claude_b).expect("make B's root");
    let sa = serve(&o.memex, &a, &claude_a);
    let sb = serve(&o.memex, &b, &claude_b);
    let client = crate::service_client(&b.data, Some(Duration::from_secs(30)));
    let addr = memex::store::lock::serving_addr(&b.data).expect("B's service holds its archive");
    let search = |q: &str| -> bool {
        client
            .get(format!("http://{addr}/api/search?q={q}&mode=fts&limit=1"))
            .send()
            .and_then(|r| r.json::<serde_json::Value>())
            .is_ok_and(|v| v["results"].as_array().is_some_and(|r| !r.is_empty()))
    };
    let run_id = std::process::id();
    let session = format!("00000000-0000-4000-8000-{run_id:012x}");
    let file = project.join(format!("{session}.jsonl"));
    let mut lat = Vec::with_capacity(o.lines);
    for i in 0..o.lines {
        let token = format!("syncbench{run_id}x{i}");
        let t = Instant::now();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .expect("open the live file");
        f.write_all(prompt(&session, &format!("s{i}"), &token).as_bytes())
            .expect("append");
        drop(f);
        while !search(&token) {
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "line {i} never reached B"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(100 + (i as u64 * 37) % 400));
    }
    println!(
        "appended on A → a search hit on B, over {} lines: p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms",
        lat.len(),
        crate::pct(&mut lat.clone(), 0.5),
        crate::pct(&mut lat.clone(), 0.95),
        crate::pct(&mut lat, 1.0)
    );
    stop(sa);
    stop(sb);
    let _ = std::fs::remove_dir_all(&tmp);
}
