//! `multipart/form-data` request bodies (`/v1/audio/transcriptions`, `/v1/audio/translations`,
//! image edits): find the `model` form field and rewrite it in place.
//!
//! Only the framing is parsed (RFC 2046 / RFC 7578): a part starts after `--boundary` and ends
//! at the next `CRLF--boundary` that is followed by `--`, whitespace or a line end. File bytes
//! are never interpreted, so audio that happens to contain boundary-like bytes (`--boundary`
//! without a preceding CRLF, or `CRLF--boundaryX`) does not end a part. The rewrite splices
//! the value bytes: every other byte reaches the provider unchanged; only the length changes,
//! so the caller must update `content-length`.

use std::ops::Range;

/// Why the `model` field could not be located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultipartError {
    /// The body does not follow the multipart framing.
    #[error("The multipart request body is malformed: {0}.")]
    Malformed(&'static str),
    /// No form field named `model`.
    #[error("you must provide a model parameter")]
    ModelMissing,
    /// Two `model` fields; rejected because the gateway must route on the value the provider
    /// reads, and servers disagree on which one wins.
    #[error("The model parameter appears more than once.")]
    DuplicateModel,
}

/// The `boundary` parameter of a `multipart/form-data` content type (quotes removed); `None`
/// for another media type or a missing, empty or over-long (> 70 bytes) boundary.
pub fn boundary(content_type: &[u8]) -> Option<&[u8]> {
    let mut params = split_params(content_type);
    let media = trim(params.next()?);
    if !media.eq_ignore_ascii_case(b"multipart/form-data") {
        return None;
    }
    let value = params.find_map(|p| param_value(p, b"boundary"))?;
    (1..=70).contains(&value.len()).then_some(value)
}

/// Byte span of the value of the form field named `model`.
pub fn find_model(body: &[u8], boundary: &[u8]) -> Result<Range<usize>, MultipartError> {
    let mut found = None;
    for part in parts(body, boundary)? {
        if part_name(body.get(part.headers.clone()).unwrap_or_default()) == Some(b"model".as_slice()) {
            if found.is_some() {
                return Err(MultipartError::DuplicateModel);
            }
            found = Some(part.content);
        }
    }
    found.ok_or(MultipartError::ModelMissing)
}

/// `body` with the bytes in `span` (from [`find_model`]) replaced by `new`. An out-of-range span
/// is clamped rather than trusted.
pub fn rewrite_model(body: &[u8], span: Range<usize>, new: &[u8]) -> Vec<u8> {
    let start = span.start.min(body.len());
    let end = span.end.clamp(start, body.len());
    let mut out = Vec::with_capacity(body.len() - (end - start) + new.len());
    out.extend_from_slice(body.get(..start).unwrap_or_default());
    out.extend_from_slice(new);
    out.extend_from_slice(body.get(end..).unwrap_or_default());
    out
}

/// One body part: its header block and its content.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Part {
    headers: Range<usize>,
    content: Range<usize>,
}

/// Splits a body into parts; the closing `--boundary--` must be present.
fn parts(body: &[u8], boundary: &[u8]) -> Result<Vec<Part>, MultipartError> {
    if boundary.is_empty() {
        return Err(MultipartError::Malformed("empty boundary"));
    }
    let dash = [b"--".as_slice(), boundary].concat();
    // The first delimiter may follow a preamble, which must then end with a CRLF.
    let mut at = if body.starts_with(&dash) {
        0
    } else {
        next_delimiter(body, &dash, 0).ok_or(MultipartError::Malformed("no boundary found"))?
    };
    let mut parts = Vec::new();
    loop {
        let after = at + dash.len();
        if body.get(after..after + 2) == Some(b"--".as_slice()) {
            return Ok(parts);
        }
        let headers_start = line_after(body, after).ok_or(MultipartError::Malformed("bad delimiter line"))?;
        let (headers, content_start) = header_block(body, headers_start)?;
        let next =
            next_delimiter(body, &dash, content_start).ok_or(MultipartError::Malformed("no closing boundary"))?;
        // `next` points at `--boundary`; the CRLF before it belongs to the delimiter.
        parts.push(Part { headers, content: content_start..next - 2 });
        at = next;
    }
}

/// Position of the `--boundary` of the next real delimiter (`CRLF--boundary` followed by `--`,
/// transport padding or a line end) at or after `from`.
fn next_delimiter(body: &[u8], dash: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    loop {
        let off = body.get(i..)?.windows(2).position(|w| w == b"\r\n")?;
        let at = i + off + 2;
        let after = at + dash.len();
        if body.get(at..after) == Some(dash)
            && matches!(body.get(after), None | Some(b'-' | b' ' | b'\t' | b'\r' | b'\n'))
        {
            return Some(at);
        }
        i = i + off + 1;
    }
}

/// After a delimiter: skips transport padding and the line end; the next line's start.
fn line_after(body: &[u8], from: usize) -> Option<usize> {
    let pad = body.get(from..)?.iter().take_while(|&&b| b == b' ' || b == b'\t').count();
    let at = from + pad;
    match body.get(at..at + 2)? {
        b"\r\n" => Some(at + 2),
        [b'\n', _] => Some(at + 1),
        _ => None,
    }
}

/// The header lines starting at `start` and where the content begins (after the blank line).
fn header_block(body: &[u8], start: usize) -> Result<(Range<usize>, usize), MultipartError> {
    let mut line = start;
    loop {
        let rest = body.get(line..).unwrap_or_default();
        let len =
            rest.iter().position(|&b| b == b'\n').ok_or(MultipartError::Malformed("unterminated part headers"))?;
        let text = rest.get(..len).unwrap_or_default();
        if text.is_empty() || text == b"\r" {
            return Ok((start..line, line + len + 1));
        }
        line += len + 1;
    }
}

/// The `name` of a part from its `Content-Disposition: form-data; name=...` header.
fn part_name(headers: &[u8]) -> Option<&[u8]> {
    headers.split(|&b| b == b'\n').find_map(|line| {
        let (name, value) = split_once(line, b':')?;
        if !trim(name).eq_ignore_ascii_case(b"content-disposition") {
            return None;
        }
        let mut params = split_params(value);
        let kind = trim(params.next()?);
        if !kind.eq_ignore_ascii_case(b"form-data") {
            return None;
        }
        params.find_map(|p| param_value(p, b"name"))
    })
}

/// `key=value` or `key="value"` when `key` matches (case-insensitively); the value unquoted.
fn param_value<'a>(param: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let (k, v) = split_once(param, b'=')?;
    if !trim(k).eq_ignore_ascii_case(key) {
        return None;
    }
    let v = trim(v);
    Some(v.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(v))
}

/// Splits a header value at `;` outside quoted strings.
fn split_params(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut quoted = false;
    let mut escaped = false;
    value.split(move |&b| {
        let split = b == b';' && !quoted;
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        }
        split
    })
}

fn split_once(bytes: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|&b| b == sep)?;
    Some((bytes.get(..at)?, bytes.get(at + 1..)?))
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

#[cfg(test)]
mod tests;
