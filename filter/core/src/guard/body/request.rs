//! The text parts of requests, and the per-dialect pieces answers share with them.

use serde_json::Value;

use super::{at, items, kind, strings, text, text_or_parts, Flow, Visit, GO};

/// Chat completions: each message's content (a string, or its `text` and `refusal` parts;
/// images, audio and files are not text), an assistant's refusal and tool call arguments.
/// Names and tool call ids are not text parts.
pub(super) fn chat(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    for m in items(doc.get_mut("messages")) {
        chat_message(m, f)?;
    }
    GO
}

/// One chat message (or an answer's `message`).
pub(super) fn chat_message(m: &mut Value, f: &mut Visit<'_>) -> Flow {
    text_or_parts(m.get_mut("content"), chat_part, f)?;
    text(m.get_mut("refusal"), f)?;
    for call in items(m.get_mut("tool_calls")) {
        // JSON in a string, scanned as text.
        text(at(call, &["function", "arguments"]), f)?;
    }
    // The deprecated single function call.
    text(at(m, &["function_call", "arguments"]), f)
}

/// Where the text of a chat content part is.
fn chat_part(kind: &str) -> Option<&'static str> {
    match kind {
        "text" => Some("text"),
        "refusal" => Some("refusal"),
        _ => None,
    }
}

/// Anthropic Messages: the system prompt (a string or text blocks), then each message's
/// content (a string or blocks, see [`anthropic_block`]).
pub(super) fn messages(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    anthropic_content(doc.get_mut("system"), f)?;
    for m in items(doc.get_mut("messages")) {
        anthropic_content(m.get_mut("content"), f)?;
    }
    GO
}

/// A string, or a list of blocks.
fn anthropic_content(v: Option<&mut Value>, f: &mut Visit<'_>) -> Flow {
    match v {
        Some(Value::Array(blocks)) => blocks.iter_mut().try_for_each(|b| anthropic_block(b, f)),
        other => text(other, f),
    }
}

/// One content block: a `text` block's text, every string of a `tool_use` input, a
/// `tool_result`'s content, a plain-text `document`'s data or content. Images and signed
/// `thinking` are not touched.
pub(super) fn anthropic_block(b: &mut Value, f: &mut Visit<'_>) -> Flow {
    match kind(b, &["text", "tool_use", "tool_result", "document"]) {
        Some("text") => text(b.get_mut("text"), f),
        Some("tool_use") => strings(b.get_mut("input"), f),
        Some("tool_result") => anthropic_content(b.get_mut("content"), f),
        Some(_) => match b.get_mut("source") {
            Some(source) => match kind(source, &["text", "content"]) {
                Some("text") => text(source.get_mut("data"), f),
                Some(_) => anthropic_content(source.get_mut("content"), f),
                None => GO,
            },
            None => GO,
        },
        None => GO,
    }
}

/// Gemini `generateContent`: the system instruction's parts, then each content's parts (see
/// [`gemini_part`]). Keys are taken in lowerCamelCase and in `snake_case` (proto JSON reads
/// both).
pub(super) fn gemini(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    for system in gemini_fields(doc, "systemInstruction", "system_instruction") {
        gemini_parts(system, f)?;
    }
    for content in items(doc.get_mut("contents")) {
        gemini_parts(content, f)?;
    }
    GO
}

/// The parts of a Gemini content.
pub(super) fn gemini_parts(content: &mut Value, f: &mut Visit<'_>) -> Flow {
    items(content.get_mut("parts")).try_for_each(|part| gemini_part(part, f))
}

/// One part: its text (a thought's too), every string of a function call's `args` and of a
/// function response's `response`. Inline data and file URIs are not text.
fn gemini_part(part: &mut Value, f: &mut Visit<'_>) -> Flow {
    text(part.get_mut("text"), f)?;
    for call in gemini_fields(part, "functionCall", "function_call") {
        strings(call.get_mut("args"), f)?;
    }
    for response in gemini_fields(part, "functionResponse", "function_response") {
        strings(response.get_mut("response"), f)?;
    }
    GO
}

/// The field of a Gemini object under either spelling of its name.
fn gemini_fields<'v>(
    v: &'v mut Value,
    camel: &'static str,
    snake: &'static str,
) -> impl Iterator<Item = &'v mut Value> {
    let fields = v.as_object_mut().into_iter().flat_map(|m| m.iter_mut());
    fields.filter(move |(k, _)| *k == camel || *k == snake).map(|(_, v)| v)
}

/// OpenAI Responses: `instructions`, then `input` (a string, or items: see
/// [`responses_item`]).
pub(super) fn responses(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    text(doc.get_mut("instructions"), f)?;
    match doc.get_mut("input") {
        Some(Value::Array(list)) => list.iter_mut().try_for_each(|item| responses_item(item, f)),
        other => text(other, f),
    }
}

/// One input or output item: a message's content (a string, or its text and refusal parts),
/// a function call's arguments (JSON in a string, scanned as text), a function call output
/// (a string or text parts). Reasoning items are the provider's and are left alone.
pub(super) fn responses_item(item: &mut Value, f: &mut Visit<'_>) -> Flow {
    let kind = match item.get("type") {
        None | Some(Value::Null) => Some("message"),
        Some(_) => kind(item, &["message", "function_call", "function_call_output"]),
    };
    match kind {
        Some("message") => text_or_parts(item.get_mut("content"), responses_part, f),
        Some("function_call") => text(item.get_mut("arguments"), f),
        Some(_) => text_or_parts(item.get_mut("output"), responses_part, f),
        None => GO,
    }
}

/// Where the text of a Responses content part is.
fn responses_part(kind: &str) -> Option<&'static str> {
    match kind {
        "input_text" | "output_text" => Some("text"),
        "refusal" => Some("refusal"),
        _ => None,
    }
}
