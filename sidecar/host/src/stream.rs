//! The Envoy filter-manager state machine for one HTTP filter in front of the router.
//! Decoder (request) and encoder (response) sides share one implementation keyed by
//! [`Side`]: return-value mapping (§1.3), Pause-on-headers modes C (stop-all, body held by
//! the HCM) and D (stop-iteration, body still delivered) keyed on
//! `allow_on_headers_stop_iteration`, body buffering with chunk vs cumulative views (§1.4),
//! header-map pointer nulling (§1.5), buffer limits (§1.6) and stream end (§1.8).

mod api;

use crate::state::{Hold, LocalReply, Side, StreamState};
use crate::vm::len_i32;
use crate::{Headers, StreamEvent, StreamId, Vm};

fn headers_event(side: Side, headers: Headers, end_of_stream: bool) -> StreamEvent {
    match side {
        Side::Request => StreamEvent::RequestHeaders { headers, end_of_stream },
        Side::Response => StreamEvent::ResponseHeaders { headers, end_of_stream },
    }
}

fn data_event(side: Side, data: Vec<u8>, end_of_stream: bool) -> StreamEvent {
    match side {
        Side::Request => StreamEvent::RequestData { data, end_of_stream },
        Side::Response => StreamEvent::ResponseData { data, end_of_stream },
    }
}

fn trailers_event(side: Side, trailers: Headers) -> StreamEvent {
    match side {
        Side::Request => StreamEvent::RequestTrailers(trailers),
        Side::Response => StreamEvent::ResponseTrailers(trailers),
    }
}

/// Passes held headers on (to the router, or to the client). Does not null the map
/// pointer: Envoy only does that on a headers Continue or continue_stream.
fn release_headers(st: &mut StreamState, side: Side) {
    let dir = st.dir(side);
    if dir.headers_released {
        return;
    }
    dir.hold = Hold::None;
    dir.headers_released = true;
    let eos = dir.headers_eos;
    dir.eos_emitted |= eos;
    let headers = dir.headers.clone().unwrap_or_default();
    if side == Side::Response {
        st.response_started = true;
    }
    st.emit(headers_event(side, headers, eos));
}

// === filter-manager internals ===

impl Vm {
    /// Headers enter this filter (from the peer, or a local reply on the encoder side).
    pub(crate) fn on_headers(&mut self, s: StreamId, side: Side, headers: Headers, eos: bool) {
        let n = len_i32(headers.len());
        let Some(st) = self.st(s) else {
            return;
        };
        let dir = st.dir(side);
        dir.headers = Some(headers);
        dir.headers_live = true;
        dir.headers_eos = eos;
        dir.end = eos;
        if side == Side::Request && !self.ensure_created(s) {
            return;
        }
        let g = std::sync::Arc::clone(&self.guest);
        let f = g.headers(side == Side::Request);
        let Ok(ret) = self.call(f, s, (s as i32, n, i32::from(eos))) else {
            return;
        };
        self.after_headers(s, side, ret.unwrap_or(0));
        self.run_deferred();
    }

    /// §1.3 for headers: 0/2 Continue; 1 StopIteration (mode D) or stop-all (mode C);
    /// 3+ and any return after a local reply: stop-all.
    fn after_headers(&mut self, s: StreamId, side: Side, ret: i32) {
        let allow = self.store.data().rt.spec.allow_on_headers_stop_iteration;
        let forced = std::mem::take(&mut self.store.data_mut().stop_next);
        let Some(st) = self.st(s) else {
            return;
        };
        if st.done {
            return;
        }
        match ret {
            _ if forced => st.dir(side).hold = Hold::All,
            0 | 2 => {
                st.dir(side).headers_live = false;
                release_headers(st, side);
            }
            1 if allow => st.dir(side).hold = Hold::Iteration,
            _ => st.dir(side).hold = Hold::All,
        }
    }

    /// A body chunk arrives at this filter's position in the chain.
    pub(crate) fn on_data(&mut self, s: StreamId, side: Side, data: Vec<u8>, eos: bool) {
        let Some(st) = self.st(s) else {
            return;
        };
        let done = st.done;
        let dir = st.dir(side);
        if done || dir.headers.is_none() {
            return;
        }
        dir.end |= eos;
        if dir.hold == Hold::All {
            // Stopped-all: the HCM holds the data under flow control (never an error).
            dir.buffer.get_or_insert_with(Vec::new).extend_from_slice(&data);
            return;
        }
        self.deliver_body(s, side, data, eos);
    }

    /// Calls on_*_body with Envoy's view: after a Pause the chunk is appended to the held
    /// buffer first and the callback sees the total (an overflow skips the callback).
    fn deliver_body(&mut self, s: StreamId, side: Side, data: Vec<u8>, eos: bool) {
        let limit = self.store.data().rt.spec.body_buffer_limit;
        let Some(st) = self.st(s) else {
            return;
        };
        let dir = st.dir(side);
        if dir.buffering {
            let buf = dir.buffer.get_or_insert_with(Vec::new);
            buf.extend_from_slice(&data);
            if buf.len() > limit {
                return self.overflow(s, side);
            }
            dir.chunk = Some(Vec::new());
        } else {
            dir.chunk = Some(data);
        }
        let size = len_i32(dir.body_view().map_or(0, |b| b.len()));
        let g = std::sync::Arc::clone(&self.guest);
        let f = g.body(side == Side::Request);
        let Ok(ret) = self.call(f, s, (s as i32, size, i32::from(eos))) else {
            return;
        };
        self.after_body(s, side, ret.unwrap_or(0), eos);
        self.run_deferred();
    }

    /// §1.3 for bodies: 0 Continue (flush), 1 StopIterationAndBuffer (limit applies),
    /// 2 StopIterationAndWatermark, 3+ or after a local reply StopIterationNoBuffer.
    fn after_body(&mut self, s: StreamId, side: Side, ret: i32, eos: bool) {
        let limit = self.store.data().rt.spec.body_buffer_limit;
        let forced = std::mem::take(&mut self.store.data_mut().stop_next);
        let Some(st) = self.st(s) else {
            return;
        };
        if st.done {
            return;
        }
        let dir = st.dir(side);
        let chunk = dir.chunk.take().unwrap_or_default();
        dir.data_stopped = true;
        match ret {
            _ if forced => dir.buffering = false,
            0 => {
                let mut data = dir.buffer.take().unwrap_or_default();
                data.extend_from_slice(&chunk);
                dir.buffering = false;
                dir.data_stopped = false;
                self.continue_iteration(s, side, data, eos);
            }
            1 | 2 => {
                let buf = dir.buffer.get_or_insert_with(Vec::new);
                buf.extend_from_slice(&chunk);
                dir.buffering = ret == 1;
                if ret == 1 && buf.len() > limit {
                    self.overflow(s, side);
                }
            }
            _ => dir.buffering = false,
        }
    }

    /// Envoy `commonContinue` past this filter: held headers, then data, then trailers
    /// (trailers this filter has not seen yet go to its trailers callback first).
    fn continue_iteration(&mut self, s: StreamId, side: Side, data: Vec<u8>, eos: bool) {
        let Some(st) = self.st(s) else {
            return;
        };
        release_headers(st, side);
        let dir = st.dir(side);
        let eos = eos && !dir.eos_emitted;
        dir.eos_emitted |= eos;
        if !data.is_empty() || eos {
            st.emit(data_event(side, data, eos));
        }
        let dir = st.dir(side);
        if dir.trailers_unseen {
            self.deliver_trailers(s, side);
        } else if std::mem::take(&mut dir.trailers_held) {
            dir.eos_emitted = true;
            let trailers = dir.trailers.clone().unwrap_or_default();
            st.emit(trailers_event(side, trailers));
        }
    }

    /// Trailers arrive at this filter's position in the chain.
    pub(crate) fn on_trailers(&mut self, s: StreamId, side: Side, trailers: Headers) {
        let Some(st) = self.st(s) else {
            return;
        };
        let done = st.done;
        let dir = st.dir(side);
        if done || dir.headers.is_none() {
            return;
        }
        dir.end = true;
        dir.trailers = Some(trailers);
        if dir.hold == Hold::All {
            dir.trailers_unseen = true;
            return;
        }
        self.deliver_trailers(s, side);
    }

    fn deliver_trailers(&mut self, s: StreamId, side: Side) {
        let Some(st) = self.st(s) else {
            return;
        };
        let dir = st.dir(side);
        dir.trailers_unseen = false;
        dir.trailers_live = true;
        let n = len_i32(dir.trailers.as_ref().map_or(0, Headers::len));
        let g = std::sync::Arc::clone(&self.guest);
        let f = g.trailers(side == Side::Request);
        let Ok(ret) = self.call(f, s, (s as i32, n)) else {
            return;
        };
        self.after_trailers(s, side, ret.unwrap_or(0));
        self.run_deferred();
    }

    /// §1.3 for trailers: 0 Continue (flush everything held), anything else StopIteration.
    fn after_trailers(&mut self, s: StreamId, side: Side, ret: i32) {
        let forced = std::mem::take(&mut self.store.data_mut().stop_next);
        let Some(st) = self.st(s) else {
            return;
        };
        if st.done {
            return;
        }
        let dir = st.dir(side);
        dir.trailers_held = true;
        if forced || ret != 0 {
            dir.data_stopped = true;
            return;
        }
        dir.trailers_live = false;
        let data = dir.buffer.take().unwrap_or_default();
        dir.buffering = false;
        dir.data_stopped = false;
        self.continue_iteration(s, side, data, false);
    }

    /// Deferred `proxy_continue_stream`. After stop-all (mode C) Envoy restarts iteration
    /// at this filter, so it now gets the body the HCM held; otherwise held headers, data
    /// and trailers go on without calling the filter again.
    pub(crate) fn resume(&mut self, s: StreamId, side: Side) {
        let Some(st) = self.st(s) else {
            return;
        };
        if st.done || (side == Side::Request && st.local_reply) {
            return;
        }
        let dir = st.dir(side);
        let stopped = dir.hold != Hold::None || dir.data_stopped || dir.trailers_held || dir.trailers_unseen;
        if dir.headers.is_none() || !stopped {
            return;
        }
        if dir.hold == Hold::All {
            release_headers(st, side);
            let dir = st.dir(side);
            let body = dir.buffer.take();
            let eos = dir.end && dir.trailers.is_none() && !dir.headers_eos;
            dir.buffering = false;
            if body.is_some() || eos {
                self.deliver_body(s, side, body.unwrap_or_default(), eos);
            } else if dir.trailers_unseen {
                self.deliver_trailers(s, side);
            }
            return;
        }
        let data = dir.buffer.take().unwrap_or_default();
        dir.buffering = false;
        dir.data_stopped = false;
        let eos = dir.end && dir.trailers.is_none();
        self.continue_iteration(s, side, data, eos);
    }

    /// Buffer limit hit in buffering mode: 413 for requests; 500 (or a reset once the
    /// response started) for responses.
    fn overflow(&mut self, s: StreamId, side: Side) {
        if let Some(st) = self.st(s) {
            let dir = st.dir(side);
            (dir.chunk, dir.buffer, dir.buffering) = (None, None, false);
        }
        let (status, details, body): (u32, &str, &[u8]) = match side {
            Side::Request => (413, "request_payload_too_large", b"Payload Too Large"),
            Side::Response => (500, "response_payload_too_large", b"Internal Server Error"),
        };
        let reply = LocalReply { status, details: details.into(), body: body.to_vec(), headers: Headers::new() };
        self.send_local_reply(s, reply);
    }
}
