//! The filter-facing listener: what filters reach through `dispatch_http_call` on the
//! sidecar cluster. Guarded by the internal bearer token.
//!
//! `POST /v1/usage` takes a batch of usage records as JSON lines (one record per line), the
//! format the filter's queue consumer sends.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};

use super::auth::{bearer_ok, unauthorized};
use super::usage::{AddError, UsageStore};

/// Shared state of the filter-facing API.
#[derive(Clone)]
pub struct FilterApi {
    /// Where usage goes.
    pub usage: Arc<UsageStore>,
    /// The internal token filters must present.
    pub internal_token: Option<String>,
}

/// The filter-facing routes.
pub fn router(state: FilterApi) -> Router {
    Router::new().route("/v1/usage", post(ingest)).with_state(state)
}

async fn ingest(State(api): State<FilterApi>, headers: HeaderMap, body: axum::body::Bytes) -> Response {
    if !bearer_ok(&headers, api.internal_token.as_deref()) {
        return unauthorized().into_response();
    }
    match api.usage.add(body) {
        Ok(n) => Json(serde_json::json!({"stored": n})).into_response(),
        Err(e @ AddError::BadLine { .. }) => {
            (StatusCode::BAD_REQUEST, Json(serde_json::json!({"error": e.to_string()}))).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot store usage records");
            (StatusCode::SERVICE_UNAVAILABLE, Json(serde_json::json!({"error": "usage store unavailable"})))
                .into_response()
        }
    }
}
