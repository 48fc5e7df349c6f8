//! A session as a person reads it: talks (each prompt with its summary, what the agent said,
//! thought and ran), tool calls paired with their results, sub-agent work nested where it ran,
//! compaction and rewound talks marked; the session summary and the observations beside it.
//! Every renderer (Markdown, the HTML file, the web page) draws this one model.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::compact::queue::{ObservationView, SummaryView};
use crate::compact::{Observation, SessionSummary};
use crate::store::read::{MessageRow, SessionRow, Usage};

/// A session, ready to render.
#[derive(Debug, Clone)]
pub struct SessionView {
    pub session: SessionRow,
    pub usage: Usage,
    /// The session summary (L3), when compacted.
    pub summary: Option<SessionSummary>,
    /// What came before the first prompt (set-up records, context the agent was given).
    pub preamble: Vec<Entry>,
    pub talks: Vec<Talk>,
    /// The observations (L1), in talk order.
    pub observations: Vec<ObservationView>,
}

/// One prompt and everything done for it.
#[derive(Debug, Clone)]
pub struct Talk {
    pub number: i64,
    pub prompt: String,
    pub time: Option<String>,
    /// False when the agent rewound or rolled the talk back (it stays in the archive).
    pub active: bool,
    /// The talk summary (L2), when compacted.
    pub summary: Option<String>,
    pub entries: Vec<Entry>,
    pub tokens: Option<Usage>,
}

/// One thing in a talk, in the order it happened.
#[derive(Debug, Clone)]
pub enum Entry {
    Text {
        text: String,
        model: Option<String>,
    },
    /// A prompt-like message inside a talk (a second user message, a steering note).
    User {
        text: String,
    },
    Thinking {
        text: String,
    },
    Tool(Tool),
    /// The agent compacted its context here; `text` is the summary it kept.
    Compaction {
        text: String,
    },
    Meta {
        text: String,
    },
    /// Work a sub-agent did, nested where it ran.
    SubAgent {
        agent: String,
        entries: Vec<Entry>,
    },
}

/// A tool call and its result.
#[derive(Debug, Clone)]
pub struct Tool {
    pub name: String,
    /// The file, command, pattern or address it worked on, in one line.
    pub target: String,
    /// The input as indented JSON.
    pub input: String,
    pub output: Option<String>,
    pub is_error: bool,
}

impl Tool {
    /// `ok`, `error`, or `no result` (the call was made; nothing came back in the transcript).
    pub fn status(&self) -> &'static str {
        match (&self.output, self.is_error) {
            (_, true) => "error",
            (Some(_), false) => "ok",
            (None, false) => "no result",
        }
    }
}

/// Longest one-line target shown for a tool call.
const TARGET_CHARS: usize = 120;

/// The input keys that name what a tool worked on, the most telling first.
const TARGET_KEYS: &[&str] = &[
    "file_path",
    "path",
    "filePath",
    "notebook_path",
    "command",
    "cmd",
    "pattern",
    "query",
    "url",
    "description",
    "prompt",
];

/// What a tool call worked on, in one line.
fn target_of(input: Option<&Value>) -> String {
    let Some(Value::Object(o)) = input else {
        return String::new();
    };
    let found = TARGET_KEYS
        .iter()
        .find_map(|k| match o.get(*k) {
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(Value::Array(a)) if !a.is_empty() => Some(
                a.iter()
                    .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => None,
        })
        .unwrap_or_default();
    one_line(&found, TARGET_CHARS)
}

/// The first line of `s`, cut at `max` characters (with an ellipsis when cut).
pub fn one_line(s: &str, max: usize) -> String {
    let line = s.trim().lines().next().unwrap_or("").trim();
    let more = s.trim().lines().nth(1).is_some();
    let mut out: String = line.chars().take(max).collect();
    if more || line.chars().count() > max {
        out.push('…');
    }
    out
}

impl SessionView {
    /// Builds the view from a session's messages (in conversation order), its usage per talk
    /// and its compact layers ([`crate::compact::queue::summary_view`]).
    pub fn new(
        session: SessionRow,
        usage: Usage,
        messages: Vec<MessageRow>,
        talk_usage: BTreeMap<i64, Usage>,
        layers: &SummaryView,
    ) -> SessionView {
        let l2: HashMap<i64, String> = layers
            .talks
            .iter()
            .map(|t| (t.talk.prompt_number, t.talk.summary.clone()))
            .collect();
        let summary = layers.session_summary.as_ref().map(|s| s.summary.clone());
        let observations = layers.observations.clone();

        // Results by the call they answer; a result with no call in the session stands alone.
        let call_ids: std::collections::HashSet<&str> = messages
            .iter()
            .filter(|m| m.kind == "tool_call")
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        let mut results: HashMap<String, (String, bool)> = HashMap::new();
        for m in messages.iter().filter(|m| m.kind == "tool_result") {
            if let Some(id) = m.tool_call_id.as_deref().filter(|id| call_ids.contains(id)) {
                let e = results.entry(id.to_owned()).or_default();
                if !e.0.is_empty() {
                    e.0.push('\n');
                }
                e.0.push_str(&m.text);
                e.1 |= m.is_error;
            }
        }

        let mut preamble = Vec::new();
        let mut talks: Vec<Talk> = Vec::new();
        for m in &messages {
            if m.duplicate {
                continue;
            }
            if m.kind == "user_prompt" && !m.sidechain && m.prompt_number > 0 {
                // A prompt written after a rewind takes the rewound one's number: a talk of its
                // own all the same.
                let is_new = talks
                    .last()
                    .is_none_or(|t| t.number != m.prompt_number || t.active != m.active);
                if is_new {
                    talks.push(Talk {
                        number: m.prompt_number,
                        prompt: m.text.clone(),
                        time: m.timestamp.clone(),
                        active: m.active,
                        summary: l2.get(&m.prompt_number).cloned(),
                        entries: Vec::new(),
                        tokens: talk_usage.get(&m.prompt_number).cloned(),
                    });
                    continue;
                }
            }
            let entry = match m.kind.as_str() {
                "tool_result" => match m.tool_call_id.as_deref() {
                    Some(id) if call_ids.contains(id) => continue,
                    _ => Entry::Tool(Tool {
                        name: "result".into(),
                        target: String::new(),
                        input: String::new(),
                        output: Some(m.text.clone()),
                        is_error: m.is_error,
                    }),
                },
                "tool_call" => {
                    let result = m
                        .tool_call_id
                        .as_deref()
                        .and_then(|id| results.get(id).cloned());
                    Entry::Tool(Tool {
                        name: m.tool_name.clone().unwrap_or_else(|| "tool".into()),
                        target: target_of(m.tool_input.as_ref()),
                        input: m
                            .tool_input
                            .as_ref()
                            .map(|v| serde_json::to_string_pretty(v).unwrap_or_default())
                            .unwrap_or_default(),
                        is_error: result.as_ref().is_some_and(|r| r.1) || m.is_error,
                        output: result.map(|r| r.0),
                    })
                }
                "assistant_text" => Entry::Text {
                    text: m.text.clone(),
                    model: m.model.clone(),
                },
                "thinking" => Entry::Thinking {
                    text: m.text.clone(),
                },
                "compaction_summary" => Entry::Compaction {
                    text: m.text.clone(),
                },
                "user_prompt" => Entry::User {
                    text: m.text.clone(),
                },
                _ => Entry::Meta {
                    text: m.text.clone(),
                },
            };
            let target = match talks.last_mut() {
                Some(t) if m.prompt_number >= t.number => &mut t.entries,
                _ => &mut preamble,
            };
            push(target, m, entry);
        }
        SessionView {
            session,
            usage,
            summary,
            preamble,
            talks,
            observations,
        }
    }

    /// The observations of talk `n`.
    pub fn observations_of(&self, n: i64) -> impl Iterator<Item = &Observation> {
        self.observations
            .iter()
            .filter(move |o| o.prompt_number == n)
            .map(|o| &o.observation)
    }

    /// The session's span, size and tokens, as lines of its header.
    pub fn span_and_size(&self) -> Vec<String> {
        let s = &self.session;
        let mut out = Vec::new();
        if let (Some(a), Some(b)) = (&s.started_at, &s.updated_at) {
            out.push(format!("{a} → {b}"));
        }
        out.push(format!("{} prompts, {} messages", s.prompts, s.messages));
        let u = &self.usage;
        let thousands = super::html::thousands;
        out.push(format!(
            "{} tokens in, {} out",
            thousands(u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens),
            thousands(u.output_tokens)
        ));
        out
    }

    /// The session's title: its own, else its first prompt, else its id.
    pub fn title(&self) -> String {
        self.session
            .title
            .clone()
            .filter(|t| !t.trim().is_empty())
            .or_else(|| self.talks.first().map(|t| one_line(&t.prompt, 100)))
            .unwrap_or_else(|| self.session.session_id.clone())
    }
}

/// Appends `entry` to `entries`, inside the sub-agent block of `m`'s sub-agent when it ran in
/// one (consecutive messages of one sub-agent share a block).
fn push(entries: &mut Vec<Entry>, m: &MessageRow, entry: Entry) {
    let Some(agent) = m.agent_id.clone().filter(|_| m.sidechain) else {
        entries.push(entry);
        return;
    };
    if let Some(Entry::SubAgent { agent: a, entries }) = entries.last_mut()
        && *a == agent
    {
        entries.push(entry);
        return;
    }
    entries.push(Entry::SubAgent {
        agent,
        entries: vec![entry],
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_what_a_tool_worked_on() {
        let t = |v: Value| target_of(Some(&v));
        assert_eq!(
            t(serde_json::json!({"file_path": "/a/b.rs", "old": "x"})),
            "/a/b.rs"
        );
        assert_eq!(
            t(serde_json::json!({"command": "cargo test\n--all"})),
            "cargo test…"
        );
        assert_eq!(
            t(serde_json::json!({"command": ["git", "status"]})),
            "git status"
        );
        assert_eq!(t(serde_json::json!({"x": 1})), "");
        assert_eq!(one_line(&"é".repeat(200), 3), "ééé…");
    }
}
