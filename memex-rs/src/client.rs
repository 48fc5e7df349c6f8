//! A client of the running service: the CLI commands that go through `memex serve` and the
//! hook commands use it. Plain HTTP/1.1 on `ureq` without TLS (the hook binary links this and
//! little else; reqwest, which the LLM providers use, brings HTTP/2 and TLS).
//!
//! It sends nothing to a listener it has not verified to be its owner's service (see
//! [`crate::owner`]): it speaks over the service's Unix socket in the private data folder, a
//! socket its own user created; only when there is none does it use TCP, and there it first asks
//! the listener to prove that it holds the owner's secret, then sends the request with it.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::owner::{self, Secret};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the service at {addr} did not answer")]
    Unreachable {
        addr: String,
        #[source]
        source: ureq::Error,
    },
    #[error("no service is running for this data folder (no socket at {socket}, no listener)")]
    NotRunning { socket: String },
    #[error(
        "the program listening on {addr} did not prove it is your Memex service ({why}); nothing was sent to it"
    )]
    NotOwner { addr: String, why: String },
    #[error("the service answered {status}: {message}")]
    Refused {
        status: u16,
        /// The stable code of the API's error shape (`bad_parameter`, ...).
        code: String,
        message: String,
    },
    #[error("the service's answer is not JSON")]
    NotJson(#[source] ureq::Error),
    #[error(
        "refusing to send the API token in clear to {addr}, which is not a loopback address (set [api] allow_remote_token = true to allow it)"
    )]
    TokenInClear { addr: String },
}

impl ClientError {
    /// Whether no service is there to answer (nothing listening, or nothing of this data folder).
    pub fn is_connect(&self) -> bool {
        match self {
            ClientError::NotRunning { .. } => true,
            ClientError::Unreachable { source, .. } => connect_failed(source),
            _ => false,
        }
    }
}

fn connect_failed(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
        ureq::Error::Io(e) => matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionRefused
                | std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::AddrNotAvailable
                | std::io::ErrorKind::NotFound
        ),
        _ => false,
    }
}

/// The most of an answer read (a search or a session is far smaller).
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// The address a client on this machine reaches a service bound to `bind` at: a service bound
/// to every interface (`0.0.0.0`, `[::]`) is reached on loopback, where its Host check and the
/// token's loopback rule expect it.
pub fn reachable(bind: &str) -> String {
    match bind.parse::<std::net::SocketAddr>() {
        Ok(a) if a.ip().is_unspecified() => {
            let ip = if a.is_ipv4() { "127.0.0.1" } else { "[::1]" };
            format!("{ip}:{}", a.port())
        }
        Ok(a) => a.to_string(),
        Err(_) => bind.to_owned(),
    }
}

/// Whether `addr` (`host:port`) is on this machine's loopback.
fn is_loopback(addr: &str) -> bool {
    if let Ok(a) = addr.parse::<std::net::SocketAddr>() {
        return a.ip().is_loopback();
    }
    let host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    host.eq_ignore_ascii_case("localhost")
}

/// The port of `host:port`.
fn port_of(addr: &str) -> Option<u16> {
    addr.rsplit_once(':')?.1.parse().ok()
}

/// The running service of one data folder, as a client reaches it.
#[derive(Debug, Clone)]
pub struct Service {
    /// The service's socket in the data folder.
    socket: PathBuf,
    /// Where its TCP listener should be (`host:port`), tried when the socket is not there.
    tcp: String,
    /// The owner's secret: the token sent over TCP, and what checks the listener's proof.
    secret: Option<Secret>,
    allow_remote_token: bool,
}

/// What a request sends.
enum Send<'a> {
    Post(&'a Value),
    Get(&'a [(&'a str, &'a str)]),
}

impl Service {
    /// The service of `settings`' data folder: its socket, else TCP at `tcp` (the address its
    /// lock names), else at `[api] bind`.
    pub fn of(settings: &crate::config::Settings, tcp: Option<&str>) -> Service {
        let data_dir = settings.data_dir();
        Service {
            socket: owner::socket_path(&data_dir),
            tcp: reachable(tcp.unwrap_or(&settings.api.bind)),
            secret: owner::load(&data_dir, &settings.api.token),
            allow_remote_token: settings.api.allow_remote_token,
        }
    }

    /// POSTs `body` as JSON to `path` and returns the JSON answer; an answer other than 2xx is
    /// [`ClientError::Refused`] with the code and message of the API's error shape. `timeout`
    /// bounds the whole request, `connect` the connection.
    pub fn post_json(
        &self,
        path: &str,
        body: &Value,
        timeout: Duration,
        connect: Duration,
    ) -> Result<Value, ClientError> {
        self.send(timeout, connect, path, Send::Post(body))
    }

    /// GETs `path` with `query` as its query string (encoded here), as [`Self::post_json`]
    /// POSTs.
    pub fn get_json(
        &self,
        path: &str,
        query: &[(&str, &str)],
        timeout: Duration,
        connect: Duration,
    ) -> Result<Value, ClientError> {
        self.send(timeout, connect, path, Send::Get(query))
    }

    /// What a request goes to, for messages: the socket, or the TCP address.
    pub fn describe(&self) -> String {
        if owner::own_socket(&self.socket) {
            self.socket.display().to_string()
        } else {
            self.tcp.clone()
        }
    }

    fn send(
        &self,
        timeout: Duration,
        connect: Duration,
        path: &str,
        what: Send<'_>,
    ) -> Result<Value, ClientError> {
        if owner::own_socket(&self.socket) {
            let agent = unix::agent(self.socket.clone(), timeout, connect);
            let addr = self.socket.display().to_string();
            match exchange(&agent, &addr, "http://localhost", path, None, &what) {
                // A socket left by a service that was killed: nothing listens there.
                Err(e) if e.is_connect() => {}
                other => return other,
            }
        }
        let addr = self.tcp.as_str();
        let Some(secret) = &self.secret else {
            return Err(ClientError::NotRunning {
                socket: self.socket.display().to_string(),
            });
        };
        if !self.allow_remote_token && !is_loopback(addr) {
            return Err(ClientError::TokenInClear {
                addr: addr.to_owned(),
            });
        }
        // Plain HTTP to the service, never through a proxy the environment names (it would see
        // the token and every query) nor where a redirect points; an error status is an answer
        // to read (the API's error shape), not a failure of the request.
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .timeout_connect(Some(connect))
            .proxy(None)
            .max_redirects(0)
            .http_status_as_error(false)
            .build()
            .into();
        let base = format!("http://{addr}");
        prove(&agent, addr, &base, secret)?;
        let bearer = format!("Bearer {}", secret.as_str());
        exchange(&agent, addr, &base, path, Some(&bearer), &what)
    }
}

/// Asks the listener at `addr` to prove it holds `secret` ([`owner::Secret::proof`]) before
/// anything else is sent to it.
fn prove(agent: &ureq::Agent, addr: &str, base: &str, secret: &Secret) -> Result<(), ClientError> {
    let not_owner = |why: String| ClientError::NotOwner {
        addr: addr.to_owned(),
        why,
    };
    let Some(port) = port_of(addr) else {
        return Err(not_owner("the address has no port".into()));
    };
    let challenge = owner::random_hex(16);
    let answer = exchange(
        agent,
        addr,
        base,
        "/api/proof",
        None,
        &Send::Get(&[("challenge", &challenge)]),
    );
    let v = match answer {
        Ok(v) => v,
        Err(e @ (ClientError::Unreachable { .. } | ClientError::NotRunning { .. })) => {
            return Err(e);
        }
        Err(e) => return Err(not_owner(e.to_string())),
    };
    match v["proof"].as_str() {
        Some(p) if secret.verifies(port, &challenge, p) => Ok(()),
        Some(_) => Err(not_owner(
            "its proof does not match this data folder's secret".into(),
        )),
        None => Err(not_owner("it gave no proof".into())),
    }
}

fn exchange(
    agent: &ureq::Agent,
    addr: &str,
    base: &str,
    path: &str,
    bearer: Option<&str>,
    what: &Send<'_>,
) -> Result<Value, ClientError> {
    let url = format!("{base}{path}");
    let unreachable = |source| ClientError::Unreachable {
        addr: addr.to_owned(),
        source,
    };
    let mut res = match what {
        Send::Post(body) => {
            let mut req = agent.post(&url);
            if let Some(b) = bearer {
                req = req.header("Authorization", b);
            }
            req.send_json(body).map_err(unreachable)?
        }
        Send::Get(query) => {
            let mut req = agent.get(&url).query_pairs(query.iter().copied());
            if let Some(b) = bearer {
                req = req.header("Authorization", b);
            }
            req.call().map_err(unreachable)?
        }
    };
    let status = res.status();
    let v: Value = res
        .body_mut()
        .with_config()
        .limit(MAX_ANSWER_BYTES)
        .read_json()
        .map_err(ClientError::NotJson)?;
    if !status.is_success() {
        return Err(ClientError::Refused {
            status: status.as_u16(),
            code: v["error"]["code"].as_str().unwrap_or("").to_owned(),
            message: v["error"]["message"].as_str().unwrap_or("").to_owned(),
        });
    }
    Ok(v)
}

/// HTTP/1.1 over the service's Unix socket, as a `ureq` transport.
mod unix {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;
    use std::path::PathBuf;
    use std::time::Duration;

    use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
    use ureq::unversioned::transport::{
        Buffers, ConnectionDetails, Connector, LazyBuffers, NextTimeout, Transport,
    };

    /// An agent whose every request goes to the socket at `path`.
    pub(super) fn agent(path: PathBuf, timeout: Duration, connect: Duration) -> ureq::Agent {
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .timeout_connect(Some(connect))
            .proxy(None)
            .max_redirects(0)
            .http_status_as_error(false)
            .build();
        ureq::Agent::with_parts(config, Socket(path), NoLookup)
    }

    /// No name to look up: the socket is the address.
    #[derive(Debug)]
    struct NoLookup;

    impl Resolver for NoLookup {
        fn resolve(
            &self,
            _: &ureq::http::Uri,
            _: &ureq::config::Config,
            _: NextTimeout,
        ) -> Result<ResolvedSocketAddrs, ureq::Error> {
            let mut v = self.empty();
            v.push(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
            Ok(v)
        }
    }

    #[derive(Debug)]
    struct Socket(PathBuf);

    impl Connector<()> for Socket {
        type Out = Stream;

        fn connect(
            &self,
            details: &ConnectionDetails,
            _: Option<()>,
        ) -> Result<Option<Stream>, ureq::Error> {
            let stream = UnixStream::connect(&self.0)?;
            let c = details.config;
            Ok(Some(Stream {
                stream,
                buffers: LazyBuffers::new(c.input_buffer_size(), c.output_buffer_size()),
            }))
        }
    }

    #[derive(Debug)]
    pub(super) struct Stream {
        stream: UnixStream,
        buffers: LazyBuffers,
    }

    /// The time left of `t`, or the timeout error when none is.
    fn left(t: NextTimeout) -> Result<Option<Duration>, ureq::Error> {
        if !t.after.is_not_happening() && t.after.is_zero() {
            return Err(ureq::Error::Timeout(t.reason));
        }
        Ok(t.not_zero().map(|d| *d))
    }

    fn timed_out(e: &std::io::Error) -> bool {
        matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        )
    }

    impl Transport for Stream {
        fn buffers(&mut self) -> &mut dyn Buffers {
            &mut self.buffers
        }

        fn transmit_output(
            &mut self,
            amount: usize,
            timeout: NextTimeout,
        ) -> Result<(), ureq::Error> {
            let t = timeout.for_write();
            self.stream.set_write_timeout(left(t)?)?;
            let out = &self.buffers.output()[..amount];
            match self.stream.write_all(out) {
                Err(e) if timed_out(&e) => Err(ureq::Error::Timeout(t.reason)),
                other => Ok(other?),
            }
        }

        fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
            let t = timeout.for_read();
            self.stream.set_read_timeout(left(t)?)?;
            let input = self.buffers.input_append_buf();
            let n = loop {
                match self.stream.read(input) {
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) if timed_out(&e) => return Err(ureq::Error::Timeout(t.reason)),
                    other => break other?,
                }
            };
            self.buffers.input_appended(n);
            Ok(n > 0)
        }

        fn is_open(&mut self) -> bool {
            // A kept connection is reused only within one command; the service closes idle
            // ones after a few seconds, so a fresh one is always made.
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_in_clear_only_to_loopback_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = crate::config::Settings::default();
        s.data.dir = dir.path().display().to_string();
        s.api.token = "secret-token-of-twenty-four-chars".into();
        let body = serde_json::json!({});
        let short = Duration::from_millis(50);
        for addr in ["192.0.2.10:10013", "memex.lan:10013"] {
            let err = Service::of(&s, Some(addr))
                .post_json("/api/inject", &body, short, short)
                .unwrap_err();
            assert!(matches!(err, ClientError::TokenInClear { .. }), "{err}");
        }
        // Loopback is fine (nothing listens on port 9 here: the refusal is the connection's).
        let err = Service::of(&s, Some("127.0.0.1:9"))
            .post_json("/x", &body, short, short)
            .unwrap_err();
        assert!(matches!(err, ClientError::Unreachable { .. }), "{err}");
        assert!(err.is_connect(), "{err:?}");
        s.api.allow_remote_token = true;
        let err = Service::of(&s, Some("192.0.2.10:10013"))
            .post_json("/x", &body, short, short)
            .unwrap_err();
        assert!(!matches!(err, ClientError::TokenInClear { .. }), "{err}");
        assert!(is_loopback("localhost:1") && is_loopback("[::1]:1"));
    }

    #[test]
    fn without_a_secret_nothing_is_sent_over_tcp() {
        let dir = tempfile::tempdir().unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut s = crate::config::Settings::default();
        s.data.dir = dir.path().display().to_string();
        let err = Service::of(&s, Some(&addr))
            .post_json(
                "/api/inject",
                &serde_json::json!({"prompt": "p"}),
                Duration::from_millis(200),
                Duration::from_millis(200),
            )
            .unwrap_err();
        assert!(matches!(err, ClientError::NotRunning { .. }), "{err}");
        assert!(err.is_connect());
        listener.set_nonblocking(true).unwrap();
        assert!(listener.accept().is_err(), "a connection was made");
    }
}
