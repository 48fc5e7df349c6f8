-- Trust: every raw block is counted by the messages that point into it, so a block that no
-- message uses is deleted instead of kept forever; and what the user forgot stays forgotten
-- when the same transcripts are read again.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.

-- Messages pointing into each raw block, and the block's stored size. Kept apart from
-- raw_blocks so that reading them never walks the blocks' overflow pages.
CREATE TABLE raw_refs (
    block INTEGER PRIMARY KEY REFERENCES raw_blocks (id),
    refs  INTEGER NOT NULL,
    bytes INTEGER NOT NULL
);
INSERT INTO raw_refs (block, refs, bytes) SELECT id, 0, length(data) FROM raw_blocks;
UPDATE raw_refs SET refs = agg.n
    FROM (SELECT raw_block, COUNT(*) AS n FROM messages
          WHERE raw_block IS NOT NULL GROUP BY raw_block) AS agg
    WHERE agg.raw_block = raw_refs.block;
-- Blocks left at refs = 0 (written by earlier versions for messages that were ignored) are
-- deleted by the code that runs after the migrations, which reports the bytes reclaimed.

-- `memex forget`: whole sessions by agent and id, single messages by their stable id (a source
-- uuid or a line-based id), never by their content. An import skips both, also when the agent
-- moved or compressed the file.
CREATE TABLE forgotten_sessions (
    agent        TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    forgotten_at INTEGER NOT NULL,
    PRIMARY KEY (agent, session_id)
) WITHOUT ROWID;
CREATE TABLE forgotten_messages (
    agent        TEXT NOT NULL,
    session_id   TEXT NOT NULL,
    message_id   TEXT NOT NULL,
    forgotten_at INTEGER NOT NULL,
    PRIMARY KEY (agent, session_id, message_id)
) WITHOUT ROWID;

-- Deleting a row from a full-text index removes its terms from the index at once, instead of
-- leaving them in older segments until a merge: forgotten or scrubbed text leaves no trace.
INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO observations_fts (observations_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO talk_summaries_fts (talk_summaries_fts, rank) VALUES ('secure-delete', 1);
INSERT INTO session_summaries_fts (session_summaries_fts, rank) VALUES ('secure-delete', 1);
