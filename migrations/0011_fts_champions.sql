-- Common words ranked over all their matches: for each word of a full-text index that is in
-- more rows than a search reads newest first, its best rows by BM25 over every row that held
-- it ("champion lists"). The service keeps them up to date from the index itself (only rows
-- above `upto` are looked at again); a search reads them beside the newest matches.
-- Rebuildable: `memex forget` and `memex scrub` empty it, and the service fills it again.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
CREATE TABLE fts_champions (
    fts   TEXT NOT NULL,    -- the full-text table (`messages_fts`, `observations_fts`, ...)
    term  TEXT NOT NULL,    -- one token as the index holds it (lower case)
    docs  INTEGER NOT NULL, -- rows that held it when last refreshed (its document frequency)
    upto  INTEGER NOT NULL, -- rows with rowid up to this were looked at
    best  BLOB NOT NULL,    -- up to 64 pairs (rowid: i64, score: f32, little-endian), best first
    PRIMARY KEY (fts, term)
) WITHOUT ROWID;
