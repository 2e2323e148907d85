//! Services of the sidecar, shared by `ferrogate serve` (in process) and the standalone
//! `ferrogate sidecar`: the configuration snapshot and the store it is built from, the
//! filter-facing API (snapshot, usage ingestion) and the admin API (usage queries, problems,
//! health, metrics), plus the token checks that guard them.

pub mod admin;
pub mod auth;
pub mod crud;
pub mod filter_api;
pub mod kv;
pub mod limits;
pub mod openapi;
pub mod pg;
pub mod secrets;
pub mod snapshot;
pub mod source;
pub mod store;
pub mod targets;
pub mod usage;
