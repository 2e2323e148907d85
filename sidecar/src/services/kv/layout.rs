//! Which engines publish KV events, from the served configuration: the part of it the KV
//! service depends on, compared as a whole to decide whether a new snapshot needs new indexes.

use ferrogate_core::config::{Config, Controller, KvSource};

/// One provider with publishing endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolLayout {
    /// The provider's name.
    pub provider: String,
    /// Tokens per block.
    pub block_size: u32,
    /// Topic prefix subscribed to.
    pub topic: String,
    /// Bound on the index.
    pub max_blocks: u64,
    /// Seconds an offloaded block stays indexed after its last store.
    pub offload_ttl_secs: u64,
    /// Every endpoint (`host:port`) in configuration order, with its sockets when it publishes.
    pub endpoints: Vec<(String, Option<KvSource>)>,
    /// The LMCache controller sockets to bind for the pool's workers, if any.
    pub controller: Option<Controller>,
}

/// Every publishing provider.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    /// In configuration order.
    pub pools: Vec<PoolLayout>,
}

impl Layout {
    /// The layout of `config` (providers without a publishing endpoint are left out).
    pub fn of(config: &Config) -> Self {
        let pools = config
            .providers
            .iter()
            .filter_map(|p| {
                let kv = p.kv.as_ref().filter(|kv| kv.sources.iter().any(Option::is_some))?;
                let endpoints = p.endpoints.iter().cloned().zip(kv.sources.iter().cloned()).collect();
                Some(PoolLayout {
                    provider: p.name.clone(),
                    block_size: kv.block_size,
                    topic: kv.topic.clone(),
                    max_blocks: kv.max_blocks,
                    offload_ttl_secs: kv.offload_ttl_secs,
                    endpoints,
                    controller: p.lmcache.as_ref().and_then(|l| l.controller.clone()),
                })
            })
            .collect();
        Self { pools }
    }
}
