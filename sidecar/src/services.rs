//! Services of the sidecar, shared by `ferrogate serve` (in process) and the standalone
//! sidecar: the filter-facing API (usage ingestion) and the admin API (usage queries,
//! health, metrics), plus the token checks that guard them.

pub mod admin;
pub mod auth;
pub mod filter_api;
pub mod usage;
