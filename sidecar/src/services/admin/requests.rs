//! `GET /api/v1/requests` and `GET /api/v1/requests/{request_id}`: the request log, one item
//! per usage record (filters, keyset paging: `services::usage::requests`).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::Admin;
use crate::services::usage::requests::{Page, Params, RequestFilter};

/// `GET /api/v1/requests?…`: a page of matches, newest first, and the cursor of the next one.
pub(super) async fn list(State(admin): State<Admin>, Query(params): Query<Params>) -> Response {
    let filter = match RequestFilter::parse(params) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    match page(&admin, &filter).await {
        Ok(page) => Json(page).into_response(),
        Err(answer) => answer,
    }
}

/// `GET /api/v1/requests/{request_id}`: every record of that id (clients choose their ids,
/// which may repeat), newest first; 404 when there is none.
pub(super) async fn by_id(State(admin): State<Admin>, Path(id): Path<String>) -> Response {
    match page(&admin, &RequestFilter::by_id(id.clone())).await {
        Ok(page) if page.requests.is_empty() => error(StatusCode::NOT_FOUND, &format!("no request with id {id:?}")),
        Ok(page) => Json(json!({"requests": page.requests})).into_response(),
        Err(answer) => answer,
    }
}

/// The page, or the 503 answer when the store cannot give it.
async fn page(admin: &Admin, filter: &RequestFilter) -> Result<Page, Response> {
    admin.usage.requests(filter).await.map_err(|e| {
        tracing::warn!(error = %e, "request log query not answered");
        error(StatusCode::SERVICE_UNAVAILABLE, &e.to_string())
    })
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({"error": message}))).into_response()
}
