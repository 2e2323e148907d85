//! Stored responses in the data path (`ferrogate_core::stored`).
//!
//! - **Storing.** A `POST /v1/responses` that wants its response stored (`store` not `false`),
//!   on a filter with a sidecar, keeps a copy of its request and of the answer the client gets,
//!   up to [`MAX_CAPTURE_BYTES`]. When a 2xx answer ends, its last bytes are held while the
//!   copy goes to the sidecar's `POST /v1/responses`; the client gets them once the sidecar
//!   answered (or the call failed: the answer is never lost for the store's sake). So a read
//!   right after the answer finds the response. No other request pays anything beyond one
//!   `Option` check per response chunk.
//! - **Reading and deleting.** `GET`/`DELETE /v1/responses/{id}` and `GET
//!   /v1/responses/{id}/input_items` are asked of the sidecar once the key is authenticated,
//!   with the key's digest as the owner; its answer (OpenAI's shapes) is the client's. Without
//!   a sidecar there is no store: 501 as before.

use std::time::Duration;

use ferrogate_core::config::Config;
use ferrogate_core::decimal::Decimal;
use ferrogate_core::openai::ApiError;
use ferrogate_core::plugin::PluginConfig;
use ferrogate_core::route::split_query;
use ferrogate_core::stored::chain::{Family, COST_HEADER, FAMILY_HEADER, ORIGIN_HEADER, TOKENS_HEADER};
use ferrogate_core::stored::conversations::CONVERSATION_HEADER;
use ferrogate_core::stored::{
    self, Lifecycle, Op, MAX_CAPTURE_BYTES, OWNER_GROUP_HEADER, OWNER_HEADER, REQUEST_BYTES_HEADER, STORE_PATH,
    STREAMED_HEADER,
};
use ferrogate_core::translate::Outbound;
use proxy_wasm::hostcalls;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::{Action, BufferType};

use super::Stream;
use crate::sidecar_call;

/// How long a lifecycle call, or the store call holding an answer's end, may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// A response being copied for the store.
pub(crate) struct Capture {
    /// The client's request body.
    request: Vec<u8>,
    /// What the client got so far.
    answer: Vec<u8>,
    /// The key's digest (`""`: no keys).
    owner: String,
    /// The key's first group (`""`: none).
    group: String,
    /// The answer outgrew [`MAX_CAPTURE_BYTES`]: it is not stored.
    too_big: bool,
    /// The translation the answer comes through (`None`: native), kept here because a
    /// non-streamed answer's is spent before the answer ends.
    outbound: Option<Outbound>,
    /// The store call holding the answer's end.
    call: Option<u32>,
}

impl Stream {
    /// Starts copying a routed Responses request when it wants its response stored.
    pub(super) fn begin_capture(&mut self, plugin: &PluginConfig, config: &Config, body: &[u8]) {
        // A conversation's turn is appended to it even when the response is not stored.
        let wanted = self.appends_to().is_some() || stored::wants_store(body);
        if plugin.sidecar.is_none() || body.len() > MAX_CAPTURE_BYTES || !wanted {
            return;
        }
        let owner = stored::owner(config, self.caller).to_string();
        let group = stored::owner_group(config, self.caller).unwrap_or_default().to_string();
        let outbound = self.translation.as_ref().map(|(pair, _)| pair.outbound);
        let capture =
            Capture { request: body.to_vec(), answer: Vec::new(), owner, group, too_big: false, outbound, call: None };
        self.capture = Some(Box::new(capture));
        // A translated answer says what the gateway does with it.
        if let Some((_, ctx)) = self.translation.as_mut() {
            ctx.kept.store = true;
        }
    }

    /// Copies `bytes` the client gets.
    pub(super) fn capture_bytes(&mut self, bytes: &[u8]) {
        self.cache_bytes(bytes);
        let Some(c) = self.capture.as_mut() else { return };
        if c.too_big || c.answer.len() + bytes.len() > MAX_CAPTURE_BYTES {
            c.too_big = true;
            c.answer = Vec::new();
            return;
        }
        c.answer.extend_from_slice(bytes);
    }

    /// At the end of the answer: hands a complete 2xx answer to the store and holds the end
    /// until the store answers (`Pause`); anything else goes on as `action`.
    fn store_at_end(&mut self, action: Action) -> Action {
        let storable = (200..300).contains(&self.status) && !self.upstream_failed && !self.was_cut();
        // What the conversation limits sum over a chain (`limits::conversation`).
        let (tokens, cost) = if storable { self.billed() } else { (Decimal::new(0), None) };
        let conversation = self.appends_to().map(str::to_string);
        let Some(c) = self.capture.as_mut().filter(|c| storable && !c.too_big && !c.answer.is_empty()) else {
            self.capture = None;
            return action;
        };
        let Some(sidecar) = self.shared.plugin.as_ref().and_then(|p| p.sidecar.clone()) else { return action };
        let length = ferrogate_core::decimal::Decimal::new(c.request.len() as u64);
        let mut extra = vec![(REQUEST_BYTES_HEADER, length.as_str()), ("content-type", "application/octet-stream")];
        if self.streamed {
            extra.push((STREAMED_HEADER, "1"));
        }
        if !c.owner.is_empty() {
            extra.push((OWNER_HEADER, c.owner.as_str()));
        }
        if !c.group.is_empty() {
            extra.push((OWNER_GROUP_HEADER, c.group.as_str()));
        }
        // Untranslated: the provider keeps this response too, and a follow-up routed to it
        // may pass `previous_response_id` on (`chain`).
        let origin = self.routed.as_ref().and_then(|r| self.config.as_deref()?.providers.get(r.provider));
        if let Some(p) = origin.filter(|_| c.outbound.is_none()) {
            extra.push((ORIGIN_HEADER, p.name.as_str()));
        }
        // Whose signatures its reasoning bears: a follow-up sends them to that family only.
        extra.push((FAMILY_HEADER, Family::of(c.outbound).as_str()));
        extra.push((TOKENS_HEADER, tokens.as_str()));
        if let Some(id) = &conversation {
            extra.push((CONVERSATION_HEADER, id.as_str()));
        }
        if let Some(cost) = &cost {
            extra.push((COST_HEADER, cost.as_str()));
        }
        let mut body = std::mem::take(&mut c.request);
        body.append(&mut c.answer);
        match sidecar_call::call(&sidecar, "POST", STORE_PATH, &extra, Some(&body), TIMEOUT) {
            Ok(token) => {
                c.call = Some(token);
                Action::Pause
            }
            Err(e) => {
                log::warn!("#{} response not stored: the sidecar cannot be called ({e:?})", self.id);
                self.capture = None;
                action
            }
        }
    }

    /// The answer's tokens and price (`None`: its model is not priced), as its provider billed
    /// them (the usage is final: the answer has ended).
    fn billed(&mut self) -> (Decimal, Option<Decimal>) {
        let usage = self.tracker.as_mut().and_then(|t| t.finish()).unwrap_or_default();
        let tokens = Decimal::new(usage.prompt_tokens.saturating_add(usage.completion_tokens));
        let routed = self.routed.as_ref().zip(self.config.as_deref());
        let cost = routed.and_then(|(r, c)| {
            let provider = c.providers.get(r.provider)?;
            ferrogate_core::usage::cost_micro_usd(&c.pricing, &provider.name, &r.upstream_model, &usage)
        });
        (tokens, cost.map(Decimal::new))
    }

    /// The response body callback, then the store at the end of a captured answer.
    pub(super) fn on_response_body_stored(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let mut action = self.on_response_body(body_size, end_of_stream);
        if end_of_stream && self.cache.is_some() {
            action = self.cache_at_end(action);
        }
        if end_of_stream && self.capture.is_some() {
            return self.store_at_end(action);
        }
        action
    }

    /// Handles the answer to `token` when it is one of the store's calls; false otherwise.
    pub(super) fn on_store_answer(&mut self, token: u32, num_headers: usize, body_size: usize) -> bool {
        if self.lifecycle_call == Some(token) {
            self.timed(|s| {
                s.on_lifecycle_answer(num_headers, body_size);
                Action::Continue
            });
            return true;
        }
        if self.capture.as_ref().is_some_and(|c| c.call == Some(token)) {
            self.on_stored(num_headers, body_size);
            return true;
        }
        false
    }

    /// The store answered (or the call failed): the answer's end goes on.
    fn on_stored(&mut self, num_headers: usize, body_size: usize) {
        let status = sidecar_call::answer_status(num_headers);
        let body = sidecar_call::ok_body(status, body_size).unwrap_or_default();
        if status != Some(200) || !body.starts_with(br#"{"stored":true"#) {
            let said = String::from_utf8_lossy(body.get(..body.len().min(200)).unwrap_or_default()).into_owned();
            log::warn!("#{} response not stored: the sidecar answered {status:?} {said}", self.id);
        }
        self.capture = None;
        self.resume_http_response();
    }

    /// Asks the sidecar's store for a lifecycle call of the authenticated caller.
    pub(super) fn start_lifecycle(&mut self, config: &Config, call: Lifecycle<'_>, method: &str, path: &str) -> Action {
        let (bare, query) = split_query(path);
        let Some(sidecar) = self.shared.plugin.as_ref().and_then(|p| p.sidecar.clone()) else {
            return self.reply_error(&ApiError::response_lifecycle_unsupported(method, bare));
        };
        let method = if call.op == Op::Delete { "DELETE" } else { "GET" };
        let target = match query {
            Some(q) => format!("{bare}?{q}"),
            None => bare.to_string(),
        };
        let extra = stored::owner_headers(config, self.caller);
        match sidecar_call::call(&sidecar, method, &target, &extra, None, TIMEOUT) {
            Ok(token) => {
                self.lifecycle_call = Some(token);
                Action::Pause
            }
            Err(_) => self.reply_error(&ApiError::unavailable("The response store cannot be reached.")),
        }
    }

    /// The store's answer to a lifecycle call, relayed as it is (it is in OpenAI's shapes).
    fn on_lifecycle_answer(&mut self, num_headers: usize, body_size: usize) {
        self.lifecycle_call = None;
        let status = sidecar_call::answer_status(num_headers);
        let body = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten();
        match (status, body) {
            (Some(s @ (200 | 400 | 404)), Some(body)) => {
                if s == 404 {
                    self.reason = Some("response_not_found");
                }
                self.reply(s, &body);
            }
            _ => {
                self.reply_error(&ApiError::unavailable("The response store is unavailable; try again."));
            }
        }
    }
}
