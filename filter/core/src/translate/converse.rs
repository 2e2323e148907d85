//! AWS Bedrock's Converse API as a provider dialect: requests encoded from the neutral form
//! for `POST /model/{modelId}/converse` (or `/converse-stream`), answers decoded into it
//! ([`decode_response`]). Clients never speak Converse, so there is no request decoder nor
//! answer encoder. Streamed answers are AWS event-stream frames, not server-sent events: their
//! decoder is `stream/converse.rs`. Shapes follow botocore's `bedrock-runtime` service model.
//!
//! Differences the codec bridges:
//! - **Model and streaming live in the path** ([`Outbound::upstream_path`](super::Outbound::upstream_path),
//!   the model id escaped by [`escape_model_id`]); the body names neither.
//! - **Roles alternate** and the first turn is the user's: same-role neighbours merge (tool
//!   results are user content, as in the neutral form) and a conversation opening with the
//!   model gets a `(continue)` user turn first, as for Anthropic.
//! - **Tool-use ids** must match `[a-zA-Z0-9_.:-]{1,64}`: an id from another provider's history
//!   that does not is rewritten, the same way on its call and on its result ([`tool_use_id`]),
//!   so the pairing holds and the client never sees the rewritten form. Tool names must match
//!   `[a-zA-Z0-9_-]{1,64}`; another name is refused (the model would call a function the
//!   client does not know).
//! - **Prompt caching.** A block's cache breakpoint (Anthropic `cache_control`) becomes a
//!   `cachePoint` block right after it (system, tools, messages; a 1-hour `ttl` is carried,
//!   5 minutes is the default and left out); the portable `cache_control` request places its
//!   breakpoints after the last system block, tool and message block.
//! - **Sampling** goes in `inferenceConfig` (`temperature` and `topP` only from 0 to 1, a larger
//!   value is refused). `top_k` and a thinking budget have no Converse field: they go in
//!   `additionalModelRequestFields` with Anthropic's spellings (`top_k`, `thinking`), the ones
//!   Claude on Bedrock reads; a model that takes neither answers a validation error.
//! - **Structured output** is `outputConfig.textFormat` (`json_schema`, the schema as JSON
//!   text); a JSON object without schema is the schema `{"type": "object"}`.
//! - **`tool_choice: none`** has no Converse counterpart: the tools are left out, so the model
//!   cannot call one. Bedrock requires `toolConfig` once the conversation holds tool calls or
//!   results, though: then the tools go without a `toolChoice` and the model decides (a
//!   documented exception).
//! - **Images** go as bytes only (`png`, `jpeg`, `gif`, `webp`): a `data:` URL is decoded, any
//!   other URL refused (Bedrock fetches no URLs). Tool results carry text and images; a failed
//!   one says `status: "error"` (success, the default, is left out: not every model takes
//!   `status`).
//! - **Refused:** `seed`, `presence_penalty`, `frequency_penalty`, `user`,
//!   `parallel_tool_calls: false`, `reasoning_effort` (model-specific on Bedrock).

use std::borrow::Cow;
use std::fmt::Write as _;

use serde_json::{json, Map, Value};

use super::ir::{Breakpoint, OutputFormat, PortableCache, Reasoning, Request, Tool, ToolChoice};
use super::json::unsupported;
use super::TranslateError;

pub(crate) mod answer;
mod messages;

pub use answer::decode_response;

/// The model id as one path segment, escaped as botocore escapes it: every byte but the
/// unreserved `A-Za-z0-9-._~` becomes `%XX` (uppercase), so `:` is `%3A` and the `/` of an
/// ARN `%2F`.
pub fn escape_model_id(model: &str) -> String {
    let mut out = String::with_capacity(model.len());
    for b in model.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Encodes a request for a Converse provider (the model goes in the path, not the body).
///
/// # Errors
/// A parameter Converse cannot express (see the module notes), or a value outside its range.
pub fn encode_request(req: &Request) -> Result<Vec<u8>, TranslateError> {
    refuse_unsupported(req)?;
    let mut out = Map::new();
    out.insert("messages".into(), Value::Array(messages::encode(&req.messages)?));
    let mut system = Vec::new();
    for (i, t) in req.system.iter().enumerate() {
        system.push(json!({"text": t.text}));
        if let Some(cache) = &t.cache {
            system.push(cache_point(cache, &format!("system[{i}]"))?);
        }
    }
    if !system.is_empty() {
        out.insert("system".into(), Value::Array(system));
    }
    if let Some(config) = tool_config(req)? {
        out.insert("toolConfig".into(), config);
    }
    let inference = inference_config(req)?;
    if !inference.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(inference));
    }
    let additional = additional_fields(req);
    if !additional.is_empty() {
        out.insert("additionalModelRequestFields".into(), Value::Object(additional));
    }
    if let Some(output) = &req.output {
        out.insert("outputConfig".into(), output_config(output));
    }
    if let Some(cache) = &req.cache {
        place_cache_points(cache, &mut out);
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| TranslateError::Json(e.to_string()))
}

fn refuse_unsupported(req: &Request) -> Result<(), TranslateError> {
    for (set, param) in [
        (req.seed.is_some(), "seed"),
        (req.presence_penalty.is_some(), "presence_penalty"),
        (req.frequency_penalty.is_some(), "frequency_penalty"),
        (req.user.is_some(), "user"),
        (req.parallel_tool_calls == Some(false), "parallel_tool_calls"),
        (matches!(req.reasoning, Some(Reasoning::Effort(_))), "reasoning_effort"),
    ] {
        if set {
            return Err(unsupported(param));
        }
    }
    Ok(())
}

/// `inferenceConfig`: Converse takes temperature and top-p from 0 to 1 only.
fn inference_config(req: &Request) -> Result<Map<String, Value>, TranslateError> {
    for (value, param) in [(req.temperature, "temperature"), (req.top_p, "top_p")] {
        if value.is_some_and(|v| !(0.0..=1.0).contains(&v)) {
            let message = "a number from 0 to 1 (the bedrock API's range)".to_string();
            return Err(TranslateError::Invalid { param: param.into(), message: format!("expected {message}") });
        }
    }
    let fields = [
        ("maxTokens", req.max_tokens.map(Value::from)),
        ("temperature", req.temperature.map(Value::from)),
        ("topP", req.top_p.map(Value::from)),
        ("stopSequences", (!req.stop.is_empty()).then(|| json!(req.stop))),
    ];
    Ok(fields.into_iter().filter_map(|(k, v)| Some((k.to_string(), v?))).collect())
}

/// What only the model reads (`additionalModelRequestFields`), in Anthropic's spellings.
fn additional_fields(req: &Request) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(k) = req.top_k {
        out.insert("top_k".into(), json!(k));
    }
    if let Some(Reasoning::Budget(n)) = req.reasoning {
        out.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": n}));
    }
    out
}

/// `outputConfig.textFormat`: the schema travels as JSON text.
fn output_config(output: &OutputFormat) -> Value {
    let definition = match output {
        OutputFormat::JsonObject => json!({"schema": json!({"type": "object"}).to_string()}),
        OutputFormat::JsonSchema { name, schema, .. } => json!({"schema": schema.to_string(), "name": name}),
    };
    json!({"textFormat": {"type": "json_schema", "structure": {"jsonSchema": definition}}})
}

/// `toolConfig`, or none (no tools, or `none` with no tool blocks to account for).
fn tool_config(req: &Request) -> Result<Option<Value>, TranslateError> {
    if req.tools.is_empty() {
        return Ok(None);
    }
    let choice = match &req.tool_choice {
        None | Some(ToolChoice::None) => None,
        Some(ToolChoice::Auto) => Some(json!({"auto": {}})),
        Some(ToolChoice::Required) => Some(json!({"any": {}})),
        Some(ToolChoice::Named(name)) => Some(json!({"tool": {"name": name}})),
    };
    if req.tool_choice == Some(ToolChoice::None) && !messages::has_tool_blocks(&req.messages) {
        return Ok(None);
    }
    let mut tools = Vec::new();
    for (i, t) in req.tools.iter().enumerate() {
        tools.push(tool_spec(t, &format!("tools[{i}]"))?);
        if let Some(cache) = &t.cache {
            tools.push(cache_point(cache, &format!("tools[{i}]"))?);
        }
    }
    let mut config = Map::new();
    config.insert("tools".into(), Value::Array(tools));
    if let Some(choice) = choice {
        config.insert("toolChoice".into(), choice);
    }
    Ok(Some(Value::Object(config)))
}

fn tool_spec(t: &Tool, path: &str) -> Result<Value, TranslateError> {
    messages::check_tool_name(&t.name, &format!("{path}.name"))?;
    let mut spec = Map::new();
    spec.insert("name".into(), json!(t.name));
    if let Some(d) = t.description.as_ref().filter(|d| !d.is_empty()) {
        spec.insert("description".into(), json!(d));
    }
    spec.insert("inputSchema".into(), json!({"json": t.parameters}));
    Ok(json!({"toolSpec": spec}))
}

/// The `cachePoint` block for a breakpoint written as Anthropic's `cache_control`
/// (`{"type": "ephemeral", "ttl"?: "5m" | "1h"}`) on the block at `path`.
pub(crate) fn cache_point(cache: &Value, path: &str) -> Result<Value, TranslateError> {
    let refused = || unsupported(&format!("{path}.cache_control"));
    if cache.get("type").and_then(Value::as_str) != Some("ephemeral") {
        return Err(refused());
    }
    match cache.get("ttl").and_then(Value::as_str) {
        None | Some("5m") => Ok(point(None)),
        Some("1h") => Ok(point(Some("1h"))),
        Some(_) => Err(refused()),
    }
}

/// A `cachePoint` block (`ttl` left out for the 5-minute default).
fn point(ttl: Option<&str>) -> Value {
    match ttl {
        Some(ttl) => json!({"cachePoint": {"type": "default", "ttl": ttl}}),
        None => json!({"cachePoint": {"type": "default"}}),
    }
}

/// The portable request's breakpoints: a `cachePoint` after the last block of each part
/// asked for, unless the client's own breakpoint is already there.
fn place_cache_points(cache: &PortableCache, out: &mut Map<String, Value>) {
    let mark = point((cache.ttl != "5m").then_some(cache.ttl.as_str()));
    for b in &cache.breakpoints {
        let list = match b {
            Breakpoint::System => out.get_mut("system"),
            Breakpoint::Tools => out.get_mut("toolConfig").and_then(|c| c.get_mut("tools")),
            Breakpoint::Messages => out
                .get_mut("messages")
                .and_then(Value::as_array_mut)
                .and_then(|m| m.last_mut())
                .and_then(|m| m.get_mut("content")),
        };
        if let Some(Value::Array(blocks)) = list {
            if blocks.last().is_some_and(|b| b.get("cachePoint").is_none()) {
                blocks.push(mark.clone());
            }
        }
    }
}

/// The id a call and its result carry at Converse: `id` itself when Converse accepts it, else
/// its accepted characters (others as `_`, at most 55) and a hash of the whole, so that two
/// different ids stay different.
pub fn tool_use_id(id: &str) -> Cow<'_, str> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
    if (1..=64).contains(&id.len()) && id.chars().all(allowed) {
        return Cow::Borrowed(id);
    }
    let mut out: String = id.chars().take(55).map(|c| if allowed(c) { c } else { '_' }).collect();
    // FNV-1a: deterministic, dependency-free, enough to tell ids of one conversation apart.
    let hash = id.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    let _ = write!(out, "_{hash:08x}");
    Cow::Owned(out)
}

#[cfg(test)]
mod tests;
