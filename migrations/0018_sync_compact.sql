-- Compact rows written by a provider other than the heuristic (a paid or slow model) travel
-- to this person's other machines with the next batch (issue 44), so that no summary is paid
-- for twice. Each such row written for one of this machine's own sessions while the archive
-- syncs lists its key here (the layer's job level, the session, the talk; 0 for a session
-- summary), in order; the batch carries every row of the key as it then stands.
-- `compact_through` is the last entry the target holds. Rows of sessions taken from another
-- machine are never listed: each machine sends only its own. The rows written before the
-- archive first synced are listed by `sync::host_id` while this list is empty.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
ALTER TABLE sync_self ADD COLUMN compact_through INTEGER NOT NULL DEFAULT 0;

CREATE TABLE sync_compact (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    level         TEXT NOT NULL,      -- l1 | l2 | l3
    session_pk    INTEGER NOT NULL,   -- sessions.id
    prompt_number INTEGER NOT NULL
);

CREATE TRIGGER observations_sync AFTER INSERT ON observations
WHEN NEW.provider <> 'heuristic' AND EXISTS (SELECT 1 FROM sync_self)
 AND (SELECT host FROM sessions WHERE id = NEW.session_pk) IS NULL
BEGIN
    INSERT INTO sync_compact (level, session_pk, prompt_number)
    VALUES ('l1', NEW.session_pk, NEW.prompt_number);
END;

CREATE TRIGGER talk_summaries_sync AFTER INSERT ON talk_summaries
WHEN NEW.provider <> 'heuristic' AND EXISTS (SELECT 1 FROM sync_self)
 AND (SELECT host FROM sessions WHERE id = NEW.session_pk) IS NULL
BEGIN
    INSERT INTO sync_compact (level, session_pk, prompt_number)
    VALUES ('l2', NEW.session_pk, NEW.prompt_number);
END;

CREATE TRIGGER session_summaries_sync AFTER INSERT ON session_summaries
WHEN NEW.provider <> 'heuristic' AND EXISTS (SELECT 1 FROM sync_self)
 AND (SELECT host FROM sessions WHERE id = NEW.session_pk) IS NULL
BEGIN
    INSERT INTO sync_compact (level, session_pk, prompt_number)
    VALUES ('l3', NEW.session_pk, 0);
END;

-- `memex scrub` rewrites a row in place: it travels again.
CREATE TRIGGER observations_sync_update AFTER UPDATE ON observations
WHEN NEW.provider <> 'heuristic' AND EXISTS (SELECT 1 FROM sync_self)
 AND (SELECT host FROM sessions WHERE id = NEW.session_pk) IS NULL
BEGIN
    INSERT INTO sync_compact (level, session_pk, prompt_number)
    VALUES ('l1', NEW.session_pk, NEW.prompt_number);
END;

CREATE TRIGGER talk_summaries_sync_update AFTER UPDATE ON talk_summaries
WHEN NEW.provider <> 'heuristic' AND EXISTS (SELECT 1 FROM sync_self)
 AND (SELECT host FROM sessions WHERE id = NEW.session_pk) IS NULL
BEGIN
    INSERT INTO sync_compact (level, session_pk, prompt_number)
    VALUES ('l2', NEW.session_pk, NEW.prompt_number);
END;

CREATE TRIGGER session_summaries_sync_update AFTER UPDATE ON session_summaries
WHEN NEW.provider <> 'heuristic' AND EXISTS (SELECT 1 FROM sync_self)
 AND (SELECT host FROM sessions WHERE id = NEW.session_pk) IS NULL
BEGIN
    INSERT INTO sync_compact (level, session_pk, prompt_number)
    VALUES ('l3', NEW.session_pk, 0);
END;
