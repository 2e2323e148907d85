//! The filter's copy of the sidecar's KV block index, kept current by [`super::feed`] answers,
//! and the score it gives each endpoint for a request.
//!
//! A block key maps to its holders: one bit per endpoint of the key's provider (its position
//! in the feed's table), for GPU memory, CPU memory and storage. Scoring walks the request's
//! block keys in order, as llm-d's longest-prefix scorer does: an endpoint earns the weight of
//! the fastest tier it holds each block in ([`TierWeights`]) and drops out at its first block
//! missing; the walk ends when every endpoint has dropped out, so a miss costs one
//! lookup and a hit one per held block. Disconnected endpoints are left out (their holdings
//! cannot be vouched for). The index grows only as the sidecar's, which bounds it per provider.

use std::collections::HashMap;

use super::feed::{FeedProvider, KvFeed, KvOp};
use super::{Tier, TierWeights};
use crate::balance::hash::IdBuild;

/// Which endpoints hold a block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Holders {
    gpu: u64,
    cpu: u64,
    storage: u64,
    /// The provider the key belongs to (its position in the feed's table).
    provider: u16,
}

/// What the index said of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Score {
    /// No connected endpoint of the pool has an event stream: nothing to say.
    Neutral,
    /// Endpoints are known, none holds the request's first block.
    Miss,
    /// Some endpoint holds a leading run of blocks; the best run's score.
    Hit(u32),
}

/// The filter's copy of the index.
#[derive(Debug, Default)]
pub struct KvIndex {
    epoch: u64,
    generation: Option<u64>,
    providers: Vec<FeedProvider>,
    blocks: HashMap<u64, Holders, IdBuild>,
}

impl KvIndex {
    /// The epoch and generation to ask the feed from (`None`: everything).
    pub fn position(&self) -> Option<(u64, u64)> {
        self.generation.map(|g| (self.epoch, g))
    }

    /// Blocks held by some endpoint.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True when no block is held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Applies an answer of the feed.
    pub fn apply(&mut self, feed: &KvFeed) {
        if feed.reset || feed.epoch != self.epoch {
            self.blocks.clear();
        }
        for op in &feed.ops {
            self.apply_op(*op);
        }
        self.epoch = feed.epoch;
        self.generation = Some(feed.generation);
        self.providers.clone_from(&feed.providers);
    }

    fn apply_op(&mut self, op: KvOp) {
        let bit = |endpoint: u8| 1u64.checked_shl(u32::from(endpoint)).unwrap_or(0);
        match op {
            KvOp::Add { provider, endpoint, key, tier } => {
                let h = self.blocks.entry(key).or_insert(Holders { provider, ..Holders::default() });
                *tier_of(h, tier) |= bit(endpoint);
            }
            KvOp::Remove { endpoint, key, tier, .. } => {
                if let Some(h) = self.blocks.get_mut(&key) {
                    *tier_of(h, tier) &= !bit(endpoint);
                    if h.all() == 0 {
                        self.blocks.remove(&key);
                    }
                }
            }
            KvOp::Clear { provider, endpoint } => self.clear(provider, bit(endpoint)),
        }
    }

    /// Takes `bit` out of every block of `provider` (one pass over the index: an endpoint
    /// clears its cache rarely).
    fn clear(&mut self, provider: u16, bit: u64) {
        self.blocks.retain(|_, h| {
            if h.provider == provider {
                h.gpu &= !bit;
                h.cpu &= !bit;
                h.storage &= !bit;
            }
            h.all() != 0
        });
    }

    /// Scores the endpoints `slots` (addresses, in the caller's order) of `provider` for the
    /// request whose block keys are `keys`, into `out` (one entry per slot), each held block
    /// weighed by `weights`; a tier of weight 0 is not counted at all (a block held only there
    /// ends the endpoint's run).
    pub fn score(
        &self,
        provider: &str,
        slots: &[String],
        keys: impl Iterator<Item = u64>,
        weights: &TierWeights,
        out: &mut Vec<u32>,
    ) -> Score {
        out.clear();
        out.resize(slots.len(), 0);
        let Some(table) = self.providers.iter().find(|p| p.name == provider) else { return Score::Neutral };
        let bit_of = |address: &String| table.endpoints.iter().position(|e| &e.address == address && e.connected);
        let mut alive = 0u64;
        for address in slots {
            if let Some(b) = bit_of(address).and_then(|b| 1u64.checked_shl(b as u32)) {
                alive |= b;
            }
        }
        if alive == 0 {
            return Score::Neutral;
        }
        let mut by_bit = [0u32; 64];
        for key in keys {
            let Some(h) = self.blocks.get(&key) else { break };
            let held = h.counted(weights) & alive;
            if held == 0 {
                break;
            }
            let mut rest = held;
            while rest != 0 {
                let b = rest.trailing_zeros();
                if let Some(s) = by_bit.get_mut(b as usize) {
                    *s = s.saturating_add(weights.of(h.fastest(1 << b)));
                }
                rest &= rest - 1;
            }
            alive = held;
        }
        for (slot, address) in out.iter_mut().zip(slots) {
            *slot = bit_of(address).and_then(|b| by_bit.get(b).copied()).unwrap_or(0);
        }
        match out.iter().max() {
            Some(&best) if best > 0 => Score::Hit(best),
            _ => Score::Miss,
        }
    }
}

impl Holders {
    /// Endpoints holding the block in any tier.
    fn all(&self) -> u64 {
        self.gpu | self.cpu | self.storage
    }

    /// The endpoints holding the block in a tier `weights` counts (weight above 0).
    fn counted(&self, weights: &TierWeights) -> u64 {
        let tier = |holders: u64, weight: u32| if weight > 0 { holders } else { 0 };
        tier(self.gpu, weights.gpu) | tier(self.cpu, weights.cpu) | tier(self.storage, weights.storage)
    }

    /// The fastest tier endpoint `bit` holds the block in.
    fn fastest(&self, bit: u64) -> Tier {
        if self.gpu & bit != 0 {
            Tier::Gpu
        } else if self.cpu & bit != 0 {
            Tier::Cpu
        } else {
            Tier::Storage
        }
    }
}

fn tier_of(h: &mut Holders, tier: Tier) -> &mut u64 {
    match tier {
        Tier::Gpu => &mut h.gpu,
        Tier::Cpu => &mut h.cpu,
        Tier::Storage => &mut h.storage,
    }
}

#[cfg(test)]
mod tests;
