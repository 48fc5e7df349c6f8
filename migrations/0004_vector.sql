-- The vector layer's bookkeeping. The vectors themselves live in LanceDB (`<data dir>/vectors`);
-- SQLite records what still has to be embedded, in the same transaction as the change that
-- calls for it, so a crash can delay vectors but never lose or duplicate them.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.

-- Rows whose vectors must be (re)computed or removed. `tbl`: 0 raw messages, 1 observations,
-- 2 talk summaries, 3 session summaries; `ref`: the row's id there. The indexer reads the row as
-- it is now: present and wanted means embed it, gone or unwanted means delete its vectors.
CREATE TABLE vector_outbox (
    id  INTEGER PRIMARY KEY AUTOINCREMENT,
    tbl INTEGER NOT NULL,
    ref INTEGER NOT NULL
);

-- Which model made the stored vectors (`model`, `dimension`): vectors of different models are
-- never compared.
CREATE TABLE vector_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TRIGGER messages_vector_insert AFTER INSERT ON messages WHEN NEW.kind <> 'meta'
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (0, NEW.id);
END;
CREATE TRIGGER messages_vector_update
AFTER UPDATE OF text, text_z, tool_input, prompt_number, role, kind ON messages
WHEN NEW.kind <> 'meta' OR OLD.kind <> 'meta'
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (0, NEW.id);
END;

CREATE TRIGGER observations_vector_insert AFTER INSERT ON observations
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (1, NEW.id);
END;
CREATE TRIGGER observations_vector_update AFTER UPDATE ON observations
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (1, NEW.id);
END;
CREATE TRIGGER observations_vector_delete AFTER DELETE ON observations
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (1, OLD.id);
END;

CREATE TRIGGER talk_summaries_vector_insert AFTER INSERT ON talk_summaries
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (2, NEW.id);
END;
CREATE TRIGGER talk_summaries_vector_update AFTER UPDATE ON talk_summaries
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (2, NEW.id);
END;
CREATE TRIGGER talk_summaries_vector_delete AFTER DELETE ON talk_summaries
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (2, OLD.id);
END;

CREATE TRIGGER session_summaries_vector_insert AFTER INSERT ON session_summaries
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (3, NEW.id);
END;
CREATE TRIGGER session_summaries_vector_update AFTER UPDATE ON session_summaries
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (3, NEW.id);
END;
CREATE TRIGGER session_summaries_vector_delete AFTER DELETE ON session_summaries
BEGIN
    INSERT INTO vector_outbox (tbl, ref) VALUES (3, OLD.id);
END;

-- Everything already archived gets its vectors.
INSERT INTO vector_outbox (tbl, ref) SELECT 0, id FROM messages WHERE kind <> 'meta';
INSERT INTO vector_outbox (tbl, ref) SELECT 1, id FROM observations;
INSERT INTO vector_outbox (tbl, ref) SELECT 2, id FROM talk_summaries;
INSERT INTO vector_outbox (tbl, ref) SELECT 3, id FROM session_summaries;
