//! Benchmarks of the vector layer: embedding throughput, building the vectors of an archive,
//! and hybrid search latency.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use memex::embed::{Embedder, e5::E5, minilm::MiniLm, model};
use memex::layer::Layer;
use memex::search::{Mode, Scope, SearchParams, Semantic};
use memex::store;

use crate::{PROMPTS, QUERIES, Rng, paragraph, pct, peak_rss_mb, sentence, time_search};

/// The local model `MEMEX_VECTOR_MODEL` names (default all-MiniLM-L6-v2), from
/// `MEMEX_MODEL_DIR` or the test cache, computing with `threads` at `MEMEX_VECTOR_PRECISION`
/// (default int8).
fn local_model(threads: usize) -> Arc<dyn Embedder> {
    let name = std::env::var("MEMEX_VECTOR_MODEL").unwrap_or_else(|_| model::MODEL_NAME.into());
    let spec = model::spec(&name).unwrap_or_else(|| panic!("unknown model {name}"));
    let model_dir = std::env::var("MEMEX_MODEL_DIR").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/memex/models/{}", spec.name)
    });
    let dir = model::locate(spec, &model_dir, Path::new("."));
    let files = model::verify(spec, &dir)
        .unwrap_or_else(|e| panic!("the model is needed ({e}); set MEMEX_MODEL_DIR"));
    let int8 = std::env::var("MEMEX_VECTOR_PRECISION").map_or(true, |p| p == "int8");
    if spec.name == model::E5.name {
        Arc::new(E5::load(&files, threads, int8).unwrap())
    } else {
        Arc::new(MiniLm::load(&files, threads, int8).unwrap())
    }
}

/// Texts per second of the local model: short texts (prompts) and full 256-token chunks, one
/// and two threads, batched by length and one at a time.
pub(crate) fn embed(n: usize) {
    let mut r = Rng(7);
    let short: Vec<String> = (0..n)
        .map(|_| {
            let words = 4 + r.below(12);
            format!("{} ({})", r.pick(PROMPTS), sentence(&mut r, words))
        })
        .collect();
    let long: Vec<String> = (0..n / 8).map(|_| paragraph(&mut r, 14)).collect();
    for threads in [1, 2] {
        let t = Instant::now();
        let m = local_model(threads);
        let load = t.elapsed().as_secs_f64();
        let rate = |texts: &[String], batch: usize| {
            let t = Instant::now();
            for c in texts.chunks(batch) {
                m.embed(c).unwrap();
            }
            texts.len() as f64 / t.elapsed().as_secs_f64()
        };
        let long_chunks: Vec<String> = long.iter().flat_map(|t| m.chunk(t, 1)).collect();
        println!(
            "threads {threads}: load {load:.2}s; short texts batched {:.0}/s, one at a time {:.0}/s; 256-token chunks batched {:.1}/s",
            rate(&short, 64),
            rate(&short[..n / 4], 1),
            rate(&long_chunks, 32),
        );
    }
    let m = local_model(1);
    println!("model {}", m.id());
    let mut lat = Vec::new();
    for q in QUERIES.iter().cycle().take(200) {
        let t = Instant::now();
        m.embed_queries(&[q.to_string()]).unwrap();
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "one query: p50 {:.2} ms, p99 {:.2} ms; peak RSS {:.0} MB",
        pct(&mut lat.clone(), 0.5),
        pct(&mut lat, 0.99),
        peak_rss_mb()
    );
}

/// Builds the vectors of the archive in `data` with `provider` (`local` or `hashing`).
pub(crate) fn index(data: &Path, provider: &str, batch: usize) {
    let mut s = crate::settings_for(data);
    s.vector.provider = provider.into();
    s.vector.batch = batch;
    let rt = crate::runtime();
    let (writer, handle) = store::Writer::start(data).unwrap();
    let pool = store::ReadPool::new(data);
    let t = Instant::now();
    let v = rt.block_on(async {
        let v = Arc::new(memex::vector::open_vectors(&s).await.unwrap().unwrap());
        memex::vector::prepare(&v, &writer).await.unwrap();
        let queued = pool
            .with(memex::vector::indexer::Vectors::backlog)
            .unwrap()
            .unwrap();
        println!("{queued} rows queued in {:.1}s", t.elapsed().as_secs_f64());
        let t = Instant::now();
        let mut done = 0usize;
        let mut last = Instant::now();
        v.drain(&pool, &writer, &mut |n| {
            done += n;
            if last.elapsed().as_secs() >= 30 {
                last = Instant::now();
                println!(
                    "  {done} rows in {:.0}s ({:.0} rows/s)",
                    t.elapsed().as_secs_f64(),
                    done as f64 / t.elapsed().as_secs_f64()
                );
            }
        })
        .await
        .unwrap();
        println!(
            "drained {done} waiting rows in {:.1}s ({:.0} rows/s) incl. upkeep and the ANN index",
            t.elapsed().as_secs_f64(),
            done as f64 / t.elapsed().as_secs_f64()
        );
        v
    });
    let st = rt.block_on(v.status(0, "on"));
    println!(
        "{}: rows {:?}; ANN index on {:?}; {:.1} MB on disk; embedding {:.0} texts/s; peak RSS {:.0} MB",
        st.model,
        st.rows,
        st.ann_index,
        st.disk_bytes as f64 / 1e6,
        st.texts_per_sec.unwrap_or(0.0),
        peak_rss_mb()
    );
    drop(writer);
    handle.join().unwrap();
}

/// Search latency at every level, in each mode, with the real model embedding the query.
/// The vectors in `data` may have been made by the stand-in (building them with the model
/// takes hours at a million messages): LanceDB's cost does not depend on which model made
/// them, so the guard is bypassed here, and only here, to time the real query path.
pub(crate) fn latency(data: &Path, runs: usize) {
    let rt = crate::runtime();
    let embedder = local_model(1);
    let store = rt
        .block_on(memex::vector::VectorStore::open(data, embedder.dimension()))
        .unwrap();
    let vectors = memex::vector::indexer::Vectors {
        store,
        embedder,
        settings: Default::default(),
        stats: Default::default(),
        stop: Default::default(),
        keep_loaded_until: Default::default(),
        purge: Default::default(),
    };
    let conn = store::connect(&store::db_path(data)).unwrap();
    let n: i64 = conn
        .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
        .unwrap();
    let st = rt.block_on(vectors.status(0, "on"));
    println!(
        "{n} messages; vectors {:?}, ANN on {:?}; {runs} runs per query",
        st.rows, st.ann_index
    );
    let handle = rt.handle().clone();
    let sem = Semantic::On {
        vectors: &vectors,
        rt: &handle,
    };
    for (lname, level) in [("raw", Scope::One(Layer::Raw)), ("all", Scope::All)] {
        for (mname, mode) in [
            ("fts", Mode::Fts),
            ("vector", Mode::Vector),
            ("hybrid", Mode::Hybrid),
        ] {
            let mut all = Vec::new();
            for q in QUERIES {
                let p = SearchParams {
                    query: q.to_string(),
                    limit: 10,
                    filter: Default::default(),
                    level,
                    mode,
                    ..Default::default()
                };
                all.extend(time_search(&conn, &sem, &p, runs).1);
            }
            println!(
                "  level {lname:<4} {mname:<7} p50 {:>6.1} ms  p99 {:>6.1} ms",
                pct(&mut all.clone(), 0.5),
                pct(&mut all, 0.99)
            );
        }
    }
    println!("  peak RSS {:.0} MB", peak_rss_mb());
}
