//! The proxy's own error replies, in the client's dialect.
//!
//! When an upstream cannot be reached, resets before its response head or does not answer in
//! time, the proxy answers in its place (Envoy's router, and `ferrogate serve`'s the same way)
//! with a short `text/plain` body: "upstream request timeout" with a 504, say. Providers give
//! their errors as JSON, so a client of an API that speaks JSON gets the proxy's reply as an
//! error in its own dialect instead, its status kept. A translated answer's errors are already
//! rewritten by the translation.

use ferrogate_core::error::ApiError;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::Action;

use super::Stream;

/// The longest proxy text kept as the error's message (the proxy's replies are one line).
const MAX_MESSAGE: usize = 1024;

impl Stream {
    /// At the headers of a `text/plain` answer: whether it is a proxy's error reply to a routed
    /// API request (a server error with a body, not translated). It is then held to its end
    /// and rewritten as JSON ([`Stream::rewrite_proxy_error`]).
    pub(super) fn hold_proxy_error(&mut self, end_of_stream: bool) -> bool {
        if end_of_stream || self.status < 500 || self.routed.is_none() || self.translation.is_some() {
            return false;
        }
        self.proxy_error = true;
        self.set_http_response_header("content-type", Some("application/json"));
        self.set_http_response_header("content-length", None);
        true
    }

    /// The held body of a proxy's error reply: at its end, the client's error envelope with
    /// the proxy's text as the message.
    pub(super) fn rewrite_proxy_error(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.get_http_response_body(0, body_size).unwrap_or_default();
        let text = String::from_utf8_lossy(body.get(..MAX_MESSAGE).unwrap_or(&body));
        let error = ApiError::from_upstream(self.status, text.trim().to_string());
        self.set_http_response_body(0, body_size, &error.body_in(self.dialect));
        Action::Continue
    }
}
