//! The worker: the service component that claims, runs and commits jobs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use super::commit::Claimed;
use super::jobs::BATCH;
use super::{
    claim, commit, converge, defer, execute, load_session, now_ms, plan, release, spend_today,
    talk_summaries,
};

use crate::compact::{Engine, Switches};
use crate::layer::Layer;
use crate::store::{ReadPool, Writer};

/// The worker component: claims ready jobs and runs them, `concurrency` at a time.
#[derive(Clone)]
pub struct Compactor {
    pub engine: Arc<Engine>,
    /// The summariser inside Memex alone, for sessions taken from another machine: the
    /// machine a session came from writes its paid summaries, which travel with its sync, so
    /// that no summary is paid for twice; this one fills in with free ones until they come.
    pub heuristic: Arc<Engine>,
    pub writer: Writer,
    pub pool: ReadPool,
    pub switches: Switches,
    pub wake: Arc<Notify>,
    /// A session without a new message for this long is idle.
    pub idle: Duration,
}

impl Compactor {
    pub fn new(engine: Engine, writer: Writer, pool: ReadPool, idle_minutes: u64) -> Compactor {
        let switches = Switches::from(&engine.settings);
        Compactor {
            heuristic: Arc::new(Engine::with_chain(engine.settings.clone(), vec![None])),
            engine: Arc::new(engine),
            writer,
            pool,
            switches,
            wake: Arc::new(Notify::new()),
            idle: Duration::from_secs(idle_minutes * 60),
        }
    }

    /// Epoch ms before which a newest message means the session is idle.
    pub fn idle_before(&self) -> i64 {
        now_ms() - self.idle.as_millis() as i64
    }

    /// Loads today's spend and recovers from a crash; returns (jobs reset, jobs planned).
    pub async fn start(&self) -> Result<(usize, usize), crate::store::StoreError> {
        let sw = self.switches;
        let spend = self.pool.with(spend_today)??;
        self.engine.load_spend(spend);
        let idle_before = self.idle_before();
        let res = self
            .writer
            .run(move |c| converge(c, sw, idle_before))
            .await??;
        self.wake.notify_waiters();
        Ok(res)
    }

    /// Queues a session's work (after an ingest, an idle event, a trigger).
    pub async fn plan(&self, pks: Vec<i64>, final_: bool, reason: &'static str) -> usize {
        let sw = self.switches;
        let res = self
            .writer
            .run(move |c| -> rusqlite::Result<usize> {
                let tx = c.transaction()?;
                let mut n = 0;
                for pk in pks {
                    n += plan(&tx, pk, final_, reason, sw)?;
                }
                tx.commit()?;
                Ok(n)
            })
            .await;
        match res {
            Ok(Ok(n)) => {
                if n > 0 {
                    self.wake.notify_waiters();
                }
                n
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "cannot queue compact jobs");
                0
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot queue compact jobs");
                0
            }
        }
    }

    /// Claims and runs one session's ready jobs; returns how many ran (0: nothing was ready).
    pub async fn step(&self, stop: &AtomicBool) -> Result<usize, crate::store::StoreError> {
        let jobs = self.writer.run(|c| claim(c)).await??;
        if jobs.is_empty() {
            return Ok(0);
        }
        let mut claimed = Claimed::new(self.writer.clone(), jobs.iter().map(|j| j.id).collect());
        let mut ran = 0;
        let pk = jobs[0].session_pk;
        let talk_jobs = jobs
            .iter()
            .filter(|j| j.layer != Layer::Sessions)
            .map(|j| j.prompt_number);
        let range = (
            talk_jobs.clone().min().unwrap_or(0),
            talk_jobs.max().unwrap_or(-1),
        );
        let data = {
            let pool = self.pool.clone();
            tokio::task::spawn_blocking(move || pool.with(|c| load_session(c, pk, range)))
                .await
                .map_err(|_| crate::store::StoreError::WriterGone)???
        };
        let engine = if data.foreign {
            &self.heuristic
        } else {
            &self.engine
        };
        for (i, job) in jobs.iter().enumerate() {
            if stop.load(Ordering::Relaxed) {
                let rest: Vec<i64> = jobs[i..].iter().map(|j| j.id).collect();
                self.writer.run(move |c| release(c, &rest)).await??;
                claimed.released();
                break;
            }
            let pool = self.pool.clone();
            let l2s = move || {
                pool.with(|c| talk_summaries(c, pk)).map_err(|e| match e {
                    crate::store::StoreError::Sqlite(e) => e,
                    other => rusqlite::Error::InvalidParameterName(other.to_string()),
                })?
            };
            let res = execute(engine, job, &data, l2s).await;
            let job = job.clone();
            let max = self.engine.settings.max_attempts;
            ran += 1;
            let id = job.id;
            match res {
                Ok(out) => self.writer.run(move |c| commit(c, &job, &out)).await??,
                Err(e) => {
                    tracing::info!(layer = %job.layer, session = job.session_pk, prompt = job.prompt_number,
                        reason = %e.reason, outage = e.outage, "compact job deferred");
                    self.writer.run(move |c| defer(c, &job, &e, max)).await??
                }
            }
            claimed.done(id);
        }
        drop(data);
        // A large batch leaves its messages' text freed behind it.
        if ran >= BATCH / 2 {
            crate::memory::release_free_memory();
        }
        Ok(ran)
    }

    /// One worker: runs jobs until shutdown, sleeping when there are none ready.
    pub async fn worker(self, stop: Arc<AtomicBool>, mut shutdown: watch::Receiver<bool>) {
        loop {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let ran = tokio::select! {
                r = self.step(&stop) => r,
                _ = shutdown.wait_for(|s| *s) => break,
            };
            match ran {
                Ok(n) if n > 0 => continue,
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "compact worker error"),
            }
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = shutdown.wait_for(|s| *s) => break,
            }
        }
    }

    /// Runs every ready job to the end (the CLI, when no service is running). Jobs that must
    /// wait for a provider stay queued. Returns the jobs run.
    pub async fn drain(
        &self,
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<u64, crate::store::StoreError> {
        let stop = AtomicBool::new(false);
        let mut n = 0u64;
        loop {
            let ran = self.step(&stop).await?;
            if ran == 0 {
                break;
            }
            n += ran as u64;
            progress(n);
        }
        Ok(n)
    }
}
