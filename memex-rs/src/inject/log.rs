//! The injection log: every answer recorded (redacted) for `memex stats`, kept `log_days`.

use rusqlite::{Connection, params};
use serde::Serialize;
use serde_json::{Value, json};

use super::{Mode, Response};

/// One injection, for the log.
pub struct Record {
    pub ts: i64,
    pub mode: Mode,
    pub session_id: Option<String>,
    pub project: Option<String>,
    pub prompt: Option<String>,
    pub response: Response,
}

/// Writes one injection to the log, and drops the entries older than `log_days` (0: none).
/// `redact`: the prompt is redacted first, like every stored text.
pub fn record(conn: &Connection, r: &Record, redact: bool, log_days: u64) -> rusqlite::Result<()> {
    let refs: Vec<Value> = r
        .response
        .items
        .iter()
        .map(|i| {
            json!({"level": i.level.item(), "session_id": i.session_id, "prompt_number": i.prompt_number,
                   "confidence": i.confidence})
        })
        .collect();
    let prompt = r.prompt.as_deref().map(|p| {
        if redact {
            crate::redact::redact_text(p).0.into_owned()
        } else {
            p.to_owned()
        }
    });
    conn.execute(
        "INSERT INTO injections (ts, mode, session_id, project, items, tokens, best_confidence,
                                 latency_ms, skipped, refs, prompt)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![
            r.ts,
            r.mode.as_str(),
            r.session_id,
            r.project,
            r.response.items.len() as i64,
            r.response.tokens as i64,
            r.response.best_confidence,
            r.response.latency_ms,
            r.response.skipped,
            Value::Array(refs).to_string(),
            prompt,
        ],
    )?;
    if log_days > 0 {
        // An indexed range: almost always empty, one day's calls once a day.
        let before = r.ts - (log_days as i64) * 86_400_000;
        conn.execute("DELETE FROM injections WHERE ts < ?1", [before])?;
    }
    Ok(())
}

/// What `memex stats` and `/api/stats` show about injections.
#[derive(Debug, Clone, Serialize)]
pub struct InjectionStats {
    /// Every logged hook call.
    pub total: i64,
    pub smart: ModeStats,
    pub full: ModeStats,
    pub tokens_total: i64,
    /// The last 14 UTC days with injections, newest first.
    pub per_day: Vec<DayStats>,
    /// In the service, over the last 1,000 calls that looked something up.
    pub latency_ms: Latency,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModeStats {
    pub calls: i64,
    /// Calls where nothing was looked up (no vectors, a short prompt ...).
    pub skipped: i64,
    /// Calls that injected at least one item.
    pub with_items: i64,
    /// `with_items` over the calls that were not skipped.
    pub hit_rate: Option<f64>,
    pub tokens: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DayStats {
    pub day: String,
    pub injections: i64,
    pub with_items: i64,
    pub tokens: i64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub p50: Option<f64>,
    pub p95: Option<f64>,
}

pub fn stats(conn: &Connection) -> rusqlite::Result<InjectionStats> {
    let mode = |m: &str| -> rusqlite::Result<ModeStats> {
        conn.query_row(
            "SELECT COUNT(*), COUNT(skipped), COALESCE(SUM(items > 0), 0), COALESCE(SUM(tokens), 0)
             FROM injections WHERE mode = ?1",
            [m],
            |r| {
                let (calls, skipped, with_items): (i64, i64, i64) =
                    (r.get(0)?, r.get(1)?, r.get(2)?);
                let looked = calls - skipped;
                Ok(ModeStats {
                    calls,
                    skipped,
                    with_items,
                    hit_rate: (looked > 0).then(|| with_items as f64 / looked as f64),
                    tokens: r.get(3)?,
                })
            },
        )
    };
    let (smart, full) = (mode("smart")?, mode("full")?);
    let mut st = conn.prepare(
        "SELECT date(ts / 1000, 'unixepoch') AS day, COUNT(*), COALESCE(SUM(items > 0), 0),
                COALESCE(SUM(tokens), 0)
         FROM injections WHERE ts >= ?1 GROUP BY day ORDER BY day DESC",
    )?;
    let since = chrono::Utc::now().timestamp_millis() - 14 * 86_400_000;
    let per_day = st
        .query_map([since], |r| {
            Ok(DayStats {
                day: r.get(0)?,
                injections: r.get(1)?,
                with_items: r.get(2)?,
                tokens: r.get(3)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    let mut st = conn.prepare(
        "SELECT latency_ms FROM injections WHERE skipped IS NULL ORDER BY id DESC LIMIT 1000",
    )?;
    let mut lat: Vec<f64> = st
        .query_map([], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| crate::state::percentile(&lat, p);
    Ok(InjectionStats {
        total: smart.calls + full.calls,
        tokens_total: smart.tokens + full.tokens,
        smart,
        full,
        per_day,
        latency_ms: Latency {
            samples: lat.len(),
            p50: pct(0.5),
            p95: pct(0.95),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_log_days_of_calls() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::store::open(dir.path()).unwrap();
        let day = 86_400_000;
        let now = chrono::Utc::now().timestamp_millis();
        let rec = |ts: i64, prompt: &str| Record {
            ts,
            mode: Mode::Smart,
            session_id: None,
            project: None,
            prompt: Some(prompt.into()),
            response: Response::default(),
        };
        record(&conn, &rec(now - 200 * day, "old"), true, 0).unwrap();
        record(&conn, &rec(now - 91 * day, "older than 90 days"), true, 0).unwrap();
        record(&conn, &rec(now - 89 * day, "recent"), true, 0).unwrap();
        let n = |c: &Connection| -> i64 {
            c.query_row("SELECT COUNT(*) FROM injections", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(n(&conn), 3, "0 keeps everything");
        record(
            &conn,
            &rec(now, "key sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWx"),
            true,
            90,
        )
        .unwrap();
        assert_eq!(n(&conn), 2);
        let kept: Vec<String> = conn
            .prepare("SELECT prompt FROM injections ORDER BY ts")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(kept[0], "recent");
        assert!(!kept[1].contains("sk-ant"), "{}", kept[1]);
    }
}
