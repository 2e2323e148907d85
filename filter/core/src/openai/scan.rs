//! Finds and rewrites the top-level `"model"` string of a JSON request body without building
//! a DOM: the validity pass ([`super::validate`], serde's verdict without serde's cost) notes
//! where the member is. The rewrite splices bytes, so key order, whitespace and fields the
//! gateway does not know about reach the provider unchanged.

use std::borrow::Cow;
use std::ops::Range;

use super::validate::{validate, Model};

/// Why a body has no usable `"model"`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScanError {
    /// Not valid UTF-8 JSON.
    #[error("We could not parse the JSON body of your request: {0}")]
    NotJson(String),
    /// Valid JSON, but not an object.
    #[error("The request body must be a JSON object.")]
    NotObject,
    /// No top-level `"model"` key.
    #[error("you must provide a model parameter")]
    ModelMissing,
    /// `"model"` is not a string.
    #[error("The model parameter must be a string.")]
    ModelNotString,
    /// `"model"` appears twice; rejected because parsers disagree on which one wins, and the
    /// gateway must route on the same value the provider will read.
    #[error("The model parameter appears more than once.")]
    DuplicateModel,
}

/// The top-level `"model"` value of a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelField<'a> {
    /// Byte span of the JSON string token, quotes included.
    pub span: Range<usize>,
    /// Decoded value (borrowed when it has no escapes).
    pub value: Cow<'a, str>,
    /// The object may also have a top-level `"stream"` member (false: certainly none), so a
    /// request that cannot stream needs no search for one.
    pub may_stream: bool,
}

/// Checks that `body` is one JSON object (a Gemini body, whose model is in the path), with the
/// same verdict and messages as [`find_model`] gives.
pub fn check_object(body: &[u8]) -> Result<(), ScanError> {
    let shape = validate(body).map_err(|invalid| match std::str::from_utf8(body) {
        Err(e) => ScanError::NotJson(e.to_string()),
        Ok(_) => ScanError::NotJson(invalid.describe(body)),
    })?;
    if shape.object {
        Ok(())
    } else {
        Err(ScanError::NotObject)
    }
}

/// Locates the top-level `"model"` string of a JSON object body.
pub fn find_model(body: &[u8]) -> Result<ModelField<'_>, ScanError> {
    let shape = validate(body).map_err(|invalid| match std::str::from_utf8(body) {
        // The UTF-8 message first, as `from_utf8` then `serde_json` would give.
        Err(e) => ScanError::NotJson(e.to_string()),
        Ok(_) => ScanError::NotJson(invalid.describe(body)),
    })?;
    if !shape.object {
        return Err(ScanError::NotObject);
    }
    match shape.model {
        Model::Found(span, escaped) => {
            let value = decode(body, &span, escaped)?;
            Ok(ModelField { span, value, may_stream: shape.may_stream })
        }
        Model::Missing => Err(ScanError::ModelMissing),
        Model::NotString => Err(ScanError::ModelNotString),
        Model::Duplicate => Err(ScanError::DuplicateModel),
    }
}

/// Returns `body` with the bytes in `span` replaced by `new` encoded as a JSON string.
///
/// An out-of-range span is clamped rather than trusted (the filter must never trap).
pub fn rewrite_model(body: &[u8], span: Range<usize>, new: &str) -> Vec<u8> {
    let start = span.start.min(body.len());
    let end = span.end.clamp(start, body.len());
    let mut out = Vec::with_capacity(body.len() - (end - start) + new.len() + 2);
    out.extend_from_slice(&body[..start]);
    push_json_string(&mut out, new);
    out.extend_from_slice(&body[end..]);
    out
}

/// Appends `s` as a JSON string literal.
fn push_json_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            0x00..=0x1f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

/// Whether the key token at `span` (quotes included) is `"model"`.
pub(super) fn is_model_key(body: &[u8], span: Range<usize>, escaped: bool) -> bool {
    if !escaped {
        return body.get(span) == Some(b"\"model\"".as_slice());
    }
    // `"mod\u0065l"` is the same key to every JSON parser, so it must be treated as "model".
    // A key that does not decode to text (a lone surrogate escape) is some other key.
    decode(body, &span, true).is_ok_and(|k| k == "model")
}

fn decode<'a>(body: &'a [u8], span: &Range<usize>, escaped: bool) -> Result<Cow<'a, str>, ScanError> {
    let token = body.get(span.clone()).unwrap_or_default();
    if escaped {
        let s: String = serde_json::from_slice(token).map_err(|e| ScanError::NotJson(e.to_string()))?;
        return Ok(Cow::Owned(s));
    }
    let inner = token.get(1..token.len().saturating_sub(1)).unwrap_or_default();
    std::str::from_utf8(inner).map(Cow::Borrowed).map_err(|e| ScanError::NotJson(e.to_string()))
}

#[cfg(test)]
mod tests;
