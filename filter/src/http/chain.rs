//! `previous_response_id` and `conversation` in the data path
//! ([`ferrogate_core::stored::chain`]).
//!
//! A Responses request that continues a stored response (or a conversation) waits, its body
//! buffered, while the sidecar walks the chain (or reads the conversation's items) for the
//! caller's key (one call). The conversation is then rebuilt
//! in front of the request's input and the request is routed with it, so translated providers
//! (chat engines, Anthropic, Gemini) see every earlier turn. When the whole chain was created
//! natively by the OpenAI provider the request is routed to, the client's body goes instead,
//! `previous_response_id` and all: that provider keeps the conversation itself. An id the
//! caller's key does not own is refused exactly like one that never existed.
//!
//! A follow-up whose conversation has used a `tokens_per_conversation` or
//! `cost_usd_per_conversation` limit of its key, groups or org is refused here (429, not to be
//! retried): the chain's answer carries what its responses used.
//!
//! Requests without `previous_response_id`, and filters without a sidecar, pay one byte search
//! of the body ([`chain::previous_id`]) and nothing else.

use std::time::Duration;

use ferrogate_core::config::Config;
use ferrogate_core::limits::conversation::{self, Spent};
use ferrogate_core::openai::{self, ApiError};
use ferrogate_core::plugin::PluginConfig;
use ferrogate_core::route::{Api, RouteDecision};
use ferrogate_core::stored::chain::Continues;
use ferrogate_core::stored::{self, chain};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::HttpContext;
use proxy_wasm::types::{Action, BufferType};

use super::Stream;
use crate::sidecar_call;

/// How long the chain call may take.
const TIMEOUT: Duration = Duration::from_secs(5);

/// Where a request's chain stands.
pub(crate) enum ChainState {
    /// The call with this token is in flight; the request waits.
    Pending(u32, Continues),
    /// The conversation, rebuilt, the provider that created all of it natively (`""`: none),
    /// and what the request continues.
    Ready { rebuilt: chain::Rebuilt, origin: String, continues: Continues },
}

impl Stream {
    /// Before routing a Responses request: `Ok(())` when it continues nothing or its chain is
    /// here; `Err(action)` when it waits for the chain (`Pause`, routed when it arrives) or was
    /// answered (`background: true`, a bad id, no store to ask).
    pub(super) fn prepare_responses(
        &mut self,
        plugin: &PluginConfig,
        config: &Config,
        body: &[u8],
    ) -> Result<(), Action> {
        if self.chain.is_some() {
            return Ok(());
        }
        if let Err(e) = stored::check_background(body) {
            self.model_requested = super::head::requested_model(body, Api::Responses);
            return Err(self.reply_error(&e));
        }
        let continues = match chain::continues(body) {
            Ok(Some(continues)) => continues,
            Ok(None) => return Ok(()),
            Err(e) => return Err(self.reply_error(&e)),
        };
        let Some(sidecar) = plugin.sidecar.as_ref() else {
            // No store: an OpenAI target may still know the id; everything else refuses it.
            return Ok(());
        };
        let extra = stored::owner_headers(config, self.caller);
        let path = format!("{}{}", chain::CHAIN_PATH, continues.id());
        match sidecar_call::call(sidecar, "GET", &path, &extra, None, TIMEOUT) {
            Ok(token) => {
                self.chain = Some(Box::new(ChainState::Pending(token, continues)));
                self.api = Some(Api::Responses);
                Err(Action::Pause)
            }
            Err(_) => Err(self.reply_error(&ApiError::unavailable("The response store cannot be reached."))),
        }
    }

    /// Whether `token` is this request's chain call.
    pub(super) fn is_chain_call(&self, token: u32) -> bool {
        matches!(self.chain.as_deref(), Some(ChainState::Pending(t, _)) if *t == token)
    }

    /// The sidecar answered the chain call (or it failed): rebuild and route, or refuse.
    pub(super) fn on_chain(&mut self, num_headers: usize, body_size: usize) {
        let status = sidecar_call::answer_status(num_headers);
        let answer = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten();
        let Some(plugin) = self.shared.plugin.clone() else { return };
        let ready = match (status, answer) {
            (Some(200), Some(answer)) => self.rebuild(&answer),
            (Some(400), Some(answer)) => Err(Refusal::Relay(answer)),
            _ => Err(Refusal::Error(ApiError::unavailable("The response store is unavailable; try again."))),
        };
        let action = self.timed(|s| match ready {
            Ok(state) => {
                s.chain = Some(Box::new(state));
                s.finish(&plugin)
            }
            Err(Refusal::Relay(body)) => {
                s.reason = Some(relayed_reason(&body));
                s.reply(400, &body)
            }
            Err(Refusal::Error(e)) => s.reply_error(&e),
            // Nothing frees a conversation's use: the SDKs must not retry.
            Err(Refusal::Spent(e)) => s.reply_error_with(&e, Some(("x-should-retry", "false"))),
        });
        if action == Action::Continue {
            self.resume_http_request();
        }
    }

    fn rebuild(&self, answer: &[u8]) -> Result<ChainState, Refusal> {
        let found = chain::Chain::decode(answer).map_err(Refusal::Error)?;
        if let Some(config) = self.config.as_deref() {
            let spent = Spent { tokens: found.tokens, micro_usd: found.cost_micros };
            conversation::check(config, self.caller, spent).map_err(Refusal::Spent)?;
        }
        let body = self.get_request_body().unwrap_or_default();
        let rebuilt = chain::rebuild(&body, found.items).map_err(Refusal::Error)?;
        let Some(ChainState::Pending(_, continues)) = self.chain.as_deref() else {
            return Err(Refusal::Error(ApiError::unavailable("The chain arrived for no request.")));
        };
        Ok(ChainState::Ready { rebuilt, origin: found.origin, continues: continues.clone() })
    }

    fn get_request_body(&self) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::HttpRequestBody, 0, self.body_size).ok().flatten()
    }

    /// The stored response or conversation the request continues, for its usage record.
    pub(super) fn continues(&self) -> Option<&str> {
        match self.chain.as_deref() {
            Some(ChainState::Ready { continues, .. }) => Some(continues.id()),
            _ => None,
        }
    }

    /// The conversation this turn is appended to, when the request named one.
    pub(super) fn appends_to(&self) -> Option<&str> {
        match self.chain.as_deref() {
            Some(ChainState::Ready { continues: Continues::Conversation(id), .. }) => Some(id),
            _ => None,
        }
    }

    /// A translated answer echoes what the request continues, as OpenAI's does.
    pub(super) fn echo_continued(&mut self) {
        let Some(ChainState::Ready { continues, .. }) = self.chain.as_deref() else { return };
        let Some((_, ctx)) = self.translation.as_mut() else { return };
        match continues {
            Continues::Response(id) => ctx.kept.previous_response_id = Some(id.clone()),
            Continues::Conversation(id) => ctx.kept.conversation = Some(id.clone()),
        }
    }

    /// The rebuilt conversation to route, when the request continues a chain.
    pub(super) fn rebuilt_body(&self) -> Option<Vec<u8>> {
        match self.chain.as_deref() {
            Some(ChainState::Ready { rebuilt, .. }) => Some(rebuilt.body.clone()),
            _ => None,
        }
    }

    /// After routing the rebuilt conversation: which body goes upstream. The client's own
    /// (with the upstream model) when the provider created the whole chain natively and is
    /// spoken to without translation; else the rebuilt one, without the reasoning another
    /// provider family signed (`chain::fit`). `original` is the client's body.
    pub(super) fn chain_body(&self, original: &[u8], d: &mut RouteDecision<'_>, rebuilt: &[u8]) -> bool {
        let native = matches!(self.chain.as_deref(),
            Some(ChainState::Ready { origin, .. }) if !origin.is_empty() && origin == d.provider);
        if native && d.translation.is_none() {
            d.body = d.body.is_some().then(|| match openai::find_model(original) {
                Ok(field) => openai::rewrite_model(original, field.span, &d.upstream_model),
                Err(_) => original.to_vec(),
            });
            return true;
        }
        if d.body.is_none() {
            d.body = Some(rebuilt.to_vec());
        }
        if let Some(ChainState::Ready { rebuilt, .. }) = self.chain.as_deref() {
            if let Err(e) = chain::fit(rebuilt, d) {
                log::warn!("#{} chain not fitted to {}: {}", self.id, d.provider, e.message);
            }
        }
        false
    }
}

/// Why a chained request is answered here.
enum Refusal {
    /// The store's own answer, in OpenAI's shape (an unknown id, a chain too long).
    Relay(Vec<u8>),
    Error(ApiError),
    /// The conversation has used a limit (`limits::conversation`).
    Spent(ApiError),
}

/// The metrics' `reason` of a relayed refusal: its `error.code` when it is one the store
/// answers, else its type.
fn relayed_reason(body: &[u8]) -> &'static str {
    let error: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    match error.as_ref().and_then(|e| e["error"]["code"].as_str()) {
        Some("previous_response_not_found") => "previous_response_not_found",
        Some("previous_response_chain_too_long") => "previous_response_chain_too_long",
        _ => "invalid_request_error",
    }
}
