//! Incremental server-sent-events framing: finds where each event ends, across chunk
//! boundaries, without copying; and reads an event's `data` field.
//!
//! Lines end with `\r\n`, `\n` or `\r` (the SSE grammar allows all three); an event ends at an
//! empty line. The event's bytes include its terminating blank line, so removing an event from
//! a stream removes exactly its bytes and leaves the neighbours' framing intact.

use std::borrow::Cow;

/// Line-ending state carried from one chunk to the next.
#[derive(Debug, Clone)]
pub(crate) struct Splitter {
    /// The current line has no bytes yet (so a line end now is a blank line).
    line_empty: bool,
    /// The previous byte was a `\r` ending a non-empty line: a `\n` now belongs to it.
    after_cr: bool,
    /// A `\r` ended a blank line at the end of the last chunk: the event is over, and a `\n` at
    /// the start of the next chunk still belongs to it.
    pending_end: bool,
}

impl Default for Splitter {
    fn default() -> Self {
        Self { line_empty: true, after_cr: false, pending_end: false }
    }
}

impl Splitter {
    /// Scans `bytes` (the rest of a chunk after the previous event end) and returns the offset
    /// just past the next event's terminator, if the event ends within `bytes` (possibly 0).
    pub fn next_end(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut i = 0;
        if self.pending_end {
            let first = *bytes.first()?;
            self.pending_end = false;
            return Some(usize::from(first == b'\n'));
        }
        while i < bytes.len() {
            // Skip a run of ordinary bytes in one go.
            let run = bytes.get(i..)?.iter().position(|&b| b == b'\n' || b == b'\r');
            let Some(run) = run else {
                self.line_empty = false;
                self.after_cr = false;
                return None;
            };
            if run > 0 {
                self.line_empty = false;
                self.after_cr = false;
                i += run;
            }
            let b = bytes.get(i).copied()?;
            i += 1;
            if let Some(end) = self.line_end(b, bytes.get(i).copied(), i) {
                return Some(end);
            }
        }
        None
    }

    /// Handles one `\r` / `\n` byte (already consumed; `i` is just past it, `next` the byte at
    /// `i` if this chunk has it). Returns the event end when this byte closes an event.
    fn line_end(&mut self, b: u8, next: Option<u8>, i: usize) -> Option<usize> {
        if b == b'\n' && self.after_cr {
            self.after_cr = false;
            return None;
        }
        if !self.line_empty {
            self.line_empty = true;
            self.after_cr = b == b'\r';
            return None;
        }
        // A blank line: the event is over.
        self.after_cr = false;
        if b == b'\n' {
            return Some(i);
        }
        match next {
            Some(b'\n') => Some(i + 1),
            Some(_) => Some(i),
            None => {
                self.pending_end = true;
                None
            }
        }
    }

    /// At end of stream: whether the buffered event had ended (on a `\r` blank line).
    pub fn finish(&mut self) -> bool {
        std::mem::take(&mut self.pending_end)
    }
}

/// The `data` of one event: its `data:` lines joined by `\n` (one leading space stripped).
/// Borrowed in the common single-line case.
pub(crate) fn event_data(event: &[u8]) -> Cow<'_, [u8]> {
    let mut data: Option<Cow<'_, [u8]>> = None;
    // Splitting on both bytes yields empty pieces between `\r` and `\n`; an event has no blank
    // lines except its terminator, so dropping empty pieces loses nothing.
    for line in event.split(|&b| b == b'\n' || b == b'\r').filter(|l| !l.is_empty()) {
        let Some(value) = line.strip_prefix(b"data:") else { continue };
        let value = value.strip_prefix(b" ").unwrap_or(value);
        data = Some(match data {
            None => Cow::Borrowed(value),
            Some(prev) => {
                let mut joined = prev.into_owned();
                joined.push(b'\n');
                joined.extend_from_slice(value);
                Cow::Owned(joined)
            }
        });
    }
    data.unwrap_or(Cow::Borrowed(&[]))
}
