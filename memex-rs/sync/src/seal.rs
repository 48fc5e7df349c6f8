//! A batch as the target stores it:
//!
//! ```text
//!  "MXSYNC" | format (u16 LE) | key id (8) | salt (32) | ChaCha20-Poly1305( zstd(payload) ) | tag (16)
//! ```
//!
//! The cipher key is derived from the sync key and the batch's random salt, so each key seals
//! one batch (its nonce can then be fixed). The associated data is the header and the batch's
//! place, `(archive, host, seq)`: a batch copied into another host's series, to another
//! position or into another archive does not open. Opening checks, in order: the magic, the
//! format, the key id (a wrong key is told apart from damage), the tag (any changed, missing
//! or added byte), then inflates with a bound on the size.

use std::io::Read;

use ring::aead;

use crate::key::{KeyId, SyncKey};

/// The batch format this build writes and reads.
pub const FORMAT: u16 = 1;
const MAGIC: &[u8; 6] = b"MXSYNC";
const SALT: usize = 32;
const HEADER: usize = MAGIC.len() + 2 + 8 + SALT;
/// Largest payload a batch may inflate to (a batch holds a few MB; more is a bomb).
pub const MAX_PAYLOAD: usize = 256 << 20;
/// Largest sealed batch a target stores or returns (push refuses to make a larger one).
pub const MAX_SEALED: usize = 64 << 20;

/// Where a batch belongs: which archive, whose series, which position in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    pub archive: &'a str,
    pub host: &'a str,
    pub seq: u64,
}

impl std::fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "batch {} of host {}", self.seq, self.host)
    }
}

/// Why a batch does not open. Each is said for that batch; the others go on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    #[error("not a Memex sync batch")]
    NotABatch,
    #[error("written in batch format {0}, newer than this Memex ({FORMAT}): update Memex")]
    NewerFormat(u16),
    #[error("sealed with another key (id {found}; this machine's key is {ours})")]
    OtherKey { found: KeyId, ours: KeyId },
    #[error(
        "does not verify: it was altered or truncated, or copied from another host's series \
         or position"
    )]
    Tampered,
    #[error("inflates past {MAX_PAYLOAD} bytes")]
    TooLarge,
    #[error("its content cannot be inflated")]
    Corrupt,
}

fn aad(header: &[u8], at: Place<'_>) -> Vec<u8> {
    let mut a = Vec::with_capacity(header.len() + at.archive.len() + at.host.len() + 24);
    a.extend_from_slice(header);
    for part in [at.archive.as_bytes(), at.host.as_bytes()] {
        a.extend_from_slice(&(part.len() as u64).to_le_bytes());
        a.extend_from_slice(part);
    }
    a.extend_from_slice(&at.seq.to_le_bytes());
    a
}

/// Compresses and encrypts `payload` for its place.
pub fn seal(key: &SyncKey, at: Place<'_>, payload: &[u8]) -> Vec<u8> {
    let mut salt = [0u8; SALT];
    getrandom::fill(&mut salt).expect("the operating system's random generator is unavailable");
    let mut out = Vec::with_capacity(HEADER + payload.len() / 3 + 64);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.extend_from_slice(&key.id().0);
    out.extend_from_slice(&salt);
    let aad = aad(&out, at);
    let mut body = zstd::bulk::compress(payload, 3).expect("compressing into memory cannot fail");
    key.batch_key(&salt)
        .seal_in_place_append_tag(
            aead::Nonce::assume_unique_for_key([0; aead::NONCE_LEN]),
            aead::Aad::from(aad),
            &mut body,
        )
        .expect("a batch is far below ChaCha20-Poly1305's length limit");
    out.extend_from_slice(&body);
    out
}

/// The key id a batch says it was sealed with, if it is a batch at all.
pub fn key_id(sealed: &[u8]) -> Option<KeyId> {
    (sealed.len() >= HEADER && sealed.starts_with(MAGIC))
        .then(|| KeyId(sealed[8..16].try_into().expect("8 bytes")))
}

/// Verifies, decrypts and inflates a batch that should be at `at`.
pub fn open(key: &SyncKey, at: Place<'_>, sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
    open_within(key, at, sealed, MAX_PAYLOAD)
}

fn open_within(
    key: &SyncKey,
    at: Place<'_>,
    sealed: &[u8],
    max_payload: usize,
) -> Result<Vec<u8>, OpenError> {
    if sealed.len() < HEADER + aead::CHACHA20_POLY1305.tag_len() || !sealed.starts_with(MAGIC) {
        return Err(OpenError::NotABatch);
    }
    let format = u16::from_le_bytes([sealed[6], sealed[7]]);
    if format > FORMAT {
        return Err(OpenError::NewerFormat(format));
    }
    if format != FORMAT {
        return Err(OpenError::NotABatch);
    }
    let found = key_id(sealed).ok_or(OpenError::NotABatch)?;
    let ours = key.id();
    if found != ours {
        return Err(OpenError::OtherKey { found, ours });
    }
    let (header, body) = sealed.split_at(HEADER);
    let mut body = body.to_vec();
    let plain = key
        .batch_key(&header[16..])
        .open_in_place(
            aead::Nonce::assume_unique_for_key([0; aead::NONCE_LEN]),
            aead::Aad::from(aad(header, at)),
            &mut body,
        )
        .map_err(|_| OpenError::Tampered)?;
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(&plain[..])
        .map_err(|_| OpenError::Corrupt)?
        .take(max_payload as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|_| OpenError::Corrupt)?;
    if out.len() > max_payload {
        return Err(OpenError::TooLarge);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ARCHIVE: &str = "0123456789abcdef0123456789abcdef";
    const HOST: &str = "fedcba9876543210fedcba9876543210";

    fn at(seq: u64) -> Place<'static> {
        Place {
            archive: ARCHIVE,
            host: HOST,
            seq,
        }
    }

    #[test]
    fn a_batch_opens_only_with_its_key_at_its_place() {
        let key = SyncKey::generate();
        let text = b"where did we fix the flaky timezone test ".repeat(200);
        let sealed = seal(&key, at(7), &text);
        assert!(sealed.len() < text.len() / 4, "compressed before sealing");
        assert_eq!(open(&key, at(7), &sealed).unwrap(), text);
        // Nothing of the text is visible.
        assert!(!sealed.windows(5).any(|w| w == b"flaky"));
        // Two seals of the same payload differ (a fresh salt, so a fresh key).
        assert_ne!(seal(&key, at(7), &text), sealed);
        // Another place: another position, another host's series, another archive.
        assert_eq!(open(&key, at(8), &sealed), Err(OpenError::Tampered));
        let other_host = Place {
            host: ARCHIVE,
            ..at(7)
        };
        assert_eq!(open(&key, other_host, &sealed), Err(OpenError::Tampered));
        let other_archive = Place {
            archive: HOST,
            ..at(7)
        };
        assert_eq!(open(&key, other_archive, &sealed), Err(OpenError::Tampered));
        // Another key is named as such, not as damage.
        let other = SyncKey::generate();
        assert_eq!(
            open(&other, at(7), &sealed),
            Err(OpenError::OtherKey {
                found: key.id(),
                ours: other.id()
            })
        );
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_refused() {
        let key = SyncKey::generate();
        let sealed = seal(&key, at(1), b"a short payload");
        for i in 0..sealed.len() {
            for bit in [0, 3, 7] {
                let mut bad = sealed.clone();
                bad[i] ^= 1 << bit;
                assert!(open(&key, at(1), &bad).is_err(), "byte {i} bit {bit}");
            }
        }
        for len in 0..sealed.len() {
            assert!(open(&key, at(1), &sealed[..len]).is_err(), "cut at {len}");
        }
        let mut longer = sealed.clone();
        longer.push(0);
        assert_eq!(open(&key, at(1), &longer), Err(OpenError::Tampered));
    }

    #[test]
    fn a_newer_format_and_a_bomb_are_named() {
        let key = SyncKey::generate();
        let mut newer = seal(&key, at(1), b"x");
        newer[6..8].copy_from_slice(&(FORMAT + 1).to_le_bytes());
        assert_eq!(
            open(&key, at(1), &newer),
            Err(OpenError::NewerFormat(FORMAT + 1))
        );
        assert_eq!(
            open(&key, at(1), b"{\"json\": true}"),
            Err(OpenError::NotABatch)
        );
        // A payload that inflates past the bound (zeros compress ~1000:1); the bound is
        // lowered here to keep the test small.
        let bomb = seal(&key, at(2), &vec![0u8; (1 << 20) + 1]);
        assert!(bomb.len() < 4 << 10);
        assert_eq!(
            open_within(&key, at(2), &bomb, 1 << 20),
            Err(OpenError::TooLarge)
        );
        assert_eq!(
            open_within(&key, at(2), &bomb, 2 << 20).unwrap().len(),
            (1 << 20) + 1
        );
    }
}
