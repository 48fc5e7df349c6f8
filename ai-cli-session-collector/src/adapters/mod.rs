//! One module per agent format.

pub mod aider;
pub mod amp;
pub mod antigravity;
pub mod claude;
pub mod cline;
pub mod codex;
pub mod copilot;
pub mod crush;
pub mod cursor;
pub mod cursor_ide;
pub mod gemini;
pub mod goose;
pub mod kiro;
pub mod opencode;
pub mod pi;
pub mod qwen;
pub mod roo;
