//! What sync carries between one person's machines (issue 44), read from one archive and
//! written into another as if that one had imported it.
//!
//! A [`Payload`] is a machine's messages past its last push, grouped by the file each came
//! from, with what the archive knows of their sessions and each record's original bytes
//! (redacted, as stored). [`apply`] turns each group back into an ingest batch and writes it
//! through ingest's own path in the caller's transaction: redaction, full-text rows, raw
//! blocks, session counters and what the user forgot are as after an import, and the vector
//! indexer finds the new messages above its mark as it finds imported ones. A session first
//! stored by a payload keeps the id of the machine it came from (`sessions.host`); its source
//! file is named `sync:<host>:<path>` so that no local file is ever confused with it.
//!
//! Applying is idempotent (messages are unique per session and message id) and never changes
//! a message another machine sent but by the same rules an import of a rewritten file follows.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use ai_cli_session_collector::{
    Cursor, Edit, Flags, MessageKind, ParsedMessage, Role, SessionInfo, TitleSource, ToolCall,
    ToolResult, Usage,
};
use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

pub use self::compact::CompactRecord;
use crate::forget::{self, ForgetError, Forgotten};
use crate::layer::Layer;

pub mod compact;
use crate::ingest::{Batch, IngestOptions, PreparedSession, apply_in, pack_raw, prepare};

/// The payload format this build writes and reads (2: with what the sender forgot).
pub const PAYLOAD_FORMAT: u32 = 2;

/// One batch's content.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Payload {
    pub format: u32,
    pub sources: Vec<Source>,
    /// The highest local message id the payload covers (the sender's push mark).
    pub through: i64,
    /// What the sender forgot since its last batch, by identity: applied after the sources.
    #[serde(default)]
    pub forgets: Vec<Forgotten>,
    /// The last entry of the sender's `sync_forgets` the payload covers.
    #[serde(default)]
    pub forgets_through: i64,
    /// The name the sender goes by (its host name).
    #[serde(default)]
    pub host_name: Option<String>,
    /// The last entry of the sender's `sync_changed` the payload covers (messages sent again
    /// because they changed).
    #[serde(default)]
    pub changed_through: i64,
    /// Compact rows a model wrote for the sender's sessions: applied after the sources.
    #[serde(default)]
    pub compact: Vec<CompactRecord>,
    /// The last entry of the sender's `sync_compact` the payload covers.
    #[serde(default)]
    pub compact_through: i64,
}

/// Whether `name` may name a machine: 1 to 64 characters, none of them a control character.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.chars().count() <= 64 && !name.chars().any(char::is_control)
}

/// Sets the name this machine goes by (sent with its next batch).
pub fn set_name(conn: &Connection, name: Option<&str>) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE sync_self SET name = ?1 WHERE id = 1",
        [name.filter(|n| valid_name(n))],
    )?;
    Ok(())
}

impl Payload {
    /// How far the sender's series reaches with this payload.
    pub fn marks(&self) -> Marks {
        Marks {
            messages: self.through,
            forgets: self.forgets_through,
            changed: self.changed_through,
            compact: self.compact_through,
        }
    }
}

/// How far a series reaches: the last local message id, and the last `sync_forgets`,
/// `sync_changed` and `sync_compact` entries it carries.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    pub messages: i64,
    pub forgets: i64,
    pub changed: i64,
    pub compact: i64,
}

impl Marks {
    /// The further of the two, mark by mark.
    pub fn max(self, other: Marks) -> Marks {
        Marks {
            messages: self.messages.max(other.messages),
            forgets: self.forgets.max(other.forgets),
            changed: self.changed.max(other.changed),
            compact: self.compact.max(other.compact),
        }
    }
}

/// The messages of one source file, and their sessions.
#[derive(Debug, Serialize, Deserialize)]
pub struct Source {
    pub agent: String,
    /// The file on its machine (empty for messages that had none).
    pub path: String,
    pub sessions: Vec<SessionRecord>,
    pub messages: Vec<MessageRecord>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SessionRecord {
    pub info: SessionInfo,
    pub git_root: Option<String>,
}

/// A stored message, every column of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageRecord {
    pub session_id: String,
    pub message_id: String,
    pub parent_id: Option<String>,
    pub role: String,
    pub kind: String,
    pub prompt_number: u32,
    pub ts: Option<i64>,
    pub cwd: Option<String>,
    pub git_branch: Option<String>,
    pub model: Option<String>,
    pub text: String,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
    /// The tool's input as JSON text.
    pub tool_input: Option<String>,
    pub is_error: bool,
    pub usage_key: Option<String>,
    /// Input, output, cache read, cache creation, reasoning.
    pub usage: Option<[u64; 5]>,
    pub agent_id: Option<String>,
    pub sidechain: bool,
    pub inherited: bool,
    pub duplicate: bool,
    pub active: bool,
    pub line: u64,
    pub seq: u64,
    /// Secrets redacted from it where it was archived.
    #[serde(default)]
    pub redactions: u32,
    pub raw: Option<Raw>,
    /// The agent's own figure of what the call cost, in US dollars.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// A record's original bytes: as text when they are UTF-8 (nearly always), else as hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Raw {
    Text(String),
    Hex(String),
}

impl Raw {
    fn of(bytes: Vec<u8>) -> Raw {
        match String::from_utf8(bytes) {
            Ok(s) => Raw::Text(s),
            Err(e) => Raw::Hex(hex::encode(e.into_bytes())),
        }
    }

    fn bytes(&self) -> Option<Vec<u8>> {
        match self {
            Raw::Text(s) => Some(s.clone().into_bytes()),
            Raw::Hex(h) => hex::decode(h).ok(),
        }
    }
}

/// Why a payload was not applied. Nothing of it is stored then.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(
        "written in payload format {0}, newer than this Memex ({PAYLOAD_FORMAT}): update Memex"
    )]
    NewerFormat(u32),
    #[error("its content cannot be read: {0}")]
    Unreadable(String),
    #[error(transparent)]
    Sql(#[from] rusqlite::Error),
}

/// What applying a payload changed.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Applied {
    pub messages: u64,
    pub sessions: u64,
    /// Messages removed because the sender forgot them (or their sessions).
    pub forgotten: u64,
    /// The rows whose vectors must go, as `memex forget` reports them.
    #[serde(skip)]
    pub gone: Vec<(i64, i64)>,
    /// Compact rows written by the sender's model, stored in place of this machine's own.
    pub summaries: u64,
    /// Messages of agents this build does not know, or without a usable role or kind, and
    /// malformed compact rows: kept out, counted.
    pub skipped: u64,
}

/// Every column of a stored message, with its session and source file, as [`Builder::add`]
/// reads them.
const MESSAGE_SELECT: &str =
    "SELECT m.id, s.agent, s.session_id, COALESCE(f.path, ''), m.message_id, m.parent_id,
            m.role, m.kind, m.prompt_number, m.ts, m.cwd, m.git_branch, m.model,
            CASE WHEN m.text IS NOT NULL THEN m.text ELSE memex_unzstd(m.text_z) END,
            m.tool_name, m.tool_call_id, m.tool_input, m.is_error, m.usage_key,
            m.input_tokens, m.output_tokens, m.cache_read_tokens, m.cache_creation_tokens,
            m.reasoning_tokens, m.agent_id, m.sidechain, m.inherited, m.duplicate, m.active,
            m.line, m.seq, m.raw_block, m.raw_offset, m.raw_len, m.redactions, m.cost_usd
     FROM messages m JOIN sessions s ON s.id = m.session_pk
     LEFT JOIN source_files f ON f.id = m.source_file_id";

/// A payload being filled, message by message, grouped by source file.
struct Builder<'c> {
    conn: &'c Connection,
    payload: Payload,
    index: HashMap<(String, String), usize>,
    /// The raw block last read, decompressed (consecutive messages share blocks).
    block: Option<(i64, Vec<u8>)>,
    bytes: usize,
}

impl Builder<'_> {
    /// Adds the message of a [`MESSAGE_SELECT`] row.
    fn add(&mut self, r: &rusqlite::Row<'_>) -> rusqlite::Result<()> {
        let (agent, session_id, path): (String, String, String) = (r.get(1)?, r.get(2)?, r.get(3)?);
        let text: Option<String> = r.get(13)?;
        let usage: [Option<i64>; 5] = [r.get(19)?, r.get(20)?, r.get(21)?, r.get(22)?, r.get(23)?];
        let raw_at: (Option<i64>, Option<i64>, Option<i64>) = (r.get(31)?, r.get(32)?, r.get(33)?);
        let raw = match raw_at {
            (Some(block), Some(off), Some(len)) => {
                if self.block.as_ref().is_none_or(|(b, _)| *b != block) {
                    let data: Option<Vec<u8>> = self
                        .conn
                        .prepare_cached("SELECT data FROM raw_blocks WHERE id = ?1")?
                        .query_row([block], |r| r.get(0))
                        .optional()?;
                    self.block = Some((
                        block,
                        data.map(|d| crate::unzstd_bytes(&d)).unwrap_or_default(),
                    ));
                }
                let all = &self.block.as_ref().expect("just read").1;
                all.get(off as usize..(off + len) as usize)
                    .map(|b| Raw::of(b.to_vec()))
            }
            _ => None,
        };
        let m = MessageRecord {
            session_id: session_id.clone(),
            message_id: r.get(4)?,
            parent_id: r.get(5)?,
            role: r.get(6)?,
            kind: r.get(7)?,
            prompt_number: r.get(8)?,
            ts: r.get(9)?,
            cwd: r.get(10)?,
            git_branch: r.get(11)?,
            model: r.get(12)?,
            text: text.unwrap_or_default(),
            tool_name: r.get(14)?,
            tool_call_id: r.get(15)?,
            tool_input: r.get(16)?,
            is_error: r.get(17)?,
            usage_key: r.get(18)?,
            usage: usage
                .iter()
                .any(Option::is_some)
                .then(|| usage.map(|u| u.unwrap_or(0).max(0) as u64)),
            agent_id: r.get(24)?,
            sidechain: r.get(25)?,
            inherited: r.get(26)?,
            duplicate: r.get(27)?,
            active: r.get(28)?,
            line: r.get::<_, i64>(29)?.max(0) as u64,
            seq: r.get::<_, i64>(30)?.max(0) as u64,
            redactions: r.get(34)?,
            raw,
            cost_usd: r.get(35)?,
        };
        self.bytes += m.text.len()
            + match &m.raw {
                Some(Raw::Text(s) | Raw::Hex(s)) => s.len(),
                None => 0,
            };
        let sources = &mut self.payload.sources;
        let at = *self
            .index
            .entry((agent.clone(), path.clone()))
            .or_insert_with(|| {
                sources.push(Source {
                    agent,
                    path,
                    sessions: Vec::new(),
                    messages: Vec::new(),
                });
                sources.len() - 1
            });
        sources[at].messages.push(m);
        Ok(())
    }
}

/// New messages a payload takes at most.
const MESSAGES_AT_ONCE: usize = 2000;

/// The next payload of this machine's own messages (those changed since they were sent, then
/// new ones), compact rows its models wrote and forgets after `from`, holding about `budget`
/// bytes of text and records; `None` when there are none.
pub fn next_payload(
    conn: &Connection,
    from: Marks,
    budget: usize,
) -> rusqlite::Result<Option<Payload>> {
    let mut b = Builder {
        conn,
        payload: Payload {
            format: PAYLOAD_FORMAT,
            sources: Vec::new(),
            through: from.messages,
            forgets: Vec::new(),
            forgets_through: from.forgets,
            host_name: conn
                .query_row("SELECT name FROM sync_self WHERE id = 1", [], |r| r.get(0))
                .optional()?
                .flatten(),
            changed_through: from.changed,
            compact: Vec::new(),
            compact_through: from.compact,
        },
        index: HashMap::new(),
        block: None,
        bytes: 0,
    };
    let changed: Vec<(i64, i64)> = conn
        .prepare_cached(
            "SELECT id, message FROM sync_changed WHERE id > ?1 ORDER BY id LIMIT 2000",
        )?
        .query_map([from.changed], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut seen = HashSet::new();
    for (entry, id) in changed {
        b.payload.changed_through = entry;
        // A message changed twice goes once; one forgotten since is gone.
        if seen.insert(id) {
            let mut st = conn.prepare_cached(&format!("{MESSAGE_SELECT} WHERE m.id = ?1"))?;
            let mut rows = st.query([id])?;
            if let Some(r) = rows.next()? {
                b.add(r)?;
            }
        }
        if b.bytes >= budget {
            break;
        }
    }
    // Whether every new message is in this payload or an earlier one.
    let mut drained = false;
    if b.bytes < budget {
        let mut st = conn.prepare_cached(&format!(
            "{MESSAGE_SELECT}
             WHERE m.id > ?1 AND (f.path IS NULL OR f.path NOT LIKE 'sync:%')
             ORDER BY m.id LIMIT {MESSAGES_AT_ONCE}"
        ))?;
        let mut rows = st.query([from.messages])?;
        let mut n = 0;
        drained = true;
        while let Some(r) = rows.next()? {
            b.add(r)?;
            b.payload.through = r.get(0)?;
            n += 1;
            if b.bytes >= budget {
                drained = false;
                break;
            }
        }
        drained &= n < MESSAGES_AT_ONCE;
    }
    // Compact rows go once their sessions' messages went before them, so that the receiver
    // has the sessions they belong to.
    if drained {
        let keys: Vec<(i64, String, i64, i64)> = conn
            .prepare_cached(
                "SELECT id, level, session_pk, prompt_number FROM sync_compact WHERE id > ?1
                 ORDER BY id LIMIT 2000",
            )?
            .query_map([from.compact], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        let mut seen = HashSet::new();
        for (entry, level, pk, prompt) in keys {
            if b.bytes >= budget {
                break;
            }
            b.payload.compact_through = entry;
            let Some(layer) = Layer::from_job(&level) else {
                continue;
            };
            if seen.insert((layer, pk, prompt))
                && let Some(rec) = compact::record(conn, layer, pk, prompt)?
            {
                b.bytes += rec.rows.bytes();
                b.payload.compact.push(rec);
            }
        }
    }
    let mut payload = b.payload;
    let mut st = conn.prepare_cached(
        "SELECT id, agent, session_id, message_id FROM sync_forgets WHERE id > ?1
         ORDER BY id LIMIT 20000",
    )?;
    let mut rows = st.query([from.forgets])?;
    while let Some(r) = rows.next()? {
        payload.forgets_through = r.get(0)?;
        payload.forgets.push(Forgotten {
            agent: r.get(1)?,
            session_id: r.get(2)?,
            message_id: r.get(3)?,
        });
    }
    drop(rows);
    if payload.sources.is_empty()
        && payload.forgets.is_empty()
        && payload.changed_through == from.changed
        && payload.compact_through == from.compact
    {
        return Ok(None);
    }
    for s in &mut payload.sources {
        let ids: Vec<String> = {
            let mut seen = HashSet::new();
            s.messages
                .iter()
                .filter(|m| seen.insert(m.session_id.as_str()))
                .map(|m| m.session_id.clone())
                .collect()
        };
        for sid in ids {
            if let Some(rec) = session_record(conn, &s.agent, &sid, &s.path)? {
                s.sessions.push(rec);
            }
        }
    }
    Ok(Some(payload))
}

/// What the archive knows of one session, as an adapter would report it.
fn session_record(
    conn: &Connection,
    agent: &str,
    session_id: &str,
    path: &str,
) -> rusqlite::Result<Option<SessionRecord>> {
    conn.prepare_cached(
        "SELECT project_path, git_root, project_hash, git_branch, model, title, title_rank,
                parent_session_id, is_subagent, source_path, started_at, updated_at
         FROM sessions WHERE agent = ?1 AND session_id = ?2",
    )?
    .query_row(params![agent, session_id], |r| {
        let title: Option<String> = r.get(5)?;
        let rank: i64 = r.get(6)?;
        let source: Option<String> = r.get(9)?;
        Ok(SessionRecord {
            info: SessionInfo {
                session_id: session_id.to_owned(),
                project_path: r.get(0)?,
                project_hash: r.get(2)?,
                git_branch: r.get(3)?,
                model: r.get(4)?,
                title: title.zip(title_source(rank)).map(|(t, s)| (s, t)),
                parent_session_id: r.get(7)?,
                is_subagent: r.get(8)?,
                own_file: source.as_deref() == Some(path) && !path.is_empty(),
                started_at: r.get(10)?,
                updated_at: r.get(11)?,
            },
            git_root: r.get(1)?,
        })
    })
    .optional()
}

fn title_source(rank: i64) -> Option<TitleSource> {
    Some(match rank {
        1 => TitleSource::FirstPrompt,
        2 => TitleSource::Summary,
        3 => TitleSource::Generated,
        4 => TitleSource::Custom,
        _ => return None,
    })
}

/// Where a source of `host` is kept in this archive: a name no local file can have.
pub fn source_name(host: &str, path: &str) -> String {
    format!("sync:{host}:{path}")
}

/// Writes a payload from `host` in the caller's transaction. `agents`: the agent names this
/// build knows (a payload names agents as text).
pub fn apply(
    tx: &Connection,
    host: &str,
    payload: Payload,
    agents: &[&'static str],
    opts: &IngestOptions,
) -> Result<Applied, ApplyError> {
    if payload.format > PAYLOAD_FORMAT {
        return Err(ApplyError::NewerFormat(payload.format));
    }
    let mut out = Applied::default();
    for source in payload.sources {
        let Some(agent) = agents.iter().copied().find(|a| *a == source.agent) else {
            out.skipped += source.messages.len() as u64;
            continue;
        };
        let ids: HashSet<String> = source
            .sessions
            .iter()
            .map(|s| s.info.session_id.clone())
            .chain(source.messages.iter().map(|m| m.session_id.clone()))
            .collect();
        let mut known = tx.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM sessions WHERE agent = ?1 AND session_id = ?2)",
        )?;
        let mut new_sessions = Vec::new();
        for id in ids {
            if !known.query_row(params![agent, id], |r| r.get::<_, bool>(0))? {
                new_sessions.push(id);
            }
        }
        drop(known);
        let mut inactive: HashMap<String, Vec<String>> = HashMap::new();
        let mut messages = Vec::with_capacity(source.messages.len());
        let mut bytes = 0u64;
        for m in source.messages {
            let (Some(role), Some(kind)) = (Role::parse(&m.role), MessageKind::parse(&m.kind))
            else {
                out.skipped += 1;
                continue;
            };
            if !m.active {
                inactive
                    .entry(m.session_id.clone())
                    .or_default()
                    .push(m.message_id.clone());
            }
            let raw = m.raw.as_ref().and_then(Raw::bytes);
            bytes += (m.text.len() + raw.as_ref().map_or(0, Vec::len)) as u64;
            let (stored_input, redactions) = (m.tool_input.clone(), m.redactions);
            let mut p = prepare(parsed(agent, m, role, kind, raw), opts);
            // The input as it was stored (already redacted), even where it is not JSON.
            p.tool_input = stored_input;
            p.redactions = p.redactions.max(redactions);
            messages.push(p);
        }
        let raw_blocks = pack_raw(&mut messages);
        let name = source_name(host, &source.path);
        let batch = Batch {
            agent,
            root: PathBuf::from(format!("sync:{host}")),
            path: PathBuf::from(&name),
            seen: None,
            cursor: Cursor::default(),
            messages,
            raw_blocks,
            sessions: source
                .sessions
                .into_iter()
                .map(|s| PreparedSession {
                    info: s.info,
                    git_root: s.git_root,
                })
                .collect(),
            edits: inactive
                .into_iter()
                .map(|(session_id, message_ids)| Edit::Deactivate {
                    session_id,
                    message_ids,
                })
                .collect(),
            issues: Vec::new(),
            bytes,
        };
        let applied = apply_in(tx, &batch)?;
        out.messages += applied.inserted;
        let mut mark = tx.prepare_cached(
            "UPDATE sessions SET host = ?1 WHERE agent = ?2 AND session_id = ?3 AND host IS NULL",
        )?;
        for id in &new_sessions {
            out.sessions += mark.execute(params![host, agent, id])? as u64;
        }
    }
    let now = chrono::Utc::now().timestamp_millis();
    for rec in &payload.compact {
        match compact::take(tx, host, rec, now)? {
            compact::Taken::Stored(n) => out.summaries += n,
            compact::Taken::NotHers => {}
            compact::Taken::Invalid(_) => out.skipped += 1,
        }
    }
    if !payload.forgets.is_empty() {
        // Forgetting here lists the same identities to send on (the trigger of migration
        // 0016): the sender's own batch carries them to every machine already.
        let before: i64 =
            tx.query_row("SELECT COALESCE(MAX(id), 0) FROM sync_forgets", [], |r| {
                r.get(0)
            })?;
        let report = forget::forget_known(tx, payload.forgets).map_err(|e| match e {
            ForgetError::Sqlite(e) => ApplyError::Sql(e),
            e => ApplyError::Unreadable(e.to_string()),
        })?;
        tx.execute("DELETE FROM sync_forgets WHERE id > ?1", [before])?;
        out.forgotten = report.messages;
        out.gone = report.gone;
    }
    Ok(out)
}

/// This archive's host id, made by `new_id` the first time it is asked for.
pub fn host_id(conn: &Connection, new_id: impl FnOnce() -> String) -> rusqlite::Result<String> {
    conn.execute(
        "INSERT INTO sync_self (id, host) VALUES (1, ?1) ON CONFLICT (id) DO NOTHING",
        [new_id()],
    )?;
    compact::list_written_before(conn)?;
    conn.query_row("SELECT host FROM sync_self WHERE id = 1", [], |r| r.get(0))
}

/// How far this archive's own series reached the target: the last batch's number and the
/// marks it carries (`0` and none before the first push).
pub fn pushed(conn: &Connection) -> rusqlite::Result<(u64, Marks)> {
    Ok(conn
        .query_row(
            "SELECT pushed_seq, pushed_through, forgets_through, changed_through, compact_through
             FROM sync_self WHERE id = 1",
            [],
            |r| {
                Ok((
                    r.get::<_, i64>(0)?.max(0) as u64,
                    Marks {
                        messages: r.get(1)?,
                        forgets: r.get(2)?,
                        changed: r.get(3)?,
                        compact: r.get(4)?,
                    },
                ))
            },
        )
        .optional()?
        .unwrap_or_default())
}

/// Notes that the target holds this archive's batch `seq`, reaching `marks` (only forward: an
/// older note arriving late changes nothing).
pub fn set_pushed(conn: &Connection, seq: u64, marks: Marks, now: i64) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE sync_self SET pushed_seq = ?1, pushed_through = MAX(pushed_through, ?2),
           forgets_through = MAX(forgets_through, ?3),
           changed_through = MAX(changed_through, ?5),
           compact_through = MAX(compact_through, ?6), pushed_at = ?4
         WHERE id = 1 AND pushed_seq < ?1",
        params![
            seq as i64,
            marks.messages,
            marks.forgets,
            now,
            marks.changed,
            marks.compact
        ],
    )?;
    Ok(())
}

/// Pins the target's archive and key id at the first sync; afterwards, what was pinned when it
/// differs (a target that now holds another archive, or a new key).
pub fn pin(
    conn: &Connection,
    archive: &str,
    key_id: &str,
) -> rusqlite::Result<Option<(String, String)>> {
    conn.execute(
        "UPDATE sync_self SET archive = ?1, key_id = ?2 WHERE id = 1 AND archive IS NULL",
        params![archive, key_id],
    )?;
    let pinned: (Option<String>, Option<String>) = conn.query_row(
        "SELECT archive, key_id FROM sync_self WHERE id = 1",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(match pinned {
        (Some(a), Some(k)) if a == archive && k == key_id => None,
        (a, k) => Some((a.unwrap_or_default(), k.unwrap_or_default())),
    })
}

/// Puts the push note back to what the target holds: its series ends at `seq`, reaching
/// `marks` (a target restored from an older backup lost the batches after).
pub fn reset_pushed(conn: &Connection, seq: u64, marks: Marks) -> rusqlite::Result<()> {
    conn.execute(
        "UPDATE sync_self SET pushed_seq = ?1, pushed_through = ?2, forgets_through = ?3,
           changed_through = ?4, compact_through = ?5
         WHERE id = 1",
        params![
            seq as i64,
            marks.messages,
            marks.forgets,
            marks.changed,
            marks.compact
        ],
    )?;
    Ok(())
}

/// Whether something forgotten here, a message changed since it was sent or a compact row a
/// model wrote waits to be sent (new messages are told by the ingester).
pub fn outbox_waiting(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sync_forgets
                        WHERE id > (SELECT forgets_through FROM sync_self WHERE id = 1))
             OR EXISTS (SELECT 1 FROM sync_changed
                        WHERE id > (SELECT changed_through FROM sync_self WHERE id = 1))
             OR EXISTS (SELECT 1 FROM sync_compact
                        WHERE id > (SELECT compact_through FROM sync_self WHERE id = 1))",
        [],
        |r| r.get(0),
    )
}

/// The batches of `host` that did not open or apply, to be tried again.
pub fn failures(conn: &Connection, host: &str) -> rusqlite::Result<Vec<u64>> {
    conn.prepare_cached("SELECT seq FROM sync_failures WHERE host = ?1 ORDER BY seq")?
        .query_map([host], |r| Ok(r.get::<_, i64>(0)?.max(0) as u64))?
        .collect()
}

/// The last batch of `host` handled here (0: none).
pub fn applied_seq(conn: &Connection, host: &str) -> rusqlite::Result<u64> {
    Ok(conn
        .query_row(
            "SELECT applied_seq FROM sync_peers WHERE host = ?1",
            [host],
            |r| r.get::<_, i64>(0),
        )
        .optional()?
        .unwrap_or(0)
        .max(0) as u64)
}

/// What this archive knows of its sync, for `memex sync status` and `memex hosts`.
#[derive(Debug, Default, Clone, Serialize)]
pub struct State {
    /// This archive's host id (`None` before its first sync).
    pub host: Option<String>,
    /// The name this machine goes by.
    pub name: Option<String>,
    pub archive: Option<String>,
    pub key_id: Option<String>,
    pub pushed_seq: u64,
    /// Epoch ms of the last push that sent a batch.
    pub pushed_at: Option<i64>,
    /// Messages of this machine not sent yet (new ones, and changed ones to send again).
    pub unsent: u64,
    /// Sessions and messages forgotten here whose tombstones are not sent yet.
    pub unsent_forgets: u64,
    /// Compact rows written by a model (keys: a talk's observations, a talk, a session) not
    /// sent yet.
    pub unsent_summaries: u64,
    pub peers: Vec<Peer>,
    /// Batches that did not open or apply: host, seq, why, when (epoch ms).
    pub failures: Vec<(String, u64, String, i64)>,
}

/// Another machine, as this archive knows it.
#[derive(Debug, Clone, Serialize)]
pub struct Peer {
    pub host: String,
    /// The name it goes by.
    pub name: Option<String>,
    pub applied_seq: u64,
    pub pulled_at: Option<i64>,
    /// Sessions of it stored here.
    pub sessions: u64,
}

/// The archive's sync state.
pub fn state(conn: &Connection) -> rusqlite::Result<State> {
    let (mut state, through) = conn
        .query_row(
            "SELECT host, archive, key_id, pushed_seq, pushed_at, pushed_through,
                    (SELECT COUNT(*) FROM sync_forgets WHERE id > forgets_through), name,
                    (SELECT COUNT(*) FROM (SELECT DISTINCT level, session_pk, prompt_number
                                           FROM sync_compact WHERE id > compact_through))
             FROM sync_self WHERE id = 1",
            [],
            |r| {
                Ok((
                    State {
                        host: r.get(0)?,
                        archive: r.get(1)?,
                        key_id: r.get(2)?,
                        pushed_seq: r.get::<_, i64>(3)?.max(0) as u64,
                        pushed_at: r.get(4)?,
                        unsent_forgets: r.get::<_, i64>(6)?.max(0) as u64,
                        name: r.get(7)?,
                        unsent_summaries: r.get::<_, i64>(8)?.max(0) as u64,
                        ..State::default()
                    },
                    r.get::<_, i64>(5)?,
                ))
            },
        )
        .optional()?
        .unwrap_or_default();
    state.unsent = conn.query_row(
        "SELECT (SELECT COUNT(*) FROM messages m LEFT JOIN source_files f ON f.id = m.source_file_id
                 WHERE m.id > ?1 AND (f.path IS NULL OR f.path NOT LIKE 'sync:%'))
              + (SELECT COUNT(DISTINCT message) FROM sync_changed
                 WHERE id > COALESCE((SELECT changed_through FROM sync_self WHERE id = 1), 0))",
        [through],
        |r| r.get::<_, i64>(0),
    )? as u64;
    state.peers = conn
        .prepare(
            "SELECT p.host, p.applied_seq, p.pulled_at,
                    (SELECT COUNT(*) FROM sessions s WHERE s.host = p.host), p.name
             FROM sync_peers p ORDER BY p.host",
        )?
        .query_map([], |r| {
            Ok(Peer {
                host: r.get(0)?,
                name: r.get(4)?,
                applied_seq: r.get::<_, i64>(1)?.max(0) as u64,
                pulled_at: r.get(2)?,
                sessions: r.get::<_, i64>(3)?.max(0) as u64,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    state.failures = conn
        .prepare("SELECT host, seq, reason, at FROM sync_failures ORDER BY host, seq")?
        .query_map([], |r| {
            Ok((
                r.get(0)?,
                r.get::<_, i64>(1)?.max(0) as u64,
                r.get(2)?,
                r.get(3)?,
            ))
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(state)
}

/// What became of one pulled batch.
#[derive(Debug)]
pub enum Pulled {
    /// Written (or found written before: nothing changed).
    Applied(Applied),
    /// Did not open or apply: recorded in `sync_failures`, skipped.
    Failed(String),
    /// Already handled by an earlier pull.
    Seen,
}

/// Handles batch `seq` of `host` in one transaction with the note that it was handled: the
/// payload applied, or `failure` (why it did not open) recorded and the batch skipped so that
/// the rest goes on. Batches come in order; one at or below the last handled is
/// [`Pulled::Seen`], unless it is a recorded failure being tried again (applied now, its record
/// goes).
///
/// A payload that carries forgets is applied as `memex forget` runs: nothing it removes stays
/// in a freed page or the write-ahead log.
pub fn take_batch(
    conn: &mut Connection,
    host: &str,
    seq: u64,
    batch: Result<Payload, String>,
    agents: &[&'static str],
    opts: &IngestOptions,
    now: i64,
) -> rusqlite::Result<Pulled> {
    if matches!(&batch, Ok(p) if !p.forgets.is_empty()) {
        forget::wiping(conn, |c| take_in(c, host, seq, batch, agents, opts, now))
    } else {
        take_in(conn, host, seq, batch, agents, opts, now)
    }
}

fn take_in(
    conn: &mut Connection,
    host: &str,
    seq: u64,
    batch: Result<Payload, String>,
    agents: &[&'static str],
    opts: &IngestOptions,
    now: i64,
) -> rusqlite::Result<Pulled> {
    let tx = conn.transaction()?;
    let retry: bool = tx.query_row(
        "SELECT EXISTS (SELECT 1 FROM sync_failures WHERE host = ?1 AND seq = ?2)",
        params![host, seq as i64],
        |r| r.get(0),
    )?;
    if applied_seq(&tx, host)? >= seq && !retry {
        return Ok(Pulled::Seen);
    }
    let name = batch
        .as_ref()
        .ok()
        .and_then(|p| p.host_name.clone())
        .filter(|n| valid_name(n));
    let outcome = match batch.map(|p| apply(&tx, host, p, agents, opts)) {
        Ok(Ok(a)) => Pulled::Applied(a),
        Ok(Err(ApplyError::Sql(e))) => return Err(e),
        Ok(Err(e)) => Pulled::Failed(e.to_string()),
        Err(why) => Pulled::Failed(why),
    };
    match &outcome {
        Pulled::Failed(why) => {
            tx.execute(
                "INSERT OR REPLACE INTO sync_failures (host, seq, reason, at) VALUES (?1, ?2, ?3, ?4)",
                params![host, seq as i64, why, now],
            )?;
        }
        _ => {
            tx.execute(
                "DELETE FROM sync_failures WHERE host = ?1 AND seq = ?2",
                params![host, seq as i64],
            )?;
        }
    }
    // A retried batch leaves the mark where it is (the batches after it were handled); the
    // name is the newest batch's.
    tx.execute(
        "INSERT INTO sync_peers (host, applied_seq, pulled_at, name) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (host) DO UPDATE SET applied_seq = MAX(applied_seq, excluded.applied_seq),
           pulled_at = excluded.pulled_at,
           name = CASE WHEN excluded.applied_seq >= applied_seq AND excluded.name IS NOT NULL
                       THEN excluded.name ELSE name END",
        params![host, seq as i64, now, name],
    )?;
    crate::usage::catch_up(&tx)?;
    tx.commit()?;
    Ok(outcome)
}

/// A message record as the adapter of `agent` would have parsed it.
fn parsed(
    agent: &'static str,
    m: MessageRecord,
    role: Role,
    kind: MessageKind,
    raw: Option<Vec<u8>>,
) -> ParsedMessage {
    // Ingest stores a tool input exactly when the message has a tool call, and a call id or
    // an error flag from a tool call or a tool result.
    let tool_call = m.tool_input.as_deref().map(|input| ToolCall {
        name: m.tool_name.clone().unwrap_or_default(),
        input: serde_json::from_str(input)
            .unwrap_or_else(|_| serde_json::Value::String(input.to_owned())),
        call_id: m.tool_call_id.clone(),
    });
    let tool_result = (kind == MessageKind::ToolResult
        || m.is_error
        || (tool_call.is_none() && m.tool_call_id.is_some()))
    .then(|| ToolResult {
        call_id: m.tool_call_id.clone(),
        is_error: m.is_error,
    });
    ParsedMessage {
        agent,
        session_id: m.session_id,
        message_id: m.message_id,
        parent_id: m.parent_id,
        role,
        kind,
        prompt_number: m.prompt_number,
        timestamp: m.ts,
        cwd: m.cwd,
        git_branch: m.git_branch,
        model: m.model,
        text: m.text,
        tool_call,
        tool_result,
        usage: m.usage.map(|u| Usage {
            input_tokens: u[0],
            output_tokens: u[1],
            cache_read_tokens: u[2],
            cache_creation_tokens: u[3],
            reasoning_tokens: u[4],
        }),
        usage_key: m.usage_key,
        cost_usd: m.cost_usd,
        agent_id: m.agent_id,
        flags: Flags {
            sidechain: m.sidechain,
            inherited: m.inherited,
            duplicate: m.duplicate,
        },
        line: m.line,
        seq: m.seq,
        raw,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use ai_cli_session_collector::AdapterRegistry;

    use super::*;
    use crate::ingest::{discover, import};

    const HOST: &str = "0123456789abcdef0123456789abcdef";

    fn opts() -> IngestOptions {
        IngestOptions {
            redact: true,
            fts_max_bytes: 1 << 20,
            batch_bytes: 1 << 20,
            threads: 1,
        }
    }

    fn fixtures() -> PathBuf {
        std::env::var_os("MEMEX_FIXTURES").map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures"),
            PathBuf::from,
        )
    }

    /// An archive in `data` holding the Claude, Codex and Gemini fixtures.
    fn imported(data: &Path) {
        let registry = Arc::new(AdapterRegistry::new());
        let f = fixtures();
        let roots = [
            ("claude".to_owned(), f.join("claude/projects")),
            ("codex".to_owned(), f.join("codex/handwritten/sessions")),
            (
                "gemini".to_owned(),
                f.join("gemini/handwritten/gemini-home/tmp"),
            ),
        ];
        let jobs = discover(&registry, &roots);
        assert!(jobs.len() > 5, "{jobs:?}");
        let (writer, handle) = crate::Writer::start(data).unwrap();
        let stop = AtomicBool::new(false);
        import(&writer, data, registry, jobs, &opts(), &stop, &|_| {}).unwrap();
        drop(writer);
        handle.join().unwrap();
    }

    /// One stored message: every column but the row ids, and its record's bytes.
    type Row = (Vec<rusqlite::types::Value>, Option<Vec<u8>>);

    /// Every message of the archive, in a fixed order.
    fn contents(conn: &Connection) -> Vec<Row> {
        let mut st = conn
            .prepare(
                "SELECT s.agent, s.session_id, m.message_id, m.parent_id, m.role, m.kind,
                        m.prompt_number, m.ts, m.cwd, m.git_branch, m.model,
                        COALESCE(m.text, memex_unzstd(m.text_z)), m.tool_name, m.tool_call_id,
                        m.tool_input, m.is_error, m.usage_key, m.input_tokens, m.output_tokens,
                        m.cache_read_tokens, m.cache_creation_tokens, m.reasoning_tokens,
                        m.agent_id, m.sidechain, m.inherited, m.duplicate, m.active, m.line,
                        m.seq, m.redactions, m.raw_block, m.raw_offset, m.raw_len
                 FROM messages m JOIN sessions s ON s.id = m.session_pk
                 ORDER BY 1, 2, 3",
            )
            .unwrap();
        st.query_map([], |r| {
            let columns = (0..30)
                .map(|i| r.get::<_, rusqlite::types::Value>(i))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let block: Option<i64> = r.get(30)?;
            let raw = match block {
                Some(b) => {
                    let data: Vec<u8> =
                        conn.query_row("SELECT data FROM raw_blocks WHERE id = ?1", [b], |r| {
                            r.get(0)
                        })?;
                    let all = crate::unzstd_bytes(&data);
                    let (off, len): (i64, i64) = (r.get(31)?, r.get(32)?);
                    Some(all[off as usize..(off + len) as usize].to_vec())
                }
                None => None,
            };
            Ok((columns, raw))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    /// Every payload of `conn`'s own messages, as they travel (JSON).
    fn payloads(conn: &Connection, budget: usize) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut through = Marks::default();
        while let Some(p) = next_payload(conn, through, budget).unwrap() {
            assert!(p.through > through.messages);
            through = p.marks();
            out.push(serde_json::to_vec(&p).unwrap());
        }
        out
    }

    fn apply_all(conn: &mut Connection, batches: &[Vec<u8>]) -> Applied {
        let agents = AdapterRegistry::new().names();
        let mut total = Applied::default();
        for b in batches {
            let tx = conn.transaction().unwrap();
            let p: Payload = serde_json::from_slice(b).unwrap();
            let a = apply(&tx, HOST, p, &agents, &opts()).unwrap();
            tx.commit().unwrap();
            total.messages += a.messages;
            total.sessions += a.sessions;
            total.skipped += a.skipped;
        }
        total
    }

    #[test]
    fn an_archive_travels_whole_once_and_forgetting_holds() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        imported(a.path());
        let conn_a = crate::open(a.path()).unwrap();
        let mine = contents(&conn_a);
        assert!(mine.len() > 300, "{}", mine.len());
        // Small payloads, so that sessions and files are cut across batches.
        let batches = payloads(&conn_a, 16 << 10);
        assert!(batches.len() > 5, "{}", batches.len());

        let mut conn_b = crate::open(b.path()).unwrap();
        let first = apply_all(&mut conn_b, &batches);
        assert_eq!(first.messages as usize, mine.len());
        assert_eq!(first.skipped, 0);
        assert_eq!(
            contents(&conn_b),
            mine,
            "every message, text and record as stored on A"
        );
        let (sessions, from_host): (i64, i64) = conn_b
            .query_row(
                "SELECT COUNT(*), COUNT(*) FILTER (WHERE host = ?1) FROM sessions",
                [HOST],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            sessions, from_host,
            "every session keeps the host it came from"
        );
        assert_eq!(first.sessions as i64, sessions);
        let local_names: i64 = conn_b
            .query_row(
                "SELECT COUNT(*) FROM source_files WHERE path NOT LIKE 'sync:' || ?1 || ':%'",
                [HOST],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(local_names, 0, "no pulled file is named like a local one");
        // Searchable as on A.
        let hits = |c: &Connection| -> i64 {
            c.query_row(
                "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'test'",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        assert!(hits(&conn_a) > 0);
        assert_eq!(hits(&conn_b), hits(&conn_a));
        // Nothing pulled is pushed again, and applying again changes nothing.
        assert!(
            next_payload(&conn_b, Marks::default(), 1 << 20)
                .unwrap()
                .is_none()
        );
        assert_eq!(apply_all(&mut conn_b, &batches).messages, 0);
        assert_eq!(contents(&conn_b), mine);

        // A session forgotten on B does not come back from an old batch.
        let (agent, sid): (String, String) = conn_b
            .query_row(
                "SELECT agent, session_id FROM sessions ORDER BY message_count DESC LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        crate::forget::forget(
            &mut conn_b,
            &crate::forget::Selector::Session(sid.clone()),
            false,
        )
        .unwrap();
        let left = contents(&conn_b).len();
        assert!(left < mine.len());
        assert_eq!(apply_all(&mut conn_b, &batches).messages, 0);
        let back: i64 = conn_b
            .query_row(
                "SELECT COUNT(*) FROM sessions WHERE agent = ?1 AND session_id = ?2",
                params![agent, sid],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!((back, contents(&conn_b).len()), (0, left));
    }

    #[test]
    fn a_secret_in_a_transcript_never_leaves_in_a_payload() {
        let secret = "sk-ant-api03-ErQHQwjyaxErPZDS3MoJaQNjCxkv5ndK0meGR0vRFAKEzZ1fb6d06QGofB8Ch";
        let home = tempfile::tempdir().unwrap();
        let dir = home.path().join("projects/-p");
        std::fs::create_dir_all(&dir).unwrap();
        let line = serde_json::json!({
            "type": "user", "uuid": "u1", "parentUuid": null, "sessionId": "s-secret",
            "cwd": "/p", "timestamp": "2026-06-05T10:00:00.000Z",
            "message": {"role": "user", "content": format!("deploy with key {secret} please")}
        });
        std::fs::write(dir.join("s-secret.jsonl"), format!("{line}\n")).unwrap();
        let data = tempfile::tempdir().unwrap();
        let registry = Arc::new(AdapterRegistry::new());
        let jobs = discover(
            &registry,
            &[("claude".to_owned(), home.path().join("projects"))],
        );
        let (writer, handle) = crate::Writer::start(data.path()).unwrap();
        import(
            &writer,
            data.path(),
            registry,
            jobs,
            &opts(),
            &AtomicBool::new(false),
            &|_| {},
        )
        .unwrap();
        drop(writer);
        handle.join().unwrap();
        let conn = crate::open(data.path()).unwrap();
        let p = next_payload(&conn, Marks::default(), 1 << 20)
            .unwrap()
            .unwrap();
        let json = serde_json::to_string(&p).unwrap();
        assert!(json.contains("deploy with key"), "the message travels");
        assert!(json.contains("[REDACTED_SECRET]"), "{json}");
        assert!(
            !json.contains("ErQHQwjyax"),
            "text and record are redacted: {json}"
        );
    }

    #[test]
    fn a_newer_payload_and_unknown_agents_are_refused_or_counted() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::open(dir.path()).unwrap();
        let agents = AdapterRegistry::new().names();
        let newer = Payload {
            format: PAYLOAD_FORMAT + 1,
            ..Payload::default()
        };
        assert!(matches!(
            apply(&conn, HOST, newer, &agents, &opts()),
            Err(ApplyError::NewerFormat(_))
        ));
        let m = MessageRecord {
            session_id: "s".into(),
            message_id: "m".into(),
            parent_id: None,
            role: "user".into(),
            kind: "user_prompt".into(),
            prompt_number: 1,
            ts: None,
            cwd: None,
            git_branch: None,
            model: None,
            text: "hello".into(),
            tool_name: None,
            tool_call_id: None,
            tool_input: None,
            is_error: false,
            usage_key: None,
            usage: None,
            agent_id: None,
            sidechain: false,
            inherited: false,
            duplicate: false,
            active: true,
            line: 1,
            seq: 1,
            redactions: 2,
            raw: Some(Raw::Hex("zz".into())),
            cost_usd: None,
        };
        let strange = Payload {
            format: PAYLOAD_FORMAT,
            through: 1,
            sources: vec![
                Source {
                    agent: "vim".into(),
                    path: "/x".into(),
                    sessions: vec![],
                    messages: vec![m.clone()],
                },
                Source {
                    agent: "claude".into(),
                    path: "/y".into(),
                    sessions: vec![],
                    messages: vec![
                        MessageRecord {
                            kind: "shouting".into(),
                            ..m.clone()
                        },
                        m,
                    ],
                },
            ],
            ..Payload::default()
        };
        let a = apply(&conn, HOST, strange, &agents, &opts()).unwrap();
        assert_eq!((a.messages, a.skipped), (1, 2));
        // A record that is not hex is dropped, the message kept, with the count of secrets
        // its own machine redacted from it.
        let (raw, redactions): (Option<i64>, i64) = conn
            .query_row("SELECT raw_block, redactions FROM messages", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!((raw, redactions), (None, 2));
    }

    /// Writes a compact row of session `pk` as compaction would (indexed).
    fn summarise(conn: &Connection, pk: i64, prompt: i64, provider: &str, summary: &str) {
        crate::fts::unindex_layer_rows(
            conn,
            Layer::Talks,
            "session_pk = ?1 AND prompt_number = ?2",
            &[pk, prompt],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO talk_summaries (session_pk, prompt_number, user_request, summary,
               completed, files_involved, raw_tokens, summary_tokens, provider, prompt_version,
               confidence, created_at)
             VALUES (?1, ?2, 'asked', ?3, 'done', '[\"src/a.rs\"]', 100, 10, ?4, 'v1', 0.9, 1)",
            params![pk, prompt, summary, provider],
        )
        .unwrap();
        crate::fts::index_layer_row(conn, Layer::Talks, conn.last_insert_rowid()).unwrap();
    }

    /// Every payload after `from`, applied to `to` as from `host`; returns the marks reached
    /// and the compact records sent.
    fn carry(from: &Connection, marks: Marks, to: &mut Connection, host: &str) -> (Marks, u64) {
        let agents = AdapterRegistry::new().names();
        let (mut marks, mut sent) = (marks, 0);
        while let Some(p) = next_payload(from, marks, 16 << 10).unwrap() {
            marks = p.marks();
            sent += p.compact.len() as u64;
            let p: Payload = serde_json::from_slice(&serde_json::to_vec(&p).unwrap()).unwrap();
            let tx = to.transaction().unwrap();
            apply(&tx, host, p, &agents, &opts()).unwrap();
            tx.commit().unwrap();
        }
        (marks, sent)
    }

    fn talks(conn: &Connection, word: &str) -> Vec<(String, i64, String)> {
        conn.prepare(
            "SELECT s.session_id, x.prompt_number, x.provider FROM talk_summaries x
             JOIN sessions s ON s.id = x.session_pk
             WHERE x.id IN (SELECT rowid FROM talk_summaries_fts WHERE talk_summaries_fts MATCH ?1)
             ORDER BY 1, 2",
        )
        .unwrap()
        .query_map([word], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
    }

    #[test]
    fn summaries_a_model_wrote_travel_once_and_the_heuristics_stay_home() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        imported(a.path());
        let conn_a = crate::open(a.path()).unwrap();
        let (pk, sid): (i64, String) = conn_a
            .query_row(
                "SELECT id, session_id FROM sessions WHERE prompt_count >= 3
                 ORDER BY id LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        // Written before the archive first synced: the model's row is listed when it does.
        summarise(&conn_a, pk, 1, "anthropic", "quokka before");
        summarise(&conn_a, pk, 2, crate::HEURISTIC, "quokka free");
        host_id(&conn_a, || "a".repeat(32)).unwrap();
        // Written after: listed as it is written.
        summarise(&conn_a, pk, 3, "openai", "quokka after");
        assert_eq!(state(&conn_a).unwrap().unsent_summaries, 2);
        assert!(outbox_waiting(&conn_a).unwrap());

        let mut conn_b = crate::open(b.path()).unwrap();
        let (marks, sent) = carry(&conn_a, Marks::default(), &mut conn_b, HOST);
        assert_eq!(sent, 2);
        let want = vec![
            (sid.clone(), 1, "anthropic".to_owned()),
            (sid.clone(), 3, "openai".to_owned()),
        ];
        assert_eq!(
            talks(&conn_b, "quokka"),
            want,
            "found, the free one not sent"
        );
        let done: Vec<(String, i64, String)> = conn_b
            .prepare("SELECT level, prompt_number, state FROM compact_jobs ORDER BY 2")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            done,
            [
                ("l2".into(), 1, "done".into()),
                ("l2".into(), 3, "done".into())
            ],
            "not written again here"
        );
        // What B took is not B's to send.
        host_id(&conn_b, || "b".repeat(32)).unwrap();
        assert_eq!(
            state(&conn_b).unwrap().unsent_summaries,
            0,
            "taken rows are not listed"
        );

        // Rewritten on A (a regeneration, `memex scrub`): travels again and takes the place
        // of the old one; applied twice, it is there once.
        summarise(&conn_a, pk, 3, "openai", "quokka rewritten");
        conn_a
            .execute(
                "UPDATE talk_summaries SET summary = 'quokka scrubbed' WHERE prompt_number = 1
                 AND session_pk = ?1",
                [pk],
            )
            .unwrap();
        let before = marks;
        let (_, sent) = carry(&conn_a, before, &mut conn_b, HOST);
        assert_eq!(sent, 2);
        carry(&conn_a, before, &mut conn_b, HOST);
        assert_eq!(talks(&conn_b, "quokka"), want);
        assert_eq!(talks(&conn_b, "rewritten").len(), 1);
        assert_eq!(talks(&conn_b, "scrubbed").len(), 1);
        assert!(
            talks(&conn_b, "before").is_empty(),
            "the old text left the index"
        );

        // Sent under another machine's name, a row does not touch sessions that are not that
        // machine's.
        summarise(&conn_a, pk, 3, "openai", "quokka impostor");
        carry(&conn_a, before, &mut conn_b, &"c".repeat(32));
        assert!(talks(&conn_b, "impostor").is_empty());
        assert_eq!(talks(&conn_b, "rewritten").len(), 1);
    }

    /// Compact records a hostile or broken sender made: each counted and left out, nothing
    /// of them stored, the rest of the payload applied.
    #[test]
    fn malformed_summaries_are_counted_and_left_out() {
        use crate::compact::{Provenance, Rows, SessionSummary, Stored};
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::open(dir.path()).unwrap();
        conn.execute(
            "INSERT INTO sessions (agent, session_id, source_path, host)
             VALUES ('claude', 's', 'sync:x', ?1)",
            [HOST],
        )
        .unwrap();
        let by = |provider: &str| Provenance {
            provider: provider.into(),
            model: None,
            prompt_version: "v1".into(),
            tokens_input: 0,
            tokens_output: 0,
            confidence: 0.5,
            fallback_reason: None,
        };
        let session = |provider: &str| Rows::Session {
            row: Stored {
                value: SessionSummary {
                    summary: "planted".into(),
                    key_points: vec![],
                    files_involved: vec![],
                    technologies: vec![],
                    talks_covered: 1,
                },
                provenance: by(provider),
                created_at: 0,
            },
            raw_tokens: 0,
            updated_at: 0,
        };
        let record = |prompt_number: i64, rows: Rows| CompactRecord {
            agent: "claude".into(),
            session_id: "s".into(),
            prompt_number,
            rows,
        };
        let payload = Payload {
            format: PAYLOAD_FORMAT,
            compact: vec![
                record(3, session("openai")),
                record(-1, Rows::Observations(vec![])),
                record(1, Rows::Observations(vec![])),
                record(0, session("")),
            ],
            ..Payload::default()
        };
        let agents = AdapterRegistry::new().names();
        let a = apply(&conn, HOST, payload, &agents, &opts()).unwrap();
        assert_eq!((a.summaries, a.skipped), (0, 4));
        let stored: i64 = conn
            .query_row("SELECT COUNT(*) FROM session_summaries", [], |r| r.get(0))
            .unwrap();
        assert_eq!(stored, 0);
        // The same record made well is stored, with this machine's redaction rules applied
        // to its text (a sender may hold a secret its own rules missed).
        let secret = "ghp_5bZc5e6AImY7yYgTwmtr7YSRIFNNhnIMFAKE";
        let mut well = record(0, session("openai"));
        if let Rows::Session { row, .. } = &mut well.rows {
            row.value.summary = format!("pushed with {secret}");
        }
        let payload = Payload {
            format: PAYLOAD_FORMAT,
            compact: vec![well],
            ..Payload::default()
        };
        let a = apply(&conn, HOST, payload, &agents, &opts()).unwrap();
        assert_eq!((a.summaries, a.skipped), (1, 0));
        let summary: String = conn
            .query_row("SELECT summary FROM session_summaries", [], |r| r.get(0))
            .unwrap();
        assert!(
            summary.starts_with("pushed with") && !summary.contains(secret),
            "{summary}"
        );
    }
}
