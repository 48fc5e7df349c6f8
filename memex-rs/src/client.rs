//! A client of the running service's HTTP API: the CLI commands that go through `memex serve`
//! and the hook commands use it. Plain HTTP/1.1 on `ureq` without TLS: the hook binary links
//! this and little else (reqwest, which the LLM providers use, brings HTTP/2 and TLS).

use std::time::Duration;

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the service at {addr} did not answer")]
    Unreachable {
        addr: String,
        #[source]
        source: ureq::Error,
    },
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
    /// Whether nothing accepted the connection (no service listening there).
    pub fn is_connect(&self) -> bool {
        match self {
            ClientError::Unreachable { source, .. } => match source {
                ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
                ureq::Error::Io(e) => matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::AddrNotAvailable
                ),
                _ => false,
            },
            _ => false,
        }
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

/// POSTs `body` as JSON to `http://{addr}{path}` (with `token` as a bearer token when set)
/// and returns the JSON answer; an answer other than 2xx is [`ClientError::Refused`] with the
/// code and message of the API's error shape. `timeout` bounds the whole request, `connect` the
/// connection. The token is sent to a non-loopback address only with `[api]
/// allow_remote_token` (the request is plain HTTP).
pub fn post_json(
    addr: &str,
    api: &crate::config::ApiSettings,
    path: &str,
    body: &Value,
    timeout: Duration,
    connect: Duration,
) -> Result<Value, ClientError> {
    send(addr, api, timeout, connect, path, Send::Post(body))
}

/// GETs `http://{addr}{path}` with `query` as its query string (encoded here), as
/// [`post_json`] POSTs.
pub fn get_json(
    addr: &str,
    api: &crate::config::ApiSettings,
    path: &str,
    query: &[(&str, &str)],
    timeout: Duration,
    connect: Duration,
) -> Result<Value, ClientError> {
    send(addr, api, timeout, connect, path, Send::Get(query))
}

/// What a request sends.
enum Send<'a> {
    Post(&'a Value),
    Get(&'a [(&'a str, &'a str)]),
}

fn send(
    addr: &str,
    api: &crate::config::ApiSettings,
    timeout: Duration,
    connect: Duration,
    path: &str,
    what: Send<'_>,
) -> Result<Value, ClientError> {
    let token = api.token.as_str();
    if !token.is_empty() && !api.allow_remote_token && !is_loopback(addr) {
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
    let url = format!("http://{addr}{path}");
    let bearer = (!token.is_empty()).then(|| format!("Bearer {token}"));
    let unreachable = |source| ClientError::Unreachable {
        addr: addr.to_owned(),
        source,
    };
    let mut res = match what {
        Send::Post(body) => {
            let mut req = agent.post(&url);
            if let Some(b) = &bearer {
                req = req.header("Authorization", b);
            }
            req.send_json(body).map_err(unreachable)?
        }
        Send::Get(query) => {
            let mut req = agent.get(&url).query_pairs(query.iter().copied());
            if let Some(b) = &bearer {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_in_clear_only_to_loopback_unless_allowed() {
        let mut api = crate::config::ApiSettings {
            token: "secret-token".into(),
            ..Default::default()
        };
        let body = serde_json::json!({});
        let short = Duration::from_millis(50);
        let err =
            post_json("192.0.2.10:10013", &api, "/api/inject", &body, short, short).unwrap_err();
        assert!(matches!(err, ClientError::TokenInClear { .. }), "{err}");
        let err =
            post_json("memex.lan:10013", &api, "/api/inject", &body, short, short).unwrap_err();
        assert!(matches!(err, ClientError::TokenInClear { .. }), "{err}");
        // Loopback is fine (nothing listens on port 9 here: the refusal is the connection's).
        let err = post_json("127.0.0.1:9", &api, "/x", &body, short, short).unwrap_err();
        assert!(matches!(err, ClientError::Unreachable { .. }), "{err}");
        assert!(err.is_connect(), "{err:?}");
        api.allow_remote_token = true;
        let err = post_json("192.0.2.10:10013", &api, "/x", &body, short, short).unwrap_err();
        assert!(!matches!(err, ClientError::TokenInClear { .. }), "{err}");
        assert!(is_loopback("localhost:1") && is_loopback("[::1]:1"));
    }
}
