//! The state behind [`super::Kv`]: one index and the streams' states per pool of a layout,
//! the log of index changes with its generations, the feed answers built from them, and the
//! application of one decoded batch.

use std::collections::VecDeque;

use ferrogate_core::kv::events::{self as decode, Event};
use ferrogate_core::kv::feed::{FeedEndpoint, FeedProvider};
use ferrogate_core::kv::{KvFeed, KvOp};

use super::index::ProviderIndex;
use super::members::{Endpoint, Spawn};
use super::{Answer, Layout, PoolLayout, LOG_OPS};

/// One pool: its index and its endpoints by slot (the endpoint's bit in the index).
pub(super) struct Pool {
    pub(super) index: ProviderIndex,
    pub(super) endpoints: Vec<Endpoint>,
    /// The pool's position in the layout, and the topic its consumers subscribe to.
    pub(super) position: usize,
    pub(super) topic: String,
}

/// The indexes of one layout, and the log of their changes.
pub(super) struct State {
    pub(super) epoch: u64,
    pub(super) layout: Layout,
    pub(super) pools: Vec<Pool>,
    pub(super) generation: u64,
    /// Readers at or after this generation can be answered with changes.
    pub(super) floor: u64,
    pub(super) log: VecDeque<(u64, KvOp)>,
    /// Consumers to start for endpoints that got a slot ([`State::take_spawns`]).
    pub(super) spawns: Vec<Spawn>,
}

impl State {
    pub(super) fn new(layout: Layout) -> Self {
        let epoch = rand::random::<u64>() | 1;
        let mut spawns = Vec::new();
        let pools = layout.pools.iter().enumerate().map(|(i, p)| pool(epoch, i, p, &mut spawns)).collect();
        Self { epoch, layout, pools, generation: 0, floor: 0, log: VecDeque::new(), spawns }
    }

    /// Takes `layout`, whose pools are this state's ([`Layout::same_pools`]) with other
    /// endpoints: an endpoint that went is dropped (its blocks cleared, its consumer stopped),
    /// one that came gets a slot and a consumer ([`State::take_spawns`]); the others keep
    /// theirs. The feed's table changes, so readers get a new generation.
    pub(super) fn reconcile(&mut self, layout: Layout) {
        let mut ops = Vec::new();
        for (pool, want) in self.pools.iter_mut().zip(&layout.pools) {
            pool.reconcile(self.epoch, &want.endpoints, &mut ops, &mut self.spawns);
        }
        self.layout = layout;
        self.log(ops);
        self.generation += 1;
    }

    /// The consumers to start since the last call.
    pub(super) fn take_spawns(&mut self) -> Vec<Spawn> {
        std::mem::take(&mut self.spawns)
    }

    pub(super) fn log(&mut self, ops: Vec<KvOp>) {
        for op in ops {
            self.generation += 1;
            self.log.push_back((self.generation, op));
        }
        while self.log.len() > LOG_OPS {
            if let Some((g, _)) = self.log.pop_front() {
                self.floor = g;
            }
        }
    }

    pub(super) fn feed(&self, reader: Option<(u64, u64)>) -> Answer {
        let current = |g: u64| reader == Some((self.epoch, g));
        if current(self.generation) {
            return Answer::NotModified;
        }
        let providers = self.pools.iter().map(feed_provider).collect();
        let mut feed = KvFeed { epoch: self.epoch, generation: self.generation, providers, ..KvFeed::default() };
        match reader {
            Some((epoch, since)) if epoch == self.epoch && since >= self.floor && since < self.generation => {
                feed.ops = self.log.iter().filter(|(g, _)| *g > since).map(|(_, op)| *op).collect();
            }
            _ => {
                feed.reset = true;
                for p in &self.pools {
                    p.index.snapshot(&mut feed.ops);
                }
            }
        }
        Answer::Feed(feed.encode())
    }
}

fn pool(epoch: u64, i: usize, p: &PoolLayout, spawns: &mut Vec<Spawn>) -> Pool {
    let id = u16::try_from(i).unwrap_or(u16::MAX);
    let index = ProviderIndex::new(id, &p.provider, p.endpoints.len(), p.block_size, p.max_blocks, p.offload_ttl_secs);
    let mut pool = Pool { index, endpoints: Vec::new(), position: i, topic: p.topic.clone() };
    let mut ops = Vec::new();
    pool.reconcile(epoch, &p.endpoints, &mut ops, spawns);
    pool
}

fn feed_provider(p: &Pool) -> FeedProvider {
    let endpoints = p
        .endpoints
        .iter()
        // A vacant slot has an empty address, which no endpoint of the filter's has.
        .map(|e| FeedEndpoint { address: e.stats.endpoint.clone(), connected: e.stats.connected })
        .collect();
    FeedProvider { name: p.index.name().to_string(), endpoints }
}

/// Decodes a batch of endpoint `ep` and applies its events.
pub(super) fn apply(pool: &mut Pool, ep: u8, payload: &[u8], now_ms: u64, ops: &mut Vec<KvOp>) {
    let Some(endpoint) = pool.endpoints.get_mut(usize::from(ep)) else { return };
    endpoint.stats.last_event_ms = Some(now_ms);
    let batch = match decode::decode(payload) {
        Ok(batch) => batch,
        Err(e) => {
            if endpoint.stats.malformed.is_power_of_two() || endpoint.stats.malformed == 0 {
                tracing::warn!(endpoint = %endpoint.stats.endpoint, "KV event payload dropped: {e}");
            }
            endpoint.stats.malformed += 1;
            return;
        }
    };
    let (mut applied, mut skipped) = (0, 0);
    for event in &batch.events {
        let done = match event {
            Event::Stored(s) => pool.index.stored(ep, s, now_ms, ops).is_ok(),
            Event::Removed { group: Some(g), .. } if *g != 0 => false,
            Event::Removed { hashes, tier, .. } => {
                pool.index.removed(ep, hashes, *tier, ops);
                true
            }
            Event::Cleared => {
                pool.index.clear(ep, ops);
                true
            }
        };
        if done {
            applied += 1
        } else {
            skipped += 1
        }
    }
    if let Some(e) = pool.endpoints.get_mut(usize::from(ep)) {
        e.stats.events += applied;
        e.stats.skipped += skipped;
        e.stats.malformed += batch.unknown as u64;
    }
}
