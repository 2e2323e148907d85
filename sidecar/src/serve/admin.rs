//! The admin listener of `ferrogate serve`: liveness, readiness and Prometheus metrics.
//!
//! The full admin API (CRUD, usage) belongs to the sidecar services; this listener already
//! exposes what operators scrape: the filter's own metrics in Prometheus text, named the way
//! Envoy's `/stats/prometheus` names them.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use ferrogate_host::Runtime;
use tokio::sync::watch;

/// Serves the admin routes until shutdown.
pub async fn serve(listener: tokio::net::TcpListener, runtime: Runtime, mut shutdown: watch::Receiver<bool>) {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(|| async { "ready\n" }))
        .route("/metrics", get(metrics))
        .with_state(runtime);
    let stop = async move {
        let _ = shutdown.changed().await;
    };
    if let Err(e) = axum::serve(listener, app).with_graceful_shutdown(stop).await {
        tracing::error!(error = %e, "admin listener failed");
    }
}

async fn metrics(State(runtime): State<Runtime>) -> impl IntoResponse {
    ([(CONTENT_TYPE, "text/plain; version=0.0.4")], runtime.prometheus_text())
}
