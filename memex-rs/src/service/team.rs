//! The push to the team archive while `memex serve` runs, when this machine joined a team: a
//! look every [`LOOK`] at whether anything changed (new messages or compact rows, a level set,
//! a forget), a push when it did, and one every `[share] interval_secs` regardless. A push
//! that fails is tried again after a wait that doubles up to 5 minutes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::config::Settings;
use crate::store;

/// How often the archive is looked at for changes to share.
const LOOK: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What changes when there is something new to share: the last row of each layer, the rules,
/// the forgets.
fn fingerprint(conn: &rusqlite::Connection) -> rusqlite::Result<[i64; 7]> {
    conn.query_row(
        "SELECT (SELECT COALESCE(MAX(id), 0) FROM messages),
                (SELECT COALESCE(MAX(id), 0) FROM observations),
                (SELECT COALESCE(MAX(id), 0) FROM talk_summaries),
                (SELECT COALESCE(MAX(id), 0) FROM session_summaries),
                (SELECT COALESCE(MAX(set_at), 0) + count(*) FROM team_rules),
                (SELECT COALESCE(MAX(id), 0) FROM team_forgets),
                (SELECT count(*) FROM sessions)",
        [],
        |r| {
            Ok([
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ])
        },
    )
}

/// Starts the loop on a thread of its own (the push reads SQLite as it goes) when this machine
/// joined a team.
pub(crate) fn spawn(
    data_dir: PathBuf,
    settings: Arc<Settings>,
    mut shutdown: watch::Receiver<bool>,
) -> Option<std::thread::JoinHandle<()>> {
    match crate::team::joined(&data_dir) {
        Ok(Some(_)) => {}
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(error = %e, "the team this machine joined cannot be used; nothing is shared");
            return None;
        }
    }
    let run = move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        let interval = Duration::from_secs(settings.share.interval_secs);
        let config = settings.share.rules();
        let mut last_print = None;
        let mut last_push = Instant::now() - interval;
        let mut backoff = Duration::ZERO;
        let mut retry_at = Instant::now();
        loop {
            let stop = rt.block_on(async {
                tokio::select! {
                    _ = shutdown.wait_for(|s| *s) => true,
                    () = tokio::time::sleep(LOOK) => false,
                }
            });
            if stop {
                return;
            }
            let Ok(conn) = store::open(&data_dir) else {
                continue;
            };
            let print = fingerprint(&conn).ok();
            let due = print != last_print || last_push.elapsed() >= interval;
            if !due || Instant::now() < retry_at {
                continue;
            }
            let Ok(Some((team, token))) = crate::team::joined(&data_dir) else {
                continue;
            };
            match rt.block_on(crate::team::push_once(
                &data_dir, &conn, &team, &token, &config,
            )) {
                Ok(p) => {
                    if p.items + p.removed_items + p.removed_sessions > 0 {
                        tracing::info!(
                            rows = p.items,
                            sessions = p.sessions,
                            with_vectors = p.with_vectors,
                            removed_sessions = p.removed_sessions,
                            removed_rows = p.removed_items,
                            "shared with the team"
                        );
                    }
                    last_print = print;
                    last_push = Instant::now();
                    backoff = Duration::ZERO;
                }
                Err(e) => {
                    backoff = (backoff * 2).clamp(LOOK, MAX_BACKOFF);
                    retry_at = Instant::now() + backoff;
                    tracing::warn!(error = %e, retry_in_secs = backoff.as_secs(), "the push to the team failed");
                }
            }
        }
    };
    std::thread::Builder::new()
        .name("memex-team".into())
        .spawn(run)
        .ok()
}
