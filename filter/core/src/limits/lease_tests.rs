//! Leases: admission within the grant, waiting asks, top-ups, give-backs and charges.

use super::*;
use crate::limits::tests::MapStore;
use crate::limits::{Metric, Scope, Tally};

const MIN: u64 = 60_000;
const T0: u64 = 1_000 * MIN;

fn spec(metric: Metric, limit: u64) -> LimitSpec {
    LimitSpec {
        counter: format!("c.{}", metric.as_str()),
        scope: Scope::Key,
        name: "k".into(),
        metric,
        window: Window::Minute,
        limit,
        max_wait_ms: 250,
    }
}

/// The store now holds `held` for this proxy on `bucket`.
fn grant(store: &mut MapStore, s: &LimitSpec, now: u64, bucket: u64, held: u64) -> Option<(u64, u64)> {
    let mut back = None;
    store
        .update::<()>(&s.counter, &mut |c| {
            back = c.hold(s.window, now, bucket, held);
            Ok(())
        })
        .unwrap();
    back
}

#[test]
fn without_a_lease_a_request_waits_with_an_ask_for_what_it_lacks() {
    let rpm = spec(Metric::Requests, 10);
    let mut store = MapStore::default();
    let mut out = Vec::new();
    let denied =
        admit_leased(std::slice::from_ref(&rpm), Amounts::default(), T0, &mut store, false, &mut out).unwrap_err();
    let Denied::Short { asks, refusal, wait_ms } = denied else { panic!("{denied:?}") };
    assert_eq!(refusal.retry_after_secs, Some(1));
    assert_eq!(asks, [Ask { counter: "c.requests".into(), bucket: 1_000, need: 1, adjust: 0 }]);
    assert_eq!((refusal.status(), wait_ms), (429, 250));
    assert!(out.is_empty());
    // The grant arrives: the request fits, and the next one is short again.
    assert_eq!(grant(&mut store, &rpm, T0 + 5, 1_000, 1), None);
    admit_leased(std::slice::from_ref(&rpm), Amounts::default(), T0 + 5, &mut store, false, &mut out).unwrap();
    assert!(admit_leased(&[rpm], Amounts::default(), T0 + 6, &mut store, false, &mut out).is_err());
}

#[test]
fn admissions_never_exceed_the_grants() {
    let rpm = spec(Metric::Requests, 100);
    let mut store = MapStore::default();
    let mut out = Vec::new();
    grant(&mut store, &rpm, T0, 1_000, 7);
    let admitted = (0..20)
        .filter(|i| {
            admit_leased(std::slice::from_ref(&rpm), Amounts::default(), T0 + i, &mut store, false, &mut out).is_ok()
        })
        .count();
    assert_eq!(admitted, 7);
    // One top-up was asked when a quarter was left, not one per request.
    assert_eq!(out.iter().filter(|a| a.need == 0 && a.adjust == 0).count(), 1, "{out:?}");
}

#[test]
fn an_amount_over_the_limit_is_refused_without_waiting() {
    let tpm = spec(Metric::Tokens, 100);
    let mut out = Vec::new();
    let amounts = Amounts::model(101, None);
    let denied = admit_leased(&[tpm], amounts, T0, &mut MapStore::default(), false, &mut out).unwrap_err();
    assert!(matches!(denied, Denied::Refused(Refusal { retry_after_secs: None, .. })), "{denied:?}");
}

#[test]
fn a_short_spec_gives_back_what_the_others_took_and_asks_for_every_short_one() {
    let (rpm, tpm) = (spec(Metric::Requests, 10), spec(Metric::Tokens, 1_000));
    let mut store = MapStore::default();
    grant(&mut store, &rpm, T0, 1_000, 5);
    let amounts = Amounts::model(40, None);
    let mut out = Vec::new();
    let denied = admit_leased(&[rpm.clone(), tpm.clone()], amounts, T0, &mut store, false, &mut out).unwrap_err();
    let Denied::Short { asks, .. } = denied else { panic!() };
    assert_eq!(asks.iter().map(|a| (a.counter.as_str(), a.need)).collect::<Vec<_>>(), [("c.tokens", 40)]);
    assert_eq!(store.0["c.requests"].own.current, 0, "the request counter was given back");
    // A replay leaves the request counter alone.
    grant(&mut store, &tpm, T0, 1_000, 40);
    admit_leased(&[rpm, tpm], amounts, T0, &mut store, true, &mut out).unwrap();
    assert_eq!((store.0["c.requests"].own.current, store.0["c.tokens"].own.current), (0, 40));
}

#[test]
fn the_unused_lease_is_given_back_when_its_bucket_ends() {
    let rpm = spec(Metric::Requests, 100);
    let mut store = MapStore::default();
    let mut out = Vec::new();
    grant(&mut store, &rpm, T0, 1_000, 10);
    for i in 0..3 {
        admit_leased(std::slice::from_ref(&rpm), Amounts::default(), T0 + i, &mut store, false, &mut out).unwrap();
    }
    out.clear();
    // Next minute: the first admission finds no lease, and 7 of the old one go back.
    let next = T0 + MIN + 10;
    assert!(admit_leased(std::slice::from_ref(&rpm), Amounts::default(), next, &mut store, false, &mut out).is_err());
    assert!(out.is_empty(), "a refused admission stores nothing, so it gives nothing back yet");
    grant(&mut store, &rpm, next, 1_001, 4);
    admit_leased(std::slice::from_ref(&rpm), Amounts::default(), next, &mut store, false, &mut out).unwrap();
    let back: Vec<_> = out.iter().filter(|a| a.adjust < 0).map(|a| (a.bucket, a.adjust)).collect();
    // The grant rolled the lease (and reported nothing); the give-back was computed then.
    assert!(back.is_empty() || back == [(1_000, -7)], "{out:?}");
    let mut c = Counter { own: Tally { bucket: 1_000, current: 3, previous: 0 }, ..Counter::default() };
    c.lease = Lease { bucket: 1_000, granted: 10 };
    assert_eq!(c.roll_lease(Window::Minute, next), Some((1_000, 7)));
    // Already rolled own tally: the used amount is its previous bucket.
    let mut c = Counter { own: Tally { bucket: 1_001, current: 0, previous: 3 }, ..Counter::default() };
    c.lease = Lease { bucket: 1_000, granted: 10 };
    assert_eq!(c.roll_lease(Window::Minute, next), Some((1_000, 7)));
    // Not used at all in its bucket (the tally is older than the lease): all of it goes back.
    let mut c = Counter { own: Tally { bucket: 998, current: 5, previous: 0 }, ..Counter::default() };
    c.lease = Lease { bucket: 1_000, granted: 10 };
    assert_eq!(c.roll_lease(Window::Minute, next), Some((1_000, 10)));
    // Two buckets on, what was used is unknown: nothing is given back (the store expires it).
    let mut c = Counter { own: Tally { bucket: 1_002, current: 0, previous: 0 }, ..Counter::default() };
    c.lease = Lease { bucket: 1_000, granted: 10 };
    assert_eq!(c.roll_lease(Window::Minute, T0 + 2 * MIN), None);
}

#[test]
fn answers_hold_what_the_store_holds_and_an_early_one_waits_for_its_bucket() {
    let rpm = spec(Metric::Requests, 100);
    let mut store = MapStore::default();
    grant(&mut store, &rpm, T0, 1_000, 3);
    grant(&mut store, &rpm, T0, 1_000, 5);
    grant(&mut store, &rpm, T0, 1_000, 4);
    assert_eq!(store.0["c.requests"].lease.granted, 5, "out of order or repeated: the most held counts");
    // A late answer for a bucket that is over changes nothing.
    grant(&mut store, &rpm, T0 + MIN, 1_000, 9);
    assert_eq!(store.0["c.requests"].lease, Lease { bucket: 1_001, granted: 0 });
    let mut store = MapStore::default();
    // Asked ahead: held as the next bucket's lease, used when it starts.
    grant(&mut store, &rpm, T0 + 59_000, 1_001, 5);
    let mut out = Vec::new();
    assert!(
        admit_leased(std::slice::from_ref(&rpm), Amounts::default(), T0 + 59_500, &mut store, false, &mut out).is_err()
    );
    for i in 0..5 {
        admit_leased(std::slice::from_ref(&rpm), Amounts::default(), T0 + MIN + i, &mut store, false, &mut out)
            .unwrap();
    }
    assert!(admit_leased(&[rpm], Amounts::default(), T0 + MIN + 9, &mut store, false, &mut out).is_err());
}

#[test]
fn the_next_buckets_lease_is_asked_for_near_the_end() {
    let mut c = Counter { lease: Lease { bucket: 1_000, granted: 100 }, ..Counter::default() };
    c.own = Tally { bucket: 1_000, current: 10, previous: 0 };
    assert_eq!(c.wants_topup(Window::Minute, T0 + 30_000, 1), None, "plenty left, bucket not ending");
    assert_eq!(c.wants_topup(Window::Minute, T0 + 58_500, 1), Some(1_001));
    assert_eq!(c.wants_topup(Window::Minute, T0 + 58_600, 1), None, "asked within ASK_GAP_MS");
    c.own.current = 80;
    assert_eq!(c.wants_topup(Window::Minute, T0 + 58_900, 1), Some(1_000), "under a quarter left comes first");
}

#[test]
fn tokens_settled_above_the_lease_are_charged() {
    let tpm = spec(Metric::Tokens, 1_000);
    let mut store = MapStore::default();
    grant(&mut store, &tpm, T0, 1_000, 50);
    let mut out = Vec::new();
    let r =
        admit_leased(std::slice::from_ref(&tpm), Amounts::model(50, None), T0, &mut store, false, &mut out).unwrap();
    out.clear();
    r.settle_leased(std::slice::from_ref(&tpm), Amounts::model(80, None), T0 + 10, &mut store, &mut out);
    assert_eq!(out, [Ask { counter: "c.tokens".into(), bucket: 1_000, need: 0, adjust: 30 }]);
    assert_eq!(store.0["c.tokens"].lease.granted, 80, "the charge is part of the lease now");
    out.clear();
    r.settle_leased(&[tpm], Amounts::model(20, None), T0 + 20, &mut store, &mut out);
    assert!(out.is_empty(), "using less charges nothing: {out:?}");
}

#[test]
fn wire_forms_round_trip() {
    let req = LeaseRequest { asks: vec![Ask { counter: "c".into(), bucket: 3, need: 2, adjust: -1 }] };
    let text = serde_json::to_string(&req).unwrap();
    assert_eq!(text, r#"{"asks":[{"counter":"c","bucket":3,"need":2,"adjust":-1}]}"#);
    assert_eq!(serde_json::from_str::<LeaseRequest>(&text).unwrap(), req);
    let answer =
        LeaseAnswer::parse(br#"{"synced":true,"grants":[{"counter":"c","bucket":3,"granted":2,"held":6}]}"#).unwrap();
    assert_eq!(answer.grants[0].granted, 2);
    assert!(LeaseAnswer::parse(b"{}").is_err());
    assert!(LeaseAnswer::parse(br#"{"synced":true,"grants":[{"counter":"c","bucket":3,"granted":2}]}"#).is_err());
}

#[test]
fn a_missing_answer_is_late_while_the_view_is_fresh_and_away_once_it_is_stale() {
    let synced = LeaseAnswer { synced: true, grants: Vec::new() };
    assert_eq!(classify(Some(synced.clone()), false), Reply::Answered(synced.clone()));
    assert_eq!(classify(Some(synced.clone()), true), Reply::Answered(synced), "an answer is an answer");
    let away = LeaseAnswer { synced: false, grants: Vec::new() };
    assert_eq!(classify(Some(away), false), Reply::Away, "the sidecar says Redis is away");
    assert_eq!(classify(None, false), Reply::Late, "timed out while the store is reachable");
    assert_eq!(classify(None, true), Reply::Away, "no synced view for longer than its bound");
}
