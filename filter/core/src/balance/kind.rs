//! [`StrategyKind`]: the names a route's `strategy` takes in the configuration.

use std::fmt;
use std::str::FromStr;

use super::BalanceError;

/// Which strategy a balancer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    /// `round_robin`: rotate through the targets.
    RoundRobin,
    /// `priority` (also `first`, `failover`): the first eligible target in route order.
    Priority,
    /// `random`: uniform among eligible targets.
    Random,
    /// `weighted`: smooth weighted round robin.
    Weighted,
    /// `least_loaded` (also `least_busy`, `least_request`): the smallest queue.
    LeastLoaded,
    /// `power_of_two`: the less loaded of two random targets.
    PowerOfTwo,
    /// `consistent_hash`: a ring keyed by session, else by conversation digest.
    ConsistentHash,
    /// `cache_aware`: approximate prefix-cache affinity with a load guard.
    CacheAware,
    /// `precise_cache_aware`: the engines' KV-cache events say who holds the prefix.
    PreciseCacheAware,
    /// `lmcache_aware`: as `precise_cache_aware` over every cache tier (GPU, LMCache's CPU
    /// memory and storage), tier-weighted, then the engines' cache room.
    LmcacheAware,
    /// `pipeline`: weighted sum of session, weight, load and prefix scores.
    Pipeline,
    /// `predicted_latency`: the smallest modelled latency.
    PredictedLatency,
    /// `lora_aware`: targets holding the requested adapter first.
    LoraAware,
}

impl StrategyKind {
    /// Every kind, in documentation order.
    pub const ALL: [Self; 13] = [
        Self::RoundRobin,
        Self::Priority,
        Self::Random,
        Self::Weighted,
        Self::LeastLoaded,
        Self::PowerOfTwo,
        Self::ConsistentHash,
        Self::CacheAware,
        Self::PreciseCacheAware,
        Self::LmcacheAware,
        Self::Pipeline,
        Self::PredictedLatency,
        Self::LoraAware,
    ];

    /// The canonical configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RoundRobin => "round_robin",
            Self::Priority => "priority",
            Self::Random => "random",
            Self::Weighted => "weighted",
            Self::LeastLoaded => "least_loaded",
            Self::PowerOfTwo => "power_of_two",
            Self::ConsistentHash => "consistent_hash",
            Self::CacheAware => "cache_aware",
            Self::PreciseCacheAware => "precise_cache_aware",
            Self::LmcacheAware => "lmcache_aware",
            Self::Pipeline => "pipeline",
            Self::PredictedLatency => "predicted_latency",
            Self::LoraAware => "lora_aware",
        }
    }

    /// Whether it routes by the engines' KV-cache events (the request's token ids scored
    /// against the KV index): `precise_cache_aware` and `lmcache_aware`.
    pub fn uses_kv_index(self) -> bool {
        matches!(self, Self::PreciseCacheAware | Self::LmcacheAware)
    }

    /// Whether target weights change its picks (the others ignore them).
    pub fn uses_weights(self) -> bool {
        matches!(self, Self::Weighted | Self::Pipeline)
    }
}

impl FromStr for StrategyKind {
    type Err = BalanceError;

    /// Reads a canonical spelling or one of the synonyms the configuration already accepts.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(kind) = Self::ALL.into_iter().find(|k| k.as_str() == s) {
            return Ok(kind);
        }
        match s {
            "first" | "failover" => Ok(Self::Priority),
            "least_busy" | "least_request" => Ok(Self::LeastLoaded),
            _ => Err(BalanceError::UnknownStrategy(s.to_string())),
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
