//! The driver the document adapters share: a file the agent rewrites in place (a task's JSON,
//! a thread, a Markdown history) is read whole on every change. Unchanged content is skipped,
//! every message keeps the stable id the adapter gives it (so the store updates what changed
//! and inserts only what is new), and messages that were there before and are gone now are
//! reported as [`Edit::Deactivate`]: the agent rewrote its history, the archive keeps them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::adapter::Emit;
use crate::model::{Cursor, Edit, ParseIssue, ParseOutput};
use crate::{ParseError, reader};

/// What an adapter made of a document.
pub(crate) enum Read {
    /// The document was read; the messages pushed are all it holds now.
    Whole,
    /// The document is being written (half a JSON value): wait for the next change.
    Incomplete,
    /// The document is not what the adapter reads, for this reason; nothing is taken from it.
    Bad(String),
}

/// The cursor state of a document: the adapter's own state plus the ids each session had the
/// last time the document was read.
#[derive(Default, Serialize, Deserialize)]
struct DocState<S> {
    #[serde(default)]
    inner: S,
    #[serde(default)]
    ids: BTreeMap<String, BTreeSet<String>>,
}

/// Reads the document at `path` when it changed since `cursor`, hands its bytes to `read`, and
/// returns what it pushed (sequenced in document order, vanished ids deactivated) with the
/// adapter's state. `read` sets `raw` on the messages itself (the element each came from).
pub(crate) fn drive_document<S: Default + Serialize + DeserializeOwned>(
    path: &Path,
    cursor: &Cursor,
    read: impl FnOnce(&mut S, &mut Emit, &[u8]) -> Read,
) -> Result<(ParseOutput, S), ParseError> {
    let bytes = reader::read_all(path).map_err(|source| ParseError::Io {
        path: path.to_owned(),
        source,
    })?;
    let len = bytes.len() as u64;
    let digest = format!("sha256:{}", reader::hex(&Sha256::digest(&bytes)[..16]));
    let mut st: DocState<S> = serde_json::from_value(cursor.state.clone()).unwrap_or_default();
    let mut out = ParseOutput {
        cursor: cursor.clone(),
        at_end: true,
        ..Default::default()
    };
    if cursor.head.as_deref() == Some(digest.as_str()) || bytes.trim_ascii().is_empty() {
        return Ok((out, st.inner));
    }
    let mut emit = Emit::default();
    match read(&mut st.inner, &mut emit, &bytes) {
        Read::Whole => {}
        Read::Incomplete => {
            out.pending_tail = true;
            return Ok((out, st.inner));
        }
        Read::Bad(reason) => {
            out.issues.push(ParseIssue {
                line: 0,
                byte_offset: 0,
                reason,
                kept: false,
            });
            // Not read again until it changes.
            out.cursor.head = Some(digest);
            out.cursor.offset = len;
            return Ok((out, st.inner));
        }
    }
    let mut now: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (i, m) in emit.out.messages.iter_mut().enumerate() {
        m.seq = i as u64;
        now.entry(m.session_id.clone())
            .or_default()
            .insert(m.message_id.clone());
    }
    for (session, before) in &st.ids {
        let empty = BTreeSet::new();
        let still = now.get(session).unwrap_or(&empty);
        let gone: Vec<String> = before.difference(still).cloned().collect();
        if !gone.is_empty() {
            emit.out.edits.push(Edit::Deactivate {
                session_id: session.clone(),
                message_ids: gone,
            });
        }
    }
    st.ids = now;
    out.messages = emit.out.messages;
    out.edits = emit.out.edits;
    out.issues = emit.out.issues;
    out.bytes = len;
    out.cursor = Cursor {
        offset: len,
        line: 0,
        head: Some(digest),
        state: serde_json::to_value(&st).unwrap_or_default(),
        unterminated: false,
    };
    Ok((out, st.inner))
}
