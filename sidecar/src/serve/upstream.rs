//! The router half of `ferrogate serve`: turns released request headers into an upstream
//! request on the cluster the filter chose, and performs the filter's `dispatch_http_call`s.
//!
//! Connections are pooled per worker by hyper's client (keep-alive, HTTP/2 over TLS when the
//! upstream offers it via ALPN). Failures are reported the way Envoy's router reports them, as
//! replies with a status and a short text body, so the filter sees them in its response
//! callbacks.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use ferrogate_host::{Headers, HttpCallRequest, HttpCallResponse};
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::dns::GaiResolver;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::{Client, ResponseFuture};
use hyper_util::rt::TokioExecutor;

use super::body::ChannelBody;
use super::cluster::{LiveClusters, ENDPOINT_HEADER};
use super::egress::{GuardedConnector, PolicySource};
use super::headers::{method_of, response_to_filter, to_header_map, trailers_to_filter};

/// Largest callout response body kept (Envoy's async client buffers the whole response).
const CALLOUT_BODY_LIMIT: usize = 16 << 20;

/// A started upstream request.
pub type UpstreamFuture = Pin<Box<dyn Future<Output = Result<Response<Incoming>, UpstreamError>>>>;

/// Why an upstream request produced no response.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The cluster header is missing or names no cluster.
    #[error("no cluster {0:?}")]
    NoCluster(String),
    /// The request could not be built from the filter's headers.
    #[error("bad upstream request: {0}")]
    BadRequest(String),
    /// Connecting or talking to the upstream failed before a response head.
    #[error("upstream connect error or disconnect/reset before headers: {0}")]
    Connect(String),
    /// No response head within `--upstream-timeout-ms`.
    #[error("upstream request timeout")]
    Timeout,
}

/// How long an upstream may be silent, at each stage of an attempt (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpstreamTimeouts {
    /// Opening the connection (Envoy: the cluster's `connect_timeout`); a failure is a 502.
    pub connect: Option<Duration>,
    /// From the request's start to the response head (Envoy has no separate bound: its
    /// `stream_idle_timeout` covers this wait); past it the router answers 504.
    pub head: Option<Duration>,
    /// Between two chunks of the response body (Envoy: `stream_idle_timeout`); the stream's
    /// driver enforces it, the answer then ends as timed out.
    pub idle: Option<Duration>,
}

impl UpstreamTimeouts {
    /// From milliseconds, `0` meaning no limit.
    pub fn from_ms(connect: u64, head: u64, idle: u64) -> UpstreamTimeouts {
        let limit = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        UpstreamTimeouts { connect: limit(connect), head: limit(head), idle: limit(idle) }
    }
}

/// Per-worker upstream client.
pub struct Upstream {
    /// For the configured upstreams: connections checked against the egress policy.
    client: Client<HttpsConnector<GuardedConnector>, ChannelBody>,
    /// For clusters exempt from it (the in-process sidecar's).
    internal: Client<HttpsConnector<HttpConnector>, ChannelBody>,
    clusters: Arc<LiveClusters>,
    cluster_header: String,
    timeout: Option<Duration>,
}

impl Upstream {
    /// A client over `clusters`; `cluster_header` names the routing header the filter sets.
    pub fn new(
        clusters: Arc<LiveClusters>,
        cluster_header: String,
        timeouts: UpstreamTimeouts,
    ) -> std::io::Result<Upstream> {
        let live = clusters.clone();
        let policy: PolicySource = Arc::new(move || live.load().egress());
        let internal = pooled(http_connector(GaiResolver::new(), timeouts.connect))?;
        let client = pooled(GuardedConnector::new(policy, timeouts.connect))?;
        Ok(Upstream { client, internal, clusters, cluster_header, timeout: timeouts.head })
    }

    /// Sends `req` with the client its cluster calls for.
    fn send(&self, (req, guarded): (Request<ChannelBody>, bool)) -> ResponseFuture {
        if guarded {
            self.client.request(req)
        } else {
            self.internal.request(req)
        }
    }

    /// Starts the upstream request for released request `headers`.
    pub fn start(&self, headers: &Headers, body: ChannelBody) -> Result<UpstreamFuture, UpstreamError> {
        let cluster_name = headers.get_str(&self.cluster_header).unwrap_or_default();
        let fut = self.send(self.build(cluster_name, headers, body)?);
        let timeout = self.timeout;
        Ok(Box::pin(async move {
            let result = match timeout {
                Some(t) => tokio::time::timeout(t, fut).await.map_err(|_| UpstreamError::Timeout)?,
                None => fut.await,
            };
            result.map_err(|e| UpstreamError::Connect(error_chain(&e)))
        }))
    }

    /// The request for `cluster_name`, and whether its connection is checked against the
    /// egress policy.
    fn build(
        &self,
        cluster_name: &str,
        headers: &Headers,
        body: ChannelBody,
    ) -> Result<(Request<ChannelBody>, bool), UpstreamError> {
        let clusters = self.clusters.load();
        let cluster = clusters.get(cluster_name).ok_or_else(|| UpstreamError::NoCluster(cluster_name.to_string()))?;
        let endpoint = cluster.pick(headers.get_str(ENDPOINT_HEADER));
        let path = headers.get_str(":path").unwrap_or("/");
        let uri = format!("{}://{}{}", cluster.scheme, endpoint, path);
        let mut req = Request::new(body);
        *req.method_mut() = method_of(headers);
        *req.uri_mut() = uri.parse().map_err(|e| UpstreamError::BadRequest(format!("{uri}: {e}")))?;
        *req.headers_mut() = to_header_map(headers);
        // The routing header is for this proxy only (the Envoy configs remove it the same way).
        req.headers_mut().remove(self.cluster_header.as_str());
        let host = headers.get(":authority").filter(|a| !a.is_empty()).unwrap_or(endpoint.as_bytes());
        let host = http::HeaderValue::from_bytes(host).map_err(|e| UpstreamError::BadRequest(e.to_string()))?;
        req.headers_mut().insert(http::header::HOST, host);
        Ok((req, cluster.guarded))
    }

    /// Performs one `dispatch_http_call`. `None` means the call was reset (the guest sees
    /// `num_headers == 0`); timeouts and connect failures are answers, as in Envoy.
    pub async fn callout(&self, call: HttpCallRequest) -> Option<HttpCallResponse> {
        let timeout = (call.timeout_ms > 0).then(|| Duration::from_millis(u64::from(call.timeout_ms)));
        let req = match self.build(&call.cluster, &call.headers, ChannelBody::full(call.body)) {
            Ok(req) => req,
            Err(e) => return Some(reply_to_callout(&e)),
        };
        let exchange = async {
            let resp = self.send(req).await.map_err(|e| UpstreamError::Connect(error_chain(&e)))?;
            let (parts, body) = resp.into_parts();
            let collected = Limited::new(body, CALLOUT_BODY_LIMIT).collect().await;
            Ok::<_, UpstreamError>((parts, collected))
        };
        let outcome = match timeout {
            Some(t) => tokio::time::timeout(t, exchange).await.unwrap_or(Err(UpstreamError::Timeout)),
            None => exchange.await,
        };
        match outcome {
            Ok((parts, Ok(collected))) => {
                let trailers = collected.trailers().map(trailers_to_filter).unwrap_or_default();
                let body = collected.to_bytes().to_vec();
                Some(HttpCallResponse { headers: response_to_filter(parts.status, &parts.headers), body, trailers })
            }
            Ok((_, Err(_))) => None,
            Err(e) => Some(reply_to_callout(&e)),
        }
    }
}

/// A pooled client over `connector`, TLS (HTTP/2 by ALPN) for `https` clusters.
fn pooled<C>(connector: C) -> std::io::Result<Client<HttpsConnector<C>, ChannelBody>>
where
    HttpsConnector<C>: Connect + Clone + Send + Sync + 'static,
{
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider)?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(connector);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(64)
        .set_host(false)
        .build(https))
}

/// The TCP connector every upstream client uses, looking names up with `resolver`.
pub(super) fn http_connector<R>(resolver: R, connect_timeout: Option<Duration>) -> HttpConnector<R> {
    let mut http = HttpConnector::new_with_resolver(resolver);
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(connect_timeout);
    http.set_keepalive(Some(Duration::from_secs(60)));
    http
}

fn reply_to_callout(e: &UpstreamError) -> HttpCallResponse {
    let (headers, body) = router_reply(e);
    HttpCallResponse { headers, body, trailers: Headers::new() }
}

/// The reply the router sends in place of an upstream response (status, text body).
pub fn router_reply(e: &UpstreamError) -> (Headers, Vec<u8>) {
    let (status, body) = match e {
        UpstreamError::NoCluster(_) => ("503", format!("{e}")),
        UpstreamError::BadRequest(_) => ("500", format!("{e}")),
        UpstreamError::Connect(_) => ("502", format!("{e}")),
        UpstreamError::Timeout => ("504", "upstream request timeout".to_string()),
    };
    let headers = Headers::from_pairs([
        (":status", status.to_string()),
        ("content-type", "text/plain".to_string()),
        ("content-length", body.len().to_string()),
    ]);
    (headers, body.into_bytes())
}

/// An error with its sources (hyper's top-level message alone is "client error (Connect)").
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
