//! What goes into the FTS5 index (how queries are read is `search::query`).
//!
//! FTS5's `unicode61` tokenizer treats a run of Chinese or Japanese characters as one token,
//! so `认证` would never match inside `修复认证失败`. Instead of paying for a trigram index over
//! all text (5x slower, 2.3x larger, PERF-NOTES.md), the indexed text expands every CJK run into
//! its overlapping bigrams plus its last character (`修复认证` → `修复 复认 认证 证`), and a CJK
//! query word becomes the phrase of its bigrams. Latin text is indexed as it is.

/// Whether `c` belongs to a script written without spaces between words.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x3400..=0x4DBF    // CJK Extension A
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0x20000..=0x2FA1F) // Extensions B–F, compatibility supplement
}

/// The text to index for `text`, at most about `max_bytes` of it: a longer text keeps its first
/// and its last `max_bytes / 2` (a build or test log gives its verdict at the end; a file its
/// purpose at the top). Borrows when the text is short and has no CJK.
pub fn index_text(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    let text: std::borrow::Cow<'_, str> = if text.len() > max_bytes {
        let half = max_bytes / 2;
        let mut head = half;
        while !text.is_char_boundary(head) {
            head -= 1;
        }
        // The tail starts at a word, when one starts near the cut.
        let mut tail = text.len() - half;
        while !text.is_char_boundary(tail) {
            tail += 1;
        }
        if let Some(gap) = text[tail..].find(char::is_whitespace).filter(|&g| g < 64) {
            tail += gap;
        }
        std::borrow::Cow::Owned(format!("{}\n…\n{}", &text[..head], &text[tail..]))
    } else {
        std::borrow::Cow::Borrowed(text)
    };
    // Most texts are ASCII, which a word-at-a-time check settles without decoding characters.
    if text.is_ascii() || !text.chars().any(is_cjk) {
        return text;
    }
    let mut out = String::with_capacity(text.len() * 3);
    let mut run: Vec<char> = Vec::new();
    let flush = |run: &mut Vec<char>, out: &mut String| {
        if run.is_empty() {
            return;
        }
        out.push(' ');
        for w in run.windows(2) {
            out.push(w[0]);
            out.push(w[1]);
            out.push(' ');
        }
        out.push(*run.last().unwrap());
        out.push(' ');
        run.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            run.push(c);
        } else {
            flush(&mut run, &mut out);
            out.push(c);
        }
    }
    flush(&mut run, &mut out);
    std::borrow::Cow::Owned(out)
}

/// Row `rowid` of the full-text index `fts` was indexed again in place (a message rewritten, a
/// summary written again under a freed id, a long text given its tail): the champion lists of
/// `search::champions` looked at rows up to their index's mark, so the mark goes back before
/// it, and the next refresh and every search until then look at the row again. One row
/// updated; nothing when the row is above the mark (it is looked at anyway).
pub fn reindexed(conn: &rusqlite::Connection, fts: &str, rowid: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE fts_champions SET upto = ?2 - 1 WHERE fts = ?1 AND term = '' AND upto >= ?2",
    )?
    .execute(rusqlite::params![fts, rowid])?;
    Ok(())
}

/// What a compact layer's full-text index holds of one row, at most.
pub const LAYER_FTS_BYTES: usize = 1 << 20;

/// Indexes row `id` of a compact layer (written or rewritten in place; its old entry, if any,
/// was removed first) from its stored columns, as [`Columns::fts_body`](crate::layer::Columns)
/// says. Nothing for the raw layer, whose messages ingest indexes.
pub fn index_layer_row(
    conn: &rusqlite::Connection,
    layer: crate::layer::Layer,
    id: i64,
) -> rusqlite::Result<()> {
    let Some(columns) = layer.columns() else {
        return Ok(());
    };
    let (table, fts) = (layer.table(), layer.fts_table());
    let body: String = conn
        .prepare_cached(&format!(
            "SELECT {} FROM {table} x WHERE x.id = ?1",
            columns.fts_body
        ))?
        .query_row([id], |r| r.get(0))?;
    conn.prepare_cached(&format!("INSERT INTO {fts} (rowid, body) VALUES (?1, ?2)"))?
        .execute(rusqlite::params![id, index_text(&body, LAYER_FTS_BYTES)])?;
    // A row written again under an id the index had before (the newest, deleted and written
    // again).
    reindexed(conn, fts, id)
}

/// Deletes the rows of a compact layer that `cond` (over its columns, with `args`) selects,
/// and their full-text entries.
pub fn unindex_layer_rows(
    conn: &rusqlite::Connection,
    layer: crate::layer::Layer,
    cond: &str,
    args: &[i64],
) -> rusqlite::Result<()> {
    let (table, fts) = (layer.table(), layer.fts_table());
    let ids: Vec<i64> = conn
        .prepare_cached(&format!("SELECT id FROM {table} WHERE {cond}"))?
        .query_map(rusqlite::params_from_iter(args), |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for id in ids {
        conn.prepare_cached(&format!("DELETE FROM {fts} WHERE rowid = ?1"))?
            .execute([id])?;
    }
    conn.prepare_cached(&format!("DELETE FROM {table} WHERE {cond}"))?
        .execute(rusqlite::params_from_iter(args))?;
    Ok(())
}

/// Indexes again, by [`index_text`], every message whose text is longer than `max_bytes` (an
/// archive written before long texts kept their tail has only their head indexed). One
/// transaction. Returns how many messages were indexed again.
pub fn reindex_long_texts(
    conn: &mut rusqlite::Connection,
    max_bytes: usize,
) -> rusqlite::Result<u64> {
    let tx = conn.transaction()?;
    let mut n = 0;
    let mut first = None;
    {
        // Texts over COMPRESS_TEXT_ABOVE are stored compressed: only those can be long.
        let mut st = tx.prepare(
            "SELECT id, memex_unzstd(text_z) FROM messages
             WHERE text_z IS NOT NULL AND inherited = 0 AND duplicate = 0",
        )?;
        let mut del = tx.prepare("DELETE FROM messages_fts WHERE rowid = ?1")?;
        let mut ins = tx.prepare("INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)")?;
        let mut rows = st.query([])?;
        while let Some(row) = rows.next()? {
            let id: i64 = row.get(0)?;
            let text: String = row.get(1)?;
            if text.len() > max_bytes {
                del.execute([id])?;
                ins.execute(rusqlite::params![id, index_text(&text, max_bytes)])?;
                first = Some(first.map_or(id, |f: i64| f.min(id)));
                n += 1;
            }
        }
    }
    if let Some(id) = first {
        reindexed(&tx, "messages_fts", id)?;
    }
    tx.commit()?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a compact row's full-text entry holds: its text columns, then its lists one item a
    /// line (facts, key points) or space-separated (files, technologies); and the entry goes
    /// with the row.
    #[test]
    fn a_compact_row_is_indexed_from_its_columns() {
        use crate::compact::{Observation, Provenance, Rows, SessionSummary, Stored, replace};
        use crate::layer::Layer;
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::open(dir.path()).unwrap();
        conn.execute(
            "INSERT INTO sessions (agent, session_id, source_path) VALUES ('claude', 's', '/x')",
            [],
        )
        .unwrap();
        let pk = conn.last_insert_rowid();
        let by = Provenance {
            provider: "openai".into(),
            model: None,
            prompt_version: "v1".into(),
            tokens_input: 1,
            tokens_output: 1,
            confidence: 0.9,
            fallback_reason: None,
        };
        let obs = Stored {
            value: Observation {
                first_message_id: "m1".into(),
                last_message_id: "m1".into(),
                tool_name: "Edit".into(),
                call_count: 1,
                kind: "bugfix".into(),
                title: "Fixed the 认证 check".into(),
                subtitle: "in auth".into(),
                facts: vec!["one fact".into(), "two \"quoted\"".into()],
                narrative: "a story".into(),
                files_read: vec!["src/r.rs".into()],
                files_modified: vec!["src/a.rs".into(), "src/b.rs".into()],
                ts: None,
            },
            provenance: by.clone(),
            created_at: 1,
        };
        let session = Stored {
            value: SessionSummary {
                summary: "whole".into(),
                key_points: vec!["k1".into(), "k2".into()],
                files_involved: vec!["f1".into(), "f2".into()],
                technologies: vec!["Rust".into(), "SQLite".into()],
                talks_covered: 1,
            },
            provenance: by,
            created_at: 1,
        };
        let body = |layer: Layer| -> String {
            conn.query_row(
                &format!(
                    "SELECT {} FROM {} x",
                    layer.columns().unwrap().fts_body,
                    layer.table()
                ),
                [],
                |r| r.get(0),
            )
            .unwrap()
        };
        replace(&conn, pk, 1, &Rows::Observations(vec![obs.clone()])).unwrap();
        assert_eq!(
            body(Layer::Observations),
            "Fixed the 认证 check\nin auth\na story\none fact\ntwo \"quoted\"\nsrc/a.rs src/b.rs src/r.rs"
        );
        let rows = Rows::Session {
            row: session,
            raw_tokens: 10,
            updated_at: 2,
        };
        replace(&conn, pk, 0, &rows).unwrap();
        assert_eq!(body(Layer::Sessions), "whole\nk1\nk2\nRust SQLite\nf1 f2");
        let hits = |fts: &str, q: &str| -> i64 {
            conn.query_row(
                &format!("SELECT COUNT(*) FROM {fts} WHERE {fts} MATCH ?1"),
                [q],
                |r| r.get(0),
            )
            .unwrap()
        };
        // CJK as bigrams, as messages are.
        assert_eq!(hits("observations_fts", "认证"), 1);
        assert_eq!(hits("session_summaries_fts", "SQLite"), 1);
        // Written again in place: one row, one entry, the old text gone.
        let mut again = obs;
        again.value.narrative = "another story".into();
        replace(&conn, pk, 1, &Rows::Observations(vec![again])).unwrap();
        assert_eq!(hits("observations_fts", "another"), 1);
        assert_eq!(hits("observations_fts", "story"), 1);
        assert_eq!(
            crate::compact::read(&conn, Layer::Observations, pk, 1)
                .unwrap()
                .map(|r| r.count()),
            Some(1)
        );
    }

    #[test]
    fn cjk_runs_become_bigrams() {
        assert_eq!(
            index_text("修复认证bug", 1000).trim(),
            "修复 复认 认证 证 bug"
        );
        assert_eq!(index_text("plain text", 1000), "plain text");
    }

    #[test]
    fn a_long_text_keeps_its_head_and_its_tail() {
        let log = format!(
            "running 812 tests{}\ntest result: FAILED. 809 passed; 3 failed",
            " ok ok ok ёж".repeat(20_000)
        );
        let kept = index_text(&log, 4096);
        assert!(kept.len() <= 4096 + 8, "{}", kept.len());
        assert!(kept.starts_with("running 812 tests"));
        assert!(kept.ends_with("809 passed; 3 failed"));
        // Cut on characters, the tail from a word.
        assert!(
            kept.contains("\n…\n ok") || kept.contains("\n…\n ёж"),
            "{kept:.80}"
        );
        let cjk = "验证码".repeat(1000);
        let kept = index_text(&cjk, 1000);
        assert!(kept.contains("验证 证码"));
    }
}
