//! The unified, lossless message model every adapter produces.
//!
//! Everything downstream of an adapter (store, search, compaction) sees only these types, so a
//! new agent format is one new adapter and nothing else.

use serde::{Deserialize, Serialize};

/// Who produced a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "system" => Role::System,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// What a message is. `Meta` covers every record that is not conversation content (harness
/// events, snapshots, titles, injected context, unknown record kinds): kept, raw JSON and all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageKind {
    UserPrompt,
    AssistantText,
    Thinking,
    ToolCall,
    ToolResult,
    CompactionSummary,
    Meta,
}

impl MessageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::UserPrompt => "user_prompt",
            MessageKind::AssistantText => "assistant_text",
            MessageKind::Thinking => "thinking",
            MessageKind::ToolCall => "tool_call",
            MessageKind::ToolResult => "tool_result",
            MessageKind::CompactionSummary => "compaction_summary",
            MessageKind::Meta => "meta",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "user_prompt" => MessageKind::UserPrompt,
            "assistant_text" => MessageKind::AssistantText,
            "thinking" => MessageKind::Thinking,
            "tool_call" => MessageKind::ToolCall,
            "tool_result" => MessageKind::ToolResult,
            "compaction_summary" => MessageKind::CompactionSummary,
            "meta" => MessageKind::Meta,
            _ => return None,
        })
    }
}

/// A tool invocation made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub name: String,
    /// The input as JSON. Inputs the agent wrote as a string (Codex `arguments`, free-form
    /// `apply_patch` bodies) are parsed when they are JSON and kept as a JSON string otherwise.
    pub input: serde_json::Value,
    pub call_id: Option<String>,
}

/// The result of a tool invocation. The output text itself is the message's `text`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: Option<String>,
    pub is_error: bool,
}

/// Token usage as the agent reported it. Agents repeat or accumulate usage in different ways,
/// so every usage carries a `usage_key`: the true total of a session is, per key, the maximum of
/// each field, summed over keys (see [`aggregate_usage`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_creation_tokens: u64,
    pub reasoning_tokens: u64,
}

impl Usage {
    fn max(self, o: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.max(o.input_tokens),
            output_tokens: self.output_tokens.max(o.output_tokens),
            cache_read_tokens: self.cache_read_tokens.max(o.cache_read_tokens),
            cache_creation_tokens: self.cache_creation_tokens.max(o.cache_creation_tokens),
            reasoning_tokens: self.reasoning_tokens.max(o.reasoning_tokens),
        }
    }

    /// Saturating: counts come from the transcript, which may hold any number.
    fn add(self, o: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.saturating_add(o.input_tokens),
            output_tokens: self.output_tokens.saturating_add(o.output_tokens),
            cache_read_tokens: self.cache_read_tokens.saturating_add(o.cache_read_tokens),
            cache_creation_tokens: self
                .cache_creation_tokens
                .saturating_add(o.cache_creation_tokens),
            reasoning_tokens: self.reasoning_tokens.saturating_add(o.reasoning_tokens),
        }
    }
}

/// Message flags that are attributes, never reasons to renumber or drop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flags {
    /// Written by a sub-agent (Claude sidechain / sub-agent file).
    pub sidechain: bool,
    /// Copied from a parent thread (Codex fork prefix): the parent owns it.
    pub inherited: bool,
    /// A second copy of content another message of the session already holds (Codex echoes
    /// every prompt and answer as an event). Kept for losslessness, not searched.
    pub duplicate: bool,
}

/// One unified message. A transcript record (line) yields one or more of these: one per content
/// block. The first message of a record carries the record's raw bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParsedMessage {
    pub agent: &'static str,
    pub session_id: String,
    /// Stable within the session: the source's uuid/id, or derived from the file and position.
    pub message_id: String,
    pub parent_id: Option<String>,
    pub role: Role,
    pub kind: MessageKind,
    /// The Nth real user prompt of the session this message belongs to; 0 before the first.
    pub prompt_number: u32,
    /// Milliseconds since the Unix epoch, UTC.
    pub timestamp: Option<i64>,
    pub cwd: Option<String>,
    pub git_branch: Option<String>,
    pub model: Option<String>,
    pub text: String,
    pub tool_call: Option<ToolCall>,
    pub tool_result: Option<ToolResult>,
    pub usage: Option<Usage>,
    pub usage_key: Option<String>,
    /// What the agent itself says the call cost, in US dollars (for a cumulative usage key,
    /// the total so far), where it records one.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// Sub-agent id (Claude `agentId`), when the message comes from a sub-agent.
    pub agent_id: Option<String>,
    pub flags: Flags,
    /// 1-based line of the record in its source file (0 for whole-document formats).
    pub line: u64,
    /// Order of the message within its source: records in file order, blocks in record order.
    pub seq: u64,
    /// The original record, byte for byte (may be invalid UTF-8); only on a record's first
    /// message.
    #[serde(skip)]
    pub raw: Option<Vec<u8>>,
}

/// Sums usage the way each agent means it: per `usage_key` the maximum of every field
/// (Claude repeats one API message's usage on several lines, Codex reports cumulative totals,
/// Gemini re-appends a message with its final counts), then the keys added up.
pub fn aggregate_usage<'a>(messages: impl IntoIterator<Item = &'a ParsedMessage>) -> Usage {
    let mut per_key: std::collections::HashMap<&str, Usage> = Default::default();
    for m in messages {
        if let (Some(u), Some(k)) = (m.usage, m.usage_key.as_deref()) {
            let e = per_key.entry(k).or_default();
            *e = e.max(u);
        }
    }
    per_key.into_values().fold(Usage::default(), Usage::add)
}

/// Where a session title came from; a higher rank wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TitleSource {
    FirstPrompt = 1,
    Summary = 2,
    Generated = 3,
    Custom = 4,
}

/// What a parse learned about the session(s) of a file. Fields are `None` when this chunk did
/// not say; the store merges them into what it already knows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionInfo {
    pub session_id: String,
    pub project_path: Option<String>,
    /// Gemini's sha256 of the project root, for resolving hash-named project folders.
    pub project_hash: Option<String>,
    pub git_branch: Option<String>,
    pub model: Option<String>,
    pub title: Option<(TitleSource, String)>,
    /// The session this one was spawned from (sub-agent thread) or forked from.
    pub parent_session_id: Option<String>,
    pub is_subagent: bool,
    /// This file is the session's own transcript where other files report on the session too
    /// (a Claude `<session>.jsonl` beside its sub-agents' files; Cursor's global database,
    /// whose composers each workspace's database lists): it names the session's source file
    /// even when another file named it first. Any other file names it only while no path is
    /// stored.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_file: bool,
    pub started_at: Option<i64>,
    pub updated_at: Option<i64>,
}

/// A change to messages emitted earlier (by this or a previous parse of the file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Edit {
    /// These messages left the conversation (Gemini `$rewindTo`, a `$set.messages` checkpoint
    /// that dropped them). They stay in the archive, marked inactive.
    Deactivate {
        session_id: String,
        message_ids: Vec<String>,
    },
    /// The talks of these prompts were undone (Codex `thread_rolled_back`).
    DeactivateTalks {
        session_id: String,
        from_prompt: u32,
        to_prompt: u32,
    },
}

/// A line (or document) that could not be used as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParseIssue {
    pub line: u64,
    pub byte_offset: u64,
    pub reason: String,
    /// `true` when the record was still stored (e.g. invalid UTF-8 decoded with U+FFFD);
    /// `false` when it was skipped.
    pub kept: bool,
}

/// Where parsing of a file stands. Persisted by the store together with the messages it
/// produced, in one transaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cursor {
    /// Byte offset just after the last complete line consumed (of the decompressed stream for
    /// `.zst` files; the whole size for whole-document formats).
    pub offset: u64,
    /// Lines consumed so far.
    pub line: u64,
    /// Fingerprint of the file's head at the time of the cursor, to detect rewrites.
    pub head: Option<String>,
    /// Adapter state needed to continue (prompt counter, ids seen, ...).
    #[serde(default)]
    pub state: serde_json::Value,
    /// The last line consumed was a complete record whose newline had not been written yet:
    /// a newline at `offset` ends that line and is not a line of its own.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unterminated: bool,
}

/// The result of parsing one chunk of a file.
#[derive(Debug, Clone, Default)]
pub struct ParseOutput {
    pub messages: Vec<ParsedMessage>,
    pub sessions: Vec<SessionInfo>,
    pub edits: Vec<Edit>,
    pub issues: Vec<ParseIssue>,
    pub cursor: Cursor,
    /// Bytes of input consumed by this chunk.
    pub bytes: u64,
    /// `false` when the file has more complete lines after this chunk.
    pub at_end: bool,
    /// An unterminated last line is waiting to be completed.
    pub pending_tail: bool,
}
