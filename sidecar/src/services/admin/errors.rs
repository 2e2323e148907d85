//! Every error of the admin listener is JSON, `{"error": "<why>"}`: a layer rewrites the 4xx
//! and 5xx answers that are not (axum's own rejections: an unreadable query string or path
//! parameter, a body over the limit, a route that does not exist, a method it does not take)
//! and keeps their status and headers (`Allow` of a 405). A body the `Json` extractor could not
//! read (415 without a JSON content type, 422 for a body of another shape) is 400, as the
//! handlers that read bodies themselves answer. A handler whose error is text on purpose (a
//! probe's 503) marks its answer with [`Text`].

use axum::body::Body;
use axum::extract::Request;
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::json;

use crate::services::openapi::BODY_LIMIT;

/// Marks an error answer that stays as it is (the text answer of a failing probe).
#[derive(Debug, Clone, Copy)]
pub struct Text;

/// Most bytes of a rejection's text carried into its JSON.
const MESSAGE_LIMIT: usize = 16 << 10;

/// The layer: passes every answer but the non-JSON errors, which it rewrites.
pub async fn json_errors(req: Request, next: Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let answer = next.run(req).await;
    let status = answer.status();
    if !(status.is_client_error() || status.is_server_error())
        || is_json(&answer)
        || answer.extensions().get::<Text>().is_some()
    {
        return answer;
    }
    let (mut parts, body) = answer.into_parts();
    let text = match axum::body::to_bytes(body, MESSAGE_LIMIT).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    let (status, message) = match status {
        StatusCode::PAYLOAD_TOO_LARGE => {
            (status, format!("request body too large: the admin API takes at most {BODY_LIMIT} bytes (1 MiB)"))
        }
        StatusCode::UNSUPPORTED_MEDIA_TYPE | StatusCode::UNPROCESSABLE_ENTITY => {
            (StatusCode::BAD_REQUEST, format!("body: {text}"))
        }
        StatusCode::NOT_FOUND if text.is_empty() => (status, format!("no such route: {method} {path}")),
        StatusCode::METHOD_NOT_ALLOWED => (status, format!("method {method} not allowed on {path}")),
        _ if text.is_empty() => (status, status.canonical_reason().unwrap_or("error").to_ascii_lowercase()),
        _ => (status, text),
    };
    parts.status = status;
    parts.headers.remove(CONTENT_LENGTH);
    parts.headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(json!({"error": message}).to_string()))
}

fn is_json(answer: &Response) -> bool {
    let Some(kind) = answer.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else { return false };
    let essence = kind.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}
