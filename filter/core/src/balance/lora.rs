//! `lora_aware`: send a request for a LoRA adapter to a target that already has it loaded, so
//! the engine does not evict another adapter and load this one first.
//!
//! Order of preference: adapter residency, then prefix affinity, then load.
//!
//! - **Holders first.** Among the eligible targets holding the adapter the [`CacheAware`] rules
//!   choose (prefix affinity with its load guard): residency beats load, as loading an adapter
//!   costs more than a short queue.
//! - **Nobody holds it.** The targets with room for another adapter (fewer resident than the
//!   engine keeps loaded) are preferred, so a new adapter does not evict a busy one; among them
//!   (or among all when none has room) the adapter's *home* wins: the owner of the adapter's
//!   name on a consistent-hash ring over the target names, the same on every worker VM, unless
//!   it is clearly busier than the least-loaded candidate ([`imbalanced`]). Without names, the
//!   [`CacheAware`] rules choose.
//! - **No adapter named**: plain [`CacheAware`].
//!
//! **Residency** per target is a list of adapters, most recent first, at most the engine's
//! capacity (`max_loras`: what the engine reports, vLLM's `--max-loras`; else the balancer's
//! default, vLLM's default of 1). Two sources feed it:
//!
//! - *Engine-reported* ([`LoraAware::residency`], from the targets feed: vLLM's running and
//!   waiting adapters). It is preferred: it sees other gateways' and other models' traffic.
//!   When a target's report changes, its list becomes the reported adapters followed by the
//!   most recent learned ones the report does not name, within the capacity. A repeated
//!   report changes nothing, so picks made since the engine was scraped are not undone by a
//!   report older than them; an empty report (an idle vLLM lists no adapters) is no report.
//! - *Learned*: every pick naming an adapter makes it the chosen target's most recent one
//!   (evicting the oldest beyond the capacity), as does a pick by another model's balancer on
//!   the same engine ([`LoraAware::adapter_loaded`], which the gateway's router forwards).
//!   Without any report this is all there is.

use super::cache_aware::{imbalanced, CacheAware};
use super::hash::hash64;
use super::prefix::DEFAULT_MAX_NODES;
use super::ring::ConsistentHash;
use super::simple::least_loaded_among;
use super::{PickContext, Strategy};

/// Adapters a target is assumed to keep loaded: vLLM's default `--max-loras`.
pub const DEFAULT_MAX_LORAS: usize = 1;

/// Bound on a reported capacity and on a report's length (the per-target lists stay small).
pub const MAX_REPORTED_LORAS: usize = 64;

/// Seed for adapter identities.
const ADAPTER_SEED: u64 = 0x10ae_0001;

/// What the engine behind a target reports of its LoRA adapters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Residency<'a> {
    /// Adapters in use (empty: nothing reported).
    pub adapters: &'a [String],
    /// Adapters the engine keeps loaded at once, if it says.
    pub max_loras: Option<u32>,
}

/// One target's adapters.
#[derive(Debug, Default)]
struct Held {
    /// Adapter keys believed loaded, most recent first.
    resident: Vec<u64>,
    /// The engine's latest non-empty report, sorted (tells a new report from a repeat).
    reported: Vec<u64>,
    /// Adapters the engine keeps loaded.
    max: usize,
}

impl Held {
    fn holds(&self, key: u64) -> bool {
        self.resident.contains(&key)
    }

    fn has_room(&self) -> bool {
        self.resident.len() < self.max
    }

    /// Makes `key` the most recent adapter, dropping the oldest beyond the capacity.
    fn load(&mut self, key: u64) {
        match self.resident.iter().position(|&k| k == key) {
            Some(pos) => {
                if let Some(head) = self.resident.get_mut(..=pos) {
                    head.rotate_right(1);
                }
            }
            None => {
                self.resident.insert(0, key);
                self.resident.truncate(self.max);
            }
        }
    }

    /// Takes a report of `keys` (sorted, deduplicated) and capacity `max`.
    fn report(&mut self, keys: &[u64], max: usize) {
        self.max = max;
        if keys.is_empty() {
            self.reported.clear();
        } else if keys != self.reported.as_slice() {
            self.reported.clear();
            self.reported.extend_from_slice(keys);
            self.resident.retain(|k| !keys.contains(k));
            self.resident.splice(0..0, keys.iter().copied());
        }
        self.resident.truncate(self.max.max(self.reported.len()));
    }
}

/// Adapter residency first, then [`CacheAware`].
pub struct LoraAware {
    default_max: usize,
    held: Vec<Held>,
    affinity: CacheAware,
    /// Where an adapter nobody holds goes, the same on every VM (with names).
    home: Option<ConsistentHash>,
    /// Candidates of the current pick (kept to avoid allocating per pick).
    candidates: Vec<usize>,
    /// Keys of the report being applied (kept likewise).
    keys: Vec<u64>,
}

impl LoraAware {
    /// Residency over `targets` targets, each assumed to keep at most `max_loras` (≥ 1)
    /// adapters until its engine says otherwise.
    pub fn new(targets: usize, max_loras: usize) -> Self {
        let max = max_loras.clamp(1, MAX_REPORTED_LORAS);
        Self {
            default_max: max,
            held: (0..targets).map(|_| Held { max, ..Held::default() }).collect(),
            affinity: CacheAware::new(targets, DEFAULT_MAX_NODES),
            home: None,
            candidates: Vec::with_capacity(targets),
            keys: Vec::new(),
        }
    }

    /// The same over targets with these `names` (in target order): homes for new adapters and
    /// for prefixes come from rings over them.
    pub fn with_names<'a, I>(names: I, max_loras: usize) -> Self
    where
        I: IntoIterator<Item = &'a str> + Clone,
    {
        let home = ConsistentHash::new(names.clone());
        let affinity = CacheAware::with_names(names, DEFAULT_MAX_NODES);
        let targets = home.points() / super::ring::VNODES_PER_TARGET;
        Self { affinity, home: Some(home), ..Self::new(targets, max_loras) }
    }

    /// Whether `target` is believed to have `adapter` loaded.
    pub fn holds(&self, target: usize, adapter: &str) -> bool {
        self.held.get(target).is_some_and(|h| h.holds(adapter_key(adapter)))
    }

    /// Takes what the engine behind `target` reports (see the module docs for the rule).
    pub fn residency(&mut self, target: usize, report: Residency<'_>) {
        let Some(held) = self.held.get_mut(target) else { return };
        let max = report.max_loras.map_or(self.default_max, |m| (m as usize).clamp(1, MAX_REPORTED_LORAS));
        self.keys.clear();
        let adapters = report.adapters.iter().filter(|a| !a.is_empty()).take(MAX_REPORTED_LORAS);
        self.keys.extend(adapters.map(|a| adapter_key(a)));
        self.keys.sort_unstable();
        self.keys.dedup();
        held.report(&self.keys, max);
    }

    /// Learns that a request for `adapter` went to the engine behind `target` through another
    /// balancer: the engine has loaded it.
    pub fn adapter_loaded(&mut self, target: usize, adapter: &str) {
        if let Some(held) = self.held.get_mut(target).filter(|_| !adapter.is_empty()) {
            held.load(adapter_key(adapter));
        }
    }

    /// Where a new adapter goes among `pool` (module docs).
    fn place(&mut self, ctx: &PickContext<'_>, key: u64, pool: &[usize]) -> Option<usize> {
        let Some(home) = self.home.as_ref().and_then(|ring| ring.owner(key, pool)) else {
            return self.affinity.choose(ctx, pool);
        };
        if !ctx.has_load() {
            return Some(home);
        }
        let least = least_loaded_among(ctx, pool)?;
        Some(if imbalanced(ctx.queue(home), ctx.queue(least)) { least } else { home })
    }

    /// Chooses for adapter `key` without recording.
    fn choose(&mut self, ctx: &PickContext<'_>, key: u64, eligible: &[usize]) -> Option<usize> {
        let mut candidates = std::mem::take(&mut self.candidates);
        candidates.clear();
        let held = |i: &usize| self.held.get(*i);
        candidates.extend(eligible.iter().filter(|i| held(i).is_some_and(|h| h.holds(key))));
        let chosen = if candidates.is_empty() {
            candidates.extend(eligible.iter().filter(|i| held(i).is_some_and(Held::has_room)));
            let pool = if candidates.is_empty() { eligible } else { &candidates };
            self.place(ctx, key, pool)
        } else {
            self.affinity.choose(ctx, &candidates)
        };
        self.candidates = candidates;
        chosen
    }
}

fn adapter_key(adapter: &str) -> u64 {
    hash64(ADAPTER_SEED, adapter.as_bytes())
}

impl Strategy for LoraAware {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let key = ctx.adapter.filter(|a| !a.is_empty()).map(adapter_key);
        let chosen = match key {
            Some(k) => self.choose(ctx, k, eligible)?,
            None => self.affinity.choose(ctx, eligible)?,
        };
        self.affinity.record(ctx, chosen);
        if let (Some(k), Some(held)) = (key, self.held.get_mut(chosen)) {
            held.load(k);
        }
        Some(chosen)
    }

    fn residency(&mut self, target: usize, report: Residency<'_>) {
        LoraAware::residency(self, target, report);
    }

    fn adapter_loaded(&mut self, target: usize, adapter: &str) {
        LoraAware::adapter_loaded(self, target, adapter);
    }
}
