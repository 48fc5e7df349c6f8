//! The vector layer: LanceDB tables of embeddings for the raw prompts and answers and for the
//! three compact layers, the guard that never lets vectors of two models meet, and the
//! [`indexer`] that keeps the tables in step with SQLite.
//!
//! SQLite stays the source of truth: a LanceDB row holds the id of the SQLite row it was made
//! from (`ref_id`, plus `chunk` for long texts cut into pieces), the fields the RFC lists and
//! the vector. Search maps hits back through SQLite, which also drops anything stale.

pub mod indexer;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{
    Array, FixedSizeListArray, Float32Array, Int32Array, Int64Array, RecordBatch, StringArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::table::{OptimizeAction, OptimizeOptions};
use lancedb::{DistanceType, Table};
use rusqlite::{Connection, OptionalExtension};
use tokio::sync::Mutex;

use crate::layer::Layer;

#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    #[error("the vector store failed: {0}")]
    Lance(#[from] lancedb::Error),
    #[error("the vector store failed: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error("stopped")]
    Stopped,
    #[error("cannot create {dir}")]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Embed(#[from] crate::embed::EmbedError),
    #[error(
        "the vectors in {dir} were made by {stored_model} ({stored_dim} dimensions), but the configured \
         embedder is {model} ({dim} dimensions); vectors of different models cannot be compared. Run \
         `memex reindex --vectors` to rebuild them, or set [vector] drop_stale_index = true"
    )]
    Stale {
        dir: PathBuf,
        stored_model: String,
        stored_dim: usize,
        model: String,
        dim: usize,
    },
}

/// One vector and what it was made from.
#[derive(Debug, Clone)]
pub struct Row {
    pub ref_id: i64,
    pub chunk: i32,
    pub session_pk: i64,
    pub session_id: String,
    pub agent: String,
    pub project: Option<String>,
    pub prompt_number: i64,
    /// Role (raw), observation type, `talk` or `session`.
    pub kind: String,
    /// A short label: the start of the text, an observation's title, a talk's request.
    pub title: String,
    pub ts: Option<i64>,
    pub vector: Vec<f32>,
}

/// A nearest-neighbour hit: the SQLite row and its cosine distance (0 = same direction).
#[derive(Debug, Clone, Copy)]
pub struct Near {
    pub ref_id: i64,
    pub distance: f32,
}

pub fn dir(data_dir: &Path) -> PathBuf {
    data_dir.join("vectors")
}

/// Removes the vectors of forgotten rows, `gone`, from the folder of `data_dir` where no
/// indexer runs (no service, or one whose vector layer is off), with the files and versions
/// that held them ([`VectorStore::forget`]). `dim`: the stored vectors' dimension (`None`:
/// none were made). Whether there was anything to remove.
pub async fn forget_without_indexer(
    data_dir: &Path,
    dim: Option<usize>,
    gone: &[(i64, i64)],
) -> Result<bool, VectorError> {
    let Some(dim) = dim else { return Ok(false) };
    if gone.is_empty() || !dir(data_dir).is_dir() {
        return Ok(false);
    }
    VectorStore::open(data_dir, dim).await?.forget(gone).await?;
    Ok(true)
}

/// The LanceDB folder and its open tables.
pub struct VectorStore {
    db: lancedb::Connection,
    dir: PathBuf,
    schema: SchemaRef,
    tables: Mutex<[Option<Table>; 4]>,
}

fn schema(dim: usize) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ref_id", DataType::Int64, false),
        Field::new("chunk", DataType::Int32, false),
        Field::new("session_pk", DataType::Int64, false),
        Field::new("session_id", DataType::Utf8, false),
        Field::new("agent", DataType::Utf8, false),
        Field::new("project", DataType::Utf8, true),
        Field::new("prompt_number", DataType::Int64, false),
        Field::new("kind", DataType::Utf8, false),
        Field::new("title", DataType::Utf8, false),
        Field::new("ts", DataType::Int64, true),
        Field::new(
            "vector",
            DataType::FixedSizeList(
                Arc::new(Field::new("item", DataType::Float32, true)),
                dim as i32,
            ),
            false,
        ),
    ]))
}

/// The model that made the stored vectors, from `vector_meta`.
pub fn stored_model(conn: &Connection) -> rusqlite::Result<Option<(String, usize)>> {
    let get = |k: &str| {
        conn.query_row("SELECT value FROM vector_meta WHERE key = ?1", [k], |r| {
            r.get::<_, String>(0)
        })
        .optional()
    };
    Ok(match (get("model")?, get("dimension")?) {
        (Some(m), Some(d)) => Some((m, d.parse().unwrap_or(0))),
        _ => None,
    })
}

/// Records the model that makes the vectors from now on.
pub fn set_stored_model(conn: &Connection, model: &str, dim: usize) -> rusqlite::Result<()> {
    conn.execute(
        "INSERT INTO vector_meta (key, value) VALUES ('model', ?1), ('dimension', ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        rusqlite::params![model, dim.to_string()],
    )?;
    Ok(())
}

/// Queues every row for embedding again (after the tables were dropped).
pub fn requeue_all(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "DELETE FROM vector_outbox;
         UPDATE vector_progress SET messages_through = 0;
         INSERT INTO vector_outbox (tbl, ref) SELECT 1, id FROM observations;
         INSERT INTO vector_outbox (tbl, ref) SELECT 2, id FROM talk_summaries;
         INSERT INTO vector_outbox (tbl, ref) SELECT 3, id FROM session_summaries;",
    )
}

impl VectorStore {
    pub async fn open(data_dir: &Path, dim: usize) -> Result<VectorStore, VectorError> {
        let dir = dir(data_dir);
        std::fs::create_dir_all(&dir).map_err(|source| VectorError::Dir {
            dir: dir.clone(),
            source,
        })?;
        let db = lancedb::connect(&dir.to_string_lossy()).execute().await?;
        Ok(VectorStore {
            db,
            dir,
            schema: schema(dim),
            tables: Mutex::new([None, None, None, None]),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The table, opened once; `None` while it does not exist.
    async fn table(&self, t: Layer) -> Result<Option<Table>, VectorError> {
        let mut tables = self.tables.lock().await;
        if let Some(table) = &tables[t.index()] {
            return Ok(Some(table.clone()));
        }
        match self.db.open_table(t.name()).execute().await {
            Ok(table) => {
                tables[t.index()] = Some(table.clone());
                Ok(Some(table))
            }
            Err(lancedb::Error::TableNotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the tables of `layers` ahead of a search (each is opened once per store); an error
    /// is left for the search to report.
    pub async fn open_tables(&self, layers: &[Layer]) {
        for &l in layers {
            let _ = self.table(l).await;
        }
    }

    async fn table_or_create(&self, t: Layer) -> Result<Table, VectorError> {
        if let Some(table) = self.table(t).await? {
            return Ok(table);
        }
        let table = self
            .db
            .create_empty_table(t.name(), self.schema.clone())
            .execute()
            .await?;
        self.tables.lock().await[t.outbox_code() as usize] = Some(table.clone());
        Ok(table)
    }

    /// Whether the folder holds no table at all.
    pub async fn is_empty(&self) -> Result<bool, VectorError> {
        Ok(self.db.table_names().execute().await?.is_empty())
    }

    /// Drops every table (the folder stays).
    pub async fn drop_all(&self) -> Result<(), VectorError> {
        let mut tables = self.tables.lock().await;
        for t in Layer::ALL {
            tables[t.index()] = None;
            match self.db.drop_table(t.name(), &[]).await {
                Ok(()) | Err(lancedb::Error::TableNotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Deletes the vectors of forgotten rows, `(table code, row id)`, rewrites every file that
    /// held one (a deletion alone only marks the row), and removes the older versions that
    /// still point at those files: nothing forgotten stays in the folder. Only for a process
    /// that holds the archive's lock and no service runs (the service's indexer deletes through
    /// the outbox and then calls [`Self::purge`] and [`Self::prune`]).
    pub async fn forget(&self, gone: &[(i64, i64)]) -> Result<(), VectorError> {
        for t in Layer::ALL {
            let refs: Vec<i64> = gone
                .iter()
                .filter(|(code, _)| *code == t.outbox_code())
                .map(|(_, id)| *id)
                .collect();
            if refs.is_empty() || self.table(t).await?.is_none() {
                continue;
            }
            for chunk in refs.chunks(1000) {
                self.replace(t, chunk, Vec::new()).await?;
            }
        }
        self.purge().await?;
        self.prune(std::time::Duration::ZERO).await
    }

    /// Rewrites every data file that holds a deleted row (a deletion only marks it), in every
    /// table: what was deleted is then only in the older versions, until [`Self::prune`].
    pub async fn purge(&self) -> Result<(), VectorError> {
        for t in Layer::ALL {
            let Some(table) = self.table(t).await? else {
                continue;
            };
            if table.stats().await?.num_deleted_rows.unwrap_or(0) == 0 {
                continue;
            }
            table
                .optimize(OptimizeAction::Compact {
                    options: lancedb::table::CompactionOptions {
                        materialize_deletions: true,
                        materialize_deletions_threshold: 0.0,
                        ..Default::default()
                    },
                    remap_options: None,
                })
                .await?;
        }
        Ok(())
    }

    /// Removes the versions older than `older_than`, with the files only they use. Zero (all but
    /// the newest) only for a process that no reader shares the folder with.
    pub async fn prune(&self, older_than: std::time::Duration) -> Result<(), VectorError> {
        let now = older_than.is_zero();
        let older_than = lancedb::table::Duration::from_std(older_than)
            .unwrap_or_else(|_| lancedb::table::Duration::zero());
        for t in Layer::ALL {
            let Some(table) = self.table(t).await? else {
                continue;
            };
            table
                .optimize(OptimizeAction::Prune {
                    older_than: Some(older_than),
                    delete_unverified: Some(now),
                    error_if_tagged_old_versions: None,
                })
                .await?;
        }
        Ok(())
    }

    /// Replaces the vectors of the SQLite rows `refs` by `rows` (which may be fewer: a row
    /// that is gone or no longer wanted only loses its vectors).
    pub async fn replace(&self, t: Layer, refs: &[i64], rows: Vec<Row>) -> Result<(), VectorError> {
        if refs.is_empty() && rows.is_empty() {
            return Ok(());
        }
        let existing = self.table(t).await?;
        if let Some(table) = &existing
            && !refs.is_empty()
        {
            let list: Vec<String> = refs.iter().map(i64::to_string).collect();
            table
                .delete(format!("ref_id IN ({})", list.join(",")).as_str())
                .await?;
        }
        if rows.is_empty() {
            return Ok(());
        }
        let table = match existing {
            Some(t) => t,
            None => self.table_or_create(t).await?,
        };
        table.add(self.batch(rows)?).execute().await?;
        Ok(())
    }

    fn batch(&self, rows: Vec<Row>) -> Result<RecordBatch, VectorError> {
        let dim = match self.schema.field_with_name("vector")?.data_type() {
            DataType::FixedSizeList(_, d) => *d,
            _ => unreachable!("the vector column is a fixed-size list"),
        };
        let strings = |f: &dyn Fn(&Row) -> Option<&str>| -> Arc<dyn Array> {
            Arc::new(rows.iter().map(f).collect::<StringArray>())
        };
        let values =
            Float32Array::from_iter_values(rows.iter().flat_map(|r| r.vector.iter().copied()));
        let vectors = FixedSizeListArray::try_new(
            Arc::new(Field::new("item", DataType::Float32, true)),
            dim,
            Arc::new(values),
            None,
        )?;
        Ok(RecordBatch::try_new(
            self.schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.ref_id))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.chunk))),
                Arc::new(Int64Array::from_iter_values(
                    rows.iter().map(|r| r.session_pk),
                )),
                strings(&|r| Some(&r.session_id)),
                strings(&|r| Some(&r.agent)),
                strings(&|r| r.project.as_deref()),
                Arc::new(Int64Array::from_iter_values(
                    rows.iter().map(|r| r.prompt_number),
                )),
                strings(&|r| Some(&r.kind)),
                strings(&|r| Some(&r.title)),
                Arc::new(rows.iter().map(|r| r.ts).collect::<Int64Array>()),
                Arc::new(vectors),
            ],
        )?)
    }

    /// The `k` nearest rows of table `t` to `query` (unit length), best first, one per SQLite
    /// row (its best chunk). `filter` is a LanceDB SQL predicate applied before the search.
    pub async fn nearest(
        &self,
        t: Layer,
        query: &[f32],
        k: usize,
        filter: Option<&str>,
    ) -> Result<Vec<Near>, VectorError> {
        let Some(table) = self.table(t).await? else {
            return Ok(Vec::new());
        };
        let mut q = table
            .query()
            .nearest_to(query)?
            .distance_type(DistanceType::Cosine)
            // Chunks of one row compete for places: ask for a few more.
            .limit(k * 2)
            .select(Select::columns(&["ref_id", "_distance"]));
        if let Some(f) = filter {
            q = q.only_if(f);
        }
        let batches: Vec<RecordBatch> = q.execute().await?.try_collect().await?;
        let mut out: Vec<Near> = Vec::new();
        for b in &batches {
            let (Some(refs), Some(dist)) = (
                b.column_by_name("ref_id")
                    .and_then(|c| c.as_any().downcast_ref::<Int64Array>()),
                b.column_by_name("_distance")
                    .and_then(|c| c.as_any().downcast_ref::<Float32Array>()),
            ) else {
                continue;
            };
            for i in 0..b.num_rows() {
                let (ref_id, distance) = (refs.value(i), dist.value(i));
                if !out.iter().any(|n| n.ref_id == ref_id) {
                    out.push(Near { ref_id, distance });
                }
            }
        }
        out.sort_by(|a, b| a.distance.total_cmp(&b.distance));
        out.truncate(k);
        Ok(out)
    }

    /// The stored vectors of rows `refs` of table `t`, each row's chunks in order (rows not
    /// embedded yet are absent): what a team share sends with its rows.
    pub async fn vectors_of(
        &self,
        t: Layer,
        refs: &[i64],
    ) -> Result<std::collections::HashMap<i64, Vec<Vec<f32>>>, VectorError> {
        let mut out: std::collections::HashMap<i64, Vec<(i32, Vec<f32>)>> =
            std::collections::HashMap::new();
        let Some(table) = self.table(t).await? else {
            return Ok(std::collections::HashMap::new());
        };
        for part in refs.chunks(500) {
            let list: Vec<String> = part.iter().map(i64::to_string).collect();
            let batches: Vec<RecordBatch> = table
                .query()
                .only_if(format!("ref_id IN ({})", list.join(", ")))
                .select(Select::columns(&["ref_id", "chunk", "vector"]))
                .execute()
                .await?
                .try_collect()
                .await?;
            for b in &batches {
                let (Some(ids), Some(chunks), Some(vectors)) = (
                    b.column_by_name("ref_id")
                        .and_then(|c| c.as_any().downcast_ref::<Int64Array>()),
                    b.column_by_name("chunk")
                        .and_then(|c| c.as_any().downcast_ref::<Int32Array>()),
                    b.column_by_name("vector")
                        .and_then(|c| c.as_any().downcast_ref::<FixedSizeListArray>()),
                ) else {
                    continue;
                };
                for i in 0..b.num_rows() {
                    let v = vectors.value(i);
                    let Some(v) = v.as_any().downcast_ref::<Float32Array>() else {
                        continue;
                    };
                    out.entry(ids.value(i))
                        .or_default()
                        .push((chunks.value(i), v.values().to_vec()));
                }
            }
        }
        Ok(out
            .into_iter()
            .map(|(id, mut chunks)| {
                chunks.sort_by_key(|c| c.0);
                chunks.dedup_by_key(|c| c.0);
                (id, chunks.into_iter().map(|c| c.1).collect())
            })
            .collect())
    }

    pub async fn count(&self, t: Layer) -> Result<usize, VectorError> {
        Ok(match self.table(t).await? {
            Some(table) => table.count_rows(None).await?,
            None => 0,
        })
    }

    pub async fn has_ann(&self, t: Layer) -> Result<bool, VectorError> {
        Ok(match self.table(t).await? {
            Some(table) => table
                .list_indices()
                .await?
                .iter()
                .any(|i| i.columns.iter().any(|c| c == "vector")),
            None => false,
        })
    }

    /// Upkeep after a run of writes: merges small files, brings the indexes up to date (and
    /// builds the ANN index once the table has `ann_min_rows`), and removes versions older than
    /// a minute (only this process writes; readers hold a version for far less).
    pub async fn maintain(&self, t: Layer, ann_min_rows: usize) -> Result<(), VectorError> {
        let Some(table) = self.table(t).await? else {
            return Ok(());
        };
        table
            .optimize(OptimizeAction::Compact {
                options: Default::default(),
                remap_options: None,
            })
            .await?;
        let indexed: Vec<String> = table
            .list_indices()
            .await?
            .into_iter()
            .flat_map(|i| i.columns)
            .collect();
        // Replacing a row's vectors deletes by `ref_id`: a B-tree keeps that a lookup instead
        // of a scan of the table.
        if !indexed.iter().any(|c| c == "ref_id") {
            table
                .create_index(
                    &["ref_id"],
                    lancedb::index::Index::BTree(Default::default()),
                )
                .execute()
                .await?;
        }
        table
            .optimize(OptimizeAction::Index(OptimizeOptions::default()))
            .await?;
        if !indexed.iter().any(|c| c == "vector") && table.count_rows(None).await? >= ann_min_rows {
            tracing::info!(
                table = t.name(),
                "building the approximate (IVF-PQ) vector index"
            );
            let started = std::time::Instant::now();
            table
                .create_index(
                    &["vector"],
                    lancedb::index::Index::IvfPq(
                        lancedb::index::vector::IvfPqIndexBuilder::default()
                            .distance_type(DistanceType::Cosine),
                    ),
                )
                .execute()
                .await?;
            tracing::info!(
                table = t.name(),
                secs = started.elapsed().as_secs_f32(),
                "vector index built"
            );
        }
        table
            .optimize(OptimizeAction::Prune {
                older_than: Some(lancedb::table::Duration::minutes(1)),
                delete_unverified: Some(true),
                error_if_tagged_old_versions: None,
            })
            .await?;
        Ok(())
    }
}

/// Bytes on disk under `dir`.
pub fn disk_bytes(dir: &Path) -> u64 {
    walk_size(dir)
}

fn walk_size(p: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(p) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .map(|e| match e.file_type() {
            Ok(ft) if ft.is_dir() => walk_size(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// Why there are no vectors when the settings say so.
pub const OFF: &str = "vectors are off ([vector] provider = \"off\")";

/// The vector layer as a reader sees it: usable, or why not.
pub struct ForSearch {
    pub vectors: Option<Arc<indexer::Vectors>>,
    pub off: String,
}

impl ForSearch {
    pub fn off(why: impl Into<String>) -> ForSearch {
        ForSearch {
            vectors: None,
            off: why.into(),
        }
    }

    /// What `memex status` and `/api/stats` show.
    pub async fn status(&self, backlog: u64) -> indexer::VectorStatus {
        match &self.vectors {
            Some(v) => v.status(backlog, "on").await,
            None => indexer::VectorStatus {
                state: "off".into(),
                model: String::new(),
                dimension: 0,
                warning: Some(self.off.clone()),
                backlog,
                rows: Default::default(),
                ann_index: Vec::new(),
                disk_bytes: 0,
                texts_per_sec: None,
                last_error: None,
            },
        }
    }
}

/// Builds the configured embedder and opens the LanceDB folder. Blocking (the model loads);
/// `None` when `[vector] provider = "off"`.
pub async fn open_vectors(
    s: &crate::config::Settings,
) -> Result<Option<indexer::Vectors>, VectorError> {
    if s.vector.provider == crate::config::VECTOR_OFF {
        return Ok(None);
    }
    let (v, c, data_dir) = (s.vector.clone(), s.compact.clone(), s.data_dir());
    let embedder =
        tokio::task::spawn_blocking(move || crate::embed::from_settings(&v, &c, &data_dir))
            .await
            .expect("loading the embedder does not panic")?;
    let store = VectorStore::open(&s.data_dir(), embedder.dimension()).await?;
    Ok(Some(indexer::Vectors {
        store,
        embedder,
        settings: s.vector.clone(),
        stats: Default::default(),
        stop: Default::default(),
        keep_loaded_until: Default::default(),
        purge: Default::default(),
    }))
}

/// Opens the vector layer for reading (CLI search, MCP): the model guard decides, and nothing
/// is written.
pub async fn for_search(s: &crate::config::Settings, conn: &Connection) -> ForSearch {
    let v = match open_vectors(s).await {
        Ok(Some(v)) => v,
        Ok(None) => return ForSearch::off(OFF),
        Err(e) => return ForSearch::off(e.to_string()),
    };
    match indexer::check(conn, v.embedder.as_ref(), v.store.dir()) {
        Ok(indexer::Guard::Fresh | indexer::Guard::Same) => ForSearch {
            vectors: Some(Arc::new(v)),
            off: String::new(),
        },
        Ok(indexer::Guard::ReplaceStandIn) => ForSearch::off(format!(
            "the stored vectors were made by the feature-hashing stand-in; `memex serve` rebuilds them with {} \
             (or run `memex reindex --vectors`)",
            v.embedder.id()
        )),
        Ok(indexer::Guard::Unusable(why)) => ForSearch::off(why),
        Ok(indexer::Guard::Stale(e)) => ForSearch::off(e.to_string()),
        Err(e) => ForSearch::off(format!("cannot read the vector bookkeeping: {e}")),
    }
}

/// Prepares the vector layer for writing (`memex serve`, `memex reindex`): applies the model
/// guard, dropping and re-queuing everything when the settings say so. Refuses stale vectors.
pub async fn prepare(
    v: &indexer::Vectors,
    writer: &crate::store::Writer,
) -> Result<(), VectorError> {
    let embedder = v.embedder.clone();
    let dir = v.store.dir().to_owned();
    let guard = writer
        .run(move |c| indexer::check(c, embedder.as_ref(), &dir))
        .await??;
    let rebuild = match guard {
        // The folder was deleted or lost while SQLite says everything is embedded.
        indexer::Guard::Same => {
            let (pool_dir, empty) = (v.store.dir().to_owned(), v.store.is_empty().await?);
            let archived = writer
                .run(|c| {
                    c.query_row(
                        "SELECT EXISTS (SELECT 1 FROM messages) AND NOT EXISTS (SELECT 1 FROM vector_outbox)
                           AND (SELECT messages_through FROM vector_progress)
                               >= (SELECT MAX(id) FROM messages)",
                        [],
                        |r| r.get::<_, bool>(0),
                    )
                })
                .await??;
            if empty && archived {
                tracing::warn!(dir = %pool_dir.display(), "the vector tables are missing; embedding everything again");
            }
            empty && archived
        }
        indexer::Guard::Fresh => {
            // Tables without bookkeeping (a folder copied in, a crash before the first write)
            // cannot be trusted.
            true
        }
        indexer::Guard::ReplaceStandIn => {
            tracing::info!(
                model = v.embedder.id(),
                "replacing the stand-in vectors with the model's"
            );
            true
        }
        indexer::Guard::Unusable(why) => {
            return Err(VectorError::Embed(crate::embed::EmbedError::Setup(why)));
        }
        indexer::Guard::Stale(e) if v.settings.drop_stale_index => {
            tracing::warn!("{e}; dropping them as [vector] drop_stale_index says");
            true
        }
        indexer::Guard::Stale(e) => return Err(e),
    };
    if rebuild {
        v.store.drop_all().await?;
        let (model, dim) = (v.embedder.id().to_owned(), v.embedder.dimension());
        writer
            .run(move |c| -> rusqlite::Result<()> {
                let tx = c.transaction()?;
                requeue_all(&tx)?;
                set_stored_model(&tx, &model, dim)?;
                tx.commit()
            })
            .await??;
    }
    Ok(())
}
