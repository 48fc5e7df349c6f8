//! `memex-bench inject`: tunes and measures smart injection.
//!
//! The corpus of `eval` (generated topic sessions, every agent's fixture transcripts,
//! distractors) is imported, compacted and embedded. Then prompts are replayed as if typed in a
//! later session:
//! - each topic's questions (keyword and paraphrase): the topic's session is relevant;
//! - every real user prompt of the fixture transcripts (skip rules applied): its own session
//!   (and sessions of the same lineage) is relevant;
//! - negative controls, prompts about topics absent from the corpus: nothing is relevant.
//!
//! 1. Calibration: every candidate (top 20 per level and prompt) labelled relevant or not;
//!    one logistic curve per level is fitted on its similarity (printed, for `calibration.rs`), and
//!    the curves in use are checked in a reliability table.
//! 2. Thresholds: the product's own path (`inject::answer`) at each threshold, across all
//!    projects (the hard case) and within the prompt's project: how often relevant history was
//!    injected, how often irrelevant history was, tokens per prompt, negatives.
//! 3. Latency (`--memex BIN`): `memex serve` on that archive, and the hook command run as
//!    Claude Code runs it, end to end.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memex::config::InjectSettings;
use memex::inject::{self, Mode, Request, calibration};
use memex::search::Semantic;
use memex::store::{self, read::Filter};

struct Prompt {
    text: String,
    cwd: String,
    /// Sessions whose items count as relevant (empty: a negative control).
    relevant: HashSet<String>,
    kind: &'static str,
}

fn prompts(p: &crate::eval::Prepared, conn: &rusqlite::Connection) -> Vec<Prompt> {
    let mut out = Vec::new();
    for (t, sid) in p.topics.topics.iter().zip(&p.ids) {
        for q in &t.questions {
            out.push(Prompt {
                text: q.q.clone(),
                cwd: t.project.clone(),
                relevant: HashSet::from([sid.clone()]),
                kind: if q.kind == "paraphrase" {
                    "topic paraphrase"
                } else {
                    "topic keyword"
                },
            });
        }
    }
    // Real prompts of the fixture transcripts (not the generated sessions).
    let generated = format!("{}%", p.corpus.join("generated").display());
    let mut st = conn
        .prepare(
            "SELECT COALESCE(m.text, memex_unzstd(m.text_z)), s.session_id,
                    COALESCE(s.project_path, m.cwd, '/'), s.parent_session_id
             FROM messages m JOIN sessions s ON s.id = m.session_pk
             WHERE m.kind = 'user_prompt' AND s.session_id NOT LIKE 'e7a10000-%'
               AND COALESCE(s.source_path, '') NOT LIKE ?1 ORDER BY m.id",
        )
        .unwrap();
    let enabled = InjectSettings {
        enabled: true,
        ..InjectSettings::default()
    };
    let rows: Vec<(String, String, String, Option<String>)> = st
        .query_map([generated], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut seen = HashSet::new();
    for (text, sid, cwd, parent) in rows {
        let input = inject::HookInput {
            prompt: Some(text.clone()),
            ..Default::default()
        };
        if inject::skip_reason(Mode::Smart, &input, &enabled, false).is_some()
            || !seen.insert(text.clone())
        {
            continue;
        }
        let mut relevant = HashSet::from([sid.clone()]);
        relevant.extend(parent);
        let mut children = conn
            .prepare("SELECT session_id FROM sessions WHERE parent_session_id = ?1")
            .unwrap();
        relevant.extend(
            children
                .query_map([&sid], |r| r.get::<_, String>(0))
                .unwrap()
                .map(Result::unwrap),
        );
        out.push(Prompt {
            text,
            // Some fixtures' folders were anonymised into relative names.
            cwd: if cwd.starts_with('/') {
                cwd
            } else {
                format!("/{cwd}")
            },
            relevant,
            kind: "fixture prompt",
        });
    }
    let projects: Vec<&str> = p.topics.topics.iter().map(|t| t.project.as_str()).collect();
    for (i, q) in p
        .topics
        .no_answer
        .iter()
        .chain(&p.topics.negative_prompts)
        .enumerate()
    {
        out.push(Prompt {
            text: q.clone(),
            cwd: projects[i % projects.len()].to_owned(),
            relevant: HashSet::new(),
            kind: "negative control",
        });
    }
    out
}

const LEVEL_NAMES: [&str; 4] = ["observations", "talks", "sessions", "messages"];

pub(crate) fn run(
    work: &Path,
    distractors: usize,
    memex_bin: Option<PathBuf>,
    runs: usize,
    reuse: bool,
) {
    let p = crate::eval::prepare(work, distractors, true, reuse);
    let conn = store::connect(&store::db_path(&p.data)).unwrap();
    let rt = p.runtime.handle().clone();
    let vectors = &p.vectors;
    let model = vectors.embedder.id().to_owned();
    let all = prompts(&p, &conn);
    let count = |k: &str| all.iter().filter(|q| q.kind == k).count();
    println!(
        "\nprompts: {} topic keyword, {} topic paraphrase, {} real fixture prompts, {} negative controls; model {model}{}",
        count("topic keyword"),
        count("topic paraphrase"),
        count("fixture prompt"),
        count("negative control"),
        if calibration::is_calibrated(&model) {
            ""
        } else {
            " (no fitted curves: confidence = similarity)"
        }
    );

    // 1. Calibration samples: every candidate of every prompt, across all projects.
    let mut samples: [Vec<([f64; 2], bool)>; 4] = Default::default();
    let mut scored: Vec<(usize, f64, bool)> = Vec::new();
    // (fold, level, [similarity, words], relevant): folds by pairs of prompts, so a topic's two
    // questions stay together.
    let mut folded: Vec<(usize, usize, [f64; 2], bool)> = Vec::new();
    for (n, q) in all.iter().enumerate() {
        let items =
            inject::candidates(&conn, vectors, &rt, &q.text, &Filter::default(), &[], 20).unwrap();
        for i in items {
            let rel = q.relevant.contains(&i.session_id);
            let slot = memex::inject::calibration::slot(i.level);
            let x = [i.similarity.unwrap_or(0.0), i.words.unwrap_or(0.0)];
            samples[slot].push((x, rel));
            scored.push((slot, i.confidence.unwrap_or(0.0), rel));
            folded.push(((n / 2) % 2, slot, x, rel));
        }
    }
    println!(
        "\ncalibration: one logistic curve per level, fitted on each candidate's similarity (a) and share of the prompt's words (c)"
    );
    println!("| level        | candidates | relevant | fitted a | fitted c | fitted b |");
    println!("|--------------|-----------:|---------:|---------:|---------:|---------:|");
    let mut fitted = Vec::new();
    for (slot, s) in samples.iter().enumerate() {
        let f = calibration::fit(s);
        println!(
            "| {:<12} | {:>10} | {:>8} | {:>8} | {:>8} | {:>8} |",
            LEVEL_NAMES[slot],
            s.len(),
            s.iter().filter(|x| x.1).count(),
            f.map_or("-".into(), |f| format!("{:.2}", f.0[0])),
            f.map_or("-".into(), |f| format!("{:.2}", f.0[1])),
            f.map_or("-".into(), |f| format!("{:.2}", f.1)),
        );
        fitted.push(f);
    }
    println!(
        "(for inject/calibration.rs: [{}])",
        fitted
            .iter()
            .map(|f| f.map_or("-".into(), |([a, c], b)| format!(
                "[{a:.2}, {c:.2}, {b:.2}]"
            )))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The same check with the similarity alone, to see what the words add.
    let similarity_only: Vec<_> = folded
        .iter()
        .map(|&(f, l, [s, _], r)| (f, l, [s, 0.0], r))
        .collect();
    held_out("similarity only", &similarity_only);
    held_out("similarity and words", &folded);
    println!("\nreliability of the confidence in use (all levels; per level: relevant / items):");
    println!(
        "| confidence | items | mean conf | relevant | observations | talks  | sessions | messages |"
    );
    println!(
        "|------------|------:|----------:|---------:|-------------:|-------:|---------:|---------:|"
    );
    for b in 0..10 {
        let (lo, hi) = (b as f64 / 10.0, (b + 1) as f64 / 10.0);
        let in_bin: Vec<&(usize, f64, bool)> = scored
            .iter()
            .filter(|s| s.1 >= lo && (s.1 < hi || (b == 9 && s.1 <= 1.0)))
            .collect();
        if in_bin.is_empty() {
            continue;
        }
        let n = in_bin.len() as f64;
        let per = |slot: usize| {
            let l: Vec<_> = in_bin.iter().filter(|s| s.0 == slot).collect();
            format!("{}/{}", l.iter().filter(|s| s.2).count(), l.len())
        };
        println!(
            "| {lo:.1}–{hi:.1}    | {:>5} | {:>9.2} | {:>8.2} | {:>12} | {:>6} | {:>8} | {:>8} |",
            in_bin.len(),
            in_bin.iter().map(|s| s.1).sum::<f64>() / n,
            in_bin.iter().filter(|s| s.2).count() as f64 / n,
            per(0),
            per(1),
            per(2),
            per(3)
        );
    }

    // 2. Thresholds, through the product's own path.
    let sem = Semantic::On { vectors, rt: &rt };
    let settings = InjectSettings {
        enabled: true,
        ..InjectSettings::default()
    };
    let sweep = |scope: &str, thresholds: &[f64]| {
        println!(
            "\nproject_scope = {scope}: per threshold, over {} prompts with history and {} negative controls (max_results {}, max_tokens {})",
            all.iter().filter(|q| !q.relevant.is_empty()).count(),
            count("negative control"),
            settings.max_results,
            settings.max_tokens
        );
        println!(
            "| threshold | relevant injected | paraphrase | fixture | irrelevant injected | items relevant | tokens/prompt | negatives injected | negative tokens |"
        );
        println!(
            "|----------:|------------------:|-----------:|--------:|--------------------:|---------------:|--------------:|-------------------:|----------------:|"
        );
        for &thr in thresholds {
            let (mut hit, mut para, mut fix, mut wrong, mut tokens) = (0, 0, 0, 0, 0u64);
            let (mut items, mut good_items, mut neg_hit, mut neg_tokens) = (0, 0, 0, 0u64);
            for q in &all {
                let req = Request {
                    mode: Mode::Smart,
                    session_id: Some("00000000-1a7e-4000-8000-000000000000".into()),
                    cwd: q.cwd.clone(),
                    prompt: Some(q.text.clone()),
                    agent_id: None,
                    project_scope: Some(scope.into()),
                    threshold: Some(thr),
                    max_results: None,
                    max_tokens: None,
                    min_prompt_chars: Some(0),
                    record_prompt: None,
                    explain: None,
                };
                let opts = req.validate(&settings).unwrap();
                let res = inject::answer(&conn, &sem, &req, &opts).unwrap();
                if std::env::var_os("MEMEX_BENCH_MISSES").is_some()
                    && thr == 0.5
                    && !q.relevant.is_empty()
                    && !res.items.iter().any(|i| q.relevant.contains(&i.session_id))
                {
                    println!(
                        "  miss ({}, best {:?}): {}",
                        q.kind,
                        res.best_confidence.map(|c| (c * 100.0).round() / 100.0),
                        q.text
                            .chars()
                            .take(100)
                            .collect::<String>()
                            .replace('\n', " ")
                    );
                }
                let rel = res
                    .items
                    .iter()
                    .filter(|i| q.relevant.contains(&i.session_id))
                    .count();
                if q.relevant.is_empty() {
                    neg_hit += usize::from(!res.items.is_empty());
                    neg_tokens += res.tokens;
                    continue;
                }
                tokens += res.tokens;
                items += res.items.len();
                good_items += rel;
                if rel > 0 {
                    hit += 1;
                    para += usize::from(q.kind == "topic paraphrase");
                    fix += usize::from(q.kind == "fixture prompt");
                }
                wrong += usize::from(rel < res.items.len());
            }
            let with = all.iter().filter(|q| !q.relevant.is_empty()).count().max(1) as f64;
            let negs = count("negative control").max(1) as f64;
            println!(
                "| {thr:>9.2} | {:>17.0}% | {:>9.0}% | {:>6.0}% | {:>18.0}% | {:>14} | {:>13.0} | {:>17.0}% | {:>15} |",
                hit as f64 * 100.0 / with,
                para as f64 * 100.0 / count("topic paraphrase").max(1) as f64,
                fix as f64 * 100.0 / count("fixture prompt").max(1) as f64,
                wrong as f64 * 100.0 / with,
                if items == 0 {
                    "-".to_owned()
                } else {
                    format!("{:.0}%", good_items as f64 * 100.0 / items as f64)
                },
                tokens as f64 / with,
                neg_hit as f64 * 100.0 / negs,
                neg_tokens
            );
        }
    };
    let thresholds = [0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9];
    sweep("all", &thresholds);
    sweep("project", &thresholds);
    let _ = std::io::stdout().flush();

    if let Some(bin) = memex_bin {
        latency(&p, &bin, &all, runs);
    }
}

/// Two-fold check of the calibration: curves fitted on one half of the prompts score the other
/// half; the Brier score and the reliability of those out-of-fold confidences.
fn held_out(label: &str, folded: &[(usize, usize, [f64; 2], bool)]) {
    let mut oof: Vec<(f64, bool)> = Vec::new();
    let mut in_sample: Vec<(f64, bool)> = Vec::new();
    let logistic =
        |([a, c], b): ([f64; 2], f64), [s, w]: [f64; 2]| 1.0 / (1.0 + (-(a * s + c * w + b)).exp());
    for slot in 0..4 {
        let of = |fold: Option<usize>| -> Vec<([f64; 2], bool)> {
            folded
                .iter()
                .filter(|s| s.1 == slot && fold.is_none_or(|f| s.0 == f))
                .map(|s| (s.2, s.3))
                .collect()
        };
        let all = of(None);
        if let Some(c) = calibration::fit(&all) {
            in_sample.extend(all.iter().map(|&(x, y)| (logistic(c, x), y)));
        }
        for fold in 0..2 {
            let Some(c) = calibration::fit(&of(Some(1 - fold))) else {
                continue;
            };
            oof.extend(of(Some(fold)).iter().map(|&(x, y)| (logistic(c, x), y)));
        }
    }
    let brier = |v: &[(f64, bool)]| {
        v.iter()
            .map(|&(p, y)| (p - f64::from(u8::from(y))).powi(2))
            .sum::<f64>()
            / v.len().max(1) as f64
    };
    let base = oof.iter().filter(|s| s.1).count() as f64 / oof.len().max(1) as f64;
    println!(
        "\nheld out, {label} (two folds of prompts, each scored by curves fitted on the other): Brier {:.4} (in-sample {:.4}; always predicting the base rate {:.3}: {:.4})",
        brier(&oof),
        brier(&in_sample),
        base,
        base * (1.0 - base)
    );
    println!("| out-of-fold confidence | items | mean conf | relevant |");
    println!("|------------------------|------:|----------:|---------:|");
    for (lo, hi) in [(0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 1.01)] {
        let b: Vec<&(f64, bool)> = oof.iter().filter(|s| s.0 >= lo && s.0 < hi).collect();
        if b.is_empty() {
            continue;
        }
        let n = b.len() as f64;
        println!(
            "| {lo:.1}–{:.1}                | {:>5} | {:>9.2} | {:>8.2} |",
            hi.min(1.0),
            b.len(),
            b.iter().map(|s| s.0).sum::<f64>() / n,
            b.iter().filter(|s| s.1).count() as f64 / n
        );
    }
}

/// Runs `memex serve` on the prepared archive and the hook commands against it.
fn latency(p: &crate::eval::Prepared, bin: &Path, all: &[Prompt], runs: usize) {
    let home = p.corpus.parent().unwrap().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let env: Vec<(String, String)> = vec![
        ("HOME".into(), home.display().to_string()),
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("MEMEX_DATA_DIR".into(), p.data.display().to_string()),
        (
            "MEMEX_SOURCES_CLAUDE".into(),
            p.corpus.join("claude").display().to_string(),
        ),
        (
            "MEMEX_SOURCES_CODEX".into(),
            p.corpus.join("codex").display().to_string(),
        ),
        (
            "MEMEX_SOURCES_GEMINI".into(),
            p.corpus.join("gemini-home/tmp").display().to_string(),
        ),
        ("MEMEX_INJECT_ENABLED".into(), "true".into()),
        ("MEMEX_LOG".into(), "warn".into()),
    ];
    let model: Vec<(String, String)> = std::env::var("MEMEX_MODEL_DIR")
        .map(|d| vec![("MEMEX_MODEL_DIR".to_owned(), d)])
        .unwrap_or_default();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("127.0.0.1:{port}");
    /// Stops the service however this function ends.
    struct Serve(std::process::Child);
    impl Drop for Serve {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut serve = Command::new(bin)
        .args(["serve", "--bind", &bind])
        .env_clear()
        .envs(env.iter().cloned())
        .envs(model.iter().cloned())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map(Serve)
        .expect("start memex serve");
    let started = Instant::now();
    // The service writes its token before it listens: wait for it, then ask with it.
    while memex::owner::load(&p.data, "").is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "memex serve did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let client = crate::service_client(&p.data, None);
    loop {
        let get = |path: &str| {
            client
                .get(format!("http://{bind}{path}"))
                .send()
                .ok()
                .and_then(|r| r.json::<serde_json::Value>().ok())
        };
        let ready = get("/api/health").is_some_and(|v| v["phase"] == "watching")
            && get("/api/stats").is_some_and(|v| v["vectors"]["backlog"] == 0);
        if ready {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "memex serve did not become ready"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let hook = |bin: &Path, args: &[&str], input: &serde_json::Value| -> (f64, String) {
        let t = Instant::now();
        let mut child = Command::new(bin)
            .args(args)
            .env_clear()
            .envs(env.iter().cloned())
            .env("MEMEX_API_BIND", &bind)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "the hook failed: {:?}", out.status);
        (
            t.elapsed().as_secs_f64() * 1000.0,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    // Each call in a session of its own: an item is not given twice in a session, and the
    // injection log outlives the run (`--reuse`), so a shared session would measure calls that
    // find everything already given and answer nothing.
    let sessions = std::cell::Cell::new(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            & 0xffff_ffff_ffff,
    );
    let input = |q: &Prompt, event: &str| {
        let session = format!("00000000-1a7e-4000-8000-{:012x}", sessions.get());
        sessions.set((sessions.get() + 1) & 0xffff_ffff_ffff);
        serde_json::json!({"session_id": session,
            "transcript_path": "/tmp/none.jsonl", "cwd": q.cwd, "hook_event_name": event,
            "prompt": q.text, "source": "startup", "permission_mode": "default"})
    };
    let inject_bin = bin.with_file_name("memex-inject");
    let mut cases: Vec<(&str, PathBuf, Vec<&str>, &str)> = vec![
        (
            "memex inject --mode smart",
            bin.to_path_buf(),
            vec!["inject", "--mode", "smart"],
            "UserPromptSubmit",
        ),
        (
            "memex inject --mode full",
            bin.to_path_buf(),
            vec!["inject", "--mode", "full"],
            "SessionStart",
        ),
    ];
    if inject_bin.exists() {
        cases.push((
            "memex-inject --mode smart",
            inject_bin,
            vec!["--mode", "smart"],
            "UserPromptSubmit",
        ));
    }
    println!(
        "\nlatency of the hook command, end to end (process start to exit), warm service, {runs} runs each:"
    );
    println!("| command                   | p50 ms | p95 ms | max ms | answers with context |");
    println!("|---------------------------|-------:|-------:|-------:|---------------------:|");
    let with_history: Vec<&Prompt> = all.iter().filter(|q| q.text.len() < 4000).collect();
    for (name, b, args, event) in &cases {
        for q in with_history.iter().take(5) {
            hook(b, args, &input(q, event));
        }
        let mut times = Vec::new();
        let mut answered = 0;
        for i in 0..runs {
            let q = with_history[i % with_history.len()];
            let (ms, out) = hook(b, args, &input(q, event));
            times.push(ms);
            answered += usize::from(!out.trim().is_empty());
        }
        println!(
            "| {name:<25} | {:>6.1} | {:>6.1} | {:>6.1} | {:>20} |",
            crate::pct(&mut times, 0.5),
            crate::pct(&mut times, 0.95),
            crate::pct(&mut times, 1.0),
            format!("{answered}/{runs}")
        );
    }
    let stats: serde_json::Value = client
        .get(format!("http://{bind}/api/stats"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    println!(
        "in the service (/api/stats injections.latency_ms): {}",
        stats["injections"]["latency_ms"]
    );
    // The service stopped: nothing, exit 0, within the budget.
    let _ = Command::new("kill")
        .args(["-TERM", &serve.0.id().to_string()])
        .status();
    let _ = serve.0.wait();
    let q = with_history[0];
    let (ms, out) = hook(
        bin,
        &["inject", "--mode", "smart"],
        &input(q, "UserPromptSubmit"),
    );
    println!("service stopped: {ms:.1} ms, {} bytes on stdout", out.len());
}
