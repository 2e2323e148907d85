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
//! - [`feed`]: the `GET /v1/kv` answer by which the sidecar hands its index to the filter —
//!   changes since a generation, or everything after a reset.
//! - [`index`]: the filter's copy of that index, and the score of each endpoint for a request
//!   (the longest run of leading blocks it holds; a GPU block counts [`GPU_WEIGHT`], a block
//!   held only in CPU memory [`CPU_WEIGHT`]).

#[cfg(feature = "events")]
pub mod events;
pub mod feed;
pub mod index;
pub mod keys;
pub mod token_ids;
pub mod tokenize;

pub use feed::{FeedError, KvFeed, KvOp};
pub use index::{KvIndex, Score};
pub use keys::{block_keys, chain_seed};
pub use token_ids::{parse_token_ids, TokenIdsError, TOKEN_IDS_HEADER};

/// Score of a block held in GPU memory (tenths: scores stay integers).
pub const GPU_WEIGHT: u32 = 10;
/// Score of a block held only in CPU memory (offloaded; slower to bring back).
pub const CPU_WEIGHT: u32 = 8;

/// Where a block is held.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Tier {
    /// Accelerator memory (vLLM's `medium: "GPU"`, or none given).
    #[default]
    Gpu,
    /// Any other medium (`"CPU"`, LMCache's backends): offloaded.
    Cpu,
}

impl Tier {
    /// The tier of an event's `medium` (absent or GPU: [`Tier::Gpu`]; anything else is
    /// offloaded memory).
    pub fn of_medium(medium: Option<&str>) -> Self {
        match medium {
            None => Self::Gpu,
            Some(m) if m.eq_ignore_ascii_case("gpu") => Self::Gpu,
            Some(_) => Self::Cpu,
        }
    }
}

/// Scores the slots of model `model` (its pool's endpoints, in order) for a request with
/// `tokens` under adapter `lora`, into `out`; `None` when the model does not route by KV
/// events (another strategy, or no pool with KV settings).
pub fn score_model(
    config: &crate::config::Config,
    model: usize,
    index: &KvIndex,
    tokens: &[u32],
    lora: Option<&str>,
    out: &mut Vec<u32>,
) -> Option<Score> {
    let m = config.models.get(model)?;
    if m.strategy != crate::balance::StrategyKind::PreciseCacheAware {
        return None;
    }
    let [target] = m.targets.as_slice() else { return None };
    let provider = config.providers.get(target.provider)?;
    let kv = provider.kv.as_ref()?;
    let seed = chain_seed(&provider.name, lora);
    Some(index.score(&provider.name, &provider.endpoints, block_keys(seed, tokens, kv.block_size), out))
}
