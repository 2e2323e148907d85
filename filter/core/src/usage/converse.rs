//! Bedrock Converse usage: the `usage` object of a Converse answer or of a ConverseStream
//! `metadata` event, and the reading of a ConverseStream body, whose binary event-stream frames
//! ([`crate::clouds::eventstream`]) replace the SSE framing of the other dialects.

use serde::Deserialize;

use super::extract::{self, Acc, Found};
use super::tracker::push_tail;
use super::{FinishReasons, Usage, UsageDialect, EVENT_MAX};
use crate::clouds::eventstream::{Decoder, Kind};

/// Converse's `usage`: `inputTokens` leaves out cache reads and writes, as Anthropic's does.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CvUsage {
    pub(crate) input_tokens: Option<u64>,
    pub(crate) output_tokens: Option<u64>,
    pub(crate) cache_read_input_tokens: Option<u64>,
    pub(crate) cache_write_input_tokens: Option<u64>,
}

impl CvUsage {
    pub(crate) fn usage(&self) -> Usage {
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let write = self.cache_write_input_tokens.unwrap_or(0);
        Usage {
            prompt_tokens: self.input_tokens.unwrap_or(0).saturating_add(read).saturating_add(write),
            completion_tokens: self.output_tokens.unwrap_or(0),
            cached_tokens: read,
        }
    }
}

/// A whole Converse answer or a `metadata` event's payload.
#[derive(Debug, Deserialize)]
struct CvObject {
    usage: Option<CvUsage>,
}

/// Reads the usage of one JSON object; whether it had one.
pub(crate) fn object(data: &[u8], acc: &mut Acc) -> bool {
    let Ok(CvObject { usage: Some(u) }) = serde_json::from_slice::<CvObject>(data) else { return false };
    Found::Last(u.usage()).add_to(acc);
    true
}

/// A ConverseStream body being read: frames decoded as they complete (one frame of at most
/// [`EVENT_MAX`] bytes held). A frame that cannot be decoded (corrupt, oversized) ends the
/// decoding: the rest of the body is then kept as a tail and scanned for the last usage object
/// at the end, as the SSE reader does with an oversized event.
#[derive(Debug)]
pub(crate) struct Frames {
    decoder: Decoder,
    tail: Option<Vec<u8>>,
}

impl Default for Frames {
    fn default() -> Self {
        Frames { decoder: Decoder::new(EVENT_MAX), tail: None }
    }
}

impl Frames {
    /// Reads the next bytes of the body: usage from `metadata`, first token from content
    /// events, finish reasons (when asked for) from `messageStop`.
    pub(crate) fn push(
        &mut self,
        chunk: &[u8],
        acc: &mut Acc,
        first_token: &mut bool,
        mut finish: Option<&mut FinishReasons>,
    ) {
        if let Some(tail) = &mut self.tail {
            push_tail(tail, chunk);
            return;
        }
        self.decoder.push(chunk);
        while let Some(next) = self.decoder.next_message() {
            let Ok(message) = next else {
                // The usage, plain JSON inside its frame, can still be found in what follows.
                let mut tail = Vec::new();
                push_tail(&mut tail, chunk);
                self.tail = Some(tail);
                return;
            };
            let Kind::Event(name) = message.kind() else { continue };
            match name {
                "contentBlockStart" | "contentBlockDelta" => *first_token = true,
                "messageStop" => {
                    if let Some(f) = finish.as_deref_mut() {
                        f.scan(UsageDialect::Converse, &message.payload);
                    }
                }
                "metadata" => {
                    object(&message.payload, acc);
                }
                _ => {}
            }
        }
    }

    /// Bytes held (for the memory-bound tests).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.decoder.buffered() + self.tail.as_ref().map_or(0, Vec::capacity)
    }

    /// The body ended: after a framing failure, the tail's last usage object.
    pub(crate) fn end(&mut self, acc: &mut Acc) {
        if let Some(tail) = self.tail.take() {
            extract::tail(UsageDialect::Converse, &tail, acc);
        }
        self.decoder = Decoder::new(EVENT_MAX);
    }
}
