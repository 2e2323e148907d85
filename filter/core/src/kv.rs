//! Precise KV-cache routing: what the engines' KV-cache events say each replica holds, in a
//! form both sides share.
//!
//! - [`keys`]: ferrogate's own block keys, a chained hash of each full block's token ids
//!   under a seed naming the provider (and LoRA adapter, or extra keys). The engines' block
//!   hashes depend on a per-process seed that cannot be known outside them, so the sidecar
//!   computes these keys from the token ids an event carries, and the filter computes the
//!   same keys from the request's token ids.
//! - [`token_ids`]: the `x-ferrogate-token-ids` request header.
//! - `events` (feature `events`, the sidecar's): vLLM's KV-event payloads.
//! - `lmcache` (feature `events`): LMCache's worker messages to a cache controller.
//! - [`feed`]: the `GET /v1/kv` answer by which the sidecar hands its index to the filter —
//!   changes since a generation, or everything after a reset.
//! - [`index`]: the filter's copy of that index, and the score of each endpoint for a request
//!   (the longest run of leading blocks it holds, each block weighed by the fastest tier it
//!   is held in, [`TierWeights`]).

#[cfg(feature = "events")]
pub mod events;
pub mod feed;
pub mod index;
pub mod keys;
#[cfg(feature = "events")]
pub mod lmcache;
pub mod token_ids;
pub mod tokenize;

pub use feed::{FeedError, KvFeed, KvOp};
pub use index::{KvIndex, Score};
pub use keys::{block_keys, chain_seed};
pub use token_ids::{parse_token_ids, TokenIdsError, TOKEN_IDS_HEADER};

/// What a block held in each tier is worth to a request, in thousandths: a prefix in GPU memory
/// is served at once, one in CPU memory must be copied back first, one in storage (disk,
/// remote) read back, slower still, yet all beat recomputing it on a replica without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierWeights {
    /// Per GPU block (default 1000).
    pub gpu: u32,
    /// Per block held only in CPU memory (default 800).
    pub cpu: u32,
    /// Per block held only in storage (default 500).
    pub storage: u32,
}

impl Default for TierWeights {
    fn default() -> Self {
        Self { gpu: 1000, cpu: 800, storage: 500 }
    }
}

impl TierWeights {
    /// The weight of `tier`.
    pub fn of(&self, tier: Tier) -> u32 {
        match tier {
            Tier::Gpu => self.gpu,
            Tier::Cpu => self.cpu,
            Tier::Storage => self.storage,
        }
    }
}

/// Where a block is held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Accelerator memory (vLLM's `medium: "GPU"`, or none given).
    #[default]
    Gpu,
    /// Host memory (`"CPU"`, LMCache's local CPU backend).
    Cpu,
    /// Anything slower: local disk, remote or shared storage (LMCache's disk and remote
    /// backends, any other medium named).
    Storage,
}

impl Tier {
    /// Every tier, fastest first.
    pub const ALL: [Tier; 3] = [Tier::Gpu, Tier::Cpu, Tier::Storage];

    /// The tier of an event's `medium`: absent or naming the GPU, [`Tier::Gpu`]; naming the
    /// CPU (`"CPU"`, `"cpu"`, `"LocalCPUBackend"`), [`Tier::Cpu`]; anything else
    /// [`Tier::Storage`].
    pub fn of_medium(medium: Option<&str>) -> Self {
        let names = |m: &str, what: &str| m.as_bytes().windows(3).any(|w| w.eq_ignore_ascii_case(what.as_bytes()));
        match medium {
            None => Self::Gpu,
            Some(m) if names(m, "gpu") || m.eq_ignore_ascii_case("cuda") => Self::Gpu,
            Some(m) if names(m, "cpu") => Self::Cpu,
            Some(_) => Self::Storage,
        }
    }
}

/// Scores the slots of model `model` (its pool's endpoints, in order) for a request with
/// `tokens` under adapter `lora`, into `out`; `None` when the model does not route by KV
/// events (another strategy, or no pool with KV settings). `precise_cache_aware` counts the
/// engines' GPU blocks only (what vLLM's own prefix cache holds); `lmcache_aware` every tier
/// at the pool's `kv_tier_weights`.
pub fn score_model(
    config: &crate::config::Config,
    model: usize,
    index: &KvIndex,
    tokens: &[u32],
    lora: Option<&str>,
    out: &mut Vec<u32>,
) -> Option<Score> {
    let m = config.models.get(model)?;
    if !m.strategy.uses_kv_index() {
        return None;
    }
    let [target] = m.targets.as_slice() else { return None };
    let provider = config.providers.get(target.provider)?;
    let kv = provider.kv.as_ref()?;
    let seed = chain_seed(&provider.name, lora);
    let weights = match m.strategy {
        crate::balance::StrategyKind::LmcacheAware => kv.tier_weights,
        _ => TierWeights { cpu: 0, storage: 0, ..kv.tier_weights },
    };
    Some(index.score(&provider.name, &provider.endpoints, block_keys(seed, tokens, kv.block_size), &weights, out))
}

#[cfg(test)]
#[path = "kv/score_tests.rs"]
mod score_tests;
