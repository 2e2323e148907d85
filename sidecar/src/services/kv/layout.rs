//! Which engines publish KV events, from the served configuration: the part of it the KV
//! service depends on. A new snapshot whose pools differ (in number, order or settings) needs
//! new indexes; one whose pools differ only in their endpoints keeps them.

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
                // A pool from DNS with no addresses yet (or none now) is kept: its endpoints
                // come and go within the layout (see `same_pools`).
                let kv = p.kv.as_ref().filter(|kv| kv.sources.iter().any(Option::is_some) || p.endpoints.is_empty())?;
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

    /// Whether `other` has the same pools with the same settings, its endpoints aside: then
    /// the indexes are kept and only the endpoints that came or went are started or dropped.
    pub fn same_pools(&self, other: &Layout) -> bool {
        self.pools.len() == other.pools.len() && self.pools.iter().zip(&other.pools).all(|(a, b)| a.same_pool(b))
    }
}

impl PoolLayout {
    fn same_pool(&self, other: &PoolLayout) -> bool {
        let Self { provider, block_size, topic, max_blocks, offload_ttl_secs, endpoints: _, controller } = self;
        (provider, block_size, topic, max_blocks, offload_ttl_secs, controller)
            == (
                &other.provider,
                &other.block_size,
                &other.topic,
                &other.max_blocks,
                &other.offload_ttl_secs,
                &other.controller,
            )
    }
}

#[cfg(test)]
impl Layout {
    /// One pool `pool` of 4-token blocks over `endpoints`, bounded at 1000 blocks, offloaded
    /// blocks kept 300 s, no controller: the tests' common layout, which each adjusts.
    pub(crate) fn one_pool(endpoints: Vec<(String, Option<KvSource>)>) -> Layout {
        Layout {
            pools: vec![PoolLayout {
                provider: "pool".into(),
                block_size: 4,
                topic: String::new(),
                max_blocks: 1000,
                offload_ttl_secs: 300,
                endpoints,
                controller: None,
            }],
        }
    }
}
