//! `memex-bench usage`: whole-process latency of `memex usage daily` over an archive against
//! `ccusage daily --offline` over the same Claude Code transcripts, and of `memex usage
//! statusline` against `memex search --mode fts` (what the status line must not be slower
//! than), in one run so the machine's drift hits both sides alike.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

pub(crate) struct Options {
    pub memex: PathBuf,
    pub data: PathBuf,
    /// A folder holding `projects/` (Claude Code's layout), for ccusage.
    pub claude: PathBuf,
    /// ccusage's `dist/index.js`.
    pub ccusage: PathBuf,
    pub runs: usize,
}

fn p50(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs `c` once to warm up, then `runs` times; the p50 in ms and the last stdout's size.
fn time(mut make: impl FnMut() -> Command, runs: usize, what: &str) -> (f64, usize) {
    let mut out_len = 0;
    let mut ms = Vec::new();
    for i in 0..=runs {
        let t = Instant::now();
        let out = make().stderr(Stdio::inherit()).output().expect(what);
        let took = t.elapsed().as_secs_f64() * 1e3;
        assert!(out.status.success(), "{what} failed");
        out_len = out.stdout.len();
        if i > 0 {
            ms.push(took);
        }
    }
    (p50(ms), out_len)
}

fn memex(o: &Options, args: &[&str]) -> Command {
    let mut c = Command::new(&o.memex);
    c.args(args)
        .env("MEMEX_DATA_DIR", &o.data)
        .env("MEMEX_USAGE_TIMEZONE", "UTC")
        .stdin(Stdio::null());
    c
}

pub(crate) fn run(o: Options) {
    assert!(
        o.data.join("memex.db").is_file(),
        "no archive in {}",
        o.data.display()
    );
    assert!(
        o.claude.join("projects").is_dir(),
        "{}/projects",
        o.claude.display()
    );
    // A first run migrates an older archive; not timed.
    let _ = memex(&o, &["usage", "daily", "--json"]).output();
    let (ours, n1) = time(
        || memex(&o, &["usage", "daily", "--json"]),
        o.runs,
        "memex usage daily",
    );
    let (ours_agent, _) = time(
        || memex(&o, &["usage", "daily", "--json", "--agent", "claude"]),
        o.runs,
        "memex usage daily --agent claude",
    );
    let ccusage_runs = o.runs.clamp(1, 3);
    let (theirs, n2) = time(
        || {
            let mut c = Command::new("node");
            c.arg(&o.ccusage)
                .args(["daily", "--json", "--offline"])
                .env("CLAUDE_CONFIG_DIR", &o.claude)
                .env("TZ", "UTC")
                .stdin(Stdio::null());
            c
        },
        ccusage_runs,
        "ccusage daily --offline",
    );
    println!(
        "usage daily: memex {ours:.1} ms (claude only {ours_agent:.1} ms, {n1} bytes), ccusage --offline {theirs:.0} ms ({n2} bytes, {ccusage_runs} runs): {:.0}x",
        theirs / ours
    );
    let (status, _) = time(
        || memex(&o, &["usage", "statusline"]),
        o.runs,
        "memex usage statusline",
    );
    let (fts, _) = time(
        || memex(&o, &["search", "timeout", "--mode", "fts", "--limit", "10"]),
        o.runs,
        "memex search --mode fts",
    );
    println!(
        "statusline: {status:.1} ms p50, memex search --mode fts {fts:.1} ms p50 ({:.2}x)",
        status / fts
    );
}
