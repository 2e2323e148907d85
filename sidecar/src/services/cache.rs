//! The response cache's shared store and its purges, in the sidecar.
//!
//! The filter computes each request's cache key (the hex SHA-256 "digest") and keeps entries
//! in the proxy's own memory (`cache_store.kind: memory`) or asks this service to keep them in
//! Redis (`kind: redis`), shared by every replica. Entry bytes are opaque here.
//!
//! Filter-facing routes (sidecar listener, internal bearer token):
//!
//! - `GET /v1/cache/entries/{digest}` → `200 application/octet-stream` with the stored bytes,
//!   or `404`: absent, no Redis configured, or Redis unreachable (an outage is a miss, never a
//!   5xx). A digest that is not 64 lower-case hex digits is `400`.
//! - `PUT /v1/cache/entries/{digest}` with the entry bytes and the headers
//!   `x-ferrogate-cache-ttl: <secs>` (1 to 2,592,000), `x-ferrogate-cache-model: <public model>`
//!   and `x-ferrogate-cache-scope: key:<name> | group:<name> | global` → `204`; `413` when the
//!   body is over the served `cache_store.max_entry_bytes`; `503` when Redis cannot take it
//!   (the filter goes on without storing); `400` for a bad header.
//!
//! Redis layout (the URL from the variable the served `redis.url_env` names, as the limits
//! ledger reads it; names in hex so `:` or `*` in a name cannot collide or match a pattern):
//!
//! - `ferrogate:cache:e:<digest>`: the entry bytes, `SET … EX <ttl>`.
//! - `ferrogate:cache:m:<hex of model>` and `ferrogate:cache:s:<hex of scope>`: the digests of a
//!   model's and a scope's entries, for purges. Sorted sets scored by the entry's expiry (Unix
//!   ms, Redis's clock), pruned of expired members at every store so they hold what is live,
//!   not every digest ever stored; each lives at least as long as its newest entry.
//! - `ferrogate:cache:purging:<random>`: an index being purged (moved aside at once so stores
//!   made meanwhile start a new one; expires in an hour if the purge is interrupted).
//!
//! Every Redis call is bounded (100 ms to connect, 100 ms per command) and a failure opens a
//! breaker for a second: lookups answer 404 and stores 503 at once, without touching Redis
//! ([`redis`]). Admin routes, purges and their record in the snapshot: [`admin`].

use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ferrogate_core::config::Config;
use tokio::sync::watch;

use super::auth::{bearer_ok, unauthorized};
use super::snapshot::Snapshots;
use super::source::Database;

pub mod admin;
pub mod redis;

use self::redis::{RedisCache, RedisError};

/// Key prefix of everything the cache keeps in Redis.
pub const PREFIX: &str = "ferrogate:cache:";
/// Longest TTL a store may ask for (30 days, as `cache.ttl_secs`).
pub const MAX_TTL_SECS: u64 = 30 * 24 * 3600;
/// The store's headers, as the filter sends them.
pub use ferrogate_core::cache::wire::{MODEL_HEADER, SCOPE_HEADER, TTL_HEADER};
/// The body bound of the store route: the largest `cache_store.max_entry_bytes` allowed (16 MiB)
/// plus one byte, so an entry over the served bound reaches the handler and is answered 413.
const BODY_LIMIT: usize = 16 * 1024 * 1024 + 1;

/// Drops the semantic store's entries of these scopes (empty: all) and model (`None`: all);
/// returns how many went. Wired to the semantic store by whoever starts both.
pub type SemanticPurge = Arc<dyn Fn(&[String], Option<&str>) -> usize + Send + Sync>;

/// The response cache's state, shared by the filter-facing and the admin routes.
pub struct Cache {
    /// The configuration served (store kind, bounds, Redis variable, names) and the purges.
    pub snapshots: Arc<Snapshots>,
    /// Entries and indexes in Redis.
    pub redis: RedisCache,
    /// The semantic store's purge, once wired ([`Cache::set_semantic_purge`]).
    semantic: RwLock<Option<SemanticPurge>>,
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache").field("redis", &self.redis).finish_non_exhaustive()
    }
}

impl Cache {
    /// A cache serving `snapshots`' configuration, its Redis keys under [`PREFIX`].
    pub fn new(snapshots: Arc<Snapshots>) -> Cache {
        Cache::with_prefix(snapshots, PREFIX)
    }

    /// The same with another key prefix (tests sharing one Redis keep apart this way).
    pub fn with_prefix(snapshots: Arc<Snapshots>, prefix: &str) -> Cache {
        Cache { snapshots, redis: RedisCache::new(prefix), semantic: RwLock::new(None) }
    }

    /// Wires purges to the semantic store (`SemanticStore::purge`).
    pub fn set_semantic_purge(&self, purge: SemanticPurge) {
        *self.semantic.write().unwrap_or_else(PoisonError::into_inner) = Some(purge);
    }

    /// Purges the semantic store; `None` when none is wired.
    pub fn purge_semantic(&self, scopes: &[String], model: Option<&str>) -> Option<usize> {
        let hook = self.semantic.read().unwrap_or_else(PoisonError::into_inner).clone();
        hook.map(|purge| purge(scopes, model))
    }
}

/// The Redis URL of `config`: the value of the variable its `redis.url_env` names.
///
/// # Errors
/// No `redis:` block, or its variable is unset or empty.
pub fn redis_url(config: &Config) -> Result<String, RedisError> {
    let var = config.redis_url_env.as_deref().ok_or_else(|| RedisError::NotConfigured("no redis: block".into()))?;
    std::env::var(var)
        .ok()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| RedisError::NotConfigured(format!("{var} is not set")))
}

/// Starts the cache service: its state, and (with the Postgres store) the task that keeps the
/// purges in step with the database's until `shutdown` ([`admin::follow_purges`]).
pub fn start(snapshots: Arc<Snapshots>, db: Arc<OnceLock<Database>>, shutdown: watch::Receiver<bool>) -> Arc<Cache> {
    tokio::spawn(admin::follow_purges(snapshots.clone(), db, shutdown));
    Arc::new(Cache::new(snapshots))
}

/// State of the filter-facing cache routes.
#[derive(Clone, Debug)]
pub struct CacheApi {
    /// The cache.
    pub cache: Arc<Cache>,
    /// The internal token filters must present.
    pub internal_token: Option<String>,
}

/// The filter-facing routes: `GET`/`PUT /v1/cache/entries/{digest}`.
pub fn router(api: CacheApi) -> Router {
    Router::new()
        .route("/v1/cache/entries/{digest}", get(lookup).put(store).layer(DefaultBodyLimit::max(BODY_LIMIT)))
        .with_state(api)
}

/// Whether `digest` is 64 lower-case hex digits.
pub fn is_digest(digest: &str) -> bool {
    digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(serde_json::json!({"error": message.into()}))).into_response()
}

async fn lookup(State(api): State<CacheApi>, headers: HeaderMap, Path(digest): Path<String>) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    if !is_digest(&digest) {
        return error(StatusCode::BAD_REQUEST, "the digest must be 64 lower-case hex digits");
    }
    let Some(url) = api.cache.snapshots.current().and_then(|s| redis_url(&s.config).ok()) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    match api.cache.redis.get(&url, &digest).await {
        Ok(Some(bytes)) => (StatusCode::OK, [(CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(e) => {
            tracing::debug!(error = %e, "response cache lookup: a miss");
            StatusCode::NOT_FOUND.into_response()
        }
    }
}

/// What a store call's headers say.
#[derive(Debug, PartialEq, Eq)]
pub struct StoreHeaders {
    /// Lifetime, seconds.
    pub ttl_secs: u64,
    /// The resolved public model.
    pub model: String,
    /// `key:<name>`, `group:<name>` or `global`.
    pub scope: String,
}

/// Reads and checks a store call's headers.
///
/// # Errors
/// A header that is missing or malformed, with why.
pub fn store_headers(headers: &HeaderMap) -> Result<StoreHeaders, String> {
    let text = |name: &str| {
        headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).ok_or_else(|| format!("{name} is missing"))
    };
    let ttl_secs = text(TTL_HEADER)?
        .parse::<u64>()
        .ok()
        .filter(|t| (1..=MAX_TTL_SECS).contains(t))
        .ok_or_else(|| format!("{TTL_HEADER} must be seconds, 1 to {MAX_TTL_SECS}"))?;
    let model = text(MODEL_HEADER)?;
    if model.is_empty() {
        return Err(format!("{MODEL_HEADER} is empty"));
    }
    let scope = text(SCOPE_HEADER)?;
    if !is_scope(scope) {
        return Err(format!("{SCOPE_HEADER} must be key:<name>, group:<name> or global"));
    }
    Ok(StoreHeaders { ttl_secs, model: model.to_string(), scope: scope.to_string() })
}

/// `key:<name>`, `group:<name>` (a name that is not empty) or `global`.
pub fn is_scope(scope: &str) -> bool {
    let named = |prefix: &str| scope.strip_prefix(prefix).is_some_and(|name| !name.is_empty());
    scope == "global" || named("key:") || named("group:")
}

async fn store(State(api): State<CacheApi>, headers: HeaderMap, Path(digest): Path<String>, body: Bytes) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    if !is_digest(&digest) {
        return error(StatusCode::BAD_REQUEST, "the digest must be 64 lower-case hex digits");
    }
    let wanted = match store_headers(&headers) {
        Ok(h) => h,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let Some(served) = api.cache.snapshots.current() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no configuration snapshot yet");
    };
    let bound = served.config.cache.max_entry_bytes;
    if body.len() > usize::try_from(bound).unwrap_or(usize::MAX) {
        return error(StatusCode::PAYLOAD_TOO_LARGE, format!("entries are at most {bound} bytes"));
    }
    let url = match redis_url(&served.config) {
        Ok(url) => url,
        Err(e) => return error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    let names = (wanted.model.as_str(), wanted.scope.as_str());
    match api.cache.redis.put(&url, &digest, &body, wanted.ttl_secs, names).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

#[cfg(test)]
mod tests;
