//! The rows of the compact layers (L1 observations, L2 talk summaries, L3 session summaries)
//! as they are stored: what compaction writes (`memex::compact::queue`) and what sync carries
//! from one machine to another (`sync::compact`), written and read here only, each indexed for
//! full-text search as it is written.

use rusqlite::{Connection, OptionalExtension, ToSql};
use serde::{Deserialize, Serialize};

use crate::fts;
use crate::layer::Layer;

/// An L1 row's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub first_message_id: String,
    pub last_message_id: String,
    pub tool_name: String,
    pub call_count: i64,
    #[serde(rename = "type")]
    pub kind: String,
    pub title: String,
    pub subtitle: String,
    pub facts: Vec<String>,
    pub narrative: String,
    pub files_read: Vec<String>,
    pub files_modified: Vec<String>,
    pub ts: Option<i64>,
}

/// An L2 row's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TalkSummary {
    pub prompt_number: i64,
    pub user_request: String,
    pub summary: String,
    pub completed: String,
    pub files_involved: Vec<String>,
}

/// An L3 row's content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionSummary {
    pub summary: String,
    pub key_points: Vec<String>,
    pub files_involved: Vec<String>,
    pub technologies: Vec<String>,
    pub talks_covered: i64,
}

/// Who wrote a row and what it cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    pub provider: String,
    pub model: Option<String>,
    pub prompt_version: String,
    pub tokens_input: u64,
    pub tokens_output: u64,
    pub confidence: f64,
    /// Why an earlier provider of the chain did not write it.
    pub fallback_reason: Option<String>,
}

impl Provenance {
    /// Whether a model wrote it (any provider but the heuristic).
    pub fn by_model(&self) -> bool {
        self.provider != crate::HEURISTIC
    }
}

/// A row as stored: its content, who wrote it and when (epoch ms, where it was written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored<T> {
    pub value: T,
    pub provenance: Provenance,
    pub created_at: i64,
}

/// The rows of one key: a talk's observations, a talk's summary, a session's summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rows {
    Observations(Vec<Stored<Observation>>),
    Talk {
        row: Stored<TalkSummary>,
        /// Estimated tokens of the messages it covers, and of itself.
        raw_tokens: i64,
        summary_tokens: i64,
        ts: Option<i64>,
    },
    Session {
        row: Stored<SessionSummary>,
        raw_tokens: i64,
        updated_at: i64,
    },
}

impl Rows {
    pub fn layer(&self) -> Layer {
        match self {
            Rows::Observations(_) => Layer::Observations,
            Rows::Talk { .. } => Layer::Talks,
            Rows::Session { .. } => Layer::Sessions,
        }
    }

    /// How many rows they are.
    pub fn count(&self) -> u64 {
        match self {
            Rows::Observations(v) => v.len() as u64,
            Rows::Talk { .. } | Rows::Session { .. } => 1,
        }
    }

    /// Every row's provenance.
    pub fn provenances(&self) -> Vec<&Provenance> {
        match self {
            Rows::Observations(v) => v.iter().map(|o| &o.provenance).collect(),
            Rows::Talk { row, .. } => vec![&row.provenance],
            Rows::Session { row, .. } => vec![&row.provenance],
        }
    }

    /// About how many bytes of text they hold.
    pub fn bytes(&self) -> usize {
        let list = |v: &[String]| v.iter().map(String::len).sum::<usize>();
        match self {
            Rows::Observations(v) => v
                .iter()
                .map(|o| {
                    let o = &o.value;
                    o.title.len()
                        + o.subtitle.len()
                        + o.narrative.len()
                        + list(&o.facts)
                        + list(&o.files_read)
                        + list(&o.files_modified)
                })
                .sum(),
            Rows::Talk { row, .. } => {
                let t = &row.value;
                t.user_request.len() + t.summary.len() + t.completed.len() + list(&t.files_involved)
            }
            Rows::Session { row, .. } => {
                let s = &row.value;
                s.summary.len()
                    + list(&s.key_points)
                    + list(&s.files_involved)
                    + list(&s.technologies)
            }
        }
    }
}

/// A row with the redaction rules applied to its text: a model may echo what it was shown (or,
/// with `[store] redact` off, what was stored), and nothing unredacted is written.
pub trait Redacted {
    fn redacted(&self) -> Self;
}

fn r(s: &str) -> String {
    crate::redact::redact_text(s).0.into_owned()
}

fn rs(v: &[String]) -> Vec<String> {
    v.iter().map(|s| r(s)).collect()
}

impl Redacted for Observation {
    fn redacted(&self) -> Self {
        Observation {
            title: r(&self.title),
            subtitle: r(&self.subtitle),
            facts: rs(&self.facts),
            narrative: r(&self.narrative),
            ..self.clone()
        }
    }
}

impl Redacted for TalkSummary {
    fn redacted(&self) -> Self {
        TalkSummary {
            user_request: r(&self.user_request),
            summary: r(&self.summary),
            completed: r(&self.completed),
            ..self.clone()
        }
    }
}

impl Redacted for SessionSummary {
    fn redacted(&self) -> Self {
        SessionSummary {
            summary: r(&self.summary),
            key_points: rs(&self.key_points),
            ..self.clone()
        }
    }
}

impl Redacted for Rows {
    fn redacted(&self) -> Self {
        fn each<T: Redacted + Clone>(row: &Stored<T>) -> Stored<T> {
            Stored {
                value: row.value.redacted(),
                ..row.clone()
            }
        }
        match self {
            Rows::Observations(v) => Rows::Observations(v.iter().map(each).collect()),
            Rows::Talk {
                row,
                raw_tokens,
                summary_tokens,
                ts,
            } => Rows::Talk {
                row: each(row),
                raw_tokens: *raw_tokens,
                summary_tokens: *summary_tokens,
                ts: *ts,
            },
            Rows::Session {
                row,
                raw_tokens,
                updated_at,
            } => Rows::Session {
                row: each(row),
                raw_tokens: *raw_tokens,
                updated_at: *updated_at,
            },
        }
    }
}

fn list(v: &[String]) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "[]".into())
}

fn parse_list(text: String) -> Vec<String> {
    serde_json::from_str(&text).unwrap_or_default()
}

/// The columns of [`Provenance`] and `created_at`, in their order, after a table's own.
const PROVENANCE: &str = "provider, model, prompt_version, tokens_input, tokens_output,
                          confidence, fallback_reason, created_at";

fn provenance(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<(Provenance, i64)> {
    Ok((
        Provenance {
            provider: r.get(at)?,
            model: r.get(at + 1)?,
            prompt_version: r.get(at + 2)?,
            tokens_input: r.get::<_, i64>(at + 3)?.max(0) as u64,
            tokens_output: r.get::<_, i64>(at + 4)?.max(0) as u64,
            confidence: r.get(at + 5)?,
            fallback_reason: r.get(at + 6)?,
        },
        r.get(at + 7)?,
    ))
}

fn stored<T>(value: T, (provenance, created_at): (Provenance, i64)) -> Stored<T> {
    Stored {
        value,
        provenance,
        created_at,
    }
}

/// Inserts one row into `table`: its own `columns` with `values`, then the row's provenance
/// and when it was written, `then` after (a conflict clause). Returns the rows inserted.
fn insert<T>(
    tx: &Connection,
    table: &str,
    columns: &str,
    values: &[&dyn ToSql],
    row: &Stored<T>,
    then: &str,
) -> rusqlite::Result<usize> {
    let p = &row.provenance;
    let (tokens_input, tokens_output) = (p.tokens_input as i64, p.tokens_output as i64);
    let written: [&dyn ToSql; 8] = [
        &p.provider,
        &p.model,
        &p.prompt_version,
        &tokens_input,
        &tokens_output,
        &p.confidence,
        &p.fallback_reason,
        &row.created_at,
    ];
    let all: Vec<&dyn ToSql> = values.iter().copied().chain(written).collect();
    let marks: Vec<String> = (1..=all.len()).map(|i| format!("?{i}")).collect();
    tx.prepare_cached(&format!(
        "INSERT INTO {table} ({columns}, {PROVENANCE}) VALUES ({}) {then}",
        marks.join(", ")
    ))?
    .execute(&all[..])
}

/// The rows stored for one key of session `pk` (`prompt` is ignored for a session summary);
/// `None` when it has none.
pub fn read(
    conn: &Connection,
    layer: Layer,
    pk: i64,
    prompt: i64,
) -> rusqlite::Result<Option<Rows>> {
    Ok(match layer {
        Layer::Raw => None,
        Layer::Observations => {
            let v: Vec<Stored<Observation>> = conn
                .prepare_cached(&format!(
                    "SELECT first_message_id, last_message_id, tool_name, call_count, type, title,
                            subtitle, facts, narrative, files_read, files_modified, ts, {PROVENANCE}
                     FROM observations WHERE session_pk = ?1 AND prompt_number = ?2 ORDER BY id"
                ))?
                .query_map([pk, prompt], |r| {
                    let o = Observation {
                        first_message_id: r.get(0)?,
                        last_message_id: r.get(1)?,
                        tool_name: r.get(2)?,
                        call_count: r.get(3)?,
                        kind: r.get(4)?,
                        title: r.get(5)?,
                        subtitle: r.get(6)?,
                        facts: parse_list(r.get(7)?),
                        narrative: r.get(8)?,
                        files_read: parse_list(r.get(9)?),
                        files_modified: parse_list(r.get(10)?),
                        ts: r.get(11)?,
                    };
                    Ok(stored(o, provenance(r, 12)?))
                })?
                .collect::<rusqlite::Result<_>>()?;
            (!v.is_empty()).then_some(Rows::Observations(v))
        }
        Layer::Talks => conn
            .prepare_cached(&format!(
                "SELECT user_request, summary, completed, files_involved, raw_tokens,
                        summary_tokens, ts, {PROVENANCE}
                 FROM talk_summaries WHERE session_pk = ?1 AND prompt_number = ?2"
            ))?
            .query_row([pk, prompt], |r| {
                let t = TalkSummary {
                    prompt_number: prompt,
                    user_request: r.get(0)?,
                    summary: r.get(1)?,
                    completed: r.get(2)?,
                    files_involved: parse_list(r.get(3)?),
                };
                Ok(Rows::Talk {
                    row: stored(t, provenance(r, 7)?),
                    raw_tokens: r.get(4)?,
                    summary_tokens: r.get(5)?,
                    ts: r.get(6)?,
                })
            })
            .optional()?,
        Layer::Sessions => conn
            .prepare_cached(&format!(
                "SELECT summary, key_points, files_involved, technologies, talks_covered,
                        raw_tokens, updated_at, {PROVENANCE}
                 FROM session_summaries WHERE session_pk = ?1"
            ))?
            .query_row([pk], |r| {
                let s = SessionSummary {
                    summary: r.get(0)?,
                    key_points: parse_list(r.get(1)?),
                    files_involved: parse_list(r.get(2)?),
                    technologies: parse_list(r.get(3)?),
                    talks_covered: r.get(4)?,
                };
                Ok(Rows::Session {
                    row: stored(s, provenance(r, 7)?),
                    raw_tokens: r.get(5)?,
                    updated_at: r.get(6)?,
                })
            })
            .optional()?,
    })
}

/// Puts `rows`, redacted, in place of what session `pk` holds for their key (talk `prompt`;
/// ignored for a session summary), each indexed for full-text search (the vector outbox's
/// triggers queue its vectors). In the caller's transaction. Returns the rows written.
pub fn replace(tx: &Connection, pk: i64, prompt: i64, rows: &Rows) -> rusqlite::Result<u64> {
    let rows = &rows.redacted();
    let layer = rows.layer();
    match rows {
        Rows::Session { .. } => fts::unindex_layer_rows(tx, layer, "session_pk = ?1", &[pk])?,
        _ => fts::unindex_layer_rows(
            tx,
            layer,
            "session_pk = ?1 AND prompt_number = ?2",
            &[pk, prompt],
        )?,
    }
    let mut written = 0;
    let mut wrote = |n: usize| -> rusqlite::Result<()> {
        if n == 1 {
            fts::index_layer_row(tx, layer, tx.last_insert_rowid())?;
            written += 1;
        }
        Ok(())
    };
    match rows {
        Rows::Observations(v) => {
            for row in v {
                let o = &row.value;
                let n = insert(
                    tx,
                    "observations",
                    "session_pk, prompt_number, first_message_id, last_message_id, tool_name,
                     call_count, type, title, subtitle, facts, narrative, files_read,
                     files_modified, ts",
                    &[
                        &pk,
                        &prompt,
                        &o.first_message_id,
                        &o.last_message_id,
                        &o.tool_name,
                        &o.call_count,
                        &o.kind,
                        &o.title,
                        &o.subtitle,
                        &list(&o.facts),
                        &o.narrative,
                        &list(&o.files_read),
                        &list(&o.files_modified),
                        &o.ts,
                    ],
                    row,
                    "ON CONFLICT (session_pk, prompt_number, first_message_id) DO NOTHING",
                )?;
                wrote(n)?;
            }
        }
        Rows::Talk {
            row,
            raw_tokens,
            summary_tokens,
            ts,
        } => {
            let t = &row.value;
            let n = insert(
                tx,
                "talk_summaries",
                "session_pk, prompt_number, user_request, summary, completed, files_involved,
                 raw_tokens, summary_tokens, ts",
                &[
                    &pk,
                    &prompt,
                    &t.user_request,
                    &t.summary,
                    &t.completed,
                    &list(&t.files_involved),
                    raw_tokens,
                    summary_tokens,
                    ts,
                ],
                row,
                "",
            )?;
            wrote(n)?;
        }
        Rows::Session {
            row,
            raw_tokens,
            updated_at,
        } => {
            let s = &row.value;
            let n = insert(
                tx,
                "session_summaries",
                "session_pk, summary, key_points, files_involved, technologies, talks_covered,
                 raw_tokens, updated_at",
                &[
                    &pk,
                    &s.summary,
                    &list(&s.key_points),
                    &list(&s.files_involved),
                    &list(&s.technologies),
                    &s.talks_covered,
                    raw_tokens,
                    updated_at,
                ],
                row,
                "",
            )?;
            wrote(n)?;
        }
    }
    Ok(written)
}
