//! The response cache in the admin API, and purges.
//!
//! - `POST /api/v1/cache/purge` with exactly one of `{"key": name}`, `{"group": name}`,
//!   `{"model": name}` or `{"all": true}` (anything else is 400; a name the served
//!   configuration does not have is 404). The purge is recorded ([`Purge`]: the scopes and
//!   model it covers, now) and sent to every filter with the snapshot (in-proxy stores drop or
//!   ignore what it covers); the semantic store is purged; with `cache_store.kind: redis`, the
//!   entries are deleted from Redis: a model's index, the key's scope, the group's scope and
//!   each of its keys' scopes, or every `ferrogate:cache:*` key. Answers `{"purged": <entries
//!   deleted in Redis, or null with the memory store>, "semantic": <entries dropped, or null>,
//!   "purge": {...}}`; 503 (the purge still recorded) when Redis cannot be reached.
//! - `GET /api/v1/cache`: `{"store", "max_entries", "max_entry_bytes", "redis": {"reachable",
//!   "entries", "complete"} | null, "purges": [...]}` (entries counted with `SCAN`, up to
//!   [`COUNT_CAP`]; `complete` false when the count stopped there).
//!
//! With the Postgres store purges are also kept in `fg_cache_purges` ([`follow_purges`] reads
//! them every [`FOLLOW_EVERY`]), so every sidecar on the database and one that restarts send
//! the same purges.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use ferrogate_core::config::cache::{Purge, StoreKind};
use ferrogate_core::config::Config;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::{error, redis_url, Cache};
use crate::services::admin::Admin;
use crate::services::identity::{AuditEvent, Principal, RequestMeta};
use crate::services::snapshot::Snapshots;
use crate::services::source::Database;

/// Most entries `GET /api/v1/cache` counts.
pub const COUNT_CAP: u64 = 1_000_000;
/// How often the database's purges are read.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(2);

/// What a purge request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One key's entries (scope `key:<name>`).
    Key(String),
    /// A group's entries and its keys' (scopes `group:<name>` and `key:<member>`).
    Group(String),
    /// One public model's entries, every scope.
    Model(String),
    /// Everything.
    All,
}

/// Reads a purge request body.
///
/// # Errors
/// Not a JSON object holding exactly one of `key`, `group`, `model` (a non-empty name) or
/// `all` (`true`), with why.
pub fn parse_target(body: &[u8]) -> Result<Target, String> {
    const SHAPE: &str =
        "the body must be one of {\"key\": name}, {\"group\": name}, {\"model\": name}, {\"all\": true}";
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("{SHAPE}: not JSON ({e})"))?;
    let Some(object) = value.as_object() else { return Err(format!("{SHAPE}: not an object")) };
    let mut members = object.iter();
    let (Some((field, value)), None) = (members.next(), members.next()) else {
        return Err(format!("{SHAPE}: exactly one member, not {}", object.len()));
    };
    let name = || value.as_str().filter(|n| !n.is_empty()).map(String::from);
    let named =
        |make: fn(String) -> Target| name().map(make).ok_or_else(|| format!("{field} must be a non-empty name"));
    match field.as_str() {
        "key" => named(Target::Key),
        "group" => named(Target::Group),
        "model" => named(Target::Model),
        "all" if value == &Value::Bool(true) => Ok(Target::All),
        "all" => Err("all must be true".to_string()),
        other => Err(format!("{SHAPE}: unknown member {other:?}")),
    }
}

/// The scopes and model `target` covers in `config` (a model named through an alias is its
/// model); `Err` names what `config` does not have.
///
/// # Errors
/// The key, group or model is unknown.
pub fn resolve(target: &Target, config: &Config) -> Result<(Vec<String>, Option<String>), String> {
    match target {
        Target::Key(name) => match config.keys.iter().any(|k| &k.name == name) {
            true => Ok((vec![format!("key:{name}")], None)),
            false => Err(format!("no key named {name:?}")),
        },
        Target::Group(name) => {
            let g =
                config.groups.iter().position(|g| &g.name == name).ok_or_else(|| format!("no group named {name:?}"))?;
            let members = config.keys.iter().filter(|k| k.groups.contains(&g)).map(|k| format!("key:{}", k.name));
            Ok((std::iter::once(format!("group:{name}")).chain(members).collect(), None))
        }
        Target::Model(name) => {
            let i = config.model_index(name).or_else(|| config.aliases.get(name).copied());
            let model = i.and_then(|i| config.models.get(i)).ok_or_else(|| format!("no model named {name:?}"))?;
            Ok((Vec::new(), Some(model.name.clone())))
        }
        Target::All => Ok((Vec::new(), None)),
    }
}

/// `POST /api/v1/cache/purge`, audited as `cache.purge` (the body as `after`).
pub async fn purge(
    State(admin): State<Admin>,
    axum::Extension(who): axum::Extension<Principal>,
    axum::Extension(meta): axum::Extension<RequestMeta>,
    body: Bytes,
) -> Response {
    let (status, answer) = purge_answer(&admin, &body).await;
    let detail = answer.get("error").and_then(Value::as_str).map(String::from);
    let after =
        serde_json::from_slice::<Value>(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into()));
    let event = AuditEvent {
        action: "cache.purge".into(),
        object: Some("cache".into()),
        before: None,
        after: Some(after),
        status: status.as_u16(),
        detail,
    };
    admin.identity.audit(&who, &meta, event).await;
    (status, Json(answer)).into_response()
}

/// What a purge answers: its status and body.
async fn purge_answer(admin: &Admin, body: &[u8]) -> (StatusCode, Value) {
    let failed = |status: StatusCode, why: String| (status, json!({"error": why}));
    let target = match parse_target(body) {
        Ok(t) => t,
        Err(why) => return failed(StatusCode::BAD_REQUEST, why),
    };
    let Some(served) = admin.snapshots.current() else {
        return failed(StatusCode::SERVICE_UNAVAILABLE, "no configuration snapshot yet".into());
    };
    let (scopes, model) = match resolve(&target, &served.config) {
        Ok(covered) => covered,
        Err(why) => return failed(StatusCode::NOT_FOUND, why),
    };
    let purge = Purge { scopes, model, at_ms: crate::services::now_ms() };
    admin.snapshots.add_purge(purge.clone());
    if let Some(db) = admin.db.get() {
        if let Err(e) = db.store.record_purge(&purge).await {
            tracing::warn!(error = %e, "response cache purge not kept in the database; this sidecar's filters have it");
        }
    }
    let semantic = admin.cache.purge_semantic(&purge.scopes, purge.model.as_deref());
    let purged = match served.config.cache.store {
        StoreKind::Memory => Ok(None),
        StoreKind::Redis => purge_redis(&admin.cache, &served.config, &target, &purge).await.map(Some),
    };
    tracing::info!(?purge, ?purged, ?semantic, "response cache purged");
    match purged {
        Ok(purged) => (StatusCode::OK, json!({"purged": purged, "semantic": semantic, "purge": purge})),
        Err(e) => {
            let why = format!(
                "{e}; the purge is recorded (filters ignore what it covers), retry to delete the Redis entries"
            );
            (StatusCode::SERVICE_UNAVAILABLE, json!({"error": why, "semantic": semantic, "purge": purge}))
        }
    }
}

/// Deletes what `purge` covers from Redis; the entries deleted.
async fn purge_redis(cache: &Cache, config: &Config, target: &Target, purge: &Purge) -> Result<u64, String> {
    let url = redis_url(config).map_err(|e| e.to_string())?;
    let result = match (target, &purge.model) {
        (Target::All, _) => cache.redis.purge_all(&url).await,
        (_, Some(model)) => cache.redis.purge_indexes(&url, &[cache.redis.model_index(model)]).await,
        _ => {
            let indexes: Vec<String> = purge.scopes.iter().map(|s| cache.redis.scope_index(s)).collect();
            cache.redis.purge_indexes(&url, &indexes).await
        }
    };
    result.map_err(|e| e.to_string())
}

/// `GET /api/v1/cache`.
pub async fn status(State(admin): State<Admin>) -> Response {
    let Some(served) = admin.snapshots.current() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "no configuration snapshot yet");
    };
    let settings = &served.config.cache;
    let (store, redis) = match settings.store {
        StoreKind::Memory => ("memory", Value::Null),
        StoreKind::Redis => ("redis", redis_status(&admin.cache, &served.config).await),
    };
    Json(json!({
        "store": store,
        "max_entries": settings.max_entries,
        "max_entry_bytes": settings.max_entry_bytes,
        "redis": redis,
        "purges": admin.snapshots.purges(),
    }))
    .into_response()
}

async fn redis_status(cache: &Cache, config: &Config) -> Value {
    let counted = match redis_url(config) {
        Ok(url) => cache.redis.count(&url, COUNT_CAP).await,
        Err(e) => Err(e),
    };
    match counted {
        Ok((entries, complete)) => json!({"reachable": true, "entries": entries, "complete": complete}),
        Err(e) => json!({"reachable": false, "entries": null, "complete": false, "error": e.to_string()}),
    }
}

/// Every [`FOLLOW_EVERY`] once the Postgres store is connected, takes the purges recorded in
/// the database (by another sidecar, or before a restart) into `snapshots`, until `shutdown`.
pub async fn follow_purges(
    snapshots: Arc<Snapshots>,
    db: Arc<OnceLock<Database>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        if let Some(db) = db.get() {
            match db.store.cache_purges().await {
                Ok(purges) => {
                    if snapshots.merge_purges(&purges) {
                        tracing::info!(purges = purges.len(), "response cache purges taken from the database");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "response cache purges not read from the database"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(FOLLOW_EVERY) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod tests;
