//! What the gateway reads of a JSON-RPC 2.0 message from an MCP client, and the error answer it
//! sends back when it refuses one.
//!
//! The message is read with serde into borrowed fields captured as raw JSON text: unknown
//! fields (and the other fields of `params`) are skipped without allocation, the id keeps its
//! exact text so it can be echoed back, and a repeated field the gateway reads is an error (a
//! server reading the other copy would see another tool than the one the grants allowed).

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use std::borrow::Cow;

/// The deepest nesting of arrays and objects accepted: serde_json's own recursion limit. Values
/// the gateway skips are not depth-limited by serde_json, so this is checked separately, to
/// spare the MCP server a document its parser may choke on.
const MAX_DEPTH: usize = 128;

/// What the gateway reads of one JSON-RPC message sent by an MCP client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Request, notification or response.
    pub kind: Kind,
    /// The method (e.g. `tools/call`), unescaped; `None` for responses.
    pub method: Option<String>,
    /// The id's JSON text exactly as it should be echoed back: `1`, `"abc"` (quotes included).
    /// `None` for notifications, and for responses whose id is absent or `null`.
    pub id: Option<String>,
    /// `params.uri` for the `resources/*` methods, `params.name` for the others (`tools/call`,
    /// `prompts/get`), unescaped: what the caller's grants are checked against.
    pub name: Option<String>,
}

/// The kind of a JSON-RPC message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A `method` and an `id`: an answer is expected.
    Request,
    /// A `method` without an `id`: no answer.
    Notification,
    /// A `result` or an `error` without a `method`: the client answering a server request.
    Response,
}

/// Why a client message was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ScanError {
    /// Not JSON (or not UTF-8, too deeply nested, or a field the gateway reads given twice);
    /// the parser's message, which does not echo the input.
    #[error("parse error: {0}")]
    NotJson(String),
    /// A top-level array: JSON-RPC batches were removed from MCP in 2025-06-18.
    #[error("JSON-RPC batches are not supported")]
    Batch,
    /// JSON, but not an object.
    #[error("a JSON-RPC message must be an object")]
    NotAnObject,
    /// `jsonrpc` is absent or not `"2.0"`.
    #[error("jsonrpc must be \"2.0\"")]
    NotJsonRpc,
    /// `method` is not a string, or is given with `result`/`error`, or none of them is given.
    #[error("a message needs a string method, or a result or error")]
    BadMethod,
    /// `id` is not a string or a number (`null` is accepted on responses only).
    #[error("id must be a string or a number")]
    BadId,
    /// `params.name` (or `params.uri`) is given but is not a string.
    #[error("params.name and params.uri must be strings")]
    BadName,
}

impl ScanError {
    /// The JSON-RPC error code: -32700 (parse error) for [`ScanError::NotJson`], -32600
    /// (invalid request) for the rest.
    pub fn code(&self) -> i64 {
        match self {
            Self::NotJson(_) => -32700,
            _ => -32600,
        }
    }
}

/// The fields read, each kept as raw JSON text (`null` included) so its type is checked here
/// rather than turned into an opaque serde error.
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, default, deserialize_with = "raw")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    method: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    id: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    error: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    params: Option<&'a RawValue>,
}

/// The fields of `params` read (read from its raw text only when it is an object: a struct
/// would also accept an array, by position).
#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default, deserialize_with = "raw")]
    name: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "raw")]
    uri: Option<&'a RawValue>,
}

/// A present field, whatever its value: `Option<&RawValue>` alone would read `null` as absent.
fn raw<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The JSON type of a raw value, told by its first byte (raw values start at the value).
fn first(raw: &RawValue) -> u8 {
    raw.get().bytes().next().unwrap_or(b' ')
}

/// The unescaped text of a raw JSON string; `None` for any other type.
fn string(raw: &RawValue) -> Option<String> {
    let text = raw.get();
    text.starts_with('"').then(|| serde_json::from_str::<Cow<'_, str>>(text).ok()).flatten().map(Cow::into_owned)
}

fn not_json(e: serde_json::Error) -> ScanError {
    ScanError::NotJson(e.to_string())
}

/// Reads one client message. Unknown fields are skipped without allocation; nesting deeper
/// than serde_json's recursion limit is a [`ScanError::NotJson`] error (never a stack
/// overflow).
///
/// # Errors
/// The [`ScanError`] saying why the message is refused; its [`ScanError::code`] is the
/// JSON-RPC error code to answer with.
pub fn scan(body: &[u8]) -> Result<Message, ScanError> {
    let text = std::str::from_utf8(body).map_err(|_| ScanError::NotJson("invalid UTF-8".to_owned()))?;
    if too_deep(body) {
        return Err(ScanError::NotJson("recursion limit exceeded".to_owned()));
    }
    let refused = match text.trim_start_matches([' ', '\t', '\n', '\r']).bytes().next() {
        Some(b'{') => None,
        Some(b'[') => Some(ScanError::Batch),
        _ => Some(ScanError::NotAnObject),
    };
    if let Some(refused) = refused {
        serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(not_json)?;
        return Err(refused);
    }
    let wire: Wire<'_> = serde_json::from_str(text).map_err(not_json)?;
    if wire.jsonrpc.and_then(string).as_deref() != Some("2.0") {
        return Err(ScanError::NotJsonRpc);
    }
    let answer = wire.result.is_some() || wire.error.is_some();
    let (kind, method) = match wire.method {
        Some(m) if !answer => (Kind::Request, Some(string(m).ok_or(ScanError::BadMethod)?)),
        None if answer => (Kind::Response, None),
        _ => return Err(ScanError::BadMethod),
    };
    let (kind, id) = match (kind, wire.id.map(|id| (first(id), id))) {
        (Kind::Request, None) => (Kind::Notification, None),
        (_, Some((b'"' | b'-' | b'0'..=b'9', id))) => (kind, Some(id.get().to_owned())),
        (Kind::Response, Some((b'n', _)) | None) => (kind, None),
        _ => return Err(ScanError::BadId),
    };
    let name = match (&method, wire.params) {
        (Some(method), Some(params)) if first(params) == b'{' => target(method, params)?,
        _ => None,
    };
    Ok(Message { kind, method, id, name })
}

/// What a request acts on: `params.uri` for the `resources/*` methods (so a `name` beside it
/// cannot stand in for the URI the server reads), `params.name` for the others.
fn target(method: &str, params: &RawValue) -> Result<Option<String>, ScanError> {
    let params: Params<'_> = serde_json::from_str(params.get()).map_err(not_json)?;
    let field = if method.starts_with("resources/") { params.uri } else { params.name };
    field.map(|f| string(f).ok_or(ScanError::BadName)).transpose()
}

/// Whether arrays and objects nest deeper than [`MAX_DEPTH`] (brackets inside strings do not
/// count). Only meaningful for valid JSON, which the parse checks.
fn too_deep(body: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// A JSON-RPC 2.0 error response body:
/// `{"jsonrpc":"2.0","id":<id or null>,"error":{"code":..,"message":..}}`.
///
/// `id` is the raw JSON text from [`Message::id`]; anything that is not a JSON string or number
/// is written as `null`, so the body is always valid JSON. `message` is JSON-escaped.
pub fn error_body(id: Option<&str>, code: i64, message: &str) -> Vec<u8> {
    let id = id.filter(|id| valid_id(id)).unwrap_or("null");
    let message = serde_json::Value::from(message);
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#).into_bytes()
}

/// Whether `id` is the text of one JSON string or number.
fn valid_id(id: &str) -> bool {
    matches!(id.bytes().next(), Some(b'"' | b'-' | b'0'..=b'9'))
        && serde_json::from_str::<serde::de::IgnoredAny>(id).is_ok()
}
