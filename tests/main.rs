//! Memex's integration tests, in one test binary (each binary links LanceDB and the embedding
//! model, so one binary instead of nine saves most of the test build's link time). The modules
//! drive the real `memex` binary in a temporary HOME laid out like a real machine ([`common`]),
//! the providers against local servers, and the MCP server through a real client.

mod common;

mod agents;
mod bounds;
mod compact;
mod e2e;
mod export;
mod forget;
mod inject;
mod llm;
mod mcp;
mod owner;
mod release;
mod secrets;
mod security;
mod serve;
mod sync;
mod team;
mod usage;
mod vectors;
mod web;
