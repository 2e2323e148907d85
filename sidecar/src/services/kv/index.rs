//! One provider's block index in the sidecar: which endpoint holds which block, keyed by
//! ferrogate's chained block keys ([`ferrogate_core::kv::keys`]) computed from the token ids
//! the events carry, plus a map per endpoint from the engine's block hash to that key (a
//! `BlockRemoved` names only the engine's hash; so does the parent of a `BlockStored`).
//!
//! Every change is reported as [`KvOp`]s for the feed. Bounds: `max_blocks` keys, least
//! recently stored first out (their holders are reported removed); each endpoint's hash map
//! keeps at most `max_blocks` entries, oldest first out; blocks held in CPU memory or storage
//! leave `lmcache_ttl_secs` after their last store ([`super::offload`]).

use std::collections::{HashMap, VecDeque};

use ferrogate_core::balance::lru::Lru;
use ferrogate_core::kv::keys::{block_key, chain_seed, extra_seed};
use ferrogate_core::kv::{KvOp, Tier};

use ferrogate_core::kv::events::Stored;

use super::offload::Offloaded;

mod chunks;

/// How many blocks one endpoint holds: in any tier, and in each (a block may be in several).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TierCounts {
    /// In any tier.
    pub all: usize,
    /// In GPU memory.
    pub gpu: usize,
    /// In CPU memory.
    pub cpu: usize,
    /// In storage.
    pub storage: usize,
}

/// Which endpoints hold a block (one bit per endpoint of the provider).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holders {
    /// In GPU memory.
    pub gpu: u64,
    /// In CPU memory.
    pub cpu: u64,
    /// In storage (disk, remote).
    pub storage: u64,
}

impl Holders {
    /// Endpoints holding the block in any tier.
    pub fn all(&self) -> u64 {
        self.gpu | self.cpu | self.storage
    }

    /// The endpoints holding the block in `tier`.
    pub fn tier(&self, tier: Tier) -> u64 {
        match tier {
            Tier::Gpu => self.gpu,
            Tier::Cpu => self.cpu,
            Tier::Storage => self.storage,
        }
    }

    fn tier_mut(&mut self, tier: Tier) -> &mut u64 {
        match tier {
            Tier::Gpu => &mut self.gpu,
            Tier::Cpu => &mut self.cpu,
            Tier::Storage => &mut self.storage,
        }
    }
}

/// Why an event was not indexed (counted per endpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Its block size is not the provider's `kv_block_size`.
    BlockSize,
    /// A KV-cache group other than the full-attention one (hybrid models).
    Group,
    /// Its parent block was never seen (the chain cannot be continued).
    Orphan,
    /// Fewer token ids than its blocks need.
    Tokens,
}

/// An endpoint's engine-hash → key map, bounded, oldest out first. A chunk's hash (an event
/// whose `block_size` is a multiple of the provider's, as LMCache's chunks are) maps to the key
/// of its last block, and to all its blocks' keys in `chunks`.
#[derive(Debug, Default)]
struct EngineMap {
    keys: HashMap<u64, u64>,
    order: VecDeque<u64>,
    chunks: HashMap<u64, Box<[u64]>>,
    /// Its latest chunks, where a store whose parent is `0` may continue ([`chunks`]).
    recent: VecDeque<chunks::Recent>,
}

impl EngineMap {
    fn insert(&mut self, hash: u64, key: u64, cap: usize) {
        if self.keys.insert(hash, key).is_none() {
            self.order.push_back(hash);
        }
        while self.order.len() > cap {
            if let Some(old) = self.order.pop_front() {
                self.keys.remove(&old);
                self.chunks.remove(&old);
            }
        }
    }

    /// Maps chunk `hash` to its blocks' `keys` (the last one also as its key).
    fn insert_chunk(&mut self, hash: u64, keys: Vec<u64>, cap: usize) {
        let Some(&last) = keys.last() else { return };
        self.insert(hash, last, cap);
        if self.keys.contains_key(&hash) {
            self.chunks.insert(hash, keys.into_boxed_slice());
        }
    }

    /// The keys an engine hash stands for: a chunk's blocks, or one block.
    fn keys_of(&self, hash: u64) -> Vec<u64> {
        match self.chunks.get(&hash) {
            Some(keys) => keys.to_vec(),
            None => self.keys.get(&hash).copied().into_iter().collect(),
        }
    }

    fn clear(&mut self) {
        self.keys.clear();
        self.order.clear();
        self.chunks.clear();
        self.recent.clear();
    }
}

/// One provider's index.
pub struct ProviderIndex {
    /// The provider's position in the feed's table.
    pub id: u16,
    name: String,
    block_size: u32,
    blocks: Lru<Holders>,
    engines: Vec<EngineMap>,
    cap: usize,
    offloaded: Offloaded,
}

impl ProviderIndex {
    /// An empty index for provider `name` (feed position `id`) with `endpoints` endpoints
    /// whose offloaded blocks are believed for `ttl_secs` after their last store.
    pub fn new(id: u16, name: &str, endpoints: usize, block_size: u32, max_blocks: u64, ttl_secs: u64) -> Self {
        let cap = usize::try_from(max_blocks).unwrap_or(usize::MAX).max(1);
        let engines = (0..endpoints).map(|_| EngineMap::default()).collect();
        let offloaded = Offloaded::new(ttl_secs);
        Self { id, name: name.to_string(), block_size, blocks: Lru::new(cap), engines, cap, offloaded }
    }

    /// Makes room for `endpoints` endpoints (a pool that grew).
    pub fn grow(&mut self, endpoints: usize) {
        if self.engines.len() < endpoints {
            self.engines.resize_with(endpoints, EngineMap::default);
        }
    }

    /// Offloaded holdings being aged.
    pub fn offloaded(&self) -> usize {
        self.offloaded.len()
    }

    /// The provider's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Blocks held by some endpoint.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// True when no endpoint holds a block.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Blocks each endpoint holds, by endpoint position, counted in one pass over the index
    /// (for the admin view and metrics).
    pub fn held_counts(&self) -> Vec<usize> {
        self.tier_counts().into_iter().map(|c| c.all).collect()
    }

    /// Per endpoint, the blocks it holds in any tier and in each.
    pub fn tier_counts(&self) -> Vec<TierCounts> {
        let mut counts = vec![TierCounts::default(); self.engines.len()];
        for (_, h) in self.blocks.iter() {
            for ep in bits(h.all()) {
                if let Some(c) = counts.get_mut(usize::from(ep)) {
                    let held = |set: u64| usize::from(set & bit(ep) != 0);
                    c.all += 1;
                    c.gpu += held(h.gpu);
                    c.cpu += held(h.cpu);
                    c.storage += held(h.storage);
                }
            }
        }
        counts
    }

    /// Every holder, as `Add` operations (a reset feed).
    pub fn snapshot(&self, ops: &mut Vec<KvOp>) {
        for (key, h) in self.blocks.iter() {
            for tier in Tier::ALL {
                for endpoint in bits(h.tier(tier)) {
                    ops.push(KvOp::Add { provider: self.id, endpoint, key, tier });
                }
            }
        }
    }

    /// Indexes a `BlockStored` of endpoint `ep`, received at `now_ms`. An event whose
    /// `block_size` is a multiple of the provider's stores chunks (LMCache's): each chunk is
    /// indexed as the blocks it spans.
    pub fn stored(&mut self, ep: u8, s: &Stored, now_ms: u64, ops: &mut Vec<KvOp>) -> Result<(), Skip> {
        let full_attention = s.kind.as_deref().is_none_or(|k| k.ends_with("full_attention") || k == "mla_attention");
        if s.group.is_some_and(|g| g != 0) || !full_attention {
            return Err(Skip::Group);
        }
        if s.block_size != self.block_size {
            return self.stored_chunks(ep, s, now_ms, ops);
        }
        let Some(mut parent) = self.chain_start(ep, s, now_ms, ops)? else { return Ok(()) };
        let size = usize::try_from(self.block_size).unwrap_or(usize::MAX);
        if s.tokens.len() < s.hashes.len().saturating_mul(size) {
            return Err(Skip::Tokens);
        }
        for (i, (hash, block)) in s.hashes.iter().zip(s.tokens.chunks_exact(size)).enumerate() {
            let mut key = block_key(parent, block);
            if let Some(Some(extra)) = s.extra.get(i) {
                key = extra_seed(key, extra);
            }
            if let Some(engine) = self.engines.get_mut(usize::from(ep)) {
                engine.insert(*hash, key, self.cap);
            }
            self.add(ep, key, s.tier, now_ms, ops);
            parent = key;
        }
        Ok(())
    }

    /// Indexes a `BlockStored` of chunks of `s.block_size` tokens, each spanning several of the
    /// provider's blocks. Its token ids may run one past the last chunk (LMCache's connector
    /// sends `tokens[start..=end]`); the extra id is ignored. A parent must be a chunk or block
    /// already seen, except the `0` LMCache's in-process connector names as the parent of the
    /// first chunk of each store after the prompt's first: that chunk continues one of the
    /// endpoint's recent chunks ([`chunks`]), or is skipped as an orphan when none fits.
    fn stored_chunks(&mut self, ep: u8, s: &Stored, now_ms: u64, ops: &mut Vec<KvOp>) -> Result<(), Skip> {
        let per_chunk = match (s.block_size.checked_rem(self.block_size), s.block_size / self.block_size.max(1)) {
            (Some(0), n) if n > 1 => usize::try_from(n).unwrap_or(usize::MAX),
            _ => return Err(Skip::BlockSize),
        };
        let start = match self.chain_start(ep, s, now_ms, ops) {
            Err(Skip::Orphan) if s.parent == Some(0) => Some(self.continued(ep, s).ok_or(Skip::Orphan)?),
            other => other?,
        };
        let Some(mut parent) = start else { return Ok(()) };
        let size = usize::try_from(self.block_size).unwrap_or(usize::MAX);
        let chunk = size.saturating_mul(per_chunk);
        if s.tokens.len() < s.hashes.len().saturating_mul(chunk) {
            return Err(Skip::Tokens);
        }
        for (i, (hash, tokens)) in s.hashes.iter().zip(s.tokens.chunks(chunk)).enumerate() {
            let mut keys = Vec::with_capacity(per_chunk);
            for block in tokens.chunks_exact(size) {
                parent = block_key(parent, block);
                keys.push(parent);
                self.add(ep, parent, s.tier, now_ms, ops);
            }
            if let Some(engine) = self.engines.get_mut(usize::from(ep)) {
                engine.insert_chunk(*hash, keys, self.cap);
                engine.remember(parent, s.tokens.get((i + 1).saturating_mul(chunk)).copied());
            }
        }
        Ok(())
    }

    /// Where a store's chain of keys starts: the seed, or its parent's key (unknown: an
    /// orphan). A store without token ids (offload events may carry none) is applied here to
    /// the blocks its hashes are known by, and `None` returned.
    fn chain_start(&mut self, ep: u8, s: &Stored, now_ms: u64, ops: &mut Vec<KvOp>) -> Result<Option<u64>, Skip> {
        if s.tokens.is_empty() {
            self.stored_again(ep, &s.hashes, s.tier, now_ms, ops);
            return Ok(None);
        }
        let Some(engine) = self.engines.get(usize::from(ep)) else { return Err(Skip::Orphan) };
        match s.parent {
            None => Ok(Some(chain_seed(&self.name, s.lora.as_deref()))),
            Some(p) => engine.keys.get(&p).copied().map(Some).ok_or(Skip::Orphan),
        }
    }

    /// Endpoint `ep` holds in `tier` the blocks (or chunks) with engine hashes `hashes`, known
    /// from its earlier events; unknown hashes change nothing.
    pub fn stored_again(&mut self, ep: u8, hashes: &[u64], tier: Tier, now_ms: u64, ops: &mut Vec<KvOp>) {
        let Some(engine) = self.engines.get(usize::from(ep)) else { return };
        let known: Vec<u64> = hashes.iter().flat_map(|&h| engine.keys_of(h)).collect();
        for key in known {
            self.add(ep, key, tier, now_ms, ops);
        }
    }

    /// Endpoint `ep` dropped the blocks (or chunks) with engine hashes `hashes` from `tier`.
    pub fn removed(&mut self, ep: u8, hashes: &[u64], tier: Tier, ops: &mut Vec<KvOp>) {
        for hash in hashes {
            let Some(keys) = self.engines.get(usize::from(ep)).map(|e| e.keys_of(*hash)) else { continue };
            for key in keys {
                self.take(ep, key, tier, ops);
            }
        }
    }

    /// Takes out the offloaded holdings not stored again within the TTL, at `now_ms`.
    pub fn expire(&mut self, now_ms: u64, ops: &mut Vec<KvOp>) {
        for (key, ep, tier) in self.offloaded.expired(now_ms) {
            self.take(ep, key, tier, ops);
        }
    }

    /// Endpoint `ep` no longer holds `key` in `tier`.
    fn take(&mut self, ep: u8, key: u64, tier: Tier, ops: &mut Vec<KvOp>) {
        self.offloaded.forget((key, ep, tier));
        let Some(h) = self.blocks.peek_mut(key) else { return };
        let set = h.tier_mut(tier);
        if *set & bit(ep) == 0 {
            return;
        }
        *set &= !bit(ep);
        let empty = h.all() == 0;
        ops.push(KvOp::Remove { provider: self.id, endpoint: ep, key, tier });
        if empty {
            self.blocks.remove(key);
        }
    }

    /// Endpoint `ep` holds nothing any more.
    pub fn clear(&mut self, ep: u8, ops: &mut Vec<KvOp>) {
        let b = bit(ep);
        let mut emptied = Vec::new();
        self.blocks.for_each_mut(|key, h| {
            h.gpu &= !b;
            h.cpu &= !b;
            h.storage &= !b;
            if h.all() == 0 {
                emptied.push(key);
            }
        });
        for key in emptied {
            self.blocks.remove(key);
        }
        if let Some(e) = self.engines.get_mut(usize::from(ep)) {
            e.clear();
        }
        self.offloaded.forget_endpoint(ep);
        ops.push(KvOp::Clear { provider: self.id, endpoint: ep });
    }

    fn add(&mut self, ep: u8, key: u64, tier: Tier, now_ms: u64, ops: &mut Vec<KvOp>) {
        let mut h = self.blocks.peek(key).copied().unwrap_or_default();
        let set = h.tier_mut(tier);
        let new = *set & bit(ep) == 0;
        *set |= bit(ep);
        self.offloaded.stored((key, ep, tier), now_ms);
        if let Some((old, gone)) = self.blocks.insert(key, h) {
            for tier in Tier::ALL {
                for endpoint in bits(gone.tier(tier)) {
                    self.offloaded.forget((old, endpoint, tier));
                    ops.push(KvOp::Remove { provider: self.id, endpoint, key: old, tier });
                }
            }
        }
        if new {
            ops.push(KvOp::Add { provider: self.id, endpoint: ep, key, tier });
        }
    }
}

fn bit(ep: u8) -> u64 {
    1u64.checked_shl(u32::from(ep)).unwrap_or(0)
}

fn bits(mut set: u64) -> impl Iterator<Item = u8> {
    std::iter::from_fn(move || {
        (set != 0).then(|| {
            let b = set.trailing_zeros() as u8;
            set &= set - 1;
            b
        })
    })
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
