//! Decoding Gemini `generateContent` requests (from clients) into the neutral form, and the
//! parts reader answers share ([`super::answer`]). Each parameter is carried, accepted as a
//! default (`candidateCount: 1`, empty `safetySettings`, `thinkingBudget: -1`, ...), or
//! refused by name.
//!
//! Proto JSON lets clients spell field names in `snake_case` too (Google's own curl examples
//! do): every structural object level is read with its keys in lowerCamelCase ([`camel`]),
//! never the data inside it (arguments, schemas).

use serde_json::{json, Map, Value};

use super::super::ir::{Block, Image, Message, Request, Role, Text, Thinking, Tool, ToolCall, ToolChoice, ToolResult};
use super::super::json::{array, boolean, invalid, map, no_more, object, opt_string, string, unsupported};
use super::super::TranslateError;
use super::config::{self, json_schema};

/// Decodes a `generateContent` request body. Its `model` is empty (the model is in the URL)
/// unless the body names one (`models/` prefix removed).
///
/// # Errors
/// Malformed JSON, a parameter of the wrong shape, or one with no neutral counterpart
/// (`safetySettings`, `cachedContent`, non-function tools, ...).
pub fn decode_request(body: &[u8]) -> Result<Request, TranslateError> {
    let doc = camel(object(body)?);
    let mut req = Request::default();
    for (key, v) in doc {
        if v.is_null() {
            continue;
        }
        match key.as_str() {
            "model" => req.model = string(&key, v)?.trim_start_matches("models/").to_string(),
            "contents" => req.messages = contents(v)?,
            "systemInstruction" => req.system = system(v)?,
            "tools" => req.tools = tools(v)?,
            "toolConfig" => req.tool_choice = tool_config(v)?,
            "generationConfig" => config::generation(v, &mut req)?,
            // No settings: the provider's default filtering.
            "safetySettings" if v.as_array().is_some_and(Vec::is_empty) => {}
            _ => return Err(unsupported(&key)),
        }
    }
    Ok(req)
}

/// One object level with its `snake_case` keys in lowerCamelCase.
pub(crate) fn camel(m: Map<String, Value>) -> Map<String, Value> {
    m.into_iter()
        .map(|(k, v)| {
            if !k.contains('_') {
                return (k, v);
            }
            let mut out = String::with_capacity(k.len());
            let mut upper = false;
            for c in k.chars() {
                match c {
                    '_' => upper = !out.is_empty(),
                    c if upper => {
                        out.extend(c.to_uppercase());
                        upper = false;
                    }
                    c => out.push(c),
                }
            }
            (out, v)
        })
        .collect()
}

/// An object field read at `path`, its keys in lowerCamelCase.
fn level(path: &str, v: Value) -> Result<Map<String, Value>, TranslateError> {
    map(path, v).map(camel)
}

/// Function calls seen so far: ids for calls without one, and the calls results may answer.
pub(crate) struct Calls {
    prefix: String,
    count: usize,
    /// (name, id) of calls not answered yet, oldest first.
    open: Vec<(String, String)>,
}

impl Calls {
    /// Calls numbered `<prefix><n>` when they carry no id.
    pub(crate) fn new(prefix: String) -> Calls {
        Calls { prefix, count: 0, open: Vec::new() }
    }

    /// The id of the next call: its own, or the next number.
    pub(crate) fn call(&mut self, name: &str, id: Option<String>) -> String {
        let id = id.unwrap_or_else(|| format!("{}{}", self.prefix, self.count));
        self.count += 1;
        self.open.push((name.to_string(), id.clone()));
        id
    }

    /// The call a result answers: its own id, or the oldest open call of that name.
    fn answer(&mut self, name: &str, id: Option<String>) -> Option<String> {
        let at = match &id {
            Some(id) => self.open.iter().position(|(_, open)| open == id),
            None => self.open.iter().position(|(open, _)| open == name),
        };
        let answered = at.map(|k| self.open.remove(k).1);
        id.or(answered)
    }
}

fn contents(v: Value) -> Result<Vec<Message>, TranslateError> {
    let mut calls = Calls::new("call_".into());
    let mut out = Vec::new();
    for (i, c) in array("contents", v)?.into_iter().enumerate() {
        let path = format!("contents[{i}]");
        let mut c = level(&path, c)?;
        let role = match opt_string(&mut c, "role", &path)?.as_deref() {
            None | Some("user") => Role::User,
            Some("model") => Role::Assistant,
            Some(_) => return Err(invalid(&format!("{path}.role"), "user or model")),
        };
        let content = parts(&path, c.remove("parts").unwrap_or(Value::Null), &mut calls)?;
        no_more(&c, &path)?;
        out.push(Message { role, content });
    }
    Ok(out)
}

/// The `parts` of a content, in order.
pub(crate) fn parts(path: &str, v: Value, calls: &mut Calls) -> Result<Vec<Block>, TranslateError> {
    let mut out = Vec::new();
    for (j, p) in array(&format!("{path}.parts"), v)?.into_iter().enumerate() {
        part(&format!("{path}.parts[{j}]"), p, calls, &mut out)?;
    }
    Ok(out)
}

/// One part. A `thoughtSignature` on a part that is not a thought becomes a signature-only
/// thinking block just before it (the encoders put it back on the part that follows).
fn part(path: &str, v: Value, calls: &mut Calls, out: &mut Vec<Block>) -> Result<(), TranslateError> {
    let mut p = level(path, v)?;
    let signature = opt_string(&mut p, "thoughtSignature", path)?;
    let thought = match p.remove("thought") {
        None | Some(Value::Null) => false,
        Some(v) => boolean(&format!("{path}.thought"), &v)?,
    };
    if thought {
        let text = opt_string(&mut p, "text", path)?.unwrap_or_default();
        no_more(&p, path)?;
        // Streams split one thought over several parts, its signature on the last.
        match out.last_mut() {
            Some(Block::Thinking(open)) if open.signature.is_none() && !open.text.is_empty() => {
                open.text.push_str(&text);
                open.signature = signature;
            }
            _ => out.push(Block::Thinking(Thinking { text, signature })),
        }
        return Ok(());
    }
    if let Some(sig) = signature {
        out.push(Block::Thinking(Thinking { text: String::new(), signature: Some(sig) }));
    }
    let block = if let Some(text) = opt_string(&mut p, "text", path)? {
        Block::Text(Text { text, cache: None })
    } else if let Some(data) = p.remove("inlineData") {
        Block::Image(inline_image(&format!("{path}.inlineData"), data)?)
    } else if let Some(call) = p.remove("functionCall") {
        Block::ToolCall(function_call(&format!("{path}.functionCall"), call, calls)?)
    } else if let Some(result) = p.remove("functionResponse") {
        Block::ToolResult(function_response(&format!("{path}.functionResponse"), result, calls)?)
    } else {
        // `fileData`, `executableCode`, ... (or nothing at all).
        no_more(&p, path)?;
        return Err(invalid(path, "text, inlineData, functionCall or functionResponse"));
    };
    no_more(&p, path)?;
    out.push(block);
    Ok(())
}

/// Inline bytes; only images have a neutral counterpart.
fn inline_image(path: &str, v: Value) -> Result<Image, TranslateError> {
    let mut d = level(path, v)?;
    let media_type = string(&format!("{path}.mimeType"), d.remove("mimeType").unwrap_or(Value::Null))?;
    if !media_type.starts_with("image/") {
        return Err(unsupported(path));
    }
    let data = string(&format!("{path}.data"), d.remove("data").unwrap_or(Value::Null))?;
    no_more(&d, path)?;
    Ok(Image::Inline { media_type, data, cache: None })
}

pub(crate) fn function_call(path: &str, v: Value, calls: &mut Calls) -> Result<ToolCall, TranslateError> {
    let mut c = level(path, v)?;
    let name = string(&format!("{path}.name"), c.remove("name").unwrap_or(Value::Null))?;
    let id = opt_string(&mut c, "id", path)?;
    let arguments = match c.remove("args") {
        None | Some(Value::Null) => json!({}),
        Some(args @ Value::Object(_)) => args,
        Some(_) => return Err(invalid(&format!("{path}.args"), "an object")),
    };
    no_more(&c, path)?;
    Ok(ToolCall { id: calls.call(&name, id), name, arguments })
}

/// A result: `{output}`/`{result}` (or `{error}`, a failure) holding text is that text; any
/// other response object is its JSON.
fn function_response(path: &str, v: Value, calls: &mut Calls) -> Result<ToolResult, TranslateError> {
    let mut r = level(path, v)?;
    let name = string(&format!("{path}.name"), r.remove("name").unwrap_or(Value::Null))?;
    let given = opt_string(&mut r, "id", path)?;
    let response = r.remove("response").unwrap_or_else(|| json!({}));
    no_more(&r, path)?;
    let id =
        calls.answer(&name, given).ok_or_else(|| invalid(&format!("{path}.name"), "the name of an earlier call"))?;
    let (value, is_error) = match response {
        Value::Object(m) if m.len() == 1 => match m.into_iter().next() {
            Some((k, v)) if k == "output" || k == "result" => (v, false),
            Some((k, v)) if k == "error" => (v, true),
            other => (Value::Object(other.into_iter().collect()), false),
        },
        other => (other, false),
    };
    let text = match value {
        Value::String(s) => s,
        Value::Null => String::new(),
        v => v.to_string(),
    };
    let content = if text.is_empty() { Vec::new() } else { vec![Block::Text(Text { text, cache: None })] };
    Ok(ToolResult { id, content, is_error, cache: None })
}

/// `systemInstruction`: text parts only.
fn system(v: Value) -> Result<Vec<Text>, TranslateError> {
    let mut s = level("systemInstruction", v)?;
    s.remove("role");
    let mut out = Vec::new();
    let items = array("systemInstruction.parts", s.remove("parts").unwrap_or(Value::Null))?;
    for (j, p) in items.into_iter().enumerate() {
        let path = format!("systemInstruction.parts[{j}]");
        let mut p = level(&path, p)?;
        let text = opt_string(&mut p, "text", &path)?;
        no_more(&p, &path)?;
        out.push(Text { text: text.ok_or_else(|| invalid(&path, "a text part"))?, cache: None });
    }
    no_more(&s, "systemInstruction")?;
    Ok(out)
}

/// Function declarations; other tools (`googleSearch`, `codeExecution`, ...) run at Google
/// only and are refused by name.
fn tools(v: Value) -> Result<Vec<Tool>, TranslateError> {
    let mut out = Vec::new();
    for (i, t) in array("tools", v)?.into_iter().enumerate() {
        let path = format!("tools[{i}]");
        let mut t = level(&path, t)?;
        if let Some(decls) = t.remove("functionDeclarations").filter(|d| !d.is_null()) {
            for (j, d) in array(&format!("{path}.functionDeclarations"), decls)?.into_iter().enumerate() {
                out.push(declaration(&format!("{path}.functionDeclarations[{j}]"), d)?);
            }
        }
        no_more(&t, &path)?;
    }
    Ok(out)
}

fn declaration(path: &str, v: Value) -> Result<Tool, TranslateError> {
    let mut d = level(path, v)?;
    let name = string(&format!("{path}.name"), d.remove("name").unwrap_or(Value::Null))?;
    let description = opt_string(&mut d, "description", path)?;
    let json = d.remove("parametersJsonSchema").filter(|s| !s.is_null());
    let openapi = d.remove("parameters").filter(|s| !s.is_null());
    let parameters = match (json, openapi) {
        (Some(schema), None) => schema,
        (None, Some(schema)) => json_schema(schema),
        (None, None) => json!({"type": "object", "properties": {}}),
        (Some(_), Some(_)) => return Err(invalid(&format!("{path}.parameters"), "parameters or parametersJsonSchema")),
    };
    no_more(&d, path)?;
    Ok(Tool { name, description, parameters, cache: None })
}

fn tool_config(v: Value) -> Result<Option<ToolChoice>, TranslateError> {
    let mut t = level("toolConfig", v)?;
    let path = "toolConfig.functionCallingConfig";
    let choice = match t.remove("functionCallingConfig").filter(|f| !f.is_null()) {
        None => None,
        Some(f) => function_calling(path, level(path, f)?)?,
    };
    no_more(&t, "toolConfig")?;
    Ok(choice)
}

/// `mode` with `allowedFunctionNames`: one name under `ANY` is a named choice; a wider subset,
/// or `VALIDATED`, has no neutral counterpart.
fn function_calling(path: &str, mut f: Map<String, Value>) -> Result<Option<ToolChoice>, TranslateError> {
    let mode = opt_string(&mut f, "mode", path)?.map(|m| m.to_ascii_uppercase());
    let names_path = format!("{path}.allowedFunctionNames");
    let names: Vec<String> = match f.remove("allowedFunctionNames") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => array(&names_path, v)?
            .into_iter()
            .enumerate()
            .map(|(k, n)| string(&format!("{names_path}[{k}]"), n))
            .collect::<Result<_, _>>()?,
    };
    no_more(&f, path)?;
    let choice = match (mode.as_deref(), names.as_slice()) {
        (None | Some("MODE_UNSPECIFIED"), []) => None,
        (Some("AUTO"), []) => Some(ToolChoice::Auto),
        (Some("NONE"), []) => Some(ToolChoice::None),
        (Some("ANY"), []) => Some(ToolChoice::Required),
        (Some("ANY"), [one]) => Some(ToolChoice::Named(one.clone())),
        (Some("VALIDATED"), _) => return Err(unsupported(&format!("{path}.mode"))),
        (None | Some("MODE_UNSPECIFIED" | "AUTO" | "NONE" | "ANY"), _) => return Err(unsupported(&names_path)),
        (Some(_), _) => return Err(invalid(&format!("{path}.mode"), "AUTO, ANY, NONE or VALIDATED")),
    };
    Ok(choice)
}
