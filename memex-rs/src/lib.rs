//! Memex: a lossless, searchable archive of AI coding-agent conversations.
//!
//! From the bottom up: [`config`] (settings resolution), [`layer`] (the archive's layers),
//! [`redact`] (secrets out of everything stored or sent), [`store`] (the SQLite archive:
//! ingest, FTS, reads, forgetting), [`llm`] and [`embed`] (providers and the embedding model),
//! [`vector`] (LanceDB and its indexer), [`search`] (retrieval: one search for every surface,
//! and the nearest-neighbour question injection asks), [`compact`] (the L1/L2/L3 layers and
//! their queue), [`watch`] and [`state`] (file events; what the service's components share),
//! [`owner`] (who the service answers: its socket, secret and proof), [`api`] (HTTP),
//! [`client`] (its client), [`input`] (what is wrong with a request from outside),
//! [`inject`] (Claude Code hooks), [`mcp`],
//! [`service`] (`memex serve`) and [`cli`] (the `memex` commands). ARCHITECTURE.md draws the
//! arrows; `layering.rs` checks that they never form a circle. Parsing of transcript formats
//! lives in the `ai-cli-session-collector` crate; this crate only ever sees its unified
//! messages.

pub mod api;
pub mod cli;
pub mod client;
pub mod compact;
pub mod config;
pub mod embed;
pub mod export;
pub mod inject;
pub mod input;
#[cfg(test)]
mod layering;
pub mod llm;
pub mod logging;
pub mod mcp;
pub use memex_embed::memory;
pub use memex_store::{self as store, layer, redact};
pub mod owner;
pub mod search;
pub mod service;
pub mod state;
pub mod team;
pub mod usage;
pub mod vector;
pub mod watch;
