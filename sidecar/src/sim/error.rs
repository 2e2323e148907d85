//! Errors of the simulated engine, rendered in the caller's dialect so clients and the gateway
//! see what the real provider would send: OpenAI `{"error":{"message","type","param","code"}}`,
//! Anthropic `{"type":"error","error":{"type","message"}}`, Gemini
//! `{"error":{"code","message","status"}}`.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

/// The API family a request speaks, which decides the error envelope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI-compatible (`/v1/chat/completions`, ...).
    OpenAi,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// Google Gemini (`/v1beta/...`).
    Gemini,
}

impl Dialect {
    /// The dialect of a request path.
    pub fn of_path(path: &str) -> Self {
        if path == "/v1/messages" || path.starts_with("/v1/messages/") {
            Dialect::Anthropic
        } else if path.starts_with("/v1beta/") {
            Dialect::Gemini
        } else {
            Dialect::OpenAi
        }
    }
}

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
    fn openai_kind(&self) -> (&'static str, Option<&'static str>, Option<&'static str>) {
        match self {
            SimError::BadRequest(_) => ("invalid_request_error", None, None),
            SimError::ModelNotFound(_) => ("invalid_request_error", Some("model"), Some("model_not_found")),
            SimError::RouteNotFound(_) => ("invalid_request_error", None, None),
            SimError::Injected(StatusCode::TOO_MANY_REQUESTS) => ("requests", None, Some("rate_limit_exceeded")),
            SimError::Injected(status) if status.is_server_error() => ("server_error", None, None),
            SimError::Injected(_) => ("invalid_request_error", None, None),
        }
    }

    /// The message the provider of `dialect` would write.
    fn message(&self, dialect: Dialect) -> String {
        match (self, dialect) {
            (SimError::ModelNotFound(model), Dialect::Anthropic) => format!("model: {model}"),
            (SimError::ModelNotFound(model), Dialect::Gemini) => format!(
                "models/{model} is not found for API version v1beta, or is not supported for generateContent. \
                 Call ListModels to see the list of available models and their supported methods."
            ),
            _ => self.to_string(),
        }
    }

    /// The error as the provider of `dialect` answers it; 429s carry `Retry-After: 1`.
    pub fn render(self, dialect: Dialect) -> Response {
        let status = self.status();
        let message = self.message(dialect);
        let body = match dialect {
            Dialect::OpenAi => {
                let (kind, param, code) = self.openai_kind();
                json!({ "error": { "message": message, "type": kind, "param": param, "code": code } })
            }
            Dialect::Anthropic => anthropic_body(status, message),
            Dialect::Gemini => gemini_body(status, message),
        };
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::TOO_MANY_REQUESTS {
            // Clients and the gateway's retry logic honour this; one second keeps tests fast.
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

impl IntoResponse for SimError {
    /// OpenAI's envelope; other dialects call [`SimError::render`].
    fn into_response(self) -> Response {
        self.render(Dialect::OpenAi)
    }
}

/// Anthropic's envelope, with the error type its API documents for `status`.
fn anthropic_body(status: StatusCode, message: String) -> Value {
    let kind = match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        code if code >= 500 => "api_error",
        _ => "invalid_request_error",
    };
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

/// Google's envelope, with the canonical status name of `status`.
fn gemini_body(status: StatusCode, message: String) -> Value {
    let name = match status.as_u16() {
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        code if code >= 500 => "INTERNAL",
        _ => "INVALID_ARGUMENT",
    };
    json!({ "error": { "code": status.as_u16(), "message": message, "status": name } })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(response: Response) -> Value {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await.unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn dialect_follows_the_path() {
        assert_eq!(Dialect::of_path("/v1/messages"), Dialect::Anthropic);
        assert_eq!(Dialect::of_path("/v1/messages/count_tokens"), Dialect::Anthropic);
        assert_eq!(Dialect::of_path("/v1beta/models/m:generateContent"), Dialect::Gemini);
        assert_eq!(Dialect::of_path("/v1/messagesx"), Dialect::OpenAi);
        assert_eq!(Dialect::of_path("/v1/chat/completions"), Dialect::OpenAi);
    }

    #[tokio::test]
    async fn envelopes_per_dialect() {
        let anthropic = SimError::Injected(StatusCode::from_u16(529).unwrap()).render(Dialect::Anthropic);
        assert_eq!(anthropic.status().as_u16(), 529);
        let expected = json!({"type": "error", "error": {"type": "overloaded_error", "message": "Simulated error with status 529"}});
        assert_eq!(body(anthropic).await, expected);
        let gemini = SimError::Injected(StatusCode::TOO_MANY_REQUESTS).render(Dialect::Gemini);
        assert_eq!(gemini.headers()["retry-after"], "1");
        let error = body(gemini).await;
        assert_eq!(
            (error["error"]["code"].as_u64(), error["error"]["status"].as_str()),
            (Some(429), Some("RESOURCE_EXHAUSTED"))
        );
        let missing = body(SimError::ModelNotFound("m".into()).render(Dialect::Anthropic)).await;
        assert_eq!(missing["error"], json!({"type": "not_found_error", "message": "model: m"}));
    }
}
