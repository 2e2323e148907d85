//! Finds and rewrites the top-level `"model"` string of a JSON request body without building
//! a DOM: one validity pass ([`super::validate`], serde's verdict without serde's cost) and
//! one byte scan that skips nested values. The rewrite splices bytes, so key order, whitespace and fields
//! the gateway does not know about reach the provider unchanged.

use std::borrow::Cow;
use std::ops::Range;

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
}

/// Locates the top-level `"model"` string of a JSON object body.
pub fn find_model(body: &[u8]) -> Result<ModelField<'_>, ScanError> {
    std::str::from_utf8(body).map_err(|e| ScanError::NotJson(e.to_string()))?;
    super::validate::validate(body).map_err(|e| ScanError::NotJson(e.describe(body)))?;
    let mut s = Scanner { b: body, pos: 0 };
    s.ws();
    if s.peek() != Some(b'{') {
        return Err(ScanError::NotObject);
    }
    s.pos += 1;
    let mut found: Option<(Range<usize>, bool)> = None;
    loop {
        s.ws();
        match s.peek() {
            Some(b'}') => break,
            Some(b',') => s.pos += 1,
            Some(b'"') => {
                let key = s.string()?;
                s.ws();
                s.expect(b':')?;
                s.ws();
                if !is_model_key(body, &key)? {
                    s.skip_value()?;
                } else if found.is_some() {
                    return Err(ScanError::DuplicateModel);
                } else if s.peek() == Some(b'"') {
                    found = Some(s.string()?);
                } else {
                    return Err(ScanError::ModelNotString);
                }
            }
            _ => return Err(s.unexpected()),
        }
    }
    let (span, escaped) = found.ok_or(ScanError::ModelMissing)?;
    let value = decode(body, &span, escaped)?;
    Ok(ModelField { span, value })
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

fn is_model_key(body: &[u8], key: &(Range<usize>, bool)) -> Result<bool, ScanError> {
    let (span, escaped) = key;
    if !escaped {
        return Ok(body.get(span.clone()) == Some(b"\"model\"".as_slice()));
    }
    // `"mod\u0065l"` is the same key to every JSON parser, so it must be treated as "model".
    // A key that does not decode to text (a lone surrogate escape) is some other key.
    Ok(decode(body, span, true).is_ok_and(|k| k == "model"))
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

/// Cursor over a body already known to be valid JSON; still returns errors, never panics.
struct Scanner<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Scanner<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn unexpected(&self) -> ScanError {
        ScanError::NotJson(format!("unexpected input at byte {}", self.pos))
    }

    fn expect(&mut self, byte: u8) -> Result<(), ScanError> {
        if self.peek() != Some(byte) {
            return Err(self.unexpected());
        }
        self.pos += 1;
        Ok(())
    }

    /// Consumes a string token at the cursor; returns its span (quotes included) and whether it
    /// contains escapes.
    fn string(&mut self) -> Result<(Range<usize>, bool), ScanError> {
        let start = self.pos;
        self.expect(b'"')?;
        let mut escaped = false;
        loop {
            // Straight to the next quote or backslash, eight bytes per step.
            let rest = self.b.get(self.pos..).unwrap_or_default();
            self.pos += crate::bytes::find_either(rest, b'"', b'\\').unwrap_or(rest.len());
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok((start..self.pos, escaped));
                }
                // Skipping the escaped byte is enough: `\uXXXX` hex digits contain no quote.
                Some(_) => {
                    escaped = true;
                    self.pos += 2;
                }
                None => return Err(self.unexpected()),
            }
        }
    }

    /// Skips one value of any kind, iteratively (no recursion on deep nesting).
    fn skip_value(&mut self) -> Result<(), ScanError> {
        let mut depth = 0usize;
        loop {
            match self.peek() {
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'{' | b'[') => {
                    depth += 1;
                    self.pos += 1;
                }
                Some(b'}' | b']') if depth > 0 => {
                    depth -= 1;
                    self.pos += 1;
                }
                // Scalars, separators and whitespace inside a container.
                Some(b',' | b':' | b' ' | b'\t' | b'\n' | b'\r') if depth > 0 => self.pos += 1,
                Some(_) if depth == 0 => {
                    while !matches!(self.peek(), None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')) {
                        self.pos += 1;
                    }
                }
                Some(_) => self.pos += 1,
                None => return Err(self.unexpected()),
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests;
