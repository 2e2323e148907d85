//! Usage accounting: token counts read from provider responses, their cost, and the usage
//! record the filter reports to the sidecar.
//!
//! The response body is forwarded as opaque bytes; [`Tracker`] only watches it go by, with
//! bounded memory:
//!
//! - **JSON responses** (`streaming == false`): a body of at most [`WHOLE_BODY_MAX`] bytes is kept
//!   whole and its top-level `usage` / `usageMetadata` is read by a typed parse at the end, so key
//!   order does not matter. A larger body keeps only its last [`TAIL_MAX`] bytes, and the last
//!   `"usage"` (`"usageMetadata"` for Gemini) object in that tail is parsed: every provider writes
//!   usage at (or next to) the end of its response object.
//! - **SSE responses** (`streaming == true`): events are split incrementally (any byte boundary,
//!   `\n`, `\r\n` or `\r` line ends). Only an incomplete event is buffered, capped at
//!   [`EVENT_MAX`]; a larger event (a Gemini image, say) degrades to the tail rule above instead of
//!   growing. Only events with a `"usage": {` / `"usageMetadata": {` object are JSON-parsed.
//! - **Bedrock ConverseStream** (`streaming == true` in [`UsageDialect::Converse`]): the body is
//!   AWS event-stream frames, not SSE; frames are decoded incrementally (one frame of at most
//!   [`EVENT_MAX`] bytes held) and the usage read from the `metadata` event. A frame that cannot
//!   be decoded degrades to the tail rule above over the rest of the body.
//!
//! Normalisation across dialects: `prompt_tokens` is the whole prompt, cached part included;
//! `cached_tokens` is the part read from a prompt cache; `completion_tokens` includes reasoning
//! ("thinking") tokens. Anthropic's `input_tokens` and Converse's `inputTokens` exclude cache
//! reads and writes, so they are added back; cache writes are billed as ordinary input (the
//! price table has no write price).

mod client;
mod converse;
mod counts;
mod extract;
mod finish;
mod guardrails;
mod include;
mod json;
mod record;
pub(crate) mod sse;
mod tracker;
mod write;

use std::collections::BTreeMap;

use crate::config::Price;

pub use client::{bounded_user_agent, USER_AGENT_MAX};
pub use finish::FinishReasons;
pub use guardrails::{GuardrailCheck, GuardrailHit, GuardrailRecord};
pub use include::{ensure_include_usage, ensure_include_usage_in_valid, IncludeUsageError};
pub use record::{LineError, Record, RecordView, STATUS_CLIENT_CLOSED};
pub use tracker::Tracker;

/// Bodies up to this size are parsed whole at the end of a JSON response.
pub const WHOLE_BODY_MAX: usize = 64 * 1024;
/// Bytes kept from the end of a larger JSON body (or of an oversized SSE event).
pub const TAIL_MAX: usize = 8 * 1024;
/// Largest incomplete SSE event buffered; a larger one is only tail-scanned.
pub const EVENT_MAX: usize = 1024 * 1024;

/// Token counts of one response, normalised across dialects (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Prompt (input) tokens, cached ones included.
    pub prompt_tokens: u64,
    /// Completion (output) tokens, reasoning included.
    pub completion_tokens: u64,
    /// The part of `prompt_tokens` served from a prompt cache.
    pub cached_tokens: u64,
}

impl Usage {
    /// Prompt plus completion tokens.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// Which provider response format a body is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageDialect {
    /// OpenAI and OpenAI-compatible engines (chat, completions, embeddings, responses).
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
    /// AWS Bedrock Converse (JSON) / ConverseStream (binary event stream: tell the tracker
    /// `streaming` when the answer is `application/vnd.amazon.eventstream`).
    Converse,
}

impl From<crate::dialect::Dialect> for UsageDialect {
    /// The response format of an upstream speaking that dialect.
    fn from(d: crate::dialect::Dialect) -> Self {
        use crate::dialect::Dialect;
        match d {
            Dialect::OpenAi | Dialect::JsonRpc => Self::OpenAi,
            Dialect::Anthropic => Self::Anthropic,
            Dialect::Gemini => Self::Gemini,
        }
    }
}

/// What to send to the client for one response chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// Send the chunk exactly as received (the common case; nothing allocated).
    Forward,
    /// Send these bytes instead (only when hiding the injected usage event).
    Replace(Vec<u8>),
}

/// Cost of `usage` in micro-USD, rounded up; `None` when the model has no price.
///
/// Prices are looked up as `provider/upstream_model` first, then `upstream_model`. Cached prompt
/// tokens are billed at `cached_input_per_mtok`, the rest of the prompt at `input_per_mtok`.
pub fn cost_micro_usd(
    pricing: &BTreeMap<String, Price>,
    provider: &str,
    upstream_model: &str,
    usage: &Usage,
) -> Option<u64> {
    let price = price_of(pricing, provider, upstream_model)?;
    let cached = usage.cached_tokens.min(usage.prompt_tokens);
    let uncached = usage.prompt_tokens - cached;
    // USD per million tokens is micro-USD per token. Prices become integers of 1e-6 micro-USD
    // per token so the sum is exact: f64 products like 1000 × 0.1 would round up a whole unit.
    let parts = [
        (uncached, per_token_pico(price.input_per_mtok)),
        (cached, per_token_pico(price.cached_input_per_mtok)),
        (usage.completion_tokens, per_token_pico(price.output_per_mtok)),
    ];
    // 128-bit arithmetic (and an overflow-checked 64-bit multiply) is a library call in wasm:
    // token counts and per-token prices that fit 32 bits (every real price below 4,294 USD
    // per million tokens) multiply in plain u64, the rest takes the u128 road.
    let small = parts.iter().try_fold(0u64, |sum, &(tokens, pico)| {
        let (tokens, pico) = (u32::try_from(tokens).ok()?, u32::try_from(pico).ok()?);
        sum.checked_add(u64::from(tokens) * u64::from(pico))
    });
    if let Some(pico) = small {
        return Some(pico.div_ceil(1_000_000));
    }
    let pico = parts
        .iter()
        .fold(0u128, |sum, &(tokens, pico)| sum.saturating_add(u128::from(tokens).saturating_mul(u128::from(pico))));
    Some(u64::try_from(pico.div_ceil(1_000_000)).unwrap_or(u64::MAX))
}

/// The price of `upstream_model` at `provider`: the `provider/upstream_model` entry, else the
/// `upstream_model` one.
pub fn price_of<'p>(pricing: &'p BTreeMap<String, Price>, provider: &str, upstream_model: &str) -> Option<&'p Price> {
    qualified_price(pricing, provider, upstream_model).or_else(|| pricing.get(upstream_model))
}

/// The `provider/model` price entry, looked up without building the key on the heap when it
/// is short (this runs once per request).
fn qualified_price<'p>(pricing: &'p BTreeMap<String, Price>, provider: &str, model: &str) -> Option<&'p Price> {
    let mut buf = [0u8; 256];
    let len = provider.len() + 1 + model.len();
    let Some(key) = buf.get_mut(..len) else {
        return pricing.get(&format!("{provider}/{model}"));
    };
    let (head, rest) = key.split_at_mut(provider.len());
    head.copy_from_slice(provider.as_bytes());
    if let Some((slash, tail)) = rest.split_first_mut() {
        *slash = b'/';
        tail.copy_from_slice(model.as_bytes());
    }
    // Concatenated UTF-8 with an ASCII slash is UTF-8.
    pricing.get(std::str::from_utf8(key).ok()?)
}

/// A USD-per-million-tokens price as 1e-6 micro-USD per token (negative or NaN prices: 0).
pub(crate) fn per_token_pico(usd_per_mtok: f64) -> u64 {
    // `as` saturates: NaN and negatives become 0, absurd prices (over 18 million USD per
    // token) u64::MAX. `floor(x + 0.5)` is `round` for the non-negative values that matter
    // here, and to u64 rather than u128, both are single wasm instructions, not library calls.
    (usd_per_mtok * 1e6 + 0.5).floor() as u64
}

/// The dialect the upstream answers an `api` request in, when the gateway translated it to
/// `translated_to` (for the usage tracker).
pub fn upstream_dialect(api: crate::route::Api, translated_to: Option<crate::translate::Outbound>) -> UsageDialect {
    use crate::route::Api;
    use crate::translate::Outbound;
    match (translated_to, api) {
        (Some(Outbound::Anthropic), _) | (None, Api::Messages) => UsageDialect::Anthropic,
        (Some(Outbound::Gemini), _) | (None, Api::GenerateContent | Api::StreamGenerateContent) => UsageDialect::Gemini,
        (Some(Outbound::Converse), _) => UsageDialect::Converse,
        _ => UsageDialect::OpenAi,
    }
}

#[cfg(test)]
mod tests;
