//! The `responses:` block: how long and how much the sidecar keeps of stored Responses API
//! responses (`store: true`, OpenAI's default). Read by the sidecar at start, like `store:`;
//! the filter only checks it.

use serde::{Deserialize, Serialize};

use super::validate::Problems;

/// Default time a stored response is kept: 24 hours.
pub const DEFAULT_TTL_SECS: u64 = 24 * 60 * 60;
/// Default number of stored responses kept (the oldest go first beyond it).
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Default bytes of stored responses one key keeps (its oldest go first beyond it).
pub const DEFAULT_MAX_BYTES_PER_KEY: u64 = 64 << 20;
/// Default number of responses a `previous_response_id` chain may hold to be rebuilt.
pub const DEFAULT_MAX_CHAIN_DEPTH: u64 = 256;
/// The largest `max_chain_depth` accepted.
pub const MAX_CHAIN_DEPTH: u64 = 10_000;
/// Default number of items one conversation holds.
pub const DEFAULT_MAX_CONVERSATION_ITEMS: u64 = 10_000;
/// Default number of conversations one owner keeps.
pub const DEFAULT_MAX_CONVERSATIONS: u64 = 10_000;

/// `responses:` as written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RawResponses {
    /// Seconds a stored response is kept after it was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<u64>,
    /// Stored responses kept in all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_entries: Option<u64>,
    /// Bytes of stored responses (response and input items) one key keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes_per_key: Option<u64>,
    /// Responses a `previous_response_id` chain may hold for a follow-up to be served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_chain_depth: Option<u64>,
    /// Items one conversation holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_conversation_items: Option<u64>,
    /// Conversations one key (or group) keeps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_conversations_per_key: Option<u64>,
    /// Who sees a stored response or conversation: `key` (default, the key that made it) or
    /// `group` (every key of that key's first group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
}

/// Retention of stored responses, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Responses {
    /// Milliseconds a stored response is kept.
    pub ttl_ms: u64,
    /// Stored responses kept in all.
    pub max_entries: u64,
    /// Bytes one key keeps.
    pub max_bytes_per_key: u64,
    /// Responses a chain may hold for a follow-up to be served.
    pub max_chain_depth: u32,
    /// Stored state is shared by the keys of a group (`visibility: group`).
    pub by_group: bool,
    /// Items one conversation holds.
    pub max_conversation_items: u64,
    /// Conversations one owner keeps.
    pub max_conversations_per_key: u64,
}

impl Default for Responses {
    fn default() -> Self {
        Self {
            ttl_ms: DEFAULT_TTL_SECS * 1000,
            max_entries: DEFAULT_MAX_ENTRIES,
            max_bytes_per_key: DEFAULT_MAX_BYTES_PER_KEY,
            max_chain_depth: DEFAULT_MAX_CHAIN_DEPTH as u32,
            by_group: false,
            max_conversation_items: DEFAULT_MAX_CONVERSATION_ITEMS,
            max_conversations_per_key: DEFAULT_MAX_CONVERSATIONS,
        }
    }
}

/// Checks `responses:`; every value must be at least 1 (a zero would keep nothing, which is
/// what `store: false` on the request is for). The TTL is at most ten years.
pub(super) fn validate(raw: Option<&RawResponses>, p: &mut Problems) -> Responses {
    let Some(raw) = raw else { return Responses::default() };
    let defaults = Responses::default();
    let mut at_least_one = |field: &str, v: Option<u64>, default: u64| match v {
        None => default,
        Some(0) => {
            p.add(format!("responses.{field}"), "must be at least 1");
            default
        }
        Some(v) => v,
    };
    let ttl_secs = at_least_one("ttl_secs", raw.ttl_secs, DEFAULT_TTL_SECS);
    let max_entries = at_least_one("max_entries", raw.max_entries, defaults.max_entries);
    let max_bytes_per_key = at_least_one("max_bytes_per_key", raw.max_bytes_per_key, defaults.max_bytes_per_key);
    let depth = at_least_one("max_chain_depth", raw.max_chain_depth, DEFAULT_MAX_CHAIN_DEPTH);
    let items = at_least_one("max_conversation_items", raw.max_conversation_items, DEFAULT_MAX_CONVERSATION_ITEMS);
    let conversations =
        at_least_one("max_conversations_per_key", raw.max_conversations_per_key, DEFAULT_MAX_CONVERSATIONS);
    if ttl_secs > 10 * 366 * 24 * 60 * 60 {
        p.add("responses.ttl_secs", "is more than ten years");
    }
    if depth > MAX_CHAIN_DEPTH {
        p.add("responses.max_chain_depth", format!("is more than {MAX_CHAIN_DEPTH}"));
    }
    let max_chain_depth = u32::try_from(depth.min(MAX_CHAIN_DEPTH)).unwrap_or(u32::MAX);
    let by_group = match raw.visibility.as_deref() {
        None | Some("key") => false,
        Some("group") => true,
        Some(other) => {
            p.add("responses.visibility", format!("unknown visibility {other:?} (expected key or group)"));
            false
        }
    };
    Responses {
        ttl_ms: ttl_secs.saturating_mul(1000),
        max_entries,
        max_bytes_per_key,
        max_chain_depth,
        by_group,
        max_conversation_items: items,
        max_conversations_per_key: conversations,
    }
}

/// `raw` validated on its own (the sidecar reads the block from the file at start).
///
/// # Errors
/// The block's problems, with their paths.
pub fn from_raw(raw: Option<&RawResponses>) -> Result<Responses, Vec<super::Problem>> {
    let mut p = Problems::default();
    let settings = validate(raw, &mut p);
    if p.0.is_empty() {
        Ok(settings)
    } else {
        Err(p.0)
    }
}
