//! `/mcp/{server}`: an MCP server behind virtual keys.
//!
//! At the headers: the server is looked up and the key's grant on it checked, the caller's
//! credential is replaced by the server's, a presented `Mcp-Session-Id` is opened (it must have
//! been sealed for this key and server, [`ferrogate_core::mcp::session`]) and the request is
//! sent to the server's cluster. A POST's body (one JSON-RPC message) is held and read: a
//! `tools/call` of a tool the key may not use is answered here with a JSON-RPC error and never
//! reaches the server, the 2026-07-28 `Mcp-Method`/`Mcp-Name` headers must agree with it, and
//! the answer to a `tools/list` is held to drop the tools the key may not see. Everything else
//! (notifications, server streams, GET and DELETE) flows through untouched.

use ferrogate_core::config::mcp::{McpCredential, McpServer, Transport};
use ferrogate_core::config::Config;
use ferrogate_core::mcp::{self as wire, session, Kind};
use ferrogate_core::openai::ApiError;
use ferrogate_core::{header_map, headers};
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::head::Head;
use super::Stream;

mod answer;
mod federated;

/// JSON-RPC code for a request whose `Mcp-*` headers disagree with its body (2026-07-28).
const HEADER_MISMATCH: i64 = -32020;
/// JSON-RPC code for an unknown tool (MCP's choice for `tools/call`).
const INVALID_PARAMS: i64 = wire::refusal::UNKNOWN_TOOL;

/// What an MCP stream carries between callbacks.
#[derive(Default)]
pub(super) struct McpState {
    /// Index into the config's MCP servers.
    pub(super) server: usize,
    /// A POST's body is still to be read.
    awaiting_body: bool,
    /// `Mcp-Method` and `Mcp-Name` as sent (2026-07-28 clients), checked against the body.
    header_method: Option<String>,
    header_name: Option<String>,
    /// The tool of a `tools/call`, for the usage record.
    pub(super) tool: Option<String>,
    /// The answer is a `tools/list` result to filter to the key's tools.
    filter_list: bool,
    /// The request's JSON-RPC id, for errors written into the answer.
    pub(super) id: Option<String>,
    /// The held answer is an event stream.
    sse: bool,
    /// The HTTP+SSE transport's GET stream, rewritten event by event as it flows.
    stream: Option<wire::EventSplitter>,
    /// The stream could not be checked: nothing more of it goes to the client.
    withheld: bool,
    /// The server refused the gateway's credential (401): its answer becomes the gateway's 502.
    refused: bool,
}

/// Where an MCP or A2A request goes.
pub(super) struct Upstream<'a> {
    pub(super) cluster: &'a str,
    pub(super) authority: &'a str,
    pub(super) path: &'a str,
}

/// The MCP headers of a request, read only on MCP paths (the model APIs never pay for them).
#[derive(Default)]
struct McpHead<'a> {
    session: Option<&'a [u8]>,
    method: Option<&'a [u8]>,
    name: Option<&'a [u8]>,
}

impl<'a> McpHead<'a> {
    fn from_map(map: &'a [u8]) -> Self {
        let mut head = Self::default();
        for (name, value) in header_map::pairs(map) {
            match name {
                b"mcp-session-id" => head.session = Some(value),
                b"mcp-method" => head.method = Some(value),
                b"mcp-name" => head.name = Some(value),
                _ => {}
            }
        }
        head
    }
}

impl Stream {
    /// The request head of `/mcp/{name}{rest}`: checks, credential swap and routing.
    pub(super) fn start_mcp(
        &mut self,
        config: &Config,
        name: &str,
        rest: &str,
        head: &Head,
        map: &[u8],
        eos: bool,
    ) -> Action {
        let Some((index, server)) = config.mcp.get(name) else {
            return self.reply_error(&ApiError::mcp_server_not_found(name));
        };
        if config.mcp_access(self.caller, index).is_none() {
            return self.reply_error(&ApiError::mcp_server_not_allowed(name));
        }
        if server.oauth.is_some() && server.credential.is_none() {
            let why = format!("no OAuth token for the MCP server `{name}` yet: the sidecar has not fetched one");
            return self.reply_error(&ApiError::unavailable(why));
        }
        if eos && head.method == "POST" {
            return self.reply(400, &wire::error_body(None, -32700, "parse error: the request body is empty"));
        }
        let mcp = McpHead::from_map(map);
        let digest = config.key(self.caller).map_or("", |k| k.digest.as_str());
        let opened = |id: &[u8]| session::open(digest, &server.name, id).map(<[u8]>::to_vec);
        if let Some(presented) = mcp.session {
            match opened(presented) {
                Ok(upstream) => self.set_http_request_header_bytes("mcp-session-id", Some(&upstream)),
                // As the server itself would answer an unknown session: the client starts anew.
                Err(e) => return self.reply(404, &wire::error_body(None, -32600, &e.to_string())),
            }
        }
        let (_, query) = ferrogate_core::route::split_query(head.path);
        let query = match query {
            // The HTTP+SSE transport names its session in the message endpoint's query.
            Some(q) if server.transport == Transport::Sse => {
                let open = |id: &str| opened(id.as_bytes()).map(|u| String::from_utf8_lossy(&u).into_owned());
                match wire::sse::open_query(q, &open) {
                    Ok(opened) => opened.or_else(|| Some(q.to_string())),
                    Err(e) => return self.reply(404, &wire::error_body(None, -32600, &e.to_string())),
                }
            }
            q => q.map(str::to_string),
        };
        self.route_mcp(server, rest, head, query.as_deref());
        let text = |v: Option<&[u8]>| v.and_then(|v| std::str::from_utf8(v).ok()).map(str::to_string);
        self.mcp = Some(Box::new(McpState {
            server: index,
            // Whatever the method: a body that goes upstream is read first.
            awaiting_body: !eos,
            header_method: text(mcp.method),
            header_name: text(mcp.name),
            ..McpState::default()
        }));
        self.agent_head_done(config, eos)
    }

    /// The caller's credential out, the server's in, and the request pointed at its cluster.
    fn route_mcp(&mut self, server: &McpServer, rest: &str, head: &Head, query: Option<&str>) {
        let path = wire::upstream_path(&server.url.path_prefix, rest, query);
        let to = Upstream { cluster: &server.cluster, authority: &server.authority, path: &path };
        self.route_upstream(head, server.credential.as_ref(), &to);
        self.set_upstream_timeout(head.method, server.timeout_ms);
    }

    /// Envoy's route timeout override ([`headers::UPSTREAM_TIMEOUT`]): the server's or agent's
    /// `timeout_ms` on a POST, a deadline for the whole call, its answer streamed or not;
    /// never on a GET, whose event stream is long-lived. A client's own copy is removed either
    /// way: only the gateway says how long an upstream may take.
    pub(super) fn set_upstream_timeout(&mut self, method: &str, timeout_ms: Option<u64>) {
        let value = timeout_ms.filter(|_| method == "POST").map(ferrogate_core::decimal::Decimal::new);
        self.set_http_request_header(headers::UPSTREAM_TIMEOUT, value.as_ref().map(|v| v.as_str()));
    }

    /// The caller's credential out, `credential` in, and the request pointed at `to` (an MCP
    /// server or an A2A agent).
    pub(super) fn route_upstream(&mut self, head: &Head, credential: Option<&McpCredential>, to: &Upstream<'_>) {
        for (name, present) in headers::CLIENT_CREDENTIALS.into_iter().zip(head.credentials_present()) {
            if present {
                self.set_http_request_header(name, None);
            }
        }
        if let Some(cred) = credential {
            self.set_http_request_header(&cred.name, Some(&cred.value));
        }
        // The gateway, not a browser page, is the server's client now: a browser's Origin would
        // only trip the server's DNS-rebinding protection (MCP servers answer a foreign one 403).
        self.set_http_request_header("origin", None);
        let cluster = self.shared.plugin.as_ref().map(|p| p.cluster_header.clone()).unwrap_or_default();
        self.set_http_request_header(&cluster, Some(to.cluster));
        self.set_http_request_header(":authority", Some(to.authority));
        self.set_http_request_header(":path", Some(to.path));
        if self.request_id_generated {
            if let Some(id) = &self.request_id {
                self.set_http_request_header(headers::REQUEST_ID, Some(id));
            }
        }
        let _ = proxy_wasm::hostcalls::call_foreign_function("clear_route_cache", None);
    }

    /// A body on an MCP or A2A stream: held whole (within `max`), then checked. `None` when
    /// the stream is neither.
    pub(super) fn agent_body(&mut self, body_size: usize, end_of_stream: bool, max: usize) -> Option<Action> {
        if self.mcp.is_none() && self.a2a.is_none() {
            return None;
        }
        if !self.agent_awaits_body() {
            return Some(Action::Continue);
        }
        if body_size > max {
            return Some(self.reply_error(&ApiError::payload_too_large(max)));
        }
        self.body_size = body_size;
        if !end_of_stream {
            return Some(Action::Pause);
        }
        Some(self.agent_body_end())
    }

    /// Whether the stream is an MCP or A2A one still waiting for its body (trailers end it too).
    pub(super) fn agent_awaits_body(&self) -> bool {
        self.mcp.as_ref().is_some_and(|s| s.awaiting_body) || self.a2a_awaits_body()
    }

    /// The whole body of an MCP or A2A request is in (its last chunk, or the trailers).
    pub(super) fn agent_body_end(&mut self) -> Action {
        if let Some(wait) = self.lease_wait.as_mut() {
            // The headers still wait for a lease grant: the body is read once admitted.
            wait.body_held = true;
            log::debug!("#{} body in while waiting for a lease grant: held", self.id);
            return Action::Pause;
        }
        if self.mcp.is_some() {
            self.mcp_body_end()
        } else {
            self.a2a_body_end()
        }
    }

    /// The whole body is in: read and check it.
    fn mcp_body_end(&mut self) -> Action {
        if let Some(state) = self.mcp.as_mut() {
            state.awaiting_body = false;
        }
        let body = self.get_http_request_body(0, self.body_size).unwrap_or_default();
        self.check_mcp_message(&body)
    }

    fn check_mcp_message(&mut self, body: &[u8]) -> Action {
        let message = match wire::scan(body) {
            Ok(m) => m,
            Err(e) => return self.reply(400, &wire::error_body(None, e.code(), &e.to_string())),
        };
        let (Some(config), Some(state)) = (self.config.clone(), self.mcp.as_mut()) else {
            return Action::Continue;
        };
        state.id = message.id.clone();
        let id = message.id.as_deref();
        if state.header_method.is_some() && state.header_method != message.method {
            return self
                .reply(400, &wire::error_body(id, HEADER_MISMATCH, "Mcp-Method does not match the body's method"));
        }
        if state.header_name.is_some() && state.header_name != message.name {
            return self.reply(400, &wire::error_body(id, HEADER_MISMATCH, "Mcp-Name does not match the body's name"));
        }
        if message.kind == Kind::Notification && !message.method.as_deref().is_some_and(is_notification) {
            // Without an id it would pass as a notification, unchecked and uncounted, yet a
            // server may still run it: only `notifications/*` may go without one.
            let text = "invalid request: only notifications/* may omit the id";
            return self.reply(400, &wire::error_body(None, -32600, text));
        }
        let access = config.mcp_access(self.caller, state.server);
        let Some(access) = access.filter(|_| message.kind == Kind::Request) else {
            return Action::Continue;
        };
        match message.method.as_deref() {
            Some("tools/call") => {
                let tool = message.name.unwrap_or_default();
                if !access.allows(&tool) {
                    self.reason = Some("mcp_tool_not_allowed");
                    self.model_requested = tool;
                    // Its record must not charge a tool call to the limits' ledger.
                    self.reservation = None;
                    return self.refuse_tool(&config, id);
                }
                self.model_requested.clone_from(&tool);
                state.tool = Some(tool);
                return self.admit_tool_call(&config);
            }
            Some("tools/list") => state.filter_list = !access.is_all(),
            _ => {}
        }
        Action::Continue
    }

    /// Refuses a `tools/call` of a tool the key may not use, with the same answer for a tool
    /// that exists and one that does not. On the HTTP+SSE transport the answer must come on
    /// the GET stream, so a stand-in goes to the server instead ([`wire::refusal`]).
    fn refuse_tool(&mut self, config: &Config, id: Option<&str>) -> Action {
        let tool = self.model_requested.clone();
        if !self.mcp_server_is_sse_in(config) {
            return self.reply(200, &wire::error_body(id, INVALID_PARAMS, &format!("Unknown tool: {tool}")));
        }
        let stand_in = wire::refusal::stand_in(id.unwrap_or("null"), &tool);
        self.set_http_request_body(0, self.body_size, &stand_in);
        self.set_http_request_header("transfer-encoding", None);
        let length = ferrogate_core::decimal::Decimal::new(stand_in.len() as u64);
        self.set_http_request_header("content-length", Some(length.as_str()));
        Action::Continue
    }

    pub(in crate::http) fn mcp_server_is_sse(&self) -> bool {
        self.config.as_deref().is_some_and(|c| self.mcp_server_is_sse_in(c))
    }

    fn mcp_server_is_sse_in(&self, config: &Config) -> bool {
        let server = self.mcp.as_ref().and_then(|s| config.mcp.items.get(s.server));
        server.is_some_and(|s| s.transport == Transport::Sse)
    }
}

/// An MCP notification's method (the only messages that may go without an id).
fn is_notification(method: &str) -> bool {
    method.starts_with("notifications/")
}
