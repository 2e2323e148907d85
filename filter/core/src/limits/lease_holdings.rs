//! Which counters hold a lease, and when the bucket of each one's lease ends: so a proxy that
//! goes quiet on a counter gives back the unused part of its lease at the caller's first tick
//! after the bucket ends, not only when a request next uses that counter. Until then the
//! unused part counts as used in the store, for its bucket and in the next one's sliding
//! share, and no other replica can be granted it.
//!
//! The caller notes a counter whenever an answer leaves it holding something
//! ([`Holdings::note`]) and sweeps on every tick ([`Holdings::sweep`]); time is passed in.

use std::collections::BTreeMap;

use super::Ask;
use crate::limits::{window_of, CounterStore};

/// The most counters tracked at once. Beyond this a counter's unused lease goes back when a
/// request next uses it (or expires with the store's key), as an untracked one would.
pub const MAX_HOLDINGS: usize = 4_096;

/// Counters holding a lease, each with the time (Unix ms) its lease's bucket ends.
#[derive(Debug, Clone, Default)]
pub struct Holdings {
    due: BTreeMap<String, u64>,
    /// No entry falls due before this (so a tick with nothing due costs one compare).
    earliest: u64,
}

impl Holdings {
    /// Notes that `counter` holds a lease at `now_ms`: its give-back falls due when the bucket
    /// of `now_ms` ends (a lease taken ahead for the next bucket is tracked on from there).
    pub fn note(&mut self, counter: &str, now_ms: u64) {
        let Some(window) = window_of(counter) else { return };
        let due = now_ms.saturating_add(window.ms_to_bucket_end(now_ms));
        if let Some(d) = self.due.get_mut(counter) {
            // An earlier bucket not swept yet keeps its earlier time.
            *d = (*d).min(due);
        } else if self.due.len() < MAX_HOLDINGS {
            self.due.insert(counter.to_string(), due);
        } else {
            return;
        }
        self.earliest = self.earliest.min(due);
    }

    /// How many counters are tracked.
    pub fn len(&self) -> usize {
        self.due.len()
    }

    /// Whether no counter is tracked.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }

    /// Rolls the lease of every counter whose bucket ended by `now_ms` and puts the give-back of
    /// its unused part in `out` (a negative `adjust` on the ended bucket). A counter that still
    /// holds a lease afterwards (one taken ahead) stays tracked until its own bucket ends.
    pub fn sweep(&mut self, now_ms: u64, store: &mut impl CounterStore, out: &mut Vec<Ask>) {
        if now_ms < self.earliest {
            return;
        }
        let due: Vec<String> = self.due.iter().filter(|&(_, &d)| d <= now_ms).map(|(c, _)| c.clone()).collect();
        for counter in due {
            if give_back_ended(&counter, now_ms, store, out) {
                self.note_again(&counter, now_ms);
            } else {
                self.due.remove(&counter);
            }
        }
        self.earliest = self.due.values().copied().min().unwrap_or(u64::MAX);
    }

    fn note_again(&mut self, counter: &str, now_ms: u64) {
        if let (Some(d), Some(window)) = (self.due.get_mut(counter), window_of(counter)) {
            *d = now_ms.saturating_add(window.ms_to_bucket_end(now_ms));
        }
    }
}

/// Rolls `counter`'s lease to the bucket of `now_ms`, putting the give-back of an ended one in
/// `out`; returns whether the counter still holds a lease. Stores nothing when there is
/// nothing to roll (another VM, or a request, rolled it first: that one gave it back).
fn give_back_ended(counter: &str, now_ms: u64, store: &mut impl CounterStore, out: &mut Vec<Ask>) -> bool {
    let Some(window) = window_of(counter) else { return false };
    let bucket = window.bucket(now_ms);
    let (mut back, mut holds) = (None, false);
    let _ = store.update::<()>(counter, &mut |c| {
        let holding = c.lease.granted > 0 || c.next.granted > 0;
        if c.lease.bucket == bucket || !holding {
            holds = holding;
            return Err(());
        }
        back = c.roll_lease(window, now_ms);
        holds = c.lease.granted > 0 || c.next.granted > 0;
        Ok(())
    });
    if let Some((bucket, amount)) = back {
        let adjust = -i64::try_from(amount).unwrap_or(i64::MAX);
        out.push(Ask { counter: counter.to_string(), bucket, need: 0, adjust });
    }
    holds
}

#[cfg(test)]
#[path = "lease_holdings_tests.rs"]
mod tests;
