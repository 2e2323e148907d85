//! What gets probed, and the HTTP requests that probe it.
//!
//! Every provider yields one [`Target`] per pool endpoint, or one for its `base_url` authority
//! without a pool. Self-hosted engines (`openai_compatible`, and any provider with a pool)
//! are *active*: probed with `GET /health` (vLLM, SGLang) falling back to
//! `GET <prefix>/v1/models` (with the provider's credential) when `/health` is not served,
//! and scraped on `GET /metrics`. SaaS providers (`openai`, `anthropic`, `gemini` without a
//! pool) are listed but not probed.

use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::config::{Config, Credential, ProviderKind};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Largest `/metrics` page read (a vLLM page with every histogram is a few hundred KiB).
const METRICS_BODY_LIMIT: usize = 4 << 20;

/// One endpoint of one provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// Provider name.
    pub provider: String,
    /// `host:port` of a pool member, or the provider's `base_url` authority.
    pub endpoint: String,
    /// The provider's API family.
    pub kind: ProviderKind,
    /// Whether it is probed and scraped (a self-hosted engine).
    pub active: bool,
    /// `scheme://endpoint`.
    pub origin: String,
    /// The `base_url` path prefix (`""` when none), for `/v1/models`.
    pub path_prefix: String,
    /// The provider's credential header, sent with `/v1/models`.
    pub credential: Option<Credential>,
    /// Where its LMCache occupancy is read (the provider's `lmcache.occupancy`), if anywhere.
    pub occupancy_url: Option<String>,
}

/// Every endpoint of every provider of `config`, in file order.
pub fn targets(config: &Config) -> Vec<Target> {
    let mut out = Vec::new();
    for p in &config.providers {
        let active = p.kind == ProviderKind::OpenAiCompatible || !p.endpoints.is_empty();
        let pool = if p.endpoints.is_empty() { std::slice::from_ref(&p.authority) } else { &p.endpoints[..] };
        let occupancy = p.lmcache.as_ref().and_then(|l| l.occupancy.as_ref());
        for endpoint in pool {
            out.push(Target {
                occupancy_url: occupancy.map(|o| o.url(p.base_url.scheme.as_str(), endpoint)),
                provider: p.name.clone(),
                endpoint: endpoint.clone(),
                kind: p.kind,
                active,
                origin: format!("{}://{endpoint}", p.base_url.scheme.as_str()),
                path_prefix: p.base_url.path_prefix.clone(),
                credential: p.credential.clone(),
            });
        }
    }
    out
}

/// What a `/metrics` scrape got.
#[derive(Debug)]
pub enum Scrape {
    /// The page.
    Page(String),
    /// An answer that is not a metrics page (404, 401, ...): the endpoint has none.
    NoMetrics(StatusCode),
    /// No answer (connect error, timeout).
    Failed(String),
}

/// The HTTP client of probes and scrapes, with a per-request timeout.
#[derive(Clone)]
pub struct Prober {
    /// `None` only when no TLS setup could be built at all: probes are then off (fail open).
    client: Option<Client<HttpsConnector<HttpConnector>, Empty<Bytes>>>,
    timeout: Duration,
}

impl Prober {
    /// A client whose every request (head and body) must finish within `timeout`.
    pub fn new(timeout: Duration) -> Prober {
        let client = connector(timeout)
            .map(|https| Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(https));
        if client.is_none() {
            tracing::error!("targets: no TLS setup could be built; endpoints are not probed");
        }
        Prober { client, timeout }
    }

    /// Probes an active target: `Ok` when it answers as a live engine.
    ///
    /// `GET /health` with 2xx is up, 5xx is down. Any other status (the server has no such
    /// route) falls back to `GET <prefix>/v1/models`, where any answer below 500 counts as up
    /// (a 401 still proves the engine serves). No answer at all is down.
    pub async fn health(&self, t: &Target) -> Result<(), String> {
        let status = self.get(&format!("{}/health", t.origin), None).await?;
        if status.is_success() {
            return Ok(());
        }
        if status.is_server_error() {
            return Err(format!("GET /health: {status}"));
        }
        let models = format!("{}{}/v1/models", t.origin, t.path_prefix);
        match self.get(&models, t.credential.as_ref()).await? {
            s if s.is_server_error() => Err(format!("GET {}/v1/models: {s}", t.path_prefix)),
            _ => Ok(()),
        }
    }

    /// Scrapes `GET /metrics`.
    pub async fn metrics(&self, t: &Target) -> Scrape {
        match self.fetch(&format!("{}/metrics", t.origin), METRICS_BODY_LIMIT).await {
            Ok((status, _)) if !status.is_success() => Scrape::NoMetrics(status),
            Ok((_, body)) => Scrape::Page(String::from_utf8_lossy(&body).into_owned()),
            Err(e) => Scrape::Failed(e),
        }
    }

    /// Reads the target's LMCache occupancy (0..=1) from its source; `None` when it has none
    /// or the source says nothing usable ([`super::occupancy::parse`]).
    pub async fn occupancy(&self, t: &Target) -> Option<f64> {
        let url = t.occupancy_url.as_deref()?;
        match self.fetch(url, super::occupancy::BODY_LIMIT).await {
            Ok((status, body)) if status.is_success() => super::occupancy::parse(&body),
            Ok((status, _)) => {
                tracing::debug!(url, %status, "targets: occupancy source answered without a signal");
                None
            }
            Err(error) => {
                tracing::debug!(url, %error, "targets: occupancy source did not answer");
                None
            }
        }
    }

    /// `GET url`: its status and body (at most `limit` bytes), within the timeout.
    async fn fetch(&self, url: &str, limit: usize) -> Result<(StatusCode, Bytes), String> {
        let fetch = async {
            let client = self.client.as_ref().ok_or("no HTTP client")?;
            let response =
                client.request(request(url, None)?).await.map_err(|e| crate::serve::upstream::error_chain(&e))?;
            let status = response.status();
            if !status.is_success() {
                return Ok((status, Bytes::new()));
            }
            let body = Limited::new(response.into_body(), limit).collect().await;
            let body = body.map_err(|e| format!("reading {}: {e}", path_of(url)))?.to_bytes();
            Ok::<_, String>((status, body))
        };
        match tokio::time::timeout(self.timeout, fetch).await {
            Ok(result) => result,
            Err(_) => Err(format!("GET {}: no answer within {:?}", path_of(url), self.timeout)),
        }
    }

    /// The status of `GET url`, the body discarded; an error when there is no answer in time.
    async fn get(&self, url: &str, credential: Option<&Credential>) -> Result<StatusCode, String> {
        let req = request(url, credential)?;
        let Some(client) = &self.client else { return Ok(StatusCode::OK) };
        match tokio::time::timeout(self.timeout, client.request(req)).await {
            Ok(Ok(response)) => Ok(response.status()),
            Ok(Err(e)) => Err(format!("GET {}: {}", path_of(url), crate::serve::upstream::error_chain(&e))),
            Err(_) => Err(format!("GET {}: no answer within {:?}", path_of(url), self.timeout)),
        }
    }
}

/// HTTP and HTTPS (native roots; without any, HTTPS targets fail their probes, and HTTPS token
/// endpoints their fetches).
pub(crate) fn connector(timeout: Duration) -> Option<HttpsConnector<HttpConnector>> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(timeout));
    http.set_nodelay(true);
    with_tls(http)
}

/// `http` with TLS for `https` URLs, as [`connector`] has it.
pub(crate) fn with_tls<C>(http: C) -> Option<HttpsConnector<C>> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    match hyper_rustls::HttpsConnectorBuilder::new().with_provider_and_native_roots(provider.clone()) {
        Ok(b) => Some(b.https_or_http().enable_http1().wrap_connector(http)),
        Err(e) => {
            tracing::warn!(error = %e, "targets: no native TLS roots; https targets cannot be probed");
            let tls =
                rustls::ClientConfig::builder_with_provider(provider).with_safe_default_protocol_versions().ok()?;
            let tls = tls.with_root_certificates(rustls::RootCertStore::empty()).with_no_client_auth();
            Some(
                hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(tls)
                    .https_or_http()
                    .enable_http1()
                    .wrap_connector(http),
            )
        }
    }
}

fn request(url: &str, credential: Option<&Credential>) -> Result<Request<Empty<Bytes>>, String> {
    let mut builder = Request::get(url).header(http::header::USER_AGENT, "ferrogate-probe");
    if let Some(c) = credential {
        builder = builder.header(c.name, c.value.as_str());
    }
    builder.body(Empty::new()).map_err(|e| format!("{url}: {e}"))
}

/// The path of an absolute URL, for messages that must not repeat the host each time.
fn path_of(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    after_scheme.find('/').map_or("/", |i| &after_scheme[i..])
}
