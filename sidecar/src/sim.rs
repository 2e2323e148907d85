//! `ferrogate sim`: a simulated LLM engine (vLLM-like) for demos, end-to-end tests and
//! benchmarks of the gateway, answering three dialects.
//!
//! It serves OpenAI's `/v1/models`, `/v1/chat/completions`, `/v1/completions` (plain and SSE)
//! and `/v1/embeddings`; Anthropic's `/v1/messages` (plain and SSE) and
//! `/v1/messages/count_tokens`; Gemini's `/v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent` (SSE with `alt=sse`, else a JSON array); vLLM's `/metrics`,
//! `/health`, `/tokenize` and `/reset_prefix_cache`, and (with `--kv-events`) its KV-cache
//! events over ZMQ; OpenAI's `/v1/moderations` (`sim/moderation.rs`); with `--lmcache-blocks`, an LMCache CPU tier (`/lmcache/occupancy`).
//! Output is deterministic and the same for every dialect; latency is configurable and faults
//! are injected from a seeded RNG (429/500, slow requests, connection resets).
//!
//! This file holds the options, the shared state, the router and the server loop. The model
//! is in `sim/reply.rs` (text and tool-call rules, with `sim/text.rs` and `sim/tools.rs`);
//! the dialects in `sim/openai.rs`, `sim/anthropic.rs` and `sim/gemini.rs`; pacing in
//! `sim/stream.rs`, metrics in `sim/metrics.rs`, the prefix cache in `sim/prefix.rs` (its
//! events in `sim/kv_events.rs`, token ids in `sim/tokens.rs`, its LMCache tier and the
//! prefill-time model in `sim/lmcache.rs`), LoRA adapters in
//! `sim/lora.rs`, faults in `sim/faults.rs` and error envelopes in `sim/error.rs`.

mod anthropic;
mod error;
mod faults;
mod gemini;
mod kv_events;
mod lmcache;
mod lmcache_worker;
mod lora;
mod metrics;
mod moderation;
mod openai;
mod prefix;
mod reply;
mod stream;
mod text;
mod tokens;
mod tools;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tower::ServiceExt as _;

pub use faults::{ITL_HEADER, KV_DROP_HEADER, RESET_HEADER, RETRY_AFTER_HEADER, STATUS_HEADER, TTFT_HEADER};
pub use kv_events::{encode_batch, KvEndpoints, KvEvent, KvEventsArgs, KvPublisher, KvSender, END_SEQ};
pub use lmcache::LmcacheArgs;
pub use lora::LORA_LOAD_HEADER;
pub use prefix::{CPU_HIT_HEADER, PREFILL_HEADER, PREFIX_HIT_HEADER};

/// Response header naming the sim instance that answered: its listening `host:port` (set by
/// [`run`]), so a benchmark behind a balancer can tell the replicas apart.
pub const ENDPOINT_HEADER: &str = "x-sim-endpoint";

/// Model served when no `--model` is given.
pub const DEFAULT_MODEL: &str = "sim-small";
/// How long a graceful shutdown waits for in-flight responses before giving up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Options of `ferrogate sim`.
#[derive(clap::Args, Clone, Debug)]
pub struct SimArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: std::net::SocketAddr,
    /// Model name to serve (repeatable); defaults to `sim-small`.
    #[arg(long = "model")]
    pub models: Vec<String>,
    /// Time to first token, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub ttft_ms: u64,
    /// Delay between tokens, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub itl_ms: u64,
    /// Default completion length in tokens (a request's max_tokens caps it).
    #[arg(long, default_value_t = 16)]
    pub output_tokens: u32,
    /// Fraction of inference requests answered with 429 (Retry-After: --retry-after-secs).
    #[arg(long, default_value_t = 0.0)]
    pub error_429_rate: f64,
    /// `Retry-After` seconds of injected 429s (x-sim-retry-after overrides it); 0 = none.
    #[arg(long, default_value_t = 1)]
    pub retry_after_secs: u64,
    /// Fraction of inference requests answered with 500.
    #[arg(long, default_value_t = 0.0)]
    pub error_500_rate: f64,
    /// Fraction of inference requests delayed by --slow-ms before the first token.
    #[arg(long, default_value_t = 0.0)]
    pub slow_rate: f64,
    /// Extra delay of slow requests, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    pub slow_ms: u64,
    /// Fraction of inference requests whose connection is dropped without a response.
    #[arg(long, default_value_t = 0.0)]
    pub reset_rate: f64,
    /// Seed of the fault-injection RNG (same seed and request order, same faults).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Simulated KV-cache size in 16-token blocks, for kv_cache_usage_perc; also the bound of
    /// the prefix cache (x-sim-prefix-hit, vllm:prefix_cache_*).
    #[arg(long, default_value_t = 100)]
    pub kv_blocks: u32,
    /// Requests running at once per model; more wait (vllm:num_requests_waiting). 0 = no limit.
    #[arg(long, default_value_t = 0)]
    pub max_running: u32,
    /// LoRA adapters kept loaded (least recently used out first); any model name other than
    /// a `--model` is then an adapter (x-sim-lora-load, vllm:lora_requests_info). 0 = no LoRA.
    #[arg(long, default_value_t = 0)]
    pub max_loras: u32,
    /// How long loading an adapter that is not loaded takes, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub lora_load_ms: u64,
    /// vLLM KV-cache events over ZMQ (`--kv-events`, `--kv-replay`, ...).
    #[command(flatten)]
    pub kv: KvEventsArgs,
    /// LMCache's CPU tier and the prefill-time model (`--lmcache-blocks`, ...).
    #[command(flatten)]
    pub lmcache: LmcacheArgs,
}

impl Default for SimArgs {
    /// The same values as the command-line defaults.
    fn default() -> Self {
        Self {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 8000)),
            models: Vec::new(),
            ttft_ms: 0,
            itl_ms: 0,
            output_tokens: 16,
            error_429_rate: 0.0,
            retry_after_secs: 1,
            error_500_rate: 0.0,
            slow_rate: 0.0,
            slow_ms: 5000,
            reset_rate: 0.0,
            seed: 0,
            kv_blocks: 100,
            max_running: 0,
            max_loras: 0,
            lora_load_ms: 0,
            kv: KvEventsArgs::default(),
            lmcache: LmcacheArgs::default(),
        }
    }
}

/// State shared by all handlers of one sim instance.
#[derive(Debug)]
struct SimState {
    /// Served models in `--model` order, with their engine counters.
    models: Vec<(String, Arc<metrics::ModelMetrics>)>,
    ttft: Duration,
    itl: Duration,
    output_tokens: u32,
    kv_blocks: u32,
    /// `--lmcache-blocks` (0: no LMCache tier).
    lmcache_blocks: u32,
    /// Loaded LoRA adapters, with `--max-loras`.
    adapters: Option<lora::Adapters>,
    faults: faults::FaultInjector,
    /// Where prefix-cache events go, with `--kv-events`/`--kv-replay`.
    kv_events: Option<KvSender>,
    /// Unix time the sim started, reported as the models' `created`.
    started: u64,
    next_id: AtomicU64,
    /// `/v1/moderations` counters.
    moderation: moderation::Counters,
}

impl SimState {
    fn new(args: &SimArgs, kv_events: Option<KvSender>, worker: Option<lmcache_worker::WorkerSender>) -> Self {
        let names = if args.models.is_empty() { vec![DEFAULT_MODEL.to_owned()] } else { args.models.clone() };
        let prefill = lmcache::Prefill::new(&args.lmcache);
        let counters = || {
            metrics::ModelMetrics::new(args.max_running, args.kv_blocks)
                .with_lmcache(args.kv_blocks, args.lmcache.lmcache_blocks, prefill)
                .with_events(kv_events.clone())
                .with_worker(worker.clone(), args.lmcache.lmcache_events)
        };
        let models = names.into_iter().map(|name| (name, Arc::new(counters()))).collect();
        Self {
            models,
            ttft: Duration::from_millis(args.ttft_ms),
            itl: Duration::from_millis(args.itl_ms),
            output_tokens: args.output_tokens,
            kv_blocks: args.kv_blocks,
            lmcache_blocks: args.lmcache.lmcache_blocks,
            adapters: (args.max_loras > 0)
                .then(|| lora::Adapters::new(args.max_loras, Duration::from_millis(args.lora_load_ms))),
            faults: faults::FaultInjector::new(args),
            kv_events,
            started: unix_now(),
            next_id: AtomicU64::new(1),
            moderation: moderation::Counters::default(),
        }
    }

    /// The counters of `name`, or 404 if the sim does not serve it. With LoRA on any other
    /// name is an adapter of the first model, which counts its requests.
    fn model(&self, name: &str) -> Result<Arc<metrics::ModelMetrics>, error::SimError> {
        let served = self.models.iter().find(|(served, _)| served == name);
        let adapter_base = || self.adapters.as_ref().and(self.models.first());
        served
            .or_else(adapter_base)
            .map(|(_, counters)| Arc::clone(counters))
            .ok_or_else(|| error::SimError::ModelNotFound(name.to_owned()))
    }

    /// Whether `name` is one of the base models (`--model`), not an adapter.
    fn is_base(&self, name: &str) -> bool {
        self.models.iter().any(|(served, _)| served == name)
    }

    /// A process-unique response id with OpenAI's `prefix` (`chatcmpl`, `cmpl`, `embd`).
    fn response_id(&self, prefix: &str) -> String {
        self.unique_id(&format!("{prefix}-"))
    }

    /// A process-unique id `<prefix>sim<12 hex digits>` (`msg_`, `toolu_`, `call_`, ...).
    fn unique_id(&self, prefix: &str) -> String {
        format!("{prefix}sim{:012x}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |elapsed| elapsed.as_secs())
}

/// Router for the sim (testable with tower oneshot).
///
/// Faults apply to the inference routes only; `/metrics`, `/health`, `/v1/models`,
/// `/v1/messages/count_tokens`, `/tokenize` and `/reset_prefix_cache` always answer, as a real
/// engine's would while it is overloaded. Unknown paths get a 404 in the dialect their path
/// suggests.
pub fn router(args: &SimArgs) -> Router {
    router_with_events(args, None)
}

/// [`router`] whose prefix caches publish their changes to `events` (see [`KvPublisher`]).
pub fn router_with_events(args: &SimArgs, events: Option<&KvPublisher>) -> Router {
    router_with(args, events, None)
}

/// [`router_with_events`] whose CPU tiers also report to an LMCache controller through
/// `worker` (`--lmcache-controller`).
fn router_with(args: &SimArgs, events: Option<&KvPublisher>, worker: Option<lmcache_worker::WorkerSender>) -> Router {
    let state = Arc::new(SimState::new(args, events.map(KvPublisher::sender), worker));
    let inference = Router::new()
        .route("/v1/chat/completions", post(openai::chat))
        .route("/v1/completions", post(openai::completions))
        .route("/v1/embeddings", post(openai::embeddings))
        .route("/v1/messages", post(anthropic::messages))
        .route("/v1beta/models/{*action}", post(gemini::generate))
        // Inside fault injection: a request refused with a simulated error loads no adapter.
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), lora::layer))
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), faults::inject));
    // Faults apply to moderation too; it names no served model, so no adapter either.
    let moderation = Router::new()
        .route("/v1/moderations", post(moderation::moderations))
        .route_layer(axum::middleware::from_fn_with_state(Arc::clone(&state), faults::inject));
    Router::new()
        .route("/v1/models", get(openai::models))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens))
        .route("/metrics", get(metrics::handler))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/tokenize", post(tokens::tokenize))
        .route("/reset_prefix_cache", post(metrics::reset_prefix_cache))
        .route("/lmcache/occupancy", get(lmcache::occupancy))
        .merge(inference)
        .merge(moderation)
        .fallback(not_found)
        .with_state(state)
}

/// Any other path: 404 in the error envelope of the dialect the path belongs to.
async fn not_found(uri: axum::http::Uri) -> Response<Body> {
    let path = uri.path();
    error::SimError::RouteNotFound(path.to_owned()).render(error::Dialect::of_path(path))
}

/// Serve until `shutdown` resolves (graceful), publishing KV-cache events if `args.kv` asks:
/// [`bind`], then [`Bound::serve`].
///
/// After `shutdown`, the listener closes, idle connections close, and in-flight responses get
/// up to ten seconds to finish; then the KV-event publisher stops and its sockets close. When
/// `run` returns, the listener's and the sockets' addresses can be bound again.
///
/// # Errors
/// A `--kv-events`/`--kv-replay` socket cannot be bound.
pub async fn run(
    args: SimArgs,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    bind(args).await?.serve(listener, shutdown).await
}

/// A simulator with its KV-event sockets bound and its LMCache worker started: all that can
/// fail before it serves.
pub struct Bound {
    args: SimArgs,
    events: Option<KvPublisher>,
    worker: Option<lmcache_worker::WorkerSender>,
}

/// Binds the `--kv-events`/`--kv-replay` sockets and starts the LMCache worker, so that a
/// caller learns of an address in use before anything is served.
///
/// # Errors
/// A `--kv-events`/`--kv-replay` socket cannot be bound.
pub async fn bind(args: SimArgs) -> std::io::Result<Bound> {
    let events = KvPublisher::start(&args.kv).await?;
    if let Some(endpoints) = events.as_ref().map(KvPublisher::endpoints) {
        tracing::info!(events = ?endpoints.events, replay = ?endpoints.replay, "sim: publishing KV-cache events");
    }
    let worker = args.lmcache.lmcache_controller.as_ref().map(|pull| {
        let config = lmcache_worker::WorkerConfig {
            pull: pull.clone(),
            reply: args.lmcache.lmcache_controller_reply.clone(),
            instance_id: args.lmcache.lmcache_instance_id.clone(),
            heartbeat_secs: args.lmcache.lmcache_heartbeat_secs,
        };
        tracing::info!(controller = %pull, instance = %config.instance_id, "sim: reporting to an LMCache controller");
        lmcache_worker::start(config)
    });
    Ok(Bound { args, events, worker })
}

impl Bound {
    /// Serves on `listener` until `shutdown` resolves, as [`run`] does.
    ///
    /// # Errors
    /// The listener fails.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let Bound { args, events, worker } = self;
        let served = serve(router_with(&args, events.as_ref(), worker), listener, shutdown).await;
        // Handlers still finishing past the grace period may hold senders: stop the publisher
        // explicitly, so its sockets are closed (their addresses free) when `run` returns.
        if let Some(events) = events {
            events.shutdown().await;
        }
        served
    }
}

/// Serve `app` (a [`router`]) on `listener` until `shutdown` resolves, as [`run`] does.
pub async fn serve(
    app: Router,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let endpoint = listener.local_addr().ok().and_then(|addr| HeaderValue::from_str(&addr.to_string()).ok());
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(error) => {
                    // Usually EMFILE or a connection aborted before accept: keep serving.
                    tracing::warn!(%error, "sim: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Every streamed frame is its own small write: with Nagle's algorithm on, each one
        // after the first would wait for the client's delayed ACK (about 40 ms on Linux).
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "sim: TCP_NODELAY not set");
        }
        let service = ResetAware { router: app.clone(), endpoint: endpoint.clone() };
        let connection = builder.serve_connection(TokioIo::new(stream), service).into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "sim: connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown()).await.is_err() {
        tracing::warn!("sim: in-flight requests still running after the shutdown grace period");
    }
    Ok(())
}

/// Per-connection hyper service running the router; a response marked as a simulated reset
/// becomes a service error, on which hyper closes the connection without writing a response.
/// Every response names the instance in [`ENDPOINT_HEADER`].
#[derive(Clone)]
struct ResetAware {
    router: Router,
    endpoint: Option<HeaderValue>,
}

type ServiceFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, faults::ConnectionReset>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ResetAware {
    type Response = Response<Body>;
    type Error = faults::ConnectionReset;
    type Future = ServiceFuture;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let router = self.router.clone();
        let endpoint = self.endpoint.clone();
        Box::pin(async move {
            let mut response = match router.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            };
            if let Some(endpoint) = endpoint {
                response.headers_mut().insert(ENDPOINT_HEADER, endpoint);
            }
            match response.extensions().get::<faults::ConnectionReset>() {
                Some(reset) => Err(*reset),
                None => Ok(response),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn responses_name_the_instance_and_the_prefix_hit() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(run(SimArgs::default(), listener, async {
            let _ = stopped.await;
        }));
        let client = reqwest::Client::new();
        let system = (0..20).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        let body = serde_json::json!({"model": DEFAULT_MODEL, "max_tokens": 1,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]});
        let mut hits = Vec::new();
        for _ in 0..2 {
            let response = client.post(format!("http://{addr}/v1/chat/completions")).json(&body).send().await.unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(response.headers()[ENDPOINT_HEADER], addr.to_string().as_str());
            hits.push(response.headers()[PREFIX_HIT_HEADER].to_str().unwrap().to_owned());
        }
        assert_eq!(hits, ["0/1", "1/1"]);
        let metrics = client.get(format!("http://{addr}/metrics")).send().await.unwrap();
        assert_eq!(metrics.headers()[ENDPOINT_HEADER], addr.to_string().as_str());
        let text = metrics.text().await.unwrap();
        assert!(text.contains("vllm:prefix_cache_hits_total{model_name=\"sim-small\"} 16\n"), "{text}");
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
    }
}
