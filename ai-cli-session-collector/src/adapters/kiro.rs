//! Kiro CLI (v2 store): one append-only JSONL transcript per session with a JSON sidecar beside
//! it. FORMATS-MORE.md §9.
//!
//! **Where.** `~/.kiro/sessions/cli/<sessionId>.jsonl` (the transcript), `<sessionId>.json`
//! (the sidecar, rewritten in place) and `<sessionId>.lock` on Linux, macOS and Windows (the
//! home folder is `USERPROFILE` there: Kiro ignores `HOME` on Windows). `KIRO_HOME` replaces
//! `~/.kiro`. The older SQLite store (`data.sqlite3`, `conversations_v2`) and Kiro IDE files are
//! not read.
//!
//! **What is read.** Every transcript line `{"version":"v1","kind","data":{"message_id",
//! "content":[{"kind","data"}],"meta"?}}`; kinds `Prompt`, `AssistantMessage`, `ToolResults`,
//! `Clear`. One message per content item (`#i` after the first), each line's raw bytes on its
//! first message. The sidecar gives what the transcript does not: `cwd`,
//! `session_state.rts_model_state.model_info.model_id` (the model), `parent_session_id` (a
//! sub-agent session) and `session_state.conversation_metadata.user_turn_metadatas[]`
//! (per-turn token counts and end time). The sidecar is kept whole (raw) on a Meta message
//! `sidecar`, and each turn's token counts on a Meta message `turn:<n>` (usage key the same), sent
//! again only when the sidecar changed; a change of the sidecar is a change of the transcript
//! ([`ConversationAdapter::source_of`]).
//!
//! **Prompts.** `Prompt` records, except in sub-agent sessions (their prompts are the parent
//! agent's task; their messages are sidechain).
//!
//! **Tools.** `toolUse{toolUseId,name,input}` items of `AssistantMessage` records pair with
//! `toolResult{toolUseId,content,status}` items of `ToolResults` records by `toolUseId`. A
//! result is an error only when its `status` says so (`success` with a non-zero
//! `exit_status` in the output is what Kiro reported: not an error).
//!
//! **Traps.** Only `Prompt` records have a time (`meta.timestamp`, epoch *seconds*, sometimes
//! fractional); other messages have none, and turn end times are only in the sidecar. `Clear`
//! wipes the model's context, not the history: it is Meta and nothing is deactivated. Kiro
//! ≤ 1.26.2 may write two `AssistantMessage` records in a row and a `toolUse` without result.
//! A half-written sidecar is read again on its next change.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl, expand_home, parse_ts,
    str_of, string_of, tool_call_of, u64_of,
};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, ToolResult,
    Usage,
};
use crate::{reader, text};

const AGENT: &str = "kiro";

pub struct KiroAdapter;

impl ConversationAdapter for KiroAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let home = env
            .var("KIRO_HOME")
            .map_or_else(|| env.home.join(".kiro"), |d| expand_home(d, env));
        vec![home.join("sessions").join("cli")]
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        path.parent() == Some(root) && path.extension().is_some_and(|e| e == "jsonl")
    }

    fn source_of(&self, root: &Path, changed: &Path) -> Option<PathBuf> {
        if self.is_transcript(root, changed) {
            return Some(changed.to_owned());
        }
        // The sidecar of a transcript.
        let transcript = changed.with_extension("jsonl");
        (changed.extension().is_some_and(|e| e == "json")
            && self.is_transcript(root, &transcript)
            && transcript.is_file())
        .then_some(transcript)
    }

    /// The sidecar `<id>.json` beside the transcript.
    fn side_files(&self, path: &Path) -> Vec<PathBuf> {
        vec![path.with_extension("json")]
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let sid = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let side = Sidecar::read(&path.with_extension("json"));
        let mut info = SessionInfo::default();
        let (mut out, mut st) = drive_jsonl::<State>(path, cursor, max_bytes, |st, emit, rec| {
            handle(&sid, side.facts.as_ref(), st, emit, rec, &mut info);
        })?;
        if let Some(f) = &side.facts {
            info.project_path.clone_from(&f.cwd);
            info.model.clone_from(&f.model);
            info.is_subagent = f.parent.is_some();
            info.parent_session_id.clone_from(&f.parent);
            if let Some(end) = f.turns.iter().filter_map(|t| t.end).max() {
                info.updated_at = Some(info.updated_at.map_or(end, |u| u.max(end)));
            }
            if f.parent.is_some() {
                info.title = None;
            }
        }
        // The sidecar's messages, when it changed since the last read: before the lines, so
        // reading in chunks gives the same order as one pass.
        if let (Some(f), Some(digest)) = (&side.facts, &side.digest)
            && st.sidecar.as_ref() != Some(digest)
        {
            let mut front = sidecar_messages(&sid, f, side.bytes);
            for (i, m) in front.iter_mut().enumerate() {
                m.seq = i as u64;
            }
            out.messages.splice(0..0, front);
            st.sidecar = Some(digest.clone());
            out.cursor.state = serde_json::to_value(&st).unwrap_or_default();
        }
        if !out.messages.is_empty() || st.seen || side.facts.is_some() {
            info.session_id = sid;
            out.sessions.push(info);
        }
        Ok(out)
    }
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    prompt: u32,
    /// A line was read.
    seen: bool,
    /// Digest of the sidecar as last sent.
    sidecar: Option<String>,
}

/// What the sidecar says about the session.
struct Facts {
    cwd: Option<String>,
    model: Option<String>,
    parent: Option<String>,
    turns: Vec<Turn>,
}

struct Turn {
    usage: Usage,
    /// Epoch ms.
    end: Option<i64>,
}

struct Sidecar {
    facts: Option<Facts>,
    digest: Option<String>,
    bytes: Vec<u8>,
}

impl Sidecar {
    /// The sidecar beside a transcript; no facts when it is missing or half written.
    fn read(path: &Path) -> Sidecar {
        let bytes = reader::read_all(path).unwrap_or_default();
        let v = reader::decode_json(&bytes)
            .ok()
            .map(|d| d.value)
            .filter(Value::is_object);
        let Some(v) = v else {
            return Sidecar {
                facts: None,
                digest: None,
                bytes: Vec::new(),
            };
        };
        let state = v.get("session_state").unwrap_or(&Value::Null);
        let model = state
            .pointer("/rts_model_state/model_info/model_id")
            .and_then(Value::as_str)
            .filter(|m| !m.is_empty())
            .map(str::to_owned);
        let parent =
            string_of(&v, "parent_session_id").or_else(|| string_of(state, "parent_session_id"));
        let turns = state
            .pointer("/conversation_metadata/user_turn_metadatas")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|t| Turn {
                        usage: Usage {
                            input_tokens: u64_of(t, "input_token_count"),
                            output_tokens: u64_of(t, "output_token_count"),
                            ..Default::default()
                        },
                        end: t.get("end_timestamp").and_then(parse_ts),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let digest = reader::hex(&Sha256::digest(&bytes)[..16]);
        Sidecar {
            facts: Some(Facts {
                cwd: string_of(&v, "cwd"),
                model,
                parent,
                turns,
            }),
            digest: Some(digest),
            bytes,
        }
    }
}

/// The sidecar itself (raw, once) and the token counts of each turn.
fn sidecar_messages(sid: &str, f: &Facts, bytes: Vec<u8>) -> Vec<ParsedMessage> {
    let mut whole = blank(
        AGENT,
        sid,
        "sidecar".into(),
        Role::System,
        MessageKind::Meta,
    );
    whole.cwd.clone_from(&f.cwd);
    whole.model.clone_from(&f.model);
    whole.raw = Some(bytes);
    // What changes with every rewrite (the store takes a new copy only when something shown
    // changed): where, which model, how many turns.
    whole.text = format!(
        "cwd {}; model {}; {} turns",
        f.cwd.as_deref().unwrap_or("?"),
        f.model.as_deref().unwrap_or("?"),
        f.turns.len()
    );
    let mut out = vec![whole];
    for (i, t) in f.turns.iter().enumerate() {
        let id = format!("turn:{}", i + 1);
        let mut m = blank(AGENT, sid, id.clone(), Role::System, MessageKind::Meta);
        if f.parent.is_none() {
            m.prompt_number = i as u32 + 1;
        }
        m.timestamp = t.end;
        m.cwd.clone_from(&f.cwd);
        m.model.clone_from(&f.model);
        m.usage = Some(t.usage);
        m.usage_key = Some(id);
        m.flags.sidechain = f.parent.is_some();
        out.push(m);
    }
    out
}

fn handle(
    sid: &str,
    facts: Option<&Facts>,
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
) {
    let v = &rec.value;
    st.seen = true;
    let kind = str_of(v, "kind").unwrap_or("");
    let data = v.get("data").unwrap_or(&Value::Null);
    let key = string_of(data, "message_id").unwrap_or_else(|| format!("L{}", rec.line));
    let ts = data.pointer("/meta/timestamp").and_then(parse_ts);
    if let Some(t) = ts {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    let items: &[Value] = data
        .get("content")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice);
    if data.get("content").is_some_and(|c| !c.is_array()) {
        emit.note(&rec, "`data.content` is not a list");
    }
    let sub = facts.is_some_and(|f| f.parent.is_some());
    let cwd = facts.and_then(|f| f.cwd.clone());
    let new = |i: usize, role: Role, kind: MessageKind, body: String, number: u32| {
        let id = if i == 0 {
            key.clone()
        } else {
            format!("{key}#{i}")
        };
        let mut m = blank(AGENT, sid, id, role, kind);
        m.prompt_number = number;
        m.timestamp = ts;
        m.cwd.clone_from(&cwd);
        m.flags.sidechain = sub;
        m.text = body;
        m
    };

    match kind {
        "Prompt" => {
            let body = items
                .iter()
                .map(item_text)
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
                .join("\n");
            if !sub && !body.trim().is_empty() {
                st.prompt += 1;
                if st.prompt == 1 {
                    info.title = Some((TitleSource::FirstPrompt, text::prompt_title(&body)));
                }
                emit.push(new(0, Role::User, MessageKind::UserPrompt, body, st.prompt));
            } else {
                emit.push(new(0, Role::User, MessageKind::Meta, body, st.prompt));
            }
        }
        "AssistantMessage" | "ToolResults" => {
            let other_role = if kind == "ToolResults" {
                Role::Tool
            } else {
                Role::Assistant
            };
            if items.is_empty() {
                emit.push(new(
                    0,
                    other_role,
                    MessageKind::Meta,
                    String::new(),
                    st.prompt,
                ));
            }
            for (i, it) in items.iter().enumerate() {
                let d = it.get("data").unwrap_or(&Value::Null);
                let m = match str_of(it, "kind").unwrap_or("") {
                    "text" => new(
                        i,
                        Role::Assistant,
                        MessageKind::AssistantText,
                        item_text(it),
                        st.prompt,
                    ),
                    "thinking" => new(
                        i,
                        Role::Assistant,
                        MessageKind::Thinking,
                        item_text(it),
                        st.prompt,
                    ),
                    "toolUse" => tool_call_of(d, "input", "toolUseId", |text| {
                        new(i, Role::Assistant, MessageKind::ToolCall, text, st.prompt)
                    }),
                    "toolResult" => {
                        let body = d
                            .get("content")
                            .and_then(Value::as_array)
                            .map(|c| {
                                c.iter()
                                    .map(item_text)
                                    .filter(|t| !t.is_empty())
                                    .collect::<Vec<_>>()
                                    .join("\n")
                            })
                            .unwrap_or_default();
                        let mut m = new(i, Role::Tool, MessageKind::ToolResult, body, st.prompt);
                        m.tool_result = Some(ToolResult {
                            call_id: string_of(d, "toolUseId"),
                            is_error: matches!(str_of(d, "status"), Some("error" | "Error")),
                        });
                        m
                    }
                    _ => new(i, other_role, MessageKind::Meta, item_text(it), st.prompt),
                };
                emit.push(m);
            }
        }
        // `Clear` and anything newer.
        _ => emit.push(new(
            0,
            Role::System,
            MessageKind::Meta,
            String::new(),
            st.prompt,
        )),
    }
}

/// The readable text of one `{kind, data}` content item.
fn item_text(it: &Value) -> String {
    let d = it.get("data").unwrap_or(&Value::Null);
    match str_of(it, "kind").unwrap_or("") {
        "text" => d.as_str().unwrap_or_default().to_owned(),
        "thinking" => d
            .as_str()
            .or_else(|| str_of(d, "text"))
            .unwrap_or_default()
            .to_owned(),
        "image" => "[image]".to_owned(),
        "json" => match d {
            Value::Null => String::new(),
            other => other.to_string(),
        },
        _ => match d {
            Value::String(s) => s.clone(),
            Value::Null => String::new(),
            other => str_of(other, "text").map_or_else(|| other.to_string(), str::to_owned),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_and_sources() {
        let mut env = Env {
            home: PathBuf::from("/home/u"),
            ..Default::default()
        };
        let a = KiroAdapter;
        assert_eq!(
            a.default_roots(&env),
            vec![PathBuf::from("/home/u/.kiro/sessions/cli")]
        );
        env.vars.insert("KIRO_HOME".into(), "/k".into());
        assert_eq!(
            a.default_roots(&env),
            vec![PathBuf::from("/k/sessions/cli")]
        );
        let root = Path::new("/k/sessions/cli");
        assert!(a.is_transcript(root, Path::new("/k/sessions/cli/s.jsonl")));
        assert!(!a.is_transcript(root, Path::new("/k/sessions/cli/s.json")));
        assert!(!a.is_transcript(root, Path::new("/k/sessions/cli/s.lock")));
        // A sidecar whose transcript does not exist is nobody's change.
        assert_eq!(a.source_of(root, Path::new("/k/sessions/cli/s.json")), None);
    }

    #[test]
    fn content_items_read_as_text() {
        let j = serde_json::json!({"kind":"json","data":{"a":1}});
        assert_eq!(item_text(&j), r#"{"a":1}"#);
        let t = serde_json::json!({"kind":"thinking","data":{"text":"hm"}});
        assert_eq!(item_text(&t), "hm");
        assert_eq!(
            item_text(&serde_json::json!({"kind":"image","data":{}})),
            "[image]"
        );
    }
}
