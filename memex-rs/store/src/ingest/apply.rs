//! The writer's part: a batch and its file cursor stored together or not at all (sessions,
//! messages, raw blocks, search rows, edits), keeping what the user forgot forgotten.

use std::collections::{HashMap, HashSet};

use ai_cli_session_collector::{Edit, MessageKind, ParsedMessage};
use rusqlite::{Connection, params};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::prepare::{Prepared, RawRef};
use super::{Batch, PreparedSession};

/// What a batch changed.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Applied {
    pub inserted: u64,
    pub updated: u64,
    pub prompts: u64,
    /// The sessions the batch touched, with their last activity (epoch ms) afterwards.
    #[serde(skip)]
    pub sessions: Vec<(i64, Option<i64>)>,
}

/// Writes one batch and its file cursor in one transaction.
pub fn apply(conn: &mut Connection, b: &Batch) -> rusqlite::Result<Applied> {
    let tx = conn.transaction()?;
    let applied = apply_in(&tx, b)?;
    crate::usage::catch_up(&tx)?;
    tx.commit()?;
    Ok(applied)
}

/// What became of one batch of [`apply_all`].
#[derive(Debug)]
pub enum Outcome {
    Stored(Applied),
    /// Not stored, and nothing of it is in the archive.
    Failed(rusqlite::Error),
    /// Not tried: an earlier batch of the same file failed, and this one's cursor is past it.
    Skipped,
}

/// Writes batches, each with its file cursor, in one transaction. One commit for several
/// batches writes the pages they share (the B-trees' right edges, the full-text index's
/// structure) once, and the full-text index gets one segment for all of them instead of one
/// per batch. When anything fails, that transaction is rolled back whole and the batches are
/// written again one transaction each, so that a failing batch takes no other with it and its
/// file's later batches are skipped (storing their cursor would skip the lost batch for good).
/// No savepoints: FTS5 writes a segment at each one, and an error after which SQLite rolls back
/// the whole transaction (a full disk, an I/O error) would end every savepoint with it.
/// SQLite also opens a savepoint of its own (a statement journal) for a statement that may
/// fail after changing some rows, and FTS5 writes a segment there as well: an upsert with
/// `RETURNING`, an `UPDATE` of several rows or of a table with triggers. A batch runs such a
/// statement only when it has work for it (a message seen again, a rewind, a sub-agent message
/// to place), so that for new messages what the full-text index gathers in memory is written
/// once per transaction, not once per batch.
pub fn apply_all(conn: &mut Connection, batches: &[Batch]) -> Vec<Outcome> {
    if batches.len() > 1 {
        let together = (|| {
            let tx = conn.transaction()?;
            let applied = batches
                .iter()
                .map(|b| apply_in(&tx, b))
                .collect::<rusqlite::Result<Vec<_>>>()?;
            crate::usage::catch_up(&tx)?;
            tx.commit()?;
            Ok::<_, rusqlite::Error>(applied)
        })();
        // On error the transaction was rolled back when dropped.
        match together {
            Ok(applied) => return applied.into_iter().map(Outcome::Stored).collect(),
            Err(e) => tracing::debug!(
                batches = batches.len(),
                error = %e,
                "batches written together failed; writing them one by one"
            ),
        }
    }
    let mut failed: HashSet<&std::path::Path> = HashSet::new();
    batches
        .iter()
        .map(|b| {
            if failed.contains(b.path.as_path()) {
                return Outcome::Skipped;
            }
            match apply(conn, b) {
                Ok(a) => Outcome::Stored(a),
                Err(e) => {
                    failed.insert(&b.path);
                    Outcome::Failed(e)
                }
            }
        })
        .collect()
}

/// `execute` through the connection's statement cache: the statements of this file run once or
/// more per batch, and compiling them again every time was about 1 % of the writer's time.
fn run(tx: &Connection, sql: &str, p: impl rusqlite::Params) -> rusqlite::Result<usize> {
    tx.prepare_cached(sql)?.execute(p)
}

/// `query_row` through the connection's statement cache (see [`run`]).
fn one<T>(
    tx: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    tx.prepare_cached(sql)?.query_row(p, f)
}

pub(crate) fn apply_in(tx: &Connection, b: &Batch) -> rusqlite::Result<Applied> {
    let now = chrono::Utc::now().timestamp_millis();
    let path = b.path.to_string_lossy();
    // What the user forgot stays forgotten: its sessions and its messages' places are skipped.
    let forgotten = Forgotten::load(tx, b)?;
    if forgotten.any() && forgotten_file(tx, &path, b, &forgotten)? {
        return Ok(Applied::default());
    }
    let cursor_json = serde_json::to_string(&b.cursor).unwrap_or_default();
    let bad = b.issues.iter().filter(|i| !i.kept).count() as i64;
    run(
        tx,
        "INSERT INTO source_files (path, agent, root, cursor, size, mtime, fingerprint, bad_lines, gone, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9)
         ON CONFLICT (path) DO UPDATE SET cursor = excluded.cursor, size = excluded.size,
           mtime = excluded.mtime, fingerprint = excluded.fingerprint,
           bad_lines = source_files.bad_lines + excluded.bad_lines, gone = 0,
           updated_at = excluded.updated_at",
        params![
            path,
            b.agent,
            b.root.to_string_lossy(),
            cursor_json,
            b.seen.map_or(-1, |(size, _)| size as i64),
            b.seen.map_or(-1, |(_, mtime)| mtime),
            b.cursor.head,
            bad,
            now
        ],
    )?;
    let file_id: i64 = one(
        tx,
        "SELECT id FROM source_files WHERE path = ?1",
        [&path],
        |r| r.get(0),
    )?;
    {
        let mut ins = tx.prepare_cached(
            "INSERT OR IGNORE INTO parse_issues (source_file_id, line, byte_offset, reason, kept)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for i in &b.issues {
            ins.execute(params![
                file_id,
                i.line as i64,
                i.byte_offset as i64,
                i.reason,
                i.kept
            ])?;
        }
    }

    // Sessions first, so messages can refer to them.
    let mut session_pk: HashMap<String, i64> = HashMap::new();
    for s in &b.sessions {
        if forgotten.session(&s.info.session_id) {
            continue;
        }
        let pk = upsert_session(tx, b.agent, s, &path)?;
        session_pk.insert(s.info.session_id.clone(), pk);
    }
    let mut applied = Applied::default();
    let mut redactions = 0i64;
    let mut touched: HashSet<i64> = session_pk.values().copied().collect();
    let mut block_ids = Vec::with_capacity(b.raw_blocks.len());
    {
        let mut st = tx.prepare_cached("INSERT INTO raw_blocks (data) VALUES (?1)")?;
        for block in &b.raw_blocks {
            st.execute([block])?;
            block_ids.push(tx.last_insert_rowid());
        }
    }
    // Which stored message now points at which record of this batch's blocks (the last copy
    // wins), and the earlier blocks that lost a message to a newer copy.
    // Keyed by rowid, one entry per message: a fast hash (these are our own ids, not input).
    let mut uses: HashMap<i64, RawRef, ahash::RandomState> = HashMap::default();
    let mut released: HashMap<i64, u64> = HashMap::new();
    let mut ins = tx.prepare_cached(INSERT_MESSAGE)?;
    let mut fts_ins =
        tx.prepare_cached("INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)")?;
    // A batch's messages come session by session: the last one's key is nearly always it.
    let mut last: Option<(&str, i64)> = None;
    for p in &b.messages {
        let m = &p.m;
        if forgotten.message(m) {
            continue;
        }
        let pk = match last {
            Some((sid, pk)) if sid == m.session_id => pk,
            _ => {
                let pk = match session_pk.get(&m.session_id) {
                    Some(&pk) => pk,
                    None => {
                        let pk = ensure_session(tx, b.agent, &m.session_id, &path)?;
                        session_pk.insert(m.session_id.clone(), pk);
                        touched.insert(pk);
                        pk
                    }
                };
                last = Some((&m.session_id, pk));
                pk
            }
        };
        let keep_raw = !forgotten.record(m);
        let row = MessageParams::new(pk, file_id, p, &block_ids, keep_raw);
        let n = ins.execute(&row.values()[..])?;
        if n == 1 {
            let rowid = tx.last_insert_rowid();
            if let Some(idx) = p.index() {
                fts_ins.execute(params![rowid, idx])?;
            }
            if let Some(r) = p.raw_ref.filter(|_| keep_raw) {
                uses.insert(rowid, r);
            }
            applied.inserted += 1;
            redactions += i64::from(p.redactions);
            if m.kind == MessageKind::UserPrompt {
                applied.prompts += 1;
            }
        } else if let Some((id, old_block)) = update_existing(tx, &row)? {
            applied.updated += 1;
            if let Some(r) = p.raw_ref.filter(|_| keep_raw) {
                uses.insert(id, r);
                if let Some(old) = old_block.filter(|o| !block_ids.contains(o)) {
                    *released.entry(old).or_default() += 1;
                }
            }
        }
    }
    drop(ins);
    drop(fts_ins);
    keep_used_records(tx, b, &block_ids, &uses)?;
    crate::release_raw(tx, released)?;
    if redactions > 0 {
        run(
            tx,
            "UPDATE source_files SET redactions = redactions + ?1 WHERE id = ?2",
            [redactions, file_id],
        )?;
    }

    for e in &b.edits {
        match e {
            Edit::Deactivate {
                session_id,
                message_ids,
            } if !forgotten.session(session_id) => {
                let pk = session_pk_of(tx, b.agent, session_id)?;
                touched.insert(pk);
                let mut st = tx.prepare_cached(
                    "UPDATE messages SET active = 0 WHERE session_pk = ?1 AND message_id = ?2",
                )?;
                for id in message_ids {
                    st.execute(params![pk, id])?;
                }
            }
            Edit::DeactivateTalks {
                session_id,
                from_prompt,
                to_prompt,
            } if !forgotten.session(session_id) => {
                let pk = session_pk_of(tx, b.agent, session_id)?;
                touched.insert(pk);
                run(
                    tx,
                    "UPDATE messages SET active = 0 WHERE session_pk = ?1 AND prompt_number BETWEEN ?2 AND ?3",
                    params![pk, from_prompt, to_prompt],
                )?;
            }
            // Edits of a forgotten session: nothing of it is stored.
            Edit::Deactivate { .. } | Edit::DeactivateTalks { .. } => {}
        }
    }
    let mut activity = tx.prepare_cached("SELECT updated_at FROM sessions WHERE id = ?1")?;
    let mut link = tx.prepare_cached(
        "INSERT OR IGNORE INTO session_files (session_pk, source_file_id) VALUES (?1, ?2)",
    )?;
    for pk in touched {
        refresh_session(tx, pk)?;
        link.execute([pk, file_id])?;
        let updated_at: Option<i64> = activity.query_row([pk], |r| r.get(0))?;
        applied.sessions.push((pk, updated_at));
    }
    Ok(applied)
}

/// A message seen again (Gemini re-writes a message as it changes; a rewritten file is read
/// again): the latest copy wins, the original position and prompt number stay. Returns the
/// message's id and the raw block it pointed at before, when anything changed.
fn update_existing(
    tx: &Connection,
    row: &MessageParams<'_>,
) -> rusqlite::Result<Option<(i64, Option<i64>)>> {
    let p = row.p;
    let (id, old_text, old_z, old_block): (i64, Option<String>, Option<Vec<u8>>, Option<i64>) =
        one(
            tx,
            "SELECT id, text, text_z, raw_block FROM messages WHERE session_pk = ?1 AND message_id = ?2",
            params![row.pk, p.m.message_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
    // Texts are compared, not their compressed bytes: the same text compressed at another zstd
    // level or by another zstd version (an archive written before an upgrade) has other bytes,
    // and it must not count as an edit (a new full-text row, a new embedding). The stored
    // bytes are then kept.
    let same_text = match (&old_text, &old_z) {
        (Some(t), _) => p.text.as_deref() == Some(t.as_str()),
        (None, Some(z)) => {
            p.text.is_none()
                && (p.text_z.as_deref() == Some(z.as_slice())
                    || crate::unzstd_bytes(z) == p.m.text.as_bytes())
        }
        (None, None) => p.text.is_none() && p.text_z.is_none(),
    };
    let mut row = row.clone();
    if same_text && old_z.is_some() {
        row.text_z = old_z.as_deref();
    }
    let changed = tx
        .prepare_cached(UPDATE_MESSAGE)?
        .execute(&row.values()[..])?;
    if changed > 0 && !same_text {
        run(tx, "DELETE FROM messages_fts WHERE rowid = ?1", [id])?;
        if let Some(idx) = p.index() {
            run(
                tx,
                "INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)",
                params![id, idx],
            )?;
            crate::fts::reindexed(tx, "messages_fts", id)?;
        }
    }
    Ok((changed > 0).then_some((id, old_block)))
}

/// Keeps, of this batch's raw blocks, only the records some stored message points at: a block
/// none uses is deleted, a block only partly used is packed again with just those records
/// (a rewritten document read again would otherwise store a full copy each time), and every
/// kept block is counted in `raw_refs`.
fn keep_used_records(
    tx: &Connection,
    b: &Batch,
    block_ids: &[i64],
    uses: &HashMap<i64, RawRef, ahash::RandomState>,
) -> rusqlite::Result<()> {
    if block_ids.is_empty() {
        return Ok(());
    }
    let mut records = vec![0usize; block_ids.len()];
    for p in &b.messages {
        if let Some(r) = p.raw_ref {
            records[r.block] += 1;
        }
    }
    let mut per_block: Vec<Vec<(i64, RawRef)>> = vec![Vec::new(); block_ids.len()];
    for (&msg, &r) in uses {
        per_block[r.block].push((msg, r));
    }
    for (i, used) in per_block.iter_mut().enumerate() {
        let id = block_ids[i];
        if used.is_empty() {
            tx.prepare_cached("DELETE FROM raw_blocks WHERE id = ?1")?
                .execute([id])?;
            continue;
        }
        let mut bytes = b.raw_blocks[i].len();
        if used.len() < records[i] {
            used.sort_by_key(|(_, r)| r.offset);
            let all = crate::unzstd_bytes(&b.raw_blocks[i]);
            let mut buf = Vec::new();
            let mut moved =
                tx.prepare_cached("UPDATE messages SET raw_offset = ?2 WHERE id = ?1")?;
            for (msg, r) in used.iter() {
                let Some(rec) = all.get(r.offset..r.offset + r.len) else {
                    continue;
                };
                moved.execute([*msg, buf.len() as i64])?;
                buf.extend_from_slice(rec);
            }
            let packed = crate::zstd_bytes(&buf);
            bytes = packed.len();
            tx.prepare_cached("UPDATE raw_blocks SET data = ?2 WHERE id = ?1")?
                .execute(params![id, packed])?;
        }
        tx.prepare_cached("INSERT INTO raw_refs (block, refs, bytes) VALUES (?1, ?2, ?3)")?
            .execute(params![id, used.len() as i64, bytes as i64])?;
    }
    Ok(())
}

/// What the user forgot, as it concerns one batch.
struct Forgotten {
    sessions: HashSet<String>,
    /// (session id, message id).
    messages: HashSet<(String, String)>,
    /// Lines holding a forgotten message: their record's raw bytes are not kept either (the
    /// record's first message carries them, and they include the forgotten part).
    lines: HashSet<u64>,
}

impl Forgotten {
    fn load(tx: &Connection, b: &Batch) -> rusqlite::Result<Forgotten> {
        let mut f = Forgotten {
            sessions: HashSet::new(),
            messages: HashSet::new(),
            lines: HashSet::new(),
        };
        let (any_session, any_message): (bool, bool) = one(
            tx,
            "SELECT EXISTS (SELECT 1 FROM forgotten_sessions WHERE agent = ?1),
                    EXISTS (SELECT 1 FROM forgotten_messages WHERE agent = ?1)",
            [b.agent],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if !any_session && !any_message {
            return Ok(f);
        }
        let ids: HashSet<&str> = b
            .sessions
            .iter()
            .map(|s| s.info.session_id.as_str())
            .chain(b.messages.iter().map(|p| p.m.session_id.as_str()))
            .collect();
        let mut whole = tx.prepare_cached(
            "SELECT 1 FROM forgotten_sessions WHERE agent = ?1 AND session_id = ?2",
        )?;
        let mut some = tx.prepare_cached(
            "SELECT message_id FROM forgotten_messages WHERE agent = ?1 AND session_id = ?2",
        )?;
        for id in ids {
            if any_session && whole.exists(params![b.agent, id])? {
                f.sessions.insert(id.to_owned());
            }
            if any_message {
                for m in some.query_map(params![b.agent, id], |r| r.get::<_, String>(0))? {
                    f.messages.insert((id.to_owned(), m?));
                }
            }
        }
        if !f.messages.is_empty() {
            f.lines = b
                .messages
                .iter()
                .filter(|p| {
                    f.messages
                        .contains(&(p.m.session_id.clone(), p.m.message_id.clone()))
                })
                .map(|p| p.m.line)
                .collect();
        }
        Ok(f)
    }

    /// Whether anything of the batch is forgotten.
    fn any(&self) -> bool {
        !self.sessions.is_empty() || !self.messages.is_empty()
    }

    fn session(&self, id: &str) -> bool {
        !self.sessions.is_empty() && self.sessions.contains(id)
    }

    fn message(&self, m: &ParsedMessage) -> bool {
        self.session(&m.session_id)
            || (!self.messages.is_empty()
                && self
                    .messages
                    .contains(&(m.session_id.clone(), m.message_id.clone())))
    }

    /// Whether the record of `m` held a forgotten message.
    fn record(&self, m: &ParsedMessage) -> bool {
        !self.lines.is_empty() && self.lines.contains(&m.line)
    }
}

/// A batch of a file `forget` left with nothing archived (`forgotten_files`): while everything
/// in it stays forgotten, no row names the file again (its stamp is kept under the path's
/// digest, so an unchanged file is not read again); once it holds something new, it is a file
/// like any other. Whether the batch is done with (nothing of it to store).
fn forgotten_file(
    tx: &Connection,
    path: &str,
    b: &Batch,
    forgotten: &Forgotten,
) -> rusqlite::Result<bool> {
    let digest = super::super::path_digest(path);
    let known: bool = one(
        tx,
        "SELECT EXISTS (SELECT 1 FROM forgotten_files WHERE digest = ?1)",
        [&digest],
        |r| r.get(0),
    )?;
    if !known {
        return Ok(false);
    }
    let survives = b
        .sessions
        .iter()
        .any(|s| !forgotten.session(&s.info.session_id))
        || b.messages.iter().any(|p| !forgotten.message(&p.m));
    if survives {
        run(
            tx,
            "DELETE FROM forgotten_files WHERE digest = ?1",
            [&digest],
        )?;
        return Ok(false);
    }
    if let Some((size, mtime)) = b.seen {
        run(
            tx,
            "UPDATE forgotten_files SET size = ?2, mtime = ?3 WHERE digest = ?1",
            params![digest, size as i64, mtime],
        )?;
    }
    Ok(true)
}

/// Stores a message; parameters are numbered as in [`MessageParams::values`].
const INSERT_MESSAGE: &str =
    "INSERT OR IGNORE INTO messages (session_pk, message_id, source_file_id,
    line, seq, parent_id, role, kind, prompt_number, ts, cwd, git_branch, model, text, text_z,
    tool_name, tool_call_id, tool_input, is_error, usage_key, input_tokens, output_tokens,
    cache_read_tokens, cache_creation_tokens, reasoning_tokens, agent_id, sidechain, inherited,
    duplicate, active, redactions, raw_block, raw_offset, raw_len, cost_usd)
  VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
    ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, 1, ?30, ?31, ?32, ?33, ?34)";

/// Replaces the content of a stored message with a newer copy, when anything changed. Same
/// parameter numbering as [`INSERT_MESSAGE`] (SQLite counts parameters by the highest index,
/// so the ones it does not use are still bound).
const UPDATE_MESSAGE: &str = "UPDATE messages SET role = ?7, kind = ?8, ts = COALESCE(?10, ts),
    model = COALESCE(?13, model), text = ?14, text_z = ?15, tool_name = ?16, tool_input = ?18,
    is_error = ?19, usage_key = COALESCE(?20, usage_key), input_tokens = COALESCE(?21, input_tokens),
    output_tokens = COALESCE(?22, output_tokens), cache_read_tokens = COALESCE(?23, cache_read_tokens),
    cache_creation_tokens = COALESCE(?24, cache_creation_tokens),
    reasoning_tokens = COALESCE(?25, reasoning_tokens), cost_usd = COALESCE(?34, cost_usd),
    active = 1,
    raw_block = COALESCE(?31, raw_block), raw_offset = COALESCE(?32, raw_offset),
    raw_len = COALESCE(?33, raw_len), redactions = MAX(redactions, ?30)
  WHERE session_pk = ?1 AND message_id = ?2
    AND (text IS NOT ?14 OR text_z IS NOT ?15 OR kind IS NOT ?8 OR active = 0
         OR output_tokens IS NOT COALESCE(?22, output_tokens) OR tool_input IS NOT ?18
         OR cost_usd IS NOT COALESCE(?34, cost_usd)
         OR is_error IS NOT ?19)";

/// One prepared message as SQL parameters, for [`INSERT_MESSAGE`] and [`UPDATE_MESSAGE`].
#[derive(Clone)]
struct MessageParams<'a> {
    pk: i64,
    file_id: i64,
    p: &'a Prepared,
    /// The compressed text: the message's own, or the stored bytes of the same text.
    text_z: Option<&'a [u8]>,
    line: i64,
    seq: i64,
    role: &'static str,
    kind: &'static str,
    tool_name: Option<&'a str>,
    call_id: Option<&'a str>,
    is_error: bool,
    usage: [Option<i64>; 5],
    raw: [Option<i64>; 3],
}

impl<'a> MessageParams<'a> {
    fn new(pk: i64, file_id: i64, p: &'a Prepared, block_ids: &[i64], keep_raw: bool) -> Self {
        let m = &p.m;
        let u = m.usage;
        let n = |f: fn(&ai_cli_session_collector::Usage) -> u64| u.as_ref().map(|u| f(u) as i64);
        MessageParams {
            pk,
            file_id,
            p,
            text_z: p.text_z.as_deref(),
            line: m.line as i64,
            seq: m.seq as i64,
            role: m.role.as_str(),
            kind: m.kind.as_str(),
            tool_name: m.tool_call.as_ref().map(|t| t.name.as_str()),
            call_id: m
                .tool_call
                .as_ref()
                .and_then(|t| t.call_id.as_deref())
                .or_else(|| m.tool_result.as_ref().and_then(|r| r.call_id.as_deref())),
            is_error: m.tool_result.as_ref().is_some_and(|r| r.is_error),
            usage: [
                n(|u| u.input_tokens),
                n(|u| u.output_tokens),
                n(|u| u.cache_read_tokens),
                n(|u| u.cache_creation_tokens),
                n(|u| u.reasoning_tokens),
            ],
            raw: match p.raw_ref.filter(|_| keep_raw) {
                Some(r) => [
                    Some(block_ids[r.block]),
                    Some(r.offset as i64),
                    Some(r.len as i64),
                ],
                None => [None; 3],
            },
        }
    }

    fn values(&self) -> [&dyn rusqlite::ToSql; 34] {
        let (p, m) = (self.p, &self.p.m);
        [
            &self.pk,
            &m.message_id,
            &self.file_id,
            &self.line,
            &self.seq,
            &m.parent_id,
            &self.role,
            &self.kind,
            &m.prompt_number,
            &m.timestamp,
            &m.cwd,
            &m.git_branch,
            &m.model,
            &p.text,
            &self.text_z,
            &self.tool_name,
            &self.call_id,
            &p.tool_input,
            &self.is_error,
            &m.usage_key,
            &self.usage[0],
            &self.usage[1],
            &self.usage[2],
            &self.usage[3],
            &self.usage[4],
            &m.agent_id,
            &m.flags.sidechain,
            &m.flags.inherited,
            &m.flags.duplicate,
            &p.redactions,
            &self.raw[0],
            &self.raw[1],
            &self.raw[2],
            &m.cost_usd,
        ]
    }
}

/// Stores what a batch learned about one session, merged into what is known. The session's
/// source path is the first file that named it, except that a session's own transcript file
/// (a Claude `<session>.jsonl`) always names it: two parser threads may hand over a sub-agent's
/// file first, and the path must not depend on that. An empty path (a session an edit created
/// before any of its files was stored) is no path.
fn upsert_session(
    tx: &Connection,
    agent: &str,
    s: &PreparedSession,
    path: &str,
) -> rusqlite::Result<i64> {
    let i = &s.info;
    let (rank, title) = i
        .title
        .as_ref()
        .map_or((0, None), |(r, t)| (*r as i64, Some(t.as_str())));
    run(
        tx,
        "INSERT INTO sessions (agent, session_id, project_path, git_root, project_hash, git_branch, model,
           title, title_rank, parent_session_id, is_subagent, source_path, started_at, updated_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
         ON CONFLICT (agent, session_id) DO UPDATE SET
           project_path = COALESCE(sessions.project_path, excluded.project_path),
           git_root = COALESCE(sessions.git_root, excluded.git_root),
           project_hash = COALESCE(sessions.project_hash, excluded.project_hash),
           git_branch = COALESCE(sessions.git_branch, excluded.git_branch),
           model = COALESCE(excluded.model, sessions.model),
           title = CASE WHEN excluded.title_rank > sessions.title_rank
                          OR (excluded.title_rank = sessions.title_rank AND excluded.title_rank >= 3)
                        THEN COALESCE(excluded.title, sessions.title) ELSE sessions.title END,
           title_rank = MAX(sessions.title_rank, excluded.title_rank),
           parent_session_id = COALESCE(sessions.parent_session_id, excluded.parent_session_id),
           is_subagent = MAX(sessions.is_subagent, excluded.is_subagent),
           source_path = CASE WHEN ?15 THEN excluded.source_path
                              ELSE COALESCE(NULLIF(sessions.source_path, ''), excluded.source_path) END,
           started_at = MIN(COALESCE(sessions.started_at, excluded.started_at), COALESCE(excluded.started_at, sessions.started_at)),
           updated_at = MAX(COALESCE(sessions.updated_at, excluded.updated_at), COALESCE(excluded.updated_at, sessions.updated_at))",
        params![
            agent,
            i.session_id,
            i.project_path,
            s.git_root,
            i.project_hash,
            i.git_branch,
            i.model,
            title,
            rank,
            i.parent_session_id,
            i.is_subagent,
            path,
            i.started_at,
            i.updated_at,
            i.own_file
        ],
    )?;
    session_id_of(tx, agent, &i.session_id)
}

/// The row of a session that has no info in the batch (an edit's, or a message's whose file
/// reports no session): created with `path` as its source, or given `path` when it has none
/// yet (a row an edit made first has an empty one).
fn ensure_session(tx: &Connection, agent: &str, sid: &str, path: &str) -> rusqlite::Result<i64> {
    run(
        tx,
        "INSERT INTO sessions (agent, session_id, source_path) VALUES (?1, ?2, ?3)
         ON CONFLICT (agent, session_id) DO UPDATE SET source_path = excluded.source_path
           WHERE excluded.source_path <> '' AND COALESCE(sessions.source_path, '') = ''",
        params![agent, sid, path],
    )?;
    session_id_of(tx, agent, sid)
}

/// The row id of a stored session. Read by a query of its own rather than an upsert's
/// `RETURNING`: see [`apply_all`] on statements that would flush the full-text index.
fn session_id_of(tx: &Connection, agent: &str, sid: &str) -> rusqlite::Result<i64> {
    one(
        tx,
        "SELECT id FROM sessions WHERE agent = ?1 AND session_id = ?2",
        params![agent, sid],
        |r| r.get(0),
    )
}

fn session_pk_of(tx: &Connection, agent: &str, sid: &str) -> rusqlite::Result<i64> {
    ensure_session(tx, agent, sid, "")
}

/// Recomputes a session's counters (its talks run up to the highest number of its active
/// prompts: a rewound prompt stays stored, inactive, and a prompt written after it may take its
/// number again; a rolled-back one keeps its number), and places sub-agent messages
/// (read from their own files, without the parent's prompt counter) in the talk that was running
/// when they were written.
pub(crate) fn refresh_session(tx: &Connection, pk: i64) -> rusqlite::Result<()> {
    // Asked first, because the update touches several rows, so it would flush the full-text
    // index (see [`apply_all`]) even when no row needs it, which is nearly always.
    let unplaced: bool = one(
        tx,
        "SELECT EXISTS (SELECT 1 FROM messages
           WHERE session_pk = ?1 AND sidechain = 1 AND prompt_number = 0 AND ts IS NOT NULL)",
        [pk],
        |r| r.get(0),
    )?;
    if unplaced {
        run(
            tx,
            "UPDATE messages SET prompt_number = COALESCE((
                SELECT MAX(p.prompt_number) FROM messages p
                WHERE p.session_pk = messages.session_pk AND p.kind = 'user_prompt' AND p.ts <= messages.ts), 0)
             WHERE session_pk = ?1 AND sidechain = 1 AND prompt_number = 0 AND ts IS NOT NULL",
            [pk],
        )?;
    }
    run(
        tx,
        "UPDATE sessions SET
           message_count = (SELECT COUNT(*) FROM messages WHERE session_pk = ?1),
           prompt_count = (SELECT COALESCE(MAX(prompt_number), 0) FROM messages
                           WHERE session_pk = ?1 AND kind = 'user_prompt' AND active = 1)
         WHERE id = ?1",
        [pk],
    )?;
    Ok(())
}

/// Gemini ≤ v0.28 named project folders by the sha256 of the project path: match them against
/// every project path the archive knows (from any agent).
pub fn resolve_project_hashes(conn: &Connection) -> rusqlite::Result<usize> {
    let mut st = conn.prepare(
        "SELECT DISTINCT project_hash FROM sessions WHERE project_path IS NULL AND project_hash IS NOT NULL",
    )?;
    let unresolved: HashSet<String> = st.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    if unresolved.is_empty() {
        return Ok(0);
    }
    let mut st =
        conn.prepare("SELECT DISTINCT project_path FROM sessions WHERE project_path IS NOT NULL")?;
    let paths: Vec<String> = st.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
    let mut n = 0;
    for p in paths {
        let hex: String = Sha256::digest(p.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if unresolved.contains(&hex) {
            n += conn.execute(
                "UPDATE sessions SET project_path = ?1 WHERE project_path IS NULL AND project_hash = ?2",
                params![p, hex],
            )?;
        }
    }
    Ok(n)
}
