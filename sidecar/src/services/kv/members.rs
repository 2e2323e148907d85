//! Which engine holds which slot of a pool as its endpoints come and go.
//!
//! A slot is an endpoint's bit in the index's holder sets and its position in the feed's table;
//! the filter finds an engine's slot by its address, so slots need not follow the
//! configuration's order. A pool from `endpoints_dns` gains and loses addresses within one
//! layout: an address that appears takes the first vacant slot (or a new one, up to
//! [`MAX_KV_ENDPOINTS`]) with a fresh stream state and a consumer of its own, so a returning
//! address is resynced from its replay socket as a restarted engine is; an address that goes
//! has its blocks cleared, its consumer stopped and its slot vacated (an empty address in the
//! table). Each occupation has its own incarnation, carried by its consumer's [`Source`], so a
//! late batch from a stopped consumer never lands in the slot's next occupant.

use ferrogate_core::config::{KvSource, MAX_KV_ENDPOINTS};
use ferrogate_core::kv::KvOp;
use tokio::sync::watch;

use super::state::Pool;
use super::stream::Sequence;
use super::{EndpointStats, Source};

/// One slot of a pool.
pub(super) struct Endpoint {
    /// Which occupation of the slot this is (see [`Source::incarnation`]).
    pub(super) incarnation: u64,
    /// Its sockets, when it publishes.
    pub(super) source: Option<KvSource>,
    pub(super) seq: Sequence,
    /// `stats.endpoint` is the address (empty when the slot is vacant).
    pub(super) stats: EndpointStats,
    /// Dropped to stop the endpoint's consumer.
    stop: Option<watch::Sender<bool>>,
}

/// A consumer to start for an endpoint that took a slot.
pub struct Spawn {
    /// Where its batches go.
    pub src: Source,
    /// The engine's sockets.
    pub source: KvSource,
    /// The topic prefix to subscribe to.
    pub topic: String,
    /// Turns (or closes) when the endpoint leaves its slot.
    pub stop: watch::Receiver<bool>,
}

impl Endpoint {
    fn vacant() -> Self {
        Self { incarnation: 0, source: None, seq: Sequence::new(false), stats: EndpointStats::default(), stop: None }
    }

    /// Whether no endpoint holds the slot.
    pub(super) fn is_vacant(&self) -> bool {
        self.stats.endpoint.is_empty()
    }

    /// Whether the slot is held by `address` with `source`.
    fn holds(&self, address: &str, source: &Option<KvSource>) -> bool {
        !self.is_vacant() && self.stats.endpoint == address && &self.source == source
    }
}

impl Pool {
    /// The endpoint in slot `slot`, if it is the occupation `src` speaks for.
    pub(super) fn slot_of(&mut self, src: Source) -> Option<&mut Endpoint> {
        self.endpoints.get_mut(src.endpoint).filter(|e| !e.is_vacant() && e.incarnation == src.incarnation)
    }

    /// The slot and endpoint at `address`.
    pub(super) fn by_address(&mut self, address: &str) -> Option<(u8, &mut Endpoint)> {
        let slot = self.endpoints.iter().position(|e| !e.is_vacant() && e.stats.endpoint == address)?;
        Some((u8::try_from(slot).ok()?, self.endpoints.get_mut(slot)?))
    }

    /// Brings the slots to `wanted` (address and sockets of each endpoint, in configuration
    /// order): see the module docs. Index changes go to `ops`, consumers to start to `spawns`.
    pub(super) fn reconcile(
        &mut self,
        epoch: u64,
        wanted: &[(String, Option<KvSource>)],
        ops: &mut Vec<KvOp>,
        spawns: &mut Vec<Spawn>,
    ) {
        for slot in 0..self.endpoints.len() {
            let gone = self
                .endpoints
                .get(slot)
                .is_some_and(|e| !e.is_vacant() && !wanted.iter().any(|(address, source)| e.holds(address, source)));
            if gone {
                self.vacate(slot, ops);
            }
        }
        for (address, source) in wanted {
            if !self.endpoints.iter().any(|e| e.holds(address, source)) {
                self.occupy(epoch, address, source, spawns);
            }
        }
    }

    /// Clears slot `slot`'s blocks and stops its consumer.
    fn vacate(&mut self, slot: usize, ops: &mut Vec<KvOp>) {
        let (Ok(bit), Some(e)) = (u8::try_from(slot), self.endpoints.get_mut(slot)) else { return };
        tracing::info!(endpoint = %e.stats.endpoint, provider = %self.index.name(), "KV events: the endpoint left its pool; its blocks are dropped");
        let incarnation = e.incarnation;
        *e = Endpoint::vacant();
        e.incarnation = incarnation;
        self.index.clear(bit, ops);
    }

    /// Gives `address` the first vacant slot, or a new one.
    fn occupy(&mut self, epoch: u64, address: &str, source: &Option<KvSource>, spawns: &mut Vec<Spawn>) {
        let slot = self.endpoints.iter().position(Endpoint::is_vacant).unwrap_or(self.endpoints.len());
        if slot >= MAX_KV_ENDPOINTS {
            tracing::warn!(endpoint = %address, provider = %self.index.name(), "KV events: the pool has {MAX_KV_ENDPOINTS} endpoints already; this one is not indexed");
            return;
        }
        if slot == self.endpoints.len() {
            self.endpoints.push(Endpoint::vacant());
            self.index.grow(slot + 1);
        }
        let Some(e) = self.endpoints.get_mut(slot) else { return };
        let incarnation = e.incarnation + 1;
        let stats = EndpointStats {
            endpoint: address.to_string(),
            kv_events: source.as_ref().map(|s| s.events.clone()),
            ..EndpointStats::default()
        };
        let seq = Sequence::new(source.as_ref().is_some_and(|s| s.replay.is_some()));
        let (stop, stopped) = watch::channel(false);
        *e = Endpoint { incarnation, source: source.clone(), seq, stats, stop: Some(stop) };
        if let Some(source) = source {
            let src = Source { epoch, pool: self.position, endpoint: slot, incarnation };
            spawns.push(Spawn { src, source: source.clone(), topic: self.topic.clone(), stop: stopped });
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // Dropping the sender also stops the consumer; sending first makes it explicit for a
        // consumer that reads the value rather than waiting for a change.
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
    }
}

#[cfg(test)]
#[path = "members_tests.rs"]
mod tests;
