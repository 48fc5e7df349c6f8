//! Sync between one person's machines (SPEC §10): each machine appends its own series of
//! sealed batches `(archive, host, seq)` to a shared target, and reads the others' series.
//!
//! ```text
//!  archive (SQLite) ──batch──▶ seal (zstd, ChaCha20-Poly1305) ──▶ Target::put (folder | PostgreSQL)
//!  archive (SQLite) ◀─apply─── open (verify, inflate)        ◀── Target::get
//! ```
//!
//! - [`engine`][]: push (the archive's new messages, sealed, as the next batches of its series)
//!   and pull (each other host's batches after the last one handled, applied in order).
//! - [`key`][]: the key that exists only on the user's machines, its file and its public id.
//! - [`seal`][]: a batch's bytes on the target: compressed, then encrypted under a key derived
//!   for that batch alone, bound to its archive, host and sequence number, so that a batch
//!   moved to another host's series or another position fails to open.
//! - [`target`][]: where batches are kept ([`target::Target`]), and [`folder`], the target that
//!   is a directory (Syncthing, Dropbox, NFS, rsync carry it), and [`postgres`], the one
//!   that is a PostgreSQL database.
//!
//! The target learns sizes, counts, host ids and times; never a word, a path or a project.

pub mod engine;
pub mod folder;
pub mod key;
#[cfg(any(test, feature = "test-server"))]
pub mod pg_server;
pub mod postgres;
pub mod seal;
pub mod target;
pub mod url;

/// A random id of 16 bytes, written as 32 lower-case hex digits: an archive's or a host's.
pub fn new_id() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the operating system's random generator is unavailable");
    hex::encode(b)
}

/// This machine's host name, as the user knows it (`None` when the system has none).
pub fn machine_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; the name is cut at its first NUL below.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).trim().to_owned();
    memex_store::sync::valid_name(&name).then_some(name)
}

/// Whether `s` is an id as [`new_id`] makes them (what a target holds is checked with it
/// before it names a folder or a row).
pub fn is_id(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_hex_and_checked() {
        let (a, b) = (new_id(), new_id());
        assert!(is_id(&a) && is_id(&b) && a != b);
        for bad in [
            "",
            "../../etc",
            &a.to_uppercase(),
            &a[..31],
            &format!("{a}0"),
        ] {
            assert!(!is_id(bad), "{bad}");
        }
    }
}
