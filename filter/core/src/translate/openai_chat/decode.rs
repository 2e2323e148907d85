//! Decoding an OpenAI Chat Completions request into the neutral form. Every parameter is
//! either carried, or accepted because it asks for the default (`n: 1`, `logprobs: false`,
//! `store: false`, ...), or refused by name: a translated request never silently loses one.

use serde_json::{Map, Value};

use super::super::ir::{
    Block, Breakpoint, Image, Message, OutputFormat, PortableCache, Reasoning, Request, Role, Text, Tool, ToolCall,
    ToolChoice, ToolResult,
};
use super::super::json::{array, boolean, data_url, invalid, map, no_more, number, object, string, uint, unsupported};
use super::super::TranslateError;

/// Decodes a chat completions request body.
///
/// # Errors
/// Malformed JSON, a parameter of the wrong shape, or one with no neutral counterpart.
pub fn decode_request(body: &[u8]) -> Result<Request, TranslateError> {
    let doc = object(body)?;
    let mut req = Request::default();
    for (key, v) in doc {
        if v.is_null() {
            continue;
        }
        top_level(&key, v, &mut req)?;
    }
    Ok(req)
}

fn top_level(key: &str, v: Value, req: &mut Request) -> Result<(), TranslateError> {
    match key {
        "model" => req.model = string(key, v)?,
        "messages" => messages(v, req)?,
        "tools" => req.tools = array(key, v)?.into_iter().enumerate().map(tool).collect::<Result<_, _>>()?,
        "tool_choice" => req.tool_choice = Some(tool_choice(v)?),
        "parallel_tool_calls" => req.parallel_tool_calls = Some(boolean(key, &v)?),
        "max_tokens" | "max_completion_tokens" => req.max_tokens = Some(uint(key, &v)?),
        "temperature" => req.temperature = Some(number(key, &v)?),
        "top_p" => req.top_p = Some(number(key, &v)?),
        "stop" => req.stop = stop(v)?,
        "stream" => req.stream = boolean(key, &v)?,
        // The gateway asks upstreams for usage itself; the client's wish shapes its stream.
        "stream_options" => req.stream_usage = v["include_usage"] == true,
        "response_format" => req.output = response_format(v)?,
        "seed" => req.seed = Some(v.as_i64().ok_or_else(|| invalid(key, "an integer"))?),
        "presence_penalty" => req.presence_penalty = Some(number(key, &v)?),
        "frequency_penalty" => req.frequency_penalty = Some(number(key, &v)?),
        "user" => req.user = Some(string(key, v)?),
        "reasoning_effort" => req.reasoning = Some(Reasoning::Effort(string(key, v)?)),
        "cache_control" => req.cache = portable_cache(v)?,
        // Defaults, accepted as such.
        "n" if v == 1 => {}
        "logprobs" | "store" if v == false => {}
        "service_tier" if v == "auto" || v == "default" => {}
        "modalities" if v == serde_json::json!(["text"]) => {}
        _ => return Err(unsupported(key)),
    }
    Ok(())
}

fn stop(v: Value) -> Result<Vec<String>, TranslateError> {
    match v {
        Value::String(s) => Ok(vec![s]),
        v => array("stop", v)?.into_iter().enumerate().map(|(i, s)| string(&format!("stop[{i}]"), s)).collect(),
    }
}

fn messages(v: Value, req: &mut Request) -> Result<(), TranslateError> {
    for (i, m) in array("messages", v)?.into_iter().enumerate() {
        let path = format!("messages[{i}]");
        let mut m = map(&path, m)?;
        let role = string(&format!("{path}.role"), m.remove("role").unwrap_or(Value::Null))?;
        let content = m.remove("content").unwrap_or(Value::Null);
        match role.as_str() {
            "system" | "developer" => req.system.extend(texts(&path, content)?),
            "user" => req.messages.push(Message { role: Role::User, content: user_content(&path, content)? }),
            "assistant" => req.messages.push(assistant(&path, content, &mut m)?),
            "tool" => push_tool_result(req, tool_result(&path, content, &mut m)?),
            _ => return Err(invalid(&format!("{path}.role"), "system, developer, user, assistant or tool")),
        }
        no_more(&m, &path)?;
    }
    Ok(())
}

/// Tool results of one turn go into one user message (the neutral form, like Anthropic, has
/// no tool role).
fn push_tool_result(req: &mut Request, result: ToolResult) {
    let block = Block::ToolResult(result);
    match req.messages.last_mut() {
        Some(m) if m.role == Role::User && m.content.iter().all(|b| matches!(b, Block::ToolResult(_))) => {
            m.content.push(block);
        }
        _ => req.messages.push(Message { role: Role::User, content: vec![block] }),
    }
}

/// Text-only content: a string or text parts.
fn texts(path: &str, content: Value) -> Result<Vec<Text>, TranslateError> {
    user_content(path, content)?
        .into_iter()
        .map(|b| match b {
            Block::Text(t) => Ok(t),
            _ => Err(unsupported(&format!("{path}.content"))),
        })
        .collect()
}

fn user_content(path: &str, content: Value) -> Result<Vec<Block>, TranslateError> {
    match content {
        Value::String(text) => Ok(vec![Block::Text(Text { text, cache: None })]),
        Value::Null => Ok(Vec::new()),
        v => array(&format!("{path}.content"), v)?
            .into_iter()
            .enumerate()
            .map(|(j, part)| content_part(&format!("{path}.content[{j}]"), part))
            .collect(),
    }
}

fn content_part(path: &str, part: Value) -> Result<Block, TranslateError> {
    let mut part = map(path, part)?;
    let kind = string(&format!("{path}.type"), part.remove("type").unwrap_or(Value::Null))?;
    let block = match kind.as_str() {
        "text" | "refusal" => {
            let text = string(&format!("{path}.{kind}"), part.remove(&kind).unwrap_or(Value::Null))?;
            Block::Text(Text { text, cache: None })
        }
        "image_url" => {
            let mut image = map(&format!("{path}.image_url"), part.remove("image_url").unwrap_or(Value::Null))?;
            let url = string(&format!("{path}.image_url.url"), image.remove("url").unwrap_or(Value::Null))?;
            // `detail` is a hint for OpenAI's own resizing; no other provider has it.
            image.remove("detail");
            no_more(&image, &format!("{path}.image_url"))?;
            Block::Image(image_from_url(url))
        }
        other => return Err(unsupported(&format!("{path}.{other}"))),
    };
    no_more(&part, path)?;
    Ok(block)
}

/// A `data:` URL becomes inline bytes; anything else stays a URL.
pub(crate) fn image_from_url(url: String) -> Image {
    match data_url(&url) {
        Some((media, data)) => Image::Inline { media_type: media.to_string(), data: data.to_string(), cache: None },
        None => Image::Url { url, cache: None },
    }
}

fn assistant(path: &str, content: Value, m: &mut Map<String, Value>) -> Result<Message, TranslateError> {
    let mut blocks = user_content(path, content)?;
    if blocks.iter().any(|b| matches!(b, Block::Image(_))) {
        return Err(invalid(&format!("{path}.content"), "text (assistant messages carry no images)"));
    }
    if let Some(calls) = m.remove("tool_calls").filter(|v| !v.is_null()) {
        for (k, call) in array(&format!("{path}.tool_calls"), calls)?.into_iter().enumerate() {
            blocks.push(Block::ToolCall(tool_call(&format!("{path}.tool_calls[{k}]"), call)?));
        }
    }
    // An assistant's earlier refusal is text the model said.
    if let Some(refusal) = m.remove("refusal").filter(|v| !v.is_null()) {
        blocks.push(Block::Text(Text { text: string(&format!("{path}.refusal"), refusal)?, cache: None }));
    }
    Ok(Message { role: Role::Assistant, content: blocks })
}

/// `{id, type: "function", function: {name, arguments}}`; arguments must be a JSON object
/// in a string (the other dialects carry them parsed).
pub(crate) fn tool_call(path: &str, call: Value) -> Result<ToolCall, TranslateError> {
    let mut call = map(path, call)?;
    let id = string(&format!("{path}.id"), call.remove("id").unwrap_or(Value::Null))?;
    call.remove("type");
    let mut f = map(&format!("{path}.function"), call.remove("function").unwrap_or(Value::Null))?;
    let name = string(&format!("{path}.function.name"), f.remove("name").unwrap_or(Value::Null))?;
    let text = string(&format!("{path}.function.arguments"), f.remove("arguments").unwrap_or(Value::Null))?;
    let arguments = match serde_json::from_str::<Value>(if text.trim().is_empty() { "{}" } else { &text }) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Err(invalid(&format!("{path}.function.arguments"), "a JSON object in a string")),
    };
    no_more(&f, &format!("{path}.function"))?;
    no_more(&call, path)?;
    Ok(ToolCall { id, name, arguments })
}

fn tool_result(path: &str, content: Value, m: &mut Map<String, Value>) -> Result<ToolResult, TranslateError> {
    let id = string(&format!("{path}.tool_call_id"), m.remove("tool_call_id").unwrap_or(Value::Null))?;
    let content = texts(path, content)?.into_iter().map(Block::Text).collect();
    Ok(ToolResult { id, content, is_error: false, cache: None })
}

fn tool((i, t): (usize, Value)) -> Result<Tool, TranslateError> {
    let path = format!("tools[{i}]");
    let mut t = map(&path, t)?;
    if t.remove("type").is_some_and(|k| k != "function") {
        return Err(unsupported(&format!("{path}.type")));
    }
    let mut f = map(&format!("{path}.function"), t.remove("function").unwrap_or(Value::Null))?;
    let name = string(&format!("{path}.function.name"), f.remove("name").unwrap_or(Value::Null))?;
    let description = match f.remove("description") {
        None | Some(Value::Null) => None,
        Some(d) => Some(string(&format!("{path}.function.description"), d)?),
    };
    let parameters = f.remove("parameters").unwrap_or_else(|| serde_json::json!({"type": "object", "properties": {}}));
    // `strict` asks OpenAI to enforce the schema exactly; other providers validate loosely, so
    // only `false` (the default) translates faithfully.
    if f.remove("strict").is_some_and(|s| s == true) {
        return Err(unsupported(&format!("{path}.function.strict")));
    }
    no_more(&f, &format!("{path}.function"))?;
    no_more(&t, &path)?;
    Ok(Tool { name, description, parameters, cache: None })
}

fn tool_choice(v: Value) -> Result<ToolChoice, TranslateError> {
    match v {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            _ => Err(invalid("tool_choice", "auto, none, required or a function")),
        },
        v => {
            let name =
                v["function"]["name"].as_str().ok_or_else(|| invalid("tool_choice", "{type, function: {name}}"))?;
            Ok(ToolChoice::Named(name.to_string()))
        }
    }
}

fn response_format(v: Value) -> Result<Option<OutputFormat>, TranslateError> {
    let mut f = map("response_format", v)?;
    let kind = string("response_format.type", f.remove("type").unwrap_or(Value::Null))?;
    let format = match kind.as_str() {
        "text" => None,
        "json_object" => Some(OutputFormat::JsonObject),
        "json_schema" => {
            let mut spec = map("response_format.json_schema", f.remove("json_schema").unwrap_or(Value::Null))?;
            let name = string("response_format.json_schema.name", spec.remove("name").unwrap_or(Value::Null))?;
            let schema = spec.remove("schema").unwrap_or_else(|| serde_json::json!({}));
            let strict = spec.remove("strict").and_then(|s| s.as_bool());
            spec.remove("description");
            no_more(&spec, "response_format.json_schema")?;
            Some(OutputFormat::JsonSchema { name, schema, strict })
        }
        _ => return Err(invalid("response_format.type", "text, json_object or json_schema")),
    };
    no_more(&f, "response_format")?;
    Ok(format)
}

/// The portable prompt-cache object; `enabled: false` asks for nothing.
fn portable_cache(v: Value) -> Result<Option<PortableCache>, TranslateError> {
    let mut c = map("cache_control", v)?;
    let enabled = match c.remove("enabled") {
        None => true,
        Some(e) => boolean("cache_control.enabled", &e)?,
    };
    let ttl = match c.remove("ttl") {
        None | Some(Value::Null) => "5m".to_string(),
        Some(t) => string("cache_control.ttl", t)?,
    };
    if ttl != "5m" && ttl != "1h" {
        return Err(invalid("cache_control.ttl", "5m or 1h"));
    }
    let mut breakpoints = Vec::new();
    for (i, b) in array("cache_control.breakpoints", c.remove("breakpoints").unwrap_or(Value::Array(Vec::new())))?
        .into_iter()
        .enumerate()
    {
        breakpoints.push(match b.as_str() {
            Some("system") => Breakpoint::System,
            Some("tools") => Breakpoint::Tools,
            Some("messages") => Breakpoint::Messages,
            _ => return Err(invalid(&format!("cache_control.breakpoints[{i}]"), "system, tools or messages")),
        });
    }
    if breakpoints.is_empty() {
        breakpoints.push(Breakpoint::System);
    }
    no_more(&c, "cache_control")?;
    Ok(enabled.then_some(PortableCache { ttl, breakpoints }))
}
