//! The KV-cache settings of a pool (`endpoints[].kv_events`, `kv_replay`, `kv_events_port`,
//! `kv_replay_port`, `kv_block_size`, `kv_topic`, `kv_max_blocks`, `kv_tokenize`,
//! `kv_tier_weights`, `lmcache_ttl_secs`) and what `precise_cache_aware` asks of its model's
//! pool.

use super::{Problems, Refs};
use crate::balance::StrategyKind as Strategy;
use crate::config::raw::RawTierWeights;
use crate::config::raw::{RawModel, RawProvider};
use crate::config::syntax;
use crate::config::{
    KvPool, KvSource, DEFAULT_KV_BLOCK_SIZE, DEFAULT_KV_MAX_BLOCKS, DEFAULT_LMCACHE_TTL_SECS, MAX_KV_ENDPOINTS,
};
use crate::kv::TierWeights;

/// Largest block size accepted (vLLM's largest is 256; hybrid models' groups go further).
const MAX_BLOCK_SIZE: u32 = 4096;
/// Largest index bound accepted per provider.
const MAX_BLOCKS: u64 = 100_000_000;
/// Longest `lmcache_ttl_secs` accepted (a day).
const MAX_TTL_SECS: u64 = 86_400;

/// The pool's KV settings, or `None` when no endpoint publishes and `kv_tokenize` is off.
pub(super) fn pool(i: usize, raw: &RawProvider, p: &mut Problems) -> Option<KvPool> {
    let at = |field: &str| format!("providers[{i}].{field}");
    let ports = ports(i, raw, p);
    let sources: Vec<Option<KvSource>> =
        raw.endpoints.iter().enumerate().map(|(j, e)| source(i, j, e, ports, p)).collect();
    let publishes = sources.iter().any(Option::is_some);
    let tokenize = raw.kv_tokenize.unwrap_or(false);
    let settings = raw.kv_block_size.is_some()
        || raw.kv_topic.is_some()
        || raw.kv_max_blocks.is_some()
        || raw.kv_tier_weights.is_some()
        || raw.lmcache_ttl_secs.is_some()
        || raw.kv_events_port.is_some();
    // A name that resolved to nothing (yet) is a pool with no endpoints for now.
    if raw.endpoints.is_empty() && !raw.is_dynamic_pool() && (settings || tokenize) {
        p.add(at("endpoints"), "kv_* settings need an endpoints pool (the engines they describe)");
        return None;
    }
    if (publishes || tokenize) && raw.endpoints.len() > MAX_KV_ENDPOINTS {
        let why = format!("a KV-indexed pool has at most {MAX_KV_ENDPOINTS} endpoints ({})", raw.endpoints.len());
        p.add(at("endpoints"), why);
    }
    let block_size = raw.kv_block_size.unwrap_or(DEFAULT_KV_BLOCK_SIZE);
    if !(1..=MAX_BLOCK_SIZE).contains(&block_size) {
        p.add(at("kv_block_size"), format!("{block_size} is not a block size (1 to {MAX_BLOCK_SIZE} tokens)"));
    }
    let max_blocks = raw.kv_max_blocks.unwrap_or(DEFAULT_KV_MAX_BLOCKS);
    if !(1..=MAX_BLOCKS).contains(&max_blocks) {
        p.add(at("kv_max_blocks"), format!("{max_blocks} is out of range (1 to {MAX_BLOCKS} blocks)"));
    }
    let offload_ttl_secs = raw.lmcache_ttl_secs.unwrap_or(DEFAULT_LMCACHE_TTL_SECS);
    if !(1..=MAX_TTL_SECS).contains(&offload_ttl_secs) {
        p.add(at("lmcache_ttl_secs"), format!("{offload_ttl_secs} is out of range (1 to {MAX_TTL_SECS} seconds)"));
    }
    let tier_weights = weights(raw.kv_tier_weights.as_ref(), &at("kv_tier_weights"), p);
    let topic = raw.kv_topic.clone().unwrap_or_default();
    let pool = KvPool { block_size, topic, max_blocks, tokenize, tier_weights, offload_ttl_secs, sources };
    (publishes || tokenize || settings).then_some(pool)
}

/// The tier weights in thousandths; each given weight must lie in 0..=1.
fn weights(raw: Option<&RawTierWeights>, at: &str, p: &mut Problems) -> TierWeights {
    let mut out = TierWeights::default();
    let Some(raw) = raw else { return out };
    let given =
        [("gpu", raw.gpu, &mut out.gpu), ("cpu", raw.cpu, &mut out.cpu), ("storage", raw.storage, &mut out.storage)];
    for (name, value, slot) in given {
        let Some(v) = value else { continue };
        if (0.0..=1.0).contains(&v) {
            *slot = (v * 1000.0).round() as u32;
        } else {
            p.add(format!("{at}.{name}"), format!("{v} is not a weight (0 to 1)"));
        }
    }
    out
}

/// `kv_events_port` and `kv_replay_port`, when valid.
fn ports(i: usize, raw: &RawProvider, p: &mut Problems) -> Option<(u16, Option<u16>)> {
    let at = |field: &str| format!("providers[{i}].{field}");
    if raw.kv_replay_port.is_some() && raw.kv_events_port.is_none() {
        p.add(at("kv_replay_port"), "kv_replay_port needs kv_events_port (replay fills gaps in that stream)");
    }
    let mut valid = |field: &str, port: Option<u16>| match port {
        Some(0) => {
            p.add(at(field), "0 is not a port");
            None
        }
        other => other,
    };
    let events = valid("kv_events_port", raw.kv_events_port);
    let replay = valid("kv_replay_port", raw.kv_replay_port);
    Some((events?, replay))
}

/// The sockets of an endpoint at `address` (`host:port`) from the pool's ports.
fn templated(address: &str, (events, replay): (u16, Option<u16>)) -> KvSource {
    let host = syntax::endpoint_parts(address).map_or(address, |(host, _)| host);
    KvSource { events: format!("tcp://{host}:{events}"), replay: replay.map(|r| format!("tcp://{host}:{r}")) }
}

/// Endpoint `j`'s sockets: its own `kv_events` / `kv_replay`, else the pool's ports at its host.
fn source(
    i: usize,
    j: usize,
    e: &crate::config::raw::RawEndpoint,
    ports: Option<(u16, Option<u16>)>,
    p: &mut Problems,
) -> Option<KvSource> {
    let at = |field: &str| format!("providers[{i}].endpoints[{j}].{field}");
    if let (None, None, Some(ports)) = (&e.kv_events, &e.kv_replay, ports) {
        return Some(templated(&e.address, ports));
    }
    if let Some(replay) = &e.kv_replay {
        p.check(at("kv_replay"), check_socket(replay));
        if e.kv_events.is_none() {
            p.add(at("kv_replay"), "kv_replay needs kv_events (replay fills gaps in that stream)");
        }
    }
    let events = e.kv_events.as_ref()?;
    p.check(at("kv_events"), check_socket(events))?;
    Some(KvSource { events: events.clone(), replay: e.kv_replay.clone() })
}

/// A ZMQ address the sidecar can connect to: `tcp://host:port` (the sidecar runs beside the
/// proxy, not inside the engine's pod, so `ipc://` is not offered).
fn check_socket(s: &str) -> Result<(), String> {
    let Some(rest) = s.strip_prefix("tcp://") else {
        return Err(format!("{s:?} must be tcp://host:port"));
    };
    if rest.contains('*') {
        return Err(format!("{s:?} is a bind address; name the engine's host (the sidecar connects)"));
    }
    crate::config::syntax::parse_endpoint(rest).map(|_| ())
}

/// `precise_cache_aware` and `lmcache_aware` (`kind`) route among one pool's engines by their
/// KV events.
pub(super) fn check_precise(i: usize, kind: Strategy, raw: &RawModel, refs: &Refs<'_>, p: &mut Problems) {
    let at = format!("models[{i}].strategy");
    let [only] = raw.targets.as_slice() else {
        p.add(at, format!("{kind} needs exactly one target, whose provider has an endpoints pool"));
        return;
    };
    let Some(provider) = refs.providers.get(&only.provider).and_then(|&k| refs.raw_providers.get(k)) else {
        return; // The unknown provider is reported on the target.
    };
    let publishes = provider.endpoints.iter().any(|e| e.kv_events.is_some()) || provider.kv_events_port.is_some();
    if !publishes {
        let why = format!("{kind} needs endpoints of provider {:?} with kv_events (or kv_events_port)", provider.name);
        p.add(at, why);
    }
}

#[cfg(test)]
#[path = "kv_tests.rs"]
mod tests;
