//! `POST /v1/messages/count_tokens`, answered by the gateway as an **estimate**: the
//! provider's tokenizer is not available in the proxy, and counting must not cost a network
//! hop. The estimate is one token per four bytes of text (system, messages, tool results and
//! tool definitions as JSON), plus a small overhead per message and per image — close for
//! English prose, low for code and non-Latin scripts. The README says so.

use serde_json::Value;

use super::anthropic::decode_request;
use super::ir::{Block, Image};
use super::TranslateError;
use crate::auth::Caller;
use crate::config::Config;
use crate::openai::ApiError;

/// Tokens charged per message for role and framing.
const PER_MESSAGE: u64 = 3;
/// Tokens charged per image (Anthropic bills about 1,600 for a 1,092×1,092 image).
const PER_IMAGE: u64 = 1_600;

/// The estimated `input_tokens` of a Messages request body, and the model it names.
///
/// # Errors
/// The body is not a Messages request.
pub fn estimate(body: &[u8]) -> Result<(String, u64), TranslateError> {
    let req = decode_request(body)?;
    let mut bytes: u64 = req.system.iter().map(|t| t.text.len() as u64).sum();
    let mut extra = 0;
    for m in &req.messages {
        extra += PER_MESSAGE;
        for b in &m.content {
            let (b, i) = block_size(b);
            bytes += b;
            extra += i;
        }
    }
    for t in &req.tools {
        bytes += (t.name.len() + t.description.as_ref().map_or(0, String::len)) as u64 + json_len(&t.parameters);
    }
    Ok((req.model, bytes.div_ceil(4) + extra))
}

/// Text bytes and fixed token charges of one block.
fn block_size(b: &Block) -> (u64, u64) {
    match b {
        Block::Text(t) => (t.text.len() as u64, 0),
        Block::Image(Image::Inline { .. } | Image::Url { .. }) => (0, PER_IMAGE),
        Block::ToolCall(c) => ((c.name.len() as u64) + json_len(&c.arguments), 0),
        Block::ToolResult(r) => r.content.iter().map(block_size).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1)),
        Block::Thinking(t) => (t.text.len() as u64, 0),
    }
}

fn json_len(v: &Value) -> u64 {
    serde_json::to_vec(v).map_or(0, |j| j.len() as u64)
}

/// The answer body: `{"input_tokens": n}`.
pub fn answer(tokens: u64) -> Vec<u8> {
    format!(r#"{{"input_tokens":{tokens}}}"#).into_bytes()
}

/// The whole answer to a `count_tokens` request from `caller`: the estimate's body, or the
/// error for a body that is not a Messages request (400) or a model the caller may not use.
///
/// # Errors
/// The [`ApiError`] to answer in the caller's dialect.
pub fn answer_for(config: &Config, caller: Caller, body: &[u8]) -> Result<Vec<u8>, ApiError> {
    let (model, tokens) = estimate(body).map_err(|e| ApiError::bad_request(e.to_string()))?;
    config.authorize(caller, &model)?;
    Ok(answer(tokens))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_grow_with_the_prompt_and_count_images() {
        let short = br#"{"model":"m","messages":[{"role":"user","content":"Hello, world"}]}"#;
        let (model, n) = estimate(short).unwrap();
        assert_eq!((model.as_str(), n), ("m", 3 + 3));
        let long =
            format!(r#"{{"model":"m","system":"{}","messages":[{{"role":"user","content":"x"}}]}}"#, "a".repeat(400));
        assert_eq!(estimate(long.as_bytes()).unwrap().1, 101 + 3);
        let image = br#"{"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}]}"#;
        assert_eq!(estimate(image).unwrap().1, 3 + PER_IMAGE);
        assert!(estimate(b"{").is_err());
    }

    #[test]
    fn the_answer_needs_a_messages_body_and_a_model_the_caller_may_use() {
        let yaml = include_str!("../../../../testdata/config/minimal.yaml").replace("gpt-4o-mini", "m");
        let config = Config::try_from(serde_saphyr::from_str::<crate::RawConfig>(&yaml).unwrap()).unwrap();
        let body = br#"{"model":"m","messages":[{"role":"user","content":"Hello, world"}]}"#;
        assert_eq!(answer_for(&config, Caller::Open, body).unwrap(), br#"{"input_tokens":6}"#);
        assert_eq!(answer_for(&config, Caller::Open, b"{").unwrap_err().status, 400);
        let other = br#"{"model":"nope","messages":[{"role":"user","content":"x"}]}"#;
        assert_eq!(answer_for(&config, Caller::Open, other).unwrap_err().status, 404);
    }
}
