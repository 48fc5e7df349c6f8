//! Every sample file in `../shared/fixtures/more-agents` imports with the values its SOURCES.md
//! entry gives, read in place. One module per agent.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use ai_cli_session_collector::{
    AdapterRegistry, ConversationAdapter, Cursor, Edit, Env, MessageKind, ParseOutput,
    ParsedMessage, SessionInfo, parse_file,
};
use rusqlite::Connection;

mod aider;
mod amp;
mod antigravity;
mod cline;
mod copilot;
mod crush;
mod cursor;
mod cursor_ide;
mod goose;
mod kiro;
mod opencode;
mod pi;
mod qwen;
mod roo;

/// The more-agents fixtures folder (`MEMEX_MORE_FIXTURES` overrides it).
pub fn more() -> PathBuf {
    std::env::var_os("MEMEX_MORE_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/more-agents"),
        PathBuf::from,
    )
}

/// Parses `file` (relative to `root`, itself relative to the fixtures folder) with `agent`.
pub fn parse(agent: &str, root: &str, file: &str) -> ParseOutput {
    let reg = AdapterRegistry::new();
    let a = reg
        .get(agent)
        .unwrap_or_else(|| panic!("no adapter {agent}"));
    let root = more().join(root);
    let path = root.join(file);
    assert!(path.exists(), "missing fixture {}", path.display());
    assert!(
        a.is_transcript(&root, &path),
        "{agent} does not read {}",
        path.display()
    );
    parse_file(a, &root, &path).unwrap()
}

/// Every file `agent` discovers under `root`, parsed.
pub fn parse_all(agent: &str, root: &str) -> Vec<(PathBuf, ParseOutput)> {
    let reg = AdapterRegistry::new();
    let a = reg.get(agent).unwrap();
    let root = more().join(root);
    a.discover(&root)
        .into_iter()
        .map(|p| {
            let out = parse_file(a, &root, &p).unwrap();
            (p, out)
        })
        .collect()
}

/// The messages of one kind.
pub fn of_kind(out: &ParseOutput, kind: MessageKind) -> Vec<&ParsedMessage> {
    out.messages.iter().filter(|m| m.kind == kind).collect()
}

/// Real prompts (distinct prompt numbers of user prompts), in order.
pub fn prompt_texts(out: &ParseOutput) -> Vec<String> {
    of_kind(out, MessageKind::UserPrompt)
        .into_iter()
        .map(|m| m.text.clone())
        .collect()
}

/// Whether any message of `kind` holds `word`.
pub fn has_word(out: &ParseOutput, kind: MessageKind, word: &str) -> bool {
    out.messages
        .iter()
        .any(|m| m.kind == kind && m.text.contains(word))
}

/// Epoch milliseconds of an RFC 3339 time.
pub fn ms(rfc3339: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp_millis()
}

/// An environment with home `/home/u` and these variables.
pub fn env(vars: &[(&str, &str)]) -> Env {
    Env {
        home: PathBuf::from("/home/u"),
        vars: vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

/// The `type` of the file's records, one per record (from the raw each record's first message
/// carries).
pub fn record_types(out: &ParseOutput) -> Vec<String> {
    out.messages
        .iter()
        .filter_map(|m| m.raw.as_ref())
        .map(|raw| {
            let v: serde_json::Value = serde_json::from_slice(raw).unwrap();
            v["type"].as_str().unwrap().to_owned()
        })
        .collect()
}

pub fn count(types: &[String], ty: &str) -> usize {
    types.iter().filter(|t| *t == ty).count()
}

/// Every line of the file rides, byte for byte and in order, on exactly one message.
pub fn assert_raw_once(out: &ParseOutput, file: &Path) {
    let bytes = std::fs::read(file).unwrap();
    let lines: Vec<&[u8]> = bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.trim_ascii().is_empty())
        .collect();
    let raws: Vec<&[u8]> = out
        .messages
        .iter()
        .filter_map(|m| m.raw.as_deref())
        .collect();
    assert_eq!(raws, lines, "every record's raw exactly once, in order");
}

/// Parses `path` with `agent` in chunks of about `max` bytes from a default cursor.
pub fn chunked(agent: &str, root: &Path, path: &Path, max: usize) -> ParseOutput {
    let reg = AdapterRegistry::new();
    let a = reg.get(agent).unwrap();
    let mut all = ParseOutput::default();
    let mut cursor = Cursor::default();
    for _ in 0..10_000 {
        let out = a.parse(root, path, &cursor, max).unwrap();
        all.messages.extend(out.messages);
        all.sessions.extend(out.sessions);
        all.issues.extend(out.issues);
        cursor = out.cursor;
        if out.at_end {
            return all;
        }
    }
    panic!("no end after 10000 chunks");
}

/// Deterministic damage to a transcript: truncations, overwritten bytes, spliced spans, and
/// valid JSON whose values changed type (strings to numbers, objects to strings, …).
pub fn mutations(bytes: &[u8], n: usize) -> Vec<Vec<u8>> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m.max(1) as u64) as usize
    };
    fn retype(v: &mut serde_json::Value, pick: &mut dyn FnMut(usize) -> usize) {
        use serde_json::Value;
        match v {
            Value::Object(o) => o.values_mut().for_each(|x| retype(x, pick)),
            Value::Array(a) => a.iter_mut().for_each(|x| retype(x, pick)),
            _ => {}
        }
        if pick(5) == 0 {
            *v = match pick(5) {
                0 => Value::Null,
                1 => Value::from(-7),
                2 => Value::from("x"),
                3 => serde_json::json!([{"type": 1}]),
                _ => serde_json::json!({"text": 2}),
            };
        }
    }
    (0..n)
        .map(|i| {
            let mut b = bytes.to_vec();
            match i % 4 {
                0 => b.truncate(next(b.len() + 1)),
                1 => {
                    for _ in 0..8 {
                        let p = next(b.len());
                        b[p] = next(256) as u8;
                    }
                }
                2 => {
                    let s = next(b.len());
                    let e = (s + next(400)).min(b.len());
                    let span = b[s..e].to_vec();
                    let at = next(b.len());
                    b.splice(at..at, span);
                }
                _ => {
                    let mut out = Vec::new();
                    for line in b.split(|&c| c == b'\n').filter(|l| !l.is_empty()) {
                        match serde_json::from_slice::<serde_json::Value>(line) {
                            Ok(mut v) => {
                                retype(&mut v, &mut next);
                                out.extend(serde_json::to_vec(&v).unwrap());
                            }
                            // Not JSON (workspace.yaml): kept as it is.
                            Err(_) => out.extend_from_slice(line),
                        }
                        out.push(b'\n');
                    }
                    b = out;
                }
            }
            b
        })
        .collect()
}

/// Parses a damaged copy with `agent`, whole and in 64-byte chunks: never a panic, every
/// record's raw at most once.
pub fn survives(agent: &str, root: &Path, path: &Path, bytes: &[u8]) {
    let reg = AdapterRegistry::new();
    let a = reg.get(agent).unwrap();
    std::fs::write(path, bytes).unwrap();
    let whole = parse_file(a, root, path).unwrap();
    let lines = bytes.split(|&c| c == b'\n').count();
    assert!(whole.messages.iter().filter(|m| m.raw.is_some()).count() <= lines);
    let mut cursor = Cursor::default();
    for _ in 0..100_000 {
        let out = a.parse(root, path, &cursor, 64).unwrap();
        cursor = out.cursor;
        if out.at_end {
            return;
        }
    }
    panic!("no end");
}

// ---- databases read while another connection writes them (goose.rs, crush.rs) ----

/// The record a message carries, as JSON.
pub fn raw_json(m: &ParsedMessage) -> serde_json::Value {
    serde_json::from_slice(m.raw.as_deref().expect("raw")).expect("raw is JSON")
}

/// How many rows `table` of database `db` holds.
pub fn count_rows(db: &Path, table: &str) -> usize {
    let c = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap() as usize
}

/// What the archive holds: (session, message id) → (kind, text, prompt number), upserted read
/// after read.
pub type Archive = BTreeMap<(String, String), (MessageKind, String, u32)>;

/// Everything one parse call after another returns until the adapter is at the end.
pub struct Drained {
    pub messages: Vec<ParsedMessage>,
    pub sessions: Vec<SessionInfo>,
    pub edits: Vec<Edit>,
    pub cursor: Cursor,
    pub calls: usize,
}

/// Parses `path` from `cursor` until the adapter is at the end; no issues.
pub fn drain(
    a: &dyn ConversationAdapter,
    root: &Path,
    path: &Path,
    cursor: &Cursor,
    max_bytes: usize,
) -> Drained {
    let mut d = Drained {
        messages: Vec::new(),
        sessions: Vec::new(),
        edits: Vec::new(),
        cursor: cursor.clone(),
        calls: 0,
    };
    loop {
        let out = a.parse(root, path, &d.cursor, max_bytes).unwrap();
        assert!(out.issues.is_empty(), "{:?}", out.issues);
        d.calls += 1;
        d.messages.extend(out.messages);
        d.sessions.extend(out.sessions);
        d.edits.extend(out.edits);
        d.cursor = out.cursor;
        if out.at_end {
            return d;
        }
        assert!(d.calls < 10_000, "no end");
    }
}

/// Upserts `msgs` into the archive, as the store would.
pub fn store(archive: &mut Archive, msgs: &[ParsedMessage]) {
    for m in msgs {
        archive.insert(
            (m.session_id.clone(), m.message_id.clone()),
            (m.kind, m.text.clone(), m.prompt_number),
        );
    }
}

/// The message ids of `msgs`.
pub fn ids(msgs: &[ParsedMessage]) -> BTreeSet<String> {
    msgs.iter().map(|m| m.message_id.clone()).collect()
}

/// A writer like the agent's own: WAL mode, a busy timeout.
pub fn writer(path: &Path) -> Connection {
    let w = Connection::open(path).unwrap();
    w.busy_timeout(std::time::Duration::from_secs(5)).unwrap();
    let mode: String = w
        .query_row("PRAGMA journal_mode = wal", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    w
}

/// Every row of `tables` in `db`, `n` rows in all, carries its record exactly once in `out`.
pub fn assert_rows_once(out: &ParseOutput, db: &Path, tables: &[&str], n: usize) {
    let rows: usize = tables.iter().map(|t| count_rows(db, t)).sum();
    assert_eq!(rows, n);
    let raws: Vec<&ParsedMessage> = out.messages.iter().filter(|m| m.raw.is_some()).collect();
    assert_eq!(raws.len(), rows);
    let records: BTreeSet<String> = raws
        .iter()
        .map(|m| serde_json::to_string(&raw_json(m)).unwrap())
        .collect();
    assert_eq!(records.len(), rows, "a row's record appears twice");
}

/// Replaces `db` with a database that `sql` creates, without all of the agent's tables, and
/// parses it: no messages, one issue (returned for a closer look).
pub fn parse_foreign_database(
    a: &dyn ConversationAdapter,
    root: &Path,
    db: &Path,
    sql: &str,
) -> ParseOutput {
    std::fs::remove_file(db).unwrap();
    Connection::open(db).unwrap().execute_batch(sql).unwrap();
    let out = a.parse(root, db, &Cursor::default(), 1 << 20).unwrap();
    assert!(out.messages.is_empty());
    assert_eq!(out.issues.len(), 1);
    out
}

/// A database read again and again while the agent writes it, as the service reads it: the
/// cursor after the last read and the archive of everything read, upserted read after read.
pub struct Follow<'a> {
    a: &'a dyn ConversationAdapter,
    root: &'a Path,
    db: &'a Path,
    pub cursor: Cursor,
    pub archive: Archive,
}

impl<'a> Follow<'a> {
    /// Reads `db` whole; again in the smallest steps, one row at a time (the same messages);
    /// and again from where the whole read ended (nothing changed: nothing new).
    pub fn start(a: &'a dyn ConversationAdapter, root: &'a Path, db: &'a Path) -> Follow<'a> {
        let first = drain(a, root, db, &Cursor::default(), 1 << 20);
        let mut archive = Archive::new();
        store(&mut archive, &first.messages);
        let small = drain(a, root, db, &Cursor::default(), 1);
        assert!(small.calls > 5, "{} calls", small.calls);
        assert_eq!(small.messages, first.messages);
        let again = drain(a, root, db, &first.cursor, 1 << 20);
        assert!(again.messages.is_empty() && again.edits.is_empty());
        Follow {
            a,
            root,
            db,
            cursor: again.cursor,
            archive,
        }
    }

    /// The next read: what it took, also stored in the archive; the cursor moves past it.
    pub fn read(&mut self) -> Drained {
        let d = drain(self.a, self.root, self.db, &self.cursor, 1 << 20);
        store(&mut self.archive, &d.messages);
        self.cursor = d.cursor.clone();
        d
    }

    /// Answer row `id` (of prompt `number`) rewritten in place 20 times by `rewrite`, which
    /// returns the text it wrote, and read after each rewrite but every `skip`-th (sometimes two
    /// rewrites come between reads): each read takes that row alone again, as one message with
    /// its record and the latest text. Returns the last text, not read yet.
    pub fn assert_rewritten_in_place(
        &mut self,
        id: &str,
        number: u32,
        skip: usize,
        mut rewrite: impl FnMut(usize) -> String,
    ) -> String {
        let mut last = String::new();
        for i in 1..=20 {
            last = rewrite(i);
            if i % skip == 0 {
                continue;
            }
            let d = self.read();
            assert_eq!(
                ids(&d.messages),
                BTreeSet::from([id.to_owned()]),
                "update {i}"
            );
            let m = &d.messages[0];
            assert_eq!(
                (m.kind, m.text.as_str(), m.prompt_number),
                (MessageKind::AssistantText, last.as_str(), number),
                "update {i}"
            );
            assert!(m.raw.is_some(), "update {i}");
        }
        last
    }

    /// The next read after `sql` (with `?1` for `sid`) updated the row of session `sid`: that
    /// row alone, taken again as the session's meta message.
    pub fn assert_session_row_again(&mut self, w: &Connection, sql: &str, sid: &str) -> Drained {
        w.execute(sql, [sid]).unwrap();
        let d = self.read();
        assert_eq!(ids(&d.messages), BTreeSet::from(["session".to_owned()]));
        d
    }

    /// A clean read agrees with the archive the incremental reads made.
    pub fn assert_clean_read_agrees(&self) {
        let clean = drain(self.a, self.root, self.db, &Cursor::default(), 1 << 20);
        let mut fresh = Archive::new();
        store(&mut fresh, &clean.messages);
        assert_eq!(fresh, self.archive);
    }

    /// Session `sid` and its messages deleted by `w` (the writer's last change): nothing is
    /// reported, the archive keeps the `kept` rows it read of them, and a clean read agrees with
    /// the archive without them.
    pub fn assert_deleted_session_kept(&mut self, w: Connection, sid: &str, kept: usize) {
        w.execute_batch(&format!(
            "DELETE FROM messages WHERE session_id = '{sid}'; DELETE FROM sessions WHERE id = '{sid}';"
        ))
        .unwrap();
        drop(w);
        let d = self.read();
        assert!(d.messages.is_empty(), "{:?}", ids(&d.messages));
        assert!(d.edits.is_empty());
        assert_eq!(self.archive.keys().filter(|(s, _)| s == sid).count(), kept);
        self.archive.retain(|(s, _), _| s != sid);
        self.assert_clean_read_agrees();
    }
}
