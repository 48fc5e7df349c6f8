-- A Claude session's source path is its own transcript file, `<session id>.jsonl`. Before this
-- version a sub-agent's file (`<session>/subagents/agent-<id>.jsonl`) could name it instead,
-- when its batch was stored first; or an edit stored before any of the session's messages left
-- it empty. Such a session gets its own file back where the archive knows it (`session_files`).
-- Applied once, in one transaction, tracked by PRAGMA user_version. Never edit once shipped.
UPDATE sessions SET source_path = (
    SELECT f.path
    FROM session_files sf JOIN source_files f ON f.id = sf.source_file_id
    WHERE sf.session_pk = sessions.id
      AND substr(f.path, -(length(sessions.session_id) + 7))
          IN ('/' || sessions.session_id || '.jsonl', '\' || sessions.session_id || '.jsonl')
    ORDER BY f.gone, f.id
    LIMIT 1
)
WHERE agent = 'claude'
  AND COALESCE(substr(source_path, -(length(session_id) + 7))
               NOT IN ('/' || session_id || '.jsonl', '\' || session_id || '.jsonl'), 1)
  AND EXISTS (
    SELECT 1
    FROM session_files sf JOIN source_files f ON f.id = sf.source_file_id
    WHERE sf.session_pk = sessions.id
      AND substr(f.path, -(length(sessions.session_id) + 7))
          IN ('/' || sessions.session_id || '.jsonl', '\' || sessions.session_id || '.jsonl')
  );
