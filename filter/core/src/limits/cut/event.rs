//! The last event of a cut stream, in the client's stream dialect: what each API sends when a
//! stream fails after it began (the HTTP status, 200, is long gone).
//!
//! | client | final bytes |
//! |---|---|
//! | OpenAI chat, completions | `data: {"error":{"message","type","param","code"}}` then `data: [DONE]` |
//! | Anthropic Messages | `event: error` with `{"type":"error","error":{"type","message"}}` |
//! | Gemini | `data: {"error":{"code","message","status"}}` |
//! | OpenAI Responses | `event: error` with `{"type":"error","code","message","param","sequence_number"}` |
//!
//! The error is [`cut_error`]'s: 429 `rate_limit_exceeded` for a token limit (Anthropic
//! `rate_limit_error`, Gemini `RESOURCE_EXHAUSTED`), 402 `insufficient_quota` for a USD budget
//! (Anthropic `billing_error`, Gemini `RESOURCE_EXHAUSTED`), the same classes as a refusal at
//! the door.

use serde::Serialize;

use super::Allowance;
use crate::dialect::Dialect;
use crate::error::ApiError;
use crate::limits::{LimitSpec, Metric};
use crate::translate::Inbound;

/// The Responses API's `error` event.
#[derive(Serialize)]
struct ResponsesError<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    code: &'a str,
    message: &'a str,
    param: Option<&'a str>,
    sequence_number: u64,
}

/// The error a stream cut at `allowance` ends with; `spec` is the limit that set it.
pub fn cut_error(allowance: &Allowance, spec: Option<&LimitSpec>) -> ApiError {
    let what = spec.map_or_else(|| "a limit has no room left".to_string(), LimitSpec::describe);
    let n = allowance.completion_tokens;
    let message = format!("The answer was cut at its budget (about {n} completion tokens): {what}.");
    match allowance.metric {
        Metric::MicroUsd => ApiError::budget_exhausted(message),
        _ => ApiError::rate_limited(message),
    }
}

/// The bytes that end a cut stream of a `client` stream; `sequence` is the next
/// `sequence_number` of a Responses stream (ignored by the others).
pub fn final_event(client: Inbound, error: &ApiError, sequence: u64) -> Vec<u8> {
    let mut out = Vec::new();
    match client {
        Inbound::OpenAiChat => {
            write(&mut out, None, &error.body());
            out.extend_from_slice(b"data: [DONE]\n\n");
        }
        Inbound::Anthropic => write(&mut out, Some("error"), &error.body_in(Dialect::Anthropic)),
        Inbound::Gemini => write(&mut out, None, &error.body_in(Dialect::Gemini)),
        Inbound::Responses => {
            let event = ResponsesError {
                kind: "error",
                code: error.code.unwrap_or(error.kind),
                message: &error.message,
                param: None,
                sequence_number: sequence,
            };
            // Serialising this plain struct cannot fail; the OpenAI body is a fallback.
            let data = serde_json::to_vec(&event).unwrap_or_else(|_| error.body());
            write(&mut out, Some("error"), &data);
        }
    }
    out
}

/// One SSE event: an `event:` line when named, one `data:` line, a blank line.
fn write(out: &mut Vec<u8>, name: Option<&str>, data: &[u8]) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\n\n");
}
