-- The dashboard reads messages per day over its 30 days (messages archived, tokens the agents
-- used): without an index on the message's time each view read the whole table, which grows
-- without end. With it, a view reads only the rows of the days it shows.
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
CREATE INDEX messages_ts ON messages (ts);
