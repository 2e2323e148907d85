//! The routing decision, as a pure function of the configuration and the request.
//!
//! [`classify`] runs on request headers (which API, or a local answer); [`route`] runs once
//! the whole body is buffered and says where the request goes and how it must be rewritten.
//! Any state (round-robin position, balancers, load signals) is passed in through [`Choose`],
//! never kept here.

use crate::auth::Caller;
use crate::config::cloud::RawAwsKeys;
use crate::config::{Config, Credential, Provider, ProviderKind, Resolved};
use crate::multipart;
use crate::openai::{self, ApiError};
use crate::translate::{self, Context, Inbound, Outbound, Pair};

/// An API the gateway forwards (OpenAI's, and Anthropic Messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// `POST /v1/chat/completions`.
    ChatCompletions,
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/embeddings`.
    Embeddings,
    /// `POST /v1/images/generations` (JSON).
    ImagesGenerations,
    /// `POST /v1/audio/speech` (JSON).
    AudioSpeech,
    /// `POST /v1/audio/transcriptions` (multipart form).
    AudioTranscriptions,
    /// `POST /v1/audio/translations` (multipart form).
    AudioTranslations,
    /// `POST /v1/messages` (Anthropic Messages).
    Messages,
    /// `POST /v1/messages/count_tokens`: answered here with an estimate
    /// ([`crate::translate::count`]), never forwarded.
    CountTokens,
    /// `POST /v1beta/models/{model}:generateContent` (Gemini; the model is in the path).
    GenerateContent,
    /// `POST /v1beta/models/{model}:streamGenerateContent` (Gemini).
    StreamGenerateContent,
    /// `POST /v1/responses` (OpenAI Responses; stateless through the gateway).
    Responses,
}

/// Every forwarded API, for path lookup.
const APIS: [Api; 10] = [
    Api::ChatCompletions,
    Api::Completions,
    Api::Embeddings,
    Api::ImagesGenerations,
    Api::AudioSpeech,
    Api::AudioTranscriptions,
    Api::AudioTranslations,
    Api::Messages,
    Api::CountTokens,
    Api::Responses,
];

impl Api {
    /// The API's name in metrics and logs (`chat_completions`, `messages`, ...).
    pub fn label(self) -> &'static str {
        match self {
            Api::ChatCompletions => "chat_completions",
            Api::Completions => "completions",
            Api::Embeddings => "embeddings",
            Api::ImagesGenerations => "images_generations",
            Api::AudioSpeech => "audio_speech",
            Api::AudioTranscriptions => "audio_transcriptions",
            Api::AudioTranslations => "audio_translations",
            Api::Messages => "messages",
            Api::CountTokens => "count_tokens",
            Api::GenerateContent => "generate_content",
            Api::StreamGenerateContent => "stream_generate_content",
            Api::Responses => "responses",
        }
    }

    /// The API path appended to the provider's `base_url` prefix.
    pub fn path(self) -> &'static str {
        match self {
            Api::ChatCompletions => "/v1/chat/completions",
            Api::Completions => "/v1/completions",
            Api::Embeddings => "/v1/embeddings",
            Api::ImagesGenerations => "/v1/images/generations",
            Api::AudioSpeech => "/v1/audio/speech",
            Api::AudioTranscriptions => "/v1/audio/transcriptions",
            Api::AudioTranslations => "/v1/audio/translations",
            Api::Messages => "/v1/messages",
            Api::CountTokens => "/v1/messages/count_tokens",
            Api::Responses => "/v1/responses",
            // The model and method follow (see `paths::gemini_model`).
            Api::GenerateContent | Api::StreamGenerateContent => "/v1beta/models",
        }
    }

    /// The dialect of a request body this API carries, when it can be translated.
    pub fn inbound(self) -> Option<Inbound> {
        match self {
            Api::ChatCompletions => Some(Inbound::OpenAiChat),
            Api::Messages => Some(Inbound::Anthropic),
            Api::GenerateContent | Api::StreamGenerateContent => Some(Inbound::Gemini),
            Api::Responses => Some(Inbound::Responses),
            _ => None,
        }
    }

    /// Whether a provider of `kind`, taking `outbound` for the model, takes this API's bodies
    /// in their dialect (a cloud provider may still want its path and a field changed).
    fn native_to(self, kind: ProviderKind, outbound: Option<Outbound>) -> bool {
        match self {
            Api::Messages | Api::CountTokens => outbound == Some(Outbound::Anthropic),
            Api::GenerateContent | Api::StreamGenerateContent => outbound == Some(Outbound::Gemini),
            // OpenAI itself serves the Responses API; other OpenAI-compatible servers get chat.
            Api::Responses => kind == ProviderKind::OpenAi,
            _ => kind.speaks_openai(),
        }
    }

    /// Whether the body is a multipart form (the model is a form field, not JSON).
    pub fn is_multipart(self) -> bool {
        matches!(self, Api::AudioTranscriptions | Api::AudioTranslations)
    }

    /// Whether the response can carry token usage worth tracking (text generation).
    pub fn is_generation(self) -> bool {
        matches!(
            self,
            Api::ChatCompletions
                | Api::Completions
                | Api::Messages
                | Api::GenerateContent
                | Api::StreamGenerateContent
                | Api::Responses
        )
    }

    /// Whether the model is named in the path rather than the body (Gemini).
    pub fn model_in_path(self) -> bool {
        matches!(self, Api::GenerateContent | Api::StreamGenerateContent)
    }

    fn from_path(path: &str) -> Option<Self> {
        if let Some((_, method)) = paths::gemini_model(path) {
            return match method {
                "generateContent" => Some(Api::GenerateContent),
                "streamGenerateContent" => Some(Api::StreamGenerateContent),
                _ => None,
            };
        }
        APIS.into_iter().find(|a| a.path() == path)
    }
}

/// What to do with a request, decided from its method and path alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint<'p> {
    /// `GET /v1/models`: answer locally with [`openai::models_list_for`].
    ListModels,
    /// `GET /v1/models/{id}`: answer locally with [`openai::model_entry_for`].
    GetModel(&'p str),
    /// Buffer the body, then [`route`].
    Forward(Api),
    /// A lifecycle call on a stored response, answered by the sidecar's response store.
    Stored(crate::stored::Lifecycle<'p>),
    /// A Conversations API call, answered by the sidecar's store.
    Conversations(crate::stored::conversations::Call<'p>),
    /// `/mcp` (or `/mcp/`): the federated endpoint over every MCP server the key may use,
    /// answered by the sidecar ([`crate::mcp::federation`]).
    McpFederated,
    /// `/mcp/{server}[/rest]`: an MCP server's endpoint (`rest` empty), or another path of
    /// its origin (`rest` starting with `/`, e.g. the HTTP+SSE transport's message endpoint).
    Mcp {
        /// The server's name as the path gives it (looked up by the filter).
        server: &'p str,
        /// What follows the name, query string excluded.
        rest: &'p str,
    },
    /// `/a2a/{agent}[/rest]`: an A2A agent's JSON-RPC endpoint (`rest` empty), or another
    /// path of its origin (its card at `/.well-known/agent-card.json`, REST routes).
    A2a {
        /// The agent's name as the path gives it.
        agent: &'p str,
        /// What follows the name, query string excluded.
        rest: &'p str,
    },
    /// Answer locally with this error (unknown path, wrong method).
    Reject(ApiError),
}

/// `path` split at its first `?`: the bare path and the query after it, if any. (A byte
/// search: `str::split_once` with a `char` pattern costs hundreds of instructions in wasm, and
/// every request splits its path three times.)
pub fn split_query(path: &str) -> (&str, Option<&str>) {
    match crate::bytes::find_byte(path.as_bytes(), b'?') {
        // `?` is ASCII, so both sides start and end on char boundaries.
        Some(i) => (path.get(..i).unwrap_or(path), path.get(i + 1..)),
        None => (path, None),
    }
}

/// Classifies a request by `:method` and `:path` (the query string is ignored).
pub fn classify<'p>(method: &str, path: &'p str) -> Endpoint<'p> {
    let (bare, _) = split_query(path);
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
    if bare.starts_with("/v1/responses/") {
        // Retrieving, listing or deleting needs the sidecar's store (the filter decides whether
        // it has one); a malformed id or a wrong method is answered here.
        return crate::stored::lifecycle(method, bare).map_or_else(Endpoint::Reject, Endpoint::Stored);
    }
    if bare == crate::stored::conversations::PATH || bare.starts_with("/v1/conversations/") {
        return crate::stored::conversations::classify(method, bare)
            .map_or_else(Endpoint::Reject, Endpoint::Conversations);
    }
    if bare == "/mcp" || bare == "/mcp/" {
        return Endpoint::McpFederated;
    }
    if let Some(tail) = bare.strip_prefix("/mcp/") {
        let (server, rest) = tail.find('/').map_or((tail, ""), |i| tail.split_at(i));
        if !server.is_empty() {
            return Endpoint::Mcp { server, rest };
        }
    }
    if let Some(tail) = bare.strip_prefix("/a2a/") {
        let (agent, rest) = tail.find('/').map_or((tail, ""), |i| tail.split_at(i));
        if !agent.is_empty() {
            return Endpoint::A2a { agent, rest };
        }
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
    /// The provider's index in [`Config::providers`] (a stream keeps this, not a copy of
    /// the name).
    pub provider_index: usize,
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
    /// `endpoint`'s index in the provider's `endpoints`.
    pub endpoint_index: Option<usize>,
    /// Credential header to send (replacing whatever the client sent).
    pub credential: Option<&'c Credential>,
    /// Bedrock: the region and keys the filter signs the request with (SigV4), once its body
    /// and path are final.
    pub aws: Option<(&'c str, &'c RawAwsKeys)>,
    /// The model name as the client sent it (for usage records and metrics).
    pub requested: String,
    /// Set when the provider speaks another dialect than the client: the body was translated
    /// and the answer must be translated back.
    pub translation: Option<(Pair, Context)>,
    /// The JSON body may have a top-level `"stream"` member; false when the one validation
    /// pass saw certainly none (the request cannot be streaming).
    pub may_stream: bool,
}

/// Decides the upstream for a buffered OpenAI-dialect request from an authenticated caller.
///
/// `caller` comes from [`Config::authenticate`] on the same `config`. Errors, in the order
/// checked: 400 (body/`model`), 404 unknown model, 403 not granted, 400 unsupported provider.
/// `path` is the client's `:path` (its query string is kept); `counter` drives round-robin
/// style choices and should increase by one per request ([`Rotation`]).
pub fn route<'c>(
    config: &'c Config,
    caller: Caller,
    api: Api,
    path: &str,
    body: &[u8],
    counter: u64,
) -> Result<RouteDecision<'c>, ApiError> {
    route_with(config, caller, api, path, body, &mut Rotation(counter))
}

/// The model name a request asks for: a Gemini path's, else the body's `"model"` (empty when
/// it names none).
pub fn requested_name(api: Api, path: &str, body: &[u8]) -> String {
    if api.model_in_path() {
        let (bare, _) = split_query(path);
        return paths::gemini_model(bare).map(|(m, _)| m.to_string()).unwrap_or_default();
    }
    openai::requested_model(body, api)
}

/// [`route`] with the target and endpoint choices made by `choose` (the filter's balancers).
pub fn route_with<'c>(
    config: &'c Config,
    caller: Caller,
    api: Api,
    path: &str,
    body: &[u8],
    choose: &mut dyn Choose,
) -> Result<RouteDecision<'c>, ApiError> {
    let mut target = Decider { config, caller, api, path, choose, original: Some(body), may_stream: true };
    if api.model_in_path() {
        let (bare, _) = split_query(path);
        let (model, _) = paths::gemini_model(bare).ok_or_else(|| ApiError::unknown_url("POST", bare))?;
        // Validated like every other body (a provider must never see what the gateway could
        // not read); it names no model, so nothing is rewritten in it.
        openai::check_object(body)?;
        return target.decide(model, |_| body.to_vec());
    }
    let field = openai::find_model(body)?;
    target.may_stream = field.may_stream;
    target.decide(field.value.as_ref(), |m| openai::rewrite_model(body, field.span.clone(), m))
}

/// [`route`] for any forwarded API: multipart forms (`/v1/audio/transcriptions`,
/// `/v1/audio/translations`) have their `model` form field read and rewritten in place;
/// everything else is JSON. `content_type` is the request's `content-type` header.
pub fn route_request<'c>(
    config: &'c Config,
    caller: Caller,
    api: Api,
    path: &str,
    content_type: Option<&[u8]>,
    body: &[u8],
    counter: u64,
) -> Result<RouteDecision<'c>, ApiError> {
    route_request_with(config, caller, api, path, content_type, body, &mut Rotation(counter))
}

/// [`route_request`] with the choices made by `choose`.
pub fn route_request_with<'c>(
    config: &'c Config,
    caller: Caller,
    api: Api,
    path: &str,
    content_type: Option<&[u8]>,
    body: &[u8],
    choose: &mut dyn Choose,
) -> Result<RouteDecision<'c>, ApiError> {
    if !api.is_multipart() {
        return route_with(config, caller, api, path, body, choose);
    }
    let boundary = content_type
        .and_then(multipart::boundary)
        .ok_or_else(|| ApiError::bad_request("Expected a multipart/form-data body with a boundary."))?;
    let span = multipart::find_model(body, boundary).map_err(|e| ApiError::bad_model_param(e.to_string()))?;
    let requested = std::str::from_utf8(body.get(span.clone()).unwrap_or_default())
        .map_err(|_| ApiError::bad_model_param("The model form field is not UTF-8."))?;
    let mut target = Decider { config, caller, api, path, choose, original: None, may_stream: false };
    target.decide(requested, |m| multipart::rewrite_model(body, span.clone(), m.as_bytes()))
}

/// A request's upstream body (`None`: the client's, unchanged), path and translation.
type Planned = (Option<Vec<u8>>, String, Option<(Pair, Context)>);

/// The parts of a routing decision that do not depend on the body's encoding.
struct Decider<'c, 'p> {
    config: &'c Config,
    caller: Caller,
    api: Api,
    path: &'p str,
    /// Picks the target and the pool endpoint.
    choose: &'p mut dyn Choose,
    /// The JSON body, for translation (multipart bodies are never translated).
    original: Option<&'p [u8]>,
    /// See [`RouteDecision::may_stream`].
    may_stream: bool,
}

impl<'c> Decider<'c, '_> {
    /// Resolves and authorizes `requested`, picks the upstream, and rewrites the body with
    /// `rewrite` only when the upstream model id differs from what the client sent.
    fn decide(
        &mut self,
        requested: &str,
        rewrite: impl FnOnce(&str) -> Vec<u8>,
    ) -> Result<RouteDecision<'c>, ApiError> {
        let resolved = self.config.authorize(self.caller, requested)?;
        if let Resolved::Pinned { model, .. } = resolved {
            // The caller's id goes upstream as it is (in the path, for Gemini): it must not be
            // able to move the request elsewhere on the provider. Configured ids are checked
            // when the configuration is validated.
            if let Some(why) = paths::unsafe_in_path(model) {
                return Err(ApiError::bad_model_param(format!("The model id '{model}' {why}.")));
            }
        }
        let (provider_index, provider, upstream_model, endpoint_index) =
            upstream(self.config, resolved, &mut *self.choose)
                .ok_or_else(|| ApiError::unavailable(format!("No healthy target is left for model '{requested}'.")))?;
        let endpoint = endpoint_index.and_then(|e| provider.endpoints.get(e)).map(String::as_str);
        cloud::check_signed_in(provider)?;
        let (body, path, translation) = match self.plan(provider, upstream_model)? {
            None => self.native(provider, requested, upstream_model, rewrite)?,
            Some(pair) => self.translate(pair, provider, requested, upstream_model)?,
        };
        let body = self.without_refused(provider, body);
        Ok(RouteDecision {
            provider: &provider.name,
            provider_index,
            authority: &provider.authority,
            path,
            body,
            upstream_model: upstream_model.to_string(),
            endpoint,
            endpoint_index,
            credential: provider.credential.as_ref(),
            aws: cloud::signing(provider),
            requested: requested.to_string(),
            translation,
            may_stream: self.may_stream,
        })
    }

    /// The body and path of a request in its own dialect: the model spliced in with `rewrite`
    /// when the upstream id differs, and a cloud provider's path (and body changes).
    fn native(
        &self,
        provider: &Provider,
        requested: &str,
        upstream_model: &str,
        rewrite: impl FnOnce(&str) -> Vec<u8>,
    ) -> Result<Planned, ApiError> {
        let splice = upstream_model != requested && !self.api.model_in_path();
        let body = splice.then(|| rewrite(upstream_model));
        let Some(c) = &provider.cloud else {
            return Ok((body, paths::verbatim(provider, self.api, upstream_model, self.path), None));
        };
        let sent = body.as_deref().or(self.original).unwrap_or_default();
        let (path, adapted) = cloud::native(provider, c, self.api, upstream_model, self.path, sent)?;
        Ok((adapted.or(body), path, None))
    }

    /// `body` without the fields a preset provider refuses (JSON bodies only).
    fn without_refused(&self, provider: &Provider, body: Option<Vec<u8>>) -> Option<Vec<u8>> {
        match provider.preset {
            Some(preset) if !self.api.is_multipart() => {
                let sent = body.as_deref().or(self.original).unwrap_or_default();
                crate::config::presets::strip_refused(preset, sent).or(body)
            }
            _ => body,
        }
    }

    /// The body, path and translation context of a request translated with `pair`.
    fn translate(
        &self,
        pair: Pair,
        provider: &Provider,
        requested: &str,
        upstream_model: &str,
    ) -> Result<Planned, ApiError> {
        let original = self.original.unwrap_or_default();
        let stream = self.api == Api::StreamGenerateContent;
        if stream && !paths::is_sse(self.path) {
            let msg = "Translated streams are server-sent events: add ?alt=sse to streamGenerateContent.";
            return Err(ApiError::bad_request(msg));
        }
        let asked = if self.api.model_in_path() { requested } else { "" };
        let (body, ctx) =
            pair.request_for_model(original, asked, stream, upstream_model).map_err(|e| pair.refusal(&e))?;
        let (path, body) = match &provider.cloud {
            Some(c) => cloud::translated(provider, c, pair.outbound, upstream_model, ctx.stream, body)?,
            None => {
                let api_path = pair.outbound.upstream_path(upstream_model, ctx.stream);
                (format!("{}{api_path}", provider.base_url.path_prefix), body)
            }
        };
        Ok((Some(body), path, Some((pair, ctx))))
    }

    /// `None` when the provider takes the client's body in its dialect; the translator
    /// otherwise.
    fn plan(&self, provider: &Provider, upstream_model: &str) -> Result<Option<Pair>, ApiError> {
        let outbound = cloud::outbound(provider, upstream_model);
        if self.api.native_to(provider.kind, outbound) {
            return Ok(None);
        }
        let pair =
            self.api.inbound().zip(outbound).and_then(|(inbound, outbound)| translate::pair_to(inbound, outbound));
        match pair {
            Some(pair) => Ok(Some(pair)),
            None => Err(ApiError::bad_model_param(format!(
                "{} is not available for this model: its provider speaks the {} API",
                self.api.path(),
                provider.kind.as_str()
            ))),
        }
    }
}

/// Provider, upstream model id and pool endpoint for a resolved name. `None` only if the
/// config's indexes were inconsistent (validation prevents it).
/// The provider (index and itself), model id and pool endpoint (index, one that exists) for
/// `resolved`.
fn upstream<'c: 'r, 'r>(
    config: &'c Config,
    resolved: Resolved<'r>,
    choose: &mut dyn Choose,
) -> Option<(usize, &'c Provider, &'r str, Option<usize>)> {
    let (provider, model, endpoint) = match resolved {
        Resolved::Model(i) => {
            // The model itself, else its fallbacks in order (see `failover::chain`).
            let (i, (t, endpoint)) = match choose.target(config, i) {
                Some(pick) => (i, pick),
                None => crate::failover::chain(config, i)
                    .into_iter()
                    .skip(1)
                    .find_map(|m| Some((m, choose.target(config, m)?)))?,
            };
            let model = config.models.get(i)?;
            let target = model.targets.get(t)?;
            let endpoint = endpoint.or_else(|| choose.endpoint(config, target.provider));
            (target.provider, target.model.as_str(), endpoint)
        }
        Resolved::Pinned { provider: p, model } => (p, model, choose.endpoint(config, p)),
    };
    let p = config.providers.get(provider)?;
    Some((provider, p, model, endpoint.filter(|&e| e < p.endpoints.len())))
}

mod choose;
pub mod cloud;
mod paths;

pub use choose::{pick_target, Choose, Rotation};
pub use paths::unsafe_in_path;

#[cfg(test)]
mod tests;
