//! The sync key: 32 random bytes made by `memex sync setup` on the first machine and carried
//! by the user to the others (`memex sync join --key FILE`). It never reaches the target:
//! what the target keeps is the key's id, a one-way digest that tells a wrong key from a
//! damaged batch. Every batch is sealed under its own key, derived from this one and the
//! batch's random salt (HKDF-SHA-256), so no two batches share a cipher key.

use std::io::Write;
use std::path::Path;

use ring::{aead, hkdf};
use zeroize::Zeroizing;

/// The first word of a key file's key line (the number is the file format's version).
const KEY_LINE: &str = "memex-sync-key-1";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read the key file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write the key file {path}: {source}")]
    Write {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the key file {path} can be read by other users of this machine (mode {mode:o}); \
         run `chmod 600 {path}`"
    )]
    Exposed { path: String, mode: u32 },
    #[error("not a Memex sync key: {0}")]
    Malformed(&'static str),
}

/// The sync key. Its bytes are wiped from memory when it is dropped, and `Debug` shows only
/// its id.
#[derive(Clone)]
pub struct SyncKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for SyncKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SyncKey({})", self.id())
    }
}

/// A key's public id: 8 bytes derived one way from it, written as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyId(pub [u8; 8]);

impl std::fmt::Display for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl std::fmt::Debug for KeyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeyId({self})")
    }
}

impl std::str::FromStr for KeyId {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<KeyId, KeyError> {
        let b = hex::decode(s)
            .ok()
            .ok_or(KeyError::Malformed("a key id is 16 hex digits"))?;
        Ok(KeyId(b.try_into().map_err(|_| {
            KeyError::Malformed("a key id is 16 hex digits")
        })?))
    }
}

/// An HKDF output length.
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

impl SyncKey {
    /// A new key from the operating system's random generator.
    pub fn generate() -> SyncKey {
        let mut b = Zeroizing::new([0u8; 32]);
        getrandom::fill(&mut b[..])
            .expect("the operating system's random generator is unavailable");
        SyncKey(b)
    }

    /// The key's id, which the target stores to recognise the key.
    pub fn id(&self) -> KeyId {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"memex sync key id").extract(&self.0[..]);
        let info: [&[u8]; 1] = [b"key id 1"];
        let mut id = [0u8; 8];
        prk.expand(&info, Len(8))
            .and_then(|okm| okm.fill(&mut id))
            .expect("8 bytes are within HKDF-SHA-256's output");
        KeyId(id)
    }

    /// The cipher key of one batch, from the batch's random `salt`.
    pub(crate) fn batch_key(&self, salt: &[u8]) -> aead::LessSafeKey {
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(&self.0[..]);
        let info: [&[u8]; 1] = [b"memex sync batch 1"];
        let okm = prk
            .expand(&info, &aead::CHACHA20_POLY1305)
            .expect("a ChaCha20-Poly1305 key is within HKDF-SHA-256's output");
        aead::LessSafeKey::new(aead::UnboundKey::from(okm))
    }

    /// The key as a key file holds it: a comment saying what it is, then its line.
    pub fn to_file_text(&self) -> Zeroizing<String> {
        Zeroizing::new(format!(
            "# Memex sync key (id {}). Whoever holds this file can read everything your\n\
             # machines sync; without it nobody can, not even you. Keep it private.\n\
             {KEY_LINE} {}\n",
            self.id(),
            *Zeroizing::new(hex::encode(&self.0[..]))
        ))
    }

    /// The key as 24 words (BIP-39's English list, its last word holding a checksum), for a
    /// person to write down or type on another machine.
    pub fn to_words(&self) -> Zeroizing<String> {
        let words = bip39::Mnemonic::from_entropy(&self.0[..])
            .expect("32 bytes are a length BIP-39 encodes");
        Zeroizing::new(words.to_string())
    }

    /// A key from the text of a key file (its key line; `#` lines are comments), from its 64
    /// hex digits alone, or from its 24 words ([`SyncKey::to_words`], on one line or several).
    pub fn from_text(text: &str) -> Result<SyncKey, KeyError> {
        let meant: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let words: Vec<&str> = meant.iter().flat_map(|l| l.split_whitespace()).collect();
        if words.len() > 2 && words.iter().all(|w| w.chars().all(char::is_alphabetic)) {
            return SyncKey::from_words(&words);
        }
        let mut lines = meant.into_iter();
        let line = lines
            .next()
            .ok_or(KeyError::Malformed("the file holds no key"))?;
        if lines.next().is_some() {
            return Err(KeyError::Malformed(
                "the file holds more than one line besides comments",
            ));
        }
        let digits = match line.split_once(char::is_whitespace) {
            Some((KEY_LINE, rest)) => rest.trim(),
            Some(_) => {
                return Err(KeyError::Malformed(
                    "its line must read `memex-sync-key-1` and 64 hex digits",
                ));
            }
            None => line,
        };
        let bytes = Zeroizing::new(
            hex::decode(digits)
                .ok()
                .ok_or(KeyError::Malformed("the key is not hex digits"))?,
        );
        let mut key = Zeroizing::new([0u8; 32]);
        if bytes.len() != key.len() {
            return Err(KeyError::Malformed(
                "the key must be 64 hex digits (32 bytes)",
            ));
        }
        key.copy_from_slice(&bytes);
        Ok(SyncKey(key))
    }

    fn from_words(words: &[&str]) -> Result<SyncKey, KeyError> {
        if words.len() != 24 {
            return Err(KeyError::Malformed("a key in words is 24 of them"));
        }
        let phrase = Zeroizing::new(words.join(" ").to_lowercase());
        let m = bip39::Mnemonic::parse_in_normalized(bip39::Language::English, &phrase).map_err(
            |e| {
                KeyError::Malformed(match e {
                    bip39::Error::UnknownWord(_) => {
                        "one of the 24 words is not in the list (mistyped?)"
                    }
                    bip39::Error::InvalidChecksum => {
                        "the 24 words do not check out (one mistyped, missing or out of place)"
                    }
                    _ => "these are not the 24 words of a key",
                })
            },
        )?;
        let bytes = Zeroizing::new(m.to_entropy());
        let mut key = Zeroizing::new([0u8; 32]);
        if bytes.len() != key.len() {
            return Err(KeyError::Malformed("a key in words is 24 of them"));
        }
        key.copy_from_slice(&bytes);
        Ok(SyncKey(key))
    }

    /// A buffer for a key's text that is wiped when dropped.
    pub fn buffer() -> Zeroizing<String> {
        Zeroizing::new(String::new())
    }

    /// Reads a key file, refusing one that other users can read.
    pub fn read_file(path: &Path) -> Result<SyncKey, KeyError> {
        let name = path.display().to_string();
        let read = |source| KeyError::Read {
            path: name.clone(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let mode = file.metadata().map_err(read)?.mode() & 0o777;
            if mode & 0o077 != 0 {
                return Err(KeyError::Exposed { path: name, mode });
            }
        }
        let mut text = SyncKey::buffer();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, 4096), &mut text)
            .map_err(read)?;
        SyncKey::from_text(&text)
    }

    /// Writes the key to a new file that only its owner can read (an existing file is never
    /// overwritten: it may hold another key that batches were sealed with).
    pub fn write_file(&self, path: &Path) -> Result<(), KeyError> {
        let write = |source| KeyError::Write {
            path: path.display().to_string(),
            source,
        };
        let mut open = std::fs::OpenOptions::new();
        open.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
        let mut f = open.open(path).map_err(write)?;
        f.write_all(self.to_file_text().as_bytes()).map_err(write)?;
        f.sync_all().map_err(write)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_survives_its_file_and_keeps_its_id() {
        let dir = tempfile::tempdir().unwrap();
        let key = SyncKey::generate();
        let path = dir.path().join("sync.key");
        key.write_file(&path).unwrap();
        let back = SyncKey::read_file(&path).unwrap();
        assert_eq!(back.id(), key.id());
        assert_ne!(SyncKey::generate().id(), key.id());
        // The file names the key's id (to tell files apart); Debug shows only the id.
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(&key.id().to_string()), "{text}");
        assert!(format!("{key:?}").contains(&key.id().to_string()));
        assert!(!format!("{key:?}").contains(&hex::encode(&key.0[..])));
        // Never overwritten.
        assert!(matches!(key.write_file(&path), Err(KeyError::Write { .. })));
        assert_eq!(text.lines().last().unwrap().len(), KEY_LINE.len() + 1 + 64);
        // The hex alone is a key too.
        let bare = text.lines().last().unwrap().split_once(' ').unwrap().1;
        assert_eq!(SyncKey::from_text(bare).unwrap().id(), key.id());
    }

    #[cfg(unix)]
    #[test]
    fn a_key_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sync.key");
        SyncKey::generate().write_file(&path).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = SyncKey::read_file(&path).unwrap_err();
        assert!(matches!(e, KeyError::Exposed { mode: 0o644, .. }), "{e}");
    }

    #[test]
    fn a_key_goes_by_hand_as_24_words() {
        // A fixed key, so that the words swapped below are known to fail the checksum (one
        // order in 256 would pass it).
        let hex: String = (0u8..32).map(|b| format!("{:02x}", b * 7 + 3)).collect();
        let key = SyncKey::from_text(&hex).unwrap();
        let words = key.to_words();
        let list: Vec<&str> = words.split(' ').collect();
        assert_eq!(list.len(), 24);
        assert_eq!(SyncKey::from_text(&words).unwrap().id(), key.id());
        // Typed on several lines, in capitals, with a comment: the same key.
        let typed = format!(
            "# my key\n{}\n{}\n",
            list[..12].join(" ").to_uppercase(),
            list[12..].join("  ")
        );
        assert_eq!(SyncKey::from_text(&typed).unwrap().id(), key.id());
        // A word mistyped, two swapped, one missing: each refused, saying which way.
        let mut swapped = list.clone();
        let at = (1..24).find(|&i| swapped[i] != swapped[0]).unwrap();
        swapped.swap(0, at);
        let mut unknown = list.clone();
        unknown[5] = "memexx";
        for (bad, why) in [
            (unknown.join(" "), "not in the list"),
            (swapped.join(" "), "do not check out"),
            (list[1..].join(" "), "24 of them"),
        ] {
            let e = SyncKey::from_text(&bad).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    #[test]
    fn malformed_keys_say_what_is_wrong() {
        for (text, why) in [
            ("", "holds no key"),
            ("# only a comment\n", "holds no key"),
            ("memex-sync-key-1 abcd", "64 hex digits"),
            ("memex-sync-key-1 zz", "not hex"),
            ("ssh-rsa AAAA", "must read"),
            ("00\n11", "more than one line"),
        ] {
            let e = SyncKey::from_text(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text:?}: {e}");
        }
    }
}
