//! A client of the running service's HTTP API: the CLI commands that go through `memex serve`
//! and the hook commands use it.

use std::time::Duration;

use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("the service at {addr} did not answer")]
    Unreachable {
        addr: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the service answered {status}: {message}")]
    Refused {
        status: reqwest::StatusCode,
        /// The stable code of the API's error shape (`bad_parameter`, ...).
        code: String,
        message: String,
    },
    #[error("the service's answer is not JSON")]
    NotJson(#[source] reqwest::Error),
    #[error("cannot build the HTTP client")]
    Build(#[source] reqwest::Error),
    #[error(
        "refusing to send the API token in clear to {addr}, which is not a loopback address (set [api] allow_remote_token = true to allow it)"
    )]
    TokenInClear { addr: String },
}

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
    send(addr, api, timeout, connect, |c| {
        c.post(format!("http://{addr}{path}")).json(body)
    })
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
    send(addr, api, timeout, connect, |c| {
        c.get(format!("http://{addr}{path}")).query(query)
    })
}

fn send(
    addr: &str,
    api: &crate::config::ApiSettings,
    timeout: Duration,
    connect: Duration,
    request: impl FnOnce(&reqwest::blocking::Client) -> reqwest::blocking::RequestBuilder,
) -> Result<Value, ClientError> {
    let token = api.token.as_str();
    if !token.is_empty() && !api.allow_remote_token && !is_loopback(addr) {
        return Err(ClientError::TokenInClear {
            addr: addr.to_owned(),
        });
    }
    // Plain HTTP to the service, never through a proxy the environment names (it would see
    // the token and every query) nor where a redirect points; no TLS, so no root certificates
    // to load (a tenth of a hook's or a search's time went to reading them).
    let client = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .connect_timeout(connect)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .tls_built_in_root_certs(false)
        .build()
        .map_err(ClientError::Build)?;
    let mut req = request(&client);
    if !token.is_empty() {
        req = req.bearer_auth(token);
    }
    let res = req.send().map_err(|source| ClientError::Unreachable {
        addr: addr.to_owned(),
        source,
    })?;
    let status = res.status();
    let v: Value = res.json().map_err(ClientError::NotJson)?;
    if !status.is_success() {
        return Err(ClientError::Refused {
            status,
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
        api.allow_remote_token = true;
        let err = post_json("192.0.2.10:10013", &api, "/x", &body, short, short).unwrap_err();
        assert!(!matches!(err, ClientError::TokenInClear { .. }), "{err}");
        assert!(is_loopback("localhost:1") && is_loopback("[::1]:1"));
    }
}
