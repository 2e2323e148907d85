//! Anthropic Messages ⇄ the neutral form: requests decoded from Anthropic clients and
//! encoded for Anthropic providers; answers decoded from Anthropic and encoded for Anthropic
//! clients.
//!
//! Differences the encoder bridges: `max_tokens` is required ([`DEFAULT_MAX_TOKENS`] when
//! the client gave none); roles must alternate, so consecutive same-role messages merge; the
//! first message must be the user's; structured output has no native parameter, so a JSON
//! schema becomes a forced tool whose input is the answer (the answer's decoder turns it back
//! into text); usage counts cached prompt tokens apart from `input_tokens`.

use serde_json::{json, Map, Value};

use super::ir::{
    Block, Breakpoint, Finish, Image, Message, OutputFormat, PortableCache, Reasoning, Request, Response, Role, Tool,
    ToolChoice, Usage,
};
use super::json::unsupported;
use super::TranslateError;

pub(crate) mod decode;

pub use decode::{decode_request, decode_response};

/// `max_tokens` sent when the client set none (Anthropic requires it; OpenAI and Gemini
/// clients usually leave it out).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The `anthropic-version` header sent with translated requests (the API version these
/// shapes follow).
pub const VERSION: &str = "2023-06-01";

/// Name of the tool that carries structured output (see the module doc).
pub const OUTPUT_TOOL: &str = "json_output";

/// Encodes a request for an Anthropic provider.
///
/// # Errors
/// A parameter Messages cannot express (`seed`, penalties, `reasoning_effort`).
pub fn encode_request(req: &Request) -> Result<Vec<u8>, TranslateError> {
    for (set, param) in [
        (req.seed.is_some(), "seed"),
        (req.presence_penalty.is_some(), "presence_penalty"),
        (req.frequency_penalty.is_some(), "frequency_penalty"),
        (matches!(req.reasoning, Some(Reasoning::Effort(_))), "reasoning_effort"),
    ] {
        if set {
            return Err(unsupported(param));
        }
    }
    let mut out = Map::new();
    out.insert("model".into(), json!(req.model));
    out.insert("max_tokens".into(), json!(req.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)));
    if !req.system.is_empty() {
        let system: Vec<Value> =
            req.system.iter().map(|t| with_cache(json!({"type": "text", "text": t.text}), &t.cache)).collect();
        out.insert("system".into(), Value::Array(system));
    }
    out.insert("messages".into(), Value::Array(encode_messages(&req.messages)));
    encode_tools(req, &mut out)?;
    if let Some(cache) = &req.cache {
        place_breakpoints(cache, &mut out);
    }
    let fields = [
        ("temperature", req.temperature.map(Value::from)),
        ("top_p", req.top_p.map(Value::from)),
        ("top_k", req.top_k.map(Value::from)),
        ("stop_sequences", (!req.stop.is_empty()).then(|| json!(req.stop))),
        ("stream", req.stream.then_some(Value::Bool(true))),
        ("metadata", req.user.as_ref().map(|u| json!({"user_id": u}))),
        (
            "thinking",
            match req.reasoning {
                Some(Reasoning::Budget(n)) => Some(json!({"type": "enabled", "budget_tokens": n})),
                _ => None,
            },
        ),
    ];
    out.extend(fields.into_iter().filter_map(|(k, v)| Some((k.to_string(), v?))));
    serde_json::to_vec(&Value::Object(out)).map_err(|e| TranslateError::Json(e.to_string()))
}

/// Marks the end of each selected part of the prompt with an `ephemeral` breakpoint; a block
/// that already carries the client's own `cache_control` keeps it.
fn place_breakpoints(cache: &PortableCache, out: &mut Map<String, Value>) {
    let mark = json!({"type": "ephemeral", "ttl": cache.ttl});
    for b in &cache.breakpoints {
        let last = match b {
            Breakpoint::System => out.get_mut("system").and_then(Value::as_array_mut).and_then(|s| s.last_mut()),
            Breakpoint::Tools => out.get_mut("tools").and_then(Value::as_array_mut).and_then(|t| t.last_mut()),
            Breakpoint::Messages => out
                .get_mut("messages")
                .and_then(Value::as_array_mut)
                .and_then(|m| m.last_mut())
                .and_then(|m| m.get_mut("content"))
                .and_then(Value::as_array_mut)
                .and_then(|c| c.last_mut()),
        };
        if let Some(Value::Object(block)) = last {
            block.entry("cache_control").or_insert_with(|| mark.clone());
        }
    }
}

fn with_cache(mut block: Value, cache: &Option<Value>) -> Value {
    if let Some(c) = cache {
        block["cache_control"] = c.clone();
    }
    block
}

/// Tools, tool choice and structured output (a forced [`OUTPUT_TOOL`]).
fn encode_tools(req: &Request, out: &mut Map<String, Value>) -> Result<(), TranslateError> {
    let mut tools: Vec<Value> = req.tools.iter().map(encode_tool).collect();
    let mut choice = req.tool_choice.as_ref().map(|c| match c {
        ToolChoice::Auto => json!({"type": "auto"}),
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Named(name) => json!({"type": "tool", "name": name}),
    });
    match &req.output {
        None => {}
        Some(_) if !req.tools.is_empty() => return Err(unsupported("response_format (together with tools)")),
        Some(format) => {
            let schema = match format {
                OutputFormat::JsonObject => json!({"type": "object"}),
                OutputFormat::JsonSchema { schema, .. } => schema.clone(),
            };
            let description = "Answer by calling this tool: its input is the answer.";
            tools.push(json!({"name": OUTPUT_TOOL, "description": description, "input_schema": schema}));
            choice = Some(json!({"type": "tool", "name": OUTPUT_TOOL}));
        }
    }
    if req.parallel_tool_calls == Some(false) {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        c["disable_parallel_tool_use"] = json!(true);
    }
    if !tools.is_empty() {
        out.insert("tools".into(), Value::Array(tools));
    }
    if let Some(c) = choice {
        out.insert("tool_choice".into(), c);
    }
    Ok(())
}

fn encode_tool(t: &Tool) -> Value {
    let mut tool = json!({"name": t.name, "input_schema": t.parameters});
    if let Some(d) = &t.description {
        tool["description"] = json!(d);
    }
    with_cache(tool, &t.cache)
}

/// Messages with same-role neighbours merged (Anthropic requires alternation), starting with
/// a user turn.
fn encode_messages(messages: &[Message]) -> Vec<Value> {
    let mut out: Vec<(Role, Vec<Value>)> = Vec::new();
    for m in messages {
        let blocks = m.content.iter().map(encode_block);
        match out.last_mut() {
            Some((role, content)) if *role == m.role => content.extend(blocks),
            _ => out.push((m.role, blocks.collect())),
        }
    }
    if out.first().is_some_and(|(role, _)| *role == Role::Assistant) {
        out.insert(0, (Role::User, vec![json!({"type": "text", "text": "(continue)"})]));
    }
    out.into_iter()
        .map(|(role, content)| json!({"role": if role == Role::User { "user" } else { "assistant" }, "content": content}))
        .collect()
}

fn encode_block(b: &Block) -> Value {
    match b {
        Block::Text(t) => with_cache(json!({"type": "text", "text": t.text}), &t.cache),
        Block::Image(Image::Inline { media_type, data, cache }) => with_cache(
            json!({"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}),
            cache,
        ),
        Block::Image(Image::Url { url, cache }) => {
            with_cache(json!({"type": "image", "source": {"type": "url", "url": url}}), cache)
        }
        Block::ToolCall(c) => json!({"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}),
        Block::ToolResult(r) => {
            let mut v = json!({"type": "tool_result", "tool_use_id": r.id, "content": r.content.iter().map(encode_block).collect::<Vec<_>>()});
            if r.is_error {
                v["is_error"] = json!(true);
            }
            with_cache(v, &r.cache)
        }
        Block::Thinking(t) => match &t.signature {
            Some(sig) => json!({"type": "thinking", "thinking": t.text, "signature": sig}),
            None => json!({"type": "thinking", "thinking": t.text}),
        },
    }
}

/// Encodes an answer for an Anthropic client.
pub fn encode_response(resp: &Response, model: &str) -> Vec<u8> {
    let content: Vec<Value> = resp
        .content
        .iter()
        .filter(|b| matches!(b, Block::Text(_) | Block::ToolCall(_) | Block::Thinking(_)))
        .map(encode_block)
        .collect();
    let (stop_reason, stop_sequence) = stop_reason(&resp.finish);
    let body = json!({
        "id": resp.id, "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop_reason, "stop_sequence": stop_sequence, "usage": usage_json(&resp.usage),
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// `stop_reason` and `stop_sequence` of a neutral finish.
pub fn stop_reason(finish: &Finish) -> (&'static str, Option<&str>) {
    match finish {
        Finish::Stop => ("end_turn", None),
        Finish::StopSequence(s) => ("stop_sequence", s.as_deref()),
        Finish::Length => ("max_tokens", None),
        Finish::ToolCalls => ("tool_use", None),
        Finish::ContentFilter => ("refusal", None),
    }
}

/// Anthropic's `usage`: `input_tokens` excludes cache reads and writes.
pub fn usage_json(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input.saturating_sub(u.cached + u.cache_write),
        "output_tokens": u.output,
        "cache_read_input_tokens": u.cached,
        "cache_creation_input_tokens": u.cache_write,
    })
}

#[cfg(test)]
mod tests;
