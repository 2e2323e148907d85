//! round_robin, priority, weighted, random, least_loaded, power_of_two.

use super::*;

fn run(b: &mut Balancer, picks: usize, eligible: &[usize]) -> Vec<usize> {
    (0..picks).map(|_| b.pick(&ctx(b"", &[], 0), eligible).unwrap()).collect()
}

fn shares(picks: &[usize], n: usize) -> Vec<usize> {
    let mut out = vec![0; n];
    for &p in picks {
        out[p] += 1;
    }
    out
}

#[test]
fn round_robin_cycles_exactly() {
    let mut b = Balancer::new(StrategyKind::RoundRobin, &targets(3)).unwrap();
    assert_eq!(run(&mut b, 7, &all(3)), [0, 1, 2, 0, 1, 2, 0]);
}

#[test]
fn round_robin_skips_ineligible_and_keeps_its_turn() {
    let mut b = Balancer::new(StrategyKind::RoundRobin, &targets(4)).unwrap();
    assert_eq!(run(&mut b, 1, &all(4)), [0]);
    // Target 1 unhealthy: its turn passes to 2, and the rotation goes on from there.
    assert_eq!(run(&mut b, 3, &[0, 2, 3]), [2, 3, 0]);
    assert_eq!(run(&mut b, 4, &[3, 2, 1, 0]), [1, 2, 3, 0]);
}

#[test]
fn priority_takes_the_first_eligible_target() {
    let mut b = Balancer::new(StrategyKind::Priority, &targets(3)).unwrap();
    assert_eq!(run(&mut b, 3, &all(3)), [0, 0, 0]);
    assert_eq!(run(&mut b, 2, &[2, 1]), [1, 1]);
}

fn weighted(weights: &[u32]) -> Balancer {
    let specs: Vec<_> = weights.iter().enumerate().map(|(i, &w)| TargetSpec::new(format!("t{i}"), w)).collect();
    Balancer::new(StrategyKind::Weighted, &specs).unwrap()
}

#[test]
fn weighted_5_1_1_is_the_smooth_sequence() {
    let mut b = weighted(&[5, 1, 1]);
    let cycle = [0, 0, 1, 0, 2, 0, 0];
    let picks = run(&mut b, 21, &all(3));
    for chunk in picks.chunks(7) {
        assert_eq!(chunk, cycle);
    }
    assert_eq!(shares(&picks, 3), [15, 3, 3]);
}

#[test]
fn weighted_gives_exact_shares_over_every_cycle() {
    let mut b = weighted(&[3, 2, 1, 4]);
    for _ in 0..5 {
        assert_eq!(shares(&run(&mut b, 10, &all(4)), 4), [3, 2, 1, 4]);
    }
}

#[test]
fn weighted_shares_among_the_eligible_when_one_is_out() {
    let mut b = weighted(&[5, 1, 1]);
    let picks = run(&mut b, 60, &[1, 2]);
    assert_eq!(shares(&picks, 3), [0, 30, 30]);
    let mut b = weighted(&[2, 1, 1]);
    assert_eq!(shares(&run(&mut b, 30, &[0, 2]), 3), [20, 0, 10]);
}

#[test]
fn random_is_roughly_uniform_and_only_uses_the_number_passed_in() {
    let mut b = Balancer::new(StrategyKind::Random, &targets(4)).unwrap();
    let mut rng = Rng(7);
    let picks: Vec<_> = (0..40_000).map(|_| b.pick(&ctx(b"", &[], rng.next()), &all(4)).unwrap()).collect();
    for share in shares(&picks, 4) {
        assert!((9_500..=10_500).contains(&share), "{share}");
    }
    let same: Vec<_> = (0..10).map(|_| b.pick(&ctx(b"", &[], 12345), &all(4)).unwrap()).collect();
    assert!(same.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(b.pick(&ctx(b"", &[], 0), &all(4)), Some(0));
    assert_eq!(b.pick(&ctx(b"", &[], u64::MAX), &all(4)), Some(3));
}

#[test]
fn least_loaded_takes_the_smallest_queue() {
    let mut b = Balancer::new(StrategyKind::LeastLoaded, &targets(4)).unwrap();
    let l = loads(&[4, 2, 7, 3]);
    for r in 0..20u64 {
        assert_eq!(b.pick(&ctx(b"", &l, r.wrapping_mul(0x1111_1111_1111_1111)), &all(4)), Some(1));
    }
    assert_eq!(b.pick(&ctx(b"", &l, 0), &[0, 2, 3]), Some(3));
}

#[test]
fn least_loaded_breaks_ties_by_kv_usage_then_at_random() {
    let mut b = Balancer::new(StrategyKind::LeastLoaded, &targets(3)).unwrap();
    let mut l = loads(&[1, 1, 1]);
    l[0].kv_usage = Some(0.9);
    l[1].kv_usage = Some(0.2);
    l[2].kv_usage = Some(0.5);
    assert_eq!(b.pick(&ctx(b"", &l, 99), &all(3)), Some(1));
    let idle = loads(&[0, 0, 0]);
    let mut rng = Rng(3);
    let picks: Vec<_> = (0..3000).map(|_| b.pick(&ctx(b"", &idle, rng.next()), &all(3)).unwrap()).collect();
    for share in shares(&picks, 3) {
        assert!((850..=1150).contains(&share), "{share}");
    }
}

fn power_of_two_shares(in_flight: &[u32], picks: usize) -> Vec<usize> {
    let n = in_flight.len();
    let mut b = Balancer::new(StrategyKind::PowerOfTwo, &targets(n)).unwrap();
    let l = loads(in_flight);
    let mut rng = Rng(11);
    let picks: Vec<_> = (0..picks).map(|_| b.pick(&ctx(b"", &l, rng.next()), &all(n)).unwrap()).collect();
    shares(&picks, n)
}

#[test]
fn power_of_two_is_uniform_when_loads_are_equal() {
    for share in power_of_two_shares(&[3, 3, 3, 3], 40_000) {
        assert!((9_500..=10_500).contains(&share), "{share}");
    }
}

#[test]
fn power_of_two_skews_toward_the_light_target() {
    // Target 0 wins whenever it is one of the two draws: 1 - (3/4)(2/3) = 1/2 of picks.
    let s = power_of_two_shares(&[0, 10, 10, 10], 40_000);
    assert!((19_200..=20_800).contains(&s[0]), "{s:?}");
    for &other in &s[1..] {
        assert!((6_200..=7_200).contains(&other), "{s:?}");
    }
    // The heaviest never wins: the other draw is always lighter.
    let s = power_of_two_shares(&[1, 2, 3, 9], 20_000);
    assert_eq!(s[3], 0, "{s:?}");
    assert!(s[0] > s[1] && s[1] > s[2], "{s:?}");
}

#[test]
fn power_of_two_draws_two_distinct_targets() {
    // With two targets both are always drawn, so the lighter always wins.
    assert_eq!(power_of_two_shares(&[5, 0], 1000), [0, 1000]);
}
