//! Turning transcript files into archive rows.
//!
//! Parser threads read each file from its stored cursor through its adapter and *prepare* a
//! batch (redaction, compression, FTS text) so that the writer thread does nothing but write.
//! A batch and the file's new cursor commit in one transaction: a crash at any moment loses
//! nothing and duplicates nothing, and `(session, message_id)` is unique so re-reading a file
//! from the start never duplicates either.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use ai_cli_session_collector::{
    AdapterRegistry, Cursor, Edit, MessageKind, ParseIssue, ParsedMessage, SessionInfo,
    TitleSource, text,
};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{COMPRESS_TEXT_ABOVE, Writer, fts, redact, zstd_bytes};

/// How ingestion behaves; from `[store]` and `[import]` settings.
#[derive(Debug, Clone)]
pub struct IngestOptions {
    pub redact: bool,
    pub fts_max_bytes: usize,
    pub batch_bytes: usize,
    pub threads: usize,
}

/// A message ready to be written.
pub struct Prepared {
    pub m: ParsedMessage,
    pub text: Option<String>,
    pub text_z: Option<Vec<u8>>,
    pub tool_input: Option<String>,
    /// The record's bytes (redacted), until [`pack_raw`] moves them into a block.
    pub raw: Option<Vec<u8>>,
    pub raw_ref: Option<RawRef>,
    pub index: Option<String>,
    pub redactions: u32,
}

/// Where a record's bytes are in the batch's raw blocks.
#[derive(Debug, Clone, Copy)]
pub struct RawRef {
    pub block: usize,
    pub offset: usize,
    pub len: usize,
}

/// Raw records are packed into blocks of about this size before compression.
const RAW_BLOCK_BYTES: usize = 128 << 10;

/// Moves the records' bytes into zstd blocks (in message order) and points each message at its
/// bytes. Runs on the parser threads.
pub fn pack_raw(messages: &mut [Prepared]) -> Vec<Vec<u8>> {
    let mut blocks = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    for p in messages.iter_mut() {
        let Some(raw) = p.raw.take() else { continue };
        if !buf.is_empty() && buf.len() + raw.len() > RAW_BLOCK_BYTES {
            blocks.push(zstd_bytes(&buf));
            buf.clear();
        }
        p.raw_ref = Some(RawRef {
            block: blocks.len(),
            offset: buf.len(),
            len: raw.len(),
        });
        buf.extend_from_slice(&raw);
    }
    if !buf.is_empty() {
        blocks.push(zstd_bytes(&buf));
    }
    blocks
}

/// A session as the adapter described it, plus what the filesystem says about its project.
pub struct PreparedSession {
    pub info: SessionInfo,
    pub git_root: Option<String>,
}

/// One chunk of one file, ready for the writer.
pub struct Batch {
    pub agent: &'static str,
    pub root: PathBuf,
    pub path: PathBuf,
    /// The file's size and mtime, set only on the batch that reaches its end: an import that
    /// stops between batches must not look finished to the next one.
    pub seen: Option<(u64, i64)>,
    pub cursor: Cursor,
    pub messages: Vec<Prepared>,
    /// zstd blocks holding the messages' raw records (see [`RawRef`]).
    pub raw_blocks: Vec<Vec<u8>>,
    pub sessions: Vec<PreparedSession>,
    pub edits: Vec<Edit>,
    pub issues: Vec<ParseIssue>,
    pub bytes: u64,
}

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

/// One reported problem with an input file.
#[derive(Debug, Clone, Serialize)]
pub struct FileError {
    pub file: String,
    pub line: u64,
    pub reason: String,
}

/// The outcome of an import.
#[derive(Debug, Default, Clone, Serialize)]
pub struct ImportReport {
    pub files: u64,
    pub files_skipped_unchanged: u64,
    pub sessions: u64,
    pub messages: u64,
    pub messages_updated: u64,
    pub prompts: u64,
    pub bad_lines: u64,
    pub bytes: u64,
    pub errors: Vec<FileError>,
    /// The sessions that got new or changed messages, with their last activity (epoch ms).
    #[serde(skip)]
    pub touched: HashMap<i64, Option<i64>>,
    /// Files whose batch could not be stored: each stopped at its last stored batch (its
    /// cursor), to be read again from there.
    #[serde(skip)]
    pub failed: Vec<Job>,
}

/// A file to ingest.
#[derive(Debug, Clone)]
pub struct Job {
    pub agent: &'static str,
    pub root: PathBuf,
    pub path: PathBuf,
}

fn mtime_ms(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

/// Every transcript under the given roots, for the named adapters.
pub fn discover(registry: &AdapterRegistry, roots: &[(String, PathBuf)]) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (agent, root) in roots {
        if let Some(a) = registry.get(agent) {
            jobs.extend(a.discover(root).into_iter().map(|path| Job {
                agent: a.name(),
                root: root.clone(),
                path,
            }));
        }
    }
    jobs
}

/// The stored cursor, size and mtime of a file.
fn stored_cursor(conn: &Connection, path: &Path) -> rusqlite::Result<Option<(Cursor, u64, i64)>> {
    conn.query_row(
        "SELECT cursor, size, mtime FROM source_files WHERE path = ?1",
        [path.to_string_lossy()],
        |r| {
            let c: String = r.get(0)?;
            Ok((
                serde_json::from_str(&c).unwrap_or_default(),
                r.get::<_, i64>(1)? as u64,
                r.get(2)?,
            ))
        },
    )
    .optional()
}

/// Finds the git work tree that holds `dir` (a `.git` folder or file), if any.
pub fn git_root(dir: &str) -> Option<String> {
    let mut p = Path::new(dir);
    loop {
        if p.join(".git").exists() {
            return Some(p.to_string_lossy().into_owned());
        }
        p = p.parent()?;
    }
}

/// Parses one file from its stored cursor to its end, sending prepared batches to `sink`, which
/// answers whether to go on (`false` stops before the next batch is parsed: shutting down).
/// Returns `false` when the file was unchanged since the last ingest.
pub fn ingest_file(
    registry: &AdapterRegistry,
    reader: &Connection,
    job: &Job,
    opts: &IngestOptions,
    git_roots: &mut HashMap<String, Option<String>>,
    sink: &mut dyn FnMut(Batch) -> bool,
) -> Result<bool, String> {
    let adapter = registry
        .get(job.agent)
        .ok_or_else(|| format!("no adapter named {}", job.agent))?;
    let meta = std::fs::metadata(&job.path).map_err(|e| e.to_string())?;
    let (size, mtime) = (meta.len(), mtime_ms(&meta));
    let stored = stored_cursor(reader, &job.path).map_err(|e| e.to_string())?;
    if let Some((_, s, m)) = &stored
        && *s == size
        && *m == mtime
    {
        return Ok(false);
    }
    let mut cursor = stored.map(|s| s.0).unwrap_or_default();
    loop {
        let out = adapter
            .parse(&job.root, &job.path, &cursor, opts.batch_bytes)
            .map_err(|e| {
                format!(
                    "{e}: {}",
                    std::error::Error::source(&e)
                        .map(|s| s.to_string())
                        .unwrap_or_default()
                )
            })?;
        // A rewritten file starts again from 0: its first chunk can end exactly where the old
        // cursor was, with nothing but bad lines in it, and still be progress.
        let progressed =
            out.cursor.offset != cursor.offset || !out.messages.is_empty() || out.bytes > 0;
        let at_end = out.at_end;
        // A title is derived from text, so it is derived again from the redacted text: the
        // adapter cut it to one line first, which can leave the start of a `<private>` block or
        // of a key in it, where no rule can recognise it any more.
        let mut titles: HashMap<String, String> = HashMap::new();
        if opts.redact {
            for info in &out.sessions {
                if let Some((src, t)) = &info.title {
                    let from_prompt = (*src == TitleSource::FirstPrompt)
                        .then(|| {
                            out.messages.iter().find(|m| {
                                m.session_id == info.session_id && m.kind == MessageKind::UserPrompt
                            })
                        })
                        .flatten();
                    let title = match from_prompt {
                        Some(m) => text::prompt_title(&redact::redact_text(&m.text).0),
                        None => redacted_title(t),
                    };
                    titles.insert(info.session_id.clone(), title);
                }
            }
        }
        let mut messages: Vec<Prepared> =
            out.messages.into_iter().map(|m| prepare(m, opts)).collect();
        let raw_blocks = pack_raw(&mut messages);
        let sessions = out
            .sessions
            .into_iter()
            .map(|mut info| {
                if let Some((_, t)) = info.title.as_mut()
                    && let Some(safe) = titles.get(&info.session_id)
                {
                    *t = safe.clone();
                }
                let git_root = info.project_path.as_ref().and_then(|p| {
                    git_roots
                        .entry(p.clone())
                        .or_insert_with(|| git_root(p))
                        .clone()
                });
                PreparedSession { info, git_root }
            })
            .collect();
        cursor = out.cursor.clone();
        let go_on = sink(Batch {
            agent: job.agent,
            root: job.root.clone(),
            path: job.path.clone(),
            seen: at_end.then_some((size, mtime)),
            cursor: out.cursor,
            messages,
            raw_blocks,
            sessions,
            edits: out.edits,
            issues: out.issues,
            bytes: out.bytes,
        });
        if at_end || !progressed || !go_on {
            return Ok(true);
        }
    }
}

/// A title redacted on its own (no prompt to derive it from): the rules, then whatever follows
/// a `<private>` whose end the one-line cut removed.
fn redacted_title(t: &str) -> String {
    redacted_title_tally(t, &mut redact::Tally::default())
}

/// [`redacted_title`], counting what it found.
pub(super) fn redacted_title_tally(t: &str, tally: &mut redact::Tally) -> String {
    let t = redact::redact_text_tally(t, tally);
    match t.find("<private>") {
        Some(i) => {
            tally.add("private");
            format!("{}{}", &t[..i], redact::PRIVATE)
        }
        None => t.into_owned(),
    }
}

/// Redaction, compression and FTS text: everything CPU-heavy, done off the writer thread.
pub fn prepare(mut m: ParsedMessage, opts: &IngestOptions) -> Prepared {
    let mut redactions = 0;
    let raw = m.raw.take();
    let mut tool_input = m
        .tool_call
        .as_ref()
        .map(|t| serde_json::to_string(&t.input).unwrap_or_default());
    let raw = raw.map(|r| {
        if opts.redact {
            let (out, n) = redact::redact_bytes(&r);
            redactions = redactions.max(n);
            if n > 0 { out.into_owned() } else { r }
        } else {
            r
        }
    });
    if opts.redact {
        // A secret is stored in several copies (text, tool input, raw record): count the
        // secrets of the message, not the copies.
        let (t, n) = redact::redact_text(&m.text);
        if n > 0 {
            m.text = t.into_owned();
            redactions = redactions.max(n);
        }
        if let Some(input) = &tool_input {
            let (t, n) = redact::redact_text(input);
            if n > 0 {
                redactions = redactions.max(n);
                let t = t.into_owned();
                if let Some(tc) = m.tool_call.as_mut() {
                    tc.input =
                        serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t.clone()));
                }
                tool_input = Some(t);
            }
        }
    }
    let searchable = !m.text.trim().is_empty() && !m.flags.inherited && !m.flags.duplicate;
    let index = searchable.then(|| fts::index_text(&m.text, opts.fts_max_bytes).into_owned());
    let (text, text_z) = if m.text.len() > COMPRESS_TEXT_ABOVE {
        (None, Some(zstd_bytes(m.text.as_bytes())))
    } else {
        (Some(std::mem::take(&mut m.text)), None)
    };
    Prepared {
        m,
        text,
        text_z,
        tool_input,
        raw,
        raw_ref: None,
        index,
        redactions,
    }
}

/// Writes one batch and its file cursor in one transaction.
pub fn apply(conn: &mut Connection, b: &Batch) -> rusqlite::Result<Applied> {
    let tx = conn.transaction()?;
    let applied = apply_in(&tx, b)?;
    tx.commit()?;
    Ok(applied)
}

fn apply_in(tx: &Transaction<'_>, b: &Batch) -> rusqlite::Result<Applied> {
    let now = chrono::Utc::now().timestamp_millis();
    let path = b.path.to_string_lossy();
    let cursor_json = serde_json::to_string(&b.cursor).unwrap_or_default();
    let bad = b.issues.iter().filter(|i| !i.kept).count() as i64;
    tx.execute(
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
    let file_id: i64 = tx.query_row(
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

    // What the user forgot stays forgotten: its sessions and its messages' places are skipped.
    let forgotten = Forgotten::load(tx, b)?;
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
    let mut uses: HashMap<i64, RawRef> = HashMap::new();
    let mut released: HashMap<i64, u64> = HashMap::new();
    let mut ins = tx.prepare_cached(INSERT_MESSAGE)?;
    let mut fts_ins =
        tx.prepare_cached("INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)")?;
    for p in &b.messages {
        let m = &p.m;
        if forgotten.message(m) {
            continue;
        }
        let pk = match session_pk.get(&m.session_id) {
            Some(&pk) => pk,
            None => {
                let pk = ensure_session(tx, b.agent, &m.session_id, &path)?;
                session_pk.insert(m.session_id.clone(), pk);
                touched.insert(pk);
                pk
            }
        };
        let keep_raw = !forgotten.record(m);
        let row = MessageParams::new(pk, file_id, p, &block_ids, keep_raw);
        let n = ins.execute(&row.values()[..])?;
        if n == 1 {
            let rowid = tx.last_insert_rowid();
            if let Some(idx) = &p.index {
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
    super::release_raw(tx, released)?;
    if redactions > 0 {
        tx.execute(
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
                tx.execute(
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
    tx: &Transaction<'_>,
    row: &MessageParams<'_>,
) -> rusqlite::Result<Option<(i64, Option<i64>)>> {
    let p = row.p;
    let (id, old_text, old_z, old_block): (i64, Option<String>, Option<Vec<u8>>, Option<i64>) =
        tx.query_row(
            "SELECT id, text, text_z, raw_block FROM messages WHERE session_pk = ?1 AND message_id = ?2",
            params![row.pk, p.m.message_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
    let changed = tx
        .prepare_cached(UPDATE_MESSAGE)?
        .execute(&row.values()[..])?;
    if changed > 0 && (old_text != p.text || old_z != p.text_z) {
        tx.execute("DELETE FROM messages_fts WHERE rowid = ?1", [id])?;
        if let Some(idx) = &p.index {
            tx.execute(
                "INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)",
                params![id, idx],
            )?;
        }
    }
    Ok((changed > 0).then_some((id, old_block)))
}

/// Keeps, of this batch's raw blocks, only the records some stored message points at: a block
/// none uses is deleted, a block only partly used is packed again with just those records
/// (a rewritten document read again would otherwise store a full copy each time), and every
/// kept block is counted in `raw_refs`.
fn keep_used_records(
    tx: &Transaction<'_>,
    b: &Batch,
    block_ids: &[i64],
    uses: &HashMap<i64, RawRef>,
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
            let all = super::unzstd_bytes(&b.raw_blocks[i]);
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
            let packed = super::zstd_bytes(&buf);
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
    fn load(tx: &Transaction<'_>, b: &Batch) -> rusqlite::Result<Forgotten> {
        let mut f = Forgotten {
            sessions: HashSet::new(),
            messages: HashSet::new(),
            lines: HashSet::new(),
        };
        let (any_session, any_message): (bool, bool) = tx.query_row(
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

/// Stores a message; parameters are numbered as in [`MessageParams::values`].
const INSERT_MESSAGE: &str =
    "INSERT OR IGNORE INTO messages (session_pk, message_id, source_file_id,
    line, seq, parent_id, role, kind, prompt_number, ts, cwd, git_branch, model, text, text_z,
    tool_name, tool_call_id, tool_input, is_error, usage_key, input_tokens, output_tokens,
    cache_read_tokens, cache_creation_tokens, reasoning_tokens, agent_id, sidechain, inherited,
    duplicate, active, redactions, raw_block, raw_offset, raw_len)
  VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19,
    ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, 1, ?30, ?31, ?32, ?33)";

/// Replaces the content of a stored message with a newer copy, when anything changed. Same
/// parameter numbering as [`INSERT_MESSAGE`] (SQLite counts parameters by the highest index,
/// so the ones it does not use are still bound).
const UPDATE_MESSAGE: &str = "UPDATE messages SET role = ?7, kind = ?8, ts = COALESCE(?10, ts),
    model = COALESCE(?13, model), text = ?14, text_z = ?15, tool_name = ?16, tool_input = ?18,
    is_error = ?19, usage_key = COALESCE(?20, usage_key), input_tokens = COALESCE(?21, input_tokens),
    output_tokens = COALESCE(?22, output_tokens), cache_read_tokens = COALESCE(?23, cache_read_tokens),
    cache_creation_tokens = COALESCE(?24, cache_creation_tokens),
    reasoning_tokens = COALESCE(?25, reasoning_tokens), active = 1,
    raw_block = COALESCE(?31, raw_block), raw_offset = COALESCE(?32, raw_offset),
    raw_len = COALESCE(?33, raw_len), redactions = MAX(redactions, ?30)
  WHERE session_pk = ?1 AND message_id = ?2
    AND (text IS NOT ?14 OR text_z IS NOT ?15 OR kind IS NOT ?8 OR active = 0
         OR output_tokens IS NOT COALESCE(?22, output_tokens) OR tool_input IS NOT ?18
         OR is_error IS NOT ?19)";

/// One prepared message as SQL parameters, for [`INSERT_MESSAGE`] and [`UPDATE_MESSAGE`].
struct MessageParams<'a> {
    pk: i64,
    file_id: i64,
    p: &'a Prepared,
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

    fn values(&self) -> [&dyn rusqlite::ToSql; 33] {
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
            &p.text_z,
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
        ]
    }
}

fn upsert_session(
    tx: &Transaction<'_>,
    agent: &str,
    s: &PreparedSession,
    path: &str,
) -> rusqlite::Result<i64> {
    let i = &s.info;
    let (rank, title) = i
        .title
        .as_ref()
        .map_or((0, None), |(r, t)| (*r as i64, Some(t.as_str())));
    tx.query_row(
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
           source_path = COALESCE(sessions.source_path, excluded.source_path),
           started_at = MIN(COALESCE(sessions.started_at, excluded.started_at), COALESCE(excluded.started_at, sessions.started_at)),
           updated_at = MAX(COALESCE(sessions.updated_at, excluded.updated_at), COALESCE(excluded.updated_at, sessions.updated_at))
         RETURNING id",
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
            i.updated_at
        ],
        |r| r.get(0),
    )
}

fn ensure_session(
    tx: &Transaction<'_>,
    agent: &str,
    sid: &str,
    path: &str,
) -> rusqlite::Result<i64> {
    tx.query_row(
        "INSERT INTO sessions (agent, session_id, source_path) VALUES (?1, ?2, ?3)
         ON CONFLICT (agent, session_id) DO UPDATE SET agent = excluded.agent RETURNING id",
        params![agent, sid, path],
        |r| r.get(0),
    )
}

fn session_pk_of(tx: &Transaction<'_>, agent: &str, sid: &str) -> rusqlite::Result<i64> {
    ensure_session(tx, agent, sid, "")
}

/// Recomputes a session's counters, and places sub-agent messages (read from their own files,
/// without the parent's prompt counter) in the talk that was running when they were written.
pub(super) fn refresh_session(tx: &Transaction<'_>, pk: i64) -> rusqlite::Result<()> {
    tx.execute(
        "UPDATE messages SET prompt_number = COALESCE((
            SELECT MAX(p.prompt_number) FROM messages p
            WHERE p.session_pk = messages.session_pk AND p.kind = 'user_prompt' AND p.ts <= messages.ts), 0)
         WHERE session_pk = ?1 AND sidechain = 1 AND prompt_number = 0 AND ts IS NOT NULL",
        [pk],
    )?;
    tx.execute(
        "UPDATE sessions SET
           message_count = (SELECT COUNT(*) FROM messages WHERE session_pk = ?1),
           prompt_count = (SELECT COUNT(*) FROM messages WHERE session_pk = ?1 AND kind = 'user_prompt')
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

/// Marks files of these roots that are no longer on disk as gone (their messages stay).
pub fn mark_gone(
    conn: &Connection,
    roots: &[(String, PathBuf)],
    present: &HashSet<PathBuf>,
) -> rusqlite::Result<usize> {
    let mut n = 0;
    for (_, root) in roots {
        let mut st = conn.prepare("SELECT path FROM source_files WHERE root = ?1 AND gone = 0")?;
        let known: Vec<String> = st
            .query_map([root.to_string_lossy()], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for k in known {
            if !present.contains(Path::new(&k)) && !Path::new(&k).exists() {
                n += conn.execute("UPDATE source_files SET gone = 1 WHERE path = ?1", [&k])?;
            }
        }
    }
    Ok(n)
}

/// Marks one file gone when it is no longer on disk (its messages stay). Returns whether it was
/// a known file that just went.
pub fn mark_path_gone(conn: &Connection, path: &Path) -> rusqlite::Result<bool> {
    if path.exists() {
        return Ok(false);
    }
    let n = conn.execute(
        "UPDATE source_files SET gone = 1 WHERE path = ?1 AND gone = 0",
        [path.to_string_lossy()],
    )?;
    Ok(n > 0)
}

/// Marks every known file under `dir` that is no longer on disk as gone (a folder deleted or
/// moved away). Returns how many were marked.
pub fn mark_gone_under(conn: &Connection, dir: &Path) -> rusqlite::Result<usize> {
    let prefix = format!("{}/", dir.to_string_lossy().trim_end_matches('/'));
    let mut st = conn.prepare_cached(
        "SELECT path FROM source_files WHERE gone = 0 AND substr(path, 1, length(?1)) = ?1",
    )?;
    let known: Vec<String> = st
        .query_map([&prefix], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut n = 0;
    for k in known {
        n += usize::from(mark_path_gone(conn, Path::new(&k))?);
    }
    Ok(n)
}

/// Progress of an import, for a progress bar.
pub enum Progress {
    Total { files: u64, bytes: u64 },
    File { bytes: u64 },
}

/// Imports every job: `opts.threads` parser threads prepare batches, the writer writes them.
/// When `stop` is set, the batches in flight are written and the rest is left for next time
/// (every file's cursor stays exact, so nothing is lost or read twice).
pub fn import(
    writer: &Writer,
    data_dir: &Path,
    registry: Arc<AdapterRegistry>,
    jobs: Vec<Job>,
    opts: &IngestOptions,
    stop: &AtomicBool,
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<ImportReport, super::StoreError> {
    let total_bytes: u64 = jobs
        .iter()
        .map(|j| std::fs::metadata(&j.path).map_or(0, |m| m.len()))
        .sum();
    progress(Progress::Total {
        files: jobs.len() as u64,
        bytes: total_bytes,
    });
    let queue = Arc::new(Mutex::new(jobs.into_iter().collect::<VecDeque<_>>()));
    let report = Arc::new(Mutex::new(ImportReport::default()));
    let mut sessions: HashSet<(&'static str, String)> = HashSet::new();
    // Bounded: at most this many prepared batches wait for the writer, which caps memory.
    let (btx, brx) = mpsc::sync_channel::<Batch>(opts.threads.max(1) * 2);
    let db = super::db_path(data_dir);
    // Files whose batch failed to store. Their later batches must not be stored: each carries
    // a cursor past the lost one, and committing it would skip that batch for good. The file
    // stays at its last committed cursor and is read again from there next time.
    let failed: Mutex<HashMap<PathBuf, Job>> = Mutex::new(HashMap::new());
    let failed = &failed;

    std::thread::scope(|scope| -> Result<(), super::StoreError> {
        for _ in 0..opts.threads.max(1) {
            let queue = queue.clone();
            let report = report.clone();
            let registry = registry.clone();
            let btx = btx.clone();
            let db = db.clone();
            scope.spawn(move || {
                let Ok(reader) = super::connect(&db) else {
                    return;
                };
                let mut git_roots = HashMap::new();
                loop {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Some(job) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    let mut send = |b: Batch| {
                        btx.send(b).is_ok()
                            && !stop.load(Ordering::Relaxed)
                            && !failed.lock().unwrap().contains_key(&job.path)
                    };
                    let res =
                        ingest_file(&registry, &reader, &job, opts, &mut git_roots, &mut send);
                    let mut r = report.lock().unwrap();
                    r.files += 1;
                    match res {
                        Ok(true) => {}
                        Ok(false) => r.files_skipped_unchanged += 1,
                        Err(e) => r.errors.push(FileError {
                            file: job.path.display().to_string(),
                            line: 0,
                            reason: e,
                        }),
                    }
                }
            });
        }
        drop(btx);
        // The caller's thread feeds the writer. On stop it leaves at once: the batches not
        // written are dropped whole (each file's cursor is still at the last written one), and
        // the parsers see the channel close.
        for b in brx {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if failed.lock().unwrap().contains_key(&b.path) {
                continue;
            }
            let job = Job {
                agent: b.agent,
                root: b.root.clone(),
                path: b.path.clone(),
            };
            let bytes = b.bytes;
            let file = b.path.display().to_string();
            let issues: Vec<FileError> = b
                .issues
                .iter()
                .map(|i| FileError {
                    file: file.clone(),
                    line: i.line,
                    reason: if i.kept {
                        format!("{} (kept)", i.reason)
                    } else {
                        i.reason.clone()
                    },
                })
                .collect();
            let bad = b.issues.iter().filter(|i| !i.kept).count() as u64;
            // The sessions this batch touches (a handful, whatever the number of messages).
            let sids: HashSet<&str> = b
                .messages
                .iter()
                .map(|m| m.m.session_id.as_str())
                .chain(b.sessions.iter().map(|s| s.info.session_id.as_str()))
                .collect();
            let sids: Vec<(&'static str, String)> =
                sids.into_iter().map(|s| (b.agent, s.to_owned())).collect();
            let applied = writer.call(move |c| apply(c, &b))?;
            let mut r = report.lock().unwrap();
            match applied {
                Ok(a) => {
                    if a.inserted + a.updated > 0 {
                        r.touched.extend(a.sessions.iter().copied());
                    }
                    r.messages += a.inserted;
                    r.messages_updated += a.updated;
                    r.prompts += a.prompts;
                    r.bad_lines += bad;
                    r.errors.extend(issues);
                    sessions.extend(sids);
                }
                Err(e) => {
                    r.errors.push(FileError {
                        file,
                        line: 0,
                        reason: format!("cannot store: {e}"),
                    });
                    failed.lock().unwrap().insert(job.path.clone(), job);
                }
            }
            r.bytes += bytes;
            drop(r);
            progress(Progress::File { bytes });
        }
        Ok(())
    })?;
    writer.call(|c| resolve_project_hashes(c))??;
    let mut r = Arc::try_unwrap(report)
        .map(|m| m.into_inner().unwrap())
        .unwrap_or_else(|a| a.lock().unwrap().clone());
    r.sessions = sessions.len() as u64;
    r.failed = failed.lock().unwrap().drain().map(|(_, j)| j).collect();
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude_file(dir: &Path, lines: usize) -> PathBuf {
        let proj = dir.join("projects/-p");
        std::fs::create_dir_all(&proj).unwrap();
        let sid = "55555555-2222-4333-8444-555555555555";
        let body: String = (0..lines)
            .map(|i| {
                format!(
                    "{}\n",
                    serde_json::json!({"type": "user", "uuid": format!("u{i}"), "sessionId": sid, "cwd": "/p",
                        "timestamp": "2026-06-05T10:00:00.000Z",
                        "message": {"role": "user", "content": format!("prompt number {i} {}", "padding ".repeat(40))}})
                )
            })
            .collect();
        let path = proj.join(format!("{sid}.jsonl"));
        std::fs::write(&path, body).unwrap();
        path
    }

    fn test_opts(batch_bytes: usize) -> IngestOptions {
        IngestOptions {
            redact: true,
            fts_max_bytes: 1 << 20,
            batch_bytes,
            threads: 1,
        }
    }

    /// One `import` of `job` into `data`, with its own writer.
    fn import_once(data: &Path, job: &Job, opts: &IngestOptions) -> ImportReport {
        let (writer, handle) = Writer::start(data).unwrap();
        let stop = AtomicBool::new(false);
        let registry = Arc::new(AdapterRegistry::new());
        let r = import(
            &writer,
            data,
            registry,
            vec![job.clone()],
            opts,
            &stop,
            &|_| {},
        )
        .unwrap();
        drop(writer);
        handle.join().unwrap();
        r
    }

    /// A crash after the first batch of a large file: the next import reads the rest.
    #[test]
    fn a_file_interrupted_between_batches_is_finished_later() {
        let dir = tempfile::tempdir().unwrap();
        let path = claude_file(dir.path(), 1000);
        let data = dir.path().join("data");
        let opts = IngestOptions {
            redact: true,
            fts_max_bytes: 1 << 20,
            batch_bytes: 64 << 10,
            threads: 1,
        };
        let registry = Arc::new(AdapterRegistry::new());
        let job = Job {
            agent: "claude",
            root: dir.path().join("projects"),
            path: path.clone(),
        };
        // First run: only the first batch reaches the archive, then the process "dies".
        let mut conn = super::super::open(&data).unwrap();
        let mut batches = Vec::new();
        ingest_file(
            &registry,
            &conn,
            &job,
            &opts,
            &mut HashMap::new(),
            &mut |b| {
                batches.push(b);
                true
            },
        )
        .unwrap();
        assert!(batches.len() > 1, "the file must span several batches");
        apply(&mut conn, &batches[0]).unwrap();
        let stored: i64 = conn
            .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
            .unwrap();
        assert!(stored > 0 && stored < 1000);
        drop(conn);
        // Second run: everything, exactly once.
        let (writer, handle) = Writer::start(&data).unwrap();
        let stop = AtomicBool::new(false);
        let report = import(&writer, &data, registry, vec![job], &opts, &stop, &|_| {}).unwrap();
        assert_eq!(report.messages as i64, 1000 - stored);
        drop(writer);
        handle.join().unwrap();
        let conn = super::super::open(&data).unwrap();
        let total: i64 = conn
            .query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))
            .unwrap();
        assert_eq!(total, 1000);
    }

    fn rows(data: &Path) -> Vec<(String, i64, String, i64)> {
        let conn = super::super::open(data).unwrap();
        let mut st = conn
            .prepare(
                "SELECT message_id, line, COALESCE(text, memex_unzstd(text_z)), prompt_number
                 FROM messages ORDER BY line, seq",
            )
            .unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// One batch of a multi-batch file fails to store: the file stops at the last stored batch
    /// (later batches are not committed past the hole), and the next import fills it in.
    #[test]
    fn a_failed_batch_stops_its_file_at_the_last_stored_cursor() {
        let dir = tempfile::tempdir().unwrap();
        let path = claude_file(dir.path(), 1000);
        let opts = test_opts(64 << 10);
        let job = Job {
            agent: "claude",
            root: dir.path().join("projects"),
            path: path.clone(),
        };
        let import_once = |data: &Path| import_once(data, &job, &opts);
        let clean = dir.path().join("clean");
        assert_eq!(import_once(&clean).messages, 1000);

        // The storage fails on the batch holding message u500 (an injected SQLite error).
        let data = dir.path().join("data");
        super::super::open(&data)
            .unwrap()
            .execute_batch(
                "CREATE TRIGGER fail_once BEFORE INSERT ON messages WHEN NEW.message_id = 'u500'
                 BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
            )
            .unwrap();
        let first = import_once(&data);
        assert!(
            first
                .errors
                .iter()
                .any(|e| e.reason.contains("injected failure")),
            "{:?}",
            first.errors
        );
        assert_eq!(first.failed.len(), 1);
        let stored = rows(&data);
        assert!(!stored.is_empty() && stored.len() < 500, "{}", stored.len());
        let last_line = stored.last().unwrap().1;
        assert_eq!(
            stored.len() as i64,
            last_line,
            "nothing after the failed batch was stored"
        );
        super::super::open(&data)
            .unwrap()
            .execute_batch("DROP TRIGGER fail_once")
            .unwrap();
        let second = import_once(&data);
        assert!(second.errors.is_empty(), "{:?}", second.errors);
        assert_eq!(rows(&data), rows(&clean));
    }

    /// A legacy Gemini document is rewritten whole at every message. Each read stores only the
    /// records of new or changed messages: no block nobody uses, no record twice.
    #[test]
    fn rewritten_documents_store_each_record_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("tmp");
        let chats = root.join("0123abcd/chats");
        std::fs::create_dir_all(&chats).unwrap();
        let path = chats.join("session-2025-11-02T14-05-7d3c2a10.json");
        let data = dir.path().join("data");
        let opts = test_opts(8 << 20);
        let job = Job {
            agent: "gemini",
            root: root.clone(),
            path: path.clone(),
        };
        let mut messages = Vec::new();
        for i in 0..40 {
            messages.push(serde_json::json!({
                "id": format!("m{i}"), "timestamp": format!("2025-11-02T14:{:02}:00.000Z", i % 60),
                "type": if i % 2 == 0 { "user" } else { "gemini" },
                "content": format!("message {i} {}", "lorem ipsum dolor ".repeat(30)),
            }));
            let doc = serde_json::json!({
                "sessionId": "7d3c2a10-6e5f-4b4a-9d8c-7b6a5f4e3d2c",
                "projectHash": "0123abcd", "startTime": "2025-11-02T14:00:00.000Z",
                "lastUpdated": format!("2025-11-02T14:{:02}:00.000Z", i % 60),
                "messages": messages,
            });
            std::fs::write(&path, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
            let r = import_once(&data, &job, &opts);
            assert!(r.errors.is_empty(), "{:?}", r.errors);
        }
        let conn = super::super::open(&data).unwrap();
        let one = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            one("SELECT COUNT(*) FROM messages WHERE message_id GLOB 'm[0-9]*'"),
            40
        );
        assert_eq!(
            one("SELECT COUNT(*) FROM raw_blocks WHERE id NOT IN
                   (SELECT raw_block FROM messages WHERE raw_block IS NOT NULL)"),
            0,
            "blocks no message uses"
        );
        assert_eq!(
            one("SELECT COUNT(*) FROM raw_refs r WHERE refs !=
                   (SELECT COUNT(*) FROM messages m WHERE m.raw_block = r.block)"),
            0,
            "raw_refs counts every block's messages"
        );
        assert_eq!(
            one("SELECT COUNT(*) FROM raw_blocks"),
            one("SELECT COUNT(*) FROM raw_refs")
        );
        let stored: i64 = {
            let mut st = conn.prepare("SELECT data FROM raw_blocks").unwrap();
            st.query_map([], |r| r.get::<_, Vec<u8>>(0))
                .unwrap()
                .map(|b| super::super::unzstd_bytes(&b.unwrap()).len() as i64)
                .sum()
        };
        let referenced = one("SELECT SUM(raw_len) FROM messages WHERE raw_block IS NOT NULL");
        assert_eq!(stored, referenced, "each record stored once");
        let pk = one("SELECT id FROM sessions");
        let records = super::super::read::raw_records(&conn, pk).unwrap();
        assert_eq!(
            records.len() as i64,
            one("SELECT COUNT(*) FROM messages WHERE raw_block IS NOT NULL")
        );
        for (i, r) in records.iter().enumerate() {
            let text = String::from_utf8_lossy(r);
            assert!(text.contains("lorem ipsum"), "record {i}: {text}");
        }
    }

    /// A file rewritten so that its first chunk (bad lines only) ends exactly at the old cursor:
    /// the rest of it is read in the same ingest, not at some later scan.
    #[test]
    fn a_rewrite_whose_first_chunk_ends_at_the_old_cursor_is_read_through() {
        let dir = tempfile::tempdir().unwrap();
        let path = claude_file(dir.path(), 10);
        let data = dir.path().join("data");
        let job = Job {
            agent: "claude",
            root: dir.path().join("projects"),
            path: path.clone(),
        };
        assert_eq!(import_once(&data, &job, &test_opts(8 << 20)).messages, 10);
        let old = std::fs::metadata(&path).unwrap().len() as usize;
        let sid = "55555555-2222-4333-8444-555555555555";
        let mut body = format!("{}\n", "x".repeat(old - 1));
        for i in 0..5 {
            body.push_str(&format!(
                "{}\n",
                serde_json::json!({"type": "user", "uuid": format!("v{i}"), "sessionId": sid,
                    "cwd": "/p", "timestamp": "2026-06-05T11:00:00.000Z",
                    "message": {"role": "user", "content": format!("rewritten {i}")}})
            ));
        }
        std::fs::write(&path, body).unwrap();
        let r = import_once(&data, &job, &test_opts(old + 1));
        assert_eq!(r.messages, 5, "{r:?}");
    }
}
