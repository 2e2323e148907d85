//! Local replies, resets and VM-failure replies, plus the runner for deferred stream
//! actions. Envoy semantics (§2): a local reply aborts the decoder chain and, if no
//! response has started, runs through this plugin's own encoder callbacks; if response
//! headers exist but were not sent it goes straight to the codec; once response headers
//! went out, the stream is reset instead.

use crate::state::{Deferred, Direction, Hold, LocalReply, Side, StreamState};
use crate::{Headers, StreamEvent, StreamId, Vm};

/// Details Envoy records for a failed VM's streams.
const FAIL_DETAILS: &str = "wasm_fail_stream";

/// Fails a stream of a failed VM without entering the guest: a 500 with an empty body if
/// no response headers were sent, else a reset. Idempotent.
pub(crate) fn fail_stream(st: &mut StreamState) {
    if st.done {
        return;
    }
    st.done = true;
    if st.resp.eos_emitted {
        return; // the response is already complete downstream
    }
    if st.response_started {
        st.emit(StreamEvent::Reset { details: FAIL_DETAILS.into() });
        return;
    }
    st.response_started = true;
    st.emit(StreamEvent::AbortUpstream { details: FAIL_DETAILS.into() });
    let headers = Headers::from_pairs([(":status", "500")]);
    st.emit(StreamEvent::ResponseHeaders { headers, end_of_stream: true });
}

/// Envoy `prepareLocalReply`: `:status`, the guest's headers appended, `content-length`
/// and a default `content-type: text/plain` for a non-empty body, both removed otherwise.
pub(crate) fn reply_headers(reply: &LocalReply) -> Headers {
    let mut h = Headers::new();
    h.add(":status", reply.status.to_string());
    for (k, v) in reply.headers.iter().filter(|(k, _)| *k != ":status") {
        h.add(k, v.to_vec());
    }
    if reply.body.is_empty() {
        h.remove("content-length");
        h.remove("content-type");
    } else {
        h.set("content-length", reply.body.len().to_string());
        if h.get("content-type").is_none() {
            h.add("content-type", "text/plain");
        }
    }
    h
}

/// The decoder chain is aborted: whatever the request side holds is dropped.
fn abort_request(req: &mut Direction) {
    req.buffer = None;
    req.chunk = None;
    req.buffering = false;
    req.hold = Hold::None;
    req.data_stopped = false;
    req.trailers_held = false;
    req.trailers_unseen = false;
}

impl Vm {
    /// Sends a local reply on stream `s` (from the guest, a buffer overflow, …).
    pub(crate) fn send_local_reply(&mut self, s: StreamId, reply: LocalReply) {
        let Some(st) = self.st(s) else {
            return;
        };
        if st.done {
            return;
        }
        if st.response_started {
            st.emit(StreamEvent::Reset { details: reply.details });
            st.done = true;
            return;
        }
        st.local_reply = true;
        st.reply_gen += 1;
        let generation = st.reply_gen;
        abort_request(&mut st.req);
        st.emit(StreamEvent::AbortUpstream { details: reply.details.clone() });
        let headers = reply_headers(&reply);
        let has_body = !reply.body.is_empty();
        if st.resp.headers.is_some() {
            // Response headers exist but were not sent: straight to the codec.
            st.resp = Direction::default();
            st.resp.eos_emitted = true;
            st.response_started = true;
            st.emit(StreamEvent::ResponseHeaders { headers, end_of_stream: !has_body });
            if has_body {
                st.emit(StreamEvent::ResponseData { data: reply.body, end_of_stream: true });
            }
            return;
        }
        // Through the encoder chain: this plugin's on_response_* see its own reply.
        self.on_headers(s, Side::Response, headers, !has_body);
        let same_reply = self.st(s).is_some_and(|st| st.reply_gen == generation && !st.done);
        if has_body && same_reply {
            self.on_data(s, Side::Response, reply.body, true);
        }
    }

    /// Runs deferred stream actions (continue / close / local reply) of every stream until
    /// none is left; actions may run guest code that defers more.
    pub(crate) fn run_deferred(&mut self) {
        loop {
            let next = self
                .store
                .data_mut()
                .streams
                .iter_mut()
                .find_map(|(id, st)| (!st.deferred.is_empty()).then(|| (*id, st.deferred.remove(0))));
            let Some((id, action)) = next else {
                return;
            };
            match action {
                Deferred::Continue(side) => self.resume(id, side),
                Deferred::Close => self.close(id),
                Deferred::LocalReply(reply) => self.send_local_reply(id, reply),
            }
        }
    }

    /// `proxy_close_stream`: Envoy resets the stream (details `wasm_close_stream`).
    fn close(&mut self, s: StreamId) {
        if let Some(st) = self.st(s) {
            if !st.done {
                st.emit(StreamEvent::Reset { details: "wasm_close_stream".into() });
                st.done = true;
            }
        }
    }

    /// End of a top-level entry: run deferred actions, then wake the drivers of streams
    /// that got events from something other than their own input.
    pub(crate) fn settle(&mut self, driver: Option<StreamId>) {
        self.run_deferred();
        for (id, st) in self.store.data_mut().streams.iter_mut() {
            if std::mem::take(&mut st.dirty) && Some(*id) != driver {
                if let Some(wake) = &st.wake {
                    wake();
                }
            }
        }
    }

    pub(crate) fn st(&mut self, s: StreamId) -> Option<&mut StreamState> {
        self.store.data_mut().streams.get_mut(&s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_headers_follow_envoy() {
        let mut reply = LocalReply {
            status: 403,
            details: String::new(),
            body: b"no".to_vec(),
            headers: Headers::from_pairs([("X-A", "1"), ("content-length", "99")]),
        };
        let h = reply_headers(&reply);
        assert_eq!(h.0[0], (":status".to_string(), b"403".to_vec()));
        assert_eq!(h.get("content-length"), Some(&b"2"[..]));
        assert_eq!(h.get("content-type"), Some(&b"text/plain"[..]));
        assert_eq!(h.get("x-a"), Some(&b"1"[..]));
        reply.body.clear();
        reply.headers.add("content-type", "application/json");
        let h = reply_headers(&reply);
        assert!(h.get("content-length").is_none());
        assert!(h.get("content-type").is_none());
    }
}
