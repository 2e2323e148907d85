//! Gemini streams (`:streamGenerateContent?alt=sse`): every event's data is a whole
//! `GenerateContentResponse` carrying the next parts, the running `usageMetadata` and, last, a
//! `finishReason`. Provider chunks are decoded into [`Event`]s; events are encoded as such
//! chunks for Gemini clients (function calls whole, as Gemini sends them).

use serde_json::{json, Value};

use super::{merge, write_event, Event};
use crate::translate::gemini::answer::{call_prefix, finish, usage};
use crate::translate::gemini::{finish_reason, usage_json};
use crate::translate::ir::{Finish, Usage};

/// Provider side.
#[derive(Debug, Default)]
pub(super) struct Decoder {
    started: bool,
    /// Id prefix of calls without an id (as in [`crate::translate::gemini::decode_response`]).
    prefix: String,
    calls: usize,
}

impl Decoder {
    /// Decodes one event's data (usage first, so an encoder starting its answer knows the
    /// prompt's size).
    pub(super) fn event(&mut self, data: &[u8], out: &mut Vec<Event>) {
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
            let id = chunk["responseId"].as_str().unwrap_or_default();
            self.prefix = call_prefix(id);
            out.push(Event::Start { id: id.to_string() });
        }
        if let Some(u) = chunk.get("usageMetadata") {
            out.push(Event::Usage(usage(u)));
        }
        let candidate = &chunk["candidates"][0];
        for part in candidate["content"]["parts"].as_array().map(Vec::as_slice).unwrap_or_default() {
            self.part(part, out);
        }
        if let Some(reason) = candidate["finishReason"].as_str() {
            out.push(Event::Finish(finish(Some(reason), self.calls > 0)));
        } else if chunk["promptFeedback"]["blockReason"].is_string() {
            out.push(Event::Finish(Finish::ContentFilter));
        }
    }

    /// A part's signature goes before it, as in buffered answers.
    fn part(&mut self, part: &Value, out: &mut Vec<Event>) {
        let signature = part["thoughtSignature"].as_str().map(str::to_string);
        let text = part["text"].as_str().filter(|t| !t.is_empty()).map(str::to_string);
        if part["thought"] == true {
            out.extend(text.map(Event::Thinking));
            out.extend(signature.map(Event::Signature));
            return;
        }
        out.extend(signature.map(Event::Signature));
        out.extend(text.map(Event::Text));
        let call = &part["functionCall"];
        if let Some(name) = call["name"].as_str() {
            let index = self.calls;
            self.calls += 1;
            let id = call["id"].as_str().map_or_else(|| format!("{}{index}", self.prefix), str::to_string);
            out.push(Event::ToolStart { index, id, name: name.to_string() });
            let args = if call["args"].is_object() { call["args"].to_string() } else { "{}".to_string() };
            out.push(Event::ToolArgs { index, json: args });
        }
    }
}

/// A call being received: (ordinal, id, name, JSON text of the arguments so far).
type OpenCall = (usize, String, String, String);

/// Client side.
#[derive(Debug)]
pub(super) struct Encoder {
    id: String,
    model: String,
    call: Option<OpenCall>,
    finish: Option<Finish>,
    usage: Usage,
    failed: bool,
}

impl Encoder {
    pub(super) fn new(model: &str) -> Encoder {
        Encoder {
            id: String::new(),
            model: model.to_string(),
            call: None,
            finish: None,
            usage: Usage::default(),
            failed: false,
        }
    }

    /// One chunk of parts (and, for the last one, the finish and usage).
    fn chunk(&self, out: &mut Vec<u8>, parts: Vec<Value>, finish: Option<&Finish>) {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut chunk = json!({"candidates": [], "modelVersion": self.model, "responseId": self.id});
        if let (Some(f), Value::Object(c), Value::Object(m)) = (finish, &mut candidate, &mut chunk) {
            c.insert("finishReason".into(), json!(finish_reason(f)));
            m.insert("usageMetadata".into(), usage_json(&self.usage));
        }
        if let Value::Object(m) = &mut chunk {
            m.insert("candidates".into(), json!([candidate]));
        }
        write_event(out, None, &chunk);
    }

    /// A part (after the call being received, which it completes).
    fn part(&mut self, out: &mut Vec<u8>, part: Value) {
        self.flush_call(out);
        self.chunk(out, vec![part], None);
    }

    /// The call being received, now whole.
    fn flush_call(&mut self, out: &mut Vec<u8>) {
        if let Some((_, id, name, args)) = self.call.take() {
            let args: Value = serde_json::from_str(&args).unwrap_or_else(|_| json!({}));
            self.part(out, json!({"functionCall": {"id": id, "name": name, "args": args}}));
        }
    }

    pub(super) fn event(&mut self, event: Event, out: &mut Vec<u8>) {
        match event {
            Event::Start { id } => self.id = id,
            Event::Text(text) => self.part(out, json!({"text": text})),
            Event::Thinking(text) => self.part(out, json!({"text": text, "thought": true})),
            // The signature of the thinking just sent: a thought part of its own, which a
            // client's history gives back after that thinking (the decoder joins them).
            Event::Signature(sig) => self.part(out, json!({"text": "", "thought": true, "thoughtSignature": sig})),
            Event::ToolStart { index, id, name } => {
                self.flush_call(out);
                self.call = Some((index, id, name, String::new()));
            }
            Event::ToolArgs { index, json } => match &mut self.call {
                Some((open, _, _, args)) if *open == index => args.push_str(&json),
                _ => {}
            },
            Event::Finish(f) => {
                self.flush_call(out);
                self.finish = Some(f);
            }
            Event::Usage(u) => merge(&mut self.usage, u),
            Event::Error(message) => {
                self.failed = true;
                write_event(out, None, &json!({"error": {"code": 500, "message": message, "status": "INTERNAL"}}));
            }
        }
    }

    /// The last chunk: finish reason and usage; a stream cut before its finish ends with an
    /// error event instead.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) {
        let Some(finish) = self.finish.take() else {
            if !self.failed {
                self.event(Event::Error("the provider's stream ended before the answer was complete".into()), out);
            }
            return;
        };
        self.flush_call(out);
        self.chunk(out, vec![json!({"text": ""})], Some(&finish));
    }
}
