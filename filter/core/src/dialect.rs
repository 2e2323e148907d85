//! Client API dialects and how an [`ApiError`] looks in each.
//!
//! Errors are answered in the caller's dialect (SPEC "Errors use the caller's dialect") so
//! each SDK raises its own typed exception instead of a parse failure. The dialect comes from
//! the request path alone, so it is known before the body (and before authentication).
//! The Anthropic `type` and Gemini `status` are derived from the HTTP status, which is how
//! those APIs define them; the OpenAI shape keeps the finer `type`/`code` of [`ApiError`].

use serde::Serialize;

use crate::error::ApiError;

/// The API family a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// OpenAI (`/v1/chat/completions`, `/v1/models`, ... and anything unrecognised).
    #[default]
    OpenAi,
    /// Anthropic Messages (`/v1/messages`, `/v1/messages/count_tokens`).
    Anthropic,
    /// Google Gemini (`/v1beta/...`, e.g. `/v1beta/models/{m}:generateContent`).
    Gemini,
    /// JSON-RPC 2.0, as MCP and A2A speak it (`/mcp/{server}`, `/a2a/{agent}`): errors are
    /// JSON-RPC error responses.
    JsonRpc,
}

impl Dialect {
    /// The dialect of a client `:path` (query string allowed). Unknown paths are OpenAI, the
    /// most common client, so even a 404 for a typo is readable by the usual SDKs.
    pub fn from_path(path: &str) -> Self {
        let (bare, _) = crate::route::split_query(path);
        if let Some(rest) = bare.strip_prefix("/v1/messages") {
            if rest.is_empty() || rest.starts_with('/') {
                return Self::Anthropic;
            }
        }
        if bare.starts_with("/v1beta/") {
            return Self::Gemini;
        }
        if bare == "/mcp" || bare.starts_with("/mcp/") || bare.starts_with("/a2a/") {
            return Self::JsonRpc;
        }
        Self::OpenAi
    }
}

/// Anthropic error `type` for an HTTP status (their documented status ↔ type table).
fn anthropic_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// Gemini (`google.rpc.Code`) status name for an HTTP status, per Google's HTTP mapping.
fn gemini_status(status: u16) -> &'static str {
    match status {
        401 => "UNAUTHENTICATED",
        // Budgets are quotas in Google's vocabulary.
        402 | 429 => "RESOURCE_EXHAUSTED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        502 | 503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        400..=499 => "INVALID_ARGUMENT",
        _ => "INTERNAL",
    }
}

#[derive(Serialize)]
struct AnthropicEnvelope<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: AnthropicError<'a>,
}

#[derive(Serialize)]
struct AnthropicError<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
}

/// A JSON-RPC error response: with no id when the gateway answers before, or instead of,
/// reading the request's, else the request's; the HTTP status and the error's type go in `data`.
#[derive(Serialize)]
struct JsonRpcEnvelope<'a> {
    jsonrpc: &'static str,
    id: serde_json::Value,
    error: JsonRpcError<'a>,
}

#[derive(Serialize)]
struct JsonRpcError<'a> {
    code: i64,
    message: &'a str,
    data: JsonRpcData,
}

#[derive(Serialize)]
struct JsonRpcData {
    http_status: u16,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// JSON-RPC code for an HTTP status: the request's fault is -32600 (invalid request), the
/// gateway's or the server's -32603 (internal error).
fn jsonrpc_code(status: u16) -> i64 {
    if status < 500 {
        -32600
    } else {
        -32603
    }
}

#[derive(Serialize)]
struct GeminiEnvelope<'a> {
    error: GeminiError<'a>,
}

#[derive(Serialize)]
struct GeminiError<'a> {
    code: u16,
    message: &'a str,
    status: &'static str,
}

impl ApiError {
    /// The JSON body in `dialect`'s shape: OpenAI `{"error":{"message","type","param","code"}}`,
    /// Anthropic `{"type":"error","error":{"type","message"}}`, Gemini
    /// `{"error":{"code","message","status"}}`.
    pub fn body_in(&self, dialect: Dialect) -> Vec<u8> {
        let json = match dialect {
            Dialect::OpenAi => return self.body(),
            Dialect::Anthropic => serde_json::to_vec(&AnthropicEnvelope {
                kind: "error",
                error: AnthropicError { kind: anthropic_type(self.status), message: &self.message },
            }),
            Dialect::Gemini => serde_json::to_vec(&GeminiEnvelope {
                error: GeminiError { code: self.status, message: &self.message, status: gemini_status(self.status) },
            }),
            Dialect::JsonRpc => return self.jsonrpc_body(None),
        };
        // Serialising these plain structs cannot fail; fall back to the OpenAI body regardless.
        json.unwrap_or_else(|_| self.body())
    }

    /// The JSON-RPC error answering the request whose id is `id` (its JSON text, as
    /// [`crate::mcp::Message::id`] holds it), so a client matches it to its call; `None`, or
    /// text that is not a JSON string or number, gives `"id": null`.
    pub fn jsonrpc_body(&self, id: Option<&str>) -> Vec<u8> {
        let id = id.and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok());
        let id = id.filter(|v| v.is_string() || v.is_number()).unwrap_or(serde_json::Value::Null);
        let envelope = JsonRpcEnvelope {
            jsonrpc: "2.0",
            id,
            error: JsonRpcError {
                code: jsonrpc_code(self.status),
                message: &self.message,
                data: JsonRpcData { http_status: self.status, kind: self.kind },
            },
        };
        serde_json::to_vec(&envelope).unwrap_or_else(|_| self.body())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn parse(body: &[u8]) -> Value {
        serde_json::from_slice(body).unwrap()
    }

    #[test]
    fn dialect_from_path() {
        for (path, want) in [
            ("/v1/messages", Dialect::Anthropic),
            ("/v1/messages?beta=true", Dialect::Anthropic),
            ("/v1/messages/count_tokens", Dialect::Anthropic),
            ("/v1/messagesx", Dialect::OpenAi),
            ("/v1beta/models/gemini-2.5-flash:generateContent", Dialect::Gemini),
            ("/v1beta/models/g:streamGenerateContent?alt=sse", Dialect::Gemini),
            ("/v1/chat/completions", Dialect::OpenAi),
            ("/v1/models/chat", Dialect::OpenAi),
            ("/mcp/tools", Dialect::JsonRpc),
            ("/mcp?x=1", Dialect::JsonRpc),
            ("/mcpx", Dialect::OpenAi),
            ("/a2a/echo", Dialect::JsonRpc),
            ("/", Dialect::OpenAi),
            ("", Dialect::OpenAi),
        ] {
            assert_eq!(Dialect::from_path(path), want, "{path}");
        }
    }

    #[test]
    fn openai_shape_is_body() {
        let e = ApiError::model_not_allowed("m");
        assert_eq!(e.body_in(Dialect::OpenAi), e.body());
        let v = parse(&e.body_in(Dialect::OpenAi));
        assert_eq!(v["error"]["type"], "permission_error");
        assert_eq!(v["error"]["param"], "model");
    }

    #[test]
    fn json_rpc_shape_carries_the_status_and_type() {
        let body = parse(&ApiError::mcp_server_not_allowed("tools").body_in(Dialect::JsonRpc));
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], Value::Null);
        assert_eq!(body["error"]["code"], -32600);
        assert_eq!(body["error"]["data"], json!({"http_status": 403, "type": "permission_error"}));
        assert!(body["error"]["message"].as_str().unwrap().contains("`tools`"));
        let down = parse(&ApiError::unavailable("no healthy upstream").body_in(Dialect::JsonRpc));
        assert_eq!(
            (down["error"]["code"].as_i64(), down["error"]["data"]["http_status"].as_u64()),
            (Some(-32603), Some(503))
        );
    }

    #[test]
    fn a_json_rpc_error_can_answer_the_requests_id() {
        let e = ApiError::rate_limited("Rate limit reached: key a allows 2 tool calls per minute.".into());
        for (id, want) in
            [(Some("7"), json!(7)), (Some("\"x-1\""), json!("x-1")), (Some("{}"), Value::Null), (None, Value::Null)]
        {
            let body = parse(&e.jsonrpc_body(id));
            assert_eq!(body["id"], want, "{id:?}");
            assert_eq!(body["error"]["data"], json!({"http_status": 429, "type": "rate_limit_error"}));
        }
    }

    #[test]
    fn anthropic_and_gemini_shapes_per_status() {
        let cases: [(ApiError, &str, &str); 8] = [
            (ApiError::bad_request("b"), "invalid_request_error", "INVALID_ARGUMENT"),
            (ApiError::unauthorized("u"), "authentication_error", "UNAUTHENTICATED"),
            (ApiError::model_not_allowed("m"), "permission_error", "PERMISSION_DENIED"),
            (ApiError::model_not_found("m"), "not_found_error", "NOT_FOUND"),
            (ApiError::method_not_allowed("GET", "/x"), "invalid_request_error", "INVALID_ARGUMENT"),
            (ApiError::payload_too_large(1), "request_too_large", "INVALID_ARGUMENT"),
            (ApiError::unavailable("x"), "overloaded_error", "UNAVAILABLE"),
            (ApiError { status: 429, ..ApiError::bad_request("slow down") }, "rate_limit_error", "RESOURCE_EXHAUSTED"),
        ];
        for (e, anthropic, gemini) in cases {
            let a = parse(&e.body_in(Dialect::Anthropic));
            assert_eq!(a, json!({"type":"error","error":{"type":anthropic,"message":e.message}}), "{e:?}");
            let g = parse(&e.body_in(Dialect::Gemini));
            assert_eq!(g, json!({"error":{"code":e.status,"message":e.message,"status":gemini}}), "{e:?}");
        }
    }

    #[test]
    fn remaining_status_mappings() {
        for (status, anthropic, gemini) in [
            (402, "billing_error", "RESOURCE_EXHAUSTED"),
            (500, "api_error", "INTERNAL"),
            (502, "api_error", "UNAVAILABLE"),
            (504, "api_error", "DEADLINE_EXCEEDED"),
            (529, "overloaded_error", "INTERNAL"),
        ] {
            assert_eq!(anthropic_type(status), anthropic, "{status}");
            assert_eq!(gemini_status(status), gemini, "{status}");
        }
    }
}
