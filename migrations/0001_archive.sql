-- L0 archive: sessions, every message losslessly, the files they came from, full-text search.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.

CREATE TABLE sessions (
    id                INTEGER PRIMARY KEY,
    agent             TEXT NOT NULL,
    session_id        TEXT NOT NULL,
    project_path      TEXT,            -- the session's cwd
    git_root          TEXT,            -- the git work tree holding project_path, when found
    project_hash      TEXT,            -- Gemini's sha256 of the project path
    git_branch        TEXT,
    model             TEXT,
    title             TEXT,
    title_rank        INTEGER NOT NULL DEFAULT 0,
    parent_session_id TEXT,
    is_subagent       INTEGER NOT NULL DEFAULT 0,
    source_path       TEXT,
    started_at        INTEGER,         -- epoch ms, UTC
    updated_at        INTEGER,
    message_count     INTEGER NOT NULL DEFAULT 0,
    prompt_count      INTEGER NOT NULL DEFAULT 0,
    -- processing cursors for the compact layer
    last_processed_prompt INTEGER NOT NULL DEFAULT 0,
    UNIQUE (agent, session_id)
);
CREATE INDEX sessions_updated ON sessions (updated_at);
CREATE INDEX sessions_project ON sessions (project_path);

CREATE TABLE source_files (
    id          INTEGER PRIMARY KEY,
    path        TEXT NOT NULL UNIQUE,
    agent       TEXT NOT NULL,
    root        TEXT NOT NULL,
    cursor      TEXT NOT NULL,      -- JSON: offset, line, head fingerprint, adapter state
    size        INTEGER NOT NULL DEFAULT 0,
    mtime       INTEGER NOT NULL DEFAULT 0,  -- epoch ms
    fingerprint TEXT,
    bad_lines   INTEGER NOT NULL DEFAULT 0,
    last_error  TEXT,
    gone        INTEGER NOT NULL DEFAULT 0,  -- the agent deleted the file; its messages stay
    updated_at  INTEGER NOT NULL
);

-- The original records, byte for byte (after redaction), packed in order into zstd blocks of
-- about 128 KiB: transcripts compress several times better together than one record at a time.
CREATE TABLE raw_blocks (
    id   INTEGER PRIMARY KEY,
    data BLOB NOT NULL
);

CREATE TABLE messages (
    id             INTEGER PRIMARY KEY,  -- also the rowid of messages_fts
    session_pk     INTEGER NOT NULL REFERENCES sessions (id),
    message_id     TEXT NOT NULL,
    source_file_id INTEGER REFERENCES source_files (id),
    line           INTEGER NOT NULL,
    seq            INTEGER NOT NULL,
    parent_id      TEXT,
    role           TEXT NOT NULL,
    kind           TEXT NOT NULL,
    prompt_number  INTEGER NOT NULL,
    ts             INTEGER,
    cwd            TEXT,
    git_branch     TEXT,
    model          TEXT,
    text           TEXT,                 -- NULL when stored compressed in text_z
    text_z         BLOB,                 -- zstd of text, for long texts
    tool_name      TEXT,
    tool_call_id   TEXT,
    tool_input     TEXT,                 -- JSON
    is_error       INTEGER NOT NULL DEFAULT 0,
    usage_key      TEXT,
    input_tokens   INTEGER,
    output_tokens  INTEGER,
    cache_read_tokens     INTEGER,
    cache_creation_tokens INTEGER,
    reasoning_tokens      INTEGER,
    agent_id       TEXT,
    sidechain      INTEGER NOT NULL DEFAULT 0,
    inherited      INTEGER NOT NULL DEFAULT 0,
    duplicate      INTEGER NOT NULL DEFAULT 0,
    active         INTEGER NOT NULL DEFAULT 1,  -- 0: rewound / rolled back / dropped by a checkpoint
    redactions     INTEGER NOT NULL DEFAULT 0,
    raw_block      INTEGER REFERENCES raw_blocks (id),  -- the original record, on a record's first
    raw_offset     INTEGER,              -- message: bytes [raw_offset, raw_offset + raw_len)
    raw_len        INTEGER,              -- of the decompressed block
    UNIQUE (session_pk, message_id)
);
-- Lookups by session use the unique (session_pk, message_id) index: no second index needed.

CREATE TABLE parse_issues (
    id             INTEGER PRIMARY KEY,
    source_file_id INTEGER NOT NULL REFERENCES source_files (id),
    line           INTEGER NOT NULL,
    byte_offset    INTEGER NOT NULL,
    reason         TEXT NOT NULL,
    kept           INTEGER NOT NULL,
    UNIQUE (source_file_id, byte_offset)
);

-- Contentless: the indexed text (with CJK runs expanded into bigrams) is not stored twice.
CREATE VIRTUAL TABLE messages_fts USING fts5 (
    body,
    content = '',
    contentless_delete = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
-- Buffer 16 MiB of index data in memory before writing a segment (default 1 MiB), and merge
-- segments 16 at a time (default 4): a third less import time for the same search latency
-- (BENCHMARKS.md).
INSERT INTO messages_fts (messages_fts, rank) VALUES ('hashsize', 16777216);
INSERT INTO messages_fts (messages_fts, rank) VALUES ('automerge', 16);
