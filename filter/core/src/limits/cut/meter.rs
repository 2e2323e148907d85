//! [`Meter`]: completion tokens a stream has delivered so far, estimated from the upstream's
//! events as they pass.
//!
//! The rule: **a token per four bytes of generated text**, the bytes being those of the string
//! values that carry output in the upstream's dialect (escaped form, as on the wire), or **the
//! provider's own count** when an event carries one and it is higher:
//!
//! | upstream stream | text members | provider's count |
//! |---|---|---|
//! | OpenAI chat, completions | `content` `refusal` `reasoning_content` `reasoning` `arguments` `text` | `completion_tokens` |
//! | Anthropic Messages | `text`, `thinking`, `partial_json` | `output_tokens` |
//! | Gemini | `text` | `candidatesTokenCount` + `thoughtsTokenCount` |
//! | OpenAI Responses | `delta` (of the `*.delta` events) | `output_tokens` |
//!
//! Four bytes a token is the usual rule for English text and code (admission estimates the
//! prompt with it too). It undercounts scripts of three bytes a character that is often a
//! token of its own (CJK), so such a stream is cut up to about a quarter later; text a provider
//! escapes as `\uXXXX` is overcounted instead. A tool call's framing tokens are not on the wire
//! (a recorded OpenAI call: 8 estimated, 18 billed), nor is reasoning a provider does not stream
//! (OpenAI's o-series): those are seen only in the provider's final count. Each event is scanned once, without
//! parsing it into a tree; an event longer than [`EVENT_CAP`] is not held and all its bytes
//! count as text.

use crate::translate::Inbound;
use crate::usage::sse::Splitter;

/// Longest event the meter holds while it is incomplete.
pub const EVENT_CAP: usize = 64 * 1024;

/// Delivered completion tokens of one stream, where it crossed its allowance, and whether it
/// reached its end (the dialect's final event: OpenAI's `[DONE]` or a `finish_reason`,
/// Anthropic's `message_stop`, a Gemini `finishReason`, a Responses `response.completed`,
/// `.incomplete` or `.failed`; or the provider's own `error` event).
#[derive(Debug)]
pub struct Meter {
    /// The upstream's stream dialect.
    shape: Inbound,
    split: Splitter,
    /// The event in progress, up to [`EVENT_CAP`].
    event: Vec<u8>,
    /// The event in progress outgrew [`EVENT_CAP`]: its bytes are counted as they pass.
    oversized: bool,
    text_bytes: u64,
    /// The highest completion count the provider reported.
    reported: u64,
    /// The last Responses `sequence_number` seen.
    sequence: Option<u64>,
    allowance: u64,
    /// The stream's final event was seen.
    finished: bool,
}

/// What one event carried.
#[derive(Default)]
struct Found {
    text: u64,
    count: Option<u64>,
}

/// A member's value, as far as the meter cares.
enum Value<'a> {
    /// A string: its raw bytes (escapes as on the wire).
    Str(&'a [u8]),
    Num(u64),
    Other,
}

impl Meter {
    /// A meter for an upstream stream of `shape` that may deliver `allowance` tokens.
    pub fn new(shape: Inbound, allowance: u64) -> Meter {
        Meter {
            shape,
            split: Splitter::default(),
            event: Vec::new(),
            oversized: false,
            text_bytes: 0,
            reported: 0,
            sequence: None,
            allowance,
            finished: false,
        }
    }

    /// Whether the stream's final event has passed (see [`Meter`]): a stream that ends
    /// without it was cut short by the upstream.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Completion tokens delivered so far (see the module docs).
    pub fn delivered(&self) -> u64 {
        self.text_bytes.div_ceil(4).max(self.reported)
    }

    /// Completion tokens to charge for a stream that stopped before the client had it all,
    /// given the provider's own count (`0` when it gave none) and whether the stream was `cut`
    /// at its allowance. A cut charges what passed. A stream whose final event passed carried
    /// the provider's final count, which is what the provider bills: the text estimate (a
    /// token per four bytes) can only be further from it. Otherwise the larger of the two,
    /// since the provider's count may not cover the text that followed it.
    pub fn charged(&self, provider_count: u64, cut: bool) -> u64 {
        if cut {
            self.delivered()
        } else if self.finished && provider_count > 0 {
            provider_count
        } else {
            self.delivered().max(provider_count)
        }
    }

    /// The text estimate alone, and the bytes held for an incomplete event (for the tests).
    #[cfg(test)]
    pub(super) fn internals(&self) -> (u64, u64, usize) {
        (self.text_bytes.div_ceil(4), self.reported, self.event.capacity())
    }

    /// The last `sequence_number` of a Responses stream.
    pub fn sequence(&self) -> Option<u64> {
        self.sequence
    }

    /// Takes the next chunk of the upstream's stream. Returns the offset just past the first
    /// event that carried text and took [`delivered`](Self::delivered) past the allowance;
    /// nothing after it is looked at (it is not delivered).
    pub fn feed(&mut self, chunk: &[u8]) -> Option<usize> {
        let mut pos = 0;
        while let Some(len) = self.split.next_end(chunk.get(pos..).unwrap_or_default()) {
            let end = pos + len;
            let part = chunk.get(pos..end).unwrap_or_default();
            let text = if self.event.is_empty() && !self.oversized {
                self.scan(part)
            } else {
                self.hold(part);
                self.end_event()
            };
            pos = end;
            if text && self.delivered() > self.allowance {
                return Some(end);
            }
        }
        self.hold(chunk.get(pos..).unwrap_or_default());
        None
    }

    /// Keeps bytes of an incomplete event (or counts them, once it is oversized).
    fn hold(&mut self, bytes: &[u8]) {
        if !self.oversized && self.event.len() + bytes.len() > EVENT_CAP {
            self.oversized = true;
            self.text_bytes = self.text_bytes.saturating_add(self.event.len() as u64);
            self.event = Vec::new();
        }
        if self.oversized {
            self.text_bytes = self.text_bytes.saturating_add(bytes.len() as u64);
        } else {
            self.event.extend_from_slice(bytes);
        }
    }

    /// The held event is complete; whether it carried text.
    fn end_event(&mut self) -> bool {
        if std::mem::take(&mut self.oversized) {
            return true;
        }
        let event = std::mem::take(&mut self.event);
        let text = self.scan(&event);
        self.event = event;
        self.event.clear();
        text
    }

    /// Counts one complete event; whether it carried text.
    fn scan(&mut self, event: &[u8]) -> bool {
        let mut found = Found::default();
        let shape = self.shape;
        let mut sequence = self.sequence;
        let mut finished =
            self.finished || (shape == Inbound::OpenAiChat && crate::bytes::find_sub(event, b"[DONE]").is_some());
        members(event, &mut |key, value| match value {
            Value::Str(s) if is_text(shape, key) => found.text += s.len() as u64,
            Value::Str(s) => finished |= is_final(shape, key, s),
            Value::Num(n) if shape == Inbound::Responses && key == b"sequence_number" => {
                sequence = sequence.max(Some(n));
            }
            Value::Num(n) => count(shape, key, n, &mut found.count),
            _ => {}
        });
        self.finished = finished;
        self.sequence = sequence;
        self.text_bytes = self.text_bytes.saturating_add(found.text);
        self.reported = self.reported.max(found.count.unwrap_or(0));
        found.text > 0
    }
}

/// Whether `key`'s string value is generated output in `shape`'s events.
fn is_text(shape: Inbound, key: &[u8]) -> bool {
    let keys: &[&[u8]] = match shape {
        Inbound::OpenAiChat => &[b"content", b"refusal", b"reasoning_content", b"reasoning", b"arguments", b"text"],
        Inbound::Anthropic => &[b"text", b"thinking", b"partial_json"],
        Inbound::Gemini => &[b"text"],
        Inbound::Responses => &[b"delta"],
    };
    keys.contains(&key)
}

/// Whether a string member marks the end of `shape`'s stream.
fn is_final(shape: Inbound, key: &[u8], value: &[u8]) -> bool {
    match (shape, key) {
        (Inbound::OpenAiChat, b"finish_reason") | (Inbound::Gemini, b"finishReason") => true,
        (Inbound::Anthropic, b"type") => matches!(value, b"message_stop" | b"error"),
        (Inbound::Responses, b"type") => {
            matches!(value, b"response.completed" | b"response.incomplete" | b"response.failed" | b"error")
        }
        _ => false,
    }
}

/// Folds a number member into the event's completion count, if it is one.
fn count(shape: Inbound, key: &[u8], n: u64, into: &mut Option<u64>) {
    match (shape, key) {
        // Gemini counts thoughts apart from the answer.
        (Inbound::Gemini, b"candidatesTokenCount" | b"thoughtsTokenCount") => {
            *into = Some(into.unwrap_or(0).saturating_add(n));
        }
        (Inbound::OpenAiChat, b"completion_tokens") | (Inbound::Anthropic | Inbound::Responses, b"output_tokens") => {
            *into = Some(into.unwrap_or(0).max(n));
        }
        _ => {}
    }
}

/// Calls `f` with every `"key": value` member in the JSON text of `bytes` (any nesting, other
/// bytes such as SSE field names ignored), in one pass and without allocating.
fn members(bytes: &[u8], f: &mut impl FnMut(&[u8], Value)) {
    let mut i = 0;
    while let Some(open) = find_quote(bytes, i) {
        let close = string_end(bytes, open + 1);
        let key = bytes.get(open + 1..close).unwrap_or_default();
        let colon = skip_space(bytes, close + 1);
        if bytes.get(colon) != Some(&b':') {
            i = close + 1;
            continue;
        }
        let at = skip_space(bytes, colon + 1);
        i = match bytes.get(at) {
            Some(b'"') => {
                let end = string_end(bytes, at + 1);
                f(key, Value::Str(bytes.get(at + 1..end).unwrap_or_default()));
                end + 1
            }
            Some(b'0'..=b'9') => {
                let digits = bytes.get(at..).unwrap_or_default().iter().take_while(|b| b.is_ascii_digit());
                f(key, Value::Num(digits.fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0')))));
                at + 1
            }
            _ => {
                f(key, Value::Other);
                at
            }
        };
    }
}

fn find_quote(bytes: &[u8], from: usize) -> Option<usize> {
    Some(from + bytes.get(from..)?.iter().position(|&b| b == b'"')?)
}

/// The index of the quote closing the string that starts at `from` (the end of `bytes` when
/// it is not closed).
fn string_end(bytes: &[u8], from: usize) -> usize {
    let mut i = from;
    while let Some(run) = bytes.get(i..).and_then(|rest| rest.iter().position(|&b| b == b'"' || b == b'\\')) {
        i += run;
        if bytes.get(i) == Some(&b'"') {
            return i;
        }
        // A backslash: skip the escaped byte.
        i += 2;
    }
    bytes.len()
}

fn skip_space(bytes: &[u8], from: usize) -> usize {
    from + bytes.get(from..).unwrap_or_default().iter().take_while(|b| b.is_ascii_whitespace()).count()
}
