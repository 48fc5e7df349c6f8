//! `memex usage`: costs from the real archive, checked against ccusage (the token-cost report
//! users trust, npm package 17, offline with its bundled prices) on the Claude Code fixtures
//! and a generated corpus, against the Codex rollouts' own `token_count` totals, per agent
//! whose samples carry usage, and through HTTP, MCP and the status line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::{Home, copy_dir, fixtures};

/// ccusage 17 as `.ci/run` installs it (`npm install --prefix ~/.cache/memex-ci/ccusage`).
fn ccusage() -> PathBuf {
    let home = std::env::var_os("HOME").expect("HOME");
    let p = Path::new(&home).join(".cache/memex-ci/ccusage/node_modules/ccusage/dist");
    assert!(
        p.join("index.js").is_file(),
        "ccusage is not installed: npm install --prefix ~/.cache/memex-ci/ccusage ccusage@17.2.1 (.ci/run does)"
    );
    p
}

/// ccusage's bundled (offline) price table, written as the LiteLLM file it was taken from.
fn ccusage_prices(to: &Path) {
    let script = r#"
const fs = require('fs'), path = require('path');
const [dist, out] = process.argv.slice(1);
const file = fs.readdirSync(dist).map(f => path.join(dist, f))
  .find(f => f.endsWith('.js') && fs.readFileSync(f, 'utf8').includes('PREFETCHED_CLAUDE_PRICING = {'));
const src = fs.readFileSync(file, 'utf8');
const start = src.indexOf('{', src.indexOf('PREFETCHED_CLAUDE_PRICING = {'));
const end = src.indexOf('\n};\n', start);
fs.writeFileSync(out, JSON.stringify((0, eval)('(' + src.slice(start, end + 2) + ')')));
"#;
    node(
        Command::new("node")
            .arg("-e")
            .arg(script)
            .arg(ccusage())
            .arg(to),
    );
}

/// Runs a `node` command; its output, once it succeeded.
fn node(c: &mut Command) -> std::process::Output {
    let out = c.output().expect("node runs (.ci/run installs nodejs)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `ccusage daily --json --offline` over `claude_dir` (holding `projects/`), days in UTC.
fn ccusage_daily(claude_dir: &Path) -> Value {
    let out = node(
        Command::new("node")
            .arg(ccusage().join("index.js"))
            .args(["daily", "--json", "--offline"])
            .env("CLAUDE_CONFIG_DIR", claude_dir)
            .env("TZ", "UTC"),
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `memex usage REPORT --json ARGS…` with days in UTC.
fn report(home: &Home, report: &str, args: &[&str]) -> Value {
    let mut all = vec!["usage", report, "--json", "--timezone", "UTC"];
    all.extend_from_slice(args);
    home.json(&all)
}

/// Per (day, model): input, output, cache creation, cache read, and the cost.
type Table = BTreeMap<(String, String), ([u64; 4], f64)>;

fn table(daily: &Value) -> Table {
    let mut t = Table::new();
    for d in daily["daily"].as_array().unwrap() {
        for m in d["modelBreakdowns"].as_array().unwrap() {
            let n = |k: &str| m[k].as_u64().unwrap();
            t.insert(
                (
                    d["date"].as_str().unwrap().to_owned(),
                    m["modelName"].as_str().unwrap().to_owned(),
                ),
                (
                    [
                        n("inputTokens"),
                        n("outputTokens"),
                        n("cacheCreationTokens"),
                        n("cacheReadTokens"),
                    ],
                    m["cost"].as_f64().unwrap(),
                ),
            );
        }
    }
    t
}

/// What the two tools count differently, read from the transcripts themselves, per (day,
/// model): the output tokens of responses Claude Code wrote on several lines (ccusage keeps the
/// first line's count, Memex the largest: the final one), and the tokens of lines without a
/// `requestId` beyond the first of their response (ccusage counts each such line, Memex the
/// response once).
fn by_design(projects: &Path) -> BTreeMap<(String, String), [i64; 4]> {
    struct Seen {
        day: String,
        model: String,
        first: [u64; 4],
        max: [u64; 4],
        lines: u64,
        keyed: bool,
    }
    let mut per: BTreeMap<String, Seen> = BTreeMap::new();
    let mut extra: BTreeMap<(String, String), [i64; 4]> = BTreeMap::new();
    let mut files: Vec<PathBuf> = crate::common::walkdir(projects)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        for line in String::from_utf8_lossy(&bytes).lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let m = &v["message"];
            let u = &m["usage"];
            let (Some(id), Some(_)) = (m["id"].as_str(), u["input_tokens"].as_u64()) else {
                continue;
            };
            let model = m["model"].as_str().unwrap_or("unknown").to_owned();
            if model == "<synthetic>" {
                continue;
            }
            let n = |k: &str| u[k].as_u64().unwrap_or(0);
            let c = [
                n("input_tokens"),
                n("output_tokens"),
                n("cache_creation_input_tokens"),
                n("cache_read_input_tokens"),
            ];
            let day = v["timestamp"]
                .as_str()
                .unwrap_or("")
                .get(..10)
                .unwrap_or("")
                .to_owned();
            let keyed = v["requestId"].as_str().is_some();
            let s = per.entry(id.to_owned()).or_insert(Seen {
                day,
                model,
                first: c,
                max: [0; 4],
                lines: 0,
                keyed,
            });
            s.lines += 1;
            for (m, x) in s.max.iter_mut().zip(c) {
                *m = (*m).max(x);
            }
            if !s.keyed && s.lines > 1 {
                // ccusage counts this line again.
                let e = extra.entry((s.day.clone(), s.model.clone())).or_default();
                for (e, x) in e.iter_mut().zip(c) {
                    *e -= x as i64;
                }
            }
        }
    }
    for s in per.values() {
        let e = extra.entry((s.day.clone(), s.model.clone())).or_default();
        for ((e, m), f) in e.iter_mut().zip(s.max).zip(s.first) {
            *e += m as i64 - f as i64;
        }
    }
    extra.retain(|_, v| v.iter().any(|x| *x != 0));
    extra
}

/// Memex's and ccusage's daily reports over the same Claude files, with the same prices:
/// tokens equal but for the differences [`by_design`] reads from the files, dollars within
/// 0.5 % once those tokens are priced.
fn agree(home: &Home, claude_dir: &Path, prices: &Path) -> (usize, usize) {
    let out = home.memex(&["usage", "prices", "refresh", prices.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The table written into the data folder is its owner's alone.
    let written = home.data_dir().join("prices.json");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&written).unwrap().permissions(),
    );
    assert_eq!(mode & 0o077, 0, "prices.json is {mode:o}");
    let ours = report(home, "daily", &["--agent", "claude"]);
    let theirs = ccusage_daily(claude_dir);
    let (a, b) = (table(&ours), table(&theirs));
    let design = by_design(&claude_dir.join("projects"));
    let priced: Value = serde_json::from_str(&std::fs::read_to_string(prices).unwrap()).unwrap();
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>(),
        "the same days and models"
    );
    let mut differing = 0;
    for (k, (ta, ca)) in &a {
        let (tb, cb) = &b[k];
        let d = design.get(k).copied().unwrap_or_default();
        for i in 0..4 {
            assert_eq!(
                ta[i] as i64 - tb[i] as i64,
                d[i],
                "{k:?} token kind {i}: memex {ta:?}, ccusage {tb:?}"
            );
        }
        if d != [0; 4] {
            differing += 1;
        }
        // ccusage's dollars for Memex's tokens: its own plus the differing tokens at its price.
        let p = &priced[&k.1];
        let unit = |f: &str| p[f].as_f64().unwrap_or(0.0);
        let adjusted = cb
            + d[0] as f64 * unit("input_cost_per_token")
            + d[1] as f64 * unit("output_cost_per_token")
            + d[2] as f64 * unit("cache_creation_input_token_cost")
            + d[3] as f64 * unit("cache_read_input_token_cost");
        assert!(
            (ca - adjusted).abs() <= adjusted.abs() * 0.005 + 1e-9,
            "{k:?}: memex ${ca}, ccusage ${cb} (${adjusted} with Memex's tokens)"
        );
    }
    (a.len(), differing)
}

#[test]
fn usage_daily_agrees_with_ccusage_on_the_claude_fixtures() {
    let home = Home::with_fixtures();
    // The real sessions and the hand-written ones; the schema-coverage samples of `misc` hold
    // lines ccusage's schema drops (a null field, a six-digit fraction of a second), which
    // Memex reads (README, "Usage and costs").
    std::fs::remove_dir_all(home.path().join(".claude/projects/-misc")).unwrap();
    assert!(home.memex(&["import"]).status.success());
    let prices = home.path().join("ccusage-prices.json");
    ccusage_prices(&prices);
    let (rows, differing) = agree(&home, &home.path().join(".claude"), &prices);
    assert!(rows >= 8, "{rows} day and model rows");
    // Responses written on several lines whose first line's output was partial.
    assert!(differing >= 3, "{differing}");
    // A model ccusage's table lacks is unpriced in Memex, never $0: with the shipped table it
    // is priced.
    let ours = report(&home, "daily", &["--agent", "claude"]);
    let unpriced: Vec<&str> = ours["unpriced"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(unpriced.contains(&"claude-opus-4-7"), "{unpriced:?}");
    assert!(home.memex(&["usage", "prices", "reset"]).status.success());
    let shipped = report(&home, "daily", &["--agent", "claude"]);
    assert_eq!(shipped["unpriced"], serde_json::json!([]));
    assert!(
        shipped["totals"]["totalCost"].as_f64().unwrap()
            > ours["totals"]["totalCost"].as_f64().unwrap()
    );
}

#[test]
fn usage_daily_agrees_with_ccusage_on_a_generated_corpus() {
    let home = Home::empty();
    let corpus = home.path().join("corpus");
    let out = Command::new(env!("CARGO_BIN_EXE_memex-bench"))
        .args([
            "generate",
            "--out",
            corpus.to_str().unwrap(),
            "--messages",
            "12000",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let claude = home.path().join(".claude");
    copy_dir(&corpus.join("claude"), &claude.join("projects"));
    assert!(home.memex(&["import"]).status.success());
    let prices = home.path().join("ccusage-prices.json");
    ccusage_prices(&prices);
    let (rows, differing) = agree(&home, &claude, &prices);
    assert!(rows >= 2, "{rows}");
    // The generator writes a response's thinking and text on two lines without a requestId:
    // ccusage counts both lines, Memex the response once (with its final output count).
    assert!(differing >= 1, "{differing}");
}

/// Codex: the rollouts' cumulative `token_count` totals are the session's tokens; spread over
/// the records that added them, they sum to the last event's `total_token_usage`.
#[test]
fn codex_totals_agree_with_the_rollouts_token_count_events() {
    let home = Home::empty();
    let misc = fixtures().join("codex/misc");
    let sessions = home.path().join(".codex/sessions/2026/01/01");
    std::fs::create_dir_all(&sessions).unwrap();
    let mut expect = 0u64;
    let mut files = Vec::new();
    for (name, input, cached, output) in [
        (
            "agent-history_codex_session_with_compaction.jsonl",
            85_000u64,
            30_000u64,
            42_000u64,
        ),
        ("agent-history_codex_with_escalation.jsonl", 1_500, 500, 800),
        (
            "agent-sessions_schema-coverage_small.jsonl",
            16_341,
            3_584,
            81,
        ),
    ] {
        let to = sessions.join(format!("rollout-2026-01-01T00-00-0{}-{name}", files.len()));
        std::fs::copy(misc.join(name), &to).unwrap();
        // The totals the events reported, read here from the file itself: the largest (one
        // rollout ends with an all-zero event, which adds nothing).
        let last = std::fs::read_to_string(&to)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|v| {
                v["payload"]["info"]["total_token_usage"]
                    .as_object()
                    .cloned()
            })
            .max_by_key(|t| t["input_tokens"].as_u64())
            .unwrap();
        assert_eq!(last["input_tokens"], input);
        assert_eq!(last["cached_input_tokens"], cached);
        assert_eq!(last["output_tokens"], output);
        expect += input + output;
        files.push(to);
    }
    assert!(home.memex(&["import"]).status.success());
    let s = report(&home, "session", &["--agent", "codex"]);
    let sessions = s["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 3, "{s}");
    let t = &s["totals"];
    // Billed: input without the cached part, which is cache read.
    assert_eq!(
        t["inputTokens"],
        85_000 - 30_000 + 1_500 - 500 + 16_341 - 3_584
    );
    assert_eq!(t["cacheReadTokens"], 30_000 + 500 + 3_584);
    assert_eq!(t["outputTokens"], 42_000 + 800 + 81);
    assert_eq!(
        t["inputTokens"].as_u64().unwrap()
            + t["cacheReadTokens"].as_u64().unwrap()
            + t["outputTokens"].as_u64().unwrap(),
        expect
    );
    // The schema-coverage rollout's events fall on their own days and sum to its total.
    let daily = report(&home, "daily", &["--agent", "codex"]);
    let sum: u64 = daily["daily"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["inputTokens"].as_u64().unwrap() + d["cacheReadTokens"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, 85_000 + 1_500 + 16_341);
}

/// Each agent whose samples carry usage: the report holds its tokens as that agent counts
/// them (Gemini's thoughts are output and its tool tokens input; its input, like Codex's,
/// holds the cached part), and the agents that price their own calls show their figure.
#[test]
fn every_agent_with_usage_is_reported_by_its_own_rules() {
    let home = Home::with_fixtures();
    let more = fixtures().join("more-agents");
    copy_dir(&more.join("pi/home/.pi"), &home.path().join(".pi"));
    assert!(home.memex(&["import"]).status.success());
    let all = report(&home, "daily", &["--breakdown", "agent"]);
    let agents: BTreeMap<String, Value> = all["daily"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|d| d["agents"].as_array().unwrap().clone())
        .fold(BTreeMap::new(), |mut m, a| {
            let e = m
                .entry(a["name"].as_str().unwrap().to_owned())
                .or_insert(serde_json::json!({"in":0,"out":0,"cr":0}));
            e["in"] = (e["in"].as_u64().unwrap() + a["inputTokens"].as_u64().unwrap()).into();
            e["out"] = (e["out"].as_u64().unwrap() + a["outputTokens"].as_u64().unwrap()).into();
            e["cr"] = (e["cr"].as_u64().unwrap() + a["cacheReadTokens"].as_u64().unwrap()).into();
            if let Some(c) = a.get("agentCost") {
                e["agentCost"] = c.clone();
            }
            m
        });
    for a in ["claude", "codex", "gemini", "pi"] {
        assert!(agents.contains_key(a), "{a} missing: {agents:?}");
    }
    // Gemini (handwritten JSONL 37,762 in / 26,660 cached / 245 out / 180 thoughts; the
    // sub-agent 4,100 / 0 / 30 / 0; the legacy file 15,100 / 7,100 / 59 / 95).
    let g = &agents["gemini"];
    assert_eq!(g["cr"], 26_660 + 7_100);
    assert_eq!(g["in"], 37_762 - 26_660 + 4_100 + 15_100 - 7_100);
    assert_eq!(g["out"], 245 + 180 + 30 + 59 + 95);
    // Pi prices its responses itself: shown beside Memex's figure.
    let pi = &agents["pi"];
    let said = pi["agentCost"].as_f64().unwrap();
    assert!((said - (0.0349884 + 0.00836799)).abs() < 1e-9, "{pi}");

    // Every call knows how many stored records carry it (Gemini rewrites its records; a
    // record seen again is not counted twice), and a forgotten session takes its calls along.
    let conn = crate::common::db(&home.data_dir());
    let drift = crate::common::count(
        &conn,
        "SELECT COUNT(*) FROM usage_calls u WHERE u.usage_key NOT LIKE 'thread-total#%'
           AND u.records <> (SELECT COUNT(*) FROM messages m WHERE m.session_pk = u.session_pk
                             AND m.usage_key = u.usage_key AND m.inherited = 0)",
    );
    assert_eq!(drift, 0);
    let gemini_sessions = home.json(&["usage", "session", "--json", "--agent", "gemini"]);
    for s in gemini_sessions["sessions"].as_array().unwrap() {
        let id = s["sessionId"].as_str().unwrap();
        let out = home.memex(&["forget", "--session", id, "--yes"]);
        let err = String::from_utf8_lossy(&out.stderr);
        // A sub-agent's session goes with its parent's.
        assert!(out.status.success() || err.contains("no session"), "{err}");
    }
    let after = home.json(&["usage", "daily", "--json", "--agent", "gemini"]);
    assert_eq!(after["daily"], serde_json::json!([]), "{after}");
    assert_eq!(
        crate::common::count(
            &conn,
            "SELECT COUNT(*) FROM usage_quarters q JOIN sessions s ON s.id = q.session_pk
             WHERE s.agent = 'gemini'"
        ),
        0
    );
    let claude_before = agents["claude"]["out"].as_u64().unwrap();
    let claude_after: u64 = home.json(&["usage", "daily", "--json", "--agent", "claude"])["totals"]
        ["outputTokens"]
        .as_u64()
        .unwrap();
    assert_eq!(claude_after, claude_before, "the other agents' calls stay");
}

/// `GET /api/usage` answers what the CLI prints, names a bad parameter, and serves only the
/// service's owner (the guards of every endpoint); the status line is one short line from the
/// same figures, reading Claude Code's status JSON.
#[test]
fn usage_over_http_and_the_status_line() {
    let home = Home::with_fixtures();
    let s = home.serve(&[
        ("MEMEX_VECTOR_PROVIDER", "off"),
        ("MEMEX_USAGE_TIMEZONE", "UTC"),
    ]);
    s.wait_watching();
    s.wait_for(30, "the sessions", |s| {
        (s.ok("/api/stats")["sessions"].as_i64().unwrap_or(0) >= 10).then_some(())
    });
    let api = s.ok("/api/usage?report=monthly&agent=claude");
    let cli = home.json(&["usage", "monthly", "--json", "--agent", "claude"]);
    assert_eq!(api["monthly"], cli["monthly"]);
    assert!(api["totals"]["totalCost"].as_f64().unwrap() > 1.0);
    let sessions = s.ok("/api/usage?report=session&limit=3&timezone=Asia/Tokyo");
    let list = sessions["sessions"].as_array().unwrap();
    assert_eq!(list.len(), 3);
    assert!(list[0]["totalCost"].as_f64() >= list[1]["totalCost"].as_f64());
    assert!(
        list[0]["lastActivity"]
            .as_str()
            .unwrap()
            .ends_with("+09:00"),
        "{}",
        list[0]
    );
    let blocks = s.ok("/api/usage?report=blocks&agent=claude");
    let b = blocks["blocks"].as_array().unwrap();
    assert!(b.iter().any(|b| b["isGap"] == true) && b.iter().any(|b| b["isGap"] == false));
    let long_host = format!("host={}", "h".repeat(65));
    let long_day = format!("since={}", "9".repeat(5000));
    for (q, name) in [
        ("report=hourly", "report"),
        ("since=13/13/2026", "since"),
        ("timezone=Europe/Atlantis", "timezone"),
        ("limit=-1", "limit"),
        ("limit=ten", "limit"),
        ("agent=%3Cscript%3E", "agent"),
        (long_host.as_str(), "host"),
        (long_day.as_str(), "since"),
        ("breakdown=sql", "breakdown"),
        ("sort=cost", "sort"),
        ("report=daily&limit=5", "limit"),
        ("report=blocks&breakdown=agent", "breakdown"),
    ] {
        let (status, v) = s.get(&format!("/api/usage?{q}"));
        assert_eq!(status, 400, "{q}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap_or(&v.to_string())
                .contains(name),
            "{q}: {v}"
        );
    }
    // Another site's page, a rebinding host, no token: refused like every endpoint.
    let raw = reqwest::blocking::Client::new();
    assert_eq!(
        raw.get(s.url("/api/usage"))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        401
    );
    let hostile = |k: &str, v: &str| {
        s.client()
            .get(s.url("/api/usage"))
            .header(k, v)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(hostile("Host", "evil.example"), 421);
    assert_eq!(hostile("Sec-Fetch-Site", "cross-site"), 403);

    // The status line: Claude Code's JSON on stdin names the session and model.
    let sid = list_claude_session(&home);
    let mut c = home.command(&["usage", "statusline"]);
    c.env("MEMEX_USAGE_TIMEZONE", "UTC");
    let line = run_with_stdin(
        c,
        &serde_json::json!({"session_id": sid, "model": {"id": "claude-opus-4-7", "display_name": "Opus"},
            "transcript_path": "/x", "cwd": "/x", "workspace": {"current_dir": "/x"}})
        .to_string(),
    );
    assert!(line.starts_with("Opus · session $"), "{line}");
    assert!(
        line.contains("today $0.00") && line.contains("no active block"),
        "{line}"
    );
    assert_eq!(line.lines().count(), 1);
    let v = home.json(&["usage", "statusline", "--json", "--session", &sid]);
    assert!(v["sessionCost"].as_f64().unwrap() > 0.0, "{v}");
    // A stdin that stays open (a caller that never closes its pipe) does not hold the line up.
    let mut c = home.command(&["usage", "statusline"]);
    let mut child = c
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _open = child.stdin.take();
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("session $")
            || String::from_utf8_lossy(&out.stdout).starts_with("today $"),
        "{out:?}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // Not JSON on stdin: named, nothing printed to stdout.
    let out = run_output(home.command(&["usage", "statusline"]), "{not json");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not Claude Code's status JSON"));
    assert!(out.stdout.is_empty());
}

/// The most expensive Claude session's id.
fn list_claude_session(home: &Home) -> String {
    let v = home.json(&[
        "usage", "session", "--json", "--agent", "claude", "--limit", "1",
    ]);
    v["sessions"][0]["sessionId"].as_str().unwrap().to_owned()
}

fn run_output(mut c: Command, stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = c
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn run_with_stdin(c: Command, stdin: &str) -> String {
    let out = run_output(c, stdin);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim_end().to_owned()
}
