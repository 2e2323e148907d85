//! `precise_cache_aware`: send a request to the replica whose KV cache holds the longest run of
//! its leading blocks, as the engines' own KV-cache events report ([`crate::kv`]), unless that
//! replica is clearly busier than the rest.
//!
//! - The caller scores every target ([`PickContext::kv`]): the longest consecutive run of the
//!   request's blocks it holds, GPU blocks weighing more than offloaded ones.
//! - Load guard, as `cache_aware`'s: targets more than [`super::BALANCE_ABS_THRESHOLD`]
//!   requests and [`super::BALANCE_REL_THRESHOLD`] times ahead of the least-loaded one are
//!   passed over; among the rest the best score wins. On a tie, the target where the
//!   conversation went last (`cache_aware`'s record, kept at every pick, so it knows moves the
//!   engines' events have not reported yet), else the lighter.
//! - No scores (no token ids, no index), or no target left with a positive score: the
//!   approximate `cache_aware` decides, and learns every pick either way, so a request without
//!   token ids still follows its conversation.
//!
//! `lmcache_aware` is the same walk with two differences: its caller scores every tier
//! (GPU, and LMCache's CPU memory and storage, each at its weight) where `precise_cache_aware`
//! counts GPU blocks only ([`crate::kv::score_model`]), and among tied targets it prefers the
//! one with more cache room ([`super::Load::cache_occupancy`], LMCache's occupancy) before
//! the lighter one, so a prefix is stored where it will not push out others. Unknown
//! occupancy is neutral: the comparison then falls to load.

use super::cache_aware::{imbalanced, CacheAware};
use super::simple::{least_loaded_among, lighter, scan_best};
use super::{PickContext, Strategy};

/// Event-driven prefix affinity with a load guard; `cache_aware` when it knows nothing.
pub struct PreciseCacheAware {
    approximate: CacheAware,
    /// Ties go to the target with more cache room first (`lmcache_aware`).
    room: bool,
}

impl PreciseCacheAware {
    /// Over targets named `names` (the approximate fallback's home ring), remembering at most
    /// `max_nodes` prefix blocks for it.
    pub fn with_names<'a>(names: impl IntoIterator<Item = &'a str>, max_nodes: usize) -> Self {
        Self { approximate: CacheAware::with_names(names, max_nodes), room: false }
    }

    /// The `lmcache_aware` variant: ties go to the target with more cache room first.
    pub fn with_room(mut self) -> Self {
        self.room = true;
        self
    }

    /// Whether `a` is to be preferred to `b` among tied targets.
    fn better(&self, ctx: &PickContext<'_>, a: usize, b: usize) -> bool {
        if self.room {
            if let (Some(oa), Some(ob)) = (ctx.cache_occupancy(a), ctx.cache_occupancy(b)) {
                if oa != ob {
                    return oa < ob;
                }
            }
        }
        lighter(ctx, a, b)
    }

    /// The eligible target with the best positive score that the load guard allows.
    fn by_score(&mut self, ctx: &PickContext<'_>, scores: &[u32], eligible: &[usize]) -> Option<usize> {
        let least = if ctx.has_load() { least_loaded_among(ctx, eligible) } else { None };
        let allowed = |i: usize| least.is_none_or(|l| !imbalanced(ctx.queue(i), ctx.queue(l)));
        let score = |i: usize| scores.get(i).copied().unwrap_or(0);
        let best = eligible.iter().copied().filter(|&i| allowed(i)).map(score).max().filter(|&s| s > 0)?;
        let tied = |i: usize| allowed(i) && score(i) == best;
        if eligible.iter().filter(|&&i| tied(i)).nth(1).is_some() {
            if let Some(warm) = self.approximate.warm(ctx, eligible).filter(|&w| tied(w)) {
                return Some(warm);
            }
        }
        scan_best(eligible, ctx.random, tied, |a, b| self.better(ctx, a, b))
    }
}

impl Strategy for PreciseCacheAware {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let chosen = match ctx.kv.and_then(|scores| self.by_score(ctx, scores, eligible)) {
            Some(target) => target,
            None => self.approximate.choose(ctx, eligible)?,
        };
        self.approximate.record(ctx, chosen);
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::Load;

    fn pick(scores: Option<&[u32]>, loads: &[Load], eligible: &[usize]) -> Option<usize> {
        let mut s = PreciseCacheAware::with_names(["a", "b", "c"], 64);
        let ctx = PickContext { kv: scores, loads, conversation: b"hello", ..PickContext::default() };
        s.pick(&ctx, eligible)
    }

    #[test]
    fn the_longest_held_prefix_wins() {
        assert_eq!(pick(Some(&[10, 30, 20]), &[], &[0, 1, 2]), Some(1));
        assert_eq!(pick(Some(&[10, 30, 20]), &[], &[0, 2]), Some(2), "only eligible targets");
    }

    #[test]
    fn the_load_guard_passes_over_a_busy_holder() {
        let loads = [Load::in_flight(0), Load::in_flight(9), Load::in_flight(1)];
        assert_eq!(pick(Some(&[10, 30, 20]), &loads, &[0, 1, 2]), Some(2), "next best within the guard");
        let close = [Load::in_flight(1), Load::in_flight(2), Load::in_flight(1)];
        assert_eq!(pick(Some(&[10, 30, 20]), &close, &[0, 1, 2]), Some(1), "within both margins");
    }

    #[test]
    fn a_tie_goes_where_the_conversation_went_last() {
        let mut s = PreciseCacheAware::with_names(["a", "b", "c"], 64);
        let ctx = |kv| PickContext { kv, conversation: b"a conversation", ..PickContext::default() };
        // The conversation went to c (the engines had not reported it yet: no scores).
        s.approximate.record(&ctx(None), 2);
        assert_eq!(s.pick(&ctx(Some(&[20, 0, 20])), &[0, 1, 2]), Some(2));
        assert_eq!(s.pick(&ctx(Some(&[20, 0, 10])), &[0, 1, 2]), Some(0), "a longer run still wins");
    }

    #[test]
    fn lmcache_aware_breaks_ties_by_cache_room_then_load() {
        let occupied = |o: Option<f32>, in_flight| Load { cache_occupancy: o, ..Load::in_flight(in_flight) };
        let loads = [occupied(Some(0.9), 0), occupied(Some(0.2), 1), occupied(Some(0.5), 0)];
        let pick_with = |mut s: PreciseCacheAware, kv: &[u32], loads: &[Load]| {
            let ctx = PickContext { kv: Some(kv), loads, conversation: b"x", ..PickContext::default() };
            s.pick(&ctx, &[0, 1, 2])
        };
        let room = || PreciseCacheAware::with_names(["a", "b", "c"], 64).with_room();
        assert_eq!(pick_with(room(), &[20, 20, 20], &loads), Some(1), "the most room");
        assert_eq!(pick_with(room(), &[20, 10, 20], &loads), Some(2), "room among the tied only");
        assert_eq!(pick_with(room(), &[30, 20, 20], &loads), Some(0), "a longer run beats room");
        let plain = PreciseCacheAware::with_names(["a", "b", "c"], 64);
        assert_ne!(pick_with(plain, &[20, 20, 20], &loads), Some(1), "precise_cache_aware ignores room");
        let unknown = [occupied(None, 2), occupied(Some(0.1), 3), occupied(None, 1)];
        assert_eq!(pick_with(room(), &[20, 20, 20], &unknown), Some(2), "unknown room: the lighter");
    }

    #[test]
    fn without_scores_or_hits_the_approximate_strategy_decides() {
        let none = pick(None, &[], &[0, 1, 2]);
        let zeros = pick(Some(&[0, 0, 0]), &[], &[0, 1, 2]);
        assert!(none.is_some());
        assert_eq!(none, zeros, "the same home target either way");
        assert_eq!(pick(Some(&[]), &[], &[]), None);
    }
}
