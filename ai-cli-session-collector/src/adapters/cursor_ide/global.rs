//! The global database (`globalStorage/state.vscdb`, table `cursorDiskKV`): a census of the
//! conversation keys, then the composers whose rows changed, read with their bubbles.

use std::collections::{BTreeMap, HashMap, HashSet};

use rusqlite::params;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::talk::{Bubble, Origin, Talk, emit_talk};
use super::{
    BUBBLE_PREFIX, COMPOSER_PREFIX, KvRow, Out, State, digest64, kv_row, range_end, text_col,
};
use crate::adapter::{ParseError, parse_ts, str_of};
use crate::sqlite::Db;

/// A composer updated this long before the newest one is still read in full on every read.
const HOT_MS: i64 = 10 * 60 * 1000;
/// At most this many composers are read in full without a sign of change.
const HOT_MAX: usize = 8;

pub(super) fn read_global(
    db: &Db,
    st: &mut State,
    out: &mut Out,
    max_bytes: usize,
) -> Result<bool, ParseError> {
    if !db.has_table("cursorDiskKV") {
        out.emit.issue(
            0,
            "no cursorDiskKV table: not a Cursor global state database",
            false,
        );
        return Ok(true);
    }
    let census = census(db)?;
    st.rows.retain(|k, _| census.contains_key(k));
    st.convs.retain(|k, _| census.contains_key(k));
    let mut todo: Vec<String> = census
        .iter()
        .filter(|(k, fp)| st.rows.get(*k) != Some(*fp))
        .map(|(k, _)| k.clone())
        .collect();
    // The composers being written now: an `UPDATE` in place changes no row id.
    let dirty: HashSet<&String> = todo.iter().collect();
    let newest = st.convs.values().map(|c| c.u).max().unwrap_or(0);
    let mut hot: Vec<(&String, i64)> = st
        .convs
        .iter()
        .filter(|(k, c)| c.u > 0 && c.u.saturating_add(HOT_MS) >= newest && !dirty.contains(k))
        .map(|(k, c)| (k, c.u))
        .collect();
    hot.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    hot.truncate(HOT_MAX);
    let hot: Vec<String> = hot.into_iter().map(|(k, _)| k.clone()).collect();
    todo.extend(hot);
    for (done, cid) in todo.into_iter().enumerate() {
        if done > 0 && out.bytes >= max_bytes as u64 {
            return Ok(false);
        }
        read_composer(db, st, out, &cid)?;
        if let Some(fp) = census.get(&cid) {
            st.rows.insert(cid, *fp);
        }
    }
    Ok(true)
}

/// Keys read by one statement of the census. Cursor's database may be in rollback-journal
/// mode, where a reader's lock holds back the agent's next commit until the statement ends:
/// the census of a large database (300,000 bubbles, 1.3 GB: about 0.4 s in one statement) is
/// read in statements of this many keys, each a few milliseconds long.
const CENSUS_PAGE: i64 = 5_000;

/// Composer id → hash of the keys and row ids of its rows (read from the key index alone).
fn census(db: &Db) -> Result<BTreeMap<String, u64>, ParseError> {
    census_in_pages(db, CENSUS_PAGE)
}

pub(super) fn census_in_pages(
    db: &Db,
    page_keys: i64,
) -> Result<BTreeMap<String, u64>, ParseError> {
    let mut fps: BTreeMap<String, Sha256> = BTreeMap::new();
    // Each page starts just after the last key of the one before, as SQLite holds it: its bytes
    // (a key need not be valid UTF-8), bound as a blob and compared as text.
    let sql = "SELECT key, rowid FROM cursorDiskKV WHERE key > CAST(?1 AS TEXT) AND key < ?2 \
               ORDER BY key LIMIT ?3";
    let mut q = db.conn().prepare(sql).map_err(|e| db.error(e))?;
    for prefix in [COMPOSER_PREFIX, BUBBLE_PREFIX] {
        let end = range_end(prefix);
        let mut from: Vec<u8> = prefix.as_bytes().to_vec();
        let mut page = Vec::new();
        loop {
            let mut rows = q
                .query(params![from, end, page_keys.max(1)])
                .map_err(|e| db.error(e))?;
            while let Some(r) = rows.next().map_err(|e| db.error(e))? {
                let exact = match r.get_ref(0).map_err(|e| db.error(e))? {
                    rusqlite::types::ValueRef::Text(b) | rusqlite::types::ValueRef::Blob(b) => {
                        b.to_vec()
                    }
                    _ => continue,
                };
                page.push((text_col(r, 0), r.get::<_, i64>(1).unwrap_or(0), exact));
            }
            drop(rows);
            let full = page.len() as i64 >= page_keys.max(1);
            for (key, rowid, exact) in page.drain(..) {
                census_row(&mut fps, prefix, &key, rowid);
                from = exact;
            }
            if !full {
                break;
            }
        }
    }
    Ok(fps.into_iter().map(|(k, h)| (k, digest64(h))).collect())
}

/// Adds one key of the census to its composer's hash.
fn census_row(fps: &mut BTreeMap<String, Sha256>, prefix: &str, key: &str, rowid: i64) {
    let Some(rest) = key.strip_prefix(prefix) else {
        return;
    };
    if prefix == COMPOSER_PREFIX {
        let mut h = Sha256::new();
        h.update(rowid.to_le_bytes());
        fps.insert(rest.to_owned(), h);
    } else if let Some((cid, bid)) = rest.split_once(':')
        && let Some(h) = fps.get_mut(cid)
    {
        h.update((bid.len() as u64).to_le_bytes());
        h.update(bid.as_bytes());
        h.update(rowid.to_le_bytes());
    }
}

/// Reads one composer and its bubble rows, and emits what changed.
fn read_composer(db: &Db, st: &mut State, out: &mut Out, cid: &str) -> Result<(), ParseError> {
    let key = format!("{COMPOSER_PREFIX}{cid}");
    let mut q = db
        .conn()
        .prepare_cached("SELECT key, value, rowid FROM cursorDiskKV WHERE key = ?1")
        .map_err(|e| db.error(e))?;
    let mut rows = q.query([&key]).map_err(|e| db.error(e))?;
    let Some(r) = rows.next().map_err(|e| db.error(e))? else {
        return Ok(());
    };
    let comp = kv_row(r).map_err(|e| db.error(e))?;
    drop(rows);
    let lo = format!("{BUBBLE_PREFIX}{cid}:");
    let mut q = db
        .conn()
        .prepare_cached("SELECT key, value, rowid FROM cursorDiskKV WHERE key >= ?1 AND key < ?2")
        .map_err(|e| db.error(e))?;
    let mut rows = q
        .query(params![lo, range_end(&lo)])
        .map_err(|e| db.error(e))?;
    let mut bubbles: BTreeMap<String, KvRow> = BTreeMap::new();
    while let Some(r) = rows.next().map_err(|e| db.error(e))? {
        let b = kv_row(r).map_err(|e| db.error(e))?;
        out.bytes += b.len;
        out.rows += 1;
        if let Some(bid) = b.key.strip_prefix(&lo) {
            bubbles.insert(bid.to_owned(), b);
        }
    }
    out.bytes += comp.len;
    out.rows += 1;
    let c = match &comp.value {
        Some(Ok(v)) if v.is_object() => v,
        Some(_) => {
            // Kept as it is: a record that is not a composer object.
            let talk = Talk::bare(cid, "composer", comp.raw.clone(), comp.rowid as u64);
            emit_talk(
                st,
                out,
                talk,
                Some(format!("{key} is not a JSON object")),
                Origin::Global,
            );
            return Ok(());
        }
        // A NULL value: nothing to read.
        None => return Ok(()),
    };
    let talk = composer_talk(cid, c, comp.raw.clone(), comp.rowid as u64, None, bubbles);
    emit_talk(st, out, talk, None, Origin::Global);
    Ok(())
}

/// A composer (global row, or an element of a workspace's `allComposers`) as a conversation.
pub(super) fn composer_talk(
    cid: &str,
    c: &Value,
    meta_raw: Vec<u8>,
    meta_line: u64,
    project: Option<String>,
    mut rows: BTreeMap<String, KvRow>,
) -> Talk {
    let ws_path = c
        .get("workspaceIdentifier")
        .and_then(|w| w.get("uri"))
        .and_then(|u| str_of(u, "fsPath").or_else(|| str_of(u, "path")))
        .filter(|p| !p.is_empty())
        .map(str::to_owned);
    let mut talk = Talk {
        sid: cid.to_owned(),
        meta_id: "composer",
        meta_raw,
        meta_line,
        name: str_of(c, "name")
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned),
        created: c.get("createdAt").and_then(parse_ts),
        updated: c.get("lastUpdatedAt").and_then(parse_ts),
        project: ws_path.or(project),
        model: c
            .get("modelConfig")
            .and_then(|m| str_of(m, "modelName"))
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        tools: capability_tools(c),
        bubbles: Vec::new(),
    };
    let from_row = |row: KvRow| Bubble {
        id: String::new(),
        v: row.value.and_then(Result::ok),
        raw: row.raw,
        line: row.rowid as u64,
        rendered: true,
    };
    let inline = c
        .get("conversation")
        .and_then(Value::as_array)
        .filter(|a| !a.is_empty());
    if let Some(conv) = inline {
        for (i, el) in conv.iter().enumerate() {
            let id = str_of(el, "bubbleId")
                .filter(|s| !s.is_empty())
                .map_or_else(|| format!("#{i}"), str::to_owned);
            let b = match rows.remove(&id) {
                Some(row) => from_row(row),
                None => Bubble {
                    id: String::new(),
                    v: Some(el.clone()),
                    raw: serde_json::to_vec(el).unwrap_or_default(),
                    line: 0,
                    rendered: true,
                },
            };
            talk.bubbles.push(Bubble { id, ..b });
        }
    } else if let Some(headers) = c
        .get("fullConversationHeadersOnly")
        .and_then(Value::as_array)
    {
        // Older composers have no `grouping` at all: then every bubble is shown.
        let grouped = headers.iter().any(|h| h.get("grouping").is_some());
        for h in headers {
            let Some(id) = str_of(h, "bubbleId") else {
                continue;
            };
            // A header whose row is not written yet: read when it is.
            let Some(row) = rows.remove(id) else {
                continue;
            };
            let rendered = !grouped
                || h.get("grouping")
                    .and_then(|g| g.get("isRenderable"))
                    .and_then(Value::as_bool)
                    == Some(true);
            talk.bubbles.push(Bubble {
                id: id.to_owned(),
                rendered,
                ..from_row(row)
            });
        }
    } else {
        // No header list: the rows, in key order.
        for (id, row) in rows {
            talk.bubbles.push(Bubble {
                id,
                ..from_row(row)
            });
        }
    }
    talk
}

/// V1 tool data: `capabilities[].data.bubbleDataMap` (an object or a JSON string), by bubble id.
fn capability_tools(c: &Value) -> HashMap<String, Value> {
    let mut tools = HashMap::new();
    for cap in c
        .get("capabilities")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(map) = cap.get("data").and_then(|d| d.get("bubbleDataMap")) else {
            continue;
        };
        let parsed;
        let map = match map {
            Value::String(s) => {
                parsed = serde_json::from_str::<Value>(s).unwrap_or(Value::Null);
                &parsed
            }
            other => other,
        };
        if let Some(o) = map.as_object() {
            for (k, v) in o {
                tools.insert(k.clone(), v.clone());
            }
        }
    }
    tools
}
