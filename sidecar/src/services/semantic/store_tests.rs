use super::super::signature::Signature;
use super::super::vector::normalized;
use super::*;

fn part(scope: &str, model: &str, context: &str) -> Arc<Partition> {
    Arc::new(Partition {
        scope: scope.into(),
        model: model.into(),
        context: context.into(),
        embedding_model: "embed".into(),
    })
}

fn unit(v: &[f32]) -> Box<[f32]> {
    normalized(v.to_vec()).unwrap()
}

fn entry(p: &Arc<Partition>, v: &[f32], text: u8, body: &str, ttl_ms: u64) -> NewEntry {
    NewEntry {
        partition: p.clone(),
        vector: unit(v),
        text_digest: [text; 32],
        signature: Signature(0),
        body: Bytes::from(body.to_string()),
        ttl_ms,
    }
}

/// Limits of `entries` entries and no byte bound to speak of.
fn n(entries: usize) -> Limits {
    Limits { entries, bytes: u64::MAX }
}

fn ask<'a>(p: &'a Partition, v: &'a [f32], threshold: f32) -> Query<'a> {
    Query { partition: p, vector: v, signature: Signature(0), threshold, max_age_ms: None }
}

#[test]
fn only_a_turn_of_the_same_signature_is_served() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    let v = [1.0, 0.0, 0.0];
    s.insert(NewEntry { signature: Signature(1), ..entry(&p, &v, 1, "austria", 60_000) }, n(10), 0).unwrap();
    s.insert(NewEntry { signature: Signature(2), ..entry(&p, &[1.0, 0.2, 0.0], 2, "australia", 60_000) }, n(10), 0)
        .unwrap();
    let q = unit(&v);
    // The most similar candidate of the asked signature, not the most similar of all.
    let austria = Query { signature: Signature(1), ..ask(&p, &q, 0.9) };
    assert_eq!(s.lookup(austria, 1).unwrap().body, "austria");
    let australia = Query { signature: Signature(2), ..ask(&p, &q, 0.9) };
    let hit = s.lookup(australia, 1).unwrap();
    assert_eq!(hit.body, "australia");
    assert!(hit.similarity < 0.99);
    // A same vector of another signature: a miss.
    assert!(s.lookup(Query { signature: Signature(3), ..ask(&p, &q, 0.5) }, 1).is_none());
}

#[test]
fn serves_the_best_candidate_above_the_threshold() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    s.insert(entry(&p, &[1.0, 0.0, 0.0], 1, "x-axis", 60_000), n(10), 0).unwrap();
    s.insert(entry(&p, &[1.0, 0.3, 0.0], 2, "near-x", 60_000), n(10), 0).unwrap();
    s.insert(entry(&p, &[0.0, 1.0, 0.0], 3, "y-axis", 60_000), n(10), 0).unwrap();
    let q = unit(&[1.0, 0.25, 0.0]);
    let hit = s.lookup(ask(&p, &q, 0.9), 1).unwrap();
    assert_eq!(hit.body, "near-x");
    assert!(hit.similarity > 0.99);
    // Nothing close enough: a miss.
    let far = unit(&[0.0, 0.0, 1.0]);
    assert!(s.lookup(ask(&p, &far, 0.5), 1).is_none());
    // The threshold is inclusive.
    let exact = unit(&[0.0, 1.0, 0.0]);
    assert_eq!(s.lookup(ask(&p, &exact, 1.0 - 1e-6), 1).unwrap().body, "y-axis");
}

#[test]
fn no_hit_crosses_a_partition() {
    let s = SemanticStore::new();
    let v = [1.0, 2.0, 3.0];
    s.insert(entry(&part("key:a", "m", "c"), &v, 1, "a's", 60_000), n(10), 0).unwrap();
    let q = unit(&v);
    assert!(s.lookup(ask(&part("key:a", "m", "c"), &q, 0.99), 1).is_some());
    for other in [part("key:b", "m", "c"), part("group:a", "m", "c"), part("global", "m", "c")] {
        assert!(s.lookup(ask(&other, &q, 0.1), 1).is_none(), "{other:?}");
    }
    assert!(s.lookup(ask(&part("key:a", "m2", "c"), &q, 0.1), 1).is_none());
    assert!(s.lookup(ask(&part("key:a", "m", "c2"), &q, 0.1), 1).is_none());
    let mut other_embedder = (*part("key:a", "m", "c")).clone();
    other_embedder.embedding_model = "other".into();
    assert!(s.lookup(ask(&other_embedder, &q, 0.1), 1).is_none());
}

#[test]
fn expired_entries_are_never_served() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    s.insert(entry(&p, &[1.0, 0.0], 1, "short", 1_000), n(10), 0).unwrap();
    let q = unit(&[1.0, 0.0]);
    assert!(s.lookup(ask(&p, &q, 0.9), 999).is_some());
    assert!(s.lookup(ask(&p, &q, 0.9), 1_000).is_none());
    // ... and dropped when met.
    assert_eq!(s.len(), 0);
}

#[test]
fn a_shorter_policy_ttl_applies_to_older_entries() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    s.insert(entry(&p, &[1.0, 0.0], 1, "old", 3_600_000), n(10), 0).unwrap();
    let q = unit(&[1.0, 0.0]);
    let young = Query { max_age_ms: Some(60_000), ..ask(&p, &q, 0.9) };
    assert!(s.lookup(young, 59_999).is_some());
    assert!(s.lookup(young, 60_000).is_none());
    assert!(s.lookup(ask(&p, &q, 0.9), 60_000).is_some());
}

#[test]
fn the_same_turn_replaces_its_entry() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    s.insert(entry(&p, &[1.0, 0.0], 7, "first", 60_000), n(10), 0).unwrap();
    s.insert(entry(&p, &[1.0, 0.0], 7, "second", 60_000), n(10), 0).unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(s.lookup(ask(&p, &unit(&[1.0, 0.0]), 0.9), 1).unwrap().body, "second");
}

#[test]
fn bounded_evicting_expired_first_then_least_recently_used() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    s.insert(entry(&p, &[1.0, 0.0, 0.0], 1, "a", 60_000), n(3), 0).unwrap();
    s.insert(entry(&p, &[0.0, 1.0, 0.0], 2, "b", 500), n(3), 0).unwrap();
    s.insert(entry(&p, &[0.0, 0.0, 1.0], 3, "c", 60_000), n(3), 0).unwrap();
    // Full: "b" has expired by now, so it goes although "a" is older in use.
    s.insert(entry(&p, &[1.0, 1.0, 0.0], 4, "d", 60_000), n(3), 1_000).unwrap();
    assert_eq!(s.len(), 3);
    assert!(s.lookup(ask(&p, &unit(&[0.0, 1.0, 0.0]), 0.99), 1_000).is_none());
    // Nothing expired: the least recently used goes; a hit on "a" makes "c" the oldest.
    assert!(s.lookup(ask(&p, &unit(&[1.0, 0.0, 0.0]), 0.99), 1_001).is_some());
    s.insert(entry(&p, &[1.0, 0.0, 1.0], 5, "e", 60_000), n(3), 1_002).unwrap();
    assert_eq!(s.len(), 3);
    assert!(s.lookup(ask(&p, &unit(&[0.0, 0.0, 1.0]), 0.99), 1_003).is_none());
    assert!(s.lookup(ask(&p, &unit(&[1.0, 0.0, 0.0]), 0.99), 1_003).is_some());
    // A bound lowered by a new configuration applies on the next store.
    s.insert(entry(&p, &[2.0, 1.0, 0.0], 6, "f", 60_000), n(1), 1_004).unwrap();
    assert_eq!(s.len(), 1);
}

#[test]
fn purges_by_scope_and_model() {
    let s = SemanticStore::new();
    let v = [1.0, 0.0];
    for (i, (scope, model)) in
        [("key:a", "m1"), ("key:a", "m2"), ("key:b", "m1"), ("global", "m1"), ("global", "m2")].iter().enumerate()
    {
        s.insert(entry(&part(scope, model, "c"), &v, i as u8, "x", 60_000), n(100), 0).unwrap();
    }
    assert_eq!(s.len(), 5);
    assert_eq!(s.purge(&["key:a".into()], Some("m1")), 1);
    assert_eq!(s.purge(&["key:a".into(), "key:b".into()], None), 2);
    assert_eq!(s.purge(&[], Some("m2")), 1);
    assert_eq!(s.purge(&["nobody".into()], None), 0);
    assert_eq!(s.len(), 1);
    assert_eq!(s.purge(&[], None), 1);
    assert!(s.is_empty());
    // A purged partition can be filled again.
    let p = part("global", "m1", "c");
    s.insert(entry(&p, &v, 9, "again", 60_000), n(100), 0).unwrap();
    assert_eq!(s.lookup(ask(&p, &unit(&v), 0.9), 1).unwrap().body, "again");
}

#[test]
fn vectors_of_another_dimension_are_skipped() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    s.insert(entry(&p, &[1.0, 0.0, 0.0], 1, "3d", 60_000), n(10), 0).unwrap();
    assert!(s.lookup(ask(&p, &unit(&[1.0, 0.0]), 0.1), 1).is_none());
}

/// An entry of `body_len` bytes of answer, on axis `i` of a 3-d vector.
fn sized(p: &Arc<Partition>, i: u8, body_len: usize) -> NewEntry {
    let mut v = [0.0; 3];
    v[usize::from(i) % 3] = 1.0;
    v[(usize::from(i) + 1) % 3] = f32::from(i) / 100.0;
    NewEntry { body: Bytes::from(vec![b'x'; body_len]), ..entry(p, &v, i, "", 60_000) }
}

fn present(s: &SemanticStore, p: &Partition, i: u8, now_ms: u64) -> bool {
    let mut v = [0.0; 3];
    v[usize::from(i) % 3] = 1.0;
    v[(usize::from(i) + 1) % 3] = f32::from(i) / 100.0;
    s.lookup(Query { threshold: 0.9999, ..ask(p, &unit(&v), 0.0) }, now_ms).is_some()
}

#[test]
fn the_cost_counts_answer_vector_names_and_overhead() {
    let p = part("global", "m", "c");
    let e = sized(&p, 1, 1_000);
    let names = ("global".len() + "m".len() + "c".len() + "embed".len()) as u64;
    assert_eq!(e.cost(), 1_000 + 3 * 4 + names + ENTRY_OVERHEAD);
    let s = SemanticStore::new();
    s.insert(e.clone(), n(10), 0).unwrap();
    s.insert(sized(&p, 2, 500), n(10), 0).unwrap();
    assert_eq!(s.bytes(), e.cost() + sized(&p, 2, 500).cost());
    // Replacing, expiring and purging give the bytes back.
    s.insert(sized(&p, 2, 100), n(10), 0).unwrap();
    assert_eq!(s.bytes(), e.cost() + sized(&p, 2, 100).cost());
    assert_eq!(s.purge(&[], None), 2);
    assert_eq!((s.len(), s.bytes()), (0, 0));
}

#[test]
fn filled_past_the_byte_budget_it_keeps_under_it_evicting_the_least_recently_used() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    let cost = sized(&p, 0, 10_000).cost();
    // Room for 5 entries by bytes; the count bound is far away.
    let limits = Limits { entries: 1_000, bytes: 5 * cost + cost / 2 };
    for i in 0..5 {
        s.insert(sized(&p, i, 10_000), limits, u64::from(i)).unwrap();
    }
    assert_eq!((s.len(), s.bytes()), (5, 5 * cost));
    for i in 5..20 {
        s.insert(sized(&p, i, 10_000), limits, u64::from(i)).unwrap();
        assert!(s.bytes() <= limits.bytes, "{} over {}", s.bytes(), limits.bytes);
        assert_eq!(s.len(), 5);
    }
    // The 5 most recently stored remain, the 15 older went.
    for i in 0..15 {
        assert!(!present(&s, &p, i, 100), "{i} should be evicted");
    }
    for i in 15..20 {
        assert!(present(&s, &p, i, 100), "{i} should remain");
    }
    // One larger entry evicts as many of the least recently used as it needs.
    let big = sized(&p, 20, 35_000);
    s.insert(big.clone(), limits, 101).unwrap();
    assert!(s.bytes() <= limits.bytes);
    assert_eq!(s.bytes(), big.cost() + 2 * cost);
    assert!(present(&s, &p, 20, 102));
    let kept: Vec<u8> = (15..20).filter(|i| present(&s, &p, *i, 102)).collect();
    assert_eq!(kept, [18, 19], "the three least recently used went");
}

#[test]
fn a_lookup_refreshes_recency_for_the_byte_bound() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    let cost = sized(&p, 0, 4_000).cost();
    let limits = Limits { entries: 1_000, bytes: 3 * cost };
    for i in 0..3 {
        s.insert(sized(&p, i, 4_000), limits, u64::from(i)).unwrap();
    }
    // 0 is the oldest stored, but a hit makes 1 the least recently used.
    assert!(present(&s, &p, 0, 10));
    s.insert(sized(&p, 3, 4_000), limits, 11).unwrap();
    assert!(!present(&s, &p, 1, 12));
    for i in [0, 2, 3] {
        assert!(present(&s, &p, i, 12), "{i} should remain");
    }
    assert_eq!(s.bytes(), 3 * cost);
}

#[test]
fn expired_entries_go_before_the_least_recently_used_for_bytes() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    let cost = sized(&p, 0, 4_000).cost();
    let limits = Limits { entries: 1_000, bytes: 3 * cost };
    s.insert(sized(&p, 0, 4_000), limits, 0).unwrap();
    s.insert(NewEntry { ttl_ms: 500, ..sized(&p, 1, 4_000) }, limits, 0).unwrap();
    s.insert(sized(&p, 2, 4_000), limits, 0).unwrap();
    s.insert(sized(&p, 3, 4_000), limits, 1_000).unwrap();
    assert!(present(&s, &p, 0, 1_001), "the least recently used stays: an expired entry went instead");
    assert!(!present(&s, &p, 1, 1_001));
}

#[test]
fn the_count_bound_still_holds_under_a_loose_byte_budget() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    let limits = Limits { entries: 4, bytes: 1 << 30 };
    for i in 0..10 {
        s.insert(sized(&p, i, 100), limits, u64::from(i)).unwrap();
        assert!(s.len() <= 4);
    }
    assert_eq!(s.len(), 4);
    assert_eq!(s.bytes(), 4 * sized(&p, 0, 100).cost());
    assert!((6..10).all(|i| present(&s, &p, i, 20)));
}

#[test]
fn an_entry_larger_than_the_budget_alone_is_refused_and_evicts_nothing() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    let limits = Limits { entries: 10, bytes: 10_000 };
    s.insert(sized(&p, 1, 1_000), limits, 0).unwrap();
    let before = s.bytes();
    let huge = sized(&p, 2, 10_000);
    let cost = huge.cost();
    assert_eq!(s.insert(huge, limits, 1), Err(TooLarge { cost, budget: 10_000 }));
    assert_eq!((s.len(), s.bytes()), (1, before));
    // Exactly the budget fits (after evicting the rest).
    let exact = sized(&p, 3, 10_000 - (cost - 10_000) as usize);
    assert_eq!(exact.cost(), 10_000);
    s.insert(exact, limits, 2).unwrap();
    assert_eq!((s.len(), s.bytes()), (1, 10_000));
}
