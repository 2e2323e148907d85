//! The admin listener: liveness, readiness, Prometheus metrics, the OpenAPI document and the
//! admin API (`/api/v1/...`), and the web dashboard's files (`/ui/`, [`super::ui`]).
//!
//! Every route's access comes from the operations table (`services::openapi`): the
//! [`authorize`] middleware authenticates the caller (`services::identity`) and checks its
//! role before a handler runs, so handlers find the caller's `Principal` in the request's
//! extensions and check nothing themselves. Every error is JSON ([`errors`]); request bodies
//! are limited to [`BODY_LIMIT`] bytes.
//!
//! Metrics are the filter's own, named the way Envoy's `/stats/prometheus` names them, so a
//! dashboard built on `ferrogate serve` keeps working when the filter moves into Envoy.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use ferrogate_host::Runtime;

use super::crud;
use super::limits::{self, Ledger};
use super::now_ms;
use super::openapi::BODY_LIMIT;
use super::snapshot::Snapshots;
use super::source::Database;
use super::targets::{self, Targets};
use super::usage::{self, UsageBackend};

pub mod authorize;
pub mod errors;
mod requests;
#[cfg(test)]
mod roles_tests;

/// Shared state of the admin API.
#[derive(Clone)]
pub struct Admin {
    /// The filter host whose metrics are exported (absent in a standalone sidecar).
    pub runtime: Option<Runtime>,
    /// Usage records.
    pub usage: Arc<UsageBackend>,
    /// The configuration snapshot (for `config/problems`).
    pub snapshots: Arc<Snapshots>,
    /// The configuration database once connected (admin writes go there).
    pub db: Arc<OnceLock<Database>>,
    /// Whether the store is Postgres (without it, writes are refused: edit the file).
    pub postgres: bool,
    /// Consumption per limit (`/api/v1/limits`, `/metrics`).
    pub ledger: Arc<Ledger>,
    /// Health and load of the routing targets (`/api/v1/targets`, `/metrics`).
    pub targets: Arc<Targets>,
    /// The engines' KV block index (`/api/v1/kv`, `/metrics`).
    pub kv: Arc<super::kv::Kv>,
    /// The response cache (`/api/v1/cache`, purges).
    pub cache: Arc<super::cache::Cache>,
    /// Who may call what: users, sessions, tokens, the audit log.
    pub identity: super::identity::Identity,
}

/// Errors configuring the admin listener.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The admin API would be reachable from other hosts with no token.
    #[error("refusing to bind the admin API to non-loopback {0} without FERROGATE_ADMIN_TOKEN")]
    OpenAdmin(SocketAddr),
    /// The file's `admin:` block is not usable.
    #[error("admin: {0}")]
    Settings(String),
}

/// The `admin:` block of the configuration file at `path`, validated (defaults when absent).
///
/// # Errors
/// The block's problems, with their paths; a file that cannot be read is left to the
/// configuration loader, which reports it.
pub fn settings_of(path: &std::path::Path) -> Result<super::identity::AdminSettings, AdminError> {
    let raw = crate::serve::config::read_raw(path).ok();
    ferrogate_core::config::admin::settings(raw.as_ref().and_then(|r| r.admin.as_ref())).map_err(|problems| {
        AdminError::Settings(problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))
    })
}

/// Refuses an admin bind that other hosts could reach when no token protects it.
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), AdminError> {
    if super::auth::non_loopback_without_token(addr, token) {
        return Err(AdminError::OpenAdmin(addr));
    }
    if token.is_none() {
        tracing::warn!(
            "the admin API on {addr} has no FERROGATE_ADMIN_TOKEN: any local process may use /api/v1 (set one to require it)"
        );
    }
    Ok(())
}

/// The admin routes.
pub fn router(state: Admin) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(|| async { Json(super::openapi::document()) }))
        .merge(super::ui::router())
        .route("/api/v1/usage", get(usage_query))
        .route("/api/v1/requests", get(requests::list))
        .route("/api/v1/requests/{request_id}", get(requests::by_id))
        .route("/api/v1/limits", get(limits_query))
        .route("/api/v1/targets", get(targets_query))
        .route("/api/v1/kv", get(kv_query))
        .route("/api/v1/config/problems", get(config_problems))
        .route("/api/v1/cache", get(super::cache::admin::status))
        .route("/api/v1/cache/purge", axum::routing::post(super::cache::admin::purge))
        .merge(super::analytics::router())
        .merge(super::identity::router())
        .merge(super::identity::oidc::router())
        .route("/api/v1/{section}", get(crud::list).post(crud::create))
        .route("/api/v1/{section}/{name}", get(crud::get).put(crud::replace).delete(crud::delete))
        .layer(axum::middleware::from_fn_with_state(state.clone(), authorize::authorize))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn(errors::json_errors))
        .with_state(state)
}

/// `GET /readyz[?strict=true]`: ready once a snapshot exists (built from the store, or
/// restored from the cache); the body says whether the store is reachable.
///
/// By default an unreachable store does not make the gateway unready: it keeps serving its last
/// good snapshot, and a readiness probe failing on every replica at once during a database
/// outage would take the whole fleet out of rotation (in Kubernetes one unready container
/// makes its pod unready). `strict=true` also requires the store, for probes that gate admin
/// traffic or rollouts.
async fn readyz(State(admin): State<Admin>, Query(q): Query<Readiness>) -> Response {
    let store = store_status(&admin).await;
    let body = match admin.snapshots.current() {
        None => Err("no configuration snapshot yet".to_string()),
        Some(s) if q.strict && store.is_err() => Err(format!("snapshot {}, but the store is unreachable", s.version)),
        Some(s) => Ok(format!("snapshot {}", s.version)),
    };
    let store = store.err().map_or_else(|| "store reachable".to_string(), |e| format!("store unreachable: {e}"));
    match body {
        Ok(b) => format!("ready: {b}; {store}\n").into_response(),
        Err(b) => {
            // The probe's failure is text, as its success (the JSON error layer leaves it).
            let mut answer =
                (axum::http::StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {b}; {store}\n")).into_response();
            answer.extensions_mut().insert(errors::Text);
            answer
        }
    }
}

/// Query of `/readyz`.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Readiness {
    /// Also require the configuration store.
    #[serde(default)]
    strict: bool,
}

/// Whether the configuration store answers: a version read for Postgres (bounded to 2 s); the
/// file store is local and counts as reachable (a broken edit is a problem, not an outage).
async fn store_status(admin: &Admin) -> Result<(), String> {
    if !admin.postgres {
        return Ok(());
    }
    let db = admin.db.get().ok_or("not connected yet")?;
    match tokio::time::timeout(std::time::Duration::from_secs(2), db.store.version()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 2 s".to_string()),
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    let mut text = admin.runtime.as_ref().map(|r| super::metrics::render(&r.metric_families())).unwrap_or_default();
    if let Some(served) = admin.snapshots.current() {
        super::metrics::snapshot_series(&served, now_ms(), &mut text);
        let all = admin.ledger.consumption(&served.config, &limits::Filter::default(), now_ms());
        limits::prometheus(&all, admin.ledger.synced(), &mut text);
    }
    admin.ledger.leases.prometheus(&mut text);
    targets::prometheus(&admin.targets.report(), &mut text);
    super::kv::report::prometheus(&super::kv::report::report(&admin.kv, now_ms()), &mut text);
    admin.usage.prometheus(&mut text);
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}

/// `GET /api/v1/limits[?key=..][&group=..]`: every limit's consumption and what remains.
async fn limits_query(State(admin): State<Admin>, Query(filter): Query<limits::Filter>) -> Response {
    let Some(served) = admin.snapshots.current() else {
        let body = Json(serde_json::json!({"error": "no configuration snapshot yet"}));
        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, body).into_response();
    };
    let limits = admin.ledger.consumption(&served.config, &filter, now_ms());
    Json(serde_json::json!({"synced": admin.ledger.synced(), "replica": admin.ledger.replica, "limits": limits}))
        .into_response()
}

/// `GET /api/v1/targets`: every routing target's health, probe history and engine load.
async fn targets_query(State(admin): State<Admin>) -> Response {
    Json(admin.targets.report()).into_response()
}

/// `GET /api/v1/kv`: every KV-event stream: connected, last sequence, blocks, last event age.
async fn kv_query(State(admin): State<Admin>) -> Response {
    Json(serde_json::json!({"providers": super::kv::report::report(&admin.kv, now_ms())})).into_response()
}

async fn usage_query(State(admin): State<Admin>, Query(q): Query<usage::Query>) -> Response {
    match admin.usage.query(&q).await {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "usage query not answered");
            let body = Json(serde_json::json!({"error": e.to_string()}));
            (axum::http::StatusCode::SERVICE_UNAVAILABLE, body).into_response()
        }
    }
}

async fn config_problems(State(admin): State<Admin>) -> Response {
    Json(admin.snapshots.report()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_admin_on_public_address_is_refused() {
        let public: SocketAddr = "0.0.0.0:9001".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:9001".parse().unwrap();
        assert!(check_bind(public, None).is_err());
        assert!(check_bind(public, Some("t")).is_ok());
        assert!(check_bind(local, None).is_ok());
    }

    /// An admin API over the file store, without a token, serving `snapshots`.
    fn file_store_admin(snapshots: Arc<Snapshots>) -> Admin {
        Admin {
            runtime: None,
            usage: Arc::new(UsageBackend::memory(usage::UsageStore::new(None))),
            snapshots: snapshots.clone(),
            db: Arc::new(OnceLock::new()),
            postgres: false,
            ledger: Arc::new(Ledger::new("test".into(), false)),
            targets: Arc::new(Targets::new(targets::Settings::default())),
            kv: Arc::default(),
            cache: Arc::new(super::super::cache::Cache::new(snapshots.clone())),
            identity: super::super::identity::Identity::new(Default::default(), None, Arc::new(OnceLock::new()), false),
        }
    }

    /// Every documented operation is routed: against a file-store admin, none answers the
    /// router's own 404 ("no such route") or 405 (a missing row would be 409 here, the store
    /// being the file; a handler's 404 says what it did not find).
    #[tokio::test]
    async fn every_documented_operation_is_routed() {
        use tower::ServiceExt;
        let admin = file_store_admin(Arc::new(Snapshots::new(None)));
        // A request of id x, so `GET /api/v1/requests/x` finds one.
        let record = ferrogate_core::usage::Record { request_id: "x".into(), ..Default::default() };
        admin.usage.add(bytes::Bytes::from(record.to_json_line())).await.unwrap();
        let app = router(admin);
        let ops = super::super::openapi::operations();
        assert!(ops.len() > 20);
        for op in ops {
            let uri = op.path.replace("{name}", "x").replace("{request_id}", "x").replace("{id}", "1");
            let req = axum::http::Request::builder()
                .method(op.method.to_uppercase().as_str())
                .uri(&uri)
                .header("content-type", "application/json")
                .body(axum::body::Body::from("{}"))
                .unwrap();
            let answer = app.clone().oneshot(req).await.unwrap();
            let status = answer.status().as_u16();
            let body = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
            let text = String::from_utf8_lossy(&body);
            assert!(
                !(status == 404 && text.contains("no such route")) && status != 405,
                "{} {uri}: {status} {text}",
                op.method
            );
        }
    }

    /// With the file store, reads list the served snapshot's rows; writes stay 409.
    #[tokio::test]
    async fn the_file_store_answers_reads_from_the_served_snapshot() {
        use tower::ServiceExt;
        let snapshots = Arc::new(Snapshots::new(None));
        let digest = format!("sha256:{}", "ab".repeat(32));
        let yaml = format!(
            "providers: [{{ name: local, kind: openai_compatible, base_url: 'http://h:1', api_key: sk-hidden }}]\n\
             models: [{{ name: chat, targets: [{{ provider: local, model: m }}], guardrails: [pii] }}]\n\
             keys: [{{ name: alice, digest: '{digest}', models: [chat] }}]\n\
             guardrails: [{{ name: pii, input: [{{ detector: email, action: redact }}] }}]\n"
        );
        snapshots.publish(serde_saphyr::from_str(&yaml).unwrap()).unwrap();
        let admin = file_store_admin(snapshots);
        let app = router(admin);
        let call = |method: &str, uri: &str| {
            axum::http::Request::builder().method(method).uri(uri).body(axum::body::Body::from("{}")).unwrap()
        };
        let answer = app.clone().oneshot(call("GET", "/api/v1/keys")).await.unwrap();
        assert_eq!(answer.status().as_u16(), 200);
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("alice") && text.contains(&digest), "{text}");
        let answer = app.clone().oneshot(call("GET", "/api/v1/providers")).await.unwrap();
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
        assert!(!String::from_utf8_lossy(&body).contains("sk-hidden"), "provider keys are never listed");
        let answer = app.clone().oneshot(call("GET", "/api/v1/guardrails/pii")).await.unwrap();
        assert_eq!(answer.status().as_u16(), 200);
        let body = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
        let policy: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(policy["input"][0]["detector"], "email", "{policy}");
        let answer = app.clone().oneshot(call("GET", "/api/v1/keys/bob")).await.unwrap();
        assert_eq!(answer.status().as_u16(), 404);
        for write in [call("POST", "/api/v1/keys"), call("PUT", "/api/v1/guardrails/pii")] {
            assert_eq!(app.clone().oneshot(write).await.unwrap().status().as_u16(), 409);
        }
    }
}
