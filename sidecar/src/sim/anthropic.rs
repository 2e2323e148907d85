//! Anthropic Messages dialect of the simulated engine: `POST /v1/messages` (plain and SSE)
//! and `POST /v1/messages/count_tokens`, with the shapes, event names, headers and errors of
//! Anthropic's public API.
//!
//! Like the real API it answers 400 (`invalid_request_error`) without an `anthropic-version`
//! header or with an unknown version, when `model`, `max_tokens` or `messages` is missing,
//! for a top-level field the API does not define ("Extra inputs are not permitted") and for a
//! message role other than `user`/`assistant`. Keys (`x-api-key`) are not checked, as the
//! OpenAI side ignores `Authorization`. The answer comes from the shared model
//! (`sim/reply.rs`): the same conversation gets the same text as over OpenAI.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::error::{Dialect, SimError};
use super::faults::{self, ExtraDelay};
use super::prefix::with_header;
use super::reply::{self, Ask, Ending, Reply, Turn};
use super::stream::{finish_plain, frames_response, Timing};
use super::text;
use super::tools::{ToolChoice, ToolSpec, Traffic};
use super::SimState;

mod stream;

/// API versions the `anthropic-version` header may name. A well-formed later date is taken
/// as a version newer than the sim (the official SDKs send theirs), so a current SDK talking
/// to the sim verbatim through a gateway is not refused.
const VERSIONS: [&str; 2] = ["2023-06-01", "2023-01-01"];
/// Top-level fields of a Messages request (including beta ones); others are refused.
const KNOWN_FIELDS: [&str; 29] = [
    "model",
    "messages",
    "max_tokens",
    "cache_control",
    "compaction",
    "container",
    "context_management",
    "diagnostics",
    "fallback_credit_token",
    "fallbacks",
    "inference_geo",
    "mcp_servers",
    "metadata",
    "output_config",
    "output_format",
    "service_tier",
    "speed",
    "stop_sequences",
    "stream",
    "system",
    "temperature",
    "thinking",
    "thread",
    "tool_choice",
    "tools",
    "top_k",
    "top_p",
    "user_profile_id",
    "workspace_id",
];

#[derive(Debug, Deserialize)]
struct MessagesRequest {
    model: String,
    max_tokens: u32,
    messages: Vec<Message>,
    #[serde(default)]
    system: Value,
    #[serde(default)]
    tools: Vec<Tool>,
    #[serde(default)]
    tool_choice: Value,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stop_sequences: Vec<String>,
    #[serde(default)]
    output_format: Value,
}

#[derive(Debug, Deserialize)]
struct Message {
    role: String,
    content: Value,
}

/// A `tools` entry: client tools have an `input_schema`; server tools (web search, ...) do
/// not and are never called by the sim.
#[derive(Debug, Deserialize)]
struct Tool {
    #[serde(default)]
    name: String,
    input_schema: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct CountRequest {
    model: String,
    messages: Vec<Message>,
    #[serde(default)]
    system: Value,
}

/// One answered message: what both renderings need.
struct Answer {
    id: String,
    model: String,
    input_tokens: u32,
    reply: Reply,
    tool_use_id: String,
}

impl Answer {
    /// `stop_reason` and `stop_sequence`.
    fn stop(&self) -> (&'static str, Value) {
        match &self.reply {
            Reply::Tool(_) => ("tool_use", Value::Null),
            Reply::Text { ending: Ending::Length, .. } => ("max_tokens", Value::Null),
            Reply::Text { ending: Ending::StopSequence(sequence), .. } => ("stop_sequence", json!(sequence)),
            Reply::Text { ending: Ending::Natural, .. } => ("end_turn", Value::Null),
        }
    }

    /// `usage` with `output_tokens` generated tokens.
    fn usage(&self, output_tokens: u32) -> Value {
        json!({
            "input_tokens": self.input_tokens, "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
        })
    }

    /// The message object; `content` and `usage` as given.
    fn message(&self, content: Value, stop: (Value, Value), output_tokens: u32) -> Value {
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content, "stop_reason": stop.0, "stop_sequence": stop.1,
            "usage": self.usage(output_tokens),
        })
    }

    /// The non-streamed answer.
    fn body(&self) -> Value {
        let block = match &self.reply {
            Reply::Tool(call) => {
                json!({ "type": "tool_use", "id": self.tool_use_id, "name": call.name, "input": call.arguments })
            }
            Reply::Text { .. } => json!({ "type": "text", "text": self.reply.text() }),
        };
        let (reason, sequence) = self.stop();
        self.message(json!([block]), (json!(reason), sequence), self.reply.tokens())
    }
}

/// `POST /v1/messages`.
pub async fn messages(
    State(state): State<Arc<SimState>>,
    extra: Option<Extension<ExtraDelay>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(&state, extra.map(|Extension(e)| e), &headers, &body).await.unwrap_or_else(|e| e.render(Dialect::Anthropic))
}

async fn serve(
    state: &SimState,
    extra: Option<ExtraDelay>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, SimError> {
    check_version(headers)?;
    let request = parse_request(body)?;
    let counters = state.model(&request.model)?;
    let timing = Timing::for_request(state, headers, extra)?;
    let (mut ask, input_tokens) = request.ask();
    ask.echo = faults::echo_tools(headers).then(|| Traffic::anthropic(request.messages.iter().map(|m| &m.content)));
    let answer = Answer {
        id: state.unique_id("msg_"),
        model: request.model,
        input_tokens,
        reply: reply::answer_with(&ask, state.output_tokens, faults::knobs(headers)?)?,
        tool_use_id: state.unique_id("toolu_"),
    };
    let reason = answer.reply.engine_reason();
    let guard = counters.admit(input_tokens).await;
    let hit = counters.prefix_lookup(&ask.prompt, input_tokens, faults::kv_drop(headers));
    let timing = timing.after_prefill(&hit);
    if request.stream {
        let frames = stream::frames(&answer);
        return Ok(with_header(frames_response(timing, frames, guard, reason, "text/event-stream"), hit));
    }
    finish_plain(timing, answer.reply.tokens(), guard, reason).await;
    Ok(with_header(Json(answer.body()).into_response(), hit))
}

/// `POST /v1/messages/count_tokens`: `{"input_tokens": N}`, the count `/v1/messages` reports.
pub async fn count_tokens(State(state): State<Arc<SimState>>, headers: HeaderMap, body: Bytes) -> Response {
    let counted = check_version(&headers).and_then(|()| {
        let request: CountRequest = from_json(body_object(&body)?)?;
        state.model(&request.model)?;
        Ok(reply::prompt(&turns(&request.system, &request.messages)).1)
    });
    match counted {
        Ok(tokens) => Json(json!({ "input_tokens": tokens })).into_response(),
        Err(error) => error.render(Dialect::Anthropic),
    }
}

fn check_version(headers: &HeaderMap) -> Result<(), SimError> {
    let Some(value) = headers.get("anthropic-version") else {
        return Err(SimError::BadRequest("anthropic-version: header is required".into()));
    };
    let version = value.to_str().unwrap_or_default().trim();
    if VERSIONS.contains(&version) || is_later_version(version) {
        Ok(())
    } else {
        Err(SimError::BadRequest(format!("anthropic-version: \"{version}\" is not a valid version")))
    }
}

/// `YYYY-MM-DD` (month 01-12, day 01-31) after the newest version in [`VERSIONS`].
fn is_later_version(version: &str) -> bool {
    let bytes = version.as_bytes();
    let digits = |range: std::ops::Range<usize>| bytes[range].iter().all(u8::is_ascii_digit);
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' || !digits(0..4) || !digits(5..7) || !digits(8..10) {
        return false;
    }
    let (month, day) = (&version[5..7], &version[8..10]);
    ("01"..="12").contains(&month) && ("01"..="31").contains(&day) && version > VERSIONS[0]
}

fn body_object(body: &Bytes) -> Result<Map<String, Value>, SimError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(SimError::BadRequest("The request body must be a JSON object".into())),
        Err(error) => Err(SimError::BadRequest(format!("There was an issue with the JSON body: {error}"))),
    }
}

fn from_json<T: serde::de::DeserializeOwned>(object: Map<String, Value>) -> Result<T, SimError> {
    serde_json::from_value(Value::Object(object)).map_err(|error| SimError::BadRequest(error.to_string()))
}

/// Parses and validates a Messages request the way the API does.
fn parse_request(body: &Bytes) -> Result<MessagesRequest, SimError> {
    let object = body_object(body)?;
    if let Some(extra) = object.keys().find(|key| !KNOWN_FIELDS.contains(&key.as_str())) {
        return Err(SimError::BadRequest(format!("{extra}: Extra inputs are not permitted")));
    }
    if let Some(missing) = ["model", "max_tokens", "messages"].into_iter().find(|field| !object.contains_key(*field)) {
        return Err(SimError::BadRequest(format!("{missing}: Field required")));
    }
    let request: MessagesRequest = from_json(object)?;
    if request.messages.is_empty() {
        return Err(SimError::BadRequest("messages: at least one message is required".into()));
    }
    for (index, message) in request.messages.iter().enumerate() {
        match message.role.as_str() {
            "user" | "assistant" => {}
            "system" => {
                return Err(SimError::BadRequest(
                    "messages: Unexpected role \"system\". The Messages API accepts a top-level `system` parameter, \
                     not \"system\" as an input message role."
                        .into(),
                ));
            }
            _ => {
                return Err(SimError::BadRequest(format!(
                    "messages.{index}.role: Input should be 'user' or 'assistant'"
                )));
            }
        }
    }
    Ok(request)
}

impl MessagesRequest {
    /// The dialect-neutral ask and the input tokens.
    fn ask(&self) -> (Ask, u32) {
        let (prompt, input_tokens) = reply::prompt(&turns(&self.system, &self.messages));
        let tools = self
            .tools
            .iter()
            .filter_map(|tool| Some(ToolSpec { name: tool.name.clone(), schema: tool.input_schema.clone()? }))
            .collect();
        let json_schema = (self.output_format.get("type").and_then(Value::as_str) == Some("json_schema"))
            .then(|| self.output_format.get("schema").cloned().unwrap_or(Value::Null));
        let ask = Ask {
            prompt,
            max_tokens: Some(self.max_tokens),
            stop: self.stop_sequences.clone(),
            tools,
            choice: tool_choice(&self.tool_choice),
            tool_result: self.messages.last().and_then(tool_results),
            json_schema,
            echo: None,
        };
        (ask, input_tokens)
    }
}

/// The conversation as turns: `system` first (a string or text blocks), then the messages.
fn turns(system: &Value, messages: &[Message]) -> Vec<Turn> {
    let system = Some(text::message_text(system)).filter(|text| !text.is_empty()).map(|t| Turn::new("system", t));
    system.into_iter().chain(messages.iter().map(|m| Turn::new(&m.role, content_text(&m.content)))).collect()
}

/// A message's text: a string, or its `text` blocks and the text of its `tool_result` blocks.
fn content_text(content: &Value) -> String {
    let Value::Array(blocks) = content else { return text::message_text(content) };
    let texts = blocks.iter().filter_map(|block| match block.get("type").and_then(Value::as_str) {
        Some("text") => block.get("text").and_then(Value::as_str).map(str::to_owned),
        Some("tool_result") => block.get("content").map(text::message_text),
        _ => None,
    });
    texts.collect::<Vec<_>>().join(" ")
}

/// The text of a user message's `tool_result` blocks, if it has any.
fn tool_results(message: &Message) -> Option<String> {
    let blocks = message.content.as_array().filter(|_| message.role == "user")?;
    let results: Vec<String> = blocks
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|block| block.get("content").map(text::message_text).unwrap_or_default())
        .collect();
    (!results.is_empty()).then(|| results.join(" "))
}

/// Anthropic's `tool_choice`: `{"type": "auto" | "any" | "none" | "tool", "name"?}`.
fn tool_choice(choice: &Value) -> ToolChoice {
    match (choice.get("type").and_then(Value::as_str), choice.get("name").and_then(Value::as_str)) {
        (Some("none"), _) => ToolChoice::None,
        (Some("any"), _) => ToolChoice::Required,
        (Some("tool"), Some(name)) => ToolChoice::Named(name.to_owned()),
        _ => ToolChoice::Auto,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_read_system_blocks_and_tool_results() {
        let system = json!([{"type": "text", "text": "be brief"}]);
        let messages = vec![
            Message { role: "user".into(), content: json!("hi") },
            Message {
                role: "user".into(),
                content: json!([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "21C"}]}]),
            },
        ];
        let turns = turns(&system, &messages);
        assert_eq!(turns[0], Turn::new("system", "be brief".into()));
        assert_eq!(turns[2].text, "21C");
        assert_eq!(tool_results(&messages[1]).as_deref(), Some("21C"));
        assert_eq!(tool_results(&messages[0]), None);
    }

    #[test]
    fn requests_are_validated_like_the_api() {
        let bad = |body: Value| match parse_request(&Bytes::from(body.to_string())) {
            Err(SimError::BadRequest(message)) => message,
            other => panic!("{other:?}"),
        };
        let messages = json!([{"role": "user", "content": "hi"}]);
        assert_eq!(bad(json!({"model": "m", "messages": messages})), "max_tokens: Field required");
        let extra = json!({"model": "m", "max_tokens": 5, "messages": messages, "stream_options": {}});
        assert_eq!(bad(extra), "stream_options: Extra inputs are not permitted");
        let system = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]});
        assert!(bad(system).starts_with("messages: Unexpected role \"system\""));
        assert_eq!(tool_choice(&json!({"type": "tool", "name": "f"})), ToolChoice::Named("f".into()));
    }

    #[test]
    fn versions_are_the_known_ones_or_later_dates() {
        let check = |version: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("anthropic-version", version.parse().unwrap());
            check_version(&headers).is_ok()
        };
        for good in ["2023-06-01", "2023-01-01", "2026-10-21", " 2024-02-29 "] {
            assert!(check(good), "{good}");
        }
        let bad = ["", "latest", "2023-05-31", "2026-13-01", "2026-10-00", "2026-1-21", "2026/10/21", "2026-10-21x"];
        for bad in bad {
            assert!(!check(bad), "{bad}");
        }
    }
}
