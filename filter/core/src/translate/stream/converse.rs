//! Bedrock ConverseStream answers: the body is AWS event-stream framing
//! (`application/vnd.amazon.eventstream`, [`crate::clouds::eventstream`]), not server-sent
//! events. Each frame is an event named by its `:event-type` header with a JSON payload
//! (`messageStart`, `contentBlockStart`, `contentBlockDelta`, `contentBlockStop`,
//! `messageStop`, then `metadata` with the usage), or an exception Bedrock sends after its
//! 200 (throttling, model stream error, ...). Frames are decoded into [`Event`]s; unknown
//! events and payload keys (Bedrock pads payloads with a `p` key) are ignored.
//!
//! A corrupt frame (CRC mismatch), one over [`MAX_EVENT`] bytes, or a body ending inside a
//! frame is an error event, and decoding stops there: the framing has no point to resume at.

use serde_json::Value;

use super::{Event, MAX_EVENT};
use crate::clouds::eventstream::{self, Kind, Message};
use crate::translate::converse::answer::{finish, usage};

/// Provider side.
#[derive(Debug)]
pub(super) struct Decoder {
    frames: eventstream::Decoder,
    started: bool,
    /// `contentBlockIndex` of each tool call, in call order (a call's ordinal is its position).
    tool_blocks: Vec<u64>,
    failed: bool,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder { frames: eventstream::Decoder::new(MAX_EVENT), started: false, tool_blocks: Vec::new(), failed: false }
    }
}

impl Decoder {
    /// The next bytes of the body: the events of every frame they complete.
    pub(super) fn feed(&mut self, bytes: &[u8], out: &mut Vec<Event>) {
        self.frames.push(bytes);
        while let Some(next) = self.frames.next_message() {
            match next {
                Ok(message) => self.message(&message, out),
                Err(e) => self.fail(&e, out),
            }
        }
    }

    /// The body ended: a frame left unfinished is an error.
    pub(super) fn finish(&mut self, out: &mut Vec<Event>) {
        if let (false, Err(e)) = (self.failed, self.frames.finish()) {
            self.fail(&e, out);
        }
    }

    fn fail(&mut self, e: &eventstream::EventStreamError, out: &mut Vec<Event>) {
        self.failed = true;
        out.push(Event::Error(format!("the provider's event stream cannot be read: {e}")));
    }

    fn message(&mut self, m: &Message, out: &mut Vec<Event>) {
        match m.kind() {
            Kind::Event(name) => self.event(name.as_bytes(), &m.payload, out),
            Kind::Exception(kind) => {
                let payload: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
                let message = payload.get("message").and_then(Value::as_str).unwrap_or("no message");
                out.push(Event::Error(format!("{kind}: {message}")));
            }
            Kind::Error { code, message } => out.push(Event::Error(format!("{code}: {message}"))),
            Kind::Other => {}
        }
    }

    /// Decodes one event: `name` its `:event-type`, `payload` its JSON.
    pub(super) fn event(&mut self, name: &[u8], payload: &[u8], out: &mut Vec<Event>) {
        let Ok(v) = serde_json::from_slice::<Value>(payload) else {
            out.push(Event::Error("the provider sent an event that is not JSON".into()));
            return;
        };
        match name {
            b"messageStart" => self.start(out),
            b"contentBlockStart" => self.block_start(&v, out),
            b"contentBlockDelta" => self.block_delta(&v, out),
            b"messageStop" => {
                self.start(out);
                let reason = v.get("stopReason").and_then(Value::as_str);
                out.push(Event::Finish(finish(reason, !self.tool_blocks.is_empty())));
            }
            b"metadata" => {
                if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
                    out.push(Event::Usage(usage(u)));
                }
            }
            // contentBlockStop, and events Bedrock may add: nothing to carry.
            _ => {}
        }
    }

    /// The answer begins (Converse answers have no id).
    fn start(&mut self, out: &mut Vec<Event>) {
        if !std::mem::replace(&mut self.started, true) {
            out.push(Event::Start { id: String::new() });
        }
    }

    /// Only tool calls announce their block; text and reasoning start with their first delta.
    fn block_start(&mut self, v: &Value, out: &mut Vec<Event>) {
        let Some(call) = v.get("start").and_then(|s| s.get("toolUse")) else { return };
        self.start(out);
        let text = |key: &str| call.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
        let index = self.tool_blocks.len();
        self.tool_blocks.push(block_index(v));
        out.push(Event::ToolStart { index, id: text("toolUseId"), name: text("name") });
    }

    fn block_delta(&mut self, v: &Value, out: &mut Vec<Event>) {
        self.start(out);
        let Some(delta) = v.get("delta") else { return };
        let text =
            |d: &Value, key: &str| d.get(key).and_then(Value::as_str).filter(|t| !t.is_empty()).map(str::to_string);
        if let Some(t) = text(delta, "text") {
            out.push(Event::Text(t));
        }
        if let Some(json) = delta.get("toolUse").and_then(|u| text(u, "input")) {
            let at = block_index(v);
            if let Some(index) = self.tool_blocks.iter().position(|&b| b == at) {
                out.push(Event::ToolArgs { index, json });
            }
        }
        // `redactedContent` (encrypted reasoning) has no neutral counterpart: left out.
        if let Some(r) = delta.get("reasoningContent") {
            out.extend(text(r, "text").map(Event::Thinking));
            out.extend(text(r, "signature").map(Event::Signature));
        }
    }
}

fn block_index(v: &Value) -> u64 {
    v.get("contentBlockIndex").and_then(Value::as_u64).unwrap_or(0)
}
