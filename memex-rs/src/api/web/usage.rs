//! The usage page (`/usage`): what the agents cost per day (stacked by model or agent), the
//! most expensive sessions and projects, the cache hit ratio, and Memex's own spend: what
//! `memex usage` prints, over the days the form picks (the last 30 by default).

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::response::Response;
use memex_usage::report::{self, Cost, GroupCost, SessionCost};
use memex_usage::{Breakdown, Period};

use super::{ApiError, ApiState, Params, chart, error_page, page, read};
use crate::store::read::DayCount;
use crate::usage::{Pricing, UsageRequest};

#[derive(Template)]
#[template(path = "web/usage.html")]
struct UsagePage {
    nav: &'static str,
    title: &'static str,
    form: Form,
    zone: String,
    prices: String,
    totals: Cost,
    cache_hits: Option<String>,
    chart: chart::Chart,
    days: Vec<(String, Cost)>,
    sessions: Vec<SessionCost>,
    projects: Vec<GroupCost>,
    agents: Vec<GroupCost>,
    unpriced: Vec<String>,
    /// Memex's own spend: (provider and model, calls, tokens, cost).
    own: Vec<(String, u64, u64, String)>,
    /// Prompts the hooks added memory to, and the tokens they added.
    injected: (u64, u64),
}

/// The form's values, as the user gave them.
#[derive(Default)]
struct Form {
    since: String,
    until: String,
    agent: String,
    project: String,
    by_agent: bool,
}

fn cents_as_dollars(v: f64) -> String {
    format!("${:.2}", v / 100.0)
}

pub(super) async fn usage_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
    let p = match Params::parse(q, &["since", "until", "agent", "project", "by", "timezone"]) {
        Ok(p) => p,
        Err(e) => return error_page(e),
    };
    let by_agent = match p.get("by").as_deref() {
        None | Some("model") => false,
        Some("agent") => true,
        Some(other) => {
            return error_page(ApiError::bad_parameter(format!(
                "`by` must be model or agent, got `{other}`"
            )));
        }
    };
    let pricing = match Pricing::load(&st.settings) {
        Ok(p) => p,
        Err(e) => {
            return error_page(ApiError::bad_parameter(format!(
                "the price table cannot be read: {e}"
            )));
        }
    };
    let req = UsageRequest {
        since: Some(p.get("since").unwrap_or_else(|| "29d".into())),
        until: p.get("until"),
        agent: p.get("agent"),
        project: p.get("project"),
        timezone: p.get("timezone"),
        breakdown: Some("agent".into()),
        ..UsageRequest::default()
    };
    let plan = match req.check(pricing.zone) {
        Ok(plan) => plan,
        Err(e) => return error_page(ApiError::bad_parameter(e.to_string())),
    };
    let form = Form {
        since: p.get("since").unwrap_or_default(),
        until: p.get("until").unwrap_or_default(),
        agent: p.get("agent").unwrap_or_default(),
        project: p.get("project").unwrap_or_default(),
        by_agent,
    };
    let v = read(&st, move |c| {
        let t = &pricing.table;
        let scope = &plan.scope;
        // The roll-up read once; every part of the page is cut from it.
        let data = report::Rows::read(c, scope).map_err(ApiError::internal)?;
        let days = report::periods(
            c,
            &data,
            scope,
            Period::Daily,
            Breakdown::Agent,
            t,
            &pricing.own_models,
        )
        .map_err(ApiError::internal)?;
        let (sessions, _) = report::sessions(&data, scope, t, 10);
        let projects = report::by_group(&data, Breakdown::Project, t);
        let agents = report::by_group(&data, Breakdown::Agent, t);
        let zone = scope.zone();
        let first = scope.since.unwrap_or_else(|| zone.today()).to_string();
        let last = scope.until.unwrap_or_else(|| zone.today()).to_string();
        Ok((days, sessions, projects, agents, first, last, pricing))
    })
    .await;
    let (days, sessions, projects, agents, first, last, pricing) = match v {
        Ok(v) => v,
        Err(e) => return error_page(e),
    };
    let series: Vec<DayCount> = days
        .rows
        .iter()
        .flat_map(|r| {
            let parts: Vec<(String, f64)> = if by_agent {
                r.agents
                    .iter()
                    .map(|g| (g.name.clone(), g.cost.cost))
                    .collect()
            } else {
                r.model_breakdowns
                    .iter()
                    .map(|m| (m.model_name.clone(), m.cost.cost))
                    .collect()
            };
            parts.into_iter().map(|(name, cost)| DayCount {
                day: r.label.clone(),
                name,
                value: (cost * 100.0).round() as i64,
            })
        })
        .filter(|d| d.value > 0)
        .collect();
    let chart = chart::stacked_with(
        if by_agent {
            "Cost per day by agent"
        } else {
            "Cost per day by model"
        },
        "US dollars",
        &series,
        &first,
        &last,
        cents_as_dollars,
    );
    let origin = pricing
        .table
        .origins
        .iter()
        .map(|o| format!("{} ({}, {})", o.source, o.name, o.date))
        .collect::<Vec<_>>()
        .join("; then ");
    let own = days
        .own
        .iter()
        .fold(
            std::collections::BTreeMap::<String, (u64, u64, Option<f64>)>::new(),
            |mut m, o| {
                let key = format!(
                    "{}{}",
                    o.provider,
                    o.model
                        .as_deref()
                        .map(|m| format!(" {m}"))
                        .unwrap_or_default()
                );
                let e = m.entry(key).or_insert((0, 0, Some(0.0)));
                e.0 += o.calls;
                e.1 += o.input_tokens + o.output_tokens;
                e.2 = e.2.zip(o.cost).map(|(a, b)| a + b);
                m
            },
        )
        .into_iter()
        .map(|(k, (calls, tokens, cost))| {
            (
                k,
                calls,
                tokens,
                cost.map_or("unpriced".into(), |c| format!("${c:.2}")),
            )
        })
        .collect();
    let injected = days
        .injected
        .iter()
        .fold((0, 0), |(n, t), i| (n + i.injections, t + i.tokens));
    page(UsagePage {
        nav: "usage",
        title: "Usage and costs",
        zone: days.zone.clone(),
        prices: origin,
        cache_hits: days
            .totals
            .tokens
            .cache_hit_ratio()
            .map(|r| format!("{:.1} %", r * 100.0)),
        totals: days.totals.clone(),
        chart,
        days: days
            .rows
            .iter()
            .rev()
            .map(|r| (r.label.clone(), r.cost.clone()))
            .collect(),
        sessions,
        projects: projects.into_iter().take(10).collect(),
        agents,
        unpriced: days.unpriced.clone(),
        own,
        injected,
        form,
    })
}

/// The session page's cost: total, per model.
pub(super) struct SessionCostView {
    pub total: String,
    pub agent_said: Option<String>,
    pub models: Vec<(String, String, u64)>,
    pub cache_hits: Option<String>,
}

pub(super) fn session_cost(
    c: &rusqlite::Connection,
    pk: i64,
    pricing: &Pricing,
) -> rusqlite::Result<Option<SessionCostView>> {
    Ok(
        report::session(c, pk, &pricing.table)?.map(|(models, total)| SessionCostView {
            total: total.dollars(),
            agent_said: total.agent_cost.map(|a| format!("${a:.2}")),
            cache_hits: total
                .tokens
                .cache_hit_ratio()
                .map(|r| format!("{:.0} %", r * 100.0)),
            models: models
                .iter()
                .map(|m| {
                    let name = if m.priced_as.is_some() {
                        m.model_name.clone()
                    } else {
                        format!("{} (unpriced)", m.model_name)
                    };
                    (name, m.cost.dollars(), m.cost.tokens.total_tokens)
                })
                .collect(),
        }),
    )
}
