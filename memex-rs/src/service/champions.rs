//! Keeps the full-text indexes' champion lists ([`crate::search::champions`]) up to date: once
//! ingest has settled and enough rows came in since the last refresh, the lists are computed on
//! a read connection (the writer keeps writing meanwhile) and saved in one short write.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::layer::Layer;
use crate::search::champions;
use crate::state::Shared;
use crate::store::{ReadPool, Writer};

/// How often the service looks whether a refresh is due (a look is two index lookups per
/// layer).
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// Runs until shutdown; `stop` ends a refresh in progress early.
pub(super) async fn run(
    pool: ReadPool,
    writer: Writer,
    state: Shared,
    stop: Arc<AtomicBool>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(LOOK_EVERY) => {}
            _ = shutdown.wait_for(|s| *s) => break,
        }
        // While files are being ingested the cores are theirs, and the lists would be behind
        // again at once.
        if !state.ingest_settled() {
            continue;
        }
        for l in Layer::ALL {
            if let Err(e) = refresh(&pool, &writer, l, &stop).await {
                tracing::warn!(layer = l.name(), error = %e, "cannot refresh the champion lists");
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum RefreshError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
    #[error("the refresh task ended abnormally")]
    Task(#[from] tokio::task::JoinError),
}

/// Refreshes `l`'s lists if they are due.
async fn refresh(
    pool: &ReadPool,
    writer: &Writer,
    l: Layer,
    stop: &Arc<AtomicBool>,
) -> Result<(), RefreshError> {
    let started = Instant::now();
    let (pool, flag) = (pool.clone(), stop.clone());
    let made = tokio::task::spawn_blocking(move || {
        pool.with(|c| -> rusqlite::Result<_> {
            if !champions::due(c, l)? {
                return Ok(None);
            }
            champions::compute(c, l, &flag).map(Some)
        })
    })
    .await???;
    let Some(made) = made else {
        return Ok(());
    };
    let (words, updated) = (made.words, made.lists.len());
    if !writer.run(move |c| champions::save(c, l, &made)).await?? {
        // A forget or scrub ran meanwhile: the next look makes them from what is left.
        tracing::info!(
            layer = l.name(),
            "champion lists dropped: the archive was wiped meanwhile"
        );
        return Ok(());
    }
    tracing::info!(
        layer = l.name(),
        words,
        updated,
        ms = started.elapsed().as_millis() as u64,
        "champion lists refreshed"
    );
    Ok(())
}
