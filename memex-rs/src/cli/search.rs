//! `memex search`: full text and meaning, fused, at the level asked for.

use std::io::Write;

use ai_cli_session_collector::AdapterRegistry;
use anyhow::Result;

use super::models::vectors_for_reading;
use super::{Ctx, SearchArgs, check_agent, reader, user_error};
use crate::search;
use crate::store;

pub(super) fn search_cmd(ctx: &Ctx, a: SearchArgs) -> Result<()> {
    check_agent(&AdapterRegistry::new(), &a.request.agent)?;
    let (request, json) = (a.request, a.json);
    let params = request.clone().check(1000).map_err(|e| {
        let hint = match e.name {
            "limit" => "for example --limit 20",
            "level" => "for example --level talks",
            "mode" => "for example --mode fts",
            "since" | "until" => "for example --since 7d or --since 2026-06-01",
            _ => "see memex search --help",
        };
        user_error(format!("--{} {}", e.name, e.reason), hint)
    })?;
    if params.reach != search::Reach::Local {
        return search_scoped(ctx, &request, &params, json);
    }
    let mode = params.mode;
    // Meaning needs the model: the running service has it loaded, where this process would
    // load it for one query. Words alone are as quick here.
    let served = (mode != search::Mode::Fts)
        .then(|| store::lock::serving_addr(&ctx.resolved.settings.data_dir()))
        .flatten()
        .and_then(|addr| ask_service(ctx, &addr, &request));
    let res = match served {
        Some(res) => res,
        None => serde_json::to_value(search_here(ctx, &params)?)?,
    };
    print(&res, json)
}

/// `--scope team` (the team's archive) or `all` (this archive's answer and the team's, fused by
/// their ranks with RRF).
fn search_scoped(
    ctx: &Ctx,
    request: &search::SearchRequest,
    params: &search::SearchParams,
    json: bool,
) -> Result<()> {
    let (team, token) = super::team::joined(ctx)?;
    let joined = crate::team::Joined { team, token };
    let conn = reader(ctx)?;
    let (rt, vectors) = vectors_for_reading(ctx, &conn, params.mode != search::Mode::Fts)?;
    let embedded = {
        let _entered = rt.enter();
        crate::team::query_vector(&vectors, &conn, &params.query)
    };
    let query_vector = embedded.as_ref().map(|(m, v)| (m.as_str(), v.as_slice()));
    let local = if params.reach == search::Reach::All {
        let local_request = search::SearchRequest {
            scope: None,
            member: None,
            ..request.clone()
        };
        Some(
            match store::lock::serving_addr(&ctx.resolved.settings.data_dir())
                .and_then(|addr| ask_service(ctx, &addr, &local_request))
            {
                Some(v) => v,
                None => {
                    let local_params = search::SearchParams {
                        reach: search::Reach::Local,
                        member: None,
                        ..params.clone()
                    };
                    serde_json::to_value(
                        search::search(
                            &conn,
                            &search::Semantic::of(&vectors, rt.handle()),
                            &local_params,
                        )
                        .map_err(explain_search_error)?,
                    )?
                }
            },
        )
    } else {
        None
    };
    let team = rt.block_on(crate::team::search(&joined, params, query_vector));
    let res = crate::team::answer(params, local, team, query_vector.is_some())
        .map_err(super::team::explained)?;
    print(&res, json)
}

/// The search in this process.
fn search_here(ctx: &Ctx, params: &search::SearchParams) -> Result<search::SearchResponse> {
    let conn = reader(ctx)?;
    let (rt, vectors) = vectors_for_reading(ctx, &conn, params.mode != search::Mode::Fts)?;
    let found = search::search(&conn, &search::Semantic::of(&vectors, rt.handle()), params);
    #[expect(
        clippy::mem_forget,
        reason = "the process ends once the answer is printed: freeing the model, its \
                  tokenizer and LanceDB's state first would add about 8 ms to every search \
                  made without the service"
    )]
    std::mem::forget((rt, vectors));
    found.map_err(explain_search_error)
}

/// A search's error as the user reads it, with what to do.
fn explain_search_error(e: search::SearchError) -> anyhow::Error {
    match e {
        search::SearchError::NoVectors(_) => user_error(
            e.to_string(),
            "`memex status` shows the vector layer; --mode fts searches without it",
        ),
        search::SearchError::TooManyTerms(_) => user_error(
            e.to_string(),
            "keep the words that matter; a \"quoted phrase\" counts as one",
        ),
        other => other.into(),
    }
}

/// The same search asked of the service that serves this data directory (`GET /api/search`;
/// it answers with the settings it started with), or `None` when it cannot answer it: then it
/// is searched here, quietly when the service is not listening or refuses the parameters
/// (this process then says why), with a note on stderr otherwise (it failed, timed out, or
/// answered what this version does not read).
fn ask_service(ctx: &Ctx, addr: &str, r: &search::SearchRequest) -> Option<serde_json::Value> {
    let pairs = r.to_query();
    let query: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let service = crate::client::Service::of(&ctx.resolved.settings, Some(addr));
    let answer = service.get_json(
        "/api/search",
        &query,
        SERVICE_SEARCH_TIMEOUT,
        SERVICE_CONNECT_TIMEOUT,
    );
    use crate::client::ClientError;
    match answer {
        // Only an answer of the shape this version prints.
        Ok(a) if a["mode"].is_string() && a["results"].is_array() => Some(a),
        // Not listening (gone, or not yet), or a service without this endpoint, or parameters
        // it refuses (searching here says what is wrong, with a hint): quietly here.
        Err(ref e) if e.is_connect() => None,
        Err(ClientError::Refused {
            status: 400 | 404, ..
        }) => None,
        // Anything else the user should know of: it may be why the answer differs or is late.
        other => {
            let why = match other {
                Ok(_) => "an answer this version does not read".to_owned(),
                Err(e) => match std::error::Error::source(&e) {
                    Some(cause) if !matches!(e, ClientError::Refused { .. }) => {
                        format!("{e}: {cause}")
                    }
                    _ => e.to_string(),
                },
            };
            eprintln!(
                "note: asked the running service at {}: {why}; searching here instead",
                service.describe()
            );
            None
        }
    }
}

/// How long a search waits for the service (a search takes tens of milliseconds; a service
/// that is slower than searching here is not waited for long).
const SERVICE_SEARCH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const SERVICE_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

/// Prints a search answer (the JSON of [`search::SearchResponse`], from here or the service):
/// as it is with `json`, else one result per entry, and the notice on stderr.
fn print(res: &serde_json::Value, json: bool) -> Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string(res)?)?;
        return Ok(());
    }
    if let Some(n) = res["notice"].as_str() {
        eprintln!("note: {n}");
    }
    let results = res["results"].as_array().map_or(&[][..], Vec::as_slice);
    if results.is_empty() {
        writeln!(out, "no matches")?;
    }
    let text = |h: &serde_json::Value, k: &str| h[k].as_str().unwrap_or("").to_owned();
    for h in results {
        writeln!(
            out,
            "{} {} {} #{} {} {}{}\n    {}",
            h["timestamp"].as_str().unwrap_or("-"),
            text(h, "agent"),
            text(h, "session_id"),
            h["prompt_number"].as_i64().unwrap_or(0),
            text(h, "kind"),
            text(h, "project"),
            h["host"]
                .as_str()
                .map(|m| format!(" @{m}"))
                .unwrap_or_default(),
            text(h, "snippet")
        )?;
        if let Some(m) = h["member"].as_str() {
            writeln!(out, "    shared by {m} with the team")?;
        }
        let terms: Vec<&str> = h["terms"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_str())
            .collect();
        if !terms.is_empty() {
            writeln!(out, "    matched: {}", terms.join(", "))?;
        }
    }
    Ok(())
}
