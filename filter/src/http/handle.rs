//! What the SDK holds for each stream: the [`Stream`] behind a shared cell, so the root can
//! reach a stream that waits in a flow-control queue (`crate::flow_wake`) and resume it from a
//! callback of its own. Every callback is handed on as is.

use std::cell::RefCell;
use std::rc::Rc;

use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use super::{Shared, Stream};

/// The SDK's handle on one stream.
pub(crate) struct StreamHandle(Rc<RefCell<Stream>>);

impl StreamHandle {
    /// A new stream `id` of the VM that shares `shared`.
    pub(crate) fn new(id: u32, shared: Shared) -> Self {
        Self(Rc::new_cyclic(|me| {
            let mut stream = Stream::new(id, shared);
            stream.me = me.clone();
            RefCell::new(stream)
        }))
    }

    /// Runs `f` on the stream. The cell is never borrowed when the host calls in (callbacks of
    /// one VM do not nest); were it ever, the callback answers `busy` rather than trap (a
    /// paused request, never one let through unchecked).
    fn with<T>(&self, busy: T, f: impl FnOnce(&mut Stream) -> T) -> T {
        match self.0.try_borrow_mut() {
            Ok(mut s) => f(&mut s),
            Err(_) => busy,
        }
    }
}

impl Context for StreamHandle {
    fn on_http_call_response(&mut self, token_id: u32, num_headers: usize, body_size: usize, num_trailers: usize) {
        self.with((), |s| s.on_http_call_response(token_id, num_headers, body_size, num_trailers));
    }
}

impl HttpContext for StreamHandle {
    fn on_http_request_headers(&mut self, num_headers: usize, end_of_stream: bool) -> Action {
        self.with(Action::Pause, |s| s.on_http_request_headers(num_headers, end_of_stream))
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.with(Action::Pause, |s| s.on_http_request_body(body_size, end_of_stream))
    }

    fn on_http_request_trailers(&mut self, num_trailers: usize) -> Action {
        self.with(Action::Pause, |s| s.on_http_request_trailers(num_trailers))
    }

    fn on_http_response_headers(&mut self, num_headers: usize, end_of_stream: bool) -> Action {
        self.with(Action::Pause, |s| s.on_http_response_headers(num_headers, end_of_stream))
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        self.with(Action::Pause, |s| s.on_http_response_body(body_size, end_of_stream))
    }

    fn on_log(&mut self) {
        self.with((), |s| s.on_log());
    }
}
