//! Cursor IDE (the VS Code fork): Composer / Agent / Ask conversations and the old chat panel,
//! kept in SQLite key-value tables the IDE rewrites while it runs. FORMATS-MORE §2 and §15.
//!
//! **Where.** `<user-data>/User`, with `<user-data>` = `$XDG_CONFIG_HOME/Cursor` (default
//! `~/.config/Cursor`) on Linux, `~/Library/Application Support/Cursor` on macOS and
//! `%APPDATA%\Cursor` on Windows. Two kinds of database, both [`SourceKind::Database`]:
//! * `globalStorage/state.vscdb`, table `cursorDiskKV`: `composerData:<composerId>` (one
//!   conversation: name, `_v`, `createdAt`/`lastUpdatedAt`, the ordered
//!   `fullConversationHeadersOnly`, `capabilities`, `modelConfig`, `workspaceIdentifier`) and
//!   `bubbleId:<composerId>:<bubbleId>` (one message). A composer of Cursor 2 may hold its
//!   bubbles inline in `conversation[]`; a bubble row of the same id then wins (it is fuller).
//! * `workspaceStorage/<wsId>/state.vscdb`, table `ItemTable`, with `workspace.json` (the
//!   project folder as a `file://` / `vscode-remote://` URI): `composer.composerData` (Cursor 2:
//!   `allComposers`, Cursor 3: `selectedComposerIds`) and the `workbench.panel.
//!   composerChatViewPane*` keys map composers to the workspace (a [`SessionInfo`] with the
//!   project, no messages: the messages come from the global database). The 2024 layout kept
//!   whole conversations there instead: `allComposers[].conversation[]` inline, and the old chat
//!   panel `workbench.panel.aichat.view.aichat.chatdata` (`tabs[].bubbles[]`, `type`
//!   `user`/`ai`), one session per tab.
//!
//! **Only conversation keys are ever selected** — by exact key or key range
//! (`composerData:`…, `bubbleId:`…): the same databases hold `cursorAuth/*` tokens and API keys
//! (FORMATS-MORE §2, §15). `checkpointId:*`, `messageRequestContext:*`, `codeBlockDiff:*` and
//! `composer.composerHeaders` are not read; neither is `aiService.prompts`, the input box's
//! recall list: every entry is a prompt of a conversation read here, and would count twice.
//!
//! **Messages.** Session id = `composerId` (or the chat tab's `tabId`). Bubbles in header order;
//! a header without `grouping.isRenderable` is not shown by Cursor, so its bubble is kept as a
//! `Meta` record only (when no header of the composer has `grouping` at all — older
//! composers — every bubble is shown). Message ids: `<bubbleId>` for the bubble itself (prompt,
//! answer or tool call; it carries the row), `<bubbleId>#thinking`, `<bubbleId>#text` (text of
//! a tool bubble) and `<bubbleId>#result`; the composer row itself is the `Meta` message
//! `composer` (`tab` for a chat tab). A prompt is a user bubble (type 1 / `user`) with non-empty
//! text; an empty one (the chat panel's unsent input) is `Meta`.
//!
//! **Tools.** Call and result are one object (`toolFormerData` on the bubble with `_v` ≥ 3,
//! else `capabilities[].data.bubbleDataMap[bubbleId]`, which may be a JSON string): a `ToolCall`
//! and a `ToolResult` sharing the call id (`toolCallId`, else the bubble id), so nothing is
//! paired by order. `status` `error`/`cancelled` and `tool == 0` are failures; a command that
//! exits non-zero with `status: completed` is not a failed tool call.
//!
//! **Time.** Per-bubble times are unreliable or absent (§2 traps): a bubble's own time is its
//! `createdAt`, else the first absolute (≥ year 2000) `timingInfo` field — floats, some of them
//! relative (specstoryai/getspecstory `cursoride/agent_session.go`). Order follows the header
//! list, so times are made non-decreasing along it and a bubble without one takes the previous
//! one (the composer's `createdAt` before the first).
//!
//! **Incremental.** Rows are rewritten in place (the tables are `UNIQUE ON CONFLICT REPLACE`: a
//! rewrite is a delete and an insert with a new row id). Every read takes a census of the
//! conversation keys with their row ids (an index-only scan, no values), and reads again, in
//! full, the composers whose keys or row ids changed, plus the few updated within ten minutes of
//! the newest (an `UPDATE` in place keeps the row id; one of an idle composer that changes no
//! row id is seen at its next rewrite). Of a composer read again, only the records whose
//! messages changed are emitted, with the same message ids (the cursor keeps a hash per record,
//! up to 10 000 of the most recently changed conversations: an older one is emitted whole when it
//! changes; the store upserts); bubbles that left the header list are deactivated. A workspace
//! database keeps a hash per key read. One read stops after about `max_bytes` of values, at a
//! composer's (key's) end; a single composer is never split.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use rusqlite::params;
use rusqlite::types::ValueRef;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, SourceKind, blank, parse_ts, str_of, u64_of,
};
use crate::model::{
    Cursor, Edit, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
    ToolCall, ToolResult, Usage,
};
use crate::sqlite::{Db, row_json};
use crate::text;

const AGENT: &str = "cursor-ide";
const DB_NAME: &str = "state.vscdb";
const COMPOSER_PREFIX: &str = "composerData:";
const BUBBLE_PREFIX: &str = "bubbleId:";
const WS_COMPOSERS: &str = "composer.composerData";
const WS_CHAT: &str = "workbench.panel.aichat.view.aichat.chatdata";
const WS_PANE: &str = "workbench.panel.composerChatViewPane";
const PANE_VIEW: &str = "workbench.panel.aichat.view.";
/// A composer updated this long before the newest one is still read in full on every read.
const HOT_MS: i64 = 10 * 60 * 1000;
/// At most this many composers are read in full without a sign of change.
const HOT_MAX: usize = 8;
/// Record hashes the cursor keeps at most (of the most recently changed conversations; the
/// last changed one is always kept whole).
const RECORD_BUDGET: usize = 10_000;
/// Epoch ms of 2000-01-01: smaller `timingInfo` values are relative.
const ABSOLUTE_MS: f64 = 946_684_800_000.0;

pub struct CursorIdeAdapter;

impl ConversationAdapter for CursorIdeAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let config = env
            .var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join(".config"));
        let appdata = env
            .var("APPDATA")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join("AppData").join("Roaming"));
        let mut roots = vec![
            config.join("Cursor").join("User"),
            env.home
                .join("Library")
                .join("Application Support")
                .join("Cursor")
                .join("User"),
            appdata.join("Cursor").join("User"),
        ];
        roots.dedup();
        roots
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        path.starts_with(root) && db_kind(path).is_some()
    }

    fn source_kind(&self, _path: &Path) -> SourceKind {
        SourceKind::Database
    }

    /// The global database first, then every workspace's: nothing else under `User/` (file
    /// history, extension state) is walked.
    fn discover(&self, root: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let global = root.join("globalStorage").join(DB_NAME);
        if global.is_file() {
            out.push(global);
        }
        let mut ws: Vec<PathBuf> = std::fs::read_dir(root.join("workspaceStorage"))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path().join(DB_NAME))
            .filter(|p| p.is_file())
            .collect();
        ws.sort();
        out.extend(ws);
        out
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let Some(kind) = db_kind(path) else {
            return Ok(ParseOutput {
                cursor: cursor.clone(),
                at_end: true,
                ..Default::default()
            });
        };
        let mut st: State = serde_json::from_value(cursor.state.clone()).unwrap_or_default();
        let mut out = Out::default();
        let at_end = {
            let db = Db::open(path)?;
            match kind {
                DbKind::Global => read_global(&db, &mut st, &mut out, max_bytes)?,
                DbKind::Workspace => read_workspace(&db, path, &mut st, &mut out, max_bytes)?,
            }
        };
        st.bound();
        let mut res = out.emit.out;
        res.sessions = out.sessions;
        res.bytes = out.bytes;
        res.at_end = at_end;
        res.cursor = Cursor {
            offset: cursor.offset + out.rows,
            line: 0,
            head: None,
            state: serde_json::to_value(&st).unwrap_or_default(),
            unterminated: false,
        };
        Ok(res)
    }
}

#[derive(Clone, Copy)]
enum DbKind {
    Global,
    Workspace,
}

/// `…/globalStorage/state.vscdb` or `…/workspaceStorage/<wsId>/state.vscdb`.
fn db_kind(path: &Path) -> Option<DbKind> {
    if path.file_name()? != DB_NAME {
        return None;
    }
    let parent = path.parent()?;
    if parent.file_name()? == "globalStorage" {
        return Some(DbKind::Global);
    }
    (parent.parent()?.file_name()? == "workspaceStorage").then_some(DbKind::Workspace)
}

/// What one read produced.
#[derive(Default)]
struct Out {
    emit: Emit,
    sessions: Vec<SessionInfo>,
    /// Bytes of values read.
    bytes: u64,
    /// Rows read.
    rows: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    /// Global database: a hash of each composer's keys and row ids at its last read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    rows: BTreeMap<String, u64>,
    /// Workspace database: a hash of each `ItemTable` value read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    items: BTreeMap<String, u64>,
    /// Workspace database: the project folder its `workspace.json` named at the last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    project: Option<String>,
    /// What was emitted of the conversations that changed last (session id → record hashes):
    /// a conversation not here is emitted whole when it is read.
    #[serde(default)]
    convs: BTreeMap<String, ConvState>,
    /// Counts the conversations that changed, to know which changed last.
    #[serde(default)]
    clock: u64,
}

#[derive(Default, Serialize, Deserialize)]
struct ConvState {
    /// The `clock` when it last changed.
    #[serde(default)]
    t: u64,
    /// Its last update time (epoch ms), to tell the active composers.
    #[serde(default)]
    u: i64,
    /// Hash of the session info last emitted.
    #[serde(default)]
    info: u64,
    /// Record id → hash of the messages it produced.
    #[serde(default)]
    recs: BTreeMap<String, u64>,
}

impl State {
    /// Keeps the cursor small: the conversations that changed last, up to [`RECORD_BUDGET`]
    /// record hashes; the others are forgotten (emitted whole when they are read again).
    fn bound(&mut self) {
        let total: usize = self.convs.values().map(|c| c.recs.len()).sum();
        if total <= RECORD_BUDGET {
            return;
        }
        let mut by_age: Vec<(u64, usize)> =
            self.convs.values().map(|c| (c.t, c.recs.len())).collect();
        by_age.sort_unstable_by_key(|a| std::cmp::Reverse(a.0));
        let mut kept = 0usize;
        let mut cut = u64::MAX;
        for (i, (t, n)) in by_age.into_iter().enumerate() {
            if i > 0 && kept + n > RECORD_BUDGET {
                break;
            }
            kept += n;
            cut = t;
        }
        self.convs.retain(|_, c| c.t >= cut);
    }
}

// ---- hashing ----

fn digest64(h: Sha256) -> u64 {
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_be_bytes(b)
}

fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h = Sha256::new();
    h.update(bytes);
    digest64(h)
}

/// What a record produced, raw bytes included.
fn fingerprint(msgs: &[ParsedMessage]) -> u64 {
    let mut h = Sha256::new();
    h.update(serde_json::to_vec(msgs).unwrap_or_default());
    for m in msgs {
        if let Some(r) = &m.raw {
            h.update((r.len() as u64).to_le_bytes());
            h.update(r);
        }
    }
    digest64(h)
}

// ---- SQL helpers ----

/// The first key after every key starting with `prefix` (whose last byte is ASCII).
fn range_end(prefix: &str) -> String {
    let mut b = prefix.as_bytes().to_vec();
    if let Some(last) = b.last_mut() {
        *last += 1;
    }
    String::from_utf8_lossy(&b).into_owned()
}

fn text_col(r: &rusqlite::Row<'_>, i: usize) -> String {
    match r.get_ref(i) {
        Ok(ValueRef::Text(t) | ValueRef::Blob(t)) => String::from_utf8_lossy(t).into_owned(),
        _ => String::new(),
    }
}

/// A `key, value[, rowid]` row: its record (key and value only), its row id, the value's size.
struct KvRow {
    key: String,
    raw: Vec<u8>,
    value: Option<Result<Value, ()>>,
    rowid: i64,
    len: u64,
}

fn kv_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<KvRow> {
    let mut rec = row_json(r);
    let rowid = rec
        .as_object_mut()
        .and_then(|o| o.remove("rowid"))
        .and_then(|v| v.as_i64())
        .unwrap_or(0);
    let (value, len) = match rec.get("value") {
        Some(Value::String(s)) => (
            Some(serde_json::from_str::<Value>(s).map_err(|_| ())),
            s.len() as u64,
        ),
        _ => (None, 0),
    };
    Ok(KvRow {
        key: text_col(r, 0),
        raw: serde_json::to_vec(&rec).unwrap_or_default(),
        value,
        rowid,
        len,
    })
}

// ---- the global database ----

fn read_global(
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

fn census_in_pages(db: &Db, page_keys: i64) -> Result<BTreeMap<String, u64>, ParseError> {
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
            emit_talk(st, out, talk, Some(format!("{key} is not a JSON object")));
            return Ok(());
        }
        // A NULL value: nothing to read.
        None => return Ok(()),
    };
    let talk = composer_talk(cid, c, comp.raw.clone(), comp.rowid as u64, None, bubbles);
    emit_talk(st, out, talk, None);
    Ok(())
}

/// A composer (global row, or an element of a workspace's `allComposers`) as a conversation.
fn composer_talk(
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

// ---- one conversation ----

/// A conversation as read, whatever database and layout it came from.
struct Talk {
    sid: String,
    /// Message id of the conversation's own record.
    meta_id: &'static str,
    meta_raw: Vec<u8>,
    meta_line: u64,
    name: Option<String>,
    created: Option<i64>,
    updated: Option<i64>,
    project: Option<String>,
    model: Option<String>,
    /// V1 tool payloads by bubble id.
    tools: HashMap<String, Value>,
    bubbles: Vec<Bubble>,
}

impl Talk {
    /// A conversation record that could not be read: kept, nothing else.
    fn bare(sid: &str, meta_id: &'static str, raw: Vec<u8>, line: u64) -> Talk {
        Talk {
            sid: sid.to_owned(),
            meta_id,
            meta_raw: raw,
            meta_line: line,
            name: None,
            created: None,
            updated: None,
            project: None,
            model: None,
            tools: HashMap::new(),
            bubbles: Vec::new(),
        }
    }
}

struct Bubble {
    id: String,
    /// `None`: the row is not JSON.
    v: Option<Value>,
    /// The record: the row (`key`, `value`) or the inline element.
    raw: Vec<u8>,
    /// Row id (0 for an inline element), for issues.
    line: u64,
    rendered: bool,
}

/// What the bubbles of a conversation add up to while they are turned into messages.
#[derive(Default)]
struct Walk {
    prompt: u32,
    first_prompt: Option<String>,
    last_model: Option<String>,
}

/// One record's id, its messages, and (row id, reason) when part of it could not be used.
type Record = (String, Vec<ParsedMessage>, Option<(u64, String)>);

/// Turns a conversation into messages and emits the records whose messages changed since the
/// cursor's last read, the session info when it changed, and deactivates vanished bubbles.
fn emit_talk(st: &mut State, out: &mut Out, t: Talk, meta_issue: Option<String>) {
    let mut groups: Vec<Record> = Vec::new();
    let mut meta = blank(
        AGENT,
        &t.sid,
        t.meta_id.to_owned(),
        Role::System,
        MessageKind::Meta,
    );
    meta.text = t.name.clone().unwrap_or_default();
    meta.timestamp = t.created;
    meta.cwd.clone_from(&t.project);
    meta.raw = Some(t.meta_raw.clone());
    groups.push((
        t.meta_id.to_owned(),
        vec![meta],
        meta_issue.map(|r| (t.meta_line, r)),
    ));
    let mut walk = Walk::default();
    let mut last_ts = t.created;
    let mut first_ts = None;
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, b) in t.bubbles.iter().enumerate() {
        if !seen.insert(b.id.as_str()) {
            continue;
        }
        let own = b.v.as_ref().and_then(bubble_time);
        let ts = match (own, last_ts) {
            (Some(o), Some(l)) => Some(o.max(l)),
            (o, l) => o.or(l),
        };
        last_ts = ts;
        first_ts = first_ts.or(ts);
        let base = (i as u64 + 1) << 10;
        let (msgs, issue) = bubble_messages(&t, b, ts, base, &mut walk);
        groups.push((b.id.clone(), msgs, issue.map(|r| (b.line, r))));
    }

    st.clock += 1;
    let clock = st.clock;
    let conv = st.convs.remove(&t.sid);
    let known = conv.as_ref().map(|c| &c.recs);
    let mut recs = BTreeMap::new();
    let mut changed = false;
    for (id, msgs, issue) in groups {
        let fp = fingerprint(&msgs);
        let same = known.and_then(|k| k.get(&id)) == Some(&fp);
        recs.insert(id, fp);
        if same {
            continue;
        }
        changed = true;
        if let Some((line, reason)) = issue {
            out.emit.issue(line, reason, true);
        }
        for m in msgs {
            out.emit.push(m);
        }
    }
    if let Some(known) = known {
        let gone: Vec<String> = known
            .keys()
            .filter(|k| !recs.contains_key(*k))
            .flat_map(|k| {
                if k == t.meta_id {
                    vec![k.clone()]
                } else {
                    ["", "#thinking", "#text", "#result"]
                        .iter()
                        .map(|s| format!("{k}{s}"))
                        .collect()
                }
            })
            .collect();
        if !gone.is_empty() {
            changed = true;
            out.emit.out.edits.push(Edit::Deactivate {
                session_id: t.sid.clone(),
                message_ids: gone,
            });
        }
    }

    let title = match (&t.name, &walk.first_prompt) {
        (Some(n), _) => Some((TitleSource::Generated, text::truncate_chars(n, 200))),
        (None, Some(p)) => Some((TitleSource::FirstPrompt, text::prompt_title(p))),
        (None, None) => None,
    };
    let info = SessionInfo {
        session_id: t.sid.clone(),
        project_path: t.project.clone(),
        model: t.model.clone().or(walk.last_model),
        title,
        started_at: t.created.or(first_ts),
        updated_at: t.updated.or(last_ts),
        ..Default::default()
    };
    let ih = hash_bytes(&serde_json::to_vec(&info).unwrap_or_default());
    let mut when = conv.as_ref().map_or(clock, |c| c.t);
    if changed || conv.as_ref().is_none_or(|c| c.info != ih) {
        when = clock;
        out.sessions.push(info);
    }
    st.convs.insert(
        t.sid.clone(),
        ConvState {
            t: when,
            u: t.updated.or(last_ts).unwrap_or(0),
            info: ih,
            recs,
        },
    );
}

/// A bubble's own time: `createdAt`, else the first absolute `timingInfo` field.
fn bubble_time(v: &Value) -> Option<i64> {
    if let Some(t) = v.get("createdAt").and_then(parse_ts) {
        return Some(t);
    }
    let ti = v.get("timingInfo")?;
    [
        "clientStartTime",
        "clientRpcSendTime",
        "clientSettleTime",
        "clientEndTime",
    ]
    .iter()
    .filter_map(|k| ti.get(*k).and_then(Value::as_f64))
    .find(|t| *t >= ABSOLUTE_MS)
    .map(|t| t as i64)
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Speaker {
    User,
    Assistant,
    Other,
}

fn speaker(v: &Value) -> Speaker {
    match v.get("type") {
        Some(Value::Number(n)) if n.as_i64() == Some(1) => Speaker::User,
        Some(Value::Number(n)) if n.as_i64() == Some(2) => Speaker::Assistant,
        Some(Value::String(s)) if s == "user" => Speaker::User,
        Some(Value::String(s)) if s == "ai" || s == "assistant" => Speaker::Assistant,
        _ => Speaker::Other,
    }
}

fn nonempty(v: &Value, key: &str) -> Option<String> {
    str_of(v, key)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_owned)
}

/// The messages of one bubble, and why part of it could not be used.
fn bubble_messages(
    t: &Talk,
    b: &Bubble,
    ts: Option<i64>,
    base: u64,
    walk: &mut Walk,
) -> (Vec<ParsedMessage>, Option<String>) {
    let new = |id: String, role: Role, kind: MessageKind, sub: u64| {
        let mut m = blank(AGENT, &t.sid, id, role, kind);
        m.timestamp = ts;
        m.cwd.clone_from(&t.project);
        m.seq = base | sub;
        m
    };
    let Some(v) = &b.v else {
        let mut m = new(b.id.clone(), Role::System, MessageKind::Meta, 1);
        m.prompt_number = walk.prompt;
        m.raw = Some(b.raw.clone());
        return (vec![m], Some(format!("bubble {} is not JSON", b.id)));
    };
    let who = speaker(v);
    let role = match who {
        Speaker::User => Role::User,
        Speaker::Assistant => Role::Assistant,
        Speaker::Other => Role::System,
    };
    let text = nonempty(v, "text")
        .or_else(|| nonempty(v, "rawText"))
        .unwrap_or_default();
    if !b.rendered {
        // Not shown by Cursor: kept as a record, not as conversation.
        let mut m = new(b.id.clone(), role, MessageKind::Meta, 1);
        m.prompt_number = walk.prompt;
        m.raw = Some(b.raw.clone());
        return (vec![m], None);
    }
    let mut msgs = Vec::new();
    match who {
        Speaker::User => {
            let kind = if text.trim().is_empty() {
                MessageKind::Meta
            } else {
                walk.prompt += 1;
                walk.first_prompt.get_or_insert_with(|| text.clone());
                MessageKind::UserPrompt
            };
            let mut m = new(b.id.clone(), Role::User, kind, 1);
            m.text = text;
            m.raw = Some(b.raw.clone());
            msgs.push(m);
        }
        Speaker::Other => {
            let mut m = new(b.id.clone(), Role::System, MessageKind::Meta, 1);
            m.text = text;
            m.raw = Some(b.raw.clone());
            msgs.push(m);
        }
        Speaker::Assistant => {
            let model = v
                .get("modelInfo")
                .and_then(|m| str_of(m, "modelName"))
                .or_else(|| str_of(v, "modelType"))
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .or_else(|| t.model.clone());
            if model.is_some() {
                walk.last_model.clone_from(&model);
            }
            let thinking = match v.get("thinking") {
                Some(Value::String(s)) => Some(s.as_str()),
                Some(th) => str_of(th, "text"),
                None => None,
            }
            .filter(|s| !s.trim().is_empty());
            if let Some(th) = thinking {
                let mut m = new(
                    format!("{}#thinking", b.id),
                    Role::Assistant,
                    MessageKind::Thinking,
                    0,
                );
                m.text = th.to_owned();
                msgs.push(m);
            }
            let tool = v
                .get("toolFormerData")
                .filter(|d| d.as_object().is_some_and(|o| !o.is_empty()))
                .or_else(|| t.tools.get(&b.id));
            let mut main = match tool {
                Some(tool) => {
                    let (call, result) = tool_messages(tool, &b.id, &new);
                    if !text.is_empty() {
                        let mut m = new(
                            format!("{}#text", b.id),
                            Role::Assistant,
                            MessageKind::AssistantText,
                            2,
                        );
                        m.text = text;
                        msgs.push(m);
                    }
                    msgs.extend(result);
                    call
                }
                None if !text.is_empty() => {
                    let mut m = new(b.id.clone(), Role::Assistant, MessageKind::AssistantText, 1);
                    m.text = text;
                    m
                }
                None => new(b.id.clone(), Role::Assistant, MessageKind::Meta, 1),
            };
            main.raw = Some(b.raw.clone());
            if let Some(tc) = v.get("tokenCount") {
                let u = Usage {
                    input_tokens: u64_of(tc, "inputTokens"),
                    output_tokens: u64_of(tc, "outputTokens"),
                    ..Default::default()
                };
                if u != Usage::default() {
                    main.usage = Some(u);
                    main.usage_key = Some(b.id.clone());
                }
            }
            msgs.push(main);
            for m in &mut msgs {
                m.model.clone_from(&model);
            }
        }
    }
    for m in &mut msgs {
        m.prompt_number = walk.prompt;
    }
    msgs.sort_by_key(|m| m.seq);
    (msgs, None)
}

/// A tool payload (`{tool, name, rawArgs, params, result, status, error, …}`) as its call and,
/// once it has one, its result.
fn tool_messages(
    tool: &Value,
    bid: &str,
    new: &dyn Fn(String, Role, MessageKind, u64) -> ParsedMessage,
) -> (ParsedMessage, Option<ParsedMessage>) {
    let name = str_of(tool, "name").filter(|s| !s.is_empty()).map_or_else(
        || match tool.get("tool") {
            Some(n) if !n.is_null() => format!("tool {n}"),
            _ => "unknown".to_owned(),
        },
        str::to_owned,
    );
    let input = ["rawArgs", "params"]
        .iter()
        .find_map(|k| tool.get(*k).filter(|v| !v.is_null()))
        .map_or(Value::Null, |v| match v {
            Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
            other => other.clone(),
        });
    let call_id = str_of(tool, "toolCallId")
        .filter(|s| !s.is_empty())
        .map_or_else(|| bid.to_owned(), str::to_owned);
    let mut call = new(bid.to_owned(), Role::Assistant, MessageKind::ToolCall, 1);
    call.text = text::tool_call_text(&name, &input);
    call.tool_call = Some(ToolCall {
        name,
        input,
        call_id: Some(call_id.clone()),
    });
    let status = str_of(tool, "status").unwrap_or("");
    let error = str_of(tool, "error").filter(|s| !s.is_empty());
    let result = tool.get("result").filter(|r| match r {
        Value::Null => false,
        Value::String(s) => !s.is_empty(),
        _ => true,
    });
    let finished = matches!(status, "completed" | "error" | "cancelled");
    if result.is_none() && error.is_none() && !finished {
        return (call, None);
    }
    let mut parts = Vec::new();
    if let Some(e) = error {
        parts.push(e.to_owned());
    }
    if let Some(r) = result {
        let r = match r {
            Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| r.clone()),
            other => other.clone(),
        };
        let t = result_text(&r);
        if !t.is_empty() {
            parts.push(t);
        }
    }
    if parts.is_empty() && !status.is_empty() {
        parts.push(status.to_owned());
    }
    let failed = matches!(status, "error" | "cancelled")
        || tool.get("tool").and_then(Value::as_i64) == Some(0);
    let mut res = new(
        format!("{bid}#result"),
        Role::Tool,
        MessageKind::ToolResult,
        3,
    );
    res.text = parts.join("\n");
    res.tool_result = Some(ToolResult {
        call_id: Some(call_id),
        is_error: failed,
    });
    (call, Some(res))
}

/// Searchable text of a tool result: its strings (keys in order), then its scalar fields.
fn result_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .map(result_text)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let mut lines: Vec<String> = keys
                .iter()
                .filter(|k| {
                    matches!(
                        o[**k],
                        Value::String(_) | Value::Array(_) | Value::Object(_)
                    )
                })
                .map(|k| result_text(&o[*k]))
                .filter(|s| !s.is_empty())
                .collect();
            lines.extend(
                keys.iter()
                    .filter(|k| matches!(o[**k], Value::Number(_) | Value::Bool(_)))
                    .map(|k| format!("{k}: {}", o[*k])),
            );
            lines.join("\n")
        }
        other => other.to_string(),
    }
}

// ---- a workspace database ----

fn read_workspace(
    db: &Db,
    path: &Path,
    st: &mut State,
    out: &mut Out,
    max_bytes: usize,
) -> Result<bool, ParseError> {
    if !db.has_table("ItemTable") {
        out.emit.issue(
            0,
            "no ItemTable table: not a Cursor workspace state database",
            false,
        );
        return Ok(true);
    }
    let project = path
        .parent()
        .and_then(|d| workspace_project(&d.join("workspace.json")));
    if st.project != project {
        // The folder changed: every mapping is emitted again.
        st.items.clear();
        st.project.clone_from(&project);
    }
    let mut q = db
        .conn()
        .prepare(
            "SELECT key, value FROM ItemTable
             WHERE key = ?1 OR key = ?2 OR (key >= ?3 AND key < ?4) ORDER BY key",
        )
        .map_err(|e| db.error(e))?;
    let mut rows = q
        .query(params![WS_COMPOSERS, WS_CHAT, WS_PANE, range_end(WS_PANE)])
        .map_err(|e| db.error(e))?;
    let mut items = Vec::new();
    while let Some(r) = rows.next().map_err(|e| db.error(e))? {
        let row = kv_row(r).map_err(|e| db.error(e))?;
        let pane = row.key == WS_PANE
            || (row.key.starts_with(&format!("{WS_PANE}.")) && !row.key.ends_with(".hidden"));
        if row.key == WS_COMPOSERS || row.key == WS_CHAT || pane {
            items.push(row);
        }
    }
    drop(rows);
    let present: HashSet<String> = items.iter().map(|r| r.key.clone()).collect();
    let mut done = 0usize;
    for row in items {
        let h = hash_bytes(&row.raw);
        if st.items.get(&row.key) == Some(&h) {
            continue;
        }
        if done > 0 && out.bytes >= max_bytes as u64 {
            return Ok(false);
        }
        out.bytes += row.len;
        out.rows += 1;
        done += 1;
        let value = match &row.value {
            Some(Ok(v)) => v,
            Some(Err(())) => {
                out.emit
                    .issue(0, format!("{} is not JSON: not read", row.key), false);
                st.items.insert(row.key.clone(), h);
                continue;
            }
            None => {
                st.items.insert(row.key.clone(), h);
                continue;
            }
        };
        if row.key == WS_COMPOSERS {
            workspace_composers(value, &project, st, out);
        } else if row.key == WS_CHAT {
            chat_tabs(value, &project, st, out);
        } else {
            // `{ "workbench.panel.aichat.view.<composerId>": {…} }`: an open composer tab.
            let ids = value
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
                .filter_map(|k| k.strip_prefix(PANE_VIEW))
                .filter(|id| !id.is_empty());
            for id in ids {
                mapped(id, &project, out);
            }
        }
        st.items.insert(row.key.clone(), h);
    }
    st.items.retain(|k, _| present.contains(k));
    Ok(true)
}

/// A composer of the global database that this workspace's folder is the project of.
fn mapped(cid: &str, project: &Option<String>, out: &mut Out) {
    if project.is_some() {
        out.sessions.push(SessionInfo {
            session_id: cid.to_owned(),
            project_path: project.clone(),
            ..Default::default()
        });
    }
}

/// `composer.composerData`: `{allComposers: […], selectedComposerId(s), composerDataVersion}`.
fn workspace_composers(v: &Value, project: &Option<String>, st: &mut State, out: &mut Out) {
    let mut done: HashSet<String> = HashSet::new();
    for c in v
        .get("allComposers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(cid) = str_of(c, "composerId").filter(|s| !s.is_empty()) else {
            continue;
        };
        done.insert(cid.to_owned());
        let inline = c
            .get("conversation")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !inline {
            mapped(cid, project, out);
            continue;
        }
        // The composer's own record, without the bubbles (each bubble is its own record).
        let mut own = c.clone();
        if let Some(o) = own.as_object_mut() {
            o.remove("conversation");
        }
        let raw = serde_json::to_vec(&own).unwrap_or_default();
        let talk = composer_talk(cid, c, raw, 0, project.clone(), BTreeMap::new());
        emit_talk(st, out, talk, None);
    }
    let selected = v
        .get("selectedComposerIds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .chain(str_of(v, "selectedComposerId"));
    for cid in selected {
        if !cid.is_empty() && done.insert(cid.to_owned()) {
            mapped(cid, project, out);
        }
    }
}

/// The old chat panel: `{tabs: [{tabId, chatTitle, lastSendTime, bubbles: […]}], …}`.
fn chat_tabs(v: &Value, project: &Option<String>, st: &mut State, out: &mut Out) {
    for tab in v
        .get("tabs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(id) = str_of(tab, "tabId").filter(|s| !s.is_empty()) else {
            continue;
        };
        let mut own = tab.clone();
        if let Some(o) = own.as_object_mut() {
            o.remove("bubbles");
        }
        let mut talk = Talk::bare(id, "tab", serde_json::to_vec(&own).unwrap_or_default(), 0);
        talk.name = str_of(tab, "chatTitle")
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned);
        talk.updated = tab.get("lastSendTime").and_then(parse_ts);
        talk.project.clone_from(project);
        for (i, b) in tab
            .get("bubbles")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let bid = str_of(b, "id")
                .or_else(|| str_of(b, "bubbleId"))
                .filter(|s| !s.is_empty())
                .map_or_else(|| format!("#{i}"), str::to_owned);
            talk.bubbles.push(Bubble {
                id: bid,
                v: Some(b.clone()),
                raw: serde_json::to_vec(b).unwrap_or_default(),
                line: 0,
                rendered: true,
            });
        }
        emit_talk(st, out, talk, None);
    }
}

/// The project folder a workspace's `workspace.json` names: `folder`, or the folder of the
/// `.code-workspace` file named by `workspace`.
fn workspace_project(file: &Path) -> Option<String> {
    let v: Value = serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
    if let Some(f) = str_of(&v, "folder") {
        return uri_path(f);
    }
    let w = uri_path(str_of(&v, "workspace")?)?;
    let cut = w.rfind(['/', '\\'])?;
    Some(w[..cut.max(1)].to_owned())
}

/// The path of a workspace URI as VS Code's `fsPath` gives it: `file:///home/x` → `/home/x`,
/// `file:///c%3A/Users/x` → `c:\Users\x`, `file://wsl.localhost/Ubuntu/home/x` → `/home/x`,
/// `file://server/share` → `\\server\share`, `vscode-remote://<authority>/home/x` → `/home/x`.
fn uri_path(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once("://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = percent_decode(path);
    match scheme.to_ascii_lowercase().as_str() {
        "file" => {
            let host = percent_decode(host).to_ascii_lowercase();
            if host == "wsl.localhost" || host.starts_with("wsl$") {
                // `/<distro>/home/x`: the distribution's name is not part of the path.
                let tail = path.get(1..).unwrap_or("");
                return Some(
                    tail.find('/')
                        .map_or("/".to_owned(), |i| tail[i..].to_owned()),
                );
            }
            if !host.is_empty() {
                return Some(format!("\\\\{host}{}", path.replace('/', "\\")));
            }
            let b = path.as_bytes();
            if b.len() >= 3 && b[0] == b'/' && b[1].is_ascii_alphabetic() && b[2] == b':' {
                return Some(path[1..].replace('/', "\\"));
            }
            Some(path)
        }
        "vscode-remote" => Some(path),
        _ => None,
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex_val(b[i + 1]), hex_val(b[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn workspace_uris_become_paths_as_vscode_gives_them() {
        assert_eq!(
            uri_path("file:///home/dev/demo-app").unwrap(),
            "/home/dev/demo-app"
        );
        assert_eq!(
            uri_path("file:///c%3A/Users/me/My%20App").unwrap(),
            "c:\\Users\\me\\My App"
        );
        assert_eq!(
            uri_path("file://wsl.localhost/Ubuntu/home/me/proj").unwrap(),
            "/home/me/proj"
        );
        assert_eq!(
            uri_path("vscode-remote://ssh-remote%2Bbox/srv/app").unwrap(),
            "/srv/app"
        );
        assert_eq!(
            uri_path("file://server/share/app").unwrap(),
            "\\\\server\\share\\app"
        );
        assert_eq!(uri_path("untitled:Untitled-1"), None);
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("a%2"), "a%2");
    }

    #[test]
    fn bubble_times_skip_relative_timing_and_read_iso_created_at() {
        let rel = json!({"timingInfo": {"clientStartTime": 1234.5, "clientRpcSendTime": 1781000001012.5}});
        assert_eq!(bubble_time(&rel), Some(1_781_000_001_012));
        let iso = json!({"createdAt": "2026-06-09T10:13:20.000Z", "timingInfo": {"clientStartTime": 1.0}});
        assert_eq!(bubble_time(&iso), Some(1_781_000_000_000));
        assert_eq!(
            bubble_time(&json!({"timingInfo": {"clientStartTime": 12.0}})),
            None
        );
    }

    #[test]
    fn tool_results_read_their_strings_then_their_numbers() {
        let r = json!({"output": "FAIL", "exitCode": 1, "nested": {"stderr": "boom"}});
        assert_eq!(result_text(&r), "boom\nFAIL\nexitCode: 1");
        assert_eq!(result_text(&json!("plain")), "plain");
        assert_eq!(result_text(&Value::Null), "");
    }

    #[test]
    fn the_census_read_in_pages_equals_one_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.vscdb");
        let w = rusqlite::Connection::open(&path).unwrap();
        w.execute_batch(
            "CREATE TABLE cursorDiskKV (key TEXT UNIQUE ON CONFLICT REPLACE, value BLOB);",
        )
        .unwrap();
        for c in 0..7 {
            w.execute(
                "INSERT INTO cursorDiskKV VALUES (?1, '{}')",
                [format!("{COMPOSER_PREFIX}c{c}")],
            )
            .unwrap();
            for b in 0..(c * 3 + 1) {
                w.execute(
                    "INSERT INTO cursorDiskKV VALUES (?1, '{}')",
                    [format!("{BUBBLE_PREFIX}c{c}:b{b}")],
                )
                .unwrap();
            }
        }
        // Keys around the ranges that are not the census's, and keys that are not UTF-8.
        w.execute_batch(
            "INSERT INTO cursorDiskKV VALUES ('composerDat', 'x'), ('bubbleId;', 'x'),
                    (x'627562626c6549643a', 'blob key'),
                    (CAST(x'636f6d706f736572446174613aff' AS TEXT), 'bad'),
                    (CAST(x'627562626c6549643a63303aff' AS TEXT), 'bad');",
        )
        .unwrap();
        let db = Db::open(&path).unwrap();
        let whole = census_in_pages(&db, 1_000_000).unwrap();
        assert_eq!(
            whole.len(),
            8,
            "seven composers and one whose id is not UTF-8"
        );
        for page in [1, 2, 3, 5, 7, 64] {
            assert_eq!(
                census_in_pages(&db, page).unwrap(),
                whole,
                "pages of {page}"
            );
        }
    }

    #[test]
    fn key_ranges_end_just_after_the_prefix() {
        assert_eq!(range_end("bubbleId:"), "bubbleId;");
        assert_eq!(range_end(WS_PANE), "workbench.panel.composerChatViewPanf");
        assert!(*"bubbleId:c:b" < *range_end("bubbleId:c:"));
        assert!(*"bubbleId:c;" >= *range_end("bubbleId:c:"));
    }

    #[test]
    fn the_cursor_keeps_record_hashes_of_recent_conversations_only() {
        let mut st = State::default();
        let recs: BTreeMap<String, u64> = (0..100).map(|i| (format!("b{i}"), i)).collect();
        let n = RECORD_BUDGET as u64 / 100 + 5;
        for i in 0..n {
            st.convs.insert(
                format!("c{i}"),
                ConvState {
                    t: i,
                    recs: recs.clone(),
                    ..Default::default()
                },
            );
        }
        st.bound();
        assert_eq!(st.convs.len(), RECORD_BUDGET / 100);
        assert!(!st.convs.contains_key("c0"));
        assert!(st.convs.contains_key(&format!("c{}", n - 1)));
        // One conversation larger than the budget is still kept whole.
        let mut st = State::default();
        let big: BTreeMap<String, u64> = (0..RECORD_BUDGET as u64 + 1)
            .map(|i| (format!("b{i}"), i))
            .collect();
        st.convs.insert(
            "big".into(),
            ConvState {
                t: 1,
                recs: big,
                ..Default::default()
            },
        );
        st.bound();
        assert!(st.convs.contains_key("big"));
    }
}
