//! The response side of an ext_proc stream: the gateway's response headers and body into the
//! filter, and what the filter releases back out in the stream's body mode (or, for a local
//! reply of the filter, one immediate response).

use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Out;
use envoy_types::pb::envoy::service::ext_proc::v3::{body_mutation, HttpBody, HttpHeaders};
use ferrogate_host::Headers;

use ferrogate_core::epp;

use super::super::{convert, BodyMode};
use super::{strip_host_headers, Driver};

impl Driver {
    /// The gateway's response headers, with the endpoint that served when it says
    /// (`envoy.lb` / `x-gateway-destination-endpoint-served`): passed to the filter in
    /// `x-ferrogate-served`, which attributes passive health and usage to it when a retry of
    /// the gateway walked past the pick. Upstreams' copies of host-only headers go first.
    pub(super) async fn on_response_headers(&mut self, h: HttpHeaders, served: Option<String>) {
        if !self.req.done || self.resp.started {
            return self.refuse("response headers before the request was routed, or twice").await;
        }
        self.resp.started = true;
        let mut headers = convert::headers_in(h.headers.as_ref());
        strip_host_headers(&mut headers);
        if let Some(served) = served {
            self.note_served(&served);
            headers.set(epp::SERVED_HEADER, served);
        }
        let eos = h.end_of_stream || self.response_mode == BodyMode::None;
        self.call(|vm, id| vm.response_headers(id, headers, eos));
        if self.response_mode != BodyMode::Duplex && !eos {
            self.resp.headers_answered = true;
            let common = convert::common(None, None, false);
            self.send(Ok(convert::headers_reply(Out::ResponseHeaders, common, None))).await;
        }
    }

    /// Logs a served endpoint other than the pick (a retry of the gateway moved the request).
    fn note_served(&self, served: &str) {
        let first = self.pick.as_deref().and_then(|p| p.split(',').next());
        if first != Some(served) {
            tracing::debug!(stream = self.id, served, pick = ?self.pick, "served by another endpoint than the pick");
        }
    }

    pub(super) async fn on_response_body(&mut self, b: HttpBody) {
        if !self.resp.started {
            return self.refuse("response body before response headers").await;
        }
        if self.response_mode != BodyMode::Streamed {
            self.resp.body_in.extend_from_slice(&b.body);
            return self.call(|vm, id| vm.response_data(id, &b.body, b.end_of_stream));
        }
        // STREAMED: each chunk gets its reply, carrying what the filter released so far.
        self.call(|vm, id| vm.response_data(id, &b.body, b.end_of_stream));
        self.resp.body_in = b.body;
        self.apply_events().await;
        if !b.end_of_stream && !self.ended && self.local.is_none() {
            self.answer_chunk().await;
        }
    }

    /// Answers one STREAMED response chunk with what the filter released since the last
    /// answer (no mutation when that is the chunk as received).
    pub(super) async fn answer_chunk(&mut self) {
        let out = std::mem::take(&mut self.resp.body_out);
        let changed = out != self.resp.body_in;
        let common = convert::common(None, changed.then_some(body_mutation::Mutation::Body(out)), false);
        self.send(Ok(convert::body_reply(Out::ResponseBody, common, None))).await;
    }

    pub(super) async fn on_released_head(&mut self, headers: Headers, end_of_stream: bool) {
        if let Some(local) = self.local.as_mut() {
            local.headers = headers;
            if end_of_stream {
                self.send_local().await;
            }
            return;
        }
        if !self.resp.headers_answered {
            self.resp.headers_answered = true;
            let common = convert::common(None, None, false);
            self.send(Ok(convert::headers_reply(Out::ResponseHeaders, common, None))).await;
        }
        if end_of_stream {
            self.resp.done = true;
            self.ended = true;
        }
    }

    pub(super) async fn on_released_data(&mut self, data: Vec<u8>, end_of_stream: bool) {
        if let Some(local) = self.local.as_mut() {
            local.body.extend_from_slice(&data);
            if end_of_stream {
                self.send_local().await;
            }
            return;
        }
        if self.response_mode == BodyMode::Duplex {
            if !data.is_empty() || end_of_stream {
                for part in convert::streamed(Out::ResponseBody, &data, end_of_stream) {
                    self.send(Ok(part)).await;
                }
            }
        } else if self.response_mode == BodyMode::Streamed {
            self.resp.body_out.extend_from_slice(&data);
            if end_of_stream {
                self.answer_chunk().await;
            }
        } else {
            self.resp.body_out.extend_from_slice(&data);
            if end_of_stream {
                let changed = self.resp.body_out != self.resp.body_in;
                let body = changed.then(|| body_mutation::Mutation::Body(std::mem::take(&mut self.resp.body_out)));
                let common = convert::common(None, body, false);
                self.send(Ok(convert::body_reply(Out::ResponseBody, common, None))).await;
            }
        }
        if end_of_stream {
            self.resp.done = true;
            self.ended = true;
        }
    }

    /// The filter's local reply, whole: one immediate response, and the stream is over.
    pub(super) async fn send_local(&mut self) {
        let local = self.local.take().unwrap_or_default();
        self.send(Ok(convert::immediate(&local.headers, local.body, &local.details))).await;
        self.ended = true;
    }
}
