//! One module per agent format.

pub mod claude;
pub mod codex;
pub mod gemini;
