//! The routing decision, as a pure function of the configuration and the request.
//!
//! [`classify`] runs on request headers (which API, or a local answer); [`route`] runs once
//! the whole body is buffered and says where the request goes and how it must be rewritten.
//! Any state (round-robin position, later load signals) is passed in, never kept here.

use crate::config::{Config, Credential, Model, Provider, Resolved, Target};
use crate::openai::{self, ApiError};

/// An OpenAI-dialect API the gateway forwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/embeddings`.
    Embeddings,
}

impl Api {
    /// The API path appended to the provider's `base_url` prefix.
    pub fn path(self) -> &'static str {
        match self {
            Api::ChatCompletions => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
            Api::Embeddings => "/v1/embeddings",
        }
    }

    fn from_path(path: &str) -> Option<Self> {
        [Api::ChatCompletions, Api::Completions, Api::Embeddings]
            .into_iter()
            .find(|a| a.path() == path)
    }
}

/// What to do with a request, decided from its method and path alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint<'p> {
    /// `GET /v1/models`: answer locally with [`openai::models_list`].
    ListModels,
    /// `GET /v1/models/{id}`: answer locally with [`openai::model_entry`].
    GetModel(&'p str),
    /// Buffer the body, then [`route`].
    Forward(Api),
    /// Answer locally with this error (unknown path, wrong method).
    Reject(ApiError),
}

/// Classifies a request by `:method` and `:path` (the query string is ignored).
pub fn classify<'p>(method: &str, path: &'p str) -> Endpoint<'p> {
    let bare = path.split_once('?').map_or(path, |(p, _)| p);
    if bare == "/v1/models" || bare.starts_with("/v1/models/") {
        if method != "GET" {
            return Endpoint::Reject(ApiError::method_not_allowed(method, bare));
        }
        return match bare.strip_prefix("/v1/models/") {
            Some(id) if !id.is_empty() => Endpoint::GetModel(id),
            Some(_) => Endpoint::Reject(ApiError::unknown_url(method, bare)),
            None => Endpoint::ListModels,
        };
    }
    match Api::from_path(bare) {
        Some(api) if method == "POST" => Endpoint::Forward(api),
        Some(_) => Endpoint::Reject(ApiError::method_not_allowed(method, bare)),
        None => Endpoint::Reject(ApiError::unknown_url(method, bare)),
    }
}

/// Where a request goes and how it is rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteDecision<'c> {
    /// Provider name, which is also the upstream cluster name.
    pub provider: &'c str,
    /// `:authority` for the upstream (`host` or `host:port` when the port is not the default).
    pub authority: &'c str,
    /// Upstream `:path`: base_url prefix + API path (+ the client's query string).
    pub path: String,
    /// Rewritten body, or `None` when the body goes upstream unchanged.
    pub body: Option<Vec<u8>>,
    /// The model id the provider receives.
    pub upstream_model: String,
    /// `host:port` from the provider's pool, for `x-gateway-destination-endpoint`.
    pub endpoint: Option<&'c str>,
    /// Credential header to send (replacing whatever the client sent).
    pub credential: Option<&'c Credential>,
}

/// Decides the upstream for a buffered OpenAI-dialect request.
///
/// `path` is the client's `:path` (its query string is kept); `counter` drives round-robin
/// style choices and should increase by one per request.
pub fn route<'c>(
    config: &'c Config,
    api: Api,
    path: &str,
    body: &[u8],
    counter: u64,
) -> Result<RouteDecision<'c>, ApiError> {
    let field = openai::find_model(body)?;
    let requested = field.value.as_ref();
    let (provider, upstream_model, endpoint) = match config.resolve(requested) {
        None => return Err(ApiError::model_not_found(requested)),
        Some(Resolved::Model(i)) => {
            let model = config
                .models
                .get(i)
                .ok_or_else(|| ApiError::model_not_found(requested))?;
            let target =
                pick_target(model, counter).ok_or_else(|| ApiError::model_not_found(requested))?;
            let provider = config
                .providers
                .get(target.provider)
                .ok_or_else(|| ApiError::model_not_found(requested))?;
            // Spread the pool independently of the target choice.
            let spread = counter / model.targets.len().max(1) as u64;
            (
                provider,
                target.model.as_str(),
                pick_endpoint(provider, spread),
            )
        }
        Some(Resolved::Pinned { provider, model }) => {
            let provider = config
                .providers
                .get(provider)
                .ok_or_else(|| ApiError::model_not_found(requested))?;
            (provider, model, pick_endpoint(provider, counter))
        }
    };
    if !provider.kind.speaks_openai() {
        let msg = format!(
            "translation from the OpenAI API to {} providers is not yet supported",
            provider.kind.as_str()
        );
        return Err(ApiError::bad_model_param(msg));
    }
    let new_body = (upstream_model != requested)
        .then(|| openai::rewrite_model(body, field.span.clone(), upstream_model));
    Ok(RouteDecision {
        provider: &provider.name,
        authority: &provider.authority,
        path: upstream_path(provider, api, path),
        body: new_body,
        upstream_model: upstream_model.to_string(),
        endpoint,
        credential: provider.credential.as_ref(),
    })
}

/// Picks a target by the model's strategy. Strategies that need load or cache signals rotate
/// like `round_robin` until those signals exist.
pub fn pick_target(model: &Model, counter: u64) -> Option<&Target> {
    use crate::config::Strategy::*;
    let n = model.targets.len() as u64;
    if n == 0 {
        return None;
    }
    match model.strategy {
        Priority => model.targets.first(),
        Weighted => {
            let total: u64 = model.targets.iter().map(|t| u64::from(t.weight)).sum();
            let mut r = counter % total.max(1);
            model.targets.iter().find(|t| {
                let hit = r < u64::from(t.weight);
                r = r.saturating_sub(u64::from(t.weight));
                hit
            })
        }
        RoundRobin | Random | LeastBusy | PowerOfTwo | ConsistentHash | CacheAware
        | PreciseCacheAware => model.targets.get(usize::try_from(counter % n).unwrap_or(0)),
    }
}

fn pick_endpoint(provider: &Provider, counter: u64) -> Option<&str> {
    let n = provider.endpoints.len() as u64;
    if n == 0 {
        return None;
    }
    let i = usize::try_from(counter % n).unwrap_or(0);
    provider.endpoints.get(i).map(String::as_str)
}

fn upstream_path(provider: &Provider, api: Api, client_path: &str) -> String {
    let prefix = &provider.base_url.path_prefix;
    match client_path.split_once('?') {
        Some((_, query)) => format!("{prefix}{}?{query}", api.path()),
        None => format!("{prefix}{}", api.path()),
    }
}

#[cfg(test)]
mod tests;
