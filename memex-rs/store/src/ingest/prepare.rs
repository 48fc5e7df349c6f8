//! The parser threads' part of a batch: redaction, compression, FTS text and the raw records
//! packed into zstd blocks, so that the writer thread does nothing but write.

use std::borrow::Cow;

use ai_cli_session_collector::ParsedMessage;

use super::IngestOptions;
use crate::redact;
use crate::{COMPRESS_TEXT_ABOVE, fts, zstd_bytes};

/// A message ready to be written.
pub struct Prepared {
    /// The message; its `text` is moved to `text` when short, and kept beside `text_z` (it
    /// is the full-text body of most messages).
    pub m: ParsedMessage,
    pub text: Option<String>,
    pub text_z: Option<Vec<u8>>,
    pub tool_input: Option<String>,
    /// The record's bytes (redacted), until [`pack_raw`] moves them into a block.
    pub raw: Option<Vec<u8>>,
    pub raw_ref: Option<RawRef>,
    /// Its full-text body, when it is searchable: see [`Prepared::index`].
    index: Option<Body>,
    pub redactions: u32,
}

/// What a message gives the full-text index.
enum Body {
    /// Its text as it is (most messages), not copied.
    Text,
    /// Its text cut to the index's limit, or with CJK runs expanded.
    Own(String),
}

impl Prepared {
    /// The text the full-text index gets for this message, if it is searchable.
    pub fn index(&self) -> Option<&str> {
        match self.index.as_ref()? {
            Body::Text => Some(self.text.as_deref().unwrap_or(&self.m.text)),
            Body::Own(s) => Some(s),
        }
    }
}

/// Where a record's bytes are in the batch's raw blocks.
#[derive(Debug, Clone, Copy)]
pub struct RawRef {
    pub block: usize,
    pub offset: usize,
    pub len: usize,
}

/// Raw records are packed into blocks of about this size before compression.
const RAW_BLOCK_BYTES: usize = 128 << 10;

/// Moves the records' bytes into zstd blocks (in message order) and points each message at its
/// bytes. Runs on the parser threads.
pub fn pack_raw(messages: &mut [Prepared]) -> Vec<Vec<u8>> {
    let mut blocks = Vec::new();
    let mut buf: Vec<u8> = Vec::new();
    for p in messages.iter_mut() {
        let Some(raw) = p.raw.take() else { continue };
        if !buf.is_empty() && buf.len() + raw.len() > RAW_BLOCK_BYTES {
            blocks.push(zstd_bytes(&buf));
            buf.clear();
        }
        p.raw_ref = Some(RawRef {
            block: blocks.len(),
            offset: buf.len(),
            len: raw.len(),
        });
        buf.extend_from_slice(&raw);
    }
    if !buf.is_empty() {
        blocks.push(zstd_bytes(&buf));
    }
    blocks
}

/// A title redacted on its own (no prompt to derive it from): the rules, then whatever follows
/// a `<private>` whose end the one-line cut removed.
pub(super) fn redacted_title(t: &str) -> String {
    redacted_title_tally(t, &mut redact::Tally::default())
}

/// [`redacted_title`], counting what it found.
pub(crate) fn redacted_title_tally(t: &str, tally: &mut redact::Tally) -> String {
    let t = redact::redact_text_tally(t, tally);
    match t.find("<private>") {
        Some(i) => {
            tally.add("private");
            format!("{}{}", &t[..i], redact::PRIVATE)
        }
        None => t.into_owned(),
    }
}

/// Redaction, compression and FTS text: everything CPU-heavy, done off the writer thread.
pub fn prepare(mut m: ParsedMessage, opts: &IngestOptions) -> Prepared {
    let mut redactions = 0;
    let raw = m.raw.take();
    let mut tool_input = m
        .tool_call
        .as_ref()
        .map(|t| serde_json::to_string(&t.input).unwrap_or_default());
    let raw = raw.map(|r| {
        if opts.redact {
            let (out, n) = redact::redact_bytes(&r);
            redactions = redactions.max(n);
            if n > 0 { out.into_owned() } else { r }
        } else {
            r
        }
    });
    if opts.redact {
        // A secret is stored in several copies (text, tool input, raw record): count the
        // secrets of the message, not the copies.
        let (t, n) = redact::redact_text(&m.text);
        if n > 0 {
            m.text = t.into_owned();
            redactions = redactions.max(n);
        }
        if let Some(input) = &tool_input {
            let (t, n) = redact::redact_text(input);
            if n > 0 {
                redactions = redactions.max(n);
                let t = t.into_owned();
                if let Some(tc) = m.tool_call.as_mut() {
                    tc.input =
                        serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t.clone()));
                }
                tool_input = Some(t);
            }
        }
    }
    let searchable = !m.text.trim().is_empty() && !m.flags.inherited && !m.flags.duplicate;
    let index = searchable.then(|| match fts::index_text(&m.text, opts.fts_max_bytes) {
        Cow::Borrowed(_) => Body::Text,
        Cow::Owned(s) => Body::Own(s),
    });
    let (text, text_z) = if m.text.len() > COMPRESS_TEXT_ABOVE {
        (None, Some(zstd_bytes(m.text.as_bytes())))
    } else {
        (Some(std::mem::take(&mut m.text)), None)
    };
    Prepared {
        m,
        text,
        text_z,
        tool_input,
        raw,
        raw_ref: None,
        index,
        redactions,
    }
}
