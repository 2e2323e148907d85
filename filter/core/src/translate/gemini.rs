//! Google Gemini `generateContent` ⇄ the neutral form: requests decoded from Gemini clients
//! and encoded for Gemini providers; answers decoded from Gemini and encoded for Gemini
//! clients (shapes of the public v1beta REST reference).
//!
//! Differences the codec bridges:
//! - **Model and streaming live in the URL** (`/v1beta/models/{model}:generateContent`, or
//!   `:streamGenerateContent?alt=sse`), not in the body: a decoded request has an empty
//!   `model` and `stream: false` until the router fills them from the path
//!   ([`Pair::request_for_model`](super::Pair::request_for_model)); an encoded one names
//!   neither ([`Outbound::upstream_path`](super::Outbound::upstream_path) builds the path).
//! - **Tool calls have no ids.** Results name the function instead: the encoder finds the name
//!   of the earlier call with the result's id. The decoder keeps a part's `id` when it has one
//!   and otherwise numbers calls (`call_<n>` in requests, `call_<responseId>_<n>` in answers);
//!   a `functionResponse` without `id` answers the oldest open call of that name.
//! - **Schemas.** Tool parameters and structured output are JSON Schema in the neutral form,
//!   sent as `parametersJsonSchema` and `responseJsonSchema` (the fields that take JSON Schema;
//!   `parameters`/`responseSchema` take Google's OpenAPI subset). The subset is accepted from
//!   clients and converted ([`decode_request`]). A schema's name (OpenAI's label) has no Gemini
//!   counterpart and is not sent.
//! - **Thinking.** `Reasoning::Budget(n)` is `thinkingBudget: n` with `includeThoughts` (an
//!   Anthropic client that enables thinking sees it); `Reasoning::Effort` is `thinkingLevel`
//!   (Gemini 3: `minimal`, `low`, `medium`, `high`; other efforts are refused). Thought parts
//!   are thinking blocks. A `thoughtSignature` on any other part travels as a signature-only
//!   thinking block just before it and goes back on that part; a model turn whose first
//!   function call has no signature gets Google's documented placeholder [`SKIP_SIGNATURE`]
//!   (Gemini 3 refuses unsigned calls in the current turn).
//! - **Usage.** `promptTokenCount` includes cached tokens as the neutral `input` does;
//!   neutral `output` is `candidatesTokenCount + thoughtsTokenCount` (reasoning included), so
//!   answers to Gemini clients report all of it as `candidatesTokenCount`.
//! - **Dropped, documented:** prompt-cache markers on blocks (Gemini caches implicitly, so
//!   there is nothing to mark). **Refused:** the portable `cache_control` request (it asks for
//!   breakpoints), `user` (Gemini has no end-user id), `parallel_tool_calls: false`, images by
//!   URL (Gemini fetches no arbitrary URLs), images inside tool results.

use serde_json::{json, Map, Value};

use super::ir::{
    Block, Finish, Image, Message, OutputFormat, Reasoning, Request, Response, Role, Thinking, Tool, ToolChoice,
    ToolResult, Usage,
};
use super::json::{invalid, unsupported};
use super::TranslateError;

pub(crate) mod answer;
mod config;
pub(crate) mod decode;

pub use answer::decode_response;
pub use decode::decode_request;

/// The `thoughtSignature` Google documents for function calls it did not sign (history from
/// another model): it skips the signature check instead of failing the request.
pub const SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

/// Encodes a request for a Gemini provider (the model goes in the URL, not the body).
///
/// # Errors
/// A parameter Gemini cannot express (`user`, `parallel_tool_calls: false`, portable
/// `cache_control`, an image URL, an image in a tool result, an unknown reasoning effort).
pub fn encode_request(req: &Request) -> Result<Vec<u8>, TranslateError> {
    if req.user.is_some() {
        return Err(unsupported("user"));
    }
    if req.parallel_tool_calls == Some(false) {
        return Err(unsupported("parallel_tool_calls"));
    }
    if req.cache.is_some() {
        // Gemini caches repeated prefixes by itself and takes no breakpoints.
        return Err(unsupported("cache_control"));
    }
    let mut out = Map::new();
    out.insert("contents".into(), Value::Array(encode_contents(&req.messages)?));
    if !req.system.is_empty() {
        let parts: Vec<Value> = req.system.iter().map(|t| json!({"text": t.text})).collect();
        out.insert("systemInstruction".into(), json!({"parts": parts}));
    }
    if !req.tools.is_empty() {
        let declarations: Vec<Value> = req.tools.iter().map(encode_tool).collect();
        out.insert("tools".into(), json!([{"functionDeclarations": declarations}]));
    }
    if let Some(choice) = &req.tool_choice {
        out.insert("toolConfig".into(), json!({"functionCallingConfig": encode_choice(choice)}));
    }
    let config = generation_config(req)?;
    if !config.is_empty() {
        out.insert("generationConfig".into(), Value::Object(config));
    }
    serde_json::to_vec(&Value::Object(out)).map_err(|e| TranslateError::Json(e.to_string()))
}

fn encode_tool(t: &Tool) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), json!(t.name));
    if let Some(description) = &t.description {
        d.insert("description".into(), json!(description));
    }
    d.insert("parametersJsonSchema".into(), t.parameters.clone());
    Value::Object(d)
}

fn encode_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!({"mode": "AUTO"}),
        ToolChoice::None => json!({"mode": "NONE"}),
        ToolChoice::Required => json!({"mode": "ANY"}),
        ToolChoice::Named(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
    }
}

fn generation_config(req: &Request) -> Result<Map<String, Value>, TranslateError> {
    let (mime, schema) = match &req.output {
        None => (None, None),
        Some(OutputFormat::JsonObject) => (Some("application/json"), None),
        Some(OutputFormat::JsonSchema { schema, .. }) => (Some("application/json"), Some(schema.clone())),
    };
    let thinking = match &req.reasoning {
        None => None,
        Some(Reasoning::Budget(n)) => Some(json!({"thinkingBudget": n, "includeThoughts": true})),
        Some(Reasoning::Effort(e)) => Some(json!({"thinkingLevel": thinking_level(e)?})),
    };
    let fields = [
        ("maxOutputTokens", req.max_tokens.map(Value::from)),
        ("temperature", req.temperature.map(Value::from)),
        ("topP", req.top_p.map(Value::from)),
        ("topK", req.top_k.map(Value::from)),
        ("stopSequences", (!req.stop.is_empty()).then(|| json!(req.stop))),
        ("seed", req.seed.map(Value::from)),
        ("presencePenalty", req.presence_penalty.map(Value::from)),
        ("frequencyPenalty", req.frequency_penalty.map(Value::from)),
        ("responseMimeType", mime.map(Value::from)),
        ("responseJsonSchema", schema),
        ("thinkingConfig", thinking),
    ];
    Ok(fields.into_iter().filter_map(|(k, v)| Some((k.to_string(), v?))).collect())
}

/// Gemini 3's `thinkingLevel` for an OpenAI-style effort.
fn thinking_level(effort: &str) -> Result<&'static str, TranslateError> {
    match effort {
        "minimal" => Ok("MINIMAL"),
        "low" => Ok("LOW"),
        "medium" => Ok("MEDIUM"),
        "high" => Ok("HIGH"),
        _ => Err(unsupported("reasoning_effort")),
    }
}

fn encode_contents(messages: &[Message]) -> Result<Vec<Value>, TranslateError> {
    let mut out = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let earlier = messages.get(..i).unwrap_or_default();
        let mut parts = Parts::default();
        for (j, block) in m.content.iter().enumerate() {
            let path = format!("messages[{i}].content[{j}]");
            match block {
                Block::ToolResult(r) => parts.push(function_response(earlier, &path, r)?),
                Block::Image(Image::Url { .. }) => return Err(unsupported(&format!("{path}.image_url"))),
                other => parts.block(other, false),
            }
        }
        let mut parts = parts.finish();
        if parts.is_empty() {
            continue;
        }
        let role = if m.role == Role::User { "user" } else { "model" };
        if m.role == Role::Assistant {
            sign_first_call(&mut parts);
        }
        out.push(json!({"role": role, "parts": parts}));
    }
    Ok(out)
}

/// Gives the first function call of a model turn a signature when it has none.
fn sign_first_call(parts: &mut [Value]) {
    if let Some(Value::Object(call)) = parts.iter_mut().find(|p| p.get("functionCall").is_some()) {
        call.entry("thoughtSignature").or_insert_with(|| json!(SKIP_SIGNATURE));
    }
}

/// `functionResponse` for a result: Gemini wants the function's name, found on the latest
/// earlier call with the result's id. The text goes under `output` (`error` for a failure), the
/// keys Google documents.
fn function_response(earlier: &[Message], path: &str, r: &ToolResult) -> Result<Value, TranslateError> {
    let name = earlier
        .iter()
        .rev()
        .flat_map(|m| m.content.iter().rev())
        .find_map(|b| match b {
            Block::ToolCall(c) if c.id == r.id => Some(c.name.as_str()),
            _ => None,
        })
        .ok_or_else(|| invalid(path, "a tool result answering an earlier tool call"))?;
    let mut text = String::new();
    for (k, b) in r.content.iter().enumerate() {
        match b {
            Block::Text(t) => text.push_str(&t.text),
            _ => return Err(unsupported(&format!("{path}.content[{k}]"))),
        }
    }
    let key = if r.is_error { "error" } else { "output" };
    Ok(json!({"functionResponse": {"name": name, "response": {key: text}}}))
}

/// Parts of one turn being built: a signature-only thinking block's signature goes on the next
/// part (where Gemini put it), or on an empty text part when nothing follows.
#[derive(Default)]
struct Parts {
    parts: Vec<Value>,
    signature: Option<String>,
}

impl Parts {
    fn push(&mut self, mut part: Value) {
        if let (Some(sig), Value::Object(p)) = (self.signature.take(), &mut part) {
            p.insert("thoughtSignature".into(), json!(sig));
        }
        self.parts.push(part);
    }

    /// Text, thinking, inline images and calls (`with_ids` for answers: Gemini clients may
    /// echo a call's `id` in its `functionResponse`). Tool results and image URLs are the
    /// request encoder's.
    fn block(&mut self, block: &Block, with_ids: bool) {
        match block {
            Block::Text(t) => self.push(json!({"text": t.text})),
            Block::Image(Image::Inline { media_type, data, .. }) => {
                self.push(json!({"inlineData": {"mimeType": media_type, "data": data}}));
            }
            Block::ToolCall(c) => {
                let mut call = json!({"name": c.name, "args": c.arguments});
                if let (true, Value::Object(m)) = (with_ids, &mut call) {
                    m.insert("id".into(), json!(c.id));
                }
                self.push(json!({"functionCall": call}));
            }
            Block::Thinking(t) => self.thinking(t),
            Block::Image(Image::Url { .. }) | Block::ToolResult(_) => {}
        }
    }

    fn thinking(&mut self, t: &Thinking) {
        if t.text.is_empty() {
            if let Some(sig) = &t.signature {
                self.flush();
                self.signature = Some(sig.clone());
            }
            return;
        }
        self.flush();
        let mut part = json!({"text": t.text, "thought": true});
        if let (Some(sig), Value::Object(p)) = (&t.signature, &mut part) {
            p.insert("thoughtSignature".into(), json!(sig));
        }
        self.parts.push(part);
    }

    /// A pending signature with no part to carry it.
    fn flush(&mut self) {
        if let Some(sig) = self.signature.take() {
            self.parts.push(json!({"text": "", "thoughtSignature": sig}));
        }
    }

    fn finish(mut self) -> Vec<Value> {
        self.flush();
        self.parts
    }
}

/// Encodes an answer for a Gemini client; `model` is reported as `modelVersion`.
pub fn encode_response(resp: &Response, model: &str) -> Vec<u8> {
    let mut parts = Parts::default();
    for block in &resp.content {
        parts.block(block, true);
    }
    let body = json!({
        "candidates": [{
            "content": {"role": "model", "parts": parts.finish()},
            "finishReason": finish_reason(&resp.finish),
            "index": 0,
        }],
        "usageMetadata": usage_json(&resp.usage),
        "modelVersion": model,
        "responseId": resp.id,
    });
    serde_json::to_vec(&body).unwrap_or_default()
}

/// The `finishReason` of a neutral finish (Gemini reports `STOP` after function calls and
/// after a stop sequence).
pub fn finish_reason(finish: &Finish) -> &'static str {
    match finish {
        Finish::Stop | Finish::StopSequence(_) | Finish::ToolCalls => "STOP",
        Finish::Length => "MAX_TOKENS",
        Finish::ContentFilter => "SAFETY",
    }
}

/// Gemini's `usageMetadata`: `promptTokenCount` includes cached tokens; reasoning is counted
/// in `candidatesTokenCount` (the neutral form does not split it out).
pub fn usage_json(u: &Usage) -> Value {
    let mut m = Map::new();
    m.insert("promptTokenCount".into(), json!(u.input));
    m.insert("candidatesTokenCount".into(), json!(u.output));
    m.insert("totalTokenCount".into(), json!(u.input.saturating_add(u.output)));
    if u.cached > 0 {
        m.insert("cachedContentTokenCount".into(), json!(u.cached));
    }
    Value::Object(m)
}

#[cfg(test)]
mod tests;
