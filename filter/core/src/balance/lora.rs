//! `lora_aware`: send a request for a LoRA adapter to a target that already has it loaded, so
//! the engine does not evict another adapter and load this one first.
//!
//! Order of preference: adapter residency, then prefix affinity, then load. Among the eligible
//! targets holding the adapter (all eligible targets when none does or no adapter is named)
//! the [`CacheAware`] rules choose. Residency is learned from traffic: each target keeps the
//! adapters it most recently served, at most `max_loras` of them, mirroring how many the engine
//! keeps loaded (vLLM `--max-loras`, 1 by default), not every adapter it ever served.

use super::cache_aware::CacheAware;
use super::hash::hash64;
use super::prefix::DEFAULT_MAX_NODES;
use super::{PickContext, Strategy};

/// Adapters a target is assumed to keep loaded: vLLM's default `--max-loras`.
pub const DEFAULT_MAX_LORAS: usize = 1;

/// Seed for adapter identities.
const ADAPTER_SEED: u64 = 0x10ae_0001;

/// Adapter residency first, then [`CacheAware`].
pub struct LoraAware {
    max_loras: usize,
    /// Per target, adapter hashes most recent first.
    resident: Vec<Vec<u64>>,
    affinity: CacheAware,
    /// Candidates of the current pick (kept to avoid allocating per pick).
    candidates: Vec<usize>,
}

impl LoraAware {
    /// Residency over `targets` targets, each keeping at most `max_loras` (≥ 1) adapters.
    pub fn new(targets: usize, max_loras: usize) -> Self {
        let max_loras = max_loras.max(1);
        Self {
            max_loras,
            resident: (0..targets).map(|_| Vec::with_capacity(max_loras + 1)).collect(),
            affinity: CacheAware::new(targets, DEFAULT_MAX_NODES),
            candidates: Vec::with_capacity(targets),
        }
    }

    /// Whether `target` is believed to have `adapter` loaded.
    pub fn holds(&self, target: usize, adapter: &str) -> bool {
        self.holds_key(target, adapter_key(adapter))
    }

    fn holds_key(&self, target: usize, key: u64) -> bool {
        self.resident.get(target).is_some_and(|list| list.contains(&key))
    }

    /// Marks `key` as the most recently served adapter of `target`, dropping the oldest beyond
    /// the bound.
    fn load(&mut self, target: usize, key: u64) {
        let Some(list) = self.resident.get_mut(target) else { return };
        match list.iter().position(|&k| k == key) {
            Some(pos) => {
                if let Some(head) = list.get_mut(..=pos) {
                    head.rotate_right(1);
                }
            }
            None => {
                list.insert(0, key);
                list.truncate(self.max_loras);
            }
        }
    }
}

fn adapter_key(adapter: &str) -> u64 {
    hash64(ADAPTER_SEED, adapter.as_bytes())
}

impl Strategy for LoraAware {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let key = ctx.adapter.filter(|a| !a.is_empty()).map(adapter_key);
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.clear();
        if let Some(k) = key {
            candidates.extend(eligible.iter().copied().filter(|&i| self.holds_key(i, k)));
        }
        let pool = if candidates.is_empty() { eligible } else { &candidates };
        let chosen = self.affinity.choose(ctx, pool);
        self.candidates = candidates;
        let chosen = chosen?;
        self.affinity.record(ctx, chosen);
        if let Some(k) = key {
            self.load(chosen, k);
        }
        Some(chosen)
    }
}
