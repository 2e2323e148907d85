//! The simulated engine's token ids and vLLM's `POST /tokenize`.
//!
//! The sim's tokens are whitespace words (see `super::prefix`); a word's token id is a stable
//! hash of it, so the same prompt always gives the same ids, on every machine and run. The ids
//! are what the KV-cache events carry (`super::kv_events`), and `/tokenize` answers them for
//! exactly the text the prefix cache cuts into blocks: the `role: text` lines of
//! [`super::reply::prompt`] for `messages`, the joined completion text for `prompt`. So a
//! router that tokenizes through `/tokenize` sees the token ids the engine's events report.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::SimError;
use super::openai::{self, ChatMessage};
use super::reply;
use super::text::{self, fnv1a};
use super::SimState;

/// `max_model_len` reported by `/tokenize` (the sim has no real context limit).
pub const MAX_MODEL_LEN: u32 = 32_768;
/// Ids below this are left for special tokens, as real vocabularies do.
const FIRST_WORD_ID: u32 = 100;
/// Number of distinct word ids.
const WORD_IDS: u64 = 1_000_000;

/// The token id of one word: a stable hash of it, in `100..1_000_100`.
pub fn token_id(word: &str) -> u32 {
    // The remainder is below 1_000_000, so it always fits.
    u32::try_from(fnv1a(word.as_bytes()) % WORD_IDS).unwrap_or(0) + FIRST_WORD_ID
}

/// The token ids of `prompt`: one per whitespace-separated word, in order.
pub fn token_ids(prompt: &str) -> Vec<u32> {
    prompt.split_whitespace().map(token_id).collect()
}

/// vLLM's tokenize request: chat `messages` or a completion `prompt` (other fields ignored).
#[derive(Debug, Deserialize)]
struct TokenizeRequest {
    model: Option<String>,
    messages: Option<Vec<ChatMessage>>,
    prompt: Option<Value>,
}

impl TokenizeRequest {
    /// The text the prefix cache would cut into blocks for the same request.
    fn cached_text(&self) -> Result<String, SimError> {
        match (&self.messages, &self.prompt) {
            (Some(messages), _) => Ok(reply::prompt(&openai::chat_turns(messages)).0),
            (None, Some(prompt)) => text::prompt_inputs(prompt)
                .map(|prompts| openai::completion_prompt(&prompts))
                .ok_or_else(|| SimError::BadRequest("prompt must be a string, strings or token ids".into())),
            (None, None) => Err(SimError::BadRequest("Either `messages` or `prompt` is required".into())),
        }
    }
}

/// `POST /tokenize`: `{"count", "max_model_len", "tokens", "token_strs": null}`.
pub async fn tokenize(State(state): State<Arc<SimState>>, body: Bytes) -> Result<Json<Value>, SimError> {
    let request: TokenizeRequest = openai::parse(&body)?;
    if let Some(model) = &request.model {
        state.model(model)?;
    }
    let tokens = token_ids(&request.cached_text()?);
    Ok(Json(json!({
        "count": tokens.len(), "max_model_len": MAX_MODEL_LEN, "tokens": tokens, "token_strs": null,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt as _;

    async fn post(app: &axum::Router, body: Value) -> (u16, Value) {
        let request = axum::http::Request::post("/tokenize")
            .header("content-type", "application/json")
            .body(axum::body::Body::from(body.to_string()))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[test]
    fn ids_are_stable_per_word() {
        assert_eq!(token_ids("a  b\na"), [token_id("a"), token_id("b"), token_id("a")]);
        assert_ne!(token_id("a"), token_id("b"));
        assert!(token_ids("x y z").iter().all(|id| (100..1_000_100).contains(id)));
        assert!(token_ids(" \n").is_empty());
    }

    #[tokio::test]
    async fn tokenize_answers_the_cached_text_of_chat_and_completions() {
        let app = super::super::router(&super::super::SimArgs::default());
        let chat = json!({"model": "sim-small", "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": [{"type": "text", "text": "hi"}]}]});
        let (status, body) = post(&app, chat).await;
        assert_eq!(status, 200);
        let expected = token_ids("system: be brief\nuser: hi");
        assert_eq!(body, json!({"count": 5, "max_model_len": 32768, "tokens": expected, "token_strs": null}));
        let (status, body) = post(&app, json!({"model": "sim-small", "prompt": ["one two", "three"]})).await;
        assert_eq!(status, 200);
        assert_eq!(body["tokens"], json!(token_ids("one two\nthree")));
    }

    #[tokio::test]
    async fn tokenize_refuses_bad_bodies_and_unknown_models() {
        let app = super::super::router(&super::super::SimArgs::default());
        let (status, body) = post(&app, json!({"model": "sim-small"})).await;
        assert_eq!(status, 400);
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(post(&app, json!({"prompt": 7})).await.0, 400);
        assert_eq!(post(&app, json!({"messages": "nope"})).await.0, 400);
        assert_eq!(post(&app, json!({"model": "other", "prompt": "x"})).await.0, 404);
    }
}
