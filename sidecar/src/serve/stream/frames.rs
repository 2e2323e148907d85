//! The body frames of one proxied request, client side and upstream side, into the filter VM.

use super::read::{self, FrameResult};
use super::{Driver, UPSTREAM_RESET_DETAILS};
use crate::serve::headers::trailers_to_filter;
use tokio::time::Instant;

impl Driver {
    pub(super) fn on_request_frame(&mut self, frame: FrameResult) {
        match frame {
            None => {
                self.request_body = None;
                if !self.request_eos_sent {
                    self.request_eos_sent = true;
                    self.call(|vm, id| vm.request_data(id, &[], true));
                }
            }
            Some(Err(e)) => {
                tracing::debug!(stream = self.id, error = %e, "client went away");
                self.reset = true;
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    let eos = self.request_body.as_ref().is_some_and(hyper::body::Body::is_end_stream);
                    if eos {
                        self.request_body = None;
                        self.request_eos_sent = true;
                    }
                    self.replay.record(&data);
                    self.call(|vm, id| vm.request_data(id, &data, eos));
                }
                Err(frame) => {
                    self.request_body = None;
                    self.request_eos_sent = true;
                    self.replay.give_up();
                    let trailers = frame.into_trailers().map(|t| trailers_to_filter(&t)).unwrap_or_default();
                    self.call(|vm, id| vm.request_trailers(id, trailers));
                }
            },
        }
    }

    /// A response frame and, once the client's body has begun, the rest of what the upstream
    /// connection read with it, as one filter call ([`read`]). The body's end in the same read
    /// ends that call.
    pub(super) async fn on_response_read(&mut self, frame: FrameResult) {
        let data = match frame {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(frame) => return self.on_response_frame(Some(Ok(frame))),
            },
            other => return self.on_response_frame(other),
        };
        // Until the client has its first body bytes (the time to first token; a translated
        // stream's first event may need a second upstream frame), each frame goes on at once:
        // joining it with a burst behind it would delay it for the sake of the later ones.
        let Some(body) = self.response_body.as_mut().filter(|_| self.client_body_started) else {
            return self.on_response_frame(Some(Ok(http_body::Frame::data(data))));
        };
        match read::rest_of_read(body, data).await {
            (data, Some(None)) => {
                self.response_body = None;
                self.response_eos_sent = true;
                self.call(|vm, id| vm.response_data(id, &data, true));
            }
            (data, stopped) => {
                self.on_response_frame(Some(Ok(http_body::Frame::data(data))));
                if let Some(stopped) = stopped {
                    self.on_response_frame(stopped);
                }
            }
        }
    }

    /// The upstream's answer ended before its end (reset, or silent past the idle timeout),
    /// told to the filter as Envoy's code `details`, which the filter records. An event stream
    /// is ended by the filter with a final error event the client can read; any other body
    /// cannot be mended and the client's stream is reset.
    pub(super) fn end_response_early(&mut self, details: &str) {
        self.response_body = None;
        self.response_deadline = None;
        let end = self.response_is_stream && !self.response_eos_sent;
        self.response_eos_sent = true;
        self.call(|vm, id| vm.upstream_reset(id, details, end));
        if !end {
            self.reset = true;
        }
    }

    /// When the response body counts as stalled if nothing more arrives from now on.
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        self.worker.upstream_idle_timeout().map(|t| Instant::now() + t)
    }

    pub(super) fn on_response_frame(&mut self, frame: FrameResult) {
        match frame {
            None => {
                self.response_body = None;
                if !self.response_eos_sent {
                    self.response_eos_sent = true;
                    self.call(|vm, id| vm.response_data(id, &[], true));
                }
            }
            Some(Err(e)) => {
                tracing::warn!(stream = self.id, error = %e, "upstream reset mid-response");
                self.end_response_early(UPSTREAM_RESET_DETAILS);
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => {
                    let eos = self.response_body.as_ref().is_some_and(hyper::body::Body::is_end_stream);
                    if eos {
                        self.response_body = None;
                        self.response_eos_sent = true;
                    }
                    self.call(|vm, id| vm.response_data(id, &data, eos));
                }
                Err(frame) => {
                    self.response_body = None;
                    self.response_eos_sent = true;
                    let trailers = frame.into_trailers().map(|t| trailers_to_filter(&t)).unwrap_or_default();
                    self.call(|vm, id| vm.response_trailers(id, trailers));
                }
            },
        }
    }
}
