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

/// Why a hook's stdin cannot be read as its input.
#[derive(Debug, thiserror::Error)]
pub enum HookInputError {
    #[error("the hook input is not JSON: {0}")]
    NotJson(#[from] serde_json::Error),
    #[error("the hook input must be a JSON object")]
    NotObject,
    /// A field Memex reads holds another type than the one named.
    #[error("`{field}` in the hook input must be {expected}")]
    WrongType {
        field: String,
        expected: &'static str,
    },
    /// Another agent's input on Claude Code's hook (the agent, and its `--agent` name).
    #[error("skipped: {0} runs Claude Code's hooks too; install {0}'s own (`--agent {1}`) for it")]
    Foreign(&'static str, &'static str),
}

impl HookInputError {
    fn not_string(field: &str) -> HookInputError {
        HookInputError::WrongType {
            field: field.to_owned(),
            expected: "a string",
        }
    }
}

/// The string at `key` of `o`: absent and `null` are `None`, another type an error.
pub(super) fn string_field(
    o: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<Option<String>, HookInputError> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(HookInputError::not_string(key)),
    }
}

impl HookInput {
    /// Parses hook stdin. A field of the wrong type is an error that names it.
    pub fn parse(bytes: &[u8]) -> Result<HookInput, HookInputError> {
        HookInput::from_value(&HookInput::json(bytes)?)
    }

    /// Hook stdin as JSON.
    pub fn json(bytes: &[u8]) -> Result<Value, HookInputError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// The fields Memex reads from hook input already parsed.
    pub fn from_value(v: &Value) -> Result<HookInput, HookInputError> {
        let Some(o) = v.as_object() else {
            return Err(HookInputError::NotObject);
        };
        let field = |k: &str| string_field(o, k);
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
    if let Some(why) = machine_written(p) {
        return Some(why.into());
    }
    let n = p.chars().count();
    if n < min_chars {
        return Some(format!(
            "a short prompt ({n} characters; [inject] min_prompt_chars = {min_chars})"
        ));
    }
    None
}

/// What the agents and their harnesses write into the prompt slot themselves: a command's
/// output, a reminder, the environment, the summary that continues a compacted session, an
/// interruption marker. Matched at the start of the prompt.
const HARNESS_TEXT: &[&str] = &[
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<command-message>",
    "<system-reminder>",
    "<user-prompt-submit-hook>",
    "<environment_context>",
    "<user_instructions>",
    "<turn_aborted>",
    "[Request interrupted by user",
    "Caveat: The messages below were generated by the user while running local commands",
    "This session is being continued from a previous conversation",
];

/// Why a prompt was written by a machine rather than asked by a person, if it was: text the
/// harness puts there ([`HARNESS_TEXT`]), or a pasted log with no word of the user's own (five
/// lines or more, every one of them a log, trace or code line, and no question mark). Memory
/// for such a prompt answers a question nobody asked.
pub(super) fn machine_written(prompt: &str) -> Option<&'static str> {
    let p = prompt.trim_start();
    if HARNESS_TEXT.iter().any(|m| p.starts_with(m)) {
        return Some("written by the agent's harness, not typed");
    }
    let lines: Vec<&str> = p.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.len() >= 5 && !p.contains('?') && lines.iter().all(|l| log_line(l)) {
        return Some("a pasted log with no question");
    }
    None
}

/// A line a program wrote: a time stamp or a level first, a stack frame, a `file:line:`
/// location, a raised error, an indented or bracketed line, or one with more symbols and
/// digits than words.
fn log_line(line: &str) -> bool {
    let t = line.trim_start();
    let indented = t.len() < line.len();
    let first = t.chars().next().unwrap_or(' ');
    let levels = [
        "ERROR", "WARN", "INFO", "DEBUG", "TRACE", "FATAL", "error:", "warning:",
    ];
    let frame = t.starts_with("at ") || t.starts_with("File \"") || t.starts_with("Traceback");
    let located = t
        .split_whitespace()
        .next()
        .is_some_and(|w| w.matches(':').count() >= 2 && w.chars().any(|c| c.is_ascii_digit()));
    // `ZeroDivisionError: …`, `thread 'main' panicked at …`, `Caused by: …`.
    let raised = t.split_whitespace().next().is_some_and(|w| {
        w.ends_with(':')
            && ["Error", "Exception", "Caused"]
                .iter()
                .any(|e| w.contains(e))
    }) || t.contains(" panicked at ");
    let letters = t.chars().filter(|c| c.is_alphabetic()).count();
    let symbolic = letters * 2 < t.chars().filter(|c| !c.is_whitespace()).count();
    // A time stamp or a counter, not a numbered list item (`1. do this`).
    let stamped = first.is_ascii_digit()
        && t.chars()
            .take(8)
            .find(|c| !c.is_ascii_digit())
            .is_some_and(|c| matches!(c, '-' | ':' | '/' | '|' | ']'));
    indented
        || stamped
        || matches!(first, '[' | '{' | '}' | '<' | '$' | '|' | '=')
        || levels.iter().any(|l| t.starts_with(l))
        || frame
        || located
        || raised
        || symbolic
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_the_harness_wrote_or_bare_logs_get_nothing() {
        for p in [
            "<local-command-stdout>Set model to opus</local-command-stdout>",
            "<environment_context>\n  <cwd>/home/dev/app</cwd>\n</environment_context>",
            "This session is being continued from a previous conversation that ran out of context. The conversation is summarized below:",
            "[Request interrupted by user for tool use]",
            "  <system-reminder>The user opened a file</system-reminder>",
            "Traceback (most recent call last):\n  File \"app.py\", line 3, in <module>\n    main()\n  File \"app.py\", line 2, in main\n    1 / 0\nZeroDivisionError: division by zero",
            "2026-06-01T10:00:01Z INFO server started\n2026-06-01T10:00:02Z WARN slow query\n2026-06-01T10:00:03Z ERROR pool exhausted\n2026-06-01T10:00:04Z INFO retry 1\n2026-06-01T10:00:05Z INFO retry 2",
            "src/pay.rs:12:5: error[E0308]: mismatched types\nsrc/pay.rs:40:9: warning: unused variable\nsrc/pay.rs:41:9: warning: unused variable\nsrc/pay.rs:42:9: warning: unused variable\nsrc/pay.rs:43:9: warning: unused variable",
        ] {
            assert!(machine_written(p).is_some(), "{p}");
            assert!(prompt_skip(p, 10).is_some(), "{p}");
        }
    }

    #[test]
    fn what_a_person_asks_is_answered_even_with_a_log_in_it() {
        for p in [
            "why does the checkout test fail since the webhook change?",
            // A log, and the person's own words about it.
            "The pool runs out under load, can you look:\n2026-06-01T10:00:03Z ERROR pool exhausted\n2026-06-01T10:00:04Z INFO retry 1\n2026-06-01T10:00:05Z INFO retry 2\n2026-06-01T10:00:06Z INFO retry 3",
            // A log with a question.
            "ERROR pool exhausted\nINFO retry 1\nINFO retry 2\nINFO retry 3\nINFO retry 4\nwhat does this mean?",
            // Four lines of a log are not enough to tell.
            "ERROR a\nERROR b\nERROR c\nERROR d",
            // Lists a person writes: Markdown bullets, numbered steps, headings.
            "# Plan\n- move the parser\n- keep the cache\n- drop the old flag\n- update the docs",
            "1. move the parser\n2. keep the cache\n3. drop the old flag\n4. update the docs\n5. ship",
            // A Chinese question mark.
            "错误日志如下\n2026-06-01 ERROR a\n2026-06-01 ERROR b\n2026-06-01 ERROR c\n2026-06-01 ERROR d\n怎么修？",
            "Refactor the session store so that\nreads never wait for the writer\nand the pool is shared\nby the API and the hooks\nlike we discussed",
            "修复登录页面的验证码刷新问题",
        ] {
            assert_eq!(machine_written(p), None, "{p}");
            assert_eq!(prompt_skip(p, 10), None, "{p}");
        }
    }
}
