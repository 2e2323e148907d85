//! `/a2a/{agent}`: an A2A agent behind virtual keys.
//!
//! At the headers: the agent is looked up and the key's grant on it checked, the caller's
//! credential is replaced by the agent's, and the request goes to the agent's cluster
//! (`/a2a/{agent}` to its JSON-RPC endpoint, anything longer to that path on its origin). A
//! body is read whole and must be one JSON-RPC message, whose method names the usage record
//! and must be one the key's grant covers (`agent/<method glob>`); a key granted some methods
//! only reaches the agent's JSON-RPC endpoint and its card, where every method is seen.
//! The agent's card (`/.well-known/agent-card.json`, or 0.2's `agent.json`) is rewritten on
//! the way back so every URL in it is the gateway's ([`ferrogate_core::a2a`]). Streams pass
//! through as they come; `A2A-Version` and `A2A-Extensions` go through untouched.

use ferrogate_core::config::Config;
use ferrogate_core::header_map;
use ferrogate_core::mcp as wire;
use ferrogate_core::openai::ApiError;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::head::Head;
use super::mcp::Upstream;
use super::Stream;

/// Where an agent's card is read.
const CARD_PATHS: [&str; 2] = ["/.well-known/agent-card.json", "/.well-known/agent.json"];

/// What an A2A stream carries between callbacks.
pub(super) struct A2aState {
    /// Index into the config's agents.
    pub(super) agent: usize,
    /// A body is still to be read.
    awaiting_body: bool,
    /// The gateway's URL of the agent, when the request fetches its card (then rewritten).
    card: Option<String>,
    /// The message's JSON-RPC id once the body is read, for a limit's refusal.
    pub(super) id: Option<String>,
}

/// The gateway's own URL of agent `name`, as the client reached it: `x-forwarded-proto` (a
/// proxy in front) or `:scheme`, and `:authority`.
fn gateway_url(map: &[u8], name: &str) -> String {
    let (mut scheme, mut forwarded, mut authority) = ("http", None, "");
    for (key, value) in header_map::pairs(map) {
        let text = std::str::from_utf8(value).unwrap_or_default();
        match key {
            b":scheme" => scheme = text,
            b"x-forwarded-proto" => forwarded = Some(text),
            b":authority" => authority = text,
            _ => {}
        }
    }
    let scheme = forwarded.and_then(|f| f.split(',').next()).map_or(scheme, str::trim);
    let scheme = if scheme == "https" { "https" } else { "http" };
    format!("{scheme}://{authority}/a2a/{name}")
}

impl Stream {
    /// The request head of `/a2a/{name}{rest}`: checks, credential swap and routing.
    pub(super) fn start_a2a(
        &mut self,
        config: &Config,
        name: &str,
        rest: &str,
        head: &Head,
        map: &[u8],
        eos: bool,
    ) -> Action {
        let Some((index, agent)) = config.a2a.get(name) else {
            return self.reply_error(&ApiError::a2a_agent_not_found(name));
        };
        let Some(access) = config.a2a_access(self.caller, index) else {
            return self.reply_error(&ApiError::a2a_agent_not_allowed(name));
        };
        let card = (head.method == "GET" && CARD_PATHS.contains(&rest)).then(|| gateway_url(map, name));
        if !access.is_all() && card.is_none() && !(head.method == "POST" && rest.is_empty()) {
            // Another binding's path (REST, a GET) would carry a method the grant cannot see.
            let what = format!("{} {}", head.method, if rest.is_empty() { "/" } else { rest });
            return self.reply_error(&ApiError::a2a_method_not_allowed(name, &what));
        }
        let (_, query) = ferrogate_core::route::split_query(head.path);
        let path = wire::upstream_path(&agent.url.path_prefix, rest, query);
        let to = Upstream { cluster: &agent.cluster, authority: &agent.authority, path: &path };
        self.route_upstream(head, agent.credential.as_ref(), &to);
        self.set_upstream_timeout(head.method, agent.timeout_ms);
        self.a2a = Some(Box::new(A2aState { agent: index, awaiting_body: !eos, card, id: None }));
        self.agent_head_done(config, eos)
    }

    /// Whether the stream is an A2A one still waiting for its body.
    pub(super) fn a2a_awaits_body(&self) -> bool {
        self.a2a.as_ref().is_some_and(|s| s.awaiting_body)
    }

    /// The whole body is in: one JSON-RPC message, whose method the record names.
    pub(super) fn a2a_body_end(&mut self) -> Action {
        if let Some(state) = self.a2a.as_mut() {
            state.awaiting_body = false;
        }
        let body = self.get_http_request_body(0, self.body_size).unwrap_or_default();
        let message = match wire::scan(&body) {
            Ok(message) => message,
            Err(e) => return self.reply(400, &wire::error_body(None, e.code(), &e.to_string())),
        };
        self.model_requested = message.method.unwrap_or_default();
        let (Some(config), Some(state)) = (self.config.clone(), self.a2a.as_mut()) else { return Action::Continue };
        state.id = message.id;
        let granted = config.a2a_access(self.caller, state.agent).is_some_and(|a| a.allows(&self.model_requested));
        if message.kind == wire::Kind::Notification {
            // A2A defines no notifications from client to agent: a method without an id would
            // pass unchecked and uncounted, yet an agent may still run it.
            return self.reply(400, &wire::error_body(None, -32600, "invalid request: an A2A request needs an id"));
        }
        if message.kind != wire::Kind::Request {
            return Action::Continue;
        }
        if granted {
            // A message send is a tool call to the limits; the other methods only a request.
            let send = ferrogate_core::a2a::is_send(&self.model_requested);
            return if send { self.admit_tool_call(&config) } else { Action::Continue };
        }
        self.reason = Some("a2a_method_not_allowed");
        // Its record must not charge a tool call to the limits' ledger.
        self.reservation = None;
        let agent = config.a2a.items.get(state.agent).map_or("", |a| a.name.as_str());
        self.reply_error(&ApiError::a2a_method_not_allowed(agent, &self.model_requested))
    }

    /// The answer's head on an A2A stream. `None` when the stream is not A2A's.
    pub(super) fn a2a_response_headers(&mut self, end_of_stream: bool) -> Option<Action> {
        let card = self.a2a.as_ref()?.card.is_some();
        let plain = self.answer_head(end_of_stream).plain;
        if self.hold_agent_proxy_error(plain, end_of_stream) {
            return Some(Action::Pause);
        }
        if card && self.status == 200 && !end_of_stream {
            // The card is rewritten whole: its length changes, and its validators with it.
            for stale in ["content-length", "etag", "last-modified"] {
                self.set_http_response_header(stale, None);
            }
            return Some(Action::Pause);
        }
        if let Some(state) = self.a2a.as_mut() {
            state.card = None;
        }
        Some(Action::Continue)
    }

    /// The answer's body on an A2A stream. `None` when the stream is not A2A's.
    pub(super) fn a2a_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Option<Action> {
        let state = self.a2a.as_ref()?;
        if end_of_stream {
            self.response_complete = true;
        }
        if self.proxy_error {
            return Some(self.rewrite_proxy_error(body_size, end_of_stream));
        }
        let Some(url) = state.card.clone() else { return Some(Action::Continue) };
        if !end_of_stream {
            return Some(Action::Pause);
        }
        let body = self.get_http_response_body(0, body_size).unwrap_or_default();
        let out = ferrogate_core::a2a::rewrite_card(&body, &url).unwrap_or_else(|e| {
            // Withheld rather than passed on with the agent's own URLs in it.
            log::warn!("#{} A2A agent card withheld: {e}", self.id);
            ApiError::from_upstream(502, e.to_string()).body_in(self.dialect)
        });
        self.set_http_response_body(0, body_size, &out);
        Some(Action::Continue)
    }

    /// For the usage record of an A2A call: the agent's cluster name (`a2a:<agent>`, the
    /// record's provider) and the JSON-RPC method (its model). `None` when the stream is not
    /// A2A's.
    pub(super) fn a2a_target<'a>(&'a self, config: Option<&'a Config>) -> Option<(&'a str, &'a str)> {
        let state = self.a2a.as_ref()?;
        let agent = config.and_then(|c| c.a2a.items.get(state.agent)).map_or("", |a| a.cluster.as_str());
        Some((agent, &self.model_requested))
    }
}
