//! `previous_response_id` on every provider: a follow-up names the stored response it
//! continues, and the provider must see the whole conversation.
//!
//! - [`continues`] reads a Responses request's `previous_response_id` or `conversation` (a
//!   cheap byte search first, so requests without either pay nothing more) and checks it.
//! - The sidecar walks the chain for the key that owns it and answers a [`Chain`]: every
//!   input item and output item of the chain, oldest first, and the provider that created all
//!   of it natively, if one did.
//! - [`rebuild`] puts the chain's items in front of the request's own `input` and drops
//!   `previous_response_id`, so any provider (through translation) gets the conversation.
//!   `instructions` are the request's own: they do not carry over a chain (OpenAI's rule).
//!   Stored item ids and statuses are dropped (they name items the provider never stored),
//!   and so is reasoning without `encrypted_content`, which no provider can verify, or whose
//!   signer is not known.
//! - Once routed, [`fit`] drops the reasoning another provider family signed than the
//!   target's: its signature would be refused ([`family`]).
//!
//! When the chain was created natively by the OpenAI provider the request goes to, the
//! request is passed through unchanged instead (the provider keeps the conversation itself).

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;

pub mod family;

pub use family::{fit, Family, Rebuilt, FAMILY_HEADER, FAMILY_KEY};

/// The sidecar route that answers a chain: `GET <CHAIN_PATH><response id>`.
pub const CHAIN_PATH: &str = "/v1/response-chains/";
/// On the store call: the provider that answered natively (no translation).
pub const ORIGIN_HEADER: &str = "x-ferrogate-origin";
/// On the store call: the response's input + output tokens, as the provider billed them.
pub const TOKENS_HEADER: &str = "x-ferrogate-tokens";
/// On the store call: the response's price in micro-USD (absent: its model is not priced).
pub const COST_HEADER: &str = "x-ferrogate-cost-micros";

/// The conversation behind a stored response, as the sidecar answers it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chain {
    /// The provider that created every response of the chain without translation (`""`:
    /// none did, or not all the same).
    #[serde(default)]
    pub origin: String,
    /// How many responses the chain holds.
    #[serde(default)]
    pub depth: u32,
    /// Every input and output item, oldest first; reasoning tagged with the family that
    /// signed it ([`FAMILY_KEY`]).
    pub items: Vec<Value>,
    /// Input + output tokens of the chain's responses.
    #[serde(default)]
    pub tokens: u64,
    /// Micro-USD of the chain's priced responses.
    #[serde(default)]
    pub cost_micros: u64,
}

impl Chain {
    /// Reads the sidecar's answer.
    ///
    /// # Errors
    /// The body is not a chain.
    pub fn decode(body: &[u8]) -> Result<Chain, ApiError> {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::unavailable(format!("The response store answered an unreadable chain: {e}.")))
    }
}

/// The top-level fields that decide whether a request continues stored state.
#[derive(Deserialize)]
struct StateFields {
    #[serde(default)]
    previous_response_id: Option<Value>,
    #[serde(default)]
    conversation: Option<Value>,
}

/// What a Responses request continues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Continues {
    /// A stored response (`previous_response_id`).
    Response(String),
    /// A conversation (`conversation`).
    Conversation(String),
}

impl Continues {
    /// The id, which is also the chain route's last segment.
    pub fn id(&self) -> &str {
        match self {
            Continues::Response(id) | Continues::Conversation(id) => id,
        }
    }
}

/// What a Responses request continues, if anything.
///
/// # Errors
/// 400 when `previous_response_id` is not a string that can be a response id, `conversation`
/// names no conversation, or both are given.
pub fn continues(body: &[u8]) -> Result<Option<Continues>, ApiError> {
    let mentions = |name: &[u8]| crate::bytes::find_sub(body, name).is_some();
    if !mentions(b"\"previous_response_id\"") && !mentions(b"\"conversation\"") {
        return Ok(None);
    }
    // An unreadable body is the router's to refuse, with its own message.
    let Ok(fields) = serde_json::from_slice::<StateFields>(body) else { return Ok(None) };
    let conversation = super::conversations::named(fields.conversation.as_ref().unwrap_or(&Value::Null))?;
    let id = match fields.previous_response_id {
        None | Some(Value::Null) => return Ok(conversation.map(Continues::Conversation)),
        Some(Value::String(id)) => id,
        Some(_) => return Err(bad_previous("'previous_response_id' must be a string.".into())),
    };
    if !super::valid_id(&id) {
        let shown: String = id.chars().take(64).collect();
        return Err(bad_previous(format!(
            "Invalid 'previous_response_id': '{shown}'. Expected an ID that begins with 'resp_'."
        )));
    }
    if conversation.is_some() {
        let message = "'previous_response_id' cannot be used together with 'conversation'.";
        return Err(ApiError { param: Some("previous_response_id"), ..ApiError::bad_request(message) });
    }
    Ok(Some(Continues::Response(id)))
}

fn bad_previous(message: String) -> ApiError {
    ApiError { param: Some("previous_response_id"), code: Some("invalid_value"), ..ApiError::bad_request(message) }
}

/// `request` with the chain's items in front of its `input`, and no `previous_response_id` or
/// `conversation`.
///
/// # Errors
/// 400 when the request is not a JSON object or its `input` is neither a string nor a list.
pub fn rebuild(request: &[u8], chain: Vec<Value>) -> Result<Rebuilt, ApiError> {
    let Ok(Value::Object(mut fields)) = serde_json::from_slice::<Value>(request) else {
        return Err(ApiError::bad_request("The request body is not a JSON object."));
    };
    fields.remove("previous_response_id");
    fields.remove("conversation");
    let own = match fields.remove("input") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(text)) => vec![serde_json::json!({"role": "user", "content": text})],
        Some(Value::Array(items)) => items,
        Some(_) => {
            let e = ApiError::bad_request("'input' must be a string or a list of items.");
            return Err(ApiError { param: Some("input"), ..e });
        }
    };
    let mut input = Vec::with_capacity(chain.len() + own.len());
    let mut signed = Vec::new();
    for (item, signer) in chain.into_iter().filter_map(carried) {
        if let Some(family) = signer {
            signed.push((input.len(), family));
        }
        input.push(item);
    }
    input.extend(own);
    fields.insert("input".into(), Value::Array(input));
    let body = serde_json::to_vec(&Value::Object(fields)).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Rebuilt { body, signed })
}

/// A stored item as the next request carries it, and for signed reasoning the family that
/// signed it (`None`: not carried; see the module doc).
fn carried(item: Value) -> Option<(Value, Option<Family>)> {
    let Value::Object(mut fields) = item else { return None };
    let family = fields.remove(FAMILY_KEY);
    let signer = if fields.get("type").and_then(Value::as_str) == Some("reasoning") {
        let signed = fields.get("encrypted_content").and_then(Value::as_str).is_some_and(|c| !c.is_empty());
        Some(family.as_ref().and_then(Value::as_str).and_then(Family::parse).filter(|_| signed)?)
    } else {
        None
    };
    fields.remove("id");
    fields.remove("status");
    strip_empty_lists(&mut fields);
    Some((Value::Object(fields), signer))
}

/// Drops the empty `annotations`/`logprobs` of output text parts: they say nothing, and
/// chat-style providers reject what they do not know.
fn strip_empty_lists(fields: &mut Map<String, Value>) {
    let Some(Value::Array(parts)) = fields.get_mut("content") else { return };
    for part in parts.iter_mut().filter_map(Value::as_object_mut) {
        for key in ["annotations", "logprobs"] {
            if part.get(key).is_some_and(|v| v.as_array().is_some_and(Vec::is_empty)) {
                part.remove(key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_without_a_previous_id_is_not_parsed() {
        assert_eq!(continues(br#"{"model":"m","input":"hi"}"#), Ok(None));
        assert_eq!(continues(b"not json \"previous_response_id\""), Ok(None), "the router refuses it");
        assert_eq!(continues(br#"{"previous_response_id":null}"#), Ok(None));
        let got = continues(br#"{"previous_response_id":"resp_1","input":"x"}"#);
        assert_eq!(got, Ok(Some(Continues::Response("resp_1".into()))));
        let got = continues(br#"{"conversation":{"id":"conv_1"},"input":"x"}"#);
        assert_eq!(got.map(|c| c.map(|c| c.id().to_string())), Ok(Some("conv_1".into())));
        assert_eq!(continues(br#"{"conversation":"resp_1"}"#).unwrap_err().param, Some("conversation"));
    }

    #[test]
    fn a_bad_previous_id_is_refused_naming_the_parameter() {
        for body in [
            r#"{"previous_response_id":"msg_1"}"#,
            r#"{"previous_response_id":"resp_../x"}"#,
            r#"{"previous_response_id":7}"#,
            r#"{"previous_response_id":"resp_1","conversation":"conv_1"}"#,
        ] {
            let e = continues(body.as_bytes()).unwrap_err();
            assert_eq!((e.status, e.param), (400, Some("previous_response_id")), "{body}");
        }
    }

    #[test]
    fn the_chain_goes_before_the_input_without_stored_ids_or_unverifiable_reasoning() {
        let chain = vec![
            json!({"type": "message", "id": "msg_a_in0", "status": "completed", "role": "user",
                   "content": [{"type": "input_text", "text": "hi"}]}),
            json!({"type": "reasoning", "id": "rs_1", "summary": [], FAMILY_KEY: "anthropic"}),
            json!({"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "sig", FAMILY_KEY: "anthropic"}),
            json!({"type": "reasoning", "id": "rs_3", "summary": [], "encrypted_content": "whose"}),
            json!({"type": "reasoning", "summary": [], "encrypted_content": "odd", FAMILY_KEY: "mistral"}),
            json!({"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}",
                   "status": "completed"}),
            json!({"type": "message", "id": "msg_b", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "yo", "annotations": [], "logprobs": []}]}),
        ];
        let body =
            br#"{"model":"m","previous_response_id":"resp_a","instructions":"new","input":"next","conversation":null}"#;
        let rebuilt = rebuild(body, chain).unwrap();
        assert_eq!(rebuilt.signed, [(1, Family::Anthropic)], "only reasoning signed by a known family");
        let got: Value = serde_json::from_slice(&rebuilt.body).unwrap();
        assert_eq!(got["instructions"], "new", "the request's own instructions");
        assert!(got.get("previous_response_id").is_none() && got.get("conversation").is_none());
        assert_eq!(
            got["input"],
            json!([
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                {"type": "reasoning", "summary": [], "encrypted_content": "sig"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "yo"}]},
                {"role": "user", "content": "next"},
            ])
        );
    }

    #[test]
    fn a_list_input_follows_the_chain_and_a_bad_one_is_refused() {
        let body = br#"{"input":[{"type":"function_call_output","call_id":"c1","output":"ok"}]}"#;
        let got: Value =
            serde_json::from_slice(&rebuild(body, vec![json!({"role": "user", "content": "a"})]).unwrap().body)
                .unwrap();
        assert_eq!(got["input"][1]["type"], "function_call_output");
        assert_eq!(rebuild(br#"{"input":3}"#, Vec::new()).unwrap_err().param, Some("input"));
        assert_eq!(rebuild(b"[]", Vec::new()).unwrap_err().status, 400);
    }

    #[test]
    fn the_sidecar_answer_decodes() {
        let body = br#"{"origin":"openai","depth":2,"items":[{"role":"user"}],"tokens":7,"cost_micros":9}"#;
        let chain = Chain::decode(body).unwrap();
        assert_eq!((chain.origin.as_str(), chain.depth, chain.items.len()), ("openai", 2, 1));
        assert_eq!((chain.tokens, chain.cost_micros), (7, 9));
        assert_eq!(Chain::decode(b"{}").unwrap_err().status, 503);
    }
}
