//! `memex scrub`: the current redaction rules applied to everything already stored (message
//! text, tool input, raw records, the compact layers and their full-text rows, the logs), on
//! the writer connection in one transaction, with SQLite overwriting what it frees.

use std::collections::BTreeMap;

use rusqlite::{Connection, Transaction, params};
use serde::Serialize;

use super::forget::{repack, wiping};
use super::{fts, zstd_bytes};
use crate::layer::Layer;
use crate::redact;

/// What `memex scrub` found and changed, per rule.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ScrubReport {
    /// Secrets found per redaction rule (every copy counts).
    pub found: BTreeMap<String, u64>,
    pub messages: u64,
    pub raw_records: u64,
    pub raw_bytes_reclaimed: u64,
    pub titles: u64,
    pub compact_rows: u64,
    pub injections: u64,
    pub log_files: u64,
}

/// Applies the redaction rules to everything stored in the archive (and the log files in
/// `logs_dir`). `progress` is told the messages done and their total.
pub fn scrub(
    conn: &mut Connection,
    fts_max_bytes: usize,
    logs_dir: Option<&std::path::Path>,
    progress: &dyn Fn(u64, u64),
) -> rusqlite::Result<ScrubReport> {
    wiping(conn, |c| scrub_in(c, fts_max_bytes, logs_dir, progress))
}

fn scrub_in(
    conn: &mut Connection,
    fts_max_bytes: usize,
    logs_dir: Option<&std::path::Path>,
    progress: &dyn Fn(u64, u64),
) -> rusqlite::Result<ScrubReport> {
    let mut tally = redact::Tally::default();
    let mut r = ScrubReport::default();
    let tx = conn.transaction()?;

    // Message text and tool input; their full-text rows follow, their vectors by trigger.
    let total: i64 = tx.query_row("SELECT COUNT(*) FROM messages", [], |r| r.get(0))?;
    {
        let mut st = tx.prepare(
            "SELECT id, COALESCE(text, memex_unzstd(text_z)), tool_input, inherited, duplicate
             FROM messages",
        )?;
        let mut upd = tx
            .prepare("UPDATE messages SET text = ?2, text_z = ?3, tool_input = ?4 WHERE id = ?1")?;
        let mut fts_del = tx.prepare("DELETE FROM messages_fts WHERE rowid = ?1")?;
        let mut fts_ins = tx.prepare("INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)")?;
        let mut rows = st.query([])?;
        let mut done = 0u64;
        while let Some(row) = rows.next()? {
            done += 1;
            if done.is_multiple_of(10_000) {
                progress(done, total as u64);
            }
            let id: i64 = row.get(0)?;
            let text: Option<String> = row.get(1)?;
            let input: Option<String> = row.get(2)?;
            let (inherited, duplicate): (bool, bool) = (row.get(3)?, row.get(4)?);
            let text = text.unwrap_or_default();
            let new_text = redact::redact_text_tally(&text, &mut tally);
            let new_input = input
                .as_deref()
                .map(|i| redact::redact_text_tally(i, &mut tally));
            let text_changed = matches!(new_text, std::borrow::Cow::Owned(_));
            let input_changed = matches!(new_input, Some(std::borrow::Cow::Owned(_)));
            if !text_changed && !input_changed {
                continue;
            }
            r.messages += 1;
            let new_text = new_text.into_owned();
            let (t, z) = if new_text.len() > super::COMPRESS_TEXT_ABOVE {
                (None, Some(zstd_bytes(new_text.as_bytes())))
            } else {
                (Some(new_text.clone()), None)
            };
            upd.execute(params![
                id,
                t,
                z,
                new_input.map(std::borrow::Cow::into_owned)
            ])?;
            if text_changed {
                fts_del.execute([id])?;
                if !new_text.trim().is_empty() && !inherited && !duplicate {
                    fts_ins.execute(params![id, fts::index_text(&new_text, fts_max_bytes)])?;
                }
            }
        }
        progress(total as u64, total as u64);
    }

    // Raw records: every block rebuilt from the records messages use, each redacted (what
    // earlier versions left unused goes with it).
    let blocks: Vec<i64> = {
        let mut st = tx.prepare("SELECT id FROM raw_blocks")?;
        st.query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?
    };
    let mut changed_records = 0u64;
    {
        let mut edit = |rec: &[u8]| -> Option<Vec<u8>> {
            match redact::redact_bytes_tally(rec, &mut tally) {
                std::borrow::Cow::Owned(out) => {
                    changed_records += 1;
                    Some(out)
                }
                std::borrow::Cow::Borrowed(_) => None,
            }
        };
        r.raw_bytes_reclaimed = repack(&tx, &blocks, &mut edit)?;
    }
    r.raw_records = changed_records;
    let (_, freed) = super::reclaim_raw(&tx)?;
    r.raw_bytes_reclaimed += freed;

    // Titles.
    {
        let rows: Vec<(i64, String)> = {
            let mut st = tx.prepare("SELECT id, title FROM sessions WHERE title IS NOT NULL")?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?
        };
        for (id, title) in rows {
            let safe = super::ingest::redacted_title_tally(&title, &mut tally);
            if safe != title {
                r.titles += 1;
                tx.execute(
                    "UPDATE sessions SET title = ?2 WHERE id = ?1",
                    params![id, safe],
                )?;
            }
        }
    }

    // Compact rows and their full-text rows (their vectors follow by trigger).
    r.compact_rows = scrub_layers(&tx, &mut tally)?;

    // Adapter state in file cursors (earlier versions kept a prompt's text there).
    {
        let rows: Vec<(i64, String)> = {
            let mut st = tx.prepare("SELECT id, cursor FROM source_files")?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?
        };
        for (id, c) in rows {
            if let std::borrow::Cow::Owned(safe) = redact::redact_text_tally(&c, &mut tally) {
                tx.execute(
                    "UPDATE source_files SET cursor = ?2 WHERE id = ?1",
                    params![id, safe],
                )?;
            }
        }
    }

    // The injection log's prompts.
    {
        let rows: Vec<(i64, String)> = {
            let mut st =
                tx.prepare("SELECT id, prompt FROM injections WHERE prompt IS NOT NULL")?;
            st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?
        };
        for (id, p) in rows {
            if let std::borrow::Cow::Owned(safe) = redact::redact_text_tally(&p, &mut tally) {
                r.injections += 1;
                tx.execute(
                    "UPDATE injections SET prompt = ?2 WHERE id = ?1",
                    params![id, safe],
                )?;
            }
        }
    }
    tx.commit()?;

    // The service's log files.
    if let Some(dir) = logs_dir {
        r.log_files = scrub_logs(dir, &mut tally);
    }
    r.found = tally.iter().map(|(name, n)| (name.to_owned(), n)).collect();
    Ok(r)
}

/// The compact layers' text columns a secret can hide in.
const LAYER_TEXT: &[(Layer, &[&str])] = &[
    (
        Layer::Observations,
        &["title", "subtitle", "facts", "narrative"],
    ),
    (Layer::Talks, &["user_request", "summary", "completed"]),
    (Layer::Sessions, &["summary", "key_points"]),
];

fn scrub_layers(tx: &Transaction<'_>, tally: &mut redact::Tally) -> rusqlite::Result<u64> {
    let mut n = 0;
    for (layer, columns) in LAYER_TEXT {
        let (table, fts_table) = (layer.table(), layer.fts_table());
        let select = format!("SELECT id, {} FROM {table}", columns.join(", "));
        let rows: Vec<(i64, Vec<String>)> = {
            let mut st = tx.prepare(&select)?;
            st.query_map([], |r| {
                let mut v = Vec::with_capacity(columns.len());
                for i in 0..columns.len() {
                    v.push(r.get::<_, String>(i + 1)?);
                }
                Ok((r.get(0)?, v))
            })?
            .collect::<rusqlite::Result<_>>()?
        };
        let set = columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c} = ?{}", i + 2))
            .collect::<Vec<_>>()
            .join(", ");
        for (id, values) in rows {
            let mut changed = false;
            let safe: Vec<String> = values
                .iter()
                .map(|v| match redact::redact_text_tally(v, tally) {
                    std::borrow::Cow::Owned(s) => {
                        changed = true;
                        s
                    }
                    std::borrow::Cow::Borrowed(s) => s.to_owned(),
                })
                .collect();
            if !changed {
                continue;
            }
            n += 1;
            let mut args: Vec<&dyn rusqlite::ToSql> = vec![&id];
            args.extend(safe.iter().map(|s| s as &dyn rusqlite::ToSql));
            tx.execute(
                &format!("UPDATE {table} SET {set} WHERE id = ?1"),
                &args[..],
            )?;
            tx.execute(&format!("DELETE FROM {fts_table} WHERE rowid = ?1"), [id])?;
            fts::index_layer_row(tx, *layer, id)?;
        }
    }
    Ok(n)
}

/// Redacts the log files in place.
fn scrub_logs(dir: &std::path::Path, tally: &mut redact::Tally) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let path = e.path();
        if !path.is_file() {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if let std::borrow::Cow::Owned(safe) = redact::redact_bytes_tally(&bytes, tally) {
            // In place (the same file, truncated): the service may be appending to it.
            if std::fs::write(&path, &safe).is_ok() {
                n += 1;
            } else {
                tracing::warn!(file = %path.display(), "cannot rewrite a log file");
            }
        }
    }
    n
}
