-- Usage and costs (issue 46): every model call's tokens, and their roll-up per quarter hour,
-- session and model, so that a report over years of sessions reads a few thousand rows. New
-- messages enter in one pass at the end of each write (`memex_store::usage::catch_up`: import,
-- the watcher, sync); triggers follow messages rewritten or forgotten.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.

-- What an agent itself says a call (or, for a cumulative key, the session so far) cost, in US
-- dollars: shown beside Memex's own figure, never instead of it.
ALTER TABLE messages ADD COLUMN cost_usd REAL;

-- How each agent counts: whether its input count includes the tokens read from cache (OpenAI
-- and Gemini style) and whether its output count leaves out reasoning (Gemini's thoughts).
-- Agents not listed count as Anthropic does: input without cache, reasoning inside output.
CREATE TABLE usage_rules (
    agent                  TEXT PRIMARY KEY,
    input_has_cache_read   INTEGER NOT NULL,
    output_lacks_reasoning INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO usage_rules VALUES
    ('codex', 1, 0),
    ('gemini', 1, 1),
    ('qwen', 1, 1),
    ('cline', 1, 0),
    ('roo', 1, 0);

-- One row per model call: per session and usage key the largest of each count (agents repeat a
-- call's usage on several records). Counts are billed tokens: `input_tokens` without cache
-- reads, `output_tokens` with reasoning; `reasoning_tokens` is the part of output that was.
-- A cumulative key (Codex's `thread-total`) becomes one row per record, each holding what the
-- record added to the counters before it (`thread-total#<message id>`), so a long session's
-- tokens fall on the days they were spent.
CREATE TABLE usage_calls (
    session_pk            INTEGER NOT NULL REFERENCES sessions (id),
    usage_key             TEXT NOT NULL,
    ts                    INTEGER NOT NULL,  -- epoch ms of the call's first record
    model                 TEXT NOT NULL,     -- '' when the agent did not say
    records               INTEGER NOT NULL,  -- messages carrying this call's usage
    input_tokens          INTEGER NOT NULL,
    output_tokens         INTEGER NOT NULL,
    cache_read_tokens     INTEGER NOT NULL,
    cache_creation_tokens INTEGER NOT NULL,
    reasoning_tokens      INTEGER NOT NULL,
    cost_usd              REAL,
    PRIMARY KEY (session_pk, usage_key)
) WITHOUT ROWID;

-- Calls summed per quarter hour (every time zone's day starts on one), session and model. The
-- `*_above` columns hold, per call, the tokens past 200,000 (long-context prices apply to them).
CREATE TABLE usage_quarters (
    quarter      INTEGER NOT NULL,           -- ts / 900000
    session_pk   INTEGER NOT NULL,
    model        TEXT NOT NULL,
    calls        INTEGER NOT NULL,
    first_ts     INTEGER NOT NULL,
    last_ts      INTEGER NOT NULL,
    input        INTEGER NOT NULL,
    output       INTEGER NOT NULL,
    cache_read   INTEGER NOT NULL,
    cache_write  INTEGER NOT NULL,
    reasoning    INTEGER NOT NULL,
    input_above       INTEGER NOT NULL,
    output_above      INTEGER NOT NULL,
    cache_read_above  INTEGER NOT NULL,
    cache_write_above INTEGER NOT NULL,
    agent_cost   REAL NOT NULL,              -- the agents' own figures, where they gave one
    agent_costed INTEGER NOT NULL,           -- calls that had one
    PRIMARY KEY (quarter, session_pk, model)
) WITHOUT ROWID;
CREATE INDEX usage_quarters_session ON usage_quarters (session_pk);

-- The roll-up follows `usage_calls`, which changes at the end of a write (the pass below) or
-- when a stored message is rewritten or forgotten.
CREATE TRIGGER usage_quarters_add AFTER INSERT ON usage_calls
BEGIN
    INSERT INTO usage_quarters VALUES (
        NEW.ts / 900000, NEW.session_pk, NEW.model, 1, NEW.ts, NEW.ts,
        NEW.input_tokens, NEW.output_tokens, NEW.cache_read_tokens, NEW.cache_creation_tokens,
        NEW.reasoning_tokens,
        MAX(NEW.input_tokens - 200000, 0), MAX(NEW.output_tokens - 200000, 0),
        MAX(NEW.cache_read_tokens - 200000, 0), MAX(NEW.cache_creation_tokens - 200000, 0),
        COALESCE(NEW.cost_usd, 0), NEW.cost_usd IS NOT NULL)
    ON CONFLICT (quarter, session_pk, model) DO UPDATE SET
        calls = calls + 1,
        first_ts = MIN(first_ts, excluded.first_ts),
        last_ts = MAX(last_ts, excluded.last_ts),
        input = input + excluded.input,
        output = output + excluded.output,
        cache_read = cache_read + excluded.cache_read,
        cache_write = cache_write + excluded.cache_write,
        reasoning = reasoning + excluded.reasoning,
        input_above = input_above + excluded.input_above,
        output_above = output_above + excluded.output_above,
        cache_read_above = cache_read_above + excluded.cache_read_above,
        cache_write_above = cache_write_above + excluded.cache_write_above,
        agent_cost = agent_cost + excluded.agent_cost,
        agent_costed = agent_costed + excluded.agent_costed;
END;

CREATE TRIGGER usage_quarters_remove AFTER DELETE ON usage_calls
BEGIN
    UPDATE OR IGNORE usage_quarters SET
        calls = calls - 1,
        input = input - OLD.input_tokens,
        output = output - OLD.output_tokens,
        cache_read = cache_read - OLD.cache_read_tokens,
        cache_write = cache_write - OLD.cache_creation_tokens,
        reasoning = reasoning - OLD.reasoning_tokens,
        input_above = input_above - MAX(OLD.input_tokens - 200000, 0),
        output_above = output_above - MAX(OLD.output_tokens - 200000, 0),
        cache_read_above = cache_read_above - MAX(OLD.cache_read_tokens - 200000, 0),
        cache_write_above = cache_write_above - MAX(OLD.cache_creation_tokens - 200000, 0),
        agent_cost = agent_cost - COALESCE(OLD.cost_usd, 0),
        agent_costed = agent_costed - (OLD.cost_usd IS NOT NULL)
    WHERE quarter = OLD.ts / 900000 AND session_pk = OLD.session_pk AND model = OLD.model;
    DELETE FROM usage_quarters
    WHERE quarter = OLD.ts / 900000 AND session_pk = OLD.session_pk AND model = OLD.model
      AND calls <= 0;
END;

-- A changed call leaves its quarter and enters its (maybe other) quarter again. (A record that
-- only repeats a call's usage changes nothing here.)
CREATE TRIGGER usage_quarters_change AFTER UPDATE ON usage_calls
WHEN OLD.ts IS NOT NEW.ts OR OLD.model IS NOT NEW.model
  OR OLD.input_tokens IS NOT NEW.input_tokens OR OLD.output_tokens IS NOT NEW.output_tokens
  OR OLD.cache_read_tokens IS NOT NEW.cache_read_tokens
  OR OLD.cache_creation_tokens IS NOT NEW.cache_creation_tokens
  OR OLD.reasoning_tokens IS NOT NEW.reasoning_tokens OR OLD.cost_usd IS NOT NEW.cost_usd
BEGIN
    UPDATE OR IGNORE usage_quarters SET
        calls = calls - 1,
        input = input - OLD.input_tokens,
        output = output - OLD.output_tokens,
        cache_read = cache_read - OLD.cache_read_tokens,
        cache_write = cache_write - OLD.cache_creation_tokens,
        reasoning = reasoning - OLD.reasoning_tokens,
        input_above = input_above - MAX(OLD.input_tokens - 200000, 0),
        output_above = output_above - MAX(OLD.output_tokens - 200000, 0),
        cache_read_above = cache_read_above - MAX(OLD.cache_read_tokens - 200000, 0),
        cache_write_above = cache_write_above - MAX(OLD.cache_creation_tokens - 200000, 0),
        agent_cost = agent_cost - COALESCE(OLD.cost_usd, 0),
        agent_costed = agent_costed - (OLD.cost_usd IS NOT NULL)
    WHERE quarter = OLD.ts / 900000 AND session_pk = OLD.session_pk AND model = OLD.model;
    DELETE FROM usage_quarters
    WHERE quarter = OLD.ts / 900000 AND session_pk = OLD.session_pk AND model = OLD.model
      AND calls <= 0;
    INSERT INTO usage_quarters VALUES (
        NEW.ts / 900000, NEW.session_pk, NEW.model, 1, NEW.ts, NEW.ts,
        NEW.input_tokens, NEW.output_tokens, NEW.cache_read_tokens, NEW.cache_creation_tokens,
        NEW.reasoning_tokens,
        MAX(NEW.input_tokens - 200000, 0), MAX(NEW.output_tokens - 200000, 0),
        MAX(NEW.cache_read_tokens - 200000, 0), MAX(NEW.cache_creation_tokens - 200000, 0),
        COALESCE(NEW.cost_usd, 0), NEW.cost_usd IS NOT NULL)
    ON CONFLICT (quarter, session_pk, model) DO UPDATE SET
        calls = calls + 1,
        first_ts = MIN(first_ts, excluded.first_ts),
        last_ts = MAX(last_ts, excluded.last_ts),
        input = input + excluded.input,
        output = output + excluded.output,
        cache_read = cache_read + excluded.cache_read,
        cache_write = cache_write + excluded.cache_write,
        reasoning = reasoning + excluded.reasoning,
        input_above = input_above + excluded.input_above,
        output_above = output_above + excluded.output_above,
        cache_read_above = cache_read_above + excluded.cache_read_above,
        cache_write_above = cache_write_above + excluded.cache_write_above,
        agent_cost = agent_cost + excluded.agent_cost,
        agent_costed = agent_costed + excluded.agent_costed;
END;

-- A message's usage, billed: the agent's rule applied (see usage_rules); the session's model
-- when the record does not name one.
CREATE VIEW usage_billed AS
SELECT m.id, m.session_pk, m.usage_key, COALESCE(m.model, s.model) AS model, m.cost_usd,
       COALESCE(m.ts, s.started_at, s.updated_at, 0) AS ts,
       CASE WHEN r.input_has_cache_read
            THEN MAX(COALESCE(m.input_tokens, 0) - COALESCE(m.cache_read_tokens, 0), 0)
            ELSE COALESCE(m.input_tokens, 0) END AS input_tokens,
       COALESCE(m.output_tokens, 0)
         + CASE WHEN r.output_lacks_reasoning THEN COALESCE(m.reasoning_tokens, 0) ELSE 0 END
         AS output_tokens,
       COALESCE(m.cache_read_tokens, 0) AS cache_read_tokens,
       COALESCE(m.cache_creation_tokens, 0) AS cache_creation_tokens,
       COALESCE(m.reasoning_tokens, 0) AS reasoning_tokens
FROM messages m
JOIN sessions s ON s.id = m.session_pk
LEFT JOIN usage_rules r ON r.agent = s.agent
WHERE m.usage_key IS NOT NULL AND m.inherited = 0;

-- A cumulative counter's record as a call: what it added past the records before it (the calls
-- of the session's earlier `thread-total` records sum to the largest count before it). Read by
-- the pass and by the trigger of a rewritten record.
CREATE VIEW usage_cumulative AS
SELECT b.id, b.session_pk, 'thread-total#' || b.id AS usage_key, b.ts,
       COALESCE(b.model, '') AS model, 1 AS records,
       MAX(b.input_tokens - COALESCE(SUM(c.input_tokens), 0), 0) AS input_tokens,
       MAX(b.output_tokens - COALESCE(SUM(c.output_tokens), 0), 0) AS output_tokens,
       MAX(b.cache_read_tokens - COALESCE(SUM(c.cache_read_tokens), 0), 0) AS cache_read_tokens,
       MAX(b.cache_creation_tokens - COALESCE(SUM(c.cache_creation_tokens), 0), 0)
         AS cache_creation_tokens,
       MAX(b.reasoning_tokens - COALESCE(SUM(c.reasoning_tokens), 0), 0) AS reasoning_tokens,
       CASE WHEN b.cost_usd IS NULL THEN NULL
            ELSE MAX(b.cost_usd - COALESCE(SUM(c.cost_usd), 0), 0) END AS cost_usd
FROM usage_billed b
LEFT JOIN usage_calls c ON c.session_pk = b.session_pk
     AND c.usage_key >= 'thread-total#' AND c.usage_key < 'thread-total$'
     AND CAST(substr(c.usage_key, 14) AS INTEGER) < b.id
WHERE b.usage_key = 'thread-total'
GROUP BY b.id;

-- A session that goes takes its calls with it, whatever its messages left.
CREATE TRIGGER usage_session_gone BEFORE DELETE ON sessions
BEGIN
    DELETE FROM usage_calls WHERE session_pk = OLD.id;
    DELETE FROM usage_quarters WHERE session_pk = OLD.id;
END;

-- New messages enter their calls in one pass at the end of each write transaction
-- (`memex_store::usage::catch_up`), not from a trigger on each: an insert with triggers opens
-- a statement journal, and FTS5 then writes what it holds as a segment of its own, once per
-- message of an import. The messages below `through` are in `usage_calls`.
CREATE TABLE usage_progress (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    through INTEGER NOT NULL
);

-- A message that leaves (forget) takes its share of its call: the call goes with the last of
-- its records (counts are not lowered while others remain: they repeat one call's usage). Any
-- deleted message moves the mark back to the top: the next insert may take a deleted top id.
CREATE TRIGGER usage_calls_message_out AFTER DELETE ON messages
BEGIN
    DELETE FROM usage_calls
    WHERE OLD.usage_key = 'thread-total' AND OLD.inherited = 0
      AND OLD.id <= (SELECT through FROM usage_progress WHERE id = 1)
      AND session_pk = OLD.session_pk AND usage_key = 'thread-total#' || OLD.id;
    UPDATE OR IGNORE usage_calls SET records = records - 1
    WHERE OLD.usage_key IS NOT NULL AND OLD.inherited = 0
      AND OLD.id <= (SELECT through FROM usage_progress WHERE id = 1)
      AND session_pk = OLD.session_pk AND usage_key = OLD.usage_key;
    DELETE FROM usage_calls
    WHERE OLD.usage_key IS NOT NULL
      AND session_pk = OLD.session_pk AND usage_key = OLD.usage_key AND records <= 0;
    UPDATE OR IGNORE usage_progress
    SET through = MIN(through, COALESCE((SELECT MAX(id) FROM messages), 0));
END;

-- A rewritten message: its old usage leaves as above, its new usage enters as above. (One the
-- pass has not counted yet is left to it.)
CREATE TRIGGER usage_calls_message_change AFTER UPDATE OF usage_key, input_tokens,
    output_tokens, cache_read_tokens, cache_creation_tokens, reasoning_tokens, model, inherited,
    cost_usd, ts ON messages
WHEN (OLD.usage_key IS NOT NULL OR NEW.usage_key IS NOT NULL)
 AND (OLD.usage_key IS NOT NEW.usage_key OR OLD.input_tokens IS NOT NEW.input_tokens
      OR OLD.output_tokens IS NOT NEW.output_tokens
      OR OLD.cache_read_tokens IS NOT NEW.cache_read_tokens
      OR OLD.cache_creation_tokens IS NOT NEW.cache_creation_tokens
      OR OLD.reasoning_tokens IS NOT NEW.reasoning_tokens OR OLD.model IS NOT NEW.model
      OR OLD.inherited IS NOT NEW.inherited OR OLD.cost_usd IS NOT NEW.cost_usd
      OR OLD.ts IS NOT NEW.ts)
 AND OLD.id <= (SELECT through FROM usage_progress WHERE id = 1)
BEGIN
    DELETE FROM usage_calls
    WHERE OLD.inherited = 0 AND session_pk = OLD.session_pk
      AND usage_key = 'thread-total#' || OLD.id;
    UPDATE OR IGNORE usage_calls SET records = records - 1
    WHERE OLD.inherited = 0 AND session_pk = OLD.session_pk AND usage_key = OLD.usage_key;
    DELETE FROM usage_calls
    WHERE session_pk = OLD.session_pk AND usage_key = OLD.usage_key AND records <= 0;
    INSERT OR IGNORE INTO usage_calls
    SELECT b.session_pk, b.usage_key, b.ts, COALESCE(b.model, ''), 0, 0, 0, 0, 0, 0, NULL
    FROM usage_billed b WHERE b.id = NEW.id AND b.usage_key <> 'thread-total';
    UPDATE OR IGNORE usage_calls SET
        records = records + 1,
        ts = MIN(usage_calls.ts, b.ts),
        model = CASE WHEN usage_calls.model = '' THEN COALESCE(b.model, '') ELSE usage_calls.model END,
        input_tokens = MAX(usage_calls.input_tokens, b.input_tokens),
        output_tokens = MAX(usage_calls.output_tokens, b.output_tokens),
        cache_read_tokens = MAX(usage_calls.cache_read_tokens, b.cache_read_tokens),
        cache_creation_tokens = MAX(usage_calls.cache_creation_tokens, b.cache_creation_tokens),
        reasoning_tokens = MAX(usage_calls.reasoning_tokens, b.reasoning_tokens),
        cost_usd = MAX(COALESCE(usage_calls.cost_usd, b.cost_usd), COALESCE(b.cost_usd, usage_calls.cost_usd))
    FROM (SELECT * FROM usage_billed WHERE id = NEW.id AND usage_key <> 'thread-total') AS b
    WHERE usage_calls.session_pk = b.session_pk AND usage_calls.usage_key = b.usage_key;
    INSERT OR IGNORE INTO usage_calls
    SELECT session_pk, usage_key, ts, model, records, input_tokens, output_tokens,
           cache_read_tokens, cache_creation_tokens, reasoning_tokens, cost_usd
    FROM usage_cumulative WHERE id = NEW.id;
END;

-- The calls already in the archive.
INSERT INTO usage_calls
SELECT session_pk, usage_key, MIN(ts), COALESCE(MAX(model), ''), COUNT(*), MAX(input_tokens),
       MAX(output_tokens), MAX(cache_read_tokens), MAX(cache_creation_tokens),
       MAX(reasoning_tokens), MAX(cost_usd)
FROM usage_billed WHERE usage_key <> 'thread-total'
GROUP BY session_pk, usage_key;

-- Cumulative counters: each record's call holds what it added past the largest before it.
INSERT INTO usage_calls
SELECT session_pk, 'thread-total#' || id, ts, COALESCE(model, ''), 1,
       MAX(input_tokens - COALESCE(MAX(input_tokens) OVER w, 0), 0),
       MAX(output_tokens - COALESCE(MAX(output_tokens) OVER w, 0), 0),
       MAX(cache_read_tokens - COALESCE(MAX(cache_read_tokens) OVER w, 0), 0),
       MAX(cache_creation_tokens - COALESCE(MAX(cache_creation_tokens) OVER w, 0), 0),
       MAX(reasoning_tokens - COALESCE(MAX(reasoning_tokens) OVER w, 0), 0),
       CASE WHEN cost_usd IS NULL THEN NULL
            ELSE MAX(cost_usd - COALESCE(MAX(cost_usd) OVER w, 0), 0) END
FROM usage_billed WHERE usage_key = 'thread-total'
WINDOW w AS (PARTITION BY session_pk ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING);

INSERT INTO usage_progress VALUES (1, (SELECT COALESCE(MAX(id), 0) FROM messages));
