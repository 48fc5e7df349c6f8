//! The dashboard (`/dashboard`): the archive's counts, the last 30 days per day, the
//! compact layers' and the injections' statistics.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::response::Response;

use super::{ApiError, ApiState, Params, chart, error_page, page, read};
use crate::export::html::thousands;
use crate::store::read as store;

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

pub(super) async fn dashboard_page(State(st): State<ApiState>, RawQuery(q): RawQuery) -> Response {
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
