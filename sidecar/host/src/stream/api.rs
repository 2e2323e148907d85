//! The HCM side of a stream: the public per-stream entry points of [`Vm`] (downstream and
//! upstream inputs, stream end, event draining), the lazy context creation and the
//! on_log / on_done / on_delete sequence. The filter-manager logic is in the parent module.

use crate::state::{Side, StreamState};
use crate::{Headers, HostError, StreamEvent, StreamId, StreamInfo, Vm};

// === public API: downstream and upstream inputs ===

impl Vm {
    /// Creates a stream context. `wake` is called whenever new StreamEvents are queued for
    /// this stream from a callback that was NOT driven by this stream (http-call response,
    /// tick, queue-ready). `proxy_on_context_create` is sent lazily, right before the first
    /// `on_request_headers` (or at `finish_stream` if headers never came), like Envoy.
    pub fn create_stream(&mut self, info: StreamInfo, wake: Option<Box<dyn Fn() + Send>>) -> StreamId {
        let state = self.store.data_mut();
        let id = state.next_context_id;
        state.next_context_id += 1;
        state.streams.insert(id, StreamState::new(info, wake));
        id
    }

    /// Request headers from the client.
    pub fn request_headers(&mut self, s: StreamId, headers: Headers, end_of_stream: bool) -> Result<(), HostError> {
        self.input(s, |vm| vm.on_headers(s, Side::Request, headers, end_of_stream))
    }

    /// A request body chunk from the client (`end_of_stream` only if no trailers follow).
    pub fn request_data(&mut self, s: StreamId, data: &[u8], end_of_stream: bool) -> Result<(), HostError> {
        self.input(s, |vm| vm.on_data(s, Side::Request, data.to_vec(), end_of_stream))
    }

    /// Request trailers from the client (end of the request).
    pub fn request_trailers(&mut self, s: StreamId, trailers: Headers) -> Result<(), HostError> {
        self.input(s, |vm| vm.on_trailers(s, Side::Request, trailers))
    }

    /// Response headers from the upstream (ignored after a local reply replaced it).
    pub fn response_headers(&mut self, s: StreamId, headers: Headers, end_of_stream: bool) -> Result<(), HostError> {
        self.input(s, |vm| vm.on_headers(s, Side::Response, headers, end_of_stream))
    }

    /// A response body chunk from the upstream.
    pub fn response_data(&mut self, s: StreamId, data: &[u8], end_of_stream: bool) -> Result<(), HostError> {
        self.input(s, |vm| vm.on_data(s, Side::Response, data.to_vec(), end_of_stream))
    }

    /// Response trailers from the upstream.
    pub fn response_trailers(&mut self, s: StreamId, trailers: Headers) -> Result<(), HostError> {
        self.input(s, |vm| vm.on_trailers(s, Side::Response, trailers))
    }

    /// The upstream failed after its response began (`details` is what Envoy would put in
    /// `response.code_details`, e.g. `upstream_reset_after_response_started{remote_reset}`),
    /// readable by the filter as that property from now on, `on_log` included. With
    /// `end_response` the filter also gets the end of the response body (an empty chunk with
    /// end of stream), so it can close the answer itself, say with a final error event. Envoy
    /// resets the client's stream instead; `ferrogate serve` ends event streams this way.
    pub fn upstream_reset(&mut self, s: StreamId, details: &str, end_response: bool) -> Result<(), HostError> {
        if let Some(st) = self.st(s) {
            st.code_details = Some(details.to_string());
        }
        if end_response {
            return self.response_data(s, &[], true);
        }
        Ok(())
    }

    /// Runs one downstream/upstream input on stream `s` (unless it already ended), then
    /// settles deferred actions.
    fn input(&mut self, s: StreamId, run: impl FnOnce(&mut Self)) -> Result<(), HostError> {
        if self.begin(s)? {
            run(self);
        }
        self.settle(Some(s));
        Ok(())
    }

    /// Stream finished (normally, or client reset when `reset`): on_log, on_done,
    /// on_delete (Envoy's order). Outstanding callouts of the stream survive it.
    ///
    /// Returns the filter state the stream's filter wrote with `proxy_set_property`, by path
    /// (segments joined by NUL), for what the host does at the end of a stream (Envoy: access
    /// logs; `ferrogate serve`: the request's span).
    pub fn finish_stream(&mut self, s: StreamId, reset: bool) -> std::collections::HashMap<Vec<u8>, Vec<u8>> {
        if self.st(s).is_none() {
            return Default::default();
        }
        if self.failed.is_none() {
            if reset {
                log::debug!("stream {s} reset by the client");
            }
            self.end_callbacks(s);
        }
        let state = self.store.data_mut().streams.remove(&s).map(|st| st.filter_state).unwrap_or_default();
        self.settle(Some(s));
        state
    }

    /// Events for one stream since the last call, in order.
    pub fn take_events(&mut self, s: StreamId) -> Vec<StreamEvent> {
        self.st(s)
            .map(|st| {
                st.dirty = false;
                std::mem::take(&mut st.events)
            })
            .unwrap_or_default()
    }
}

// === internals ===

impl Vm {
    /// Whether an input may reach the filter. A failed VM fails the stream instead; after
    /// a local reply the request is dropped and the upstream response ignored.
    fn begin(&mut self, s: StreamId) -> Result<bool, HostError> {
        let failed = self.failed.is_some();
        let st = self.st(s).ok_or(HostError::UnknownStream(s))?;
        if failed {
            crate::reply::fail_stream(st);
            return Ok(false);
        }
        Ok(!st.done && !st.local_reply)
    }

    /// Sends `proxy_on_context_create(s, root)` once; false if the guest trapped.
    pub(super) fn ensure_created(&mut self, s: StreamId) -> bool {
        let Some(st) = self.st(s) else {
            return false;
        };
        if std::mem::replace(&mut st.created, true) {
            return true;
        }
        let root = self.root();
        let g = std::sync::Arc::clone(&self.guest);
        let f = g.context_create.as_ref();
        self.call(f, s, (s as i32, root as i32)).is_ok()
    }

    /// on_log, on_done, on_delete; maps are readable again in on_log (access-log copies).
    fn end_callbacks(&mut self, s: StreamId) {
        if !self.ensure_created(s) {
            return;
        }
        if let Some(st) = self.st(s) {
            st.in_log = true;
        }
        let g = std::sync::Arc::clone(&self.guest);
        if self.call(g.log.as_ref(), s, s as i32).is_err() {
            return;
        }
        if self.call(g.done.as_ref(), s, s as i32).is_err() {
            return;
        }
        let _ = self.call(g.delete.as_ref(), s, s as i32);
    }
}
