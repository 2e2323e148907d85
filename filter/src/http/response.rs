//! Response phase: gateway headers, and the usage tracker watching the body as it streams by.
//!
//! The body is never held: each chunk goes on as it arrives (the tracker keeps a bounded tail
//! or the one SSE event in progress). The only rewrite is removing the usage chunk the gateway
//! asked for on the client's behalf, which the client did not request.

use ferrogate_core::usage::{Chunk, Tracker, UsageDialect};
use ferrogate_core::{header_map, headers};
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::{Action, MapType};

use super::Stream;

impl Stream {
    pub(super) fn on_response_headers(&mut self, end_of_stream: bool) -> Action {
        // One hostcall for the whole map instead of one per header.
        let (mut status, mut upstream_id, mut streaming, mut has_length) = (None, None, false, false);
        let map = crate::raw::header_map(MapType::HttpResponseHeaders);
        for (name, value) in header_map::pairs(&map) {
            match name {
                b":status" => status = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()),
                b"content-type" => streaming = value.starts_with(b"text/event-stream"),
                b"content-length" => has_length = true,
                name if name == headers::REQUEST_ID.as_bytes() => upstream_id = Some(value),
                _ => {}
            }
        }
        self.status = status.unwrap_or(0);
        self.response_complete = end_of_stream;
        let overhead_us = (self.overhead_ns / 1_000).to_string();
        self.set_http_response_header(headers::OVERHEAD_US, Some(&overhead_us));
        if let Some(routed) = &self.routed {
            self.set_http_response_header(headers::PROVIDER, Some(&routed.provider));
            self.set_http_response_header(headers::MODEL, Some(&routed.upstream_model));
            // Keep the provider's own id (useful for its support) before ours replaces it.
            if let Some(upstream_id) = upstream_id {
                if Some(upstream_id) != self.request_id.as_deref().map(str::as_bytes) {
                    self.set_http_response_header_bytes(headers::UPSTREAM_REQUEST_ID, Some(upstream_id));
                }
            }
            self.streamed = streaming;
            // The upstream dialect: providers reached without translation speak OpenAI here.
            self.tracker = Some(Tracker::new(UsageDialect::OpenAi, streaming, self.hide_usage));
            if streaming && self.hide_usage && has_length {
                // Removing an event changes the length.
                self.set_http_response_header("content-length", None);
            }
        }
        if let Some(id) = &self.request_id {
            self.set_http_response_header(headers::REQUEST_ID, Some(id));
        }
        Action::Continue
    }

    pub(super) fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if end_of_stream {
            self.response_complete = true;
        }
        let Some(mut tracker) = self.tracker.take() else {
            return Action::Continue;
        };
        // Not paused, so the buffer is exactly this chunk.
        let chunk = self.get_http_response_body(0, body_size).unwrap_or_default();
        let verdict = if end_of_stream { tracker.on_end(&chunk) } else { tracker.on_chunk(&chunk) };
        if let Chunk::Replace(bytes) = verdict {
            self.set_http_response_body(0, body_size, &bytes);
        }
        // Time to first token: the first event carrying output (any byte for JSON bodies).
        if self.first_byte_ns.is_none() && tracker.first_token_seen() {
            self.first_byte_ns = Some(self.now_nanos());
        }
        self.tracker = Some(tracker);
        Action::Continue
    }
}
