//! Hiding the tools a caller is not granted from an MCP server's `tools/list` answer, as one
//! JSON body or as a `text/event-stream` (Streamable HTTP).
//!
//! The answer is rewritten by splicing: only the `tools` array is replaced, by the raw text of
//! the kept tools, so everything else (other fields of the result and of each kept tool, key
//! order, number formatting) reaches the client byte for byte.

use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The most tools a `tools/list` answer may hold: a longer list is refused, to bound the work.
pub const MAX_TOOLS: usize = 10_000;

/// Why a `tools/list` answer could not be filtered. The caller must not forward it unfiltered.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FilterError {
    /// Not JSON (or not UTF-8, or `result`/`tools` given twice); the parser's message.
    #[error("the tools/list answer is not valid JSON: {0}")]
    NotJson(String),
    /// A top-level array: a batch answer, which may hide a tools/list result from the filter.
    #[error("the tools/list answer is a JSON-RPC batch")]
    Batch,
    /// More than [`MAX_TOOLS`] tools.
    #[error("the tools/list answer lists more than {MAX_TOOLS} tools")]
    TooMany,
}

#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ListResult<'a> {
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Tool<'a> {
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

fn not_json(e: serde_json::Error) -> FilterError {
    FilterError::NotJson(e.to_string())
}

/// Whether a raw value is an object (`{`) or an array (`[`): raw values start at the value, and
/// a struct read from an array would take its fields by position.
fn is(raw: &RawValue, open: char) -> bool {
    raw.get().starts_with(open)
}

/// Rewrites a JSON-RPC response to `tools/list` keeping only tools whose `name` passes `allow`.
/// A tool that is not an object or has no string `name` cannot be granted and is dropped.
///
/// Returns `Ok(None)` when every tool is allowed or the body is not a tools/list result (not an
/// object with a `result` object whose `tools` is an array: e.g. an error response), so the
/// caller forwards the bytes verbatim. Everything but the dropped tools is kept byte for byte.
///
/// # Errors
/// [`FilterError`] for a body that is not JSON, a batch, or more than [`MAX_TOOLS`] tools.
pub fn filter_list(body: &[u8], allow: &dyn Fn(&str) -> bool) -> Result<Option<Vec<u8>>, FilterError> {
    let text = std::str::from_utf8(body).map_err(|_| FilterError::NotJson("invalid UTF-8".to_owned()))?;
    let start = text.trim_start_matches([' ', '\t', '\n', '\r']).bytes().next();
    if start != Some(b'{') {
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(not_json)?;
        return if start == Some(b'[') { Err(FilterError::Batch) } else { Ok(None) };
    }
    let envelope: Envelope<'_> = serde_json::from_str(text).map_err(not_json)?;
    let Some(result) = envelope.result.filter(|r| is(r, '{')) else { return Ok(None) };
    let list: ListResult<'_> = serde_json::from_str(result.get()).map_err(not_json)?;
    let Some(tools) = list.tools.filter(|t| is(t, '[')) else { return Ok(None) };
    let all: Vec<&RawValue> = serde_json::from_str(tools.get()).map_err(not_json)?;
    if all.len() > MAX_TOOLS {
        return Err(FilterError::TooMany);
    }
    let kept: Vec<&str> = all.iter().filter(|t| granted(t, allow)).map(|t| t.get()).collect();
    if kept.len() == all.len() {
        return Ok(None);
    }
    Ok(splice(text, tools.get(), &format!("[{}]", kept.join(","))))
}

/// Whether a tool is an object whose string `name` passes `allow`.
fn granted(tool: &RawValue, allow: &dyn Fn(&str) -> bool) -> bool {
    is(tool, '{') && matches!(serde_json::from_str::<Tool<'_>>(tool.get()), Ok(Tool { name: Some(n) }) if allow(&n))
}

/// `text` with `part` (a slice of it) replaced by `with`.
fn splice(text: &str, part: &str, with: &str) -> Option<Vec<u8>> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let (before, after) = (text.get(..start)?, text.get(start.checked_add(part.len())?..)?);
    Some([before, with, after].concat().into_bytes())
}

/// One line of an event stream: its text and its line ending (`\n`, `\r\n`, `\r`, or none at
/// the end of the body).
struct Line<'a> {
    text: &'a [u8],
    end: &'a [u8],
}

impl Line<'_> {
    /// The value of a `data` field line (one leading space stripped; a bare `data` line has an
    /// empty value), `None` for any other line.
    fn data(&self) -> Option<&[u8]> {
        let value = self.text.strip_prefix(b"data")?;
        match value.first() {
            None => Some(value),
            Some(b':') => value.get(1..).map(|v| v.strip_prefix(b" ").unwrap_or(v)),
            Some(_) => None,
        }
    }
}

/// The lines of an event stream, line endings kept.
fn lines(mut body: &[u8]) -> impl Iterator<Item = Line<'_>> {
    std::iter::from_fn(move || {
        if body.is_empty() {
            return None;
        }
        let at = body.iter().position(|&b| b == b'\n' || b == b'\r').unwrap_or(body.len());
        let len = match body.get(at..) {
            Some([b'\r', b'\n', ..]) => 2,
            Some([]) | None => 0,
            Some(_) => 1,
        };
        let (line, rest) = body.split_at_checked(at + len)?;
        body = rest;
        let (text, end) = line.split_at_checked(at)?;
        Some(Line { text, end })
    })
}

/// Same as [`filter_list`] over a `text/event-stream` body holding the whole response stream:
/// each event's `data:` lines (joined with `\n` per the SSE spec) that hold a tools/list result
/// are rewritten as one `data:` line, in place of the event's last data line; every other byte
/// (`event:`, `id:`, `retry:`, comment lines, other events, line endings `\n`, `\r\n` or `\r`)
/// passes through unchanged. An unterminated last event is filtered too. `Ok(None)` when
/// nothing changed.
///
/// # Errors
/// As [`filter_list`], for any event whose data is not blank.
pub fn filter_list_sse(body: &[u8], allow: &dyn Fn(&str) -> bool) -> Result<Option<Vec<u8>>, FilterError> {
    // A leading byte-order mark is dropped by SSE parsers before the first field name.
    let bom = if body.starts_with("\u{feff}".as_bytes()) { 3 } else { 0 };
    let (head, rest) = body.split_at_checked(bom).unwrap_or((&[], body));
    let mut out = head.to_vec();
    let mut event: Vec<Line<'_>> = Vec::new();
    let mut changed = false;
    for line in lines(rest) {
        let blank = line.text.is_empty();
        event.push(line);
        if blank {
            changed |= flush(&event, &mut out, allow)?;
            event.clear();
        }
    }
    changed |= flush(&event, &mut out, allow)?;
    Ok(changed.then_some(out))
}

/// Writes one event (its lines up to and including its blank line) to `out`, rewritten when its
/// data is a tools/list result with tools to hide; returns whether it was rewritten.
fn flush(event: &[Line<'_>], out: &mut Vec<u8>, allow: &dyn Fn(&str) -> bool) -> Result<bool, FilterError> {
    let data: Vec<&[u8]> = event.iter().filter_map(Line::data).collect();
    let joined = data.join(&b'\n');
    let blank = joined.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    let rewritten = if blank { None } else { filter_list(&joined, allow)? };
    let Some(json) = rewritten else {
        for line in event {
            out.extend_from_slice(line.text);
            out.extend_from_slice(line.end);
        }
        return Ok(false);
    };
    // The new data replaces the last data line, earlier ones are dropped: a dropped line is then
    // always followed by a non-blank line, so a `\r` ending before it cannot merge with a
    // following blank line's `\n` into one `\r\n` and lose the event's end.
    let last = event.iter().rposition(|l| l.data().is_some());
    for (i, line) in event.iter().enumerate() {
        if Some(i) == last {
            out.extend_from_slice(b"data: ");
            // Newlines in the joined data lie between JSON tokens (JSON strings cannot hold
            // them raw): spaces keep the JSON the same on one line.
            out.extend(json.iter().map(|&b| if b == b'\n' { b' ' } else { b }));
        } else if line.data().is_some() {
            continue;
        } else {
            out.extend_from_slice(line.text);
        }
        out.extend_from_slice(line.end);
    }
    Ok(true)
}
