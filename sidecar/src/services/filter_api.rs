//! The filter-facing listener: what filters reach through `dispatch_http_call` on the
//! sidecar cluster. Guarded by the internal bearer token.
//!
//! - `GET /v1/snapshot`: the configuration snapshot, with `ETag`; `If-None-Match` with the
//!   current version → 304 (a filter polls every few seconds and usually gets 304); 503 until
//!   a first snapshot exists.
//! - `POST /v1/usage`: a batch of usage records as JSON lines (one record per line), the format
//!   the filter's queue consumer sends. `200 {"stored": n}` once the whole batch is stored
//!   (committed, with Postgres; lines stored before count as `"duplicates"`); 400 when a line
//!   is not a record; 503 when the store cannot take it now (the filter keeps the batch and
//!   sends it again on its next tick). A stored batch is folded into the limits ledger.
//! - `GET /v1/limits`: other replicas' consumption per limit counter (`services::limits`),
//!   polled by the filter when limits are shared through Redis.
//! - `POST /v1/limits/lease`: grants of capacity from the shared counters, give-backs and
//!   charges (`services::limits::lease`); `{"synced": false}` when Redis cannot be reached.
//!   For tests only, `FERROGATE_FAULT_LEASE_DELAY_MS` (read once) holds every answer that long
//!   after its grants are made, as a busy sidecar or Redis would.
//! - `GET /v1/targets`: health and engine load of every routing target (`services::targets`),
//!   with `ETag`; `If-None-Match` with the current version → 304.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::auth::{bearer_ok, unauthorized};
use super::limits::Ledger;
use super::snapshot::Snapshots;
use super::targets::Targets;
use super::usage::{AddError, UsageBackend};

/// Shared state of the filter-facing API.
#[derive(Clone)]
pub struct FilterApi {
    /// Where usage goes.
    pub usage: Arc<UsageBackend>,
    /// The configuration snapshot served.
    pub snapshots: Arc<Snapshots>,
    /// The internal token filters must present.
    pub internal_token: Option<String>,
    /// Consumption per limit counter, across replicas.
    pub ledger: Arc<Ledger>,
    /// Health and load of the routing targets.
    pub targets: Arc<Targets>,
    /// The engines' KV block index.
    pub kv: Arc<super::kv::Kv>,
    /// The usage store failed the last batch (an outage is logged once, not per batch).
    pub usage_failing: Arc<AtomicBool>,
}

/// The filter-facing routes.
pub fn router(state: FilterApi) -> Router {
    Router::new()
        .route("/v1/usage", post(ingest))
        .route("/v1/snapshot", get(snapshot))
        .route("/v1/limits", get(limits))
        .route("/v1/limits/lease", post(lease))
        .route("/v1/targets", get(targets))
        .route("/v1/kv", get(kv_feed))
        .with_state(state)
}

async fn limits(State(api): State<FilterApi>, headers: HeaderMap) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    (StatusCode::OK, [(CONTENT_TYPE, "application/json")], api.ledger.feed()).into_response()
}

async fn lease(State(api): State<FilterApi>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    let request: ferrogate_core::limits::lease::LeaseRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            let body = Json(serde_json::json!({"error": format!("not a lease request: {e}")}));
            return (StatusCode::BAD_REQUEST, body).into_response();
        }
    };
    let Some(served) = api.snapshots.current() else {
        return Json(ferrogate_core::limits::lease::LeaseAnswer::default()).into_response();
    };
    let ledger = &api.ledger;
    let answer = ledger.leases.grant(&ledger.replica, &request, &served.version, &served.config).await;
    if let Some(delay) = *FAULT_LEASE_DELAY {
        tokio::time::sleep(delay).await;
    }
    Json(answer).into_response()
}

/// Test-only fault: `FERROGATE_FAULT_LEASE_DELAY_MS` delays every lease answer by that many
/// milliseconds after its grants are made in Redis (the answer is late, the grant is not).
/// Read once; unset (the normal case), the handler only checks a `None`.
static FAULT_LEASE_DELAY: std::sync::LazyLock<Option<std::time::Duration>> = std::sync::LazyLock::new(|| {
    let ms = std::env::var("FERROGATE_FAULT_LEASE_DELAY_MS").ok()?.trim().parse::<u64>().ok()?;
    tracing::warn!(delay_ms = ms, "FERROGATE_FAULT_LEASE_DELAY_MS is set: every lease answer is delayed (test fault)");
    Some(std::time::Duration::from_millis(ms))
});

async fn targets(State(api): State<FilterApi>, headers: HeaderMap) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    let (version, body) = api.targets.feed();
    let etag = format!("\"{version}\"");
    if headers.get(IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| etag_matches(v, &etag)) {
        return (StatusCode::NOT_MODIFIED, [(ETAG, etag)]).into_response();
    }
    (StatusCode::OK, [(ETAG, etag), (CONTENT_TYPE, "application/json".to_string())], body).into_response()
}

/// `GET /v1/kv?epoch=E&since=G`: the KV index's changes since the reader's generation, or
/// everything (`ferrogate_core::kv::feed`); 304 when the reader is current.
async fn kv_feed(State(api): State<FilterApi>, headers: HeaderMap, query: axum::extract::RawQuery) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    let param = |name: &str| {
        let q = query.0.as_deref().unwrap_or_default();
        q.split('&').find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse::<u64>().ok())
    };
    let reader = param("epoch").zip(param("since"));
    match api.kv.feed(reader) {
        super::kv::Answer::NotModified => StatusCode::NOT_MODIFIED.into_response(),
        super::kv::Answer::Feed(body) => {
            (StatusCode::OK, [(CONTENT_TYPE, "application/octet-stream")], body).into_response()
        }
    }
}

async fn snapshot(State(api): State<FilterApi>, headers: HeaderMap) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    let Some(served) = api.snapshots.current() else {
        let body = Json(serde_json::json!({"error": "no configuration snapshot yet"}));
        return (StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    };
    let etag = format!("\"{}\"", served.version);
    let fresh = headers.get(IF_NONE_MATCH).and_then(|v| v.to_str().ok()).is_some_and(|v| etag_matches(v, &etag));
    if fresh {
        return (StatusCode::NOT_MODIFIED, [(ETAG, etag)]).into_response();
    }
    (StatusCode::OK, [(ETAG, etag), (CONTENT_TYPE, "application/json".to_string())], served.body.clone())
        .into_response()
}

/// `If-None-Match` holds `*` or a list of (possibly weak) entity tags (RFC 9110 §13.1.2).
fn etag_matches(header: &str, etag: &str) -> bool {
    header.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/") == etag)
}

async fn ingest(State(api): State<FilterApi>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    match api.usage.add(body.clone()).await {
        Ok(added) => {
            if api.usage_failing.swap(false, Ordering::Relaxed) {
                tracing::info!("usage records are stored again");
            }
            if let Some(served) = api.snapshots.current() {
                api.ledger.fold(&body, &served.version, &served.config);
            }
            Json(added).into_response()
        }
        Err(e @ AddError::BadLine { .. }) => {
            (StatusCode::BAD_REQUEST, Json(serde_json::json!({"error": e.to_string()}))).into_response()
        }
        Err(e) => {
            // Filters retry (with backoff) until the store is back: one line per outage.
            if !api.usage_failing.swap(true, Ordering::Relaxed) {
                tracing::error!(error = %e, "cannot store usage records; filters keep them and retry");
            } else {
                tracing::debug!(error = %e, "cannot store usage records");
            }
            (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"error": "usage store unavailable"})))
                .into_response()
        }
    }
}
