//! OpenAI Responses streams for Responses clients: neutral [`Event`]s encoded as the typed
//! events of `POST /v1/responses` with `stream: true`, each with an `event:` line and a
//! `sequence_number` counting from 0: `response.created` and `response.in_progress`, then for
//! each output item `response.output_item.added`, its content events
//! (`response.content_part.added`, `response.output_text.delta`/`.done`,
//! `response.content_part.done` for a message; `response.reasoning_summary_part.added`,
//! `response.reasoning_summary_text.delta`/`.done`, `response.reasoning_summary_part.done`
//! for reasoning; `response.function_call_arguments.delta`/`.done` for a call) and
//! `response.output_item.done`; last `response.completed`, or `response.incomplete` when the
//! answer hit its token limit or a content filter.
//!
//! Memory: unlike the other encoders this one keeps what it has sent, because the closing
//! event and each `.done` event repeat the whole output. That is bounded by the answer's own
//! size (its text, reasoning and call arguments), which `max_output_tokens` bounds — not by
//! anything else in the stream.
//!
//! A provider error, or a stream cut before its finish, ends with an `error` event and never
//! with `response.completed`, so the client does not take a partial answer for a whole one.
//! Item ids follow [`crate::translate::responses`]: deterministic from the provider's id.

use serde_json::{json, Value};

use super::{merge, write_event, Event};
use crate::translate::ir::{Finish, Usage};
use crate::translate::responses::{
    call_item, is_incomplete, item_id, message_item, output_text, reasoning_item, response_object, Head,
};
use crate::translate::Kept;

/// The output item being streamed (its `output_index` is the number of items done).
#[derive(Debug)]
enum Open {
    Message { text: String },
    Reasoning { text: String, signature: String },
    Call { index: usize, call_id: String, name: String, arguments: String },
}

impl Open {
    fn prefix(&self) -> &'static str {
        match self {
            Open::Message { .. } => "msg",
            Open::Reasoning { .. } => "rs",
            Open::Call { .. } => "fc",
        }
    }
}

/// Client side.
#[derive(Debug)]
pub(super) struct Encoder {
    id: String,
    model: String,
    created: u64,
    /// What the gateway keeps of the response (echoed in the response objects).
    kept: Kept,
    sequence: u64,
    /// `response.created` was sent.
    started: bool,
    /// Items done, in order (the closing event repeats them).
    output: Vec<Value>,
    open: Option<Open>,
    finish: Option<Finish>,
    usage: Usage,
    failed: bool,
}

impl Encoder {
    pub(super) fn new(model: &str, created: u64, kept: Kept) -> Encoder {
        Encoder {
            id: String::new(),
            model: model.to_string(),
            created,
            kept,
            sequence: 0,
            started: false,
            output: Vec::new(),
            open: None,
            finish: None,
            usage: Usage::default(),
            failed: false,
        }
    }

    /// Writes one event of type `kind` (the data gets its `type` and `sequence_number`).
    fn emit(&mut self, out: &mut Vec<u8>, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        write_event(out, Some(kind), &data);
    }

    /// The `sequence_number` of the next event.
    pub(super) fn next_sequence(&self) -> u64 {
        self.sequence
    }

    fn head(&self) -> Head<'_> {
        Head { id: &self.id, model: &self.model, created_at: self.created, kept: &self.kept }
    }

    fn start(&mut self, out: &mut Vec<u8>) {
        if self.started {
            return;
        }
        self.started = true;
        let response = response_object(self.head(), None, Vec::new(), None);
        self.emit(out, "response.created", json!({"response": response.clone()}));
        self.emit(out, "response.in_progress", json!({"response": response}));
    }

    /// `output_index` and id of the open item.
    fn at(&self) -> (usize, String) {
        let index = self.output.len();
        (index, item_id(self.open.as_ref().map_or("item", Open::prefix), &self.id, index))
    }

    pub(super) fn event(&mut self, event: Event, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        match event {
            Event::Start { id } => {
                if !self.started {
                    self.id = id;
                }
                self.start(out);
            }
            Event::Text(text) => self.text(&text, out),
            Event::Thinking(text) => self.thinking(&text, out),
            Event::Signature(sig) => {
                self.open_reasoning(out);
                if let Some(Open::Reasoning { signature, .. }) = &mut self.open {
                    signature.push_str(&sig);
                }
            }
            Event::ToolStart { index, id, name } => self.open_call(index, id, name, out),
            Event::ToolArgs { index, json } => self.arguments(index, &json, out),
            Event::Finish(f) => self.finish = Some(f),
            Event::Usage(u) => merge(&mut self.usage, u),
            Event::Error(message) => self.fail(message, out),
        }
    }

    /// Makes `open` the open item (closing another), announcing it with `item`.
    fn open_item(&mut self, open: Open, item: Value, out: &mut Vec<u8>) -> (usize, String) {
        self.close("completed", out);
        self.start(out);
        self.open = Some(open);
        let (index, id) = self.at();
        let mut item = item;
        item["id"] = json!(id);
        self.emit(out, "response.output_item.added", json!({"output_index": index, "item": item}));
        (index, id)
    }

    fn text(&mut self, text: &str, out: &mut Vec<u8>) {
        if !matches!(self.open, Some(Open::Message { .. })) {
            let item = json!({"type": "message", "status": "in_progress", "role": "assistant", "content": []});
            let (index, id) = self.open_item(Open::Message { text: String::new() }, item, out);
            let part = json!({"item_id": id, "output_index": index, "content_index": 0, "part": output_text("")});
            self.emit(out, "response.content_part.added", part);
        }
        if let Some(Open::Message { text: all }) = &mut self.open {
            all.push_str(text);
        }
        let (index, id) = self.at();
        let delta = json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []});
        self.emit(out, "response.output_text.delta", delta);
    }

    fn open_reasoning(&mut self, out: &mut Vec<u8>) {
        if matches!(self.open, Some(Open::Reasoning { .. })) {
            return;
        }
        let open = Open::Reasoning { text: String::new(), signature: String::new() };
        let (index, id) = self.open_item(open, json!({"type": "reasoning", "summary": []}), out);
        let part = json!({"type": "summary_text", "text": ""});
        let added = json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part});
        self.emit(out, "response.reasoning_summary_part.added", added);
    }

    fn thinking(&mut self, text: &str, out: &mut Vec<u8>) {
        self.open_reasoning(out);
        if let Some(Open::Reasoning { text: all, .. }) = &mut self.open {
            all.push_str(text);
        }
        let (index, id) = self.at();
        let delta = json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": text});
        self.emit(out, "response.reasoning_summary_text.delta", delta);
    }

    fn open_call(&mut self, index: usize, call_id: String, name: String, out: &mut Vec<u8>) {
        let item = call_item("", &call_id, &name, "", "in_progress");
        self.open_item(Open::Call { index, call_id, name, arguments: String::new() }, item, out);
    }

    /// More arguments: of the open call, or (should a provider interleave calls) of a call
    /// opened for them.
    fn arguments(&mut self, index: usize, json: &str, out: &mut Vec<u8>) {
        if !matches!(&self.open, Some(Open::Call { index: open, .. }) if *open == index) {
            self.open_call(index, String::new(), String::new(), out);
        }
        if let Some(Open::Call { arguments, .. }) = &mut self.open {
            arguments.push_str(json);
        }
        let (at, id) = self.at();
        let delta = json!({"item_id": id, "output_index": at, "delta": json});
        self.emit(out, "response.function_call_arguments.delta", delta);
    }

    /// Ends the open item with its `.done` events; it joins the output.
    fn close(&mut self, status: &str, out: &mut Vec<u8>) {
        let (index, id) = self.at();
        let Some(open) = self.open.take() else { return };
        let item = match open {
            Open::Message { text } => {
                let ids = json!({"item_id": id, "output_index": index, "content_index": 0});
                self.done(out, "response.output_text.done", &ids, json!({"text": text, "logprobs": []}));
                self.done(out, "response.content_part.done", &ids, json!({"part": output_text(&text)}));
                message_item(&id, &text, status)
            }
            Open::Reasoning { text, signature } => {
                let ids = json!({"item_id": id, "output_index": index, "summary_index": 0});
                self.done(out, "response.reasoning_summary_text.done", &ids, json!({"text": text}));
                let part = json!({"part": {"type": "summary_text", "text": text}});
                self.done(out, "response.reasoning_summary_part.done", &ids, part);
                reasoning_item(&id, &text, Some(&signature))
            }
            Open::Call { call_id, name, arguments, .. } => {
                let arguments = if arguments.is_empty() { "{}".to_string() } else { arguments };
                let ids = json!({"item_id": id, "output_index": index});
                let done = json!({"name": name, "arguments": arguments});
                self.done(out, "response.function_call_arguments.done", &ids, done);
                call_item(&id, &call_id, &name, &arguments, status)
            }
        };
        self.emit(out, "response.output_item.done", json!({"output_index": index, "item": item.clone()}));
        self.output.push(item);
    }

    /// An event made of `ids` and `fields`.
    fn done(&mut self, out: &mut Vec<u8>, kind: &str, ids: &Value, mut fields: Value) {
        if let (Some(fields), Some(ids)) = (fields.as_object_mut(), ids.as_object()) {
            fields.extend(ids.clone());
        }
        self.emit(out, kind, fields);
    }

    fn fail(&mut self, message: String, out: &mut Vec<u8>) {
        self.failed = true;
        self.emit(out, "error", json!({"code": "server_error", "message": message, "param": null}));
    }

    /// Closes the open item, then `response.completed` (or `response.incomplete`) with the
    /// whole response; a stream cut before its finish ends with an `error` event instead.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) {
        if self.failed {
            return;
        }
        let Some(finish) = self.finish.take() else {
            self.fail("the provider's stream ended before the answer was complete".into(), out);
            return;
        };
        self.start(out);
        let incomplete = is_incomplete(&finish);
        self.close(if incomplete { "incomplete" } else { "completed" }, out);
        let output = std::mem::take(&mut self.output);
        let response = response_object(self.head(), Some(&finish), output, Some(&self.usage));
        let kind = if incomplete { "response.incomplete" } else { "response.completed" };
        self.emit(out, kind, json!({"response": response}));
    }
}
