//! Who the service answers: its owner, the user whose data folder it serves.
//!
//! - **The socket.** The CLI and the hook commands reach `memex serve` through a Unix domain
//!   socket in the private data folder ([`socket_path`]). Only the folder's owner can open it
//!   (the folder is `0700`); the service also checks each connection's peer user, and a client
//!   connects only to a socket its own user created.
//! - **The secret.** Over TCP (the web pages, a client without the socket), every caller needs
//!   the owner's secret: `[api] token` when the user set one, else a random token the service
//!   writes once into `api-token` (`0600`) in the data folder ([`Secret`]). A browser signs in
//!   with it, or with a one-time link made from the socket (`memex open`).
//! - **The proof.** Before a TCP client sends anything, it asks the listener to prove that it
//!   holds the secret: a keyed digest of a fresh challenge and the port ([`Secret::proof`]). A
//!   program of another user squatting on the port cannot answer, so it never receives a
//!   prompt, a query or the token.

use std::path::{Path, PathBuf};

/// The socket's name in the data folder.
pub const SOCKET: &str = "memex.sock";
/// The file that keeps the generated secret, in the data folder.
pub const TOKEN_FILE: &str = "api-token";
pub use crate::config::MIN_TOKEN_CHARS;

/// The service's socket for the data folder `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET)
}

/// The longest path a Unix socket may have (the size of `sun_path`, less its final NUL):
/// 107 bytes on Linux, 103 on macOS and the BSDs.
pub const MAX_SOCKET_PATH: usize = if cfg!(target_os = "linux") { 107 } else { 103 };

/// Whether a socket at `path` can be bound and connected to (its path is short enough).
pub fn socket_fits(path: &Path) -> bool {
    path.as_os_str().len() <= MAX_SOCKET_PATH
}

/// `n` random bytes from the operating system, as lowercase hex.
pub fn random_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    // The OS's generator fails only when it is not there at all (no /dev/urandom, a seccomp
    // filter): nothing Memex could run without.
    getrandom::fill(&mut b).expect("the operating system's random generator is unavailable");
    hex(&b)
}

fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The owner's secret: the API token of TCP callers, and the key of the service's proofs.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// What [`Secret::proof`] signs, so the digest can mean nothing else.
const PROOF_LABEL: &[u8] = b"memex service proof v1\0";

impl Secret {
    /// A secret as given (a configured token; see [`load_or_create`] for the checks).
    pub fn new(token: impl Into<String>) -> Secret {
        Secret(token.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `given` is this secret (in constant time).
    pub fn matches(&self, given: &str) -> bool {
        same(given.as_bytes(), self.0.as_bytes())
    }

    /// The service's answer to `challenge` on `port`: HMAC-SHA-256 keyed by the secret, as hex.
    /// The port is in it so that an answer the real service gave on another port proves nothing
    /// here.
    pub fn proof(&self, port: u16, challenge: &str) -> String {
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(self.0.as_bytes())
            .expect("HMAC takes a key of any length");
        mac.update(PROOF_LABEL);
        mac.update(&port.to_be_bytes());
        mac.update(challenge.as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// Whether `answer` is the proof of `challenge` on `port`.
    pub fn verifies(&self, port: u16, challenge: &str, answer: &str) -> bool {
        same(self.proof(port, challenge).as_bytes(), answer.as_bytes())
    }
}

/// Why a secret cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "api.token is {0} characters long; it must have at least {MIN_TOKEN_CHARS} (e.g. `openssl rand -hex 32`)"
    )]
    TooShort(usize),
    #[error("cannot keep the API secret in {path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Checks a configured token's length (`[api] token`, `MEMEX_API_TOKEN`).
pub fn check_configured(token: &str) -> Result<(), SecretError> {
    let n = token.chars().count();
    if n < MIN_TOKEN_CHARS {
        return Err(SecretError::TooShort(n));
    }
    Ok(())
}

/// A secret as the file holds it: hex digits, long enough.
fn well_formed(s: &str) -> bool {
    s.len() >= MIN_TOKEN_CHARS && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The secret a client uses: the configured token, else the file the service wrote; `None`
/// when there is neither (no service of this data folder has run).
pub fn load(data_dir: &Path, configured: &str) -> Option<Secret> {
    if !configured.is_empty() {
        return Some(Secret(configured.to_owned()));
    }
    let text = read_private(&data_dir.join(TOKEN_FILE))?;
    let t = text.trim();
    well_formed(t).then(|| Secret(t.to_owned()))
}

/// The secret the service uses: the configured token, else the file's, written first when there
/// is none (random, 256 bits, `0600`). Called once the data folder is private and locked.
pub fn load_or_create(data_dir: &Path, configured: &str) -> Result<Secret, SecretError> {
    if !configured.is_empty() {
        check_configured(configured)?;
        return Ok(Secret(configured.to_owned()));
    }
    if let Some(s) = load(data_dir, "") {
        return Ok(s);
    }
    let path = data_dir.join(TOKEN_FILE);
    let io = |source| SecretError::Io {
        path: path.clone(),
        source,
    };
    let token = random_hex(32);
    // Written beside it and renamed, so that no reader ever sees half a token.
    let tmp = data_dir.join(format!(".{TOKEN_FILE}.{}", std::process::id()));
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
            .map_err(io)?;
        writeln!(f, "{token}").map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, &path).map_err(io)?;
    Ok(Secret(token))
}

/// A small file's text, only when it is a regular file of this user that no one else may read
/// or write (never through a link).
fn read_private(path: &Path) -> Option<String> {
    use std::io::Read;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok()?;
    let m = f.metadata().ok()?;
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_file() || m.uid() != me || m.mode() & 0o077 != 0 {
        return None;
    }
    let mut s = String::new();
    f.by_ref().take(4096).read_to_string(&mut s).ok()?;
    Some(s)
}

/// Whether `path` is a socket this user created: the only kind a client connects to.
pub fn own_socket(path: &Path) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket() && m.uid() == me)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_made_once_and_private() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path(), "").is_none());
        let s = load_or_create(dir.path(), "").unwrap();
        assert_eq!(s.as_str().len(), 64);
        let again = load_or_create(dir.path(), "").unwrap();
        assert_eq!(s.as_str(), again.as_str());
        assert_eq!(load(dir.path(), "").unwrap().as_str(), s.as_str());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(TOKEN_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // A file others can read is not trusted: it may have been read already.
        std::fs::set_permissions(
            dir.path().join(TOKEN_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert!(load(dir.path(), "").is_none());
        let fresh = load_or_create(dir.path(), "").unwrap();
        assert_ne!(fresh.as_str(), s.as_str());
    }

    #[test]
    fn a_configured_token_wins_and_must_be_long_enough() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(MIN_TOKEN_CHARS);
        assert_eq!(load_or_create(dir.path(), &long).unwrap().as_str(), long);
        assert!(!dir.path().join(TOKEN_FILE).exists());
        let err = load_or_create(dir.path(), "short-token").unwrap_err();
        assert!(err.to_string().contains("at least 24"), "{err}");
    }

    #[test]
    fn a_proof_holds_only_for_its_challenge_port_and_secret() {
        let a = Secret("a".repeat(32));
        let b = Secret("b".repeat(32));
        let p = a.proof(10013, "c1");
        assert!(a.verifies(10013, "c1", &p));
        assert!(!a.verifies(10013, "c2", &p));
        assert!(!a.verifies(10014, "c1", &p));
        assert!(!b.verifies(10013, "c1", &p));
        assert_ne!(p, a.as_str());
    }
}
