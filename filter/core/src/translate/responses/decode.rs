//! Decoding a Responses request into the neutral form (see the parent module for what is
//! carried, accepted and refused). `instructions` and `system`/`developer` messages become
//! the system prompt; the `input` items become turns: a model turn gathers the assistant
//! messages, reasoning and function calls that follow one another, and function call outputs
//! gather in a user turn of their own (where chat completions and Anthropic expect them).

use serde_json::{json, Map, Value};

use super::super::ir::{
    Block, Image, Message, OutputFormat, Reasoning, Request, Role, Text, Thinking, Tool, ToolCall, ToolChoice,
    ToolResult,
};
use super::super::json::{
    array, boolean, data_url, invalid, map, no_more, number, object, opt_string, string, uint, unsupported,
};
use super::super::TranslateError;

/// Decodes a Responses request body.
///
/// # Errors
/// Malformed JSON, a parameter of the wrong shape, or one with no neutral counterpart.
pub fn decode_request(body: &[u8]) -> Result<Request, TranslateError> {
    decode(body).map(|d| d.0)
}

/// The request and, for each block of each neutral message, the path of the client's input
/// it came from (`origins[i][j]` for `messages[i].content[j]`).
pub(super) fn decode(body: &[u8]) -> Result<(Request, Vec<Vec<String>>), TranslateError> {
    let mut d = Decoded::default();
    let mut instructions = None;
    for (key, v) in object(body)? {
        if v.is_null() {
            continue;
        }
        match key.as_str() {
            "instructions" => instructions = Some(string(&key, v)?),
            "input" => d.input(v)?,
            _ => top_level(&key, v, &mut d.req)?,
        }
    }
    if let Some(text) = instructions {
        d.req.system.insert(0, Text { text, cache: None });
    }
    Ok((d.req, d.origins))
}

fn top_level(key: &str, v: Value, req: &mut Request) -> Result<(), TranslateError> {
    match key {
        "model" => req.model = string(key, v)?,
        "tools" => req.tools = array(key, v)?.into_iter().enumerate().map(tool).collect::<Result<_, _>>()?,
        "tool_choice" => req.tool_choice = Some(tool_choice(v)?),
        "parallel_tool_calls" => req.parallel_tool_calls = Some(boolean(key, &v)?),
        "max_output_tokens" => req.max_tokens = Some(uint(key, &v)?),
        "temperature" => req.temperature = Some(number(key, &v)?),
        "top_p" => req.top_p = Some(number(key, &v)?),
        "stream" => req.stream = boolean(key, &v)?,
        "text" => text_config(v, req)?,
        "reasoning" => req.reasoning = reasoning(v)?,
        "user" => req.user = Some(string(key, v)?),
        // The newer name of the end-user id; `user` wins when both are given.
        "safety_identifier" => {
            let id = string(key, v)?;
            req.user.get_or_insert(id);
        }
        _ => accept(key, v)?,
    }
    Ok(())
}

/// Parameters accepted but not carried: without effect on the answer (see the module doc), or
/// asking for the default.
fn accept(key: &str, v: Value) -> Result<(), TranslateError> {
    match key {
        "metadata" => map(key, v).map(|_| ()),
        "store" => boolean(key, &v).map(|_| ()),
        "prompt_cache_key" | "prompt_cache_retention" => string(key, v).map(|_| ()),
        "max_tool_calls" => uint(key, &v).map(|_| ()),
        "stream_options" => {
            let mut o = map(key, v)?;
            if let Some(b) = o.remove("include_obfuscation") {
                boolean("stream_options.include_obfuscation", &b)?;
            }
            no_more(&o, key)
        }
        "background" if v == false => Ok(()),
        "truncation" if v == "disabled" => Ok(()),
        "include" if v == json!([]) => Ok(()),
        "service_tier" if v == "auto" || v == "default" => Ok(()),
        "top_logprobs" if v == 0 => Ok(()),
        _ => Err(unsupported(key)),
    }
}

/// The conversation being decoded.
#[derive(Debug, Default)]
struct Decoded {
    req: Request,
    /// Where each block came from (see [`decode`]).
    origins: Vec<Vec<String>>,
}

impl Decoded {
    /// Appends a block: to the last turn when `join` and the roles match, else as a new turn.
    fn push(&mut self, role: Role, block: Block, origin: String, join: bool) {
        match (self.req.messages.last_mut(), self.origins.last_mut()) {
            (Some(m), Some(o)) if join && m.role == role => {
                m.content.push(block);
                o.push(origin);
            }
            _ => {
                self.req.messages.push(Message { role, content: vec![block] });
                self.origins.push(vec![origin]);
            }
        }
    }

    /// Whether the last turn holds tool results only (more results join it).
    fn in_results(&self) -> bool {
        self.req
            .messages
            .last()
            .is_some_and(|m| m.role == Role::User && m.content.iter().all(|b| matches!(b, Block::ToolResult(_))))
    }

    fn input(&mut self, v: Value) -> Result<(), TranslateError> {
        if let Value::String(text) = v {
            self.push(Role::User, Block::Text(Text { text, cache: None }), "input".into(), false);
            return Ok(());
        }
        for (i, item) in array("input", v)?.into_iter().enumerate() {
            self.item(&format!("input[{i}]"), item)?;
        }
        Ok(())
    }

    fn item(&mut self, path: &str, item: Value) -> Result<(), TranslateError> {
        let mut item = map(path, item)?;
        let kind = match item.remove("type") {
            None | Some(Value::Null) => "message".to_string(),
            Some(t) => string(&format!("{path}.type"), t)?,
        };
        // Ids and statuses of earlier items are the API's bookkeeping, not content.
        item.remove("id");
        item.remove("status");
        match kind.as_str() {
            "message" => self.message(path, &mut item)?,
            "function_call" => {
                let call = function_call(path, &mut item)?;
                self.push(Role::Assistant, Block::ToolCall(call), path.to_string(), true);
            }
            "function_call_output" => {
                let result = function_call_output(path, &mut item)?;
                let join = self.in_results();
                self.push(Role::User, Block::ToolResult(result), format!("{path}.output"), join);
            }
            "reasoning" => {
                if let Some(thinking) = reasoning_item(path, &mut item)? {
                    self.push(Role::Assistant, Block::Thinking(thinking), path.to_string(), true);
                }
            }
            _ => return Err(unsupported(&format!("{path}.type"))),
        }
        no_more(&item, path)
    }

    fn message(&mut self, path: &str, m: &mut Map<String, Value>) -> Result<(), TranslateError> {
        let role = string(&format!("{path}.role"), m.remove("role").unwrap_or(Value::Null))?;
        let content = m.remove("content").unwrap_or(Value::Null);
        match role.as_str() {
            "system" | "developer" => {
                for (block, origin) in content_blocks(path, content)? {
                    match block {
                        Block::Text(t) => self.req.system.push(t),
                        _ => return Err(unsupported(&origin)),
                    }
                }
            }
            "user" => {
                for (k, (block, origin)) in content_blocks(path, content)?.into_iter().enumerate() {
                    self.push(Role::User, block, origin, k > 0);
                }
            }
            "assistant" => {
                // How OpenAI's own models labelled the turn; no other model has a use for it.
                m.remove("phase");
                for (block, origin) in content_blocks(path, content)? {
                    if matches!(block, Block::Image(_)) {
                        return Err(invalid(&origin, "text (assistant messages carry no images)"));
                    }
                    self.push(Role::Assistant, block, origin, true);
                }
            }
            _ => return Err(invalid(&format!("{path}.role"), "user, assistant, system or developer")),
        }
        Ok(())
    }
}

/// A message's content (a string or a list of parts), each block with its path.
fn content_blocks(path: &str, content: Value) -> Result<Vec<(Block, String)>, TranslateError> {
    let path = format!("{path}.content");
    if let Value::String(text) = content {
        return Ok(vec![(Block::Text(Text { text, cache: None }), path)]);
    }
    let mut out = Vec::new();
    for (j, part) in array(&path, content)?.into_iter().enumerate() {
        let at = format!("{path}[{j}]");
        out.push((content_part(&at, part)?, at));
    }
    Ok(out)
}

/// One content part: text of either side, a refusal (text the model said), or an image.
fn content_part(path: &str, part: Value) -> Result<Block, TranslateError> {
    let mut part = map(path, part)?;
    let kind = string(&format!("{path}.type"), part.remove("type").unwrap_or(Value::Null))?;
    let mut take = |key: &str| string(&format!("{path}.{key}"), part.remove(key).unwrap_or(Value::Null));
    let block = match kind.as_str() {
        "input_text" => Block::Text(Text { text: take("text")?, cache: None }),
        "output_text" => {
            let text = take("text")?;
            // Citations and log probabilities of an earlier answer: about it, not in it.
            part.remove("annotations");
            part.remove("logprobs");
            Block::Text(Text { text, cache: None })
        }
        "refusal" => Block::Text(Text { text: take("refusal")?, cache: None }),
        "input_image" => Block::Image(image(path, &mut part)?),
        other => return Err(unsupported(&format!("{path}.{other}"))),
    };
    no_more(&part, path)?;
    Ok(block)
}

/// `input_image`: a URL or a `data:` URL (a `file_id` needs OpenAI's file store).
fn image(path: &str, part: &mut Map<String, Value>) -> Result<Image, TranslateError> {
    // A hint for OpenAI's own resizing; no other provider has it.
    part.remove("detail");
    if part.remove("file_id").is_some_and(|f| !f.is_null()) {
        return Err(unsupported(&format!("{path}.file_id")));
    }
    let url = string(&format!("{path}.image_url"), part.remove("image_url").unwrap_or(Value::Null))?;
    Ok(match data_url(&url) {
        Some((media, data)) => Image::Inline { media_type: media.to_string(), data: data.to_string(), cache: None },
        None => Image::Url { url, cache: None },
    })
}

/// `{call_id, name, arguments}`; the arguments must be a JSON object in a string.
fn function_call(path: &str, item: &mut Map<String, Value>) -> Result<ToolCall, TranslateError> {
    let mut take = |key: &str| string(&format!("{path}.{key}"), item.remove(key).unwrap_or(Value::Null));
    let (id, name, text) = (take("call_id")?, take("name")?, take("arguments")?);
    let arguments = match serde_json::from_str::<Value>(if text.trim().is_empty() { "{}" } else { &text }) {
        Ok(v @ Value::Object(_)) => v,
        _ => return Err(invalid(&format!("{path}.arguments"), "a JSON object in a string")),
    };
    Ok(ToolCall { id, name, arguments })
}

/// `{call_id, output}`, the output a string or a list of content parts.
fn function_call_output(path: &str, item: &mut Map<String, Value>) -> Result<ToolResult, TranslateError> {
    let id = string(&format!("{path}.call_id"), item.remove("call_id").unwrap_or(Value::Null))?;
    let content = match item.remove("output").unwrap_or(Value::Null) {
        Value::String(text) => vec![Block::Text(Text { text, cache: None })],
        v => array(&format!("{path}.output"), v)?
            .into_iter()
            .enumerate()
            .map(|(k, part)| content_part(&format!("{path}.output[{k}]"), part))
            .collect::<Result<_, _>>()?,
    };
    Ok(ToolResult { id, content, is_error: false, cache: None })
}

/// A `reasoning` item: thinking when it has `encrypted_content` (the signature that lets the
/// provider check it), else nothing (see the module doc). Of a stored chain's reasoning, the
/// provider is sent only what its family signed (`stored::chain::fit` translates again).
fn reasoning_item(path: &str, item: &mut Map<String, Value>) -> Result<Option<Thinking>, TranslateError> {
    let mut texts = Vec::new();
    let summary = item.remove("summary").unwrap_or(Value::Array(Vec::new()));
    for (k, part) in array(&format!("{path}.summary"), summary)?.into_iter().enumerate() {
        let at = format!("{path}.summary[{k}]");
        let mut part = map(&at, part)?;
        if part.remove("type").is_some_and(|t| t != "summary_text") {
            return Err(invalid(&format!("{at}.type"), "summary_text"));
        }
        texts.push(string(&format!("{at}.text"), part.remove("text").unwrap_or(Value::Null))?);
        no_more(&part, &at)?;
    }
    // The raw reasoning of an earlier turn: shown, never sent back (the summary is the text).
    item.remove("content");
    let signature = opt_string(item, "encrypted_content", path)?;
    Ok(signature.map(|sig| Thinking { text: texts.join("\n\n"), signature: Some(sig) }))
}

fn tool((i, t): (usize, Value)) -> Result<Tool, TranslateError> {
    let path = format!("tools[{i}]");
    let mut t = map(&path, t)?;
    match t.remove("type") {
        Some(k) if k == "function" => {}
        // Built-in tools run at OpenAI only.
        Some(Value::String(_)) => return Err(unsupported(&format!("{path}.type"))),
        _ => return Err(invalid(&format!("{path}.type"), "function")),
    }
    let name = string(&format!("{path}.name"), t.remove("name").unwrap_or(Value::Null))?;
    let description = opt_string(&mut t, "description", &path)?;
    let parameters = match t.remove("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p) => p,
    };
    // Accepted whatever its value (see the module doc).
    if let Some(s) = t.remove("strict").filter(|s| !s.is_null()) {
        boolean(&format!("{path}.strict"), &s)?;
    }
    if t.get("defer_loading") == Some(&Value::Bool(false)) {
        t.remove("defer_loading");
    }
    no_more(&t, &path)?;
    Ok(Tool { name, description, parameters, cache: None })
}

fn tool_choice(v: Value) -> Result<ToolChoice, TranslateError> {
    if let Value::String(s) = v {
        return match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" => Ok(ToolChoice::Required),
            _ => Err(invalid("tool_choice", "auto, none, required or {type: function, name}")),
        };
    }
    let mut c = map("tool_choice", v)?;
    let kind = string("tool_choice.type", c.remove("type").unwrap_or(Value::Null))?;
    if kind != "function" {
        // Built-in tools and `allowed_tools` subsets.
        return Err(unsupported("tool_choice.type"));
    }
    let name = string("tool_choice.name", c.remove("name").unwrap_or(Value::Null))?;
    no_more(&c, "tool_choice")?;
    Ok(ToolChoice::Named(name))
}

fn text_config(v: Value, req: &mut Request) -> Result<(), TranslateError> {
    let mut t = map("text", v)?;
    if let Some(f) = t.remove("format").filter(|f| !f.is_null()) {
        req.output = text_format(f)?;
    }
    match t.remove("verbosity") {
        None | Some(Value::Null) => {}
        Some(v) if v == "medium" => {}
        Some(_) => return Err(unsupported("text.verbosity")),
    }
    no_more(&t, "text")
}

fn text_format(v: Value) -> Result<Option<OutputFormat>, TranslateError> {
    let mut f = map("text.format", v)?;
    let kind = string("text.format.type", f.remove("type").unwrap_or(Value::Null))?;
    let format = match kind.as_str() {
        "text" => None,
        "json_object" => Some(OutputFormat::JsonObject),
        "json_schema" => {
            let name = string("text.format.name", f.remove("name").unwrap_or(Value::Null))?;
            let schema = f.remove("schema").unwrap_or_else(|| json!({}));
            let strict = f.remove("strict").filter(|s| !s.is_null());
            let strict = strict.map(|s| boolean("text.format.strict", &s)).transpose()?;
            Some(OutputFormat::JsonSchema { name, schema, strict })
        }
        _ => return Err(invalid("text.format.type", "text, json_object or json_schema")),
    };
    no_more(&f, "text.format")?;
    Ok(format)
}

fn reasoning(v: Value) -> Result<Option<Reasoning>, TranslateError> {
    let mut r = map("reasoning", v)?;
    let effort = opt_string(&mut r, "effort", "reasoning")?;
    for key in ["summary", "generate_summary"] {
        match r.remove(key) {
            None | Some(Value::Null) => {}
            Some(s) if matches!(s.as_str(), Some("auto" | "concise" | "detailed")) => {}
            Some(_) => return Err(invalid(&format!("reasoning.{key}"), "auto, concise or detailed")),
        }
    }
    no_more(&r, "reasoning")?;
    Ok(effort.map(Reasoning::Effort))
}
