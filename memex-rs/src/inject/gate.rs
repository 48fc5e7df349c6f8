//! The hook side's gate: what the hook reads from Claude Code, and the rules that skip an
//! injection before anything is asked of the service.

use std::path::Path;

use serde_json::Value;

use crate::config::InjectSettings;

use super::Mode;

/// A file with this name in a project folder or above it turns injection off there.
pub const OPT_OUT_FILE: &str = ".memex-no-inject";

/// The fields of Claude Code's hook input that Memex reads. Everything else is ignored.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookInput {
    pub session_id: Option<String>,
    pub transcript_path: Option<String>,
    pub cwd: Option<String>,
    pub hook_event_name: Option<String>,
    pub prompt: Option<String>,
    /// SessionStart: startup | resume | clear | compact.
    pub source: Option<String>,
    /// Present only inside a sub-agent.
    pub agent_id: Option<String>,
    /// The agent's name: in a sub-agent, or a session started with `--agent`.
    pub agent_type: Option<String>,
}

impl HookInput {
    /// Parses hook stdin. A field of the wrong type is an error that names it.
    pub fn parse(bytes: &[u8]) -> Result<HookInput, String> {
        HookInput::from_value(&HookInput::json(bytes)?)
    }

    /// Hook stdin as JSON.
    pub fn json(bytes: &[u8]) -> Result<Value, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("the hook input is not JSON: {e}"))
    }

    /// The fields Memex reads from hook input already parsed.
    pub fn from_value(v: &Value) -> Result<HookInput, String> {
        let Some(o) = v.as_object() else {
            return Err("the hook input must be a JSON object".into());
        };
        let field = |k: &str| -> Result<Option<String>, String> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(format!("`{k}` in the hook input must be a string")),
            }
        };
        Ok(HookInput {
            session_id: field("session_id")?,
            transcript_path: field("transcript_path")?,
            cwd: field("cwd")?,
            hook_event_name: field("hook_event_name")?,
            prompt: field("prompt")?,
            source: field("source")?,
            agent_id: field("agent_id")?,
            agent_type: field("agent_type")?,
        })
    }
}

/// Why a prompt gets nothing without asking the service, if it does.
pub fn skip_reason(
    mode: Mode,
    input: &HookInput,
    s: &InjectSettings,
    headless: bool,
) -> Option<String> {
    if !s.enabled {
        return Some("injection is off ([inject] enabled = false)".into());
    }
    if input.agent_id.is_some() {
        return Some("a sub-agent".into());
    }
    if headless && s.skip_headless {
        return Some("a headless run ([inject] skip_headless)".into());
    }
    if let Some(cwd) = &input.cwd
        && let Some(why) = opted_out(Path::new(cwd), &s.exclude_projects)
    {
        return Some(why);
    }
    if mode == Mode::Smart {
        return prompt_skip(input.prompt.as_deref().unwrap_or(""), s.min_prompt_chars);
    }
    None
}

/// Smart mode's rules about the prompt itself.
pub(super) fn prompt_skip(prompt: &str, min_chars: usize) -> Option<String> {
    let p = prompt.trim();
    if p.starts_with('/') || p.starts_with("<command-name>") {
        return Some("a slash command".into());
    }
    let n = p.chars().count();
    if n < min_chars {
        return Some(format!(
            "a short prompt ({n} characters; [inject] min_prompt_chars = {min_chars})"
        ));
    }
    None
}

/// A project opted out: listed in `exclude_projects`, or an [`OPT_OUT_FILE`] at or above `cwd`.
pub fn opted_out(cwd: &Path, exclude: &[String]) -> Option<String> {
    if let Some(x) = exclude
        .iter()
        .find(|x| cwd.starts_with(Path::new(x.trim_end_matches('/'))))
    {
        return Some(format!("{x} is in [inject] exclude_projects"));
    }
    cwd.ancestors()
        .map(|d| d.join(OPT_OUT_FILE))
        .find(|f| f.exists())
        .map(|f| format!("{} exists", f.display()))
}
