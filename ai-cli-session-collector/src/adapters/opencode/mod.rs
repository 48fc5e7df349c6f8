//! OpenCode: every shape lives under the data folder `$XDG_DATA_HOME/opencode`, by default
//! `~/.local/share/opencode` on Linux, macOS and Windows alike (OpenCode joins the home folder
//! with `.local/share` everywhere; there is no `%APPDATA%` branch). FORMATS-MORE §4.
//!
//! * **2.x database** (§4a): `opencode.db` (`$OPENCODE_DB` names another file, relative to the
//!   data folder or absolute; non-default release channels use `opencode-<channel>.db`).
//!   `session_v2` holds one row per session (directory, generated title, `parent_id`, model),
//!   `session_message` one row per record (`type` = `user`, `assistant`, `shell`, `synthetic`,
//!   `compaction`, `idle`, …; `data` JSON; `seq` orders a session, sparse).
//! * **1.x database** (§4b, from 1.2): the same file with `session`, `message` (role, model,
//!   tokens, cwd) and `part` (the content, one row per text / reasoning / tool / step part).
//! * **1.x JSON storage** (§4c, before 1.2): `storage/session/<project>/<sid>.json`,
//!   `storage/message/<sid>/<msgid>.json`, `storage/part/<msgid>/<partid>.json`. The session file
//!   is the source ([`SourceKind::Document`]): a change of one of its message or part files maps
//!   to it ([`OpenCodeAdapter::source_of`]), and it is read again whole with all its messages and
//!   parts, which keep the agent's own ids. Unchanged is decided on all those files together.
//!
//! Databases are read incrementally: per table, the rows above the `(time_updated, id)` mark
//! kept in the cursor, in that order, about `max_bytes` of them per call. A row rewritten in
//! place (a 2.x assistant step while it streams, a 1.x part growing) has a newer
//! `time_updated`, so it comes back under the same message ids with its final content. Only
//! `session_v2`/`session_message`, or `session`/`message`/`part`, are ever queried: the
//! `account`, `control_account` and `credential` tables and `auth.json` (tokens, API keys) are
//! never opened. A database with `session_v2` is read as 2.x only (the old tables are migrated
//! data). Every `*.db` directly in the data folder is taken for OpenCode's (a custom
//! `$OPENCODE_DB` name is not known when a path is classified); one without these tables is
//! reported and left alone. The JSON storage is ignored once `opencode.db` sits next to it:
//! OpenCode migrated it into the database and left it stale (§4c, [AS-TRACK]).
//!
//! Prompts. 2.x: a `user` row. Slash commands are stored already expanded with no marker (§4a
//! trap), so `/review` counts as a prompt holding its whole template: the human sent it. A
//! `shell` row (the user's `!command`) and a `synthetic` row (its echo for the model, plan-mode
//! reminders) are kept as meta. 1.x: the first text part of a `user` message that is neither
//! `synthetic` nor empty. A child session (`parent_id` / `parentID`: a sub-agent's) has no
//! prompts: its user text is the parent agent's task, kept as meta; its messages are sidechain.
//!
//! Tools. A tool part holds the call and its result (2.x `id`, `state.content[]` / `state.error`;
//! 1.x `callID`, `state.output` / `state.error`), so a call and its result share the call id and
//! need no pairing by order. A 2.x tool can be answered without running (`executed: false`, the
//! `question` tool): its answer is still its result.
//!
//! Ids. 2.x: a row's first block is the row id, block `i` is `<row>#<i>`, a tool result
//! `<block>/result`. 1.x: a message record is `<msgid>`, a part `<msgid>/<partid>`, a result
//! `<msgid>/<partid>/result`, the same in the database and in the JSON files, so a session seen
//! in both converges. Each session's own record (a `session_v2` / `session` row, the session
//! file) is a meta message `session` carrying its raw bytes.
//!
//! Traps. Titles `New session - <time>`, `Child session - <time>` and `Untitled` are
//! placeholders, not titles. Rows the agent deletes (a reverted turn, a deleted session) are not
//! noticed: the archive keeps them. `session_message` has no index on `time_updated`, so each
//! read scans the table (the `data` column last, so overflow pages are not read). A row
//! rewritten within the same millisecond as the mark keeps its `time_updated` and is not read
//! again until it changes once more. 1.x JSON: OpenCode touches the session file only at the
//! start of a turn, so a change of a message or part file is a change of the session only to
//! a caller that asks `source_of` (a size/mtime stamp of the session file alone misses it).
//!
//! Here: the adapter, the paths and what the shapes share; `database` reads both databases,
//! `parts` turns 1.x messages and parts into records, `storage` reads the 1.x JSON tree.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::adapter::{
    ConversationAdapter, Env, ParseError, SourceKind, blank, parse_ts, str_of, string_of, u64_of,
};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, Usage,
};
use crate::sqlite::json_column;
use crate::text;
use database::parse_database;
use storage::parse_storage;

mod database;
mod parts;
mod storage;

const AGENT: &str = "opencode";

/// The message id of a session's own record.
const SESSION_RECORD: &str = "session";

pub struct OpenCodeAdapter;

impl ConversationAdapter for OpenCodeAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let data = env
            .var("XDG_DATA_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| env.home.join(".local").join("share"))
            .join("opencode");
        let mut roots = vec![data.clone()];
        // `$OPENCODE_DB` is resolved against the data folder; its folder is a root of its own
        // when it lies elsewhere.
        if let Some(db) = env.var("OPENCODE_DB").filter(|d| *d != ":memory:") {
            let db = data.join(db);
            if let Some(dir) = db.parent()
                && dir != data
            {
                roots.push(dir.to_owned());
            }
        }
        roots
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Some(parts) = rel_parts(root, path) else {
            return false;
        };
        match parts.as_slice() {
            [name] => name.ends_with(".db"),
            ["storage", "session", _project, name] => {
                name.ends_with(".json") && !root.join("opencode.db").is_file()
            }
            _ => false,
        }
    }

    fn source_kind(&self, path: &Path) -> SourceKind {
        if path.extension().is_some_and(|e| e == "db") {
            SourceKind::Database
        } else {
            SourceKind::Document
        }
    }

    /// The database whose `-wal` changed, or the session file a message or part file belongs to.
    fn source_of(&self, root: &Path, changed: &Path) -> Option<PathBuf> {
        if self.is_transcript(root, changed) {
            return Some(changed.to_owned());
        }
        let parts = rel_parts(root, changed)?;
        let source = match parts.as_slice() {
            [name] => root.join(name.strip_suffix("-wal")?),
            ["storage", "message", sid, name] if name.ends_with(".json") => {
                session_file(root, sid)?
            }
            ["storage", "part", msg, name] if name.ends_with(".json") => {
                let sid = part_session(changed).or_else(|| message_session(root, msg))?;
                session_file(root, &sid)?
            }
            _ => return None,
        };
        self.is_transcript(root, &source).then_some(source)
    }

    /// The databases in the data folder and the JSON sessions under `storage/session/`, without
    /// walking the snapshot and cache folders OpenCode keeps there too.
    /// A 1.x JSON session changes when any of its message or part files does (OpenCode touches
    /// the session file only at the start of a turn): the stamp covers them all.
    fn stamp(&self, root: &Path, path: &Path) -> std::io::Result<(u64, i64)> {
        let kind = self.source_kind(path);
        let (mut size, mut mtime) = kind.stamp(path)?;
        if kind == SourceKind::Database {
            return Ok((size, mtime));
        }
        let Some(sid) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .filter(|s| safe_id(s))
        else {
            return Ok((size, mtime));
        };
        let storage = root.join("storage");
        let mut add = |f: &Path| {
            if let Ok(m) = std::fs::metadata(f) {
                size = size.wrapping_add(m.len()).wrapping_add(1);
                mtime = mtime.max(crate::adapter::mtime_ms(&m));
            }
        };
        for msg in files_in(&storage.join("message").join(sid)) {
            add(&msg);
            let Some(mid) = msg
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|s| safe_id(s))
            else {
                continue;
            };
            for part in files_in(&storage.join("part").join(mid)) {
                add(&part);
            }
        }
        Ok((size, mtime))
    }

    fn discover(&self, root: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = files_in(root)
            .into_iter()
            .filter(|p| self.is_transcript(root, p))
            .collect();
        for project in dirs_in(&root.join("storage").join("session")) {
            files.extend(
                files_in(&project)
                    .into_iter()
                    .filter(|p| self.is_transcript(root, p)),
            );
        }
        files.sort_by_key(|p| (p.components().count(), p.clone()));
        files
    }

    fn parse(
        &self,
        root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        match self.source_kind(path) {
            SourceKind::Database => parse_database(path, cursor, max_bytes),
            SourceKind::Document | SourceKind::Lines => parse_storage(root, path, cursor),
        }
    }
}

/// `path` below `root`, as UTF-8 components.
fn rel_parts<'a>(root: &Path, path: &'a Path) -> Option<Vec<&'a str>> {
    path.strip_prefix(root)
        .ok()?
        .components()
        .map(|c| c.as_os_str().to_str())
        .collect()
}

/// An id that can name a file or folder: no separators, no `..`.
fn safe_id(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !s.starts_with('.')
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

fn dirs_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

/// `storage/session/<project>/<sid>.json`, whichever project holds it.
fn session_file(root: &Path, sid: &str) -> Option<PathBuf> {
    if !safe_id(sid) {
        return None;
    }
    dirs_in(&root.join("storage").join("session"))
        .into_iter()
        .map(|p| p.join(format!("{sid}.json")))
        .find(|p| p.is_file())
}

/// The `sessionID` a part file names (every 1.x part carries it).
fn part_session(part: &Path) -> Option<String> {
    let v: Value = serde_json::from_slice(&crate::reader::read_file(part).ok()?).ok()?;
    string_of(&v, "sessionID")
}

/// The session whose `storage/message/<sid>/` folder holds message `msg`.
fn message_session(root: &Path, msg: &str) -> Option<String> {
    if !safe_id(msg) {
        return None;
    }
    dirs_in(&root.join("storage").join("message"))
        .into_iter()
        .find(|d| d.join(format!("{msg}.json")).is_file())
        .and_then(|d| d.file_name()?.to_str().map(str::to_owned))
}

// ---- shared by the shapes ----

/// OpenCode's placeholder titles (a session before its title is generated).
fn is_placeholder_title(t: &str) -> bool {
    let t = t.trim();
    t.is_empty()
        || t == "Untitled"
        || ["New session - ", "New Session - ", "Child session - "]
            .iter()
            .any(|p| t.starts_with(p))
}

/// `tokens: {input, output, reasoning, cache: {read, write}}`.
fn usage_of(tokens: &Value) -> Option<Usage> {
    if !tokens.is_object() {
        return None;
    }
    let cache = tokens.get("cache").unwrap_or(&Value::Null);
    Some(Usage {
        input_tokens: u64_of(tokens, "input"),
        output_tokens: u64_of(tokens, "output"),
        cache_read_tokens: u64_of(cache, "read"),
        cache_creation_tokens: u64_of(cache, "write"),
        reasoning_tokens: u64_of(tokens, "reasoning"),
    })
}

/// A model name: `{id}` (2.x), `{modelID}` (1.x user messages) or the text itself.
fn model_name(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()).filter(|s| !s.is_empty()),
        _ => string_of(v, "id").or_else(|| string_of(v, "modelID")),
    }
}

/// The text of an error: `{message}`, `{data: {message}}`, a string, or the JSON itself.
fn error_text(e: &Value) -> String {
    match e {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        _ => str_of(e, "message")
            .or_else(|| e.get("data").and_then(|d| str_of(d, "message")))
            .map_or_else(|| e.to_string(), str::to_owned),
    }
}

fn join_lines(a: &mut String, b: &str) {
    if b.is_empty() {
        return;
    }
    if !a.is_empty() {
        a.push('\n');
    }
    a.push_str(b);
}

/// What the session row or file says about a session.
#[derive(Default, Clone)]
struct Sess {
    id: String,
    directory: Option<String>,
    parent: Option<String>,
    title: Option<String>,
    model: Option<String>,
    created: Option<i64>,
    updated: Option<i64>,
}

impl Sess {
    /// A `session_v2` or `session` row.
    fn from_row(row: &Value) -> Sess {
        Sess {
            id: string_of(row, "id").unwrap_or_default(),
            directory: string_of(row, "directory"),
            parent: string_of(row, "parent_id"),
            title: string_of(row, "title").filter(|t| !is_placeholder_title(t)),
            model: row
                .get("model")
                .map(json_column)
                .as_ref()
                .and_then(model_name),
            created: row.get("time_created").and_then(parse_ts),
            updated: row.get("time_updated").and_then(parse_ts),
        }
    }

    fn subagent(&self) -> bool {
        self.parent.is_some()
    }

    /// The session's info; `first_prompt` titles it when OpenCode has not.
    fn info(&self, first_prompt: Option<&str>, model: Option<String>) -> SessionInfo {
        let title = match (&self.title, first_prompt) {
            (Some(t), _) => Some((TitleSource::Generated, text::truncate_chars(t, 200))),
            (None, Some(p)) => Some((TitleSource::FirstPrompt, text::prompt_title(p))),
            (None, None) => None,
        };
        SessionInfo {
            session_id: self.id.clone(),
            project_path: self.directory.clone(),
            model: self.model.clone().or(model),
            title,
            parent_session_id: self.parent.clone(),
            is_subagent: self.subagent(),
            started_at: self.created,
            updated_at: self.updated,
            ..Default::default()
        }
    }

    /// The meta message that keeps the session's own record.
    fn record(&self) -> ParsedMessage {
        let mut m = blank(
            AGENT,
            &self.id,
            SESSION_RECORD.into(),
            Role::System,
            MessageKind::Meta,
        );
        m.text = self.title.clone().unwrap_or_default();
        m.timestamp = self.created;
        m.cwd.clone_from(&self.directory);
        if self.subagent() {
            m.flags.sidechain = true;
            m.agent_id = Some(self.id.clone());
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_titles_are_not_titles() {
        assert!(is_placeholder_title(
            "New session - 2025-01-01T00:00:00.000Z"
        ));
        assert!(is_placeholder_title(
            "Child session - 2025-01-01T00:00:00.000Z"
        ));
        assert!(is_placeholder_title("Untitled"));
        assert!(is_placeholder_title("  "));
        assert!(!is_placeholder_title("Fix the login bug"));
    }

    #[test]
    fn ids_that_could_leave_the_storage_folder_are_refused() {
        assert!(safe_id("ses_0cb9783b5001n0dNVAt61r1gNM"));
        assert!(safe_id("msg-user-001"));
        assert!(!safe_id("../auth"));
        assert!(!safe_id("a/b"));
        assert!(!safe_id(".."));
        assert!(!safe_id(""));
    }

    #[test]
    fn usage_reads_the_nested_cache_counts() {
        let t = serde_json::json!({"input": 10, "output": 20, "reasoning": 3,
                                   "cache": {"read": 5, "write": 7}});
        assert_eq!(
            usage_of(&t),
            Some(Usage {
                input_tokens: 10,
                output_tokens: 20,
                cache_read_tokens: 5,
                cache_creation_tokens: 7,
                reasoning_tokens: 3,
            })
        );
        assert_eq!(usage_of(&Value::Null), None);
    }

    #[test]
    fn models_and_errors_in_their_several_shapes() {
        let s = serde_json::json!({"id": "big-pickle", "providerID": "opencode"});
        assert_eq!(model_name(&s).as_deref(), Some("big-pickle"));
        let u = serde_json::json!({"providerID": "openai", "modelID": "gpt-5"});
        assert_eq!(model_name(&u).as_deref(), Some("gpt-5"));
        let e = serde_json::json!({"name": "APIError", "data": {"message": "rate limited"}});
        assert_eq!(error_text(&e), "rate limited");
        assert_eq!(error_text(&serde_json::json!("boom")), "boom");
    }
}
