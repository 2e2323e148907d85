//! OpenAI-compatible handlers of the simulated engine: `/v1/models`, `/v1/chat/completions`,
//! `/v1/completions` and `/v1/embeddings`, with response and chunk shapes as OpenAI/vLLM send
//! them.
//!
//! Bodies are parsed by hand from bytes (not axum's `Json`) so that malformed requests get a
//! 400 in OpenAI's error shape rather than axum's plain-text rejections.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::SimError;
use super::faults::ExtraDelay;
use super::stream::{finish_plain, sse_response, Timing};
use super::text::{self, FinishReason};
use super::SimState;

#[derive(Debug, Deserialize)]
struct ChatRequest {
    model: String,
    messages: Vec<ChatMessage>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
    max_completion_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct ChatMessage {
    #[serde(default)]
    role: String,
    #[serde(default)]
    content: Value,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
struct CompletionRequest {
    model: String,
    prompt: Value,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
struct EmbeddingRequest {
    model: String,
    input: Value,
    dimensions: Option<usize>,
}

/// What one completion request generates, shared by the plain and streamed renderings.
struct Generation {
    id: String,
    created: u64,
    model: String,
    prompt_tokens: u32,
    words: Vec<&'static str>,
    reason: FinishReason,
    include_usage: bool,
}

impl Generation {
    fn completion_tokens(&self) -> u32 {
        u32::try_from(self.words.len()).unwrap_or(u32::MAX)
    }

    fn usage(&self) -> Value {
        let completion = self.completion_tokens();
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens.saturating_add(completion),
        })
    }

    /// A chunk envelope; with `include_usage`, OpenAI sends `"usage": null` on every chunk
    /// but the last.
    fn chunk(&self, object: &str, choices: Value) -> Value {
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
    fn tail(&self, object: &str, finish_choice: Value) -> Vec<Value> {
        let mut tail = vec![self.chunk(object, json!([finish_choice]))];
        if self.include_usage {
            let mut usage = self.chunk(object, json!([]));
            usage["usage"] = self.usage();
            tail.push(usage);
        }
        tail
    }
}

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, SimError> {
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

/// Any other path: 404 in OpenAI's error shape.
pub async fn not_found(uri: Uri) -> SimError {
    SimError::RouteNotFound(uri.path().to_owned())
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
    let texts: Vec<String> = request.messages.iter().map(|m| text::message_text(&m.content)).collect();
    // Roles are part of what the "model" sees, so they steer the output as well.
    let prompt: Vec<String> = request.messages.iter().zip(&texts).map(|(m, t)| format!("{}: {t}", m.role)).collect();
    let requested = request.max_completion_tokens.or(request.max_tokens);
    let (count, reason) = text::completion_len(requested, state.output_tokens);
    let generation = Generation {
        id: state.response_id("chatcmpl"),
        created: super::unix_now(),
        model: request.model,
        prompt_tokens: text::chat_prompt_tokens(texts.iter().map(String::as_str)),
        words: text::completion_words(&prompt.join("\n"), count),
        reason,
        include_usage: request.stream_options.is_some_and(|o| o.include_usage),
    };
    let guard = counters.admit(generation.prompt_tokens).await;
    if request.stream.unwrap_or(false) {
        return Ok(sse_response(timing, chat_chunks(&generation), guard, reason));
    }
    finish_plain(timing, count, guard, reason).await;
    Ok(Json(chat_body(&generation)).into_response())
}

fn chat_body(g: &Generation) -> Value {
    json!({
        "id": g.id, "object": "chat.completion", "created": g.created, "model": g.model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": g.words.join(" ") },
            "logprobs": null,
            "finish_reason": g.reason.as_str(),
        }],
        "usage": g.usage(),
    })
}

/// Role chunk, one content chunk per token, then the finish (and usage) chunks.
fn chat_chunks(g: &Generation) -> (Option<Value>, Vec<Value>, Vec<Value>) {
    const OBJECT: &str = "chat.completion.chunk";
    let choice = |delta: Value, finish: Option<&str>| json!([{ "index": 0, "delta": delta, "logprobs": null, "finish_reason": finish }]);
    let head = g.chunk(OBJECT, choice(json!({ "role": "assistant", "content": "" }), None));
    let tokens = g
        .words
        .iter()
        .enumerate()
        .map(|(i, word)| g.chunk(OBJECT, choice(json!({ "content": text::word_delta(i, word) }), None)))
        .collect();
    let finish = json!({ "index": 0, "delta": {}, "logprobs": null, "finish_reason": g.reason.as_str() });
    (Some(head), tokens, g.tail(OBJECT, finish))
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
    let prompt: Vec<&str> = prompts.iter().map(|p| p.text.as_str()).collect();
    let (count, reason) = text::completion_len(request.max_tokens, state.output_tokens);
    let generation = Generation {
        id: state.response_id("cmpl"),
        created: super::unix_now(),
        model: request.model,
        prompt_tokens: prompts.iter().map(|p| p.tokens).fold(0, u32::saturating_add),
        words: text::completion_words(&prompt.join("\n"), count),
        reason,
        include_usage: request.stream_options.is_some_and(|o| o.include_usage),
    };
    let guard = counters.admit(generation.prompt_tokens).await;
    if request.stream.unwrap_or(false) {
        return Ok(sse_response(timing, completion_chunks(&generation), guard, reason));
    }
    finish_plain(timing, count, guard, reason).await;
    let choice = completion_choice(&generation.words.join(" "), Some(reason.as_str()));
    let body = json!({
        "id": generation.id, "object": "text_completion", "created": generation.created,
        "model": generation.model, "choices": [choice], "usage": generation.usage(),
    });
    Ok(Json(body).into_response())
}

fn completion_choice(text: &str, finish: Option<&str>) -> Value {
    json!({ "index": 0, "text": text, "logprobs": null, "finish_reason": finish })
}

/// One text chunk per token, then an empty-text chunk with the finish reason (and usage).
fn completion_chunks(g: &Generation) -> (Option<Value>, Vec<Value>, Vec<Value>) {
    const OBJECT: &str = "text_completion";
    let tokens = g
        .words
        .iter()
        .enumerate()
        .map(|(i, word)| g.chunk(OBJECT, json!([completion_choice(&text::word_delta(i, word), None)])))
        .collect();
    (None, tokens, g.tail(OBJECT, completion_choice("", Some(g.reason.as_str()))))
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
