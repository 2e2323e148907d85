//! The names the filter and the sidecar share for cache calls: the sidecar's filter-facing
//! routes and the headers on them, defined once so the two sides cannot drift apart.

/// The answer header naming the outcome (`hit`, `miss`, `bypass`); also the request header
/// that asks for a bypass.
pub const HEADER: &str = "x-ferrogate-cache";
/// An entry's lifetime, seconds (on stores).
pub const TTL_HEADER: &str = "x-ferrogate-cache-ttl";
/// The resolved public model name an entry answers (on exact stores).
pub const MODEL_HEADER: &str = "x-ferrogate-cache-model";
/// Who shares an entry, `key:<name>`, `group:<name>` or `global` (on exact stores).
pub const SCOPE_HEADER: &str = "x-ferrogate-cache-scope";
/// The semantic store's ticket for the embedding a miss computed.
pub const TICKET_HEADER: &str = "x-ferrogate-cache-ticket";
/// The similarity of a semantic hit, 4 decimals.
pub const SIMILARITY_HEADER: &str = "x-ferrogate-cache-similarity";
/// Exact entries in Redis, by digest (`GET`/`PUT <path><digest>`).
pub const ENTRIES_PATH: &str = "/v1/cache/entries/";
/// The semantic lookup (`POST`).
pub const SEMANTIC_LOOKUP_PATH: &str = "/v1/cache/semantic/lookup";
/// Semantic entries, by ticket (`PUT <path><ticket>`).
pub const SEMANTIC_PATH: &str = "/v1/cache/semantic/";
