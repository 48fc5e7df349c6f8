//! The web interface at `/` of `memex serve`: search, sessions, a session as a conversation,
//! projects, a dashboard, and live updates (server-sent events). It is part of the API's router,
//! behind the same guard (Host, Origin, token), and reads through the same functions as the
//! JSON endpoints (`search::search`, `store::read`, `export::view`, the compact and injection
//! statistics); what only a page shows (the dashboard's per-day counts, the projects, a page of
//! a long session's talks) is read in `store::read` next to the rest. Pages are askama templates (every transcript text
//! escaped); the one stylesheet and the one small script are served by the binary; the
//! Content-Security-Policy allows nothing from anywhere else.

mod chart;

use askama::Template;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{ApiError, ApiState, Params, check_id, find, read};
use crate::export::html::{CSS, SessionHtml, thousands};
use crate::search;
use crate::store::read as store;

const JS: &str = include_str!("../../../assets/web/memex.js");
const ICON: &str = include_str!("../../../assets/web/favicon.svg");

/// What a page may load: its own stylesheet and script, its own API; nothing else, no frames.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// Sessions per page of the list.
const PAGE: u32 = 50;
/// Talks per page of a session: a session of 50,000 messages opens as fast as a short one.
const TALKS_PER_PAGE: usize = 100;
/// Tool output shown on a page, per call (the downloads have it whole).
const MAX_OUTPUT: usize = 16 * 1024;

pub(super) fn routes() -> Router<ApiState> {
    Router::new()
        .route("/", get(search_page))
        .route("/search", get(search_results))
        .route("/sessions", get(sessions_page))
        .route("/sessions/{id}", get(session_page))
        .route("/projects", get(projects_page))
        .route("/dashboard", get(dashboard_page))
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

fn asset(body: &'static str, ty: &'static str) -> Response {
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

fn html_response(status: StatusCode, html: String) -> Response {
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

#[derive(Template)]
#[template(path = "web/error.html")]
struct ErrorPage {
    nav: &'static str,
    title: &'static str,
    message: String,
}

// ---- search ----

/// What the search form holds.
#[derive(Default)]
struct Form {
    q: String,
    level: String,
    mode: String,
    agent: String,
    project: String,
    since: String,
    session: String,
}

impl Form {
    fn from(p: &Params) -> Form {
        let g = |k: &str| p.get(k).unwrap_or_default();
        Form {
            q: g("q"),
            level: g("level"),
            mode: g("mode"),
            agent: g("agent"),
            project: g("project"),
            since: g("since"),
            session: g("session"),
        }
    }
}

const FORM_KEYS: &[&str] = &["q", "level", "mode", "agent", "project", "since", "session"];

/// One result, ready for the template: the snippet in pieces, the matches marked.
struct ResultRow {
    href: String,
    level: &'static str,
    agent: String,
    project: String,
    time: String,
    matched: &'static str,
    /// The query's words it has, when it has not all of them.
    partial: Option<String>,
    pieces: Vec<(String, bool)>,
    title: String,
}

struct Results {
    rows: Vec<ResultRow>,
    notice: Option<String>,
    mode: &'static str,
    error: Option<String>,
    asked: bool,
}

/// What marks the query's words in the snippets of one search (built once for all its rows): a
/// phrase (or a word the query language split, like `snake_case`) whole where its words stand
/// together, else word by word.
fn marker(terms: &[search::query::Term]) -> Option<regex::Regex> {
    let mut words: Vec<String> = terms
        .iter()
        .filter(|t| t.literal.contains(' '))
        .map(|t| {
            t.literal
                .split(' ')
                .filter(|w| !w.is_empty())
                .map(regex::escape)
                .collect::<Vec<_>>()
                .join(r"[\W_]+")
        })
        .collect();
    words.extend(search::query::term_words(terms));
    search::query::any_of(&words)
}

/// The snippet without its `**` markers (its escaped `*` and `\` as they were), cut into
/// pieces with what `re` finds marked.
fn pieces(snippet: &str, re: Option<&regex::Regex>) -> Vec<(String, bool)> {
    let text = search::query::unmarked(snippet);
    let Some(re) = re else {
        return vec![(text, false)];
    };
    let mut out = Vec::new();
    let mut at = 0;
    for m in search::query::whole_words(re, &text) {
        if m.start() > at {
            out.push((text[at..m.start()].to_owned(), false));
        }
        out.push((m.as_str().to_owned(), true));
        at = m.end();
    }
    if at < text.len() {
        out.push((text[at..].to_owned(), false));
    }
    out
}

async fn run_search(st: &ApiState, f: &Form) -> Results {
    let mut out = Results {
        rows: Vec::new(),
        notice: None,
        mode: "",
        error: None,
        asked: !f.q.trim().is_empty(),
    };
    if !out.asked {
        return out;
    }
    let opt = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_owned());
    let params = match (search::SearchRequest {
        query: f.q.clone(),
        limit: Some(30),
        agent: opt(&f.agent),
        project: opt(&f.project),
        session: opt(&f.session),
        since: opt(&f.since),
        until: None,
        level: opt(&f.level),
        mode: opt(&f.mode),
    })
    .check(1000)
    {
        Ok(p) => p,
        Err(e) => {
            out.error = Some(format!("{}: {}", e.name, e.reason));
            return out;
        }
    };
    let (vectors, rt) = (st.vectors.clone(), tokio::runtime::Handle::current());
    let res = read(st, move |c| {
        search::search(c, &search::Semantic::of(&vectors, &rt), &params)
            .map_err(|e| ApiError::bad_parameter(e.to_string()))
    })
    .await;
    match res {
        Ok(r) => {
            out.mode = r.mode;
            out.notice = r.notice;
            let terms = search::query::parse_query(&f.q);
            let (words, re) = (terms.len(), marker(&terms));
            out.rows = r
                .results
                .into_iter()
                .map(|h| ResultRow {
                    partial: (!h.terms.is_empty() && h.terms.len() < words)
                        .then(|| h.terms.join(", ")),
                    href: format!(
                        "/sessions/{}?talk={n}#prompt-{n}",
                        urlencode(&h.session_id),
                        n = h.prompt_number
                    ),
                    level: h.level,
                    agent: h.agent,
                    project: h.project.unwrap_or_default(),
                    time: short_time(h.timestamp.as_deref()),
                    matched: match h.matched {
                        "fts" => "words",
                        "vector" => "meaning",
                        other => other,
                    },
                    pieces: pieces(&h.snippet, re.as_ref()),
                    title: format!("{} prompt {}", h.session_id, h.prompt_number),
                })
                .collect();
        }
        Err(e) => out.error = Some(e.message),
    }
    out
}

fn urlencode(s: &str) -> String {
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

#[derive(Template)]
#[template(path = "web/search.html")]
struct SearchPage {
    nav: &'static str,
    title: &'static str,
    f: Form,
    r: Results,
    agents: Vec<String>,
    levels: &'static [&'static str],
}

#[derive(Template)]
#[template(path = "web/results.html")]
struct ResultsFragment {
    r: Results,
}

fn agent_names() -> Vec<String> {
    ai_cli_session_collector::AdapterRegistry::new()
        .all()
        .map(|a| a.name().to_owned())
        .collect()
}

async fn search_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match Params::parse(q, FORM_KEYS) {
        Ok(p) => p,
        Err(e) => return error_page(e),
    };
    let f = Form::from(&p);
    let r = run_search(&st, &f).await;
    page(SearchPage {
        nav: "search",
        title: "Search",
        f,
        r,
        agents: agent_names(),
        levels: search::LEVELS,
    })
}

/// The results alone, for the search box's as-you-type updates.
async fn search_results(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match Params::parse(q, FORM_KEYS) {
        Ok(p) => p,
        Err(e) => return error_page(e),
    };
    let f = Form::from(&p);
    let r = run_search(&st, &f).await;
    page(ResultsFragment { r })
}

// ---- sessions ----

struct SessionLine {
    href: String,
    id: String,
    title: String,
    agent: String,
    project: String,
    updated: String,
    messages: i64,
    prompts: i64,
    subagent: bool,
}

#[derive(Template)]
#[template(path = "web/sessions.html")]
struct SessionsPage {
    nav: &'static str,
    title: &'static str,
    rows: Vec<SessionLine>,
    agent: String,
    project: String,
    agents: Vec<String>,
    prev: Option<String>,
    next: Option<String>,
}

fn short_time(t: Option<&str>) -> String {
    store::minute(t).unwrap_or_default()
}

async fn sessions_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match Params::parse(q, &["agent", "project", "page"]) {
        Ok(p) => p,
        Err(e) => return error_page(e),
    };
    let pageno = match p.number("page", 1, 1, 100_000) {
        Ok(n) => n,
        Err(e) => return error_page(e),
    };
    let agent = p.get("agent");
    if let Some(a) = &agent
        && let Err(e) = search::check_agent(a)
    {
        return error_page(ApiError::bad_parameter(e));
    }
    let filter = store::Filter {
        agent: agent.clone(),
        project: p.get("project"),
        ..Default::default()
    };
    let rows = read(&st, move |c| {
        store::list_sessions(c, &filter, PAGE + 1, (pageno - 1) * PAGE).map_err(ApiError::internal)
    })
    .await;
    let mut rows = match rows {
        Ok(r) => r,
        Err(e) => return error_page(e),
    };
    let more = rows.len() > PAGE as usize;
    rows.truncate(PAGE as usize);
    let link = |n: u32| {
        let mut q = vec![format!("page={n}")];
        if let Some(a) = &agent {
            q.push(format!("agent={}", urlencode(a)));
        }
        if let Some(pr) = p.get("project") {
            q.push(format!("project={}", urlencode(&pr)));
        }
        format!("/sessions?{}", q.join("&"))
    };
    page(SessionsPage {
        nav: "sessions",
        title: "Sessions",
        rows: rows
            .into_iter()
            .map(|s| SessionLine {
                href: format!("/sessions/{}", urlencode(&s.session_id)),
                title: s
                    .title
                    .clone()
                    .map(|t| crate::export::view::one_line(&t, 100))
                    .unwrap_or_else(|| s.session_id.clone()),
                id: s.session_id,
                agent: s.agent,
                project: s.project.unwrap_or_default(),
                updated: short_time(s.updated_at.as_deref()),
                messages: s.messages,
                prompts: s.prompts,
                subagent: s.is_subagent,
            })
            .collect(),
        agent: agent.clone().unwrap_or_default(),
        project: p.get("project").unwrap_or_default(),
        agents: agent_names(),
        prev: (pageno > 1).then(|| link(pageno - 1)),
        next: more.then(|| link(pageno + 1)),
    })
}

#[derive(Template)]
#[template(path = "web/session.html")]
struct SessionPage {
    nav: &'static str,
    title: String,
    s: SessionHtml,
    export_base: String,
    observations: Vec<(i64, String)>,
    parent: Option<String>,
    updated: String,
    /// The session's number, for its live events.
    pk: i64,
    pager: Pager,
}

#[derive(Template)]
#[template(path = "web/session_live.html")]
struct SessionFragment {
    s: SessionHtml,
    updated: String,
    pk: i64,
    pager: Pager,
}

/// Links to the talks before and after the ones shown.
#[derive(Default)]
struct Pager {
    earlier: Option<String>,
    later: Option<String>,
    /// `talks 101–200 of 3,847`, when the session has more than one page.
    showing: Option<String>,
}

/// Which talks a page shows: the page holding `talk`, or the one starting at `from`, else the
/// first; as the range of prompt numbers to read, and the pager.
fn window(
    numbers: &[i64],
    talk: Option<i64>,
    from: Option<i64>,
    base: &str,
) -> ((i64, i64), Pager) {
    let len = numbers.len();
    let start = match (talk, from) {
        (Some(n), _) => numbers.partition_point(|&x| x < n) / TALKS_PER_PAGE * TALKS_PER_PAGE,
        (None, Some(f)) => numbers.partition_point(|&x| x < f),
        (None, None) => 0,
    }
    .min(len.saturating_sub(1));
    let end = (start + TALKS_PER_PAGE).min(len);
    if len <= TALKS_PER_PAGE {
        return ((0, i64::MAX), Pager::default());
    }
    let lo = if start == 0 { 0 } else { numbers[start] };
    let hi = if end == len {
        i64::MAX
    } else {
        numbers[end] - 1
    };
    let link = |i: usize| format!("{base}?from={}", numbers[i]);
    let pager = Pager {
        earlier: (start > 0).then(|| link(start.saturating_sub(TALKS_PER_PAGE))),
        later: (end < len).then(|| link(end)),
        showing: Some(format!(
            "talks {}–{} of {}",
            thousands(start as i64 + 1),
            thousands(end as i64),
            thousands(len as i64)
        )),
    };
    ((lo, hi), pager)
}

async fn session_page(
    State(st): State<ApiState>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Response {
    let p = match Params::parse(q, &["fragment", "talk", "from"]) {
        Ok(p) => p,
        Err(e) => return error_page(e),
    };
    let (talk, from) = match (
        p.number("talk", 0, 0, u32::MAX),
        p.number("from", 0, 0, u32::MAX),
    ) {
        (Ok(t), Ok(f)) => (
            (t > 0).then_some(i64::from(t)),
            (f > 0).then_some(i64::from(f)),
        ),
        (Err(e), _) | (_, Err(e)) => return error_page(e),
    };
    if let Err(e) = check_id(&id) {
        return error_page(e);
    }
    let v = read(&st, move |c| {
        let s = find(c, &id)?;
        let numbers = store::talk_numbers(c, s.pk).map_err(ApiError::internal)?;
        let base = format!("/sessions/{}", urlencode(&s.session_id));
        let (range, pager) = window(&numbers, talk, from, &base);
        let v = crate::export::view_of_talks(c, &s, Some(range)).map_err(ApiError::internal)?;
        Ok((v, pager))
    })
    .await;
    let (v, pager) = match v {
        Ok(v) => v,
        Err(e) => return error_page(e),
    };
    // What changes when the session does: its messages (an answer rewritten in place keeps
    // the count but moves the time).
    let updated = format!(
        "{}:{}",
        v.session.messages,
        v.session.updated_at.as_deref().unwrap_or("")
    );
    let s = SessionHtml::with_outputs_cut(&v, Some(MAX_OUTPUT));
    if p.get("fragment").is_some() {
        return page(SessionFragment {
            s,
            updated,
            pk: v.session.pk,
            pager,
        });
    }
    page(SessionPage {
        nav: "sessions",
        title: s.title.clone(),
        export_base: format!("/api/sessions/{}/export", urlencode(&s.id)),
        // The observations of the talks on this page (the links go to them).
        observations: v
            .observations
            .iter()
            .filter(|o| s.talks.iter().any(|t| t.number == o.prompt_number))
            .map(|o| (o.prompt_number, o.title.clone()))
            .collect(),
        parent: v.session.parent_session_id.clone(),
        updated,
        pk: v.session.pk,
        s,
        pager,
    })
}

// ---- projects ----

#[derive(Template)]
#[template(path = "web/projects.html")]
struct ProjectsPage {
    nav: &'static str,
    title: &'static str,
    rows: Vec<store::ProjectRow>,
}

async fn projects_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    if let Err(e) = Params::parse(q, &[]) {
        return error_page(e);
    }
    match read(&st, |c| {
        store::projects(c, 1000).map_err(ApiError::internal)
    })
    .await
    {
        Ok(rows) => page(ProjectsPage {
            nav: "projects",
            title: "Projects",
            rows,
        }),
        Err(e) => error_page(e),
    }
}

// ---- dashboard ----

struct Card {
    label: &'static str,
    value: String,
}

#[derive(Template)]
#[template(path = "web/dashboard.html")]
struct DashboardPage {
    nav: &'static str,
    title: &'static str,
    cards: Vec<Card>,
    charts: Vec<chart::Chart>,
    gone: Vec<store::GoneSession>,
    /// The days the charts cover.
    period: String,
}

#[derive(Template)]
#[template(path = "web/dashboard_live.html")]
struct DashboardFragment {
    cards: Vec<Card>,
    charts: Vec<chart::Chart>,
    gone: Vec<store::GoneSession>,
    /// The days the charts cover.
    period: String,
}

/// Days the dashboard's charts cover.
const DAYS: i64 = 30;

async fn dashboard_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match Params::parse(q, &["fragment"]) {
        Ok(p) => p,
        Err(e) => return error_page(e),
    };
    let now = chrono::Utc::now().timestamp_millis();
    let data = read(&st, move |c| {
        let e = ApiError::internal;
        // The 30 days up to the newest activity (today, on a machine in use).
        let end = store::newest_message_ms(c)
            .map_err(e)?
            .map_or(now, |t| t.min(now));
        let (since, until) = (
            end - (DAYS - 1) * 86_400_000 - end.rem_euclid(86_400_000),
            end + 1,
        );
        Ok((
            end,
            store::messages_per_day(c, since, until).map_err(e)?,
            store::agent_tokens_per_day(c, since, until).map_err(e)?,
            store::compaction_tokens_per_day(c, since, until).map_err(e)?,
            store::injections_per_day(c, since, until).map_err(e)?,
            crate::compact::queue::status(c).map_err(e)?,
            crate::inject::stats(c).map_err(e)?,
            store::status(c).map_err(e)?,
            store::sessions_with_source_gone(c, 20).map_err(e)?,
            crate::vector::indexer::Vectors::backlog(c).map_err(e)?,
        ))
    })
    .await;
    let (end, messages, tokens, compaction, injections, queue, inj, status, gone, backlog) =
        match data {
            Ok(d) => d,
            Err(e) => return error_page(e),
        };
    let last = chrono::DateTime::from_timestamp_millis(end)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_default();
    let first = chrono::DateTime::from_timestamp_millis(end - (DAYS - 1) * 86_400_000)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .unwrap_or_default();
    let pending: i64 = queue
        .jobs
        .values()
        .map(|states| states.get("pending").copied().unwrap_or(0))
        .sum();
    let pct = |r: Option<f64>| r.map_or_else(|| "–".to_owned(), |r| format!("{:.0}%", r * 100.0));
    let ms = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.0} ms"));
    let cards = vec![
        Card {
            label: "sessions",
            value: thousands(status.sessions),
        },
        Card {
            label: "messages",
            value: thousands(status.messages),
        },
        Card {
            label: "compaction jobs waiting",
            value: thousands(pending),
        },
        Card {
            label: "messages waiting for vectors",
            value: thousands(backlog as i64),
        },
        Card {
            label: "tokens saved by summaries",
            value: chart::short(queue.tokens_saved.saved as f64),
        },
        Card {
            label: "injection hit rate (smart)",
            value: pct(inj.smart.hit_rate),
        },
        Card {
            label: "injection latency p50 / p95",
            value: format!("{} / {}", ms(inj.latency_ms.p50), ms(inj.latency_ms.p95)),
        },
        Card {
            label: "sessions whose transcript is gone",
            value: thousands(status.sessions_with_source_gone),
        },
    ];
    let charts = vec![
        chart::stacked(
            "Messages archived per day, by agent",
            "messages",
            &messages,
            &first,
            &last,
        ),
        chart::stacked(
            "Tokens the agents used per day, by model",
            "tokens",
            &tokens,
            &first,
            &last,
        ),
        chart::stacked(
            "Tokens spent on compaction per day, by provider",
            "tokens",
            &compaction,
            &first,
            &last,
        ),
        chart::stacked(
            "Memory injections per day",
            "prompts",
            &injections,
            &first,
            &last,
        ),
    ];
    let period = format!("{first} to {last}");
    if p.get("fragment").is_some() {
        return page(DashboardFragment {
            cards,
            charts,
            gone,
            period,
        });
    }
    page(DashboardPage {
        nav: "dashboard",
        title: "Dashboard",
        cards,
        charts,
        gone,
        period,
    })
}

// ---- signing in (when the service has a token) ----

#[derive(Template)]
#[template(path = "web/login.html")]
struct LoginPage {
    nav: &'static str,
    title: &'static str,
    needed: bool,
}

async fn login_page(State(st): State<ApiState>) -> Response {
    page(LoginPage {
        nav: "",
        title: "Sign in",
        needed: st.policy.token.is_some(),
    })
}

/// `POST /login` with `{"token": "..."}`: the token of the service, checked in constant time,
/// becomes a cookie the browser sends with the pages' reads (same site only, not readable by
/// scripts).
async fn login(State(st): State<ApiState>, body: axum::body::Bytes) -> Response {
    let Some(token) = &st.policy.token else {
        return StatusCode::NO_CONTENT.into_response();
    };
    let given: Option<String> = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["token"].as_str().map(str::to_owned));
    let ok = given.is_some_and(|g| super::constant_time_eq(g.as_bytes(), token.as_bytes()));
    if !ok {
        return ApiError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: "that is not the token of this service (MEMEX_API_TOKEN)".into(),
        }
        .into_response();
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    let cookie = format!(
        "{}={}; HttpOnly; SameSite=Strict; Path=/",
        super::guard::TOKEN_COOKIE,
        super::guard::cookie_value(token)
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_session_opens_at_the_page_of_the_talk_asked_for() {
        let numbers: Vec<i64> = (1..=250).collect();
        let ((lo, hi), p) = window(&numbers, None, None, "/s");
        assert_eq!((lo, hi), (0, 100));
        assert_eq!(p.later.as_deref(), Some("/s?from=101"));
        assert!(p.earlier.is_none());
        let ((lo, hi), p) = window(&numbers, Some(150), None, "/s");
        assert_eq!((lo, hi), (101, 200));
        assert_eq!(p.earlier.as_deref(), Some("/s?from=1"));
        assert_eq!(p.showing.as_deref(), Some("talks 101–200 of 250"));
        let ((lo, hi), p) = window(&numbers, None, Some(201), "/s");
        assert_eq!((lo, hi), (201, i64::MAX));
        assert!(p.later.is_none());
        // Short sessions: everything, no pager.
        let ((lo, hi), p) = window(&[1, 2, 3], Some(2), None, "/s");
        assert_eq!((lo, hi), (0, i64::MAX));
        assert!(p.showing.is_none());
        // A talk past the end shows the last page.
        let ((lo, _), _) = window(&numbers, Some(9999), None, "/s");
        assert_eq!(lo, 201);
    }

    #[test]
    fn snippets_lose_their_markers_and_mark_the_query_words() {
        let mark = |q: &str| marker(&search::query::parse_query(q));
        let p = pieces(
            "…the **failing** test **fails** on **CI**…",
            mark("\"failing\" CI").as_ref(),
        );
        let marked: Vec<&str> = p.iter().filter(|x| x.1).map(|x| x.0.as_str()).collect();
        assert_eq!(marked, ["failing", "CI"]);
        let text: String = p.iter().map(|x| x.0.as_str()).collect();
        assert_eq!(text, "…the failing test fails on CI…");
        // A bare word marks its other forms too, as the search matched them.
        let p = pieces(
            "…the failing test fails on CI…",
            mark("failing CI").as_ref(),
        );
        let marked: Vec<&str> = p.iter().filter(|x| x.1).map(|x| x.0.as_str()).collect();
        assert_eq!(marked, ["failing", "fails", "CI"]);
        assert_eq!(urlencode("a b/é"), "a%20b%2F%C3%A9");
        let p = pieces(
            "fix **verify**_**signature** and the signature",
            mark("verify_signature").as_ref(),
        );
        let marked: Vec<&str> = p.iter().filter(|x| x.1).map(|x| x.0.as_str()).collect();
        assert_eq!(marked, ["verify_signature", "signature"]);
    }
}
