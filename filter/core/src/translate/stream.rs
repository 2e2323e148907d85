//! Streamed answers translated event by event: the provider's server-sent events are decoded
//! into neutral [`Event`]s and encoded in the client's dialect as they arrive, so the first
//! token leaves when the provider sends it. Memory stays bounded: only the event in progress is
//! held ([`MAX_EVENT`]), never the stream.
//!
//! Bedrock's ConverseStream is framed otherwise: AWS event-stream binary frames, which its
//! decoder reads itself (`converse.rs`, frames of at most [`MAX_EVENT`] bytes); the SSE
//! splitter is not used then.
//!
//! The output depends only on the sequence of events, not on how the bytes were cut into
//! chunks (a test splits every transcript at every byte boundary).

use super::ir::{Finish, Usage};
use super::{Context, Inbound, Outbound, Pair};
use crate::usage::sse::{event_data, Splitter};

mod anthropic;
mod converse;
mod gemini;
mod openai;
mod responses;

/// Longest single event held while its end has not arrived (a larger one ends the stream with
/// an error event rather than growing without bound).
pub const MAX_EVENT: usize = 1 << 20;

/// A streamed answer in neutral form, one step at a time.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The answer begins.
    Start {
        /// Provider's id.
        id: String,
    },
    /// More answer text.
    Text(String),
    /// More visible reasoning.
    Thinking(String),
    /// The reasoning's signature (Anthropic).
    Signature(String),
    /// A tool call begins; `index` counts calls from 0 in this answer.
    ToolStart {
        /// Call ordinal.
        index: usize,
        /// Call id.
        id: String,
        /// Function name.
        name: String,
    },
    /// More of a call's JSON arguments.
    ToolArgs {
        /// Call ordinal.
        index: usize,
        /// A fragment of the JSON text.
        json: String,
    },
    /// Why generation stopped.
    Finish(Finish),
    /// Token counts so far (cumulative; the encoder keeps the largest of each).
    Usage(Usage),
    /// The provider reported an error mid-stream.
    Error(String),
}

/// Provider-dialect decoding.
#[derive(Debug)]
enum Decoder {
    OpenAi(openai::Decoder),
    Anthropic(anthropic::Decoder),
    Gemini(gemini::Decoder),
    /// Frames its input itself (binary event stream).
    Converse(converse::Decoder),
}

/// Client-dialect encoding.
#[derive(Debug)]
enum Encoder {
    OpenAi(openai::Encoder),
    Anthropic(anthropic::Encoder),
    Gemini(gemini::Encoder),
    Responses(responses::Encoder),
}

/// Translates one streamed answer.
#[derive(Debug)]
pub struct StreamTranslator {
    splitter: Splitter,
    /// Bytes of the event in progress.
    pending: Vec<u8>,
    decoder: Decoder,
    encoder: Encoder,
    events: Vec<Event>,
    overflowed: bool,
    /// [`Context::answer_id`], for a stream that names no id.
    answer_id: String,
}

impl StreamTranslator {
    /// A translator for `pair`'s answer to the request `ctx` describes; `created` is the Unix
    /// time OpenAI chunks report.
    pub fn new(pair: Pair, ctx: &Context, created: u64) -> StreamTranslator {
        StreamTranslator {
            splitter: Splitter::default(),
            pending: Vec::new(),
            decoder: Decoder::new(pair.outbound, ctx.structured),
            encoder: Encoder::new(pair.inbound, ctx, created),
            events: Vec::new(),
            overflowed: false,
            answer_id: ctx.answer_id.clone(),
        }
    }

    /// Takes the next bytes of the provider's stream; returns the client's bytes for them.
    pub fn feed(&mut self, mut chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if let Decoder::Converse(d) = &mut self.decoder {
            d.feed(chunk, &mut self.events);
            self.encode_decoded(&mut out);
            return out;
        }
        if self.overflowed {
            return out;
        }
        while let Some(end) = self.splitter.next_end(chunk) {
            let (event, rest) = chunk.split_at(end.min(chunk.len()));
            self.pending.extend_from_slice(event);
            let whole = std::mem::take(&mut self.pending);
            self.decode(&whole, &mut out);
            chunk = rest;
        }
        self.pending.extend_from_slice(chunk);
        if self.pending.len() > MAX_EVENT {
            self.overflowed = true;
            self.pending = Vec::new();
            self.encode(Event::Error(format!("a provider event exceeded {MAX_EVENT} bytes")), &mut out);
        }
        out
    }

    /// The provider's stream ended: the client's closing bytes.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Decoder::Converse(d) = &mut self.decoder {
            d.finish(&mut self.events);
            self.encode_decoded(&mut out);
        } else {
            let last = std::mem::take(&mut self.pending);
            if !last.is_empty() || self.splitter.finish() {
                self.decode(&last, &mut out);
            }
        }
        self.encoder.finish(&mut out);
        out
    }

    /// The `sequence_number` the next event of a Responses client would carry (0 for the
    /// other clients), for an event the caller appends itself.
    pub fn next_sequence(&self) -> u64 {
        match &self.encoder {
            Encoder::Responses(e) => e.next_sequence(),
            _ => 0,
        }
    }

    fn decode(&mut self, event: &[u8], out: &mut Vec<u8>) {
        let name = event_name(event);
        let data = event_data(event);
        if data.is_empty() {
            return;
        }
        self.decoder.event(name, &data, &mut self.events);
        self.encode_decoded(out);
    }

    /// Encodes the events decoded so far.
    fn encode_decoded(&mut self, out: &mut Vec<u8>) {
        for e in self.events.drain(..) {
            let e = match e {
                Event::Start { id } if id.is_empty() => Event::Start { id: self.answer_id.clone() },
                other => other,
            };
            self.encoder.event(e, out);
        }
    }

    fn encode(&mut self, event: Event, out: &mut Vec<u8>) {
        self.encoder.event(event, out);
    }
}

impl Decoder {
    fn new(outbound: Outbound, structured: bool) -> Decoder {
        match outbound {
            Outbound::OpenAiChat => Decoder::OpenAi(openai::Decoder::default()),
            Outbound::Anthropic => Decoder::Anthropic(anthropic::Decoder::new(structured)),
            Outbound::Gemini => Decoder::Gemini(gemini::Decoder::default()),
            Outbound::Converse => Decoder::Converse(converse::Decoder::default()),
        }
    }

    /// One event (`name` from its `event:` line, `data` its data; for Converse the
    /// `:event-type` header and the payload of one frame).
    fn event(&mut self, name: &[u8], data: &[u8], out: &mut Vec<Event>) {
        match self {
            Decoder::OpenAi(d) => d.event(data, out),
            Decoder::Anthropic(d) => d.event(name, data, out),
            Decoder::Gemini(d) => d.event(data, out),
            Decoder::Converse(d) => d.event(name, data, out),
        }
    }
}

impl Encoder {
    fn new(inbound: Inbound, ctx: &Context, created: u64) -> Encoder {
        match inbound {
            Inbound::OpenAiChat => Encoder::OpenAi(openai::Encoder::new(&ctx.model, created, ctx.stream_usage)),
            Inbound::Anthropic => Encoder::Anthropic(anthropic::Encoder::new(&ctx.model)),
            Inbound::Gemini => Encoder::Gemini(gemini::Encoder::new(&ctx.model)),
            Inbound::Responses => Encoder::Responses(responses::Encoder::new(&ctx.model, created, ctx.kept.clone())),
        }
    }

    fn event(&mut self, event: Event, out: &mut Vec<u8>) {
        match self {
            Encoder::OpenAi(e) => e.event(event, out),
            Encoder::Anthropic(e) => e.event(event, out),
            Encoder::Gemini(e) => e.event(event, out),
            Encoder::Responses(e) => e.event(event, out),
        }
    }

    fn finish(&mut self, out: &mut Vec<u8>) {
        match self {
            Encoder::OpenAi(e) => e.finish(out),
            Encoder::Anthropic(e) => e.finish(out),
            Encoder::Gemini(e) => e.finish(out),
            Encoder::Responses(e) => e.finish(out),
        }
    }
}

/// A provider-dialect stream decoder on its own, for callers that frame the stream themselves
/// (the response cache rebuilds whole answers from streams a client received).
#[derive(Debug)]
pub struct EventDecoder(Decoder);

impl EventDecoder {
    /// A decoder for streams in `outbound`'s dialect (`structured` as [`Context::structured`]).
    pub fn new(outbound: Outbound, structured: bool) -> EventDecoder {
        EventDecoder(Decoder::new(outbound, structured))
    }

    /// Decodes one event: `name` from its `event:` line (empty when absent), `data` its data
    /// (`crate::usage::sse` framing). An OpenAI `[DONE]` yields nothing. For Converse, whose
    /// frames are binary, `name` is a frame's `:event-type` and `data` its payload.
    pub fn event(&mut self, name: &[u8], data: &[u8], out: &mut Vec<Event>) {
        self.0.event(name, data, out);
    }
}

/// Encodes `events` as the whole stream a client of `inbound` receives, closing bytes included,
/// exactly as [`StreamTranslator`] would had a provider sent them; `created` is the Unix time
/// OpenAI chunks and Responses objects report.
pub fn encode_events(inbound: Inbound, ctx: &Context, created: u64, events: &[Event]) -> Vec<u8> {
    let mut encoder = Encoder::new(inbound, ctx, created);
    let mut out = Vec::new();
    for event in events {
        encoder.event(event.clone(), &mut out);
    }
    encoder.finish(&mut out);
    out
}

/// The `event:` field of an SSE event (empty when absent).
pub(crate) fn event_name(event: &[u8]) -> &[u8] {
    event
        .split(|&b| b == b'\n' || b == b'\r')
        .find_map(|line| line.strip_prefix(b"event:"))
        .map_or(&[][..], |v| v.strip_prefix(b" ").unwrap_or(v))
}

/// Writes one SSE event (`event:` line only when named).
pub(crate) fn write_event(out: &mut Vec<u8>, name: Option<&str>, data: &serde_json::Value) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    // Serialising a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

/// Keeps the largest of each count.
fn merge(into: &mut Usage, u: Usage) {
    into.input = into.input.max(u.input);
    into.output = into.output.max(u.output);
    into.cached = into.cached.max(u.cached);
    into.cache_write = into.cache_write.max(u.cache_write);
}

#[cfg(test)]
mod tests;
