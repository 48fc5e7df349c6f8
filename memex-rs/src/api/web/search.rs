//! The search page (`/`) and its results fragment (`/search`): the form, the run through
//! `search::search`, snippets with the query's words marked.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::response::Response;

use super::{
    ApiError, ApiState, Params, agent_names, error_page, page, read, short_time, urlencode,
};
use crate::search;

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
    host: String,
    scope: String,
    member: String,
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
            host: g("host"),
            scope: g("scope"),
            member: g("member"),
        }
    }
}

const FORM_KEYS: &[&str] = &[
    "q", "level", "mode", "agent", "project", "since", "session", "host", "scope", "member",
];

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
    /// The team member who shared it (a hit of the team's archive, which has no page here).
    member: Option<String>,
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
        host: opt(&f.host),
        since: opt(&f.since),
        until: None,
        level: opt(&f.level),
        mode: opt(&f.mode),
        scope: opt(&f.scope),
        member: opt(&f.member),
    })
    .check(1000)
    {
        Ok(p) => p,
        Err(e) => {
            out.error = Some(format!("{}: {}", e.name, e.reason));
            return out;
        }
    };
    if params.reach != search::Reach::Local {
        match crate::team::scoped_search(
            st.pool.clone(),
            st.vectors.clone(),
            st.team.clone(),
            params,
        )
        .await
        {
            Ok(v) => {
                out.mode = match v["mode"].as_str() {
                    Some("hybrid") => "hybrid",
                    Some("vector") => "vector",
                    _ => "fts",
                };
                out.notice = v["notice"].as_str().map(str::to_owned);
                let terms = search::query::parse_query(&f.q);
                let (words, re) = (terms.len(), marker(&terms));
                let text = |h: &serde_json::Value, k: &str| h[k].as_str().unwrap_or("").to_owned();
                out.rows = v["results"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|h| {
                        let member = h["member"].as_str().map(str::to_owned);
                        let n = h["prompt_number"].as_i64().unwrap_or(0);
                        let matched: Vec<&str> = h["terms"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(|t| t.as_str())
                            .collect();
                        ResultRow {
                            partial: (!matched.is_empty() && matched.len() < words)
                                .then(|| matched.join(", ")),
                            href: if member.is_some() {
                                String::new()
                            } else {
                                format!(
                                    "/sessions/{}?talk={n}#prompt-{n}",
                                    urlencode(&text(h, "session_id"))
                                )
                            },
                            level: search::LEVELS
                                .iter()
                                .find(|l| **l == h["level"].as_str().unwrap_or(""))
                                .copied()
                                .unwrap_or("raw"),
                            agent: text(h, "agent"),
                            project: text(h, "project"),
                            time: short_time(h["timestamp"].as_str()),
                            matched: match h["match"].as_str() {
                                Some("fts") => "words",
                                Some("vector") => "meaning",
                                _ => "both",
                            },
                            pieces: pieces(&text(h, "snippet"), re.as_ref()),
                            title: format!("{} prompt {n}", text(h, "session_id")),
                            member,
                        }
                    })
                    .collect();
            }
            Err(e) => out.error = Some(e.to_string()),
        }
        return out;
    }
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
                    member: None,
                })
                .collect();
        }
        Err(e) => out.error = Some(e.message),
    }
    out
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
    /// Whether this machine is in a team (the scope switch is shown).
    team: bool,
}

#[derive(Template)]
#[template(path = "web/results.html")]
struct ResultsFragment {
    r: Results,
}

pub(super) async fn search_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
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
        team: st.team.is_some(),
    })
}

/// The results alone, for the search box's as-you-type updates.
pub(super) async fn search_results(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match Params::parse(q, FORM_KEYS) {
        Ok(p) => p,
        Err(e) => return error_page(e),
    };
    let f = Form::from(&p);
    let r = run_search(&st, &f).await;
    page(ResultsFragment { r })
}

#[cfg(test)]
mod tests {
    use super::*;

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
