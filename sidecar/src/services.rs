//! Services of the sidecar, shared by `ferrogate serve` (in process) and the standalone
//! `ferrogate sidecar`: the configuration snapshot and the store it is built from, the
//! filter-facing API (snapshot, usage ingestion) and the admin API (usage queries, problems,
//! health, metrics), plus the token checks that guard them.

pub mod admin;
pub mod analytics;
pub mod auth;
pub mod cache;
pub mod clouds;
pub mod crud;
pub mod dns;
pub mod filter_api;
pub mod identity;
pub mod incidents;
pub mod kube;
pub mod kv;
pub mod limits;
pub mod mcp_federation;
pub mod mcp_oauth;
pub mod metrics;
pub mod openapi;
pub mod pg;
pub mod responses;
pub mod secrets;
pub mod semantic;
pub mod snapshot;
pub mod source;
pub mod store;
pub mod targets;
pub mod ui;
pub mod usage;

/// Unix milliseconds now (0 before 1970, saturating far ahead): the clock the services stamp
/// and compare with.
pub(crate) fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
