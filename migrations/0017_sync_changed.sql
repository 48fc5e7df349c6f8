-- A message this machine already sent that changes afterwards (an agent rewrote it: a Gemini
-- upsert, a rewind that deactivates it; or `memex scrub` redacted it) is listed here, in
-- order, and sent again with the next batch; the other machines update their copy as an
-- import of the rewritten file would. Messages taken from other machines are not listed: each
-- machine sends only its own. Applied once, in one transaction, tracked by PRAGMA
-- user_version. Never edit once shipped.
ALTER TABLE sync_self ADD COLUMN changed_through INTEGER NOT NULL DEFAULT 0;

CREATE TABLE sync_changed (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    message INTEGER NOT NULL            -- messages.id
);

CREATE TRIGGER messages_sync_changed AFTER UPDATE ON messages
WHEN NEW.id <= (SELECT pushed_through FROM sync_self WHERE id = 1)
 AND (OLD.text IS NOT NEW.text OR OLD.text_z IS NOT NEW.text_z
      OR OLD.tool_input IS NOT NEW.tool_input OR OLD.active IS NOT NEW.active)
 AND NOT EXISTS (SELECT 1 FROM source_files f
                 WHERE f.id = NEW.source_file_id AND f.path LIKE 'sync:%')
BEGIN
    INSERT INTO sync_changed (message) VALUES (NEW.id);
END;
