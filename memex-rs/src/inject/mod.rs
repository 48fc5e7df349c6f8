//! Memory pushed into Claude Code's context by its hooks.
//!
//! ```text
//!  Claude Code ──hook JSON (stdin)──▶ memex inject ──POST /api/inject──▶ memex serve
//!       ▲                             (skip rules,     (embed, search L1/L2/L3,
//!       └──── additionalContext ───── 1 s budget)       calibrate, budget, log)
//! ```
//!
//! The hook command ([`client`]) is the gate: it reads `[inject]` on every call (a config change
//! applies at the next prompt), applies the skip rules (`gate.rs`), and on any error, timeout or
//! missing service prints nothing and exits 0. The service (`answer.rs`) does the work and logs
//! each injection for the stats (`log.rs`). `full` (SessionStart) gives the project's most
//! recent session summaries; `smart` (UserPromptSubmit) the L1/L2/L3 items (and talks found through their raw
//! prompts and answers) that match the prompt with a calibrated confidence ([`calibration`]) at
//! or above the threshold.
//! [`hooks`] installs the hook entries into Claude Code's settings.

mod answer;
pub mod calibration;
pub mod client;
mod gate;
pub mod hooks;
mod host;
mod log;

use answer::project_of;
pub use answer::{SMART_LEVELS, add_team, answer, candidates, keep_model_ready, team_confidence};
pub use gate::{HookInput, HookInputError, OPT_OUT_FILE, opted_out, skip_reason};
pub use host::Host;
pub use log::{DayStats, InjectionStats, Latency, ModeStats, Record, record, stats};

use serde::{Deserialize, Serialize};

use crate::config::InjectSettings;
use crate::input::BadField;
use crate::layer::{Layer, UnknownName};

/// Claude Code shows longer hook output as a short preview instead of adding it to the context.
pub const MAX_CONTEXT_CHARS: usize = 9000;

/// `full` (SessionStart) or `smart` (UserPromptSubmit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Full,
    Smart,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Smart => "smart",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Mode, UnknownName> {
        match s {
            "full" => Ok(Mode::Full),
            "smart" => Ok(Mode::Smart),
            other => Err(UnknownName::new(other, ["full", "smart"])),
        }
    }
}

/// The body of `POST /api/inject`: the hook's input and the options in effect for the caller.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    pub mode: Mode,
    /// The agent session asking (its own history is never injected into it).
    #[serde(default)]
    pub session_id: Option<String>,
    /// The folder the agent runs in: the project whose history is used.
    pub cwd: String,
    /// Smart mode: the prompt.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Set inside a sub-agent: nothing is injected.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// `project` or `all`; default: the service's `[inject] project_scope`.
    #[serde(default)]
    pub project_scope: Option<String>,
    /// Smart: the confidence an item needs; default `[inject] similarity_threshold`.
    #[serde(default)]
    pub threshold: Option<f64>,
    /// Items at most; default `max_results` (smart) or `full_max_sessions` (full).
    #[serde(default)]
    pub max_results: Option<usize>,
    /// Tokens at most; default `max_tokens` (smart) or `full_max_tokens` (full).
    #[serde(default)]
    pub max_tokens: Option<usize>,
    /// Smart: shorter prompts get nothing; default `[inject] min_prompt_chars`.
    #[serde(default)]
    pub min_prompt_chars: Option<usize>,
    /// Keep the prompt's text in the injection log; default `[inject] record_prompts`.
    #[serde(default)]
    pub record_prompt: Option<bool>,
    /// Smart: say in `considered` why the best candidates were or were not injected.
    #[serde(default)]
    pub explain: Option<bool>,
}

/// The options of one request, defaults filled in and checked.
#[derive(Debug, Clone)]
pub struct Options {
    /// The project whose history is used (the git work tree of `cwd`, else `cwd`); `None`: every
    /// project.
    pub project: Option<String>,
    pub threshold: f64,
    pub max_results: usize,
    pub max_tokens: usize,
    pub min_prompt_chars: usize,
    pub record_prompt: bool,
    pub explain: bool,
}

/// Longest accepted prompt, in bytes (longer ones are pasted logs; their start is embedded).
pub const MAX_PROMPT_BYTES: usize = 256 << 10;

impl Request {
    /// Checks every field; the error names the one that is wrong.
    pub fn validate(&self, s: &InjectSettings) -> Result<Options, BadField> {
        if let Some(id) = &self.session_id
            && (id.is_empty() || id.len() > 256 || id.chars().any(char::is_control))
        {
            return Err(BadField::new(
                "session_id",
                "must be 1 to 256 printable characters",
            ));
        }
        if !self.cwd.starts_with('/') || self.cwd.len() > 4096 || self.cwd.contains('\0') {
            return Err(BadField::new(
                "cwd",
                format!(
                    "must be an absolute folder path, got `{}`",
                    self.cwd.chars().take(80).collect::<String>()
                ),
            ));
        }
        if let Some(p) = &self.prompt
            && p.len() > MAX_PROMPT_BYTES
        {
            return Err(BadField::new(
                "prompt",
                format!(
                    "is {} bytes; at most {MAX_PROMPT_BYTES} are accepted",
                    p.len()
                ),
            ));
        }
        if self.mode == Mode::Smart && self.prompt.is_none() {
            return Err(BadField::new("prompt", "is required in smart mode"));
        }
        let scope = self.project_scope.as_deref().unwrap_or(&s.project_scope);
        if !crate::config::PROJECT_SCOPES.contains(&scope) {
            return Err(BadField::new(
                "project_scope",
                format!("must be `project` or `all`, got `{scope}`"),
            ));
        }
        let threshold = self.threshold.unwrap_or(s.similarity_threshold);
        if !(0.0..=1.0).contains(&threshold) {
            return Err(BadField::new(
                "threshold",
                format!("must be 0.0 to 1.0, got {threshold}"),
            ));
        }
        let (default_results, default_tokens) = match self.mode {
            Mode::Smart => (s.max_results, s.max_tokens),
            Mode::Full => (s.full_max_sessions, s.full_max_tokens),
        };
        let max_results = self.max_results.unwrap_or(default_results);
        if !(1..=50).contains(&max_results) {
            return Err(BadField::new(
                "max_results",
                format!("must be 1 to 50, got {max_results}"),
            ));
        }
        let max_tokens = self.max_tokens.unwrap_or(default_tokens);
        if !(50..=20_000).contains(&max_tokens) {
            return Err(BadField::new(
                "max_tokens",
                format!("must be 50 to 20000, got {max_tokens}"),
            ));
        }
        let min_prompt_chars = self.min_prompt_chars.unwrap_or(s.min_prompt_chars);
        if min_prompt_chars > 10_000 {
            return Err(BadField::new(
                "min_prompt_chars",
                format!("must be 0 to 10000, got {min_prompt_chars}"),
            ));
        }
        Ok(Options {
            project: (scope != "all").then(|| project_of(&self.cwd)),
            threshold,
            max_results,
            max_tokens,
            min_prompt_chars,
            record_prompt: self.record_prompt.unwrap_or(s.record_prompts),
            explain: self.explain.unwrap_or(false),
        })
    }
}

fn item_name<S: serde::Serializer>(l: &Layer, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(l.item())
}

/// One injected item.
#[derive(Debug, Clone, Serialize)]
pub struct Item {
    /// The layer it comes from, at the wire its item name: `observation`, `talk`, `session`,
    /// or `message` (a talk found through one of its prompts or answers; its summary, or the
    /// message when the talk has none).
    #[serde(serialize_with = "item_name")]
    pub level: Layer,
    pub session_id: String,
    pub agent: String,
    pub project: Option<String>,
    /// 0 for a session summary.
    pub prompt_number: i64,
    pub date: Option<String>,
    /// Smart mode: the estimated probability that the item is relevant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// Cosine similarity of the item to the prompt (smart mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f64>,
    /// The share of the prompt's significant words the item holds (smart mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub words: Option<f64>,
    pub summary: String,
    /// How to read the item in full through the MCP server.
    pub hint: String,
    /// The team member who shared it (an item of the team archive); absent: this archive's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

/// The answer of `POST /api/inject`.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Response {
    pub mode: &'static str,
    /// What goes into the agent's context; empty: nothing.
    pub context: String,
    pub items: Vec<Item>,
    /// Estimated tokens of `context`.
    pub tokens: u64,
    /// Smart mode: the best candidate's confidence, whether or not it passed.
    pub best_confidence: Option<f64>,
    pub threshold: Option<f64>,
    /// Why nothing was looked up, when that is the case.
    pub skipped: Option<String>,
    pub latency_ms: f64,
    /// Smart mode, asked with `explain`: the best candidates and what became of each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub considered: Vec<Considered>,
}

/// One candidate of smart mode, as `explain` shows it: its score parts and its fate.
#[derive(Debug, Clone, Serialize)]
pub struct Considered {
    #[serde(serialize_with = "item_name")]
    pub level: Layer,
    pub session_id: String,
    pub prompt_number: i64,
    pub similarity: f64,
    /// The share of the prompt's significant words it holds.
    pub words: Option<f64>,
    pub confidence: f64,
    /// `injected`, or why not.
    pub verdict: &'static str,
}

/// How many candidates `explain` shows.
pub const EXPLAINED: usize = 5;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn settings() -> InjectSettings {
        InjectSettings {
            enabled: true,
            ..InjectSettings::default()
        }
    }

    fn input(prompt: &str) -> HookInput {
        HookInput {
            session_id: Some("s1".into()),
            cwd: Some("/nonexistent/project".into()),
            hook_event_name: Some("UserPromptSubmit".into()),
            prompt: Some(prompt.into()),
            ..HookInput::default()
        }
    }

    #[test]
    fn skip_rules() {
        let s = settings();
        let long = "why does the deadline test fail on CI again?";
        assert_eq!(skip_reason(Mode::Smart, &input(long), &s, false), None);
        let off = InjectSettings::default();
        assert!(
            skip_reason(Mode::Smart, &input(long), &off, false)
                .unwrap()
                .contains("enabled = false")
        );
        assert!(
            skip_reason(
                Mode::Smart,
                &input("/compact keep it short please"),
                &s,
                false
            )
            .unwrap()
            .contains("slash")
        );
        assert!(
            skip_reason(Mode::Smart, &input("yes go on"), &s, false)
                .unwrap()
                .contains("short prompt (9 characters")
        );
        // Full mode does not look at the prompt.
        assert_eq!(skip_reason(Mode::Full, &input(""), &s, false), None);
        let mut sub = input(long);
        sub.agent_id = Some("a1".into());
        assert_eq!(
            skip_reason(Mode::Smart, &sub, &s, false).as_deref(),
            Some("a sub-agent")
        );
        // `--agent` sessions name an agent type without being sub-agents.
        let mut named = input(long);
        named.agent_type = Some("reviewer".into());
        assert_eq!(skip_reason(Mode::Smart, &named, &s, false), None);
        assert!(skip_reason(Mode::Smart, &input(long), &s, true).is_some());
        let mut excluded = s.clone();
        excluded.exclude_projects = vec!["/nonexistent/".into()];
        assert!(
            skip_reason(Mode::Full, &input(long), &excluded, false)
                .unwrap()
                .contains("exclude_projects")
        );
    }

    #[test]
    fn opt_out_file_applies_below_it() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("repo/src/module");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(opted_out(&deep, &[]), None);
        std::fs::write(dir.path().join("repo").join(OPT_OUT_FILE), "").unwrap();
        assert!(opted_out(&deep, &[]).unwrap().contains(OPT_OUT_FILE));
        assert_eq!(opted_out(dir.path(), &[]), None);
    }

    #[test]
    fn hook_input_fields_are_checked() {
        let ok = HookInput::parse(
            br#"{"session_id":"abc","cwd":"/p","hook_event_name":"SessionStart","source":"startup","model":"x","extra":{"a":1}}"#,
        )
        .unwrap();
        assert_eq!(ok.source.as_deref(), Some("startup"));
        let err = HookInput::parse(br#"{"session_id": 5}"#).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`session_id` in the hook input must be a string"
        );
        assert!(matches!(
            HookInput::parse(b"[1]"),
            Err(HookInputError::NotObject)
        ));
        assert!(
            HookInput::parse(b"not json")
                .unwrap_err()
                .to_string()
                .starts_with("the hook input is not JSON: ")
        );
    }

    #[test]
    fn requests_are_validated() {
        let s = settings();
        let req = |v: Value| serde_json::from_value::<Request>(v);
        let ok = req(json!({"mode": "smart", "cwd": "/p", "prompt": "why is the build slow"}))
            .unwrap()
            .validate(&s)
            .unwrap();
        assert_eq!(ok.max_results, s.max_results);
        assert!(req(json!({"mode": "smart", "cwd": "/p", "bogus": 1})).is_err());
        assert!(req(json!({"mode": "sometimes", "cwd": "/p"})).is_err());
        let bad = |v: Value| req(v).unwrap().validate(&s).unwrap_err().field;
        assert_eq!(bad(json!({"mode": "full", "cwd": "relative"})), "cwd");
        assert_eq!(bad(json!({"mode": "smart", "cwd": "/p"})), "prompt");
        assert_eq!(
            bad(json!({"mode": "full", "cwd": "/p", "threshold": 1.5})),
            "threshold"
        );
        assert_eq!(
            bad(json!({"mode": "full", "cwd": "/p", "project_scope": "team"})),
            "project_scope"
        );
        assert_eq!(
            bad(json!({"mode": "full", "cwd": "/p", "max_tokens": 10})),
            "max_tokens"
        );
        let e = req(json!({"mode": "full", "cwd": "/p", "max_results": 0}))
            .unwrap()
            .validate(&s)
            .unwrap_err();
        assert_eq!(e.to_string(), "`max_results` must be 1 to 50, got 0");
    }
}
