//! [`Tracker`]: watches a response body go by, chunk by chunk, and reads its usage with
//! bounded memory; optionally removes the usage event the gateway itself asked for.

use super::converse::Frames;
use super::extract::{self, Acc};
use super::sse::{event_data, Splitter};
use super::{Chunk, Usage, UsageDialect, EVENT_MAX, TAIL_MAX, WHOLE_BODY_MAX};

/// Streaming usage extractor for one response body. See the [module docs](super) for the
/// memory rules.
///
/// Feed every body chunk to [`on_chunk`](Self::on_chunk) (or the last one to
/// [`on_end`](Self::on_end)) and send what it says. At end of stream call [`flush`](Self::flush)
/// and send its bytes after the last chunk (only non-empty when hiding), then
/// [`finish`](Self::finish) for the usage.
#[derive(Debug)]
pub struct Tracker {
    dialect: UsageDialect,
    streaming: bool,
    hide: bool,
    acc: Acc,
    first_token: bool,
    ended: bool,
    /// JSON: the body so far (whole up to [`WHOLE_BODY_MAX`], then a tail). SSE: the incomplete
    /// event (whole up to [`EVENT_MAX`], then a tail).
    buf: Vec<u8>,
    /// JSON: bytes seen. SSE: bytes of the current event seen.
    seen: usize,
    split: Splitter,
    /// Bytes held back and not yet returned by [`flush`](Self::flush).
    out: Vec<u8>,
    /// Finish reasons, read only when asked for ([`with_finish_reasons`](Self::with_finish_reasons)).
    finish: Option<Box<super::FinishReasons>>,
    /// A streamed Converse answer: binary event-stream frames instead of SSE.
    frames: Option<Box<Frames>>,
}

/// Output of one chunk in hiding mode: stays a borrowed prefix of the chunk until something
/// differs from it, so an unchanged chunk is [`Chunk::Forward`] without allocating.
struct Out<'a> {
    chunk: &'a [u8],
    owned: Option<Vec<u8>>,
    /// Without `owned`: `chunk[..fwd]` is the output so far.
    fwd: usize,
}

impl<'a> Out<'a> {
    fn new(chunk: &'a [u8]) -> Self {
        Self { chunk, owned: None, fwd: 0 }
    }

    fn owned(&mut self) -> &mut Vec<u8> {
        let (chunk, fwd) = (self.chunk, self.fwd);
        self.owned.get_or_insert_with(|| chunk.get(..fwd).unwrap_or_default().to_vec())
    }

    /// Sends `chunk[start..end]`.
    fn range(&mut self, start: usize, end: usize) {
        if self.owned.is_none() && start == self.fwd {
            self.fwd = end;
        } else {
            let bytes = self.chunk.get(start..end).unwrap_or_default();
            self.owned().extend_from_slice(bytes);
        }
    }

    /// Sends bytes held from an earlier chunk.
    fn bytes(&mut self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.owned().extend_from_slice(bytes);
        }
    }

    fn done(self) -> Chunk {
        match self.owned {
            Some(v) => Chunk::Replace(v),
            None if self.fwd == self.chunk.len() => Chunk::Forward,
            None => Chunk::Replace(self.chunk.get(..self.fwd).unwrap_or_default().to_vec()),
        }
    }
}

impl Tracker {
    /// A tracker for a body in `dialect`. `streaming`: the response is `text/event-stream`, or
    /// for [`UsageDialect::Converse`] `application/vnd.amazon.eventstream` (decide on the
    /// response's content type: an error answer to a streaming request is JSON).
    /// `hide_usage_chunk`: remove the OpenAI chunk with empty `choices` and a `usage` object,
    /// because the gateway added `stream_options.include_usage` (see
    /// [`ensure_include_usage`](super::ensure_include_usage)); only meaningful when streaming.
    pub fn new(dialect: UsageDialect, streaming: bool, hide_usage_chunk: bool) -> Self {
        Self {
            dialect,
            streaming,
            hide: hide_usage_chunk && streaming,
            acc: Acc::default(),
            first_token: false,
            ended: false,
            buf: Vec::new(),
            seen: 0,
            split: Splitter::default(),
            out: Vec::new(),
            finish: None,
            frames: (streaming && dialect == UsageDialect::Converse).then(Box::default),
        }
    }

    /// Also reads the answer's finish reasons (each complete event, or a JSON body up to the
    /// size read whole); [`finish_reasons`](Self::finish_reasons) has them.
    pub fn with_finish_reasons(mut self) -> Self {
        self.finish = Some(Box::default());
        self
    }

    /// The finish reasons seen, when asked for.
    pub fn finish_reasons(&self) -> Option<&[String]> {
        self.finish.as_deref().map(|f| f.reasons.as_slice())
    }

    /// Whether generated output has been seen: any body byte for JSON, an event carrying
    /// content (not a role-only delta, `message_start` or ping) for SSE. For time to first token.
    pub fn first_token_seen(&self) -> bool {
        self.first_token
    }

    /// Observes one body chunk; says what to send to the client in its place.
    pub fn on_chunk(&mut self, chunk: &[u8]) -> Chunk {
        if self.ended {
            return Chunk::Forward;
        }
        if !self.streaming {
            self.json_chunk(chunk);
            return Chunk::Forward;
        }
        if let Some(frames) = self.frames.as_deref_mut() {
            frames.push(chunk, &mut self.acc, &mut self.first_token, self.finish.as_deref_mut());
            return Chunk::Forward;
        }
        let mut out = Out::new(chunk);
        let mut pos = 0;
        while let Some(len) = self.split.next_end(chunk.get(pos..).unwrap_or_default()) {
            self.event_end(&mut out, pos, pos + len);
            pos += len;
        }
        self.partial(&mut out, pos);
        if self.hide {
            out.done()
        } else {
            Chunk::Forward
        }
    }

    /// [`on_chunk`](Self::on_chunk) for the last chunk, with [`flush`](Self::flush)'s bytes
    /// appended.
    pub fn on_end(&mut self, chunk: &[u8]) -> Chunk {
        if !self.streaming && !self.ended && self.seen == 0 {
            // The whole JSON body in one chunk (the usual case): read where it lies, no copy.
            self.first_token |= !chunk.is_empty();
            self.seen = chunk.len();
            self.ended = true;
            self.json_usage(chunk);
            return Chunk::Forward;
        }
        let first = self.on_chunk(chunk);
        let rest = self.flush();
        match (first, rest.is_empty()) {
            (c, true) => c,
            (Chunk::Forward, false) => Chunk::Replace([chunk, &rest].concat()),
            (Chunk::Replace(mut v), false) => {
                v.extend_from_slice(&rest);
                Chunk::Replace(v)
            }
        }
    }

    /// Ends the stream and returns the bytes still held back (an unterminated last event, unless
    /// it is the hidden one). Empty when not hiding. Idempotent.
    pub fn flush(&mut self) -> Vec<u8> {
        self.end();
        std::mem::take(&mut self.out)
    }

    /// Ends the stream (if [`flush`](Self::flush) has not) and returns the usage found. Bytes
    /// held back stay available to a later `flush`.
    pub fn finish(&mut self) -> Option<Usage> {
        self.end();
        self.acc.result()
    }

    /// Bytes currently held in memory (for the memory-bound tests).
    #[cfg(test)]
    pub(crate) fn buffered_bytes(&self) -> usize {
        self.buf.capacity() + self.out.capacity() + self.frames.as_ref().map_or(0, |f| f.held())
    }

    fn json_chunk(&mut self, chunk: &[u8]) {
        self.first_token |= !chunk.is_empty();
        self.seen = self.seen.saturating_add(chunk.len());
        if self.seen <= WHOLE_BODY_MAX {
            self.buf.extend_from_slice(chunk);
        } else {
            push_tail(&mut self.buf, chunk);
        }
    }

    /// The event ending at `chunk[start..end]` (its head may be buffered) is complete.
    fn event_end(&mut self, out: &mut Out<'_>, start: usize, end: usize) {
        let bytes = out.chunk.get(start..end).unwrap_or_default();
        if self.seen > EVENT_MAX {
            // Oversized: its head was sent already; only its tail was kept.
            push_tail(&mut self.buf, bytes);
            self.oversized_event();
            out.range(start, end);
        } else if self.buf.is_empty() {
            if !self.inspect(bytes) {
                out.range(start, end);
            }
        } else {
            self.buf.extend_from_slice(bytes);
            let event = std::mem::take(&mut self.buf);
            if !self.inspect(&event) {
                out.bytes(&event);
            }
            // Reuse a small allocation for the next partial event; give a big one back.
            if event.capacity() <= REUSE_MAX {
                self.buf = event;
            }
        }
        self.buf.clear();
        self.seen = 0;
    }

    /// `chunk[pos..]` starts (or continues) an event that has not ended yet.
    fn partial(&mut self, out: &mut Out<'_>, pos: usize) {
        let rest = out.chunk.get(pos..).unwrap_or_default();
        let was_oversized = self.seen > EVENT_MAX;
        self.seen = self.seen.saturating_add(rest.len());
        if self.seen <= EVENT_MAX {
            // Held back in hiding mode: it may turn out to be the usage chunk.
            extend_bounded(&mut self.buf, rest);
            return;
        }
        if !was_oversized {
            // Too big to be the injected usage chunk: release what was held, keep a tail.
            if self.hide {
                out.bytes(&self.buf);
            }
            let head = std::mem::take(&mut self.buf);
            push_tail(&mut self.buf, &head);
        }
        push_tail(&mut self.buf, rest);
        out.range(pos, out.chunk.len());
    }

    /// Looks at one complete event; returns whether to hide it from the client.
    fn inspect(&mut self, event: &[u8]) -> bool {
        if !self.first_token && extract::is_token_event(self.dialect, event) {
            self.first_token = true;
        }
        if let Some(f) = self.finish.as_deref_mut() {
            f.scan(self.dialect, event);
        }
        if !extract::has_usage_object(event) {
            return false;
        }
        let seen = extract::object(self.dialect, &event_data(event), &mut self.acc);
        self.hide && self.dialect == UsageDialect::OpenAi && seen.usage && seen.empty_choices
    }

    fn oversized_event(&mut self) {
        if !self.first_token && extract::is_token_event(self.dialect, &self.buf) {
            self.first_token = true;
        }
        extract::tail(self.dialect, &self.buf, &mut self.acc);
    }

    fn end(&mut self) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        if !self.streaming {
            let body = std::mem::take(&mut self.buf);
            self.json_usage(&body);
        } else if let Some(frames) = self.frames.as_deref_mut() {
            frames.end(&mut self.acc);
        } else if self.seen > EVENT_MAX {
            self.oversized_event();
        } else if !self.buf.is_empty() {
            // An unterminated last event (or one ended by a final `\r`): read it leniently.
            self.split.finish();
            let event = std::mem::take(&mut self.buf);
            if !self.inspect(&event) && self.hide {
                self.out = event;
            }
        }
        self.buf = Vec::new();
    }
}

impl Tracker {
    /// Reads the usage of a JSON body (whole, or its tail past [`WHOLE_BODY_MAX`]): the last
    /// top-level member read from the end, else the top-level member found in one light pass,
    /// else the full parse for anything unusual; the tail for bodies too big to hold.
    fn json_usage(&mut self, body: &[u8]) {
        if let (Some(f), true) = (self.finish.as_deref_mut(), self.seen <= WHOLE_BODY_MAX) {
            f.scan(self.dialect, body);
        }
        let (dialect, acc) = (self.dialect, &mut self.acc);
        let found = self.seen <= WHOLE_BODY_MAX
            && (extract::last_member(dialect, body, acc)
                || extract::top_level(dialect, body, acc)
                || extract::object(dialect, body, acc).usage);
        if !found {
            extract::tail(dialect, body, acc);
        }
    }
}

/// Largest event buffer kept for reuse after its event ended.
const REUSE_MAX: usize = 64 * 1024;

/// Appends to a partial event without the doubling growth overshooting [`EVENT_MAX`].
fn extend_bounded(buf: &mut Vec<u8>, bytes: &[u8]) {
    let need = buf.len() + bytes.len();
    if need > buf.capacity() {
        let target = need.max(buf.capacity() * 2).min(need.max(EVENT_MAX));
        buf.reserve_exact(target - buf.len());
    }
    buf.extend_from_slice(bytes);
}

/// Appends `bytes` to `buf`, keeping only the last [`TAIL_MAX`] bytes (trimming in batches so
/// the copy cost stays linear).
pub(super) fn push_tail(buf: &mut Vec<u8>, bytes: &[u8]) {
    let bytes = bytes.get(bytes.len().saturating_sub(TAIL_MAX)..).unwrap_or_default();
    buf.extend_from_slice(bytes);
    if buf.len() > 2 * TAIL_MAX {
        buf.drain(..buf.len() - TAIL_MAX);
    }
}
