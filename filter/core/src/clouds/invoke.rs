//! Anthropic models on Bedrock through InvokeModel, which takes Anthropic's own Messages body:
//! every Messages feature (cache control, thinking, betas) reaches the model as the client
//! wrote it, and the answer is Anthropic's own, so it is read (usage, limits, translation for
//! other clients) as an Anthropic answer.
//!
//! - The request: `POST /model/{escaped id}/invoke`, or `/invoke-with-response-stream` for a
//!   stream; the Messages body without `model` (it is in the path) and `stream` (the path
//!   says it), with `anthropic_version: bedrock-2023-05-31`, and the `anthropic-beta` header's
//!   betas as the `anthropic_beta` array.
//! - A streamed answer is AWS event-stream framing ([`super::eventstream`]) of `chunk` events,
//!   each `{"bytes": base64(one Anthropic stream event)}`. [`Reframer`] turns it into the
//!   server-sent events Anthropic's API sends (`event: <type>` / `data: <event>`), the event
//!   JSON passed on verbatim, so everything after it (usage, limits, translation) reads an
//!   Anthropic stream. Exceptions Bedrock sends after its 200, a corrupt frame or a body ending
//!   inside one become Anthropic's `error` event, after which nothing more is read.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::eventstream::{self, Kind, Message};
use crate::translate::converse::escape_model_id;

/// The `anthropic_version` Bedrock wants in Messages bodies.
pub const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// Largest event-stream frame read (Bedrock's chunks carry at most 1,000,000 bytes, base64).
const MAX_FRAME: usize = 2 << 20;

/// Why a Messages body cannot be sent to InvokeModel.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// The body is not a JSON object.
    #[error("the body is not a JSON object: {0}")]
    NotAnObject(String),
}

/// Whether the Bedrock model id (a foundation model, a cross-region inference profile such as
/// `us.anthropic.…`, or an ARN ending in one) names an Anthropic model.
pub fn is_anthropic(model: &str) -> bool {
    let id = model.rsplit('/').next().unwrap_or(model);
    let mut parts = id.splitn(3, '.');
    match (parts.next(), parts.next()) {
        (Some("anthropic"), Some(model)) => !model.is_empty(),
        (Some(_geo), Some("anthropic")) => parts.next().is_some_and(|m| !m.is_empty()),
        _ => false,
    }
}

/// The InvokeModel path of `model` (below the provider's prefix).
pub fn path(model: &str, stream: bool) -> String {
    let method = if stream { "invoke-with-response-stream" } else { "invoke" };
    format!("/model/{}/{method}", escape_model_id(model))
}

/// A Messages body as InvokeModel takes it (see the module notes), and whether it asked for a
/// stream.
pub fn body(messages: &[u8]) -> Result<(Vec<u8>, bool), InvokeError> {
    let mut doc = object(messages)?;
    doc.remove("model");
    let stream = doc.remove("stream").and_then(|s| s.as_bool()).unwrap_or(false);
    doc.insert("anthropic_version".into(), BEDROCK_ANTHROPIC_VERSION.into());
    Ok((to_vec(&doc), stream))
}

/// `body` (an InvokeModel body) with the betas of an `anthropic-beta` header value (comma
/// separated) added to its `anthropic_beta` array, each once; `None` when it names none.
pub fn with_betas(body: &[u8], header: &[u8]) -> Result<Option<Vec<u8>>, InvokeError> {
    let header = String::from_utf8_lossy(header);
    let betas: Vec<&str> = header.split(',').map(str::trim).filter(|b| !b.is_empty()).collect();
    if betas.is_empty() {
        return Ok(None);
    }
    let mut doc = object(body)?;
    let list = doc.entry("anthropic_beta").or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(list) = list {
        for beta in betas {
            if !list.iter().any(|b| b.as_str() == Some(beta)) {
                list.push(beta.into());
            }
        }
    }
    Ok(Some(to_vec(&doc)))
}

fn object(body: &[u8]) -> Result<Map<String, Value>, InvokeError> {
    serde_json::from_slice(body).map_err(|e| InvokeError::NotAnObject(e.to_string()))
}

fn to_vec(doc: &Map<String, Value>) -> Vec<u8> {
    // A map of JSON values always serializes.
    serde_json::to_vec(doc).unwrap_or_default()
}

/// An InvokeModelWithResponseStream body turned into Anthropic's server-sent events as it
/// arrives (one frame held at most).
#[derive(Debug)]
pub struct Reframer {
    frames: eventstream::Decoder,
    /// An error event was written: the rest of the body is ignored.
    failed: bool,
}

impl Default for Reframer {
    fn default() -> Self {
        Reframer { frames: eventstream::Decoder::new(MAX_FRAME), failed: false }
    }
}

/// A `chunk` event's payload.
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    bytes: std::borrow::Cow<'a, str>,
}

/// An Anthropic stream event, as far as its SSE name goes.
#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(borrow, rename = "type")]
    kind: std::borrow::Cow<'a, str>,
}

impl Reframer {
    /// The next bytes of the body: the events of every frame they complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.failed {
            return out;
        }
        self.frames.push(bytes);
        while let Some(next) = self.frames.next_message() {
            match next {
                Ok(message) => self.message(&message, &mut out),
                Err(e) => self.fail(&format!("the provider's event stream cannot be read: {e}"), &mut out),
            }
            if self.failed {
                break;
            }
        }
        out
    }

    /// The body ended: an error event if it ended inside a frame.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if let (false, Err(e)) = (self.failed, self.frames.finish()) {
            self.fail(&format!("the provider's event stream cannot be read: {e}"), &mut out);
        }
        out
    }

    /// Bytes held (a frame in progress).
    pub fn held(&self) -> usize {
        self.frames.buffered()
    }

    fn message(&mut self, m: &Message, out: &mut Vec<u8>) {
        match m.kind() {
            Kind::Event("chunk") => match decode_chunk(&m.payload) {
                Ok((kind, event)) => write_event(&kind, &event, out),
                Err(why) => self.fail(why, out),
            },
            Kind::Exception(kind) => {
                let payload: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
                let message = payload.get("message").and_then(Value::as_str).unwrap_or("no message");
                self.fail_as(error_type(kind), &format!("{kind}: {message}"), out);
            }
            Kind::Error { code, message } => self.fail(&format!("{code}: {message}"), out),
            // Other events (none are documented) carry nothing a client reads.
            Kind::Event(_) | Kind::Other => {}
        }
    }

    fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        self.fail_as("api_error", message, out);
    }

    fn fail_as(&mut self, kind: &str, message: &str, out: &mut Vec<u8>) {
        self.failed = true;
        let error = serde_json::json!({"type": "error", "error": {"type": kind, "message": message}});
        write_event("error", error.to_string().as_bytes(), out);
    }
}

/// The Anthropic event inside a `chunk` payload, and its `type`.
fn decode_chunk(payload: &[u8]) -> Result<(String, Vec<u8>), &'static str> {
    let chunk: Chunk<'_> = serde_json::from_slice(payload).map_err(|_| "the provider sent a chunk without bytes")?;
    let event = base64::engine::general_purpose::STANDARD
        .decode(chunk.bytes.as_bytes())
        .map_err(|_| "the provider sent a chunk whose bytes are not base64")?;
    let typed: Typed<'_> =
        serde_json::from_slice(&event).map_err(|_| "the provider sent a chunk that is not an Anthropic event")?;
    Ok((typed.kind.into_owned(), event))
}

/// One server-sent event; a payload spanning lines (JSON allows CR and LF between tokens, and
/// either ends an SSE line) gets a `data:` field per line, which the reader joins with newlines.
fn write_event(name: &str, data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"event: ");
    out.extend(name.bytes().filter(|b| !matches!(b, b'\r' | b'\n')));
    out.push(b'\n');
    for line in data.split(|&b| matches!(b, b'\r' | b'\n')) {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// Anthropic's error type for a Bedrock exception (what its SDKs decide retries by).
fn error_type(exception: &str) -> &'static str {
    match exception {
        "throttlingException" | "serviceUnavailableException" => "overloaded_error",
        "validationException" => "invalid_request_error",
        _ => "api_error",
    }
}

#[cfg(test)]
mod tests;
