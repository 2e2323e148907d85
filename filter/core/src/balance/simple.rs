//! The stateless and counter-only strategies: `round_robin`, `priority`, `random`, `weighted`
//! (smooth weighted round robin, as nginx does it), `least_loaded` and `power_of_two`. None of
//! them allocates when picking.

use super::hash::{below, mix64};
use super::{PickContext, Strategy};

/// Whether target `a` is strictly lighter than `b`: smaller queue, then less KV cache in use.
pub(crate) fn lighter(ctx: &PickContext<'_>, a: usize, b: usize) -> bool {
    let (qa, qb) = (ctx.queue(a), ctx.queue(b));
    qa < qb || (qa == qb && ctx.kv_usage(a) < ctx.kv_usage(b))
}

/// The best of the `eligible` targets that `keep` accepts, by `better` (strictly better wins).
/// The scan starts at a position drawn from `random`, so ties (everything idle, no load known)
/// spread evenly instead of all landing on the first target.
pub(crate) fn scan_best(
    eligible: &[usize],
    random: u64,
    keep: impl Fn(usize) -> bool,
    better: impl Fn(usize, usize) -> bool,
) -> Option<usize> {
    let start = below(random, eligible.len());
    let mut best: Option<usize> = None;
    for &i in eligible.iter().cycle().skip(start).take(eligible.len()) {
        if keep(i) && best.is_none_or(|b| better(i, b)) {
            best = Some(i);
        }
    }
    best
}

/// The lightest of `eligible`, ties broken at random.
pub(crate) fn least_loaded_among(ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
    scan_best(eligible, ctx.random, |_| true, |a, b| lighter(ctx, a, b))
}

/// `round_robin`: targets in turn. An ineligible target is skipped and the turn passes to the
/// next eligible one after it, so the rotation stays fair over the targets that remain.
#[derive(Debug, Clone)]
pub struct RoundRobin {
    targets: usize,
    next: usize,
}

impl RoundRobin {
    /// A rotation over `targets` targets, starting at the first.
    pub fn new(targets: usize) -> Self {
        Self { targets: targets.max(1), next: 0 }
    }
}

impl Strategy for RoundRobin {
    fn pick(&mut self, _ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let n = self.targets;
        // The eligible target with the shortest forward distance from the cursor.
        let distance = |i: usize| (i % n + n - self.next) % n;
        let chosen = eligible.iter().copied().min_by_key(|&i| distance(i))?;
        self.next = (chosen + 1) % n;
        Some(chosen)
    }
}

/// `priority`: the first eligible target in route order; the rest are failover.
#[derive(Debug, Clone, Copy, Default)]
pub struct Priority;

impl Strategy for Priority {
    fn pick(&mut self, _ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        eligible.iter().copied().min()
    }
}

/// `random`: uniform over the eligible targets, from the caller's random number.
#[derive(Debug, Clone, Copy, Default)]
pub struct Random;

impl Strategy for Random {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        eligible.get(below(ctx.random, eligible.len())).copied()
    }
}

/// `weighted`: smooth weighted round robin. Each pick adds every eligible target's weight to its
/// running credit, takes the target with the most credit (lowest index on a tie) and charges it
/// the sum of the weights added. Over one cycle of `sum(weights)` picks each target is chosen
/// exactly `weight` times, interleaved (5:1:1 gives a a b a c a a) rather than in bursts.
#[derive(Debug, Clone)]
pub struct Weighted {
    weights: Vec<i64>,
    credit: Vec<i64>,
}

impl Weighted {
    /// A rotation in proportion to `weights` (by target index).
    pub fn new(weights: Vec<u32>) -> Self {
        let credit = vec![0; weights.len()];
        Self { weights: weights.into_iter().map(i64::from).collect(), credit }
    }
}

impl Strategy for Weighted {
    fn pick(&mut self, _ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let mut total = 0i64;
        let mut best: Option<(usize, i64)> = None;
        for &i in eligible {
            let (Some(&w), Some(c)) = (self.weights.get(i), self.credit.get_mut(i)) else { continue };
            *c += w;
            total += w;
            let better = best.is_none_or(|(b, bc)| *c > bc || (*c == bc && i < b));
            if better {
                best = Some((i, *c));
            }
        }
        let (chosen, _) = best?;
        if let Some(c) = self.credit.get_mut(chosen) {
            *c -= total;
        }
        Some(chosen)
    }
}

/// `least_loaded`: the eligible target with the smallest queue ([`super::Load::queue`]), then
/// the least KV cache in use; ties broken at random.
#[derive(Debug, Clone, Copy, Default)]
pub struct LeastLoaded;

impl Strategy for LeastLoaded {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        least_loaded_among(ctx, eligible)
    }
}

/// `power_of_two`: two distinct eligible targets drawn at random (from the caller's number and
/// a mix of it), the lighter one wins, the first drawn on a tie. Close to
/// least-loaded without every balancer herding onto the same idle target.
#[derive(Debug, Clone, Copy, Default)]
pub struct PowerOfTwo;

impl Strategy for PowerOfTwo {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let n = eligible.len();
        let first_at = below(ctx.random, n);
        let first = *eligible.get(first_at)?;
        if n == 1 {
            return Some(first);
        }
        // Draw the second among the other n - 1 positions so the two always differ.
        let mut second_at = below(mix64(ctx.random), n - 1);
        if second_at >= first_at {
            second_at += 1;
        }
        let second = *eligible.get(second_at)?;
        Some(if lighter(ctx, second, first) { second } else { first })
    }
}
