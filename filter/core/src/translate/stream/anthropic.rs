//! Anthropic Messages streams: events from Anthropic providers decoded into [`Event`]s, and
//! events encoded as Anthropic's `message_start` … `message_stop` sequence for Anthropic
//! clients.

use serde_json::{json, Value};

use super::{merge, write_event, Event};
use crate::translate::anthropic::{decode, stop_reason, usage_json, OUTPUT_TOOL};
use crate::translate::ir::{Finish, Usage};

/// Provider side.
#[derive(Debug, Default)]
pub(super) struct Decoder {
    /// Structured output was asked for: the [`OUTPUT_TOOL`] call is the answer's text.
    structured: bool,
    /// Content block index of each tool call, in call order.
    tool_blocks: Vec<u64>,
    /// The block carrying structured output.
    output_block: Option<u64>,
}

impl Decoder {
    pub(super) fn new(structured: bool) -> Decoder {
        Decoder { structured, ..Decoder::default() }
    }

    /// Decodes one event (`name` from its `event:` line; the data's `type` decides).
    pub(super) fn event(&mut self, _name: &[u8], data: &[u8], out: &mut Vec<Event>) {
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            out.push(Event::Error("the provider sent an event that is not JSON".into()));
            return;
        };
        match v["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let message = &v["message"];
                out.push(Event::Start { id: message["id"].as_str().unwrap_or_default().to_string() });
                out.push(Event::Usage(decode::usage(&message["usage"])));
            }
            "content_block_start" => self.block_start(&v, out),
            "content_block_delta" => self.block_delta(&v, out),
            "message_delta" => {
                let reason = v["delta"]["stop_reason"].as_str();
                let sequence = v["delta"]["stop_sequence"].as_str().map(str::to_string);
                out.push(Event::Finish(decode::finish(reason, sequence, self.output_block.is_some())));
                out.push(Event::Usage(decode::usage(&v["usage"])));
            }
            "error" => out.push(Event::Error(v["error"]["message"].as_str().unwrap_or("provider error").to_string())),
            // ping, content_block_stop, message_stop: nothing to carry.
            _ => {}
        }
    }

    fn block_start(&mut self, v: &Value, out: &mut Vec<Event>) {
        let block = &v["content_block"];
        let at = v["index"].as_u64().unwrap_or(0);
        match block["type"].as_str().unwrap_or_default() {
            "text" => {
                if let Some(t) = block["text"].as_str().filter(|t| !t.is_empty()) {
                    out.push(Event::Text(t.to_string()));
                }
            }
            "tool_use" if self.structured && block["name"] == OUTPUT_TOOL => self.output_block = Some(at),
            "tool_use" => {
                let index = self.tool_blocks.len();
                self.tool_blocks.push(at);
                let id = block["id"].as_str().unwrap_or_default().to_string();
                let name = block["name"].as_str().unwrap_or_default().to_string();
                out.push(Event::ToolStart { index, id, name });
            }
            _ => {}
        }
    }

    fn block_delta(&mut self, v: &Value, out: &mut Vec<Event>) {
        let at = v["index"].as_u64().unwrap_or(0);
        let delta = &v["delta"];
        let text = |key: &str| delta[key].as_str().unwrap_or_default().to_string();
        match delta["type"].as_str().unwrap_or_default() {
            "text_delta" => out.push(Event::Text(text("text"))),
            "thinking_delta" => out.push(Event::Thinking(text("thinking"))),
            "signature_delta" => out.push(Event::Signature(text("signature"))),
            "input_json_delta" if self.output_block == Some(at) => out.push(Event::Text(text("partial_json"))),
            "input_json_delta" if text("partial_json").is_empty() => {}
            "input_json_delta" => {
                if let Some(index) = self.tool_blocks.iter().position(|&b| b == at) {
                    out.push(Event::ToolArgs { index, json: text("partial_json") });
                }
            }
            _ => {}
        }
    }
}

/// The kind of the content block open in the client's stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Thinking,
    Tool(usize),
}

/// Client side.
#[derive(Debug)]
pub(super) struct Encoder {
    id: String,
    model: String,
    /// `message_start` was sent (it waits for the first content, so input usage is known).
    started: bool,
    open: Option<(u64, Open)>,
    next_block: u64,
    finish: Option<Finish>,
    usage: Usage,
    failed: bool,
}

impl Encoder {
    pub(super) fn new(model: &str) -> Encoder {
        Encoder {
            id: String::new(),
            model: model.to_string(),
            started: false,
            open: None,
            next_block: 0,
            finish: None,
            usage: Usage::default(),
            failed: false,
        }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let mut usage = usage_json(&self.usage);
        usage["output_tokens"] = json!(0);
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model, "content": [],
            "stop_reason": null, "stop_sequence": null, "usage": usage,
        });
        write_event(out, Some("message_start"), &json!({"type": "message_start", "message": message}));
    }

    /// Makes `kind` the open block (closing another), returning its index.
    fn block(&mut self, kind: Open, start: Value, out: &mut Vec<u8>) -> u64 {
        self.start(out);
        if let Some((index, open)) = self.open {
            if open == kind {
                return index;
            }
            self.close(out);
        }
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some((index, kind));
        let event = json!({"type": "content_block_start", "index": index, "content_block": start});
        write_event(out, Some("content_block_start"), &event);
        index
    }

    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((index, _)) = self.open.take() {
            write_event(out, Some("content_block_stop"), &json!({"type": "content_block_stop", "index": index}));
        }
    }

    fn delta(out: &mut Vec<u8>, index: u64, delta: Value) {
        let event = json!({"type": "content_block_delta", "index": index, "delta": delta});
        write_event(out, Some("content_block_delta"), &event);
    }

    pub(super) fn event(&mut self, event: Event, out: &mut Vec<u8>) {
        match event {
            Event::Start { id } => self.id = id,
            Event::Text(text) => {
                let i = self.block(Open::Text, json!({"type": "text", "text": ""}), out);
                Self::delta(out, i, json!({"type": "text_delta", "text": text}));
            }
            Event::Thinking(text) => {
                let i = self.block(Open::Thinking, json!({"type": "thinking", "thinking": ""}), out);
                Self::delta(out, i, json!({"type": "thinking_delta", "thinking": text}));
            }
            Event::Signature(sig) => {
                let i = self.block(Open::Thinking, json!({"type": "thinking", "thinking": ""}), out);
                Self::delta(out, i, json!({"type": "signature_delta", "signature": sig}));
            }
            Event::ToolStart { index, id, name } => {
                self.close(out);
                self.block(Open::Tool(index), json!({"type": "tool_use", "id": id, "name": name, "input": {}}), out);
            }
            Event::ToolArgs { index, json } => {
                let i =
                    self.block(Open::Tool(index), json!({"type": "tool_use", "id": "", "name": "", "input": {}}), out);
                Self::delta(out, i, json!({"type": "input_json_delta", "partial_json": json}));
            }
            Event::Finish(f) => self.finish = Some(f),
            Event::Usage(u) => merge(&mut self.usage, u),
            Event::Error(message) => {
                self.failed = true;
                let error = json!({"type": "error", "error": {"type": "api_error", "message": message}});
                write_event(out, Some("error"), &error);
            }
        }
    }

    /// Closes the open block, then `message_delta` (stop reason, final usage) and
    /// `message_stop`; a stream cut before its finish ends with an error event instead.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) {
        let Some(finish) = self.finish.take() else {
            if !self.failed {
                self.event(Event::Error("the provider's stream ended before the answer was complete".into()), out);
            }
            return;
        };
        self.start(out);
        self.close(out);
        let (reason, sequence) = stop_reason(&finish);
        let event = json!({
            "type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": usage_json(&self.usage),
        });
        write_event(out, Some("message_delta"), &event);
        write_event(out, Some("message_stop"), &json!({"type": "message_stop"}));
    }
}
