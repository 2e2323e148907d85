//! The OpenAI dialect: error bodies, the `/v1/models` listing, and the top-level `"model"`
//! scanner/rewriter ([`scan`]) the filter uses instead of a full JSON DOM.

pub mod scan;
mod validate;

use serde::Serialize;

use crate::auth::Caller;
use crate::config::{Config, Resolved};

pub use crate::error::ApiError;
pub use scan::{check_object, find_model, rewrite_model, ModelField, ScanError};

/// Whether a JSON request body asks for a stream (`"stream": true` at its top level).
pub fn requests_stream(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct StreamFlag {
        #[serde(default)]
        stream: Option<bool>,
    }
    serde_json::from_slice::<StreamFlag>(body).is_ok_and(|f| f.stream == Some(true))
}

/// The model the client named, for the records and metrics of a request routing refused;
/// empty when it cannot be read (a multipart form's is not looked for).
pub fn requested_model(body: &[u8], api: crate::route::Api) -> String {
    if api.is_multipart() {
        return String::new();
    }
    find_model(body).map(|f| f.value.into_owned()).unwrap_or_default()
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
    ModelEntry { id, object: "model", created: 0, owned_by: "ferrogate" }
}

/// `GET /v1/models`: the public model names and aliases `caller` may use, in OpenAI list
/// shape. `provider/model` addressing is not listed (the ids behind a provider are open-ended).
pub fn models_list_for(config: &Config, caller: Caller) -> Vec<u8> {
    let list = ModelList {
        object: "list",
        data: config.public_names().filter(|name| visible(config, caller, name)).map(entry).collect(),
    };
    serde_json::to_vec(&list).unwrap_or_else(|_| br#"{"object":"list","data":[]}"#.to_vec())
}

/// `GET /v1/models/{id}`: one entry, or 404 when `id` is not a public name or alias the caller
/// may use (404, not 403, so the endpoint cannot be used to probe what exists).
pub fn model_entry_for(config: &Config, caller: Caller, id: &str) -> Result<Vec<u8>, ApiError> {
    if !visible(config, caller, id) {
        return Err(ApiError::model_not_found(id));
    }
    serde_json::to_vec(&entry(id)).map_err(|_| ApiError::model_not_found(id))
}

/// A public name (model or alias, not `provider/model`) that `caller` may use.
fn visible(config: &Config, caller: Caller, name: &str) -> bool {
    match config.resolve(name) {
        Some(r @ Resolved::Model(_)) => config.may_use(caller, r, name),
        _ => false,
    }
}

#[cfg(test)]
mod tests;
