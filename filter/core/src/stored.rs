//! Stored responses (the Responses API's `store`): the pure parts the filter and the sidecar
//! share.
//!
//! - [`lifecycle`] classifies `GET`/`DELETE /v1/responses/{id}` and `GET
//!   /v1/responses/{id}/input_items`, checking the id's shape, so a malformed id is a 400
//!   before anything is asked of the sidecar.
//! - [`wants_store`] reads a request's top-level `store` (absent means `true`, OpenAI's
//!   default).
//! - [`final_event`] finds the `response.completed` (or `response.incomplete`) event of a
//!   captured stream: it carries
//!   the whole response, so a streamed response is stored from it.
//! - [`chain`] reads `previous_response_id` and rebuilds a follow-up's conversation from the
//!   stored chain, so any provider gets the whole of it.
//! - [`conversations`] classifies the Conversations API's calls.
//! - [`include`] checks the `include` of a read.
//! - [`page`] pages the input items of `GET /v1/responses/{id}/input_items` as OpenAI does.
//! - The headers and path of the filter's call that hands a finished response to the sidecar
//!   ([`OWNER_HEADER`], [`REQUEST_BYTES_HEADER`], [`STREAMED_HEADER`]).
//!
//! Who may read a stored response is decided by its *owner*: the digest of the virtual key that
//! created it ([`owner`]), so a renamed key keeps its responses and another key with the same
//! name does not see them.

use crate::auth::Caller;
use crate::config::Config;
use crate::error::ApiError;
use crate::usage::sse::{event_data, Splitter};

pub mod chain;
pub mod conversations;
pub mod include;
pub mod page;

/// The request header carrying the owner of a stored response on the filter's sidecar calls.
pub const OWNER_HEADER: &str = "x-ferrogate-owner";
/// The request header carrying the first group of the caller's key, which owns stored state
/// under `responses.visibility: group`.
pub const OWNER_GROUP_HEADER: &str = "x-ferrogate-owner-group";
/// How many leading bytes of the stored call's body are the client's request (the rest is the
/// answer the client got).
pub const REQUEST_BYTES_HEADER: &str = "x-ferrogate-request-bytes";
/// Present (`1`) when the captured answer is an event stream rather than one JSON object.
pub const STREAMED_HEADER: &str = "x-ferrogate-streamed";
/// The sidecar route a finished response is handed to.
pub const STORE_PATH: &str = "/v1/responses";
/// The most bytes of an answer the filter keeps to store it; a larger answer is not stored.
pub const MAX_CAPTURE_BYTES: usize = 16 << 20;
/// The longest response id accepted.
pub const MAX_ID_LEN: usize = 256;

/// A lifecycle call on a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `GET /v1/responses/{id}`.
    Retrieve,
    /// `DELETE /v1/responses/{id}`.
    Delete,
    /// `GET /v1/responses/{id}/input_items`.
    InputItems,
}

/// A lifecycle call and the id it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifecycle<'p> {
    /// What is asked.
    pub op: Op,
    /// The response id (checked by [`valid_id`]).
    pub id: &'p str,
}

/// Classifies `method` on `bare` (a path under `/v1/responses/`, query cut). `Err` is the
/// answer: 400 for a malformed id, 405 for a wrong method, 404 for an unknown sub-path, 400
/// for `cancel` (background responses are not run here, so none can be cancelled).
pub fn lifecycle<'p>(method: &str, bare: &'p str) -> Result<Lifecycle<'p>, ApiError> {
    let rest = bare.strip_prefix("/v1/responses/").unwrap_or_default();
    let (id, sub) = match crate::bytes::find_byte(rest.as_bytes(), b'/') {
        Some(i) => (rest.get(..i).unwrap_or_default(), rest.get(i + 1..)),
        None => (rest, None),
    };
    let op = match (sub, method) {
        (None, "GET") => Op::Retrieve,
        (None, "DELETE") => Op::Delete,
        (Some("input_items"), "GET") => Op::InputItems,
        (Some("cancel"), "POST") if valid_id(id) => return Err(ApiError::not_cancellable(id)),
        (Some("cancel"), "POST") => return Err(ApiError::bad_response_id(id)),
        (None | Some("input_items" | "cancel"), _) => return Err(ApiError::method_not_allowed(method, bare)),
        (Some(_), _) => return Err(ApiError::unknown_url(method, bare)),
    };
    if !valid_id(id) {
        return Err(ApiError::bad_response_id(id));
    }
    Ok(Lifecycle { op, id })
}

/// Whether `id` looks like a response id: `resp_` and then 1 to 251 letters, digits, `_`, `-`,
/// `.` or `:` — nothing that could move the sidecar path it is placed in.
pub fn valid_id(id: &str) -> bool {
    let Some(tail) = id.strip_prefix("resp_") else { return false };
    !tail.is_empty()
        && id.len() <= MAX_ID_LEN
        && tail.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
}

/// Whether the client's Responses request asks for its response to be stored: a top-level
/// `"store": false` is the only no (absent, or anything unreadable, means OpenAI's default).
pub fn wants_store(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct StoreFlag {
        #[serde(default)]
        store: Option<bool>,
    }
    !serde_json::from_slice::<StoreFlag>(body).is_ok_and(|f| f.store == Some(false))
}

/// Refuses a Responses request with `"background": true` (400 naming the parameter): nothing
/// here runs in the background. A cheap byte search first: other requests are not parsed.
///
/// # Errors
/// The request asks for a background response.
pub fn check_background(body: &[u8]) -> Result<(), ApiError> {
    #[derive(serde::Deserialize)]
    struct Background {
        #[serde(default)]
        background: Option<serde_json::Value>,
    }
    if crate::bytes::find_sub(body, b"\"background\"").is_none() {
        return Ok(());
    }
    match serde_json::from_slice::<Background>(body) {
        Ok(Background { background: Some(serde_json::Value::Bool(true)) }) => Err(ApiError::background_unsupported()),
        _ => Ok(()),
    }
}

/// The owner of what `caller` stores: its key's digest, or `""` on a gateway without keys.
pub fn owner(config: &Config, caller: Caller) -> &str {
    caller.key_index().and_then(|i| config.keys.get(i)).map_or("", |k| k.digest.as_str())
}

/// The first group of `caller`'s key, which owns what it stores under `visibility: group`
/// (the sidecar decides; the filter names both).
pub fn owner_group(config: &Config, caller: Caller) -> Option<&str> {
    let key = caller.key_index().and_then(|i| config.keys.get(i))?;
    key.group_names.first().map(String::as_str)
}

/// The owner headers of a store call: the key's digest and its first group, when there are.
pub fn owner_headers(config: &Config, caller: Caller) -> Vec<(&'static str, &str)> {
    let mut headers = Vec::with_capacity(2);
    let owner = owner(config, caller);
    if !owner.is_empty() {
        headers.push((OWNER_HEADER, owner));
    }
    if let Some(group) = owner_group(config, caller) {
        headers.push((OWNER_GROUP_HEADER, group));
    }
    headers
}

/// The `data` of the last `response.completed` or `response.incomplete` event (a response that
/// stopped at `max_output_tokens` or on a content filter is still a response, which OpenAI
/// keeps too) in a captured event stream (`None`: the stream never ended as a response, e.g.
/// it failed or was cut).
pub fn final_event(stream: &[u8]) -> Option<Vec<u8>> {
    let mut splitter = Splitter::default();
    let mut rest = stream;
    let mut found = None;
    loop {
        let (event, more) = match splitter.next_end(rest) {
            Some(end) => (rest.get(..end)?, rest.get(end..)?),
            // The last event may lack its blank line when the stream ended.
            None => (rest, &[][..]),
        };
        let data = event_data(event);
        if is_final(&data) {
            found = Some(data.into_owned());
        }
        if more.is_empty() || event.is_empty() {
            return found;
        }
        rest = more;
    }
}

/// Whether an event's data is a `response.completed` or `response.incomplete` event (read, not
/// searched for: a text delta may contain the words).
fn is_final(data: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Kind<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let kind = serde_json::from_slice::<Kind<'_>>(data).ok().and_then(|k| k.kind);
    matches!(kind.as_deref(), Some("response.completed" | "response.incomplete"))
}

#[cfg(test)]
mod tests;
