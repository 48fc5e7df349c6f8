//! One writer process per data directory: `memex serve` (and a one-shot `memex import`) hold an
//! exclusive advisory lock on `memex.lock` for as long as they run, and write their PID into it
//! so that the next one can say who holds it. The operating system releases the lock when the
//! process ends, however it ends (`kill -9` included), so a stale lock file never blocks.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("{holder} is already using the data directory {dir}")]
    Held { dir: PathBuf, holder: String },
    #[error("cannot lock {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The lock file of a data directory.
pub fn lock_path(data_dir: &Path) -> PathBuf {
    data_dir.join("memex.lock")
}

/// Held for as long as this value lives.
#[derive(Debug)]
pub struct DataLock {
    file: File,
}

impl DataLock {
    /// Replaces what the lock file says about its holder (e.g. once the address is known).
    pub fn describe(&mut self, what: &str) {
        let _ = write_holder(&mut self.file, what);
    }
}

fn write_holder(file: &mut File, what: &str) -> std::io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    writeln!(file, "{} {what}", std::process::id())?;
    file.flush()
}

/// How often [`acquire`] tries again, 20 ms apart, while the lock is held (by a look).
const LOOK_RETRIES: u32 = 5;

/// Takes the data directory's lock, recording `what` (e.g. `memex serve`) and this PID in it.
pub fn acquire(data_dir: &Path, what: &str) -> Result<DataLock, LockError> {
    let path = lock_path(data_dir);
    let io = |source| LockError::Io {
        path: path.clone(),
        source,
    };
    super::private_dir(data_dir).map_err(io)?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(io)?;
    // A reader that only looks ([`holder`], e.g. `memex search` finding the service) holds a
    // shared lock for an instant: try again for a little while before saying it is held.
    let mut tries = 0;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(TryLockError::WouldBlock) if tries < LOOK_RETRIES => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(LockError::Held {
                    dir: data_dir.to_owned(),
                    holder: describe(&mut file),
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
    }
    write_holder(&mut file, what).map_err(io)?;
    Ok(DataLock { file })
}

/// Who holds the lock now, if anyone: `memex serve (pid 1234)`. Only looks, never takes it.
pub fn holder(data_dir: &Path) -> Option<String> {
    let mut file = File::open(lock_path(data_dir)).ok()?;
    match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            None
        }
        Err(TryLockError::WouldBlock) => Some(describe(&mut file)),
        Err(TryLockError::Error(_)) => None,
    }
}

/// Where the running `memex serve` listens, from what its lock says (`memex serve on ADDR`).
pub fn serving_addr(data_dir: &Path) -> Option<String> {
    let holder = holder(data_dir)?;
    let rest = holder.split(SERVE_ON).nth(1)?;
    rest.split_whitespace().next().map(str::to_owned)
}

/// What `memex serve` writes into the lock once it listens, before the address.
pub const SERVE_ON: &str = "memex serve on ";

fn describe(file: &mut File) -> String {
    let mut s = String::new();
    let _ = file.seek(SeekFrom::Start(0));
    let _ = file.take(256).read_to_string(&mut s);
    let s = s.trim();
    match s.split_once(' ') {
        Some((pid, what)) if pid.parse::<u32>().is_ok() => format!("{what} (pid {pid})"),
        _ => "another memex process".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid() {
        let dir = tempfile::tempdir().unwrap();
        let first = acquire(dir.path(), "memex serve").unwrap();
        let err = acquire(dir.path(), "memex import").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("memex serve (pid {})", std::process::id())),
            "{msg}"
        );
        assert_eq!(
            holder(dir.path()).as_deref(),
            Some(format!("memex serve (pid {})", std::process::id()).as_str())
        );
        drop(first);
        assert_eq!(holder(dir.path()), None);
        acquire(dir.path(), "memex import").unwrap();
    }
}
