-- Smart injection never repeats an item within a session: it reads what the session already got
-- from the injection log, by session.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
CREATE INDEX injections_session ON injections (session_id);
