//! One endpoint's event stream in sequence order: what to do with each batch, by vLLM's
//! numbering (one sequence number per batch, from 0, per publisher process).
//!
//! - The next number: apply it.
//! - A number already applied: a duplicate (replay overlapping live traffic): drop it.
//! - A number lower than the last one seen live: the engine restarted (its cache is empty and
//!   its block hashes changed): clear the endpoint, then apply.
//! - A number past the next one: batches were lost (high-water mark, reconnect). With a replay
//!   socket, ask it from the first missing number and hold live batches until it ends; the
//!   replayed batches fill the gap in order. Without one, or when replay cannot cover the
//!   gap (the engine no longer buffers it, or it does not answer in time), clear the endpoint
//!   and go on from the new batch: its index rebuilds from new events.

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
    /// Restarts seen (the number went back).
    pub restarts: u64,
    /// Duplicates dropped.
    pub duplicates: u64,
}

/// The sequence state of one endpoint.
#[derive(Debug, Default)]
pub struct Sequence {
    last: Option<u64>,
    /// While a replay runs: live batches held back, by number.
    held: Option<BTreeMap<u64, Bytes>>,
    can_replay: bool,
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
        match self.last {
            Some(last) if seq == last => self.counts.duplicates += 1,
            Some(last) if seq < last => {
                self.counts.restarts += 1;
                out.push(Step::Clear);
                self.apply(seq, payload, out);
            }
            Some(last) if seq > last + 1 => {
                self.counts.gaps += 1;
                if self.can_replay {
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

    /// A replayed batch arrived.
    pub fn replayed(&mut self, seq: u64, payload: Bytes, out: &mut Vec<Step>) {
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

    /// The replay ended (its end marker, or it failed or timed out): the held live batches go
    /// through the ordinary rules.
    pub fn replay_done(&mut self, out: &mut Vec<Step>) {
        let Some(held) = self.held.take() else { return };
        for (seq, payload) in held {
            match self.last {
                Some(last) if seq > last + 1 => {
                    out.push(Step::Clear);
                    self.apply(seq, payload, out);
                }
                Some(last) if seq <= last => self.counts.duplicates += 1,
                _ => self.apply(seq, payload, out),
            }
        }
    }

    /// The connection was lost: a new connection's first batch is compared with the last one.
    /// Nothing is forgotten, so a gap across the reconnect is noticed.
    pub fn disconnected(&mut self, out: &mut Vec<Step>) {
        self.replay_done(out);
    }

    fn apply(&mut self, seq: u64, payload: Bytes, out: &mut Vec<Step>) {
        self.last = Some(seq);
        out.push(Step::Apply(seq, payload));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(n: u8) -> Bytes {
        Bytes::from(vec![n])
    }

    fn steps(seq: &mut Sequence, f: impl FnOnce(&mut Sequence, &mut Vec<Step>)) -> Vec<Step> {
        let mut out = Vec::new();
        f(seq, &mut out);
        out
    }

    #[test]
    fn in_order_batches_apply_and_duplicates_drop() {
        let mut s = Sequence::new(true);
        assert_eq!(steps(&mut s, |s, o| s.live(0, p(0), o)), [Step::Apply(0, p(0))]);
        assert_eq!(steps(&mut s, |s, o| s.live(1, p(1), o)), [Step::Apply(1, p(1))]);
        assert_eq!(steps(&mut s, |s, o| s.live(1, p(1), o)), []);
        assert_eq!(s.counts.duplicates, 1);
    }

    #[test]
    fn a_gap_is_replayed_in_order_with_live_batches_held() {
        let mut s = Sequence::new(true);
        s.live(7, p(7), &mut Vec::new());
        assert_eq!(steps(&mut s, |s, o| s.live(9, p(9), o)), [Step::Replay(8)]);
        assert!(s.replaying());
        assert_eq!(steps(&mut s, |s, o| s.live(10, p(10), o)), []);
        assert_eq!(steps(&mut s, |s, o| s.replayed(7, p(7), o)), [], "already applied");
        assert_eq!(steps(&mut s, |s, o| s.replayed(8, p(8), o)), [Step::Apply(8, p(8))]);
        assert_eq!(steps(&mut s, |s, o| s.replayed(9, p(9), o)), [Step::Apply(9, p(9))]);
        assert_eq!(steps(&mut s, |s, o| s.replay_done(o)), [Step::Apply(10, p(10))], "9 held but replayed already");
        assert_eq!((s.last(), s.counts.gaps, s.counts.replays), (Some(10), 1, 1));
    }

    #[test]
    fn a_gap_replay_cannot_fill_clears() {
        let mut s = Sequence::new(true);
        s.live(3, p(3), &mut Vec::new());
        s.live(9, p(9), &mut Vec::new());
        // The engine's buffer starts at 6: 4 and 5 are gone.
        assert_eq!(steps(&mut s, |s, o| s.replayed(6, p(6), o)), [Step::Clear, Step::Apply(6, p(6))]);
        // A replay that times out with nothing: the held batch is past the gap.
        let mut t = Sequence::new(true);
        t.live(3, p(3), &mut Vec::new());
        t.live(9, p(9), &mut Vec::new());
        assert_eq!(steps(&mut t, |s, o| s.replay_done(o)), [Step::Clear, Step::Apply(9, p(9))]);
    }

    #[test]
    fn without_replay_a_gap_clears() {
        let mut s = Sequence::new(false);
        s.live(0, p(0), &mut Vec::new());
        assert_eq!(steps(&mut s, |s, o| s.live(5, p(5), o)), [Step::Clear, Step::Apply(5, p(5))]);
        assert_eq!(s.counts.gaps, 1);
    }

    #[test]
    fn a_number_going_back_is_a_restart() {
        let mut s = Sequence::new(true);
        s.live(41, p(1), &mut Vec::new());
        assert_eq!(steps(&mut s, |s, o| s.live(0, p(0), o)), [Step::Clear, Step::Apply(0, p(0))]);
        assert_eq!(s.counts.restarts, 1);
    }
}
