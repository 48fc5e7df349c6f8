-- The vector layer learns of new messages from a high-water mark instead of a row per message:
-- the per-message insert trigger halved the speed of import. New messages are the ones above
-- the mark (SQLite gives a new row the largest rowid plus one, and writes one transaction at a
-- time, so a reader that sees id N sees every id below it); the outbox still carries updates,
-- deletions and the summary layers, which are few.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.

DROP TRIGGER messages_vector_insert;

-- Every message with an id up to `messages_through` is embedded, listed in the outbox, or not
-- wanted. One row.
CREATE TABLE vector_progress (
    id               INTEGER PRIMARY KEY CHECK (id = 1),
    messages_through INTEGER NOT NULL
);
-- The trigger listed every message so far in the outbox.
INSERT INTO vector_progress (id, messages_through) SELECT 1, COALESCE(MAX(id), 0) FROM messages;

-- A deleted message at the top frees its id for the next insert: lower the mark below it, so
-- the new message is not taken for one already embedded. (Deletes are rare: `memex forget`.)
CREATE TRIGGER messages_vector_mark_delete AFTER DELETE ON messages
BEGIN
    UPDATE vector_progress
    SET messages_through = MIN(messages_through, (SELECT COALESCE(MAX(id), 0) FROM messages));
END;
