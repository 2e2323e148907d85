//! The route timeout a request carries in `x-envoy-upstream-rq-timeout-ms`, as Envoy's router
//! honours it (`FilterUtility::finalTimeout`, `Filter::onResponseTimeout`).
//!
//! The filter sets the header on MCP and A2A POSTs to a server with a `timeout_ms`; a client's
//! own copy is removed before the filter sees the request, as Envoy's connection manager
//! removes it from external requests. The value is whole milliseconds (0: no deadline; a value
//! that is not a number is ignored), and the header never reaches the upstream. The deadline
//! runs from the moment the whole request has gone upstream to the end of the answer, however
//! it streams; retries of the same request stay under it. When it passes:
//!
//! - before the answer's head: the attempt is abandoned and the filter gets the router's own
//!   answer, 504 `upstream request timeout` (which it turns into the path's error shape);
//! - after the head, while the filter still holds it: the client gets that 504 directly, past
//!   the filter, as Envoy sends a local reply straight to the codec;
//! - once the client has the head: the stream is reset.
//!
//! The filter is told `upstream_response_timeout` (Envoy's code details), and records a 504.

use std::time::Duration;

use ferrogate_core::headers::UPSTREAM_TIMEOUT;
use ferrogate_host::Headers;
use http::Response;
use tokio::time::Instant;

use super::super::body::ChannelBody;
use super::super::upstream::{router_reply, UpstreamError};
use super::Driver;

/// Envoy's `response.code_details` for a request past its route timeout.
const RESPONSE_TIMEOUT_DETAILS: &str = "upstream_response_timeout";

/// The route timeout `headers` carry, the header removed (it is for this proxy only).
pub(super) fn take_route_timeout(headers: &mut Headers) -> Option<Duration> {
    let ms = headers.get_str(UPSTREAM_TIMEOUT).and_then(|v| v.trim().parse::<u64>().ok());
    headers.remove(UPSTREAM_TIMEOUT);
    ms.filter(|&ms| ms > 0).map(Duration::from_millis)
}

impl Driver {
    /// The whole request has gone upstream: the route timeout starts (once per request, so a
    /// retry does not restart it).
    pub(super) fn arm_route_deadline(&mut self) {
        if self.route_deadline.is_none() {
            self.route_deadline = self.route_timeout.and_then(|t| Instant::now().checked_add(t));
        }
    }

    /// Whether a route deadline is running on an answer not finished yet.
    pub(super) fn route_deadline_pending(&self) -> bool {
        self.route_deadline.is_some() && (self.upstream.is_some() || self.response_body.is_some())
    }

    /// The route deadline passed before the answer ended.
    pub(super) fn on_route_timeout(&mut self) {
        self.route_deadline = None;
        let timeout = self.route_timeout;
        if self.upstream.take().is_some() {
            tracing::warn!(stream = self.id, ?timeout, "upstream request timeout (x-envoy-upstream-rq-timeout-ms)");
            self.router_failure(&UpstreamError::Timeout);
            return;
        }
        self.response_body = None;
        self.response_eos_sent = true;
        self.call(|vm, id| vm.upstream_reset(id, RESPONSE_TIMEOUT_DETAILS, false));
        if self.head_tx.is_some() {
            tracing::warn!(stream = self.id, ?timeout, "upstream request timeout with the answer held: 504");
            self.direct_timeout_reply();
        } else {
            tracing::warn!(stream = self.id, ?timeout, "upstream request timeout mid-answer: stream reset");
            self.reset = true;
        }
    }

    /// Like Envoy's router, an upstream failure becomes a reply that still runs through the
    /// filter's response callbacks.
    pub(super) fn router_failure(&mut self, e: &UpstreamError) {
        self.upstream_body_tx = None;
        let (headers, body) = router_reply(e);
        self.response_eos_sent = true;
        self.call(|vm, id| vm.response_headers(id, headers, false));
        self.call(|vm, id| vm.response_data(id, &body, true));
    }

    /// The router's 504 straight to the client, the filter bypassed (it holds the answer's
    /// head, so its state cannot take another one).
    fn direct_timeout_reply(&mut self) {
        let (headers, body) = router_reply(&UpstreamError::Timeout);
        let mut response = Response::new(ChannelBody::full(body));
        *response.status_mut() = http::StatusCode::GATEWAY_TIMEOUT;
        *response.headers_mut() = super::super::headers::to_header_map(&headers);
        if let Some(head_tx) = self.head_tx.take() {
            let _ = head_tx.send(response);
        }
        self.finished = true;
    }
}
