//! A usage report as it arrives from outside, defined and checked in one place for every
//! surface: the CLI's flags (`memex usage daily --since 7d`), the MCP tool `usage_report`'s
//! arguments and `GET /api/usage`'s query string all hold a [`UsageRequest`], and
//! [`UsageRequest::check`] turns it into a report to run or names what was wrong.

use std::collections::HashMap;
use std::path::Path;

use memex_usage::report::{self, Block, Cost, PeriodReport, SessionCost};
use memex_usage::{Breakdown, Period, PriceError, PriceTable, Scope, Zone};
use rmcp::schemars;
use rusqlite::Connection;
use serde_json::{Value, json};

use crate::config::Settings;
use crate::search::{BadParam, check_agent, check_host, limit_of};
use crate::store::read::Filter;

/// The most sessions one report lists.
pub const MAX_SESSIONS: u32 = 1000;

/// What a usage report covers and how it is cut.
#[derive(Debug, Clone, Default, clap::Args, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageRequest {
    /// daily (the default), weekly, monthly, session (the most expensive sessions) or blocks
    /// (the 5-hour billing windows of Claude subscriptions).
    #[arg(skip)]
    pub report: Option<String>,
    /// The first day: 2026-06-01, 20260601, today, yesterday, or an age (7d, 2w), in the
    /// report's time zone.
    #[arg(long)]
    pub since: Option<String>,
    /// The last day, included (as `since`).
    #[arg(long)]
    pub until: Option<String>,
    /// The agent by name: claude, codex, gemini, copilot, opencode, qwen, goose, crush, pi,
    /// amp, aider, kiro, cline, cursor-ide …
    #[arg(long)]
    pub agent: Option<String>,
    /// A project path (its cwd, git root or sub-folders) or part of a project name.
    #[arg(long)]
    pub project: Option<String>,
    /// Only what this machine archived (with sync): its name or id as `memex hosts` shows
    /// them, or `local`.
    #[arg(long)]
    pub host: Option<String>,
    /// Besides the models, each period broken down by `agent` or `project` (`model`: models
    /// only; a bare --breakdown shows the models in the table).
    #[arg(long, num_args = 0..=1, default_missing_value = "model", value_name = "BY")]
    pub breakdown: Option<String>,
    /// The time zone whose days are counted: an IANA name (UTC, Europe/Berlin, Asia/Tokyo);
    /// default: `[usage] timezone`, else the system's.
    #[arg(long)]
    pub timezone: Option<String>,
    /// session: how many sessions, most expensive first (default 50, at most 1000).
    #[arg(long, value_name = "N")]
    pub limit: Option<i64>,
}

/// The names of a report's parameters in a query string (`GET /api/usage`).
pub const QUERY_NAMES: [&str; 9] = [
    "report",
    "since",
    "until",
    "agent",
    "project",
    "host",
    "breakdown",
    "timezone",
    "limit",
];

/// A checked report.
#[derive(Debug, Clone)]
pub struct Plan {
    pub kind: Kind,
    pub scope: Scope,
    pub breakdown: Breakdown,
    pub limit: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Periods(Period),
    Sessions,
    Blocks,
}

fn bad(name: &'static str, reason: impl ToString) -> BadParam {
    BadParam {
        name,
        reason: reason.to_string(),
    }
}

fn given(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl UsageRequest {
    /// A report from a query string's values (`get` gives one by its name in [`QUERY_NAMES`]).
    pub fn from_query(get: impl Fn(&str) -> Option<String>) -> Result<UsageRequest, BadParam> {
        let limit = limit_of(&get)?;
        Ok(UsageRequest {
            report: get("report"),
            since: get("since"),
            until: get("until"),
            agent: get("agent"),
            project: get("project"),
            host: get("host"),
            breakdown: get("breakdown"),
            timezone: get("timezone"),
            limit,
        })
    }

    /// The report to run, or what is wrong; `zone` is the configured default.
    pub fn check(&self, zone: Zone) -> Result<Plan, BadParam> {
        let kind = match given(&self.report).as_deref() {
            None | Some("daily") => Kind::Periods(Period::Daily),
            Some("weekly") => Kind::Periods(Period::Weekly),
            Some("monthly") => Kind::Periods(Period::Monthly),
            Some("session") | Some("sessions") => Kind::Sessions,
            Some("blocks") => Kind::Blocks,
            Some(other) => {
                return Err(bad(
                    "report",
                    format!("must be daily, weekly, monthly, session or blocks, got `{other}`"),
                ));
            }
        };
        let zone = match given(&self.timezone) {
            None => zone,
            Some(z) => Zone::parse(&z).map_err(|e| bad("timezone", e))?,
        };
        let day = |v: &Option<String>, name: &'static str| {
            given(v)
                .map(|s| zone.parse_day(&s).map_err(|e| bad(name, e)))
                .transpose()
        };
        let since = day(&self.since, "since")?;
        let until = day(&self.until, "until")?;
        if let (Some(s), Some(u)) = (since, until)
            && s > u
        {
            return Err(bad("until", format!("is before since ({u} < {s})")));
        }
        let agent = given(&self.agent);
        if let Some(a) = &agent {
            check_agent(a).map_err(|e| bad("agent", e))?;
        }
        let host = given(&self.host);
        if let Some(h) = &host {
            check_host(h).map_err(|e| bad("host", e))?;
        }
        let project = given(&self.project);
        if project.as_ref().is_some_and(|p| p.len() > 4096) {
            return Err(bad("project", "is longer than 4096 bytes"));
        }
        let breakdown = match given(&self.breakdown) {
            None => Breakdown::Model,
            Some(b) => Breakdown::parse(&b).ok_or_else(|| {
                bad(
                    "breakdown",
                    format!("must be model, agent or project, got `{b}`"),
                )
            })?,
        };
        if self.limit.is_some() && kind != Kind::Sessions {
            return Err(bad("limit", "applies to the session report only"));
        }
        if given(&self.breakdown).is_some() && !matches!(kind, Kind::Periods(_)) {
            return Err(bad(
                "breakdown",
                "applies to the daily, weekly and monthly reports",
            ));
        }
        let limit = match self.limit {
            None => 50,
            Some(n) if (1..=MAX_SESSIONS as i64).contains(&n) => n as usize,
            Some(n) => {
                return Err(bad(
                    "limit",
                    format!("must be 1 to {MAX_SESSIONS}, got {n}"),
                ));
            }
        };
        Ok(Plan {
            kind,
            scope: Scope {
                filter: Filter {
                    agent,
                    project,
                    host,
                    ..Filter::default()
                },
                since,
                until,
                zone: Some(zone),
            },
            breakdown,
            limit,
        })
    }
}

/// The prices and defaults reports use, from the settings and the data folder.
pub struct Pricing {
    pub table: PriceTable,
    pub zone: Zone,
    /// Memex's own model per provider (compaction), to price its spend.
    pub own_models: HashMap<String, String>,
}

impl Pricing {
    pub fn load(settings: &Settings) -> Result<Pricing, PriceError> {
        let user = (!settings.usage.prices.is_empty()).then(|| Path::new(&settings.usage.prices));
        let table = PriceTable::load(&settings.data_dir(), user)?;
        let zone = Zone::parse(&settings.usage.timezone).unwrap_or(Zone::Local);
        let own_models = crate::config::Provider::ALL
            .iter()
            .map(|p| {
                let s = settings.compact.provider_settings(*p);
                (p.name().to_owned(), s.model.clone())
            })
            .filter(|(_, m)| !m.is_empty())
            .collect();
        Ok(Pricing {
            table,
            zone,
            own_models,
        })
    }
}

/// A report's answer.
pub enum Answer {
    Periods(PeriodReport),
    Sessions {
        sessions: Vec<SessionCost>,
        totals: Cost,
        zone: String,
        prices: Vec<memex_usage::prices::Origin>,
    },
    Blocks {
        blocks: Vec<Block>,
        zone: String,
        prices: Vec<memex_usage::prices::Origin>,
    },
}

/// Runs a checked report.
pub fn run(conn: &Connection, pricing: &Pricing, plan: &Plan) -> rusqlite::Result<Answer> {
    let zone = plan.scope.zone();
    let prices = pricing.table.origins.clone();
    let data = report::Rows::read(conn, &plan.scope)?;
    Ok(match plan.kind {
        Kind::Periods(p) => Answer::Periods(report::periods(
            conn,
            &data,
            &plan.scope,
            p,
            plan.breakdown,
            &pricing.table,
            &pricing.own_models,
        )?),
        Kind::Sessions => {
            let (sessions, totals) =
                report::sessions(&data, &plan.scope, &pricing.table, plan.limit);
            Answer::Sessions {
                sessions,
                totals,
                zone: zone.name(),
                prices,
            }
        }
        Kind::Blocks => Answer::Blocks {
            blocks: report::blocks(
                &data.rows,
                &zone,
                &pricing.table,
                chrono::Utc::now().timestamp_millis(),
            ),
            zone: zone.name(),
            prices,
        },
    })
}

impl Answer {
    pub fn to_json(&self) -> Value {
        match self {
            Answer::Periods(r) => r.to_json(),
            Answer::Sessions {
                sessions,
                totals,
                zone,
                prices,
            } => {
                let mut t = serde_json::to_value(totals).unwrap_or(Value::Null);
                t["totalCost"] = json!(totals.cost);
                json!({"sessions": sessions, "totals": t, "timezone": zone, "prices": prices})
            }
            Answer::Blocks {
                blocks,
                zone,
                prices,
            } => json!({"blocks": blocks, "timezone": zone, "prices": prices}),
        }
    }
}
