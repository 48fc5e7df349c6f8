//! The 1.x JSON storage tree (before 1.2): a session file with its message and part files,
//! read as one document.

use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::parts::{MsgCtx, is_typed_text, message_record, part_messages};
use super::{Sess, files_in, is_placeholder_title, safe_id};
use crate::adapter::{Emit, ParseError, parse_ts, str_of, string_of};
use crate::document::{Read, drive_document};
use crate::model::{Cursor, ParseOutput, Role, SessionInfo};
use crate::reader;

/// A file of the storage tree: its name and bytes.
type File = (String, Vec<u8>);

/// Reads a session file with its message and part files. The whole set is one document: it is
/// read again when any of its files changed (their joint digest is the cursor's head).
pub(super) fn parse_storage(
    root: &Path,
    path: &Path,
    cursor: &Cursor,
) -> Result<ParseOutput, ParseError> {
    let session = reader::read_all(path).map_err(|source| ParseError::Io {
        path: path.to_owned(),
        source,
    })?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_owned();
    let sid = serde_json::from_slice::<Value>(&session)
        .ok()
        .and_then(|v| string_of(&v, "id"))
        .filter(|s| safe_id(s))
        .unwrap_or(stem);
    let storage = root.join("storage");
    let messages = read_files(&storage.join("message").join(&sid));
    let parts: Vec<Vec<File>> = messages
        .iter()
        .map(|(name, _)| {
            let mid = name.strip_suffix(".json").unwrap_or(name);
            if safe_id(mid) {
                read_files(&storage.join("part").join(mid))
            } else {
                Vec::new()
            }
        })
        .collect();

    let mut h = Sha256::new();
    let mut feed = |name: &str, bytes: &[u8]| {
        h.update((name.len() as u64).to_le_bytes());
        h.update(name.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    feed("", &session);
    for ((name, bytes), parts) in messages.iter().zip(&parts) {
        feed(name, bytes);
        for (pname, pbytes) in parts {
            feed(pname, pbytes);
        }
    }
    let digest = format!("opencode-storage:{}", reader::hex(&h.finalize()[..16]));
    if cursor.head.as_deref() == Some(digest.as_str()) {
        return Ok(ParseOutput {
            cursor: cursor.clone(),
            at_end: true,
            ..Default::default()
        });
    }
    // The driver decides "unchanged" on the session file alone: it must not here.
    let mut fresh = cursor.clone();
    fresh.head = None;
    let project = |id: &str| -> Option<String> {
        if !safe_id(id) {
            return None;
        }
        let b =
            crate::reader::read_file(&storage.join("project").join(format!("{id}.json"))).ok()?;
        string_of(&serde_json::from_slice(&b).ok()?, "worktree")
    };
    let mut info = None;
    let (mut out, ()) = drive_document(path, &fresh, |_: &mut (), emit, bytes| {
        read_storage(bytes, &sid, &messages, &parts, &project, emit, &mut info)
    })?;
    if out.cursor.head.is_some() {
        out.cursor.head = Some(digest);
    }
    out.sessions.extend(info);
    Ok(out)
}

/// The `.json` files of a folder, by name.
fn read_files(dir: &Path) -> Vec<File> {
    files_in(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_owned();
            Some((name, crate::reader::read_file(&p).ok()?))
        })
        .collect()
}

/// One decoded storage file.
struct Element<'a> {
    id: String,
    value: Value,
    raw: &'a [u8],
}

/// Decodes a storage file, reporting one that is not a JSON object (a file half-written is read
/// again with the next change).
fn decode_file<'a>(file: &'a File, what: &str, emit: &mut Emit) -> Option<Element<'a>> {
    let (name, bytes) = file;
    match reader::decode_json(bytes) {
        Ok(d) if d.value.is_object() => {
            let stem = name.strip_suffix(".json").unwrap_or(name);
            Some(Element {
                id: string_of(&d.value, "id").unwrap_or_else(|| stem.to_owned()),
                value: d.value,
                raw: bytes,
            })
        }
        Ok(_) => {
            emit.issue(0, format!("{what} {name} is not a JSON object"), false);
            None
        }
        Err(e) => {
            emit.issue(0, format!("{what} {name}: {e}"), false);
            None
        }
    }
}

fn read_storage(
    bytes: &[u8],
    sid: &str,
    message_files: &[File],
    part_files: &[Vec<File>],
    project: &dyn Fn(&str) -> Option<String>,
    emit: &mut Emit,
    info: &mut Option<SessionInfo>,
) -> Read {
    let doc = match reader::decode_json(bytes) {
        Ok(d) if d.value.is_object() => d.value,
        Ok(_) => return Read::Bad("session file is not a JSON object".into()),
        Err(_) => return Read::Incomplete,
    };
    let time = doc.get("time").unwrap_or(&Value::Null);
    let sess = Sess {
        id: sid.to_owned(),
        directory: string_of(&doc, "directory")
            .or_else(|| str_of(&doc, "projectID").and_then(project)),
        parent: string_of(&doc, "parentID"),
        title: string_of(&doc, "title").filter(|t| !is_placeholder_title(t)),
        model: None,
        created: time.get("created").and_then(parse_ts),
        updated: time.get("updated").and_then(parse_ts),
    };
    let mut m = sess.record();
    m.raw = Some(bytes.to_vec());
    emit.push(m);

    // Parts belong to the message whose file name names their folder.
    let mut messages: Vec<(Element<'_>, Vec<Element<'_>>)> = Vec::new();
    for (file, parts) in message_files.iter().zip(part_files) {
        let Some(msg) = decode_file(file, "message", emit) else {
            continue;
        };
        let mut parts: Vec<Element<'_>> = parts
            .iter()
            .filter_map(|p| decode_file(p, "part", emit))
            .collect();
        parts.sort_by(|a, b| a.id.cmp(&b.id));
        messages.push((msg, parts));
    }
    let created = |e: &Element<'_>| {
        e.value
            .get("time")
            .and_then(|t| t.get("created"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    messages.sort_by(|(a, _), (b, _)| (created(a), &a.id).cmp(&(created(b), &b.id)));

    let mut number = 0u32;
    let mut first_prompt = None;
    let mut model = None;
    for (msg, parts) in &messages {
        let prompt_part = (str_of(&msg.value, "role") == Some("user") && !sess.subagent())
            .then(|| parts.iter().find(|p| is_typed_text(&p.value)))
            .flatten();
        if let Some(p) = prompt_part {
            number += 1;
            if number == 1 {
                first_prompt = str_of(&p.value, "text").map(str::to_owned);
            }
        }
        let ctx = MsgCtx::new(
            sid,
            &msg.id,
            &msg.value,
            &sess,
            number,
            prompt_part.map(|p| p.id.as_str()),
        );
        if ctx.role == Role::Assistant && ctx.model.is_some() {
            model.clone_from(&ctx.model);
        }
        let mut m = message_record(&ctx, &msg.value);
        m.raw = Some(msg.raw.to_vec());
        emit.push(m);
        for part in parts {
            let mut msgs = part_messages(&ctx, &part.id, &part.value);
            if let Some(first) = msgs.first_mut() {
                first.raw = Some(part.raw.to_vec());
            }
            for m in msgs {
                emit.push(m);
            }
        }
    }
    *info = Some(sess.info(first_prompt.as_deref(), model));
    Read::Whole
}
