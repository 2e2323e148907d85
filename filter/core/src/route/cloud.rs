//! Where requests to the cloud kinds go, and what changes in their bodies:
//!
//! - Azure OpenAI: `/openai/deployments/{deployment}/{api}?api-version=…`, or the v1 API
//!   `/openai/v1/{api}` when no `api_version` is configured; the body is OpenAI's.
//! - Vertex AI: `/v1/projects/{project}/locations/{region}/publishers/{publisher}/models/{model}:{method}`.
//!   Gemini models take Gemini bodies as they are; Anthropic models (`claude-…`, or any id
//!   written `anthropic/…`) take a Messages body without `model` and with Vertex's
//!   `anthropic_version`, at `:rawPredict` or `:streamRawPredict`.
//! - Bedrock: Anthropic models ([`invoke::is_anthropic`]) take Messages bodies through
//!   InvokeModel (`/model/{escaped id}/invoke` or `/invoke-with-response-stream`, see
//!   [`crate::clouds::invoke`]); the others `/model/{escaped id}/converse` or `/converse-stream`,
//!   Converse bodies (always translated; the path comes from the translator's dialect).

use crate::clouds::invoke;
use crate::config::cloud::{Cloud, RawAwsKeys};
use crate::config::{Config, Provider, ProviderKind};
use crate::openai::ApiError;
use crate::translate::Outbound;

use super::{Api, RouteDecision};

/// The `anthropic_version` Vertex AI wants in Anthropic bodies.
pub const VERTEX_ANTHROPIC_VERSION: &str = "vertex-2023-10-16";

/// The dialect `provider` takes requests for `model` in (`None`: none the gateway writes).
pub(super) fn outbound(provider: &Provider, model: &str) -> Option<Outbound> {
    match provider.kind {
        ProviderKind::Vertex if vertex_model(model).0 == "anthropic" => Some(Outbound::Anthropic),
        ProviderKind::Bedrock if invoke::is_anthropic(model) => Some(Outbound::Anthropic),
        kind => Outbound::of(kind),
    }
}

/// `(publisher, model)` of a Vertex model id: `publisher/model` as written, else `anthropic`
/// for Claude models and `google` for the rest.
pub fn vertex_model(id: &str) -> (&str, &str) {
    match id.split_once('/') {
        Some((publisher, model)) => (publisher, model),
        None if id.starts_with("claude") => ("anthropic", id),
        None => ("google", id),
    }
}

/// The upstream path of a request in the client's own dialect to a cloud provider, and its
/// body when the cloud wants it changed (`body` is what would be sent otherwise).
pub(super) fn native(
    provider: &Provider,
    cloud: &Cloud,
    api: Api,
    model: &str,
    client_path: &str,
    body: &[u8],
) -> Result<(String, Option<Vec<u8>>), ApiError> {
    let prefix = provider.base_url.path_prefix.as_str();
    match cloud {
        Cloud::Azure { api_version } => Ok((azure_path(prefix, api_version.as_deref(), model, api.path()), None)),
        Cloud::Vertex { project, region } => {
            if api == Api::Messages {
                let (path, body) = vertex_raw_predict(&vertex_base(prefix, project, region, model), body)?;
                return Ok((path, Some(body)));
            }
            let base = vertex_base(prefix, project, region, model);
            let sse = super::paths::is_sse(client_path);
            let method = match (api, sse) {
                (Api::StreamGenerateContent, true) => ":streamGenerateContent?alt=sse",
                (Api::StreamGenerateContent, false) => ":streamGenerateContent",
                _ => ":generateContent",
            };
            Ok((format!("{base}{method}"), None))
        }
        Cloud::Bedrock { .. } if api == Api::Messages && invoke::is_anthropic(model) => {
            let (path, body) = bedrock_invoke(prefix, model, body)?;
            Ok((path, Some(body)))
        }
        // Converse is no client's dialect: requests to other models are always translated.
        Cloud::Bedrock { .. } => Err(not_served(provider)),
    }
}

/// The upstream path and body of a request translated into `outbound` for a cloud provider.
pub(super) fn translated(
    provider: &Provider,
    cloud: &Cloud,
    outbound: Outbound,
    model: &str,
    stream: bool,
    body: Vec<u8>,
) -> Result<(String, Vec<u8>), ApiError> {
    let prefix = provider.base_url.path_prefix.as_str();
    match (cloud, outbound) {
        (Cloud::Azure { api_version }, _) => {
            Ok((azure_path(prefix, api_version.as_deref(), model, outbound.path()), body))
        }
        (Cloud::Vertex { project, region }, Outbound::Anthropic) => {
            // The Messages encoder wrote `stream` exactly when the client asked for a stream.
            vertex_raw_predict(&vertex_base(prefix, project, region, model), &body)
        }
        (Cloud::Vertex { project, region }, _) => {
            let method = if stream { ":streamGenerateContent?alt=sse" } else { ":generateContent" };
            Ok((format!("{}{method}", vertex_base(prefix, project, region, model)), body))
        }
        (Cloud::Bedrock { .. }, Outbound::Anthropic) => bedrock_invoke(prefix, model, &body),
        (Cloud::Bedrock { .. }, outbound) => Ok((format!("{prefix}{}", outbound.upstream_path(model, stream)), body)),
    }
}

/// `body`, what goes upstream for `d`, with the betas of the client's `anthropic-beta` header
/// when `d` goes to Claude on Bedrock (the Bedrock requests not translated: InvokeModel reads
/// betas from the body, not from headers); `None` when nothing changes.
pub fn with_client_betas(
    config: &Config,
    d: &RouteDecision<'_>,
    body: &[u8],
    header: &[u8],
) -> Result<Option<Vec<u8>>, ApiError> {
    let bedrock = config.providers.get(d.provider_index).is_some_and(|p| p.kind == ProviderKind::Bedrock);
    if !bedrock || d.translation.is_some() {
        return Ok(None);
    }
    invoke::with_betas(body, header).map_err(|e| ApiError::bad_request(format!("The {e}.")))
}

/// The region and keys a Bedrock provider signs with, when it has keys.
pub(super) fn signing(provider: &Provider) -> Option<(&str, &RawAwsKeys)> {
    match &provider.cloud {
        Some(Cloud::Bedrock { region, keys: Some(keys) }) => Some((region.as_str(), keys)),
        _ => None,
    }
}

/// A 503 for a cloud provider the sidecar has not signed in to yet (its `credentials` have
/// given no token or keys so far): sending the request without would only earn a 401.
pub(super) fn check_signed_in(provider: &Provider) -> Result<(), ApiError> {
    let waiting = match &provider.cloud {
        Some(Cloud::Bedrock { keys, .. }) => keys.is_none() && provider.credential.is_none(),
        Some(_) => provider.signs_in && provider.credential.is_none(),
        None => false,
    };
    if waiting {
        return Err(ApiError::unavailable(format!(
            "The gateway has no credentials for provider '{}' yet: its sidecar could not sign in (see its log).",
            provider.name
        )));
    }
    Ok(())
}

fn not_served(provider: &Provider) -> ApiError {
    ApiError::bad_model_param(format!(
        "This API is not available for this model: its provider speaks the {} API",
        provider.kind.as_str()
    ))
}

/// `api_path` is an OpenAI path (`/v1/chat/completions`): Azure serves it below `/openai`.
fn azure_path(prefix: &str, api_version: Option<&str>, deployment: &str, api_path: &str) -> String {
    let tail = api_path.strip_prefix("/v1").unwrap_or(api_path);
    match api_version {
        Some(version) => format!("{prefix}/openai/deployments/{deployment}{tail}?api-version={version}"),
        None => format!("{prefix}/openai/v1{tail}"),
    }
}

fn vertex_base(prefix: &str, project: &str, region: &str, model: &str) -> String {
    let (publisher, model) = vertex_model(model);
    format!("{prefix}/v1/projects/{project}/locations/{region}/publishers/{publisher}/models/{model}")
}

/// The `:rawPredict` (or, for a body asking for a stream, `:streamRawPredict`) path below
/// `base` and the Messages body as Vertex takes it.
fn vertex_raw_predict(base: &str, body: &[u8]) -> Result<(String, Vec<u8>), ApiError> {
    let (body, stream) = vertex_anthropic_body(body)?;
    let method = if stream { ":streamRawPredict" } else { ":rawPredict" };
    Ok((format!("{base}{method}"), body))
}

/// The InvokeModel path below `prefix` and the Messages body as Bedrock takes it.
fn bedrock_invoke(prefix: &str, model: &str, body: &[u8]) -> Result<(String, Vec<u8>), ApiError> {
    let (body, stream) = invoke::body(body).map_err(|e| ApiError::bad_request(format!("The {e}.")))?;
    Ok((format!("{prefix}{}", invoke::path(model, stream)), body))
}

/// A Messages body as Vertex takes it: no `model` (it is in the path), Vertex's
/// `anthropic_version`; and whether it asks for a stream.
fn vertex_anthropic_body(body: &[u8]) -> Result<(Vec<u8>, bool), ApiError> {
    let mut doc: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("The body is not a JSON object: {e}")))?;
    doc.remove("model");
    doc.insert("anthropic_version".into(), VERTEX_ANTHROPIC_VERSION.into());
    let stream = doc.get("stream").and_then(serde_json::Value::as_bool).unwrap_or(false);
    let body = serde_json::to_vec(&doc).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((body, stream))
}

#[cfg(test)]
mod tests;
