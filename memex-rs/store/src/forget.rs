//! Taking things back: `memex forget` removes what the user asks for from every place Memex
//! keeps it (messages, raw records, full-text rows, vectors, compact rows, the injection log)
//! and remembers it by identity (session and message ids) so a later import does not bring it
//! back (`memex scrub`, which applies the current redaction rules to everything already
//! stored, is `scrub.rs`).
//!
//! Both run on the writer connection, in one transaction: a failure changes nothing.

use std::collections::{BTreeSet, HashMap, HashSet};

use rusqlite::{Connection, OptionalExtension, params};
use serde::{Deserialize, Serialize};

use super::{unzstd_bytes, zstd_bytes};
use crate::layer::Layer;

/// What to forget.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// A session (id or unique prefix), with its sub-agent sessions.
    Session(String),
    /// Every session of a project: its folder, its git root, or a folder below it.
    Project(String),
    /// Everything older than this (epoch ms): sessions last active before it whole, and the
    /// older messages of the others.
    Before(i64),
    /// Every message, compact row and logged prompt containing this text (case-sensitive).
    Match(String),
    /// What another machine forgot, by identity (sync): each is remembered as forgotten here
    /// too, also when this archive does not hold it (yet).
    Known(Vec<Forgotten>),
}

/// A session, or one message of it, forgotten by identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgotten {
    pub agent: String,
    pub session_id: String,
    /// `None`: the whole session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
}

/// What was (or, on a dry run, would be) removed.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ForgetReport {
    pub dry_run: bool,
    pub sessions: u64,
    pub messages: u64,
    pub raw_records: u64,
    /// Compressed raw bytes deleted (whole blocks, and what re-packing the rest saved).
    pub raw_bytes: u64,
    pub fts_rows: u64,
    /// Rows whose vectors are deleted (messages and compact rows).
    pub vectors: u64,
    pub observations: u64,
    pub talk_summaries: u64,
    pub session_summaries: u64,
    pub compact_jobs: u64,
    pub injections: u64,
    /// Talks and sessions whose summaries are queued again from what is left.
    pub requeued: u64,
    /// Source files left with nothing archived: their paths are gone from the archive (a
    /// digest of each remembers them, see migration 0014). Counted only when not a dry run.
    pub files: u64,
    /// The rows whose vectors must go: (vector table code, row id).
    #[serde(skip)]
    pub gone: Vec<(i64, i64)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ForgetError {
    #[error("no session `{0}` (an id or a prefix of one only one session has)")]
    NoSession(String),
    #[error("the project must be an absolute folder path, got `{0}`")]
    BadProject(String),
    #[error("the text to match must be at least 4 characters, got {0}")]
    ShortMatch(usize),
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// Forgets what `sel` names. `dry_run` counts without changing anything.
pub fn forget(
    conn: &mut Connection,
    sel: &Selector,
    dry_run: bool,
) -> Result<ForgetReport, ForgetError> {
    if dry_run {
        return forget_in(conn, sel, true);
    }
    wiping(conn, |c| forget_in(c, sel, false))
}

/// Turns FTS5's `secure-delete` on or off for every full-text index: on, a deleted row's terms
/// leave the index at once instead of at the next merge (and every insert and merge costs
/// more, so it is on only while forgetting or scrubbing).
fn fts_secure_delete(conn: &Connection, on: bool) -> rusqlite::Result<()> {
    for l in Layer::ALL {
        let fts = l.fts_table();
        conn.execute(
            &format!("INSERT INTO {fts} ({fts}, rank) VALUES ('secure-delete', ?1)"),
            [i64::from(on)],
        )?;
    }
    Ok(())
}

/// Runs `f` with SQLite overwriting whatever it frees (`secure_delete`, and FTS5's
/// `secure-delete`), then rebuilds the
/// file (`VACUUM`: pages freed earlier, by ingest or index merges, may still hold copies) and
/// empties the WAL, so no page of the database or its log keeps what was removed. The rebuild
/// needs free disk space about the size of the archive, for a moment.
pub(super) fn wiping<T, E: From<rusqlite::Error>>(
    conn: &mut Connection,
    f: impl FnOnce(&mut Connection) -> Result<T, E>,
) -> Result<T, E> {
    conn.pragma_update(None, "secure_delete", "ON")?;
    fts_secure_delete(conn, true)?;
    let out = f(conn);
    if let Err(e) = fts_secure_delete(conn, false) {
        tracing::warn!(error = %e, "cannot turn the full-text indexes' secure-delete off");
    }
    if out.is_ok() {
        // A full-text index keeps a removed term's entry in its segments until they merge:
        // merge them all now; the champion lists name the indexes' common words, and are made
        // again from what is left (a refresh that read before now sees the count of wipes
        // move, and saves nothing). What was asked is done (committed) by now: a failure here
        // is worth a warning, not an error.
        if let Err(e) = conn.execute_batch(
            "DELETE FROM fts_champions WHERE fts != '*';
             UPDATE fts_champions SET docs = docs + 1 WHERE fts = '*' AND term = 'wipes';
             INSERT OR IGNORE INTO fts_champions (fts, term, docs, upto, best)
               VALUES ('*', 'wipes', 1, 0, x'');
             INSERT INTO messages_fts (messages_fts) VALUES ('optimize');
             INSERT INTO observations_fts (observations_fts) VALUES ('optimize');
             INSERT INTO talk_summaries_fts (talk_summaries_fts) VALUES ('optimize');
             INSERT INTO session_summaries_fts (session_summaries_fts) VALUES ('optimize');
             VACUUM;",
        ) {
            tracing::warn!(error = %e, "cannot rebuild the archive file; freed pages may keep old copies until the next `memex scrub`");
        }
    }
    if let Err(e) = conn.pragma_update(None, "secure_delete", "OFF") {
        tracing::warn!(error = %e, "cannot turn secure_delete off");
    }
    if out.is_ok() {
        // Readers between statements do not hold it back; one in a long read only delays the
        // truncation to the next checkpoint. A running background checkpoint would make it
        // busy at once (no busy handler for the checkpoint lock), so it ends first.
        let _paused = super::checkpoint::pause();
        match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        }) {
            Ok(0) => {}
            Ok(_) => tracing::warn!(
                "the write-ahead log could not be emptied now (a reader is busy); the next checkpoint does it"
            ),
            Err(e) => tracing::warn!(error = %e, "cannot empty the write-ahead log"),
        }
    }
    out
}

fn forget_in(
    conn: &mut Connection,
    sel: &Selector,
    dry_run: bool,
) -> Result<ForgetReport, ForgetError> {
    let tx = conn.transaction()?;
    let r = forget_tx(&tx, sel, dry_run)?;
    if !dry_run {
        tx.commit()?;
    }
    Ok(r)
}

/// Forgets what another machine forgot, in the caller's transaction (which must run under
/// [`wiping`]). The rows whose vectors must go are in the report's `gone`.
pub fn forget_known(tx: &Connection, known: Vec<Forgotten>) -> Result<ForgetReport, ForgetError> {
    forget_tx(tx, &Selector::Known(known), false)
}

fn forget_tx(tx: &Connection, sel: &Selector, dry_run: bool) -> Result<ForgetReport, ForgetError> {
    let (whole, messages) = select(tx, sel)?;
    let mut r = ForgetReport {
        dry_run,
        ..ForgetReport::default()
    };
    let now = chrono::Utc::now().timestamp_millis();

    // Messages of whole sessions, and single messages.
    let mut ids: Vec<i64> = Vec::new();
    for s in &whole {
        let mut st = tx.prepare_cached("SELECT id FROM messages WHERE session_pk = ?1")?;
        ids.extend(st.query_map([s.pk], |r| r.get::<_, i64>(0))?.flatten());
    }
    ids.extend(messages.iter().copied());
    let whole_pks: HashSet<i64> = whole.iter().map(|s| s.pk).collect();

    r.sessions = whole.len() as u64;
    r.messages = ids.len() as u64;
    let mut blocks: HashMap<i64, u64> = HashMap::new();
    let mut talks: HashSet<(i64, i64)> = HashSet::new();
    // The files that held what goes: those left with nothing archived go too.
    let mut files: BTreeSet<i64> = BTreeSet::new();
    for s in &whole {
        let mut st =
            tx.prepare_cached("SELECT source_file_id FROM session_files WHERE session_pk = ?1")?;
        files.extend(st.query_map([s.pk], |r| r.get::<_, i64>(0))?.flatten());
    }
    // Sessions that lost a prompt: their title was cut from it.
    let mut untitled: HashSet<i64> = HashSet::new();
    {
        let mut st = tx.prepare_cached(
            "SELECT m.raw_block, m.session_pk, m.prompt_number, m.kind, s.agent, s.session_id,
                    m.message_id, m.source_file_id, m.line
             FROM messages m JOIN sessions s ON s.id = m.session_pk WHERE m.id = ?1",
        )?;
        let mut remember = tx.prepare_cached(
            "INSERT OR IGNORE INTO forgotten_messages (agent, session_id, message_id, forgotten_at)
             VALUES (?1, ?2, ?3, ?4)",
        )?;
        // The other messages of the same record: the first of them carries the record's raw
        // bytes, which hold the forgotten part too.
        let mut siblings = tx.prepare_cached(
            "SELECT id, raw_block FROM messages
             WHERE source_file_id = ?1 AND line = ?2 AND raw_block IS NOT NULL AND id != ?3",
        )?;
        let mut unlink = tx.prepare_cached(
            "UPDATE messages SET raw_block = NULL, raw_offset = NULL, raw_len = NULL WHERE id = ?1",
        )?;
        let mut fts_del = tx.prepare_cached("DELETE FROM messages_fts WHERE rowid = ?1")?;
        let mut outbox =
            tx.prepare_cached("INSERT INTO vector_outbox (tbl, ref) VALUES (0, ?1)")?;
        let mut del = tx.prepare_cached("DELETE FROM messages WHERE id = ?1")?;
        type Row = (
            Option<i64>,
            i64,
            i64,
            String,
            String,
            String,
            String,
            Option<i64>,
            i64,
        );
        let id_set: HashSet<i64> = ids.iter().copied().collect();
        for &id in &ids {
            let row: Option<Row> = st
                .query_row([id], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                        r.get(7)?,
                        r.get(8)?,
                    ))
                })
                .optional()?;
            let Some((block, pk, prompt, kind, agent, sid, mid, file, line)) = row else {
                continue;
            };
            files.extend(file);
            if let Some(b) = block {
                *blocks.entry(b).or_default() += 1;
                r.raw_records += 1;
            }
            if kind != "meta" {
                r.vectors += 1;
                r.gone.push((Layer::Raw.outbox_code(), id));
            }
            r.fts_rows += 1;
            let partial = !whole_pks.contains(&pk);
            if partial {
                talks.insert((pk, prompt));
                if kind == "user_prompt" {
                    untitled.insert(pk);
                }
            }
            if dry_run {
                continue;
            }
            if partial {
                remember.execute(params![agent, sid, mid, now])?;
                if let Some(file) = file {
                    let sib: Vec<(i64, i64)> = siblings
                        .query_map(params![file, line, id], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect::<rusqlite::Result<_>>()?;
                    for (sid_row, b) in sib {
                        if id_set.contains(&sid_row) {
                            continue;
                        }
                        unlink.execute([sid_row])?;
                        *blocks.entry(b).or_default() += 1;
                        r.raw_records += 1;
                    }
                }
            }
            fts_del.execute([id])?;
            if kind != "meta" {
                outbox.execute([id])?;
            }
            del.execute([id])?;
        }
    }
    let touched_sessions: BTreeSet<i64> = talks.iter().map(|(pk, _)| *pk).collect();
    if !dry_run {
        let mut st =
            tx.prepare_cached("UPDATE sessions SET title = NULL, title_rank = 0 WHERE id = ?1")?;
        for pk in &untitled {
            st.execute([pk])?;
        }
        // Jobs running now read what was just removed: put them back, so that their worker
        // throws its result away (commit checks the job is still running) and they are done
        // again from what is left.
        let mut st = tx.prepare_cached(
            "UPDATE compact_jobs SET state = 'pending', regenerate = 1, updated_at = ?2
             WHERE session_pk = ?1 AND state = 'running'",
        )?;
        for pk in &touched_sessions {
            st.execute(params![pk, now])?;
        }
    }

    // Compact rows: all of a whole session's, and those of every talk (and session summary)
    // a forgotten message fed.
    for s in &whole {
        let g = &mut r.gone;
        let cond = "session_pk = ?1";
        r.observations += delete_layer(tx, Layer::Observations, cond, &[s.pk], dry_run, g)?;
        r.talk_summaries += delete_layer(tx, Layer::Talks, cond, &[s.pk], dry_run, g)?;
        r.session_summaries += delete_layer(tx, Layer::Sessions, cond, &[s.pk], dry_run, g)?;
    }
    for &(pk, prompt) in &talks {
        let cond = "session_pk = ?1 AND prompt_number = ?2";
        let g = &mut r.gone;
        r.observations += delete_layer(tx, Layer::Observations, cond, &[pk, prompt], dry_run, g)?;
        r.talk_summaries += delete_layer(tx, Layer::Talks, cond, &[pk, prompt], dry_run, g)?;
    }
    for &pk in &touched_sessions {
        r.session_summaries += delete_layer(
            tx,
            Layer::Sessions,
            "session_pk = ?1",
            &[pk],
            dry_run,
            &mut r.gone,
        )?;
    }
    if let Selector::Match(text) = sel {
        let (o, t, s) = layer_matches(tx, text, dry_run, &mut talks, &mut r.gone)?;
        r.observations += o;
        r.talk_summaries += t;
        r.session_summaries += s;
    }
    r.vectors += r.observations + r.talk_summaries + r.session_summaries;

    // The injection log: the forgotten sessions' calls and the calls that injected them; with
    // a text, every logged prompt holding it.
    for s in &whole {
        let needle = format!("\"session_id\":{}", serde_json::json!(s.session_id));
        r.injections += count_or_delete(
            tx,
            "injections",
            "session_id = ?1 OR instr(refs, ?2) > 0",
            params![s.session_id, needle],
            dry_run,
        )?;
    }
    if let Selector::Match(text) = sel {
        r.injections += count_or_delete(
            tx,
            "injections",
            "instr(prompt, ?1) > 0",
            params![text],
            dry_run,
        )?;
    }
    // With a project, every call made in it (a session never archived included).
    if let Selector::Project(p) = sel {
        r.injections += count_or_delete(
            tx,
            "injections",
            "project = ?1 OR substr(project, 1, length(?1) + 1) = ?1 || '/'",
            params![p.trim_end_matches('/')],
            dry_run,
        )?;
    }

    for s in &whole {
        r.compact_jobs += count_or_delete(
            tx,
            "compact_jobs",
            "session_pk = ?1",
            params![s.pk],
            dry_run,
        )?;
    }
    if !dry_run {
        r.raw_bytes = drop_records(tx, &blocks)?;
        for s in &whole {
            tx.execute(
                "INSERT OR IGNORE INTO forgotten_sessions (agent, session_id, forgotten_at)
                 VALUES (?1, ?2, ?3)",
                params![s.agent, s.session_id, now],
            )?;
            tx.execute("DELETE FROM session_files WHERE session_pk = ?1", [s.pk])?;
            tx.execute("DELETE FROM sessions WHERE id = ?1", [s.pk])?;
        }
        r.files = forget_files(tx, &files)?;
        r.requeued = requeue(tx, &talks, now)?;
        if let Selector::Match(text) = sel {
            // A title quoting the text (derived from a forgotten prompt).
            tx.execute(
                "UPDATE sessions SET title = NULL, title_rank = 0 WHERE instr(title, ?1) > 0",
                [text],
            )?;
        }
        if let Selector::Known(known) = sel {
            remember_known(tx, known, now)?;
        }
    }
    Ok(r)
}

/// A session to forget whole.
struct Whole {
    pk: i64,
    agent: String,
    session_id: String,
}

fn select(tx: &Connection, sel: &Selector) -> Result<(Vec<Whole>, Vec<i64>), ForgetError> {
    let sessions = |sql: &str, p: &dyn rusqlite::ToSql| -> rusqlite::Result<Vec<Whole>> {
        let mut st = tx.prepare(sql)?;
        st.query_map([p], |r| {
            Ok(Whole {
                pk: r.get(0)?,
                agent: r.get(1)?,
                session_id: r.get(2)?,
            })
        })?
        .collect()
    };
    Ok(match sel {
        Selector::Session(id) => {
            let s = super::read::find_session(tx, id)?
                .ok_or_else(|| ForgetError::NoSession(id.clone()))?;
            // Its sub-agents (and theirs) ran inside it and go whole; a fork (a thread started
            // from it) keeps its own work and loses only the copy of this session it began with.
            let mut st = tx.prepare(
                "WITH RECURSIVE d (pk, sid, agent, sub) AS (
                   SELECT id, session_id, agent, 0 FROM sessions WHERE id = ?1
                   UNION
                   SELECT c.id, c.session_id, c.agent, c.is_subagent
                   FROM sessions c JOIN d ON c.parent_session_id = d.sid AND c.agent = d.agent)
                 SELECT pk, agent, sid, sub FROM d",
            )?;
            let tree: Vec<(Whole, bool)> = st
                .query_map([s.pk], |r| {
                    Ok((
                        Whole {
                            pk: r.get(0)?,
                            agent: r.get(1)?,
                            session_id: r.get(2)?,
                        },
                        r.get::<_, bool>(3)?,
                    ))
                })?
                .collect::<rusqlite::Result<_>>()?;
            let mut all = Vec::new();
            let mut msgs = Vec::new();
            let mut copies =
                tx.prepare("SELECT id FROM messages WHERE session_pk = ?1 AND inherited = 1")?;
            for (w, sub) in tree {
                if w.pk == s.pk || sub {
                    all.push(w);
                } else {
                    msgs.extend(
                        copies
                            .query_map([w.pk], |r| r.get::<_, i64>(0))?
                            .collect::<rusqlite::Result<Vec<_>>>()?,
                    );
                }
            }
            (all, msgs)
        }
        Selector::Project(p) => {
            let p = p.trim_end_matches('/');
            if !p.starts_with('/') || p.is_empty() {
                return Err(ForgetError::BadProject(p.to_owned()));
            }
            let all = sessions(
                "SELECT id, agent, session_id FROM sessions
                 WHERE project_path = ?1 OR git_root = ?1
                    OR substr(project_path, 1, length(?1) + 1) = ?1 || '/'",
                &p,
            )?;
            (all, Vec::new())
        }
        Selector::Before(t) => {
            let all = sessions(
                "SELECT id, agent, session_id FROM sessions
                 WHERE COALESCE(updated_at, started_at) < ?1",
                t,
            )?;
            let pks: HashSet<i64> = all.iter().map(|s| s.pk).collect();
            let mut st = tx.prepare("SELECT id, session_pk FROM messages WHERE ts < ?1")?;
            let msgs = st
                .query_map([t], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)))?
                .filter_map(Result::ok)
                .filter(|(_, pk)| !pks.contains(pk))
                .map(|(id, _)| id)
                .collect();
            (all, msgs)
        }
        Selector::Match(text) => {
            if text.chars().count() < 4 {
                return Err(ForgetError::ShortMatch(text.chars().count()));
            }
            let mut st = tx.prepare(
                "SELECT id FROM messages
                 WHERE instr(COALESCE(text, memex_unzstd(text_z)), ?1) > 0
                    OR instr(tool_input, ?1) > 0",
            )?;
            let mut msgs: Vec<i64> = st
                .query_map([text], |r| r.get::<_, i64>(0))?
                .collect::<rusqlite::Result<_>>()?;
            // Text held only in a message's original record (an edited file's whole first
            // version, a tool's full output): that message goes too, with its record.
            let have: HashSet<i64> = msgs.iter().copied().collect();
            msgs.extend(
                raw_matches(tx, text)?
                    .into_iter()
                    .filter(|id| !have.contains(id)),
            );
            (Vec::new(), msgs)
        }
        Selector::Known(known) => {
            let mut session =
                tx.prepare_cached("SELECT id FROM sessions WHERE agent = ?1 AND session_id = ?2")?;
            let mut message = tx.prepare_cached(
                "SELECT m.id FROM messages m JOIN sessions s ON s.id = m.session_pk
                 WHERE s.agent = ?1 AND s.session_id = ?2 AND m.message_id = ?3",
            )?;
            let (mut all, mut msgs) = (Vec::new(), Vec::new());
            let mut whole: HashSet<(&str, &str)> = HashSet::new();
            for k in known {
                if k.message_id.is_none() {
                    whole.insert((&k.agent, &k.session_id));
                    if let Some(pk) = session
                        .query_row(params![k.agent, k.session_id], |r| r.get(0))
                        .optional()?
                    {
                        all.push(Whole {
                            pk,
                            agent: k.agent.clone(),
                            session_id: k.session_id.clone(),
                        });
                    }
                }
            }
            for k in known {
                if let Some(mid) = &k.message_id
                    && !whole.contains(&(k.agent.as_str(), k.session_id.as_str()))
                {
                    msgs.extend(
                        message
                            .query_row(params![k.agent, k.session_id, mid], |r| r.get::<_, i64>(0))
                            .optional()?,
                    );
                }
            }
            (all, msgs)
        }
    })
}

/// Remembers every identity another machine forgot, held here or not, so that neither an
/// import nor a later batch brings it back.
fn remember_known(tx: &Connection, known: &[Forgotten], now: i64) -> rusqlite::Result<()> {
    let mut session = tx.prepare_cached(
        "INSERT OR IGNORE INTO forgotten_sessions (agent, session_id, forgotten_at)
         VALUES (?1, ?2, ?3)",
    )?;
    let mut message = tx.prepare_cached(
        "INSERT OR IGNORE INTO forgotten_messages (agent, session_id, message_id, forgotten_at)
         VALUES (?1, ?2, ?3, ?4)",
    )?;
    for k in known {
        match &k.message_id {
            None => session.execute(params![k.agent, k.session_id, now])?,
            Some(m) => message.execute(params![k.agent, k.session_id, m, now])?,
        };
    }
    Ok(())
}

/// Files (`source_files` ids) left with no session archived from them: their row (the path,
/// its cursor) and their parse problems go, and the path's digest with the file's stamp is
/// remembered, so that an unchanged file is not read (and named) again. How many.
fn forget_files(tx: &Connection, files: &BTreeSet<i64>) -> rusqlite::Result<u64> {
    let mut n = 0;
    for &f in files {
        let used: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM session_files WHERE source_file_id = ?1)",
            [f],
            |r| r.get(0),
        )?;
        if used {
            continue;
        }
        let Some((path, size, mtime)) = tx
            .query_row(
                "SELECT path, size, mtime FROM source_files WHERE id = ?1",
                [f],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, i64>(1)?,
                        r.get::<_, i64>(2)?,
                    ))
                },
            )
            .optional()?
        else {
            continue;
        };
        // A message of no session left (none should be): its file is kept.
        let orphans: bool = tx.query_row(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE source_file_id = ?1)",
            [f],
            |r| r.get(0),
        )?;
        if orphans {
            continue;
        }
        tx.execute(
            "INSERT OR REPLACE INTO forgotten_files (digest, size, mtime) VALUES (?1, ?2, ?3)",
            params![super::path_digest(&path), size, mtime],
        )?;
        tx.execute("DELETE FROM parse_issues WHERE source_file_id = ?1", [f])?;
        tx.execute("DELETE FROM source_files WHERE id = ?1", [f])?;
        n += 1;
    }
    Ok(n)
}

/// Messages whose original record holds `text` (as written, JSON-escaped, or in any string
/// of the record once decoded, JSON inside a string included).
fn raw_matches(tx: &Connection, text: &str) -> rusqlite::Result<Vec<i64>> {
    let rows: Vec<(i64, i64, i64, i64)> = {
        let mut st = tx.prepare(
            "SELECT id, raw_block, raw_offset, raw_len FROM messages
             WHERE raw_block IS NOT NULL ORDER BY raw_block",
        )?;
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
            .collect::<rusqlite::Result<_>>()?
    };
    let needle = RecordNeedle::new(text);
    let mut out = Vec::new();
    let mut block: Option<(i64, Vec<u8>)> = None;
    let mut load = tx.prepare_cached("SELECT data FROM raw_blocks WHERE id = ?1")?;
    for (id, b, off, len) in rows {
        if block.as_ref().is_none_or(|(have, _)| *have != b) {
            let z: Option<Vec<u8>> = load.query_row([b], |r| r.get(0)).optional()?;
            block = Some((b, z.map(|z| super::unzstd_bytes(&z)).unwrap_or_default()));
        }
        let data = block.as_ref().map_or(&[][..], |(_, d)| d.as_slice());
        let (off, len) = (off.max(0) as usize, len.max(0) as usize);
        if let Some(rec) = data.get(off..off.saturating_add(len))
            && needle.in_record(rec)
        {
            out.push(id);
        }
    }
    Ok(out)
}

/// A text to find in original records, however they spell it.
struct RecordNeedle {
    text: String,
    /// The text as a JSON string spells it, without the quotes.
    escaped: String,
    /// Its longest run of characters that JSON writers never escape: a record without it
    /// cannot hold the text, and is not decoded.
    plain: String,
}

impl RecordNeedle {
    fn new(text: &str) -> RecordNeedle {
        let escaped = serde_json::to_string(text).unwrap_or_default();
        let escaped = escaped[1..escaped.len().saturating_sub(1).max(1)].to_owned();
        let plain = text
            .split(|c: char| c == '"' || c == '\\' || c == '/' || c.is_control() || !c.is_ascii())
            .max_by_key(|s| s.len())
            .unwrap_or("")
            .to_owned();
        RecordNeedle {
            text: text.to_owned(),
            escaped,
            plain,
        }
    }

    fn in_record(&self, rec: &[u8]) -> bool {
        let has =
            |hay: &[u8], n: &str| !n.is_empty() && hay.windows(n.len()).any(|w| w == n.as_bytes());
        if has(rec, &self.text) || has(rec, &self.escaped) {
            return true;
        }
        if !self.plain.is_empty() && !has(rec, &self.plain) {
            return false;
        }
        match ai_cli_session_collector::reader::decode_json(rec.trim_ascii()) {
            Ok(d) => self.in_value(&d.value, 2),
            Err(_) => false,
        }
    }

    fn in_value(&self, v: &serde_json::Value, depth: u8) -> bool {
        use serde_json::Value;
        match v {
            Value::String(s) => {
                s.contains(&self.text)
                    || depth > 0
                        && matches!(s.trim_start().as_bytes().first(), Some(b'{' | b'['))
                        && serde_json::from_str::<Value>(s)
                            .is_ok_and(|inner| self.in_value(&inner, depth - 1))
            }
            Value::Array(a) => a.iter().any(|x| self.in_value(x, depth)),
            Value::Object(o) => o
                .iter()
                .any(|(k, x)| k.contains(&self.text) || self.in_value(x, depth)),
            _ => false,
        }
    }
}

/// Deletes the layer rows matching `cond` and their full-text rows (their vectors follow by
/// trigger); returns how many.
fn delete_layer(
    tx: &Connection,
    layer: Layer,
    cond: &str,
    args: &[i64],
    dry_run: bool,
    gone: &mut Vec<(i64, i64)>,
) -> rusqlite::Result<u64> {
    let (table, fts) = (layer.table(), layer.fts_table());
    let ids: Vec<i64> = {
        let mut st = tx.prepare_cached(&format!("SELECT id FROM {table} WHERE {cond}"))?;
        st.query_map(rusqlite::params_from_iter(args), |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    gone.extend(ids.iter().map(|id| (layer.outbox_code(), *id)));
    if !dry_run {
        for id in &ids {
            tx.prepare_cached(&format!("DELETE FROM {fts} WHERE rowid = ?1"))?
                .execute([id])?;
            tx.prepare_cached(&format!("DELETE FROM {table} WHERE id = ?1"))?
                .execute([id])?;
        }
    }
    Ok(ids.len() as u64)
}

/// Compact rows whose own text holds `text` (a summary that quoted it); their talks are
/// queued again.
fn layer_matches(
    tx: &Connection,
    text: &str,
    dry_run: bool,
    talks: &mut HashSet<(i64, i64)>,
    gone: &mut Vec<(i64, i64)>,
) -> rusqlite::Result<(u64, u64, u64)> {
    let mut counts = [0u64; 3];
    let columns = [
        "title || subtitle || facts || narrative",
        "user_request || summary || completed",
        "summary || key_points",
    ];
    for (i, layer) in Layer::COMPACT.into_iter().enumerate() {
        let table = layer.table();
        let prompt = if layer == Layer::Sessions {
            "0"
        } else {
            "prompt_number"
        };
        let rows: Vec<(i64, i64, i64)> = {
            let mut st = tx.prepare(&format!(
                "SELECT id, session_pk, {prompt} FROM {table} WHERE instr({}, ?1) > 0",
                columns[i]
            ))?;
            st.query_map([text], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
                .collect::<rusqlite::Result<_>>()?
        };
        for (id, pk, prompt) in rows {
            counts[i] += delete_layer(tx, layer, "id = ?1", &[id], dry_run, gone)?;
            talks.insert((pk, prompt));
        }
    }
    Ok((counts[0], counts[1], counts[2]))
}

fn count_or_delete(
    tx: &Connection,
    table: &str,
    cond: &str,
    args: impl rusqlite::Params + Clone,
    dry_run: bool,
) -> rusqlite::Result<u64> {
    let n: i64 = tx.query_row(
        &format!("SELECT COUNT(*) FROM {table} WHERE {cond}"),
        args.clone(),
        |r| r.get(0),
    )?;
    if !dry_run && n > 0 {
        tx.execute(&format!("DELETE FROM {table} WHERE {cond}"), args)?;
    }
    Ok(n as u64)
}

/// Takes the deleted messages' records out of their raw blocks: a block left unused is
/// deleted, one still used is packed again without them (their bytes must not stay on disk).
/// Returns the compressed bytes saved.
fn drop_records(tx: &Connection, lost: &HashMap<i64, u64>) -> rusqlite::Result<u64> {
    let (left, mut saved) = super::release_raw(tx, lost.iter().map(|(b, n)| (*b, *n)))?;
    saved += repack(tx, &left, &mut |_| None)?;
    Ok(saved)
}

/// Rebuilds `blocks` from the records messages point at, each replaced by what `edit` returns
/// for it (`None`: kept as it is); returns the compressed bytes saved.
pub(super) fn repack(
    tx: &Connection,
    blocks: &[i64],
    edit: &mut dyn FnMut(&[u8]) -> Option<Vec<u8>>,
) -> rusqlite::Result<u64> {
    if blocks.is_empty() {
        return Ok(0);
    }
    // One pass over the messages finds every record of these blocks.
    let wanted: HashSet<i64> = blocks.iter().copied().collect();
    let mut records: HashMap<i64, Vec<(i64, usize, usize)>> = HashMap::new();
    {
        let mut st = tx.prepare(
            "SELECT id, raw_block, raw_offset, raw_len FROM messages WHERE raw_block IS NOT NULL",
        )?;
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)? as usize,
                r.get::<_, i64>(3)? as usize,
            ))
        })?;
        for row in rows {
            let (id, block, offset, len) = row?;
            if wanted.contains(&block) {
                records.entry(block).or_default().push((id, offset, len));
            }
        }
    }
    let mut saved = 0u64;
    for &block in blocks {
        let old: Vec<u8> =
            tx.query_row("SELECT data FROM raw_blocks WHERE id = ?1", [block], |r| {
                r.get(0)
            })?;
        let mut recs = records.remove(&block).unwrap_or_default();
        if recs.is_empty() {
            tx.execute("DELETE FROM raw_refs WHERE block = ?1", [block])?;
            tx.execute("DELETE FROM raw_blocks WHERE id = ?1", [block])?;
            saved += old.len() as u64;
            continue;
        }
        recs.sort_by_key(|r| r.1);
        let all = unzstd_bytes(&old);
        let mut buf = Vec::with_capacity(all.len());
        let mut moved =
            tx.prepare_cached("UPDATE messages SET raw_offset = ?2, raw_len = ?3 WHERE id = ?1")?;
        for (id, offset, len) in &recs {
            let rec = all.get(*offset..*offset + *len).unwrap_or_default();
            let edited = edit(rec);
            let rec = edited.as_deref().unwrap_or(rec);
            moved.execute(params![id, buf.len() as i64, rec.len() as i64])?;
            buf.extend_from_slice(rec);
        }
        let packed = zstd_bytes(&buf);
        saved += (old.len() as u64).saturating_sub(packed.len() as u64);
        tx.execute(
            "UPDATE raw_blocks SET data = ?2 WHERE id = ?1",
            params![block, packed],
        )?;
        tx.execute(
            "INSERT INTO raw_refs (block, refs, bytes) VALUES (?1, ?2, ?3)
             ON CONFLICT (block) DO UPDATE SET refs = excluded.refs, bytes = excluded.bytes",
            params![block, recs.len() as i64, packed.len() as i64],
        )?;
    }
    Ok(saved)
}

/// Queues the summaries of what is left of the touched talks and sessions again.
fn requeue(tx: &Connection, talks: &HashSet<(i64, i64)>, now: i64) -> rusqlite::Result<u64> {
    let mut n = 0;
    let mut sessions = HashSet::new();
    let mut alive = tx.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM messages WHERE session_pk = ?1 AND (?2 = 0 OR prompt_number = ?2))",
    )?;
    let mut job = tx.prepare_cached(
        "INSERT INTO compact_jobs (level, session_pk, prompt_number, regenerate, state, reason, created_at, updated_at)
         VALUES (?1, ?2, ?3, 1, 'pending', 'forget', ?4, ?4)
         ON CONFLICT (level, session_pk, prompt_number) DO UPDATE SET
           state = 'pending', regenerate = 1, attempts = 0, not_before = 0, last_error = NULL,
           reason = 'forget', updated_at = excluded.updated_at
         WHERE compact_jobs.state IN ('done', 'failed')",
    )?;
    for &(pk, prompt) in talks {
        sessions.insert(pk);
        if prompt > 0 && alive.query_row(params![pk, prompt], |r| r.get::<_, bool>(0))? {
            n += job.execute(params![Layer::Observations.job(), pk, prompt, now])? as u64;
            n += job.execute(params![Layer::Talks.job(), pk, prompt, now])? as u64;
        }
    }
    for pk in sessions {
        if alive.query_row(params![pk, 0], |r| r.get::<_, bool>(0))? {
            super::ingest::refresh_session(tx, pk)?;
            n += job.execute(params![Layer::Sessions.job(), pk, 0, now])? as u64;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secure_delete(conn: &Connection) -> Vec<i64> {
        Layer::ALL
            .iter()
            .map(|l| {
                let t = l.fts_table();
                conn.query_row(
                    &format!("SELECT v FROM {t}_config WHERE k = 'secure-delete'"),
                    [],
                    |r| r.get(0),
                )
                .unwrap()
            })
            .collect()
    }

    #[test]
    fn full_text_secure_delete_is_on_only_while_wiping() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::open(dir.path()).unwrap();
        assert_eq!(secure_delete(&conn), [0; 4], "off for import and search");
        let during = wiping(&mut conn, |c| -> rusqlite::Result<Vec<i64>> {
            Ok(secure_delete(c))
        })
        .unwrap();
        assert_eq!(during, [1; 4]);
        assert_eq!(secure_delete(&conn), [0; 4]);
        let failed: rusqlite::Result<()> =
            wiping(&mut conn, |_| Err(rusqlite::Error::InvalidQuery));
        assert!(failed.is_err());
        assert_eq!(secure_delete(&conn), [0; 4], "off again after a failure");
    }

    #[test]
    fn wiping_empties_the_champion_lists_which_name_words_of_what_was_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = crate::open(dir.path()).unwrap();
        let lists = |c: &Connection| -> i64 {
            c.query_row("SELECT COUNT(*) FROM fts_champions", [], |r| r.get(0))
                .unwrap()
        };
        let put = "INSERT INTO fts_champions (fts, term, docs, upto, best)
                   VALUES ('messages_fts', 'hunter', 400, 400, x'')";
        conn.execute(put, []).unwrap();
        let failed: rusqlite::Result<()> =
            wiping(&mut conn, |_| Err(rusqlite::Error::InvalidQuery));
        assert!(failed.is_err());
        assert_eq!(lists(&conn), 1, "nothing was removed: the lists stay");
        let wipes = |c: &Connection| -> i64 {
            c.query_row(
                "SELECT docs FROM fts_champions WHERE fts = '*' AND term = 'wipes'",
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        wiping(&mut conn, |_| -> rusqlite::Result<()> { Ok(()) }).unwrap();
        // What is left is the count of wipes, which a refresh that read before compares.
        assert_eq!(lists(&conn), 1);
        assert_eq!(wipes(&conn), 1);
        wiping(&mut conn, |_| -> rusqlite::Result<()> { Ok(()) }).unwrap();
        assert_eq!(wipes(&conn), 2);
    }
}
