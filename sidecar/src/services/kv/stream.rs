//! One endpoint's event stream in sequence order: what to do with each batch, by vLLM's
//! numbering (one sequence number per batch, from 0, per publisher process; a restarted
//! engine counts from 0 again with an empty cache and new block hashes).
//!
//! - The next number: apply it.
//! - The last number again with the same payload: a duplicate (replay overlapping live
//!   traffic): drop it. Any other number not past the last one: a restarted engine: clear
//!   the endpoint, then go on as with a new stream.
//! - A number past the next one: batches were lost (high-water mark). With a replay socket,
//!   ask it from the first missing number and hold live batches until it ends; the replayed
//!   batches fill the gap in order. Without one, or when replay cannot cover the gap (the
//!   engine no longer buffers it, or it does not answer in time), clear the endpoint and go
//!   on from the new batch: its index rebuilds from new events.
//! - A new stream (the first batch ever) past 0, with a replay socket: ask for what came
//!   before it from 0.
//! - Every (re)connection ([`Sequence::resync`]): a subscription misses what the engine
//!   published before the subscription reached it, and a reconnection may be to a restarted
//!   engine whose numbers overlap the old ones. With a replay socket the whole buffer is asked
//!   for from 0; the replayed batch numbered like the last one applied tells the same engine
//!   (same payload) from a restarted one, and an engine whose numbers all stay below the last
//!   one applied has restarted. Without one, the first live batch numbered at or below the
//!   last one applied is a restart.

use std::collections::BTreeMap;

use bytes::Bytes;

/// What the caller does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Apply this payload.
    Apply(u64, Bytes),
    /// Clear the endpoint's blocks (before anything that follows).
    Clear,
    /// Ask the replay socket for batches from this number on.
    Replay(u64),
}

/// Counts for the endpoint's metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Gaps seen.
    pub gaps: u64,
    /// Replays asked for.
    pub replays: u64,
    /// Restarts seen.
    pub restarts: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
}

/// The sequence state of one endpoint.
#[derive(Debug, Default)]
pub struct Sequence {
    last: Option<u64>,
    /// A hash of the last payload applied (a restarted engine may repeat its number).
    last_payload: u64,
    /// While a replay runs: live batches held back, by number.
    held: Option<BTreeMap<u64, Bytes>>,
    /// While a reconnection's replay has not yet shown whether the engine is the same one:
    /// the replayed batches numbered below the last one applied.
    verify: Option<BTreeMap<u64, Bytes>>,
    can_replay: bool,
    /// The subscription (re)connected and nothing has shown the engine is the same one.
    fresh: bool,
    /// Counts so far.
    pub counts: Counts,
}

impl Sequence {
    /// A stream whose engine has a replay socket when `can_replay`.
    pub fn new(can_replay: bool) -> Self {
        Self { can_replay, ..Self::default() }
    }

    /// The last number applied.
    pub fn last(&self) -> Option<u64> {
        self.last
    }

    /// Whether a replay is running.
    pub fn replaying(&self) -> bool {
        self.held.is_some()
    }

    /// A live batch arrived.
    pub fn live(&mut self, seq: u64, payload: Bytes, out: &mut Vec<Step>) {
        if let Some(held) = &mut self.held {
            held.insert(seq, payload);
            return;
        }
        self.next(seq, payload, true, out);
    }

    /// The ordinary rules; `may_replay` is false for batches held during a replay (a gap
    /// left after a replay is not asked for again).
    fn next(&mut self, seq: u64, payload: Bytes, may_replay: bool, out: &mut Vec<Step>) {
        let fresh = std::mem::take(&mut self.fresh);
        let repeated = |last: u64| seq == last && !fresh && hash(&payload) == self.last_payload;
        match self.last {
            Some(last) if repeated(last) => self.counts.duplicates += 1,
            Some(last) if seq <= last => {
                self.restart(out);
                self.first(seq, payload, may_replay, out);
            }
            None => self.first(seq, payload, may_replay, out),
            Some(last) if seq > last + 1 => {
                self.counts.gaps += 1;
                if self.can_replay && may_replay {
                    self.counts.replays += 1;
                    self.held = Some(BTreeMap::from([(seq, payload)]));
                    out.push(Step::Replay(last + 1));
                } else {
                    out.push(Step::Clear);
                    self.apply(seq, payload, out);
                }
            }
            _ => self.apply(seq, payload, out),
        }
    }

    /// The first batch of a stream: what came before it is asked for when possible.
    fn first(&mut self, seq: u64, payload: Bytes, may_replay: bool, out: &mut Vec<Step>) {
        if seq > 0 && self.can_replay && may_replay {
            self.counts.replays += 1;
            self.held = Some(BTreeMap::from([(seq, payload)]));
            out.push(Step::Replay(0));
        } else {
            self.apply(seq, payload, out);
        }
    }

    fn restart(&mut self, out: &mut Vec<Step>) {
        self.counts.restarts += 1;
        self.last = None;
        self.fresh = false;
        out.push(Step::Clear);
    }

    /// A (new) connection is up ([`Sequence::resync`] follows when there is a replay socket).
    pub fn connected(&mut self) {
        self.fresh = true;
    }

    /// Starts the replay of a (re)connection, from 0, when the engine has a replay socket and
    /// no replay runs; returns where to start.
    pub fn resync(&mut self) -> Option<u64> {
        if !self.can_replay || self.held.is_some() {
            return None;
        }
        self.counts.replays += 1;
        self.held = Some(BTreeMap::new());
        if self.last.is_some() {
            self.verify = Some(BTreeMap::new());
        }
        Some(0)
    }

    /// A replayed batch arrived.
    pub fn replayed(&mut self, seq: u64, payload: Bytes, out: &mut Vec<Step>) {
        if let Some(verify) = &mut self.verify {
            let last = self.last.unwrap_or(0);
            if seq < last {
                verify.insert(seq, payload);
                return;
            }
            let below = self.verify.take().unwrap_or_default();
            self.fresh = false;
            if seq == last {
                if hash(&payload) == self.last_payload {
                    self.counts.duplicates += 1;
                } else {
                    self.restart(out);
                    self.apply_all(below, out);
                    self.apply(seq, payload, out);
                }
                return;
            }
        }
        match self.last {
            Some(last) if seq <= last => self.counts.duplicates += 1,
            Some(last) if seq > last + 1 => {
                // The engine no longer has the first missing batches.
                out.push(Step::Clear);
                self.apply(seq, payload, out);
            }
            _ => self.apply(seq, payload, out),
        }
    }

    /// The replay ended (its end marker, or it failed or timed out): a reconnection's replay
    /// whose numbers all stayed below the last one applied came from a restarted engine; then
    /// the held live batches go through the ordinary rules.
    pub fn replay_done(&mut self, out: &mut Vec<Step>) {
        if let Some(below) = self.verify.take() {
            if !below.is_empty() {
                self.restart(out);
                self.apply_all(below, out);
            }
        }
        let Some(held) = self.held.take() else { return };
        for (seq, payload) in held {
            self.next(seq, payload, false, out);
        }
    }

    fn apply_all(&mut self, batches: BTreeMap<u64, Bytes>, out: &mut Vec<Step>) {
        for (seq, payload) in batches {
            self.apply(seq, payload, out);
        }
    }

    fn apply(&mut self, seq: u64, payload: Bytes, out: &mut Vec<Step>) {
        self.last = Some(seq);
        self.last_payload = hash(&payload);
        out.push(Step::Apply(seq, payload));
    }
}

fn hash(payload: &[u8]) -> u64 {
    ferrogate_core::balance::hash64(0, payload)
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
