//! Per-request context: who is calling, where the request goes, what it cost.
//!
//! Request phase (this file): authenticate from the headers, hold them (Pause) while the body
//! is buffered; then ([`forward`]) ask `ferrogate_core::route` for a decision and apply it.
//! Response phase
//! ([`response`]): gateway headers, the usage tracker over the body, and at the end the usage
//! record and metrics ([`report`]).
//!
//! Header maps are only live while the filter is stopped on them (Envoy nulls them after
//! Continue and the SDK panics on the resulting BadArgument), so request headers are edited
//! only from callbacks that run while the headers are paused, and untrusted values are read
//! with the `_bytes` variants (the `String` ones panic on non-UTF-8).

mod a2a;
mod admission;
mod agent_limits;
mod balance;
mod cache;
mod chain;
mod cloud;
mod conversations;
mod cut;
mod delivery;
mod dialects;
mod epp;
mod failover;
mod flow_wait;
mod forward;
mod guard;
mod handle;
mod head;
mod keys;
mod known_keys;
mod lease_wait;
mod mcp;
mod proxy_error;
mod reply;
mod report;
mod response;
mod stored;
mod tokenize;

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use ferrogate_core::auth::{gemini_query_key, Caller};
use ferrogate_core::balance::Routing;
use ferrogate_core::config::Config;
use ferrogate_core::dialect::Dialect;
use ferrogate_core::headers::{self, CLIENT_CREDENTIALS};
use ferrogate_core::limits::Reservation;
use ferrogate_core::openai::{self, ApiError};
use ferrogate_core::plugin::PluginConfig;
use ferrogate_core::route::{classify, Api, Endpoint};
use ferrogate_core::translate::stream::StreamTranslator;
use ferrogate_core::translate::{self, Pair};
use ferrogate_core::usage::{Tracker, UsageDialect};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::{Action, MapType};

use crate::metrics::Metrics;
use crate::usage_sink::Outbox;
pub(crate) use flow_wait::FlowEvent;
pub(crate) use handle::StreamHandle;
use head::{usable_request_id, Head, Present};
pub(crate) use known_keys::KnownKeys;

use crate::routing::RoutingCell;

/// What the root context shares with every stream of its VM.
#[derive(Clone)]
pub(crate) struct Shared {
    /// Parsed plugin configuration.
    pub(crate) plugin: Option<Rc<PluginConfig>>,
    /// The configuration new requests start with: the inline one, then each snapshot from
    /// the sidecar (see `snapshot_feed`). A request keeps the one it started with.
    pub(crate) active: Rc<RefCell<Option<Rc<Config>>>>,
    /// Drives request-id generation.
    pub(crate) seq: Rc<Cell<u64>>,
    /// The balancers of the configuration in use (see `routing`).
    pub(crate) routing: Rc<RefCell<RoutingCell>>,
    /// The VM's random-number state (`routing::next_random`).
    pub(crate) rng: Rc<Cell<u64>>,
    /// The usage queue id, once registered.
    pub(crate) usage_queue: Rc<Cell<Option<u32>>>,
    /// Usage records of this VM not yet on the queue.
    pub(crate) outbox: Rc<RefCell<Outbox>>,
    /// Metric ids of this VM.
    pub(crate) metrics: Rc<RefCell<Metrics>>,
    /// Keys this VM accepted recently, for the configuration they were accepted under.
    pub(crate) keys: Rc<RefCell<KnownKeys>>,
    /// The VM's copy of the engines' KV block index (see `kv_feed`).
    pub(crate) kv: Rc<RefCell<ferrogate_core::kv::KvIndex>>,
    /// Lease asks of this VM's requests not yet sent (see `leases`).
    pub(crate) lease_asks: Rc<RefCell<Vec<ferrogate_core::limits::lease::Ask>>>,
    /// This VM's streams waiting in a flow-control queue (see `flow_wake`).
    pub(crate) flow_waiters: crate::flow_wake::WaitersCell,
    /// This VM's flow-control wake-up queue (0: none; see `flow_gate::register_waker`).
    pub(crate) flow_waker: Rc<Cell<u32>>,
    /// Counters this VM took grants into, swept for give-backs on the root's tick.
    pub(crate) lease_holdings: Rc<RefCell<ferrogate_core::limits::lease::Holdings>>,
}

/// Where a routed request went.
pub(crate) struct Routed {
    /// Index into the stream's config's providers (see [`Stream::provider_name`]).
    provider: usize,
    upstream_model: String,
}

/// One HTTP stream.
pub(crate) struct Stream {
    id: u32,
    /// The stream's own cell, for the flow-control registry (see [`StreamHandle`]).
    me: std::rc::Weak<RefCell<Stream>>,
    shared: Shared,
    /// The configuration this request started with, and its balancers.
    config: Option<Rc<Config>>,
    routing: Option<Rc<RefCell<Routing>>>,
    /// `x-session-id`, for the balancer.
    session: Option<String>,
    /// An endpoint-picker host's subset and fallbacks (`None`: not asked, the usual case).
    epp: Option<Box<epp::EppAsk>>,
    /// The balancer's pick, counted in flight until the stream ends.
    pick: Option<balance::Pick>,
    /// Set while a forwarded request waits for its body.
    api: Option<Api>,
    /// Error body shape, from the client path.
    dialect: Dialect,
    /// Set by authentication at header time; `Open` grants nothing under a keyed config.
    caller: Caller,
    /// The request headers as the host serialized them, kept (not copied from) until the
    /// body is routed, and where the client's `:path` and `content-type` sit in them.
    head_map: Vec<u8>,
    path: std::ops::Range<usize>,
    content_type: Option<std::ops::Range<usize>>,
    /// Where `anthropic-beta` sits in the head, when sent; read at routing.
    anthropic_beta: Option<std::ops::Range<usize>>,
    /// Where `x-ferrogate-token-ids` sits in the head, when sent; read at routing.
    token_ids_span: Option<std::ops::Range<usize>>,
    /// The prompt's token ids, for `precise_cache_aware` (empty: none sent).
    token_ids: Vec<u32>,
    /// The `kv_tokenize` call, when one was made.
    tokenize: Option<tokenize::Tokenize>,
    request_id: Option<String>,
    /// The id was made here (the client sent none usable), so the upstream must be told.
    request_id_generated: bool,
    /// Request headers that must be removed or overwritten before forwarding.
    present: Present,
    /// The model name as the client sent it.
    model_requested: String,
    /// Total bytes buffered so far (the last `body_size`).
    body_size: usize,
    routed: Option<Routed>,
    /// The gateway asked the upstream for usage the client did not ask for: hide it.
    hide_usage: bool,
    /// The provider speaks another dialect: its answer is buffered and translated back.
    translation: Option<(Pair, translate::Context)>,
    /// What the request holds on its limits until it ends.
    reservation: Option<Reservation>,
    /// The reservation was taken from leases (settled with charges beyond them).
    leased: bool,
    /// Set while the request waits for a lease top-up.
    lease_wait: Option<lease_wait::LeaseWait>,
    /// Set while the request waits in a flow-control queue.
    flow: Option<flow_wait::FlowWait>,
    /// What the last routing's flow-control gate said, when it held the request.
    flow_pending: Option<flow_wait::FlowOutcome>,
    /// Time spent in flow-control queues, ns.
    queued_ns: u64,
    /// Set when the key cuts streams that overrun its limits.
    overrun: Option<cut::Guard>,
    /// The client's and the upstream's stream dialects, for an API that streams text.
    shapes: Option<(ferrogate_core::translate::Inbound, ferrogate_core::translate::Inbound)>,
    /// What a successful streamed answer delivered ([`delivery`]).
    meter: Option<ferrogate_core::limits::cut::Meter>,
    /// The upstream ended or failed the answer before its end.
    upstream_failed: bool,
    /// Set while a translated stream flows.
    stream_translator: Option<StreamTranslator>,
    /// Bedrock InvokeModel's event-stream answer turned into Anthropic's server-sent events,
    /// before anything else reads it.
    reframer: Option<ferrogate_core::clouds::invoke::Reframer>,
    /// The dialect of the upstream's answer, for the usage tracker.
    usage_dialect: UsageDialect,
    tracker: Option<Tracker>,
    /// The response is an event stream.
    streamed: bool,
    started_ns: u64,
    first_byte_ns: Option<u64>,
    status: u16,
    response_complete: bool,
    /// Time spent inside this filter's callbacks.
    overhead_ns: u64,
    /// When the running callback started (see `timed`): also the clock reading for what
    /// that callback records (first token, passive health), saving a hostcall each.
    callback_start_ns: u64,
    /// Failover and passive health ([`failover`]).
    attempt: failover::Attempt,
    /// The key of the provider's pool the request went out with ([`keys`]).
    key_pick: Option<keys::KeyPick>,
    /// The API, as metrics name it (`unknown` until the path is classified).
    api_label: &'static str,
    /// The status of the filter's own answer, when it gave one.
    local_status: Option<u16>,
    /// The answer is the proxy's own text error, held to be rewritten ([`proxy_error`]).
    proxy_error: bool,
    /// Why the filter answered with an error (the error's code, else its type).
    reason: Option<&'static str>,
    /// The API, once the path is classified (for the GenAI attributes).
    api_kind: Option<Api>,
    /// The client's output cap, read only when the GenAI attributes are on.
    max_tokens: Option<u64>,
    /// The client's `traceparent`, for the calls this request makes.
    traceparent: Option<String>,
    /// The client's `User-Agent`, bounded, for the usage record: copied only for the
    /// endpoints that may leave one.
    user_agent: Option<String>,
    /// The copy of a Responses request and its answer, for the response store ([`stored`]).
    capture: Option<Box<stored::Capture>>,
    /// The response store's lifecycle call this request waits for.
    lifecycle_call: Option<u32>,
    /// The stored conversation a Responses follow-up continues ([`chain`]).
    chain: Option<Box<chain::ChainState>>,
    /// The conversation went upstream rebuilt from the store (not continued natively): the
    /// usage record says so, since its prompt tokens then include the chain.
    chain_rebuilt: bool,
    /// A Conversations API call waiting for its body ([`conversations`]).
    conversation: Option<Box<conversations::Pending>>,
    /// An MCP request ([`mcp`]).
    mcp: Option<Box<mcp::McpState>>,
    /// An A2A request ([`a2a`]).
    a2a: Option<Box<a2a::A2aState>>,
    /// A request to the federated `/mcp`, handed to the sidecar.
    federated_mcp: bool,
    /// Guardrails of the request, when a policy applies ([`guard`]).
    guard: Option<Box<guard::GuardState>>,
    /// The request body was replaced (guardrails): its framing headers must follow.
    body_rewritten: bool,
    /// The response cache's state, when a `cache:` policy applies ([`cache`]).
    cache: Option<Box<cache::CacheState>>,
}

impl Stream {
    pub(crate) fn new(id: u32, shared: Shared) -> Self {
        Self {
            id,
            me: std::rc::Weak::new(),
            shared,
            config: None,
            routing: None,
            session: None,
            epp: None,
            pick: None,
            api: None,
            dialect: Dialect::OpenAi,
            caller: Caller::Open,
            head_map: Vec::new(),
            path: 0..0,
            content_type: None,
            anthropic_beta: None,
            token_ids_span: None,
            token_ids: Vec::new(),
            tokenize: None,
            request_id: None,
            request_id_generated: false,
            present: Present::default(),
            model_requested: String::new(),
            body_size: 0,
            routed: None,
            hide_usage: false,
            translation: None,
            stream_translator: None,
            reframer: None,
            reservation: None,
            leased: false,
            lease_wait: None,
            flow: None,
            flow_pending: None,
            queued_ns: 0,
            overrun: None,
            shapes: None,
            meter: None,
            upstream_failed: false,
            usage_dialect: UsageDialect::OpenAi,
            tracker: None,
            streamed: false,
            started_ns: 0,
            first_byte_ns: None,
            status: 0,
            response_complete: false,
            overhead_ns: 0,
            callback_start_ns: 0,
            attempt: failover::Attempt::default(),
            key_pick: None,
            api_label: ferrogate_core::metrics::UNKNOWN,
            local_status: None,
            proxy_error: false,
            reason: None,
            api_kind: None,
            max_tokens: None,
            traceparent: None,
            user_agent: None,
            capture: None,
            lifecycle_call: None,
            chain: None,
            chain_rebuilt: false,
            conversation: None,
            mcp: None,
            a2a: None,
            federated_mcp: false,
            guard: None,
            body_rewritten: false,
            cache: None,
        }
    }

    /// The provider the request was routed to; empty when it was not.
    fn provider_name(&self) -> &str {
        let provider = self.routed.as_ref().and_then(|r| self.config.as_deref()?.providers.get(r.provider));
        provider.map_or("", |p| p.name.as_str())
    }

    fn now_nanos(&self) -> u64 {
        crate::raw::now_nanos()
    }

    fn next_seq(&self) -> u64 {
        let n = self.shared.seq.get();
        self.shared.seq.set(n.wrapping_add(1));
        n
    }

    /// Runs `f`, adding its duration to the overhead reported in `x-ferrogate-overhead-us`.
    fn timed(&mut self, f: impl FnOnce(&mut Self) -> Action) -> Action {
        let start = self.now_nanos();
        self.callback_start_ns = start;
        let action = f(self);
        self.overhead_ns += self.now_nanos().saturating_sub(start);
        action
    }

    /// Authenticates from the credential headers (before they are removed), else from a
    /// Gemini path's `?key=`.
    fn authenticate(&mut self, config: &Rc<Config>, head: &Head) -> Result<(), ApiError> {
        let key = head.client_key().or_else(|| gemini_query_key(head.path));
        let now_secs = i64::try_from(self.started_ns / 1_000_000_000).unwrap_or(i64::MAX);
        let mut known = self.shared.keys.borrow_mut();
        self.caller = config.authenticate_memo(key, now_secs, known.for_config(config))?;
        Ok(())
    }

    fn start(&mut self, head: &Head) {
        // The request starts when its first callback did.
        self.started_ns = self.callback_start_ns;
        self.request_id = head.request_id.filter(|id| usable_request_id(id)).map(str::to_string);
        if self.request_id.is_none() {
            self.request_id = Some(headers::generate_request_id(self.started_ns, self.next_seq()));
            self.request_id_generated = true;
        }
    }

    fn on_headers(&mut self, end_of_stream: bool) -> Action {
        let map = crate::raw::header_map(MapType::HttpRequestHeaders);
        let head = Head::from_map(&map);
        self.dialect = Dialect::from_path(head.path);
        self.start(&head);
        if self.shared.plugin.is_none() {
            return self.reply_error(&ApiError::unavailable("ferrogate is not configured"));
        }
        let Some(config) = self.shared.active.borrow().clone() else {
            return self.reply_error(&ApiError::unavailable("no configuration snapshot yet"));
        };
        self.routing = Some(self.shared.routing.borrow_mut().for_config(&config));
        self.session = head.session.map(str::to_string);
        self.traceparent = head.traceparent.map(str::to_string);
        self.take_failover(head.tried, head.attempt);
        self.take_epp(head.epp);
        self.config = Some(config.clone());
        let config = &config;
        let endpoint = classify(head.method, head.path);
        self.api_label = match &endpoint {
            Endpoint::ListModels | Endpoint::GetModel(_) => "models",
            Endpoint::Forward(api) => {
                self.api_kind = Some(*api);
                api.label()
            }
            Endpoint::Stored(_) | Endpoint::Conversations(_) => Api::Responses.label(),
            Endpoint::Mcp { .. } | Endpoint::McpFederated => ferrogate_core::metrics::MCP,
            Endpoint::A2a { .. } => ferrogate_core::metrics::A2A,
            Endpoint::Reject(_) => ferrogate_core::metrics::UNKNOWN,
        };
        // With keys, every call needs one, even to a path that does not exist: an
        // unauthenticated caller learns nothing about what is served here.
        if let Err(e) = self.authenticate(config, &head) {
            return self.reply_error(&e);
        }
        if matches!(endpoint, Endpoint::Forward(_) | Endpoint::Mcp { .. } | Endpoint::A2a { .. }) {
            self.user_agent = head.user_agent.map(ferrogate_core::usage::bounded_user_agent);
        }
        match endpoint {
            Endpoint::ListModels => self.reply(200, &openai::models_list_for(config, self.caller)),
            Endpoint::GetModel(id) => match openai::model_entry_for(config, self.caller, id) {
                Ok(body) => self.reply(200, &body),
                Err(e) => self.reply_error(&e),
            },
            Endpoint::Reject(e) => self.reply_error(&e),
            Endpoint::Mcp { server, rest } => self.start_mcp(config, server, rest, &head, &map, end_of_stream),
            Endpoint::McpFederated => self.start_mcp_federated(config, &head),
            Endpoint::A2a { agent, rest } => self.start_a2a(config, agent, rest, &head, &map, end_of_stream),
            Endpoint::Stored(call) => self.start_lifecycle(config, call, head.method, head.path),
            Endpoint::Conversations(call) => self.start_conversations(call, head.method, head.path, end_of_stream),
            Endpoint::Forward(_) if end_of_stream => {
                self.reply_error(&ApiError::bad_request("The request body is empty."))
            }
            Endpoint::Forward(api) => {
                // The client's key is never sent upstream.
                let p = head.present;
                for (name, present) in CLIENT_CREDENTIALS.into_iter().zip(head.credentials_present()) {
                    if present {
                        self.set_http_request_header(name, None);
                    }
                }
                if p.token_ids {
                    // Never sent upstream; read when the request is routed.
                    self.set_http_request_header(ferrogate_core::kv::TOKEN_IDS_HEADER, None);
                }
                self.present = p;
                self.api = Some(api);
                self.path = head::span_in(&map, head.path.as_bytes());
                self.content_type = head.content_type.map(|c| head::span_in(&map, c));
                self.token_ids_span = head.token_ids.map(|t| head::span_in(&map, t));
                self.anthropic_beta = head.anthropic_beta.map(|b| head::span_in(&map, b));
                self.head_map = map;
                // Hold the headers: with allow_on_headers_stop_iteration the body still arrives here.
                Action::Pause
            }
        }
    }

    fn on_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Some(plugin) = self.shared.plugin.clone() else {
            return Action::Continue;
        };
        if let Some(action) = self.conversation_body(body_size, end_of_stream) {
            return action;
        }
        if let Some(action) = self.agent_body(body_size, end_of_stream, plugin.max_body_bytes) {
            return action;
        }
        if self.api.is_none() {
            return Action::Continue;
        }
        self.body_size = body_size;
        if body_size > plugin.max_body_bytes {
            return self.reply_error(&ApiError::payload_too_large(plugin.max_body_bytes));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.finish(&plugin)
    }
}

impl Context for Stream {
    fn on_http_call_response(&mut self, token_id: u32, num_headers: usize, body_size: usize, _trailers: usize) {
        if self.on_cache_answer(token_id, num_headers, body_size) {
            // A response-cache lookup or store ([`cache`]).
        } else if self.on_guard_answer(token_id, num_headers, body_size) {
            // A guardrail check ([`guard`]).
        } else if self.on_store_answer(token_id, num_headers, body_size) {
            // The response store's call ([`stored`]).
        } else if self.is_chain_call(token_id) {
            self.on_chain(num_headers, body_size);
        } else if self.lease_wait.as_ref().is_some_and(|w| w.token == token_id) {
            self.on_lease_answer(num_headers, body_size);
        } else {
            self.on_tokenized(token_id, num_headers, body_size);
        }
    }
}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.timed(|s| s.on_headers(end_of_stream))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.timed(|s| s.on_body(body_size, end_of_stream))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        // With trailers the last body callback never has end_of_stream: finish here instead.
        let Some(plugin) = self.shared.plugin.clone() else {
            return Action::Continue;
        };
        if self.agent_awaits_body() {
            return self.timed(Self::agent_body_end);
        }
        self.timed(|s| s.finish(&plugin))
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.timed(|s| s.on_response_headers(end_of_stream))
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.timed(|s| s.on_response_body_stored(body_size, end_of_stream))
    }

    fn on_log(&mut self) {
        // Timed too, so the total in `ferrogate.filter_us` includes building the record.
        let start = self.now_nanos();
        self.leave_queue();
        self.release_pick(start);
        if !self.end_abandoned(start) {
            self.report_with_overhead(start);
        }
    }
}
