//! The HTTP API (axum): the archive over JSON on localhost.
//!
//! Every parameter is validated here, where it enters; a bad one is a 400 that names it. Errors
//! have one shape, `{"error": {"code", "message"}}`, with a stable code mapped to a status
//! ([`ApiError`]). Handlers read through the pooled read connections on the blocking pool, so a
//! slow query never stalls the runtime and reads never wait for the writer.

mod compact;
pub mod guard;
pub mod listen;
mod rewrite;
pub mod signin;
mod sync;
pub mod team;
pub mod team_mcp;
mod web;

pub use web::MAX_LIVE_STREAMS;

use self::compact::{compact_regenerate, compact_session, compact_status, compact_trigger};
pub use self::rewrite::forget_request;
use self::rewrite::{forget_handler, scrub_handler};

use std::sync::Arc;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::compact::queue::{self, Compactor};
use crate::config::Settings;
use crate::input::BadField;
use crate::search;
use crate::state::Shared;
use crate::store::{ReadPool, read};

/// What the handlers share.
#[derive(Clone)]
pub struct ApiState {
    pub pool: ReadPool,
    pub state: Shared,
    pub settings: Arc<Settings>,
    /// Who may call: the listener, the bound address, allowed hosts and origins, the owner's
    /// secret.
    pub policy: Arc<guard::Policy>,
    /// The browsers signed in over TCP, and the one-time links that sign them in.
    pub signins: Arc<signin::SignIns>,
    /// Reads running at once. Searches are CPU-bound: more of them than cores only adds
    /// contention, and each needs a connection with a warm cache, so requests beyond this wait
    /// (cheaply, as futures) instead.
    pub readers: Arc<tokio::sync::Semaphore>,
    /// Reads of the Claude Code hooks (`POST /api/inject`), apart from the others: a hook has
    /// one second in all, and must never wait behind a burst of searches.
    pub hook_readers: Arc<tokio::sync::Semaphore>,
    /// The compact queue (absent: compaction cannot be triggered through this server).
    pub compactor: Option<Compactor>,
    /// The vector layer (or why there is none).
    pub vectors: Arc<crate::vector::ForSearch>,
    /// The archive's writer (absent: injections are answered but not logged).
    pub writer: Option<crate::store::Writer>,
    /// Set when the service stops: long-lived answers (the live pages' events) end then.
    pub shutdown: Option<tokio::sync::watch::Receiver<bool>>,
    /// The live pages' event streams open at once (see [`MAX_LIVE_STREAMS`]).
    pub live_streams: Arc<tokio::sync::Semaphore>,
    /// The service's sync with the user's other machines (absent: this machine does not
    /// sync).
    pub sync: Option<crate::state::SyncHandle>,
    /// The team this machine joined (absent: searches at scope team or all are refused).
    pub team: Option<Arc<crate::team::Joined>>,
}

/// How many reads may run at once: two per core, so one waiting on I/O does not idle a core.
pub fn reader_slots() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get() * 2)
}

/// A failed request: a stable code, its status, and a message that says what to change.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    fn bad_parameter(message: impl std::fmt::Display) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "bad_parameter",
            message: message.to_string(),
        }
    }

    fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "request failed");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: "the archive could not be read; see the service log".into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = Json(json!({"error": {"code": self.code, "message": self.message}}));
        let mut res = (self.status, body).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            res.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        res
    }
}

type ApiResult = Result<Json<Value>, ApiError>;

/// Longest accepted session id (ids are UUIDs or file stems).
const MAX_ID: usize = 256;

pub fn router(st: ApiState) -> Router {
    let max_body = st.settings.api.max_body_bytes;
    Router::new()
        .route("/api/health", get(health))
        .route("/api/stats", get(stats))
        .route("/api/search", get(search_handler))
        .route("/api/usage", get(usage_handler))
        .route("/api/sessions", get(sessions))
        .route("/api/sessions/{id}", get(session))
        .route("/api/sessions/{id}/summary", get(session_summary))
        .route("/api/sessions/{id}/export", get(session_export))
        .route("/api/compact/trigger", post(compact_trigger))
        .route("/api/compact/session/{id}", post(compact_session))
        .route("/api/compact/regenerate", post(compact_regenerate))
        .route("/api/compact/status", get(compact_status))
        .route("/api/inject", post(inject_handler))
        .route("/api/forget", post(forget_handler))
        .route("/api/scrub", post(scrub_handler))
        .route("/api/sync", post(sync::sync_handler))
        .route("/api/proof", get(proof))
        .route("/api/signin", post(signin_link))
        .merge(web::routes())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(middleware::from_fn_with_state(st.clone(), guard))
        .with_state(st)
}

/// Host, origin, authentication, content type and the body limit, before any handler runs
/// (see [`mod@guard`]). Answers to an allowed origin carry its CORS headers, refusals included.
async fn guard(State(st): State<ApiState>, req: Request, next: Next) -> Response {
    let policy = &st.policy;
    if policy.channel == guard::Channel::Socket {
        return match body_within_limits(st.settings.api.max_body_bytes, req).await {
            Ok(req) => json_errors(next.run(req).await).await,
            Err(e) => e.into_response(),
        };
    }
    if let Err(e) = guard::check_host(policy, req.headers(), req.uri()) {
        return e.into_response();
    }
    let cors = match policy.check_origin(req.headers()) {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    if req.method() == axum::http::Method::OPTIONS
        && let Some(origin) = cors
    {
        return guard::preflight(origin);
    }
    let page = req.method() == axum::http::Method::GET && !req.uri().path().starts_with("/api");
    let res = match admit(&st, &req) {
        Ok(()) => match body_within_limits(st.settings.api.max_body_bytes, req).await {
            Ok(req) => json_errors(next.run(req).await).await,
            Err(e) => e.into_response(),
        },
        // A page asked for without signing in: the sign-in page.
        Err(e) if page && e.status == StatusCode::UNAUTHORIZED => {
            axum::response::Redirect::to("/login").into_response()
        }
        Err(e) => e.into_response(),
    };
    with_cors(res, cors)
}

/// What TCP callers reach without the secret: signing in, the static assets, the proof.
fn open_path(path: &str) -> bool {
    matches!(path, "/login" | "/api/proof" | "/favicon.ico") || path.starts_with("/assets/")
}

/// The secret (or, for reads, a signed-in browser's session) and the content type of a TCP
/// request the Host and Origin checks let through.
fn admit(st: &ApiState, req: &Request) -> Result<(), ApiError> {
    let secret = &st.policy.secret;
    // A browser's session (a cookie a same-site page sends) stands for the secret in reads;
    // anything that changes the archive needs the header.
    let reads = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    let given = guard::bearer(req.headers()).is_some_and(|g| secret.matches(g))
        || reads
            && st
                .signins
                .cookie_of(req.headers())
                .is_some_and(|c| st.signins.valid(c));
    if !given && !open_path(req.uri().path()) {
        return Err(ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "this API needs `Authorization: Bearer <token>` with the service's token (MEMEX_API_TOKEN, or the `api-token` file in its data folder); the CLI reaches it through its socket, and `memex open` signs a browser in".into(),
        });
    }
    guard::check_content_type(req.method(), req.headers())
}

/// How long a request's body may take to arrive, once its headers have.
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The request with its body read, within `[api] max_body_bytes` and [`BODY_TIMEOUT`], so a
/// caller that sends its body slowly (or never) holds no handler.
async fn body_within_limits(max: usize, req: Request) -> Result<Request, ApiError> {
    guard::check_content_type(req.method(), req.headers())?;
    let too_large = || ApiError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "payload_too_large",
        message: format!("request bodies are limited to {max} bytes"),
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return Err(too_large());
    }
    let chunked = req.headers().contains_key(header::TRANSFER_ENCODING);
    if declared.is_none_or(|n| n == 0) && !chunked {
        return Ok(req);
    }
    let (parts, body) = req.into_parts();
    let bytes = match tokio::time::timeout(BODY_TIMEOUT, axum::body::to_bytes(body, max)).await {
        Err(_) => {
            return Err(ApiError {
                status: StatusCode::REQUEST_TIMEOUT,
                code: "request_timeout",
                message: format!(
                    "the request's body did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ),
            });
        }
        Ok(Err(e)) => {
            let over = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if over {
                return Err(too_large());
            }
            return Err(ApiError {
                status: StatusCode::BAD_REQUEST,
                code: "bad_request",
                message: format!("the request's body could not be read: {e}"),
            });
        }
        Ok(Ok(b)) => b,
    };
    Ok(Request::from_parts(parts, axum::body::Body::from(bytes)))
}

/// Errors that did not come from a handler (axum's own rejections: a path that does not
/// decode, a body over the limit) in the API's one error shape.
async fn json_errors(res: Response) -> Response {
    let status = res.status();
    // A handler's own answer: JSON, or a web page that says what went wrong.
    let own = res.headers().get(header::CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.starts_with(b"application/json") || v.starts_with(b"text/html")
    });
    if !(status.is_client_error() || status.is_server_error()) || own {
        return res;
    }
    let (parts, body) = res.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let code = match parts.status {
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        s if s.is_server_error() => "internal",
        _ => "bad_request",
    };
    let message = String::from_utf8_lossy(&text).trim().to_owned();
    ApiError {
        status: parts.status,
        code,
        message: if message.is_empty() {
            parts.status.to_string()
        } else {
            message
        },
    }
    .into_response()
}

fn with_cors(mut res: Response, origin: Option<HeaderValue>) -> Response {
    if let Some(o) = origin {
        guard::cors_headers(res.headers_mut(), o);
    }
    res
}

async fn not_found() -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "not_found",
        message:
            "no such endpoint; see /api/health, /api/stats, /api/search, /api/sessions, /api/usage"
                .into(),
    }
}

async fn method_not_allowed() -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "method_not_allowed",
        message:
            "this method is not served here: /api/inject and the compact endpoints take POST, the rest GET"
                .into(),
    }
}

/// The longest a read may run: far above any search at a million messages (BENCHMARKS.md), so
/// only a request crafted to be expensive reaches it, and then it is stopped instead of holding
/// a reader slot and a core.
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// Runs a read on a pooled connection, off the runtime threads, within [`READ_DEADLINE`].
async fn read<T: Send + 'static>(
    st: &ApiState,
    f: impl FnOnce(&rusqlite::Connection) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    read_in(st, &st.readers, f).await
}

async fn read_in<T: Send + 'static>(
    st: &ApiState,
    slots: &Arc<tokio::sync::Semaphore>,
    f: impl FnOnce(&rusqlite::Connection) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    // Owned and moved into the read: a client that hangs up does not free the slot while its
    // read still runs.
    let slot = slots
        .clone()
        .acquire_owned()
        .await
        .map_err(ApiError::internal)?;
    let pool = st.pool.clone();
    let expired = Arc::new(AtomicBool::new(false));
    let flag = expired.clone();
    let out = tokio::task::spawn_blocking(move || {
        let _slot = slot;
        pool.with(|c| {
            let deadline = std::time::Instant::now() + READ_DEADLINE;
            // SQLite calls this every few thousand steps; `true` interrupts the statement.
            c.progress_handler(
                10_000,
                Some(move || {
                    let over = std::time::Instant::now() > deadline;
                    if over {
                        flag.store(true, Ordering::Relaxed);
                    }
                    over
                }),
            );
            let out = f(c);
            c.progress_handler(0, None::<fn() -> bool>);
            out
        })
    })
    .await
    .map_err(ApiError::internal)?
    .map_err(ApiError::internal)?;
    if expired.load(Ordering::Relaxed) {
        return Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "too_expensive",
            message: format!(
                "the request ran longer than {} s and was stopped; narrow it (fewer or rarer words, a filter)",
                READ_DEADLINE.as_secs()
            ),
        });
    }
    out
}

/// A request body as JSON; an empty body is `{}`.
fn json_body(body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(json!({}));
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_parameter(format!("the body is not JSON: {e}")))
}

/// An optional boolean field of a JSON body (`null` counts as absent).
fn bool_field(obj: &serde_json::Map<String, Value>, key: &str) -> Result<bool, BadField> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(BadField::new(key, "must be true or false")),
    }
}

/// Query parameters, checked against the ones an endpoint accepts.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(raw: Option<String>, accepted: &[&str]) -> Result<Params, ApiError> {
        let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
            .map_err(|e| {
                ApiError::bad_parameter(format!("the query string cannot be decoded: {e}"))
            })?;
        if let Some((k, _)) = pairs.iter().find(|(k, _)| !accepted.contains(&k.as_str())) {
            return Err(ApiError::bad_parameter(format!(
                "unknown parameter `{k}`; accepted: {}",
                accepted.join(", ")
            )));
        }
        Ok(Params(pairs))
    }

    /// The value of `key` (the last one when repeated); empty counts as absent.
    fn get(&self, key: &str) -> Option<String> {
        self.0
            .iter()
            .rev()
            .find(|(k, v)| k == key && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_owned())
    }

    fn number(&self, key: &str, default: u32, lo: u32, hi: u32) -> Result<u32, ApiError> {
        let Some(v) = self.get(key) else {
            return Ok(default);
        };
        match v.parse::<u32>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(n),
            _ => Err(ApiError::bad_parameter(format!(
                "`{key}` must be a whole number from {lo} to {hi}, got `{v}`"
            ))),
        }
    }

    fn agent(&self) -> Result<Option<String>, ApiError> {
        let Some(a) = self.get("agent") else {
            return Ok(None);
        };
        search::check_agent(&a).map_err(|e| ApiError::bad_parameter(format!("`agent` {e}")))?;
        Ok(Some(a))
    }
}

/// `GET /api/proof?challenge=HEX`: the service's proof that it holds its owner's secret, which
/// a client checks before it sends anything over TCP ([`crate::owner::Secret::proof`]). Open to
/// every caller: the answer says nothing about the secret.
async fn proof(State(st): State<ApiState>, RawQuery(q): RawQuery) -> ApiResult {
    let p = Params::parse(q, &["challenge"])?;
    let challenge = p.get("challenge").unwrap_or_default();
    if !(16..=128).contains(&challenge.len()) || !challenge.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::bad_parameter(
            "`challenge` must be 16 to 128 hexadecimal digits",
        ));
    }
    let port = st.policy.bound.port();
    Ok(Json(json!({
        "proof": st.policy.secret.proof(port, &challenge),
    })))
}

/// `POST /api/signin`: a one-time link that signs a browser in to the web pages (`memex open`).
/// Only the owner gets here: over the socket, or with the secret.
async fn signin_link(State(st): State<ApiState>, RawQuery(q): RawQuery) -> ApiResult {
    Params::parse(q, &[])?;
    match st.signins.link() {
        Some(url) => Ok(Json(json!({
            "url": url,
            "expires_in_seconds": signin::CODE_TTL.as_secs(),
        }))),
        None => Err(ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            code: "web_unavailable",
            message: format!(
                "the web pages are not served: the service could not listen on {} (another program holds it; see the service log)",
                st.settings.api.bind
            ),
        }),
    }
}

async fn health(State(st): State<ApiState>) -> Json<Value> {
    let s = &st.state;
    let w = &s.watch;
    let last_event = w.last_event_ms.load(std::sync::atomic::Ordering::Relaxed);
    Json(json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
        "pid": std::process::id(),
        "uptime_seconds": s.started.elapsed().as_secs(),
        "started_at": read::iso(Some(s.started_at_ms)),
        "phase": s.phase(),
        "watcher": {
            "state": s.phase(),
            "mode": *w.mode.lock().unwrap_or_else(|e| e.into_inner()),
            "roots": w.roots(),
            "events": w.events.load(std::sync::atomic::Ordering::Relaxed),
            "rescans_after_lost_events": w.overflows.load(std::sync::atomic::Ordering::Relaxed),
            "last_event_at": read::iso((last_event > 0).then_some(last_event)),
        },
    }))
}

async fn stats(State(st): State<ApiState>, RawQuery(q): RawQuery) -> ApiResult {
    Params::parse(q, &[])?;
    let status = read(&st, |c| read::status(c).map_err(ApiError::internal)).await?;
    use std::sync::atomic::Ordering::Relaxed;
    let s = &st.state;
    let i = &s.ingest;
    let last = i.last_ingest_ms.load(Relaxed);
    let mut v = serde_json::to_value(&status).map_err(ApiError::internal)?;
    v["ingest"] = json!({
        "since_start": {
            "ingests": i.ingests.load(Relaxed),
            "files": i.files.load(Relaxed),
            "messages": i.messages.load(Relaxed),
            "messages_updated": i.messages_updated.load(Relaxed),
            "bad_lines": i.bad_lines.load(Relaxed),
            "files_failed": i.errors.load(Relaxed),
            "files_gone": i.files_gone.load(Relaxed),
        },
        "pending_files": s.watch.pending_files.load(Relaxed),
        "last_ingest_at": read::iso((last > 0).then_some(last)),
        "lag": i.lag(),
    });
    let backlog = read(&st, |c| {
        crate::vector::indexer::Vectors::backlog(c).map_err(ApiError::internal)
    })
    .await?;
    v["vectors"] =
        serde_json::to_value(st.vectors.status(backlog).await).map_err(ApiError::internal)?;
    v["injections"] = serde_json::to_value(
        read(&st, |c| crate::inject::stats(c).map_err(ApiError::internal)).await?,
    )
    .map_err(ApiError::internal)?;
    v["sessions_tracker"] = json!({
        "idle_minutes": st.settings.watch.idle_minutes,
        "active_sessions": s.tracker.active.load(Relaxed),
        "idle_events_since_start": s.tracker.idle_events.load(Relaxed),
    });
    v["web"] = json!({
        "live_streams": MAX_LIVE_STREAMS - st.live_streams.available_permits(),
        "live_streams_max": MAX_LIVE_STREAMS,
    });
    Ok(Json(v))
}

/// `GET /api/usage`: tokens and dollars per day, week, month, session or 5-hour window (the
/// parameters of [`crate::usage::UsageRequest`]).
async fn usage_handler(State(st): State<ApiState>, RawQuery(q): RawQuery) -> ApiResult {
    let p = Params::parse(q, &crate::usage::QUERY_NAMES)?;
    let bad = |e: search::BadParam| ApiError::bad_parameter(e.to_string());
    let request = crate::usage::UsageRequest::from_query(|k| p.get(k)).map_err(bad)?;
    // A price file that cannot be read is the owner's setting: named, as `memex usage` names it.
    let pricing = crate::usage::Pricing::load(&st.settings).map_err(|e| ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        code: "prices",
        message: e.to_string(),
    })?;
    let plan = request.check(pricing.zone).map_err(bad)?;
    let v = read(&st, move |c| {
        crate::usage::run(c, &pricing, &plan)
            .map(|a| a.to_json())
            .map_err(ApiError::internal)
    })
    .await?;
    Ok(Json(v))
}

async fn search_handler(State(st): State<ApiState>, RawQuery(q): RawQuery) -> ApiResult {
    let p = Params::parse(q, &search::QUERY_NAMES)?;
    let bad = |e: search::BadParam| {
        let name = if e.name == "query" { "q" } else { e.name };
        ApiError::bad_parameter(format!("`{name}` {}", e.reason))
    };
    let request = search::SearchRequest::from_query(|k| p.get(k)).map_err(bad)?;
    if request.query.is_empty() {
        return Err(ApiError::bad_parameter(
            "`q` is required: the words to look for",
        ));
    }
    let params = request.check(1000).map_err(bad)?;
    if params.reach != search::Reach::Local {
        return scoped(&st, params).await.map(Json);
    }
    let (vectors, rt) = (st.vectors.clone(), tokio::runtime::Handle::current());
    let res = read(&st, move |c| {
        search::search(c, &search::Semantic::of(&vectors, &rt), &params).map_err(|e| match e {
            search::SearchError::Limit(_)
            | search::SearchError::TooManyTerms(_)
            | search::SearchError::NoVectors(_) => ApiError::bad_parameter(e.to_string()),
            other => ApiError::internal(other),
        })
    })
    .await?;
    serde_json::to_value(res)
        .map(Json)
        .map_err(ApiError::internal)
}

/// A search at scope team or all ([`crate::team::scoped_search`]), its failures as answers.
async fn scoped(st: &ApiState, params: search::SearchParams) -> Result<Value, ApiError> {
    use crate::team::ScopedError;
    let _slot = st.readers.acquire().await.map_err(ApiError::internal)?;
    crate::team::scoped_search(st.pool.clone(), st.vectors.clone(), st.team.clone(), params)
        .await
        .map_err(|e| match e {
            ScopedError::NoTeam => ApiError::bad_parameter(e.to_string()),
            ScopedError::Local(
                search::SearchError::Limit(_)
                | search::SearchError::TooManyTerms(_)
                | search::SearchError::NoVectors(_),
            ) => ApiError::bad_parameter(e.to_string()),
            ScopedError::Team(t) => {
                tracing::warn!(error = %t, "the team archive could not be searched");
                ApiError {
                    status: StatusCode::BAD_GATEWAY,
                    code: "team_unavailable",
                    message: format!("the team archive could not be searched: {t}"),
                }
            }
            other => ApiError::internal(other),
        })
}

async fn sessions(State(st): State<ApiState>, RawQuery(q): RawQuery) -> ApiResult {
    let p = Params::parse(q, &["agent", "project", "host", "limit", "offset"])?;
    let limit = p.number("limit", 20, 1, 1000)?;
    let offset = p.number("offset", 0, 0, u32::MAX)?;
    let host = p.get("host");
    if let Some(h) = &host {
        search::check_host(h).map_err(|e| ApiError::bad_parameter(format!("`host` {e}")))?;
    }
    let filter = read::Filter {
        agent: p.agent()?,
        project: p.get("project"),
        host,
        ..read::Filter::default()
    };
    let rows = read(&st, move |c| {
        read::list_sessions(c, &filter, limit, offset).map_err(ApiError::internal)
    })
    .await?;
    Ok(Json(
        json!({"sessions": rows, "limit": limit, "offset": offset}),
    ))
}

async fn session(
    State(st): State<ApiState>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    let p = Params::parse(q, &["format"])?;
    match p.get("format").as_deref() {
        None | Some("raw") => {}
        Some("summary") => return summary_of(&st, id).await,
        Some(other) => {
            return Err(ApiError::bad_parameter(format!(
                "`format` must be `raw` (every unified message) or `summary` (the compact layers), got `{other}`"
            )));
        }
    }
    check_id(&id)?;
    let v = read(&st, move |c| {
        let s = find(c, &id)?;
        crate::export::session_json(c, &s).map_err(ApiError::internal)
    })
    .await?;
    Ok(Json(v))
}

/// `GET /api/sessions/{id}/export?format=md|html|json`: the session as a file to download.
async fn session_export(
    State(st): State<ApiState>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    use crate::export::{self, Format};
    let p = Params::parse(q, &["format"])?;
    let format = Format::parse(p.get("format").as_deref().unwrap_or("md"))
        .map_err(|e| ApiError::bad_parameter(BadField::new("format", e)))?;
    check_id(&id)?;
    let (name, body) = read(&st, move |c| {
        let s = find(c, &id)?;
        let body = export::render(c, &s, format).map_err(ApiError::internal)?;
        Ok((export::file_name(&s, format), body))
    })
    .await?;
    let mut res = body.into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(format.content_type()),
    );
    // The name is made of [A-Za-z0-9._-] only.
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; sandbox"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // A private transcript is not kept in the browser's disk cache.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(res)
}

fn check_id(id: &str) -> Result<(), ApiError> {
    if id.is_empty() || id.len() > MAX_ID || id.chars().any(char::is_control) {
        return Err(ApiError::bad_parameter(format!(
            "the session id must be 1 to {MAX_ID} printable characters"
        )));
    }
    Ok(())
}

fn find(c: &rusqlite::Connection, id: &str) -> Result<read::SessionRow, ApiError> {
    read::find_session(c, id)
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError {
            status: StatusCode::NOT_FOUND,
            code: "session_not_found",
            message: format!("no session `{id}` (an id or a prefix of one only one session has)"),
        })
}

async fn summary_of(st: &ApiState, id: String) -> ApiResult {
    check_id(&id)?;
    let v = read(st, move |c| {
        let s = find(c, &id)?;
        queue::summary_view(c, s.pk, &s.session_id).map_err(ApiError::internal)
    })
    .await?;
    serde_json::to_value(v)
        .map(Json)
        .map_err(ApiError::internal)
}

async fn session_summary(
    State(st): State<ApiState>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> ApiResult {
    Params::parse(q, &[])?;
    summary_of(&st, id).await
}

/// `POST /api/inject`: what a Claude Code hook injects (body: [`crate::inject::Request`]). Every call
/// is logged for the stats, after the answer.
async fn inject_handler(
    State(st): State<ApiState>,
    RawQuery(q): RawQuery,
    body: axum::body::Bytes,
) -> ApiResult {
    use crate::inject;
    let started = std::time::Instant::now();
    Params::parse(q, &[])?;
    let mut de = serde_json::Deserializer::from_slice(&body);
    let req: inject::Request = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| {
            let field = e.path().to_string();
            let e = e.into_inner();
            if field == "." {
                format!("the body is not an inject request: {e}")
            } else {
                format!("the body is not an inject request: `{field}`: {e}")
            }
        })
        // Nothing may follow the request (as `serde_json::from_slice` required).
        .and_then(|r| {
            de.end()
                .map(|()| r)
                .map_err(|e| format!("the body is not an inject request: {e}"))
        })
        .map_err(ApiError::bad_parameter)?;
    let opts = req
        .validate(&st.settings.inject)
        .map_err(ApiError::bad_parameter)?;
    if let Some(v) = &st.vectors.vectors {
        inject::keep_model_ready(v, req.mode);
    }
    let ts = chrono::Utc::now().timestamp_millis();
    let (vectors, rt) = (st.vectors.clone(), tokio::runtime::Handle::current());
    let (mut res, req, opts) = read_in(&st, &st.hook_readers, move |c| {
        let res = inject::answer(c, &search::Semantic::of(&vectors, &rt), &req, &opts)
            .map_err(ApiError::internal)?;
        Ok((res, req, opts))
    })
    .await?;
    // The team's memory too, when the user turned it on: within what is left of the hook's
    // budget, and said apart.
    let i = &st.settings.inject;
    if req.mode == inject::Mode::Smart
        && i.team
        && res.skipped.is_none()
        && let (Some(team), Some(v), Some(prompt)) = (&st.team, &st.vectors.vectors, &req.prompt)
    {
        let left = std::time::Duration::from_millis(i.timeout_ms)
            .saturating_sub(started.elapsed())
            .saturating_sub(std::time::Duration::from_millis(150));
        match tokio::time::timeout(
            left,
            crate::team::inject_items(
                team,
                v.embedder.clone(),
                prompt,
                i.team_threshold,
                i.team_max_results,
            ),
        )
        .await
        {
            Ok(Ok(items)) => inject::add_team(&mut res, items, opts.max_tokens),
            Ok(Err(e)) => tracing::warn!(error = %e, "injection: the team archive failed"),
            Err(_) => tracing::warn!("injection: the team archive did not answer in time"),
        }
    }
    res.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let body = serde_json::to_value(&res).map_err(ApiError::internal)?;
    if let Some(w) = st.writer.clone() {
        let record = inject::Record {
            ts,
            mode: req.mode,
            project: opts.project,
            session_id: req.session_id,
            prompt: req.prompt.filter(|_| opts.record_prompt),
            response: res,
        };
        let (redact, log_days) = (st.settings.store.redact, st.settings.inject.log_days);
        tokio::spawn(async move {
            match w
                .run(move |c| inject::record(c, &record, redact, log_days))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot log an injection"),
                Err(e) => tracing::warn!(error = %e, "cannot log an injection"),
            }
        });
    }
    Ok(Json(body))
}
