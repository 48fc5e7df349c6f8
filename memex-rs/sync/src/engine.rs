//! Push and pull: this archive's own series out to the target, every other machine's in.
//!
//! Push reads the archive's messages past its mark (`memex_store::sync::next_payload`), seals
//! each payload as the next batch of its series, stores it, and only then notes it. A run that
//! stops between storing and noting is healed by the next one, which finds batches of its own
//! on the target past its note and reads their marks back. Pull takes each other host's
//! batches after the last one handled, in order; each is applied (or, when it does not open,
//! recorded and skipped) in one transaction with the note that it was handled, so a pull that
//! stops anywhere resumes at the first batch not handled.

use std::collections::BTreeMap;

use memex_store::ingest::IngestOptions;
use memex_store::sync::{self as archive, Marks, Payload, Pulled};
use memex_store::{ReadPool, Writer};
use serde::Serialize;

use crate::key::{KeyId, SyncKey};
use crate::seal::{self, Place};
use crate::target::{Target, TargetError};

/// About this many bytes of text and records go into one batch (before compression).
pub const BATCH_BUDGET: usize = 4 << 20;
/// Batches fetched from the target at a time.
const FETCH: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error("{0} holds no Memex sync archive yet: run `memex sync setup` on your first machine")]
    NoArchive(String),
    #[error(
        "this machine's key (id {ours}) is not the one {target} was set up with (id {theirs}): \
         join with the key file made by `memex sync setup`"
    )]
    WrongKey {
        target: String,
        ours: KeyId,
        theirs: KeyId,
    },
    /// Another run of this machine pushed the same batch at the same time.
    #[error("another sync of this machine stored batch {0} first; the next sync goes on from it")]
    Raced(u64),
    #[error(
        "batch {seq} of this machine on the target does not open ({why}); it cannot be pushed past"
    )]
    OwnBatch { seq: u64, why: String },
    #[error(
        "this archive synced with archive {pinned} (key {pinned_key}) at {target}, which now \
         holds archive {found} (key {found_key}); nothing was sent or taken"
    )]
    Repinned {
        target: String,
        pinned: String,
        pinned_key: String,
        found: String,
        found_key: KeyId,
    },
    #[error(
        "batch {seq} would be {bytes} bytes sealed, more than a target takes ({}); a message \
         that large cannot be synced",
        seal::MAX_SEALED
    )]
    TooLarge { seq: u64, bytes: usize },
    #[error(transparent)]
    Store(#[from] memex_store::StoreError),
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
}

/// What a push sent.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PushReport {
    pub batches: u64,
    pub messages: u64,
    /// Sessions and messages forgotten here, sent so that the other machines forget them too.
    pub forgets: u64,
    /// Summaries and observations a model wrote here (rows), sent so that no machine pays for
    /// them again.
    #[serde(default)]
    pub summaries: u64,
    /// Bytes stored on the target (sealed).
    pub bytes: u64,
    /// The last batch of this machine's series.
    pub seq: u64,
}

/// What a pull took.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PullReport {
    pub batches: u64,
    pub messages: u64,
    pub sessions: u64,
    /// Messages removed because the machine that sent them forgot them.
    pub forgotten: u64,
    /// Summaries and observations written by the sender's model, stored here.
    #[serde(default)]
    pub summaries: u64,
    /// The rows whose vectors must go (as `memex forget` reports them).
    #[serde(skip)]
    pub gone: Vec<(i64, i64)>,
    /// Batches that did not open or apply: `host`, `seq`, why. Skipped; the rest went on, and
    /// each is tried again at the next pull.
    pub failed: Vec<(String, u64, String)>,
    /// Hosts whose batches could not be read from the target this time, and why.
    pub unreadable: Vec<(String, String)>,
    /// Messages of agents this build does not read (kept out, counted).
    pub skipped: u64,
}

/// What a sync in progress reports, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A push is about to send this many messages (the archive's unsent ones).
    PushStarts { messages: u64 },
    /// A batch of this many messages was stored.
    Pushed { messages: u64 },
    /// A pull is about to handle this many batches, all hosts together.
    PullStarts { batches: u64 },
    /// One batch was handled (applied, skipped or found handled).
    Pulled,
}

/// Told of each [`Step`].
pub type OnStep = std::sync::Arc<dyn Fn(Step) + Send + Sync>;

/// One archive's sync with one target.
pub struct Engine<T> {
    target: T,
    key: SyncKey,
    archive: String,
    host: String,
    agents: Vec<&'static str>,
    opts: IngestOptions,
    on_step: Option<OnStep>,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Runs a read on the archive off the async runtime.
async fn read<R: Send + 'static>(
    pool: &ReadPool,
    f: impl FnOnce(&rusqlite::Connection) -> rusqlite::Result<R> + Send + 'static,
) -> Result<R, SyncError> {
    let pool = pool.clone();
    Ok(tokio::task::spawn_blocking(move || pool.with(f))
        .await
        .expect("an archive read panicked")??)
}

impl<T: Target> Engine<T> {
    /// The sync of the archive behind `writer` with the archive `target` holds,
    /// under `key`: the archive gets its host id the first time, and pins the target's archive
    /// and key id, so that a target that later holds another archive is refused. `agents`:
    /// the agent names this build reads; `opts`: how pulled messages are ingested.
    pub async fn open(
        target: T,
        key: SyncKey,
        writer: &Writer,
        agents: Vec<&'static str>,
        opts: IngestOptions,
    ) -> Result<Engine<T>, SyncError> {
        let info = target
            .archive()
            .await?
            .ok_or_else(|| SyncError::NoArchive(target.describe()))?;
        if info.key_id != key.id() {
            return Err(SyncError::WrongKey {
                target: target.describe(),
                ours: key.id(),
                theirs: info.key_id,
            });
        }
        let host = writer
            .run(|c| {
                let host = archive::host_id(c, crate::new_id)?;
                archive::set_name(c, crate::machine_name().as_deref())?;
                Ok::<_, rusqlite::Error>(host)
            })
            .await??;
        let (a, k) = (info.archive.clone(), info.key_id.to_string());
        if let Some((pinned, pinned_key)) = writer.run(move |c| archive::pin(c, &a, &k)).await?? {
            return Err(SyncError::Repinned {
                target: target.describe(),
                pinned,
                pinned_key,
                found: info.archive,
                found_key: info.key_id,
            });
        }
        Ok(Engine {
            target,
            key,
            archive: info.archive,
            host,
            agents,
            opts,
            on_step: None,
        })
    }

    /// Reports each step of the syncs to come to `f`.
    pub fn on_step(&mut self, f: OnStep) {
        self.on_step = Some(f);
    }

    fn step(&self, s: Step) {
        if let Some(f) = &self.on_step {
            f(s);
        }
    }

    /// This archive's host id.
    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn target(&self) -> &T {
        &self.target
    }

    fn place<'a>(&'a self, host: &'a str, seq: u64) -> Place<'a> {
        Place {
            archive: &self.archive,
            host,
            seq,
        }
    }

    /// Opens a batch and reads its payload; why not, as text.
    fn payload(&self, host: &str, seq: u64, sealed: &[u8]) -> Result<Payload, String> {
        let plain =
            seal::open(&self.key, self.place(host, seq), sealed).map_err(|e| e.to_string())?;
        serde_json::from_slice(&plain).map_err(|e| format!("its content cannot be read: {e}"))
    }

    /// The marks a batch of this machine's series carries (none for "before the first").
    async fn mark_of(&self, seq: u64) -> Result<Marks, SyncError> {
        if seq == 0 {
            return Ok(Marks::default());
        }
        let got = self.target.get(&self.host, seq - 1, 1).await?;
        match got.first() {
            Some((s, bytes)) if *s == seq => self
                .payload(&self.host, seq, bytes)
                .map(|p| p.marks())
                .map_err(|why| SyncError::OwnBatch { seq, why }),
            _ => Err(SyncError::OwnBatch {
                seq,
                why: "the target does not return it".into(),
            }),
        }
    }

    /// Sends every message of this archive not sent yet.
    pub async fn push(&self, pool: &ReadPool, writer: &Writer) -> Result<PushReport, SyncError> {
        let (mut seq, mut through) = read(pool, archive::pushed).await?;
        let head = self
            .target
            .heads()
            .await?
            .get(&self.host)
            .copied()
            .unwrap_or(0);
        if head < seq {
            // The target lost the end of this series (restored from an older backup): send
            // again from the last batch it holds.
            let t = self.mark_of(head).await?;
            writer
                .run(move |c| archive::reset_pushed(c, head, t))
                .await??;
            tracing::warn!(
                head,
                noted = seq,
                "the sync target lost batches of this machine; sending them again"
            );
            (seq, through) = (head, t);
        }
        // Batches of ours the target holds past our note: an earlier run stored them and
        // stopped before noting them. Their marks say how far they reached.
        while seq < head {
            let got = self.target.get(&self.host, seq, FETCH).await?;
            if got.is_empty() {
                break;
            }
            for (s, bytes) in got {
                if s != seq + 1 {
                    break;
                }
                let p = self
                    .payload(&self.host, s, &bytes)
                    .map_err(|why| SyncError::OwnBatch { seq: s, why })?;
                let t = p.marks();
                writer
                    .run(move |c| archive::set_pushed(c, s, t, now_ms()))
                    .await??;
                (seq, through) = (s, through.max(t));
            }
        }
        let mut report = PushReport {
            seq,
            ..PushReport::default()
        };
        if self.on_step.is_some() {
            let unsent = read(pool, |c| archive::state(c).map(|s| s.unsent)).await?;
            self.step(Step::PushStarts { messages: unsent });
        }
        loop {
            let from = through;
            let Some(p) = read(pool, move |c| archive::next_payload(c, from, BATCH_BUDGET)).await?
            else {
                break;
            };
            let next = seq + 1;
            let messages: u64 = p.sources.iter().map(|s| s.messages.len() as u64).sum();
            let forgets = p.forgets.len() as u64;
            let summaries = p.compact.iter().map(|c| c.rows.count()).sum::<u64>();
            let t = p.marks();
            let (key, archive, host) = (self.key.clone(), self.archive.clone(), self.host.clone());
            let sealed = tokio::task::spawn_blocking(move || {
                let json = serde_json::to_vec(&p).expect("a payload serializes");
                seal::seal(
                    &key,
                    Place {
                        archive: &archive,
                        host: &host,
                        seq: next,
                    },
                    &json,
                )
            })
            .await
            .expect("sealing a batch panicked");
            if sealed.len() > seal::MAX_SEALED {
                return Err(SyncError::TooLarge {
                    seq: next,
                    bytes: sealed.len(),
                });
            }
            report.bytes += sealed.len() as u64;
            match self.target.put(&self.host, next, sealed).await {
                Ok(()) => {}
                Err(TargetError::Taken { .. }) => return Err(SyncError::Raced(next)),
                Err(e) => return Err(e.into()),
            }
            writer
                .run(move |c| archive::set_pushed(c, next, t, now_ms()))
                .await??;
            (seq, through) = (next, t);
            report.batches += 1;
            report.messages += messages;
            self.step(Step::Pushed { messages });
            report.forgets += forgets;
            report.summaries += summaries;
            report.seq = seq;
        }
        Ok(report)
    }

    /// Opens and applies batch `seq` of `host` (or records why it did not open).
    async fn take(
        &self,
        writer: &Writer,
        host: &str,
        seq: u64,
        bytes: Vec<u8>,
        report: &mut PullReport,
    ) -> Result<(), SyncError> {
        let (key, archive, h) = (self.key.clone(), self.archive.clone(), host.to_owned());
        let payload = tokio::task::spawn_blocking(move || {
            let plain = seal::open(
                &key,
                Place {
                    archive: &archive,
                    host: &h,
                    seq,
                },
                &bytes,
            )
            .map_err(|e| e.to_string())?;
            serde_json::from_slice::<Payload>(&plain)
                .map_err(|e| format!("its content cannot be read: {e}"))
        })
        .await
        .expect("opening a batch panicked");
        let (h, agents, opts) = (host.to_owned(), self.agents.clone(), self.opts.clone());
        let outcome = writer
            .run(move |c| archive::take_batch(c, &h, seq, payload, &agents, &opts, now_ms()))
            .await??;
        self.step(Step::Pulled);
        match outcome {
            Pulled::Applied(a) => {
                report.batches += 1;
                report.messages += a.messages;
                report.sessions += a.sessions;
                report.skipped += a.skipped;
                report.forgotten += a.forgotten;
                report.summaries += a.summaries;
                report.gone.extend(a.gone);
            }
            Pulled::Failed(why) => {
                tracing::warn!(%host, seq, %why, "a sync batch was skipped");
                report.failed.push((host.to_owned(), seq, why));
            }
            Pulled::Seen => {}
        }
        Ok(())
    }

    /// One host's batches after the last handled, and its failed ones again.
    async fn pull_host(
        &self,
        pool: &ReadPool,
        writer: &Writer,
        host: &str,
        head: u64,
        report: &mut PullReport,
    ) -> Result<(), SyncError> {
        let h = host.to_owned();
        for seq in read(pool, move |c| archive::failures(c, &h)).await? {
            if let Some((s, bytes)) = self.target.get(host, seq - 1, 1).await?.into_iter().next()
                && s == seq
            {
                self.take(writer, host, seq, bytes, report).await?;
            }
        }
        loop {
            let h = host.to_owned();
            let applied = read(pool, move |c| archive::applied_seq(c, &h)).await?;
            if applied >= head {
                return Ok(());
            }
            let got = self.target.get(host, applied, FETCH).await?;
            let mut progressed = false;
            for (want, (seq, bytes)) in (applied + 1..).zip(got) {
                if seq != want {
                    break;
                }
                self.take(writer, host, seq, bytes, report).await?;
                progressed = true;
            }
            if !progressed {
                // The next batch is still on its way (a folder being carried).
                return Ok(());
            }
        }
    }

    /// Takes every other machine's batches not handled yet. A host whose batches cannot be
    /// read this time is reported and left for the next pull; the others go on.
    pub async fn pull(&self, pool: &ReadPool, writer: &Writer) -> Result<PullReport, SyncError> {
        let mut report = PullReport::default();
        let heads: BTreeMap<String, u64> = self.target.heads().await?;
        if self.on_step.is_some() {
            let mut behind = 0;
            for (host, head) in &heads {
                if *host != self.host {
                    let h = host.clone();
                    behind += head
                        .saturating_sub(read(pool, move |c| archive::applied_seq(c, &h)).await?);
                }
            }
            self.step(Step::PullStarts { batches: behind });
        }
        for (host, head) in heads {
            if host == self.host {
                continue;
            }
            match self.pull_host(pool, writer, &host, head, &mut report).await {
                Ok(()) => {}
                Err(SyncError::Target(e)) => {
                    tracing::warn!(%host, error = %e, "cannot read a host's sync batches");
                    report.unreadable.push((host, e.to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use ai_cli_session_collector::AdapterRegistry;
    use memex_store::ingest::{discover, import};

    use super::*;
    use crate::folder::Folder;
    use crate::target::{ArchiveInfo, LAYOUT};

    fn opts() -> IngestOptions {
        IngestOptions {
            redact: true,
            fts_max_bytes: 1 << 20,
            batch_bytes: 1 << 20,
            threads: 1,
        }
    }

    fn fixtures() -> PathBuf {
        std::env::var_os("MEMEX_FIXTURES").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
            PathBuf::from,
        )
    }

    /// A machine: its archive, writer, read pool and host id.
    struct Machine {
        _dir: tempfile::TempDir,
        writer: Writer,
        pool: ReadPool,
        host: String,
    }

    impl Machine {
        fn new(roots: &[(&str, &str)]) -> Machine {
            let dir = tempfile::tempdir().unwrap();
            let data = dir.path().to_path_buf();
            let (writer, _handle) = Writer::start(&data).unwrap();
            if !roots.is_empty() {
                let registry = Arc::new(AdapterRegistry::new());
                let roots: Vec<(String, PathBuf)> = roots
                    .iter()
                    .map(|(a, p)| (a.to_string(), fixtures().join(p)))
                    .collect();
                let jobs = discover(&registry, &roots);
                assert!(!jobs.is_empty());
                import(
                    &writer,
                    &data,
                    registry,
                    jobs,
                    &opts(),
                    &AtomicBool::new(false),
                    &|_| {},
                )
                .unwrap();
            }
            let host = writer
                .call(|c| archive::host_id(c, crate::new_id))
                .unwrap()
                .unwrap();
            Machine {
                pool: ReadPool::new(&data),
                _dir: dir,
                writer,
                host,
            }
        }

        async fn engine(&self, folder: &Path, key: &SyncKey) -> Engine<Folder> {
            self.engine_with(Folder::new(folder), key).await
        }

        async fn engine_with<T: Target>(&self, target: T, key: &SyncKey) -> Engine<T> {
            let agents = AdapterRegistry::new().names();
            let e = Engine::open(target, key.clone(), &self.writer, agents, opts())
                .await
                .unwrap();
            assert_eq!(e.host(), self.host);
            e
        }

        /// Every message: (agent, session, message id, text, active).
        fn messages(&self) -> Vec<(String, String, String, String, bool)> {
            self.pool
                .with(|c| {
                    c.prepare(
                        "SELECT s.agent, s.session_id, m.message_id,
                                COALESCE(m.text, memex_unzstd(m.text_z)), m.active
                         FROM messages m JOIN sessions s ON s.id = m.session_pk ORDER BY 1, 2, 3",
                    )
                    .unwrap()
                    .query_map([], |r| {
                        Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                    })
                    .unwrap()
                    .map(Result::unwrap)
                    .collect()
                })
                .unwrap()
        }
    }

    /// Fails naming the ids that differ (the texts are long).
    fn same(got: &[Message], want: &[Message], who: &str) {
        let id = |m: &Message| format!("{}/{}/{}", m.0, m.1, m.2);
        let extra: Vec<String> = got.iter().filter(|m| !want.contains(m)).map(id).collect();
        let missing: Vec<String> = want.iter().filter(|m| !got.contains(m)).map(id).collect();
        assert!(
            extra.is_empty() && missing.is_empty(),
            "{who}: {} extra {:?}, {} missing {:?}",
            extra.len(),
            &extra[..extra.len().min(5)],
            missing.len(),
            &missing[..missing.len().min(5)]
        );
    }

    type Message = (String, String, String, String, bool);

    /// `target` prepared for a new archive under `key`.
    async fn prepared<T: Target>(target: &T, key: &SyncKey) {
        target
            .prepare(&ArchiveInfo {
                archive: crate::new_id(),
                key_id: key.id(),
                layout: LAYOUT,
            })
            .await
            .unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_machines_converge_and_a_bad_batch_is_skipped() {
        let folder = tempfile::tempdir().unwrap();
        let key = SyncKey::generate();
        prepared(&Folder::new(folder.path()), &key).await;
        let a = Machine::new(&[("claude", "claude/projects")]);
        let b = Machine::new(&[("codex", "codex/handwritten/sessions")]);
        let c = Machine::new(&[]);
        let (ea, eb, ec) = (
            a.engine(folder.path(), &key).await,
            b.engine(folder.path(), &key).await,
            c.engine(folder.path(), &key).await,
        );
        let (na, nb) = (a.messages().len(), b.messages().len());
        let pa = ea.push(&a.pool, &a.writer).await.unwrap();
        assert!(pa.batches >= 1 && pa.messages as usize == na, "{pa:?}");
        eb.push(&b.pool, &b.writer).await.unwrap();
        // Nothing new: nothing sent.
        assert_eq!(ea.push(&a.pool, &a.writer).await.unwrap().batches, 0);
        for (m, e) in [(&a, &ea), (&b, &eb), (&c, &ec)] {
            let r = e.pull(&m.pool, &m.writer).await.unwrap();
            assert!(r.failed.is_empty(), "{r:?}");
        }
        let all = c.messages();
        assert_eq!(all.len(), na + nb);
        assert_eq!(a.messages(), all);
        assert_eq!(b.messages(), all);
        // Pulled messages are not pushed back.
        assert_eq!(ec.push(&c.pool, &c.writer).await.unwrap().batches, 0);

        // A batch flipped on the target: reported for that batch, the next one still applies.
        let a2 = Machine::new(&[("gemini", "gemini/handwritten/gemini-home/tmp")]);
        let ea2 = a2.engine(folder.path(), &key).await;
        ea2.push(&a2.pool, &a2.writer).await.unwrap();
        let file = folder
            .path()
            .join("hosts")
            .join(&a2.host)
            .join(format!("{:020}.mxb", 1));
        let good = std::fs::read(&file).unwrap();
        let mut bytes = good.clone();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, &bytes).unwrap();
        let before = c.messages().len();
        let r = ec.pull(&c.pool, &c.writer).await.unwrap();
        assert_eq!(r.failed.len(), 1, "{r:?}");
        assert!(r.failed[0].2.contains("does not verify"), "{r:?}");
        assert_eq!(c.messages().len(), before, "nothing stored from it");
        let recorded = |m: &Machine| -> i64 {
            m.pool
                .with(|x| x.query_row("SELECT COUNT(*) FROM sync_failures", [], |r| r.get(0)))
                .unwrap()
                .unwrap()
        };
        assert_eq!(recorded(&c), 1);
        // Tried again at each pull; once the batch is whole again (a carrier finished it) it
        // applies and its record goes.
        assert_eq!(ec.pull(&c.pool, &c.writer).await.unwrap().failed.len(), 1);
        std::fs::remove_file(&file).unwrap();
        std::fs::write(&file, &good).unwrap();
        let r = ec.pull(&c.pool, &c.writer).await.unwrap();
        assert!(r.failed.is_empty() && r.messages > 0, "{r:?}");
        assert_eq!(recorded(&c), 0);
        assert_eq!(c.messages(), {
            let mut all = all.clone();
            all.extend(a2.messages());
            all.sort();
            all
        });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn what_one_machine_forgets_every_machine_forgets_and_nothing_brings_back() {
        use memex_store::forget::{Selector, forget};
        let folder = tempfile::tempdir().unwrap();
        let key = SyncKey::generate();
        prepared(&Folder::new(folder.path()), &key).await;
        let a = Machine::new(&[("claude", "claude/projects")]);
        let b = Machine::new(&[("codex", "codex/handwritten/sessions")]);
        let c = Machine::new(&[]);
        let engines = [
            (&a, a.engine(folder.path(), &key).await),
            (&b, b.engine(folder.path(), &key).await),
            (&c, c.engine(folder.path(), &key).await),
        ];
        let engines = &engines;
        let round = || async move {
            let mut forgotten = 0;
            for (m, e) in engines {
                e.push(&m.pool, &m.writer).await.unwrap();
            }
            for (m, e) in engines {
                let r = e.pull(&m.pool, &m.writer).await.unwrap();
                assert!(r.failed.is_empty(), "{r:?}");
                forgotten += r.forgotten;
            }
            forgotten
        };
        round().await;
        let all = c.messages();
        assert_eq!((a.messages(), b.messages()), (all.clone(), all.clone()));

        // On A, a session B archived, whole; on B, the messages of A that hold a text.
        let codex = all.iter().find(|m| m.0 == "codex").unwrap().1.clone();
        let sel = Selector::Session(codex.clone());
        let r = a
            .writer
            .call(move |x| forget(x, &sel, false))
            .unwrap()
            .unwrap();
        assert!(r.sessions >= 1 && r.messages > 0, "{r:?}");
        let claude_text = all
            .iter()
            .find(|m| m.0 == "claude" && m.3.len() > 40)
            .unwrap()
            .3
            .clone();
        let needle: String = claude_text.chars().take(24).collect();
        let sel = Selector::Match(needle.clone());
        let r = b
            .writer
            .call(move |x| forget(x, &sel, false))
            .unwrap()
            .unwrap();
        assert!(r.messages > 0, "{r:?}");
        // What is left is what each machine kept of its own forget (a forgotten session takes
        // the copies its forks began with too).
        let (left_a, left_b) = (a.messages(), b.messages());
        assert!(left_a.iter().all(|m| m.1 != codex));
        assert!(left_b.iter().all(|m| !m.3.contains(&needle)));
        let kept: Vec<_> = left_a
            .iter()
            .filter(|m| left_b.contains(m))
            .cloned()
            .collect();
        assert!(kept.len() < left_a.len() && kept.len() < left_b.len() && !kept.is_empty());

        // One round: each machine sends what it forgot and forgets what the others did.
        let forgotten = round().await;
        assert!(forgotten > 0);
        for m in [&a, &b, &c] {
            same(&m.messages(), &kept, &m.host);
        }
        // Forgetting what another machine forgot is not sent on again.
        for (m, e) in engines {
            let p = e.push(&m.pool, &m.writer).await.unwrap();
            assert_eq!((p.batches, p.forgets), (0, 0), "{}: {p:?}", m.host);
        }

        // Not from an old batch: a new machine takes every series from the start.
        let d = Machine::new(&[]);
        let ed = d.engine(folder.path(), &key).await;
        let r = ed.pull(&d.pool, &d.writer).await.unwrap();
        assert!(r.failed.is_empty() && r.forgotten > 0, "{r:?}");
        same(&d.messages(), &kept, "d");

        // Not from the machine that archived it: B imports its files again, and pushes.
        import_root(&b, "codex", &fixtures().join("codex/handwritten/sessions"));
        same(&b.messages(), &kept, "b");
        round().await;
        for m in [&a, &b, &c] {
            same(&m.messages(), &kept, &m.host);
        }
    }

    /// Copies a folder of the fixtures (files only, made writable).
    fn copy_tree(from: &Path, to: &Path) {
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            let dest = to.join(e.file_name());
            if e.path().is_dir() {
                std::fs::create_dir_all(&dest).unwrap();
                copy_tree(&e.path(), &dest);
            } else {
                std::fs::write(&dest, std::fs::read(e.path()).unwrap()).unwrap();
            }
        }
    }

    fn import_root(m: &Machine, agent: &str, root: &Path) {
        let registry = Arc::new(AdapterRegistry::new());
        let jobs = discover(&registry, &[(agent.to_owned(), root.to_path_buf())]);
        import(
            &m.writer,
            m._dir.path(),
            registry,
            jobs,
            &opts(),
            &AtomicBool::new(false),
            &|_| {},
        )
        .unwrap();
    }

    /// An agent rewrites a message already sent (Gemini keeps a session as one JSON file it
    /// writes again): the change travels, and the other machine's copy is updated, not doubled.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_message_rewritten_after_it_was_sent_travels_again() {
        let folder = tempfile::tempdir().unwrap();
        let key = SyncKey::generate();
        prepared(&Folder::new(folder.path()), &key).await;
        let root = tempfile::tempdir().unwrap();
        copy_tree(
            &fixtures().join("gemini/handwritten/gemini-home/tmp"),
            root.path(),
        );
        let (a, b) = (Machine::new(&[]), Machine::new(&[]));
        import_root(&a, "gemini", root.path());
        let (ea, eb) = (
            a.engine(folder.path(), &key).await,
            b.engine(folder.path(), &key).await,
        );
        ea.push(&a.pool, &a.writer).await.unwrap();
        eb.pull(&b.pool, &b.writer).await.unwrap();
        let before = b.messages();
        same(&before, &a.messages(), "b");
        let old = "I'll run the test suite to see the failure.";
        assert!(before.iter().any(|m| m.3 == old));

        let file = root
            .path()
            .join("254cb6c43af8df29db159b576f51396662bd28293277c6acd5b51d78fcb88194/chats")
            .join("session-2025-11-02T14-05-7d3c2a10.json");
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains(old));
        std::fs::write(
            &file,
            text.replace(old, "I'll run only the date tests first."),
        )
        .unwrap();
        import_root(&a, "gemini", root.path());
        assert_eq!(a.messages().len(), before.len());
        let state = a.pool.with(archive::state).unwrap().unwrap();
        assert_eq!(state.unsent, 1, "the rewritten message waits");

        let p = ea.push(&a.pool, &a.writer).await.unwrap();
        assert_eq!((p.batches, p.messages), (1, 1), "{p:?}");
        eb.pull(&b.pool, &b.writer).await.unwrap();
        let after = b.messages();
        same(&after, &a.messages(), "b");
        assert_eq!(after.len(), before.len(), "updated, not added");
        assert!(after.iter().all(|m| m.3 != old));
        assert!(
            after
                .iter()
                .any(|m| m.3 == "I'll run only the date tests first.")
        );
        // Sent once: the next push has nothing, and what B applied is not sent back.
        assert_eq!(ea.push(&a.pool, &a.writer).await.unwrap().batches, 0);
        assert_eq!(eb.push(&b.pool, &b.writer).await.unwrap().batches, 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_push_that_stopped_before_noting_is_healed_not_repeated() {
        let folder = tempfile::tempdir().unwrap();
        let key = SyncKey::generate();
        prepared(&Folder::new(folder.path()), &key).await;
        let a = Machine::new(&[("claude", "claude/projects")]);
        let ea = a.engine(folder.path(), &key).await;
        let first = ea.push(&a.pool, &a.writer).await.unwrap();
        // As if the process had died after storing its batches and before noting them.
        a.writer
            .call(|c| {
                c.execute(
                    "UPDATE sync_self SET pushed_seq = 0, pushed_through = 0",
                    [],
                )
            })
            .unwrap()
            .unwrap();
        let again = ea.push(&a.pool, &a.writer).await.unwrap();
        assert_eq!((again.batches, again.seq), (0, first.seq), "{again:?}");
        let heads = Folder::new(folder.path()).heads().await.unwrap();
        assert_eq!(heads.get(&a.host), Some(&first.seq));
        // The target lost the end of the series (restored from an older copy): what it lost is
        // sent again, under the same numbers.
        let dir = folder.path().join("hosts").join(&a.host);
        std::fs::remove_file(dir.join(format!("{:020}.mxb", first.seq))).unwrap();
        let resent = ea.push(&a.pool, &a.writer).await.unwrap();
        assert_eq!(resent.seq, first.seq, "{resent:?}");
        assert!(resent.messages > 0);
        let b = Machine::new(&[]);
        let eb = b.engine(folder.path(), &key).await;
        eb.pull(&b.pool, &b.writer).await.unwrap();
        assert_eq!(b.messages(), a.messages());
        // A machine with another key is told so before anything moves.
        let other = SyncKey::generate();
        let e = Engine::open(Folder::new(folder.path()), other, &a.writer, vec![], opts())
            .await
            .err()
            .unwrap();
        assert!(matches!(e, SyncError::WrongKey { .. }), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn machines_converge_through_postgres_which_learns_no_word_of_them() {
        let mut pg = crate::pg_server::PgServer::start();
        let key = SyncKey::generate();
        let url = pg.url();
        let target = || crate::postgres::Postgres::new(&url).unwrap();
        prepared(&target(), &key).await;
        let a = Machine::new(&[("claude", "claude/projects")]);
        let b = Machine::new(&[("codex", "codex/handwritten/sessions")]);
        let (na, nb) = (a.messages().len(), b.messages().len());
        let ea = a.engine_with(target(), &key).await;
        let eb = b.engine_with(target(), &key).await;
        ea.push(&a.pool, &a.writer).await.unwrap();
        eb.push(&b.pool, &b.writer).await.unwrap();
        ea.pull(&a.pool, &a.writer).await.unwrap();
        eb.pull(&b.pool, &b.writer).await.unwrap();
        assert_eq!(a.messages().len(), na + nb);
        assert_eq!(a.messages(), b.messages());

        // The rows of every table of the database: no word of the messages, no project path.
        let dump = pg.dump();
        assert!(
            dump.contains("memex_sync_batches"),
            "the dump holds the tables"
        );
        let mut words: Vec<String> = a
            .messages()
            .iter()
            .flat_map(|m| {
                m.3.split(|c: char| !c.is_alphanumeric())
                    .filter(|w| w.len() >= 9 && w.chars().all(|c| c.is_ascii_alphabetic()))
                    .map(str::to_lowercase)
                    .collect::<Vec<_>>()
            })
            .collect();
        words.sort();
        words.dedup();
        assert!(words.len() > 50, "{}", words.len());
        let lower = dump.to_lowercase();
        let seen: Vec<&String> = words
            .iter()
            .filter(|w| lower.contains(w.as_str()))
            .collect();
        assert!(seen.is_empty(), "the database holds {seen:?}");
        let projects: Vec<String> = a
            .pool
            .with(|c| {
                c.prepare(
                    "SELECT DISTINCT project_path FROM sessions WHERE project_path IS NOT NULL",
                )
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect()
            })
            .unwrap();
        assert!(!projects.is_empty());
        for p in &projects {
            assert!(!dump.contains(p.as_str()), "the database holds {p}");
        }

        // The server goes away in the middle: a clear error; back, the next sync completes.
        let c = Machine::new(&[("gemini", "gemini/handwritten/gemini-home/tmp")]);
        let ec = c.engine_with(target(), &key).await;
        pg.down();
        let e = ec.push(&c.pool, &c.writer).await.unwrap_err();
        assert!(
            matches!(e, SyncError::Target(TargetError::Unreachable { .. })),
            "{e}"
        );
        pg.up();
        let pc = ec.push(&c.pool, &c.writer).await.unwrap();
        assert!(pc.batches >= 1, "{pc:?}");
        assert_eq!(
            ea.pull(&a.pool, &a.writer).await.unwrap().messages,
            pc.messages
        );
        assert_eq!(a.messages().len(), na + nb + c.messages().len());
    }
}
