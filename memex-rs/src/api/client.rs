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
}

/// POSTs `body` as JSON to `http://{addr}{path}` (with `token` as a bearer token when set)
/// and returns the JSON answer; an answer other than 2xx is [`ClientError::Refused`] with the
/// code and message of the API's error shape. `timeout` bounds the whole request, `connect` the
/// connection.
pub fn post_json(
    addr: &str,
    token: &str,
    path: &str,
    body: &Value,
    timeout: Duration,
    connect: Duration,
) -> Result<Value, ClientError> {
    let client = reqwest::blocking::Client::builder()
        .timeout(timeout)
        .connect_timeout(connect)
        .build()
        .map_err(ClientError::Build)?;
    let mut req = client.post(format!("http://{addr}{path}")).json(body);
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
