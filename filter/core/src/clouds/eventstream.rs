//! An incremental decoder of AWS event-stream framing (`application/vnd.amazon.eventstream`),
//! the body of Bedrock's streamed answers (ConverseStream, InvokeModelWithResponseStream).
//!
//! A message: `total length (u32) | headers length (u32) | prelude CRC | headers | payload |
//! message CRC`, big-endian, CRC-32 (IEEE) over the prelude's first 8 bytes and over the whole
//! message but its last 4. The body arrives in arbitrary chunks: [`Decoder::push`] them, then
//! drain [`Decoder::next_message`].
//!
//! Bounded memory: the prelude CRC is checked before its lengths are trusted, and a message
//! longer than the limit is refused from its prelude, before any of it is waited for. An error
//! is final: framing has no resynchronisation point, so the decoder drops its buffer, ignores
//! further input and reports no more messages.

mod headers;

pub use headers::{Header, HeaderValue};

/// Default message size limit: 16 MiB, the limit of AWS's C implementation (Bedrock's events
/// are far smaller: a `chunk` carries at most 1,000,000 bytes).
pub const DEFAULT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Header block limit, botocore's (128 KiB).
pub const MAX_HEADERS: u32 = 128 * 1024;

const PRELUDE: usize = 12;
/// Prelude plus message CRC: a message without headers or payload.
const MIN_MESSAGE: u32 = 16;

/// Why the stream cannot be decoded. Offsets are within the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventStreamError {
    /// The prelude CRC does not match its first 8 bytes (lengths not trusted).
    #[error("event-stream prelude CRC mismatch (sent {expected:#010x}, computed {actual:#010x})")]
    PreludeCrc {
        /// The CRC in the message.
        expected: u32,
        /// The CRC of the bytes received.
        actual: u32,
    },
    /// The message CRC does not match.
    #[error("event-stream message CRC mismatch (sent {expected:#010x}, computed {actual:#010x})")]
    MessageCrc {
        /// The CRC in the message.
        expected: u32,
        /// The CRC of the bytes received.
        actual: u32,
    },
    /// A total length below 16, the size of an empty message.
    #[error("event-stream message length {total} is below the minimum of 16")]
    MessageTooShort {
        /// The total length announced.
        total: u32,
    },
    /// A total length above the decoder's limit.
    #[error("event-stream message length {total} exceeds the limit of {max}")]
    MessageTooLarge {
        /// The total length announced.
        total: u32,
        /// The limit.
        max: usize,
    },
    /// A headers length that does not fit in the message or exceeds [`MAX_HEADERS`].
    #[error("event-stream headers length {headers} does not fit a message of {total} bytes")]
    HeadersTooLong {
        /// The headers length announced.
        headers: u32,
        /// The total length announced.
        total: u32,
    },
    /// A header runs past the end of the header block.
    #[error("event-stream header truncated at offset {offset}")]
    TruncatedHeader {
        /// Where the missing bytes start.
        offset: usize,
    },
    /// A header value type outside 0..=9.
    #[error("unknown event-stream header type {type_byte} at offset {offset}")]
    UnknownHeaderType {
        /// The type byte.
        type_byte: u8,
        /// Its offset.
        offset: usize,
    },
    /// A header name or string value that is not UTF-8.
    #[error("event-stream header text at offset {offset} is not UTF-8")]
    InvalidUtf8 {
        /// Where the text starts.
        offset: usize,
    },
    /// The same header name twice in one message.
    #[error("duplicate event-stream header {name:?}")]
    DuplicateHeader {
        /// The repeated name.
        name: String,
    },
    /// The stream ended inside a message.
    #[error("event stream ended inside a message ({buffered} bytes pending)")]
    TruncatedStream {
        /// Bytes received of the unfinished message.
        buffered: usize,
    },
}

/// One decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Headers in wire order.
    pub headers: Vec<Header>,
    /// The payload (JSON for Bedrock's events and exceptions).
    pub payload: Vec<u8>,
}

/// What a message is, from its `:message-type` header and the header naming it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind<'a> {
    /// `event`, with `:event-type` (`contentBlockDelta`, `chunk`, …; empty if missing).
    Event(&'a str),
    /// `exception`, with `:exception-type` (`throttlingException`, …); payload `{"message"}`.
    Exception(&'a str),
    /// `error`, with `:error-code` and `:error-message`.
    Error {
        /// `:error-code`.
        code: &'a str,
        /// `:error-message`.
        message: &'a str,
    },
    /// No or another `:message-type`.
    Other,
}

impl Message {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.headers.iter().find(|h| h.name == name).map(|h| &h.value)
    }

    /// The value of header `name` if it is a string.
    pub fn str_header(&self, name: &str) -> Option<&str> {
        match self.header(name) {
            Some(HeaderValue::String(s)) => Some(s),
            _ => None,
        }
    }

    /// What the message is (event, exception, error).
    pub fn kind(&self) -> Kind<'_> {
        let named = |header: &str| self.str_header(header).unwrap_or_default();
        match self.str_header(":message-type") {
            Some("event") => Kind::Event(named(":event-type")),
            Some("exception") => Kind::Exception(named(":exception-type")),
            Some("error") => Kind::Error { code: named(":error-code"), message: named(":error-message") },
            _ => Kind::Other,
        }
    }
}

/// The incremental decoder; see the module notes.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Vec<u8>,
    /// Start of the unconsumed bytes in `buf`.
    start: usize,
    /// Total length of the message at `start`, once its prelude passed its checks.
    pending: Option<usize>,
    max_message: usize,
    failed: Option<EventStreamError>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_MESSAGE)
    }
}

impl Decoder {
    /// A decoder refusing messages longer than `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        Self { buf: Vec::new(), start: 0, pending: None, max_message, failed: None }
    }

    /// Appends received bytes (ignored once failed). The decoder keeps only what
    /// [`next_message`](Self::next_message) has not consumed yet: drain it after each push.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message; `None` when more bytes are needed. An error is returned
    /// once; afterwards the decoder is failed ([`failure`](Self::failure)) and returns `None`.
    pub fn next_message(&mut self) -> Option<Result<Message, EventStreamError>> {
        if self.failed.is_some() {
            return None;
        }
        match self.decode_next() {
            Ok(message) => message.map(Ok),
            Err(e) => {
                self.failed = Some(e.clone());
                self.buf = Vec::new();
                self.start = 0;
                self.pending = None;
                Some(Err(e))
            }
        }
    }

    /// The error that stopped the decoder, if any.
    pub fn failure(&self) -> Option<&EventStreamError> {
        self.failed.as_ref()
    }

    /// Bytes received and not yet returned as messages.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// At the end of the body: `Ok` if it ended between messages, the error otherwise.
    pub fn finish(&self) -> Result<(), EventStreamError> {
        match (&self.failed, self.buffered()) {
            (Some(e), _) => Err(e.clone()),
            (None, 0) => Ok(()),
            (None, buffered) => Err(EventStreamError::TruncatedStream { buffered }),
        }
    }

    fn decode_next(&mut self) -> Result<Option<Message>, EventStreamError> {
        let available = self.buf.get(self.start..).unwrap_or_default();
        let total = match self.pending {
            Some(total) => total,
            None if available.len() < PRELUDE => return Ok(None),
            None => {
                let total = check_prelude(available, self.max_message)?;
                self.pending = Some(total);
                total
            }
        };
        let Some(frame) = available.get(..total) else {
            return Ok(None);
        };
        let message = parse_message(frame)?;
        self.start += total;
        self.pending = None;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(message))
    }
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        word.copy_from_slice(src);
    }
    u32::from_be_bytes(word)
}

/// Checks the prelude at the start of `bytes` (at least 12 of them); the message's total length.
fn check_prelude(bytes: &[u8], max_message: usize) -> Result<usize, EventStreamError> {
    let (total, headers, expected) = (be_u32(bytes, 0), be_u32(bytes, 4), be_u32(bytes, 8));
    let actual = crc32fast::hash(bytes.get(..8).unwrap_or_default());
    if actual != expected {
        return Err(EventStreamError::PreludeCrc { expected, actual });
    }
    if total < MIN_MESSAGE {
        return Err(EventStreamError::MessageTooShort { total });
    }
    let total_len = usize::try_from(total).unwrap_or(usize::MAX);
    if total_len > max_message {
        return Err(EventStreamError::MessageTooLarge { total, max: max_message });
    }
    if headers > total - MIN_MESSAGE || headers > MAX_HEADERS {
        return Err(EventStreamError::HeadersTooLong { headers, total });
    }
    Ok(total_len)
}

/// Decodes one whole message whose prelude passed [`check_prelude`].
fn parse_message(frame: &[u8]) -> Result<Message, EventStreamError> {
    let body_end = frame.len() - 4;
    let expected = be_u32(frame, body_end);
    let actual = crc32fast::hash(frame.get(..body_end).unwrap_or_default());
    if actual != expected {
        return Err(EventStreamError::MessageCrc { expected, actual });
    }
    let headers_end = PRELUDE + usize::try_from(be_u32(frame, 4)).unwrap_or(usize::MAX);
    let block = frame.get(PRELUDE..headers_end).unwrap_or_default();
    let headers = headers::parse_headers(block, PRELUDE)?;
    let payload = frame.get(headers_end..body_end).unwrap_or_default().to_vec();
    Ok(Message { headers, payload })
}

#[cfg(test)]
mod tests;

/// A frame as Bedrock sends it, for tests: string headers (type 7), the payload, both CRCs.
#[cfg(test)]
pub(crate) fn test_frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        block.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        block.extend_from_slice(name.as_bytes());
        block.push(7);
        block.extend_from_slice(&u16::try_from(value.len()).unwrap_or(u16::MAX).to_be_bytes());
        block.extend_from_slice(value.as_bytes());
    }
    let total = u32::try_from(16 + block.len() + payload.len()).unwrap_or(u32::MAX);
    let mut out = [total.to_be_bytes(), u32::try_from(block.len()).unwrap_or(u32::MAX).to_be_bytes()].concat();
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out.extend_from_slice(&block);
    out.extend_from_slice(payload);
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out
}
