-- What this machine forgot travels to its other machines (issue 44): each identity that
-- `memex forget` remembers (0006) while the archive syncs is also listed here, in order, and
-- sent with the next batch of its series; `forgets_through` is the last one the target holds.
-- Identities only (agent, session and message ids), never a word of what was forgotten.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
ALTER TABLE sync_self ADD COLUMN forgets_through INTEGER NOT NULL DEFAULT 0;

CREATE TABLE sync_forgets (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent      TEXT NOT NULL,
    session_id TEXT NOT NULL,
    message_id TEXT                 -- NULL: the whole session
);

CREATE TRIGGER forgotten_sessions_sync AFTER INSERT ON forgotten_sessions
WHEN EXISTS (SELECT 1 FROM sync_self)
BEGIN
    INSERT INTO sync_forgets (agent, session_id) VALUES (NEW.agent, NEW.session_id);
END;

CREATE TRIGGER forgotten_messages_sync AFTER INSERT ON forgotten_messages
WHEN EXISTS (SELECT 1 FROM sync_self)
BEGIN
    INSERT INTO sync_forgets (agent, session_id, message_id)
    VALUES (NEW.agent, NEW.session_id, NEW.message_id);
END;

-- The name each machine goes by (its host name, sent with its batches), so that a user picks
-- a machine as `--host laptop` rather than by its id.
ALTER TABLE sync_self ADD COLUMN name TEXT;
ALTER TABLE sync_peers ADD COLUMN name TEXT;
