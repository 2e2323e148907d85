//! Flow control: a proxy-wide queue per model that holds requests while every target of the
//! model is saturated, instead of passing the overload to the engines, and lets them go by
//! priority band (higher first), round-robin between keys within a band, each with a bounded
//! length and a time to live.
//!
//! A target is saturated when the proxy already has `max_concurrency` requests in flight on it
//! (its provider's setting), or, where the model sets them, when its engine reports at least
//! `max_waiting` queued requests or a KV cache at least `max_kv_usage` full; a target whose
//! engine figures are unknown (never scraped, or stale) counts as saturated for a threshold that
//! needs them (`max_running` likewise, for engines whose running count is the bound). The queue
//! ([`Queue`]) lives in proxy-wasm shared data, so every worker VM shares it; a waiting request
//! checks its place ([`gate`]) when it is woken, and goes when it is among the first `free` of
//! the service order. Who wakes whom is the proxy's side: an entry names its owner's wake-up
//! queue ([`Owner`]); a released slot wakes the [`Queue::head`], and a request that holds its
//! target ([`Queue::confirm`]) wakes the next one. Pure logic: no clock, no I/O.

mod queue;
mod wire;

pub use queue::{Entry, Owner, Queue, Transit, DEAD_MS, TRANSIT_MS};
pub use wire::QUEUE_VERSION;

/// A model's flow control, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowControl {
    /// Most requests a band may hold.
    pub max_queue: u32,
    /// Longest a request may wait, in milliseconds.
    pub ttl_ms: u64,
    /// An engine with at least this many queued requests is saturated.
    pub max_waiting: Option<u32>,
    /// An engine running at least this many requests is saturated.
    pub max_running: Option<u32>,
    /// An engine whose KV cache is at least this full (0..=1) is saturated.
    pub max_kv_usage: Option<f32>,
    /// Per-band overrides of `max_queue` and `ttl_ms`, by priority.
    pub bands: Vec<Band>,
}

/// The queue length and time to live of one priority band.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Band {
    /// The priority it applies to.
    pub priority: i32,
    /// Most requests it may hold.
    pub max_queue: u32,
    /// Longest a request may wait in it, in milliseconds.
    pub ttl_ms: u64,
}

/// Defaults of [`FlowControl`].
pub const DEFAULT_MAX_QUEUE: u32 = 1_000;
/// Default time to live of a queued request.
pub const DEFAULT_TTL_MS: u64 = 30_000;

impl FlowControl {
    /// The length bound and time to live of band `priority`.
    pub fn band(&self, priority: i32) -> (u32, u64) {
        self.bands
            .iter()
            .find(|b| b.priority == priority)
            .map_or((self.max_queue, self.ttl_ms), |b| (b.max_queue, b.ttl_ms))
    }

    /// Whether the engine figures of a target make it saturated (`None`: unknown).
    pub fn engine_saturated(&self, load: &crate::balance::Load) -> bool {
        let over = |max: Option<u32>, value: Option<u32>| max.is_some_and(|max| value.is_none_or(|v| v >= max));
        let over_kv = self.max_kv_usage.is_some_and(|max| load.kv_usage.is_none_or(|k| k >= max));
        over(self.max_waiting, load.waiting) || over(self.max_running, load.running) || over_kv
    }
}

/// What a request may do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Go on and pick a target: nobody waits and there is room (nothing was written).
    Go,
    /// Go on and pick a target: entry `seq` (the request's own, or the one it joined with just
    /// now) left the queue and is in transit, counting against the room until the request
    /// confirms it (it holds its target) or restores it (it lost the target to another).
    Went(u64),
    /// Wait: the request holds entry `seq`; check again later.
    Wait(u64),
    /// The band is full: refuse.
    Full,
    /// The request waited its time to live (its entry is gone): refuse.
    Expired,
}

/// Who is asking at a [`gate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// Its priority band.
    pub band: i32,
    /// Its fairness id within the band (the key's index; one id for callers without a key).
    pub fair: u32,
    /// Where it is woken while it waits.
    pub owner: Owner,
}

/// Decides for a request at `now_ms`, with `free` requests' worth of room on the model's
/// targets: a request without an entry (`me: None`) goes at once when nobody waits and there is
/// room, else it is queued (and goes at once, through its new entry, when its band puts it
/// ahead of those waiting and there is room for it); a request with an entry goes when its place in the service order is
/// under `free` (less the requests let go that have not yet taken their target: they are in
/// `free` still). `limits` is its band's `(max_queue, ttl_ms)`. Updates `queue` (entries that
/// expired or whose owner stopped checking are dropped first; an entry that goes is put in
/// transit, [`Gate::Went`]); the caller writes it back unless the answer is [`Gate::Go`].
pub fn gate(queue: &mut Queue, me: Option<u64>, caller: Caller, limits: (u32, u64), free: u64, now_ms: u64) -> Gate {
    queue.prune(now_ms);
    let free = free.saturating_sub(queue.in_transit() as u64);
    let seq = match me {
        Some(seq) if queue.position(seq).is_none() => return Gate::Expired,
        Some(seq) => seq,
        None if queue.is_empty() && free > 0 => return Gate::Go,
        None => {
            if queue.band_len(caller.band) >= limits.0 as usize {
                return Gate::Full;
            }
            queue.push(caller.band, caller.fair, now_ms.saturating_add(limits.1), now_ms, caller.owner)
        }
    };
    let rank = queue.rank(seq).unwrap_or(usize::MAX);
    if (rank as u64) < free {
        queue.take(seq, now_ms);
        return Gate::Went(seq);
    }
    queue.touch(seq, now_ms);
    Gate::Wait(seq)
}

#[cfg(test)]
mod tests;
