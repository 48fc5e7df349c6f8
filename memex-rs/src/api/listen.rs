//! The API's listeners: the owner's Unix socket and the TCP port, each with its connections
//! served by hyper under limits a hostile caller cannot stretch.
//!
//! - **At most [`MAX_CONNECTIONS`] connections at once** per listener; one more is closed as
//!   soon as it is accepted, before anything is read from it.
//! - **Headers within [`HEADER_TIMEOUT`]**: a connection that does not finish sending a
//!   request's headers in time (or sits idle that long between requests) is closed, so
//!   half-sent requests cannot hold the slots. Bodies are read within a deadline too (the
//!   guard, [`super::BODY_TIMEOUT`]).
//! - **The socket admits its owner only**: a connection whose peer is another user is closed
//!   unread (the folder's mode already keeps them out; this holds when it does not).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Semaphore, watch};

/// Connections served at once on one listener: a browser opens at most six to a host, the
/// live pages hold at most [`super::MAX_LIVE_STREAMS`], the CLI and hooks one each.
pub const MAX_CONNECTIONS: usize = 128;

/// How long a client has to send a request's headers, and how long a kept-alive connection
/// may sit idle before its next request. Browsers and the CLI send their headers at once.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Something that hands out connections.
pub trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection, or the error of this accept (logged; the loop goes on).
    fn accept(&mut self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
    /// Whether the connection may be served (the socket: its peer is the owner).
    fn admit(&self, io: &Self::Io) -> bool;
    /// The address of the connection's peer, where it has one: handlers find it as [`Peer`].
    fn peer(&self, _io: &Self::Io) -> Option<std::net::SocketAddr> {
        None
    }
}

/// The address a request came from (TCP only), in the request's extensions.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub std::net::SocketAddr);

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;

    async fn accept(&mut self) -> std::io::Result<Self::Io> {
        let (io, _) = tokio::net::TcpListener::accept(self).await?;
        let _ = io.set_nodelay(true);
        Ok(io)
    }

    fn admit(&self, _: &Self::Io) -> bool {
        true
    }

    fn peer(&self, io: &Self::Io) -> Option<std::net::SocketAddr> {
        io.peer_addr().ok()
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;

    async fn accept(&mut self) -> std::io::Result<Self::Io> {
        Ok(tokio::net::UnixListener::accept(self).await?.0)
    }

    fn admit(&self, io: &Self::Io) -> bool {
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        match io.peer_cred() {
            Ok(c) if c.uid() == me => true,
            Ok(c) => {
                tracing::warn!(
                    uid = c.uid(),
                    "refused a connection to the socket from another user"
                );
                false
            }
            Err(e) => {
                tracing::warn!(error = %e, "refused a connection to the socket: its peer is unknown");
                false
            }
        }
    }
}

/// Resolves once `shutdown` turns true (or its sender is gone).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Serves `app` on `listener` until `shutdown` turns true, then lets the requests in flight
/// finish (each connection closes after its current request).
pub async fn serve(
    mut listener: impl Accept,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
    what: &'static str,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stopped(&mut shutdown) => break,
        };
        while conns.try_join_next().is_some() {}
        let io = match accepted {
            Ok(io) => io,
            Err(e) => {
                // Out of file descriptors and the like: wait a little rather than spin.
                tracing::warn!(error = %e, listener = what, "cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !listener.admit(&io) {
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(
                listener = what,
                "{MAX_CONNECTIONS} connections open: closed a new one"
            );
            continue;
        };
        let service = TowerToHyperService::new(match listener.peer(&io) {
            Some(p) => app.clone().layer(axum::Extension(Peer(p))),
            None => app.clone(),
        });
        let mut stop = shutdown.clone();
        conns.spawn(async move {
            let _slot = slot;
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT);
            let conn = http.serve_connection(TokioIo::new(io), service);
            tokio::pin!(conn);
            let stopping = tokio::select! {
                res = conn.as_mut() => {
                    if let Err(e) = res {
                        tracing::debug!(error = %e, "connection ended");
                    }
                    false
                }
                () = stopped(&mut stop) => true,
            };
            if stopping {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        });
    }
    while conns.join_next().await.is_some() {}
}
