//! Load balancing: which target of a model serves a request. One [`Balancer`] per model lives as
//! long as the configuration snapshot (a reload builds new ones); the caller hands it the targets
//! it may use for this request (healthy, not yet tried) and a [`PickContext`] describing the
//! request and the current load, and tells it what happened afterwards through [`Observed`].
//! What engines report of their LoRA adapters reaches it through [`Balancer::residency`] (only
//! `lora_aware` keeps it; the other strategies ignore it).
//!
//! Every strategy is pure: the random number, the load snapshot and the observed latencies are
//! passed in, so the same inputs give the same pick. Picking allocates nothing in steady state
//! except where a strategy learns from the request (the prefix index of `cache_aware`,
//! `pipeline` and `lora_aware` may grow up to its bound; session and adapter tables likewise).
//!
//! Weights matter only to `weighted` and `pipeline`; every other strategy ignores them.

mod cache_aware;
pub(crate) mod hash;
mod kind;
mod latency;
mod lora;
pub mod lru;
mod pipeline;
mod precise;
mod prefix;
mod ring;
mod routing;
mod shared_prefix;
mod simple;

#[cfg(test)]
mod tests;

pub use cache_aware::{imbalanced, CacheAware, BALANCE_ABS_THRESHOLD, BALANCE_REL_THRESHOLD, MATCH_THRESHOLD};
pub use hash::hash64;
pub use kind::StrategyKind;
pub use latency::{PredictedLatency, MAX_SAMPLE_MS, MIN_SAMPLES};
pub use lora::{LoraAware, Residency, DEFAULT_MAX_LORAS, MAX_REPORTED_LORAS};
pub use pipeline::{Pipeline, PipelineWeights, DEFAULT_SESSIONS};
pub use precise::PreciseCacheAware;
pub use prefix::{PrefixIndex, BLOCK_BYTES, DEFAULT_MAX_NODES};
pub use ring::{ConsistentHash, VNODES_PER_TARGET};
pub use routing::{conversation, EndpointHealth, ModelRouting, Picked, Request, Routing, Slot};
pub use shared_prefix::{PrefixTable, SharedPrefixes, CHECKPOINT_BYTES, MAX_CHECKPOINTS};
pub use simple::{LeastLoaded, PowerOfTwo, Priority, Random, RoundRobin, Weighted};

/// How much of the conversation prefix-affinity strategies look at (bytes, cut back to a UTF-8
/// character boundary). Bounded so a huge prompt costs no more than a 32 KiB one.
pub const PREFIX_BYTES: usize = 32 * 1024;

/// Why a balancer could not be built, or a strategy name not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BalanceError {
    /// The strategy name is not one the configuration accepts.
    #[error("unknown strategy {0:?}")]
    UnknownStrategy(String),
    /// A balancer needs something to pick from.
    #[error("a balancer needs at least one target")]
    NoTargets,
    /// Weights are relative and must be at least 1.
    #[error("target {index} ({name:?}) has weight 0; weights must be at least 1")]
    ZeroWeight {
        /// Position of the target.
        index: usize,
        /// Its name.
        name: String,
    },
}

/// One target as the balancer knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetSpec {
    /// Stable name (placement on the `consistent_hash` ring depends on it, not on the position,
    /// so adding a target moves only the keys that land on it).
    pub name: String,
    /// Relative weight, at least 1.
    pub weight: u32,
}

impl TargetSpec {
    /// A target named `name` with weight `weight`.
    pub fn new(name: impl Into<String>, weight: u32) -> Self {
        Self { name: name.into(), weight }
    }
}

/// Load of one target at pick time. The gateway's own in-flight count is always known; the
/// engine figures are present when the target reports them (vLLM/SGLang metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Load {
    /// Requests this gateway has sent to the target and not yet seen end.
    pub in_flight: u32,
    /// Requests the engine is running, if known.
    pub running: Option<u32>,
    /// Requests the engine has queued, if known.
    pub waiting: Option<u32>,
    /// Fraction of the engine's KV cache in use (0..=1), if known.
    pub kv_usage: Option<f32>,
    /// How full the engine's offload cache is (LMCache's occupancy, 0..=1), if known.
    pub cache_occupancy: Option<f32>,
}

impl Load {
    /// A load of `in_flight` requests with no engine figures.
    pub fn in_flight(in_flight: u32) -> Self {
        Self { in_flight, ..Self::default() }
    }

    /// The number every strategy compares: the larger of our own in-flight count and the
    /// engine's running + waiting (the engine also sees other clients; our count is fresher).
    pub fn queue(&self) -> u64 {
        let engine = u64::from(self.running.unwrap_or(0)) + u64::from(self.waiting.unwrap_or(0));
        engine.max(u64::from(self.in_flight))
    }
}

/// What a request offers the balancer. Built per request; borrows everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct PickContext<'a> {
    /// The `x-session-id` header, if any.
    pub session: Option<&'a str>,
    /// The conversation text in model order (roles and contents, not the JSON envelope, which
    /// would make every request share a prefix). The whole text: prefix strategies read only
    /// its first [`PREFIX_BYTES`], the token estimate and the digest use all of it.
    pub conversation: &'a [u8],
    /// A digest of the whole conversation including what is not text (images, tool calls),
    /// when the caller computed one while extracting; otherwise [`hash64`] of `conversation`.
    pub digest: Option<u64>,
    /// Load per target, indexed like the targets; empty when no load is known.
    pub loads: &'a [Load],
    /// A fresh random number for this pick (the core has no randomness of its own).
    pub random: u64,
    /// The LoRA adapter requested, when the request names something other than the route's
    /// own model.
    pub adapter: Option<&'a str>,
    /// The proxy-wide prefix record `cache_aware` consults and updates, when the caller has
    /// one (the gateway: shared data); `None` keeps affinity per balancer.
    pub shared: Option<SharedPrefixes<'a>>,
    /// Per target, the score of the blocks it holds of this request by the engines' KV events
    /// ([`crate::kv::KvIndex::score`]); `None` when the request's token ids or the index are
    /// unknown (`precise_cache_aware` then acts as `cache_aware`).
    pub kv: Option<&'a [u32]>,
}

impl<'a> PickContext<'a> {
    /// The first [`PREFIX_BYTES`] of the conversation, cut on a character boundary.
    pub fn prefix(&self) -> &'a [u8] {
        let text = self.conversation;
        if text.len() <= PREFIX_BYTES {
            return text;
        }
        let mut end = PREFIX_BYTES;
        // UTF-8 continuation bytes are 0b10xx_xxxx; back off to the start of a character.
        while end > 0 && text.get(end).is_some_and(|b| b & 0xC0 == 0x80) {
            end -= 1;
        }
        text.get(..end).unwrap_or(text)
    }

    /// The conversation digest: the caller's, or a hash of the whole text.
    pub fn digest(&self) -> u64 {
        self.digest.unwrap_or_else(|| hash64(0, self.conversation))
    }

    /// Estimated prompt tokens: whole conversation bytes / 4.
    pub fn prompt_tokens(&self) -> u64 {
        self.conversation.len() as u64 / 4
    }

    /// Whether any load is known.
    pub fn has_load(&self) -> bool {
        !self.loads.is_empty()
    }

    /// The queue of `target` ([`Load::queue`]); 0 when unknown.
    pub fn queue(&self, target: usize) -> u64 {
        self.loads.get(target).map_or(0, Load::queue)
    }

    /// Offload-cache occupancy of `target` (0..=1), if known.
    pub fn cache_occupancy(&self, target: usize) -> Option<f32> {
        self.loads.get(target).and_then(|l| l.cache_occupancy)
    }

    /// KV-cache usage of `target`; 0 when unknown.
    pub fn kv_usage(&self, target: usize) -> f32 {
        self.loads.get(target).and_then(|l| l.kv_usage).unwrap_or(0.0)
    }
}

/// How a finished request went, for strategies that learn from latency.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Outcome {
    /// Only successful requests train latency models (a fast error is not a fast target).
    pub success: bool,
    /// Time from dispatch to the end of the response.
    pub latency_ms: u64,
    /// Time to the first byte/token of the response, when streamed.
    pub ttft_ms: Option<u64>,
    /// The target's [`Load::queue`] when the request was picked, read before it was counted.
    pub queue_depth: u64,
    /// Estimated prompt tokens ([`PickContext::prompt_tokens`]).
    pub prompt_tokens: u64,
}

/// Something that happened to a request on a target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Observed {
    /// The request was sent to the target.
    Started,
    /// The request ended.
    Finished(Outcome),
}

/// A load-balancing strategy. Implementations never panic and, once warm, never allocate in
/// `pick` unless documented.
pub trait Strategy {
    /// Picks one of `eligible` (distinct target indices below the target count), or `None`
    /// when `eligible` is empty. Strategies that learn from placement (prefix, session,
    /// adapter) record the pick here.
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize>;

    /// Learns from what happened on `target`. Default: nothing.
    fn observe(&mut self, target: usize, event: Observed) {
        let _ = (target, event);
    }

    /// Takes what the engine behind `target` reports of its LoRA adapters (the targets feed).
    /// Default: nothing (only `lora_aware` keeps adapter residency).
    fn residency(&mut self, target: usize, report: Residency<'_>) {
        let _ = (target, report);
    }

    /// Learns that another balancer sent a request for `adapter` to the engine behind
    /// `target`, which loads it there. Default: nothing.
    fn adapter_loaded(&mut self, target: usize, adapter: &str) {
        let _ = (target, adapter);
    }
}

/// One model's balancer: a strategy over a fixed list of targets, built once per snapshot and
/// reused for every request.
pub struct Balancer {
    kind: StrategyKind,
    targets: usize,
    strategy: Box<dyn Strategy + Send>,
}

impl std::fmt::Debug for Balancer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Balancer").field("kind", &self.kind).field("targets", &self.targets).finish()
    }
}

impl Balancer {
    /// Builds the balancer for `targets` (in route order) with the default parameters of `kind`.
    pub fn new(kind: StrategyKind, targets: &[TargetSpec]) -> Result<Self, BalanceError> {
        if targets.is_empty() {
            return Err(BalanceError::NoTargets);
        }
        if let Some((index, t)) = targets.iter().enumerate().find(|(_, t)| t.weight == 0) {
            return Err(BalanceError::ZeroWeight { index, name: t.name.clone() });
        }
        let n = targets.len();
        let weights = || targets.iter().map(|t| t.weight).collect::<Vec<_>>();
        let strategy: Box<dyn Strategy + Send> = match kind {
            StrategyKind::RoundRobin => Box::new(RoundRobin::new(n)),
            StrategyKind::Priority => Box::new(Priority),
            StrategyKind::Random => Box::new(Random),
            StrategyKind::Weighted => Box::new(Weighted::new(weights())),
            StrategyKind::LeastLoaded => Box::new(LeastLoaded),
            StrategyKind::PowerOfTwo => Box::new(PowerOfTwo),
            StrategyKind::ConsistentHash => Box::new(ConsistentHash::new(targets.iter().map(|t| t.name.as_str()))),
            StrategyKind::CacheAware => {
                Box::new(CacheAware::with_names(targets.iter().map(|t| t.name.as_str()), DEFAULT_MAX_NODES))
            }
            StrategyKind::PreciseCacheAware => {
                Box::new(PreciseCacheAware::with_names(targets.iter().map(|t| t.name.as_str()), DEFAULT_MAX_NODES))
            }
            StrategyKind::LmcacheAware => Box::new(
                PreciseCacheAware::with_names(targets.iter().map(|t| t.name.as_str()), DEFAULT_MAX_NODES).with_room(),
            ),
            StrategyKind::Pipeline => Box::new(Pipeline::new(weights(), PipelineWeights::default())),
            StrategyKind::PredictedLatency => Box::new(PredictedLatency::new(n)),
            StrategyKind::LoraAware => {
                Box::new(LoraAware::with_names(targets.iter().map(|t| t.name.as_str()), DEFAULT_MAX_LORAS))
            }
        };
        Ok(Self { kind, targets: n, strategy })
    }

    /// The strategy it runs.
    pub fn kind(&self) -> StrategyKind {
        self.kind
    }

    /// How many targets it picks among.
    pub fn len(&self) -> usize {
        self.targets
    }

    /// Always false: a balancer has at least one target.
    pub fn is_empty(&self) -> bool {
        self.targets == 0
    }

    /// Picks a target among `eligible`. `None` when `eligible` is empty or names a target that
    /// does not exist (a caller bug, refused rather than guessed at); the caller decides whether
    /// to fail open by asking again with every target.
    pub fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        if eligible.iter().any(|&i| i >= self.targets) {
            return None;
        }
        self.strategy.pick(ctx, eligible).filter(|&i| i < self.targets)
    }

    /// Reports what happened to a request on `target`; unknown targets are ignored.
    pub fn observe(&mut self, target: usize, event: Observed) {
        if target < self.targets {
            self.strategy.observe(target, event);
        }
    }

    /// Hands the strategy what `target`'s engine reports of its LoRA adapters; unknown
    /// targets are ignored.
    pub fn residency(&mut self, target: usize, report: Residency<'_>) {
        if target < self.targets {
            self.strategy.residency(target, report);
        }
    }

    /// Tells the strategy that `adapter` was sent to `target`'s engine by another balancer;
    /// unknown targets are ignored.
    pub fn adapter_loaded(&mut self, target: usize, adapter: &str) {
        if target < self.targets {
            self.strategy.adapter_loaded(target, adapter);
        }
    }
}
