-- Team memory (issue 45): the team archive this machine shares with, the levels its user chose,
-- and what the team archive holds of each session (so that a push sends what is new, and a
-- lowered level, a withdrawal or a forget takes back what the team may no longer hold).
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
CREATE TABLE team_self (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    team      TEXT NOT NULL,               -- the team archive's id
    member    TEXT NOT NULL,               -- this user's name in the team
    joined_at INTEGER NOT NULL             -- epoch ms
);

-- `memex share`: a level for a project (a folder: its sessions and those of folders below it)
-- or for one session, which overrides its project's.
CREATE TABLE team_rules (
    id         INTEGER PRIMARY KEY,
    project    TEXT UNIQUE,                -- a folder path
    session_pk INTEGER UNIQUE REFERENCES sessions (id) ON DELETE CASCADE,
    level      TEXT NOT NULL CHECK (level IN ('hidden', 'summaries', 'full')),
    name       TEXT,                       -- the project's name in the team
    set_at     INTEGER NOT NULL,
    CHECK ((project IS NULL) <> (session_pk IS NULL))
);

-- What the team archive holds of a session: at which level, under which project, and the last
-- row of each layer it has. Kept after the session is forgotten here, until the push has
-- removed it there too.
CREATE TABLE team_sent (
    session_pk  INTEGER PRIMARY KEY,
    agent       TEXT NOT NULL,
    session_id  TEXT NOT NULL,
    project     TEXT NOT NULL,
    level       TEXT NOT NULL,
    raw_through INTEGER NOT NULL DEFAULT 0,
    l1_through  INTEGER NOT NULL DEFAULT 0,
    l2_through  INTEGER NOT NULL DEFAULT 0,
    l3_through  INTEGER NOT NULL DEFAULT 0,
    sent_at     INTEGER NOT NULL
);

-- Messages forgotten here from a session the team holds, for the push to remove there.
CREATE TABLE team_forgets (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    agent      TEXT NOT NULL,
    session_id TEXT NOT NULL,
    message_id TEXT NOT NULL
);

CREATE TRIGGER forgotten_messages_team AFTER INSERT ON forgotten_messages
WHEN EXISTS (SELECT 1 FROM team_sent t
             WHERE t.agent = NEW.agent AND t.session_id = NEW.session_id)
BEGIN
    INSERT INTO team_forgets (agent, session_id, message_id)
    VALUES (NEW.agent, NEW.session_id, NEW.message_id);
END;

-- A message rewritten after it was sent (`memex scrub`, a rewind) is sent again: its
-- session's mark goes back below it.
CREATE TRIGGER messages_team_changed AFTER UPDATE ON messages
WHEN (OLD.text IS NOT NEW.text OR OLD.text_z IS NOT NEW.text_z
      OR OLD.tool_input IS NOT NEW.tool_input OR OLD.active IS NOT NEW.active)
 AND EXISTS (SELECT 1 FROM team_sent t
             WHERE t.session_pk = NEW.session_pk AND t.raw_through >= NEW.id)
BEGIN
    UPDATE team_sent SET raw_through = NEW.id - 1 WHERE session_pk = NEW.session_pk;
END;

-- As for the sync mark (0015): a deleted message at the top frees its id for the next insert.
CREATE TRIGGER messages_team_mark_delete AFTER DELETE ON messages
WHEN EXISTS (SELECT 1 FROM team_sent WHERE session_pk = OLD.session_pk AND raw_through >= OLD.id)
BEGIN
    UPDATE team_sent
    SET raw_through = MIN(raw_through, (SELECT COALESCE(MAX(id), 0) FROM messages))
    WHERE session_pk = OLD.session_pk;
END;

-- Rows the team archive holds without their vectors, because this machine had not made them
-- yet when they were sent: each push sends the vectors made since, and forgets a row once the
-- indexer has passed it without making one (`[vector] raw` leaves tool output out).
CREATE TABLE team_vectors_due (
    layer      INTEGER NOT NULL,           -- 0 raw, 1 observations, 2 talks, 3 sessions
    ref        INTEGER NOT NULL,           -- the row's id in its table
    session_pk INTEGER NOT NULL,
    item       TEXT NOT NULL,              -- its key in the team archive
    PRIMARY KEY (layer, ref)
) WITHOUT ROWID;
