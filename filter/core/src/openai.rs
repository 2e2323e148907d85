//! The OpenAI dialect: error bodies, the `/v1/models` listing, and the top-level `"model"`
//! scanner/rewriter ([`scan`]) the filter uses instead of a full JSON DOM.

pub mod scan;

use serde::Serialize;

use crate::config::Config;

pub use scan::{find_model, rewrite_model, ModelField, ScanError};

/// An error to return to the client, in OpenAI shape.
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
        Self {
            status,
            kind,
            code,
            param: None,
            message,
        }
    }

    /// 400 `invalid_request_error`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", None, message.into())
    }

    /// 400 about the `model` parameter.
    pub fn bad_model_param(message: impl Into<String>) -> Self {
        Self {
            param: Some("model"),
            ..Self::bad_request(message)
        }
    }

    /// 404 `model_not_found`.
    pub fn model_not_found(model: &str) -> Self {
        let message =
            format!("The model `{model}` does not exist or you do not have access to it.");
        Self {
            param: Some("model"),
            ..Self::new(
                404,
                "invalid_request_error",
                Some("model_not_found"),
                message,
            )
        }
    }

    /// 404 for a path the gateway does not serve.
    pub fn unknown_url(method: &str, path: &str) -> Self {
        Self::new(
            404,
            "invalid_request_error",
            Some("unknown_url"),
            format!("Invalid URL ({method} {path})"),
        )
    }

    /// 405 for a known path with the wrong method.
    pub fn method_not_allowed(method: &str, path: &str) -> Self {
        let message = format!("Method {method} is not allowed for {path}");
        Self::new(
            405,
            "invalid_request_error",
            Some("method_not_allowed"),
            message,
        )
    }

    /// 413 when the body exceeds `limit` bytes.
    pub fn payload_too_large(limit: usize) -> Self {
        let message = format!("Request body exceeds the configured limit of {limit} bytes.");
        Self::new(
            413,
            "invalid_request_error",
            Some("request_too_large"),
            message,
        )
    }

    /// 503, e.g. no configuration snapshot yet.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            503,
            "server_error",
            Some("service_unavailable"),
            message.into(),
        )
    }

    /// The JSON body `{"error":{"message","type","param","code"}}`.
    pub fn body(&self) -> Vec<u8> {
        let envelope = ErrorEnvelope {
            error: ErrorBody {
                message: &self.message,
                kind: self.kind,
                param: self.param,
                code: self.code,
            },
        };
        // Serialising these plain structs cannot fail; keep a valid body regardless.
        serde_json::to_vec(&envelope).unwrap_or_else(|_| br#"{"error":{"message":"internal error","type":"server_error","param":null,"code":null}}"#.to_vec())
    }
}

impl From<ScanError> for ApiError {
    fn from(e: ScanError) -> Self {
        match e {
            ScanError::ModelMissing | ScanError::ModelNotString | ScanError::DuplicateModel => {
                Self::bad_model_param(e.to_string())
            }
            ScanError::NotJson(_) | ScanError::NotObject => Self::bad_request(e.to_string()),
        }
    }
}

#[derive(Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: Vec<ModelEntry<'a>>,
}

#[derive(Serialize)]
struct ModelEntry<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
}

fn entry(id: &str) -> ModelEntry<'_> {
    // `created` is required by OpenAI clients; the gateway has no meaningful date for it.
    ModelEntry {
        id,
        object: "model",
        created: 0,
        owned_by: "ferrogate",
    }
}

/// `GET /v1/models`: every public model name and alias, in OpenAI list shape.
pub fn models_list(config: &Config) -> Vec<u8> {
    let list = ModelList {
        object: "list",
        data: config.public_names().map(entry).collect(),
    };
    serde_json::to_vec(&list).unwrap_or_else(|_| br#"{"object":"list","data":[]}"#.to_vec())
}

/// `GET /v1/models/{id}`: one entry, or 404 when `id` is not a public name or alias.
pub fn model_entry(config: &Config, id: &str) -> Result<Vec<u8>, ApiError> {
    if config.model_index(id).is_none() && !config.aliases.contains_key(id) {
        return Err(ApiError::model_not_found(id));
    }
    serde_json::to_vec(&entry(id)).map_err(|_| ApiError::model_not_found(id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_body_shape() {
        let v: serde_json::Value =
            serde_json::from_slice(&ApiError::model_not_found("x\"y").body()).unwrap();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "model_not_found");
        assert_eq!(v["error"]["param"], "model");
        assert_eq!(
            v["error"]["message"],
            "The model `x\"y` does not exist or you do not have access to it."
        );
        let v: serde_json::Value =
            serde_json::from_slice(&ApiError::bad_request("no").body()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"error":{"message":"no","type":"invalid_request_error","param":null,"code":null}})
        );
        assert_eq!(ApiError::payload_too_large(10).status, 413);
    }
}
