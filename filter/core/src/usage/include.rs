//! `stream_options.include_usage`: OpenAI streams report usage only when asked, so the gateway
//! asks on the client's behalf and then hides the extra chunk (see [`super::Tracker`]).
//!
//! The request is edited by splicing bytes: key order, whitespace, number spellings and fields
//! the gateway does not know reach the provider unchanged.

use super::json::{object_at, Object};
use crate::bytes::find_byte;

/// Why a request body could not be inspected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IncludeUsageError {
    /// Not valid UTF-8 JSON.
    #[error("We could not parse the JSON body of your request: {0}")]
    NotJson(String),
    /// Valid JSON, but not an object.
    #[error("The request body must be a JSON object.")]
    NotObject,
}

/// For an OpenAI request with `"stream": true`, returns the body with
/// `stream_options.include_usage` set to `true`; `None` when the request is not streaming,
/// already asks for usage, or has a `stream_options` that is not an object (left for the
/// provider to refuse). `Some` means the caller must hide the usage chunk from the client.
///
/// Duplicate keys: the last one counts, as in most JSON parsers.
pub fn ensure_include_usage(body: &[u8]) -> Result<Option<Vec<u8>>, IncludeUsageError> {
    std::str::from_utf8(body).map_err(|e| IncludeUsageError::NotJson(e.to_string()))?;
    serde_json::from_slice::<serde::de::IgnoredAny>(body).map_err(|e| IncludeUsageError::NotJson(e.to_string()))?;
    ensure_include_usage_in_valid(body)
}

/// [`ensure_include_usage`] for a body already known to be valid JSON (the router validated
/// it), skipping the second validation pass on the request path.
pub fn ensure_include_usage_in_valid(body: &[u8]) -> Result<Option<Vec<u8>>, IncludeUsageError> {
    // Most requests do not stream: without a `"stream"` key they need no member scan. A key
    // can be spelled with escapes (`"str\u0065am"`), so any backslash means scanning anyway;
    // otherwise a streamed request could dodge usage accounting.
    if find_byte(body, b'\\').is_none() && !mentions_stream(body) {
        return match body.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{') => Ok(None),
            _ => Err(IncludeUsageError::NotObject),
        };
    }
    let top = object_at(body, 0).ok_or(IncludeUsageError::NotObject)?;
    let streaming = top.last(body, "stream").is_some_and(|m| body.get(m.value.clone()) == Some(b"true".as_slice()));
    if !streaming {
        return Ok(None);
    }
    const MEMBER: &[u8] = br#""stream_options":{"include_usage":true}"#;
    let Some(opts) = top.last(body, "stream_options") else {
        return Ok(Some(insert_member(body, &top, MEMBER)));
    };
    let value = body.get(opts.value.clone()).unwrap_or_default();
    if value == b"null" {
        return Ok(Some(splice(body, opts.value.start, opts.value.end, br#"{"include_usage":true}"#)));
    }
    let Some(inner) = object_at(body, opts.value.start) else {
        return Ok(None);
    };
    match inner.last(body, "include_usage") {
        Some(m) if body.get(m.value.clone()) == Some(b"true".as_slice()) => Ok(None),
        Some(m) => Ok(Some(splice(body, m.value.start, m.value.end, b"true"))),
        None => Ok(Some(insert_member(body, &inner, br#""include_usage":true"#))),
    }
}

/// Whether `"stream"` occurs in `body`. Searched as `stream"` then the quote before it: a
/// needle that starts and ends with a quote has a candidate at nearly every quote pair of a
/// JSON body, `s` is rare.
fn mentions_stream(body: &[u8]) -> bool {
    let mut from = 0;
    while let Some(i) = body.get(from..).and_then(|rest| crate::bytes::find_sub(rest, b"stream\"")) {
        let at = from + i;
        if at > 0 && body.get(at - 1) == Some(&b'"') {
            return true;
        }
        from = at + 1;
    }
    false
}

/// Adds `member` to `object`: after its last member, or inside its braces when empty.
fn insert_member(body: &[u8], object: &Object, member: &[u8]) -> Vec<u8> {
    match object.members.last() {
        Some(last) => splice(body, last.value.end, last.value.end, &[b",", member].concat()),
        None => {
            let at = object.span.start + 1;
            splice(body, at, at, member)
        }
    }
}

/// `body` with `body[start..end]` replaced by `new` (range clamped, never trusted).
fn splice(body: &[u8], start: usize, end: usize, new: &[u8]) -> Vec<u8> {
    let start = start.min(body.len());
    let end = end.clamp(start, body.len());
    let mut out = Vec::with_capacity(body.len() - (end - start) + new.len());
    out.extend_from_slice(body.get(..start).unwrap_or_default());
    out.extend_from_slice(new);
    out.extend_from_slice(body.get(end..).unwrap_or_default());
    out
}
