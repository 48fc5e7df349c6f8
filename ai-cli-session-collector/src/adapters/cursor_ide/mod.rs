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
//!
//! Here: the adapter, its state and the helpers the readers share; `global` reads the global
//! database, `workspace` a workspace database, `talk` turns one conversation into records.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rusqlite::types::ValueRef;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::adapter::{ConversationAdapter, Emit, Env, ParseError, SourceKind};
use crate::model::{Cursor, ParseOutput, ParsedMessage, SessionInfo};
use crate::sqlite::{Db, row_json};
use global::read_global;
use workspace::read_workspace;

mod global;
mod talk;
mod workspace;

const AGENT: &str = "cursor-ide";
const DB_NAME: &str = "state.vscdb";
const COMPOSER_PREFIX: &str = "composerData:";
const BUBBLE_PREFIX: &str = "bubbleId:";
const WS_COMPOSERS: &str = "composer.composerData";
const WS_CHAT: &str = "workbench.panel.aichat.view.aichat.chatdata";
const WS_PANE: &str = "workbench.panel.composerChatViewPane";
const PANE_VIEW: &str = "workbench.panel.aichat.view.";
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
            let at_end = match kind {
                DbKind::Global => read_global(&db, &mut st, &mut out, max_bytes)?,
                DbKind::Workspace => read_workspace(&db, path, &mut st, &mut out, max_bytes)?,
            };
            db.finish()?;
            at_end
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

#[cfg(test)]
mod tests {
    use super::global::census_in_pages;
    use super::talk::{bubble_time, result_text};
    use super::workspace::{percent_decode, uri_path};
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
