//! OpenAI Chat Completions streams: chunks from OpenAI-speaking providers decoded into
//! [`Event`]s, and events encoded as chunks for OpenAI clients (`data: {chunk}` … `data: [DONE]`).

use serde_json::{json, Value};

use super::{merge, write_event, Event};
use crate::translate::ir::Usage;
use crate::translate::openai_chat::{finish_name, finish_reason, usage, usage_json};

/// Provider side.
#[derive(Debug, Default)]
pub(super) struct Decoder {
    started: bool,
    /// Call indexes whose start was reported.
    calls: Vec<u64>,
}

impl Decoder {
    /// Decodes one event's data.
    pub(super) fn event(&mut self, data: &[u8], out: &mut Vec<Event>) {
        if data == b"[DONE]" {
            return;
        }
        let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
            out.push(Event::Error("the provider sent an event that is not JSON".into()));
            return;
        };
        if let Some(message) = chunk["error"]["message"].as_str() {
            out.push(Event::Error(message.to_string()));
            return;
        }
        if !self.started {
            self.started = true;
            out.push(Event::Start { id: chunk["id"].as_str().unwrap_or_default().to_string() });
        }
        if let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) {
            self.delta(&choice["delta"], out);
            if let Some(reason) = choice["finish_reason"].as_str() {
                out.push(Event::Finish(finish_reason(Some(reason))));
            }
        }
        if chunk["usage"].is_object() {
            out.push(Event::Usage(usage(&chunk["usage"])));
        }
    }

    fn delta(&mut self, delta: &Value, out: &mut Vec<Event>) {
        for key in ["content", "refusal"] {
            if let Some(text) = delta[key].as_str().filter(|t| !t.is_empty()) {
                out.push(Event::Text(text.to_string()));
            }
        }
        // vLLM and SGLang stream reasoning models' thoughts here.
        if let Some(text) = delta["reasoning_content"].as_str().filter(|t| !t.is_empty()) {
            out.push(Event::Thinking(text.to_string()));
        }
        for call in delta["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let at = call["index"].as_u64().unwrap_or(0);
            let index = usize::try_from(at).unwrap_or(usize::MAX);
            if !self.calls.contains(&at) {
                self.calls.push(at);
                let id = call["id"].as_str().unwrap_or_default().to_string();
                let name = call["function"]["name"].as_str().unwrap_or_default().to_string();
                out.push(Event::ToolStart { index, id, name });
            }
            if let Some(json) = call["function"]["arguments"].as_str().filter(|a| !a.is_empty()) {
                out.push(Event::ToolArgs { index, json: json.to_string() });
            }
        }
    }
}

/// Client side.
#[derive(Debug)]
pub(super) struct Encoder {
    id: String,
    model: String,
    created: u64,
    /// The client asked for `stream_options.include_usage`.
    include_usage: bool,
    started: bool,
    finished: bool,
    failed: bool,
    usage: Usage,
}

impl Encoder {
    pub(super) fn new(model: &str, created: u64, include_usage: bool) -> Encoder {
        Encoder {
            id: String::new(),
            model: model.to_string(),
            created,
            include_usage,
            started: false,
            finished: false,
            failed: false,
            usage: Usage::default(),
        }
    }

    fn chunk(&self, out: &mut Vec<u8>, delta: Value, finish_reason: Option<&str>) {
        let chunk = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        });
        write_event(out, None, &chunk);
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if !self.started {
            self.started = true;
            self.chunk(out, json!({"role": "assistant", "content": ""}), None);
        }
    }

    pub(super) fn event(&mut self, event: Event, out: &mut Vec<u8>) {
        match event {
            Event::Start { id } => {
                self.id = id;
                self.start(out);
            }
            Event::Text(text) => {
                self.start(out);
                self.chunk(out, json!({"content": text}), None);
            }
            // Chat completions has no reasoning in its answers (documented loss).
            Event::Thinking(_) | Event::Signature(_) => {}
            Event::ToolStart { index, id, name } => {
                self.start(out);
                let call =
                    json!({"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}});
                self.chunk(out, json!({"tool_calls": [call]}), None);
            }
            Event::ToolArgs { index, json } => {
                self.chunk(out, json!({"tool_calls": [{"index": index, "function": {"arguments": json}}]}), None);
            }
            Event::Finish(finish) => {
                self.start(out);
                self.finished = true;
                self.chunk(out, json!({}), Some(finish_name(&finish)));
            }
            Event::Usage(u) => merge(&mut self.usage, u),
            Event::Error(message) => {
                self.failed = true;
                write_event(
                    out,
                    None,
                    &json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}}),
                );
            }
        }
    }

    /// Usage (when asked for) and `[DONE]`; a stream cut before its finish ends with an error
    /// event instead, so the client does not take a partial answer for a whole one.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) {
        if !self.finished {
            if !self.failed {
                self.event(Event::Error("the provider's stream ended before the answer was complete".into()), out);
            }
            return;
        }
        if self.include_usage {
            let chunk = json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                "choices": [], "usage": usage_json(&self.usage),
            });
            write_event(out, None, &chunk);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
    }
}
