//! `memex_hits(fts)`: an FTS5 auxiliary function that tells, for the row a full-text query is
//! on, how long the row is in tokens and how often each phrase of the query occurs in it. FTS5
//! has decoded those positions already to find the row, so a search can rank its candidates
//! with BM25 without reading (and decompressing) their texts; FTS5's own `bm25()` cannot serve,
//! as it first counts every match of every phrase in the whole index.
//!
//! The value is a blob of little-endian `u32`: the row's token count, then one count per
//! phrase in the order the phrases appear in the MATCH expression ([`decode`]); NULL when FTS5
//! could not tell (the caller then reads the row's text).

use std::os::raw::{c_int, c_void};
use std::ptr;

use rusqlite::{Connection, OptionalExtension, ffi};

/// The SQL name of the function.
pub const NAME: &str = "memex_hits";

/// Registers [`NAME`] on `conn`'s FTS5 module.
pub fn register(conn: &Connection) -> rusqlite::Result<()> {
    let fail = |rc: c_int, what: &str| {
        rusqlite::Error::SqliteFailure(ffi::Error::new(rc), Some(format!("{NAME}: {what}")))
    };
    // SAFETY: `conn.handle()` is the open connection this function borrows, used only on this
    // thread while the borrow lasts. The statement is prepared, bound, stepped and finalized
    // here; the pointer bound to it (`api`, a local that outlives the statement) is written by
    // FTS5 during the step, as its documented way of handing out its `fts5_api`. That API is
    // owned by the connection and lives as long as it; the function registered with it is a
    // plain `extern "C"` function without user data or destructor.
    unsafe {
        let db = conn.handle();
        let mut stmt = ptr::null_mut();
        let rc = ffi::sqlite3_prepare_v2(
            db,
            c"SELECT fts5(?1)".as_ptr(),
            -1,
            &mut stmt,
            ptr::null_mut(),
        );
        if rc != ffi::SQLITE_OK {
            return Err(fail(rc, "this SQLite has no FTS5"));
        }
        let mut api: *mut ffi::fts5_api = ptr::null_mut();
        ffi::sqlite3_bind_pointer(
            stmt,
            1,
            (&raw mut api).cast::<c_void>(),
            c"fts5_api_ptr".as_ptr(),
            None,
        );
        ffi::sqlite3_step(stmt);
        ffi::sqlite3_finalize(stmt);
        if api.is_null() || (*api).iVersion < 2 {
            return Err(fail(ffi::SQLITE_ERROR, "no FTS5 API of version 2 or later"));
        }
        let Some(create) = (*api).xCreateFunction else {
            return Err(fail(ffi::SQLITE_ERROR, "FTS5 cannot create functions"));
        };
        let rc = create(
            api,
            c"memex_hits".as_ptr(),
            ptr::null_mut(),
            Some(hits),
            None,
        );
        if rc != ffi::SQLITE_OK {
            return Err(fail(rc, "FTS5 refused the function"));
        }
    }
    Ok(())
}

/// The function FTS5 calls for each row of a query that selects `memex_hits(fts)`.
unsafe extern "C" fn hits(
    api: *const ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
    ctx: *mut ffi::sqlite3_context,
    _argc: c_int,
    _argv: *mut *mut ffi::sqlite3_value,
) {
    // SAFETY: FTS5 calls an auxiliary function with its extension API and the context of the
    // row being returned, both valid for the duration of the call.
    let out = unsafe { counts(&*api, fts) };
    match out {
        // SAFETY: `ctx` is this call's result context; SQLITE_TRANSIENT makes SQLite copy the
        // bytes before `out` is dropped.
        Ok(out) => unsafe {
            ffi::sqlite3_result_blob(
                ctx,
                out.as_ptr().cast::<c_void>(),
                out.len() as c_int,
                ffi::SQLITE_TRANSIENT(),
            )
        },
        // SAFETY: as above.
        Err(ffi::SQLITE_NOMEM) => unsafe { ffi::sqlite3_result_error_nomem(ctx) },
        // Counts it could not read: NULL, and the search reads the row's text instead.
        // SAFETY: as above.
        Err(_) => unsafe { ffi::sqlite3_result_null(ctx) },
    }
}

/// The row's token count and each phrase's occurrences, encoded for [`decode`].
///
/// # Safety
/// `api` and `fts` are what FTS5 passed to the auxiliary function now running.
unsafe fn counts(
    api: &ffi::Fts5ExtensionApi,
    fts: *mut ffi::Fts5Context,
) -> Result<Vec<u8>, c_int> {
    let missing = ffi::SQLITE_MISUSE;
    let (Some(phrases), Some(size), Some(first), Some(next)) = (
        api.xPhraseCount,
        api.xColumnSize,
        api.xPhraseFirst,
        api.xPhraseNext,
    ) else {
        return Err(missing);
    };
    // SAFETY: the API's own functions (here and in the calls below), called with the context
    // FTS5 gave this call, and out-pointers to locals.
    let n = unsafe { phrases(fts) }.max(0);
    let mut out = Vec::with_capacity(4 * (n as usize + 1));
    let mut tokens: c_int = 0;
    // SAFETY: as above.
    let rc = unsafe { size(fts, -1, &mut tokens) };
    if rc != ffi::SQLITE_OK {
        return Err(rc);
    }
    out.extend_from_slice(&(tokens.max(0) as u32).to_le_bytes());
    for phrase in 0..n {
        let mut iter = ffi::Fts5PhraseIter {
            a: ptr::null(),
            b: ptr::null(),
        };
        let (mut col, mut off) = (0, 0);
        // SAFETY: as above; `iter` is a local the API fills and then advances.
        let rc = unsafe { first(fts, phrase, &mut iter, &mut col, &mut off) };
        if rc != ffi::SQLITE_OK {
            return Err(rc);
        }
        let mut seen: u32 = 0;
        while col >= 0 {
            seen = seen.saturating_add(1);
            // SAFETY: as above, with the `iter` that `first` filled.
            unsafe { next(fts, &mut iter, &mut col, &mut off) };
        }
        out.extend_from_slice(&seen.to_le_bytes());
    }
    Ok(out)
}

/// What [`NAME`] returned: the row's token count and each phrase's occurrences; `None` for a
/// value it did not write.
pub fn decode(blob: &[u8]) -> Option<(u32, Vec<u32>)> {
    if blob.len() < 4 || !blob.len().is_multiple_of(4) {
        return None;
    }
    let mut words = blob
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    let tokens = words.next()?;
    Some((tokens, words.collect()))
}

/// The SQLite variable-length integer at the start of `b` and its length in bytes (the
/// encoding FTS5 stores its sizes and totals in).
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &byte) in b.iter().enumerate().take(9) {
        if i == 8 {
            return Some(((v << 8) | u64::from(byte), 9));
        }
        v = (v << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// The rows of full-text index `fts` and their average length in tokens, from the totals FTS5
/// keeps (the averages record of its `_data` table); `None` for an index with no row. A
/// contentless index keeps a deleted row in its totals (it cannot count a text it does not
/// hold), so after deletes these are an estimate: good enough for BM25's inverse document
/// frequencies and average length.
pub fn totals(conn: &Connection, fts: &str) -> rusqlite::Result<Option<(u64, f64)>> {
    let block: Option<Vec<u8>> = conn
        .prepare_cached(&format!("SELECT block FROM {fts}_data WHERE id = 1"))?
        .query_row([], |r| r.get(0))
        .optional()?;
    let Some(block) = block else {
        return Ok(None);
    };
    let Some((rows, used)) = varint(&block) else {
        return Ok(None);
    };
    // One column: one total after the row count.
    let tokens = varint(&block[used..]).map_or(0, |(t, _)| t);
    Ok((rows > 0).then(|| (rows, tokens as f64 / rows as f64)))
}

/// Row `id`'s length in tokens in full-text index `fts` (its `_docsize` record), if indexed.
pub fn row_tokens(conn: &Connection, fts: &str, id: i64) -> rusqlite::Result<Option<u32>> {
    let sz: Option<Vec<u8>> = conn
        .prepare_cached(&format!("SELECT sz FROM {fts}_docsize WHERE id = ?1"))?
        .query_row([id], |r| r.get(0))
        .optional()?;
    Ok(sz
        .and_then(|b| varint(&b))
        .map(|(n, _)| n.min(u64::from(u32::MAX)) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        register(&conn).unwrap();
        conn.execute_batch(
            "CREATE VIRTUAL TABLE t USING fts5(body, content = '', contentless_delete = 1,
                                             tokenize = 'unicode61 remove_diacritics 2');
             INSERT INTO t(rowid, body) VALUES
                (1, 'the cache was stale, so the cache was flushed'),
                (2, 'a webhook signature check; the Webhook failed'),
                (3, 'nothing to see here at all');",
        )
        .unwrap();
        conn
    }

    #[test]
    fn each_phrase_is_counted_in_the_row_with_its_length() {
        let conn = archive();
        let mut st = conn
            .prepare("SELECT rowid, memex_hits(t) FROM t WHERE t MATCH ?1 ORDER BY rowid")
            .unwrap();
        let rows: Vec<(i64, (u32, Vec<u32>))> = st
            .query_map(["(\"cache\" OR \"webhook\") OR \"signature check\""], |r| {
                Ok((r.get(0)?, decode(&r.get::<_, Vec<u8>>(1)?).unwrap()))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(
            rows,
            vec![(1, (9, vec![2, 0, 0])), (2, (7, vec![0, 2, 1]))],
            "token counts and per-phrase occurrences, case folded"
        );
    }

    #[test]
    fn totals_and_row_lengths_come_from_the_index() {
        let conn = archive();
        let (rows, avg) = totals(&conn, "t").unwrap().unwrap();
        assert_eq!(rows, 3);
        assert!((avg - (9.0 + 7.0 + 6.0) / 3.0).abs() < 1e-9, "{avg}");
        assert_eq!(row_tokens(&conn, "t", 2).unwrap(), Some(7));
        assert_eq!(row_tokens(&conn, "t", 4).unwrap(), None);
        // A contentless index does not take a deleted row out of its totals (its text is not
        // there to count): they stay an estimate, never nothing.
        conn.execute("DELETE FROM t WHERE rowid = 1", []).unwrap();
        assert_eq!(totals(&conn, "t").unwrap().unwrap().0, 3);
        assert_eq!(row_tokens(&conn, "t", 1).unwrap(), None);
        let empty = Connection::open_in_memory().unwrap();
        empty
            .execute_batch("CREATE VIRTUAL TABLE e USING fts5(body, content = '')")
            .unwrap();
        assert_eq!(totals(&empty, "e").unwrap(), None);
    }

    #[test]
    fn a_value_it_did_not_write_is_refused() {
        assert_eq!(decode(&[1, 0, 0]), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&[3, 0, 0, 0]), Some((3, vec![])));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0x80]), None);
    }
}
