//! The text parts of (non-streamed) answers: every choice or candidate, not only the first.

use serde_json::Value;

use super::request::{anthropic_block, chat_message, gemini_parts, responses_item};
use super::{items, text, Flow, Visit, GO};

/// A chat completion: each choice's message content, refusal and tool call arguments.
pub(super) fn chat(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    for choice in items(doc.get_mut("choices")) {
        if let Some(message) = choice.get_mut("message") {
            chat_message(message, f)?;
        }
    }
    GO
}

/// A completion: each choice's text.
pub(super) fn completions(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    items(doc.get_mut("choices")).try_for_each(|choice| text(choice.get_mut("text"), f))
}

/// A Messages answer: its text blocks and every string of its `tool_use` inputs.
pub(super) fn messages(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    items(doc.get_mut("content")).try_for_each(|b| anthropic_block(b, f))
}

/// A `generateContent` answer: each candidate's text parts and function call arguments.
pub(super) fn gemini(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    for candidate in items(doc.get_mut("candidates")) {
        if let Some(content) = candidate.get_mut("content") {
            gemini_parts(content, f)?;
        }
    }
    GO
}

/// A `response` object: the `output` items' text and refusal parts and function call
/// arguments, then the SDK's convenience `output_text` when a server filled it in. The
/// echoed `instructions` are the request's, not the answer's.
pub(super) fn responses(doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    items(doc.get_mut("output")).try_for_each(|item| responses_item(item, f))?;
    text(doc.get_mut("output_text"), f)
}
