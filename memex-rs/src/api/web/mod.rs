//! The web interface at `/` of `memex serve`: search, sessions, a session as a conversation,
//! projects, a dashboard, and live updates (server-sent events). It is part of the API's router,
//! behind the same guard (Host, Origin, token), and reads through the same functions as the
//! JSON endpoints (`search::search`, `store::read`, `export::view`, the compact and injection
//! statistics); what only a page shows (the dashboard's per-day counts, the projects, a page of
//! a long session's talks) is read in `store::read` next to the rest. Pages are askama
//! templates (every transcript text escaped); the one stylesheet and the one small script are
//! served by the binary; the Content-Security-Policy allows nothing from anywhere else.
//!
//! One file per kind of page (`search`, `sessions`, `dashboard`); here the routes, what the
//! pages share (page and error plumbing, links, agent names, times), signing in and the live
//! stream.

mod chart;
mod dashboard;
mod search;
mod sessions;
mod share;
mod usage;

use askama::Template;
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiError, ApiState, Params, check_id, find, read};
use crate::export::html::CSS;
use dashboard::dashboard_page;
use search::{search_page, search_results};
use sessions::{projects_page, session_page, sessions_page};

pub(super) const JS: &str = include_str!("../../../assets/web/memex.js");
pub(super) const ICON: &str = include_str!("../../../assets/web/favicon.svg");

/// What a page may load: its own stylesheet and script, its own API; nothing else, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

pub(super) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/", get(search_page))
        .route("/search", get(search_results))
        .route("/sessions", get(sessions_page))
        .route("/sessions/{id}", get(session_page))
        .route("/projects", get(projects_page))
        .route("/dashboard", get(dashboard_page))
        .route("/share", get(share::share_page))
        .route("/usage", get(usage::usage_page))
        .route("/events", get(events))
        .route("/login", get(login_page).post(login))
        .route(
            "/assets/memex.css",
            get(|| async { asset(CSS, "text/css") }),
        )
        .route(
            "/assets/memex.js",
            get(|| async { asset(JS, "text/javascript") }),
        )
        .route(
            "/assets/favicon.svg",
            get(|| async { asset(ICON, "image/svg+xml") }),
        )
        .route(
            "/favicon.ico",
            get(|| async { asset(ICON, "image/svg+xml") }),
        )
}

pub(super) fn asset(body: &'static str, ty: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ty));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// A rendered page with the headers every page carries.
fn page(t: impl Template) -> Response {
    match t.render() {
        Ok(html) => html_response(StatusCode::OK, html),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

pub(super) fn html_response(status: StatusCode, html: String) -> Response {
    let mut r = (status, html).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A page that says what went wrong (a bad parameter, a session not found), in the layout.
fn error_page(e: ApiError) -> Response {
    let status = e.status;
    let t = ErrorPage {
        nav: "",
        title: "Not shown",
        message: e.message,
    };
    match t.render() {
        Ok(html) => html_response(status, html),
        Err(_) => e_plain(status),
    }
}

fn e_plain(status: StatusCode) -> Response {
    (status, "error").into_response()
}

/// `s` as one URL path segment or query value: every byte but the unreserved ones escaped.
pub(super) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The agents the filters offer: every adapter's name.
fn agent_names() -> Vec<String> {
    ai_cli_session_collector::AdapterRegistry::new()
        .all()
        .map(|a| a.name().to_owned())
        .collect()
}

/// A stored time as the pages show it, to the minute.
pub(super) fn short_time(t: Option<&str>) -> String {
    crate::store::read::minute(t).unwrap_or_default()
}

#[derive(Template)]
#[template(path = "web/error.html")]
struct ErrorPage {
    nav: &'static str,
    title: &'static str,
    message: String,
}

// ---- signing in ----

#[derive(Template)]
#[template(path = "web/login.html")]
struct LoginPage {
    nav: &'static str,
    title: &'static str,
    /// Why the last attempt failed, if it did.
    problem: String,
}

fn login_form(status: StatusCode, problem: &str) -> Response {
    let t = LoginPage {
        nav: "",
        title: "Sign in",
        problem: problem.to_owned(),
    };
    match t.render() {
        Ok(html) => html_response(status, html),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

/// A response that starts a browser session and answers with `res`.
fn signed_in(st: &ApiState, id: &str, mut res: Response) -> Response {
    if let Ok(v) = HeaderValue::from_str(&st.signins.cookie(id)) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    res
}

const TOO_MANY: &str =
    "Too many failed sign-ins in the last minute: wait a minute, or run `memex open`.";

/// `GET /login`: the sign-in page; `GET /login?code=…` (a one-time link from `memex open`, or the
/// one `memex serve` prints) signs the browser in and goes to the search page.
async fn login_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match Params::parse(q, &["code"]) {
        Ok(p) => p,
        Err(e) => return error_page(e),
    };
    let Some(code) = p.get("code") else {
        return login_form(StatusCode::OK, "");
    };
    match st.signins.redeem(&code) {
        Ok(id) => signed_in(&st, &id, axum::response::Redirect::to("/").into_response()),
        Err(super::signin::Refusal::TooMany) => login_form(StatusCode::TOO_MANY_REQUESTS, TOO_MANY),
        Err(super::signin::Refusal::Invalid) => login_form(
            StatusCode::UNAUTHORIZED,
            "This sign-in link was used already or has expired. Run `memex open` for a new one.",
        ),
    }
}

/// `POST /login` with `{"token": "..."}`: the service's token, checked in constant time, starts
/// a browser session (a cookie the browser sends with the pages' reads: same site only, not
/// readable by scripts).
async fn login(State(st): State<ApiState>, body: axum::body::Bytes) -> Response {
    let given: Option<String> = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["token"].as_str().map(str::to_owned));
    let Some(given) = given else {
        return ApiError::bad_parameter("the body must be {\"token\": \"...\"}").into_response();
    };
    match st.signins.with_token(&st.policy.secret, &given) {
        Ok(id) => signed_in(&st, &id, StatusCode::NO_CONTENT.into_response()),
        Err(super::signin::Refusal::TooMany) => ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "too_many_attempts",
            message: TOO_MANY.into(),
        }
        .into_response(),
        Err(super::signin::Refusal::Invalid) => ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "that is not the token of this service".into(),
        }
        .into_response(),
    }
}

// ---- live ----

/// Live streams open at once, over all clients. A browser tab holds one while it is visible;
/// past this, more are refused (503) rather than held.
pub const MAX_LIVE_STREAMS: usize = 32;

/// Server-sent events: `ingest` when the watcher stored new or changed messages, so an open
/// session page or the dashboard fetches its live part again. `?session=PK` asks only for the
/// changes of that session (sent at most twice a second); without it every change counts, sent
/// at most every 3 s (the dashboard). A comment every 15 s keeps the connection open through
/// proxies. The stream ends when the service stops (the browser reconnects to the next one by
/// itself).
async fn events(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use std::time::Duration;
    use tokio::sync::broadcast::error::RecvError;
    let p = match Params::parse(q, &["session"]) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let session = match p.get("session") {
        None => None,
        Some(v) => match v.parse::<i64>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return ApiError::bad_parameter(format!(
                    "session must be a session's number as the page gives it, not {v:?}"
                ))
                .into_response();
            }
        },
    };
    let Ok(permit) = st.live_streams.clone().try_acquire_owned() else {
        return ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "busy",
            message: format!(
                "{MAX_LIVE_STREAMS} live pages are open already; close some, or reload this one later"
            ),
        }
        .into_response();
    };
    let pace = Duration::from_millis(if session.is_some() { 500 } else { 3000 });
    let mine = move |pks: &[i64]| session.is_none_or(|s| pks.contains(&s));
    let rx = st.state.touched.subscribe();
    let shutdown = st.shutdown.clone();
    let start = (rx, shutdown, permit, tokio::time::Instant::now() - pace);
    let stream = futures::stream::unfold(start, move |(mut rx, mut shutdown, permit, last)| {
        async move {
            // Wait for a change this page shows (a lagging receiver missed some: count it as
            // one), then for the pace, taking in whatever else came meanwhile.
            let go = {
                let stopped = async {
                    match shutdown.as_mut() {
                        Some(s) => {
                            let _ = s.wait_for(|stop| *stop).await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                let changed = async {
                    loop {
                        match rx.recv().await {
                            Ok(pks) if mine(&pks) => return true,
                            Ok(_) => {}
                            Err(RecvError::Lagged(_)) => return true,
                            Err(RecvError::Closed) => return false,
                        }
                    }
                };
                tokio::select! {
                    c = changed => c,
                    () = stopped => false,
                }
            };
            if !go {
                return None;
            }
            tokio::time::sleep_until(last + pace).await;
            while !matches!(
                rx.try_recv(),
                Err(tokio::sync::broadcast::error::TryRecvError::Empty
                    | tokio::sync::broadcast::error::TryRecvError::Closed)
            ) {}
            let ev = Event::default().event("ingest").data("{}");
            let now = tokio::time::Instant::now();
            Some((
                Ok::<_, std::convert::Infallible>(ev),
                (rx, shutdown, permit, now),
            ))
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}
