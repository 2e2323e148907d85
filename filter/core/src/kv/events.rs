//! vLLM's KV-event payload (the third ZMQ frame): a msgpack `KVEventBatch`, read as a generic
//! msgpack value so every shape vLLM has shipped decodes (the layout follows vLLM's
//! `vllm/distributed/kv_events.py` across its releases):
//!
//! - the batch: `[ts, events, data_parallel_rank?]` (two elements before dp ranks were
//!   added), or a map with those keys;
//! - an event: a map tagged by `"type"` (current vLLM) or an array whose first element is the
//!   tag (older vLLM, fields by position, trailing ones missing in older releases);
//! - a block hash: an unsigned or signed integer (two's complement), or bytes (the last 8,
//!   big-endian: vLLM's own integer form of a digest);
//! - unknown keys, trailing positions and unknown event types are skipped (counted), never an
//!   error for the batch.

use super::Tier;
use rmpv::Value;

/// Deepest nesting read (vLLM's payloads nest four levels; extra keys a few more).
const MAX_DEPTH: usize = 32;

/// A decoded batch.
#[derive(Debug, Clone, PartialEq)]
pub struct Batch {
    /// The engine's wall clock when it built the batch (seconds).
    pub ts: f64,
    /// The data-parallel rank, when sent.
    pub dp_rank: Option<i64>,
    /// The events understood, in order.
    pub events: Vec<Event>,
    /// Events of a type not known here, skipped.
    pub unknown: usize,
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Newly cached full blocks.
    Stored(Stored),
    /// Blocks evicted.
    Removed {
        /// The engine's hashes of the blocks.
        hashes: Vec<u64>,
        /// Where they were.
        tier: Tier,
        /// The KV-cache group (hybrid models), when sent.
        group: Option<u64>,
    },
    /// The engine dropped its whole prefix cache.
    Cleared,
}

/// A `BlockStored` event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    /// The engine's hashes of the new blocks, in chain order.
    pub hashes: Vec<u64>,
    /// The engine's hash of the block before the first one (none: they start the prompt).
    pub parent: Option<u64>,
    /// The blocks' token ids (empty for some offload events).
    pub tokens: Vec<u32>,
    /// Tokens per block.
    pub block_size: u32,
    /// The LoRA adapter's name, or its id when only that is sent.
    pub lora: Option<String>,
    /// Where the blocks are.
    pub tier: Tier,
    /// Per block, its extra hash keys (msgpack-encoded) when it has any; empty when none do.
    pub extra: Vec<Option<Vec<u8>>>,
    /// The KV-cache group, when sent.
    pub group: Option<u64>,
    /// The attention kind of the group (`full_attention`, `sliding_window`, ...), when sent.
    pub kind: Option<String>,
}

/// Why a payload is not a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Not msgpack (or nested deeper than allowed).
    #[error("not msgpack: {0}")]
    Msgpack(String),
    /// msgpack, but not a batch.
    #[error("not a KV event batch: {0}")]
    Shape(&'static str),
    /// Bytes after the batch.
    #[error("{0} bytes after the batch")]
    Trailing(usize),
}

/// Decodes one payload.
///
/// # Errors
/// The payload is not a msgpack `KVEventBatch` ([`DecodeError`]); an unknown event is not an error.
pub fn decode(payload: &[u8]) -> Result<Batch, DecodeError> {
    let mut reader = payload;
    let value = rmpv::decode::read_value_with_max_depth(&mut reader, MAX_DEPTH)
        .map_err(|e| DecodeError::Msgpack(e.to_string()))?;
    if !reader.is_empty() {
        return Err(DecodeError::Trailing(reader.len()));
    }
    let (ts, events, rank) = match &value {
        Value::Array(a) => (a.first(), a.get(1), a.get(2)),
        Value::Map(_) => (field(&value, "ts"), field(&value, "events"), field(&value, "data_parallel_rank")),
        _ => return Err(DecodeError::Shape("the batch is neither an array nor a map")),
    };
    let ts = ts.and_then(Value::as_f64).ok_or(DecodeError::Shape("ts is not a number"))?;
    let Some(Value::Array(list)) = events else { return Err(DecodeError::Shape("events is not an array")) };
    let mut batch =
        Batch { ts, dp_rank: rank.and_then(Value::as_i64), events: Vec::with_capacity(list.len()), unknown: 0 };
    for e in list {
        match event(e) {
            Some(e) => batch.events.push(e),
            None => batch.unknown += 1,
        }
    }
    Ok(batch)
}

/// A map's value under `key`.
fn field<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(pairs) = map else { return None };
    pairs.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
}

/// Reads an event's fields by name (map form) or by position (array form, tag first).
struct Fields<'a> {
    value: &'a Value,
}

impl<'a> Fields<'a> {
    fn tag(&self) -> Option<&'a str> {
        match self.value {
            Value::Array(a) => a.first()?.as_str(),
            map => field(map, "type")?.as_str(),
        }
    }

    /// Field `name`, at `position` (counting the tag) in the array form; nil is absent.
    fn get(&self, name: &str, position: usize) -> Option<&'a Value> {
        let v = match self.value {
            Value::Array(a) => a.get(position),
            map => field(map, name),
        };
        v.filter(|v| !v.is_nil())
    }
}

fn event(value: &Value) -> Option<Event> {
    if !matches!(value, Value::Array(_) | Value::Map(_)) {
        return None;
    }
    let f = Fields { value };
    match f.tag()? {
        "BlockStored" => stored(&f).map(Event::Stored),
        "BlockRemoved" => Some(Event::Removed {
            hashes: hashes(f.get("block_hashes", 1)?)?,
            tier: tier(f.get("medium", 2)),
            group: f.get("group_idx", 3).and_then(Value::as_u64),
        }),
        "AllBlocksCleared" => Some(Event::Cleared),
        _ => None,
    }
}

fn stored(f: &Fields<'_>) -> Option<Stored> {
    let tokens = match f.get("token_ids", 3) {
        Some(Value::Array(a)) => {
            a.iter().map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok())).collect::<Option<_>>()?
        }
        None => Vec::new(),
        Some(_) => return None,
    };
    let lora = match (f.get("lora_name", 7), f.get("lora_id", 5)) {
        (Some(name), _) => Some(name.as_str()?.to_string()),
        (None, Some(id)) => Some(format!("lora-id:{}", id.as_i64()?)),
        (None, None) => None,
    };
    Some(Stored {
        hashes: hashes(f.get("block_hashes", 1)?)?,
        parent: match f.get("parent_block_hash", 2) {
            Some(v) => Some(hash(v)?),
            None => None,
        },
        tokens,
        block_size: u32::try_from(f.get("block_size", 4)?.as_u64()?).ok()?,
        lora,
        tier: tier(f.get("medium", 6)),
        extra: extra_keys(f.get("extra_keys", 8)),
        group: f.get("group_idx", 9).and_then(Value::as_u64),
        kind: f.get("kv_cache_spec_kind", 10).and_then(Value::as_str).map(str::to_string),
    })
}

fn tier(medium: Option<&Value>) -> Tier {
    Tier::of_medium(medium.and_then(Value::as_str))
}

fn hashes(v: &Value) -> Option<Vec<u64>> {
    match v {
        Value::Array(a) => a.iter().map(hash).collect(),
        _ => None,
    }
}

/// A block hash as vLLM's integer form: integers as they are (negative ones by two's
/// complement), bytes by their last 8 big-endian (left-padded when shorter).
fn hash(v: &Value) -> Option<u64> {
    match v {
        Value::Integer(i) => i.as_u64().or_else(|| i.as_i64().map(|n| n as u64)),
        Value::Binary(b) => Some(tail_u64(b)),
        Value::String(s) => Some(tail_u64(s.as_bytes())),
        _ => None,
    }
}

fn tail_u64(bytes: &[u8]) -> u64 {
    let tail = bytes.get(bytes.len().saturating_sub(8)..).unwrap_or_default();
    tail.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Per block, its extra keys re-encoded (they only need to tell key spaces apart); empty
/// when absent or when no block has any.
fn extra_keys(v: Option<&Value>) -> Vec<Option<Vec<u8>>> {
    let Some(Value::Array(per_block)) = v else { return Vec::new() };
    if per_block.iter().all(Value::is_nil) {
        return Vec::new();
    }
    per_block
        .iter()
        .map(|e| {
            (!e.is_nil()).then(|| {
                let mut out = Vec::new();
                // Writing to a Vec cannot fail.
                let _ = rmpv::encode::write_value(&mut out, e);
                out
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
