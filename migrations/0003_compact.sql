-- The compact layers (L1 observations, L2 talk summaries, L3 session summaries), their full-text
-- indexes, the persistent job queue that builds them, and LLM token spend per provider per day.
-- Every layer row records who wrote it (provider, model, prompt_version), what it cost
-- (tokens_input / tokens_output) and how sure it is (confidence); fallback_reason says why a
-- row was written by a later provider in the chain or by the heuristic.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.

CREATE TABLE observations (
    id               INTEGER PRIMARY KEY,
    session_pk       INTEGER NOT NULL REFERENCES sessions (id),
    prompt_number    INTEGER NOT NULL,
    first_message_id TEXT NOT NULL,      -- the tool call (the first of a merged run)
    last_message_id  TEXT NOT NULL,
    tool_name        TEXT NOT NULL,
    call_count       INTEGER NOT NULL,   -- > 1 for a merged run of the same operation
    type             TEXT NOT NULL,      -- bugfix | feature | refactor | change | discovery | decision
    title            TEXT NOT NULL,
    subtitle         TEXT NOT NULL,
    facts            TEXT NOT NULL,      -- JSON array of strings
    narrative        TEXT NOT NULL,
    files_read       TEXT NOT NULL,      -- JSON array
    files_modified   TEXT NOT NULL,      -- JSON array
    ts               INTEGER,
    provider         TEXT NOT NULL,
    model            TEXT,
    prompt_version   TEXT NOT NULL,
    tokens_input     INTEGER NOT NULL DEFAULT 0,
    tokens_output    INTEGER NOT NULL DEFAULT 0,
    confidence       REAL NOT NULL,
    fallback_reason  TEXT,
    created_at       INTEGER NOT NULL,
    UNIQUE (session_pk, prompt_number, first_message_id)
);

CREATE TABLE talk_summaries (
    id              INTEGER PRIMARY KEY,
    session_pk      INTEGER NOT NULL REFERENCES sessions (id),
    prompt_number   INTEGER NOT NULL,
    user_request    TEXT NOT NULL,
    summary         TEXT NOT NULL,
    completed       TEXT NOT NULL,
    files_involved  TEXT NOT NULL,       -- JSON array
    raw_tokens      INTEGER NOT NULL,    -- estimated tokens of the messages it covers
    summary_tokens  INTEGER NOT NULL,    -- estimated tokens of this summary
    ts              INTEGER,
    provider        TEXT NOT NULL,
    model           TEXT,
    prompt_version  TEXT NOT NULL,
    tokens_input    INTEGER NOT NULL DEFAULT 0,
    tokens_output   INTEGER NOT NULL DEFAULT 0,
    confidence      REAL NOT NULL,
    fallback_reason TEXT,
    created_at      INTEGER NOT NULL,
    UNIQUE (session_pk, prompt_number)
);

CREATE TABLE session_summaries (
    id              INTEGER PRIMARY KEY,
    session_pk      INTEGER NOT NULL UNIQUE REFERENCES sessions (id),
    summary         TEXT NOT NULL,
    key_points      TEXT NOT NULL,       -- JSON array
    files_involved  TEXT NOT NULL,       -- JSON array
    technologies    TEXT NOT NULL,       -- JSON array
    talks_covered   INTEGER NOT NULL,    -- the highest prompt number whose L2 it was built from
    raw_tokens      INTEGER NOT NULL,
    provider        TEXT NOT NULL,
    model           TEXT,
    prompt_version  TEXT NOT NULL,
    tokens_input    INTEGER NOT NULL DEFAULT 0,
    tokens_output   INTEGER NOT NULL DEFAULT 0,
    confidence      REAL NOT NULL,
    fallback_reason TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);

CREATE VIRTUAL TABLE observations_fts USING fts5 (
    body, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE talk_summaries_fts USING fts5 (
    body, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
);
CREATE VIRTUAL TABLE session_summaries_fts USING fts5 (
    body, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
);

-- The queue. A job is (level, session, prompt number; 0 for L3). At most one pending or running
-- job per key; done jobs stay as history until the same key is queued again.
CREATE TABLE compact_jobs (
    id            INTEGER PRIMARY KEY,
    level         TEXT NOT NULL,          -- l1 | l2 | l3
    session_pk    INTEGER NOT NULL REFERENCES sessions (id),
    prompt_number INTEGER NOT NULL,
    regenerate    INTEGER NOT NULL DEFAULT 0,  -- replace an existing row
    state         TEXT NOT NULL,          -- pending | running | done | failed
    attempts      INTEGER NOT NULL DEFAULT 0,
    not_before    INTEGER NOT NULL DEFAULT 0,  -- epoch ms: waiting for a retry or a provider
    last_error    TEXT,
    reason        TEXT NOT NULL,          -- what queued it: talk-complete, idle, api, regenerate ...
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    UNIQUE (level, session_pk, prompt_number)
);
-- The oldest ready job (state, then id order), and a session's jobs.
CREATE INDEX compact_jobs_state ON compact_jobs (state, id);
CREATE INDEX compact_jobs_session ON compact_jobs (session_pk, state);

CREATE TABLE llm_usage (
    day           TEXT NOT NULL,          -- UTC date
    provider      TEXT NOT NULL,
    calls         INTEGER NOT NULL DEFAULT 0,
    tokens_input  INTEGER NOT NULL DEFAULT 0,
    tokens_output INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (day, provider)
) WITHOUT ROWID;

-- Heuristic rows, rows that fell back and rows that kept their provider's malformed output out.
CREATE TABLE compact_counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
