//! The indexer: embeds new messages and what `vector_outbox` lists, in batches, in the
//! background.
//!
//! New messages are those above a high-water mark (`vector_progress`), so storing one costs
//! ingest nothing more; triggers fill the outbox, in the same transaction as the change, for
//! the rest (a message rewritten or deleted, a summary written or deleted). Ingest and
//! compaction never wait for embeddings and nothing is missed across crashes: a batch is read,
//! embedded on a blocking thread, written to LanceDB (old vectors of those rows deleted first,
//! so a batch done twice leaves one copy), and only then are its outbox entries removed and
//! the mark moved past it, in one transaction.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::{Connection, params_from_iter};
use serde::Serialize;

use super::{Row, VectorError, VectorStore};
use crate::config::VectorSettings;
use crate::embed::Embedder;
use crate::layer::Layer;
use crate::store::{ReadPool, Writer};

/// The vector layer as search and the indexer use it.
pub struct Vectors {
    pub store: VectorStore,
    pub embedder: Arc<dyn Embedder>,
    pub settings: VectorSettings,
    pub stats: IndexerStats,
    /// Set at shutdown: an embedding run in progress stops between two model passes (its
    /// batch stays in the outbox).
    pub stop: std::sync::atomic::AtomicBool,
    /// Epoch ms until which the model stays loaded however long it is unused: set by hook
    /// injections, whose prompts must not wait for the model to load.
    pub keep_loaded_until: std::sync::atomic::AtomicI64,
    /// Forgotten rows whose files are to be rewritten ([`Vectors::request_purge`]).
    pub purge: std::sync::Mutex<Purge>,
}

/// Where a purge of forgotten vectors stands: asked for (its waiters), and once the files are
/// rewritten, when the older versions that still hold the rows may go.
#[derive(Default)]
pub struct Purge {
    asked: Vec<PurgeWaiter>,
    pruning: Option<(Instant, Vec<PurgeWaiter>)>,
}

/// Who waits for a purge: told when it is done, or why it failed.
type PurgeWaiter = tokio::sync::oneshot::Sender<PurgeResult>;

/// How a purge ended: the error is shared by everyone who waited for it.
pub type PurgeResult = Result<(), Arc<VectorError>>;

/// How long a version may still be read after a newer one replaced it: a search holds one for
/// at most its deadline (10 s). Versions that held forgotten rows go once this has passed.
pub const READERS_GRACE: Duration = Duration::from_secs(15);

#[derive(Default)]
pub struct IndexerStats {
    pub embedded_rows: AtomicU64,
    pub embedded_texts: AtomicU64,
    pub removed_rows: AtomicU64,
    pub embed_millis: AtomicU64,
    pub errors: AtomicU64,
    pub last_error: std::sync::Mutex<Option<String>>,
}

/// What the indexer and `memex status` report.
#[derive(Debug, Clone, Serialize)]
pub struct VectorStatus {
    /// `on`, `off`, or why vectors are not used.
    pub state: String,
    pub model: String,
    pub dimension: usize,
    /// Set when a stand-in embedder is in use, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// Rows waiting to be embedded (or removed).
    pub backlog: u64,
    pub rows: std::collections::BTreeMap<&'static str, usize>,
    pub ann_index: Vec<&'static str>,
    pub disk_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub texts_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The answer of the model guard: may these vectors be used with this embedder?
pub enum Guard {
    /// No vectors were made yet.
    Fresh,
    Same,
    /// Made by a stand-in (hashing) before the configured model was available: rebuild.
    ReplaceStandIn,
    /// The configured model could not be loaded and a stand-in runs: do not mix them.
    Unusable(String),
    Stale(VectorError),
}

pub fn check(
    conn: &Connection,
    embedder: &dyn Embedder,
    dir: &std::path::Path,
) -> rusqlite::Result<Guard> {
    let Some((model, dim)) = super::stored_model(conn)? else {
        return Ok(Guard::Fresh);
    };
    if model == embedder.id() && dim == embedder.dimension() {
        return Ok(Guard::Same);
    }
    if let Some(reason) = embedder.fallback_reason() {
        return Ok(Guard::Unusable(format!(
            "the vectors were made by {model}, which cannot be loaded now: {reason}"
        )));
    }
    if model == crate::embed::hashing::ID {
        return Ok(Guard::ReplaceStandIn);
    }
    Ok(Guard::Stale(VectorError::Stale {
        dir: dir.to_owned(),
        stored_model: model,
        stored_dim: dim,
        model: embedder.id().to_owned(),
        dim: embedder.dimension(),
    }))
}

/// What one outbox entry turned into.
struct Source {
    ref_id: i64,
    session_pk: i64,
    session_id: String,
    agent: String,
    project: Option<String>,
    prompt_number: i64,
    kind: String,
    ts: Option<i64>,
    text: String,
}

fn raw_kinds(mode: &str) -> &'static [&'static str] {
    match mode {
        "all" => &[
            "user_prompt",
            "assistant_text",
            "thinking",
            "tool_call",
            "tool_result",
            "compaction_summary",
        ],
        "off" => &[],
        _ => &["user_prompt", "assistant_text"],
    }
}

/// Reads the rows `refs` of table `t` as they are now; rows gone or not wanted are left out
/// (as in full-text search: a fork's copied prefix and Codex's echoes are not indexed).
fn load(
    conn: &Connection,
    t: Layer,
    refs: &[i64],
    raw_mode: &str,
) -> rusqlite::Result<Vec<Source>> {
    let marks = vec!["?"; refs.len()].join(",");
    let sql = match t.columns() {
        None => {
            let kinds = raw_kinds(raw_mode);
            if kinds.is_empty() {
                return Ok(Vec::new());
            }
            let kinds: Vec<String> = kinds.iter().map(|k| format!("'{k}'")).collect();
            format!(
                "SELECT m.id, m.session_pk, s.session_id, s.agent, COALESCE(s.project_path, m.cwd),
                        m.prompt_number, m.role, m.ts,
                        COALESCE(m.text, memex_unzstd(m.text_z), m.tool_input, '')
                 FROM messages m JOIN sessions s ON s.id = m.session_pk
                 WHERE m.id IN ({marks}) AND m.kind IN ({})
                   AND m.inherited = 0 AND m.duplicate = 0",
                kinds.join(",")
            )
        }
        Some(c) => format!(
            "SELECT x.id, x.session_pk, s.session_id, s.agent, COALESCE(s.project_path, s.git_root),
                    {prompt}, {kind}, {ts}, {text}
             FROM {table} x JOIN sessions s ON s.id = x.session_pk WHERE x.id IN ({marks})",
            prompt = c.prompt,
            kind = c.vector_kind,
            ts = c.ts,
            text = c.text,
            table = t.table(),
        ),
    };
    let mut st = conn.prepare(&sql)?;
    let rows = st.query_map(params_from_iter(refs), |r| {
        Ok(Source {
            ref_id: r.get(0)?,
            session_pk: r.get(1)?,
            session_id: r.get(2)?,
            agent: r.get(3)?,
            project: r.get(4)?,
            prompt_number: r.get(5)?,
            kind: r.get(6)?,
            ts: r.get(7)?,
            text: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
        })
    })?;
    rows.collect()
}

/// What one batch takes on.
struct Pending {
    /// Outbox entries (id, table, row), oldest first.
    outbox: Vec<(i64, i64, i64)>,
    /// Messages above the mark, in id order.
    fresh: Vec<i64>,
}

/// Up to `batch` entries: the outbox first (updates and deletions of rows already indexed
/// must not wait behind a long import), then new messages.
fn pending(conn: &Connection, batch: usize) -> rusqlite::Result<Pending> {
    let mut st =
        conn.prepare_cached("SELECT id, tbl, ref FROM vector_outbox ORDER BY id LIMIT ?1")?;
    let outbox: Vec<(i64, i64, i64)> = st
        .query_map([batch as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    let room = batch.saturating_sub(outbox.len());
    let fresh = if room == 0 {
        Vec::new()
    } else {
        let mut st = conn.prepare_cached(
            "SELECT id FROM messages WHERE id > (SELECT messages_through FROM vector_progress)
             ORDER BY id LIMIT ?1",
        )?;
        st.query_map([room as i64], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    Ok(Pending { outbox, fresh })
}

/// Ends a batch whose vectors are stored: its outbox entries go and the mark moves past its
/// new messages, in one transaction.
fn finish(c: &mut Connection, last_id: Option<i64>, through: Option<i64>) -> rusqlite::Result<()> {
    let tx = c.transaction()?;
    if let Some(last_id) = last_id {
        tx.execute("DELETE FROM vector_outbox WHERE id <= ?1", [last_id])?;
    }
    if let Some(through) = through {
        // Never above the newest message: if the top ones were deleted meanwhile, their ids go
        // to the next messages stored, which still need vectors.
        tx.execute(
            "UPDATE vector_progress SET messages_through = MAX(messages_through,
               MIN(?1, (SELECT COALESCE(MAX(id), 0) FROM messages)))",
            [through],
        )?;
    }
    tx.commit()
}

/// An embedding model unused for this long is unloaded (searches and new rows load it again,
/// in well under a second).
const MODEL_REST_AFTER: Duration = Duration::from_secs(120);

/// Rows embedded between two rounds of table upkeep during a long run.
const UPKEEP_ROWS: usize = 20_000;

/// Texts per call into the embedder: between two calls a shutdown is noticed.
const EMBED_SLICE: usize = 32;

/// Chunks and embeds the sources. Blocking.
fn embed(
    embedder: &dyn Embedder,
    sources: Vec<Source>,
    max_chunks: usize,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<Vec<Row>, VectorError> {
    let mut pieces: Vec<(usize, i32, String)> = Vec::new();
    for (i, s) in sources.iter().enumerate() {
        for (c, piece) in embedder.chunk(&s.text, max_chunks).into_iter().enumerate() {
            pieces.push((i, c as i32, piece));
        }
    }
    let texts: Vec<String> = pieces.iter().map(|p| p.2.clone()).collect();
    let mut vectors = Vec::with_capacity(texts.len());
    for slice in texts.chunks(EMBED_SLICE) {
        if stop.load(Ordering::Relaxed) {
            return Err(VectorError::Stopped);
        }
        vectors.extend(embedder.embed(slice)?);
    }
    Ok(pieces
        .into_iter()
        .zip(vectors)
        .map(|((i, chunk, _), vector)| {
            let s = &sources[i];
            Row {
                ref_id: s.ref_id,
                chunk,
                session_pk: s.session_pk,
                session_id: s.session_id.clone(),
                agent: s.agent.clone(),
                project: s.project.clone(),
                prompt_number: s.prompt_number,
                kind: s.kind.clone(),
                title: s.text.chars().take(120).collect(),
                ts: s.ts,
                vector,
            }
        })
        .collect())
}

impl Vectors {
    /// Rows waiting: outbox entries, and messages above the mark (meta ones included).
    pub fn backlog(conn: &Connection) -> rusqlite::Result<u64> {
        conn.query_row(
            "SELECT (SELECT COUNT(*) FROM vector_outbox)
                  + (SELECT COUNT(*) FROM messages
                     WHERE id > (SELECT messages_through FROM vector_progress))",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map(|n| n as u64)
    }

    /// Embeds one batch: outbox entries first, then messages above the mark. Returns how many
    /// entries it handled (0: none left).
    pub async fn run_batch(
        self: &Arc<Self>,
        pool: &ReadPool,
        writer: &Writer,
    ) -> Result<usize, VectorError> {
        let batch = self.settings.batch;
        let raw_mode = self.settings.raw.clone();
        let (handled, last_id, through, groups) = {
            let pool = pool.clone();
            tokio::task::spawn_blocking(move || -> Result<_, VectorError> {
                pool.with(|conn| -> Result<_, VectorError> {
                    let work = pending(conn, batch)?;
                    let mut groups = Vec::new();
                    for t in Layer::ALL {
                        let mut refs: Vec<i64> = work
                            .outbox
                            .iter()
                            .filter(|e| e.1 == t.outbox_code())
                            .map(|e| e.2)
                            .collect();
                        if t == Layer::Raw {
                            refs.extend(&work.fresh);
                        }
                        refs.sort_unstable();
                        refs.dedup();
                        if refs.is_empty() {
                            continue;
                        }
                        let sources = load(conn, t, &refs, &raw_mode)?;
                        groups.push((t, refs, sources));
                    }
                    Ok((
                        work.outbox.len() + work.fresh.len(),
                        work.outbox.last().map(|e| e.0),
                        work.fresh.last().copied(),
                        groups,
                    ))
                })?
            })
            .await
            .expect("the outbox read does not panic")?
        };
        if handled == 0 {
            return Ok(0);
        }
        for (t, refs, sources) in groups {
            let this = self.clone();
            let wanted = sources.len();
            let started = Instant::now();
            let rows = tokio::task::spawn_blocking(move || {
                embed(
                    this.embedder.as_ref(),
                    sources,
                    this.settings.max_chunks,
                    &this.stop,
                )
            })
            .await
            .expect("embedding does not panic")?;
            let s = &self.stats;
            s.embed_millis
                .fetch_add(started.elapsed().as_millis() as u64, Ordering::Relaxed);
            s.embedded_texts
                .fetch_add(rows.len() as u64, Ordering::Relaxed);
            s.embedded_rows.fetch_add(wanted as u64, Ordering::Relaxed);
            s.removed_rows
                .fetch_add((refs.len() - wanted) as u64, Ordering::Relaxed);
            self.store.replace(t, &refs, rows).await?;
        }
        writer.run(move |c| finish(c, last_id, through)).await??;
        Ok(handled)
    }

    /// Embeds everything waiting, with upkeep every `UPKEEP_ROWS` rows and at the end;
    /// `progress` hears of every batch.
    pub async fn drain(
        self: &Arc<Self>,
        pool: &ReadPool,
        writer: &Writer,
        progress: &mut dyn FnMut(usize),
    ) -> Result<(), VectorError> {
        let mut since_upkeep = 0;
        loop {
            let n = self.run_batch(pool, writer).await?;
            progress(n);
            since_upkeep += n;
            if n == 0 || since_upkeep >= UPKEEP_ROWS {
                self.maintain().await?;
                since_upkeep = 0;
            }
            if n == 0 {
                return Ok(());
            }
        }
    }

    /// Table upkeep (compaction, the ANN index) for every table.
    pub async fn maintain(&self) -> Result<(), VectorError> {
        for t in Layer::ALL {
            self.store.maintain(t, self.settings.ann_min_rows).await?;
        }
        Ok(())
    }

    pub async fn status(&self, backlog: u64, state: &str) -> VectorStatus {
        let mut rows = std::collections::BTreeMap::new();
        let mut ann = Vec::new();
        for t in Layer::ALL {
            rows.insert(t.name(), self.store.count(t).await.unwrap_or(0));
            if self.store.has_ann(t).await.unwrap_or(false) {
                ann.push(t.name());
            }
        }
        let s = &self.stats;
        let ms = s.embed_millis.load(Ordering::Relaxed);
        let texts = s.embedded_texts.load(Ordering::Relaxed);
        VectorStatus {
            state: state.to_owned(),
            model: self.embedder.id().to_owned(),
            dimension: self.embedder.dimension(),
            warning: self.embedder.fallback_reason().map(str::to_owned),
            backlog,
            rows,
            ann_index: ann,
            disk_bytes: super::disk_bytes(self.store.dir()),
            texts_per_sec: (ms > 0).then(|| texts as f64 * 1000.0 / ms as f64),
            last_error: s
                .last_error
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// Asks the running indexer to rewrite the files that held forgotten rows, once the outbox
    /// (where `forget` put their deletions) is drained, and then to remove the versions that
    /// still hold them ([`READERS_GRACE`] later). The answer comes when nothing forgotten is
    /// left in the folder.
    pub fn request_purge(&self) -> tokio::sync::oneshot::Receiver<PurgeResult> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.purge
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .asked
            .push(tx);
        rx
    }

    /// The purge's next step, once the outbox is empty (so every deletion of the forget that
    /// asked, committed before it asked, is done): rewrite the files now, or remove the old
    /// versions once their readers are done.
    async fn purge_if_ready(&self, pool: &ReadPool) {
        {
            let p = self.purge.lock().unwrap_or_else(|e| e.into_inner());
            if p.asked.is_empty() && p.pruning.is_none() {
                return;
            }
        }
        let pool = pool.clone();
        let drained = tokio::task::spawn_blocking(move || {
            pool.with(|c| {
                c.query_row("SELECT NOT EXISTS (SELECT 1 FROM vector_outbox)", [], |r| {
                    r.get::<_, bool>(0)
                })
            })
        })
        .await;
        if matches!(drained, Ok(Ok(Ok(true)))) {
            self.purge_step().await;
        }
    }

    async fn purge_step(&self) {
        let (asked, due) = {
            let mut p = self.purge.lock().unwrap_or_else(|e| e.into_inner());
            let asked = std::mem::take(&mut p.asked);
            let due = match &p.pruning {
                Some((at, _)) if Instant::now() >= *at => p.pruning.take().map(|(_, w)| w),
                _ => None,
            };
            (asked, due)
        };
        if !asked.is_empty() {
            match self.store.purge().await {
                Ok(()) => {
                    let mut p = self.purge.lock().unwrap_or_else(|e| e.into_inner());
                    let at = Instant::now() + READERS_GRACE;
                    match &mut p.pruning {
                        Some((when, waiters)) => {
                            *when = at;
                            waiters.extend(asked);
                        }
                        None => p.pruning = Some((at, asked)),
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot rewrite the vector files of forgotten rows");
                    let e = Arc::new(e);
                    for w in asked {
                        let _ = w.send(Err(Arc::clone(&e)));
                    }
                }
            }
        }
        if let Some(waiters) = due {
            let res = self.store.prune(READERS_GRACE).await.map_err(|e| {
                tracing::warn!(error = %e, "cannot remove the vector versions of forgotten rows");
                Arc::new(e)
            });
            for w in waiters {
                let _ = w.send(res.clone());
            }
        }
    }

    /// The service component: drains the outbox, then looks again twice a second; upkeep after
    /// a run of work and every few thousand rows during a long one.
    pub async fn run(
        self: Arc<Self>,
        pool: ReadPool,
        writer: Writer,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut since_upkeep = 0usize;
        loop {
            if *shutdown.borrow() {
                break;
            }
            let handled = match self.run_batch(&pool, &writer).await {
                Ok(n) => n,
                Err(VectorError::Stopped) => break,
                Err(e) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "vector indexing failed; retrying in 10 s");
                    *self
                        .stats
                        .last_error
                        .lock()
                        .unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                        _ = shutdown.wait_for(|s| *s) => {}
                    }
                    continue;
                }
            };
            since_upkeep += handled;
            self.purge_if_ready(&pool).await;
            if handled == 0 || since_upkeep >= UPKEEP_ROWS {
                if since_upkeep > 0 {
                    if let Err(e) = self.maintain().await {
                        tracing::warn!(error = %e, "vector table upkeep failed");
                    }
                    since_upkeep = 0;
                    // The model's and LanceDB's working buffers are free again: hand them back.
                    crate::memory::release_free_memory();
                }
                if handled == 0 {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                        _ = shutdown.wait_for(|s| *s) => {}
                    }
                    let now = chrono::Utc::now().timestamp_millis();
                    if now >= self.keep_loaded_until.load(Ordering::Relaxed) {
                        let embedder = self.embedder.clone();
                        let _ =
                            tokio::task::spawn_blocking(move || embedder.rest(MODEL_REST_AFTER))
                                .await;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The hand-off from the archive to the indexer, over a real SQLite file and a real LanceDB
    //! folder, with the feature-hashing embedder.
    use super::*;

    struct Archive {
        _dir: tempfile::TempDir,
        writer: Writer,
        pool: ReadPool,
        v: Arc<Vectors>,
        rt: tokio::runtime::Runtime,
    }

    fn archive() -> Archive {
        let dir = tempfile::tempdir().unwrap();
        let (writer, _handle) = Writer::start(dir.path()).unwrap();
        let pool = ReadPool::new(dir.path());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let embedder: Arc<dyn Embedder> = Arc::new(crate::embed::hashing::Hashing::new(None));
        let store = rt
            .block_on(VectorStore::open(dir.path(), embedder.dimension()))
            .unwrap();
        let settings = VectorSettings {
            batch: 4,
            ..Default::default()
        };
        let v = Arc::new(Vectors {
            store,
            embedder,
            settings,
            stats: Default::default(),
            stop: Default::default(),
            keep_loaded_until: Default::default(),
            purge: Default::default(),
        });
        Archive {
            _dir: dir,
            writer,
            pool,
            v,
            rt,
        }
    }

    impl Archive {
        fn sql<T: Send + 'static>(
            &self,
            f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
        ) -> T {
            self.rt.block_on(self.writer.run(f)).unwrap().unwrap()
        }

        /// Stores `n` user prompts; returns their ids.
        fn add(&self, n: usize, tag: &'static str) -> Vec<i64> {
            self.sql(move |c| {
                c.execute(
                    "INSERT OR IGNORE INTO sessions (agent, session_id, source_path)
                     VALUES ('claude', 's1', '/x')",
                    [],
                )?;
                let mut ids = Vec::new();
                for i in 0..n {
                    c.execute(
                        "INSERT INTO messages (session_pk, message_id, line, seq, role, kind,
                                               prompt_number, text)
                         VALUES (1, ?1, 0, 0, 'user', 'user_prompt', 1, ?2)",
                        [format!("{tag}{i}"), format!("{tag} prompt number {i}")],
                    )?;
                    ids.push(c.last_insert_rowid());
                }
                Ok(ids)
            })
        }

        fn drain(&self) -> usize {
            let mut total = 0;
            loop {
                let n = self
                    .rt
                    .block_on(self.v.run_batch(&self.pool, &self.writer))
                    .unwrap();
                if n == 0 {
                    return total;
                }
                total += n;
            }
        }

        fn vectors(&self) -> usize {
            self.rt.block_on(self.v.store.count(Layer::Raw)).unwrap()
        }

        fn backlog(&self) -> u64 {
            self.sql(|c| Vectors::backlog(c))
        }

        fn mark(&self) -> i64 {
            self.sql(|c| {
                c.query_row("SELECT messages_through FROM vector_progress", [], |r| {
                    r.get(0)
                })
            })
        }
    }

    #[test]
    fn new_messages_are_embedded_once_without_an_outbox_row_each() {
        let a = archive();
        let ids = a.add(10, "alpha");
        let outbox: i64 =
            a.sql(|c| c.query_row("SELECT COUNT(*) FROM vector_outbox", [], |r| r.get(0)));
        assert_eq!(
            outbox, 0,
            "storing a message writes nothing for the indexer"
        );
        assert_eq!(a.backlog(), 10);
        assert_eq!(a.drain(), 10);
        assert_eq!(a.vectors(), 10);
        assert_eq!(a.mark(), *ids.last().unwrap());
        assert_eq!(a.backlog(), 0);

        // A batch done again (a crash between LanceDB and the mark) leaves one copy.
        a.sql(|c| c.execute("UPDATE vector_progress SET messages_through = 0", []));
        assert_eq!(a.drain(), 10);
        assert_eq!(a.vectors(), 10);

        // An edit goes through the outbox, and replaces the message's vector.
        let first = ids[0];
        a.sql(move |c| {
            c.execute(
                "UPDATE messages SET text = 'alpha rewritten' WHERE id = ?1",
                [first],
            )
        });
        assert_eq!(a.backlog(), 1);
        assert_eq!(a.drain(), 1);
        assert_eq!(a.vectors(), 10);
    }

    #[test]
    fn a_message_taking_a_deleted_messages_id_still_gets_its_vector() {
        let a = archive();
        let ids = a.add(6, "beta");
        a.drain();
        assert_eq!(a.vectors(), 6);
        // Forgetting the newest messages frees their ids (no AUTOINCREMENT on messages)...
        let (top, below) = (ids[5], ids[3]);
        a.sql(move |c| {
            c.execute("DELETE FROM messages WHERE id > ?1", [below])?;
            c.execute(
                "INSERT INTO vector_outbox (tbl, ref) SELECT 0, value FROM json_each(?1)",
                [format!("[{},{}]", ids[4], ids[5])],
            )
        });
        assert_eq!(a.mark(), below, "the mark comes down below the freed ids");
        // ...which the next messages take.
        let again = a.add(2, "gamma");
        assert_eq!(again.last(), Some(&top), "SQLite reuses the freed ids");
        a.drain();
        assert_eq!(
            a.vectors(),
            6,
            "the forgotten vectors went, the new ones came"
        );
        let found =
            a.rt.block_on(
                a.v.store.nearest(
                    Layer::Raw,
                    &a.v.embedder
                        .embed(&["gamma prompt number 1".to_owned()])
                        .unwrap()[0],
                    1,
                    None,
                ),
            )
            .unwrap();
        assert_eq!(found[0].ref_id, top);
    }

    #[test]
    fn the_mark_never_passes_messages_deleted_while_a_batch_ran() {
        let a = archive();
        let ids = a.add(3, "delta");
        // A batch reads the three; before it ends, the newest two are deleted.
        let work = a.pool.with(|c| pending(c, 10)).unwrap().unwrap();
        assert_eq!(work.fresh, ids);
        let keep = ids[0];
        a.sql(move |c| c.execute("DELETE FROM messages WHERE id > ?1", [keep]));
        let through = work.fresh.last().copied();
        a.sql(move |c| finish(c, None, through));
        assert_eq!(a.mark(), keep);
        let next = a.add(1, "epsilon");
        assert_eq!(next[0], ids[1], "SQLite reuses the freed id");
        assert_eq!(a.backlog(), 1, "the new message waits for its vector");
    }
}
