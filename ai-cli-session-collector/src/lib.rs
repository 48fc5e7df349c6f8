//! Lossless parsers for AI coding-agent transcripts: Claude Code, Codex CLI, Gemini CLI and the
//! other agents in `adapters/`, whether they append lines, rewrite documents or write SQLite.
//!
//! Each agent format is a [`ConversationAdapter`]; the [`AdapterRegistry`] holds them all.
//! Adapters turn a transcript file, read incrementally from a [`Cursor`], into unified
//! [`ParsedMessage`]s. This crate is pure and synchronous: no async runtime, no database, no
//! network, so it can be tested on fixtures and fuzzed on arbitrary bytes.

pub mod adapter;
pub mod adapters;
pub(crate) mod document;
mod loose;
pub mod model;
pub mod reader;
pub mod sqlite;
pub mod text;

pub use adapter::{AdapterRegistry, ConversationAdapter, Env, ParseError, SourceKind};
pub use model::{
    Cursor, Edit, Flags, MessageKind, ParseIssue, ParseOutput, ParsedMessage, Role, SessionInfo,
    TitleSource, ToolCall, ToolResult, Usage, aggregate_usage,
};

/// Parses a whole file from the start, chunk by chunk, and merges the chunks: what a one-shot
/// reader (tests, tools) wants. The service parses incrementally instead.
pub fn parse_file(
    adapter: &dyn ConversationAdapter,
    root: &std::path::Path,
    path: &std::path::Path,
) -> Result<ParseOutput, ParseError> {
    let mut all = ParseOutput::default();
    let mut cursor = Cursor::default();
    loop {
        let out = adapter.parse(root, path, &cursor, 4 << 20)?;
        let progressed = out.cursor.offset != cursor.offset;
        all.messages.extend(out.messages);
        all.sessions.extend(out.sessions);
        all.edits.extend(out.edits);
        all.issues.extend(out.issues);
        all.bytes += out.bytes;
        all.pending_tail = out.pending_tail;
        cursor = out.cursor;
        if out.at_end || !progressed {
            break;
        }
    }
    all.cursor = cursor;
    all.at_end = true;
    Ok(all)
}
