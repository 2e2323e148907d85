//! Limit counters: the window rules, all-or-nothing admission, settlement, plans.

use std::collections::HashMap;

use super::*;
use crate::config::{Config, RawConfig};

/// Counters in a map: what shared data is to the filter.
#[derive(Default)]
pub(crate) struct MapStore(pub HashMap<String, Counter>);

impl CounterStore for MapStore {
    fn update<E>(&mut self, key: &str, f: &mut dyn FnMut(&mut Counter) -> Result<(), E>) -> Result<(), E> {
        let mut c = self.0.get(key).copied().unwrap_or_default();
        f(&mut c)?;
        self.0.insert(key.to_string(), c);
        Ok(())
    }
}

const MIN: u64 = 60_000;
/// 2026-11-30T00:00:00Z.
const NOV_30: u64 = 1_795_996_800_000;

#[test]
fn the_minute_window_slides() {
    let mut c = Counter::default();
    let t0 = 1_000 * MIN;
    for _ in 0..10 {
        c.try_add(Window::Minute, t0 + 50_000, 1, 10).unwrap();
    }
    assert_eq!(c.try_add(Window::Minute, t0 + 59_000, 1, 10), Err(Some(1_000 + 6_000)), "full until the count decays");
    // Halfway through the next bucket half of the previous one still counts.
    assert_eq!(c.used(Window::Minute, t0 + MIN + 30_000), 5);
    c.try_add(Window::Minute, t0 + MIN + 30_000, 5, 10).unwrap();
    assert!(c.try_add(Window::Minute, t0 + MIN + 30_000, 1, 10).is_err());
    // Two buckets later nothing remains.
    assert_eq!(c.used(Window::Minute, t0 + 3 * MIN), 0);
    assert_eq!(c.try_add(Window::Minute, t0, 11, 10), Err(None), "more than the limit never fits");
}

#[test]
fn months_are_calendar_months() {
    let mut c = Counter::default();
    c.try_add(Window::Month, NOV_30, 100, 100).unwrap();
    let wait = c.try_add(Window::Month, NOV_30 + 3_600_000, 1, 100).unwrap_err().unwrap();
    assert_eq!(wait, 86_400_000 - 3_600_000, "until 2026-12-01T00:00Z");
    c.try_add(Window::Month, NOV_30 + 86_400_000, 100, 100).unwrap();
    // 2024-02-01 and 2024-02-29 are one month, 2024-03-01 the next (`date -u -d ... +%s`).
    let (feb_1, feb_29, mar_1) = (1_706_745_600_000, 1_709_164_800_000, 1_709_251_200_000);
    let mut feb = Counter::default();
    feb.try_add(Window::Month, feb_1, 5, 5).unwrap();
    assert!(feb.try_add(Window::Month, feb_29, 1, 5).is_err());
    assert!(feb.try_add(Window::Month, mar_1, 1, 5).is_ok());
}

#[test]
fn counters_round_trip_their_bytes() {
    let c = Counter {
        own: Tally { bucket: 7, current: u64::MAX, previous: 3 },
        others: Tally { bucket: 6, current: 9, previous: 1 },
        lease: Lease { bucket: 7, granted: 12 },
        next: Lease { bucket: 8, granted: 4 },
        asked_ms: 99,
    };
    assert_eq!(Counter::decode(&c.encode()), c);
    assert_eq!(Counter::decode(b"junk"), Counter::default());
}

#[test]
fn other_replicas_consumption_counts_against_the_limit() {
    let t0 = 1_000 * MIN;
    // Other replicas used 8 of 10 in this minute's bucket, as fed by the sidecar.
    let others = Tally { bucket: Window::Minute.bucket(t0), current: 8, previous: 0 };
    let mut c = Counter { others, ..Counter::default() };
    c.try_add(Window::Minute, t0 + 1_000, 2, 10).unwrap();
    assert!(c.try_add(Window::Minute, t0 + 1_000, 1, 10).is_err(), "own 2 + others 8 fill it");
    assert_eq!((c.own.current, c.used(Window::Minute, t0 + 1_000)), (2, 10));
    // A stale feed rolls like the own tally: in the next bucket the others' 8 slide out.
    assert_eq!(c.used(Window::Minute, t0 + MIN + 30_000), 5, "(2 + 8) x half");
    assert_eq!(c.used(Window::Minute, t0 + 3 * MIN), 0);
    // Settling adjusts the own tally only.
    c.adjust(Window::Minute, t0 + 2_000, -1);
    assert_eq!((c.own.current, c.others.current), (1, 8));
}

const YAML: &str = r#"
providers: [{ name: p, kind: openai, base_url: "http://h" }]
models: [{ name: m, targets: [{ provider: p, model: x }] }]
limits: { requests_per_day: 1000 }
groups: [{ name: team, models: ["*"], limits: { requests_per_minute: 2, cost_usd_per_month: 1.5 } }]
keys:
  - { name: a, digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", groups: [team], limits: { requests_per_minute: 5, tokens_per_day: 1000 } }
"#;

fn config() -> Config {
    Config::try_from(serde_saphyr::from_str::<RawConfig>(YAML).unwrap()).unwrap()
}

#[test]
fn plans_flatten_key_group_and_org_limits() {
    let c = config();
    let plan = c.limit_plans.for_key(Some(0));
    let names: Vec<&str> = plan.iter().map(|s| s.counter.as_str()).collect();
    assert_eq!(
        names,
        [
            "ferrogate.limit.key.a.requests.minute",
            "ferrogate.limit.key.a.tokens.day",
            "ferrogate.limit.group.team.requests.minute",
            "ferrogate.limit.group.team.usd.month",
            "ferrogate.limit.org..requests.day",
        ]
    );
    assert_eq!(plan[3].limit, 1_500_000, "USD in micro-USD");
    assert_eq!(c.limit_plans.for_key(None).len(), 1, "open callers get the org's");
}

#[test]
fn admission_is_all_or_nothing_and_the_most_restrictive_wins() {
    let c = config();
    let plan = c.limit_plans.for_key(Some(0));
    let mut store = MapStore::default();
    let amounts = Amounts::model(100, Some(10));
    let now = 1_000 * MIN;
    admit(plan, amounts, now, &mut store).unwrap();
    admit(plan, amounts, now, &mut store).unwrap();
    let refused = admit(plan, amounts, now, &mut store).unwrap_err();
    assert_eq!((refused.spec, refused.metric, refused.status()), (2, Metric::Requests, 429), "the group's 2/min");
    assert!(refused.retry_after_secs.is_some_and(|s| (1..=120).contains(&s)));
    let (e, retry) = refused.answer(plan);
    assert_eq!((e.status, e.message.as_str()), (429, "Rate limit reached: group team allows 2 requests per minute."));
    assert_eq!(retry, refused.retry_after_secs.map(|s| s.to_string()));
    let key_rpm = store.0["ferrogate.limit.key.a.requests.minute"];
    assert_eq!(key_rpm.own.current, 2, "what the refused request took on the key is given back");
    assert_eq!(store.0["ferrogate.limit.key.a.tokens.day"].own.current, 200);
}

#[test]
fn a_replay_is_not_counted_as_another_request() {
    let c = config();
    let plan = c.limit_plans.for_key(Some(0));
    let mut store = MapStore::default();
    let amounts = Amounts::model(100, Some(10));
    let now = 1_000 * MIN;
    // The group allows 2 requests a minute: two client requests, each failed over twice.
    for _ in 0..2 {
        let first = admit(plan, amounts, now, &mut store).unwrap();
        first.settle(plan, Amounts::model(0, Some(0)), now, &mut store);
        for _ in 0..2 {
            let replay = readmit(plan, amounts, now, &mut store).unwrap();
            replay.settle(plan, Amounts::model(0, Some(0)), now, &mut store);
        }
    }
    assert_eq!(store.0["ferrogate.limit.group.team.requests.minute"].own.current, 2);
    assert_eq!(store.0["ferrogate.limit.key.a.requests.minute"].own.current, 2);
    assert_eq!(store.0["ferrogate.limit.key.a.tokens.day"].own.current, 0, "abandoned attempts gave theirs back");
    assert!(admit(plan, amounts, now, &mut store).is_err(), "a third client request is refused");
    // A replay still needs room for its cost; refused, it gives back the tokens it took.
    let greedy = Amounts::model(100, Some(2_000_000));
    let refused = readmit(plan, greedy, now, &mut store).unwrap_err();
    assert_eq!((refused.metric, refused.spec), (Metric::MicroUsd, 3));
    assert_eq!(store.0["ferrogate.limit.key.a.tokens.day"].own.current, 0);
    assert_eq!(store.0["ferrogate.limit.key.a.requests.minute"].own.current, 2);
}

#[test]
fn budgets_refuse_with_402_and_unpriced_models_skip_them() {
    let c = config();
    let plan = c.limit_plans.for_key(Some(0));
    let mut store = MapStore::default();
    let now = 1_000 * MIN;
    let err = admit(plan, Amounts::model(1, Some(2_000_000)), now, &mut store).unwrap_err();
    assert_eq!((err.metric, err.status()), (Metric::MicroUsd, 402));
    let (e, retry) = err.answer(plan);
    assert_eq!((e.status, retry), (402, None), "a budget is not retried after a while");
    assert!(e.message.starts_with("Budget exhausted: group team allows 1500000 micro-USD per month"), "{}", e.message);
    admit(plan, Amounts::model(1, None), now, &mut store).unwrap();
    assert!(!store.0.contains_key("ferrogate.limit.group.team.usd.month"));
}

#[test]
fn settlement_replaces_the_reservation_with_what_was_used() {
    let c = config();
    let plan = c.limit_plans.for_key(Some(0));
    let mut store = MapStore::default();
    let now = 1_000 * MIN;
    let r = admit(plan, Amounts::model(900, Some(500)), now, &mut store).unwrap();
    assert!(admit(plan, Amounts::model(200, Some(1)), now, &mut store).is_err(), "900 of 1000 reserved");
    r.settle(plan, Amounts::model(40, Some(7)), now + 1_000, &mut store);
    assert_eq!(store.0["ferrogate.limit.key.a.tokens.day"].own.current, 40);
    assert_eq!(store.0["ferrogate.limit.group.team.usd.month"].own.current, 7);
    assert_eq!(store.0["ferrogate.limit.key.a.requests.minute"].own.current, 1, "requests stay counted");
    admit(plan, Amounts::model(200, Some(1)), now + 2_000, &mut store).unwrap();
}

#[test]
fn the_unpriced_policy_is_validated() {
    let with =
        |p: &str| Config::try_from(serde_saphyr::from_str::<RawConfig>(&format!("{YAML}unpriced: {p}\n")).unwrap());
    assert_eq!(config().unpriced, crate::config::Unpriced::Warn);
    assert_eq!(with("block").unwrap().unpriced, crate::config::Unpriced::Block);
    let err = with("maybe").unwrap_err();
    assert_eq!(err.problems[0].path, "unpriced");
}
