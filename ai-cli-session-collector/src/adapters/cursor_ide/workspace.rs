//! A workspace database (`workspaceStorage/<wsId>/state.vscdb`, table `ItemTable`): the
//! project a workspace belongs to, its composers and the old chat panel's tabs.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use rusqlite::params;
use serde_json::Value;

use super::global::composer_talk;
use super::talk::{Bubble, Origin, Talk, emit_talk};
use super::{Out, PANE_VIEW, State, WS_CHAT, WS_COMPOSERS, WS_PANE, hash_bytes, kv_row, range_end};
use crate::adapter::{ParseError, parse_ts, str_of};
use crate::model::SessionInfo;
use crate::sqlite::Db;

pub(super) fn read_workspace(
    db: &Db,
    path: &Path,
    st: &mut State,
    out: &mut Out,
    max_bytes: usize,
) -> Result<bool, ParseError> {
    if !db.has_table("ItemTable") {
        out.emit.issue(
            0,
            "no ItemTable table: not a Cursor workspace state database",
            false,
        );
        return Ok(true);
    }
    let project = path
        .parent()
        .and_then(|d| workspace_project(&d.join("workspace.json")));
    if st.project != project {
        // The folder changed: every mapping is emitted again.
        st.items.clear();
        st.project.clone_from(&project);
    }
    let mut q = db
        .conn()
        .prepare(
            "SELECT key, value FROM ItemTable
             WHERE key = ?1 OR key = ?2 OR (key >= ?3 AND key < ?4) ORDER BY key",
        )
        .map_err(|e| db.error(e))?;
    let mut rows = q
        .query(params![WS_COMPOSERS, WS_CHAT, WS_PANE, range_end(WS_PANE)])
        .map_err(|e| db.error(e))?;
    let mut items = Vec::new();
    while let Some(r) = rows.next().map_err(|e| db.error(e))? {
        let row = kv_row(r).map_err(|e| db.error(e))?;
        let pane = row.key == WS_PANE
            || (row.key.starts_with(&format!("{WS_PANE}.")) && !row.key.ends_with(".hidden"));
        if row.key == WS_COMPOSERS || row.key == WS_CHAT || pane {
            items.push(row);
        }
    }
    drop(rows);
    let present: HashSet<String> = items.iter().map(|r| r.key.clone()).collect();
    let mut done = 0usize;
    for row in items {
        let h = hash_bytes(&row.raw);
        if st.items.get(&row.key) == Some(&h) {
            continue;
        }
        if done > 0 && out.bytes >= max_bytes as u64 {
            return Ok(false);
        }
        out.bytes += row.len;
        out.rows += 1;
        done += 1;
        let value = match &row.value {
            Some(Ok(v)) => v,
            Some(Err(())) => {
                out.emit
                    .issue(0, format!("{} is not JSON: not read", row.key), false);
                st.items.insert(row.key.clone(), h);
                continue;
            }
            None => {
                st.items.insert(row.key.clone(), h);
                continue;
            }
        };
        if row.key == WS_COMPOSERS {
            workspace_composers(value, &project, st, out);
        } else if row.key == WS_CHAT {
            chat_tabs(value, &project, st, out);
        } else {
            // `{ "workbench.panel.aichat.view.<composerId>": {…} }`: an open composer tab.
            let ids = value
                .as_object()
                .into_iter()
                .flat_map(|o| o.keys())
                .filter_map(|k| k.strip_prefix(PANE_VIEW))
                .filter(|id| !id.is_empty());
            for id in ids {
                mapped(id, &project, out);
            }
        }
        st.items.insert(row.key.clone(), h);
    }
    st.items.retain(|k, _| present.contains(k));
    Ok(true)
}

/// A composer of the global database that this workspace's folder is the project of.
fn mapped(cid: &str, project: &Option<String>, out: &mut Out) {
    if project.is_some() {
        out.sessions.push(SessionInfo {
            session_id: cid.to_owned(),
            project_path: project.clone(),
            ..Default::default()
        });
    }
}

/// `composer.composerData`: `{allComposers: […], selectedComposerId(s), composerDataVersion}`.
fn workspace_composers(v: &Value, project: &Option<String>, st: &mut State, out: &mut Out) {
    let mut done: HashSet<String> = HashSet::new();
    for c in v
        .get("allComposers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(cid) = str_of(c, "composerId").filter(|s| !s.is_empty()) else {
            continue;
        };
        done.insert(cid.to_owned());
        let inline = c
            .get("conversation")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        if !inline {
            mapped(cid, project, out);
            continue;
        }
        // The composer's own record, without the bubbles (each bubble is its own record).
        let mut own = c.clone();
        if let Some(o) = own.as_object_mut() {
            o.remove("conversation");
        }
        let raw = serde_json::to_vec(&own).unwrap_or_default();
        let talk = composer_talk(cid, c, raw, 0, project.clone(), BTreeMap::new());
        emit_talk(st, out, talk, None, Origin::Workspace);
    }
    let selected = v
        .get("selectedComposerIds")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .chain(str_of(v, "selectedComposerId"));
    for cid in selected {
        if !cid.is_empty() && done.insert(cid.to_owned()) {
            mapped(cid, project, out);
        }
    }
}

/// The old chat panel: `{tabs: [{tabId, chatTitle, lastSendTime, bubbles: […]}], …}`.
fn chat_tabs(v: &Value, project: &Option<String>, st: &mut State, out: &mut Out) {
    for tab in v
        .get("tabs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(id) = str_of(tab, "tabId").filter(|s| !s.is_empty()) else {
            continue;
        };
        let mut own = tab.clone();
        if let Some(o) = own.as_object_mut() {
            o.remove("bubbles");
        }
        let mut talk = Talk::bare(id, "tab", serde_json::to_vec(&own).unwrap_or_default(), 0);
        talk.name = str_of(tab, "chatTitle")
            .filter(|s| !s.trim().is_empty())
            .map(str::to_owned);
        talk.updated = tab.get("lastSendTime").and_then(parse_ts);
        talk.project.clone_from(project);
        for (i, b) in tab
            .get("bubbles")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let bid = str_of(b, "id")
                .or_else(|| str_of(b, "bubbleId"))
                .filter(|s| !s.is_empty())
                .map_or_else(|| format!("#{i}"), str::to_owned);
            talk.bubbles.push(Bubble {
                id: bid,
                v: Some(b.clone()),
                raw: serde_json::to_vec(b).unwrap_or_default(),
                line: 0,
                rendered: true,
            });
        }
        emit_talk(st, out, talk, None, Origin::Workspace);
    }
}

/// The project folder a workspace's `workspace.json` names: `folder`, or the folder of the
/// `.code-workspace` file named by `workspace`.
fn workspace_project(file: &Path) -> Option<String> {
    let v: Value = serde_json::from_slice(&crate::reader::read_file(file).ok()?).ok()?;
    if let Some(f) = str_of(&v, "folder") {
        return uri_path(f);
    }
    let w = uri_path(str_of(&v, "workspace")?)?;
    let cut = w.rfind(['/', '\\'])?;
    Some(w[..cut.max(1)].to_owned())
}

/// The path of a workspace URI as VS Code's `fsPath` gives it: `file:///home/x` → `/home/x`,
/// `file:///c%3A/Users/x` → `c:\Users\x`, `file://wsl.localhost/Ubuntu/home/x` → `/home/x`,
/// `file://server/share` → `\\server\share`, `vscode-remote://<authority>/home/x` → `/home/x`.
pub(super) fn uri_path(uri: &str) -> Option<String> {
    let (scheme, rest) = uri.split_once("://")?;
    let (host, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = percent_decode(path);
    match scheme.to_ascii_lowercase().as_str() {
        "file" => {
            let host = percent_decode(host).to_ascii_lowercase();
            if host == "wsl.localhost" || host.starts_with("wsl$") {
                // `/<distro>/home/x`: the distribution's name is not part of the path.
                let tail = path.get(1..).unwrap_or("");
                return Some(
                    tail.find('/')
                        .map_or("/".to_owned(), |i| tail[i..].to_owned()),
                );
            }
            if !host.is_empty() {
                return Some(format!("\\\\{host}{}", path.replace('/', "\\")));
            }
            let b = path.as_bytes();
            if b.len() >= 3 && b[0] == b'/' && b[1].is_ascii_alphabetic() && b[2] == b':' {
                return Some(path[1..].replace('/', "\\"));
            }
            Some(path)
        }
        "vscode-remote" => Some(path),
        _ => None,
    }
}

pub(super) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex_val(b[i + 1]), hex_val(b[i + 2]))
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}
