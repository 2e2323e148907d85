use super::*;
use crate::kv::feed::FeedEndpoint;

const A: &str = "10.0.0.1:8000";
const B: &str = "10.0.0.2:8000";
const C: &str = "10.0.0.3:8000";

fn table(connected: [bool; 3]) -> Vec<FeedProvider> {
    let endpoints = [A, B, C]
        .iter()
        .zip(connected)
        .map(|(a, connected)| FeedEndpoint { address: (*a).to_string(), connected })
        .collect();
    vec![FeedProvider { name: "pool".into(), endpoints }]
}

fn add(endpoint: u8, key: u64, tier: Tier) -> KvOp {
    KvOp::Add { provider: 0, endpoint, key, tier }
}

fn feed(generation: u64, reset: bool, ops: Vec<KvOp>) -> KvFeed {
    KvFeed { epoch: 1, generation, reset, providers: table([true; 3]), ops }
}

fn slots() -> Vec<String> {
    vec![A.into(), B.into(), C.into()]
}

fn score(index: &KvIndex, keys: &[u64]) -> (Score, Vec<u32>) {
    let mut out = Vec::new();
    let s = index.score("pool", &slots(), keys.iter().copied(), &mut out);
    (s, out)
}

/// The worked example: A holds three blocks, B the first one, C nothing.
#[test]
fn longest_consecutive_prefix_wins() {
    let mut index = KvIndex::default();
    let ops = vec![add(0, 10, Tier::Gpu), add(0, 11, Tier::Gpu), add(0, 12, Tier::Gpu), add(1, 10, Tier::Gpu)];
    index.apply(&feed(1, true, ops));
    assert_eq!(score(&index, &[10, 11, 12]), (Score::Hit(30), vec![30, 10, 0]));
    // A's third block only in CPU memory: 1 + 1 + 0.8.
    index.apply(&feed(
        2,
        false,
        vec![KvOp::Remove { provider: 0, endpoint: 0, key: 12, tier: Tier::Gpu }, add(0, 12, Tier::Cpu)],
    ));
    assert_eq!(score(&index, &[10, 11, 12]).1, [28, 10, 0]);
    // A hole ends the run: a block held after a missing one does not count.
    index.apply(&feed(3, false, vec![add(1, 12, Tier::Gpu)]));
    assert_eq!(score(&index, &[10, 11, 12]).1, [28, 10, 0]);
}

#[test]
fn removal_clear_and_reset_take_blocks_away() {
    let mut index = KvIndex::default();
    index.apply(&feed(1, true, vec![add(0, 10, Tier::Gpu), add(1, 10, Tier::Gpu), add(0, 11, Tier::Gpu)]));
    index.apply(&feed(2, false, vec![KvOp::Remove { provider: 0, endpoint: 0, key: 11, tier: Tier::Gpu }]));
    assert_eq!(score(&index, &[10, 11]).1, [10, 10, 0]);
    index.apply(&feed(3, false, vec![KvOp::Clear { provider: 0, endpoint: 0 }]));
    assert_eq!(score(&index, &[10, 11]).1, [0, 10, 0]);
    assert_eq!(index.len(), 1);
    index.apply(&feed(4, true, vec![add(2, 10, Tier::Gpu)]));
    assert_eq!(score(&index, &[10]).1, [0, 0, 10]);
    assert_eq!(index.position(), Some((1, 4)));
}

#[test]
fn a_new_epoch_starts_over() {
    let mut index = KvIndex::default();
    index.apply(&feed(5, true, vec![add(0, 10, Tier::Gpu)]));
    let mut next = feed(1, false, vec![add(1, 11, Tier::Gpu)]);
    next.epoch = 2;
    index.apply(&next);
    assert_eq!(score(&index, &[10]).0, Score::Miss);
    assert_eq!(index.position(), Some((2, 1)));
}

#[test]
fn disconnected_or_unknown_endpoints_are_neutral() {
    let mut index = KvIndex::default();
    let mut f = feed(1, true, vec![add(0, 10, Tier::Gpu), add(1, 10, Tier::Gpu)]);
    f.providers = table([false, true, true]);
    index.apply(&f);
    assert_eq!(score(&index, &[10]), (Score::Hit(10), vec![0, 10, 0]), "A's holdings are not vouched for");
    f.providers = table([false; 3]);
    index.apply(&f);
    assert_eq!(score(&index, &[10]).0, Score::Neutral);
    let mut out = Vec::new();
    assert_eq!(index.score("other", &slots(), [10].into_iter(), &mut out), Score::Neutral);
    assert_eq!(score(&KvIndex::default(), &[10]).0, Score::Neutral);
}

#[test]
fn a_miss_costs_one_lookup_and_reports_miss() {
    let mut index = KvIndex::default();
    index.apply(&feed(1, true, vec![add(0, 10, Tier::Gpu)]));
    let mut looked = 0;
    let keys = [99u64, 10, 10].into_iter().inspect(|_| looked += 1);
    let mut out = Vec::new();
    assert_eq!(index.score("pool", &slots(), keys, &mut out), Score::Miss);
    assert_eq!(looked, 1);
}
