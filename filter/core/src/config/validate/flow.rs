//! Flow control's settings: a model's `flow_control`, a provider's `max_concurrency`, keys'
//! and groups' `priority` ([`crate::flow`]).

use super::{Problems, Refs};
use crate::config::{Group, Key};
use crate::config::{RawFlowControl, RawKey, RawModel, RawProvider};
use crate::flow::{Band, FlowControl, DEFAULT_MAX_QUEUE, DEFAULT_TTL_MS};

/// The most a band may hold, and the longest a request may wait (10 minutes).
const MAX_QUEUE: u32 = 100_000;
const MAX_TTL_MS: u64 = 600_000;

/// `providers[i].max_concurrency`: at least 1.
pub(super) fn max_concurrency(i: usize, raw: &RawProvider, p: &mut Problems) -> Option<u32> {
    let n = raw.max_concurrency?;
    if n == 0 {
        p.add(format!("providers[{i}].max_concurrency"), "must be at least 1");
        return None;
    }
    Some(n)
}

/// `models[i].flow_control`, checked; a model whose queue nothing could ever fill (no
/// `max_concurrency` on its targets' providers, no engine threshold) is a problem.
pub(super) fn model(i: usize, raw: &RawModel, refs: &Refs<'_>, p: &mut Problems) -> Option<FlowControl> {
    let fc = raw.flow_control.as_ref()?;
    let at = |field: &str| format!("models[{i}].flow_control.{field}");
    let max_queue = queue_len(at("max_queue"), fc.max_queue, DEFAULT_MAX_QUEUE, p);
    let ttl_ms = ttl(at("queue_ttl_ms"), fc.queue_ttl_ms, DEFAULT_TTL_MS, p);
    if let Some(k) = fc.max_kv_usage.filter(|k| !(*k > 0.0 && *k <= 1.0)) {
        p.add(at("max_kv_usage"), format!("{k} is not in (0, 1]"));
    }
    let mut bands: Vec<Band> = Vec::with_capacity(fc.bands.len());
    for (j, b) in fc.bands.iter().enumerate() {
        let at = |field: &str| format!("models[{i}].flow_control.bands[{j}].{field}");
        if bands.iter().any(|x| x.priority == b.priority) {
            p.add(at("priority"), format!("priority {} has two entries", b.priority));
        }
        let max_queue = queue_len(at("max_queue"), b.max_queue, max_queue, p);
        bands.push(Band {
            priority: b.priority,
            max_queue,
            ttl_ms: ttl(at("queue_ttl_ms"), b.queue_ttl_ms, ttl_ms, p),
        });
    }
    if !can_saturate(raw, fc, refs) {
        p.add(
            format!("models[{i}].flow_control"),
            "nothing can saturate this model: set max_concurrency on a provider of its targets, or max_waiting, max_running or max_kv_usage here",
        );
    }
    let (max_waiting, max_running, max_kv_usage) = (fc.max_waiting, fc.max_running, fc.max_kv_usage);
    Some(FlowControl { max_queue, ttl_ms, max_waiting, max_running, max_kv_usage, bands })
}

fn can_saturate(raw: &RawModel, fc: &RawFlowControl, refs: &Refs<'_>) -> bool {
    let capped = raw.targets.iter().any(|t| {
        let provider = refs.providers.get(&t.provider).and_then(|&k| refs.raw_providers.get(k));
        provider.is_some_and(|p| p.max_concurrency.is_some())
    });
    capped || fc.max_waiting.is_some() || fc.max_running.is_some() || fc.max_kv_usage.is_some()
}

fn queue_len(path: String, raw: Option<u32>, default: u32, p: &mut Problems) -> u32 {
    let n = bounded(path, raw.map(u64::from), u64::from(default), (MAX_QUEUE.into(), ""), p);
    u32::try_from(n).unwrap_or(default)
}

fn ttl(path: String, raw: Option<u64>, default: u64, p: &mut Problems) -> u64 {
    bounded(path, raw, default, (MAX_TTL_MS, " ms"), p)
}

/// `raw` when it is between 1 and `max` (else a problem naming the range, and `default`);
/// `default` when absent.
fn bounded(path: String, raw: Option<u64>, default: u64, (max, unit): (u64, &str), p: &mut Problems) -> u64 {
    match raw {
        None => default,
        Some(n) if (1..=max).contains(&n) => n,
        Some(n) => {
            p.add(path, format!("{n} is not between 1 and {max}{unit}"));
            default
        }
    }
}

/// Each key's priority: its own, else the highest of its groups', else 0.
pub(super) fn priorities(raw: &[RawKey], keys: &mut [Key], groups: &[Group]) {
    for (k, r) in keys.iter_mut().zip(raw) {
        let from_groups = k.groups.iter().filter_map(|&g| groups.get(g)?.priority).max();
        k.priority = r.priority.or(from_groups).unwrap_or(0);
    }
}
