-- The live service: the session tracker remembers which activity of a session its idle event
-- was sent for, so a restart neither repeats idle events nor misses the ones due meanwhile.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.

ALTER TABLE sessions ADD COLUMN idle_event_at INTEGER;  -- the updated_at the idle event was for

-- Which transcript files each session's messages came from (a session can span several: Claude
-- sub-agent files, Codex forks), so that sessions whose files the agent deleted are found
-- without scanning every message.
CREATE TABLE session_files (
    session_pk     INTEGER NOT NULL REFERENCES sessions (id),
    source_file_id INTEGER NOT NULL REFERENCES source_files (id),
    PRIMARY KEY (session_pk, source_file_id)
) WITHOUT ROWID;
CREATE INDEX session_files_file ON session_files (source_file_id);
INSERT OR IGNORE INTO session_files (session_pk, source_file_id)
    SELECT DISTINCT session_pk, source_file_id FROM messages WHERE source_file_id IS NOT NULL;

-- Secrets redacted, per file, so that status does not sum over every message.
ALTER TABLE source_files ADD COLUMN redactions INTEGER NOT NULL DEFAULT 0;
UPDATE source_files SET redactions = agg.n
    FROM (SELECT source_file_id, SUM(redactions) AS n FROM messages GROUP BY source_file_id) AS agg
    WHERE agg.source_file_id = source_files.id;
