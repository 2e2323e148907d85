//! Errors of the simulated engine, rendered in OpenAI's error shape
//! `{"error":{"message","type","param","code"}}` so clients and the gateway see what a real
//! OpenAI-compatible server would send.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// A request the sim refuses, or a failure it was told to inject.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Malformed JSON or a field of the wrong shape.
    #[error("{0}")]
    BadRequest(String),
    /// The request names a model the sim does not serve.
    #[error("The model `{0}` does not exist.")]
    ModelNotFound(String),
    /// No such endpoint.
    #[error("Not found: {0}")]
    RouteNotFound(String),
    /// A status forced by `x-sim-status` or the error-rate options.
    #[error("Simulated error with status {}", .0.as_u16())]
    Injected(StatusCode),
}

impl SimError {
    fn status(&self) -> StatusCode {
        match self {
            SimError::BadRequest(_) => StatusCode::BAD_REQUEST,
            SimError::ModelNotFound(_) | SimError::RouteNotFound(_) => StatusCode::NOT_FOUND,
            SimError::Injected(status) => *status,
        }
    }

    /// OpenAI's `type`, `param` and `code` for this error.
    fn kind(&self) -> (&'static str, Option<&'static str>, Option<&'static str>) {
        match self {
            SimError::BadRequest(_) => ("invalid_request_error", None, None),
            SimError::ModelNotFound(_) => ("invalid_request_error", Some("model"), Some("model_not_found")),
            SimError::RouteNotFound(_) => ("invalid_request_error", None, None),
            SimError::Injected(StatusCode::TOO_MANY_REQUESTS) => ("requests", None, Some("rate_limit_exceeded")),
            SimError::Injected(status) if status.is_server_error() => ("server_error", None, None),
            SimError::Injected(_) => ("invalid_request_error", None, None),
        }
    }
}

impl IntoResponse for SimError {
    fn into_response(self) -> Response {
        let status = self.status();
        let (kind, param, code) = self.kind();
        let body = json!({
            "error": { "message": self.to_string(), "type": kind, "param": param, "code": code }
        });
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            // Clients and the gateway's retry logic honour this; one second keeps tests fast.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
