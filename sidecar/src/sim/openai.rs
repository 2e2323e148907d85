//! OpenAI-compatible handlers of the simulated engine: `/v1/models`, `/v1/chat/completions`,
//! `/v1/completions` and `/v1/embeddings`, with response and chunk shapes as OpenAI/vLLM send
//! them.
//!
//! Bodies are parsed by hand from bytes (not axum's `Json`) so that malformed requests get a
//! 400 in OpenAI's error shape rather than axum's plain-text rejections. Chat completions
//! (with tool calls) are in `openai/chat.rs`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::SimError;
use super::faults::{self, ExtraDelay};
use super::prefix::with_header;
use super::reply::{self, Ask, Ending, Reply};
use super::stream::{finish_plain, sse_response, Timing};
use super::text::{self, FinishReason};
use super::SimState;

mod chat;

pub use chat::chat;
pub(super) use chat::{turns as chat_turns, ChatMessage};

#[derive(Debug, Deserialize)]
pub(super) struct StreamOptions {
    #[serde(default)]
    pub(super) include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    model: String,
    prompt: Value,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
    #[serde(default)]
    stop: Value,
}

#[derive(Debug, Deserialize)]
struct EmbeddingRequest {
    model: String,
    input: Value,
    dimensions: Option<usize>,
}

/// What one completion request generates, shared by the plain and streamed renderings.
pub(super) struct Generation {
    pub(super) id: String,
    pub(super) created: u64,
    pub(super) model: String,
    pub(super) prompt_tokens: u32,
    pub(super) reply: Reply,
    pub(super) include_usage: bool,
    /// Prompt tokens served from a cache (the prefix hit), reported as
    /// `prompt_tokens_details.cached_tokens` when there are any.
    pub(super) cached_tokens: u64,
}

impl Generation {
    /// OpenAI's `finish_reason`.
    pub(super) fn finish_reason(&self) -> &'static str {
        match &self.reply {
            Reply::Tool(_) => "tool_calls",
            Reply::Text { ending: Ending::Length, .. } => "length",
            Reply::Text { .. } => "stop",
        }
    }

    /// The text deltas (none for a tool call).
    pub(super) fn deltas(&self) -> &[String] {
        match &self.reply {
            Reply::Text { deltas, .. } => deltas,
            Reply::Tool(_) => &[],
        }
    }

    pub(super) fn usage(&self) -> Value {
        let completion = self.reply.tokens();
        let mut usage = json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens.saturating_add(completion),
        });
        if self.cached_tokens > 0 {
            let cached = self.cached_tokens.min(u64::from(self.prompt_tokens));
            usage["prompt_tokens_details"] = json!({ "cached_tokens": cached });
        }
        usage
    }

    /// A chunk envelope; with `include_usage`, OpenAI sends `"usage": null` on every chunk
    /// but the last.
    pub(super) fn chunk(&self, object: &str, choices: Value) -> Value {
        let mut chunk = json!({
            "id": self.id, "object": object, "created": self.created, "model": self.model,
            "choices": choices,
        });
        if self.include_usage {
            chunk["usage"] = Value::Null;
        }
        chunk
    }

    /// The trailing chunks after the tokens: finish reason, then the usage chunk if asked.
    pub(super) fn tail(&self, object: &str, finish_choice: Value) -> Vec<Value> {
        let mut tail = vec![self.chunk(object, json!([finish_choice]))];
        if self.include_usage {
            let mut usage = self.chunk(object, json!([]));
            usage["usage"] = self.usage();
            tail.push(usage);
        }
        tail
    }
}

/// OpenAI's `stop`: a string or an array of strings (anything else stops nothing).
pub(super) fn stop_sequences(stop: &Value) -> Vec<String> {
    match stop {
        Value::String(one) => vec![one.clone()],
        Value::Array(many) => many.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

/// The text of a completion's prompts, one per line: what is answered and cached.
pub(super) fn completion_prompt(prompts: &[text::PromptInput]) -> String {
    prompts.iter().map(|p| p.text.as_str()).collect::<Vec<_>>().join("\n")
}

pub(super) fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, SimError> {
    serde_json::from_slice(body).map_err(|error| SimError::BadRequest(format!("Invalid request body: {error}")))
}

/// `GET /v1/models`.
pub async fn models(State(state): State<Arc<SimState>>) -> Json<Value> {
    let data: Vec<Value> = state
        .models
        .iter()
        .map(|(name, _)| {
            json!({
                "id": name, "object": "model", "created": state.started,
                "owned_by": "ferrogate-sim", "root": name, "parent": null,
            })
        })
        .collect();
    Json(json!({ "object": "list", "data": data }))
}

/// `POST /v1/completions`. Several prompts are answered as one (their texts joined, their
/// tokens summed): enough for a simulator, and it keeps `choices` a single entry.
pub async fn completions(
    State(state): State<Arc<SimState>>,
    extra: Option<Extension<ExtraDelay>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, SimError> {
    let request: CompletionRequest = parse(&body)?;
    let counters = state.model(&request.model)?;
    let timing = Timing::for_request(&state, &headers, extra.map(|Extension(e)| e))?;
    let prompts = text::prompt_inputs(&request.prompt)
        .ok_or_else(|| SimError::BadRequest("prompt must be a string, strings or token ids".into()))?;
    let ask = Ask {
        prompt: completion_prompt(&prompts),
        max_tokens: request.max_tokens,
        stop: stop_sequences(&request.stop),
        ..Ask::default()
    };
    let mut generation = Generation {
        id: state.response_id("cmpl"),
        created: super::unix_now(),
        model: request.model,
        prompt_tokens: prompts.iter().map(|p| p.tokens).fold(0, u32::saturating_add),
        reply: reply::answer_with(&ask, state.output_tokens, faults::knobs(&headers)?)?,
        include_usage: request.stream_options.is_some_and(|o| o.include_usage),
        cached_tokens: 0,
    };
    let reason = generation.reply.engine_reason();
    let guard = counters.admit(generation.prompt_tokens).await;
    let hit = counters.prefix_lookup(&ask.prompt, generation.prompt_tokens, faults::kv_drop(&headers));
    let timing = timing.after_prefill(&hit);
    generation.cached_tokens = hit.hit_tokens();
    if request.stream.unwrap_or(false) {
        return Ok(with_header(sse_response(timing, completion_chunks(&generation), guard, reason), hit));
    }
    finish_plain(timing, generation.reply.tokens(), guard, reason).await;
    let choice = completion_choice(&generation.reply.text(), Some(generation.finish_reason()));
    let body = json!({
        "id": generation.id, "object": "text_completion", "created": generation.created,
        "model": generation.model, "choices": [choice], "usage": generation.usage(),
    });
    Ok(with_header(Json(body).into_response(), hit))
}

fn completion_choice(text: &str, finish: Option<&str>) -> Value {
    json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish })
}

/// One text chunk per token, then an empty-text chunk with the finish reason (and usage).
fn completion_chunks(g: &Generation) -> (Option<Value>, Vec<Value>, Vec<Value>) {
    const OBJECT: &str = "text_completion";
    let tokens = g.deltas().iter().map(|delta| g.chunk(OBJECT, json!([completion_choice(delta, None)]))).collect();
    (None, tokens, g.tail(OBJECT, completion_choice("", Some(g.finish_reason()))))
}

/// `POST /v1/embeddings`: one unit vector per input (16 dimensions unless `dimensions` asks
/// otherwise), after `ttft` of simulated work.
pub async fn embeddings(
    State(state): State<Arc<SimState>>,
    extra: Option<Extension<ExtraDelay>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, SimError> {
    let request: EmbeddingRequest = parse(&body)?;
    let counters = state.model(&request.model)?;
    let timing = Timing::for_request(&state, &headers, extra.map(|Extension(e)| e))?;
    let inputs = text::prompt_inputs(&request.input)
        .ok_or_else(|| SimError::BadRequest("input must be a string, strings or token ids".into()))?;
    let dims = request.dimensions.unwrap_or(text::EMBEDDING_DIMS);
    if dims == 0 || dims > text::MAX_EMBEDDING_DIMS {
        let max = text::MAX_EMBEDDING_DIMS;
        return Err(SimError::BadRequest(format!("dimensions must be 1..={max}")));
    }
    let prompt_tokens = inputs.iter().map(|p| p.tokens).fold(0, u32::saturating_add);
    let guard = counters.admit(prompt_tokens).await;
    finish_plain(timing, 0, guard, FinishReason::Stop).await;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, input)| {
            json!({ "object": "embedding", "index": index, "embedding": text::embedding(&input.text, dims) })
        })
        .collect();
    let usage = json!({ "prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens });
    let body = json!({ "object": "list", "data": data, "model": request.model, "usage": usage });
    Ok(Json(body).into_response())
}
