//! The small SQLite reader the database adapters share. An agent's database is written by the
//! agent while Memex reads it, and it also holds credentials: so every read opens it read-only,
//! waits briefly for a writer instead of failing, reads only the conversation tables the adapter
//! names, and closes it again, holding no lock between reads.

use std::path::Path;
use std::time::Duration;

use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Map, Value};

use crate::ParseError;

/// How long a read waits for the agent's writer before giving up until the next change.
const BUSY_TIMEOUT: Duration = Duration::from_secs(2);

/// An agent's database, open read-only for one read.
pub struct Db {
    conn: Connection,
    path: std::path::PathBuf,
}

impl Db {
    /// Opens `path` read-only. A database in WAL mode is read through its log as the agent's
    /// own connections see it; nothing is ever written, not even the log's index, when the
    /// folder is not writable (then it is opened as immutable).
    pub fn open(path: &Path) -> Result<Db, ParseError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let err = |source| ParseError::Database {
            path: path.to_owned(),
            source,
        };
        let conn = Connection::open_with_flags(path, flags).map_err(err)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(err)?;
        conn.pragma_update(None, "query_only", true).map_err(err)?;
        // Not a database at all, or a corrupt header: fail here, with the file named.
        conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
            r.get::<_, i64>(0)
        })
        .map_err(err)?;
        Ok(Db {
            conn,
            path: path.to_owned(),
        })
    }

    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// The error of a failed query, naming the database.
    pub fn error(&self, source: rusqlite::Error) -> ParseError {
        ParseError::Database {
            path: self.path.clone(),
            source,
        }
    }

    /// Whether the database has a table of this name.
    pub fn has_table(&self, name: &str) -> bool {
        self.conn
            .query_row(
                "SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                [name],
                |_| Ok(()),
            )
            .is_ok()
    }

    /// The columns of `table`, in order (empty when there is no such table).
    pub fn columns(&self, table: &str) -> Vec<String> {
        let Ok(mut st) = self
            .conn
            .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
        else {
            return Vec::new();
        };
        st.query_map([table], |r| r.get::<_, String>(0))
            .map(|rows| rows.filter_map(Result::ok).collect())
            .unwrap_or_default()
    }
}

/// One row as a JSON object, column by column: text as strings (invalid UTF-8 replaced),
/// numbers as numbers, blobs as text when they are UTF-8 and as lowercase hex otherwise. This is
/// the row's lossless record in the archive.
pub fn row_json(row: &rusqlite::Row<'_>) -> Value {
    let stmt = row.as_ref();
    let mut obj = Map::new();
    for i in 0..stmt.column_count() {
        let name = stmt.column_name(i).unwrap_or("?").to_owned();
        let v = match row.get_ref(i) {
            Ok(ValueRef::Null) | Err(_) => Value::Null,
            Ok(ValueRef::Integer(n)) => Value::from(n),
            Ok(ValueRef::Real(f)) => Value::from(f),
            Ok(ValueRef::Text(t)) => Value::String(String::from_utf8_lossy(t).into_owned()),
            Ok(ValueRef::Blob(b)) => match std::str::from_utf8(b) {
                Ok(s) => Value::String(s.to_owned()),
                Err(_) => Value::String(crate::reader::hex(b)),
            },
        };
        obj.insert(name, v);
    }
    Value::Object(obj)
}

/// A text column that holds JSON (most agents keep message bodies so): parsed, or the text
/// itself as a JSON string when it is not JSON.
pub fn json_column(v: &Value) -> Value {
    match v {
        Value::String(s) => serde_json::from_str(s).unwrap_or_else(|_| v.clone()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_while_another_connection_writes_and_never_writes_itself() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.db");
        let w = Connection::open(&path).unwrap();
        w.pragma_update(None, "journal_mode", "wal").unwrap();
        w.execute_batch("CREATE TABLE message (id INTEGER PRIMARY KEY, body TEXT, data BLOB);")
            .unwrap();
        w.execute(
            "INSERT INTO message (body, data) VALUES ('hello', x'ff00')",
            [],
        )
        .unwrap();
        let db = Db::open(&path).unwrap();
        assert!(db.has_table("message"));
        assert!(!db.has_table("auth"));
        assert_eq!(db.columns("message"), ["id", "body", "data"]);
        let row = db
            .conn()
            .query_row("SELECT * FROM message", [], |r| Ok(row_json(r)))
            .unwrap();
        assert_eq!(row["body"], "hello");
        assert_eq!(row["data"], "ff00");
        // The agent keeps writing while the reader is open.
        w.execute("INSERT INTO message (body) VALUES ('more')", [])
            .unwrap();
        let n: i64 = db
            .conn()
            .query_row("SELECT count(*) FROM message", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 2);
        let refused = db.conn().execute("DELETE FROM message", []);
        assert!(refused.is_err(), "a reader must never write");
    }

    #[test]
    fn a_file_that_is_not_a_database_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.vscdb");
        std::fs::write(
            &path,
            b"this is not sqlite, just text that is long enough to be read",
        )
        .unwrap();
        let err = Db::open(&path).err().expect("not a database");
        assert!(err.to_string().contains("state.vscdb"), "{err}");
    }
}
