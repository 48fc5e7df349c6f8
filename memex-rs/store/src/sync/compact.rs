//! Compact rows that travel (migration 0018): those a provider other than the heuristic (a
//! paid or slow model) wrote for this machine's own sessions, so that no summary is paid for
//! twice. A record carries every row of one key (a talk's observations, a talk summary, a
//! session summary) as the sender holds it; the receiver puts it in place of what it holds for
//! that key, indexes it as compaction would, and marks the key's job done so that its own
//! compactor does not write it again.

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::compact::{self, Rows};
use crate::layer::Layer;

/// One key's rows: a session's talk (`prompt_number` ≥ 1) or the session itself (0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompactRecord {
    pub agent: String,
    pub session_id: String,
    pub prompt_number: i64,
    pub rows: Rows,
}

impl CompactRecord {
    /// Why it cannot be stored as it is, if it cannot.
    fn invalid(&self) -> Option<&'static str> {
        let session = matches!(self.rows, Rows::Session { .. });
        if self.prompt_number < 0 {
            Some("a negative talk number")
        } else if session != (self.prompt_number == 0) {
            Some("a talk's row without its talk, or a session's with one")
        } else if matches!(&self.rows, Rows::Observations(v) if v.is_empty()) {
            Some("no rows")
        } else {
            self.rows.provenances().into_iter().find_map(|p| {
                if p.provider.is_empty() || p.prompt_version.is_empty() {
                    Some("a row without its provider or prompt version")
                } else if !p.confidence.is_finite() {
                    Some("a row whose confidence is not a number")
                } else {
                    None
                }
            })
        }
    }
}

/// The rows of one key of this machine's own session `pk`, when a model wrote one of them;
/// `None` otherwise (the heuristic's rows cost nothing to write again, and a session taken
/// from another machine is that machine's to send).
pub fn record(
    conn: &Connection,
    layer: Layer,
    pk: i64,
    prompt: i64,
) -> rusqlite::Result<Option<CompactRecord>> {
    let session: Option<(String, String, Option<String>)> = conn
        .prepare_cached("SELECT agent, session_id, host FROM sessions WHERE id = ?1")?
        .query_row([pk], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?;
    let Some((agent, session_id, None)) = session else {
        return Ok(None);
    };
    let Some(rows) = compact::read(conn, layer, pk, prompt)? else {
        return Ok(None);
    };
    let by_model = rows.provenances().iter().any(|p| p.by_model());
    Ok(by_model.then_some(CompactRecord {
        agent,
        session_id,
        prompt_number: if layer == Layer::Sessions { 0 } else { prompt },
        rows,
    }))
}

/// What became of a record sent by `host`.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// Its rows now stand for the key here.
    Stored(u64),
    /// Its session is not here as one of `host`'s (forgotten, or this machine's own, or
    /// another machine's): nothing changed.
    NotHers,
    /// It was malformed: nothing changed.
    Invalid(&'static str),
}

/// Puts a record from `host` in place of what this archive holds for its key, indexed for
/// full-text search (the vector outbox's triggers queue its vectors), and marks the key's
/// compaction job done so that it is not written here again. In the caller's transaction.
pub fn take(tx: &Connection, host: &str, rec: &CompactRecord, now: i64) -> rusqlite::Result<Taken> {
    if let Some(why) = rec.invalid() {
        return Ok(Taken::Invalid(why));
    }
    let pk: Option<i64> = tx
        .prepare_cached(
            "SELECT id FROM sessions WHERE agent = ?1 AND session_id = ?2 AND host = ?3",
        )?
        .query_row(params![rec.agent, rec.session_id, host], |r| r.get(0))
        .optional()?;
    let Some(pk) = pk else {
        return Ok(Taken::NotHers);
    };
    let layer = rec.rows.layer();
    let p = rec.prompt_number;
    let stored = compact::replace(tx, pk, p, &rec.rows)?;
    // The key is written: a job for it, waiting or running here, is done (a running one's
    // result is then thrown away when it ends), and planning does not queue it again.
    tx.prepare_cached(
        "INSERT INTO compact_jobs (level, session_pk, prompt_number, state, reason, created_at,
           updated_at)
         VALUES (?1, ?2, ?3, 'done', 'sync', ?4, ?4)
         ON CONFLICT (level, session_pk, prompt_number) DO UPDATE SET state = 'done',
           regenerate = 0, not_before = 0, last_error = NULL, reason = 'sync',
           updated_at = excluded.updated_at",
    )?
    .execute(params![layer.job(), pk, p, now])?;
    Ok(Taken::Stored(stored))
}

/// Lists every row a provider other than the heuristic wrote for this machine's own sessions,
/// when nothing is listed yet: the rows written before the archive first synced travel with
/// its first batches. Rows written after are listed by the triggers of migration 0018.
pub fn list_written_before(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute(
        &format!(
            "INSERT INTO sync_compact (level, session_pk, prompt_number)
             SELECT level, session_pk, prompt_number FROM (
               SELECT DISTINCT '{l1}' AS level, x.session_pk, x.prompt_number, 1 AS o
               FROM observations x JOIN sessions s ON s.id = x.session_pk
               WHERE x.provider <> '{h}' AND s.host IS NULL
               UNION
               SELECT '{l2}', x.session_pk, x.prompt_number, 2
               FROM talk_summaries x JOIN sessions s ON s.id = x.session_pk
               WHERE x.provider <> '{h}' AND s.host IS NULL
               UNION
               SELECT '{l3}', x.session_pk, 0, 3
               FROM session_summaries x JOIN sessions s ON s.id = x.session_pk
               WHERE x.provider <> '{h}' AND s.host IS NULL)
             WHERE NOT EXISTS (SELECT 1 FROM sync_compact)
             ORDER BY session_pk, o, prompt_number",
            l1 = Layer::Observations.job().unwrap_or_default(),
            l2 = Layer::Talks.job().unwrap_or_default(),
            l3 = Layer::Sessions.job().unwrap_or_default(),
            h = crate::HEURISTIC,
        ),
        [],
    )?;
    Ok(())
}
