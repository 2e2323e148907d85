//! Decoding Converse answers (from Bedrock) into the neutral form, and the pieces the stream
//! decoder shares: finish reasons and usage.
//!
//! A Converse answer has no id: the neutral id is empty, as for a Gemini answer without
//! `responseId`, and each client dialect's encoder writes what it writes then. Reasoning
//! Bedrock redacted (`redactedContent`, encrypted) has no neutral counterpart and is left out
//! (documented); citations keep their generated text.

use serde_json::{json, Value};

use super::super::ir::{Block, Finish, Response, Text, Thinking, ToolCall, Usage};
use super::super::json::{array, invalid, map, object, string, unsupported};
use super::super::TranslateError;

/// Decodes a Converse answer (`output.message`, `stopReason`, `usage`).
///
/// # Errors
/// The body is not a Converse answer, or holds a block no client dialect can carry.
pub fn decode_response(body: &[u8]) -> Result<Response, TranslateError> {
    let mut doc = object(body)?;
    let usage = doc.get("usage").map(usage).unwrap_or_default();
    let stop = doc.get("stopReason").and_then(Value::as_str).map(str::to_string);
    let mut output = map("output", doc.remove("output").unwrap_or(Value::Null))?;
    let content = match output.remove("message") {
        None | Some(Value::Null) => Vec::new(),
        Some(m) => {
            let mut m = map("output.message", m)?;
            let items = array("output.message.content", m.remove("content").unwrap_or_else(|| json!([])))?;
            let mut content = Vec::new();
            for (i, b) in items.into_iter().enumerate() {
                block(&format!("output.message.content[{i}]"), b, &mut content)?;
            }
            content
        }
    };
    let called = content.iter().any(|b| matches!(b, Block::ToolCall(_)));
    Ok(Response { id: String::new(), model: String::new(), content, finish: finish(stop.as_deref(), called), usage })
}

/// One content block of the answer (a union: its one key says which).
fn block(path: &str, v: Value, out: &mut Vec<Block>) -> Result<(), TranslateError> {
    let b = map(path, v)?;
    let Some((kind, v)) = b.into_iter().find(|(_, v)| !v.is_null()) else {
        return Err(invalid(path, "a content block"));
    };
    let at = format!("{path}.{kind}");
    match kind.as_str() {
        "text" => out.push(Block::Text(Text { text: string(&at, v)?, cache: None })),
        "toolUse" => {
            let mut u = map(&at, v)?;
            let id = string(&format!("{at}.toolUseId"), u.remove("toolUseId").unwrap_or(Value::Null))?;
            let name = string(&format!("{at}.name"), u.remove("name").unwrap_or(Value::Null))?;
            let arguments = u.remove("input").filter(|i| !i.is_null()).unwrap_or_else(|| json!({}));
            out.push(Block::ToolCall(ToolCall { id, name, arguments }));
        }
        "reasoningContent" => {
            if let Some(r) = v.get("reasoningText") {
                let text = r.get("text").and_then(Value::as_str).unwrap_or_default().to_string();
                let signature = r.get("signature").and_then(Value::as_str).map(str::to_string);
                out.push(Block::Thinking(Thinking { text, signature }));
            }
        }
        "citationsContent" => {
            let parts = v.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
            let text: String = parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect();
            out.push(Block::Text(Text { text, cache: None }));
        }
        "cachePoint" => {}
        _ => return Err(unsupported(&at)),
    }
    Ok(())
}

/// The neutral finish of a `stopReason`: a context window overrun is a length stop, guardrails
/// and content filters are content filtering, and malformed model output ends the answer as
/// it stands.
pub(crate) fn finish(reason: Option<&str>, called: bool) -> Finish {
    match reason {
        Some("tool_use") => Finish::ToolCalls,
        Some("max_tokens" | "model_context_window_exceeded") => Finish::Length,
        // Converse does not say which sequence matched.
        Some("stop_sequence") => Finish::StopSequence(None),
        Some("guardrail_intervened" | "content_filtered") => Finish::ContentFilter,
        Some("end_turn" | "malformed_model_output" | "malformed_tool_use") => Finish::Stop,
        _ if called => Finish::ToolCalls,
        _ => Finish::Stop,
    }
}

/// Neutral usage from Converse's `usage`, whose `inputTokens` leaves out the prompt tokens
/// read from and written to the cache (as Anthropic's `input_tokens` does).
pub(crate) fn usage(u: &Value) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (cached, cache_write) = (n("cacheReadInputTokens"), n("cacheWriteInputTokens"));
    Usage {
        input: n("inputTokens").saturating_add(cached).saturating_add(cache_write),
        output: n("outputTokens"),
        cached,
        cache_write,
    }
}
