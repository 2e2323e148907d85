//! Hashing and small sets shared by the strategies: a fast, deterministic 64-bit hash (no
//! per-process seed, so every worker VM and every reload places keys identically), a pass-through
//! hasher for maps whose keys already are such hashes, and a stack-only eligibility set.

use std::hash::{BuildHasherDefault, Hasher};

const C1: u64 = 0x87c3_7b91_1142_53d5;
const C2: u64 = 0x4cf5_ad43_2745_937f;

/// Hashes `bytes` under `seed`: murmur3-style word mixing, then a full avalanche. Not keyed and
/// not meant to resist crafted collisions; it spreads keys and identifies prefix blocks.
pub fn hash64(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let w = u64::from_le_bytes(<[u8; 8]>::try_from(word).unwrap_or([0; 8]));
        h = step(h, w);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        // Little-endian fold of the last 1..=7 bytes; the length below tells `a` from `a\0`.
        let w = tail.iter().rev().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        h = step(h, w);
    }
    mix64(h ^ bytes.len() as u64)
}

pub(crate) fn step(h: u64, w: u64) -> u64 {
    let k = w.wrapping_mul(C1).rotate_left(31).wrapping_mul(C2);
    (h ^ k).rotate_left(27).wrapping_mul(5).wrapping_add(0x52dc_e729)
}

/// The murmur3 finalizer: every input bit affects every output bit.
pub(crate) fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A uniform index below `n` from a random `r` (multiply-shift, no modulo bias worth noting).
pub(crate) fn below(r: u64, n: usize) -> usize {
    ((u128::from(r) * n as u128) >> 64) as usize
}

/// Hasher for keys that are already well-mixed 64-bit hashes: uses them as they are.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = hash64(self.0, bytes);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Builds [`IdHasher`]s; deterministic, unlike `RandomState`.
pub(crate) type IdBuild = BuildHasherDefault<IdHasher>;

/// The eligible targets as a bit set for the first 128 indices, with the slice kept for any
/// beyond, so membership checks in loops cost a shift and allocate nothing.
pub(crate) struct Eligible<'a> {
    mask: u128,
    wide: &'a [usize],
}

impl<'a> Eligible<'a> {
    pub(crate) fn new(list: &'a [usize]) -> Self {
        let mut mask = 0u128;
        let mut wide = false;
        for &i in list {
            match u32::try_from(i).ok().and_then(|s| 1u128.checked_shl(s)) {
                Some(bit) => mask |= bit,
                None => wide = true,
            }
        }
        Self { mask, wide: if wide { list } else { &[] } }
    }

    pub(crate) fn contains(&self, i: usize) -> bool {
        match u32::try_from(i).ok().and_then(|s| 1u128.checked_shl(s)) {
            Some(bit) => self.mask & bit != 0,
            None => self.wide.contains(&i),
        }
    }
}
