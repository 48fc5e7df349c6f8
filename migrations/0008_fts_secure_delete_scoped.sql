-- FTS5 `secure-delete` (0006) made every full-text insert and merge slower: the import by about
-- 8 %, search p50 by about 10 % (BENCHMARKS.md, issue 13). Only `memex forget` and `memex scrub`
-- delete what must leave no trace; they turn it on for their own run, and merge every index and
-- rebuild the file afterwards. Off otherwise.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
INSERT INTO messages_fts (messages_fts, rank) VALUES ('secure-delete', 0);
INSERT INTO observations_fts (observations_fts, rank) VALUES ('secure-delete', 0);
INSERT INTO talk_summaries_fts (talk_summaries_fts, rank) VALUES ('secure-delete', 0);
INSERT INTO session_summaries_fts (session_summaries_fts, rank) VALUES ('secure-delete', 0);
