//! A streamed answer, as the client received it, back into the one complete answer the same
//! client would have received without streaming: that is what the cache keeps, so one entry
//! serves streaming and non-streaming clients alike.
//!
//! The streams are read with the translator's own machinery: SSE framing
//! (`crate::usage::sse`), the dialect's stream decoder into neutral events
//! ([`EventDecoder`]), and the dialect's complete-answer encoder. What the neutral form does
//! not carry is not in the assembled answer either: OpenAI's `system_fingerprint`,
//! `service_tier` and `logprobs`, chat `reasoning_content` (chat answers carry no reasoning),
//! Anthropic citations, Gemini safety ratings. Text, reasoning, tool calls with their
//! arguments, the finish reason and usage are kept. A Responses stream needs no decoding: its
//! `response.completed` event carries the whole response object.
//!
//! An answer is only assembled from a stream that ended properly (`[DONE]`, `message_stop`, a
//! Gemini `finishReason`, `response.completed`) without an error event, and whose held bytes
//! (any one event, and the answer so far) stayed within the limit.

use serde_json::Value;

use super::Shape;
use crate::translate::ir::Finish;
use crate::translate::stream::{event_name, Event, EventDecoder};
use crate::translate::{anthropic, gemini, openai_chat, Outbound};
use crate::usage::sse::{event_data, Splitter};

mod array;
mod collect;

use array::ArrayScanner;
use collect::Collect;

/// Gathers one streamed answer.
#[derive(Debug)]
pub struct Assembler {
    shape: Shape,
    limit: usize,
    framing: Framing,
    reader: Reader,
    overflowed: bool,
}

/// How the stream's bytes are cut into events.
#[derive(Debug)]
enum Framing {
    /// Server-sent events: the event in progress.
    Sse { splitter: Splitter, pending: Vec<u8> },
    /// A Gemini JSON array.
    Array(ArrayScanner),
    /// Not a stream ([`Shape::Json`]): the body itself.
    Whole(Vec<u8>),
}

/// What the events say.
#[derive(Debug)]
enum Reader {
    /// Chat, Anthropic and Gemini streams, decoded into neutral events.
    Events { decoder: EventDecoder, collect: Box<Collect>, events: Vec<Event>, meta: Option<Meta>, done: bool },
    /// A Responses stream: the `response` of its closing event.
    Responses { response: Option<Vec<u8>>, failed: bool },
    /// A complete body.
    Whole,
}

/// What the answer's first event says of it besides content.
#[derive(Debug, Default)]
struct Meta {
    model: String,
    created: u64,
}

impl Assembler {
    /// An assembler for a stream of `shape` (a [`Shape::Json`] body is taken as it is);
    /// `limit` is the most bytes it may hold: larger answers give `None`.
    pub fn new(shape: Shape, limit: usize) -> Assembler {
        let sse = || Framing::Sse { splitter: Splitter::default(), pending: Vec::new() };
        let events = |outbound| Reader::Events {
            decoder: EventDecoder::new(outbound, false),
            collect: Box::default(),
            events: Vec::new(),
            meta: None,
            done: false,
        };
        let (framing, reader) = match shape {
            Shape::Json => (Framing::Whole(Vec::new()), Reader::Whole),
            Shape::ChatSse => (sse(), events(Outbound::OpenAiChat)),
            Shape::AnthropicSse => (sse(), events(Outbound::Anthropic)),
            Shape::GeminiSse => (sse(), events(Outbound::Gemini)),
            Shape::GeminiJsonArray => (Framing::Array(ArrayScanner::default()), events(Outbound::Gemini)),
            Shape::ResponsesSse => (sse(), Reader::Responses { response: None, failed: false }),
        };
        Assembler { shape, limit, framing, reader, overflowed: false }
    }

    /// The next bytes of the stream, cut anywhere (mid-line, mid-UTF-8).
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.overflowed {
            return;
        }
        let over = self.framing.feed(bytes, self.limit, self.shape, &mut self.reader);
        if over || self.reader.held() > self.limit {
            self.overflowed = true;
            self.framing = Framing::Whole(Vec::new());
            self.reader = Reader::Whole;
        }
    }

    /// The complete non-streamed answer in the stream's dialect (for Responses, the `response`
    /// object of `response.completed`), or `None` when the stream did not end properly,
    /// carried an error event, or overflowed the limit.
    pub fn finish(mut self) -> Option<Vec<u8>> {
        if self.overflowed {
            return None;
        }
        let body = match std::mem::replace(&mut self.framing, Framing::Whole(Vec::new())) {
            Framing::Sse { mut splitter, pending } => {
                // A last event without its blank line still counts, as for the translator.
                if !pending.is_empty() || splitter.finish() {
                    self.reader.sse_event(self.shape, &pending);
                }
                self.reader.answer(self.shape)
            }
            Framing::Array(scanner) if scanner.closed && !scanner.malformed => self.reader.answer(self.shape),
            Framing::Array(_) => None,
            Framing::Whole(body) => serde_json::from_slice::<Value>(&body).ok().filter(Value::is_object).map(|_| body),
        }?;
        (body.len() <= self.limit).then_some(body)
    }
}

impl Framing {
    /// Cuts `bytes` into events for `reader`; true when an event, or the one in progress, is
    /// larger than `limit`. Whole events are checked as well as the one in progress, so the
    /// outcome does not depend on where the chunks were cut.
    fn feed(&mut self, bytes: &[u8], limit: usize, shape: Shape, reader: &mut Reader) -> bool {
        let mut over = false;
        match self {
            Framing::Sse { splitter, pending } => {
                let mut chunk = bytes;
                while let Some(end) = splitter.next_end(chunk) {
                    let (event, rest) = chunk.split_at(end.min(chunk.len()));
                    pending.extend_from_slice(event);
                    let whole = std::mem::take(pending);
                    over |= whole.len() > limit;
                    if !over {
                        reader.sse_event(shape, &whole);
                    }
                    chunk = rest;
                }
                pending.extend_from_slice(chunk);
                over || pending.len() > limit
            }
            Framing::Array(scanner) => {
                scanner.feed(bytes, |element| {
                    over |= element.len() > limit;
                    if !over {
                        reader.event(shape, b"", element);
                    }
                });
                over || scanner.pending.len() > limit
            }
            Framing::Whole(body) => {
                body.extend_from_slice(bytes);
                body.len() > limit
            }
        }
    }
}

impl Reader {
    /// Bytes of answer held besides the framing's (a kept Responses object is no larger than
    /// the event it came in, which the framing checks).
    fn held(&self) -> usize {
        match self {
            Reader::Events { collect, .. } => collect.size,
            Reader::Responses { .. } | Reader::Whole => 0,
        }
    }

    /// One whole SSE event (comments and events without data are skipped).
    fn sse_event(&mut self, shape: Shape, event: &[u8]) {
        let data = event_data(event);
        if !data.is_empty() {
            self.event(shape, event_name(event), &data);
        }
    }

    /// One event's name (empty when it has none) and data.
    fn event(&mut self, shape: Shape, name: &[u8], data: &[u8]) {
        match self {
            Reader::Events { decoder, collect, events, meta, done } => {
                if meta.is_none() {
                    *meta = Some(first_meta(shape, data));
                }
                decoder.event(name, data, events);
                for e in events.drain(..) {
                    collect.event(e);
                }
                *done |= match shape {
                    Shape::ChatSse => data == b"[DONE]",
                    Shape::AnthropicSse => is_message_stop(name, data),
                    _ => false,
                };
            }
            Reader::Responses { response, failed } => responses_event(name, data, response, failed),
            Reader::Whole => {}
        }
    }

    /// The assembled answer, when the stream ended properly.
    fn answer(self, shape: Shape) -> Option<Vec<u8>> {
        match self {
            Reader::Events { collect, meta, done, .. } => {
                // Gemini streams end with the chunk that carries the finish reason.
                let gemini = matches!(shape, Shape::GeminiSse | Shape::GeminiJsonArray);
                if collect.failed || !(done || gemini && collect.finished()) {
                    return None;
                }
                let meta = meta.unwrap_or_default();
                let resp = collect.response(Finish::Stop, meta.model.clone())?;
                Some(match shape {
                    Shape::ChatSse => openai_chat::encode_response(&resp, &meta.model, meta.created),
                    Shape::AnthropicSse => anthropic::encode_response(&resp, &meta.model),
                    _ => gemini::encode_response(&resp, &meta.model),
                })
            }
            Reader::Responses { response, failed } => response.filter(|_| !failed),
            Reader::Whole => None,
        }
    }
}

/// The model (and, for chat, `created`) the stream reports, read from its first event.
fn first_meta(shape: Shape, data: &[u8]) -> Meta {
    let Ok(v) = serde_json::from_slice::<Value>(data) else { return Meta::default() };
    let model = match shape {
        Shape::ChatSse => &v["model"],
        Shape::AnthropicSse => &v["message"]["model"],
        _ => &v["modelVersion"],
    };
    Meta { model: model.as_str().unwrap_or_default().to_string(), created: v["created"].as_u64().unwrap_or(0) }
}

/// Whether an Anthropic event is `message_stop` (by its name, or by its data's type when the
/// event is unnamed).
fn is_message_stop(name: &[u8], data: &[u8]) -> bool {
    if !name.is_empty() {
        return name == b"message_stop";
    }
    // Only events that can be it are parsed.
    data.windows(12).any(|w| w == b"message_stop")
        && serde_json::from_slice::<Value>(data).is_ok_and(|v| v["type"] == "message_stop")
}

/// A Responses event: the closing one keeps its `response` (an incomplete answer, one that hit
/// its token limit, is as complete as the non-streamed one would be); an error fails. Only
/// those events are parsed.
fn responses_event(name: &[u8], data: &[u8], response: &mut Option<Vec<u8>>, failed: &mut bool) {
    const CLOSING: [&[u8]; 4] = [b"response.completed", b"response.incomplete", b"response.failed", b"error"];
    if !name.is_empty() && !CLOSING.contains(&name) {
        return;
    }
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        *failed = true;
        return;
    };
    match v["type"].as_str() {
        Some("response.completed" | "response.incomplete") if v["response"].is_object() => {
            *response = serde_json::to_vec(&v["response"]).ok();
        }
        Some("response.completed" | "response.incomplete" | "response.failed" | "error") => *failed = true,
        _ => {}
    }
}

#[cfg(test)]
mod tests;
