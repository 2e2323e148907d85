//! `pipeline`: score every eligible target with a few independent scorers, add the scores with
//! their [`PipelineWeights`] and take the highest (ties broken at random). Each scorer gives a
//! value in 0..=1:
//!
//! - session: 1 for the target that last served this `x-session-id`, else 0. The table of
//!   sessions is bounded ([`DEFAULT_SESSIONS`], least recently used dropped first) since the
//!   core has no clock to expire them by.
//! - weight: the target's weight over the largest weight.
//! - load: `1 / (1 + queue)`. Absolute rather than min-max, so one request of difference
//!   between two nearly idle targets does not outweigh every other scorer.
//! - prefix: the share of the request's prefix the target is known to hold ([`PrefixIndex`]).
//!
//! After the pick the session and the prefix are recorded for the chosen target, which may
//! allocate while those tables are below their bounds.

use super::hash::hash64;
use super::lru::Lru;
use super::prefix::{PrefixIndex, DEFAULT_MAX_NODES};
use super::simple::scan_best;
use super::{PickContext, Strategy};

/// Sessions remembered by default.
pub const DEFAULT_SESSIONS: usize = 4096;

/// Seed for session-table keys.
const SESSION_SEED: u64 = 0x5e55_1012;

/// How much each scorer counts. Negative values are treated as 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PipelineWeights {
    /// Stickiness of a session to the target that served it last.
    pub session: f64,
    /// Static target weight.
    pub weight: f64,
    /// Current queue.
    pub load: f64,
    /// Prefix-cache affinity.
    pub prefix: f64,
}

impl Default for PipelineWeights {
    /// Session 3, prefix 2, load 1, weight 1: a session stays put, a full prefix hit beats any
    /// load difference, and weights steer traffic among otherwise equal targets.
    fn default() -> Self {
        Self { session: 3.0, weight: 1.0, load: 1.0, prefix: 2.0 }
    }
}

/// Weighted sum of scorers, argmax.
pub struct Pipeline {
    scorer: PipelineWeights,
    /// Target weight over the largest weight, by target.
    weight: Vec<f64>,
    sessions: Lru<u32>,
    index: PrefixIndex,
    matched: Vec<u32>,
}

impl Pipeline {
    /// A pipeline over targets with these `weights`, scored with `scorer`.
    pub fn new(weights: Vec<u32>, scorer: PipelineWeights) -> Self {
        let max = weights.iter().copied().max().unwrap_or(1).max(1);
        let weight = weights.iter().map(|&w| f64::from(w) / f64::from(max)).collect();
        let clamp = |w: f64| if w > 0.0 { w } else { 0.0 };
        let scorer = PipelineWeights {
            session: clamp(scorer.session),
            weight: clamp(scorer.weight),
            load: clamp(scorer.load),
            prefix: clamp(scorer.prefix),
        };
        let matched = vec![0; weights.len()];
        Self {
            scorer,
            weight,
            sessions: Lru::new(DEFAULT_SESSIONS),
            index: PrefixIndex::new(DEFAULT_MAX_NODES),
            matched,
        }
    }

    /// Sessions currently pinned.
    pub fn sessions(&self) -> usize {
        self.sessions.len()
    }

    fn score(&self, ctx: &PickContext<'_>, pinned: Option<usize>, target: usize) -> f64 {
        let s = &self.scorer;
        let session = if pinned == Some(target) { 1.0 } else { 0.0 };
        let weight = self.weight.get(target).copied().unwrap_or(0.0);
        let load = 1.0 / (1.0 + ctx.queue(target) as f64);
        let len = ctx.prefix().len();
        let matched = self.matched.get(target).copied().unwrap_or(0);
        let prefix = if len == 0 { 0.0 } else { f64::from(matched) / len as f64 };
        s.session * session + s.weight * weight + s.load * load + s.prefix * prefix
    }
}

fn session_key(ctx: &PickContext<'_>) -> Option<u64> {
    ctx.session.filter(|s| !s.is_empty()).map(|s| hash64(SESSION_SEED, s.as_bytes()))
}

impl Strategy for Pipeline {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let prefix = ctx.prefix();
        self.index.match_lengths(prefix, &mut self.matched);
        let key = session_key(ctx);
        let pinned = key.and_then(|k| self.sessions.peek(k)).map(|&t| t as usize);
        let better = |a: usize, b: usize| self.score(ctx, pinned, a) > self.score(ctx, pinned, b);
        let chosen = scan_best(eligible, ctx.random, |_| true, better)?;
        if let (Some(k), Ok(t)) = (key, u32::try_from(chosen)) {
            self.sessions.insert(k, t);
        }
        self.index.insert(prefix, chosen);
        Some(chosen)
    }
}
