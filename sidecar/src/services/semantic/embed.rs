//! The embedding call: a public model of the served configuration, resolved to its first
//! target whose provider speaks the OpenAI API (`openai`, `openai_compatible`), asked
//! `POST <base_url prefix>/v1/embeddings {"model": <upstream id>, "input": <text>}` with the
//! provider's credential, within [`EMBED_TIMEOUT`]. Anthropic and Gemini have no such route:
//! a model served only by them is [`EmbedError::Unsupported`] (every lookup misses).
//!
//! Failures are logged once per outage of each embedding model ([`Embedder::report`]).

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::config::{Config, Credential, Resolved};
use http::Request;
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Deserialize;

/// Longest an embedding may take, request and answer (the lookup then misses).
pub const EMBED_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest answer read (a 3,072-dimension vector is about 70 KB of JSON).
const ANSWER_LIMIT: usize = 4 << 20;

/// Why no vector came back.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// No public model (or `provider/model`) of that name is served.
    #[error("no model named {0:?} is served")]
    UnknownModel(String),
    /// None of the model's providers speaks the OpenAI API.
    #[error("model {0:?} has no openai or openai_compatible target (no /v1/embeddings)")]
    Unsupported(String),
    /// No configuration is served yet.
    #[error("no configuration served yet")]
    NoConfig,
    /// No HTTP client could be built (no TLS setup at all).
    #[error("no HTTP client")]
    NoClient,
    /// The request could not be built or sent, or the answer not read.
    #[error("{0}")]
    Transport(String),
    /// No answer within [`EMBED_TIMEOUT`].
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The provider refused.
    #[error("HTTP {0}")]
    Status(u16),
    /// The answer holds no usable vector.
    #[error("not an embeddings answer: {0}")]
    Answer(String),
}

/// Where one embedding request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `scheme://host:port/prefix/v1/embeddings`.
    pub url: String,
    /// The `Host` to send (the `base_url` authority, also for a pool member).
    pub authority: String,
    /// The provider's credential header, if it has a key.
    pub credential: Option<Credential>,
    /// The upstream model id.
    pub upstream: String,
}

/// Resolves `model` in `config` to its embeddings endpoint.
pub fn endpoint(config: &Config, model: &str) -> Result<Endpoint, EmbedError> {
    let targets: Vec<(usize, &str)> = match config.resolve(model) {
        Some(Resolved::Model(i)) => {
            let m = config.models.get(i).ok_or_else(|| EmbedError::UnknownModel(model.into()))?;
            m.targets.iter().map(|t| (t.provider, t.model.as_str())).collect()
        }
        Some(Resolved::Pinned { provider, model }) => vec![(provider, model)],
        None => return Err(EmbedError::UnknownModel(model.into())),
    };
    let (provider, upstream) = targets
        .into_iter()
        .filter_map(|(p, upstream)| config.providers.get(p).map(|p| (p, upstream)))
        .find(|(p, _)| p.kind.speaks_openai())
        .ok_or_else(|| EmbedError::Unsupported(model.into()))?;
    // A pool's members serve the same models as its base_url names; the first is asked.
    let host = provider.endpoints.first().unwrap_or(&provider.authority);
    let url = format!("{}://{host}{}/v1/embeddings", provider.base_url.scheme.as_str(), provider.base_url.path_prefix);
    Ok(Endpoint {
        url,
        authority: provider.authority.clone(),
        credential: provider.credential.clone(),
        upstream: upstream.to_string(),
    })
}

/// The first vector of an OpenAI embeddings answer.
pub fn parse(body: &[u8]) -> Result<Vec<f32>, EmbedError> {
    #[derive(Deserialize)]
    struct Answer {
        data: Vec<Datum>,
    }
    #[derive(Deserialize)]
    struct Datum {
        embedding: Vec<f32>,
    }
    let answer: Answer = serde_json::from_slice(body).map_err(|e| EmbedError::Answer(e.to_string()))?;
    let first = answer.data.into_iter().next().ok_or_else(|| EmbedError::Answer("empty `data`".into()))?;
    if first.embedding.is_empty() {
        return Err(EmbedError::Answer("empty embedding".into()));
    }
    Ok(first.embedding)
}

type HttpClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The embeddings client, and which embedding models are failing now.
pub struct Embedder {
    client: Option<HttpClient>,
    failing: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Embedder")
    }
}

impl Default for Embedder {
    fn default() -> Self {
        Self::new()
    }
}

impl Embedder {
    /// A client with pooled connections (a lookup should not pay a TCP or TLS handshake).
    pub fn new() -> Embedder {
        let client = super::super::targets::probe::connector(EMBED_TIMEOUT)
            .map(|c| Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(60)).build(c));
        Embedder { client, failing: Mutex::default() }
    }

    /// The vector of `text` by `model` as `config` serves it (not normalized).
    pub async fn embed(&self, config: &Config, model: &str, text: &str) -> Result<Vec<f32>, EmbedError> {
        let client = self.client.as_ref().ok_or(EmbedError::NoClient)?;
        let to = endpoint(config, model)?;
        let body = serde_json::json!({"model": to.upstream, "input": text}).to_string();
        let mut request = Request::post(&to.url)
            .header(http::header::HOST, &to.authority)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::USER_AGENT, "ferrogate-semantic-cache");
        if let Some(c) = &to.credential {
            request = request.header(c.name, c.value.as_str());
        }
        let request = request.body(Full::new(Bytes::from(body))).map_err(|e| EmbedError::Transport(e.to_string()))?;
        let call = async {
            let answer = client.request(request).await.map_err(|e| EmbedError::Transport(chain(&e)))?;
            let status = answer.status();
            let bytes = Limited::new(answer.into_body(), ANSWER_LIMIT)
                .collect()
                .await
                .map_err(|e| EmbedError::Transport(e.to_string()))?
                .to_bytes();
            if !status.is_success() {
                return Err(EmbedError::Status(status.as_u16()));
            }
            parse(&bytes)
        };
        tokio::time::timeout(EMBED_TIMEOUT, call).await.map_err(|_| EmbedError::Timeout(EMBED_TIMEOUT))?
    }

    /// Logs the first failure of an outage of `model` and its end, not every lookup between.
    pub fn report<T>(&self, model: &str, result: &Result<T, EmbedError>) {
        let mut failing = self.failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match result {
            Err(e) if failing.insert(model.to_string()) => {
                tracing::warn!(embedding_model = model, error = %e, "semantic cache: no embedding; lookups miss until it answers");
            }
            Ok(_) if failing.remove(model) => {
                tracing::info!(embedding_model = model, "semantic cache: embeddings answer again");
            }
            _ => {}
        }
    }

    /// Whether `model` failed last time.
    pub fn is_failing(&self, model: &str) -> bool {
        self.failing.lock().unwrap_or_else(std::sync::PoisonError::into_inner).contains(model)
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    crate::serve::upstream::error_chain(e)
}

#[cfg(test)]
#[path = "embed_tests.rs"]
mod tests;
