-- An archive created since this version has 16 KiB pages (`store::connect`): an import runs
-- 5-10 % faster than with 4 KiB and the store is 3 % smaller (BENCHMARKS.md, issue 13). Its
-- full-text leaves are made as large as one such page holds: FTS5's default leaf (4,050
-- bytes) is sized for 4 KiB pages, and every leaf is a row of its own to write, look up and
-- merge; 16,000 bytes make a quarter as many (a leaf may pass its size a little, and up to
-- 16,349 bytes of a row stay in its page). An older archive keeps its 4 KiB pages and its
-- leaves: there a 16,000-byte leaf would spill over four pages. (A full-text table added by a
-- later migration sets its own.)
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
INSERT INTO messages_fts (messages_fts, rank)
    SELECT 'pgsz', 16000 FROM pragma_page_size() WHERE page_size = 16384;
INSERT INTO observations_fts (observations_fts, rank)
    SELECT 'pgsz', 16000 FROM pragma_page_size() WHERE page_size = 16384;
INSERT INTO talk_summaries_fts (talk_summaries_fts, rank)
    SELECT 'pgsz', 16000 FROM pragma_page_size() WHERE page_size = 16384;
INSERT INTO session_summaries_fts (session_summaries_fts, rank)
    SELECT 'pgsz', 16000 FROM pragma_page_size() WHERE page_size = 16384;
