//! Give-backs of counters nobody uses any more: due at the first sweep after the bucket ends.

use super::*;
use crate::limits::lease::admit_leased;
use crate::limits::tests::MapStore;
use crate::limits::{Amounts, Counter, LimitSpec, Metric, Scope, Window};

const MIN: u64 = 60_000;
const T0: u64 = 1_000 * MIN;
const RPM: &str = "ferrogate.limit.key.k.requests.minute";

fn rpm() -> LimitSpec {
    LimitSpec {
        counter: RPM.into(),
        scope: Scope::Key,
        name: "k".into(),
        metric: Metric::Requests,
        window: Window::Minute,
        limit: 100,
        max_wait_ms: 250,
    }
}

/// The store now holds `held` for this proxy on `bucket`, as an answer applied at `now` says.
fn hold(store: &mut MapStore, now: u64, bucket: u64, held: u64) {
    store
        .update::<()>(RPM, &mut |c: &mut Counter| {
            assert_eq!(c.hold(Window::Minute, now, bucket, held), None);
            Ok(())
        })
        .unwrap();
}

#[test]
fn a_quiet_counter_gives_back_its_unused_lease_at_the_first_sweep_after_its_bucket() {
    let mut store = MapStore::default();
    let mut holdings = Holdings::default();
    let mut out = Vec::new();
    hold(&mut store, T0 + 10, 1_000, 10);
    holdings.note(RPM, T0 + 10);
    for i in 0..3 {
        admit_leased(&[rpm()], Amounts::default(), T0 + 20 + i, &mut store, false, &mut out).unwrap();
    }
    out.clear();
    holdings.sweep(T0 + MIN - 1, &mut store, &mut out);
    assert!(out.is_empty(), "the bucket has not ended: {out:?}");
    // No request uses the counter again: the sweep alone gives the 7 unused back.
    holdings.sweep(T0 + MIN + 150, &mut store, &mut out);
    assert_eq!(out, [Ask { counter: RPM.into(), bucket: 1_000, need: 0, adjust: -7 }]);
    assert_eq!(store.0[RPM].lease.bucket, 1_001, "the lease was rolled");
    assert!(holdings.is_empty(), "nothing held any more: no longer tracked");
    out.clear();
    holdings.sweep(T0 + 2 * MIN + 150, &mut store, &mut out);
    assert!(out.is_empty(), "given back once: {out:?}");
}

#[test]
fn a_lease_taken_ahead_is_tracked_until_its_own_bucket_ends() {
    let mut store = MapStore::default();
    let mut holdings = Holdings::default();
    let mut out = Vec::new();
    hold(&mut store, T0 + 58_500, 1_001, 4);
    holdings.note(RPM, T0 + 58_500);
    holdings.sweep(T0 + MIN + 5, &mut store, &mut out);
    assert!(out.is_empty(), "the bucket that ended held nothing: {out:?}");
    assert_eq!(store.0[RPM].lease, crate::limits::Lease { bucket: 1_001, granted: 4 });
    assert_eq!(holdings.len(), 1, "the lease taken ahead is held now");
    holdings.sweep(T0 + 2 * MIN + 5, &mut store, &mut out);
    assert_eq!(out, [Ask { counter: RPM.into(), bucket: 1_001, need: 0, adjust: -4 }]);
}

#[test]
fn a_lease_rolled_by_someone_else_is_not_given_back_twice() {
    let mut store = MapStore::default();
    let (mut mine, mut other) = (Holdings::default(), Holdings::default());
    let mut out = Vec::new();
    hold(&mut store, T0, 1_000, 5);
    mine.note(RPM, T0);
    other.note(RPM, T0);
    // Another VM's sweep (or a request) rolls the lease first and gives the 5 back.
    other.sweep(T0 + MIN, &mut store, &mut out);
    assert_eq!(out.len(), 1, "{out:?}");
    let before = store.0[RPM];
    mine.sweep(T0 + MIN + 100, &mut store, &mut out);
    assert_eq!(out.len(), 1, "given back once: {out:?}");
    assert_eq!(store.0[RPM], before, "nothing to roll: nothing stored");
    assert!(mine.is_empty());
}

#[test]
fn counters_that_name_no_window_or_past_the_cap_are_not_tracked() {
    let mut holdings = Holdings::default();
    holdings.note("not-a-counter", T0);
    assert!(holdings.is_empty());
    for i in 0..MAX_HOLDINGS + 5 {
        holdings.note(&format!("ferrogate.limit.key.k{i}.requests.minute"), T0);
    }
    assert_eq!(holdings.len(), MAX_HOLDINGS);
}
