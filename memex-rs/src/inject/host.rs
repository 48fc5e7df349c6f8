//! The agents whose hooks can run `memex inject` and `memex hook stop`, each with its own hook
//! contract: what its stdin holds and what its stdout must be to add text to the model's
//! context. Memex reads every shape into one [`HookInput`] and answers in the shape the agent
//! documents; on anything else it stays silent, as everywhere in the hook commands.
//!
//! | host | prompt event (smart) | start event (full) | stop event | context on stdout |
//! |---|---|---|---|---|
//! | Claude Code | `UserPromptSubmit` | `SessionStart` | `Stop` | `hookSpecificOutput.additionalContext` |
//! | Codex CLI | `UserPromptSubmit` | `SessionStart` | `Stop` | the same, and no other key |
//! | Gemini CLI | `BeforeAgent` | `SessionStart` | `AfterAgent` | the same |
//! | Cursor | `beforeSubmitPrompt` | `sessionStart` | `stop` | `additional_context` |
//! | Copilot CLI | — (its output is dropped) | `sessionStart` | `agentStop` | `additionalContext` |

use serde_json::{Value, json};

use super::gate::string_field;
use super::{HookInput, HookInputError, Mode};
use crate::layer::UnknownName;

/// The agent running the hook command (`--agent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    Claude,
    Codex,
    Gemini,
    Cursor,
    Copilot,
}

impl Host {
    pub const NAMES: &'static [&'static str] = &["claude", "codex", "gemini", "cursor", "copilot"];

    pub fn parse(s: &str) -> Result<Host, UnknownName> {
        Ok(match s {
            "claude" => Host::Claude,
            "codex" => Host::Codex,
            "gemini" => Host::Gemini,
            "cursor" => Host::Cursor,
            "copilot" => Host::Copilot,
            other => return Err(UnknownName::new(other, Host::NAMES.iter().copied())),
        })
    }

    /// The agent's name as people know it.
    pub fn title(self) -> &'static str {
        match self {
            Host::Claude => "Claude Code",
            Host::Codex => "Codex CLI",
            Host::Gemini => "Gemini CLI",
            Host::Cursor => "Cursor",
            Host::Copilot => "Copilot CLI",
        }
    }

    /// Reads this agent's hook input. A field of the wrong type is an error that names it.
    pub fn read(self, bytes: &[u8]) -> Result<HookInput, HookInputError> {
        let v = HookInput::json(bytes)?;
        let mut input = HookInput::from_value(&v)?;
        let Some(o) = v.as_object() else {
            return Err(HookInputError::NotObject);
        };
        let text = |k: &str| string_field(o, k);
        match self {
            Host::Claude => {
                // Cursor runs Claude Code's hooks (~/.claude, a project's .claude/) with its own
                // input; so does Copilot CLI with camelCase events: those runs are theirs to
                // answer through their own hooks, else memory would come twice. (Copilot's
                // PascalCase events send Claude Code's very fields: those cannot be told apart.)
                if let Some(other) = foreign_input(&v) {
                    return Err(other);
                }
            }
            Host::Codex | Host::Gemini => {}
            Host::Cursor => {
                // The conversation id is the composer id Cursor keeps the chat under.
                input.session_id = text("conversation_id")?.or(input.session_id);
                if input.cwd.is_none() {
                    input.cwd = match v.get("workspace_roots") {
                        None | Some(Value::Null) => None,
                        Some(Value::Array(roots)) => {
                            roots.first().and_then(Value::as_str).map(str::to_owned)
                        }
                        Some(_) => {
                            return Err(HookInputError::WrongType {
                                field: "workspace_roots".into(),
                                expected: "a list",
                            });
                        }
                    };
                }
            }
            Host::Copilot => {
                // camelCase when the event is configured in camelCase, snake_case otherwise.
                input.session_id = input.session_id.or(text("sessionId")?);
                input.transcript_path = input.transcript_path.or(text("transcriptPath")?);
                input.hook_event_name = input.hook_event_name.or(text("hookEventName")?);
                input.prompt = input.prompt.or(text("initialPrompt")?);
            }
        }
        Ok(input)
    }

    /// Why this agent cannot take `mode` at all, if it cannot.
    pub fn refuses(self, mode: Mode) -> Option<&'static str> {
        (self == Host::Copilot && mode == Mode::Smart).then_some(
            "Copilot CLI drops what a prompt hook prints (only a session start can add \
             context): use --mode full at sessionStart",
        )
    }

    /// What goes on stdout for `context` in answer to `event` (the input's event name, when it
    /// has one) in `mode`.
    pub fn output(self, event: Option<&str>, mode: Mode, context: &str) -> String {
        let named = |prompt: &'static str, start: &'static str| -> String {
            match event {
                Some(e) if e == prompt || e == start => e.to_owned(),
                _ => match mode {
                    Mode::Smart => prompt.to_owned(),
                    Mode::Full => start.to_owned(),
                },
            }
        };
        match self {
            Host::Claude => match event {
                Some(e @ ("SessionStart" | "UserPromptSubmit")) => json!({
                    "hookSpecificOutput": {"hookEventName": e, "additionalContext": context}
                })
                .to_string(),
                // Run by hand, or by an event without additionalContext: plain text.
                _ => context.to_owned(),
            },
            // Codex refuses an output with any key it does not know.
            Host::Codex => json!({
                "hookSpecificOutput": {
                    "hookEventName": named("UserPromptSubmit", "SessionStart"),
                    "additionalContext": context,
                }
            })
            .to_string(),
            // Gemini shows plain text to the user, not the model: always the JSON.
            Host::Gemini => json!({
                "hookSpecificOutput": {
                    "hookEventName": named("BeforeAgent", "SessionStart"),
                    "additionalContext": context,
                }
            })
            .to_string(),
            Host::Cursor => match mode {
                Mode::Full => json!({"additional_context": context}).to_string(),
                Mode::Smart => json!({"continue": true, "additional_context": context}).to_string(),
            },
            Host::Copilot => json!({"additionalContext": context}).to_string(),
        }
    }
}

/// The agent whose input this is, when it is not Claude Code's own.
fn foreign_input(v: &Value) -> Option<HookInputError> {
    if v.get("conversation_id").is_some() || v.get("cursor_version").is_some() {
        Some(HookInputError::Foreign("Cursor", "cursor"))
    } else if v.get("sessionId").is_some() && v.get("session_id").is_none() {
        Some(HookInputError::Foreign("Copilot CLI", "copilot"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_host_reads_its_own_fields() {
        let cursor = Host::Cursor
            .read(
                br#"{"conversation_id":"c-1","generation_id":"g","hook_event_name":"beforeSubmitPrompt",
                   "workspace_roots":["/repo","/other"],"prompt":"why","cursor_version":"2.0.77"}"#,
            )
            .unwrap();
        assert_eq!(cursor.session_id.as_deref(), Some("c-1"));
        assert_eq!(cursor.cwd.as_deref(), Some("/repo"));
        assert_eq!(cursor.prompt.as_deref(), Some("why"));
        let copilot = Host::Copilot
            .read(br#"{"sessionId":"s-2","timestamp":1774281852263,"cwd":"/r","source":"new"}"#)
            .unwrap();
        assert_eq!(copilot.session_id.as_deref(), Some("s-2"));
        assert_eq!(copilot.cwd.as_deref(), Some("/r"));
        // A wrong type is named, whichever spelling carried it.
        let field = |e: HookInputError| match e {
            HookInputError::WrongType { field, .. } => field,
            other => panic!("{other}"),
        };
        let bad = Host::Cursor.read(br#"{"conversation_id":7}"#).unwrap_err();
        assert_eq!(field(bad), "conversation_id");
        let bad = Host::Cursor
            .read(br#"{"conversation_id":"c","workspace_roots":"/repo"}"#)
            .unwrap_err();
        assert_eq!(
            bad.to_string(),
            "`workspace_roots` in the hook input must be a list"
        );
        let bad = Host::Copilot.read(br#"{"sessionId":[1]}"#).unwrap_err();
        assert_eq!(field(bad), "sessionId");
    }

    #[test]
    fn claude_hooks_run_by_another_agent_are_left_to_it() {
        let why = Host::Claude
            .read(br#"{"conversation_id":"c","hook_event_name":"beforeSubmitPrompt"}"#)
            .unwrap_err();
        assert!(matches!(why, HookInputError::Foreign("Cursor", "cursor")));
        assert!(why.to_string().contains("`--agent cursor`"), "{why}");
        let why = Host::Claude
            .read(br#"{"sessionId":"s","cwd":"/r"}"#)
            .unwrap_err();
        assert!(
            matches!(why, HookInputError::Foreign(_, "copilot")),
            "{why}"
        );
        assert!(
            Host::Claude
                .read(br#"{"session_id":"s","cwd":"/r","hook_event_name":"Stop"}"#)
                .is_ok()
        );
    }

    #[test]
    fn outputs_have_exactly_the_documented_keys() {
        let out = |h: Host, e: Option<&str>, m: Mode| -> Value {
            serde_json::from_str(&h.output(e, m, "ctx")).unwrap()
        };
        assert_eq!(
            out(Host::Codex, Some("UserPromptSubmit"), Mode::Smart),
            json!({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ctx"}})
        );
        assert_eq!(
            out(Host::Gemini, None, Mode::Smart)["hookSpecificOutput"]["hookEventName"],
            "BeforeAgent"
        );
        assert_eq!(
            out(Host::Gemini, Some("SessionStart"), Mode::Full)["hookSpecificOutput"]["hookEventName"],
            "SessionStart"
        );
        assert_eq!(
            out(Host::Cursor, Some("sessionStart"), Mode::Full),
            json!({"additional_context": "ctx"})
        );
        assert_eq!(
            out(Host::Cursor, Some("beforeSubmitPrompt"), Mode::Smart),
            json!({"continue": true, "additional_context": "ctx"})
        );
        assert_eq!(
            out(Host::Copilot, None, Mode::Full),
            json!({"additionalContext": "ctx"})
        );
        assert_eq!(Host::Claude.output(None, Mode::Smart, "ctx"), "ctx");
        assert!(Host::Copilot.refuses(Mode::Smart).is_some());
        assert!(Host::NAMES.iter().all(|n| Host::parse(n).is_ok()));
        let e = Host::parse("vim").unwrap_err();
        assert_eq!(e.got, "vim");
        assert_eq!(e.accepted, Host::NAMES);
    }
}
