//! Cache keys: which requests may share an answer. [`exact_key`] digests everything that can
//! change the answer (the API family, the model served, the isolation scope and the body in a
//! canonical form) and nothing that only changes how it is delivered or accounted (`stream`,
//! `user`, `metadata`, ...). [`semantic_parts`] splits a request into the text a semantic
//! cache compares by meaning and a digest of everything else, which must match exactly.
//!
//! Requests whose answer is not a function of the body are refused ([`Uncacheable`]): several
//! choices, server-side state (Responses `previous_response_id`), and APIs whose answers are
//! not text (images, audio) or are answered locally (`count_tokens`).

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::canon;
use super::entry::family;
use crate::route::Api;

/// Version tag of exact keys: changing how keys are made changes it, so old entries miss.
const EXACT: &str = "ferrogate-cache-exact-v1";
/// Version tag of semantic contexts.
const SEMANTIC: &str = "ferrogate-cache-semantic-v1";

/// Top-level fields that change how an answer is delivered, billed or tracked, not what it
/// says (`model` is keyed as the resolved name passed in, not as the client spelled it).
const IGNORED: [&str; 9] = [
    "model",
    "stream",
    "stream_options",
    "user",
    "metadata",
    "store",
    "prompt_cache_key",
    "safety_identifier",
    "service_tier",
];

/// Why a request's answer may not be cached.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum Uncacheable {
    /// The body is not JSON.
    #[error("the request body is not JSON")]
    NotJson,
    /// The body is JSON but not an object.
    #[error("the request body is not a JSON object")]
    NotAnObject,
    /// The API's answers are not cached (images, audio, `count_tokens`); its label.
    #[error("answers of the {0} API are not cached")]
    Api(&'static str),
    /// Several choices were asked for (the named parameter is above 1).
    #[error("requests for several choices (`{0}` above 1) are not cached")]
    MultipleChoices(&'static str),
    /// The request continues state kept elsewhere (the named parameter), so the same body
    /// may call for different answers.
    #[error("requests with `{0}` depend on state kept elsewhere and are not cached")]
    Stateful(&'static str),
    /// A legacy completions request with `stream: true` (no assembler or replay for that
    /// stream shape).
    #[error("streamed legacy completions are not cached")]
    StreamedCompletions,
}

/// A request split for the semantic cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemanticParts {
    /// The text of the last user turn (its text parts joined with `\n`).
    pub text: String,
    /// Hex digest of everything else: two requests are candidates for each other only when
    /// their contexts are equal.
    pub context: String,
}

/// Hex sha256 digest of the canonical request: a version tag, the API family ([`family`]:
/// `generateContent` and `streamGenerateContent` are one), `model` (the resolved public model
/// name the gateway serves), `scope` (an opaque isolation string such as `key:alice`), and the
/// body's JSON with object keys sorted, numbers as `serde_json` prints them, and these
/// top-level fields removed: `model`, `stream`, `stream_options`, `user`, `metadata`, `store`,
/// `prompt_cache_key`, `safety_identifier`, `service_tier`.
///
/// # Errors
/// The answer may not be cached ([`Uncacheable`]).
pub fn exact_key(api: Api, body: &[u8], model: &str, scope: &str) -> Result<String, Uncacheable> {
    let (family, doc) = cacheable(api, body)?;
    Ok(digest(EXACT, family, model, scope, &Value::Object(doc)))
}

/// For the semantic cache: the text of the last user turn and the digest of everything else
/// (the canonical request with that turn's text removed, plus family, model and scope as in
/// [`exact_key`]), so two conversations that differ anywhere but the last user text never
/// share candidates. `None` when the request is not cacheable or does not end with user text
/// (a tool result, an image alone, embeddings, a legacy prompt that is not a string).
pub fn semantic_parts(api: Api, body: &[u8], model: &str, scope: &str) -> Option<SemanticParts> {
    let (family, mut doc) = cacheable(api, body).ok()?;
    let text = take_last_user_text(api, &mut doc)?;
    Some(SemanticParts { text, context: digest(SEMANTIC, family, model, scope, &Value::Object(doc)) })
}

/// The family and the body without its ignored fields, or why it is not cacheable.
fn cacheable(api: Api, body: &[u8]) -> Result<(&'static str, Map<String, Value>), Uncacheable> {
    let family = family(api).ok_or(Uncacheable::Api(api.label()))?;
    let doc = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(doc)) => doc,
        Ok(_) => return Err(Uncacheable::NotAnObject),
        Err(_) => return Err(Uncacheable::NotJson),
    };
    refuse(api, &doc)?;
    let doc = doc.into_iter().filter(|(k, _)| !IGNORED.contains(&k.as_str())).collect();
    Ok((family, doc))
}

/// Parameters that make the answer something other than one function of the body.
fn refuse(api: Api, doc: &Map<String, Value>) -> Result<(), Uncacheable> {
    let above_one = |v: Option<&Value>| v.and_then(Value::as_f64).is_some_and(|n| n > 1.0);
    let set = |key: &str| doc.get(key).is_some_and(|v| !v.is_null());
    match api {
        Api::ChatCompletions | Api::Completions if above_one(doc.get("n")) => Err(Uncacheable::MultipleChoices("n")),
        Api::Completions if doc.get("stream") == Some(&Value::Bool(true)) => Err(Uncacheable::StreamedCompletions),
        Api::GenerateContent | Api::StreamGenerateContent => {
            // Proto JSON takes either spelling.
            let config = doc.get("generationConfig").or_else(|| doc.get("generation_config"));
            let count = config.and_then(|c| c.get("candidateCount").or_else(|| c.get("candidate_count")));
            if above_one(count) {
                return Err(Uncacheable::MultipleChoices("candidateCount"));
            }
            Ok(())
        }
        Api::Responses => {
            // `prompt` names a template stored at OpenAI, which can change behind the same body.
            for key in ["previous_response_id", "conversation", "prompt"] {
                if set(key) {
                    return Err(Uncacheable::Stateful(key));
                }
            }
            if doc.get("background") == Some(&Value::Bool(true)) {
                return Err(Uncacheable::Stateful("background"));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// sha256 over the tag, family, model and scope (each length-prefixed, so no two splits of
/// the same bytes collide) and the canonical body.
fn digest(tag: &str, family: &str, model: &str, scope: &str, body: &Value) -> String {
    let mut h = Sha256::new();
    for part in [tag, family, model, scope] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let mut canonical = Vec::new();
    canon::write(&mut canonical, body);
    h.update(&canonical);
    crate::hex::encode(&h.finalize())
}

/// Removes the text of the last turn when it is the user's, and returns it.
fn take_last_user_text(api: Api, doc: &mut Map<String, Value>) -> Option<String> {
    match api {
        Api::ChatCompletions | Api::Messages => {
            let last = doc.get_mut("messages")?.as_array_mut()?.last_mut()?;
            if last.get("role")? != "user" {
                return None;
            }
            take_text(last.get_mut("content")?, &["text"])
        }
        Api::GenerateContent | Api::StreamGenerateContent => {
            let last = doc.get_mut("contents")?.as_array_mut()?.last_mut()?;
            // Gemini's role defaults to the user's.
            if last.get("role").is_some_and(|r| !r.is_null() && r != "user") {
                return None;
            }
            take_gemini_text(last.get_mut("parts")?)
        }
        Api::Responses => take_responses_text(doc.get_mut("input")?),
        Api::Completions => take_text(doc.get_mut("prompt")?, &[]),
        _ => None,
    }
}

/// A string content (replaced by null), or the parts of one of `kinds` (removed; null when
/// nothing else is left, so a string and a lone text part leave the same context).
fn take_text(content: &mut Value, kinds: &[&str]) -> Option<String> {
    let text = match content {
        Value::String(s) => std::mem::take(s),
        Value::Array(parts) => {
            let mut texts = Vec::new();
            parts.retain(|p| match p.get("text").and_then(Value::as_str) {
                Some(t) if p.get("type").and_then(Value::as_str).is_some_and(|k| kinds.contains(&k)) => {
                    texts.push(t.to_string());
                    false
                }
                _ => true,
            });
            texts.join("\n")
        }
        _ => return None,
    };
    if matches!(content, Value::String(_)) || content.as_array().is_some_and(Vec::is_empty) {
        *content = Value::Null;
    }
    (!text.is_empty()).then_some(text)
}

/// Gemini parts: the `text` parts that are not thoughts.
fn take_gemini_text(parts: &mut Value) -> Option<String> {
    let mut texts = Vec::new();
    parts.as_array_mut()?.retain(|p| match p.get("text").and_then(Value::as_str) {
        Some(t) if p.get("thought") != Some(&Value::Bool(true)) => {
            texts.push(t.to_string());
            false
        }
        _ => true,
    });
    let text = texts.join("\n");
    (!text.is_empty()).then_some(text)
}

/// Responses `input`: a string, or a last item that is a user message.
fn take_responses_text(input: &mut Value) -> Option<String> {
    if input.is_string() {
        return take_text(input, &[]);
    }
    let last = input.as_array_mut()?.last_mut()?;
    let is_message = last.get("type").is_none_or(|t| t == "message");
    if !is_message || last.get("role")? != "user" {
        return None;
    }
    take_text(last.get_mut("content")?, &["input_text"])
}

#[cfg(test)]
mod tests;
