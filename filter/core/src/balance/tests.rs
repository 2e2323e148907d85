//! Balancer tests: kinds, the `Balancer` contract and shared fixtures; each strategy family has
//! its own file under `tests/`.

mod cache;
mod learned;
mod ring;
mod simple;

use super::*;

/// splitmix64: a tiny seeded generator so distributions are reproducible.
pub(crate) struct Rng(pub u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `n` targets `t0..` of weight 1.
pub(crate) fn targets(n: usize) -> Vec<TargetSpec> {
    (0..n).map(|i| TargetSpec::new(format!("t{i}"), 1)).collect()
}

/// Every index below `n`.
pub(crate) fn all(n: usize) -> Vec<usize> {
    (0..n).collect()
}

/// Loads with these in-flight counts.
pub(crate) fn loads(in_flight: &[u32]) -> Vec<Load> {
    in_flight.iter().map(|&n| Load::in_flight(n)).collect()
}

/// A context with a conversation, loads and a random number.
pub(crate) fn ctx<'a>(conversation: &'a [u8], loads: &'a [Load], random: u64) -> PickContext<'a> {
    PickContext { conversation, loads, random, ..PickContext::default() }
}

#[test]
fn every_kind_round_trips_its_spelling() {
    for kind in StrategyKind::ALL {
        assert_eq!(kind.as_str().parse::<StrategyKind>(), Ok(kind));
        assert_eq!(kind.to_string(), kind.as_str());
    }
    let names: Vec<_> = StrategyKind::ALL.iter().map(|k| k.as_str()).collect();
    for expected in [
        "round_robin",
        "random",
        "weighted",
        "least_loaded",
        "power_of_two",
        "consistent_hash",
        "cache_aware",
        "precise_cache_aware",
        "pipeline",
        "predicted_latency",
        "lora_aware",
    ] {
        assert!(names.contains(&expected), "{expected} missing");
    }
}

#[test]
fn synonyms_and_unknown_names() {
    assert_eq!("least_busy".parse(), Ok(StrategyKind::LeastLoaded));
    assert_eq!("least_request".parse(), Ok(StrategyKind::LeastLoaded));
    assert_eq!("failover".parse(), Ok(StrategyKind::Priority));
    assert_eq!("first".parse(), Ok(StrategyKind::Priority));
    for bad in ["", "Round_Robin", "roundrobin", "precise", "adaptive"] {
        assert_eq!(bad.parse::<StrategyKind>(), Err(BalanceError::UnknownStrategy(bad.into())));
    }
}

#[test]
fn only_weighted_and_pipeline_use_weights() {
    let users: Vec<_> = StrategyKind::ALL.into_iter().filter(|k| k.uses_weights()).collect();
    assert_eq!(users, [StrategyKind::Weighted, StrategyKind::Pipeline]);
}

#[test]
fn balancer_needs_targets_with_weight() {
    assert_eq!(Balancer::new(StrategyKind::Random, &[]).err(), Some(BalanceError::NoTargets));
    let bad = [TargetSpec::new("a", 1), TargetSpec::new("b", 0)];
    let err = Balancer::new(StrategyKind::Weighted, &bad).err();
    assert_eq!(err, Some(BalanceError::ZeroWeight { index: 1, name: "b".into() }));
    let b = Balancer::new(StrategyKind::CacheAware, &targets(3)).unwrap();
    assert_eq!((b.kind(), b.len(), b.is_empty()), (StrategyKind::CacheAware, 3, false));
}

#[test]
fn balancer_refuses_empty_or_unknown_eligible() {
    for kind in StrategyKind::ALL {
        let mut b = Balancer::new(kind, &targets(3)).unwrap();
        let c = ctx(b"hi", &[], 7);
        assert_eq!(b.pick(&c, &[]), None, "{kind}");
        assert_eq!(b.pick(&c, &[0, 3]), None, "{kind}");
        assert!(b.pick(&c, &[2]) == Some(2), "{kind}");
        b.observe(99, Observed::Started); // ignored, must not panic
    }
}

#[test]
fn every_kind_picks_only_eligible_targets() {
    let mut rng = Rng(1);
    for kind in StrategyKind::ALL {
        let mut b = Balancer::new(kind, &targets(6)).unwrap();
        for round in 0..400 {
            let eligible: Vec<usize> = (0..6).filter(|_| rng.below(3) > 0).collect();
            let load: Vec<Load> = (0..6).map(|_| Load::in_flight(rng.below(5) as u32)).collect();
            let text = format!("conversation {}", rng.below(20));
            let session = format!("s{}", rng.below(10));
            let c = PickContext {
                session: (round % 2 == 0).then_some(session.as_str()),
                adapter: (round % 3 == 0).then_some("lora-a"),
                ..ctx(text.as_bytes(), if round % 5 == 0 { &[] } else { &load }, rng.next())
            };
            let picked = b.pick(&c, &eligible);
            assert_eq!(picked.is_some(), !eligible.is_empty(), "{kind}");
            if let Some(t) = picked {
                assert!(eligible.contains(&t), "{kind} picked {t} outside {eligible:?}");
                let outcome = Outcome { success: true, latency_ms: 100, ..Outcome::default() };
                b.observe(t, Observed::Started);
                b.observe(t, Observed::Finished(outcome));
            }
        }
    }
}

#[test]
fn prefix_is_bounded_and_cut_on_a_character_boundary() {
    let text = "é".repeat(PREFIX_BYTES); // 2 bytes each: the bound falls on a boundary
    let odd = format!("x{text}"); // shifted by one: the bound falls inside a character
    for t in [&text, &odd] {
        let c = ctx(t.as_bytes(), &[], 0);
        let p = c.prefix();
        assert!(p.len() <= PREFIX_BYTES && p.len() >= PREFIX_BYTES - 1, "{}", p.len());
        assert!(std::str::from_utf8(p).is_ok());
    }
    assert_eq!(ctx(&text.as_bytes()[..10], &[], 0).prefix().len(), 10);
    assert_eq!(ctx(odd.as_bytes(), &[], 0).prefix().len(), PREFIX_BYTES - 1);
    assert_eq!(ctx(odd.as_bytes(), &[], 0).prompt_tokens(), odd.len() as u64 / 4);
}

#[test]
fn queue_is_the_larger_of_own_and_engine_counts() {
    assert_eq!(Load::in_flight(3).queue(), 3);
    let engine = Load { in_flight: 3, running: Some(4), waiting: Some(2), kv_usage: None, cache_occupancy: None };
    assert_eq!(engine.queue(), 6);
    let behind = Load { in_flight: 9, running: Some(4), waiting: None, kv_usage: None, cache_occupancy: None };
    assert_eq!(behind.queue(), 9);
    let c = ctx(b"", &[], 0);
    assert_eq!((c.queue(5), c.has_load()), (0, false));
}

#[test]
fn digest_is_the_callers_when_given() {
    let c = ctx(b"hello", &[], 0);
    assert_eq!(c.digest(), hash64(0, b"hello"));
    assert_ne!(c.digest(), ctx(b"hellp", &[], 0).digest());
    assert_eq!(PickContext { digest: Some(42), ..c }.digest(), 42);
}

#[test]
fn hash_depends_on_every_byte_seed_and_length() {
    let base = hash64(0, b"abcdefghijk");
    assert_ne!(base, hash64(1, b"abcdefghijk"));
    assert_ne!(base, hash64(0, b"abcdefghijl"));
    assert_ne!(base, hash64(0, b"bbcdefghijk"));
    assert_ne!(hash64(0, b"a"), hash64(0, b"a\0"));
    assert_eq!(base, hash64(0, b"abcdefghijk"));
}

#[test]
fn lru_evicts_the_least_recent_and_peeking_refreshes_nothing() {
    let mut lru = lru::Lru::new(3);
    for k in 1..=3 {
        assert_eq!(lru.insert(k, k * 10), None);
    }
    assert!(lru.touch(1));
    assert_eq!(lru.peek(2), Some(&20));
    assert_eq!(lru.keys(), [2, 3, 1]);
    assert_eq!(lru.insert(4, 40), Some((2, 20)));
    assert_eq!(lru.insert(3, 31), None, "an update refreshes, evicts nothing");
    assert_eq!(lru.keys(), [1, 4, 3]);
    assert_eq!((lru.len(), lru.evictions(), lru.peek(3), lru.peek(2)), (3, 1, Some(&31), None));
    assert!(!lru.touch(2));
}
