//! Response phase: gateway headers, and the usage tracker watching the body as it streams by.
//!
//! The body is never held: each chunk goes on as it arrives (the tracker keeps a bounded tail
//! or the one SSE event in progress). The rewrites are removing the usage chunk the gateway
//! asked for on the client's behalf, which the client did not request, translating, and
//! cutting a stream that overruns its budget ([`super::cut`]).

use ferrogate_core::clouds::invoke::Reframer;
use ferrogate_core::decimal::Decimal;
use ferrogate_core::translate::stream::StreamTranslator;
use ferrogate_core::translate::Outbound;
use ferrogate_core::usage::{Chunk, Tracker};
use ferrogate_core::{epp, header_map, headers};
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::{Action, MapType};

use super::Stream;

impl Stream {
    pub(super) fn on_response_headers(&mut self, end_of_stream: bool) -> Action {
        if let Some(action) = self.mcp_response_headers(end_of_stream) {
            return action;
        }
        if let Some(action) = self.federated_response_headers(end_of_stream) {
            return action;
        }
        if let Some(action) = self.a2a_response_headers(end_of_stream) {
            return action;
        }
        // One hostcall for the whole map instead of one per header.
        let (mut status, mut upstream_id, mut streaming, mut has_length) = (None, None, false, false);
        let (mut abandoned, mut retry_after, mut plain, mut amzn_id) = (false, None, false, None);
        let (mut eventstream, mut served) = (false, None);
        let map = crate::raw::header_map(MapType::HttpResponseHeaders);
        for (name, value) in header_map::pairs(&map) {
            match name {
                b":status" => status = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok()),
                b"content-type" => {
                    // Bedrock streams are AWS event-stream frames (made SSE here).
                    eventstream = value.starts_with(b"application/vnd.amazon.eventstream");
                    streaming = eventstream || value.starts_with(b"text/event-stream");
                    plain = value.starts_with(b"text/plain");
                }
                b"content-length" => has_length = true,
                b"x-ferrogate-abandoned" => abandoned = true,
                b"retry-after" => retry_after = Some(value),
                b"x-amzn-requestid" => amzn_id = Some(value),
                name if name == headers::REQUEST_ID.as_bytes() => upstream_id = Some(value),
                name if name == epp::SERVED_HEADER.as_bytes() => served = Some(value),
                _ => {}
            }
        }
        if let Some(served) = served {
            self.take_served(served);
        }
        self.status = status.unwrap_or(0);
        self.observe_answers(self.status, retry_after, abandoned);
        self.response_complete = end_of_stream;
        let overhead_us = Decimal::new(self.overhead_ns / 1_000);
        self.set_http_response_header(headers::OVERHEAD_US, Some(overhead_us.as_str()));
        if self.queued_ns > 0 {
            let queued_ms = Decimal::new(self.queued_ns / 1_000_000);
            self.set_http_response_header(headers::QUEUED_MS, Some(queued_ms.as_str()));
        }
        if let Some(routed) = &self.routed {
            self.set_http_response_header(headers::PROVIDER, Some(self.provider_name()));
            self.set_http_response_header(headers::MODEL, Some(&routed.upstream_model));
            // Keep the provider's own id (useful for its support) before ours replaces it.
            if let Some(upstream_id) = upstream_id {
                if Some(upstream_id) != self.request_id.as_deref().map(str::as_bytes) {
                    self.set_http_response_header_bytes(headers::UPSTREAM_REQUEST_ID, Some(upstream_id));
                }
            }
            self.streamed = streaming;
            self.prepare_reframing(eventstream);
            let tracker = Tracker::new(self.usage_dialect, streaming, self.hide_usage);
            let finish_reasons = self.shared.plugin.as_ref().is_some_and(|p| p.gen_ai_attributes);
            self.tracker = Some(if finish_reasons { tracker.with_finish_reasons() } else { tracker });
            if (streaming && self.hide_usage || self.translation.is_some() || self.reframer.is_some()) && has_length {
                // Removing an event, or translating the body, changes the length.
                self.set_http_response_header("content-length", None);
            }
            self.name_answer(amzn_id);
            self.prepare_translation(streaming);
            self.meter_answer(streaming);
        }
        let hold_for_guard = self.guard.is_some() && self.guard_answer_headers(streaming, has_length);
        if let Some(id) = &self.request_id {
            self.set_http_response_header(headers::REQUEST_ID, Some(id));
        }
        if let Some(outcome) = self.cache_outcome() {
            self.set_http_response_header(super::cache::HEADER, Some(outcome.as_str()));
        }
        if plain && self.hold_proxy_error(end_of_stream) {
            return Action::Pause;
        }
        // A buffered translation holds the headers too, so an answer that cannot be translated
        // can still become a 502 (needs `allow_on_headers_stop_iteration`, as routing does).
        if (hold_for_guard || self.translation.is_some() && self.stream_translator.is_none()) && !end_of_stream {
            return Action::Pause;
        }
        Action::Continue
    }

    /// Gives a translated answer whose provider names none (Bedrock) an id: the provider's
    /// request id, else the gateway's (Responses clients store and continue answers by it).
    fn name_answer(&mut self, provider_request_id: Option<&[u8]>) {
        let Some((_, ctx)) = self.translation.as_mut() else { return };
        let id = provider_request_id.and_then(|v| std::str::from_utf8(v).ok()).or(self.request_id.as_deref());
        ctx.answer_id = id.unwrap_or_default().to_string();
    }

    /// Bedrock InvokeModel's event stream (Claude's answer, in Anthropic's events) is made
    /// Anthropic's server-sent events first: the usage tracker, the meter and a translator
    /// then read it as they read Anthropic's own stream. ConverseStream has its own decoder.
    fn prepare_reframing(&mut self, eventstream: bool) {
        let converse = matches!(&self.translation, Some((pair, _)) if pair.outbound == Outbound::Converse);
        if eventstream && !converse {
            self.reframer = Some(Reframer::default());
            self.set_http_response_header("content-type", Some("text/event-stream"));
        }
    }

    /// A translated answer: a successful stream is translated event by event as it flows;
    /// anything else is buffered, and the client gets JSON in its dialect.
    fn prepare_translation(&mut self, streaming: bool) {
        match &self.translation {
            Some((pair, ctx)) if streaming && (200..300).contains(&self.status) => {
                let created = self.started_ns / 1_000_000_000;
                self.stream_translator = Some(StreamTranslator::new(*pair, ctx, created));
                self.set_http_response_header("content-type", Some("text/event-stream"));
            }
            Some(_) => self.set_http_response_header("content-type", Some("application/json")),
            None => {}
        }
    }

    pub(super) fn on_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if let Some(action) = self.mcp_response_body(body_size, end_of_stream) {
            return action;
        }
        if let Some(action) = self.federated_response_body(body_size, end_of_stream) {
            return action;
        }
        if let Some(action) = self.a2a_response_body(body_size, end_of_stream) {
            return action;
        }
        if end_of_stream {
            self.response_complete = true;
        }
        if self.proxy_error {
            return self.rewrite_proxy_error(body_size, end_of_stream);
        }
        if self.stream_translator.is_none() && self.translation.is_some() {
            return self.translate_response(body_size, end_of_stream);
        }
        if self.guard_holds_answer() {
            return self.guarded_answer(body_size, end_of_stream);
        }
        if self.stream_translator.is_none() && self.tracker.is_none() && self.reframer.is_none() {
            return Action::Continue;
        }
        if self.was_cut() {
            // The client has its final event: the rest of the upstream's answer is dropped.
            if body_size > 0 {
                self.set_http_response_body(0, body_size, &[]);
            }
            return Action::Continue;
        }
        // Not paused, so the buffer is exactly this chunk.
        let chunk = self.get_http_response_body(0, body_size).unwrap_or_default();
        let reframed = self.reframer.is_some();
        let chunk = self.reframe(chunk, end_of_stream);
        let output_metered = super::cut::meters_output(self.translation.as_ref());
        let cut_at = if output_metered { None } else { self.metered(&chunk, end_of_stream) };
        let passed = chunk.get(..cut_at.unwrap_or(chunk.len())).unwrap_or_default();
        let eos = end_of_stream && cut_at.is_none();
        let mut out = if self.stream_translator.is_some() {
            Some(self.translate_stream(passed, eos))
        } else {
            self.track(passed, eos)
        };
        let cut_at = if output_metered { self.meter_output(out.as_mut(), end_of_stream) } else { cut_at };
        let eos = end_of_stream && cut_at.is_none();
        if eos {
            if let Some(last) = self.end_of_metered() {
                out.get_or_insert_with(|| passed.to_vec()).extend(last);
            }
        }
        if reframed && out.is_none() {
            out = Some(passed.to_vec());
        }
        if cut_at.is_some() {
            let mut out = out.unwrap_or_else(|| passed.to_vec());
            self.cut_stream(&mut out);
            self.set_http_response_body(0, body_size, &out);
        } else if self.guard_streams() {
            let out = out.unwrap_or_else(|| passed.to_vec());
            let out = self.guard_stream(&out, eos);
            self.capture_bytes(&out);
            self.set_http_response_body(0, body_size, &out);
        } else if let Some(out) = out {
            self.capture_bytes(&out);
            self.set_http_response_body(0, body_size, &out);
        } else {
            self.capture_bytes(passed);
        }
        Action::Continue
    }

    /// Meters a chunk of translated output (see [`super::cut::meters_output`]), cut short
    /// where it takes the answer past its allowance; where it was cut.
    fn meter_output(&mut self, out: Option<&mut Vec<u8>>, end_of_stream: bool) -> Option<usize> {
        let out = out?;
        let at = self.metered(out, end_of_stream)?;
        out.truncate(at);
        Some(at)
    }

    /// The provider's bytes as the rest of the response path reads them: re-framed as
    /// server-sent events for Bedrock InvokeModel streams, else as they came.
    fn reframe(&mut self, chunk: Vec<u8>, end_of_stream: bool) -> Vec<u8> {
        let Some(reframer) = self.reframer.as_mut() else { return chunk };
        let mut out = reframer.feed(&chunk);
        if end_of_stream {
            out.extend(reframer.finish());
        }
        out
    }

    /// A chunk of an answer in the client's dialect: watched by the usage tracker, which may
    /// remove the usage event the gateway asked for. `Some`: the bytes the client gets instead.
    fn track(&mut self, chunk: &[u8], end_of_stream: bool) -> Option<Vec<u8>> {
        let tracker = self.tracker.as_mut()?;
        let verdict = if end_of_stream { tracker.on_end(chunk) } else { tracker.on_chunk(chunk) };
        // Time to first token: the first event carrying output (any byte for JSON bodies).
        if self.first_byte_ns.is_none() && tracker.first_token_seen() {
            self.first_byte_ns = Some(self.callback_start_ns);
        }
        match verdict {
            Chunk::Replace(bytes) => Some(bytes),
            Chunk::Forward => None,
        }
    }
}

impl Stream {
    /// A chunk of a translated stream: its events rewritten as they pass (the usage tracker
    /// reads the provider's own events first); returns the client's bytes.
    fn translate_stream(&mut self, chunk: &[u8], end_of_stream: bool) -> Vec<u8> {
        if let Some(tracker) = self.tracker.as_mut() {
            let _ = if end_of_stream { tracker.on_end(chunk) } else { tracker.on_chunk(chunk) };
        }
        let Some(translator) = self.stream_translator.as_mut() else { return chunk.to_vec() };
        let mut out = translator.feed(chunk);
        if end_of_stream {
            out.extend(translator.finish());
        }
        if self.first_byte_ns.is_none() && !out.is_empty() {
            self.first_byte_ns = Some(self.callback_start_ns);
        }
        out
    }

    /// A translated answer that is not a stream (or an error answer to one): buffered whole, its usage
    /// read in the provider's dialect, then replaced by its translation — an error answer by
    /// the client dialect's error envelope, status kept.
    fn translate_response(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            return Action::Pause;
        }
        let Some((pair, ctx)) = self.translation.take() else { return Action::Continue };
        let body = self.get_http_response_body(0, body_size).unwrap_or_default();
        if let Some(tracker) = self.tracker.as_mut() {
            let _ = tracker.on_end(&body);
        }
        if self.first_byte_ns.is_none() {
            self.first_byte_ns = Some(self.callback_start_ns);
        }
        let translated = if (200..300).contains(&self.status) {
            let now_secs = self.started_ns / 1_000_000_000;
            pair.response(&body, &ctx, now_secs).unwrap_or_else(|e| {
                log::warn!("#{} untranslatable answer from the provider: {e}", self.id);
                // The headers are still held: the client gets a 502, not a 2xx with an error.
                self.status = 502;
                self.set_http_response_header(":status", Some("502"));
                pair.error_body(502, format!("the provider's answer could not be translated: {e}").as_bytes())
            })
        } else {
            pair.error_body(self.status, &body)
        };
        if self.guard_holds_answer() {
            return self.guard_answer(translated, body_size);
        }
        self.capture_bytes(&translated);
        self.set_http_response_body(0, body_size, &translated);
        Action::Continue
    }

    /// A successful answer (not a stream, not translated) held whole for the output rules.
    fn guarded_answer(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if !end_of_stream {
            return Action::Pause;
        }
        let body = self.get_http_response_body(0, body_size).unwrap_or_default();
        let _ = self.track(&body, true);
        if self.first_byte_ns.is_none() {
            self.first_byte_ns = Some(self.callback_start_ns);
        }
        self.guard_answer(body, body_size)
    }
}
