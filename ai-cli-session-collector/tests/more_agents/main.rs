//! Every sample file in `../shared/fixtures/more-agents` imports with the values its SOURCES.md
//! entry gives, read in place. One module per agent.

use std::path::{Path, PathBuf};

use ai_cli_session_collector::{
    AdapterRegistry, MessageKind, ParseOutput, ParsedMessage, parse_file,
};

mod aider;
mod amp;
mod antigravity;
mod cline;
mod copilot;
mod crush;
mod cursor;
mod cursor_ide;
mod goose;
mod kiro;
mod opencode;
mod pi;
mod qwen;
mod roo;

/// The more-agents fixtures folder (`MEMEX_MORE_FIXTURES` overrides it).
pub fn more() -> PathBuf {
    std::env::var_os("MEMEX_MORE_FIXTURES").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/more-agents"),
        PathBuf::from,
    )
}

/// Parses `file` (relative to `root`, itself relative to the fixtures folder) with `agent`.
pub fn parse(agent: &str, root: &str, file: &str) -> ParseOutput {
    let reg = AdapterRegistry::new();
    let a = reg
        .get(agent)
        .unwrap_or_else(|| panic!("no adapter {agent}"));
    let root = more().join(root);
    let path = root.join(file);
    assert!(path.exists(), "missing fixture {}", path.display());
    assert!(
        a.is_transcript(&root, &path),
        "{agent} does not read {}",
        path.display()
    );
    parse_file(a, &root, &path).unwrap()
}

/// Every file `agent` discovers under `root`, parsed.
pub fn parse_all(agent: &str, root: &str) -> Vec<(PathBuf, ParseOutput)> {
    let reg = AdapterRegistry::new();
    let a = reg.get(agent).unwrap();
    let root = more().join(root);
    a.discover(&root)
        .into_iter()
        .map(|p| {
            let out = parse_file(a, &root, &p).unwrap();
            (p, out)
        })
        .collect()
}

/// The messages of one kind.
pub fn of_kind(out: &ParseOutput, kind: MessageKind) -> Vec<&ParsedMessage> {
    out.messages.iter().filter(|m| m.kind == kind).collect()
}

/// Real prompts (distinct prompt numbers of user prompts), in order.
pub fn prompt_texts(out: &ParseOutput) -> Vec<String> {
    of_kind(out, MessageKind::UserPrompt)
        .into_iter()
        .map(|m| m.text.clone())
        .collect()
}

/// Whether any message of `kind` holds `word`.
pub fn has_word(out: &ParseOutput, kind: MessageKind, word: &str) -> bool {
    out.messages
        .iter()
        .any(|m| m.kind == kind && m.text.contains(word))
}
