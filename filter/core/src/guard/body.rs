//! The text parts of a JSON request body or (non-streamed) answer, per dialect: what the
//! guardrails scan and rewrite, and nothing else. Image and audio data, URLs, ids, names,
//! numbers and settings are never handed to a rule, so a redaction cannot break them.
//!
//! [`rewrite`] parses the body, calls its callback on each text part in document order and
//! re-serialises the body only when a text actually changed; otherwise the caller forwards the
//! original bytes untouched. [`texts`] and [`text_chars`] read the same parts. Which fields are
//! text follows the shapes the translators accept (`crate::translate`), plus the few that
//! pass through to a provider of the same dialect (Anthropic text documents, legacy chat
//! `function_call`s, Responses refusals). Signed reasoning (Anthropic `thinking`, Responses
//! `reasoning` items) is left alone: a changed one would be refused by its provider.
//!
//! Parts a dialect spells in a shape the walk does not know are skipped, not refused: the
//! provider (or the translator) refuses them anyway. A body that is not a JSON object is an
//! error ([`BodyError`]) for the caller to refuse.

use std::ops::ControlFlow;

use serde_json::Value;

mod answer;
mod request;

/// The JSON shape a body has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Shape {
    /// An OpenAI chat completions request.
    ChatRequest,
    /// An OpenAI chat completion.
    ChatAnswer,
    /// An OpenAI (legacy) completions request.
    CompletionsRequest,
    /// An OpenAI (legacy) completion.
    CompletionsAnswer,
    /// An OpenAI embeddings request.
    EmbeddingsRequest,
    /// An Anthropic Messages request.
    MessagesRequest,
    /// An Anthropic Messages answer.
    MessagesAnswer,
    /// A Gemini `generateContent` request.
    GeminiRequest,
    /// A Gemini `generateContent` answer.
    GeminiAnswer,
    /// An OpenAI Responses request.
    ResponsesRequest,
    /// An OpenAI Responses `response` object.
    ResponsesAnswer,
}

impl Shape {
    /// Every shape.
    pub const ALL: [Shape; 11] = [
        Shape::ChatRequest,
        Shape::ChatAnswer,
        Shape::CompletionsRequest,
        Shape::CompletionsAnswer,
        Shape::EmbeddingsRequest,
        Shape::MessagesRequest,
        Shape::MessagesAnswer,
        Shape::GeminiRequest,
        Shape::GeminiAnswer,
        Shape::ResponsesRequest,
        Shape::ResponsesAnswer,
    ];
}

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// Not JSON (or JSON nested deeper than the parser allows).
    #[error("the body is not valid JSON: {0}")]
    Json(String),
    /// JSON, but not an object.
    #[error("the body is not a JSON object")]
    NotObject,
    /// The rewritten body could not be serialised.
    #[error("the rewritten body could not be written: {0}")]
    Write(String),
}

/// Why [`rewrite`] gave no body.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError<E> {
    /// The body could not be read (or written).
    #[error(transparent)]
    Body(#[from] BodyError),
    /// The callback's error (a block), which stopped the walk at that text part.
    #[error("a text part was refused")]
    Stopped(E),
}

/// Calls `f` on every text part of `body` in order; `f` returns `Some(new text)` to replace
/// it. Returns `Ok(None)` when nothing was replaced (a replacement equal to the text counts as
/// none), and the caller forwards the original bytes verbatim; `Ok(Some(bytes))` with the
/// re-serialised body otherwise (same values, object keys possibly reordered).
///
/// # Errors
/// [`RewriteError::Body`] when the body is not a JSON object; [`RewriteError::Stopped`] with
/// the first error `f` returned (no later part is visited).
pub fn rewrite<E>(
    shape: Shape,
    body: &[u8],
    f: &mut dyn FnMut(&str) -> Result<Option<String>, E>,
) -> Result<Option<Vec<u8>>, RewriteError<E>> {
    let mut doc = parse(body)?;
    let mut changed = false;
    let mut stopped = None;
    let _ = walk(shape, &mut doc, &mut |text: &mut String| match f(text) {
        Ok(Some(new)) => {
            if new != *text {
                *text = new;
                changed = true;
            }
            GO
        }
        Ok(None) => GO,
        Err(e) => {
            stopped = Some(e);
            ControlFlow::Break(())
        }
    });
    if let Some(e) = stopped {
        return Err(RewriteError::Stopped(e));
    }
    if !changed {
        return Ok(None);
    }
    serde_json::to_vec(&doc).map(Some).map_err(|e| BodyError::Write(e.to_string()).into())
}

/// Every text part of `body`, in order (for external checks that want the texts).
///
/// # Errors
/// The body is not a JSON object.
pub fn texts(shape: Shape, body: &[u8]) -> Result<Vec<String>, BodyError> {
    let mut doc = parse(body)?;
    let mut out = Vec::new();
    let _ = walk(shape, &mut doc, &mut |text: &mut String| {
        out.push(text.clone());
        GO
    });
    Ok(out)
}

/// The total length of the text parts of `body`, in chars (for `max_prompt_chars`).
///
/// # Errors
/// The body is not a JSON object.
pub fn text_chars(shape: Shape, body: &[u8]) -> Result<usize, BodyError> {
    let mut doc = parse(body)?;
    let mut total = 0usize;
    let _ = walk(shape, &mut doc, &mut |text: &mut String| {
        total = total.saturating_add(text.chars().count());
        GO
    });
    Ok(total)
}

/// Whether a walk goes on (`Continue`) or was stopped by its visitor (`Break`).
type Flow = ControlFlow<()>;

/// Go on.
const GO: Flow = ControlFlow::Continue(());

/// What a walk calls on each text part.
type Visit<'a> = dyn FnMut(&mut String) -> Flow + 'a;

/// The body as a JSON object.
fn parse(body: &[u8]) -> Result<Value, BodyError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(doc @ Value::Object(_)) => Ok(doc),
        Ok(_) => Err(BodyError::NotObject),
        Err(e) => Err(BodyError::Json(e.to_string())),
    }
}

fn walk(shape: Shape, doc: &mut Value, f: &mut Visit<'_>) -> Flow {
    match shape {
        Shape::ChatRequest => request::chat(doc, f),
        Shape::ChatAnswer => answer::chat(doc, f),
        Shape::CompletionsRequest => {
            text_or_texts(doc.get_mut("prompt"), f)?;
            text(doc.get_mut("suffix"), f)
        }
        Shape::CompletionsAnswer => answer::completions(doc, f),
        Shape::EmbeddingsRequest => text_or_texts(doc.get_mut("input"), f),
        Shape::MessagesRequest => request::messages(doc, f),
        Shape::MessagesAnswer => answer::messages(doc, f),
        Shape::GeminiRequest => request::gemini(doc, f),
        Shape::GeminiAnswer => answer::gemini(doc, f),
        Shape::ResponsesRequest => request::responses(doc, f),
        Shape::ResponsesAnswer => answer::responses(doc, f),
    }
}

/// The value at `path` below `v`, through objects.
fn at<'v>(v: &'v mut Value, path: &[&str]) -> Option<&'v mut Value> {
    path.iter().try_fold(v, |v, key| v.get_mut(*key))
}

/// The items of an array (none for anything else).
fn items(v: Option<&mut Value>) -> impl Iterator<Item = &mut Value> {
    v.and_then(Value::as_array_mut).into_iter().flatten()
}

/// Which of `known` the `type` of object `v` is.
fn kind(v: &Value, known: &[&'static str]) -> Option<&'static str> {
    let kind = v.get("type")?.as_str()?;
    known.iter().copied().find(|k| *k == kind)
}

/// `v` when it is a string.
fn text(v: Option<&mut Value>, f: &mut Visit<'_>) -> Flow {
    match v {
        Some(Value::String(s)) => f(s),
        _ => GO,
    }
}

/// A string, or the strings of an array (token arrays and other items skipped).
fn text_or_texts(v: Option<&mut Value>, f: &mut Visit<'_>) -> Flow {
    match v {
        Some(Value::Array(list)) => list.iter_mut().try_for_each(|item| text(Some(item), f)),
        other => text(other, f),
    }
}

/// Every string inside `v` at any depth (tool arguments and results): array items in order,
/// object values in the map's order; keys are names, not text parts.
fn strings(v: Option<&mut Value>, f: &mut Visit<'_>) -> Flow {
    match v {
        Some(Value::String(s)) => f(s),
        Some(Value::Array(list)) => list.iter_mut().try_for_each(|item| strings(Some(item), f)),
        Some(Value::Object(map)) => map.values_mut().try_for_each(|item| strings(Some(item), f)),
        _ => GO,
    }
}

/// A string, or an array of typed parts: the text of a part is under the key `key_of` gives
/// for its `type` (none: not a text part).
fn text_or_parts(v: Option<&mut Value>, key_of: fn(&str) -> Option<&'static str>, f: &mut Visit<'_>) -> Flow {
    match v {
        Some(Value::Array(parts)) => parts.iter_mut().try_for_each(|part| {
            let key = part.get("type").and_then(Value::as_str).and_then(key_of);
            key.map_or(GO, |key| text(part.get_mut(key), f))
        }),
        other => text(other, f),
    }
}

#[cfg(test)]
mod tests;
