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

fn ask<'a>(p: &'a Partition, v: &'a [f32], threshold: f32) -> Query<'a> {
    Query { partition: p, vector: v, signature: Signature(0), threshold, max_age_ms: None }
}

#[test]
fn only_a_turn_of_the_same_signature_is_served() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    let v = [1.0, 0.0, 0.0];
    s.insert(NewEntry { signature: Signature(1), ..entry(&p, &v, 1, "austria", 60_000) }, 10, 0);
    s.insert(NewEntry { signature: Signature(2), ..entry(&p, &[1.0, 0.2, 0.0], 2, "australia", 60_000) }, 10, 0);
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
    s.insert(entry(&p, &[1.0, 0.0, 0.0], 1, "x-axis", 60_000), 10, 0);
    s.insert(entry(&p, &[1.0, 0.3, 0.0], 2, "near-x", 60_000), 10, 0);
    s.insert(entry(&p, &[0.0, 1.0, 0.0], 3, "y-axis", 60_000), 10, 0);
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
    s.insert(entry(&part("key:a", "m", "c"), &v, 1, "a's", 60_000), 10, 0);
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
    s.insert(entry(&p, &[1.0, 0.0], 1, "short", 1_000), 10, 0);
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
    s.insert(entry(&p, &[1.0, 0.0], 1, "old", 3_600_000), 10, 0);
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
    s.insert(entry(&p, &[1.0, 0.0], 7, "first", 60_000), 10, 0);
    s.insert(entry(&p, &[1.0, 0.0], 7, "second", 60_000), 10, 0);
    assert_eq!(s.len(), 1);
    assert_eq!(s.lookup(ask(&p, &unit(&[1.0, 0.0]), 0.9), 1).unwrap().body, "second");
}

#[test]
fn bounded_evicting_expired_first_then_least_recently_used() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    s.insert(entry(&p, &[1.0, 0.0, 0.0], 1, "a", 60_000), 3, 0);
    s.insert(entry(&p, &[0.0, 1.0, 0.0], 2, "b", 500), 3, 0);
    s.insert(entry(&p, &[0.0, 0.0, 1.0], 3, "c", 60_000), 3, 0);
    // Full: "b" has expired by now, so it goes although "a" is older in use.
    s.insert(entry(&p, &[1.0, 1.0, 0.0], 4, "d", 60_000), 3, 1_000);
    assert_eq!(s.len(), 3);
    assert!(s.lookup(ask(&p, &unit(&[0.0, 1.0, 0.0]), 0.99), 1_000).is_none());
    // Nothing expired: the least recently used goes; a hit on "a" makes "c" the oldest.
    assert!(s.lookup(ask(&p, &unit(&[1.0, 0.0, 0.0]), 0.99), 1_001).is_some());
    s.insert(entry(&p, &[1.0, 0.0, 1.0], 5, "e", 60_000), 3, 1_002);
    assert_eq!(s.len(), 3);
    assert!(s.lookup(ask(&p, &unit(&[0.0, 0.0, 1.0]), 0.99), 1_003).is_none());
    assert!(s.lookup(ask(&p, &unit(&[1.0, 0.0, 0.0]), 0.99), 1_003).is_some());
    // A bound lowered by a new configuration applies on the next store.
    s.insert(entry(&p, &[2.0, 1.0, 0.0], 6, "f", 60_000), 1, 1_004);
    assert_eq!(s.len(), 1);
}

#[test]
fn purges_by_scope_and_model() {
    let s = SemanticStore::new();
    let v = [1.0, 0.0];
    for (i, (scope, model)) in
        [("key:a", "m1"), ("key:a", "m2"), ("key:b", "m1"), ("global", "m1"), ("global", "m2")].iter().enumerate()
    {
        s.insert(entry(&part(scope, model, "c"), &v, i as u8, "x", 60_000), 100, 0);
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
    s.insert(entry(&p, &v, 9, "again", 60_000), 100, 0);
    assert_eq!(s.lookup(ask(&p, &unit(&v), 0.9), 1).unwrap().body, "again");
}

#[test]
fn vectors_of_another_dimension_are_skipped() {
    let s = SemanticStore::new();
    let p = part("global", "m", "c");
    s.insert(entry(&p, &[1.0, 0.0, 0.0], 1, "3d", 60_000), 10, 0);
    assert!(s.lookup(ask(&p, &unit(&[1.0, 0.0]), 0.1), 1).is_none());
}
