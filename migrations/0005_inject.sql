-- The injection log: one row per hook call that asked the service for memory (`memex inject`),
-- for `memex stats` and /api/stats (hit rate, tokens per day, latency). Numbers only; the
-- prompt's text only when `[inject] record_prompts` is on (redacted like everything stored).
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
CREATE TABLE injections (
    id              INTEGER PRIMARY KEY,
    ts              INTEGER NOT NULL,   -- epoch ms, UTC
    mode            TEXT NOT NULL,      -- full | smart
    session_id      TEXT,               -- the agent session that asked
    project         TEXT,               -- the project searched (NULL: all projects)
    items           INTEGER NOT NULL,   -- items injected (0: nothing passed)
    tokens          INTEGER NOT NULL,   -- estimated tokens injected
    best_confidence REAL,               -- smart: the best candidate's confidence, injected or not
    latency_ms      REAL NOT NULL,      -- in the service, from request to answer
    skipped         TEXT,               -- why nothing was looked up (e.g. no vectors), else NULL
    refs            TEXT NOT NULL,      -- JSON: what was injected (level, session, prompt, confidence)
    prompt          TEXT                -- only with record_prompts
);
CREATE INDEX injections_ts ON injections (ts);
