//! The hook commands Claude Code runs: `memex inject --mode full|smart` and `memex hook stop`.
//!
//! They never slow the agent down or get in its way: the whole run (reading stdin, asking the
//! service, answering) has `[inject] timeout_ms` (1 s by default); on any error, timeout or
//! missing service they print nothing and exit 0. What went wrong is only said with `--explain`
//! (on stderr), for a person trying the command by hand.

use std::error::Error as _;
use std::io::Read;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{HookInput, HookInputError, Host, Mode, Request, skip_reason};
use crate::client::ClientError;
use crate::config::Settings;

/// Largest hook input read from stdin (prompts with pasted logs are big, not this big).
const MAX_INPUT: u64 = 1 << 20;

/// What a hook run produced: the stdout for Claude Code (if any) and why, for `--explain`.
#[derive(Debug, Default)]
pub struct Outcome {
    pub stdout: Option<String>,
    pub explain: Vec<String>,
}

impl Outcome {
    /// Nothing to print, for this reason.
    pub fn nothing(why: impl Into<String>) -> Outcome {
        Outcome::default().note(why)
    }

    fn note(mut self, why: impl Into<String>) -> Outcome {
        self.explain.push(why.into());
        self
    }
}

/// The deadline of one hook run.
struct Budget {
    until: Instant,
}

impl Budget {
    fn left(&self) -> Option<Duration> {
        self.until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    }
}

/// Why a hook run got nothing from the service. Said only with `--explain`.
#[derive(Debug, thiserror::Error)]
enum HookError {
    #[error("out of time before {0}")]
    OutOfTime(&'static str),
    #[error("cannot start reading stdin: {0}")]
    Thread(#[source] std::io::Error),
    #[error("cannot read stdin: {0}")]
    Stdin(#[source] std::io::Error),
    #[error("stdin was not closed within the budget")]
    StdinOpen,
    #[error("the hook input is larger than {MAX_INPUT} bytes")]
    TooLarge,
    #[error(transparent)]
    Input(#[from] HookInputError),
    /// The service's error and its cause, on one line.
    #[error("{}", with_cause(.0))]
    Service(#[from] ClientError),
}

fn with_cause(e: &ClientError) -> String {
    match e.source() {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Reads the hook input from `stdin` within the budget, on a thread that is abandoned if the
/// writer never closes the pipe.
fn read_input(stdin: impl Read + Send + 'static, budget: &Budget) -> Result<Vec<u8>, HookError> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("hook-stdin".into())
        .spawn(move || {
            let mut buf = Vec::new();
            let res = stdin.take(MAX_INPUT + 1).read_to_end(&mut buf).map(|_| buf);
            let _ = tx.send(res);
        })
        .map_err(HookError::Thread)?;
    let left = budget.left().ok_or(HookError::OutOfTime("reading stdin"))?;
    match rx.recv_timeout(left) {
        Ok(Ok(buf)) if buf.len() as u64 > MAX_INPUT => Err(HookError::TooLarge),
        Ok(Ok(buf)) => Ok(buf),
        Ok(Err(e)) => Err(HookError::Stdin(e)),
        Err(_) => Err(HookError::StdinOpen),
    }
}

/// Reads `host`'s hook input from `stdin` within the budget.
fn hook_input(
    host: Host,
    stdin: impl Read + Send + 'static,
    budget: &Budget,
) -> Result<HookInput, HookError> {
    Ok(host.read(&read_input(stdin, budget)?)?)
}

fn post(
    settings: &Settings,
    path: &str,
    body: &Value,
    budget: &Budget,
) -> Result<Value, HookError> {
    let left = budget
        .left()
        .ok_or(HookError::OutOfTime("asking the service"))?;
    Ok(crate::client::Service::of(settings, None).post_json(
        path,
        body,
        left,
        left.min(Duration::from_millis(300)),
    )?)
}

/// Whether this run is headless: `claude -p` and the Agent SDKs set `CLAUDE_CODE_ENTRYPOINT`
/// to `sdk-cli`, `sdk-ts`, `sdk-py`.
pub fn headless(env: &std::collections::BTreeMap<String, String>) -> bool {
    env.get("CLAUDE_CODE_ENTRYPOINT")
        .is_some_and(|e| e.starts_with("sdk"))
}

/// `memex inject --mode full|smart [--agent HOST]`: the hook JSON of `host` on `stdin` → what
/// the agent adds to the context. `headless`: see [`headless`].
pub fn inject(
    settings: &Settings,
    mode: Mode,
    host: Host,
    stdin: impl Read + Send + 'static,
    headless: bool,
    explain: bool,
) -> Outcome {
    let started = Instant::now();
    let s = &settings.inject;
    let out = Outcome::default();
    if !s.enabled {
        return out.note("injection is off: set [inject] enabled = true (see `memex config`)");
    }
    let budget = Budget {
        until: started + Duration::from_millis(s.timeout_ms),
    };
    if let Some(why) = host.refuses(mode) {
        return out.note(why);
    }
    let input = match hook_input(host, stdin, &budget) {
        Ok(i) => i,
        Err(e) => return out.note(e.to_string()),
    };
    if let Some(why) = skip_reason(mode, &input, s, headless) {
        return out.note(format!("skipped: {why}"));
    }
    let cwd = match input.cwd.clone().or_else(|| {
        std::env::current_dir()
            .ok()
            .map(|d| d.display().to_string())
    }) {
        Some(c) => c,
        None => return out.note("no `cwd` in the hook input and no current folder"),
    };
    let req = Request {
        mode,
        session_id: input.session_id.clone(),
        cwd,
        prompt: input
            .prompt
            .clone()
            .map(|p| truncate(p, super::MAX_PROMPT_BYTES)),
        agent_id: input.agent_id.clone(),
        project_scope: Some(s.project_scope.clone()),
        threshold: Some(s.similarity_threshold),
        max_results: Some(match mode {
            Mode::Smart => s.max_results,
            Mode::Full => s.full_max_sessions,
        }),
        max_tokens: Some(match mode {
            Mode::Smart => s.max_tokens,
            Mode::Full => s.full_max_tokens,
        }),
        min_prompt_chars: Some(s.min_prompt_chars),
        record_prompt: Some(s.record_prompts),
        explain: (explain && mode == Mode::Smart).then_some(true),
    };
    let body = match serde_json::to_value(&req) {
        Ok(b) => b,
        Err(e) => return out.note(format!("cannot encode the request: {e}")),
    };
    let v = match post(settings, "/api/inject", &body, &budget) {
        Ok(v) => v,
        Err(e) => return out.note(e.to_string()),
    };
    let mut out = out;
    if let Some(why) = v["skipped"].as_str() {
        out = out.note(format!("the service skipped it: {why}"));
    }
    for i in v["items"].as_array().into_iter().flatten() {
        out = out.note(format!(
            "item: {} {} prompt {} confidence {}",
            i["level"].as_str().unwrap_or(""),
            i["session_id"].as_str().unwrap_or(""),
            i["prompt_number"],
            i["confidence"]
        ));
    }
    for c in v["considered"].as_array().into_iter().flatten() {
        let number = |k: &str| c[k].as_f64().map_or("-".to_owned(), |x| format!("{x:.2}"));
        out = out.note(format!(
            "candidate: {} {} prompt {}: similarity {}, words {} → confidence {}: {}",
            c["level"].as_str().unwrap_or(""),
            c["session_id"].as_str().unwrap_or(""),
            c["prompt_number"],
            number("similarity"),
            number("words"),
            number("confidence"),
            c["verdict"].as_str().unwrap_or("")
        ));
    }
    if let Some(b) = v["best_confidence"].as_f64() {
        out = out.note(format!(
            "best confidence {b:.3} (threshold {})",
            s.similarity_threshold
        ));
    }
    let context = v["context"].as_str().unwrap_or("");
    out = out.note(format!(
        "{} items, {} tokens, {:.1} ms in the service, {:.1} ms in all",
        v["items"].as_array().map_or(0, Vec::len),
        v["tokens"],
        v["latency_ms"].as_f64().unwrap_or(0.0),
        started.elapsed().as_secs_f64() * 1000.0
    ));
    if context.is_empty() {
        return out;
    }
    out.stdout = Some(host.output(input.hook_event_name.as_deref(), mode, context));
    out
}

/// The start of `s` within `max` bytes, at a character boundary.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// `memex hook stop [--agent HOST]`: the JSON of `host`'s end-of-turn hook on `stdin` → the
/// service compacts that session (`POST /api/compact/session/{id}`). Prints nothing.
pub fn stop(settings: &Settings, host: Host, stdin: impl Read + Send + 'static) -> Outcome {
    let budget = Budget {
        until: Instant::now() + Duration::from_millis(settings.inject.timeout_ms),
    };
    let out = Outcome::default();
    let input = match hook_input(host, stdin, &budget) {
        Ok(i) => i,
        Err(e) => return out.note(e.to_string()),
    };
    if input.agent_id.is_some() {
        return out.note("skipped: a sub-agent");
    }
    let Some(id) = input.session_id.filter(|id| {
        !id.is_empty()
            && id.len() <= 256
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    }) else {
        return out.note("no usable `session_id` in the hook input");
    };
    match post(
        settings,
        &format!("/api/compact/session/{id}"),
        &json!({}),
        &budget,
    ) {
        Ok(v) => out.note(format!("queued {} compact jobs", v["queued"])),
        Err(e) => out.note(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_bind_is_reached_on_loopback() {
        let mut s = Settings::default();
        for (bind, want) in [
            ("0.0.0.0:10013", "127.0.0.1:10013"),
            ("[::]:7000", "[::1]:7000"),
            ("127.0.0.1:10013", "127.0.0.1:10013"),
            ("192.168.1.5:80", "192.168.1.5:80"),
        ] {
            s.api.bind = bind.into();
            assert_eq!(crate::client::reachable(&s.api.bind), want);
        }
    }

    #[test]
    fn prompts_are_cut_at_a_character_boundary() {
        let p = "é".repeat(10);
        assert_eq!(truncate(p.clone(), 5), "éé");
        assert_eq!(truncate(p.clone(), 100), p);
    }

    #[test]
    fn headless_runs_are_recognised() {
        let env = |v: &str| {
            std::collections::BTreeMap::from([("CLAUDE_CODE_ENTRYPOINT".to_owned(), v.to_owned())])
        };
        assert!(headless(&env("sdk-cli")) && headless(&env("sdk-py")));
        assert!(!headless(&env("cli")));
        assert!(!headless(&Default::default()));
    }
}
