//! Token usage as reports read it: the quarter-hour roll-up of every model call (migration
//! 0020 keeps it current from `messages`), Memex's own model spend, and the injection log.

use std::collections::HashMap;

use rusqlite::types::Value as Sql;
use rusqlite::{Connection, params_from_iter};
use serde::Serialize;

use crate::read::Filter;

/// Milliseconds in a quarter hour: the roll-up's bucket.
pub const QUARTER_MS: i64 = 900_000;

/// Tokens and calls of one session and model in one quarter hour. Counts are billed tokens
/// (input without cache reads, output with reasoning); `*_above` are the tokens past 200,000
/// in a single call, which long-context prices apply to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QuarterRow {
    pub quarter: i64,
    pub first_ts: i64,
    pub last_ts: i64,
    pub session_pk: i64,
    pub model: String,
    pub calls: u64,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
    pub reasoning: u64,
    pub input_above: u64,
    pub output_above: u64,
    pub cache_read_above: u64,
    pub cache_write_above: u64,
    /// What the agent itself said these calls cost, over the `agent_costed` calls that said.
    pub agent_cost: f64,
    pub agent_costed: u64,
}

/// The session a row belongs to, as reports name it.
#[derive(Debug, Clone, Serialize)]
pub struct UsageSession {
    pub agent: String,
    pub session_id: String,
    /// The git work tree, else the working folder.
    pub project: Option<String>,
    pub title: Option<String>,
    pub model: Option<String>,
    /// The machine that archived it; `None`: this one.
    pub host: Option<String>,
    pub is_subagent: bool,
}

fn u(v: i64) -> u64 {
    v.max(0) as u64
}

/// The roll-up's columns, in [`quarter_row`]'s order.
const COLUMNS: &str = "q.quarter, q.first_ts, q.last_ts, q.session_pk, q.model, q.calls, q.input,
    q.output, q.cache_read, q.cache_write, q.reasoning, q.input_above, q.output_above,
    q.cache_read_above, q.cache_write_above, q.agent_cost, q.agent_costed";

fn quarter_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<QuarterRow> {
    Ok(QuarterRow {
        quarter: r.get(0)?,
        first_ts: r.get(1)?,
        last_ts: r.get(2)?,
        session_pk: r.get(3)?,
        model: r.get(4)?,
        calls: u(r.get(5)?),
        input: u(r.get(6)?),
        output: u(r.get(7)?),
        cache_read: u(r.get(8)?),
        cache_write: u(r.get(9)?),
        reasoning: u(r.get(10)?),
        input_above: u(r.get(11)?),
        output_above: u(r.get(12)?),
        cache_read_above: u(r.get(13)?),
        cache_write_above: u(r.get(14)?),
        agent_cost: r.get::<_, f64>(15)?.max(0.0),
        agent_costed: u(r.get(16)?),
    })
}

/// The roll-up's rows the filter selects (agent, project, session, host), between `since` and
/// `until` (epoch ms, `until` excluded; both rounded down to the quarter hour), with their
/// sessions.
pub fn quarters(
    conn: &Connection,
    filter: &Filter,
) -> rusqlite::Result<(Vec<QuarterRow>, HashMap<i64, UsageSession>)> {
    let mut args: Vec<Sql> = Vec::new();
    let mut cond = Filter {
        since: None,
        until: None,
        ..filter.clone()
    }
    .sql(None, &mut args);
    if let Some(t) = filter.since {
        args.push(Sql::Integer(t.div_euclid(QUARTER_MS)));
        cond.push_str(&format!(" AND q.quarter >= ?{}", args.len()));
    }
    if let Some(t) = filter.until {
        args.push(Sql::Integer(t.div_euclid(QUARTER_MS)));
        cond.push_str(&format!(" AND q.quarter < ?{}", args.len()));
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM usage_quarters q JOIN sessions s ON s.id = q.session_pk
         WHERE {cond} ORDER BY q.quarter"
    );
    let mut st = conn.prepare(&sql)?;
    let rows = st
        .query_map(params_from_iter(args.iter()), quarter_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let sessions = sessions_of(conn, rows.iter().map(|r| r.session_pk))?;
    let rows = rows
        .into_iter()
        .filter(|r| sessions.contains_key(&r.session_pk))
        .collect();
    Ok((rows, sessions))
}

/// The named sessions, by primary key.
fn sessions_of(
    conn: &Connection,
    pks: impl Iterator<Item = i64>,
) -> rusqlite::Result<HashMap<i64, UsageSession>> {
    let mut want: Vec<i64> = pks.collect();
    want.sort_unstable();
    want.dedup();
    let mut out = HashMap::with_capacity(want.len());
    let mut st = conn.prepare_cached(concat!(
        "SELECT s.agent, s.session_id, COALESCE(NULLIF(s.git_root, ''), NULLIF(s.project_path, '')),
                s.title, s.model, ",
        crate::host_name_sql!(),
        ", s.is_subagent FROM sessions s WHERE s.id = ?1"
    ))?;
    for pk in want {
        // A session forgotten between the two reads is left out.
        let s = st.query_row([pk], |r| {
            Ok(UsageSession {
                agent: r.get(0)?,
                session_id: r.get(1)?,
                project: r.get(2)?,
                title: r.get(3)?,
                model: r.get(4)?,
                host: r.get(5)?,
                is_subagent: r.get::<_, i64>(6)? != 0,
            })
        });
        match s {
            Ok(s) => {
                out.insert(pk, s);
            }
            Err(rusqlite::Error::QueryReturnedNoRows) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Memex's own calls to a model (compaction, remote embedding) on one UTC day.
#[derive(Debug, Clone, Serialize)]
pub struct OwnSpend {
    pub day: String,
    pub provider: String,
    pub calls: u64,
    pub input: u64,
    pub output: u64,
}

/// Memex's own spend per UTC day and provider, from `since_day` to `until_day` (YYYY-MM-DD,
/// both included).
pub fn own_spend(
    conn: &Connection,
    since_day: Option<&str>,
    until_day: Option<&str>,
) -> rusqlite::Result<Vec<OwnSpend>> {
    let mut st = conn.prepare_cached(
        "SELECT day, provider, calls, tokens_input, tokens_output FROM llm_usage
         WHERE day >= COALESCE(?1, '') AND day <= COALESCE(?2, '9999') ORDER BY day, provider",
    )?;
    st.query_map([since_day, until_day], |r| {
        Ok(OwnSpend {
            day: r.get(0)?,
            provider: r.get(1)?,
            calls: u(r.get(2)?),
            input: u(r.get(3)?),
            output: u(r.get(4)?),
        })
    })?
    .collect()
}

/// Context the hooks added to prompts: per injection, when and how many tokens (estimated).
pub fn injected(
    conn: &Connection,
    since: Option<i64>,
    until: Option<i64>,
) -> rusqlite::Result<Vec<(i64, u64)>> {
    let mut st = conn.prepare_cached(
        "SELECT ts, tokens FROM injections
         WHERE items > 0 AND ts >= COALESCE(?1, 0) AND ts < COALESCE(?2, 9223372036854775807)
         ORDER BY ts",
    )?;
    st.query_map([since, until], |r| Ok((r.get(0)?, u(r.get(1)?))))?
        .collect()
}

/// The primary key of the session an agent's own id names (the newest when several agents
/// use it), for the status line.
pub fn session_pk(conn: &Connection, session_id: &str) -> rusqlite::Result<Option<i64>> {
    use rusqlite::OptionalExtension;
    conn.query_row(
        "SELECT id FROM sessions WHERE session_id = ?1 ORDER BY updated_at DESC LIMIT 1",
        [session_id],
        |r| r.get(0),
    )
    .optional()
}

/// The roll-up's rows of one session.
pub fn session_quarters(conn: &Connection, pk: i64) -> rusqlite::Result<Vec<QuarterRow>> {
    let mut st = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM usage_quarters q WHERE q.session_pk = ?1 ORDER BY q.quarter"
    ))?;
    st.query_map([pk], quarter_row)?.collect()
}

/// Brings `usage_calls` up to the messages written since the last pass (migration 0020's
/// `usage_progress`): per call the largest of each count (one statement), and for a cumulative
/// counter (Codex's `thread-total`) what each record added (one statement per record, in
/// order). Run at the end of a write transaction, after every full-text insert of it, so that
/// FTS5 writes its pending terms once (at this statement's journal, as it would at the commit).
pub fn catch_up(tx: &Connection) -> rusqlite::Result<()> {
    let mark: i64 = tx.query_row("SELECT through FROM usage_progress WHERE id = 1", [], |r| {
        r.get(0)
    })?;
    let top: i64 = tx.query_row("SELECT COALESCE(MAX(id), 0) FROM messages", [], |r| {
        r.get(0)
    })?;
    if top <= mark {
        return Ok(());
    }
    // One statement: a new call is one insert (the roll-up's insert trigger), a call seen
    // before takes the largest of each count.
    tx.execute(
        "INSERT INTO usage_calls
         SELECT session_pk, usage_key, MIN(ts), COALESCE(MAX(model), ''), COUNT(*),
                MAX(input_tokens), MAX(output_tokens), MAX(cache_read_tokens),
                MAX(cache_creation_tokens), MAX(reasoning_tokens), MAX(cost_usd)
         FROM usage_billed WHERE id > ?1 AND usage_key <> 'thread-total'
         GROUP BY session_pk, usage_key
         ON CONFLICT (session_pk, usage_key) DO UPDATE SET
           records = records + excluded.records,
           ts = MIN(ts, excluded.ts),
           model = CASE WHEN model = '' THEN excluded.model ELSE model END,
           input_tokens = MAX(input_tokens, excluded.input_tokens),
           output_tokens = MAX(output_tokens, excluded.output_tokens),
           cache_read_tokens = MAX(cache_read_tokens, excluded.cache_read_tokens),
           cache_creation_tokens = MAX(cache_creation_tokens, excluded.cache_creation_tokens),
           reasoning_tokens = MAX(reasoning_tokens, excluded.reasoning_tokens),
           cost_usd = MAX(COALESCE(cost_usd, excluded.cost_usd),
                          COALESCE(excluded.cost_usd, cost_usd))",
        [mark],
    )?;
    // Cumulative counters, record by record in order: each holds what it added.
    let ids: Vec<i64> = tx
        .prepare_cached(
            "SELECT id FROM usage_billed WHERE id > ?1 AND usage_key = 'thread-total' ORDER BY id",
        )?
        .query_map([mark], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut one = tx.prepare_cached(
        "INSERT OR IGNORE INTO usage_calls
         SELECT session_pk, usage_key, ts, model, records, input_tokens, output_tokens,
                cache_read_tokens, cache_creation_tokens, reasoning_tokens, cost_usd
         FROM usage_cumulative WHERE id = ?1",
    )?;
    for id in ids {
        one.execute([id])?;
    }
    tx.execute("UPDATE usage_progress SET through = ?1 WHERE id = 1", [top])?;
    Ok(())
}
