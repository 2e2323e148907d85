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

/// Scores with the default weights, in tenths of a GPU block (1000 thousandths = 10).
fn score(index: &KvIndex, keys: &[u64]) -> (Score, Vec<u32>) {
    let (s, out) = score_with(index, keys, &TierWeights::default());
    let tenths = |v: u32| v / 100;
    (if let Score::Hit(v) = s { Score::Hit(tenths(v)) } else { s }, out.into_iter().map(tenths).collect())
}

fn score_with(index: &KvIndex, keys: &[u64], weights: &TierWeights) -> (Score, Vec<u32>) {
    let mut out = Vec::new();
    let s = index.score("pool", &slots(), keys.iter().copied(), weights, &mut out);
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
    assert_eq!(index.score("other", &slots(), [10].into_iter(), &TierWeights::default(), &mut out), Score::Neutral);
    assert_eq!(score(&KvIndex::default(), &[10]).0, Score::Neutral);
}

#[test]
fn a_miss_costs_one_lookup_and_reports_miss() {
    let mut index = KvIndex::default();
    index.apply(&feed(1, true, vec![add(0, 10, Tier::Gpu)]));
    let mut looked = 0;
    let keys = [99u64, 10, 10].into_iter().inspect(|_| looked += 1);
    let mut out = Vec::new();
    assert_eq!(index.score("pool", &slots(), keys, &TierWeights::default(), &mut out), Score::Miss);
    assert_eq!(looked, 1);
}

/// A block counts once per endpoint, at the fastest tier that endpoint holds it in; storage
/// counts least, and the weights are the provider's.
#[test]
fn each_block_weighs_as_its_fastest_tier() {
    let mut index = KvIndex::default();
    let ops = vec![
        add(0, 10, Tier::Storage),
        add(0, 11, Tier::Storage),
        add(1, 10, Tier::Cpu),
        add(1, 10, Tier::Storage),
        add(1, 11, Tier::Storage),
        add(2, 10, Tier::Gpu),
        add(2, 10, Tier::Cpu),
    ];
    index.apply(&feed(1, true, ops));
    // A: 0.5 + 0.5; B: 0.8 + 0.5; C: 1 (its second block missing).
    assert_eq!(score(&index, &[10, 11]), (Score::Hit(13), vec![10, 13, 10]));
    let flat = TierWeights { gpu: 1000, cpu: 1000, storage: 1000 };
    assert_eq!(score_with(&index, &[10, 11], &flat).1, [2000, 2000, 1000]);
    let gpu_only = TierWeights { gpu: 1000, cpu: 0, storage: 0 };
    assert_eq!(score_with(&index, &[10, 11], &gpu_only), (Score::Hit(1000), vec![0, 0, 1000]));
    // A tier of weight 0 is not counted at all: a block held only there ends the run, so a
    // GPU block after it earns nothing (precise_cache_aware's GPU-only view).
    index.apply(&feed(2, false, vec![add(2, 11, Tier::Cpu), add(2, 12, Tier::Gpu)]));
    assert_eq!(score_with(&index, &[10, 11, 12], &gpu_only).1, [0, 0, 1000]);
    assert_eq!(score_with(&index, &[10, 11, 12], &flat).1, [2000, 2000, 3000]);
    index.apply(&feed(3, false, vec![KvOp::Remove { provider: 0, endpoint: 2, key: 12, tier: Tier::Gpu }]));
    // Taking a block out of storage leaves the endpoint's other tiers.
    index.apply(&feed(4, false, vec![KvOp::Remove { provider: 0, endpoint: 1, key: 10, tier: Tier::Storage }]));
    assert_eq!(score(&index, &[10, 11]).1, [10, 13, 18]);
    index.apply(&feed(5, false, vec![KvOp::Remove { provider: 0, endpoint: 0, key: 10, tier: Tier::Storage }]));
    assert_eq!(score(&index, &[10, 11]).1, [0, 13, 18]);
}
