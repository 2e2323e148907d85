//! A stored entry from what the filter captured: the client's request and the answer it got
//! (one JSON `response` object, or the event stream whose `response.completed` event carries
//! it).
//!
//! The stored `response` is the answer as the client saw it, with `store: true` and the
//! request's `previous_response_id` (a translated answer does not echo them). The input
//! items are the request's `input` in item form, as OpenAI lists them: a string becomes one
//! user message, a message's string `content` becomes one text part, and every item gets an
//! id when it has none (`<msg|fc|fco|rs|item>_<response id without resp_>_in<index>`, distinct
//! from any output item's).

use ferrogate_core::stored::{final_event, valid_id};
use serde_json::{json, Map, Value};

use super::Entry;

/// Why nothing is stored from a capture.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// The request is not a JSON object.
    #[error("the request is not a JSON object")]
    Request,
    /// The stream has no `response.completed` or `response.incomplete` event (it failed or
    /// was cut).
    #[error("the stream never ended as a response")]
    NotCompleted,
    /// The answer is not a `response` object with a usable id.
    #[error("the answer is not a response object with a response id")]
    Answer,
}

/// The entry for `request` answered by `answer` (`streamed`: an event stream), stored at
/// `now_ms` and kept `ttl_ms`.
///
/// # Errors
/// See [`BuildError`].
pub fn entry(request: &[u8], answer: &[u8], streamed: bool, now_ms: u64, ttl_ms: u64) -> Result<Entry, BuildError> {
    let Ok(Value::Object(request)) = serde_json::from_slice::<Value>(request) else {
        return Err(BuildError::Request);
    };
    let mut response = if streamed {
        let data = final_event(answer).ok_or(BuildError::NotCompleted)?;
        let mut event: Value = serde_json::from_slice(&data).map_err(|_| BuildError::Answer)?;
        event.get_mut("response").map(Value::take).ok_or(BuildError::Answer)?
    } else {
        serde_json::from_slice(answer).map_err(|_| BuildError::Answer)?
    };
    let Some(fields) = response.as_object_mut() else { return Err(BuildError::Answer) };
    let id = fields.get("id").and_then(Value::as_str).filter(|id| valid_id(id)).ok_or(BuildError::Answer)?.to_string();
    if fields.get("object").and_then(Value::as_str) != Some("response") {
        return Err(BuildError::Answer);
    }
    fields.insert("store".into(), Value::Bool(true));
    let previous = request.get("previous_response_id").cloned().unwrap_or(Value::Null);
    fields.insert("previous_response_id".into(), previous);
    if fields.get("instructions").is_none_or(Value::is_null) {
        fields.insert("instructions".into(), request.get("instructions").cloned().unwrap_or(Value::Null));
    }
    let items = input_items(request.get("input"), &id);
    Ok(Entry {
        id,
        created_ms: now_ms,
        expires_ms: now_ms.saturating_add(ttl_ms),
        response: response.to_string(),
        input_items: Value::Array(items).to_string(),
        origin: String::new(),
        tokens: 0,
        cost_micros: 0,
    })
}

/// `input` in item form (see the module's note).
fn input_items(input: Option<&Value>, response_id: &str) -> Vec<Value> {
    let tail = response_id.strip_prefix("resp_").unwrap_or(response_id);
    let items = match input {
        Some(Value::String(text)) => vec![json!({"role": "user", "content": text})],
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    };
    items.into_iter().enumerate().map(|(i, item)| item_form(item, tail, i)).collect()
}

fn item_form(item: Value, tail: &str, index: usize) -> Value {
    let Value::Object(mut fields) = item else { return item };
    if !fields.contains_key("type") && fields.contains_key("role") {
        fields.insert("type".into(), json!("message"));
    }
    let kind = fields.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
    if kind == "message" {
        message_form(&mut fields);
    }
    if !fields.contains_key("id") {
        let prefix = match kind.as_str() {
            "message" => "msg",
            "function_call" => "fc",
            "function_call_output" => "fco",
            "reasoning" => "rs",
            _ => "item",
        };
        fields.insert("id".into(), json!(format!("{prefix}_{tail}_in{index}")));
    }
    Value::Object(fields)
}

/// A message's string content as one text part, and a status when it has none.
pub(super) fn message_form(fields: &mut Map<String, Value>) {
    if let Some(Value::String(text)) = fields.get("content") {
        let assistant = fields.get("role").and_then(Value::as_str) == Some("assistant");
        let part = if assistant {
            json!({"type": "output_text", "text": text, "annotations": []})
        } else {
            json!({"type": "input_text", "text": text})
        };
        fields.insert("content".into(), json!([part]));
    }
    fields.entry("status").or_insert_with(|| json!("completed"));
}

/// Splits the filter's call body at `request_bytes` (request, answer).
pub fn split(body: &[u8], request_bytes: usize) -> Option<(&[u8], &[u8])> {
    (request_bytes <= body.len()).then(|| body.split_at(request_bytes))
}

/// Records in the stored response the conversation its turn was appended to (OpenAI's
/// `conversation: {"id"}`).
pub fn set_conversation(entry: &mut Entry, conversation: &str) {
    if let Ok(Value::Object(mut fields)) = serde_json::from_str::<Value>(&entry.response) {
        fields.insert("conversation".into(), json!({"id": conversation}));
        entry.response = Value::Object(fields).to_string();
    }
}
