//! A stored Responses `response` object replayed as the typed events of a streamed response,
//! built from its own output items so that every id, part and annotation goes out as stored:
//! `response.created`, `response.in_progress`, then per item `response.output_item.added`,
//! its content events and `response.output_item.done`, and last `response.completed` (or
//! `response.incomplete`) carrying the stored object. `sequence_number` counts from 0.
//!
//! Item kinds without content events of their own (built-in tool calls, which the gateway's
//! translations never produce but an OpenAI upstream may) are announced and done whole.

use serde_json::{json, Value};

use super::{ReplayError, ReplayOptions};
use crate::translate::stream::write_event;

/// The events being written.
struct Events {
    out: Vec<u8>,
    sequence: u64,
}

impl Events {
    /// Writes one event of type `kind`; `data` gets its `type` and `sequence_number`.
    fn emit(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        write_event(&mut self.out, Some(kind), &data);
    }
}

/// The stream of the stored response `body`, with `opts.model` and `opts.created` as its
/// `model` and `created_at`.
pub(super) fn stream(body: &[u8], opts: &ReplayOptions) -> Result<Vec<u8>, ReplayError> {
    let mut response = match serde_json::from_slice::<Value>(body) {
        Ok(v) if v["object"] == "response" && v["output"].is_array() => v,
        _ => return Err(ReplayError::NotAResponse),
    };
    let closing = match response["status"].as_str() {
        Some("completed") => "response.completed",
        Some("incomplete") => "response.incomplete",
        other => return Err(ReplayError::Status(other.unwrap_or_default().to_string())),
    };
    response["model"] = json!(opts.model);
    response["created_at"] = json!(opts.created);
    let mut events = Events { out: Vec::with_capacity(body.len() * 3), sequence: 0 };
    let mut head = response.clone();
    for (key, value) in [
        ("status", json!("in_progress")),
        ("output", json!([])),
        ("usage", Value::Null),
        ("incomplete_details", Value::Null),
    ] {
        head[key] = value;
    }
    events.emit("response.created", json!({"response": head.clone()}));
    events.emit("response.in_progress", json!({"response": head}));
    for (index, item) in response["output"].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
        output_item(&mut events, index, item);
    }
    events.emit(closing, json!({"response": response}));
    Ok(events.out)
}

/// One output item: announced in progress, its content, then done as stored.
fn output_item(events: &mut Events, index: usize, item: &Value) {
    let ids = json!({"item_id": item["id"], "output_index": index});
    let mut added = item.clone();
    match item["type"].as_str() {
        Some("message") => {
            added["content"] = json!([]);
            added["status"] = json!("in_progress");
            events.emit("response.output_item.added", json!({"output_index": index, "item": added}));
            for (part_index, part) in
                item["content"].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate()
            {
                content_part(events, &ids, part_index, part);
            }
        }
        Some("function_call") => {
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            events.emit("response.output_item.added", json!({"output_index": index, "item": added}));
            let arguments = item["arguments"].as_str().unwrap_or_default();
            events.emit("response.function_call_arguments.delta", with(&ids, json!({"delta": arguments})));
            let done = json!({"name": item["name"], "arguments": arguments});
            events.emit("response.function_call_arguments.done", with(&ids, done));
        }
        Some("reasoning") => {
            added["summary"] = json!([]);
            events.emit("response.output_item.added", json!({"output_index": index, "item": added}));
            for (k, part) in item["summary"].as_array().map(Vec::as_slice).unwrap_or_default().iter().enumerate() {
                summary_part(events, &ids, k, part);
            }
        }
        _ => events.emit("response.output_item.added", json!({"output_index": index, "item": added})),
    }
    events.emit("response.output_item.done", json!({"output_index": index, "item": item}));
}

/// One content part of a message: text and refusals stream as one delta each.
fn content_part(events: &mut Events, ids: &Value, index: usize, part: &Value) {
    let ids = with(ids, json!({"content_index": index}));
    let mut empty = part.clone();
    let streamed = match part["type"].as_str() {
        Some("output_text") => Some(("text", "response.output_text")),
        Some("refusal") => Some(("refusal", "response.refusal")),
        _ => None,
    };
    if let Some((field, _)) = streamed {
        empty[field] = json!("");
        if part.get("annotations").is_some() {
            empty["annotations"] = json!([]);
        }
    }
    events.emit("response.content_part.added", with(&ids, json!({"part": empty})));
    if let Some((field, prefix)) = streamed {
        let text = part[field].as_str().unwrap_or_default();
        let (mut delta, mut done) = (json!({"delta": text}), json!({field: text}));
        if field == "text" {
            delta["logprobs"] = json!([]);
            done["logprobs"] = json!([]);
        }
        events.emit(&format!("{prefix}.delta"), with(&ids, delta));
        events.emit(&format!("{prefix}.done"), with(&ids, done));
    }
    events.emit("response.content_part.done", with(&ids, json!({"part": part})));
}

/// One summary part of a reasoning item.
fn summary_part(events: &mut Events, ids: &Value, index: usize, part: &Value) {
    let ids = with(ids, json!({"summary_index": index}));
    let text = part["text"].as_str().unwrap_or_default();
    let empty = json!({"type": "summary_text", "text": ""});
    events.emit("response.reasoning_summary_part.added", with(&ids, json!({"part": empty})));
    events.emit("response.reasoning_summary_text.delta", with(&ids, json!({"delta": text})));
    events.emit("response.reasoning_summary_text.done", with(&ids, json!({"text": text})));
    events.emit("response.reasoning_summary_part.done", with(&ids, json!({"part": part})));
}

/// `fields` with the keys of `ids` added.
fn with(ids: &Value, mut fields: Value) -> Value {
    if let (Some(f), Some(ids)) = (fields.as_object_mut(), ids.as_object()) {
        f.extend(ids.clone());
    }
    fields
}
