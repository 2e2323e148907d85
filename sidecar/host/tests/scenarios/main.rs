//! Scenario tests: the real `ferrogate_testfilter.wasm` (proxy-wasm 0.2.5 guest) driven
//! through the host's public API. Each test builds its own Runtime, so they run in parallel.

// Helper functions outside #[test] bodies are test code too; panicking there is the point.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod balancing;
mod bedrock;
mod body;
mod callout;
mod common;
mod data_path;
mod failover;
mod failure;
mod ferrogate_filter;
mod limits;
mod local_reply;
mod properties;
mod shared_state;
mod snapshot_feed;
mod stream_end;
mod trace_context;
mod translation;
mod translation_gemini;
