//! A stored complete answer sent as the stream a client asked for. The answer is decoded with
//! its dialect's complete-answer decoder into the neutral form, turned into neutral stream
//! events, and encoded by the dialect's own stream encoder ([`encode_events`]): a replayed
//! stream has exactly the shape of a translated one, which the official SDKs' tests cover.
//! A Responses answer has no neutral decoder; its events are built from the stored response
//! object's output items instead (`replay/responses.rs`), so its ids and parts go out
//! unchanged.
//!
//! What the neutral form does not carry is not replayed (OpenAI's `system_fingerprint` and
//! `logprobs`, Anthropic citations and `redacted_thinking`, which fail the decoding and so are
//! never replayed wrong); text, reasoning where the dialect has it, tool calls with their
//! arguments, the finish reason and usage are.

use super::Shape;
use crate::translate::ir::{Block, Response};
use crate::translate::stream::{encode_events, Event};
use crate::translate::{anthropic, gemini, openai_chat, Context, Inbound, TranslateError};
use crate::usage::sse::{event_data, Splitter};

mod responses;

/// How a replayed stream presents itself.
#[derive(Debug, Clone, Copy)]
pub struct ReplayOptions<'a> {
    /// The model name the client sent, echoed as the answer's model where the dialect carries
    /// one.
    pub model: &'a str,
    /// Unix seconds: OpenAI `created`, Responses `created_at`.
    pub created: u64,
    /// OpenAI `stream_options.include_usage`: a last chunk with usage.
    pub include_usage: bool,
}

/// Why a stored answer cannot be replayed (the caller then treats it as a miss).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Not a complete answer of the shape's dialect.
    #[error("the stored answer cannot be read: {0}")]
    Answer(#[from] TranslateError),
    /// Not a Responses `response` object.
    #[error("the stored answer is not a Responses response object")]
    NotAResponse,
    /// A Responses object that is neither `completed` nor `incomplete`.
    #[error("a stored response with status `{0}` is not replayed")]
    Status(String),
}

/// `body` is a stored [`Shape::Json`] answer of the same dialect family as `shape`; the result
/// is the whole event stream a client of that dialect expects (for [`Shape::GeminiJsonArray`],
/// a JSON array). A [`Shape::Json`] body is returned as it is.
///
/// # Errors
/// The body is not a complete answer of that dialect ([`ReplayError`]).
pub fn stream(shape: Shape, body: &[u8], opts: &ReplayOptions) -> Result<Vec<u8>, ReplayError> {
    Ok(match shape {
        Shape::Json => body.to_vec(),
        Shape::ChatSse => encode(Inbound::OpenAiChat, &openai_chat::decode_response(body)?, opts),
        Shape::AnthropicSse => encode(Inbound::Anthropic, &anthropic::decode_response(body, false)?, opts),
        Shape::GeminiSse => encode(Inbound::Gemini, &gemini::decode_response(body)?, opts),
        Shape::GeminiJsonArray => json_array(&encode(Inbound::Gemini, &gemini::decode_response(body)?, opts)),
        Shape::ResponsesSse => responses::stream(body, opts)?,
    })
}

/// The answer's events through the client dialect's stream encoder.
fn encode(inbound: Inbound, resp: &Response, opts: &ReplayOptions) -> Vec<u8> {
    let ctx =
        Context { model: opts.model.to_string(), stream: true, stream_usage: opts.include_usage, ..Context::default() };
    encode_events(inbound, &ctx, opts.created, &events(resp))
}

/// A complete answer as the events a provider would have streamed: usage first (Anthropic's
/// `message_start` reports the prompt's), then the content in order, then the finish.
fn events(resp: &Response) -> Vec<Event> {
    let mut out = vec![Event::Start { id: resp.id.clone() }, Event::Usage(resp.usage)];
    let mut calls = 0;
    for block in &resp.content {
        match block {
            Block::Text(t) => out.push(Event::Text(t.text.clone())),
            Block::Thinking(t) => {
                if !t.text.is_empty() {
                    out.push(Event::Thinking(t.text.clone()));
                }
                out.extend(t.signature.clone().map(Event::Signature));
            }
            Block::ToolCall(c) => {
                out.push(Event::ToolStart { index: calls, id: c.id.clone(), name: c.name.clone() });
                out.push(Event::ToolArgs { index: calls, json: c.arguments.to_string() });
                calls += 1;
            }
            // Answers carry neither.
            Block::Image(_) | Block::ToolResult(_) => {}
        }
    }
    out.push(Event::Finish(resp.finish.clone()));
    out
}

/// Gemini server-sent events as the JSON array `streamGenerateContent` sends without
/// `alt=sse`: the events' data, in order.
fn json_array(sse: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sse.len());
    out.push(b'[');
    let mut splitter = Splitter::default();
    let mut rest = sse;
    while let Some(end) = splitter.next_end(rest) {
        let (event, tail) = rest.split_at(end.min(rest.len()));
        let data = event_data(event);
        if !data.is_empty() {
            if out.len() > 1 {
                out.extend_from_slice(b",\n");
            }
            out.extend_from_slice(&data);
        }
        rest = tail;
    }
    out.push(b']');
    out
}

#[cfg(test)]
mod tests;
