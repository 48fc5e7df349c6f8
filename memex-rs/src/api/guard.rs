//! Who may talk to the API: the checks every request passes before a handler runs.
//!
//! On the owner's Unix socket (see [`crate::owner`]) only the content type and the body's
//! size and time are checked: no one else can open it, and no browser can reach it. On TCP the
//! API listens on loopback, where every user of the machine and every web page in the user's
//! browser can reach it too:
//! - **Host.** A page whose name re-resolves to 127.0.0.1 (DNS rebinding) is same-origin for
//!   the browser, but its requests carry its own name in `Host`. Only the bound address's names
//!   (`127.0.0.1:PORT`, `localhost:PORT`, `[::1]:PORT`, an IP literal when bound to every
//!   interface) and `[api] allowed_hosts` are served.
//! - **Origin.** Browsers send `Origin` with every cross-origin POST (and `Sec-Fetch-Site` with
//!   every request): a request from another origin is refused unless `[api] cors_origins`
//!   names it; only those get CORS headers.
//! - **The owner's secret.** Every request needs `Authorization: Bearer <secret>`, or, for
//!   reads, a browser session started with it or with a one-time link ([`super::signin`]).
//!   Open without it: the sign-in page and form, the static assets, and the service's proof
//!   (`/api/proof`, which tells a client it talks to its owner's service).
//! - **Content type.** A body must be `application/json`, which no page can send cross-origin
//!   without a preflight that this server does not grant; `text/plain` "simple requests" that
//!   need no preflight are refused before their body is read.

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};

use super::ApiError;
use crate::owner::Secret;

/// Which listener a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The Unix socket in the private data folder: its owner only.
    Socket,
    /// The TCP port: anyone who can reach it.
    Tcp,
}

/// What the checks need to know: the listener, the address actually bound and the user's
/// allowances.
#[derive(Debug, Clone)]
pub struct Policy {
    pub channel: Channel,
    pub bound: SocketAddr,
    /// Extra `Host` values, lower case; `*` accepts any (only allowed with a configured token).
    pub allowed_hosts: Vec<String>,
    /// Origins given CORS access, lower case, without a trailing slash.
    pub cors_origins: Vec<String>,
    /// The owner's secret: the token TCP callers send, and the key of the service's proof.
    pub secret: Secret,
}

impl Policy {
    pub fn new(
        channel: Channel,
        bound: SocketAddr,
        api: &crate::config::ApiSettings,
        secret: Secret,
    ) -> Policy {
        let norm = |v: &Vec<String>| -> Vec<String> {
            v.iter()
                .map(|s| s.trim().trim_end_matches('/').to_ascii_lowercase())
                .collect()
        };
        Policy {
            channel,
            bound,
            allowed_hosts: norm(&api.allowed_hosts),
            cors_origins: norm(&api.cors_origins),
            secret,
        }
    }

    /// Whether `host` (a `Host` header value, or the host part of an origin) names this
    /// service.
    pub fn host_allowed(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        if self.allowed_hosts.iter().any(|h| h == "*") {
            return true;
        }
        let Some((name, port)) = split_host(&host) else {
            return false;
        };
        let port_ok = match port {
            Some(p) => p == self.bound.port(),
            None => self.bound.port() == 80,
        };
        let extra = self.allowed_hosts.iter().any(|h| match split_host(h) {
            Some((n, Some(p))) => n == name && Some(p) == port,
            Some((n, None)) => n == name && port_ok,
            None => false,
        });
        if extra {
            return true;
        }
        if !port_ok {
            return false;
        }
        let bound = self.bound.ip();
        if name == "localhost" {
            return bound.is_loopback() || bound.is_unspecified();
        }
        let ip: Option<IpAddr> = name
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .unwrap_or(name)
            .parse()
            .ok();
        // An IP literal cannot be re-resolved by an attacker's DNS, so it is safe to serve when
        // it is an address this listener answers on.
        match ip {
            Some(ip) if bound.is_unspecified() => !ip.is_unspecified(),
            Some(ip) => ip == bound || ip.is_loopback() && bound.is_loopback(),
            None => false,
        }
    }

    /// The `Origin` header's verdict: `Ok(None)` for no origin or the service's own, `Ok(Some)`
    /// for an origin that gets CORS headers, `Err` for any other.
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<Option<HeaderValue>, ApiError> {
        let origin = match headers.get(header::ORIGIN) {
            None => None,
            Some(v) => Some(v.to_str().map_err(|_| refuse_origin("(not text)"))?),
        };
        let site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .map(str::to_ascii_lowercase);
        let Some(origin) = origin else {
            // A browser that sends no Origin (a GET from an <img>, a form, a link) still says
            // where the request comes from.
            if matches!(site.as_deref(), Some("cross-site" | "same-site")) {
                return Err(refuse_origin("(a cross-site request without Origin)"));
            }
            return Ok(None);
        };
        let norm = origin.trim().trim_end_matches('/').to_ascii_lowercase();
        if self.cors_origins.contains(&norm) {
            return HeaderValue::from_str(origin.trim())
                .map(Some)
                .map_err(|_| refuse_origin(origin));
        }
        if let Some(host) = norm.strip_prefix("http://")
            && self.host_allowed(host)
        {
            return Ok(None);
        }
        Err(refuse_origin(origin))
    }
}

/// Splits `name[:port]` / `[v6][:port]`; `None` when it is not a host.
fn split_host(h: &str) -> Option<(&str, Option<u16>)> {
    if h.is_empty() || h.contains(['/', '@', ' ', '?', '#']) {
        return None;
    }
    let (name, port) = if let Some(rest) = h.strip_prefix('[') {
        let end = rest.find(']')?;
        let name = &h[..end + 2];
        match &rest[end + 1..] {
            "" => (name, None),
            p => (name, Some(p.strip_prefix(':')?)),
        }
    } else {
        match h.rsplit_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (h, None),
        }
    };
    let name = name.trim_end_matches('.');
    if name.is_empty() || name.contains(':') && !name.starts_with('[') {
        return None;
    }
    match port {
        None => Some((name, None)),
        Some(p) => Some((name, Some(p.parse().ok()?))),
    }
}

fn refuse_origin(origin: &str) -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        code: "origin_not_allowed",
        message: format!(
            "requests from the web origin {origin} are refused; list it in [api] cors_origins to allow it"
        ),
    }
}

/// The `Host` check, with the error that names the value refused. A request in absolute form
/// (`GET http://name/…`) must name the service there too.
pub fn check_host(
    policy: &Policy,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
) -> Result<(), ApiError> {
    if let Some(a) = uri.authority()
        && !policy.host_allowed(a.as_str())
    {
        return Err(ApiError {
            status: StatusCode::MISDIRECTED_REQUEST,
            code: "host_not_allowed",
            message: format!("the request names `{a}`, which is not this service"),
        });
    }
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next().map(|v| v.to_str());
    if hosts.next().is_some() {
        return Err(ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message: "the request has more than one Host header".into(),
        });
    }
    let refused = |what: String| ApiError {
        status: StatusCode::MISDIRECTED_REQUEST,
        code: "host_not_allowed",
        message: format!(
            "{what}: this service answers only as {} (or a name listed in [api] allowed_hosts)",
            own_names(policy.bound)
        ),
    };
    match host {
        None => Err(refused("the request has no Host header".into())),
        Some(Err(_)) => Err(refused("the Host header is not text".into())),
        Some(Ok(h)) if policy.host_allowed(h) => Ok(()),
        Some(Ok(h)) => Err(refused(format!("Host `{}` is not this service", h.trim()))),
    }
}

fn own_names(bound: SocketAddr) -> String {
    let port = bound.port();
    if bound.ip().is_loopback() || bound.ip().is_unspecified() {
        format!("127.0.0.1:{port}, localhost:{port} or [::1]:{port}")
    } else {
        bound.to_string()
    }
}

/// A request with a body (or a method that takes one) must declare `application/json`.
pub fn check_content_type(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let has_body = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0")
        || headers.contains_key(header::TRANSFER_ENCODING);
    if !has_body && !matches!(*method, Method::POST | Method::PUT | Method::PATCH) {
        return Ok(());
    }
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = ct.split(';').next().unwrap_or("").trim();
    if media.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    Err(ApiError {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        code: "unsupported_media_type",
        message: format!(
            "{} requests must carry `Content-Type: application/json`{}",
            method,
            if ct.is_empty() {
                String::new()
            } else {
                format!(", got `{ct}`")
            }
        ),
    })
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Headers that let an allowed origin read the answer.
pub fn cors_headers(h: &mut HeaderMap, origin: HeaderValue) {
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.append(header::VARY, HeaderValue::from_static("Origin"));
}

/// The answer to a CORS preflight from an allowed origin.
pub fn preflight(origin: HeaderValue) -> axum::response::Response {
    let mut res = axum::response::Response::new(axum::body::Body::empty());
    *res.status_mut() = StatusCode::NO_CONTENT;
    let h = res.headers_mut();
    cors_headers(h, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET, POST"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("authorization, content-type"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(bound: &str, hosts: &[&str], origins: &[&str]) -> Policy {
        let api = crate::config::ApiSettings {
            allowed_hosts: hosts.iter().map(|s| s.to_string()).collect(),
            cors_origins: origins.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        Policy::new(
            Channel::Tcp,
            bound.parse().unwrap(),
            &api,
            Secret::new("t".repeat(32)),
        )
    }

    #[test]
    fn only_the_bound_names_are_served() {
        let p = policy("127.0.0.1:10013", &[], &[]);
        for ok in [
            "127.0.0.1:10013",
            "localhost:10013",
            "LOCALHOST:10013",
            "localhost.:10013",
            "[::1]:10013",
            "127.0.0.2:10013",
        ] {
            assert!(p.host_allowed(ok), "{ok}");
        }
        for bad in [
            "evil.example:10013",
            "evil.example",
            "127.0.0.1:10014",
            "127.0.0.1",
            "localhost",
            "localhost.evil.example:10013",
            "10.0.0.5:10013",
            "",
            "user@127.0.0.1:10013",
            "127.0.0.1:10013/x",
            "[::1",
            "::1:10013",
        ] {
            assert!(!p.host_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn a_wildcard_bind_serves_ip_literals_and_listed_names() {
        let p = policy("0.0.0.0:8080", &["memex.lan", "box:9000"], &[]);
        assert!(p.host_allowed("192.168.1.20:8080"));
        assert!(p.host_allowed("memex.lan:8080"));
        assert!(p.host_allowed("box:9000"));
        assert!(!p.host_allowed("box:8080"));
        assert!(!p.host_allowed("evil.example:8080"));
        let any = policy("0.0.0.0:8080", &["*"], &[]);
        assert!(any.host_allowed("evil.example:1"));
    }

    #[test]
    fn origins_other_than_the_service_and_the_listed_ones_are_refused() {
        let p = policy("127.0.0.1:10013", &[], &["https://app.example"]);
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(
                    axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            m
        };
        assert!(p.check_origin(&h(&[])).unwrap().is_none());
        assert!(
            p.check_origin(&h(&[("origin", "http://127.0.0.1:10013")]))
                .unwrap()
                .is_none()
        );
        assert!(
            p.check_origin(&h(&[("origin", "https://app.example")]))
                .unwrap()
                .is_some()
        );
        for bad in [
            "http://evil.example",
            "http://evil.example:10013",
            "null",
            "https://127.0.0.1:10013",
            "http://127.0.0.1:9999",
        ] {
            let e = p.check_origin(&h(&[("origin", bad)])).unwrap_err();
            assert_eq!(e.code, "origin_not_allowed", "{bad}");
        }
        let e = p
            .check_origin(&h(&[("sec-fetch-site", "cross-site")]))
            .unwrap_err();
        assert_eq!(e.status, StatusCode::FORBIDDEN);
        assert!(
            p.check_origin(&h(&[("sec-fetch-site", "same-origin")]))
                .is_ok()
        );
    }

    #[test]
    fn bodies_must_be_json() {
        let mut h = HeaderMap::new();
        assert!(check_content_type(&Method::GET, &h).is_ok());
        assert_eq!(
            check_content_type(&Method::POST, &h).unwrap_err().status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE
        );
        h.insert(header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert!(check_content_type(&Method::POST, &h).is_err());
        h.insert(
            header::CONTENT_TYPE,
            "Application/JSON; charset=utf-8".parse().unwrap(),
        );
        assert!(check_content_type(&Method::POST, &h).is_ok());
        let mut g = HeaderMap::new();
        g.insert(header::CONTENT_LENGTH, "5".parse().unwrap());
        assert!(check_content_type(&Method::GET, &g).is_err());
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        let mut h = HeaderMap::new();
        for (v, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("BEARER  abc ", Some("abc")),
            ("Basic abc", None),
            ("Bearer", None),
            ("Bearer ", None),
        ] {
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            assert_eq!(bearer(&h), want, "{v}");
        }
    }
}
