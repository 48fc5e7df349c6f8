//! Files no longer on disk: marked gone, their messages stay.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

/// Marks files of these roots that are no longer on disk as gone (their messages stay).
pub fn mark_gone(
    conn: &Connection,
    roots: &[(String, PathBuf)],
    present: &HashSet<PathBuf>,
) -> rusqlite::Result<usize> {
    let mut n = 0;
    for (_, root) in roots {
        let mut st = conn.prepare("SELECT path FROM source_files WHERE root = ?1 AND gone = 0")?;
        let known: Vec<String> = st
            .query_map([root.to_string_lossy()], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        for k in known {
            if !present.contains(Path::new(&k)) && !Path::new(&k).exists() {
                n += conn.execute("UPDATE source_files SET gone = 1 WHERE path = ?1", [&k])?;
            }
        }
    }
    Ok(n)
}

/// Marks one file gone when it is no longer on disk (its messages stay). Returns whether it was
/// a known file that just went.
pub fn mark_path_gone(conn: &Connection, path: &Path) -> rusqlite::Result<bool> {
    if path.exists() {
        return Ok(false);
    }
    let n = conn.execute(
        "UPDATE source_files SET gone = 1 WHERE path = ?1 AND gone = 0",
        [path.to_string_lossy()],
    )?;
    Ok(n > 0)
}

/// Marks every known file under `dir` that is no longer on disk as gone (a folder deleted or
/// moved away). Returns how many were marked.
pub fn mark_gone_under(conn: &Connection, dir: &Path) -> rusqlite::Result<usize> {
    let prefix = format!("{}/", dir.to_string_lossy().trim_end_matches('/'));
    let mut st = conn.prepare_cached(
        "SELECT path FROM source_files WHERE gone = 0 AND substr(path, 1, length(?1)) = ?1",
    )?;
    let known: Vec<String> = st
        .query_map([&prefix], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let mut n = 0;
    for k in known {
        n += usize::from(mark_path_gone(conn, Path::new(&k))?);
    }
    Ok(n)
}
