//! Guardrails on a streamed answer: the [`StreamRedactor`] chain applied to the text deltas of
//! each dialect's server-sent events, in the client's dialect (after any translation).
//!
//! [`SseGuard`] takes the answer's bytes chunk by chunk and returns the bytes to send instead.
//! Events may be cut anywhere: only whole events are sent (an event's bytes wait until its
//! blank line arrives). Each text of the answer (an OpenAI choice's content or one tool call's
//! arguments, an Anthropic content block, a Gemini candidate, a Responses output part or call)
//! has its own chain of redactors, one per stage: the policies' rule sets in order, then
//! optionally the restoring of placeholders; what stage k sends feeds stage k+1.
//!
//! - An event whose text is unchanged is forwarded byte for byte; a changed one is written
//!   again with its data replaced (its other lines kept). An event whose text became empty
//!   while the chain holds text back is kept (with empty text), so the event count and the
//!   client's view of progress do not change.
//! - Where a text ends (a finish reason, `[DONE]`, `content_block_stop`, Gemini's
//!   `finishReason`, Responses' `.done` events, the end of the stream) the held text is sent
//!   first: in the ending event itself when it carries that text, else as an extra delta event
//!   of the dialect's shape placed just before it. Responses events that repeat a whole text
//!   are rebuilt from what the client actually received (see the `responses` module).
//! - Not redacted: reasoning text (Anthropic `thinking_delta`, Gemini thought parts,
//!   Responses reasoning summaries) and OpenAI `refusal` deltas.
//! - A `block` match ends the stream: the event that carried it is dropped, the dialect's error
//!   event (naming the policy and rule, never the matched text) is sent, and every later byte
//!   is dropped ([`SseGuard::blocked`]).
//!
//! Memory: each open text holds at most its stages' windows (see [`super::stream`]); at most
//! [`MAX_TEXTS`] texts are open at once (more ends the stream with an error event). An event
//! longer than [`MAX_EVENT`] is not held: it is forwarded unmodified as it arrives and
//! [`SseGuard::oversized`] reports it, a documented gap rather than unbounded memory.

use std::borrow::Cow;

use serde_json::{json, Value};

use super::scan::{Tally, Vault};
use super::stream::{Stage, StreamRedactor};
use crate::translate::Inbound;
use crate::usage::sse::{event_data, Splitter};

mod anthropic;
mod chat;
mod gemini;
mod responses;

/// Longest event held while its end has not arrived (bytes).
pub const MAX_EVENT: usize = 1 << 20;
/// Most texts open at once in one answer.
pub const MAX_TEXTS: usize = 256;

/// Why a stream ends early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// A `block` rule matched: stage index, rule index.
    Blocked(usize, usize),
    /// More than [`MAX_TEXTS`] texts at once.
    TooManyTexts,
}

/// Which text of the answer a chain redacts (the meaning of `a` and `b` is the dialect's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key {
    kind: u8,
    a: usize,
    b: usize,
}

/// The redactors of one text, one per stage.
#[derive(Debug)]
struct Chain {
    key: Key,
    /// What the dialect needs to write a delta of this text (e.g. text or JSON).
    shape: u8,
    redactors: Vec<StreamRedactor>,
}

/// What a dialect handler works with while it handles one event.
struct Run<'r, 's> {
    stages: &'r [Stage<'s>],
    vault: &'r mut Vault,
    chains: &'r mut Vec<Chain>,
    tallies: &'r mut Vec<Tally>,
    /// Line ending of the events written.
    nl: &'static str,
}

impl Run<'_, '_> {
    /// Feeds `text` to the chain of `key` (opened with `shape` if new); returns what to send.
    fn text(&mut self, key: Key, shape: u8, text: &str) -> Result<String, Stop> {
        let at = match self.chains.iter().position(|c| c.key == key) {
            Some(at) => at,
            None if self.chains.len() >= MAX_TEXTS => return Err(Stop::TooManyTexts),
            None => {
                self.chains.push(Chain { key, shape, redactors: Vec::new() });
                self.chains.len() - 1
            }
        };
        let Some(chain) = self.chains.get_mut(at) else { return Ok(String::new()) };
        pass(chain, self.stages, self.vault, self.tallies, text, false)
    }

    /// Feeds `text` to the chain of `key` and ends it: everything left to send.
    fn last(&mut self, key: Key, shape: u8, text: &str) -> Result<String, Stop> {
        let at = self.chains.iter().position(|c| c.key == key);
        let mut chain = match at {
            Some(at) => self.chains.remove(at),
            None => Chain { key, shape, redactors: Vec::new() },
        };
        pass(&mut chain, self.stages, self.vault, self.tallies, text, true)
    }

    /// Ends the text of `key` if one is open: its shape and what it still held.
    fn flush(&mut self, key: Key) -> Result<Option<(u8, String)>, Stop> {
        let Some(at) = self.chains.iter().position(|c| c.key == key) else { return Ok(None) };
        let mut chain = self.chains.remove(at);
        let text = pass(&mut chain, self.stages, self.vault, self.tallies, "", true)?;
        Ok(Some((chain.shape, text)))
    }

    /// The open texts, in the order they opened.
    fn open(&self) -> Vec<Key> {
        self.chains.iter().map(|c| c.key).collect()
    }

    /// Writes a new event.
    fn write(&self, out: &mut Vec<u8>, name: Option<&str>, data: &Value) {
        write_event(out, self.nl, name, data);
    }
}

/// Runs `text` through every stage of `chain`; `end`: then ends the text.
fn pass(
    chain: &mut Chain,
    stages: &[Stage<'_>],
    vault: &mut Vault,
    tallies: &mut Vec<Tally>,
    text: &str,
    end: bool,
) -> Result<String, Stop> {
    if chain.redactors.len() < stages.len() {
        chain.redactors.resize_with(stages.len(), StreamRedactor::new);
    }
    if tallies.len() < stages.len() {
        tallies.resize_with(stages.len(), Tally::default);
    }
    let mut input = text.to_string();
    for (k, ((stage, r), tally)) in stages.iter().zip(chain.redactors.iter_mut()).zip(tallies.iter_mut()).enumerate() {
        let mut output = String::new();
        let mut done = r.feed(*stage, vault, tally, &input, &mut output);
        if end && done.is_ok() {
            done = r.finish(*stage, vault, tally, &mut output);
        }
        done.map_err(|b| Stop::Blocked(k, b.rule))?;
        input = output;
    }
    Ok(input)
}

/// One whole event as received.
struct Event<'e> {
    /// Its bytes, terminator included.
    raw: &'e [u8],
    data: Cow<'e, [u8]>,
}

impl<'e> Event<'e> {
    fn new(raw: &'e [u8]) -> Event<'e> {
        Event { raw, data: event_data(raw) }
    }

    /// The data as a JSON object, if it is one.
    fn json(&self) -> Option<Value> {
        serde_json::from_slice::<Value>(&self.data).ok().filter(Value::is_object)
    }

    /// Writes the event again with its data replaced by `data` (its other lines kept).
    fn rewrite(&self, data: &Value, out: &mut Vec<u8>) {
        let nl: &[u8] = if self.raw.windows(2).any(|w| w == b"\r\n") { b"\r\n" } else { b"\n" };
        let mut wrote = false;
        for line in lines(self.raw) {
            if line.starts_with(b"data:") || line == b"data" {
                if !wrote {
                    out.extend_from_slice(b"data: ");
                    let _ = serde_json::to_writer(&mut *out, data);
                    out.extend_from_slice(nl);
                    wrote = true;
                }
                continue;
            }
            out.extend_from_slice(line);
            out.extend_from_slice(nl);
        }
        out.extend_from_slice(nl);
    }
}

/// The non-empty lines of an event (an event has no blank line but its terminator).
fn lines(raw: &[u8]) -> impl Iterator<Item = &[u8]> {
    raw.split(|&b| b == b'\n' || b == b'\r').filter(|l| !l.is_empty())
}

/// Per-dialect state.
#[derive(Debug)]
enum Dialect {
    Chat(chat::State),
    Anthropic(anthropic::State),
    Gemini(gemini::State),
    Responses(responses::State),
}

/// Guardrails over one streamed answer (see the module docs).
#[derive(Debug)]
pub struct SseGuard {
    dialect: Dialect,
    /// A label per stage (the policy's name), for the error event.
    labels: Vec<String>,
    splitter: Splitter,
    /// Bytes of the event in progress.
    pending: Vec<u8>,
    /// The event in progress outgrew [`MAX_EVENT`]: its bytes pass as they come.
    passing: bool,
    oversized: bool,
    chains: Vec<Chain>,
    tallies: Vec<Tally>,
    blocked: Option<(usize, usize)>,
    /// The stream was ended (blocked or over a limit): later bytes are dropped.
    ended: bool,
    nl: &'static str,
}

impl SseGuard {
    /// A guard for an answer streamed in the client's `dialect`; `labels` names each stage
    /// (e.g. its policy) in the error event of a blocked answer.
    pub fn new(dialect: Inbound, labels: Vec<String>) -> SseGuard {
        let dialect = match dialect {
            Inbound::OpenAiChat => Dialect::Chat(chat::State::default()),
            Inbound::Anthropic => Dialect::Anthropic(anthropic::State),
            Inbound::Gemini => Dialect::Gemini(gemini::State::default()),
            Inbound::Responses => Dialect::Responses(responses::State::default()),
        };
        SseGuard {
            dialect,
            labels,
            splitter: Splitter::default(),
            pending: Vec::new(),
            passing: false,
            oversized: false,
            chains: Vec::new(),
            tallies: Vec::new(),
            blocked: None,
            ended: false,
            nl: "\n",
        }
    }

    /// Takes the next bytes of the answer; returns the bytes to send for them. `stages` (and
    /// `vault`) must be the same on every call of one answer.
    pub fn feed(&mut self, stages: &[Stage<'_>], vault: &mut Vault, mut chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        while !self.ended {
            let Some(end) = self.splitter.next_end(chunk) else { break };
            let (event, rest) = chunk.split_at(end.min(chunk.len()));
            chunk = rest;
            if std::mem::take(&mut self.passing) {
                out.extend_from_slice(event);
                continue;
            }
            self.pending.extend_from_slice(event);
            let whole = std::mem::take(&mut self.pending);
            self.event(stages, vault, &whole, &mut out);
        }
        if self.ended {
            return out;
        }
        if self.passing {
            out.extend_from_slice(chunk);
        } else {
            self.pending.extend_from_slice(chunk);
            if self.pending.len() > MAX_EVENT {
                out.append(&mut self.pending);
                self.passing = true;
                self.oversized = true;
            }
        }
        out
    }

    /// The answer ended: sends what is held (an unterminated last event, the held text).
    pub fn finish(&mut self, stages: &[Stage<'_>], vault: &mut Vault) -> Vec<u8> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        let last = std::mem::take(&mut self.pending);
        let ended = self.splitter.finish();
        if self.passing {
            out.extend_from_slice(&last);
        } else if !last.is_empty() || ended {
            self.event(stages, vault, &last, &mut out);
        }
        if self.ended {
            return out;
        }
        let mut run = Run { stages, vault, chains: &mut self.chains, tallies: &mut self.tallies, nl: self.nl };
        let mut tail = Vec::new();
        let done = match &mut self.dialect {
            Dialect::Chat(s) => s.finish(&mut run, &mut tail),
            Dialect::Anthropic(s) => s.finish(&mut run, &mut tail),
            Dialect::Gemini(s) => s.finish(&mut run, &mut tail),
            Dialect::Responses(s) => s.finish(&mut run, &mut tail),
        };
        match done {
            Ok(()) => out.extend_from_slice(&tail),
            Err(stop) => self.stop(stop, stages, &mut out),
        }
        out
    }

    /// The `block` match that ended the answer: (stage index, rule index in its set).
    pub fn blocked(&self) -> Option<(usize, usize)> {
        self.blocked
    }

    /// Matches per stage (index as in `stages`), for metrics.
    pub fn tallies(&self) -> &[Tally] {
        &self.tallies
    }

    /// True when an event longer than [`MAX_EVENT`] was forwarded unmodified.
    pub fn oversized(&self) -> bool {
        self.oversized
    }

    /// Handles one whole event.
    fn event(&mut self, stages: &[Stage<'_>], vault: &mut Vault, raw: &[u8], out: &mut Vec<u8>) {
        let event = Event::new(raw);
        if event.data.is_empty() {
            out.extend_from_slice(raw);
            return;
        }
        if raw.windows(2).any(|w| w == b"\r\n") {
            self.nl = "\r\n";
        }
        let mut run = Run { stages, vault, chains: &mut self.chains, tallies: &mut self.tallies, nl: self.nl };
        let mut sent = Vec::new();
        let done = match &mut self.dialect {
            Dialect::Chat(s) => s.event(&mut run, &event, &mut sent),
            Dialect::Anthropic(s) => s.event(&mut run, &event, &mut sent),
            Dialect::Gemini(s) => s.event(&mut run, &event, &mut sent),
            Dialect::Responses(s) => s.event(&mut run, &event, &mut sent),
        };
        match done {
            Ok(()) => out.extend_from_slice(&sent),
            // Nothing of the event that carried the match is sent.
            Err(stop) => self.stop(stop, stages, out),
        }
    }

    /// Ends the stream with the dialect's error event.
    fn stop(&mut self, stop: Stop, stages: &[Stage<'_>], out: &mut Vec<u8>) {
        self.ended = true;
        self.pending = Vec::new();
        let message = match stop {
            Stop::Blocked(stage, rule) => {
                self.blocked = Some((stage, rule));
                let policy = self.labels.get(stage).map_or("", String::as_str);
                let name = match stages.get(stage) {
                    Some(Stage::Rules(rules)) => rules.rules().get(rule).map_or("", |r| r.name.as_str()),
                    _ => "",
                };
                format!("the answer was blocked by guardrail rule '{name}' of policy '{policy}'")
            }
            Stop::TooManyTexts => format!("the answer has more than {MAX_TEXTS} texts at once"),
        };
        let nl = self.nl;
        match &self.dialect {
            Dialect::Chat(_) => {
                let error = json!({"message": message, "type": "invalid_request_error", "code": "guardrail_blocked"});
                write_event(out, nl, None, &json!({ "error": error }));
                out.extend_from_slice(format!("data: [DONE]{nl}{nl}").as_bytes());
            }
            Dialect::Anthropic(_) => {
                let error = json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
                write_event(out, nl, Some("error"), &error);
            }
            Dialect::Gemini(_) => {
                let error = json!({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}});
                write_event(out, nl, None, &error);
            }
            Dialect::Responses(s) => write_event(out, nl, Some("response.failed"), &s.failed(&message)),
        }
    }
}

/// Writes one event with `nl` line endings.
fn write_event(out: &mut Vec<u8>, nl: &str, name: Option<&str>, data: &Value) {
    if let Some(name) = name {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(nl.as_bytes());
    }
    out.extend_from_slice(b"data: ");
    // Serialising a Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(nl.as_bytes());
    out.extend_from_slice(nl.as_bytes());
}

#[cfg(test)]
mod tests;
