//! Decoding Gemini `generateContent` answers (from providers) into the neutral form, and the
//! pieces the stream decoder shares: call ids, finish reasons, usage.

use serde_json::Value;

use super::super::ir::{Block, Finish, Response, Usage};
use super::super::json::{array, invalid, map, object, opt_string};
use super::super::TranslateError;
use super::decode::{parts, Calls};

/// Decodes a `generateContent` answer from a Gemini provider (the first candidate). A prompt
/// Gemini blocked (no candidate, a `promptFeedback.blockReason`) is an empty content-filtered
/// answer.
///
/// # Errors
/// The body is not a `generateContent` answer.
pub fn decode_response(body: &[u8]) -> Result<Response, TranslateError> {
    let mut doc = object(body)?;
    let id = opt_string(&mut doc, "responseId", "")?.unwrap_or_default();
    let model = opt_string(&mut doc, "modelVersion", "")?.unwrap_or_default();
    let usage = doc.get("usageMetadata").map(usage).unwrap_or_default();
    let candidates = match doc.remove("candidates") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => array("candidates", v)?,
    };
    let Some(candidate) = candidates.into_iter().next() else {
        if doc.get("promptFeedback").and_then(|f| f.get("blockReason")).is_some() {
            return Ok(Response { id, model, content: Vec::new(), finish: Finish::ContentFilter, usage });
        }
        return Err(invalid("candidates", "at least one candidate"));
    };
    let mut candidate = map("candidates[0]", candidate)?;
    let mut calls = Calls::new(call_prefix(&id));
    let content = match candidate.remove("content") {
        None | Some(Value::Null) => Vec::new(),
        Some(c) => {
            let mut c = map("candidates[0].content", c)?;
            match c.remove("parts") {
                None | Some(Value::Null) => Vec::new(),
                Some(p) => parts("candidates[0].content", p, &mut calls)?,
            }
        }
    };
    let called = content.iter().any(|b| matches!(b, Block::ToolCall(_)));
    let finish = finish(candidate.get("finishReason").and_then(Value::as_str), called);
    Ok(Response { id, model, content, finish, usage })
}

/// Call ids of one answer: `call_<responseId>_<n>`, unique across the conversation (the
/// response id reduced to the characters every dialect's ids allow).
pub(crate) fn call_prefix(response_id: &str) -> String {
    let clean: String = response_id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-').collect();
    if clean.is_empty() {
        "call_".into()
    } else {
        format!("call_{clean}_")
    }
}

/// A neutral finish; Gemini says `STOP` after function calls too.
pub(crate) fn finish(reason: Option<&str>, called: bool) -> Finish {
    match reason {
        Some("MAX_TOKENS") => Finish::Length,
        Some(
            "SAFETY"
            | "RECITATION"
            | "LANGUAGE"
            | "BLOCKLIST"
            | "PROHIBITED_CONTENT"
            | "SPII"
            | "IMAGE_SAFETY"
            | "IMAGE_PROHIBITED_CONTENT"
            | "IMAGE_RECITATION",
        ) => Finish::ContentFilter,
        _ if called => Finish::ToolCalls,
        _ => Finish::Stop,
    }
}

/// Neutral usage from `usageMetadata`: reasoning (`thoughtsTokenCount`) is output, tool-use
/// prompts are input; `promptTokenCount` already includes the cached tokens.
pub(crate) fn usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Usage {
        input: n("promptTokenCount").saturating_add(n("toolUsePromptTokenCount")),
        output: n("candidatesTokenCount").saturating_add(n("thoughtsTokenCount")),
        cached: n("cachedContentTokenCount"),
        cache_write: 0,
    }
}
