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

/// Same as [`filter_list`] over a `text/event-stream` body holding the whole response stream:
/// each event whose data (its `data:` lines joined with `\n`, per the SSE spec) holds a
/// tools/list result is rewritten ([`super::sse::map_events`]); every other byte passes through
/// unchanged. `Ok(None)` when nothing changed.
///
/// # Errors
/// As [`filter_list`], for any event whose data is not blank.
pub fn filter_list_sse(body: &[u8], allow: &dyn Fn(&str) -> bool) -> Result<Option<Vec<u8>>, FilterError> {
    super::sse::map_events(body, &mut |_, data| filter_list(data, allow))
}
