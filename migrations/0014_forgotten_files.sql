-- Files every session of which was forgotten (`memex forget`), known by a digest of their path,
-- never by the path: the size and time they had when read last. While a file is unchanged an
-- import skips it, and while all it holds stays forgotten no row names its path again. Applied
-- once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
CREATE TABLE forgotten_files (
    digest BLOB PRIMARY KEY,
    size INTEGER NOT NULL,
    mtime INTEGER NOT NULL
) WITHOUT ROWID;
