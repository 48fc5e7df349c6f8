//! `memex serve --team URL`: the team archive for people and agents who have no local archive,
//! read-only: the web pages (sign in with a member's token, search), the HTTP API
//! (`/api/search`, `/api/projects`, `/api/sessions`, `/api/sessions/{id}`) and MCP over the
//! Streamable HTTP transport (`/mcp`). Each request is a member's: their token (the
//! `Authorization` header, or the browser session the sign-in page started) names them, and
//! every answer holds only the projects they belong to.
//!
//! The local API's guards apply: `Host` (DNS rebinding) and `Origin` (cross-site pages), body
//! size and time, JSON bodies only. On top of them:
//! - **A token on every request** but the health check, the sign-in page and the static
//!   assets, wherever it listens; it is checked against the team archive each time, so a
//!   revoked token fails its next request.
//! - **Never in a URL**: a query string holding a token (`token=`, `access_token=`, or any
//!   value that looks like one) is refused, so tokens stay out of proxies' and browsers' logs.
//! - **Guessing is slowed**: each refused token costs its address a growing wait (up to
//!   [`MAX_DELAY`]), and [`LOCKOUT_AFTER`] refusals within [`WINDOW`] refuse that address
//!   outright until the window passes.
//! - **Refusals are logged** with the address and the reason, never with the token.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use askama::Template;
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use memex_team::TeamError;
use memex_team::archive::{Member, Team};
use memex_team::token::Token;

use super::listen::Peer;
use super::{ApiError, Params, guard, web};
use crate::search;

/// How long refusals of one address are counted together.
pub const WINDOW: Duration = Duration::from_secs(600);
/// Refusals within [`WINDOW`] after which an address is refused outright.
pub const LOCKOUT_AFTER: u32 = 10;
/// The longest wait a refused token costs.
pub const MAX_DELAY: Duration = Duration::from_secs(1);
/// How long a browser stays signed in.
const SIGNIN_TTL: Duration = Duration::from_secs(12 * 3600);
/// Browser sessions kept at once (the oldest goes first).
const MAX_SIGNINS: usize = 10_000;
/// The browser session's cookie, per port (cookies are per host, not per port): `memex_team_PORT`.
fn cookie_name(st: &TeamServer) -> String {
    format!("memex_team_{}", st.policy.bound.port())
}

/// The team server's state.
pub struct TeamServer {
    pub team: Team,
    pub policy: guard::Policy,
    /// The query embedder, when its model made the team's vectors (else words only).
    pub embedder: Option<Arc<dyn crate::embed::Embedder>>,
    pub max_body: usize,
    signins: Mutex<HashMap<String, (zeroize::Zeroizing<String>, Instant)>>,
    refusals: Mutex<HashMap<IpAddr, (u32, Instant)>>,
}

type St = Arc<TeamServer>;

impl TeamServer {
    pub fn new(
        team: Team,
        policy: guard::Policy,
        embedder: Option<Arc<dyn crate::embed::Embedder>>,
        max_body: usize,
    ) -> TeamServer {
        TeamServer {
            team,
            policy,
            embedder,
            max_body,
            signins: Mutex::new(HashMap::new()),
            refusals: Mutex::new(HashMap::new()),
        }
    }

    /// The query's vector and its model, when this server's model made the team's vectors and
    /// the search asks for meaning (made on the blocking pool).
    pub async fn query_vector(&self, params: &search::SearchParams) -> Option<(String, Vec<f32>)> {
        let e = self
            .embedder
            .clone()
            .filter(|_| params.mode != search::Mode::Fts)?;
        let text = params.query.clone();
        tokio::task::spawn_blocking(move || {
            e.embed_queries(&[text])
                .ok()
                .and_then(|mut v| v.pop())
                .map(|v| (e.id().to_owned(), v))
        })
        .await
        .ok()
        .flatten()
    }

    /// Whether `ip` is refused outright, for now.
    fn locked(&self, ip: Option<IpAddr>) -> bool {
        let Some(ip) = ip else { return false };
        let map = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&ip)
            .is_some_and(|(n, since)| *n >= LOCKOUT_AFTER && since.elapsed() < WINDOW)
    }

    /// Counts a refusal of `ip`; the wait it costs.
    fn refused(&self, ip: Option<IpAddr>) -> Duration {
        let Some(ip) = ip else {
            return MAX_DELAY;
        };
        let mut map = self.refusals.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() > 100_000 {
            map.retain(|_, (_, since)| since.elapsed() < WINDOW);
        }
        let e = map.entry(ip).or_insert((0, Instant::now()));
        if e.1.elapsed() >= WINDOW {
            *e = (0, Instant::now());
        }
        e.0 += 1;
        (Duration::from_millis(100) * e.0).min(MAX_DELAY)
    }

    fn signin(&self, token: &Token) -> String {
        let mut id = [0u8; 32];
        getrandom::fill(&mut id).expect("the operating system's random generator is unavailable");
        let id: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let mut map = self.signins.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, (_, at)| at.elapsed() < SIGNIN_TTL);
        if map.len() >= MAX_SIGNINS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            id.clone(),
            (
                zeroize::Zeroizing::new(token.expose().to_owned()),
                Instant::now(),
            ),
        );
        id
    }

    /// The token a browser session stands for.
    fn session_token(&self, id: &str) -> Option<Token> {
        let map = self.signins.lock().unwrap_or_else(|e| e.into_inner());
        let (t, at) = map.get(id)?;
        (at.elapsed() < SIGNIN_TTL)
            .then(|| Token::parse(t).ok())
            .flatten()
    }
}

/// MCP over Streamable HTTP, stateless: each POST is answered on its own, as the member its
/// token names (the guard checks Host and Origin before the transport sees a request).
pub type McpService = rmcp::transport::streamable_http_server::StreamableHttpService<
    super::team_mcp::TeamMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
>;

/// The MCP service of the team server; `cancel` ends its streams.
pub fn mcp_service(st: St, cancel: tokio_util::sync::CancellationToken) -> McpService {
    use rmcp::transport::streamable_http_server::StreamableHttpServerConfig;
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_cancellation_token(cancel)
        .with_max_request_body_bytes(st.max_body)
        .disable_allowed_hosts();
    rmcp::transport::streamable_http_server::StreamableHttpService::new(
        move || Ok(super::team_mcp::TeamMcp::new(st.clone())),
        Arc::new(Default::default()),
        config,
    )
}

/// The team server's routes behind its guard.
pub fn router(st: St, cancel: tokio_util::sync::CancellationToken) -> Router {
    let mcp = mcp_service(st.clone(), cancel);
    let max = st.max_body;
    Router::new()
        .route(
            "/api/health",
            get(|| async { Json(json!({"ok": true, "team": true})) }),
        )
        .route("/api/search", get(search_handler))
        .route("/api/projects", get(projects))
        .route("/api/sessions", get(sessions))
        .route("/api/sessions/{id}", get(session))
        .route("/", get(search_page))
        .route("/login", get(login_page).post(login))
        .route(
            "/assets/memex.css",
            get(|| async { web::asset(crate::export::html::CSS, "text/css") }),
        )
        .route(
            "/assets/memex.js",
            get(|| async { web::asset(web::JS, "text/javascript") }),
        )
        .route(
            "/assets/favicon.svg",
            get(|| async { web::asset(web::ICON, "image/svg+xml") }),
        )
        .nest_service("/mcp", mcp)
        .fallback(|| async {
            ApiError {
                status: StatusCode::NOT_FOUND,
                code: "not_found",
                message: "no such endpoint; the team server serves /api/search, /api/projects, \
                          /api/sessions, /mcp and its pages"
                    .into(),
            }
        })
        .layer(axum::extract::DefaultBodyLimit::max(max))
        .layer(middleware::from_fn_with_state(st.clone(), team_guard))
        .with_state(st)
}

fn refusal(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status,
        code,
        message: message.into(),
    }
}

/// Whether a query string carries a token (by name or by its look).
fn token_in_query(q: &str) -> bool {
    q.split('&').any(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let k = k.to_ascii_lowercase();
        matches!(
            k.as_str(),
            "token" | "access_token" | "auth" | "authorization"
        ) || v.contains("mxt_")
            || v.contains("mxt%5F")
            || v.contains("mxt%5f")
    })
}

/// The token a request carries: `Authorization: Bearer …`, else its browser session's.
fn given_token(st: &TeamServer, req: &Request) -> Option<Result<Token, String>> {
    if let Some(v) = req.headers().get(header::AUTHORIZATION) {
        let Ok(v) = v.to_str() else {
            return Some(Err("the Authorization header is not text".into()));
        };
        let Some(t) = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
        else {
            return Some(Err(
                "the Authorization header is not `Bearer <token>`".into()
            ));
        };
        return Some(
            Token::parse(t).map_err(|e| format!("the bearer token cannot be a token: {e}")),
        );
    }
    let name = cookie_name(st);
    let cookie = req
        .headers()
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|c| {
            c.trim()
                .strip_prefix(name.as_str())?
                .strip_prefix('=')
                .map(str::to_owned)
        })?;
    Some(
        st.session_token(&cookie)
            .ok_or_else(|| "the browser's sign-in is unknown or expired".to_owned()),
    )
}

async fn team_guard(State(st): State<St>, req: Request, next: Next) -> Response {
    let ip = req.extensions().get::<Peer>().map(|p| p.0.ip());
    let path = req.uri().path().to_owned();
    if let Err(e) = guard::check_host(&st.policy, req.headers(), req.uri()) {
        tracing::info!(ip = ?ip, path, reason = %e.message, "team server: refused");
        return e.into_response();
    }
    let cors = match st.policy.check_origin(req.headers()) {
        Ok(c) => c,
        Err(e) => {
            tracing::info!(ip = ?ip, path, reason = %e.message, "team server: refused");
            return e.into_response();
        }
    };
    if req.uri().query().is_some_and(token_in_query) {
        tracing::warn!(ip = ?ip, path, "team server: refused a token in a URL");
        return refusal(
            StatusCode::BAD_REQUEST,
            "token_in_url",
            "a token goes in the Authorization header (or the sign-in form), never in a URL",
        )
        .into_response();
    }
    // JSON bodies only, within the size and time limits (a body sent slowly holds nothing).
    let mut req = match super::body_within_limits(st.max_body, req).await {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let open = matches!(path.as_str(), "/api/health" | "/login" | "/favicon.ico")
        || path.starts_with("/assets/");
    if open {
        return with_cors(next.run(req).await, cors);
    }
    if st.locked(ip) {
        tracing::warn!(ip = ?ip, path, "team server: refused (too many refused tokens)");
        let mut r = refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            "too many refused tokens from this address: wait and try again",
        )
        .into_response();
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("600"));
        return r;
    }
    let page =
        req.method() == axum::http::Method::GET && !path.starts_with("/api") && path != "/mcp";
    let why = match given_token(&st, &req) {
        None => "no token".to_owned(),
        Some(Err(why)) => why,
        Some(Ok(token)) => match st.team.authenticate(&token).await {
            Ok(member) => {
                req.extensions_mut().insert(Arc::new(member));
                return with_cors(next.run(req).await, cors);
            }
            Err(TeamError::BadToken) => "an unknown or revoked token".to_owned(),
            Err(e) => {
                tracing::warn!(error = %e, "team server: the team archive cannot be asked");
                return refusal(
                    StatusCode::BAD_GATEWAY,
                    "team_unavailable",
                    format!("the team archive cannot be asked: {e}"),
                )
                .into_response();
            }
        },
    };
    let wait = st.refused(ip);
    tracing::warn!(ip = ?ip, path, reason = %why, "team server: refused");
    tokio::time::sleep(wait).await;
    if page {
        return axum::response::Redirect::to("/login").into_response();
    }
    with_cors(
        refusal(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!("a member's token is needed (Authorization: Bearer mxt_…): {why}"),
        )
        .into_response(),
        cors,
    )
}

fn with_cors(mut res: Response, origin: Option<HeaderValue>) -> Response {
    if let Some(o) = origin {
        guard::cors_headers(res.headers_mut(), o);
    }
    res
}

/// The member the guard found.
fn member(req_member: Option<axum::Extension<Arc<Member>>>) -> Result<Arc<Member>, ApiError> {
    req_member.map(|m| m.0).ok_or_else(|| {
        refusal(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "a member's token is needed",
        )
    })
}

fn team_error(e: TeamError) -> ApiError {
    match e {
        TeamError::Invalid(m) => ApiError::bad_parameter(m),
        other => {
            tracing::warn!(error = %other, "team server: the team archive failed");
            refusal(
                StatusCode::BAD_GATEWAY,
                "team_unavailable",
                format!("the team archive could not be read: {other}"),
            )
        }
    }
}

/// What `/api/search` takes on the team server: the local search's parameters but `host` and
/// `session` (a team's sessions are named by member), at scope team.
const SEARCH_NAMES: [&str; 10] = [
    "q", "limit", "agent", "project", "since", "until", "level", "mode", "member", "scope",
];

async fn run_search(st: &TeamServer, me: &Member, q: Option<String>) -> Result<Value, ApiError> {
    let p = Params::parse(q, &SEARCH_NAMES)?;
    let bad = |e: search::BadParam| {
        let name = if e.name == "query" { "q" } else { e.name };
        ApiError::bad_parameter(format!("`{name}` {}", e.reason))
    };
    let mut request = search::SearchRequest::from_query(|k| p.get(k)).map_err(bad)?;
    if request.query.trim().is_empty() {
        return Err(ApiError::bad_parameter(
            "`q` is required: the words to look for",
        ));
    }
    match request.scope.as_deref() {
        None | Some("team") => {}
        Some(other) => {
            return Err(ApiError::bad_parameter(format!(
                "`scope` is team on the team server (it holds no archive of its own), got `{other}`"
            )));
        }
    }
    request.scope = Some("team".into());
    let params = request.check(1000).map_err(bad)?;
    let vector = st.query_vector(&params).await;
    let found = crate::team::search_as(
        &st.team,
        me,
        &params,
        vector.as_ref().map(|(m, v)| (m.as_str(), v.as_slice())),
    )
    .await
    .map_err(team_error)?;
    crate::team::answer(&params, None, Ok(found), vector.is_some()).map_err(team_error)
}

async fn search_handler(
    State(st): State<St>,
    m: Option<axum::Extension<Arc<Member>>>,
    RawQuery(q): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let me = member(m)?;
    run_search(&st, &me, q).await.map(Json)
}

async fn projects(
    State(st): State<St>,
    m: Option<axum::Extension<Arc<Member>>>,
    RawQuery(q): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let me = member(m)?;
    Params::parse(q, &[])?;
    let p = st.team.projects(&me).await.map_err(team_error)?;
    Ok(Json(json!({"member": me.name, "projects": p})))
}

async fn sessions(
    State(st): State<St>,
    m: Option<axum::Extension<Arc<Member>>>,
    RawQuery(q): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let me = member(m)?;
    let p = Params::parse(q, &["project", "member", "agent", "limit", "offset"])?;
    let limit = p.number("limit", 20, 1, 1000)?;
    let offset = p.number("offset", 0, 0, u32::MAX)?;
    let (project, who, agent) = (p.get("project"), p.get("member"), p.get("agent"));
    if let Some(w) = &who {
        memex_team::check_name(w).map_err(|e| ApiError::bad_parameter(format!("`member` {e}")))?;
    }
    if let Some(a) = &agent {
        search::check_agent(a).map_err(|e| ApiError::bad_parameter(format!("`agent` {e}")))?;
    }
    let rows = st
        .team
        .sessions(
            &me,
            &memex_team::read::SessionFilter {
                project: project.as_deref(),
                member: who.as_deref(),
                agent: agent.as_deref(),
                limit: limit.into(),
                offset: offset.into(),
            },
        )
        .await
        .map_err(team_error)?;
    Ok(Json(json!({"sessions": rows})))
}

async fn session(
    State(st): State<St>,
    m: Option<axum::Extension<Arc<Member>>>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Json<Value>, ApiError> {
    let me = member(m)?;
    super::check_id(&id)?;
    let p = Params::parse(q, &["member", "limit", "offset"])?;
    let limit = p.number("limit", 200, 1, 1000)?;
    let offset = p.number("offset", 0, 0, u32::MAX)?;
    let who = p.get("member");
    if let Some(w) = &who {
        memex_team::check_name(w).map_err(|e| ApiError::bad_parameter(format!("`member` {e}")))?;
    }
    match st
        .team
        .session(&me, &id, who.as_deref(), limit.into(), offset.into())
        .await
        .map_err(team_error)?
    {
        Some((s, items)) => Ok(Json(json!({"session": s, "items": items}))),
        // The same answer whether it does not exist or the member may not read it.
        None => Err(refusal(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no shared session `{id}` in your projects"),
        )),
    }
}

// ---- pages ----

#[derive(Template)]
#[template(path = "web/team_login.html")]
struct LoginPage {
    title: &'static str,
    member: String,
}

struct Row {
    member: String,
    project: String,
    agent: String,
    level: String,
    time: String,
    snippet: String,
    session: String,
}

#[derive(Template)]
#[template(path = "web/team_search.html")]
struct SearchPage {
    title: &'static str,
    member: String,
    q: String,
    level: String,
    project: String,
    who: String,
    rows: Vec<Row>,
    asked: bool,
    notice: Option<String>,
    error: Option<String>,
    levels: &'static [&'static str],
}

fn render(t: impl Template) -> Response {
    match t.render() {
        Ok(html) => web::html_response(StatusCode::OK, html),
        Err(e) => ApiError::internal(e).into_response(),
    }
}

async fn login_page() -> Response {
    render(LoginPage {
        title: "Sign in",
        member: String::new(),
    })
}

/// `POST /login` with `{"token": "mxt_…"}`: a member's token starts a browser session (a
/// cookie sent by this site's pages only, not readable by scripts).
async fn login(
    State(st): State<St>,
    peer: Option<axum::Extension<Peer>>,
    body: axum::body::Bytes,
) -> Response {
    let ip = peer.map(|p| p.0.0.ip());
    if st.locked(ip) {
        return refusal(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            "too many refused tokens from this address: wait and try again",
        )
        .into_response();
    }
    let given = serde_json::from_slice::<Value>(&body).ok().and_then(|v| {
        v["token"]
            .as_str()
            .map(|t| zeroize::Zeroizing::new(t.to_owned()))
    });
    let Some(given) = given else {
        return ApiError::bad_parameter("the body must be {\"token\": \"mxt_…\"}").into_response();
    };
    let token = match Token::parse(&given) {
        Ok(t) => t,
        Err(e) => {
            let wait = st.refused(ip);
            tracing::warn!(ip = ?ip, reason = %e, "team server: refused a sign-in");
            tokio::time::sleep(wait).await;
            return refusal(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                format!("not a token: {e}"),
            )
            .into_response();
        }
    };
    match st.team.authenticate(&token).await {
        Ok(_) => {
            let id = st.signin(&token);
            let mut res = StatusCode::NO_CONTENT.into_response();
            // `Secure`: browsers keep it over HTTPS, and over plain HTTP on loopback only.
            if let Ok(v) = HeaderValue::from_str(&format!(
                "{}={id}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
                cookie_name(&st),
                SIGNIN_TTL.as_secs()
            )) {
                res.headers_mut().insert(header::SET_COOKIE, v);
            }
            res.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            res
        }
        Err(TeamError::BadToken) => {
            let wait = st.refused(ip);
            tracing::warn!(ip = ?ip, "team server: refused a sign-in (unknown or revoked token)");
            tokio::time::sleep(wait).await;
            refusal(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "that token is not valid for this team",
            )
            .into_response()
        }
        Err(e) => team_error(e).into_response(),
    }
}

async fn search_page(
    State(st): State<St>,
    m: Option<axum::Extension<Arc<Member>>>,
    RawQuery(q): RawQuery,
) -> Response {
    let me = match member(m) {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let p = match Params::parse(q.clone(), &SEARCH_NAMES) {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let g = |k: &str| p.get(k).unwrap_or_default();
    let mut page = SearchPage {
        title: "Team search",
        member: me.name.clone(),
        q: g("q"),
        level: g("level"),
        project: g("project"),
        who: g("member"),
        rows: Vec::new(),
        asked: !g("q").trim().is_empty(),
        notice: None,
        error: None,
        levels: search::LEVELS,
    };
    if page.asked {
        match run_search(&st, &me, q).await {
            Ok(v) => {
                page.notice = v["notice"].as_str().map(str::to_owned);
                let text = |h: &Value, k: &str| h[k].as_str().unwrap_or("").to_owned();
                page.rows = v["results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|h| Row {
                        member: text(h, "member"),
                        project: text(h, "project"),
                        agent: text(h, "agent"),
                        level: text(h, "level"),
                        time: web::short_time(h["timestamp"].as_str()),
                        snippet: crate::search::query::unmarked(&text(h, "snippet")),
                        session: text(h, "session_id"),
                    })
                    .collect();
            }
            Err(e) => page.error = Some(e.message),
        }
    }
    render(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_found_in_query_strings_by_name_and_by_look() {
        for q in [
            "q=x&token=abc",
            "access_token=abc",
            "q=mxt_0123",
            "q=x&member=MXT%5F00",
            "Authorization=Bearer",
        ] {
            assert!(
                token_in_query(&q.to_ascii_lowercase()) || token_in_query(q),
                "{q}"
            );
        }
        for q in ["q=webhook&limit=5", "q=tokens&level=talks", "q=mxt"] {
            assert!(!token_in_query(q), "{q}");
        }
    }
}
