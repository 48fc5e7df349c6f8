-- Sync between one person's machines (issue 44). A session another machine archived keeps that
-- machine's host id; this archive has its own id and knows how far its series reached the
-- target, how far it applied each other machine's series, and which batches did not open.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
ALTER TABLE sessions ADD COLUMN host TEXT;  -- NULL: archived on this machine

CREATE TABLE sync_self (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    host           TEXT NOT NULL,              -- this archive's id in its sync target
    archive        TEXT,                       -- the target's archive id, pinned at first sync
    key_id         TEXT,                       -- the id of the key it syncs with
    pushed_seq     INTEGER NOT NULL DEFAULT 0, -- the last batch of its series the target holds
    pushed_through INTEGER NOT NULL DEFAULT 0, -- the last message id that batch covers
    pushed_at      INTEGER                     -- epoch ms
);

-- As for the vector mark (0007): a deleted message at the top frees its id for the next
-- insert, so the push mark goes below it and the new message is not taken for one pushed.
CREATE TRIGGER messages_sync_mark_delete AFTER DELETE ON messages
BEGIN
    UPDATE sync_self
    SET pushed_through = MIN(pushed_through, (SELECT COALESCE(MAX(id), 0) FROM messages));
END;

CREATE TABLE sync_peers (
    host        TEXT PRIMARY KEY,              -- another machine's id
    applied_seq INTEGER NOT NULL DEFAULT 0,    -- the last of its batches handled here
    pulled_at   INTEGER                        -- epoch ms
) WITHOUT ROWID;

-- Batches that did not open or apply (another key, altered or half-carried, a newer format):
-- skipped so that the rest goes on, said, and tried again at each pull until one opens.
CREATE TABLE sync_failures (
    host   TEXT NOT NULL,
    seq    INTEGER NOT NULL,
    reason TEXT NOT NULL,
    at     INTEGER NOT NULL,
    PRIMARY KEY (host, seq)
) WITHOUT ROWID;
