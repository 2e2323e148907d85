//! [`ApiError`]: an error the gateway answers locally, with its status and OpenAI-style
//! classification. The OpenAI body is [`ApiError::body`]; the Anthropic and Gemini shapes are
//! derived from the status in [`crate::dialect`] ([`ApiError::body_in`]).

use serde::Serialize;

/// An error to return to the client (OpenAI classification; other dialects map from `status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// `error.type`.
    pub kind: &'static str,
    /// `error.code`.
    pub code: Option<&'static str>,
    /// `error.param`.
    pub param: Option<&'static str>,
    /// `error.message`.
    pub message: String,
}

#[derive(Serialize)]
struct ErrorEnvelope<'a> {
    error: ErrorBody<'a>,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    fn new(status: u16, kind: &'static str, code: Option<&'static str>, message: String) -> Self {
        Self { status, kind, code, param: None, message }
    }

    /// 400 `invalid_request_error`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", None, message.into())
    }

    /// 400 about the `model` parameter.
    pub fn bad_model_param(message: impl Into<String>) -> Self {
        Self { param: Some("model"), ..Self::bad_request(message) }
    }

    /// 401 `invalid_api_key` (OpenAI uses `invalid_request_error` as the type for these).
    /// The message must never contain the key itself.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(401, "invalid_request_error", Some("invalid_api_key"), message.into())
    }

    /// 403 `permission_error` / `model_not_allowed`: the model exists but the key may not use
    /// it. Only ever returned after the model was found, so 403 never reveals more than 404.
    pub fn model_not_allowed(model: &str) -> Self {
        let message = format!("This API key is not allowed to use the model `{model}`.");
        Self { param: Some("model"), ..Self::new(403, "permission_error", Some("model_not_allowed"), message) }
    }

    /// 404 `model_not_found`.
    pub fn model_not_found(model: &str) -> Self {
        let message = format!("The model `{model}` does not exist or you do not have access to it.");
        Self { param: Some("model"), ..Self::new(404, "invalid_request_error", Some("model_not_found"), message) }
    }

    /// 404 for a path the gateway does not serve.
    pub fn unknown_url(method: &str, path: &str) -> Self {
        Self::new(404, "invalid_request_error", Some("unknown_url"), format!("Invalid URL ({method} {path})"))
    }

    /// 404 `mcp_server_not_found`: no MCP server of that name (for every caller alike).
    pub fn mcp_server_not_found(server: &str) -> Self {
        let message = format!("The MCP server `{server}` does not exist or you do not have access to it.");
        Self::new(404, "invalid_request_error", Some("mcp_server_not_found"), message)
    }

    /// 403 `mcp_server_not_allowed`: the server exists but the key has no grant on it.
    pub fn mcp_server_not_allowed(server: &str) -> Self {
        let message = format!("This API key is not allowed to use the MCP server `{server}`.");
        Self::new(403, "permission_error", Some("mcp_server_not_allowed"), message)
    }

    /// 403 on the federated `/mcp` for a key granted no MCP server at all.
    pub fn mcp_no_servers() -> Self {
        let message = "This API key is not allowed to use any MCP server.".to_string();
        Self::new(403, "permission_error", Some("mcp_server_not_allowed"), message)
    }

    /// 501 on the federated `/mcp` where the filter has no sidecar, which serves it.
    pub fn mcp_federation_unavailable() -> Self {
        let message = "The federated /mcp endpoint is served by the ferrogate sidecar, which this filter \
                       is not configured with (sidecar_cluster); use /mcp/{server}"
            .to_string();
        Self::new(501, "invalid_request_error", Some("mcp_federation_unavailable"), message)
    }

    /// 501 where a host does not front MCP servers and A2A agents (the Traefik middleware).
    pub fn agent_paths_unsupported() -> Self {
        let message = "MCP servers and A2A agents are fronted by the proxy-wasm filter (Envoy, Istio, \
                       ferrogate serve); this Traefik middleware does not serve /mcp and /a2a paths"
            .to_string();
        Self::new(501, "invalid_request_error", Some("agent_paths_unsupported"), message)
    }

    /// 404 `a2a_agent_not_found`: no A2A agent of that name (for every caller alike).
    pub fn a2a_agent_not_found(agent: &str) -> Self {
        let message = format!("The A2A agent `{agent}` does not exist or you do not have access to it.");
        Self::new(404, "invalid_request_error", Some("a2a_agent_not_found"), message)
    }

    /// 403 `a2a_agent_not_allowed`: the agent exists but the key has no grant on it.
    pub fn a2a_agent_not_allowed(agent: &str) -> Self {
        let message = format!("This API key is not allowed to use the A2A agent `{agent}`.");
        Self::new(403, "permission_error", Some("a2a_agent_not_allowed"), message)
    }

    /// 403 for an A2A JSON-RPC method (or a path other than the agent's endpoint and card)
    /// the key's grant on the agent does not cover.
    pub fn a2a_method_not_allowed(agent: &str, method: &str) -> Self {
        let message = format!("This API key is not allowed to call `{method}` on the A2A agent `{agent}`.");
        Self::new(403, "permission_error", Some("a2a_method_not_allowed"), message)
    }

    /// 405 for a known path with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        let message = format!("Method {method} is not allowed for {path}");
        Self::new(405, "invalid_request_error", Some("method_not_allowed"), message)
    }

    /// 413 when the body exceeds `limit` bytes.
    pub fn payload_too_large(limit: usize) -> Self {
        let message = format!("Request body exceeds the configured limit of {limit} bytes.");
        Self::new(413, "invalid_request_error", Some("request_too_large"), message)
    }

    /// 431 when the request head (request line and headers) exceeds `limit` bytes.
    pub fn headers_too_large(limit: usize) -> Self {
        let message = format!("Request headers exceed the limit of {limit} bytes.");
        Self::new(431, "invalid_request_error", Some("request_header_fields_too_large"), message)
    }

    /// 501 for the Responses API's lifecycle calls (`GET`/`DELETE /v1/responses/{id}`,
    /// `.../cancel`, `.../input_items`): responses are not stored by the gateway.
    pub fn response_lifecycle_unsupported(method: &str, path: &str) -> Self {
        let message = format!(
            "{method} {path}: responses served through ferrogate are not stored, so they cannot be retrieved, \
             listed, cancelled or deleted here"
        );
        Self::new(501, "invalid_request_error", Some("response_lifecycle_unsupported"), message)
    }

    /// 400 for `cancel`: only background responses can be cancelled, and none run here.
    pub fn not_cancellable(id: &str) -> Self {
        let message = format!(
            "Response '{id}' cannot be cancelled: only responses created with 'background': true can be, \
             and this gateway runs none (it answers every response while the request is open)."
        );
        Self { param: Some("response_id"), ..Self::new(400, "invalid_request_error", None, message) }
    }

    /// 400 for `background: true`, which this gateway does not run.
    pub fn background_unsupported() -> Self {
        let message = "'background': true is not supported: this gateway answers every response while the \
                       request is open; omit it (or stream the response).";
        let e = Self::new(400, "invalid_request_error", Some("unsupported_parameter"), message.to_string());
        Self { param: Some("background"), ..e }
    }

    /// 400 for a response id that cannot be one (OpenAI's wording and `param`).
    pub fn bad_response_id(id: &str) -> Self {
        let shown: String = id.chars().take(64).collect();
        let message = format!("Invalid 'response_id': '{shown}'. Expected an ID that begins with 'resp_'.");
        Self { param: Some("response_id"), ..Self::new(400, "invalid_request_error", Some("invalid_value"), message) }
    }

    /// 404 for a stored response that does not exist, expired, was deleted or belongs to another
    /// key (the same answer for all four: no existence leak).
    pub fn response_not_found(id: &str) -> Self {
        Self::new(404, "invalid_request_error", None, format!("Response with id '{id}' not found."))
    }

    /// 400 for a `previous_response_id` (or a response before it in its chain) that does not
    /// exist, expired, was deleted or belongs to another key (the code OpenAI answers).
    pub fn previous_response_not_found(id: &str) -> Self {
        let message = format!("Previous response with id '{id}' not found.");
        let e = Self::new(400, "invalid_request_error", Some("previous_response_not_found"), message);
        Self { param: Some("previous_response_id"), ..e }
    }

    /// 400 for a chain of stored responses longer than `responses.max_chain_depth`.
    pub fn chain_too_deep(id: &str, max: u32) -> Self {
        let message = format!(
            "The conversation ending at response '{id}' is longer than {max} responses, the most this gateway \
             rebuilds; start a new conversation or send its items as input."
        );
        let e = Self::new(400, "invalid_request_error", Some("previous_response_chain_too_long"), message);
        Self { param: Some("previous_response_id"), ..e }
    }

    /// A guardrail refused the request (`input`) or the answer (`output`); names the rule,
    /// never what it matched. `reason`: what an external check said, if anything.
    pub fn guardrail_blocked(rule: &str, stage: &str, reason: Option<&str>) -> Self {
        let what = if stage == "output" { "The answer" } else { "The request" };
        let mut message = format!("{what} was blocked by guardrail {rule:?}.");
        if let Some(reason) = reason {
            message = format!("{message} {reason}");
        }
        Self::new(400, "invalid_request_error", Some("guardrail_blocked"), message)
    }

    /// A guardrail check that fails closed gave no verdict.
    pub fn guardrail_unavailable(rule: &str, why: &str) -> Self {
        let message = format!("Guardrail check {rule:?} gave no verdict ({why}); its policy refuses requests then.");
        Self::new(503, "api_error", Some("guardrail_unavailable"), message)
    }

    /// 429: a request or token limit has no room (`Retry-After` goes with it).
    pub fn rate_limited(message: String) -> Self {
        Self::new(429, "rate_limit_error", Some("rate_limit_exceeded"), message)
    }

    /// 429: a conversation has used its limit (nothing frees it: not to be retried).
    pub fn conversation_limit(message: String) -> Self {
        Self::new(429, "rate_limit_error", Some("conversation_limit_exceeded"), message)
    }

    /// 402: a USD budget is spent.
    pub fn budget_exhausted(message: String) -> Self {
        Self::new(402, "insufficient_quota", Some("insufficient_quota"), message)
    }

    /// 503, e.g. no configuration snapshot yet.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "server_error", Some("service_unavailable"), message.into())
    }

    /// An upstream's error answer carried to a client of another dialect: the status and the
    /// provider's message are kept, the type follows the status.
    pub fn from_upstream(status: u16, message: String) -> Self {
        let kind = match status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        Self::new(status, kind, None, message)
    }

    /// The OpenAI JSON body `{"error":{"message","type","param","code"}}`.
    pub fn body(&self) -> Vec<u8> {
        let envelope = ErrorEnvelope {
            error: ErrorBody { message: &self.message, kind: self.kind, param: self.param, code: self.code },
        };
        // Serialising these plain structs cannot fail; keep a valid body regardless.
        serde_json::to_vec(&envelope).unwrap_or_else(|_| {
            br#"{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}"#.to_vec()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_shape() {
        let v: serde_json::Value = serde_json::from_slice(&ApiError::model_not_found("x\"y").body()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "model_not_found");
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(v["error"]["message"], "The model `x\"y` does not exist or you do not have access to it.");
        let v: serde_json::Value = serde_json::from_slice(&ApiError::bad_request("no").body()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error":{"message":"no","type":"invalid_request_error","param":null,"code":null}})
        );
        assert_eq!(ApiError::payload_too_large(10).status, 413);
    }

    #[test]
    fn auth_and_permission_errors() {
        let v: serde_json::Value = serde_json::from_slice(&ApiError::model_not_allowed("gpt").body()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error":{
                "message":"This API key is not allowed to use the model `gpt`.",
                "type":"permission_error","param":"model","code":"model_not_allowed"}})
        );
        let e = ApiError::unauthorized("nope");
        assert_eq!((e.status, e.kind, e.code), (401, "invalid_request_error", Some("invalid_api_key")));
    }
}
