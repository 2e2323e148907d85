//! Event streams of MCP servers: rewriting events in place, and splitting a stream that
//! arrives in chunks into whole events.
//!
//! Used for `tools/list` answers sent as an event stream ([`super::filter_list_sse`]) and for
//! the HTTP+SSE transport (2024-11-05), whose long-lived GET stream first names the endpoint
//! the client must POST to (an `endpoint` event, rewritten to the gateway's path with its
//! session sealed, [`gateway_endpoint`]) and then carries every answer as a `message` event.

use super::tools::FilterError;

/// Why a stream could not be passed on.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SseError {
    /// An answer in the stream could not be filtered.
    #[error(transparent)]
    Filter(#[from] FilterError),
    /// One event is longer than the bound the caller gave.
    #[error("an event of the stream is longer than {0} bytes")]
    TooLarge(usize),
    /// The `endpoint` event names something other than a path on the server's origin.
    #[error("the server's endpoint event does not name a path on its origin")]
    Endpoint,
}

/// One line of an event stream: its text and its line ending (`\n`, `\r\n`, `\r`, or none at
/// the end of the body).
struct Line<'a> {
    text: &'a [u8],
    end: &'a [u8],
}

impl Line<'_> {
    /// The value of field `name`'s line (one leading space stripped; a bare `name` line has an
    /// empty value), `None` for any other line.
    fn field(&self, name: &[u8]) -> Option<&[u8]> {
        let value = self.text.strip_prefix(name)?;
        match value.first() {
            None => Some(value),
            Some(b':') => value.get(1..).map(|v| v.strip_prefix(b" ").unwrap_or(v)),
            Some(_) => None,
        }
    }

    fn data(&self) -> Option<&[u8]> {
        self.field(b"data")
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

/// What [`map_events`] asks of each event: given its type (`event:`, `None` when absent) and
/// its data, new data or `None` to keep it.
pub type Rewrite<'f, E> = dyn FnMut(Option<&[u8]>, &[u8]) -> Result<Option<Vec<u8>>, E> + 'f;

/// `body` with the data of the events `rewrite` changes replaced (one `data:` line in place of
/// the event's last data line), every other byte unchanged; `Ok(None)` when nothing changed.
/// Events with blank data are not offered. An unterminated last event is offered too.
///
/// # Errors
/// The first error of `rewrite`.
pub fn map_events<E>(body: &[u8], rewrite: &mut Rewrite<'_, E>) -> Result<Option<Vec<u8>>, E> {
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
            changed |= flush(&event, &mut out, rewrite)?;
            event.clear();
        }
    }
    changed |= flush(&event, &mut out, rewrite)?;
    Ok(changed.then_some(out))
}

/// Writes one event (its lines up to and including its blank line) to `out`, rewritten when
/// `rewrite` says so; returns whether it was rewritten.
fn flush<E>(event: &[Line<'_>], out: &mut Vec<u8>, rewrite: &mut Rewrite<'_, E>) -> Result<bool, E> {
    let data: Vec<&[u8]> = event.iter().filter_map(Line::data).collect();
    let joined = data.join(&b'\n');
    let blank = joined.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    let kind = event.iter().find_map(|l| l.field(b"event"));
    let Some(new) = (if blank { None } else { rewrite(kind, &joined)? }) else {
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
            // Newlines in joined JSON data lie between tokens (JSON strings cannot hold them
            // raw): spaces keep the JSON the same on one line.
            out.extend(new.iter().map(|&b| if b == b'\n' || b == b'\r' { b' ' } else { b }));
        } else if line.data().is_some() {
            continue;
        } else {
            out.extend_from_slice(line.text);
        }
        out.extend_from_slice(line.end);
    }
    Ok(true)
}

/// Holds the unfinished end of a stream that arrives in chunks, so events are only ever
/// rewritten whole.
#[derive(Debug, Default)]
pub struct EventSplitter {
    pending: Vec<u8>,
}

impl EventSplitter {
    /// Adds `chunk` and takes every complete event now at the front (up to and including the
    /// blank line that ends the last one); the rest waits for more.
    ///
    /// # Errors
    /// [`SseError::TooLarge`] when more than `max` bytes wait without ending an event.
    pub fn push(&mut self, chunk: &[u8], max: usize) -> Result<Vec<u8>, SseError> {
        self.pending.extend_from_slice(chunk);
        let end = complete_events(&self.pending);
        if self.pending.len() - end > max {
            return Err(SseError::TooLarge(max));
        }
        Ok(self.pending.drain(..end).collect())
    }

    /// What is left when the stream ends (an unterminated last event).
    pub fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

/// The length of the complete events at the front of `buf`. A `\r` at the very end may be the
/// first half of a `\r\n`, so the line it ends is not known to be complete yet.
fn complete_events(buf: &[u8]) -> usize {
    let (mut at, mut end) = (0, 0);
    for line in lines(buf) {
        let len = line.text.len() + line.end.len();
        if line.end.is_empty() || (line.end == b"\r" && at + len == buf.len()) {
            break;
        }
        at += len;
        if line.text.is_empty() {
            end = at;
        }
    }
    end
}

/// The HTTP+SSE transport's `endpoint` event data rewritten for the gateway: the server's path
/// (origin-relative, or an absolute URL on its origin) under `/mcp/{server}`, with the value of
/// its `session_id` query parameter passed through `seal`.
///
/// # Errors
/// [`SseError::Endpoint`] when the data is not a path (or URL) or `seal` refuses the session.
pub fn gateway_endpoint(server: &str, data: &[u8], seal: &dyn Fn(&str) -> Option<String>) -> Result<String, SseError> {
    let text = std::str::from_utf8(data).map_err(|_| SseError::Endpoint)?.trim();
    let path = match text.split_once("://") {
        Some((scheme, rest)) if scheme == "http" || scheme == "https" => rest.find('/').and_then(|i| rest.get(i..)),
        Some(_) => None,
        None => Some(text),
    };
    let path = path.filter(|p| p.starts_with('/') && !p.starts_with("//")).ok_or(SseError::Endpoint)?;
    let (path, query) = crate::route::split_query(path);
    let Some(query) = query else { return Ok(format!("/mcp/{server}{path}")) };
    let mut params = Vec::new();
    for param in query.split('&') {
        match param.split_once('=') {
            Some(("session_id", id)) => params.push(format!("session_id={}", seal(id).ok_or(SseError::Endpoint)?)),
            _ => params.push(param.to_string()),
        }
    }
    Ok(format!("/mcp/{server}{path}?{}", params.join("&")))
}

/// A client's query with its `session_id` value passed through `open` (the other parameters
/// kept); `Ok(None)` when it has no `session_id`.
///
/// # Errors
/// `open`'s error.
pub fn open_query<E>(query: &str, open: &dyn Fn(&str) -> Result<String, E>) -> Result<Option<String>, E> {
    let mut found = false;
    let mut params = Vec::new();
    for param in query.split('&') {
        match param.split_once('=') {
            Some(("session_id", id)) => {
                found = true;
                params.push(format!("session_id={}", open(id)?));
            }
            _ => params.push(param.to_string()),
        }
    }
    Ok(found.then(|| params.join("&")))
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
