//! What the cache store keeps: one complete answer with what serving it needs (its family,
//! model and scope, to check a hit against the request; its times, for expiry; its token
//! counts, for usage records). The same bytes go to proxy shared data and to Redis.
//!
//! Encoding: the magic `FGC`, a version byte, then LEB128 numbers (`created_ms`, `expires_ms`,
//! `prompt_tokens`, `completion_tokens`), the length-prefixed UTF-8 `family`, `model` and
//! `scope`, and the length-prefixed body verbatim. Every length is checked and the encoding
//! must end exactly with the body, so any truncation or stray byte is an error: the store
//! is shared, and a damaged entry must read as a miss, never as a shorter answer.

use crate::route::Api;

/// The first bytes of every entry.
const MAGIC: &[u8; 3] = b"FGC";
/// The encoding's version (bumped when the layout changes: old entries then read as errors).
const VERSION: u8 = 1;

/// One cached answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Entry {
    /// The API family label used in the key ([`family`]).
    pub family: String,
    /// The resolved public model name.
    pub model: String,
    /// The isolation scope string.
    pub scope: String,
    /// When it was stored, Unix milliseconds (the caller's clock).
    pub created_ms: u64,
    /// When it expires, Unix milliseconds.
    pub expires_ms: u64,
    /// Prompt tokens of the original answer.
    pub prompt_tokens: u64,
    /// Completion tokens of the original answer.
    pub completion_tokens: u64,
    /// The complete non-streamed answer in the client's dialect ([`super::Shape::Json`]).
    pub body: Vec<u8>,
}

impl Entry {
    /// Whether the entry may still be served at `now_ms` (Unix milliseconds).
    pub fn is_fresh(&self, now_ms: u64) -> bool {
        now_ms < self.expires_ms
    }
}

/// Why bytes are not a cache entry.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
pub enum EntryError {
    /// They do not start with the magic.
    #[error("not a cache entry")]
    Magic,
    /// A version this build does not read.
    #[error("cache entry version {0} is not supported")]
    Version(u8),
    /// They end before the entry does.
    #[error("the cache entry is truncated")]
    Truncated,
    /// A number is longer than 64 bits.
    #[error("a number in the cache entry overflows")]
    Overflow,
    /// A text field is not UTF-8.
    #[error("a text field of the cache entry is not UTF-8")]
    Utf8,
    /// Bytes follow the body.
    #[error("{0} unexpected bytes follow the cache entry")]
    Trailing(usize),
}

/// The family label of an API, used in keys and entries; `None` when its answers are not
/// cached (images, audio, `count_tokens`).
pub fn family(api: Api) -> Option<&'static str> {
    match api {
        Api::ChatCompletions => Some("chat"),
        Api::Completions => Some("completions"),
        Api::Embeddings => Some("embeddings"),
        Api::Messages => Some("messages"),
        Api::GenerateContent | Api::StreamGenerateContent => Some("gemini"),
        Api::Responses => Some("responses"),
        Api::ImagesGenerations
        | Api::AudioSpeech
        | Api::AudioTranscriptions
        | Api::AudioTranslations
        | Api::CountTokens => None,
    }
}

/// The entry's bytes.
pub fn encode(e: &Entry) -> Vec<u8> {
    let texts = e.family.len() + e.model.len() + e.scope.len();
    let mut out = Vec::with_capacity(MAGIC.len() + 1 + 8 * 10 + texts + e.body.len());
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    for n in [e.created_ms, e.expires_ms, e.prompt_tokens, e.completion_tokens] {
        varint(&mut out, n);
    }
    for bytes in [e.family.as_bytes(), e.model.as_bytes(), e.scope.as_bytes(), &e.body] {
        varint(&mut out, bytes.len() as u64);
        out.extend_from_slice(bytes);
    }
    out
}

/// Reads an entry; never panics, whatever the bytes.
///
/// # Errors
/// The bytes are not exactly one entry of this version ([`EntryError`]).
pub fn decode(bytes: &[u8]) -> Result<Entry, EntryError> {
    let mut r = Reader(bytes);
    if r.take(MAGIC.len()).map_err(|_| EntryError::Magic)? != MAGIC {
        return Err(EntryError::Magic);
    }
    match r.take(1)? {
        [VERSION] => {}
        [v] => return Err(EntryError::Version(*v)),
        _ => return Err(EntryError::Truncated),
    }
    let (created_ms, expires_ms) = (r.number()?, r.number()?);
    let (prompt_tokens, completion_tokens) = (r.number()?, r.number()?);
    let (family, model, scope) = (r.text()?, r.text()?, r.text()?);
    let body = r.bytes()?.to_vec();
    if !r.0.is_empty() {
        return Err(EntryError::Trailing(r.0.len()));
    }
    Ok(Entry { family, model, scope, created_ms, expires_ms, prompt_tokens, completion_tokens, body })
}

/// Appends `n` as LEB128.
fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The bytes not read yet.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EntryError> {
        let (head, rest) = self.0.split_at_checked(n).ok_or(EntryError::Truncated)?;
        self.0 = rest;
        Ok(head)
    }

    /// A LEB128 number of at most 64 bits.
    fn number(&mut self) -> Result<u64, EntryError> {
        let mut n: u64 = 0;
        for shift in (0..64).step_by(7) {
            let [b] = self.take(1)? else { return Err(EntryError::Truncated) };
            let low = u64::from(b & 0x7f);
            // The tenth byte may only hold the 64th bit.
            if shift == 63 && low > 1 {
                return Err(EntryError::Overflow);
            }
            n |= low << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(EntryError::Overflow)
    }

    /// Length-prefixed bytes.
    fn bytes(&mut self) -> Result<&'a [u8], EntryError> {
        let len = usize::try_from(self.number()?).map_err(|_| EntryError::Truncated)?;
        self.take(len)
    }

    /// Length-prefixed UTF-8.
    fn text(&mut self) -> Result<String, EntryError> {
        std::str::from_utf8(self.bytes()?).map(str::to_string).map_err(|_| EntryError::Utf8)
    }
}

#[cfg(test)]
mod tests;
