//! `consistent_hash`: a hash ring with [`VNODES_PER_TARGET`] points per target, placed by the
//! target's name. A request's key is its session id, else its conversation digest (the whole
//! conversation, not the bounded prefix, so conversations sharing a long system prompt still
//! spread). Adding or removing a target moves only the keys whose nearest point changes, about
//! one in N; an ineligible owner hands its keys to the next eligible point clockwise, and they
//! come back when it returns.

use super::hash::{hash64, Eligible};
use super::{PickContext, Strategy};

/// Points on the ring per target: enough that shares stay within a few percent of even.
pub const VNODES_PER_TARGET: usize = 100;

/// Seed separating session keys from conversation digests.
const SESSION_SEED: u64 = 0x5e55_1011;

/// The ring: points sorted by position, each naming its target.
#[derive(Debug, Clone)]
pub struct ConsistentHash {
    ring: Vec<(u64, u32)>,
}

impl ConsistentHash {
    /// A ring over targets with these names, in target order.
    pub fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut ring = Vec::new();
        for (target, name) in names.into_iter().enumerate() {
            let Ok(target) = u32::try_from(target) else { break };
            let base = hash64(0, name.as_bytes());
            for vnode in 0..VNODES_PER_TARGET as u32 {
                ring.push((hash64(base, &vnode.to_le_bytes()), target));
            }
        }
        ring.sort_unstable();
        Self { ring }
    }

    /// Points on the ring (targets × [`VNODES_PER_TARGET`]).
    pub fn points(&self) -> usize {
        self.ring.len()
    }

    /// Points owned by `target`.
    pub fn points_of(&self, target: usize) -> usize {
        self.ring.iter().filter(|&&(_, t)| t as usize == target).count()
    }

    /// The key a request hashes to: its non-empty session id, else its conversation digest.
    pub fn key(ctx: &PickContext<'_>) -> u64 {
        match ctx.session {
            Some(s) if !s.is_empty() => hash64(SESSION_SEED, s.as_bytes()),
            _ => ctx.digest(),
        }
    }

    /// The first eligible target at or clockwise after `key`.
    pub fn owner(&self, key: u64, eligible: &[usize]) -> Option<usize> {
        let set = Eligible::new(eligible);
        let start = self.ring.partition_point(|&(point, _)| point < key);
        let walk = self.ring.iter().cycle().skip(start).take(self.ring.len());
        walk.map(|&(_, t)| t as usize).find(|&t| set.contains(t))
    }
}

impl Strategy for ConsistentHash {
    fn pick(&mut self, ctx: &PickContext<'_>, eligible: &[usize]) -> Option<usize> {
        self.owner(Self::key(ctx), eligible)
    }
}
