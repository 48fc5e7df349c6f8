//! Reports: tokens and dollars per day, week, month, session or 5-hour window, each broken
//! down by model (and by agent or project when asked), Memex's own spend beside them.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, NaiveDate, Utc};
use memex_store::read::Filter;
use memex_store::usage::{self as store, QuarterRow, UsageSession};
use rusqlite::Connection;
use serde::Serialize;

use crate::prices::{Billed, PriceTable, Split};
use crate::zone::{Zone, week_start};

/// How a report's periods are cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Daily,
    Weekly,
    Monthly,
}

impl Period {
    /// The JSON field that names a row's period, and the list's name.
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Period::Daily => ("date", "daily"),
            Period::Weekly => ("week", "weekly"),
            Period::Monthly => ("month", "monthly"),
        }
    }

    fn label(self, d: NaiveDate) -> String {
        match self {
            Period::Daily => d.format("%Y-%m-%d").to_string(),
            Period::Weekly => week_start(d).format("%Y-%m-%d").to_string(),
            Period::Monthly => d.format("%Y-%m").to_string(),
        }
    }
}

/// A second breakdown beside the models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Breakdown {
    #[default]
    Model,
    Agent,
    Project,
}

impl Breakdown {
    pub fn parse(s: &str) -> Option<Breakdown> {
        match s {
            "model" => Some(Breakdown::Model),
            "agent" => Some(Breakdown::Agent),
            "project" => Some(Breakdown::Project),
            _ => None,
        }
    }
}

/// What a report covers.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Agent, project, session and machine (its `since` and `until` are not read).
    pub filter: Filter,
    /// First and last day, both included, in `zone`.
    pub since: Option<NaiveDate>,
    pub until: Option<NaiveDate>,
    pub zone: Option<Zone>,
}

impl Scope {
    pub fn zone(&self) -> Zone {
        self.zone.unwrap_or(Zone::Local)
    }

    fn filter(&self) -> Filter {
        let z = self.zone();
        Filter {
            since: self.since.map(|d| z.start(d)),
            until: self.until.and_then(|d| d.succ_opt()).map(|d| z.start(d)),
            ..self.filter.clone()
        }
    }
}

/// Tokens by kind, as billed: `input` without cache reads, `output` with reasoning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tokens {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_tokens: u64,
    pub cache_read_tokens: u64,
    /// The part of output that was reasoning (already in `output_tokens`).
    pub reasoning_tokens: u64,
    pub total_tokens: u64,
    /// Model calls.
    pub calls: u64,
}

impl Tokens {
    fn add(&mut self, r: &QuarterRow) {
        self.input_tokens += r.input;
        self.output_tokens += r.output;
        self.cache_creation_tokens += r.cache_write;
        self.cache_read_tokens += r.cache_read;
        self.reasoning_tokens += r.reasoning;
        self.total_tokens += r.input + r.output + r.cache_write + r.cache_read;
        self.calls += r.calls;
    }

    fn merge(&mut self, o: &Tokens) {
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cache_creation_tokens += o.cache_creation_tokens;
        self.cache_read_tokens += o.cache_read_tokens;
        self.reasoning_tokens += o.reasoning_tokens;
        self.total_tokens += o.total_tokens;
        self.calls += o.calls;
    }

    /// The share of prompt tokens read from cache.
    pub fn cache_hit_ratio(&self) -> Option<f64> {
        let prompt = self.input_tokens + self.cache_creation_tokens + self.cache_read_tokens;
        (prompt > 0).then(|| self.cache_read_tokens as f64 / prompt as f64)
    }
}

/// Tokens and dollars of one group (a model, an agent, a project, a period).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    #[serde(flatten)]
    pub tokens: Tokens,
    /// US dollars for the priced tokens.
    pub cost: f64,
    /// Tokens of models the price table does not know: not in `cost`.
    pub unpriced_tokens: u64,
    /// What the agents themselves said these calls cost, where they said (`None`: none did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_cost: Option<f64>,
}

impl Cost {
    /// `$1.23`, and `$1.23+` when tokens of unpriced models are left out of it.
    pub fn dollars(&self) -> String {
        let plus = if self.unpriced_tokens > 0 { "+" } else { "" };
        format!("${:.2}{plus}", self.cost)
    }

    fn merge(&mut self, o: &Cost) {
        self.tokens.merge(&o.tokens);
        self.cost += o.cost;
        self.unpriced_tokens += o.unpriced_tokens;
        if let Some(a) = o.agent_cost {
            *self.agent_cost.get_or_insert(0.0) += a;
        }
    }
}

/// One model's part.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCost {
    pub model_name: String,
    /// The price table's entry it was priced as; `None`: unpriced.
    pub priced_as: Option<String>,
    #[serde(flatten)]
    pub cost: Cost,
}

/// One agent's or project's part.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupCost {
    pub name: String,
    #[serde(flatten)]
    pub cost: Cost,
}

/// Tokens of one model, split for long-context prices, and the agents' own figures.
#[derive(Debug, Clone, Default)]
struct Acc {
    tokens: Tokens,
    billed: Billed,
    agent_cost: f64,
    agent_costed: u64,
}

impl Acc {
    fn add(&mut self, r: &QuarterRow) {
        self.tokens.add(r);
        let b = &mut self.billed;
        add_split(&mut b.input, r.input, r.input_above);
        add_split(&mut b.output, r.output, r.output_above);
        add_split(&mut b.cache_write, r.cache_write, r.cache_write_above);
        add_split(&mut b.cache_read, r.cache_read, r.cache_read_above);
        self.agent_cost += r.agent_cost;
        self.agent_costed += r.agent_costed;
    }

    fn priced(&self, model: &str, prices: &PriceTable) -> (Option<String>, Cost) {
        let found = prices.lookup(model);
        let (cost, unpriced) = match found {
            Some((_, p)) => (p.cost(&self.billed), 0),
            None => (0.0, self.tokens.total_tokens),
        };
        (
            found.map(|(k, _)| k.to_owned()),
            Cost {
                tokens: self.tokens,
                cost,
                unpriced_tokens: unpriced,
                agent_cost: (self.agent_costed > 0).then_some(self.agent_cost),
            },
        )
    }
}

fn add_split(s: &mut Split, all: u64, above: u64) {
    s.all += all;
    s.above += above.min(all);
}

/// A model's name as reports show it ('' is a call whose agent did not name its model).
fn model_name(m: &str) -> String {
    if m.is_empty() {
        "unknown".into()
    } else {
        m.to_owned()
    }
}

/// Per model, priced, most expensive first.
fn models(by_model: &BTreeMap<String, Acc>, prices: &PriceTable) -> (Vec<ModelCost>, Cost) {
    let mut total = Cost::default();
    let mut out: Vec<ModelCost> = by_model
        .iter()
        .map(|(m, acc)| {
            let (priced_as, cost) = acc.priced(m, prices);
            total.merge(&cost);
            ModelCost {
                model_name: model_name(m),
                priced_as,
                cost,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.cost
            .cost
            .total_cmp(&a.cost.cost)
            .then(b.cost.tokens.total_tokens.cmp(&a.cost.tokens.total_tokens))
            .then(a.model_name.cmp(&b.model_name))
    });
    (out, total)
}

/// One period: its totals, its models, and the second breakdown when asked.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PeriodRow {
    #[serde(skip)]
    pub label: String,
    #[serde(flatten)]
    pub cost: Cost,
    /// Kept under ccusage's name: the day's total in dollars.
    pub total_cost: f64,
    pub models_used: Vec<String>,
    pub model_breakdowns: Vec<ModelCost>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<GroupCost>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<GroupCost>,
}

/// Memex's own calls to models in a period (compaction, remote embedding).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnRow {
    pub period: String,
    pub provider: String,
    /// The model it is priced as: the one configured for that provider now.
    pub model: Option<String>,
    pub calls: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// `None`: unpriced (a local model costs nothing and is priced at 0).
    pub cost: Option<f64>,
}

/// What the hooks added to prompts in a period (estimated tokens).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InjectedRow {
    pub period: String,
    pub injections: u64,
    pub tokens: u64,
}

/// A report over periods.
#[derive(Debug, Clone)]
pub struct PeriodReport {
    pub period: Period,
    pub zone: String,
    pub rows: Vec<PeriodRow>,
    pub totals: Cost,
    pub own: Vec<OwnRow>,
    pub injected: Vec<InjectedRow>,
    /// Models with tokens the price table does not know.
    pub unpriced: Vec<String>,
    pub prices: Vec<crate::prices::Origin>,
}

impl PeriodReport {
    /// The JSON form: `{"daily": [{"date", ...tokens, "totalCost", "modelBreakdowns"}],
    /// "totals", ...}` (`weekly`/`week`, `monthly`/`month`).
    pub fn to_json(&self) -> serde_json::Value {
        let (key, list) = self.period.names();
        let rows: Vec<serde_json::Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).expect("a report serializes");
                if let serde_json::Value::Object(o) = &mut v {
                    o.insert(key.into(), r.label.clone().into());
                }
                v
            })
            .collect();
        let mut totals = serde_json::to_value(&self.totals).expect("totals serialize");
        if let serde_json::Value::Object(o) = &mut totals {
            o.insert("totalCost".into(), self.totals.cost.into());
        }
        serde_json::json!({
            list: rows,
            "totals": totals,
            "timezone": self.zone,
            "unpriced": self.unpriced,
            "memex": self.own,
            "injected": self.injected,
            "prices": self.prices,
        })
    }
}

/// Who spends: the rows of a scope with their sessions.
pub struct Rows {
    pub rows: Vec<QuarterRow>,
    pub sessions: HashMap<i64, UsageSession>,
}

impl Rows {
    pub fn read(conn: &Connection, scope: &Scope) -> rusqlite::Result<Rows> {
        let (rows, sessions) = store::quarters(conn, &scope.filter())?;
        Ok(Rows { rows, sessions })
    }

    fn agent(&self, r: &QuarterRow) -> String {
        self.sessions
            .get(&r.session_pk)
            .map(|s| s.agent.clone())
            .unwrap_or_default()
    }

    fn project(&self, r: &QuarterRow) -> String {
        self.sessions
            .get(&r.session_pk)
            .and_then(|s| s.project.clone())
            .unwrap_or_else(|| "(no project)".into())
    }
}

/// Memex's own model spend is priced as the model configured for each provider now.
pub type OwnModels = HashMap<String, String>;

/// Tokens and dollars per period of `data` (read for `scope`); Memex's own spend and the
/// injections beside them are read from `conn`.
pub fn periods(
    conn: &Connection,
    data: &Rows,
    scope: &Scope,
    period: Period,
    breakdown: Breakdown,
    prices: &PriceTable,
    own_models: &OwnModels,
) -> rusqlite::Result<PeriodReport> {
    let zone = scope.zone();
    // Quarter → day: one conversion per quarter, not per row.
    let mut day_of: HashMap<i64, NaiveDate> = HashMap::new();
    let mut by_period: BTreeMap<String, BTreeMap<String, Acc>> = BTreeMap::new();
    let mut second: BTreeMap<String, BTreeMap<String, BTreeMap<String, Acc>>> = BTreeMap::new();
    for r in &data.rows {
        let d = *day_of
            .entry(r.quarter)
            .or_insert_with(|| zone.day(r.quarter * store::QUARTER_MS));
        let label = period.label(d);
        by_period
            .entry(label.clone())
            .or_default()
            .entry(r.model.clone())
            .or_default()
            .add(r);
        let group = match breakdown {
            Breakdown::Model => None,
            Breakdown::Agent => Some(data.agent(r)),
            Breakdown::Project => Some(data.project(r)),
        };
        if let Some(g) = group {
            second
                .entry(label)
                .or_default()
                .entry(g)
                .or_default()
                .entry(r.model.clone())
                .or_default()
                .add(r);
        }
    }
    let mut totals = Cost::default();
    let mut unpriced: Vec<String> = Vec::new();
    let mut rows = Vec::new();
    for (label, by_model) in &by_period {
        let (models, cost) = models(by_model, prices);
        for m in &models {
            if m.priced_as.is_none() && !unpriced.contains(&m.model_name) {
                unpriced.push(m.model_name.clone());
            }
        }
        let groups = second
            .get(label)
            .map(|g| groups(g, prices))
            .unwrap_or_default();
        totals.merge(&cost);
        rows.push(PeriodRow {
            label: label.clone(),
            total_cost: cost.cost,
            cost,
            models_used: models.iter().map(|m| m.model_name.clone()).collect(),
            model_breakdowns: models,
            agents: if breakdown == Breakdown::Agent {
                groups.clone()
            } else {
                Vec::new()
            },
            projects: if breakdown == Breakdown::Project {
                groups
            } else {
                Vec::new()
            },
        });
    }
    unpriced.sort();
    let own = own_spend(conn, scope, period, prices, own_models)?;
    let injected = injected(conn, scope, period)?;
    Ok(PeriodReport {
        period,
        zone: zone.name(),
        rows,
        totals,
        own,
        injected,
        unpriced,
        prices: prices.origins.clone(),
    })
}

fn groups(g: &BTreeMap<String, BTreeMap<String, Acc>>, prices: &PriceTable) -> Vec<GroupCost> {
    let mut out: Vec<GroupCost> = g
        .iter()
        .map(|(name, by_model)| GroupCost {
            name: name.clone(),
            cost: models(by_model, prices).1,
        })
        .collect();
    out.sort_by(|a, b| {
        b.cost
            .cost
            .total_cmp(&a.cost.cost)
            .then(a.name.cmp(&b.name))
    });
    out
}

/// Totals per agent or project (or model) over a scope, most expensive first.
pub fn by_group(data: &Rows, by: Breakdown, prices: &PriceTable) -> Vec<GroupCost> {
    let mut g: BTreeMap<String, BTreeMap<String, Acc>> = BTreeMap::new();
    for r in &data.rows {
        let name = match by {
            Breakdown::Model => model_name(&r.model),
            Breakdown::Agent => data.agent(r),
            Breakdown::Project => data.project(r),
        };
        g.entry(name)
            .or_default()
            .entry(r.model.clone())
            .or_default()
            .add(r);
    }
    groups(&g, prices)
}

/// Memex's own spend per period (its days are UTC days; only without agent, project, session
/// or machine filters, which it has none of).
fn own_spend(
    conn: &Connection,
    scope: &Scope,
    period: Period,
    prices: &PriceTable,
    own_models: &OwnModels,
) -> rusqlite::Result<Vec<OwnRow>> {
    if !scope.filter.is_empty() {
        return Ok(Vec::new());
    }
    let fmt = |d: Option<NaiveDate>| d.map(|d| d.format("%Y-%m-%d").to_string());
    let rows = store::own_spend(
        conn,
        fmt(scope.since).as_deref(),
        fmt(scope.until).as_deref(),
    )?;
    let mut out: BTreeMap<(String, String), OwnRow> = BTreeMap::new();
    for r in rows {
        let Ok(d) = NaiveDate::parse_from_str(&r.day, "%Y-%m-%d") else {
            continue;
        };
        let label = period.label(d);
        let model = own_models.get(&r.provider).cloned();
        let price = if r.provider == "ollama" {
            Some(0.0)
        } else {
            model
                .as_deref()
                .and_then(|m| prices.lookup(m))
                .map(|(_, p)| {
                    p.cost(&Billed {
                        input: Split {
                            all: r.input,
                            above: 0,
                        },
                        output: Split {
                            all: r.output,
                            above: 0,
                        },
                        ..Billed::default()
                    })
                })
        };
        let e = out
            .entry((label.clone(), r.provider.clone()))
            .or_insert_with(|| OwnRow {
                period: label,
                provider: r.provider.clone(),
                model,
                calls: 0,
                input_tokens: 0,
                output_tokens: 0,
                cost: Some(0.0),
            });
        e.calls += r.calls;
        e.input_tokens += r.input;
        e.output_tokens += r.output;
        e.cost = match (e.cost, price) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    Ok(out.into_values().collect())
}

fn injected(
    conn: &Connection,
    scope: &Scope,
    period: Period,
) -> rusqlite::Result<Vec<InjectedRow>> {
    if !scope.filter.is_empty() {
        return Ok(Vec::new());
    }
    let f = scope.filter();
    let zone = scope.zone();
    let mut out: BTreeMap<String, InjectedRow> = BTreeMap::new();
    for (ts, tokens) in store::injected(conn, f.since, f.until)? {
        let label = period.label(zone.day(ts));
        let e = out.entry(label.clone()).or_insert_with(|| InjectedRow {
            period: label,
            injections: 0,
            tokens: 0,
        });
        e.injections += 1;
        e.tokens += tokens;
    }
    Ok(out.into_values().collect())
}

/// One session's tokens and dollars.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCost {
    pub session_id: String,
    pub agent: String,
    pub project: Option<String>,
    pub title: Option<String>,
    pub host: Option<String>,
    pub first_activity: String,
    pub last_activity: String,
    #[serde(flatten)]
    pub cost: Cost,
    pub total_cost: f64,
    pub models_used: Vec<String>,
    pub model_breakdowns: Vec<ModelCost>,
}

/// Sessions, most expensive first, and their totals.
pub fn sessions(
    data: &Rows,
    scope: &Scope,
    prices: &PriceTable,
    limit: usize,
) -> (Vec<SessionCost>, Cost) {
    let zone = scope.zone();
    let mut by: HashMap<i64, (BTreeMap<String, Acc>, i64, i64)> = HashMap::new();
    for r in &data.rows {
        let e = by
            .entry(r.session_pk)
            .or_insert_with(|| (BTreeMap::new(), i64::MAX, i64::MIN));
        e.0.entry(r.model.clone()).or_default().add(r);
        e.1 = e.1.min(r.first_ts);
        e.2 = e.2.max(r.last_ts);
    }
    let mut totals = Cost::default();
    let mut out: Vec<SessionCost> = by
        .into_iter()
        .map(|(pk, (by_model, first, last))| {
            let (models, cost) = models(&by_model, prices);
            totals.merge(&cost);
            let s = data.sessions.get(&pk);
            SessionCost {
                session_id: s.map(|s| s.session_id.clone()).unwrap_or_default(),
                agent: s.map(|s| s.agent.clone()).unwrap_or_default(),
                project: s.and_then(|s| s.project.clone()),
                title: s.and_then(|s| s.title.clone()),
                host: s.and_then(|s| s.host.clone()),
                first_activity: local_time(&zone, first),
                last_activity: local_time(&zone, last),
                total_cost: cost.cost,
                cost,
                models_used: models.iter().map(|m| m.model_name.clone()).collect(),
                model_breakdowns: models,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_cost
            .total_cmp(&a.total_cost)
            .then(b.last_activity.cmp(&a.last_activity))
            .then(a.session_id.cmp(&b.session_id))
    });
    out.truncate(limit);
    (out, totals)
}

/// One session's cost (the session page): `None` when it has no usage.
pub fn session(
    conn: &Connection,
    pk: i64,
    prices: &PriceTable,
) -> rusqlite::Result<Option<(Vec<ModelCost>, Cost)>> {
    let rows = store::session_quarters(conn, pk)?;
    if rows.is_empty() {
        return Ok(None);
    }
    let mut by_model: BTreeMap<String, Acc> = BTreeMap::new();
    for r in &rows {
        by_model.entry(r.model.clone()).or_default().add(r);
    }
    Ok(Some(models(&by_model, prices)))
}

/// An instant as `2026-06-01T09:15:00+02:00` in the zone.
pub fn local_time(zone: &Zone, ms: i64) -> String {
    let t = DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default();
    match zone {
        Zone::Local => t
            .with_timezone(&chrono::Local)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
        Zone::Named(tz) => t
            .with_timezone(tz)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
    }
}

/// The length of a billing window.
pub const BLOCK_MS: i64 = 5 * 3_600_000;

/// A 5-hour billing window (as Claude subscriptions count them): it starts at the hour of its
/// first call (UTC) and holds the calls of the next five hours; a pause of more than five
/// hours starts a new one.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Block {
    pub start_time: String,
    pub end_time: String,
    /// The last call's time; `None` for a gap.
    pub actual_end_time: Option<String>,
    pub is_active: bool,
    pub is_gap: bool,
    #[serde(flatten)]
    pub cost: Cost,
    pub total_cost: f64,
    pub models_used: Vec<String>,
    /// Dollars per hour since the window's first call (the active window only).
    pub burn_rate_per_hour: Option<f64>,
    /// The window's cost at its end at that rate (the active window only).
    pub projected_cost: Option<f64>,
    /// Minutes until the active window ends.
    pub minutes_left: Option<i64>,
    #[serde(skip)]
    pub start_ms: i64,
    #[serde(skip)]
    pub end_ms: i64,
}

/// The billing windows of these rows, oldest first, gaps between them marked.
pub fn blocks(rows: &[QuarterRow], zone: &Zone, prices: &PriceTable, now_ms: i64) -> Vec<Block> {
    let mut rows: Vec<&QuarterRow> = rows.iter().collect();
    rows.sort_by_key(|r| (r.first_ts, r.last_ts));
    struct Open {
        start: i64,
        first: i64,
        last: i64,
        by_model: BTreeMap<String, Acc>,
    }
    let mut done: Vec<Open> = Vec::new();
    let mut cur: Option<Open> = None;
    for r in rows {
        let fresh = match &cur {
            None => true,
            Some(b) => r.first_ts - b.start > BLOCK_MS || r.first_ts - b.last > BLOCK_MS,
        };
        if fresh {
            done.extend(cur.take());
            let start = r.first_ts - r.first_ts.rem_euclid(3_600_000);
            cur = Some(Open {
                start,
                first: r.first_ts,
                last: r.last_ts,
                by_model: BTreeMap::new(),
            });
        }
        let b = cur.as_mut().expect("a window is open");
        b.last = b.last.max(r.last_ts);
        b.by_model.entry(r.model.clone()).or_default().add(r);
    }
    done.extend(cur);
    let mut out: Vec<Block> = Vec::new();
    let mut prev_last: Option<i64> = None;
    for b in done {
        if let Some(p) = prev_last
            && b.first - p > BLOCK_MS
        {
            out.push(Block {
                start_time: local_time(zone, p + BLOCK_MS),
                end_time: local_time(zone, b.first),
                actual_end_time: None,
                is_active: false,
                is_gap: true,
                cost: Cost::default(),
                total_cost: 0.0,
                models_used: Vec::new(),
                burn_rate_per_hour: None,
                projected_cost: None,
                minutes_left: None,
                start_ms: p + BLOCK_MS,
                end_ms: b.first,
            });
        }
        prev_last = Some(b.last);
        let (models, cost) = models(&b.by_model, prices);
        let end = b.start + BLOCK_MS;
        let active = now_ms - b.last < BLOCK_MS && now_ms < end;
        let hours = ((b.last - b.first) as f64 / 3_600_000.0).max(1.0 / 60.0);
        let spent = cost.cost;
        let rate = active.then(|| spent / hours);
        out.push(Block {
            start_time: local_time(zone, b.start),
            end_time: local_time(zone, end),
            actual_end_time: Some(local_time(zone, b.last)),
            is_active: active,
            is_gap: false,
            total_cost: cost.cost,
            cost,
            models_used: models.iter().map(|m| m.model_name.clone()).collect(),
            burn_rate_per_hour: rate,
            projected_cost: rate.map(|r| spent + r * ((end - now_ms).max(0) as f64 / 3_600_000.0)),
            minutes_left: active.then(|| (end - now_ms).max(0) / 60_000),
            start_ms: b.start,
            end_ms: end,
        });
    }
    out
}

/// What a status line shows: this session, today and the active window.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    pub session_cost: Option<f64>,
    pub today_cost: f64,
    pub block_cost: Option<f64>,
    pub block_minutes_left: Option<i64>,
    pub burn_rate_per_hour: Option<f64>,
    /// Today's tokens from models the price table does not know.
    pub unpriced_tokens: u64,
}

/// The status line's figures: reads today's and the last window's rows only.
pub fn status(
    conn: &Connection,
    session_id: Option<&str>,
    zone: &Zone,
    prices: &PriceTable,
    now_ms: i64,
) -> rusqlite::Result<Status> {
    let today = zone.day(now_ms);
    let day_start = zone.start(today);
    // The active window started at most five hours before its last call, which is at most
    // five hours ago: ten hours back (from the hour) hold all of it.
    let since = (now_ms - 2 * BLOCK_MS - 3_600_000).min(day_start);
    let (rows, _) = store::quarters(
        conn,
        &Filter {
            since: Some(since),
            ..Filter::default()
        },
    )?;
    let mut today_models: BTreeMap<String, Acc> = BTreeMap::new();
    for r in rows.iter().filter(|r| r.first_ts >= day_start) {
        today_models.entry(r.model.clone()).or_default().add(r);
    }
    let (_, today_cost) = models(&today_models, prices);
    let blocks = blocks(&rows, zone, prices, now_ms);
    let active = blocks.iter().rev().find(|b| b.is_active);
    let session_cost = match session_id.map(|s| store::session_pk(conn, s)).transpose()? {
        Some(Some(pk)) => session(conn, pk, prices)?.map(|(_, c)| c.cost),
        _ => None,
    };
    Ok(Status {
        session_cost,
        today_cost: today_cost.cost,
        block_cost: active.map(|b| b.total_cost),
        block_minutes_left: active.and_then(|b| b.minutes_left),
        burn_rate_per_hour: active.and_then(|b| b.burn_rate_per_hour),
        unpriced_tokens: today_cost.unpriced_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::params;

    const HOUR: i64 = 3_600_000;
    /// 2026-06-01T00:00:00Z.
    const T0: i64 = 1_780_272_000_000;

    fn archive() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let conn = memex_store::open(&dir.path().join("data")).unwrap();
        for (pk, agent, sid, project) in [
            (1, "claude", "s-claude", "/src/app"),
            (2, "codex", "s-codex", "/src/lib"),
        ] {
            conn.execute(
                "INSERT INTO sessions (id, agent, session_id, project_path) VALUES (?1, ?2, ?3, ?4)",
                params![pk, agent, sid, project],
            )
            .unwrap();
        }
        (dir, conn)
    }

    /// A message with usage, as ingest stores it, then the pass that ends a write.
    fn call(conn: &Connection, pk: i64, id: &str, key: &str, ts: i64, model: &str, t: [i64; 4]) {
        conn.execute(
            "INSERT INTO messages (session_pk, message_id, line, seq, role, kind, prompt_number,
               ts, model, usage_key, input_tokens, output_tokens, cache_read_tokens,
               cache_creation_tokens)
             VALUES (?1, ?2, 0, 0, 'assistant', 'text', 1, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![pk, id, ts, model, key, t[0], t[1], t[2], t[3]],
        )
        .unwrap();
        memex_store::usage::catch_up(conn).unwrap();
    }

    fn table() -> PriceTable {
        PriceTable::shipped()
    }

    fn utc() -> Scope {
        Scope {
            zone: Some(Zone::parse("UTC").unwrap()),
            ..Scope::default()
        }
    }

    /// The daily report in UTC with the shipped prices.
    fn daily(conn: &Connection) -> PeriodReport {
        let own = OwnModels::new();
        let data = Rows::read(conn, &utc()).unwrap();
        periods(
            conn,
            &data,
            &utc(),
            Period::Daily,
            Breakdown::Model,
            &table(),
            &own,
        )
        .unwrap()
    }

    #[test]
    fn a_call_repeated_on_several_records_counts_once_at_its_largest() {
        let (_d, conn) = archive();
        // Claude Code writes one response on three lines; the first carries a partial output.
        for (i, out) in [1, 120, 120].into_iter().enumerate() {
            call(
                &conn,
                1,
                &format!("l{i}"),
                "msg_1",
                T0 + i as i64,
                "claude-sonnet-4-20250514",
                [3, out, 1000, 200],
            );
        }
        let r = daily(&conn);
        assert_eq!(r.rows.len(), 1);
        let t = r.rows[0].cost.tokens;
        assert_eq!(
            (
                t.input_tokens,
                t.output_tokens,
                t.cache_read_tokens,
                t.cache_creation_tokens,
                t.calls
            ),
            (3, 120, 1000, 200, 1)
        );
        let want = 3.0 * 3e-6 + 120.0 * 15e-6 + 1000.0 * 0.3e-6 + 200.0 * 3.75e-6;
        assert!(
            (r.totals.cost - want).abs() < 1e-12,
            "{} {want}",
            r.totals.cost
        );
        // Forgetting a record of it keeps the call; forgetting all of them takes it away.
        conn.execute("DELETE FROM messages WHERE message_id IN ('l0', 'l1')", [])
            .unwrap();
        let r = daily(&conn);
        assert_eq!(r.totals.tokens.calls, 1);
        conn.execute("DELETE FROM messages WHERE message_id = 'l2'", [])
            .unwrap();
        let r = daily(&conn);
        assert!(r.rows.is_empty(), "{:?}", r.rows);
        assert_eq!(
            conn.query_row("SELECT COUNT(*) FROM usage_quarters", [], |r| r
                .get::<_, i64>(0))
                .unwrap(),
            0
        );
    }

    #[test]
    fn a_cumulative_counter_falls_on_the_days_it_grew() {
        let (_d, conn) = archive();
        // Codex: input holds the cached part; totals grow over two days.
        call(
            &conn,
            2,
            "t1",
            "thread-total",
            T0 + 23 * HOUR,
            "gpt-5",
            [1000, 10, 800, 0],
        );
        call(
            &conn,
            2,
            "t2",
            "thread-total",
            T0 + 25 * HOUR,
            "gpt-5",
            [3000, 30, 2000, 0],
        );
        call(
            &conn,
            2,
            "t3",
            "thread-total",
            T0 + 26 * HOUR,
            "gpt-5",
            [3000, 30, 2000, 0],
        );
        let r = daily(&conn);
        let days: Vec<(String, u64, u64, u64)> = r
            .rows
            .iter()
            .map(|d| {
                (
                    d.label.clone(),
                    d.cost.tokens.input_tokens,
                    d.cost.tokens.cache_read_tokens,
                    d.cost.tokens.output_tokens,
                )
            })
            .collect();
        assert_eq!(
            days,
            vec![
                ("2026-06-01".into(), 200, 800, 10),
                ("2026-06-02".into(), 800, 1200, 20)
            ]
        );
        // In Tokyo (+09:00) both fall on June 2.
        let tokyo = Scope {
            zone: Some(Zone::parse("Asia/Tokyo").unwrap()),
            ..Scope::default()
        };
        let r = periods(
            &conn,
            &Rows::read(&conn, &tokyo).unwrap(),
            &tokyo,
            Period::Daily,
            Breakdown::Model,
            &table(),
            &OwnModels::new(),
        )
        .unwrap();
        assert_eq!(r.rows.len(), 1);
        assert_eq!(r.rows[0].label, "2026-06-02");
    }

    #[test]
    fn a_call_after_the_top_message_was_forgotten_is_counted() {
        let (_d, conn) = archive();
        call(
            &conn,
            1,
            "a",
            "k1",
            T0,
            "claude-haiku-4-5-20251001",
            [100, 10, 0, 0],
        );
        // The newest message carries no usage; it is forgotten, and the next message takes
        // its id.
        conn.execute(
            "INSERT INTO messages (session_pk, message_id, line, seq, role, kind, prompt_number, ts)
             VALUES (1, 'prompt', 0, 0, 'user', 'user_prompt', 2, ?1)",
            [T0 + 1],
        )
        .unwrap();
        memex_store::usage::catch_up(&conn).unwrap();
        let top: i64 = conn
            .query_row("SELECT MAX(id) FROM messages", [], |r| r.get(0))
            .unwrap();
        conn.execute("DELETE FROM messages WHERE message_id = 'prompt'", [])
            .unwrap();
        call(
            &conn,
            2,
            "b",
            "thread-total",
            T0 + 2,
            "gpt-5",
            [50, 5, 0, 0],
        );
        let reused: i64 = conn
            .query_row("SELECT id FROM messages WHERE message_id = 'b'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(reused, top, "the test needs the id taken again");
        let r = daily(&conn);
        assert_eq!(r.totals.tokens.calls, 2);
        assert_eq!(r.totals.tokens.input_tokens, 150);
    }

    #[test]
    fn a_rewritten_cumulative_record_keeps_what_it_added() {
        let (_d, conn) = archive();
        for (i, total) in [100, 200, 300].into_iter().enumerate() {
            call(
                &conn,
                2,
                &format!("t{i}"),
                "thread-total",
                T0 + i as i64 * HOUR,
                "",
                [total, 0, 0, 0],
            );
        }
        let input = |conn: &Connection| daily(conn).totals.tokens.input_tokens;
        assert_eq!(input(&conn), 300);
        // The middle record learns its model (a record stored before the adapter named it).
        conn.execute(
            "UPDATE messages SET model = 'gpt-5' WHERE message_id = 't1'",
            [],
        )
        .unwrap();
        assert_eq!(input(&conn), 300);
        let by_hour: Vec<i64> = conn
            .prepare("SELECT input_tokens FROM usage_calls ORDER BY ts")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(by_hour, vec![100, 100, 100]);
    }

    #[test]
    fn unknown_models_are_unpriced_not_free() {
        let (_d, conn) = archive();
        call(&conn, 1, "a", "k1", T0, "in-house-model-7", [100, 10, 0, 0]);
        call(
            &conn,
            1,
            "b",
            "k2",
            T0,
            "claude-haiku-4-5-20251001",
            [100, 10, 0, 0],
        );
        let r = periods(
            &conn,
            &Rows::read(&conn, &utc()).unwrap(),
            &utc(),
            Period::Monthly,
            Breakdown::Model,
            &table(),
            &OwnModels::new(),
        )
        .unwrap();
        assert_eq!(r.unpriced, vec!["in-house-model-7".to_owned()]);
        conn.execute("UPDATE sessions SET project_path = '' WHERE id = 1", [])
            .unwrap();
        let by = by_group(
            &Rows::read(&conn, &utc()).unwrap(),
            Breakdown::Project,
            &table(),
        );
        assert_eq!(
            by.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(),
            ["(no project)"]
        );
        assert_eq!(r.totals.unpriced_tokens, 110);
        let m = &r.rows[0].model_breakdowns;
        let unknown = m
            .iter()
            .find(|m| m.model_name == "in-house-model-7")
            .unwrap();
        assert!(unknown.priced_as.is_none());
        assert_eq!(r.rows[0].label, "2026-06");
    }

    #[test]
    fn memex_own_spend_and_injections_stand_beside_the_agents() {
        let (_d, conn) = archive();
        call(
            &conn,
            1,
            "a",
            "k1",
            T0 + HOUR,
            "claude-haiku-4-5-20251001",
            [100, 10, 0, 0],
        );
        conn.execute(
            "INSERT INTO llm_usage (day, provider, calls, tokens_input, tokens_output)
             VALUES ('2026-06-01', 'anthropic', 3, 1000000, 100000),
                    ('2026-06-01', 'ollama', 9, 5000, 500)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO injections (ts, mode, items, tokens, latency_ms, refs)
             VALUES (?1, 'smart', 2, 340, 1.0, '[]'), (?1, 'smart', 0, 0, 1.0, '[]')",
            [T0 + 2 * HOUR],
        )
        .unwrap();
        let own: OwnModels = [(
            "anthropic".to_owned(),
            "claude-haiku-4-5-20251001".to_owned(),
        )]
        .into();
        let r = periods(
            &conn,
            &Rows::read(&conn, &utc()).unwrap(),
            &utc(),
            Period::Daily,
            Breakdown::Model,
            &table(),
            &own,
        )
        .unwrap();
        assert_eq!(r.own.len(), 2);
        let a = r.own.iter().find(|o| o.provider == "anthropic").unwrap();
        assert!(
            (a.cost.unwrap() - (1e6 * 1e-6 + 1e5 * 5e-6)).abs() < 1e-9,
            "{a:?}"
        );
        let o = r.own.iter().find(|o| o.provider == "ollama").unwrap();
        assert_eq!(o.cost, Some(0.0));
        assert_eq!(r.injected.len(), 1);
        assert_eq!((r.injected[0].injections, r.injected[0].tokens), (1, 340));
        // Not in the agents' totals.
        assert_eq!(r.totals.tokens.calls, 1);
    }

    #[test]
    fn billing_windows_start_on_the_hour_and_break_on_a_pause() {
        let (_d, conn) = archive();
        let now = T0 + 30 * HOUR;
        // 10:20 and 14:50 on day one (one window from 10:00); 22:00 (a pause of over 5 h: a
        // new window); today 05:40 (active: started 05:00, ends 10:00).
        for (i, at) in [
            10 * HOUR + 20 * 60_000,
            14 * HOUR + 50 * 60_000,
            22 * HOUR,
            29 * HOUR + 40 * 60_000,
        ]
        .into_iter()
        .enumerate()
        {
            call(
                &conn,
                1,
                &format!("m{i}"),
                &format!("k{i}"),
                T0 + at,
                "claude-sonnet-4-20250514",
                [10, 100, 0, 0],
            );
        }
        let b = blocks(
            &Rows::read(&conn, &utc()).unwrap().rows,
            &Zone::parse("UTC").unwrap(),
            &table(),
            now,
        );
        let shape: Vec<(bool, bool, u64)> = b
            .iter()
            .map(|b| (b.is_gap, b.is_active, b.cost.tokens.calls))
            .collect();
        assert_eq!(
            shape,
            vec![
                (false, false, 2),
                (true, false, 0),
                (false, false, 1),
                (true, false, 0),
                (false, true, 1)
            ]
        );
        assert_eq!(b[0].start_ms, T0 + 10 * HOUR);
        // The pause runs from five hours after the last call to the next call.
        assert_eq!(b[1].start_ms, T0 + 19 * HOUR + 50 * 60_000);
        assert_eq!(b[1].end_ms, T0 + 22 * HOUR);
        assert_eq!(b[4].start_ms, T0 + 29 * HOUR);
        assert_eq!(b[4].minutes_left, Some(4 * 60));
        assert!(b[4].burn_rate_per_hour.unwrap() > 0.0);
        let st = status(
            &conn,
            Some("s-claude"),
            &Zone::parse("UTC").unwrap(),
            &table(),
            now,
        )
        .unwrap();
        assert_eq!(st.block_minutes_left, Some(240));
        assert!((st.today_cost - b[4].total_cost).abs() < 1e-12);
        assert!(st.session_cost.unwrap() > st.today_cost);
    }
}
