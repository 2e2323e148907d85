//! `POST /v1/chat/completions`: text answers and tool calls, plain and streamed, with
//! OpenAI's shapes (`message.tool_calls` and `finish_reason: "tool_calls"`; streamed calls as
//! `delta.tool_calls` whose `function.arguments` fragments concatenate to the arguments).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};

use super::{parse, stop_sequences, Generation, StreamOptions};
use crate::sim::error::SimError;
use crate::sim::faults::{self, ExtraDelay};
use crate::sim::prefix::with_header;
use crate::sim::reply::{self, Ask, Reply, Turn};
use crate::sim::stream::{finish_plain, sse_response, Timing};
use crate::sim::text;
use crate::sim::tools::{ToolChoice, ToolSpec, Traffic};
use crate::sim::SimState;

#[derive(Debug, Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    stop: Value,
    #[serde(default)]
    tools: Vec<ChatTool>,
    #[serde(default)]
    tool_choice: Value,
    #[serde(default)]
    response_format: Value,
}

/// One chat message: its role and its content (a string or parts), and an assistant's tool
/// calls or the call a `tool` message answers.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatMessage {
    #[serde(default)]
    role: String,
    #[serde(default)]
    content: Value,
    #[serde(default)]
    tool_calls: Value,
    #[serde(default)]
    tool_call_id: Option<String>,
}

/// A `tools` entry; only `function` tools can be called.
#[derive(Debug, Deserialize)]
struct ChatTool {
    function: Option<FunctionDef>,
}

#[derive(Debug, Deserialize)]
struct FunctionDef {
    name: String,
    #[serde(default)]
    parameters: Value,
}

impl ChatRequest {
    /// The dialect-neutral ask: `role: text` turns, cap, stop, tools and JSON output.
    fn ask(&self) -> (Ask, u32) {
        let turns = turns(&self.messages);
        let (prompt, prompt_tokens) = reply::prompt(&turns);
        let tools = self
            .tools
            .iter()
            .filter_map(|tool| tool.function.as_ref())
            .map(|f| ToolSpec { name: f.name.clone(), schema: f.parameters.clone() })
            .collect();
        let ask = Ask {
            prompt,
            max_tokens: self.max_completion_tokens.or(self.max_tokens),
            stop: stop_sequences(&self.stop),
            tools,
            choice: tool_choice(&self.tool_choice),
            tool_result: self.tool_result(&turns),
            json_schema: json_schema(&self.response_format),
            echo: None,
        };
        (ask, prompt_tokens)
    }

    /// The assistants' tool calls (their arguments parsed) and the `tool` messages' results.
    fn traffic(&self) -> Traffic {
        let mut traffic = Traffic::default();
        for m in &self.messages {
            for call in m.tool_calls.as_array().into_iter().flatten() {
                let field = |pointer: &str| call.pointer(pointer).and_then(Value::as_str).unwrap_or_default();
                let arguments = serde_json::from_str(field("/function/arguments")).unwrap_or_default();
                traffic.call(field("/id"), field("/function/name"), arguments);
            }
            if m.role == "tool" {
                traffic.result(m.tool_call_id.as_deref().unwrap_or_default(), text::message_text(&m.content));
            }
        }
        traffic
    }

    /// The texts of the trailing `tool` messages, if the conversation ends with any.
    fn tool_result(&self, turns: &[Turn]) -> Option<String> {
        let is_result = |m: &ChatMessage| m.role == "tool" || m.role == "function";
        let trailing = self.messages.iter().rev().take_while(|m| is_result(m)).count();
        let results: Vec<&str> = turns[turns.len() - trailing..].iter().map(|t| t.text.as_str()).collect();
        (trailing > 0).then(|| results.join(" "))
    }
}

/// The dialect-neutral turns of chat `messages` (`/tokenize` reads the same prompt from them).
pub(crate) fn turns(messages: &[ChatMessage]) -> Vec<Turn> {
    messages.iter().map(|m| Turn::new(&m.role, text::message_text(&m.content))).collect()
}

/// OpenAI's `tool_choice`: `"none"`, `"auto"`, `"required"` or `{"type":"function",...}`.
fn tool_choice(choice: &Value) -> ToolChoice {
    match choice {
        Value::String(mode) if mode == "none" => ToolChoice::None,
        Value::String(mode) if mode == "required" => ToolChoice::Required,
        Value::Object(_) => match choice.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => ToolChoice::Named(name.to_owned()),
            None => ToolChoice::Auto,
        },
        _ => ToolChoice::Auto,
    }
}

/// `response_format`: a `json_schema`'s schema, or `null` for `json_object`.
fn json_schema(format: &Value) -> Option<Value> {
    match format.get("type").and_then(Value::as_str) {
        Some("json_schema") => Some(format.pointer("/json_schema/schema").cloned().unwrap_or(Value::Null)),
        Some("json_object") => Some(Value::Null),
        _ => None,
    }
}

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(state): State<Arc<SimState>>,
    extra: Option<Extension<ExtraDelay>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, SimError> {
    let request: ChatRequest = parse(&body)?;
    let counters = state.model(&request.model)?;
    let timing = Timing::for_request(&state, &headers, extra.map(|Extension(e)| e))?;
    let (mut ask, prompt_tokens) = request.ask();
    ask.echo = faults::echo_tools(&headers).then(|| request.traffic());
    let mut generation = Generation {
        id: state.response_id("chatcmpl"),
        created: crate::sim::unix_now(),
        model: request.model,
        prompt_tokens,
        reply: reply::answer_with(&ask, state.output_tokens, faults::knobs(&headers)?)?,
        include_usage: request.stream_options.is_some_and(|o| o.include_usage),
        cached_tokens: 0,
    };
    let call_id = state.unique_id("call_");
    let reason = generation.reply.engine_reason();
    let guard = counters.admit(generation.prompt_tokens).await;
    let hit = counters.prefix_lookup(&ask.prompt, generation.prompt_tokens, faults::kv_drop(&headers));
    let timing = timing.after_prefill(&hit);
    generation.cached_tokens = hit.hit_tokens();
    if request.stream.unwrap_or(false) {
        return Ok(with_header(sse_response(timing, chat_chunks(&generation, &call_id), guard, reason), hit));
    }
    finish_plain(timing, generation.reply.tokens(), guard, reason).await;
    Ok(with_header(Json(chat_body(&generation, &call_id)).into_response(), hit))
}

fn chat_body(g: &Generation, call_id: &str) -> Value {
    let message = match &g.reply {
        Reply::Tool(call) => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{
                "id": call_id, "type": "function",
                "function": { "name": call.name, "arguments": call.arguments_json() },
            }],
        }),
        Reply::Text { .. } => json!({ "role": "assistant", "content": g.reply.text() }),
    };
    json!({
        "id": g.id, "object": "chat.completion", "created": g.created, "model": g.model,
        "choices": [{ "index": 0, "message": message, "logprobs": null, "finish_reason": g.finish_reason() }],
        "usage": g.usage(),
    })
}

/// Role chunk (with the call's id and name for a tool call), one chunk per token (a text
/// delta or an arguments fragment), then the finish (and usage) chunks.
fn chat_chunks(g: &Generation, call_id: &str) -> (Option<Value>, Vec<Value>, Vec<Value>) {
    const OBJECT: &str = "chat.completion.chunk";
    let choice = |delta: Value, finish: Option<&str>| json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }]);
    let (head, tokens): (Value, Vec<Value>) = match &g.reply {
        Reply::Tool(call) => {
            let opening = json!({ "index": 0, "id": call_id, "type": "function", "function": { "name": call.name, "arguments": "" } });
            let fragments = call
                .fragments()
                .into_iter()
                .map(|fragment| json!({ "tool_calls": [{ "index": 0, "function": { "arguments": fragment } }] }));
            (json!({ "role": "assistant", "content": null, "tool_calls": [opening] }), fragments.collect())
        }
        Reply::Text { deltas, .. } => {
            let deltas = deltas.iter().map(|delta| json!({ "content": delta }));
            (json!({ "role": "assistant", "content": "" }), deltas.collect())
        }
    };
    let tokens = tokens.into_iter().map(|delta| g.chunk(OBJECT, choice(delta, None))).collect();
    let finish = json!({ "index": 0, "delta": {}, "logprobs": null, "finish_reason": g.finish_reason() });
    (Some(g.chunk(OBJECT, choice(head, None))), tokens, g.tail(OBJECT, finish))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_reads_tool_calls_and_tool_messages() {
        let request: ChatRequest = serde_json::from_value(json!({"model": "m", "messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{\"c\":1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
        ]}))
        .unwrap();
        let expected = r#"{"calls":[{"arguments":{"c":1},"name":"w","ref":"call_1"}],"results":[{"output":"21C","ref":"call_1"}]}"#;
        assert_eq!(request.traffic().text(), expected);
    }
}
