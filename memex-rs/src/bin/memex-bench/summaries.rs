//! `memex-bench summaries`: how much of what a person expects the compact layers say, on the
//! real fixture sessions.
//!
//! `tests/data/summary-facts/*.json` hold, for real public sessions of every agent Memex reads,
//! the facts a person wrote down from the transcript before the heuristic was tuned: for the
//! session summary (L3) and for each talk (L2), each fact with alternative sets of words that
//! must all appear for it to count; and strings that must never appear in a summary (injected
//! editor context, tool boilerplate). The sessions are imported from `../shared/fixtures` into a
//! fresh archive, compacted as the service does (heuristic, no model), and read back:
//!
//! - facts recalled in L3 (session summary and key points) and in each talk's L2;
//! - words per L3 (summary and key points together);
//! - filler: L2 rows whose outcome is a pleasantry ("Perfect!", "Done!"), L3s that end on one;
//! - boilerplate observations: L1 rows that repeat a tool's stock text;
//! - leaks: injected context or a session's must-not-appear strings in any of its rows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ai_cli_session_collector::AdapterRegistry;
use memex::store::{self, ingest};
use rusqlite::{Connection, OptionalExtension};
use serde::Deserialize;

#[derive(Deserialize)]
struct Fact {
    fact: String,
    any: Vec<Vec<String>>,
}

#[derive(Deserialize)]
struct Facts {
    agent: String,
    file: String,
    root: String,
    session_id: String,
    #[serde(default)]
    l3: Vec<Fact>,
    #[serde(default)]
    talks: BTreeMap<String, Vec<Fact>>,
    #[serde(default)]
    must_not_appear: Vec<String>,
}

/// Text other programs put into a conversation, which no summary may carry.
const INJECTED: &[&str] = &[
    "<ide_selection>",
    "<ide_opened_file>",
    "The user selected the lines",
    "The user opened the file",
    "<system-reminder>",
    "<command-name>",
    "<local-command-stdout>",
    "<local-command-caveat>",
    "Caveat: The messages below were generated",
    "<user_query>",
    "<current_datetime>",
    "--- Content from referenced files ---",
    "<bash-input>",
    "<bash-stdout>",
];

/// Tools' stock text: an observation that repeats it says nothing.
const BOILERPLATE: &[&str] = &[
    "has been updated. Here's the result of running",
    "Todos have been modified successfully",
    "Ensure that you continue to use the todo list",
    "File created successfully at",
    "has been modified successfully",
    "The file has been updated",
    "Applied edit to",
    "<system-reminder>",
    "tool_use_error",
];

/// Pleasantries: an outcome made of one of these (and nothing else) says nothing.
const PLEASANTRIES: &[&str] = &[
    "perfect",
    "great",
    "done",
    "excellent",
    "awesome",
    "sure",
    "thanks",
    "thank you",
    "you're welcome",
    "you’re welcome",
    "you're absolutely right",
    "you’re absolutely right",
    "got it",
    "all set",
    "sounds good",
    "no problem",
    "understood",
    "of course",
    "certainly",
    "absolutely",
];

/// Whether `s` is a pleasantry and nothing more (its parts between punctuation each one).
pub(crate) fn is_pleasantry(s: &str) -> bool {
    let t = s.trim().to_lowercase();
    let parts: Vec<&str> = t
        .split(['.', '!', '?', ',', ';', '…'])
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    !parts.is_empty() && parts.iter().all(|p| PLEASANTRIES.contains(p))
}

fn recalled(fact: &Fact, text: &str) -> bool {
    let t = text.to_lowercase();
    fact.any
        .iter()
        .any(|alt| !alt.is_empty() && alt.iter().all(|w| t.contains(&w.to_lowercase())))
}

fn words(s: &str) -> usize {
    s.split_whitespace().count()
}

/// The session of `f` in the archive (Aider's ids are its start time, compacted).
fn session_pk(conn: &Connection, f: &Facts) -> Option<i64> {
    let exact: Option<i64> = conn
        .query_row(
            "SELECT id FROM sessions WHERE agent = ?1 AND session_id = ?2",
            [&f.agent, &f.session_id],
            |r| r.get(0),
        )
        .optional()
        .ok()
        .flatten();
    exact
        .or_else(|| {
            let compact: String = f
                .session_id
                .chars()
                .filter_map(|c| match c {
                    '-' | ':' => None,
                    ' ' => Some('T'),
                    c => Some(c),
                })
                .collect();
            conn.query_row(
                "SELECT id FROM sessions WHERE agent = ?1 AND (session_id LIKE ?2 || '%'
               OR session_id LIKE '%' || ?3 || '%') ORDER BY id LIMIT 1",
                [&f.agent, &compact, &f.session_id],
                |r| r.get(0),
            )
            .optional()
            .ok()
            .flatten()
        })
        // A Claude Code file not named by its session id is stored under its file name.
        .or_else(|| {
            conn.query_row(
                "SELECT id FROM sessions WHERE agent = ?1 AND source_path LIKE '%/' || ?2
             ORDER BY id LIMIT 1",
                [&f.agent, &f.file],
                |r| r.get(0),
            )
            .optional()
            .ok()
            .flatten()
        })
}

struct Rows {
    l3: Option<(String, Vec<String>)>,
    l2: BTreeMap<i64, (String, String, String)>,
    l1: Vec<String>,
}

fn rows(conn: &Connection, pk: i64) -> Rows {
    let l3 = conn
        .query_row(
            "SELECT summary, key_points FROM session_summaries WHERE session_pk = ?1",
            [pk],
            |r| {
                let kp: String = r.get(1)?;
                Ok((
                    r.get::<_, String>(0)?,
                    serde_json::from_str::<Vec<String>>(&kp).unwrap_or_default(),
                ))
            },
        )
        .optional()
        .unwrap();
    let mut st = conn
        .prepare(
            "SELECT prompt_number, user_request, summary, completed FROM talk_summaries
             WHERE session_pk = ?1 ORDER BY prompt_number",
        )
        .unwrap();
    let l2 = st
        .query_map([pk], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?, r.get(3)?))))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut st = conn
        .prepare(
            "SELECT title || ' | ' || subtitle || ' | ' || facts || ' | ' || narrative
             FROM observations WHERE session_pk = ?1 ORDER BY id",
        )
        .unwrap();
    let l1 = st
        .query_map([pk], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    Rows { l3, l2, l1 }
}

/// What the eval found over all sessions.
#[derive(Debug)]
pub(crate) struct Totals {
    pub l3_recalled: usize,
    pub l3_facts: usize,
    pub l2_recalled: usize,
    pub l2_facts: usize,
    pub max_l3_words: usize,
    pub filler: usize,
    pub boilerplate: usize,
    pub leaks: usize,
}

impl Totals {
    /// The targets: at least 80 % of the facts in L3 (and in L2) at no more than 120
    /// words, and no filler, boilerplate or leak at all.
    pub(crate) fn meets_targets(&self) -> bool {
        self.l3_facts > 0
            && self.l3_recalled * 100 >= self.l3_facts * 80
            && self.l2_recalled * 100 >= self.l2_facts * 80
            && self.max_l3_words <= 120
            && (self.filler, self.boilerplate, self.leaks) == (0, 0, 0)
    }
}

pub(crate) fn run(facts_dir: &Path, fixtures: &Path, work: &Path, show: bool) -> Totals {
    let mut all: Vec<(String, Facts)> = std::fs::read_dir(facts_dir)
        .unwrap_or_else(|e| panic!("{}: {e}", facts_dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let f: Facts = serde_json::from_slice(&std::fs::read(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p.file_stem().unwrap().to_string_lossy().into_owned(), f)
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    let _ = std::fs::remove_dir_all(work);
    let corpus = work.join("corpus");
    let data = work.join("data");
    // Every root the facts name, copied whole (sub-agent files, side files come along).
    let mut roots: Vec<(String, PathBuf)> = Vec::new();
    let mut jobs: Vec<ingest::Job> = Vec::new();
    let registry = Arc::new(AdapterRegistry::new());
    for (_, f) in &all {
        let root = corpus.join(&f.root);
        if !roots.iter().any(|(a, r)| *a == f.agent && *r == root) {
            crate::copy_tree(&fixtures.join(&f.root), &root);
            roots.push((f.agent.clone(), root.clone()));
        }
        let agent = registry
            .get(&f.agent)
            .unwrap_or_else(|| panic!("no adapter `{}`", f.agent))
            .name();
        jobs.push(ingest::Job {
            agent,
            root: root.clone(),
            path: corpus.join(&f.file),
        });
    }
    // The rest of each root (a session's sub-agent files) as discovery finds it.
    for j in ingest::discover(&registry, &roots) {
        if !jobs.iter().any(|k| k.path == j.path) {
            jobs.push(j);
        }
    }
    let rep = crate::import_jobs(&data, registry, jobs);
    println!(
        "imported {} files, {} messages, {} prompts",
        rep.files, rep.messages, rep.prompts
    );
    // Every fixture is a finished session: mark each idle as the agent's stop event would, so
    // that its last talk and its L3 are written.
    store::open(&data)
        .unwrap()
        .execute("UPDATE sessions SET idle_event_at = updated_at", [])
        .unwrap();
    crate::bench_compact(&data, 2);
    let conn = store::open(&data).unwrap();

    println!("\n| session | L3 facts | L3 words | L2 facts | filler | boilerplate L1 | leaks |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let (mut l3_hit, mut l3_all, mut l2_hit, mut l2_all) = (0, 0, 0, 0);
    let (mut filler, mut boiler, mut leaks) = (0, 0, 0);
    let mut l3_words: Vec<usize> = Vec::new();
    for (name, f) in &all {
        let Some(pk) = session_pk(&conn, f) else {
            println!(
                "| {name} | session `{}` not in the archive | | | | | |",
                f.session_id
            );
            l3_all += f.l3.len();
            l2_all += f.talks.values().map(Vec::len).sum::<usize>();
            continue;
        };
        let r = rows(&conn, pk);
        let l3_text =
            r.l3.as_ref()
                .map(|(s, kp)| format!("{s}\n{}", kp.join("\n")))
                .unwrap_or_default();
        let hits3 = f.l3.iter().filter(|x| recalled(x, &l3_text)).count();
        let w = words(&l3_text);
        l3_words.push(w);
        let mut hits2 = 0;
        let mut n2 = 0;
        for (n, facts) in &f.talks {
            let text = n
                .parse::<i64>()
                .ok()
                .and_then(|n| r.l2.get(&n))
                .map(|(a, b, c)| format!("{a}\n{b}\n{c}"))
                .unwrap_or_default();
            n2 += facts.len();
            hits2 += facts.iter().filter(|x| recalled(x, &text)).count();
        }
        let mut fill =
            r.l2.values()
                .filter(|(_, s, c)| {
                    is_pleasantry(c) || s.rsplit(": ").next().is_some_and(is_pleasantry)
                })
                .count();
        if let Some((s, _)) = &r.l3
            && s.rsplit(": ").next().is_some_and(is_pleasantry)
        {
            fill += 1;
        }
        let boil =
            r.l1.iter()
                .filter(|o| BOILERPLATE.iter().any(|b| o.contains(b)))
                .count();
        let mut texts: Vec<String> = r.l1.clone();
        texts.push(l3_text.clone());
        texts.extend(r.l2.values().map(|(a, b, c)| format!("{a}\n{b}\n{c}")));
        let leak = texts
            .iter()
            .map(|t| {
                INJECTED
                    .iter()
                    .copied()
                    .chain(f.must_not_appear.iter().map(String::as_str))
                    .filter(|m| !m.is_empty() && t.contains(m))
                    .count()
            })
            .sum::<usize>();
        println!(
            "| {name} | {hits3}/{} | {w} | {hits2}/{n2} | {fill} | {boil} | {leak} |",
            f.l3.len()
        );
        l3_hit += hits3;
        l3_all += f.l3.len();
        l2_hit += hits2;
        l2_all += n2;
        filler += fill;
        boiler += boil;
        leaks += leak;
        if show {
            println!("\n### {name} ({})\n", f.file);
            match &r.l3 {
                Some((s, kp)) => {
                    println!("L3: {s}");
                    for k in kp {
                        println!("  - {k}");
                    }
                }
                None => println!("L3: none"),
            }
            for (n, (a, b, c)) in &r.l2 {
                println!("L2 #{n}: request: {a}\n  summary: {b}\n  completed: {c}");
            }
            for o in &r.l1 {
                println!("L1: {o}");
            }
            for x in f.l3.iter().filter(|x| !recalled(x, &l3_text)) {
                println!("  missed in L3: {}", x.fact);
            }
            for t in &texts {
                for m in INJECTED
                    .iter()
                    .copied()
                    .chain(f.must_not_appear.iter().map(String::as_str))
                    .filter(|m| !m.is_empty() && t.contains(m))
                {
                    println!(
                        "  leaked `{m}` in: {}",
                        memex::compact::heuristic::one_line(t, 200)
                    );
                }
            }
            println!();
        }
    }
    let pct = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
    l3_words.sort_unstable();
    println!(
        "\nL3 facts recalled: {l3_hit}/{l3_all} ({:.0} %); L2 facts recalled: {l2_hit}/{l2_all} ({:.0} %)",
        pct(l3_hit, l3_all),
        pct(l2_hit, l2_all)
    );
    println!(
        "words per L3: median {}, max {}; filler rows {filler}; boilerplate observations {boiler}; injected-context leaks {leaks}",
        l3_words.get(l3_words.len() / 2).copied().unwrap_or(0),
        l3_words.last().copied().unwrap_or(0)
    );
    Totals {
        l3_recalled: l3_hit,
        l3_facts: l3_all,
        l2_recalled: l2_hit,
        l2_facts: l2_all,
        max_l3_words: l3_words.last().copied().unwrap_or(0),
        filler,
        boilerplate: boiler,
        leaks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eval itself, on the real fixture sessions: the targets hold.
    #[test]
    fn the_fixture_sessions_meet_the_summary_targets() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let fixtures = std::env::var_os("MEMEX_FIXTURES")
            .map_or_else(|| root.join("../../shared/fixtures"), PathBuf::from);
        let work = tempfile::tempdir().unwrap();
        let t = run(
            &root.join("../tests/data/summary-facts"),
            &fixtures,
            work.path(),
            false,
        );
        assert!(t.l3_facts >= 100, "{t:?}");
        assert!(t.meets_targets(), "{t:?}");
    }

    #[test]
    fn pleasantries_alone_are_filler() {
        for p in [
            "Perfect!",
            "Done.",
            "You're absolutely right!",
            "Great, thanks!",
        ] {
            assert!(is_pleasantry(p), "{p}");
        }
        for s in [
            "Done: 3 files changed, 42 tests pass.",
            "Perfect timing for the migration to run",
            "",
        ] {
            assert!(!is_pleasantry(s), "{s}");
        }
    }
}
