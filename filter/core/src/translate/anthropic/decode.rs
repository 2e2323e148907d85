//! Decoding Anthropic Messages requests (from clients) and answers (from providers) into the
//! neutral form. As for every dialect: each parameter is carried, accepted as a default, or
//! refused by name.

use serde_json::{Map, Value};

use super::super::ir::{
    Block, Finish, Image, Message, Reasoning, Request, Response, Role, Text, Thinking, Tool, ToolCall, ToolChoice,
    ToolResult, Usage,
};
use super::super::json::{array, boolean, invalid, map, no_more, number, object, string, uint, unsupported};
use super::super::TranslateError;
use super::OUTPUT_TOOL;

/// Decodes a Messages request body.
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
        match key.as_str() {
            "model" => req.model = string(&key, v)?,
            "max_tokens" => req.max_tokens = Some(uint(&key, &v)?),
            "system" => req.system = system(v)?,
            "messages" => req.messages = messages(v)?,
            "tools" => req.tools = array(&key, v)?.into_iter().enumerate().map(tool).collect::<Result<_, _>>()?,
            "tool_choice" => tool_choice(v, &mut req)?,
            "temperature" => req.temperature = Some(number(&key, &v)?),
            "top_p" => req.top_p = Some(number(&key, &v)?),
            "top_k" => req.top_k = Some(uint(&key, &v)?),
            "stop_sequences" => {
                let items = array(&key, v)?.into_iter().enumerate();
                req.stop = items.map(|(i, s)| string(&format!("stop_sequences[{i}]"), s)).collect::<Result<_, _>>()?;
            }
            "stream" => req.stream = boolean(&key, &v)?,
            "metadata" => {
                let mut m = map(&key, v)?;
                req.user = super::super::json::opt_string(&mut m, "user_id", "metadata")?;
                no_more(&m, "metadata")?;
            }
            "thinking" => req.reasoning = thinking(v)?,
            "service_tier" if v == "auto" => {}
            _ => return Err(unsupported(&key)),
        }
    }
    Ok(req)
}

fn thinking(v: Value) -> Result<Option<Reasoning>, TranslateError> {
    let mut t = map("thinking", v)?;
    let kind = string("thinking.type", t.remove("type").unwrap_or(Value::Null))?;
    let out = match kind.as_str() {
        "disabled" => None,
        "enabled" => {
            Some(Reasoning::Budget(uint("thinking.budget_tokens", t.get("budget_tokens").unwrap_or(&Value::Null))?))
        }
        _ => return Err(invalid("thinking.type", "enabled or disabled")),
    };
    t.remove("budget_tokens");
    no_more(&t, "thinking")?;
    Ok(out)
}

fn system(v: Value) -> Result<Vec<Text>, TranslateError> {
    match v {
        Value::String(text) => Ok(vec![Text { text, cache: None }]),
        v => array("system", v)?
            .into_iter()
            .enumerate()
            .map(|(i, b)| match block(&format!("system[{i}]"), b)? {
                Block::Text(t) => Ok(t),
                _ => Err(invalid(&format!("system[{i}]"), "a text block")),
            })
            .collect(),
    }
}

fn messages(v: Value) -> Result<Vec<Message>, TranslateError> {
    let mut out = Vec::new();
    for (i, m) in array("messages", v)?.into_iter().enumerate() {
        let path = format!("messages[{i}]");
        let mut m = map(&path, m)?;
        let role = match string(&format!("{path}.role"), m.remove("role").unwrap_or(Value::Null))?.as_str() {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            _ => return Err(invalid(&format!("{path}.role"), "user or assistant")),
        };
        let content = match m.remove("content").unwrap_or(Value::Null) {
            Value::String(text) => vec![Block::Text(Text { text, cache: None })],
            v => array(&format!("{path}.content"), v)?
                .into_iter()
                .enumerate()
                .map(|(j, b)| block(&format!("{path}.content[{j}]"), b))
                .collect::<Result<_, _>>()?,
        };
        no_more(&m, &path)?;
        out.push(Message { role, content });
    }
    Ok(out)
}

/// One content block; `cache_control` is kept on the blocks that carry it.
fn block(path: &str, b: Value) -> Result<Block, TranslateError> {
    let mut b = map(path, b)?;
    let kind = string(&format!("{path}.type"), b.remove("type").unwrap_or(Value::Null))?;
    let cache = b.remove("cache_control").filter(|c| !c.is_null());
    let mut take = |key: &str| string(&format!("{path}.{key}"), b.remove(key).unwrap_or(Value::Null));
    let out = match kind.as_str() {
        "text" => Block::Text(Text { text: take("text")?, cache }),
        "image" => Block::Image(image(path, b.remove("source").unwrap_or(Value::Null), cache)?),
        "tool_use" => {
            let (id, name) = (take("id")?, take("name")?);
            let arguments = b.remove("input").unwrap_or_else(|| serde_json::json!({}));
            Block::ToolCall(ToolCall { id, name, arguments })
        }
        "tool_result" => Block::ToolResult(tool_result(path, &mut b, cache)?),
        "thinking" => {
            let (text, signature) = (take("thinking")?, take("signature").ok());
            Block::Thinking(Thinking { text, signature })
        }
        other => return Err(unsupported(&format!("{path}.{other}"))),
    };
    if kind == "text" {
        // Citations only exist on Anthropic's side; a text block carries none into another dialect.
        b.remove("citations");
    }
    no_more(&b, path)?;
    Ok(out)
}

fn image(path: &str, source: Value, cache: Option<Value>) -> Result<Image, TranslateError> {
    let path = format!("{path}.source");
    let mut s = map(&path, source)?;
    let kind = string(&format!("{path}.type"), s.remove("type").unwrap_or(Value::Null))?;
    let mut take = |key: &str| string(&format!("{path}.{key}"), s.remove(key).unwrap_or(Value::Null));
    let image = match kind.as_str() {
        "base64" => Image::Inline { media_type: take("media_type")?, data: take("data")?, cache },
        "url" => Image::Url { url: take("url")?, cache },
        other => return Err(unsupported(&format!("{path}.{other}"))),
    };
    no_more(&s, &path)?;
    Ok(image)
}

fn tool_result(path: &str, b: &mut Map<String, Value>, cache: Option<Value>) -> Result<ToolResult, TranslateError> {
    let id = string(&format!("{path}.tool_use_id"), b.remove("tool_use_id").unwrap_or(Value::Null))?;
    let is_error = match b.remove("is_error") {
        None | Some(Value::Null) => false,
        Some(v) => boolean(&format!("{path}.is_error"), &v)?,
    };
    let content = match b.remove("content").unwrap_or(Value::Null) {
        Value::Null => Vec::new(),
        Value::String(text) => vec![Block::Text(Text { text, cache: None })],
        v => array(&format!("{path}.content"), v)?
            .into_iter()
            .enumerate()
            .map(|(k, item)| block(&format!("{path}.content[{k}]"), item))
            .collect::<Result<_, _>>()?,
    };
    Ok(ToolResult { id, content, is_error, cache })
}

fn tool((i, t): (usize, Value)) -> Result<Tool, TranslateError> {
    let path = format!("tools[{i}]");
    let mut t = map(&path, t)?;
    if t.get("type").is_some_and(|k| k != "custom") {
        // Server tools (web search, code execution, ...) run at Anthropic only.
        return Err(unsupported(&format!("{path}.type")));
    }
    t.remove("type");
    let name = string(&format!("{path}.name"), t.remove("name").unwrap_or(Value::Null))?;
    let description = match t.remove("description") {
        None | Some(Value::Null) => None,
        Some(d) => Some(string(&format!("{path}.description"), d)?),
    };
    let parameters = t.remove("input_schema").unwrap_or_else(|| serde_json::json!({"type": "object"}));
    let cache = t.remove("cache_control").filter(|c| !c.is_null());
    no_more(&t, &path)?;
    Ok(Tool { name, description, parameters, cache })
}

fn tool_choice(v: Value, req: &mut Request) -> Result<(), TranslateError> {
    let mut c = map("tool_choice", v)?;
    let kind = string("tool_choice.type", c.remove("type").unwrap_or(Value::Null))?;
    req.tool_choice = Some(match kind.as_str() {
        "auto" => ToolChoice::Auto,
        "none" => ToolChoice::None,
        "any" => ToolChoice::Required,
        "tool" => ToolChoice::Named(string("tool_choice.name", c.remove("name").unwrap_or(Value::Null))?),
        _ => return Err(invalid("tool_choice.type", "auto, any, tool or none")),
    });
    if let Some(v) = c.remove("disable_parallel_tool_use").filter(|v| !v.is_null()) {
        req.parallel_tool_calls = Some(!boolean("tool_choice.disable_parallel_tool_use", &v)?);
    }
    no_more(&c, "tool_choice")
}

/// Decodes a Messages answer from an Anthropic provider. With `structured`, a call of
/// [`OUTPUT_TOOL`] is the structured answer and becomes its JSON text.
///
/// # Errors
/// The body is not a Messages answer.
pub fn decode_response(body: &[u8], structured: bool) -> Result<Response, TranslateError> {
    let mut doc = object(body)?;
    let mut take = |key: &str| doc.remove(key).and_then(|v| v.as_str().map(str::to_string));
    let (id, model) = (take("id").unwrap_or_default(), take("model").unwrap_or_default());
    let stop = take("stop_reason");
    let sequence = take("stop_sequence");
    let mut content = Vec::new();
    for (i, b) in array("content", doc.remove("content").unwrap_or(Value::Null))?.into_iter().enumerate() {
        match block(&format!("content[{i}]"), b)? {
            Block::ToolCall(c) if structured && c.name == OUTPUT_TOOL => {
                content.push(Block::Text(Text { text: c.arguments.to_string(), cache: None }));
            }
            other => content.push(other),
        }
    }
    let finish = finish(stop.as_deref(), sequence, structured);
    let usage = doc.get("usage").map(usage).unwrap_or_default();
    Ok(Response { id, model, content, finish, usage })
}

/// The neutral finish of a `stop_reason`; `tool_use_is_answer` when the tool called was the
/// structured-output one (then the answer simply ended).
pub(crate) fn finish(reason: Option<&str>, sequence: Option<String>, tool_use_is_answer: bool) -> Finish {
    match reason {
        Some("max_tokens") => Finish::Length,
        Some("tool_use") if !tool_use_is_answer => Finish::ToolCalls,
        Some("stop_sequence") => Finish::StopSequence(sequence),
        Some("refusal") => Finish::ContentFilter,
        _ => Finish::Stop,
    }
}

/// Neutral usage from Anthropic's (whose `input_tokens` leaves out cache reads and writes).
pub(crate) fn usage(u: &Value) -> Usage {
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    let (cached, cache_write) = (n("cache_read_input_tokens"), n("cache_creation_input_tokens"));
    Usage { input: n("input_tokens") + cached + cache_write, output: n("output_tokens"), cached, cache_write }
}
