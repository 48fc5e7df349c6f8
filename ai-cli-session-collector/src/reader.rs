//! Reading transcript files safely while their agent is still writing them: complete lines
//! only, from a byte offset, plain or zstd-compressed, with lenient JSON decoding.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};

/// How many head bytes identify a file's content for rewrite detection.
const HEAD_BYTES: u64 = 1024;

/// The longest record (line) read. A longer one is skipped and reported (see
/// [`Chunk::oversized`]): one line never costs more memory than this, whatever a file holds.
/// Real records carrying pasted images or whole files stay well below it.
pub const MAX_RECORD_BYTES: usize = 64 << 20;

/// The most bytes one read scans past an over-long record looking for its end; beyond it the
/// record is taken as unterminated (read again when the file changes).
pub const MAX_SKIP_BYTES: u64 = 1 << 30;

/// The most decompressed content read from one `.zst` file: a few kilobytes of zstd can expand
/// to terabytes, so reading stops here with an error instead.
pub const MAX_DECOMPRESSED_BYTES: u64 = 1 << 30;

/// The largest whole document read ([`read_all`]: a session's JSON file).
pub const MAX_DOCUMENT_BYTES: u64 = 256 << 20;

/// Complete lines read from a file, starting at a byte offset.
pub struct Chunk {
    /// The bytes of the complete lines (ending with `\n`), starting at `start`.
    pub data: Vec<u8>,
    pub start: u64,
    /// Whether the end of the file was reached (nothing complete remains after `data`).
    pub at_end: bool,
    /// Whether an unterminated tail follows `data` at the end of the file.
    pub pending_tail: bool,
    /// The (decompressed) content ends before `start`: the file was rewritten shorter. Only a
    /// read tells for a `.zst` file, whose content length is not known beforehand.
    pub past_end: bool,
    /// The record at `start` is longer than [`MAX_RECORD_BYTES`] (then `data` is empty).
    pub oversized: Option<Oversized>,
}

/// An over-long record at the start of a [`Chunk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oversized {
    /// Its length, without the newline, when its end was found; `None` when the file ended
    /// first (or [`MAX_SKIP_BYTES`] were scanned, or a compressed file reached
    /// [`MAX_DECOMPRESSED_BYTES`]).
    pub len: Option<u64>,
}

impl Chunk {
    /// Iterates `(byte offset, line without the newline)`.
    pub fn lines(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let start = self.start;
        let mut pos = 0usize;
        let data = &self.data;
        std::iter::from_fn(move || {
            if pos >= data.len() {
                return None;
            }
            let rest = &data[pos..];
            let len = memchr_newline(rest).unwrap_or(rest.len());
            let line = &rest[..len];
            let off = start + pos as u64;
            pos += len + 1;
            Some((off, line))
        })
    }
}

fn memchr_newline(s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == b'\n')
}

fn is_zstd(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "zst")
}

/// A reader that fails (rather than ending) once `left` bytes were read from it.
struct Capped<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // One byte more tells a file of exactly the limit from a longer one.
            let mut probe = [0u8; 1];
            return match self.inner.read(&mut probe)? {
                0 => Ok(0),
                _ => Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the compressed file holds more than {} MiB of text; the rest is not read",
                        MAX_DECOMPRESSED_BYTES >> 20
                    ),
                )),
            };
        }
        let n = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let got = self.inner.read(&mut buf[..n])?;
        self.left -= got as u64;
        Ok(got)
    }
}

/// Opens a file for reading, refusing a symbolic link: what an agent's folder links to is not
/// the agent's (discovery does not follow links below a root, and the store checks every
/// component of a transcript's path; this holds for every file an adapter opens).
pub fn open_file(path: &Path) -> io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.custom_flags(libc::O_NOFOLLOW);
    }
    o.open(path)
}

/// A small side file of an agent (a project registry, a workspace's settings, one part of a
/// session kept as many files), read as [`open_file`] opens it, of at most
/// [`MAX_DOCUMENT_BYTES`].
pub fn read_file(path: &Path) -> io::Result<Vec<u8>> {
    let mut v = Vec::new();
    open_file(path)?
        .take(MAX_DOCUMENT_BYTES + 1)
        .read_to_end(&mut v)?;
    if v.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(too_big());
    }
    Ok(v)
}

fn too_big() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the file holds more than {} MiB: not read",
            MAX_DOCUMENT_BYTES >> 20
        ),
    )
}

/// Opens a file as a byte stream positioned at `offset` of its (decompressed) content. Also
/// says whether the content is shorter than `offset`.
fn open_at(path: &Path, offset: u64) -> io::Result<(Box<dyn Read>, bool)> {
    let mut f = open_file(path)?;
    if is_zstd(path) {
        let mut dec = Capped {
            inner: zstd::stream::read::Decoder::new(f)?,
            left: MAX_DECOMPRESSED_BYTES,
        };
        let skipped = io::copy(&mut (&mut dec).take(offset), &mut io::sink())?;
        Ok((Box::new(dec), skipped < offset))
    } else {
        let short = f.metadata()?.len() < offset;
        f.seek(SeekFrom::Start(offset))?;
        Ok((Box::new(f), short))
    }
}

/// Reads complete lines from `offset`, about `max_bytes` of them (always at least one whole
/// line of up to [`MAX_RECORD_BYTES`]). A partial last line is never returned; a longer line at
/// `offset` is reported as [`Chunk::oversized`] without being kept.
pub fn read_lines(path: &Path, offset: u64, max_bytes: usize) -> io::Result<Chunk> {
    let (mut r, past_end) = open_at(path, offset)?;
    let mut buf = Vec::with_capacity(max_bytes.min(1 << 20));
    let mut eof = false;
    // Where the line being read starts (just after the last newline in `buf`).
    let mut line_start = 0usize;
    // Read about max_bytes, then keep going until a newline is in the buffer or EOF.
    loop {
        let want = if buf.len() < max_bytes {
            max_bytes - buf.len()
        } else {
            1 << 20
        };
        let before = buf.len();
        let n = r.by_ref().take(want as u64).read_to_end(&mut buf)?;
        if let Some(i) = buf[before..].iter().rposition(|&b| b == b'\n') {
            line_start = before + i + 1;
        }
        if n < want {
            eof = true;
            break;
        }
        if buf.len() - line_start > MAX_RECORD_BYTES {
            if line_start > 0 {
                // The lines before the long one now; it comes first in the next read.
                buf.truncate(line_start);
                return Ok(Chunk {
                    data: buf,
                    start: offset,
                    at_end: false,
                    pending_tail: false,
                    past_end,
                    oversized: None,
                });
            }
            let len = skip_line(&mut r, &buf)?;
            return Ok(Chunk {
                data: Vec::new(),
                start: offset,
                at_end: len.is_none(),
                pending_tail: false,
                past_end,
                oversized: Some(Oversized { len }),
            });
        }
        if line_start > before {
            break;
        }
    }
    let complete = line_start;
    let pending_tail = eof && complete < buf.len();
    // When we stopped early there may be more complete lines after the tail we read.
    let at_end = eof;
    buf.truncate(complete);
    Ok(Chunk {
        data: buf,
        start: offset,
        at_end,
        pending_tail,
        past_end,
        oversized: None,
    })
}

/// Reads on past the start of an over-long line (`head`, which holds no newline) to its
/// newline: the line's length, or `None` when the file (or [`MAX_SKIP_BYTES`]) ends first.
fn skip_line(r: &mut dyn Read, head: &[u8]) -> io::Result<Option<u64>> {
    let mut len = head.len() as u64;
    let mut piece = vec![0u8; 1 << 20];
    while len < MAX_SKIP_BYTES {
        let n = match r.read(&mut piece) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // The most a compressed file may expand to (`Capped`): as far as is read, unended.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => return Ok(None),
            Err(e) => return Err(e),
        };
        if let Some(i) = memchr_newline(&piece[..n]) {
            return Ok(Some(len + i as u64));
        }
        len += n as u64;
    }
    Ok(None)
}

/// Reads everything from `offset` to the end of the file (the unterminated tail), at most
/// [`MAX_RECORD_BYTES`] of it.
pub fn read_lines_tail(path: &Path, offset: u64) -> io::Result<Vec<u8>> {
    let (r, _) = open_at(path, offset)?;
    let mut v = Vec::new();
    r.take(MAX_RECORD_BYTES as u64).read_to_end(&mut v)?;
    Ok(v)
}

/// Reads a whole file (decompressing `.zst`), of at most [`MAX_DOCUMENT_BYTES`].
pub fn read_all(path: &Path) -> io::Result<Vec<u8>> {
    let (r, _) = open_at(path, 0)?;
    let mut v = Vec::new();
    r.take(MAX_DOCUMENT_BYTES + 1).read_to_end(&mut v)?;
    if v.len() as u64 > MAX_DOCUMENT_BYTES {
        return Err(too_big());
    }
    Ok(v)
}

/// A fingerprint of the first bytes of the file (up to `upto`, at most 1 KiB): equal
/// fingerprints mean the file was appended to, not rewritten.
pub fn head_fingerprint(path: &Path, upto: u64) -> io::Result<String> {
    let n = upto.min(HEAD_BYTES);
    let (mut r, _) = open_at(path, 0)?;
    let mut buf = Vec::with_capacity(n as usize);
    r.by_ref().take(n).read_to_end(&mut buf)?;
    let digest = Sha256::digest(&buf);
    Ok(format!("{}:{}", buf.len(), hex(&digest[..12])))
}

/// Whether a stored fingerprint still matches the file.
pub fn head_matches(path: &Path, fingerprint: &str) -> io::Result<bool> {
    let Some((n, _)) = fingerprint.split_once(':') else {
        return Ok(false);
    };
    let n: u64 = n.parse().unwrap_or(0);
    Ok(head_fingerprint(path, n)? == fingerprint)
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(H[(b >> 4) as usize] as char);
        s.push(H[(b & 15) as usize] as char);
    }
    s
}

/// A decoded JSON record and what had to be forgiven to decode it.
#[derive(Debug)]
pub struct Decoded<T = serde_json::Value> {
    pub value: T,
    /// Set when the line was not valid UTF-8 and was decoded with U+FFFD replacements.
    pub lossy_utf8: bool,
}

/// Decodes one line that must be a JSON object into `T`, as leniently as [`decode_json`].
///
/// `T` is a value tree, or a typed view of the record whose fields accept any JSON (so that a
/// field of an unexpected type reads as absent instead of failing the record). A well-formed
/// object goes straight into `T`; anything else (a line that is not an object, lone surrogate
/// escapes, invalid UTF-8, whatever a typed view refuses to read) goes through [`decode_json`]
/// first, so a typed view accepts and rejects exactly the lines a tree does, with the same
/// reasons.
pub fn decode_record<T: DeserializeOwned>(bytes: &[u8]) -> Result<Decoded<T>, DecodeError> {
    if bytes.first() == Some(&b'{')
        && let Ok(s) = std::str::from_utf8(bytes)
        && let Ok(value) = serde_json::from_str::<T>(s)
    {
        return Ok(Decoded {
            value,
            lossy_utf8: false,
        });
    }
    let d = decode_json(bytes)?;
    if !d.value.is_object() {
        return Err(DecodeError::NotObject);
    }
    let value = T::deserialize(d.value).map_err(DecodeError::DoesNotFit)?;
    Ok(Decoded {
        value,
        lossy_utf8: d.lossy_utf8,
    })
}

/// Decodes one JSON record leniently: lone UTF-16 surrogate escapes (`"\ud83d"`, written by
/// JavaScript when an emoji is cut in half) become U+FFFD, and invalid UTF-8 bytes are decoded
/// with U+FFFD (the raw bytes are still stored as they are). Anything else is an error.
pub fn decode_json(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    // Valid UTF-8 (nearly every line) is checked once for the whole line, not string by string.
    let parsed = match std::str::from_utf8(bytes) {
        Ok(s) => serde_json::from_str(s),
        Err(_) => serde_json::from_slice(bytes),
    };
    let first_err = match parsed {
        Ok(value) => {
            return Ok(Decoded {
                value,
                lossy_utf8: false,
            });
        }
        Err(e) => e,
    };
    let text = String::from_utf8_lossy(bytes);
    let lossy_utf8 = matches!(text, std::borrow::Cow::Owned(_));
    let fixed = fix_lone_surrogates(&text);
    let candidate = fixed.as_deref().unwrap_or(&text);
    if !lossy_utf8 && fixed.is_none() {
        return Err(DecodeError::Json(first_err));
    }
    serde_json::from_str(candidate)
        .map(|value| Decoded { value, lossy_utf8 })
        .map_err(DecodeError::Json)
}

/// Why a record could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("invalid JSON: {0}")]
    Json(serde_json::Error),
    #[error("record is not a JSON object")]
    NotObject,
    /// A typed view refused the record.
    #[error("record does not fit: {0}")]
    DoesNotFit(serde_json::Error),
}

/// Replaces `\uXXXX` escapes of unpaired surrogates with `\ufffd`. Returns `None` when there
/// is nothing to fix.
pub fn fix_lone_surrogates(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let hex4 = |i: usize| -> Option<u32> {
        let h = b.get(i..i + 4)?;
        u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()
    };
    let mut out: Option<String> = None;
    let mut copied = 0usize;
    let mut i = 0usize;
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        if b.get(i + 1) != Some(&b'u') {
            i += 2; // any other escape, including `\\`
            continue;
        }
        let Some(cp) = hex4(i + 2) else {
            i += 2;
            continue;
        };
        let lone = if (0xD800..0xDC00).contains(&cp) {
            let paired = b.get(i + 6) == Some(&b'\\')
                && b.get(i + 7) == Some(&b'u')
                && hex4(i + 8).is_some_and(|lo| (0xDC00..0xE000).contains(&lo));
            if paired {
                i += 12;
                continue;
            }
            true
        } else {
            (0xDC00..0xE000).contains(&cp)
        };
        if lone {
            let o = out.get_or_insert_with(|| String::with_capacity(s.len()));
            o.push_str(&s[copied..i]);
            o.push_str("\\ufffd");
            copied = i + 6;
        }
        i += 6;
    }
    out.map(|mut o| {
        o.push_str(&s[copied..]);
        o
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_high_surrogate_is_replaced() {
        let d = decode_json(br#"{"t":"party \ud83d"}"#).unwrap();
        assert_eq!(d.value["t"], "party \u{fffd}");
    }

    #[test]
    fn paired_surrogates_and_escaped_backslashes_are_kept() {
        assert_eq!(fix_lone_surrogates(r#""\ud83c\udf89""#), None);
        assert_eq!(fix_lone_surrogates(r#""\\ud83d""#), None);
        assert_eq!(
            fix_lone_surrogates(r#""\udf89x""#).as_deref(),
            Some(r#""\ufffdx""#)
        );
    }

    #[test]
    fn invalid_utf8_is_decoded_lossily() {
        let d = decode_json(b"{\"t\":\"caf\xe9\"}").unwrap();
        assert!(d.lossy_utf8);
        assert_eq!(d.value["t"], "caf\u{fffd}");
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(matches!(decode_json(b"{\"t\":"), Err(DecodeError::Json(e)) if e.is_eof()));
    }

    crate::loose::view! {
        #[derive(Debug)]
        struct View {
            "a" => a: Option<serde_json::Value>,
        }
    }

    #[test]
    fn a_record_read_into_a_view_is_accepted_and_rejected_as_a_tree() {
        let lines: [&[u8]; 10] = [
            br#"{"a":1,"b":{"c":[true,null]}}"#,
            br#"[1]"#,
            br#""text""#,
            br#"{"a":"\ud83d"}"#,
            b"{\"a\":\"caf\xe9\"}",
            br#"{"a":1"#,
            br#"{"a":1,"a":"two"}"#,
            // serde_json's raw-value token: as the first key of an object a tree reads the
            // JSON in its string instead of the object; anywhere else it is an ordinary key.
            br#"{"$serde_json::private::RawValue":"{\"a\":2}"}"#,
            br#"{"a":1,"$serde_json::private::RawValue":"x"}"#,
            br#"{"a":{"$serde_json::private::RawValue":"[3]"}}"#,
        ];
        for line in lines {
            let tree = decode_json(line).and_then(|d| {
                if d.value.is_object() {
                    Ok(d)
                } else {
                    Err(DecodeError::NotObject)
                }
            });
            let view = decode_record::<View>(line);
            match (&tree, &view) {
                (Ok(t), Ok(v)) => {
                    assert_eq!(t.value.get("a"), v.value.a.as_ref(), "{line:?}");
                    assert_eq!(t.lossy_utf8, v.lossy_utf8, "{line:?}");
                }
                (Err(t), Err(v)) => assert_eq!(t.to_string(), v.to_string(), "{line:?}"),
                _ => panic!("{line:?}: tree {tree:?}, view {view:?}"),
            }
        }
    }

    #[test]
    fn partial_last_line_is_not_returned() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.jsonl");
        std::fs::write(&p, b"{\"a\":1}\n{\"b\":2}\n{\"c\":").unwrap();
        let c = read_lines(&p, 0, 1 << 20).unwrap();
        assert_eq!(c.lines().count(), 2);
        assert!(c.pending_tail && c.at_end);
        assert_eq!(c.data.len(), 16);
        let c2 = read_lines(&p, 8, 4).unwrap();
        assert_eq!(c2.lines().next().unwrap(), (8, &b"{\"b\":2}"[..]));
    }
}
