//! `memex serve`: the long-running service, as components around events.
//!
//! ```text
//!  notify ──▶ watcher actor ──Change──▶ ingester ──batches──▶ writer thread ──▶ SQLite
//!             (debounce)     (bounded)  (parsers)  (bounded)  (one connection)    ▲
//!                                          │ activity (bounded)                   │ reads
//!                                          ▼                                      │
//!                                       tracker ──idle events──▶ (compact queue)  │
//!                                                                  HTTP API ──────┘
//! ```
//!
//! Each component has a start, handles its input, and stops on the shutdown event that SIGINT
//! or SIGTERM becomes. They share state only through one cheap-to-clone [`Shared`] handle.

mod champions;
mod ingester;
pub mod sync;
mod team;
pub mod tracker;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ai_cli_session_collector::AdapterRegistry;
use tokio::sync::{mpsc, watch as tokio_watch};

use crate::config::Settings;
use crate::store::{self, ingest::IngestOptions, lock};
use crate::watch::{self};

pub use crate::state::{SessionIdle, Shared, State};
pub use ingester::MAX_PROJECT_ROOTS;

/// How long a shutdown may take before the process leaves anyway. Everything written is
/// committed transaction by transaction, so leaving early loses nothing.
const SHUTDOWN_BUDGET: Duration = Duration::from_millis(4500);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "refusing to serve the HTTP API on {0} without a token: anyone who can reach it could read the archive"
    )]
    NoToken(SocketAddr),
    #[error("cannot listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Secret(#[from] crate::owner::SecretError),
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error("cannot start the file watcher")]
    Watch(#[from] notify::Error),
    #[error(transparent)]
    Vectors(#[from] crate::vector::VectorError),
}

/// Everything `memex serve` needs, resolved by the CLI.
pub struct ServeConfig {
    pub settings: Settings,
    /// The environment the agents' default roots come from.
    pub env: ai_cli_session_collector::Env,
    pub roots: Vec<(String, PathBuf)>,
    pub bind: SocketAddr,
}

/// Where the service listens, once it does.
pub struct Listening {
    /// The TCP address actually bound (port 0 picks a free one); `None` while another program
    /// holds the configured port (the service takes it when it is free again).
    pub tcp: Option<SocketAddr>,
    /// The owner's socket; `None` when it cannot be made (its path is too long).
    pub socket: Option<PathBuf>,
    /// Makes the one-time sign-in links of the web pages.
    pub signins: Arc<crate::api::signin::SignIns>,
}

/// How often the service tries again to listen on a port another program holds.
const REBIND_EVERY: Duration = Duration::from_secs(2);

/// Runs the service until `shutdown` resolves (SIGINT / SIGTERM in the binary).
/// `on_listen` is told where it listens.
pub async fn run(
    cfg: ServeConfig,
    shutdown: impl std::future::Future<Output = ()>,
    on_listen: impl FnOnce(&Listening),
) -> Result<(), ServeError> {
    let s = &cfg.settings;
    if s.api.token.is_empty() && !cfg.bind.ip().is_loopback() {
        return Err(ServeError::NoToken(cfg.bind));
    }
    let data_dir = s.data_dir();
    let mut data_lock = lock::acquire(&data_dir, "memex serve")?;
    let (writer, writer_thread) = store::Writer::start(&data_dir)?;
    // The vector layer: the model guard first (stale vectors refuse the start), then the
    // indexer in the background. Without a usable model the service runs on full text.
    let vectors = start_vectors(s, &writer).await?;
    let secret = crate::owner::load_or_create(&data_dir, &s.api.token)?;
    let socket = bind_socket(&data_dir);
    let tcp = match tokio::net::TcpListener::bind(cfg.bind).await {
        Ok(l) => Some(l),
        // Another program holds the port (maybe another user's, waiting for the hooks' posts):
        // the archive keeps recording and the owner's socket serves the CLI and the hooks; the
        // port is taken once it is free.
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && socket.is_some() => {
            tracing::warn!(addr = %cfg.bind, "another program listens on this port: the web pages wait for it (the CLI and hooks use the socket)");
            None
        }
        Err(source) => {
            return Err(ServeError::Bind {
                addr: cfg.bind,
                source,
            });
        }
    };
    let tcp_addr = match &tcp {
        Some(l) => Some(l.local_addr().map_err(|source| ServeError::Bind {
            addr: cfg.bind,
            source,
        })?),
        None => None,
    };
    data_lock.describe(&format!(
        "{}{}",
        lock::SERVE_ON,
        tcp_addr.unwrap_or(cfg.bind)
    ));
    let signins = Arc::new(crate::api::signin::SignIns::default());
    if let Some(a) = tcp_addr {
        signins.listening(a);
    }
    on_listen(&Listening {
        tcp: tcp_addr,
        socket: socket.as_ref().map(|(_, p)| p.clone()),
        signins: signins.clone(),
    });

    let state: Shared = Arc::new(State::default());
    let stop = Arc::new(AtomicBool::new(false));
    let (shutdown_tx, shutdown_rx) = tokio_watch::channel(false);
    let registry = Arc::new(AdapterRegistry::new());

    // Watcher → ingester: a handful of changes. Each change already merges every file touched
    // during its debounce window, and the watcher keeps merging while this is full, so a small
    // bound costs nothing and keeps a stalled ingester from growing memory.
    let (change_tx, change_rx) = mpsc::channel::<watch::Change>(8);
    let watcher = watch::start(
        watch::WatchConfig {
            roots: cfg.roots.clone(),
            poll: s
                .watch
                .poll
                .then(|| Duration::from_millis(s.watch.poll_interval_ms)),
            debounce: Duration::from_millis(s.watch.debounce_ms),
        },
        registry.clone(),
        change_tx,
        state.watch.clone(),
    )?;

    // The compact queue: recover jobs a crash left running, plan what was missed while down,
    // then `concurrency` workers.
    let compactor = crate::compact::queue::Compactor::new(
        crate::compact::Engine::new(s.compact.clone()),
        writer.clone(),
        store::ReadPool::new(&data_dir),
        s.watch.idle_minutes,
    );
    match compactor.start().await {
        Ok((reset, planned)) => {
            tracing::info!(reset, planned, chain = ?s.compact.chain(), "compact queue ready")
        }
        Err(e) => tracing::warn!(error = %e, "cannot prepare the compact queue"),
    }
    let workers: Vec<_> = (0..s.compact.concurrency)
        .map(|_| tokio::spawn(compactor.clone().worker(stop.clone(), shutdown_rx.clone())))
        .collect();

    let indexer = vectors.vectors.clone().map(|v| {
        tokio::spawn(v.run(
            store::ReadPool::new(&data_dir),
            writer.clone(),
            shutdown_rx.clone(),
        ))
    });
    let vectors = Arc::new(vectors);

    // Ingester → tracker: session activity, one message per ingest; the tracker only updates a
    // map and queues compact jobs, so it is never the slow side.
    let (activity_tx, activity_rx) = mpsc::channel(64);
    let tracker = tokio::spawn(tracker::run(
        tracker::Tracker::new(s.watch.idle_minutes),
        activity_rx,
        writer.clone(),
        store::ReadPool::new(&data_dir),
        state.clone(),
        Some(compactor.clone()),
        shutdown_rx.clone(),
    ));

    // Common words' best rows over the whole archive, refreshed when ingest is quiet.
    let champions = tokio::spawn(champions::run(
        store::ReadPool::new(&data_dir),
        writer.clone(),
        state.clone(),
        stop.clone(),
        shutdown_rx.clone(),
    ));

    // Project folders learnt while running become roots of the agents that write there.
    let (projects_tx, projects_rx) = std::sync::mpsc::sync_channel(1);
    let projects = ingester::ProjectRoots {
        settings: cfg.settings.clone(),
        env: cfg.env.clone(),
        pool: store::ReadPool::new(&data_dir),
        adder: watcher.adder(),
        known: cfg.roots.iter().cloned().collect(),
        sessions_seen: 0,
        checked: None,
    };
    {
        let registry = registry.clone();
        std::thread::Builder::new()
            .name("memex-projects".into())
            .spawn(move || projects.run(registry, projects_rx))
            .expect("spawn the projects thread");
    }
    let ingester = ingester::Ingester {
        registry,
        writer: writer.clone(),
        data_dir: data_dir.clone(),
        opts: IngestOptions {
            redact: s.store.redact,
            fts_max_bytes: s.store.fts_max_bytes,
            batch_bytes: s.import.batch_bytes,
            threads: s.import_threads(),
        },
        roots: cfg.roots.clone(),
        state: state.clone(),
        stop: stop.clone(),
        activity: activity_tx,
        projects: Some(projects_tx),
    };
    let ingester = std::thread::Builder::new()
        .name("memex-ingest".into())
        .spawn(move || ingester.run(change_rx))
        .expect("spawn the ingester thread");

    // The sync with the user's other machines, when this one syncs.
    let (sync_handle, sync_task) = match sync::configured(s) {
        Some((url, key)) => {
            let (handle, asks) = sync::channel();
            let run = sync::SyncLoop {
                url,
                key,
                interval: Duration::from_secs(s.sync.interval_secs),
                opts: sync::ingest_options(s),
                data_dir: data_dir.clone(),
                pool: store::ReadPool::new(&data_dir),
                writer: writer.clone(),
                state: state.clone(),
                vectors: vectors.clone(),
            };
            (
                Some(handle),
                Some(tokio::spawn(run.run(asks, shutdown_rx.clone()))),
            )
        }
        None => (None, None),
    };

    // The team archive searches at scope team and all read, and the push to it, when this
    // machine joined a team.
    let team_joined = crate::team::Joined::of(&data_dir).map(Arc::new);
    let team_thread = team::spawn(data_dir.clone(), Arc::new(s.clone()), shutdown_rx.clone());

    // One set of reader slots for both listeners: they read the same archive on the same cores.
    let readers = Arc::new(tokio::sync::Semaphore::new(crate::api::reader_slots()));
    let hook_readers = Arc::new(tokio::sync::Semaphore::new(2));
    let live_streams = Arc::new(tokio::sync::Semaphore::new(crate::api::MAX_LIVE_STREAMS));
    let api_state = |channel, bound: SocketAddr| crate::api::ApiState {
        pool: store::ReadPool::new(&data_dir),
        state: state.clone(),
        settings: Arc::new(cfg.settings.clone()),
        policy: Arc::new(crate::api::guard::Policy::new(
            channel,
            bound,
            &cfg.settings.api,
            secret.clone(),
        )),
        signins: signins.clone(),
        readers: readers.clone(),
        hook_readers: hook_readers.clone(),
        compactor: Some(compactor.clone()),
        vectors: vectors.clone(),
        writer: Some(writer.clone()),
        shutdown: Some(shutdown_rx.clone()),
        live_streams: live_streams.clone(),
        sync: sync_handle.clone(),
        team: team_joined.clone(),
    };
    let mut servers = Vec::new();
    let socket_path = socket.as_ref().map(|(_, p)| p.clone());
    if let Some((listener, _)) = socket {
        let app = crate::api::router(api_state(crate::api::guard::Channel::Socket, cfg.bind));
        servers.push(tokio::spawn(crate::api::listen::serve(
            listener,
            app,
            shutdown_rx.clone(),
            "socket",
        )));
    }
    let tcp_app = |bound| crate::api::router(api_state(crate::api::guard::Channel::Tcp, bound));
    match (tcp, tcp_addr) {
        (Some(listener), Some(addr)) => servers.push(tokio::spawn(crate::api::listen::serve(
            listener,
            tcp_app(addr),
            shutdown_rx.clone(),
            "tcp",
        ))),
        _ => {
            let (bind, signins, mut stop) = (cfg.bind, signins.clone(), shutdown_rx.clone());
            let app = tcp_app(cfg.bind);
            let stop_serving = shutdown_rx.clone();
            servers.push(tokio::spawn(async move {
                let listener = loop {
                    tokio::select! {
                        _ = stop.wait_for(|s| *s) => return,
                        () = tokio::time::sleep(REBIND_EVERY) => {}
                    }
                    if let Ok(l) = tokio::net::TcpListener::bind(bind).await {
                        break l;
                    }
                };
                tracing::info!(addr = %bind, "the port is free again: serving the web pages");
                signins.listening(bind);
                crate::api::listen::serve(listener, app, stop_serving, "tcp").await;
            }));
        }
    }
    tracing::info!(addr = ?tcp_addr, socket = ?socket_path, pid = std::process::id(), data_dir = %data_dir.display(), "memex serve started");

    shutdown.await;
    tracing::info!("shutting down: finishing the batch in flight");
    state.set_phase("stopping");
    stop.store(true, Ordering::SeqCst);
    if let Some(v) = &vectors.vectors {
        v.stop.store(true, Ordering::SeqCst);
    }
    let _ = shutdown_tx.send(true);
    let finish = async {
        // The watcher first: no new changes. Then the ingester ends after its batch in flight,
        // the tracker writes its last idle events, the HTTP server answers requests in flight.
        let _ = tokio::task::spawn_blocking(move || {
            watcher.stop();
            let _ = ingester.join();
        })
        .await;
        let _ = tracker.await;
        let _ = champions.await;
        for w in workers {
            let _ = w.await;
        }
        if let Some(i) = indexer {
            let _ = i.await;
        }
        if let Some(t) = sync_task {
            let _ = t.await;
        }
        if let Some(t) = team_thread {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        for server in servers {
            let _ = server.await;
        }
        drop(compactor);
        drop(writer);
        let _ = tokio::task::spawn_blocking(move || writer_thread.join()).await;
    };
    if tokio::time::timeout(SHUTDOWN_BUDGET, finish).await.is_err() {
        tracing::warn!("shutdown took too long; leaving with every committed batch in place");
    } else {
        tracing::info!("stopped");
    }
    // Clients find no socket (rather than one nothing answers on) once the service is gone.
    if let Some(p) = &socket_path {
        let _ = std::fs::remove_file(p);
    }
    drop(data_lock);
    Ok(())
}

/// The owner's socket in the data folder (a socket a killed service left is replaced); `None`
/// when it cannot be made, said in the log: the CLI and hooks then use TCP with the proof.
fn bind_socket(data_dir: &std::path::Path) -> Option<(tokio::net::UnixListener, PathBuf)> {
    use std::os::unix::fs::FileTypeExt;
    let path = crate::owner::socket_path(data_dir);
    if !crate::owner::socket_fits(&path) {
        tracing::warn!(socket = %path.display(), "the data folder's path is too long for a Unix socket: clients use TCP");
        return None;
    }
    // This process holds the data folder's lock, so a socket there is a dead service's.
    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(&path);
    }
    match tokio::net::UnixListener::bind(&path) {
        Ok(l) => {
            use std::os::unix::fs::PermissionsExt;
            // Private like every file of the folder (connecting needs write access to it).
            let _ = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600));
            Some((l, path))
        }
        Err(e) => {
            tracing::warn!(socket = %path.display(), error = %e, "cannot make the service's socket: clients use TCP");
            None
        }
    }
}

/// Opens the vector layer for `memex serve`. Stale vectors (another model) stop the start; a
/// missing model or a broken vector folder only turn semantic search off, loudly: the archive
/// must keep recording either way.
async fn start_vectors(
    s: &Settings,
    writer: &store::Writer,
) -> Result<crate::vector::ForSearch, ServeError> {
    use crate::vector::{ForSearch, VectorError};
    let v = match crate::vector::open_vectors(s).await {
        Ok(Some(v)) => v,
        Ok(None) => {
            return Ok(ForSearch::off(crate::vector::OFF));
        }
        Err(e) => {
            tracing::warn!(error = %e, "semantic search is off");
            return Ok(ForSearch::off(e.to_string()));
        }
    };
    match crate::vector::prepare(&v, writer).await {
        Ok(()) => {
            tracing::info!(
                model = v.embedder.id(),
                dimension = v.embedder.dimension(),
                "vector layer ready"
            );
            Ok(ForSearch {
                vectors: Some(Arc::new(v)),
                off: String::new(),
            })
        }
        Err(e @ VectorError::Stale { .. }) => Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "semantic search is off");
            Ok(ForSearch::off(e.to_string()))
        }
    }
}
