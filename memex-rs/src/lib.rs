//! Memex: a lossless, searchable archive of AI coding-agent conversations.
//!
//! Modules, one per layer: [`store`] (SQLite L0 archive, ingest, FTS), [`search`] (the one
//! search function every interface calls), [`config`] (settings resolution) and [`cli`] (the
//! `memex` commands). Parsing of transcript formats lives in the `ai-cli-session-collector`
//! crate; this crate only ever sees its unified messages.

pub mod cli;
pub mod config;
pub mod search;
pub mod store;
