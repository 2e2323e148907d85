//! Gemini dialect of the simulated engine: `POST /v1beta/models/{model}:generateContent` and
//! `:streamGenerateContent`, with the shapes and errors of Google's public Gemini API.
//!
//! `streamGenerateContent?alt=sse` answers Server-Sent Events framed as Google frames them
//! (`data: <GenerateContentResponse>\r\n\r\n`, no terminator); without `alt=sse` the same
//! responses come as one streamed JSON array. Each chunk carries one token of text (or the
//! whole function call) and the cumulative `usageMetadata`; the last one the `finishReason`.
//! Fields are read in both spellings the API accepts (`generationConfig` and
//! `generation_config`); an unknown top-level field, empty `contents` or a role other than
//! `user`/`model` is a 400 `INVALID_ARGUMENT` (request parsing is in `gemini/request.rs`).
//! Keys (`x-goog-api-key`, `?key=`) are not checked, as the OpenAI side ignores
//! `Authorization`.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::{json, Value};

use super::error::{Dialect, SimError};
use super::faults::{self, ExtraDelay};
use super::prefix::with_header;
use super::reply::{self, Ending, Reply};
use super::stream::{finish_plain, frames_response, Frame, Timing};
use super::SimState;

mod request;

use request::parse_request;

/// How the answer goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delivery {
    /// `generateContent`: one response object.
    Plain,
    /// `streamGenerateContent?alt=sse`: `data:` events.
    Sse,
    /// `streamGenerateContent` without `alt=sse`: a streamed JSON array.
    Array,
}

/// One answered request: what every rendering needs.
struct Answer {
    model: String,
    response_id: String,
    prompt_tokens: u32,
    reply: Reply,
}

impl Answer {
    /// A GenerateContentResponse with `parts`, the `finish` reason if final, and usage
    /// counting `tokens` generated so far.
    fn response(&self, parts: Value, finish: Option<&str>, tokens: u32) -> Value {
        let mut candidate = json!({ "content": { "role": "model", "parts": parts }, "index": 0 });
        if let Some(reason) = finish {
            candidate["finishReason"] = json!(reason);
        }
        json!({
            "candidates": [candidate],
            "usageMetadata": {
                "promptTokenCount": self.prompt_tokens,
                "candidatesTokenCount": tokens,
                "totalTokenCount": self.prompt_tokens.saturating_add(tokens),
            },
            "modelVersion": self.model,
            "responseId": self.response_id,
        })
    }

    /// `MAX_TOKENS` when the cap cut the text, `STOP` otherwise (function calls too).
    fn finish_reason(&self) -> &'static str {
        match self.reply {
            Reply::Text { ending: Ending::Length, .. } => "MAX_TOKENS",
            _ => "STOP",
        }
    }

    /// The streamed responses: one per text delta (at least one), or one with the call.
    fn chunks(&self) -> Vec<(Value, u32)> {
        let finish = self.finish_reason();
        let deltas = match &self.reply {
            Reply::Tool(call) => {
                let part = json!([{ "functionCall": { "name": call.name, "args": call.arguments } }]);
                return vec![(self.response(part, Some(finish), call.tokens()), call.tokens())];
            }
            Reply::Text { deltas, .. } if deltas.is_empty() => vec![String::new()],
            Reply::Text { deltas, .. } => deltas.clone(),
        };
        let last = deltas.len() - 1;
        let mut sent = 0;
        let mut chunks = Vec::with_capacity(deltas.len());
        for (index, text) in deltas.into_iter().enumerate() {
            let tokens = u32::from(!text.is_empty());
            sent += tokens;
            let finish = (index == last).then_some(finish);
            chunks.push((self.response(json!([{ "text": text }]), finish, sent), tokens));
        }
        chunks
    }

    /// The whole answer as one response.
    fn body(&self) -> Value {
        let part = match &self.reply {
            Reply::Tool(call) => json!({ "functionCall": { "name": call.name, "args": call.arguments } }),
            Reply::Text { .. } => json!({ "text": self.reply.text() }),
        };
        self.response(json!([part]), Some(self.finish_reason()), self.reply.tokens())
    }
}

/// `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent`.
pub async fn generate(
    State(state): State<Arc<SimState>>,
    extra: Option<Extension<ExtraDelay>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(&state, extra.map(|Extension(e)| e), &uri, &headers, &body)
        .await
        .unwrap_or_else(|e| e.render(Dialect::Gemini))
}

async fn serve(
    state: &SimState,
    extra: Option<ExtraDelay>,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, SimError> {
    let (model, delivery) = route(uri)?;
    let counters = state.model(model)?;
    let request = parse_request(body)?;
    let timing = Timing::for_request(state, headers, extra)?;
    let (mut ask, prompt_tokens) = request.ask();
    ask.echo = faults::echo_tools(headers).then(|| request.traffic());
    let answer = Answer {
        model: model.to_owned(),
        response_id: state.unique_id(""),
        prompt_tokens,
        reply: reply::answer_with(&ask, state.output_tokens, faults::knobs(headers)?)?,
    };
    let reason = answer.reply.engine_reason();
    let guard = counters.admit(prompt_tokens).await;
    let hit = counters.prefix_lookup(&ask.prompt, prompt_tokens, faults::kv_drop(headers));
    let timing = timing.after_prefill(&hit);
    if delivery == Delivery::Plain {
        finish_plain(timing, answer.reply.tokens(), guard, reason).await;
        return Ok(with_header(Json(answer.body()).into_response(), hit));
    }
    let content_type = if delivery == Delivery::Sse { "text/event-stream" } else { "application/json" };
    Ok(with_header(frames_response(timing, frames(&answer, delivery), guard, reason, content_type), hit))
}

/// The model and the delivery a request path (and its `alt` query) asks for.
fn route(uri: &Uri) -> Result<(&str, Delivery), SimError> {
    let not_found = || SimError::RouteNotFound(uri.path().to_owned());
    let action = uri.path().strip_prefix("/v1beta/models/").ok_or_else(not_found)?;
    let (model, method) = action.rsplit_once(':').ok_or_else(not_found)?;
    let sse = uri.query().unwrap_or_default().split('&').any(|pair| pair == "alt=sse");
    match method {
        "generateContent" => Ok((model, Delivery::Plain)),
        "streamGenerateContent" if sse => Ok((model, Delivery::Sse)),
        "streamGenerateContent" => Ok((model, Delivery::Array)),
        _ => Err(not_found()),
    }
}

/// The frames of a streamed answer: CRLF-framed `data:` events, or the pieces of a JSON array.
fn frames(answer: &Answer, delivery: Delivery) -> Vec<Frame> {
    let chunks = answer.chunks();
    if delivery == Delivery::Sse {
        return chunks
            .into_iter()
            .map(|(chunk, tokens)| Frame::raw(format!("data: {chunk}\r\n\r\n"), tokens))
            .collect();
    }
    let separators = std::iter::once("[").chain(std::iter::repeat(",\r\n"));
    let mut frames: Vec<Frame> = chunks
        .into_iter()
        .zip(separators)
        .map(|((chunk, tokens), sep)| Frame::raw(format!("{sep}{chunk}"), tokens))
        .collect();
    frames.push(Frame::raw("]".to_owned(), 0));
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_split_model_method_and_alt() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert_eq!(route(&uri("/v1beta/models/m:generateContent")).unwrap(), ("m", Delivery::Plain));
        assert_eq!(route(&uri("/v1beta/models/m:streamGenerateContent?key=k&alt=sse")).unwrap(), ("m", Delivery::Sse));
        assert_eq!(route(&uri("/v1beta/models/m:streamGenerateContent")).unwrap(), ("m", Delivery::Array));
        assert!(route(&uri("/v1beta/models/m:embedContent")).is_err());
        assert!(route(&uri("/v1beta/models/m")).is_err());
    }
}
