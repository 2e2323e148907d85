//! KV-cache events from the engines (vLLM's ZMQ publisher), turned into the block index the
//! filter's `precise_cache_aware` routes on, and served to it as `GET /v1/kv`
//! ([`ferrogate_core::kv::feed`]).
//!
//! The layout — every provider whose endpoints name `kv_events`, with its block size, topic
//! and bound — comes from the served snapshot. One consumer per publishing endpoint
//! ([`zmq`]) subscribes, orders batches by sequence ([`stream`]), decodes them
//! ([`ferrogate_core::kv::events`])
//! and applies them to its provider's index ([`index`]). Every change to an index is logged
//! as a feed operation with a generation number; the feed answers the changes since the
//! reader's generation, or everything (a reset) when the reader is of another epoch or
//! further behind than [`LOG_OPS`] operations. Blocks held in CPU memory or storage, which no
//! event takes away, leave the index `lmcache_ttl_secs` after their last store
//! ([`EXPIRE_EVERY`]). A layout with other pools (or pool settings) starts a new epoch with
//! empty indexes and new consumers; one whose pools only gained or lost endpoints (a pool from
//! `endpoints_dns` that scaled) keeps the indexes and starts or stops just those endpoints'
//! consumers ([`members`]); an unchanged one keeps everything across snapshots.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use ferrogate_core::kv::lmcache::ChunkOp;
use ferrogate_core::kv::Tier;
use serde::Serialize;
use tokio::sync::watch;

use super::snapshot::{Served, Snapshots};

pub mod controller;
pub mod index;
mod layout;
mod members;
mod offload;
pub mod report;
mod state;
pub mod stream;
pub mod zmq;

pub use layout::{Layout, PoolLayout};
pub use members::Spawn;
use state::{apply, State};
use stream::{Sequence, Step};

/// Feed operations kept for readers that ask for changes (about 6 MiB).
pub const LOG_OPS: usize = 1 << 18;

/// How often offloaded blocks past their TTL are taken out of the indexes.
pub const EXPIRE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// What one endpoint's stream did (the admin view and metrics). The sequence figures
/// (`last_sequence`, `gaps`, `replays`, `replaying`, `restarts`) and `blocks` are read from
/// the stream's state and the index when the view is taken ([`Kv::stats`]).
#[derive(Debug, Clone, Default, Serialize)]
pub struct EndpointStats {
    /// `host:port` of the engine's HTTP API.
    pub endpoint: String,
    /// Its PUB socket, when it publishes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_events: Option<String>,
    /// Whether the subscription is connected.
    pub connected: bool,
    /// The last sequence number applied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_sequence: Option<u64>,
    /// Blocks it holds in the index (in any tier).
    pub blocks: usize,
    /// Of those, the blocks held in GPU memory, in CPU memory (LMCache, offloading) and in
    /// storage.
    pub gpu_blocks: usize,
    /// See `gpu_blocks`.
    pub cpu_blocks: usize,
    /// See `gpu_blocks`.
    pub storage_blocks: usize,
    /// Milliseconds since its last batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_event_age_ms: Option<u64>,
    /// Events applied.
    pub events: u64,
    /// Payloads that were not batches, plus events of unknown type.
    pub malformed: u64,
    /// Events that could not be indexed (block size, group, unknown parent).
    pub skipped: u64,
    /// Gaps in the sequence.
    pub gaps: u64,
    /// Replays asked for.
    pub replays: u64,
    /// A replay is running (live batches are held until it ends).
    pub replaying: bool,
    /// Restarts seen (the sequence went back).
    pub restarts: u64,
    /// Admits and evicts its LMCache workers pushed to the controller socket.
    pub lmcache_ops: u64,
    /// Milliseconds since its LMCache workers last registered, beat or pushed; absent when
    /// they never did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lmcache_seen_age_ms: Option<u64>,
    #[serde(skip)]
    last_event_ms: Option<u64>,
    #[serde(skip)]
    lmcache_seen_ms: Option<u64>,
}

/// The sidecar's KV-event service.
pub struct Kv {
    state: Mutex<State>,
    /// Stops the current layout's consumers when the layout changes.
    stop: Mutex<Option<watch::Sender<bool>>>,
}

/// An answer of the feed.
pub enum Answer {
    /// The reader is current.
    NotModified,
    /// The encoded [`KvFeed`].
    Feed(Vec<u8>),
}

/// Which consumer a batch came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    /// The epoch it was started in (a batch of an older layout is dropped).
    pub epoch: u64,
    /// Provider position in the layout.
    pub pool: usize,
    /// The endpoint's slot in the provider's index (its position in the configuration for a
    /// pool whose endpoints never changed).
    pub endpoint: usize,
    /// Which occupation of the slot: `1` for the first, counting up as endpoints leave and
    /// others take it (a batch of an earlier occupant is dropped).
    pub incarnation: u64,
}

/// What [`Kv::install`] did with a layout.
pub enum Installed {
    /// Nothing changed.
    Unchanged,
    /// New indexes under a new epoch: start its controllers, and these consumers.
    Epoch(u64, Vec<Spawn>),
    /// The same pools with other endpoints: start these consumers (those of endpoints that
    /// went are stopped).
    Endpoints(Vec<Spawn>),
}

impl Default for Kv {
    fn default() -> Self {
        Self { state: Mutex::new(State::new(Layout::default())), stop: Mutex::new(None) }
    }
}

impl Kv {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `layout`: when only its pools' endpoints differ from the current one, the
    /// indexes are kept and the endpoints that came or went are started or dropped
    /// ([`members`]); when its pools differ, new empty indexes under a new epoch.
    pub fn install(&self, layout: Layout) -> Installed {
        let mut state = self.lock();
        if state.layout == layout {
            return Installed::Unchanged;
        }
        if state.layout.same_pools(&layout) {
            state.reconcile(layout);
            return Installed::Endpoints(state.take_spawns());
        }
        *state = State::new(layout);
        let spawns = state.take_spawns();
        Installed::Epoch(state.epoch, spawns)
    }

    /// The current layout and epoch.
    pub fn layout(&self) -> (u64, Layout) {
        let state = self.lock();
        (state.epoch, state.layout.clone())
    }

    /// The feed for a reader at `reader` (epoch, generation), or everything for a new reader.
    pub fn feed(&self, reader: Option<(u64, u64)>) -> Answer {
        self.lock().feed(reader)
    }

    /// A live batch from `src`; returns where to start a replay when a gap calls for one.
    pub fn live(&self, src: Source, seq: u64, payload: Bytes, now_ms: u64) -> Option<u64> {
        self.steps(src, now_ms, |s, out| s.live(seq, payload, out))
    }

    /// A replayed batch from `src`.
    pub fn replayed(&self, src: Source, seq: u64, payload: Bytes, now_ms: u64) {
        self.steps(src, now_ms, |s, out| s.replayed(seq, payload, out));
    }

    /// `src`'s replay ended (marker, failure or timeout).
    pub fn replay_done(&self, src: Source, now_ms: u64) {
        self.steps(src, now_ms, Sequence::replay_done);
    }

    /// `src`'s subscription reconnected by itself (the engine may have restarted).
    pub fn reconnected(&self, src: Source) {
        let mut state = self.lock();
        if state.epoch != src.epoch {
            return;
        }
        if let Some(e) = state.pools.get_mut(src.pool).and_then(|p| p.slot_of(src)) {
            e.seq.connected();
            e.stats.connected = true;
        }
    }

    /// Where to start a replay for `src`'s new subscription, if it has a replay socket and
    /// none runs ([`Sequence::resync`]).
    pub fn resync(&self, src: Source) -> Option<u64> {
        let mut state = self.lock();
        if state.epoch != src.epoch {
            return None;
        }
        state.pools.get_mut(src.pool)?.slot_of(src)?.seq.resync()
    }

    /// A message from `src` that was not three frames with an 8-byte sequence.
    pub fn malformed(&self, src: Source) {
        let mut state = self.lock();
        if state.epoch != src.epoch {
            return;
        }
        if let Some(e) = state.pools.get_mut(src.pool).and_then(|p| p.slot_of(src)) {
            e.stats.malformed += 1;
        }
    }

    /// Whether `src`'s subscription is connected (a change is a new generation, so readers
    /// learn it).
    pub fn connected(&self, src: Source, connected: bool) {
        let mut state = self.lock();
        if state.epoch != src.epoch {
            return;
        }
        let Some(e) = state.pools.get_mut(src.pool).and_then(|p| p.slot_of(src)) else { return };
        if e.stats.connected != connected {
            e.stats.connected = connected;
            // A replay under way goes on (its own socket) and releases the held batches when
            // it ends; the numbering is kept so a gap across the reconnection is noticed.
            if connected {
                e.seq.connected();
            }
            state.generation += 1;
        }
    }

    fn steps(&self, src: Source, now_ms: u64, f: impl FnOnce(&mut Sequence, &mut Vec<Step>)) -> Option<u64> {
        let mut state = self.lock();
        if state.epoch != src.epoch {
            return None;
        }
        let mut steps = Vec::new();
        let pool = state.pools.get_mut(src.pool)?;
        let ep = u8::try_from(src.endpoint).ok()?;
        let endpoint = pool.slot_of(src)?;
        f(&mut endpoint.seq, &mut steps);
        let mut ops = Vec::new();
        let mut replay = None;
        for step in steps {
            match step {
                Step::Apply(_, payload) => apply(pool, ep, &payload, now_ms, &mut ops),
                Step::Clear => pool.index.clear(ep, &mut ops),
                Step::Replay(from) => replay = Some(from),
            }
        }
        state.log(ops);
        replay
    }

    /// Admits and evicts that the endpoint at `address` of pool `pool` (layout `epoch`)
    /// reported through LMCache's controller channel, held in `tier`: an admit adds the blocks
    /// its chunk hash is known by (from the KV events), an evict takes them out of that tier.
    /// Nothing happens when no endpoint of the pool has that address now.
    pub fn chunk_ops(&self, epoch: u64, pool: usize, address: &str, tier: Tier, chunk_ops: &[ChunkOp], now_ms: u64) {
        let mut state = self.lock();
        if state.epoch != epoch {
            return;
        }
        let Some(p) = state.pools.get_mut(pool) else { return };
        let Some((ep, e)) = p.by_address(address) else { return };
        e.stats.lmcache_ops += chunk_ops.len() as u64;
        e.stats.lmcache_seen_ms = Some(now_ms);
        let mut ops = Vec::new();
        for op in chunk_ops {
            if op.admit {
                p.index.stored_again(ep, &[op.key], tier, now_ms, &mut ops);
            } else {
                p.index.removed(ep, &[op.key], tier, &mut ops);
            }
        }
        state.log(ops);
    }

    /// The LMCache worker of the endpoint at `address` registered or beat at `now_ms`.
    pub fn lmcache_seen(&self, epoch: u64, pool: usize, address: &str, now_ms: u64) {
        let mut state = self.lock();
        if state.epoch != epoch {
            return;
        }
        if let Some((_, e)) = state.pools.get_mut(pool).and_then(|p| p.by_address(address)) {
            e.stats.lmcache_seen_ms = Some(now_ms);
        }
    }

    /// The addresses of pool `pool`'s endpoints now (layout `epoch`), in slot order; empty for
    /// another epoch.
    pub fn addresses(&self, epoch: u64, pool: usize) -> Vec<String> {
        let state = self.lock();
        let Some(p) = state.pools.get(pool).filter(|_| state.epoch == epoch) else { return Vec::new() };
        p.endpoints.iter().filter(|e| !e.is_vacant()).map(|e| e.stats.endpoint.clone()).collect()
    }

    /// Every endpoint's figures, per provider, at `now_ms`.
    pub fn stats(&self, now_ms: u64) -> Vec<(String, Vec<EndpointStats>)> {
        let state = self.lock();
        state
            .pools
            .iter()
            .map(|p| {
                let held = p.index.tier_counts();
                let endpoints = p
                    .endpoints
                    .iter()
                    .zip(held)
                    .filter(|(e, _)| !e.is_vacant())
                    .map(|(e, t)| {
                        let mut s = e.stats.clone();
                        let c = e.seq.counts;
                        (s.gaps, s.replays, s.restarts) = (c.gaps, c.replays, c.restarts);
                        (s.last_sequence, s.replaying, s.blocks) = (e.seq.last(), e.seq.replaying(), t.all);
                        (s.gpu_blocks, s.cpu_blocks, s.storage_blocks) = (t.gpu, t.cpu, t.storage);
                        s.last_event_age_ms = s.last_event_ms.map(|t| now_ms.saturating_sub(t));
                        s.lmcache_seen_age_ms = s.lmcache_seen_ms.map(|t| now_ms.saturating_sub(t));
                        s
                    })
                    .collect();
                (p.index.name().to_string(), endpoints)
            })
            .collect()
    }

    /// Takes out of every index the offloaded blocks last stored a TTL or more before
    /// `now_ms`; the feed reports them removed.
    pub fn expire(&self, now_ms: u64) {
        let mut state = self.lock();
        let mut ops = Vec::new();
        for pool in state.pools.iter_mut().filter(|p| p.index.offloaded() > 0) {
            pool.index.expire(now_ms, &mut ops);
        }
        if !ops.is_empty() {
            state.log(ops);
        }
    }

    /// Blocks in each provider's index.
    pub fn blocks(&self) -> Vec<(String, usize)> {
        self.lock().pools.iter().map(|p| (p.index.name().to_string(), p.index.len())).collect()
    }
}

/// Follows the served snapshots: a new layout gets new indexes and consumers.
pub fn start(snapshots: Arc<Snapshots>, shutdown: watch::Receiver<bool>) -> Arc<Kv> {
    let kv = Arc::new(Kv::default());
    let mut rx = snapshots.subscribe();
    let current = rx.borrow_and_update().clone();
    sync(&kv, current.as_deref(), &shutdown);
    let k = kv.clone();
    tokio::spawn(async move {
        let mut shutdown = shutdown;
        let mut expiry = tokio::time::interval(EXPIRE_EVERY);
        expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() { return; }
                    let served = rx.borrow_and_update().clone();
                    sync(&k, served.as_deref(), &shutdown);
                }
                _ = expiry.tick() => k.expire(super::now_ms()),
                _ = shutdown.changed() => return,
            }
        }
    });
    kv
}

fn sync(kv: &Arc<Kv>, served: Option<&Served>, shutdown: &watch::Receiver<bool>) {
    let Some(served) = served else { return };
    let spawns = match kv.install(Layout::of(&served.config)) {
        Installed::Unchanged => return,
        Installed::Endpoints(spawns) => spawns,
        Installed::Epoch(epoch, spawns) => {
            let (stop_tx, stop_rx) = watch::channel(false);
            if let Some(old) = kv.stop.lock().unwrap_or_else(PoisonError::into_inner).replace(stop_tx) {
                let _ = old.send(true);
            }
            zmq::spawn_controllers(kv.clone(), epoch, stop_rx, shutdown.clone());
            spawns
        }
    };
    zmq::spawn_consumers(kv.clone(), spawns, shutdown.clone());
}

#[cfg(test)]
#[path = "kv_tests.rs"]
mod tests;
