//! Per-request context: copies what it needs from the request headers, holds them (Pause)
//! while the body is buffered, asks `ferrogate_core::route` for a decision, and applies it.
//!
//! Header maps are only live while the filter is stopped on them (Envoy nulls them after
//! Continue and the SDK panics on the resulting BadArgument), so request headers are edited
//! only from callbacks that run while the headers are paused, and untrusted values are read
//! with the `_bytes` variants (the `String` ones panic on non-UTF-8).

use std::cell::Cell;
use std::rc::Rc;
use std::time::UNIX_EPOCH;

use ferrogate_core::headers::{self, CLIENT_CREDENTIALS};
use ferrogate_core::openai::{self, ApiError};
use ferrogate_core::plugin::PluginConfig;
use ferrogate_core::route::{classify, route, Api, Endpoint, RouteDecision};
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

/// One HTTP stream.
pub(crate) struct Stream {
    id: u32,
    plugin: Option<Rc<PluginConfig>>,
    seq: Rc<Cell<u64>>,
    /// Set while a forwarded request waits for its body.
    api: Option<Api>,
    /// Client `:path`, copied at header time.
    path: String,
    request_id: Option<String>,
    /// Total bytes buffered so far (the last `body_size`).
    body_size: usize,
    /// `(provider, upstream model)` once routed, for the response headers.
    routed: Option<(String, String)>,
    /// Time spent inside this filter's callbacks.
    overhead_ns: u64,
}

impl Stream {
    pub(crate) fn new(id: u32, plugin: Option<Rc<PluginConfig>>, seq: Rc<Cell<u64>>) -> Self {
        Self {
            id,
            plugin,
            seq,
            api: None,
            path: String::new(),
            request_id: None,
            body_size: 0,
            routed: None,
            overhead_ns: 0,
        }
    }

    fn now_nanos(&self) -> u64 {
        let since_epoch = self
            .get_current_time()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX)
    }

    fn next_seq(&self) -> u64 {
        let n = self.seq.get();
        self.seq.set(n.wrapping_add(1));
        n
    }

    /// Runs `f`, adding its duration to the overhead reported in `x-ferrogate-overhead-us`.
    fn timed(&mut self, f: impl FnOnce(&mut Self) -> Action) -> Action {
        let start = self.now_nanos();
        let action = f(self);
        self.overhead_ns += self.now_nanos().saturating_sub(start);
        action
    }

    fn request_header(&self, name: &str) -> Option<String> {
        self.get_http_request_header_bytes(name)
            .and_then(|v| String::from_utf8(v).ok())
    }

    /// Sends a local JSON reply; the host ignores our return value after this (forced stop).
    fn reply(&self, status: u16, body: &[u8]) -> Action {
        let mut hdrs = vec![("content-type", "application/json")];
        if let Some(id) = &self.request_id {
            hdrs.push((headers::REQUEST_ID, id.as_str()));
        }
        self.send_http_response(u32::from(status), hdrs, Some(body));
        Action::Pause
    }

    fn reply_error(&self, e: &ApiError) -> Action {
        log::debug!("#{} {} {}", self.id, e.status, e.message);
        self.reply(e.status, &e.body())
    }

    fn on_headers(&mut self, end_of_stream: bool) -> Action {
        let method = self.request_header(":method").unwrap_or_default();
        let path = self.request_header(":path").unwrap_or_default();
        self.request_id = self
            .request_header(headers::REQUEST_ID)
            .filter(|id| usable_request_id(id));
        if self.request_id.is_none() {
            self.request_id = Some(headers::generate_request_id(
                self.now_nanos(),
                self.next_seq(),
            ));
        }
        let Some(plugin) = self.plugin.clone() else {
            return self.reply_error(&ApiError::unavailable("ferrogate is not configured"));
        };
        let Some(config) = plugin.config.as_ref() else {
            return self.reply_error(&ApiError::unavailable("no configuration snapshot yet"));
        };
        match classify(&method, &path) {
            Endpoint::ListModels => self.reply(200, &openai::models_list(config)),
            Endpoint::GetModel(id) => match openai::model_entry(config, id) {
                Ok(body) => self.reply(200, &body),
                Err(e) => self.reply_error(&e),
            },
            Endpoint::Reject(e) => self.reply_error(&e),
            Endpoint::Forward(_) if end_of_stream => {
                self.reply_error(&ApiError::bad_request("The request body is empty."))
            }
            Endpoint::Forward(api) => {
                // The client's key is never sent upstream.
                for name in CLIENT_CREDENTIALS {
                    self.set_http_request_header(name, None);
                }
                self.api = Some(api);
                self.path.clone_from(&path);
                // Hold the headers: with allow_on_headers_stop_iteration the body still arrives here.
                Action::Pause
            }
        }
    }

    fn on_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let Some(plugin) = self.plugin.clone() else {
            return Action::Continue;
        };
        if self.api.is_none() {
            return Action::Continue;
        }
        self.body_size = body_size;
        if body_size > plugin.max_body_bytes {
            self.api = None;
            return self.reply_error(&ApiError::payload_too_large(plugin.max_body_bytes));
        }
        if !end_of_stream {
            return Action::Pause;
        }
        self.finish(&plugin)
    }

    /// The whole body is buffered: route it and apply the decision, or reply with the error.
    fn finish(&mut self, plugin: &PluginConfig) -> Action {
        let (Some(api), Some(config)) = (self.api.take(), plugin.config.as_ref()) else {
            return Action::Continue;
        };
        let body = self
            .get_http_request_body(0, self.body_size)
            .unwrap_or_default();
        match route(config, api, &self.path, &body, self.next_seq()) {
            Ok(decision) => {
                self.apply(plugin, &decision);
                Action::Continue
            }
            Err(e) => self.reply_error(&e),
        }
    }

    fn apply(&mut self, plugin: &PluginConfig, d: &RouteDecision<'_>) {
        if let Some(new_body) = &d.body {
            self.set_http_request_body(0, self.body_size, new_body);
            // Envoy never recomputes framing; a stale length (or chunked plus length) corrupts it.
            self.set_http_request_header("transfer-encoding", None);
            self.set_http_request_header("content-length", Some(&new_body.len().to_string()));
        }
        self.set_http_request_header(&plugin.cluster_header, Some(d.provider));
        self.set_http_request_header(":authority", Some(d.authority));
        self.set_http_request_header(":path", Some(&d.path));
        if let Some(cred) = d.credential {
            self.set_http_request_header(cred.name, Some(&cred.value));
        }
        // Always overwrite or remove: a client must not pick the endpoint itself.
        self.set_http_request_header(headers::DESTINATION_ENDPOINT, d.endpoint);
        if let Some(id) = &self.request_id {
            self.set_http_request_header(headers::REQUEST_ID, Some(id));
        }
        // Older Envoys lack the function (NotFound); ABI 0.2.1 mutations clear the cache anyway.
        let _ = proxy_wasm::hostcalls::call_foreign_function("clear_route_cache", None);
        log::debug!(
            "#{} -> {} {} model={} endpoint={:?}",
            self.id,
            d.provider,
            d.path,
            d.upstream_model,
            d.endpoint
        );
        self.routed = Some((d.provider.to_string(), d.upstream_model.clone()));
    }

    fn on_response(&mut self) -> Action {
        if let Some((provider, model)) = &self.routed {
            self.set_http_response_header(headers::PROVIDER, Some(provider));
            self.set_http_response_header(headers::MODEL, Some(model));
            // Keep the provider's own id (useful for its support) before ours replaces it.
            if let Some(upstream_id) = self.get_http_response_header_bytes(headers::REQUEST_ID) {
                if Some(upstream_id.as_slice()) != self.request_id.as_deref().map(str::as_bytes) {
                    self.set_http_response_header_bytes(
                        headers::UPSTREAM_REQUEST_ID,
                        Some(&upstream_id),
                    );
                }
            }
        }
        if let Some(id) = &self.request_id {
            self.set_http_response_header(headers::REQUEST_ID, Some(id));
        }
        Action::Continue
    }
}

/// A client-supplied request id is kept only when it is short printable ASCII.
fn usable_request_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic())
}

impl Context for Stream {}

impl HttpContext for Stream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        self.timed(|s| s.on_headers(end_of_stream))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.timed(|s| s.on_body(body_size, end_of_stream))
    }

    fn on_http_request_trailers(&mut self, _num_trailers: usize) -> Action {
        // With trailers the last body callback never has end_of_stream: finish here instead.
        let Some(plugin) = self.plugin.clone() else {
            return Action::Continue;
        };
        self.timed(|s| s.finish(&plugin))
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let overhead_us = (self.overhead_ns / 1_000).to_string();
        self.set_http_response_header(headers::OVERHEAD_US, Some(&overhead_us));
        self.on_response()
    }
}
