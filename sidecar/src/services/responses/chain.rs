//! The conversation behind a stored response, for a follow-up that names it in
//! `previous_response_id` ([`ferrogate_core::stored::chain`]): the filter asks
//! `GET /v1/response-chains/{id}` and rebuilds the request from the answer.
//!
//! The walk follows each response's `previous_response_id` back, for one owner only, at most
//! `responses.max_chain_depth` responses. Every link must still be stored: a conversation with
//! a hole cannot be rebuilt faithfully, so a missing link refuses the follow-up like a missing
//! head (naming the link).

use std::collections::HashSet;

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
    let origin = common_origin(links.iter().map(|(e, _)| e.origin.as_str()));
    let depth = u32::try_from(links.len()).unwrap_or(u32::MAX);
    let tokens = links.iter().fold(0u64, |sum, (e, _)| sum.saturating_add(e.tokens));
    let cost_micros = links.iter().fold(0u64, |sum, (e, _)| sum.saturating_add(e.cost_micros));
    let mut items = Vec::new();
    for (entry, mut response) in links.into_iter().rev() {
        if let Ok(Value::Array(input)) = serde_json::from_str::<Value>(&entry.input_items) {
            items.extend(input);
        }
        if let Some(Value::Array(output)) = response.get_mut("output").map(Value::take) {
            items.extend(output);
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
