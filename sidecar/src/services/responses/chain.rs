//! The conversation behind a stored response, for a follow-up that names it in
//! `previous_response_id` ([`ferrogate_core::stored::chain`]): the filter asks
//! `GET /v1/response-chains/{id}` and rebuilds the request from the answer.
//!
//! The walk follows each response's `previous_response_id` back, for one owner only, at most
//! `responses.max_chain_depth` responses. Every link must still be stored: a conversation with
//! a hole cannot be rebuilt faithfully, so a missing link refuses the follow-up like a missing
//! head (naming the link).
//!
//! Each reasoning item of the answer is tagged with the family of the provider that answered
//! its response ([`FAMILY_KEY`]; none when that is not known), so the filter sends a signature
//! only to the family that made it. An entry's `origin` records both ([`stored_origin`]).

use std::collections::HashSet;

use ferrogate_core::stored::chain::{Family, FAMILY_KEY};
use ferrogate_core::stored::valid_id;
use serde_json::{json, Value};

use super::{Entry, ResponseStore, ResponsesError};

/// What the walk found.
#[derive(Debug, PartialEq)]
pub enum Walk {
    /// The whole chain.
    Found {
        /// Every input and output item, oldest first.
        items: Vec<Value>,
        /// How many responses it holds.
        depth: u32,
        /// The provider that created every one of them natively (`""`: none, or not one).
        origin: String,
        /// Tokens and micro-USD its responses used.
        tokens: u64,
        /// See `tokens`.
        cost_micros: u64,
    },
    /// This response of the chain is not stored for the owner (unknown, expired, deleted or
    /// another key's).
    Missing(String),
    /// The chain holds more than the bound.
    TooDeep,
}

impl Walk {
    /// The route's answer for [`Walk::Found`] (`{}` for the others, which are errors).
    pub fn body(&self) -> String {
        match self {
            Walk::Found { items, depth, origin, tokens, cost_micros } => json!({
                "origin": origin, "depth": depth, "items": items, "tokens": tokens, "cost_micros": cost_micros,
            })
            .to_string(),
            _ => "{}".to_string(),
        }
    }
}

/// Walks back from `owner`'s response `id`, at most `max_depth` responses.
///
/// # Errors
/// The store cannot answer.
pub async fn walk(
    store: &ResponseStore,
    owner: &str,
    id: &str,
    now_ms: u64,
    max_depth: u32,
) -> Result<Walk, ResponsesError> {
    let mut links: Vec<(Entry, Value)> = Vec::new();
    let mut seen = HashSet::new();
    let mut next = Some(id.to_string());
    while let Some(id) = next.take() {
        // A cycle cannot be stored through the gateway; were one written, it is too deep.
        if links.len() >= max_depth as usize || !seen.insert(id.clone()) {
            return Ok(Walk::TooDeep);
        }
        let Some(entry) = store.get(owner, &id, now_ms).await? else { return Ok(Walk::Missing(id)) };
        let response: Value = serde_json::from_str(&entry.response).unwrap_or(Value::Null);
        next = response.get("previous_response_id").and_then(Value::as_str).filter(|p| valid_id(p)).map(String::from);
        links.push((entry, response));
    }
    let origin = common_origin(links.iter().map(|(e, _)| provenance(&e.origin).0));
    let depth = u32::try_from(links.len()).unwrap_or(u32::MAX);
    let tokens = links.iter().fold(0u64, |sum, (e, _)| sum.saturating_add(e.tokens));
    let cost_micros = links.iter().fold(0u64, |sum, (e, _)| sum.saturating_add(e.cost_micros));
    let mut items = Vec::new();
    for (entry, mut response) in links.into_iter().rev() {
        let family = provenance(&entry.origin).1;
        // The link's input went to the same provider, which took its reasoning as its own.
        if let Ok(Value::Array(input)) = serde_json::from_str::<Value>(&entry.input_items) {
            items.extend(tagged(input, family));
        }
        if let Some(Value::Array(output)) = response.get_mut("output").map(Value::take) {
            items.extend(tagged(output, family));
        }
    }
    Ok(Walk::Found { items, depth, origin, tokens, cost_micros })
}

/// The one origin all links share, or `""`.
fn common_origin<'a>(mut origins: impl Iterator<Item = &'a str>) -> String {
    let first = origins.next().unwrap_or_default();
    if origins.all(|o| o == first) {
        first.to_string()
    } else {
        String::new()
    }
}

/// How a translated entry's `origin` begins; provider names cannot hold a `:`, so it is
/// never taken for one.
const TRANSLATED: &str = "translated:";

/// The `origin` an entry is stored with: the name of the provider that answered natively
/// (an OpenAI one), else `translated:<family>` for the family of the one that answered through
/// translation, else `""`.
pub fn stored_origin(native: Option<&str>, family: Option<Family>) -> String {
    match (native.filter(|n| !n.is_empty()), family) {
        (Some(name), _) => name.to_string(),
        (None, Some(family)) => format!("{TRANSLATED}{}", family.as_str()),
        (None, None) => String::new(),
    }
}

/// What a stored `origin` says: the provider that answered natively (`""`: none) and the
/// family that signed the response's reasoning (`None`: stored before families were recorded).
pub fn provenance(origin: &str) -> (&str, Option<Family>) {
    match origin.strip_prefix(TRANSLATED) {
        Some(family) => ("", Family::parse(family)),
        None if origin.is_empty() => ("", None),
        // Only OpenAI providers answer the Responses API natively.
        None => (origin, Some(Family::OpenAi)),
    }
}

/// `items` with each reasoning item tagged with `family` (untagged when it is not known).
pub fn tagged(items: Vec<Value>, family: Option<Family>) -> impl Iterator<Item = Value> {
    items.into_iter().map(move |mut item| {
        if let Some(fields) =
            item.as_object_mut().filter(|f| f.get("type").and_then(Value::as_str) == Some("reasoning"))
        {
            match family {
                Some(family) => fields.insert(FAMILY_KEY.into(), json!(family.as_str())),
                None => fields.remove(FAMILY_KEY),
            };
        }
        item
    })
}

/// `items` without the gateway's tags, as clients see them.
pub fn untagged(items: &mut [Value]) {
    for item in items.iter_mut().filter_map(Value::as_object_mut) {
        item.remove(FAMILY_KEY);
    }
}
