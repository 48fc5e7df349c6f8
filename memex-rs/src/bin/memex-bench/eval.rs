//! `memex-bench eval`: retrieval quality on a labelled question set.
//!
//! The corpus: the shared fixture transcripts, one generated Claude Code session per topic in
//! `eval-topics.json` (a developer's request, the agent's answer, an edit, the result), and
//! optional generated distractor sessions. Each topic has a keyword question and a paraphrase
//! that shares no content word with its session (checked here: for Chinese and Japanese, no
//! pair of kanji or katakana); some have a question in another language than the session
//! (`lang` "en-zh"); `no_answer` questions have no session. The topics are in English, Chinese
//! and Japanese, and the scores are also reported per language. The archive is imported,
//! compacted (heuristic) and embedded with the configured model, then every question is asked
//! at every level in every mode, and of `grep`.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memex::layer::Layer;
use memex::search::{self, Mode, Scope, SearchParams, Semantic};
use memex::store;
use serde::Deserialize;

#[derive(Deserialize)]
pub(crate) struct Topics {
    pub topics: Vec<Topic>,
    pub no_answer: Vec<String>,
    /// Prompts about topics absent from the corpus (negative controls of `inject`).
    #[serde(default)]
    pub negative_prompts: Vec<String>,
}

#[derive(Deserialize)]
pub(crate) struct Topic {
    pub id: String,
    /// `en` (the default), `zh` or `ja`.
    #[serde(default = "english")]
    pub lang: String,
    pub project: String,
    pub prompt: String,
    pub answer: String,
    pub file: String,
    pub edit: String,
    pub done: String,
    pub questions: Vec<Question>,
}

#[derive(Deserialize)]
pub(crate) struct Question {
    pub q: String,
    pub kind: String,
    /// When the question is in another language than its topic (`en-zh`).
    #[serde(default)]
    pub lang: Option<String>,
}

fn english() -> String {
    "en".into()
}

/// Pairs of neighbouring kanji or katakana (hiragana and the rest carry no topic).
fn cjk_pairs(text: &str) -> BTreeSet<String> {
    let content = |c: char| matches!(c, '\u{4e00}'..='\u{9fff}' | '\u{3400}'..='\u{4dbf}' | '\u{30a0}'..='\u{30ff}');
    let chars: Vec<char> = text.chars().collect();
    chars
        .windows(2)
        .filter(|w| content(w[0]) && content(w[1]))
        .map(|w| w.iter().collect())
        .collect()
}

/// The eval corpus, imported, compacted and embedded.
pub(crate) struct Prepared {
    pub topics: Topics,
    /// The session id of each topic, in order.
    pub ids: Vec<String>,
    pub corpus: PathBuf,
    pub data: PathBuf,
    pub runtime: tokio::runtime::Runtime,
    pub vectors: Arc<memex::vector::indexer::Vectors>,
}

const STOP: &[&str] = &[
    "the", "and", "for", "with", "that", "this", "which", "where", "what", "when", "did", "was",
    "were", "our", "your", "from", "into", "after", "before", "about", "session", "how", "why",
    "who", "they", "them", "their", "its", "are", "not", "but", "too", "got", "kept", "while",
    "without", "through", "whenever", "each", "other", "first", "small", "new", "ones",
];

/// Lower-case content words (3+ letters, not stop words), with a crude stem.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 3 && !STOP.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

fn stem(w: &str) -> String {
    for suf in ["ing", "ed", "es", "s"] {
        if w.len() > suf.len() + 3
            && let Some(s) = w.strip_suffix(suf)
        {
            return s.to_owned();
        }
    }
    w.to_owned()
}

fn session_id(i: usize) -> String {
    format!("e7a10000-0000-4000-8000-{:012x}", i + 1)
}

/// Writes one Claude Code session per topic under `root` (session ids: [`session_id`]).
fn write_topics(topics: &Topics, root: &Path) {
    for (i, t) in topics.topics.iter().enumerate() {
        let sid = session_id(i);
        let dir = root.join(t.project.replace('/', "-"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut f = std::fs::File::create(dir.join(format!("{sid}.jsonl"))).unwrap();
        let ts = |n: usize| format!("2026-03-{:02}T10:{:02}:00.000Z", 1 + i % 28, n);
        let env = |n: usize, parent: Option<String>| {
            serde_json::json!({"uuid": format!("{sid}-{n}"), "parentUuid": parent, "sessionId": sid,
                "cwd": t.project, "gitBranch": "main", "version": "2.1.120", "timestamp": ts(n),
                "isSidechain": false, "userType": "external"})
        };
        let call = format!("toolu_{i:04}");
        let lines = [
            (
                "user",
                serde_json::json!({"role": "user", "content": t.prompt}),
            ),
            (
                "assistant",
                serde_json::json!({"role": "assistant", "id": format!("msg_{i}_a"), "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": t.answer},
                            {"type": "tool_use", "id": call, "name": "Edit",
                             "input": {"file_path": format!("{}/{}", t.project, t.file), "old_string": "", "new_string": t.edit}}]}),
            ),
            (
                "user",
                serde_json::json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                "content": format!("The file {}/{} has been updated.", t.project, t.file)}]}),
            ),
            (
                "assistant",
                serde_json::json!({"role": "assistant", "id": format!("msg_{i}_b"), "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": t.done}]}),
            ),
        ];
        let mut parent = None;
        for (n, (kind, message)) in lines.into_iter().enumerate() {
            let mut l = env(n, parent.clone());
            l["type"] = kind.into();
            l["message"] = message;
            writeln!(f, "{l}").unwrap();
            parent = Some(format!("{sid}-{n}"));
        }
    }
}

#[derive(Default, Clone, Copy)]
struct Score {
    n: usize,
    r1: usize,
    r5: usize,
    r10: usize,
    rr: f64,
}

impl Score {
    fn add(&mut self, rank: Option<usize>) {
        self.n += 1;
        if let Some(r) = rank {
            self.r1 += usize::from(r < 1);
            self.r5 += usize::from(r < 5);
            self.r10 += usize::from(r < 10);
            self.rr += 1.0 / (r as f64 + 1.0);
        }
    }

    fn row(&self, name: &str) -> String {
        let n = self.n.max(1) as f64;
        format!(
            "| {name:<22} | {:.2} | {:.2} | {:.2} | {:.3} |",
            self.r1 as f64 / n,
            self.r5 as f64 / n,
            self.r10 as f64 / n,
            self.rr / n
        )
    }
}

/// Sessions in the order their first hit appears.
fn ranked_sessions(hits: &[search::Hit]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for h in hits {
        if !out.contains(&h.session_id) {
            out.push(h.session_id.clone());
        }
    }
    out
}

/// The grep baseline: every transcript file that contains any of the question's content words
/// (case-insensitive, as `grep -ril`), ranked by how many of them it contains.
fn grep_rank(files: &[(PathBuf, String, String)], q: &str) -> Vec<String> {
    let qw: Vec<String> = q
        .split(|c: char| !c.is_alphanumeric())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() >= 3 && !STOP.contains(&w.as_str()))
        .collect();
    let mut scored: Vec<(usize, &String)> = files
        .iter()
        .map(|(_, session, text)| {
            (
                qw.iter().filter(|w| text.contains(w.as_str())).count(),
                session,
            )
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    scored.sort_by_key(|s| std::cmp::Reverse(s.0));
    let mut out: Vec<String> = Vec::new();
    for (_, s) in scored {
        if !out.contains(s) {
            out.push(s.clone());
        }
    }
    out
}

/// Builds the corpus in `work` (removed first, unless `reuse` finds an archive there) and
/// imports, compacts and embeds it.
pub(crate) fn prepare(work: &Path, distractors: usize, all_agents: bool, reuse: bool) -> Prepared {
    let topics: Topics = serde_json::from_str(include_str!("eval-topics.json")).unwrap();
    let corpus = work.join("corpus");
    let data = work.join("data");
    let ids: Vec<String> = (0..topics.topics.len()).map(session_id).collect();
    // `reuse`: an archive built by an earlier run stays (and only embedding resumes).
    let reused = reuse && store::db_path(&data).exists();
    if !reused {
        let _ = std::fs::remove_dir_all(work);
        let claude = corpus.join("claude");
        write_topics(&topics, &claude);
        let fixtures = std::env::var_os("MEMEX_FIXTURES").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures"),
            PathBuf::from,
        );
        crate::copy_tree(&fixtures.join("claude/projects"), &claude);
        if all_agents {
            crate::copy_tree(
                &fixtures.join("codex/handwritten/sessions"),
                &corpus.join("codex"),
            );
            crate::copy_tree(
                &fixtures.join("gemini/handwritten/gemini-home"),
                &corpus.join("gemini-home"),
            );
        }
        if distractors > 0 {
            crate::generate(&corpus.join("generated"), distractors);
        }

        // Paraphrases must share no content word with their session.
        for (t, sid) in topics.topics.iter().zip(&ids) {
            let text = format!(
                "{} {} {} {} {} {}",
                t.project, t.prompt, t.answer, t.file, t.edit, t.done
            );
            let (tw, tp) = (words(&text), cjk_pairs(&text));
            for q in t.questions.iter().filter(|q| q.kind == "paraphrase") {
                let mut shared: Vec<_> = words(&q.q).intersection(&tw).cloned().collect();
                shared.extend(cjk_pairs(&q.q).intersection(&tp).cloned());
                assert!(
                    shared.is_empty(),
                    "paraphrase of {} ({sid}) shares {shared:?}: {}",
                    t.id,
                    q.q
                );
            }
        }

        // Import, compact, embed.
        let mut roots = vec![("claude".to_owned(), claude.clone())];
        if all_agents {
            roots.push(("codex".to_owned(), corpus.join("codex")));
            roots.push(("gemini".to_owned(), corpus.join("gemini-home/tmp")));
        }
        if distractors > 0 {
            roots.extend(crate::roots(&corpus.join("generated")));
        }
        crate::import_roots(&roots, &data);
        crate::bench_compact(&data, 2);
    }
    let settings = crate::settings_for(&data);
    let runtime = crate::runtime();
    let (writer, handle) = store::Writer::start(&data).unwrap();
    let t = std::time::Instant::now();
    let vectors = runtime.block_on(async {
        let v = Arc::new(
            memex::vector::open_vectors(&settings)
                .await
                .unwrap()
                .unwrap(),
        );
        memex::vector::prepare(&v, &writer).await.unwrap();
        let pool = store::ReadPool::new(&data);
        v.drain(&pool, &writer, &mut |_| {}).await.unwrap();
        v
    });
    drop(writer);
    handle.join().unwrap();
    let st = runtime.block_on(vectors.status(0, "on"));
    println!(
        "embedded with {} in {:.1}s: {:?}{}",
        st.model,
        t.elapsed().as_secs_f64(),
        st.rows,
        st.warning
            .map(|w| format!(" WARNING {w}"))
            .unwrap_or_default()
    );
    Prepared {
        topics,
        ids,
        corpus,
        data,
        runtime,
        vectors,
    }
}

/// `reuse`: the archive (and vectors) an earlier run left in `work` is asked again, as it is.
pub(crate) fn run(work: &Path, distractors: usize, reuse: bool) {
    let Prepared {
        topics,
        ids,
        corpus,
        data,
        runtime,
        vectors,
    } = prepare(work, distractors, false, reuse);

    // Transcript files for grep, with the session each belongs to.
    let conn = store::connect(&store::db_path(&data)).unwrap();
    let mut files = Vec::new();
    for p in crate::walk(&corpus) {
        let session: Option<String> = conn
            .query_row(
                "SELECT s.session_id FROM source_files f JOIN messages m ON m.source_file_id = f.id
                 JOIN sessions s ON s.id = m.session_pk WHERE f.path = ?1 LIMIT 1",
                [p.display().to_string()],
                |r| r.get(0),
            )
            .ok();
        if let (Some(s), Ok(text)) = (session, std::fs::read_to_string(&p)) {
            files.push((p, s, text.to_lowercase()));
        }
    }

    let levels = [
        ("raw", Scope::One(Layer::Raw)),
        ("observations", Scope::One(Layer::Observations)),
        ("talks", Scope::One(Layer::Talks)),
        ("sessions", Scope::One(Layer::Sessions)),
        ("all", Scope::All),
    ];
    let modes = [
        ("fts", Mode::Fts),
        ("vector", Mode::Vector),
        ("hybrid", Mode::Hybrid),
    ];
    let rt = runtime.handle().clone();
    let sem = Semantic::On {
        vectors: &vectors,
        rt: &rt,
    };
    // (question, kind, session, group): the group is its language and kind ("zh paraphrase").
    let questions: Vec<(&str, &str, &str, String)> = topics
        .topics
        .iter()
        .zip(&ids)
        .flat_map(|(t, sid)| {
            t.questions.iter().map(move |q| {
                let lang = q.lang.as_deref().unwrap_or(&t.lang);
                (
                    q.q.as_str(),
                    q.kind.as_str(),
                    sid.as_str(),
                    format!("{lang} {}", q.kind),
                )
            })
        })
        .collect();
    println!(
        "\n{} questions with an answer ({} keyword, {} paraphrase), {} without; corpus {} sessions\n",
        questions.len(),
        questions.iter().filter(|q| q.1 == "keyword").count(),
        questions.iter().filter(|q| q.1 == "paraphrase").count(),
        topics.no_answer.len(),
        conn.query_row("SELECT COUNT(*) FROM sessions", [], |r| r.get::<_, i64>(0))
            .unwrap()
    );
    println!("| level / mode           | R@1  | R@5  | R@10 | MRR   |");
    println!("|------------------------|------|------|------|-------|");
    let mut grep = Score::default();
    for (q, _, sid, _) in &questions {
        grep.add(grep_rank(&files, q).iter().position(|s| s == sid));
    }
    println!("{}", grep.row("grep (any word)"));
    let mut by_group = Vec::new();
    let misses = std::env::var_os("MEMEX_EVAL_MISSES").is_some();
    for (lname, level) in levels {
        for (mname, mode) in modes {
            let mut score = Score::default();
            let mut groups = std::collections::BTreeMap::<&str, Score>::new();
            for (q, _, sid, group) in &questions {
                let p = SearchParams {
                    query: q.to_string(),
                    limit: 30,
                    filter: Default::default(),
                    level,
                    mode,
                    ..Default::default()
                };
                let res = search::search(&conn, &sem, &p).unwrap();
                let rank = ranked_sessions(&res.results).iter().position(|s| s == sid);
                // MEMEX_EVAL_MISSES=1: the questions level all misses in its first five.
                if lname == "all" && misses && rank.is_none_or(|r| r >= 5) {
                    println!("  miss ({mname}, {group}, rank {rank:?}): {q}");
                }
                score.add(rank);
                groups.entry(group).or_default().add(rank);
            }
            println!("{}", score.row(&format!("{lname} / {mname}")));
            if lname == "all" {
                by_group.push((mname, groups));
            }
        }
    }
    println!("\nlevel all, by language and question kind:");
    for (mname, groups) in by_group {
        for (group, score) in groups {
            println!("{}", score.row(&format!("{mname} {group}")));
        }
    }
    let mut grep_groups = std::collections::BTreeMap::<&str, Score>::new();
    for (q, _, sid, group) in &questions {
        grep_groups
            .entry(group)
            .or_default()
            .add(grep_rank(&files, q).iter().position(|s| s == sid));
    }
    for (group, score) in grep_groups {
        println!("{}", score.row(&format!("grep {group}")));
    }

    // Questions without an answer: what each ranking offers first.
    let top = |q: &str, level, mode| {
        let p = SearchParams {
            query: q.to_owned(),
            limit: 1,
            filter: Default::default(),
            level,
            mode,
            ..Default::default()
        };
        search::search(&conn, &sem, &p)
            .unwrap()
            .results
            .into_iter()
            .next()
    };
    println!("\nquestions without an answer (top result offered):");
    for q in &topics.no_answer {
        let fts = top(q, Scope::All, Mode::Fts);
        let vec = top(q, Scope::One(Layer::Raw), Mode::Vector);
        println!(
            "  {q:<60} fts: {:<10} vector similarity of the nearest: {}",
            if fts.is_none() { "no match" } else { "a match" },
            vec.map_or("-".into(), |h| format!("{:.2}", h.score))
        );
    }
    let mut sims: Vec<f64> = questions
        .iter()
        .filter_map(|(q, ..)| top(q, Scope::One(Layer::Raw), Mode::Vector).map(|h| h.score))
        .collect();
    sims.sort_by(f64::total_cmp);
    if !sims.is_empty() {
        println!(
            "  (answerable questions: nearest similarity median {:.2}, min {:.2})",
            sims[sims.len() / 2],
            sims[0]
        );
    }
}
