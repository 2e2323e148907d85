//! The answer on an MCP stream: the server's session id sealed for the key, a `tools/list`
//! result held and filtered to the key's tools, the HTTP+SSE transport's GET stream rewritten
//! event by event, and the proxy's own text errors turned into JSON-RPC errors.

use ferrogate_core::config::Config;
use ferrogate_core::mcp::{self as wire, session};
use ferrogate_core::{header_map, headers};
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::super::Stream;

/// What an MCP or A2A answer's head says.
pub(in crate::http) struct AnswerHead {
    /// `text/event-stream`.
    pub(in crate::http) sse: bool,
    /// `text/plain` (the proxy's own error replies).
    pub(in crate::http) plain: bool,
    /// `application/json`.
    pub(in crate::http) json: bool,
    /// `Mcp-Session-Id`, as the server sent it.
    pub(in crate::http) session: Option<Vec<u8>>,
}

impl Stream {
    /// Whether the answer is the proxy's own text error (server down, timeout), held to become
    /// a JSON-RPC error ([`Stream::rewrite_proxy_error`], in the stream's JSON-RPC dialect).
    pub(in crate::http) fn hold_agent_proxy_error(&mut self, plain: bool, end_of_stream: bool) -> bool {
        if !plain || self.status < 500 || end_of_stream {
            return false;
        }
        self.proxy_error = true;
        self.set_http_response_header("content-type", Some("application/json"));
        self.set_http_response_header("content-length", None);
        true
    }

    /// Reads the answer's head with one hostcall: its status into the stream, and our request
    /// id onto it.
    pub(in crate::http) fn answer_head(&mut self, end_of_stream: bool) -> AnswerHead {
        let mut head = AnswerHead { sse: false, plain: false, json: false, session: None };
        let map = crate::raw::header_map(proxy_wasm::types::MapType::HttpResponseHeaders);
        for (name, value) in header_map::pairs(&map) {
            match name {
                b":status" => self.status = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()).unwrap_or(0),
                b"content-type" => {
                    head.sse = value.starts_with(b"text/event-stream");
                    head.plain = value.starts_with(b"text/plain");
                    head.json = value.starts_with(b"application/json");
                }
                b"mcp-session-id" => head.session = Some(value.to_vec()),
                _ => {}
            }
        }
        self.response_complete = end_of_stream;
        self.streamed = head.sse;
        if let Some(id) = &self.request_id {
            self.set_http_response_header(headers::REQUEST_ID, Some(id));
        }
        head
    }

    /// The answer's head on an MCP stream. `None` when the stream is not MCP's.
    pub(in crate::http) fn mcp_response_headers(&mut self, end_of_stream: bool) -> Option<Action> {
        let filter_list = self.mcp.as_ref()?.filter_list;
        let AnswerHead { sse, plain, json, session } = self.answer_head(end_of_stream);
        // Only a 200 holds a result (an HTTP+SSE server answers a POST with 202 and sends the
        // result on its GET stream, rewritten as it flows).
        let filter = filter_list && self.status == 200 && (json || sse) && !end_of_stream;
        let stream = sse && self.status == 200 && self.mcp_server_is_sse();
        if let Some(upstream) = session {
            self.seal_session(&upstream);
        }
        if self.status == 401 {
            return Some(self.credential_refused(end_of_stream));
        }
        if self.hold_agent_proxy_error(plain, end_of_stream) {
            return Some(Action::Pause);
        }
        if stream {
            self.set_http_response_header("content-length", None);
        }
        if !filter {
            if let Some(state) = self.mcp.as_mut() {
                state.filter_list = false;
                state.stream = stream.then(wire::EventSplitter::default);
            }
            return Some(Action::Continue);
        }
        if let Some(state) = self.mcp.as_mut() {
            state.sse = sse;
        }
        self.set_http_response_header("content-length", None);
        Some(Action::Pause)
    }

    /// A chunk of an HTTP+SSE server's GET stream: its whole events go on, the `endpoint` event
    /// pointed at the gateway with its session sealed and `tools/list` results filtered; the
    /// unfinished end waits for the next chunk.
    fn rewrite_stream(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let (Some(config), Some(plugin)) = (self.config.clone(), self.shared.plugin.clone()) else {
            return Action::Continue;
        };
        let chunk = self.get_http_response_body(0, body_size).unwrap_or_default();
        let Some(state) = self.mcp.as_mut() else { return Action::Continue };
        let Some(splitter) = state.stream.as_mut() else { return Action::Continue };
        let mut events = splitter.push(&chunk, plugin.max_body_bytes);
        if let (true, Ok(events)) = (end_of_stream, events.as_mut()) {
            events.extend(splitter.finish());
        }
        let server = state.server;
        let out = events.and_then(|events| self.rewrite_events(&config, server, &events));
        match out {
            Ok(out) => self.set_http_response_body(0, body_size, &out),
            Err(e) => {
                // Never passed on unchecked: the rest of the stream is withheld (the client sees
                // it stall, as it would a silent server, and reconnects).
                log::warn!("#{} MCP event stream withheld: {e}", self.id);
                if let Some(state) = self.mcp.as_mut() {
                    (state.stream, state.withheld) = (None, true);
                }
                self.set_http_response_body(0, body_size, &[]);
            }
        }
        Action::Continue
    }

    fn rewrite_events(&self, config: &Config, server: usize, events: &[u8]) -> Result<Vec<u8>, wire::SseError> {
        let (Some(s), Some(access)) = (config.mcp.items.get(server), config.mcp_access(self.caller, server)) else {
            return Ok(Vec::new());
        };
        let digest = config.key(self.caller).map_or("", |k| k.digest.as_str());
        let seal = |id: &str| session::seal(digest, &s.name, id.as_bytes()).and_then(|v| String::from_utf8(v).ok());
        let allow = |tool: &str| access.allows(tool);
        let mut rewrite = |kind: Option<&[u8]>, data: &[u8]| match kind {
            Some(b"endpoint") => wire::sse::gateway_endpoint(&s.name, data, &seal).map(|e| Some(e.into_bytes())),
            _ => match wire::refusal::restore(data) {
                Some(refusal) => Ok(Some(refusal)),
                None if access.is_all() => Ok(None),
                None => Ok(wire::filter_list(data, &allow)?),
            },
        };
        Ok(wire::sse::map_events(events, &mut rewrite)?.unwrap_or_else(|| events.to_vec()))
    }

    /// For the usage record of a tool call: the server's cluster name (`mcp:<server>`, the
    /// record's provider) and the tool (its model). `None` when the stream is not MCP's.
    pub(in crate::http) fn mcp_target<'a>(&'a self, config: Option<&'a Config>) -> Option<(&'a str, &'a str)> {
        let state = self.mcp.as_ref()?;
        let server = config.and_then(|c| c.mcp.items.get(state.server)).map_or("", |s| s.cluster.as_str());
        Some((server, state.tool.as_deref().unwrap_or(&self.model_requested)))
    }

    /// The server refused the gateway's credential: the client's own credential was the
    /// virtual key, which the gateway accepted, so this is the gateway's failure (502), and the
    /// server's `WWW-Authenticate` must not send the client to the server's authorization server.
    fn credential_refused(&mut self, end_of_stream: bool) -> Action {
        self.status = 502;
        self.reason = Some("mcp_credential_refused");
        self.set_http_response_header(":status", Some("502"));
        self.set_http_response_header("www-authenticate", None);
        self.set_http_response_header("content-type", Some("application/json"));
        self.set_http_response_header("content-length", None);
        if let Some(state) = self.mcp.as_mut() {
            state.refused = true;
        }
        if end_of_stream {
            Action::Continue
        } else {
            Action::Pause
        }
    }

    /// The server's session id goes to the client sealed for this key and server.
    fn seal_session(&mut self, upstream: &[u8]) {
        let (Some(config), Some(state)) = (self.config.as_deref(), self.mcp.as_ref()) else { return };
        let digest = config.key(self.caller).map_or("", |k| k.digest.as_str());
        let name = config.mcp.items.get(state.server).map_or("", |s| s.name.as_str());
        let sealed = session::seal(digest, name, upstream);
        self.set_http_response_header_bytes("mcp-session-id", sealed.as_deref());
    }

    /// The answer's body on an MCP stream. `None` when the stream is not MCP's.
    pub(in crate::http) fn mcp_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Option<Action> {
        let state = self.mcp.as_ref()?;
        if end_of_stream {
            self.response_complete = true;
        }
        if self.proxy_error {
            return Some(self.rewrite_proxy_error(body_size, end_of_stream));
        }
        if state.refused {
            if !end_of_stream {
                return Some(Action::Pause);
            }
            let name =
                self.config.as_deref().and_then(|c| c.mcp.items.get(state.server)).map_or("", |s| s.name.as_str());
            let text = format!(
                "the MCP server `{name}` refused the gateway's credential (HTTP 401): check its api_key_env or oauth settings"
            );
            let body = wire::error_body(state.id.as_deref(), -32603, &text);
            self.set_http_response_body(0, body_size, &body);
            return Some(Action::Continue);
        }
        if state.withheld {
            self.set_http_response_body(0, body_size, &[]);
            return Some(Action::Continue);
        }
        if state.stream.is_some() {
            return Some(self.rewrite_stream(body_size, end_of_stream));
        }
        if !state.filter_list {
            return Some(Action::Continue);
        }
        if !end_of_stream {
            return Some(Action::Pause);
        }
        let (sse, id, server) = (state.sse, state.id.clone(), state.server);
        let body = self.get_http_response_body(0, body_size).unwrap_or_default();
        let config = self.config.clone();
        let access = config.as_deref().and_then(|c| c.mcp_access(self.caller, server));
        let allow = |tool: &str| access.is_some_and(|a| a.allows(tool));
        let filtered = if sse { wire::filter_list_sse(&body, &allow) } else { wire::filter_list(&body, &allow) };
        match filtered {
            Ok(None) => {}
            Ok(Some(out)) => self.set_http_response_body(0, body_size, &out),
            Err(e) => {
                log::warn!("#{} tools/list answer not filtered, withheld: {e}", self.id);
                let error = wire::error_body(id.as_deref(), -32603, &format!("the server's tools/list answer: {e}"));
                let out = if sse { [b"event: message\ndata: ".as_slice(), &error, b"\n\n"].concat() } else { error };
                self.set_http_response_body(0, body_size, &out);
            }
        }
        Some(Action::Continue)
    }
}
