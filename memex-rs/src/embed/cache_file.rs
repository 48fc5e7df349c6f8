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
pub(crate) fn map(path: &Path) -> Result<memmap2::Mmap, String> {
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut open, libc::O_NONBLOCK);
    let file = open.open(path).map_err(|e| e.to_string())?;
    if !file.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    // SAFETY: mapped read-only. Memex never changes a cache file in place: a new one is written
    // under another name and renamed over it, and the map keeps the old one (a tool that
    // rewrites it in place breaks that, as it would for a model's own mapped files).
    unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(|e| e.to_string())
}

/// Writes `parts` one after the other as the file at `path`: into a temporary file of its own
/// in the same folder (created exclusively, private to its owner), renamed over `path` once
/// whole, so that a reader never sees it half written.
pub(crate) fn write(path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut f = tempfile::Builder::new()
        .prefix(".memex-cache-")
        .suffix(".tmp")
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

/// Reads little-endian values off the front of a byte slice.
pub(crate) struct Cursor<'a>(pub &'a [u8]);

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("it ends early".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    pub(crate) fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u16(&mut self) -> Result<u16, String> {
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
