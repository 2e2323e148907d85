//! `cache_aware`: send a conversation where its prefix was served before, so the engine reuses
//! the KV blocks it computed, unless that target is clearly busier than the rest.
//!
//! - The target whose recorded prefix covers the largest share of the request's prefix (first
//!   32 KiB) is warm when that share is at least [`MATCH_THRESHOLD`]; among equally warm
//!   targets the lightest wins.
//! - Load guard: the warm target is left for the least-loaded one only when it is more than
//!   [`BALANCE_ABS_THRESHOLD`] requests AND more than [`BALANCE_REL_THRESHOLD`] times ahead of
//!   it (both margins, after SGLang's router). With no load known affinity always stands.
//! - Without a warm target: the *home* of the prefix, when the strategy knows its targets' names
//!   ([`CacheAware::with_names`], as the gateway builds it): the owner of a hash of the
//!   prefix's first [`HOME_BYTES`] on a consistent-hash ring, subject to the same load guard.
//!   Every worker VM builds the same ring, so a conversation's first request on each VM goes
//!   where the other VMs sent it.
//! - Across worker VMs: with [`PickContext::shared`] (the gateway passes its shared-data table)
//!   the warm target is the one recorded at the deepest shared checkpoint
//!   ([`super::shared_prefix`]), so a conversation the load guard moved on one VM follows the
//!   move on every VM. The VM's own [`PrefixIndex`] answers when the shared record has nothing.
//!   Without names: the least-loaded target, or with no load known the least-warmed one
//!   (fewest prefixes recorded), so new conversations spread.
//! - Only eligible targets are matched, compared and chosen, so a dead replica's empty queue
//!   never attracts traffic. After the pick the prefix is recorded as held by the chosen target;
//!   that insertion may allocate while the [`PrefixIndex`] is below its bound.

use super::hash::hash64;
use super::prefix::PrefixIndex;
use super::ring::ConsistentHash;
use super::shared_prefix::Checkpoints;
use super::simple::{least_loaded_among, lighter, scan_best};
use super::{PickContext, Strategy};

/// Share of the request's prefix a target must already hold to be preferred.
pub const MATCH_THRESHOLD: f64 = 0.5;

/// The warm target is overloaded only when more than this many requests ahead of the least
/// loaded target...
pub const BALANCE_ABS_THRESHOLD: u64 = 2;

/// ...and more than this many times its load.
pub const BALANCE_REL_THRESHOLD: f64 = 1.5;

/// Bytes of the prefix that name its home target (a system prompt's opening).
pub const HOME_BYTES: usize = 256;

/// Seed separating home keys from the other hashes.
const HOME_SEED: u64 = 0x4f4d_4531;

/// Whether a warm target with queue `warm` should give way to one with queue `least`.
pub fn imbalanced(warm: u64, least: u64) -> bool {
    warm > least.saturating_add(BALANCE_ABS_THRESHOLD) && warm as f64 > least as f64 * BALANCE_REL_THRESHOLD
}

/// Approximate prefix-cache affinity with a load guard.
pub struct CacheAware {
    index: PrefixIndex,
    /// Per-target matched bytes of the current request (kept to avoid allocating per pick).
    matched: Vec<u32>,
    /// Per-target count of recorded prefixes.
    warmth: Vec<u64>,
    /// Where a prefix nobody holds goes, the same on every VM.
    home: Option<ConsistentHash>,
    /// The current request's shared checkpoints (kept to avoid allocating per pick).
    checkpoints: Checkpoints,
}

impl CacheAware {
    /// Affinity over `targets` targets, remembering at most `max_nodes` prefix blocks.
    pub fn new(targets: usize, max_nodes: usize) -> Self {
        Self {
            index: PrefixIndex::new(max_nodes),
            matched: vec![0; targets],
            warmth: vec![0; targets],
            home: None,
            checkpoints: Checkpoints::default(),
        }
    }

    /// The same, with a home ring over the targets' `names` for prefixes nobody holds yet.
    pub fn with_names<'a>(names: impl IntoIterator<Item = &'a str>, max_nodes: usize) -> Self {
        let ring = ConsistentHash::new(names);
        let targets = ring.points() / super::ring::VNODES_PER_TARGET;
        Self { home: Some(ring), ..Self::new(targets, max_nodes) }
    }

    /// The home of the request's prefix among `eligible` (with a ring).
    fn home(&self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let prefix = ctx.prefix();
        let opening = prefix.get(..HOME_BYTES.min(prefix.len())).unwrap_or_default();
        self.home.as_ref()?.owner(hash64(HOME_SEED, opening), eligible)
    }

    /// The prefix record.
    pub fn index(&self) -> &PrefixIndex {
        &self.index
    }

    /// The warm eligible target for this request, if any holds at least the threshold share:
    /// the shared record's when it has one, else the VM's own index's.
    pub fn warm(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let prefix = ctx.prefix();
        if let Some(shared) = ctx.shared {
            let found = self.checkpoints.lookup(shared, prefix);
            let warm = found.filter(|&(slot, bytes)| {
                eligible.contains(&slot) && f64::from(bytes) >= MATCH_THRESHOLD * prefix.len() as f64
            });
            if let Some((slot, _)) = warm {
                return Some(slot);
            }
        }
        self.index.match_lengths(prefix, &mut self.matched);
        let matched = |i: usize| self.matched.get(i).copied().unwrap_or(0);
        let best = eligible.iter().map(|&i| matched(i)).max().filter(|&m| m > 0)?;
        if f64::from(best) < MATCH_THRESHOLD * prefix.len() as f64 {
            return None;
        }
        scan_best(eligible, ctx.random, |i| matched(i) == best, |a, b| lighter(ctx, a, b))
    }

    /// Chooses without recording (the rules in the module docs).
    pub fn choose(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let warm = self.warm(ctx, eligible).or_else(|| self.home(ctx, eligible));
        if !ctx.has_load() {
            return warm.or_else(|| self.least_warmed(ctx, eligible));
        }
        let least = least_loaded_among(ctx, eligible)?;
        match warm {
            Some(w) if !imbalanced(ctx.queue(w), ctx.queue(least)) => Some(w),
            _ => Some(least),
        }
    }

    /// Records that `target` now holds the request's prefix.
    pub fn record(&mut self, ctx: &PickContext<'_>, target: usize) {
        self.index.insert(ctx.prefix(), target);
        if let Some(shared) = ctx.shared {
            self.checkpoints.record(shared, target);
        }
        if let Some(w) = self.warmth.get_mut(target) {
            *w += 1;
        }
    }

    fn least_warmed(&self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let warmth = |i: usize| self.warmth.get(i).copied().unwrap_or(0);
        scan_best(eligible, ctx.random, |_| true, |a, b| warmth(a) < warmth(b))
    }
}

impl Strategy for CacheAware {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        let chosen = self.choose(ctx, eligible)?;
        self.record(ctx, chosen);
        Some(chosen)
    }
}
