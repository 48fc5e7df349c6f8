//! Memex: a lossless, searchable archive of AI coding-agent conversations.
//!
//! Modules, one per layer: [`store`] (SQLite L0 archive, ingest, FTS), [`search`] (the one
//! search function every interface calls), [`watch`] (file-system events), [`service`] (the
//! `memex serve` components), [`api`] (HTTP), [`inject`] (Claude Code hooks), [`config`]
//! (settings resolution), [`logging`] and [`cli`] (the `memex` commands). Parsing of transcript
//! formats lives in the `ai-cli-session-collector` crate; this crate only ever sees its unified
//! messages.

pub mod api;
pub mod cli;
pub mod client;
pub mod compact;
pub mod config;
pub mod embed;
pub mod inject;
pub mod layer;
#[cfg(test)]
mod layering;
pub mod llm;
pub mod logging;
pub mod mcp;
pub mod memory;
pub mod redact;
pub mod search;
pub mod service;
pub mod state;
pub mod store;
pub mod vector;
pub mod watch;
