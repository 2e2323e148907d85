//! OpenAI Responses (`POST /v1/responses`) as a client dialect: requests decoded into the
//! neutral form (then sent to chat completions, Anthropic or Gemini providers), answers encoded
//! as a `response` object. The streamed form is in `stream/responses.rs`.
//!
//! Decisions, beyond the rule that every parameter is carried, accepted or refused by name:
//! - **Storing is not the translator's.** `store` is accepted (`true` or `false`); the filter
//!   and the sidecar keep the answer the client got (`crate::stored`), and the filter sets
//!   [`crate::translate::Context::store`] so that answers say `"store": true` then (else
//!   `false`). A follow-up's `previous_response_id` is resolved before translation: the filter
//!   rebuilds the conversation from the stored chain ([`crate::stored::chain`]), so what
//!   reaches the translator has none (nor `conversation`, whose items are put in front the
//!   same way); one that still does (a filter without the store) is refused, like the other
//!   state the translation cannot hold: `prompt` (a stored template), `background: true`, and
//!   a non-empty `include`.
//! - **Reasoning.** Each thinking block of an answer becomes one `reasoning` item whose text
//!   is its single `summary_text` part; a provider's signature goes in `encrypted_content`, so
//!   a client that sends its output back as input (the stateless way to continue) returns it
//!   intact. On input, a `reasoning` item with `encrypted_content` is carried as thinking (its
//!   summary as the text, `encrypted_content` as the signature); one without is not sent — the
//!   documented exception for reasoning shown in earlier turns: no provider can verify it and
//!   Anthropic refuses unsigned thinking. `reasoning.effort` is carried; `reasoning.summary`
//!   is accepted (it shapes how reasoning is shown, not the answer; what a provider shows
//!   arrives as a summary).
//! - **Ids** are deterministic: `resp_<provider id>` for the response and
//!   `<msg|rs|fc>_<provider id>_<output index>` for its items; a `function_call`'s `call_id`
//!   is the provider's call id, so the client's `function_call_output` answers it.
//! - **Accepted without effect on the answer:** `metadata`, `prompt_cache_key`,
//!   `prompt_cache_retention`, `stream_options.include_obfuscation`, `max_tool_calls` (it only
//!   limits built-in tools, which are refused), `truncation: "disabled"`, and of earlier
//!   assistant turns the `id`, `status`, `phase`, `annotations` and `logprobs`. An image's
//!   `detail` hint is dropped as for chat completions clients.
//! - **Function `strict`** is accepted whatever its value, unlike chat completions clients'
//!   `strict: true`: Responses makes `true` the default, so refusing it would refuse nearly
//!   every function tool. The schema is carried; its strict enforcement is not (the neutral
//!   form has no place for it). This is a documented exception.
//! - **Refused:** built-in tools (`web_search`, `file_search`, `computer_use_preview`, ...)
//!   and tool choices naming them, items other than messages, function calls, their outputs
//!   and reasoning (`item_reference` needs stored items), files, `text.verbosity` other than
//!   `medium`, and anything unknown.
//!
//! A refusal from the provider's encoder names the client's parameter ([`client_param`]).

use serde_json::{json, Value};

use super::ir::{Block, Finish, Response, Usage};
use super::{Kept, TranslateError};

mod decode;

pub use decode::decode_request;

/// The `id` of the response to the provider's answer `provider_id`.
fn response_id(provider_id: &str) -> String {
    format!("resp_{provider_id}")
}

/// The id of output item `index` (`prefix` `msg`, `rs` or `fc`) of the answer `provider_id`.
pub(crate) fn item_id(prefix: &str, provider_id: &str, index: usize) -> String {
    format!("{prefix}_{provider_id}_{index}")
}

/// An `output_text` content part.
pub(crate) fn output_text(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

/// An assistant `message` output item holding `text`.
pub(crate) fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant", "content": [output_text(text)]})
}

/// A `function_call` output item; `arguments` is JSON text.
pub(crate) fn call_item(id: &str, call_id: &str, name: &str, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": status})
}

/// A `reasoning` output item: the text as its one summary part, the signature (if any) as
/// `encrypted_content`.
pub(crate) fn reasoning_item(id: &str, text: &str, signature: Option<&str>) -> Value {
    let mut item = json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": text}]});
    if let Some(sig) = signature.filter(|s| !s.is_empty()) {
        item["encrypted_content"] = json!(sig);
    }
    item
}

/// Whether an answer that stopped so is `incomplete` rather than `completed`.
pub(crate) fn is_incomplete(finish: &Finish) -> bool {
    matches!(finish, Finish::Length | Finish::ContentFilter)
}

/// What a `response` object says besides its output.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Head<'a> {
    /// The provider's answer id.
    pub(crate) id: &'a str,
    /// The model the client asked for.
    pub(crate) model: &'a str,
    /// Unix time.
    pub(crate) created_at: u64,
    /// What the gateway keeps of it.
    pub(crate) kept: &'a Kept,
}

/// A `response` object: `in_progress` without a finish, else `completed` or `incomplete`.
/// The request's own settings are not echoed (the router keeps no copy): the fields the
/// official SDKs expect say the defaults, except what the gateway keeps ([`Kept`]: `store`,
/// `previous_response_id`, `conversation`).
pub(crate) fn response_object(
    head: Head<'_>,
    finish: Option<&Finish>,
    output: Vec<Value>,
    usage: Option<&Usage>,
) -> Value {
    let (status, details) = match finish {
        None => ("in_progress", Value::Null),
        Some(Finish::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
        Some(Finish::ContentFilter) => ("incomplete", json!({"reason": "content_filter"})),
        Some(_) => ("completed", Value::Null),
    };
    let kept = head.kept;
    let mut object = json!({
        "id": response_id(head.id), "object": "response", "created_at": head.created_at, "status": status,
        "background": false, "error": null, "incomplete_details": details, "instructions": null,
        "max_output_tokens": null, "max_tool_calls": null, "model": head.model, "output": output,
        "parallel_tool_calls": true, "previous_response_id": kept.previous_response_id, "reasoning": null,
        "store": kept.store, "temperature": null, "tool_choice": "auto", "tools": [], "top_p": null,
        "truncation": "disabled", "usage": usage.map(usage_json), "user": null, "metadata": {},
    });
    if let Some(id) = &kept.conversation {
        object["conversation"] = json!({"id": id});
    }
    object
}

/// The `usage` of a response (`input_tokens` includes cached ones, as the neutral form's).
pub(crate) fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": u.cached, "cache_write_tokens": u.cache_write},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input + u.output,
    })
}

/// Encodes an answer for a Responses client; `created_at` is the Unix time to report.
pub fn encode_response(resp: &Response, model: &str, created_at: u64) -> Vec<u8> {
    encode_stored_response(resp, model, created_at, &Kept::default())
}

/// [`encode_response`] saying what the gateway keeps of the response.
pub fn encode_stored_response(resp: &Response, model: &str, created_at: u64, kept: &Kept) -> Vec<u8> {
    let mut output = output_items(resp);
    if is_incomplete(&resp.finish) {
        // The item being written when the answer stopped.
        if let Some(status) = output.last_mut().and_then(|item| item.get_mut("status")) {
            *status = json!("incomplete");
        }
    }
    let head = Head { id: &resp.id, model, created_at, kept };
    let body = response_object(head, Some(&resp.finish), output, Some(&resp.usage));
    serde_json::to_vec(&body).unwrap_or_default()
}

/// Output items in answer order: consecutive text is one message, each thinking block one
/// reasoning item, each call one function call.
fn output_items(resp: &Response) -> Vec<Value> {
    let mut items = Vec::new();
    let mut text: Option<String> = None;
    for block in &resp.content {
        if let Block::Text(t) = block {
            text.get_or_insert_with(String::new).push_str(&t.text);
            continue;
        }
        if let Some(t) = text.take() {
            items.push(message_item(&item_id("msg", &resp.id, items.len()), &t, "completed"));
        }
        let id = |prefix| item_id(prefix, &resp.id, items.len());
        let item = match block {
            Block::Thinking(t) => reasoning_item(&id("rs"), &t.text, t.signature.as_deref()),
            Block::ToolCall(c) => call_item(&id("fc"), &c.id, &c.name, &c.arguments.to_string(), "completed"),
            Block::Text(_) | Block::Image(_) | Block::ToolResult(_) => continue,
        };
        items.push(item);
    }
    if let Some(t) = text {
        items.push(message_item(&item_id("msg", &resp.id, items.len()), &t, "completed"));
    }
    items
}

/// A refusal (or complaint) of the provider's encoder, renamed to what the client sent: the
/// neutral names become Responses ones, and `messages[i].content[j]` the input it came from.
/// `body` is decoded again to find it (only on this error path).
pub(crate) fn client_param(e: TranslateError, body: &[u8]) -> TranslateError {
    match e {
        TranslateError::Unsupported { param } => TranslateError::Unsupported { param: client_path(&param, body) },
        TranslateError::Invalid { param, message } => {
            TranslateError::Invalid { param: client_path(&param, body), message }
        }
        other => other,
    }
}

fn client_path(param: &str, body: &[u8]) -> String {
    match param {
        "reasoning_effort" => return "reasoning.effort".into(),
        "response_format (together with tools)" => return "text.format (together with tools)".into(),
        _ => {}
    }
    let Some((i, j, rest)) = message_path(param) else { return param.to_string() };
    let Ok((_, origins)) = decode::decode(body) else { return param.to_string() };
    let Some(origin) = origins.get(i).and_then(|o| o.get(j)) else { return param.to_string() };
    // A tool result's content is its item's `output` list.
    let rest = match rest.strip_prefix(".content") {
        Some(index) if origin.ends_with(".output") => index,
        _ => rest,
    };
    format!("{origin}{rest}")
}

/// `messages[i].content[j]<rest>` as `(i, j, rest)`.
fn message_path(param: &str) -> Option<(usize, usize, &str)> {
    let rest = param.strip_prefix("messages[")?;
    let (i, rest) = rest.split_once("].content[")?;
    let (j, rest) = rest.split_once(']')?;
    Some((i.parse().ok()?, j.parse().ok()?, rest))
}

#[cfg(test)]
mod tests;
