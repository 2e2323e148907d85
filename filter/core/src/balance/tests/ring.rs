//! consistent_hash.

use std::collections::HashMap;

use super::*;

fn ring(names: &[&str]) -> ConsistentHash {
    ConsistentHash::new(names.iter().copied())
}

const FIVE: [&str; 5] = ["a", "b", "c", "d", "e"];

/// The owner's name of each of `keys` keys.
fn owners<'a>(names: &[&'a str], keys: u64, eligible: &[usize]) -> Vec<&'a str> {
    let r = ring(names);
    (0..keys).map(|k| names[r.owner(hash64(9, &k.to_le_bytes()), eligible).unwrap()]).collect()
}

#[test]
fn ring_has_100_points_per_target() {
    let r = ring(&FIVE);
    assert_eq!(VNODES_PER_TARGET, 100);
    assert_eq!(r.points(), 500);
    for t in 0..5 {
        assert_eq!(r.points_of(t), 100);
    }
}

#[test]
fn a_session_always_lands_on_the_same_target() {
    let mut b = Balancer::new(StrategyKind::ConsistentHash, &targets(5)).unwrap();
    let mut seen = HashMap::new();
    let mut rng = Rng(5);
    for i in 0..2000 {
        let session = format!("session-{}", i % 200);
        let text = format!("turn {i}"); // the conversation changes, the session does not
        let c = PickContext { session: Some(&session), ..ctx(text.as_bytes(), &[], rng.next()) };
        let t = b.pick(&c, &all(5)).unwrap();
        assert_eq!(*seen.entry(session).or_insert(t), t);
    }
    let used: std::collections::HashSet<_> = seen.values().collect();
    assert_eq!(used.len(), 5, "200 sessions should reach every target");
}

#[test]
fn without_a_session_the_conversation_digest_is_the_key() {
    let mut b = Balancer::new(StrategyKind::ConsistentHash, &targets(5)).unwrap();
    let conv = b"system: be brief\nuser: hi";
    let first = b.pick(&ctx(conv, &[], 1), &all(5)).unwrap();
    for r in 0..50 {
        let empty_session = PickContext { session: Some(""), ..ctx(conv, &[], r) };
        assert_eq!(b.pick(&empty_session, &all(5)), Some(first));
    }
    let c = ctx(conv, &[], 0);
    assert_eq!(ConsistentHash::key(&c), c.digest());
    let by_digest = PickContext { digest: Some(ConsistentHash::key(&c)), ..ctx(b"other", &[], 0) };
    assert_eq!(b.pick(&by_digest, &all(5)), Some(first));
}

#[test]
fn keys_spread_roughly_evenly() {
    let counts = owners(&FIVE, 50_000, &all(5)).into_iter().fold(HashMap::new(), |mut m, o| {
        *m.entry(o).or_insert(0) += 1;
        m
    });
    for name in FIVE {
        let share = counts[name];
        assert!((7_000..=13_000).contains(&share), "{name}: {share}");
    }
}

#[test]
fn removing_a_target_moves_only_its_keys() {
    let before = owners(&FIVE, 20_000, &all(5));
    let after = owners(&["a", "b", "d", "e"], 20_000, &all(4));
    let mut moved = 0;
    for (b, a) in before.iter().zip(&after) {
        if b == a {
            continue;
        }
        assert_eq!(*b, "c", "a key of {b} moved to {a}");
        moved += 1;
    }
    assert_eq!(moved, before.iter().filter(|&&o| o == "c").count());
    assert!((2_000..=6_000).contains(&moved), "{moved} of 20000 moved, about 1/5 expected");
}

#[test]
fn adding_a_target_moves_about_one_in_n() {
    let before = owners(&FIVE, 20_000, &all(5));
    let after = owners(&["a", "b", "c", "d", "e", "f"], 20_000, &all(6));
    let mut moved = 0;
    for (b, a) in before.iter().zip(&after) {
        if b != a {
            assert_eq!(*a, "f", "a key moved from {b} to {a}, not to the new target");
            moved += 1;
        }
    }
    // 1/6 of 20000 is 3333.
    assert!((1_700..=5_000).contains(&moved), "{moved}");
}

#[test]
fn an_ineligible_owner_hands_its_keys_over_and_gets_them_back() {
    let full = owners(&FIVE, 10_000, &all(5));
    let without_b = owners(&FIVE, 10_000, &[0, 2, 3, 4]);
    for (f, w) in full.iter().zip(&without_b) {
        if *f == "b" {
            assert_ne!(*w, "b");
        } else {
            assert_eq!(f, w);
        }
    }
    assert_eq!(owners(&FIVE, 10_000, &all(5)), full);
    assert_eq!(owners(&FIVE, 100, &[3]), vec!["d"; 100]);
}
