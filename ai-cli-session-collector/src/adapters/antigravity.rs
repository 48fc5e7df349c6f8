//! Antigravity (`agy` CLI; the IDE keeps the same layout): one step per line in
//! `brain/<conversationId>/.system_generated/logs/transcript_full.jsonl`, appended, also across
//! `agy -c` continuations (FORMATS-MORE §6).
//!
//! **Where.** `~/.gemini/antigravity-cli/` (CLI), `~/.gemini/antigravity/` and
//! `~/.gemini/antigravity-ide/` (IDE builds); `%USERPROFILE%\.gemini\…` on Windows. Beside
//! `transcript_full.jsonl` the agent writes `transcript.jsonl`, the same steps with every tool
//! argument value JSON-encoded once more: only one of the two is read, the full one, and
//! `transcript.jsonl` only while no full one exists (its argument values are decoded again).
//! Message ids come from `step_index`, so the two spellings of a session give the same ids.
//! The conversation store `conversations/<id>.db` (protobuf) and `oauth_creds.json`
//! (credentials) are never read.
//!
//! **Identity.** The session id is the brain folder's name; the transcript has no id and no
//! cwd. The project is, in order: the `workspace` of the `history.jsonl` line whose
//! `conversationId` is the session (or, for the first prompt, which carries no id, the line
//! whose `display` is the session's first prompt, typed within ten minutes of it); else the
//! project id the CLI log (`log/cli-*.log`) names for the conversation, looked up in
//! `~/.gemini/config/projects/<projectId>.json` (`gitFolder.folderUri`, else `name`); else
//! unknown (never inferred from tool paths). The model is only in the first prompt's
//! `<USER_SETTINGS_CHANGE>` ("… `Model Selection` from X to Y").
//!
//! **Prompts.** A `USER_INPUT` step from `USER_EXPLICIT`; the prompt is only the text inside
//! `<USER_REQUEST>…</USER_REQUEST>` (`<ADDITIONAL_METADATA>` and `<USER_SETTINGS_CHANGE>` are
//! injected). `CONVERSATION_HISTORY` and `SYSTEM_MESSAGE` are meta, `CHECKPOINT` a compaction.
//!
//! **Tools.** No call ids: a `PLANNER_RESPONSE` step's `tool_calls[]` are answered by the next
//! `MODEL` steps that are not planner responses (typed after the tool: `RUN_COMMAND`,
//! `VIEW_FILE`, `CODE_ACTION`, …), in order. Calls and results are paired by that order and
//! given a derived call id (`S<step>/call<k>`); a new prompt drops calls left unanswered.
//!
//! **Traps.** `step_index` skips 4 once per session (benign). A failed shell command keeps
//! `status DONE`: its result is an error when the text says "failed with exit code N" (N ≠ 0),
//! as well as when the status is `ERROR`. `created_at` has second precision.

use std::collections::VecDeque;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::adapter::{
    ConversationAdapter, Emit, Env, ParseError, Record, blank, drive_jsonl, parse_ts, str_of,
    string_of,
};
use crate::model::{
    Cursor, MessageKind, ParseOutput, ParsedMessage, Role, SessionInfo, TitleSource, ToolCall,
    ToolResult,
};
use crate::text;

const AGENT: &str = "antigravity";
const FULL: &str = "transcript_full.jsonl";
const PLAIN: &str = "transcript.jsonl";
/// How far apart a first prompt and its `history.jsonl` line may be.
const HISTORY_SLACK_MS: i64 = 10 * 60 * 1000;

pub struct AntigravityAdapter;

impl ConversationAdapter for AntigravityAdapter {
    fn name(&self) -> &'static str {
        AGENT
    }

    fn default_roots(&self, env: &Env) -> Vec<PathBuf> {
        let gemini = env.home.join(".gemini");
        ["antigravity-cli", "antigravity", "antigravity-ide"]
            .iter()
            .map(|d| gemini.join(d))
            .collect()
    }

    fn is_transcript(&self, root: &Path, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(root) else {
            return false;
        };
        let parts: Vec<&str> = rel
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .collect();
        let [.., brain, _, sys, logs, name] = parts.as_slice() else {
            return false;
        };
        *brain == "brain"
            && *sys == ".system_generated"
            && *logs == "logs"
            && (*name == FULL || (*name == PLAIN && !path.with_file_name(FULL).exists()))
    }

    fn parse(
        &self,
        _root: &Path,
        path: &Path,
        cursor: &Cursor,
        max_bytes: usize,
    ) -> Result<ParseOutput, ParseError> {
        let ctx = FileContext::new(path);
        let first_read = cursor.offset == 0;
        let mut info = SessionInfo::default();
        let mut prompted = false;
        let (mut out, mut st) = drive_jsonl::<State>(path, cursor, max_bytes, |st, emit, rec| {
            prompted |= handle(&ctx, st, emit, rec, &mut info);
        })?;
        if out.messages.is_empty() && out.cursor.offset == 0 {
            return Ok(out);
        }
        if st.project.is_none()
            && !out.messages.is_empty()
            && let Some(app) = &ctx.app_root
        {
            // history.jsonl gains a line per prompt; the CLI log is read once, and again with
            // each new prompt.
            st.project = history_workspace(app, &ctx.sid, st.first_prompt.as_ref())
                .or_else(|| (first_read || prompted).then(|| log_workspace(app, &ctx.sid))?);
            if st.project.is_some() {
                out.cursor.state = serde_json::to_value(&st).unwrap_or_default();
            }
        }
        info.session_id.clone_from(&ctx.sid);
        info.project_path.clone_from(&st.project);
        info.model.clone_from(&st.model);
        out.sessions.push(info);
        Ok(out)
    }
}

/// What the transcript's location says.
struct FileContext {
    sid: String,
    /// `~/.gemini/antigravity-cli`: holds `brain/`, `history.jsonl` and `log/`.
    app_root: Option<PathBuf>,
    /// `transcript.jsonl`: argument values are JSON-encoded once more.
    double_encoded: bool,
}

impl FileContext {
    fn new(path: &Path) -> Self {
        // <app>/brain/<id>/.system_generated/logs/<file>
        let conv = path.ancestors().nth(3);
        let app_root = conv
            .and_then(Path::parent)
            .filter(|b| b.file_name().is_some_and(|n| n == "brain"))
            .and_then(Path::parent)
            .map(Path::to_owned);
        FileContext {
            sid: conv
                .and_then(Path::file_name)
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned(),
            app_root,
            double_encoded: path.file_name().is_some_and(|n| n == PLAIN),
        }
    }
}

#[derive(Default, Serialize, Deserialize)]
struct State {
    prompt: u32,
    model: Option<String>,
    project: Option<String>,
    /// Derived ids of the calls still waiting for their result step, oldest first.
    #[serde(default)]
    pending: VecDeque<String>,
    /// sha256 of the first prompt and when it was typed, to find its `history.jsonl` line
    /// (a digest: the cursor is stored and must not keep a prompt's text).
    first_prompt: Option<(String, Option<i64>)>,
}

fn digest(s: &str) -> String {
    crate::reader::hex(&Sha256::digest(s.trim().as_bytes()))
}

/// Handles one step; returns whether it was a prompt.
fn handle(
    ctx: &FileContext,
    st: &mut State,
    emit: &mut Emit,
    rec: Record<'_>,
    info: &mut SessionInfo,
) -> bool {
    let v = &rec.value;
    if !v.is_object() {
        emit.skip(&rec, "record is not a JSON object");
        return false;
    }
    let base_id = v
        .get("step_index")
        .and_then(Value::as_u64)
        .map_or_else(|| format!("L{}", rec.line), |s| format!("S{s}"));
    let ty = str_of(v, "type").unwrap_or("");
    let source = str_of(v, "source").unwrap_or("");
    let content = str_of(v, "content").unwrap_or_default();
    let ts = v.get("created_at").and_then(parse_ts);
    if let Some(t) = ts {
        info.started_at = Some(info.started_at.map_or(t, |s| s.min(t)));
        info.updated_at = Some(info.updated_at.map_or(t, |u| u.max(t)));
    }
    let mut prompt = false;
    if ty == "USER_INPUT" {
        // Calls still open when the human speaks again were never answered.
        st.pending.clear();
        if let Some(m) = settings_model(content) {
            st.model = Some(m);
        }
        if source == "USER_EXPLICIT" && !user_request(content).trim().is_empty() {
            prompt = true;
            st.prompt += 1;
            if st.prompt == 1 {
                let typed = user_request(content);
                info.title = Some((TitleSource::FirstPrompt, text::prompt_title(&typed)));
                st.first_prompt = Some((digest(&typed), ts));
            }
        }
    }
    let (number, model) = (st.prompt, st.model.clone());
    let mk = |block: usize, role: Role, kind: MessageKind| {
        let id = if block == 0 {
            base_id.clone()
        } else {
            format!("{base_id}#{block}")
        };
        let mut m = blank(AGENT, &ctx.sid, id, role, kind);
        m.prompt_number = number;
        m.timestamp = ts;
        m
    };
    let mut out: Vec<ParsedMessage> = Vec::new();
    match ty {
        "USER_INPUT" => {
            let kind = if prompt {
                MessageKind::UserPrompt
            } else {
                MessageKind::Meta
            };
            let mut m = mk(0, Role::User, kind);
            m.text = if prompt {
                user_request(content)
            } else {
                content.to_owned()
            };
            out.push(m);
        }
        "PLANNER_RESPONSE" => {
            let mut block = 0;
            let mut next = |role: Role, kind: MessageKind| {
                let mut m = mk(block, role, kind);
                block += 1;
                m.model.clone_from(&model);
                m
            };
            if let Some(t) = str_of(v, "thinking").filter(|t| !t.trim().is_empty()) {
                let mut m = next(Role::Assistant, MessageKind::Thinking);
                m.text = t.to_owned();
                out.push(m);
            }
            if !content.trim().is_empty() {
                let mut m = next(Role::Assistant, MessageKind::AssistantText);
                m.text = content.to_owned();
                out.push(m);
            }
            for (k, c) in v
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let name = str_of(c, "name").unwrap_or("unknown").to_owned();
                let mut input = c.get("args").cloned().unwrap_or(Value::Null);
                if ctx.double_encoded {
                    decode_args(&mut input);
                }
                let call_id = format!("{base_id}/call{k}");
                let mut m = next(Role::Assistant, MessageKind::ToolCall);
                m.text = text::tool_call_text(&name, &input);
                m.tool_call = Some(ToolCall {
                    name,
                    input,
                    call_id: Some(call_id.clone()),
                });
                out.push(m);
                st.pending.push_back(call_id);
            }
            if out.is_empty() {
                out.push(mk(0, Role::Assistant, MessageKind::Meta));
            }
        }
        "CHECKPOINT" => {
            let mut m = mk(0, Role::System, MessageKind::CompactionSummary);
            m.text = content.to_owned();
            out.push(m);
        }
        _ if source == "MODEL" => {
            // A tool's result step, answering the oldest open call.
            let status = str_of(v, "status").unwrap_or("");
            let mut m = mk(0, Role::Tool, MessageKind::ToolResult);
            m.text = content.to_owned();
            m.tool_result = Some(ToolResult {
                call_id: st.pending.pop_front(),
                is_error: status == "ERROR" || command_failed(content),
            });
            out.push(m);
        }
        _ => {
            let mut m = mk(0, Role::System, MessageKind::Meta);
            m.text = content.to_owned();
            out.push(m);
        }
    }
    for m in out {
        emit.push(m);
    }
    prompt
}

/// The typed prompt: what `<USER_REQUEST>` wraps, or (without it) the text less the blocks the
/// agent injects.
fn user_request(content: &str) -> String {
    if let Some(inner) = text::element(content, "USER_REQUEST") {
        return inner.trim().to_owned();
    }
    let mut s = content.to_owned();
    for tag in [
        "ADDITIONAL_METADATA",
        "USER_SETTINGS_CHANGE",
        "EPHEMERAL_MESSAGE",
    ] {
        let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
        while let Some(i) = s.find(&open) {
            let Some(j) = s[i..].find(&close) else { break };
            s.replace_range(i..i + j + close.len(), "");
        }
    }
    s.trim().to_owned()
}

/// The model a `<USER_SETTINGS_CHANGE>` block selects ("`Model Selection` from X to Y.").
fn settings_model(content: &str) -> Option<String> {
    let block = text::element(content, "USER_SETTINGS_CHANGE")?;
    let rest = &block[block.find("Model Selection")?..];
    let rest = &rest[rest.find(" from ")? + 6..];
    let to = &rest[rest.find(" to ")? + 4..];
    let end = to
        .find(". ")
        .or_else(|| to.find(".\n"))
        .unwrap_or(to.trim_end().trim_end_matches('.').len());
    Some(to[..end].trim().to_owned()).filter(|m| !m.is_empty() && m != "None")
}

/// Whether a `RUN_COMMAND` result says the command exited non-zero.
fn command_failed(content: &str) -> bool {
    const MARK: &str = "failed with exit code";
    let Some(i) = content.find(MARK) else {
        return false;
    };
    let code: String = content[i + MARK.len()..]
        .trim_start_matches([':', ' '])
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    code.parse::<i64>() != Ok(0)
}

/// `transcript.jsonl` argument values are each a JSON text: decode them once more.
fn decode_args(args: &mut Value) {
    if let Value::Object(o) = args {
        for v in o.values_mut() {
            if let Value::String(s) = v
                && let Ok(d) = serde_json::from_str::<Value>(s)
            {
                *v = d;
            }
        }
    }
}

/// The `history.jsonl` workspace of the session: the line with its `conversationId`, else the
/// id-less line of its first prompt.
fn history_workspace(
    app: &Path,
    sid: &str,
    first: Option<&(String, Option<i64>)>,
) -> Option<String> {
    let f = crate::reader::open_file(&app.join("history.jsonl")).ok()?;
    let mut by_prompt = None;
    for line in std::io::BufReader::new(f).lines() {
        let Ok(line) = line else { break };
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(ws) = string_of(&v, "workspace") else {
            continue;
        };
        match str_of(&v, "conversationId") {
            Some(c) if c == sid => return Some(ws),
            Some(_) => {}
            None => {
                let matches = first.is_some_and(|(d, at)| {
                    str_of(&v, "display").is_some_and(|t| digest(t) == *d)
                        && match (at, v.get("timestamp").and_then(parse_ts)) {
                            (Some(a), Some(b)) => a.abs_diff(b) <= HISTORY_SLACK_MS.unsigned_abs(),
                            _ => true,
                        }
                });
                if matches && by_prompt.is_none() {
                    by_prompt = Some(ws);
                }
            }
        }
    }
    by_prompt
}

/// The project the CLI log names for the conversation (`Conversation using project ID: P` …
/// `Created conversation C`), resolved through `config/projects/P.json`, else the path the
/// log's `using project "…" (id=P)` line gives.
fn log_workspace(app: &Path, sid: &str) -> Option<String> {
    let mut logs: Vec<PathBuf> = std::fs::read_dir(app.join("log"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("cli-") && n.ends_with(".log"))
        })
        .collect();
    logs.sort();
    let mut named: std::collections::HashMap<String, String> = Default::default();
    for log in logs {
        let Ok(f) = crate::reader::open_file(&log) else {
            continue;
        };
        let mut last: Option<String> = None;
        let mut wanted = false;
        for line in std::io::BufReader::new(f).lines() {
            let Ok(line) = line else { break };
            if let Some(i) = line.find("using project \"") {
                let rest = &line[i + 15..];
                if let (Some(q), Some(id)) = (rest.find('"'), rest.find("(id=")) {
                    let pid = rest[id + 4..].split(')').next().unwrap_or("").trim();
                    named.insert(pid.to_owned(), rest[..q].to_owned());
                }
            }
            let pid = line
                .find("Conversation using project ID:")
                .map(|i| line[i + 30..].trim().to_owned());
            if let Some(p) = pid.filter(|p| !p.is_empty()) {
                if wanted {
                    return project_path(app, &p, &named);
                }
                last = Some(p);
            }
            if let Some(i) = line.find("Created conversation ") {
                let id = line[i + 21..].split_whitespace().next().unwrap_or("");
                if id == sid {
                    match &last {
                        Some(p) => return project_path(app, p, &named),
                        None => wanted = true,
                    }
                }
            }
        }
    }
    None
}

/// `~/.gemini/config/projects/<pid>.json`: its git folder, else its name.
fn project_path(
    app: &Path,
    pid: &str,
    named: &std::collections::HashMap<String, String>,
) -> Option<String> {
    let safe = !pid.is_empty()
        && pid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let from_file = safe
        .then(|| {
            let f = app
                .parent()?
                .join("config")
                .join("projects")
                .join(format!("{pid}.json"));
            let v: Value = serde_json::from_slice(&crate::reader::read_file(&f).ok()?).ok()?;
            let folder = v
                .get("projectResources")
                .and_then(|r| r.get("resources"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find_map(|r| r.get("gitFolder").and_then(|g| str_of(g, "folderUri")))
                .and_then(file_uri_path);
            folder.or_else(|| string_of(&v, "name"))
        })
        .flatten();
    from_file.or_else(|| named.get(pid).cloned())
}

/// The path of a `file://` URI (percent-decoded; `/c:/…` becomes `c:/…`).
fn file_uri_path(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("file://")?;
    let bytes = rest.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    let s = String::from_utf8(out).ok()?;
    let drive = s.len() > 2 && s.as_bytes()[2] == b':' && s.starts_with('/');
    Some(if drive { s[1..].to_owned() } else { s })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_and_model_come_out_of_the_wrappers() {
        let c = "<USER_REQUEST>\nRun it.\n</USER_REQUEST>\n<ADDITIONAL_METADATA>\nt\n\
                 </ADDITIONAL_METADATA>\n<USER_SETTINGS_CHANGE>\nThe user changed setting \
                 `Model Selection` from None to Gemini 3.5 Flash (High). No need to comment.\n\
                 </USER_SETTINGS_CHANGE>";
        assert_eq!(user_request(c), "Run it.");
        assert_eq!(
            settings_model(c).as_deref(),
            Some("Gemini 3.5 Flash (High)")
        );
        assert_eq!(
            user_request("hello\n<ADDITIONAL_METADATA>x</ADDITIONAL_METADATA>"),
            "hello"
        );
        assert_eq!(settings_model("<USER_REQUEST>x</USER_REQUEST>"), None);
    }

    #[test]
    fn failed_commands_are_errors() {
        assert!(command_failed("\t\tThe command failed with exit code: 1\n"));
        assert!(!command_failed("The command completed successfully."));
        assert!(!command_failed("The command failed with exit code: 0"));
    }

    #[test]
    fn file_uris() {
        assert_eq!(
            file_uri_path("file:///home/dev/my%20app").as_deref(),
            Some("/home/dev/my app")
        );
        assert_eq!(
            file_uri_path("file:///c%3A/Users/x").as_deref(),
            Some("c:/Users/x")
        );
        assert_eq!(file_uri_path("/plain"), None);
    }
}
