//! OpenAI Chat Completions ⇄ the neutral form: requests decoded from OpenAI clients and
//! encoded for OpenAI-speaking providers; answers decoded from those providers and encoded
//! for OpenAI clients.

use serde_json::{json, Map, Value};

use super::ir::{
    Block, Finish, Image, Message, OutputFormat, Reasoning, Request, Response, Role, Text, Tool, ToolChoice,
    ToolResult, Usage,
};
use super::json::{array, invalid, map, object, opt_string, unsupported};
use super::TranslateError;

mod decode;

pub use decode::decode_request;

/// Encodes a request for an OpenAI Chat Completions provider.
///
/// # Errors
/// A parameter chat completions cannot express (`top_k`, a thinking budget, images in tool
/// results).
pub fn encode_request(req: &Request) -> Result<Vec<u8>, TranslateError> {
    let mut out = Map::new();
    out.insert("model".into(), json!(req.model));
    let mut messages: Vec<Value> = req.system.iter().map(|t| json!({"role": "system", "content": t.text})).collect();
    for (i, m) in req.messages.iter().enumerate() {
        encode_message(i, m, &mut messages)?;
    }
    out.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        out.insert("tools".into(), Value::Array(req.tools.iter().map(encode_tool).collect()));
    }
    if let Some(choice) = &req.tool_choice {
        out.insert("tool_choice".into(), encode_choice(choice));
    }
    encode_sampling(req, &mut out)?;
    if req.stream {
        out.insert("stream".into(), json!(true));
        out.insert("stream_options".into(), json!({"include_usage": true}));
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| TranslateError::Json(e.to_string()))
}

fn encode_sampling(req: &Request, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    if req.top_k.is_some() {
        return Err(unsupported("top_k"));
    }
    if req.cache.is_some() {
        // Portable prompt caching is honoured by Anthropic providers only (OpenAI caches by
        // itself): refused rather than claimed.
        return Err(unsupported("cache_control"));
    }
    let reasoning_effort = match &req.reasoning {
        None => None,
        Some(Reasoning::Effort(e)) => Some(e.clone()),
        Some(Reasoning::Budget(_)) => return Err(unsupported("thinking.budget_tokens")),
    };
    let stop = (!req.stop.is_empty()).then(|| json!(req.stop));
    let fields = [
        ("max_completion_tokens", req.max_tokens.map(Value::from)),
        ("temperature", req.temperature.map(Value::from)),
        ("top_p", req.top_p.map(Value::from)),
        ("stop", stop),
        ("seed", req.seed.map(Value::from)),
        ("presence_penalty", req.presence_penalty.map(Value::from)),
        ("frequency_penalty", req.frequency_penalty.map(Value::from)),
        ("parallel_tool_calls", req.parallel_tool_calls.map(Value::from)),
        ("user", req.user.clone().map(Value::from)),
        ("reasoning_effort", reasoning_effort.map(Value::from)),
        ("response_format", req.output.as_ref().map(encode_format)),
    ];
    out.extend(fields.into_iter().filter_map(|(k, v)| Some((k.to_string(), v?))));
    Ok(())
}

fn encode_format(format: &OutputFormat) -> Value {
    match format {
        OutputFormat::JsonObject => json!({"type": "json_object"}),
        OutputFormat::JsonSchema { name, schema, strict } => {
            let mut spec = json!({"name": name, "schema": schema});
            if let Some(strict) = strict {
                spec["strict"] = json!(strict);
            }
            json!({"type": "json_schema", "json_schema": spec})
        }
    }
}

fn encode_tool(tool: &Tool) -> Value {
    let mut function = json!({"name": tool.name, "parameters": tool.parameters});
    if let Some(d) = &tool.description {
        function["description"] = json!(d);
    }
    json!({"type": "function", "function": function})
}

fn encode_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Named(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

/// One neutral message as one or more chat messages: tool results become `tool` messages
/// (before the rest of the user turn, which is where chat expects them).
fn encode_message(i: usize, m: &Message, out: &mut Vec<Value>) -> Result<(), TranslateError> {
    let mut parts = Vec::new();
    let mut calls = Vec::new();
    for (j, block) in m.content.iter().enumerate() {
        match block {
            Block::Text(t) => parts.push(json!({"type": "text", "text": t.text})),
            Block::Image(img) => parts.push(image_part(img)),
            Block::ToolCall(c) => calls.push(json!({
                "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            })),
            Block::ToolResult(r) => out.push(tool_message(i, j, r)?),
            // Chat completions takes no reasoning input: earlier turns' thinking is dropped
            // (documented; the model's answer does not depend on seeing it again).
            Block::Thinking(_) => {}
        }
    }
    let role = if m.role == Role::User { "user" } else { "assistant" };
    if parts.is_empty() && calls.is_empty() {
        return Ok(());
    }
    let mut msg = json!({"role": role, "content": text_or_parts(parts)});
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    out.push(msg);
    Ok(())
}

/// Plain text stays a string (the shape every OpenAI-compatible server accepts).
fn text_or_parts(parts: Vec<Value>) -> Value {
    match parts.as_slice() {
        [] => Value::Null,
        [one] if one["type"] == "text" => one["text"].clone(),
        _ => Value::Array(parts),
    }
}

fn image_part(img: &Image) -> Value {
    let url = match img {
        Image::Inline { media_type, data, .. } => format!("data:{media_type};base64,{data}"),
        Image::Url { url, .. } => url.clone(),
    };
    json!({"type": "image_url", "image_url": {"url": url}})
}

fn tool_message(i: usize, j: usize, r: &ToolResult) -> Result<Value, TranslateError> {
    let mut text = String::new();
    for (k, b) in r.content.iter().enumerate() {
        match b {
            Block::Text(t) => text.push_str(&t.text),
            _ => return Err(unsupported(&format!("messages[{i}].content[{j}].content[{k}]"))),
        }
    }
    // Chat has no error flag on tool results: an error says so in its text.
    if r.is_error {
        text.insert_str(0, "Error: ");
    }
    Ok(json!({"role": "tool", "tool_call_id": r.id, "content": text}))
}

/// Decodes a chat completion from an OpenAI-speaking provider (the first choice).
///
/// # Errors
/// The body is not a chat completion.
pub fn decode_response(body: &[u8]) -> Result<Response, TranslateError> {
    let mut doc = object(body)?;
    let id = opt_string(&mut doc, "id", "")?.unwrap_or_default();
    let model = opt_string(&mut doc, "model", "")?.unwrap_or_default();
    let choices = array("choices", doc.remove("choices").unwrap_or(Value::Null))?;
    let choice = choices.into_iter().next().ok_or_else(|| invalid("choices", "at least one choice"))?;
    let mut choice = map("choices[0]", choice)?;
    let finish = finish_reason(choice.get("finish_reason").and_then(Value::as_str));
    let message = map("choices[0].message", choice.remove("message").unwrap_or(Value::Null))?;
    let content = response_content(message)?;
    let usage = doc.get("usage").map(usage).unwrap_or_default();
    Ok(Response { id, model, content, finish, usage })
}

fn response_content(mut message: Map<String, Value>) -> Result<Vec<Block>, TranslateError> {
    let mut content = Vec::new();
    if let Some(text) = opt_string(&mut message, "content", "choices[0].message")? {
        content.push(Block::Text(Text { text, cache: None }));
    }
    if let Some(text) = opt_string(&mut message, "refusal", "choices[0].message")? {
        content.push(Block::Text(Text { text, cache: None }));
    }
    let calls = message.remove("tool_calls").unwrap_or(Value::Null);
    for (k, call) in (if calls.is_null() { Vec::new() } else { array("tool_calls", calls)? }).into_iter().enumerate() {
        content.push(Block::ToolCall(decode::tool_call(&format!("choices[0].message.tool_calls[{k}]"), call)?));
    }
    Ok(content)
}

/// The neutral finish of a `finish_reason`.
pub(crate) fn finish_reason(reason: Option<&str>) -> Finish {
    match reason {
        Some("length") => Finish::Length,
        Some("tool_calls" | "function_call") => Finish::ToolCalls,
        Some("content_filter") => Finish::ContentFilter,
        _ => Finish::Stop,
    }
}

/// Neutral usage from a chat `usage` object.
pub(crate) fn usage(u: &Value) -> Usage {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    Usage {
        input: n(&u["prompt_tokens"]),
        output: n(&u["completion_tokens"]),
        cached: n(&u["prompt_tokens_details"]["cached_tokens"]),
        cache_write: 0,
    }
}

/// Encodes an answer for an OpenAI client; `created` is the Unix time to report.
pub fn encode_response(resp: &Response, model: &str, created: u64) -> Vec<u8> {
    let mut text = String::new();
    let mut calls = Vec::new();
    for block in &resp.content {
        match block {
            Block::Text(t) => text.push_str(&t.text),
            Block::ToolCall(c) => calls.push(json!({
                "id": c.id, "type": "function",
                "function": {"name": c.name, "arguments": c.arguments.to_string()},
            })),
            Block::Image(_) | Block::ToolResult(_) | Block::Thinking(_) => {}
        }
    }
    let mut message = json!({"role": "assistant", "content": (!text.is_empty()).then_some(text), "refusal": null});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let body = json!({
        "id": resp.id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_name(&resp.finish), "logprobs": null}],
        "usage": usage_json(&resp.usage),
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The `finish_reason` of a neutral finish.
pub fn finish_name(finish: &Finish) -> &'static str {
    match finish {
        Finish::Stop | Finish::StopSequence(_) => "stop",
        Finish::Length => "length",
        Finish::ToolCalls => "tool_calls",
        Finish::ContentFilter => "content_filter",
    }
}

/// The `usage` object of an answer.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.input, "completion_tokens": u.output, "total_tokens": u.input + u.output,
        "prompt_tokens_details": {"cached_tokens": u.cached},
    })
}

#[cfg(test)]
mod tests;
