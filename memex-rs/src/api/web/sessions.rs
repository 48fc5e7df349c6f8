//! The sessions list (`/sessions`), one session as a conversation (`/sessions/{id}`, a page
//! of talks at a time) and the projects (`/projects`).

use askama::Template;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;

use super::{
    ApiError, ApiState, Params, agent_names, check_id, error_page, find, page, read, short_time,
    urlencode,
};
use crate::export::html::{SessionHtml, thousands};
use crate::search;
use crate::store::read as store;

/// Sessions per page of the list.
const PAGE: u32 = 50;

/// Talks per page of a session: a session of 50,000 messages opens as fast as a short one.
const TALKS_PER_PAGE: usize = 100;

/// Tool output shown on a page, per call (the downloads have it whole).
const MAX_OUTPUT: usize = 16 * 1024;

struct SessionLine {
    href: String,
    id: String,
    title: String,
    agent: String,
    project: String,
    /// The machine that archived it ("" for this one).
    host: String,
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
    host: String,
    agents: Vec<String>,
    prev: Option<String>,
    next: Option<String>,
}

pub(super) async fn sessions_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match Params::parse(q, &["agent", "project", "host", "page"]) {
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
        return error_page(ApiError::bad_parameter(format!("`agent` {e}")));
    }
    let host = p.get("host");
    if let Some(h) = &host
        && let Err(e) = search::check_host(h)
    {
        return error_page(ApiError::bad_parameter(format!("`host` {e}")));
    }
    let filter = store::Filter {
        agent: agent.clone(),
        project: p.get("project"),
        host: host.clone(),
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
        if let Some(h) = &host {
            q.push(format!("host={}", urlencode(h)));
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
                host: s.host.unwrap_or_default(),
                updated: short_time(s.updated_at.as_deref()),
                messages: s.messages,
                prompts: s.prompts,
                subagent: s.is_subagent,
            })
            .collect(),
        agent: agent.clone().unwrap_or_default(),
        project: p.get("project").unwrap_or_default(),
        host: host.clone().unwrap_or_default(),
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
    /// What its model calls cost (none: the agent recorded no usage).
    cost: Option<super::usage::SessionCostView>,
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

pub(super) async fn session_page(
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
    // A price table that cannot be read leaves the cost out; the usage page names the problem.
    let pricing = crate::usage::Pricing::load(&st.settings).ok();
    let v = read(&st, move |c| {
        let s = find(c, &id)?;
        let numbers = store::talk_numbers(c, s.pk).map_err(ApiError::internal)?;
        let base = format!("/sessions/{}", urlencode(&s.session_id));
        let (range, pager) = window(&numbers, talk, from, &base);
        let v = crate::export::view_of_talks(c, &s, Some(range)).map_err(ApiError::internal)?;
        let cost = match &pricing {
            Some(p) => super::usage::session_cost(c, s.pk, p).map_err(ApiError::internal)?,
            None => None,
        };
        Ok((v, pager, cost))
    })
    .await;
    let (v, pager, cost) = match v {
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
            .map(|o| (o.prompt_number, o.observation.title.clone()))
            .collect(),
        parent: v.session.parent_session_id.clone(),
        updated,
        pk: v.session.pk,
        s,
        pager,
        cost,
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

pub(super) async fn projects_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
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
}
