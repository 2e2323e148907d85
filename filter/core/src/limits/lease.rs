//! Exact limits across replicas: each proxy admits only against capacity the shared store
//! granted it, its *lease* on the counter's current bucket.
//!
//! The sidecar takes grants from Redis with one atomic script per counter and bucket that never
//! grants more than the window has left, so what all replicas admit together stays within the
//! limit. This module is the counter's side:
//!
//! - **Admission** takes from the lease ([`admit_leased`]). When the lease is short the request
//!   is not refused at once: the caller asks the sidecar for what is missing (the [`Ask`]s of
//!   [`Denied::Short`]) and waits up to the limit's `max_wait_ms` for the grant, then admits or
//!   refuses with the [`Refusal`] it was given.
//! - **Top-ups ahead of need**: after an admission that leaves less than a quarter of the lease
//!   (or less than the request took), and in the last [`PREFETCH_MS`] of a bucket for the next
//!   one, one [`Ask`] with no `need` is produced; the sidecar sizes it. The counter remembers
//!   when it was asked so the other worker VMs do not repeat it for [`ASK_GAP_MS`].
//! - **Reconciliation**: when a bucket ends, the part of its lease left unused is given back
//!   (a negative `adjust`); what requests used beyond their lease (tokens settled above the
//!   reservation, or admissions while the store was away) is charged (a positive `adjust`). So
//!   the store's figure for a bucket ends as what was used, which the next bucket's sliding
//!   share is computed from.
//!
//! - **Late answers**: the sidecar's answer to a waiting request is awaited up to
//!   [`LATE_ANSWER_MS`] past the request's `max_wait_ms` (the store may already have granted
//!   it); without an answer by then the request is refused as for a full window while the
//!   store is reachable, and only a store that is away falls back ([`classify`]).
//! - **Give-backs of quiet counters**: [`Holdings`] remembers which counters hold a lease and
//!   when its bucket ends, so the unused part goes back at the caller's next tick after that,
//!   whether or not a request uses the counter again.
//!
//! Nothing here waits or calls: the caller (the filter) carries the asks to the sidecar.

use serde::{Deserialize, Serialize};

use super::window::Lease;
use super::{release, Amounts, Counter, CounterStore, LimitSpec, Refusal, Reservation, Window};

/// A VM does not ask for a counter's top-up again within this long of the last ask.
pub const ASK_GAP_MS: u64 = 200;
/// The next bucket's lease is asked for this long before the bucket ends.
pub const PREFETCH_MS: u64 = 2_000;
/// How long past its `max_wait_ms` a waiting request still waits for the answer to its ask.
/// The store may have granted the ask already; an answer dropped for being slow would strand
/// that grant with this proxy and refuse a request the limit had room for.
pub const LATE_ANSWER_MS: u64 = 2_000;

/// One counter's request to the sidecar (`POST /v1/limits/lease`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ask {
    /// The counter's name (its shared-data key).
    pub counter: String,
    /// The bucket the ask is for.
    pub bucket: u64,
    /// What a waiting request lacks (0: a top-up ahead of need, sized by the sidecar).
    #[serde(default)]
    pub need: u64,
    /// Given back (negative) or charged (positive) on that bucket.
    #[serde(default)]
    pub adjust: i64,
}

/// The body of `POST /v1/limits/lease`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRequest {
    /// What is asked, one entry per counter and bucket.
    pub asks: Vec<Ask>,
}

/// One grant of a [`LeaseAnswer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The counter.
    pub counter: String,
    /// The bucket granted on.
    pub bucket: u64,
    /// The amount this ask added (0: the window has no room left).
    pub granted: u64,
    /// Everything this proxy now holds on that bucket, this grant and every earlier one
    /// included (a top-up whose own answer is still on its way counts already).
    pub held: u64,
}

/// The answer of `POST /v1/limits/lease`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseAnswer {
    /// False when the shared store could not be reached: nothing was granted or adjusted.
    pub synced: bool,
    /// One per ask that asked for something.
    #[serde(default)]
    pub grants: Vec<Grant>,
}

impl LeaseAnswer {
    /// Parses an answer.
    ///
    /// # Errors
    /// The body is not an answer.
    pub fn parse(body: &[u8]) -> Result<LeaseAnswer, serde_json::Error> {
        serde_json::from_slice(body)
    }
}

/// What a waiting request's lease call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The store answered: admit from the lease, or refuse as for a full window.
    Answered(LeaseAnswer),
    /// The store is away: the sidecar said so, or the cross-replica view has not been synced
    /// for longer than its staleness bound. The fallback applies (local counts, or 503 with
    /// `redis.fail_closed`).
    Away,
    /// No answer within the wait (and [`LATE_ANSWER_MS`]) while the store was reachable:
    /// refused as for a full window, never admitted by local counts.
    Late,
}

/// Classifies a lease call's outcome: `answer` is the parsed answer (`None`: a timeout, a
/// reset or an unexpected status), `view_stale` whether the last synced cross-replica view is
/// older than its bound at the time the outcome arrives.
pub fn classify(answer: Option<LeaseAnswer>, view_stale: bool) -> Reply {
    match answer {
        Some(a) if a.synced => Reply::Answered(a),
        Some(_) => Reply::Away,
        None if view_stale => Reply::Away,
        None => Reply::Late,
    }
}

/// Why a leased admission did not happen now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denied {
    /// Refused outright: the amount can never fit.
    Refused(Refusal),
    /// A lease is short: ask for `asks` and wait up to `wait_ms`; if the grants do not make
    /// room, refuse with `refusal`.
    Short {
        /// What to ask the sidecar for.
        asks: Vec<Ask>,
        /// The refusal to give if the wait ends without room.
        refusal: Refusal,
        /// The longest the request may wait (the smallest `max_wait_ms` of the short limits).
        wait_ms: u64,
    },
}

impl Counter {
    /// Moves the lease to the bucket of `now_ms` (taking the lease asked ahead when it is for
    /// that bucket); returns the unused part of a lease whose bucket ended, as
    /// `(bucket, amount)`, to give back. Call before anything rolls `own` past that bucket.
    pub fn roll_lease(&mut self, window: Window, now_ms: u64) -> Option<(u64, u64)> {
        let bucket = window.bucket(now_ms);
        if self.lease.bucket == bucket {
            return None;
        }
        let old = self.lease;
        let used = if self.own.bucket == old.bucket {
            Some(self.own.current)
        } else if self.own.bucket == old.bucket.saturating_add(1) {
            Some(self.own.previous)
        } else if self.own.bucket < old.bucket {
            // Every admission rolls the tally first: nothing was taken in that bucket.
            Some(0)
        } else {
            None
        };
        self.lease = if self.next.bucket == bucket { self.next } else { Lease { bucket, granted: 0 } };
        if self.next.bucket <= bucket {
            self.next = Lease::default();
        }
        let unused = old.granted.saturating_sub(used?);
        (unused > 0 && old.bucket < bucket).then_some((old.bucket, unused))
    }

    /// Takes `amount` from the lease (already rolled to `now_ms`); `Err` says how much is missing.
    pub fn take_leased(&mut self, window: Window, now_ms: u64, amount: u64) -> Result<(), u64> {
        let room = self.lease_room(window, now_ms);
        if amount <= room {
            self.own.current = self.own.current.saturating_add(amount);
            Ok(())
        } else {
            Err(amount - room)
        }
    }

    /// What the current bucket's lease has left at `now_ms` (lease already rolled).
    fn lease_room(&mut self, window: Window, now_ms: u64) -> u64 {
        self.own.roll(window, now_ms);
        self.lease.granted.saturating_sub(self.own.current)
    }

    /// What this proxy took beyond its lease in the current bucket (tokens settled above their
    /// reservation, admissions while the store was away): added to the lease and returned, to
    /// be charged to the shared store.
    pub fn take_excess(&mut self) -> u64 {
        if self.lease.bucket != self.own.bucket {
            return 0;
        }
        let excess = self.own.current.saturating_sub(self.lease.granted);
        self.lease.granted = self.lease.granted.saturating_add(excess);
        excess
    }

    /// Records that the store holds `held` for this proxy on `bucket` (a [`Grant`]'s
    /// figure): the lease grows to it, never shrinks, so answers arriving out of order or
    /// twice change nothing. An answer for a bucket already over is ignored (what it granted
    /// stays counted in the store, on the safe side, until the bucket expires). Returns the
    /// give-back of a lease this rolled, as [`Counter::roll_lease`] does.
    pub fn hold(&mut self, window: Window, now_ms: u64, bucket: u64, held: u64) -> Option<(u64, u64)> {
        let back = self.roll_lease(window, now_ms);
        if bucket == self.lease.bucket {
            self.lease.granted = self.lease.granted.max(held);
        } else if bucket == self.lease.bucket.saturating_add(1) {
            if self.next.bucket != bucket {
                self.next = Lease { bucket, granted: 0 };
            }
            self.next.granted = self.next.granted.max(held);
        }
        back
    }

    /// The bucket to ask a top-up for after taking `amount` at `now_ms`, if any: the current
    /// one when less than a quarter of its lease (or less than `amount`) is left, else the next
    /// one in the last [`PREFETCH_MS`] of the bucket when none is held for it. Marks the ask.
    pub fn wants_topup(&mut self, window: Window, now_ms: u64, amount: u64) -> Option<u64> {
        if now_ms < self.asked_ms.saturating_add(ASK_GAP_MS) {
            return None;
        }
        let room = self.lease.granted.saturating_sub(self.own.current);
        let bucket = if room < amount.max(self.lease.granted / 4) {
            self.lease.bucket
        } else if window.ms_to_bucket_end(now_ms) <= PREFETCH_MS && self.next.bucket != self.lease.bucket + 1 {
            self.lease.bucket + 1
        } else {
            return None;
        };
        self.asked_ms = now_ms;
        Some(bucket)
    }
}

/// What one successful counter update produced, beside the admission itself.
#[derive(Default)]
struct Step {
    give_back: Option<(u64, u64)>,
    excess: u64,
    topup: Option<u64>,
}

impl Step {
    fn into_asks(self, counter: &str, bucket: u64, out: &mut Vec<Ask>) {
        let ask = |bucket, adjust| Ask { counter: counter.to_string(), bucket, need: 0, adjust };
        if let Some((b, amount)) = self.give_back {
            out.push(ask(b, -i64::try_from(amount).unwrap_or(i64::MAX)));
        }
        if self.excess > 0 {
            out.push(ask(bucket, i64::try_from(self.excess).unwrap_or(i64::MAX)));
        }
        if let Some(b) = self.topup {
            out.push(ask(b, 0));
        }
    }
}

/// [`super::admit`] against leases: takes `amounts` from the lease of every counted spec, or
/// from none. `replay` (a failover replay) leaves request and call counters alone, as
/// [`super::readmit`] does. Give-backs, charges and top-ups to send go to `out`.
///
/// # Errors
/// [`Denied::Refused`] when an amount exceeds its limit; [`Denied::Short`] when a lease lacks
/// room (what was taken on the other specs is given back first).
pub fn admit_leased(
    specs: &[LimitSpec],
    amounts: Amounts,
    now_ms: u64,
    store: &mut impl CounterStore,
    replay: bool,
    out: &mut Vec<Ask>,
) -> Result<Reservation, Denied> {
    let counted = |s: &&LimitSpec| !(replay && s.metric.counts_calls());
    for (position, spec) in specs.iter().filter(counted).enumerate() {
        let Some(amount) = amounts.of(spec.metric) else { continue };
        let mut step = Step::default();
        let (window, bucket) = (spec.window, spec.window.bucket(now_ms));
        let result = if amount > spec.limit {
            Err(None)
        } else {
            store.update(&spec.counter, &mut |c| {
                step = Step { give_back: c.roll_lease(window, now_ms), ..Step::default() };
                c.take_leased(window, now_ms, amount).map_err(Some)?;
                step.topup = c.wants_topup(window, now_ms, amount);
                Ok(())
            })
        };
        if let Err(short) = result {
            release(specs.iter().filter(counted).take(position), amounts, now_ms, store);
            return Err(denied(specs, spec, short, amounts, now_ms, store, counted));
        }
        step.into_asks(&spec.counter, bucket, out);
    }
    Ok(Reservation { amounts })
}

/// The denial for `spec` (short by `short`, `None`: never fits), with an ask for every counted
/// spec whose lease lacks room, and the refusal to give if no grant comes.
fn denied(
    specs: &[LimitSpec],
    spec: &LimitSpec,
    short: Option<u64>,
    amounts: Amounts,
    now_ms: u64,
    store: &mut impl CounterStore,
    counted: impl Fn(&&LimitSpec) -> bool,
) -> Denied {
    let index = specs.iter().position(|s| std::ptr::eq(s, spec)).unwrap_or(0);
    let amount = amounts.of(spec.metric).unwrap_or(0);
    let mut wait = None;
    let _ = store.update::<()>(&spec.counter, &mut |c| {
        wait = c.wait_for(spec.window, now_ms, amount, spec.limit);
        Err(())
    });
    let retry_after_secs = if short.is_none() { None } else { Some(wait.unwrap_or(1000).div_ceil(1000).max(1)) };
    let refusal = Refusal { spec: index, metric: spec.metric, retry_after_secs };
    if short.is_none() {
        return Denied::Refused(refusal);
    }
    let mut asks = Vec::new();
    let mut wait_ms = u64::MAX;
    for s in specs.iter().filter(&counted) {
        let Some(amount) = amounts.of(s.metric) else { continue };
        let mut need = 0;
        // Read only: the closure fails, so nothing is stored.
        let _ = store.update::<()>(&s.counter, &mut |c| {
            c.roll_lease(s.window, now_ms);
            need = c.take_leased(s.window, now_ms, amount).err().unwrap_or(0);
            Err(())
        });
        if need > 0 {
            asks.push(Ask { counter: s.counter.clone(), bucket: s.window.bucket(now_ms), need, adjust: 0 });
            wait_ms = wait_ms.min(s.max_wait_ms);
        }
    }
    Denied::Short { asks, refusal, wait_ms: if wait_ms == u64::MAX { 0 } else { wait_ms } }
}

impl Reservation {
    /// [`Reservation::settle`] for leased counters: what the request used beyond the lease is
    /// charged to the shared store (an ask with a positive `adjust` in `out`).
    pub fn settle_leased(
        &self,
        specs: &[LimitSpec],
        used: Amounts,
        now_ms: u64,
        store: &mut impl CounterStore,
        out: &mut Vec<Ask>,
    ) {
        self.settle(specs, used, now_ms, store);
        for spec in specs.iter().filter(|s| !s.metric.counts_calls()) {
            let mut step = Step::default();
            let _ = store.update::<()>(&spec.counter, &mut |c| {
                step = Step { give_back: c.roll_lease(spec.window, now_ms), ..Step::default() };
                c.own.roll(spec.window, now_ms);
                step.excess = c.take_excess();
                Ok(())
            });
            step.into_asks(&spec.counter, spec.window.bucket(now_ms), out);
        }
    }
}

#[path = "lease_holdings.rs"]
mod holdings;
pub use holdings::{Holdings, MAX_HOLDINGS};

#[cfg(test)]
#[path = "lease_tests.rs"]
mod tests;
