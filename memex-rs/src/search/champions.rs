//! Champion lists: a common word's best rows over all its matches.
//!
//! A search reads a word's newest matches (FTS5 serves them lazily, newest first) and ranks
//! them itself. For a word in thousands of rows, ranking every match at query time costs what
//! FTS5's own `bm25()` costs (5–30 ms at a million messages), so the newest window alone would
//! decide. Instead each common word of each full-text index keeps its [`KEPT`] best rows by
//! BM25 over every row that holds it (the "champion list" of information retrieval), scored
//! in the background by FTS5's own `bm25()` and kept up to date incrementally: a refresh
//! scores only the rows added since the last one and merges them into the list. A search ranks
//! the newest matches together with the champions of its words, so the best match of a common
//! word is found wherever it is in the archive; the document count stored with each list also
//! spares counting the word's rows at query time.
//!
//! The lists are an index, not data: rows removed since a list was made are skipped when read
//! (and dropped when a list is saved), and `memex forget` / `memex scrub` empty them all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use rusqlite::{Connection, OptionalExtension, params};

use crate::layer::Layer;

/// How many best rows a word keeps.
pub const KEPT: usize = 64;

/// A word gets a list once it is in more rows than a search reads newest first: below that,
/// every match is ranked anyway.
pub const COMMON: i64 = super::CANDIDATES as i64;

/// One word's list, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct List {
    pub term: String,
    /// Rows that held the word when the list was made.
    pub docs: i64,
    /// Rows up to this rowid have been looked at.
    pub upto: i64,
    /// Row ids and BM25 scores (higher is better), best first.
    pub best: Vec<(i64, f32)>,
}

/// What [`compute`] made, for [`save`].
#[derive(Debug, Default)]
pub struct Computed {
    /// Common words in the index.
    pub words: usize,
    pub lists: Vec<List>,
    /// The newest row every common word's list has looked at, when the refresh was not stopped
    /// early: the mark the next one is due from.
    pub done_upto: Option<i64>,
    /// How many times forget or scrub had wiped the archive when the reading began: one since
    /// makes it stale.
    pub wipes: i64,
    /// The index's mark when the reading began: a row indexed again since moves it back, and
    /// then the refresh does not move it on.
    pub mark: Option<i64>,
}

/// The term under which an index's mark is stored: no token of an index is empty.
const MARK: &str = "";

/// How many times `memex forget` or `memex scrub` wiped the archive: they empty the lists
/// and count up under `fts = '*'` (no full-text table is named so).
fn wipes(conn: &Connection) -> rusqlite::Result<i64> {
    Ok(conn
        .query_row(
            "SELECT docs FROM fts_champions WHERE fts = '*' AND term = 'wipes'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

/// What a refresh did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Refreshed {
    /// Common words in the indexes.
    pub words: usize,
    /// Lists made or brought up to date.
    pub updated: usize,
}

fn encode(best: &[(i64, f32)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(best.len() * 12);
    for (row, score) in best {
        out.extend_from_slice(&row.to_le_bytes());
        out.extend_from_slice(&score.to_le_bytes());
    }
    out
}

/// The pairs of a stored list; a blob of another length (not written by this code) reads as
/// its whole pairs only.
fn decode(blob: &[u8]) -> Vec<(i64, f32)> {
    blob.chunks_exact(12)
        .map(|c| {
            let row = i64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
            let score = f32::from_le_bytes(c[8..].try_into().expect("4 bytes"));
            (row, score)
        })
        .collect()
}

/// The word's list in `fts`, if it is common there and has one. `term` is a token as the
/// index holds it (lower case).
pub fn lookup(conn: &Connection, fts: &str, term: &str) -> rusqlite::Result<Option<List>> {
    conn.prepare_cached("SELECT docs, upto, best FROM fts_champions WHERE fts = ?1 AND term = ?2")?
        .query_row(params![fts, term], |r| {
            Ok(List {
                term: term.to_owned(),
                docs: r.get(0)?,
                upto: r.get(1)?,
                best: decode(&r.get::<_, Vec<u8>>(2)?),
            })
        })
        .optional()
}

/// The newest row of `l` (its index's rowids are the table's ids; the table answers from its
/// B-tree, a virtual table would scan).
fn newest(conn: &Connection, l: Layer) -> rusqlite::Result<Option<i64>> {
    conn.query_row(&format!("SELECT MAX(id) FROM {}", l.table()), [], |r| {
        r.get(0)
    })
}

/// The mark of index `fts`: its lists have looked at every row up to it (a whole refresh sets
/// it to the newest row; a row indexed again in place puts it back before that row,
/// `store::fts::reindexed`). None before the first whole refresh.
pub fn mark(conn: &Connection, fts: &str) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT upto FROM fts_champions WHERE fts = ?1 AND term = ?2")?
        .query_row([fts, MARK], |r| r.get(0))
        .optional()
}

/// How many rows of `l` came in since its last whole refresh.
pub fn behind(conn: &Connection, l: Layer) -> rusqlite::Result<i64> {
    let seen = mark(conn, l.fts_table())?;
    Ok((newest(conn, l)?.unwrap_or(0) - seen.unwrap_or(0)).max(0))
}

/// Rows added since the last refresh that make the next one: a refresh reads the whole word
/// list of the index and asks FTS5 for every common word's document count, so it waits for a
/// fiftieth of the archive more (and at least this many rows). Rows in between are among the
/// newest matches, which every search ranks anyway.
pub const REFRESH_AFTER: i64 = 500;

/// Whether `l`'s lists are due for a refresh.
pub fn due(conn: &Connection, l: Layer) -> rusqlite::Result<bool> {
    let top = newest(conn, l)?.unwrap_or(0);
    Ok(behind(conn, l)? >= (top / 50).max(REFRESH_AFTER))
}

/// The lists of `l`'s index that are behind it, made or brought up to date from `conn` (a read
/// connection: nothing is written); [`save`] stores them. Stops early, with what it has, when
/// `stop` is set.
pub fn compute(conn: &Connection, l: Layer, stop: &AtomicBool) -> rusqlite::Result<Computed> {
    let fts = l.fts_table();
    let wipes = wipes(conn)?;
    let mark = mark(conn, fts)?;
    let Some(top) = newest(conn, l)? else {
        return Ok(Computed {
            wipes,
            mark,
            ..Computed::default()
        });
    };
    // The index's own word list, with how many rows hold each word.
    conn.execute_batch(&format!(
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.{fts}_words USING fts5vocab(main, {fts}, row)"
    ))?;
    let mut known: HashMap<String, (i64, Vec<(i64, f32)>)> = HashMap::new();
    {
        let mut st = conn.prepare("SELECT term, upto, best FROM fts_champions WHERE fts = ?1")?;
        let mut rows = st.query([fts])?;
        while let Some(r) = rows.next()? {
            known.insert(r.get(0)?, (r.get(1)?, decode(&r.get::<_, Vec<u8>>(2)?)));
        }
    }
    let mut common: Vec<(String, i64)> = Vec::new();
    {
        let mut st = conn.prepare(&format!(
            "SELECT term, doc FROM temp.{fts}_words WHERE doc > ?1"
        ))?;
        let mut rows = st.query([COMMON])?;
        while let Some(r) = rows.next()? {
            let term: String = r.get(0)?;
            // A stop word is dropped from every question that has another word.
            if !super::query::is_stop_word(&term) {
                common.push((term, r.get(1)?));
            }
        }
    }
    // Whether any row above the list's mark has the word: a seek in its doclist. Only then is
    // it scored: FTS5's `bm25()` counts the word's whole doclist first.
    let mut fresh_rows = conn.prepare(&format!(
        "SELECT 1 FROM {fts} WHERE {fts} MATCH ?1 AND rowid > ?2 AND rowid <= ?3 LIMIT 1"
    ))?;
    // Rows above the list's mark, best first by FTS5's BM25 (lower is better there), the newer
    // first among equals (as a search orders them).
    let mut best = conn.prepare(&format!(
        "SELECT rowid, bm25({fts}) FROM {fts}
         WHERE {fts} MATCH ?1 AND rowid > ?2 AND rowid <= ?3
         ORDER BY 2, rowid DESC LIMIT {KEPT}"
    ))?;
    let mut out = Computed {
        words: common.len(),
        lists: Vec::new(),
        done_upto: Some(top),
        wipes,
        mark,
    };
    for (term, docs) in common {
        if stop.load(Ordering::Relaxed) {
            out.done_upto = None;
            break;
        }
        let (upto, mut list) = known.remove(&term).unwrap_or_default();
        // Rows above the index's mark are looked at again: one of them was indexed again.
        let upto = mark.map_or(upto, |m| upto.min(m));
        if upto >= top {
            continue;
        }
        // A token of the index is letters and digits: quoted, it is one phrase.
        let phrase = format!("\"{}\"", term.replace('"', "\"\""));
        // No new row has it: the list, its count and its mark stay as they are.
        if !fresh_rows.exists(params![phrase, upto, top])? {
            continue;
        }
        let mut fresh = best
            .query_map(params![phrase, upto, top], |r| {
                Ok((r.get::<_, i64>(0)?, -r.get::<_, f64>(1)? as f32))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        list.retain(|(row, _)| !fresh.iter().any(|(f, _)| f == row));
        // The newer rows first, so that a stable sort keeps them first among equals.
        fresh.append(&mut list);
        let mut list = fresh;
        list.sort_by(|a, b| b.1.total_cmp(&a.1));
        list.truncate(KEPT);
        out.lists.push(List {
            term,
            docs,
            upto: top,
            best: list,
        });
    }
    Ok(out)
}

/// Stores what [`compute`] made for `l`: the lists without the rows removed since, and the mark
/// of a whole refresh; nothing when a forget or scrub ran since the reading began (its words
/// must not come back). One transaction. Returns whether it stored them.
pub fn save(conn: &mut Connection, l: Layer, made: &Computed) -> rusqlite::Result<bool> {
    let tx = conn.transaction()?;
    if made.wipes != wipes(&tx)? {
        return Ok(false);
    }
    {
        let mut exists = tx.prepare(&format!("SELECT 1 FROM {} WHERE id = ?1", l.table()))?;
        let mut put = tx.prepare(
            "INSERT OR REPLACE INTO fts_champions (fts, term, docs, upto, best)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        // A row indexed again since the reading began keeps the mark before it.
        if let Some(upto) = made.done_upto
            && mark(&tx, l.fts_table())? == made.mark
        {
            put.execute(params![l.fts_table(), MARK, 0, upto, Vec::<u8>::new()])?;
        }
        for list in &made.lists {
            let mut best = Vec::with_capacity(list.best.len());
            for &(row, score) in &list.best {
                if exists.exists([row])? {
                    best.push((row, score));
                }
            }
            if best.is_empty() {
                continue;
            }
            put.execute(params![
                l.fts_table(),
                list.term,
                list.docs,
                list.upto,
                encode(&best)
            ])?;
        }
    }
    tx.commit()?;
    Ok(true)
}

/// Brings every index's lists up to date on one connection (the benchmark, the tests; the
/// service computes on a read connection and saves on its writer).
pub fn refresh(conn: &mut Connection) -> rusqlite::Result<Refreshed> {
    let stop = AtomicBool::new(false);
    let mut done = Refreshed::default();
    for l in Layer::ALL {
        let made = compute(conn, l, &stop)?;
        save(conn, l, &made)?;
        done.words += made.words;
        done.updated += made.lists.len();
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::{CANDIDATES, Mode, Scope, SearchParams, Semantic, search};
    use crate::store::read::Filter;

    /// Stores message `id` of session `pk` with `text`, indexed.
    fn message(conn: &Connection, id: i64, pk: i64, text: &str) {
        conn.execute(
            "INSERT INTO messages (id, session_pk, message_id, line, seq, role, kind,
               prompt_number, ts, text)
             VALUES (?1, ?2, ?1, ?1, 0, 'assistant', 'text', 1, ?3, ?4)",
            params![id, pk, 1_780_000_000_000 + id * 1000, text],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO messages_fts (rowid, body) VALUES (?1, ?2)",
            params![id, text],
        )
        .unwrap();
    }

    /// An archive of 400 messages that all say `deploy`: the oldest says little else (the best
    /// match by BM25), the 399 newer ones say it once in a long text.
    fn archive(dir: &std::path::Path) -> Connection {
        let conn = crate::store::open(dir).unwrap();
        for (pk, agent) in [(1, "claude"), (2, "codex")] {
            conn.execute(
                "INSERT INTO sessions (id, agent, session_id) VALUES (?1, ?2, ?3)",
                params![pk, agent, format!("s{pk}")],
            )
            .unwrap();
        }
        message(&conn, 1, 1, "deploy deploy: the deploy failed");
        let filler = "the build ran the linter over every crate then packed the image and \
                      pushed it to the registry where the staging cluster pulled it later";
        for id in 2..=400 {
            let text = format!("{filler} before the deploy of change {id}, {filler}");
            message(&conn, id, 1 + id % 2, &text);
        }
        conn
    }

    fn top(conn: &Connection, q: &str, filter: Filter) -> Vec<(i64, Vec<String>)> {
        top_n(conn, q, filter, 3)
    }

    fn top_n(conn: &Connection, q: &str, filter: Filter, limit: usize) -> Vec<(i64, Vec<String>)> {
        let p = SearchParams {
            query: q.into(),
            limit,
            filter,
            level: Scope::One(Layer::Raw),
            mode: Mode::Fts,
            ..Default::default()
        };
        search(conn, &Semantic::Off("test".into()), &p)
            .unwrap()
            .results
            .into_iter()
            .map(|h| (h.row, h.terms))
            .collect()
    }

    #[test]
    fn a_common_words_best_row_is_found_wherever_it_is_in_the_archive() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        // Without lists, only the newest matches are ranked: the oldest row is out of reach.
        let before = top(&conn, "deploy", Filter::default());
        assert_eq!(before.len(), 3);
        assert!(
            before.iter().all(|(row, _)| *row > 400 - CANDIDATES as i64),
            "{before:?}"
        );
        assert_eq!(behind(&conn, Layer::Raw).unwrap(), 400);

        let done = refresh(&mut conn).unwrap();
        // `deploy`, and the filler's words; never a stop word such as `the`.
        assert!(done.words >= 1 && done.updated == done.words, "{done:?}");
        assert_eq!(behind(&conn, Layer::Raw).unwrap(), 0);
        let List { docs, best, .. } = lookup(&conn, "messages_fts", "deploy").unwrap().unwrap();
        assert_eq!(docs, 400);
        assert_eq!(best.len(), KEPT);
        assert_eq!(
            best[0].0, 1,
            "the short row that says it three times is the best"
        );
        assert!(best.windows(2).all(|w| w[0].1 >= w[1].1), "best first");
        assert_eq!(lookup(&conn, "messages_fts", "the").unwrap(), None);
        assert_eq!(
            lookup(&conn, "messages_fts", "failed").unwrap(),
            None,
            "rare"
        );

        let after = top(&conn, "deploy", Filter::default());
        assert_eq!(after[0], (1, vec!["deploy".to_owned()]));
        // A refresh with nothing new changes nothing.
        let again = refresh(&mut conn).unwrap();
        assert_eq!(again.updated, 0);
        // The champions pass the filter like any match: row 1 is Claude's. With more than a
        // window of Codex's rows (so that the champions are read), none of Claude's comes back.
        for id in 401..=700 {
            message(
                &conn,
                id,
                2,
                &format!("a codex deploy of change {id} and more words"),
            );
        }
        refresh(&mut conn).unwrap();
        let codex = Filter {
            agent: Some("codex".into()),
            ..Filter::default()
        };
        let filtered = top(&conn, "deploy", codex);
        assert_eq!(filtered.len(), 3);
        assert!(
            filtered
                .iter()
                .all(|(row, _)| *row > 400 || (row % 2 == 1 && *row != 1)),
            "{filtered:?}"
        );
        assert_eq!(top(&conn, "deploy", Filter::default())[0].0, 1);
    }

    #[test]
    fn a_refresh_scores_only_the_new_rows_and_keeps_the_old_champions() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        refresh(&mut conn).unwrap();
        message(&conn, 401, 2, "deploy deploy deploy deploy");
        assert_eq!(behind(&conn, Layer::Raw).unwrap(), 1);
        let stop = AtomicBool::new(false);
        let made = compute(&conn, Layer::Raw, &stop).unwrap();
        assert_eq!(made.done_upto, Some(401));
        let lists = &made.lists;
        let deploy = lists.iter().find(|l| l.term == "deploy").unwrap();
        assert_eq!((deploy.docs, deploy.upto), (401, 401));
        let rows: Vec<i64> = deploy.best.iter().map(|b| b.0).collect();
        assert_eq!(
            &rows[..2],
            &[401, 1],
            "the new best first, the old best kept"
        );
        assert_eq!(rows.len(), KEPT);
        // A word the new row does not have is not scored again: its list stays as it is.
        assert!(lists.iter().all(|l| l.term == "deploy"), "{lists:?}");
        assert!(lookup(&conn, "messages_fts", "build").unwrap().is_some());

        // A row removed before the list is saved is not saved with it; the search skips one
        // removed after.
        conn.execute("DELETE FROM messages WHERE id = 401", [])
            .unwrap();
        conn.execute("DELETE FROM messages_fts WHERE rowid = 401", [])
            .unwrap();
        assert!(save(&mut conn, Layer::Raw, &made).unwrap());
        let best = lookup(&conn, "messages_fts", "deploy")
            .unwrap()
            .unwrap()
            .best;
        assert_eq!(best[0].0, 1);
        assert!(best.iter().all(|b| b.0 != 401));
        conn.execute("DELETE FROM messages WHERE id = 1", [])
            .unwrap();
        conn.execute("DELETE FROM messages_fts WHERE rowid = 1", [])
            .unwrap();
        let after = top(&conn, "deploy", Filter::default());
        assert_eq!(after.len(), 3);
        assert!(after.iter().all(|(row, _)| *row != 1), "{after:?}");
    }

    #[test]
    fn a_stop_flag_ends_a_refresh_early_with_nothing_half_made() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        let stop = AtomicBool::new(true);
        let made = compute(&conn, Layer::Raw, &stop).unwrap();
        assert!(made.words >= 1);
        assert!(made.lists.is_empty());
        // No mark: the refresh is still due.
        assert_eq!(made.done_upto, None);
        save(&mut conn, Layer::Raw, &made).unwrap();
        assert_eq!(behind(&conn, Layer::Raw).unwrap(), 400);
    }

    #[test]
    fn a_word_with_lists_ranks_its_rows_since_their_mark_its_rare_forms_and_its_champions() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        // An old row that has the word in a rare form only.
        message(&conn, 401, 1, "deploying deploying: deploying again");
        refresh(&mut conn).unwrap();
        let deploy = lookup(&conn, "messages_fts", "deploy").unwrap().unwrap();
        assert_eq!(deploy.upto, 401);
        assert_eq!(lookup(&conn, "messages_fts", "deploying").unwrap(), None);
        // More than a window of newer rows since the lists were made, the newest short.
        for id in 402..=760 {
            let text = format!("the staging cluster pulled the image before the deploy of {id}");
            message(&conn, id, 2, &text);
        }
        message(&conn, 761, 2, "deploy deploy deploy");
        let rows: Vec<i64> = top(&conn, "deploy", Filter::default())
            .into_iter()
            .map(|(row, _)| row)
            .collect();
        // The row since the mark, the champion, and the rare form's row, which neither the
        // newest window nor a list holds.
        assert_eq!(rows[0], 761, "{rows:?}");
        let mut best = rows.clone();
        best.sort_unstable();
        assert_eq!(best, vec![1, 401, 761], "{rows:?}");
    }

    #[test]
    fn more_results_than_a_list_holds_come_from_the_newest_matches_too() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        refresh(&mut conn).unwrap();
        let rows = top_n(&conn, "deploy", Filter::default(), 100);
        assert_eq!(rows.len(), 100);
        assert_eq!(rows[0].0, 1);
    }

    #[test]
    fn a_spellings_list_does_not_crowd_out_the_words_own_best_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        // `deployed` in more than 300 short rows: rarer than `deploy`, each of its rows outscores
        // the best `deploy` row in its own list.
        for id in 401..=710 {
            message(&conn, id, 2, "deployed it");
        }
        refresh(&mut conn).unwrap();
        let deployed = lookup(&conn, "messages_fts", "deployed").unwrap().unwrap();
        let deploy = lookup(&conn, "messages_fts", "deploy").unwrap().unwrap();
        assert!(deployed.best[KEPT - 1].1 > deploy.best[0].1);
        assert_eq!(top(&conn, "deploy", Filter::default())[0].0, 1);
    }

    #[test]
    fn a_row_indexed_again_in_place_is_ranked_and_scored_again() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        refresh(&mut conn).unwrap();
        // Row 200, long ago scored low, now says little else (as a rewritten message would).
        let text = "deploy deploy deploy";
        conn.execute("UPDATE messages SET text = ?1 WHERE id = 200", [text])
            .unwrap();
        conn.execute("DELETE FROM messages_fts WHERE rowid = 200", [])
            .unwrap();
        conn.execute(
            "INSERT INTO messages_fts (rowid, body) VALUES (200, ?1)",
            [text],
        )
        .unwrap();
        crate::store::fts::reindexed(&conn, "messages_fts", 200).unwrap();
        assert_eq!(mark(&conn, "messages_fts").unwrap(), Some(199));
        assert_eq!(top(&conn, "deploy", Filter::default())[0].0, 200);

        // A refresh that read before another such row does not move the mark past it.
        let stop = AtomicBool::new(false);
        let made = compute(&conn, Layer::Raw, &stop).unwrap();
        crate::store::fts::reindexed(&conn, "messages_fts", 100).unwrap();
        assert!(save(&mut conn, Layer::Raw, &made).unwrap());
        assert_eq!(mark(&conn, "messages_fts").unwrap(), Some(99));
        // The next one scores the row again and moves the mark on.
        let best = lookup(&conn, "messages_fts", "deploy")
            .unwrap()
            .unwrap()
            .best;
        assert_eq!(best[0].0, 200, "{best:?}");
        refresh(&mut conn).unwrap();
        assert_eq!(mark(&conn, "messages_fts").unwrap(), Some(400));
    }

    #[test]
    fn lists_read_before_a_forget_or_scrub_are_not_saved_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        let stop = AtomicBool::new(false);
        let made = compute(&conn, Layer::Raw, &stop).unwrap();
        assert!(!made.lists.is_empty());
        // What `memex forget` does at its end.
        conn.execute(
            "INSERT INTO fts_champions (fts, term, docs, upto, best) VALUES ('*', 'wipes', 1, 0, x'')",
            [],
        )
        .unwrap();
        assert!(!save(&mut conn, Layer::Raw, &made).unwrap());
        let n: i64 = conn
            .query_row("SELECT COUNT(*) FROM fts_champions", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 1, "the count of wipes only");
        assert_eq!(behind(&conn, Layer::Raw).unwrap(), 400, "still due");
    }

    #[test]
    fn a_refresh_is_due_once_enough_rows_came_in() {
        let dir = tempfile::tempdir().unwrap();
        let mut conn = archive(dir.path());
        assert!(
            !due(&conn, Layer::Raw).unwrap(),
            "400 rows are fewer than {REFRESH_AFTER}"
        );
        for id in 401..=500 {
            message(&conn, id, 1, "a later row");
        }
        assert!(due(&conn, Layer::Raw).unwrap());
        refresh(&mut conn).unwrap();
        assert!(!due(&conn, Layer::Raw).unwrap());
        assert_eq!(behind(&conn, Layer::Raw).unwrap(), 0);
        // A layer with no rows is never due.
        assert!(!due(&conn, Layer::Talks).unwrap());
    }

    #[test]
    fn a_list_round_trips_and_a_torn_blob_reads_as_its_whole_pairs() {
        let best = vec![(7_i64, 3.5_f32), (i64::MAX, -0.25)];
        assert_eq!(decode(&encode(&best)), best);
        let mut torn = encode(&best);
        torn.truncate(20);
        assert_eq!(decode(&torn), best[..1]);
    }
}
