//! What the files Memex keeps beside a model's own files have in common (its packed layers,
//! its compiled vocabulary): each is a cache of work done from one source file, tied to that
//! file by a stamp, mapped read-only and read within its length, and written whole or not at
//! all.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The cache file of `source`: its name with `suffix` added, in the same folder.
pub(crate) fn beside(source: &Path, suffix: &str) -> PathBuf {
    let mut name = source.file_name().unwrap_or_default().to_owned();
    name.push(suffix);
    source.with_file_name(name)
}

/// What ties a cache file to its source: the source's name, size and modification time, read
/// from the handle it was read through (not from the path, which a new file may have taken
/// since), and the program's version (the code that derives the cache may change between
/// versions without its layout). `None` when they cannot be read.
pub(crate) fn stamp(source: &Path, opened: &std::fs::File) -> Option<Vec<u8>> {
    let m = opened.metadata().ok()?;
    let mtime = m
        .modified()
        .ok()?
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?;
    let name = source.file_name()?.to_string_lossy();
    Some(
        format!(
            "{name} {} {} memex {}",
            m.len(),
            mtime.as_nanos(),
            env!("CARGO_PKG_VERSION")
        )
        .into_bytes(),
    )
}

/// The file at `path` mapped read-only (its pages read in at once: every byte is checked
/// anyway), when it is a regular file: not a FIFO or a device, which could block or never end.
/// Opened without blocking, and checked on the handle, so that nothing swapped in at the
/// path in between is read.
pub(crate) fn map(path: &Path) -> Result<memmap2::Mmap, Unusable> {
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut open, libc::O_NONBLOCK);
    let file = open.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(Unusable::NotAFile);
    }
    // SAFETY: mapped read-only. Memex never changes a cache file in place: a new one is written
    // under another name and renamed over it, and the map keeps the old one (a tool that
    // rewrites it in place breaks that, as it would for a model's own mapped files).
    Ok(unsafe { memmap2::MmapOptions::new().populate().map(&file) }?)
}

/// Why a cache file is not read (the model's own files are read instead, and the cache file
/// is written again).
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unusable {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("not a regular file")]
    NotAFile,
    #[error("it ends early")]
    EndsEarly,
    /// Not a file of this kind at all (its magic bytes are others).
    #[error("not a {0}")]
    OtherKind(&'static str),
    #[error("written in layout {0}")]
    OtherLayout(String),
    /// Made from another file than the model's (or by another version of Memex).
    #[error("made from another {0} or by another version")]
    OtherSource(&'static str),
    #[error("its checksum does not match")]
    Checksum,
    #[error("its settings cannot be read: {0}")]
    Settings(#[from] serde_json::Error),
    /// Its parts do not fit together (what does not, said).
    #[error("{0}")]
    Inconsistent(String),
}

/// The names of the temporary files [`write()`] makes: `.memex-cache-*.tmp`.
const TEMP_PREFIX: &str = ".memex-cache-";
const TEMP_SUFFIX: &str = ".tmp";

/// How old a temporary file must be before a writer takes it for the leftover of a write that
/// was killed: far longer than any write takes, so that another process's write in progress
/// is never removed.
const STALE_TEMP: std::time::Duration = std::time::Duration::from_secs(3600);

/// Writes `parts` one after the other as the file at `path`: into a temporary file of its own
/// in the same folder (created exclusively, private to its owner), renamed over `path` once
/// whole, so that a reader never sees it half written. Temporary files that killed writes
/// left in the folder are removed first.
pub(crate) fn write(path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    remove_stale_temporaries(dir);
    let mut f = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .suffix(TEMP_SUFFIX)
        .tempfile_in(dir)?;
    {
        let mut w = std::io::BufWriter::new(f.as_file_mut());
        for p in parts {
            w.write_all(p)?;
        }
        w.flush()?;
    }
    f.persist(path).map(drop).map_err(|e| e.error)
}

/// Removes the regular files of `dir` that this user owns, named as [`write()`]'s temporaries
/// and last changed at least [`STALE_TEMP`] ago (links, folders and other users' files are
/// left alone). Best effort: a file that cannot be read or removed stays.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let now = std::time::SystemTime::now();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if !(name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX)) {
            continue;
        }
        // Not followed: a link is not a temporary file of ours.
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let stale = meta
            .modified()
            .ok()
            .and_then(|t| now.duration_since(t).ok())
            .is_some_and(|age| age >= STALE_TEMP);
        #[cfg(unix)]
        let ours = {
            use std::os::unix::fs::MetadataExt;
            // SAFETY: geteuid has no preconditions and cannot fail.
            meta.uid() == unsafe { libc::geteuid() }
        };
        #[cfg(not(unix))]
        let ours = true;
        if meta.is_file() && stale && ours {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Reads little-endian values off the front of a byte slice.
pub(crate) struct Cursor<'a>(pub &'a [u8]);

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], Unusable> {
        if self.0.len() < n {
            return Err(Unusable::EndsEarly);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, Unusable> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u16(&mut self) -> Result<u16, Unusable> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
}

/// `bytes`, a file whose 32-byte header ends with a CRC-32 of everything after the header (as
/// both cache files are laid out), with that checksum made right again: for tests that make
/// only the structure wrong.
#[cfg(test)]
pub(crate) fn with_checksum(mut bytes: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&bytes[32..]);
    bytes[28..32].copy_from_slice(&crc.to_le_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_write_removes_what_killed_writes_left_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let old = std::time::SystemTime::now() - STALE_TEMP - std::time::Duration::from_secs(60);
        let aged = |name: &str| {
            let f = std::fs::File::create(d.join(name)).unwrap();
            f.set_modified(old).unwrap();
        };
        aged(".memex-cache-killed.tmp");
        // Another process's write in progress, files of other names, a link to an old file
        // (the link old too), and an old folder.
        std::fs::write(d.join(".memex-cache-writing.tmp"), b"x").unwrap();
        aged("model.safetensors");
        aged(".memex-cache-other.part");
        let target = d.join("target");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&target)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let link = d.join(".memex-cache-link.tmp");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let secs = old.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as libc::time_t;
        let times = [libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        }; 2];
        let c = std::ffi::CString::new(link.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid path and two timespecs; the link itself is changed, not its target.
        let rc = unsafe {
            libc::utimensat(
                libc::AT_FDCWD,
                c.as_ptr(),
                times.as_ptr(),
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        assert_eq!(rc, 0);
        let folder = d.join(".memex-cache-folder.tmp");
        std::fs::create_dir(&folder).unwrap();
        std::fs::File::open(&folder)
            .unwrap()
            .set_modified(old)
            .unwrap();

        write(&d.join("model.safetensors.int8"), &[b"abc", b"def"]).unwrap();

        let mut names: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                ".memex-cache-folder.tmp",
                ".memex-cache-link.tmp",
                ".memex-cache-other.part",
                ".memex-cache-writing.tmp",
                "model.safetensors",
                "model.safetensors.int8",
                "target",
            ]
        );
        assert_eq!(
            std::fs::read(d.join("model.safetensors.int8")).unwrap(),
            b"abcdef"
        );
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}
