//! The adapter seam: one [`ConversationAdapter`] per agent format, held by the
//! [`AdapterRegistry`], plus the JSONL driver the line-based formats share.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::model::{
    Cursor, MessageKind, ParseIssue, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource,
    ToolCall, ToolResult, Usage,
};
use crate::reader;

/// The environment adapters resolve their default roots from. Passed in, never read from the
/// process, so tests and the service decide what an adapter sees.
#[derive(Debug, Clone, Default)]
pub struct Env {
    pub home: PathBuf,
    pub vars: BTreeMap<String, String>,
}

impl Env {
    /// The current user's home and environment.
    pub fn from_process() -> Self {
        let home = std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .map(PathBuf::from)
            .unwrap_or_default();
        Env {
            home,
            vars: std::env::vars().collect(),
        }
    }

    pub fn var(&self, k: &str) -> Option<&str> {
        self.vars
            .get(k)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }
}

/// Reading a file failed as a whole (it vanished, permissions, ...). Bad *content* is never an
/// error: it becomes a [`ParseIssue`] and the rest of the file is parsed.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The agent's database could not be opened or read (locked past the busy timeout,
    /// corrupt, not a database). Nothing of it was taken; the next change reads it again.
    #[error("cannot read the database {path}")]
    Database {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    /// A file Memex will not read, for the reason given (a project's file that is a link).
    #[error("not reading {path}: {why}")]
    Refused { path: PathBuf, why: String },
}

/// Checks that `path`, a file found under the agent's folder `root`, may be read: a regular
/// file reached without a symbolic link below `root` (the root itself may be a link: a
/// `~/.claude` kept in a dotfiles folder). A link inside an agent's folder can point anywhere
/// (`~/.ssh`, another user's files): Memex reads what the agent wrote there, nothing else. A
/// path outside `root` (an agent's global database beside its folders) must not be a link
/// itself.
pub fn check_inside(root: &Path, path: &Path) -> Result<std::fs::Metadata, ParseError> {
    let refuse = |why: &str| ParseError::Refused {
        path: path.to_owned(),
        why: why.to_owned(),
    };
    let meta_of = |p: &Path| {
        std::fs::symlink_metadata(p).map_err(|source| ParseError::Io {
            path: p.to_owned(),
            source,
        })
    };
    let meta = match path.strip_prefix(root) {
        Ok(rel) => {
            let mut at = root.to_path_buf();
            let mut meta = None;
            for part in rel.components() {
                at.push(part);
                let m = meta_of(&at)?;
                if m.file_type().is_symlink() {
                    return Err(refuse(
                        "it is (or lies under) a symbolic link inside the agent's folder",
                    ));
                }
                meta = Some(m);
            }
            meta.ok_or_else(|| refuse("not a file"))?
        }
        Err(_) => {
            let m = meta_of(path)?;
            if m.file_type().is_symlink() {
                return Err(refuse("it is a symbolic link"));
            }
            m
        }
    };
    if !meta.is_file() {
        return Err(refuse("not a regular file"));
    }
    Ok(meta)
}

/// Checks that `path`, an agent's file inside the project folder `root`, may be read: as
/// [`check_inside`], and owned by this user. What is in a project folder is whatever a
/// repository put there: a `.aider.chat.history.md` linked to `~/.aws/credentials` must never
/// reach the archive.
pub fn check_project_file(root: &Path, path: &Path) -> Result<(), ParseError> {
    if path.strip_prefix(root).is_err() {
        return Err(ParseError::Refused {
            path: path.to_owned(),
            why: "not inside its project folder".into(),
        });
    }
    let _meta = check_inside(root, path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        if _meta.uid() != unsafe { libc::geteuid() } {
            return Err(ParseError::Refused {
                path: path.to_owned(),
                why: "owned by another user".into(),
            });
        }
    }
    Ok(())
}

/// How an agent keeps a conversation on disk. It decides how a source is read and what a
/// change of it is; the store treats every kind alike (cursor and batch in one transaction).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// Lines appended to a file, read from a byte cursor (Claude Code, Codex, Copilot, Pi …).
    Lines,
    /// A whole file the agent rewrites in place (Cline/Roo tasks, Amp threads): read again on
    /// change; its messages keep stable ids, and the ones that disappear are marked inactive.
    Document,
    /// A SQLite database the agent writes while Memex reads (OpenCode, Cursor, Goose, Crush):
    /// opened read-only for one short read, rows taken above the marks the cursor keeps; its
    /// write-ahead log is part of it.
    Database,
}

impl SourceKind {
    /// The other files whose change is a change of the source: a database's `-wal` (its
    /// committed rows live there until a checkpoint moves them into the main file).
    pub fn companions(self, path: &Path) -> Vec<PathBuf> {
        match self {
            SourceKind::Database => {
                let mut wal = path.as_os_str().to_owned();
                wal.push("-wal");
                vec![PathBuf::from(wal)]
            }
            SourceKind::Lines | SourceKind::Document => Vec::new(),
        }
    }

    /// Size and modification time (epoch ms) of the source and its companions: equal stamps
    /// mean nothing changed since the last read.
    pub fn stamp(self, path: &Path) -> std::io::Result<(u64, i64)> {
        self.stamp_with(path, &[])
    }

    /// [`SourceKind::stamp`] that also covers `side` (files beside the source that the adapter
    /// reads with it: a title, a workspace, a sidecar).
    pub fn stamp_with(self, path: &Path, side: &[PathBuf]) -> std::io::Result<(u64, i64)> {
        let meta = std::fs::metadata(path)?;
        let mut size = meta.len();
        let mut mtime = mtime_ms(&meta);
        for c in self.companions(path).iter().chain(side) {
            if let Ok(m) = std::fs::metadata(c) {
                // Sizes of both files, so a checkpoint that empties the log still changes it.
                size = size.wrapping_add(m.len().rotate_left(32));
                mtime = mtime.max(mtime_ms(&m));
            }
        }
        Ok((size, mtime))
    }
}

/// A file's modification time in epoch milliseconds (0 when the platform has none).
pub fn mtime_ms(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

/// One agent's transcript format.
pub trait ConversationAdapter: Send + Sync {
    /// The agent's name as users type it (`claude`, `codex`, `gemini`).
    fn name(&self) -> &'static str;

    /// Where this agent keeps transcripts on this machine (whether or not they exist yet).
    fn default_roots(&self, env: &Env) -> Vec<PathBuf>;

    /// Whether `path`, found under `root`, is a transcript this adapter reads.
    fn is_transcript(&self, root: &Path, path: &Path) -> bool;

    /// How the source at `path` is kept (one agent can have several kinds: Goose has a
    /// database and legacy JSONL files).
    fn source_kind(&self, _path: &Path) -> SourceKind {
        SourceKind::Lines
    }

    /// The source that a change of `changed` (under `root`) is a change of: the file itself when
    /// it is a transcript, the database whose `-wal` it is, or (for agents that spread one
    /// conversation over many files) the file the adapter reads for it.
    fn source_of(&self, root: &Path, changed: &Path) -> Option<PathBuf> {
        if self.is_transcript(root, changed) {
            return Some(changed.to_owned());
        }
        let name = changed.file_name()?.to_str()?;
        let db = name.strip_suffix("-wal")?;
        let db = changed.with_file_name(db);
        (self.is_transcript(root, &db) && self.source_kind(&db) == SourceKind::Database)
            .then_some(db)
    }

    /// Size and modification time that change whenever the source at `path` does: the store
    /// reads a source again only when its stamp changed. By default the file and its
    /// [`SourceKind::companions`]; an agent that spreads one conversation over many files
    /// covers them all.
    fn stamp(&self, _root: &Path, path: &Path) -> std::io::Result<(u64, i64)> {
        self.source_kind(path)
            .stamp_with(path, &self.side_files(path))
    }

    /// Files beside the source at `path` that the adapter reads with it (Copilot's
    /// `workspace.yaml`, a Roo task's `history_item.json`, Kiro's sidecar): a change of one is a
    /// change of the source. `source_of` must map each of them back to `path`.
    fn side_files(&self, _path: &Path) -> Vec<PathBuf> {
        Vec::new()
    }

    /// Files this agent keeps inside project folders rather than under a root of its own
    /// (Aider's `.aider.chat.history.md`, Crush's `.crush/crush.db`), relative to the project.
    /// Such an agent's roots are project folders, looked into only at these paths.
    fn project_files(&self) -> &'static [&'static str] {
        &[]
    }

    /// Every transcript under `root`, in the order they should be ingested (parents before the
    /// files that refer to them).
    fn discover(&self, root: &Path) -> Vec<PathBuf> {
        if !self.project_files().is_empty() {
            return self
                .project_files()
                .iter()
                .map(|f| root.join(f))
                .filter(|p| self.is_transcript(root, p) && check_project_file(root, p).is_ok())
                .collect();
        }
        let mut files = files_under(root, |p| self.is_transcript(root, p));
        files.sort_by_key(|p| (p.components().count(), p.clone()));
        files
    }

    /// Parses `path` from `cursor`, consuming about `max_bytes` of complete lines. Call again
    /// with the returned cursor until `at_end`.
    fn parse(
        &self,
        root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError>;
}

/// Every file under `root` that `keep` accepts. Links below `root` are not followed (see
/// [`check_inside`]); `root` itself may be one.
pub fn files_under(root: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .follow_root_links(true)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(walkdir::DirEntry::into_path)
        .filter(|p| keep(p))
        .collect()
}

/// Every built-in adapter. Adding an agent is one file in `adapters/` and one line here.
pub struct AdapterRegistry {
    adapters: Vec<Box<dyn ConversationAdapter>>,
}

impl Default for AdapterRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl AdapterRegistry {
    pub fn new() -> Self {
        AdapterRegistry {
            adapters: vec![
                Box::new(crate::adapters::claude::ClaudeAdapter),
                Box::new(crate::adapters::codex::CodexAdapter),
                Box::new(crate::adapters::gemini::GeminiAdapter),
                Box::new(crate::adapters::cursor::CursorAdapter),
                Box::new(crate::adapters::cursor_ide::CursorIdeAdapter),
                Box::new(crate::adapters::copilot::CopilotAdapter),
                Box::new(crate::adapters::opencode::OpenCodeAdapter),
                Box::new(crate::adapters::qwen::QwenAdapter),
                Box::new(crate::adapters::antigravity::AntigravityAdapter),
                Box::new(crate::adapters::cline::ClineAdapter),
                Box::new(crate::adapters::roo::RooAdapter),
                Box::new(crate::adapters::kiro::KiroAdapter),
                Box::new(crate::adapters::goose::GooseAdapter),
                Box::new(crate::adapters::crush::CrushAdapter),
                Box::new(crate::adapters::aider::AiderAdapter),
                Box::new(crate::adapters::amp::AmpAdapter),
                Box::new(crate::adapters::pi::PiAdapter),
            ],
        }
    }

    pub fn all(&self) -> impl Iterator<Item = &dyn ConversationAdapter> {
        self.adapters.iter().map(|a| a.as_ref())
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.all().map(|a| a.name()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&dyn ConversationAdapter> {
        self.all().find(|a| a.name() == name)
    }

    /// The default roots of every adapter that exist on this machine.
    pub fn existing_roots(&self, env: &Env) -> Vec<(&'static str, PathBuf)> {
        self.all()
            .flat_map(|a| a.default_roots(env).into_iter().map(move |r| (a.name(), r)))
            .filter(|(_, r)| r.is_dir())
            .collect()
    }

    /// The adapter that reads `path` (under one of `roots`), if any.
    pub fn for_path<'a>(
        &'a self,
        roots: &'a [(String, PathBuf)],
        path: &Path,
    ) -> Option<(&'a dyn ConversationAdapter, &'a Path)> {
        roots.iter().find_map(|(name, root)| {
            let a = self.get(name)?;
            (path.starts_with(root) && a.is_transcript(root, path)).then_some((a, root.as_path()))
        })
    }

    /// The adapter, root and source that a change of `changed` is a change of (a database
    /// whose `-wal` changed, a multi-file conversation), if any.
    pub fn source_of<'a>(
        &'a self,
        roots: &'a [(String, PathBuf)],
        changed: &Path,
    ) -> Option<(&'a dyn ConversationAdapter, &'a Path, PathBuf)> {
        roots.iter().find_map(|(name, root)| {
            let a = self.get(name)?;
            if !changed.starts_with(root) {
                return None;
            }
            a.source_of(root, changed).map(|s| (a, root.as_path(), s))
        })
    }
}

/// One JSON record handed to an adapter by [`drive_jsonl`]: a value tree, or the typed view
/// an adapter asked [`drive_jsonl_as`] for.
pub(crate) struct Record<'a, T = serde_json::Value> {
    pub line: u64,
    pub offset: u64,
    pub value: T,
    _raw: std::marker::PhantomData<&'a [u8]>,
}

/// What an adapter produces while handling records.
#[derive(Default)]
pub(crate) struct Emit {
    pub out: ParseOutput,
}

impl Emit {
    pub(crate) fn push(&mut self, m: ParsedMessage) {
        self.out.messages.push(m);
    }

    /// Reports a record that is stored, but part of which could not be used.
    pub(crate) fn note<T>(&mut self, rec: &Record<'_, T>, reason: impl Into<String>) {
        self.out.issues.push(ParseIssue {
            line: rec.line,
            byte_offset: rec.offset,
            reason: reason.into(),
            kept: true,
        });
    }

    /// Reports a problem at a place of a source that has no JSONL record (a document's element,
    /// a database row): `line` is the element's index or row id.
    pub(crate) fn issue(&mut self, line: u64, reason: impl Into<String>, kept: bool) {
        self.out.issues.push(ParseIssue {
            line,
            // The position is the only key a problem without a byte offset has.
            byte_offset: line,
            reason: reason.into(),
            kept,
        });
    }

    /// Reports a record that was decoded but could not be used, and is skipped.
    pub(crate) fn skip<T>(&mut self, rec: &Record<'_, T>, reason: impl Into<String>) {
        self.out.issues.push(ParseIssue {
            line: rec.line,
            byte_offset: rec.offset,
            reason: reason.into(),
            kept: false,
        });
    }
}

/// Shared incremental JSONL loop: restores the adapter state from the cursor (or starts over
/// when the file shrank or its head changed), hands every complete, decodable line to
/// `on_record`, reports the others, stamps line/seq/raw on what the record produced, and
/// returns the output (whose cursor holds the state) together with the state itself.
pub(crate) fn drive_jsonl<S: Default + Serialize + DeserializeOwned>(
    path: &Path,
    cursor: &Cursor,
    max_bytes: usize,
    on_record: impl FnMut(&mut S, &mut Emit, Record<'_>),
) -> Result<(ParseOutput, S), ParseError> {
    drive_jsonl_as(path, cursor, max_bytes, on_record)
}

/// [`drive_jsonl`] with each record decoded into `T` (see [`reader::decode_record`]): an
/// adapter whose files are large reads the fields it uses without building a tree of the rest.
pub(crate) fn drive_jsonl_as<S: Default + Serialize + DeserializeOwned, T: DeserializeOwned>(
    path: &Path,
    cursor: &Cursor,
    max_bytes: usize,
    mut on_record: impl FnMut(&mut S, &mut Emit, Record<'_, T>),
) -> Result<(ParseOutput, S), ParseError> {
    let io = |source| ParseError::Io {
        path: path.to_owned(),
        source,
    };
    let mut cursor = cursor.clone();
    if cursor.offset > 0 && !still_same_file(path, &cursor).map_err(io)? {
        cursor = Cursor::default();
    }
    let mut chunk = reader::read_lines(path, cursor.offset, max_bytes).map_err(io)?;
    if chunk.past_end {
        // Shorter than the cursor, which only reading can tell for a `.zst` file: rewritten.
        cursor = Cursor::default();
        chunk = reader::read_lines(path, 0, max_bytes).map_err(io)?;
    }
    let mut state: S = if cursor.offset == 0 {
        S::default()
    } else {
        serde_json::from_value(cursor.state.clone()).unwrap_or_default()
    };
    let mut emit = Emit::default();
    let mut line_no = cursor.line;
    let mut consumed = chunk.data.len() as u64;

    let mut handle = |state: &mut S, emit: &mut Emit, line_no: u64, offset: u64, raw: &[u8]| {
        let trimmed = raw.trim_ascii();
        if trimmed.is_empty() {
            return;
        }
        // Every line format is one JSON object per line: anything else is reported here, once
        // for all adapters.
        match reader::decode_record::<T>(trimmed) {
            Ok(d) => {
                let issues_before = emit.out.issues.len();
                let before = emit.out.messages.len();
                on_record(
                    state,
                    emit,
                    Record {
                        line: line_no,
                        offset,
                        value: d.value,
                        _raw: std::marker::PhantomData,
                    },
                );
                for (i, m) in emit.out.messages[before..].iter_mut().enumerate() {
                    m.line = line_no;
                    m.seq = (line_no << 10) | (i as u64).min(1023);
                }
                if let Some(first) = emit.out.messages.get_mut(before) {
                    first.raw = Some(raw.to_vec());
                    // Reported as kept only when it was: a skipped record has its own issue.
                    if d.lossy_utf8 {
                        emit.out.issues.insert(
                            issues_before,
                            ParseIssue {
                                line: line_no,
                                byte_offset: offset,
                                reason: "invalid UTF-8, decoded with U+FFFD replacements".into(),
                                kept: true,
                            },
                        );
                    }
                }
            }
            Err(reason) => emit.out.issues.push(ParseIssue {
                line: line_no,
                byte_offset: offset,
                reason: reason.to_string(),
                kept: false,
            }),
        }
    };

    // A record longer than the limit: reported, and passed over once its end is known.
    if let Some(o) = chunk.oversized {
        let limit = reader::MAX_RECORD_BYTES >> 20;
        let line = line_no + 1;
        let reason = match o.len {
            Some(len) => {
                consumed = len + 1;
                line_no = line;
                format!("a record of {len} bytes, over the {limit} MiB limit: skipped")
            }
            None => format!(
                "a record of more than {limit} MiB whose end is not in the file (or past the first GiB of it): not read"
            ),
        };
        emit.out.issues.push(ParseIssue {
            line,
            byte_offset: cursor.offset,
            reason,
            kept: false,
        });
    }
    // A record consumed last time without its newline: the newline (alone on what looks like
    // an empty first line) ends that line, so it is not counted as a line of its own.
    let mut owed_newline = cursor.unterminated;
    for (offset, raw) in chunk.lines() {
        if std::mem::take(&mut owed_newline)
            && offset == cursor.offset
            && raw.trim_ascii().is_empty()
        {
            continue;
        }
        line_no += 1;
        handle(&mut state, &mut emit, line_no, offset, raw);
    }
    // Nothing complete was read: the newline is still owed.
    let mut unterminated = owed_newline && chunk.data.is_empty();
    let mut pending_tail = chunk.pending_tail;
    if pending_tail {
        // An unterminated last line that is already a complete JSON object was fully written
        // (a later newline cannot change it), so it is consumed; anything else waits.
        let tail = reader::read_lines_tail(path, cursor.offset + consumed).map_err(io)?;
        let t = tail.trim_ascii();
        if t.starts_with(b"{") && reader::decode_json(t).is_ok() {
            line_no += 1;
            handle(
                &mut state,
                &mut emit,
                line_no,
                cursor.offset + consumed,
                &tail,
            );
            consumed += tail.len() as u64;
            pending_tail = false;
            unterminated = true;
        }
    }
    let new_offset = cursor.offset + consumed;
    let head = if new_offset > 0 {
        Some(reader::head_fingerprint(path, new_offset).map_err(io)?)
    } else {
        None
    };
    emit.out.cursor = Cursor {
        offset: new_offset,
        line: line_no,
        head,
        state: serde_json::to_value(&state).unwrap_or_default(),
        unterminated,
    };
    emit.out.bytes = consumed;
    emit.out.at_end = chunk.at_end;
    emit.out.pending_tail = pending_tail;
    Ok((emit.out, state))
}

/// Whether the file at `path` is still the one the cursor was made for: not shorter, same head.
pub(crate) fn still_same_file(path: &Path, cursor: &Cursor) -> std::io::Result<bool> {
    if path.extension().is_none_or(|e| e != "zst") {
        let len = std::fs::metadata(path)?.len();
        if len < cursor.offset {
            return Ok(false);
        }
    }
    match &cursor.head {
        Some(h) => reader::head_matches(path, h),
        None => Ok(true),
    }
}

// ---- small helpers shared by the adapters ----

/// RFC 3339 / ISO-8601 text or a number (seconds or milliseconds) to epoch milliseconds.
pub(crate) fn parse_ts(v: &serde_json::Value) -> Option<i64> {
    match v {
        serde_json::Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|d| d.timestamp_millis()),
        serde_json::Value::Number(n) => {
            let n = n.as_f64()?;
            // Before 1973 in ms means it was seconds.
            Some(if n.abs() < 1e11 { n * 1000.0 } else { n } as i64)
        }
        _ => None,
    }
}

pub(crate) fn str_of<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(serde_json::Value::as_str)
}

pub(crate) fn string_of(v: &serde_json::Value, key: &str) -> Option<String> {
    str_of(v, key).filter(|s| !s.is_empty()).map(str::to_owned)
}

pub(crate) fn u64_of(v: &serde_json::Value, key: &str) -> u64 {
    v.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0)
}

/// A dollar figure an agent recorded (`cost`: 0.0123): a finite amount from 0 to a million;
/// anything else is no figure.
pub(crate) fn cost_of(v: &serde_json::Value, key: &str) -> Option<f64> {
    v.get(key)
        .and_then(serde_json::Value::as_f64)
        .filter(|c| c.is_finite() && (0.0..1e6).contains(c))
}

/// A folder from an override variable (`PI_CODING_AGENT_DIR`, `QWEN_HOME`, `KIRO_HOME`, …) with
/// `~` and `~/…` resolved against the home folder, as those agents do; any other value as it is.
pub(crate) fn expand_home(dir: &str, env: &Env) -> PathBuf {
    match dir.strip_prefix('~') {
        Some("") => env.home.clone(),
        Some(rest) if rest.starts_with('/') || rest.starts_with('\\') => env.home.join(&rest[1..]),
        _ => PathBuf::from(dir),
    }
}

/// A new message with everything but the essentials empty.
pub(crate) fn blank(
    agent: &'static str,
    session_id: &str,
    message_id: String,
    role: crate::Role,
    kind: crate::MessageKind,
) -> ParsedMessage {
    ParsedMessage {
        agent,
        session_id: session_id.to_owned(),
        message_id,
        parent_id: None,
        role,
        kind,
        prompt_number: 0,
        timestamp: None,
        cwd: None,
        git_branch: None,
        model: None,
        text: String::new(),
        tool_call: None,
        tool_result: None,
        usage: None,
        usage_key: None,
        cost_usd: None,
        agent_id: None,
        flags: Default::default(),
        line: 0,
        seq: 0,
        raw: None,
    }
}

/// Tool call `call` (its `name`, its input under key `input`, its id under key `id`) as the
/// message `new` makes of the call's text.
pub(crate) fn tool_call_of(
    call: &serde_json::Value,
    input: &str,
    id: &str,
    new: impl FnOnce(String) -> ParsedMessage,
) -> ParsedMessage {
    let name = str_of(call, "name").unwrap_or("unknown").to_owned();
    let input = call.get(input).cloned().unwrap_or(serde_json::Value::Null);
    let mut m = new(crate::text::tool_call_text(&name, &input));
    m.tool_call = Some(ToolCall {
        name,
        input,
        call_id: string_of(call, id),
    });
    m
}

/// A session's usage totals as the agent keeps them in its session row.
pub(crate) fn usage_of(
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
) -> Option<Usage> {
    (input + output + cache_read + cache_write > 0).then_some(Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: cache_read,
        cache_creation_tokens: cache_write,
        reasoning_tokens: 0,
    })
}

/// The first prompt as the session's title, unless this read already has a title for it.
pub(crate) fn offer_first_prompt(info: &mut SessionInfo, msgs: &[ParsedMessage]) {
    if info.title.is_some() {
        return;
    }
    if let Some(p) = msgs.iter().find(|m| m.kind == MessageKind::UserPrompt) {
        let t = crate::text::prompt_title(&p.text);
        if !t.is_empty() {
            info.title = Some((TitleSource::FirstPrompt, t));
        }
    }
}

/// What the messages made of one record (a row, a line) share when the record is split into one
/// message per part: ids `<base>` for part 0 and `<base>#<part>` after it, the prompt number,
/// time and folder, the model on assistant messages, and in a sub-agent's session the sidechain
/// flag with the session as agent id.
pub(crate) struct RecordCtx<'a> {
    pub agent: &'static str,
    pub sid: &'a str,
    pub base: &'a str,
    pub number: u32,
    pub timestamp: Option<i64>,
    pub cwd: Option<&'a str>,
    pub model: Option<&'a str>,
    pub sub: bool,
}

impl RecordCtx<'_> {
    /// The message of part `i`, with nothing but what the record gives.
    pub(crate) fn message(&self, i: usize, role: Role, kind: MessageKind) -> ParsedMessage {
        let id = if i == 0 {
            self.base.to_owned()
        } else {
            format!("{}#{i}", self.base)
        };
        let mut m = blank(self.agent, self.sid, id, role, kind);
        m.prompt_number = self.number;
        m.timestamp = self.timestamp;
        m.cwd = self.cwd.map(str::to_owned);
        if role == Role::Assistant {
            m.model = self.model.map(str::to_owned);
        }
        m.flags.sidechain = self.sub;
        m.agent_id = self.sub.then(|| self.sid.to_owned());
        m
    }

    /// The message of part `i` holding `text`.
    pub(crate) fn text(
        &self,
        i: usize,
        role: Role,
        kind: MessageKind,
        text: impl Into<String>,
    ) -> ParsedMessage {
        let mut m = self.message(i, role, kind);
        m.text = text.into();
        m
    }

    /// Part `i` as the call of tool `name` with `input`.
    pub(crate) fn tool_call(
        &self,
        i: usize,
        name: String,
        input: serde_json::Value,
        call_id: Option<String>,
    ) -> ParsedMessage {
        let mut m = self.message(i, Role::Assistant, MessageKind::ToolCall);
        m.text = crate::text::tool_call_text(&name, &input);
        m.tool_call = Some(ToolCall {
            name,
            input,
            call_id,
        });
        m
    }

    /// Part `i` as the result `text` of tool call `call_id`.
    pub(crate) fn tool_result(
        &self,
        i: usize,
        text: String,
        call_id: Option<String>,
        is_error: bool,
    ) -> ParsedMessage {
        let mut m = self.text(i, Role::Tool, MessageKind::ToolResult, text);
        m.tool_result = Some(ToolResult { call_id, is_error });
        m
    }

    /// The prompt of a record: what the human sent, as one message at its first text part: the
    /// texts of its text parts and placeholders for its attachments, in order, empty ones left
    /// out. `piece` tells a text part (`(true, its text)`) and an attachment (`(false,
    /// placeholder)`) from the other parts (`None`).
    pub(crate) fn prompt<'v>(
        &self,
        parts: &'v [serde_json::Value],
        piece: impl Fn(&'v serde_json::Value) -> Option<(bool, &'v str)>,
    ) -> (usize, ParsedMessage) {
        let mut at = None;
        let mut texts = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            match piece(p) {
                Some((true, t)) => {
                    at.get_or_insert(i);
                    texts.push(t);
                }
                Some((false, t)) => texts.push(t),
                None => {}
            }
        }
        let at = at.unwrap_or(0);
        let text = texts
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        (at, self.text(at, Role::User, MessageKind::UserPrompt, text))
    }
}
