//! [`PrefixIndex`]: which targets recently served which conversation prefixes, approximately
//! and in bounded memory. It stands in for the engines' prefix caches: a target that served a
//! prefix probably still holds its KV blocks.
//!
//! The prefix is cut into [`BLOCK_BYTES`] blocks; a node is identified by the chained hash of
//! all blocks up to it, so the map of nodes is a trie whose edges are implicit (a node's key
//! depends on its parent's). Each node carries a bit per target (the first 64 targets) that
//! served a prefix through it. Nodes are evicted least-recently-used; every insertion refreshes
//! its path from the leaf up to the root, so a node is always more recent than its descendants:
//! eviction only ever removes leaves, and a shared system prompt survives as long as anything
//! under it is used.

use super::hash::hash64;
use super::lru::Lru;
use super::PREFIX_BYTES;

/// Granularity of prefix matching, in bytes.
pub const BLOCK_BYTES: usize = 64;

/// Default node bound: 32,768 nodes of about 50 bytes each (node plus map entry), ~1.6 MiB per
/// index, covering 2 MiB of distinct prefix text.
pub const DEFAULT_MAX_NODES: usize = 32_768;

/// The longest path one insertion can create; the bound never goes below twice that, so an
/// insertion cannot evict its own path.
const MAX_PATH: usize = PREFIX_BYTES.div_ceil(BLOCK_BYTES);

/// Key of the (implicit) root: the chain seed.
const ROOT: u64 = 0;

/// Targets tracked per node (one bit each).
pub(crate) const TRACKED_TARGETS: usize = 64;

struct Node {
    parent: u64,
    holders: u64,
}

/// Bounded approximate record of the prefixes each target served.
pub struct PrefixIndex {
    nodes: Lru<Node>,
}

impl PrefixIndex {
    /// An empty index holding at most `max_nodes` blocks (raised to twice the longest path).
    pub fn new(max_nodes: usize) -> Self {
        Self { nodes: Lru::new(max_nodes.max(2 * MAX_PATH)) }
    }

    /// Blocks currently held.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() == 0
    }

    /// Blocks evicted so far to stay within the bound.
    pub fn evictions(&self) -> u64 {
        self.nodes.evictions()
    }

    /// Writes into `out[t]` how many leading bytes of `prefix` target `t` is known to hold
    /// (whole blocks, plus the final partial block when it matched exactly). Targets beyond
    /// `out` or beyond the first 64 are skipped. Reads only: matching refreshes nothing.
    pub fn match_lengths(&self, prefix: &[u8], out: &mut [u32]) {
        out.fill(0);
        let mut key = ROOT;
        let mut end = 0usize;
        for block in bounded(prefix).chunks(BLOCK_BYTES) {
            key = hash64(key, block);
            let holders = match self.nodes.peek(key) {
                Some(node) if node.holders != 0 => node.holders,
                _ => break,
            };
            end += block.len();
            // Holders only shrink along a path, so the last write for a target is its depth.
            let mut bits = holders;
            while bits != 0 {
                let t = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(slot) = out.get_mut(t) {
                    *slot = end as u32;
                }
            }
        }
    }

    /// Records that `target` now holds `prefix`. May allocate while the index is below its
    /// bound; once full, new blocks reuse evicted ones.
    pub fn insert(&mut self, prefix: &[u8], target: usize) {
        if target >= TRACKED_TARGETS {
            return;
        }
        let bit = 1u64 << target;
        let mut key = ROOT;
        for block in bounded(prefix).chunks(BLOCK_BYTES) {
            let parent = key;
            key = hash64(parent, block);
            match self.nodes.peek_mut(key) {
                Some(node) => {
                    node.holders |= bit;
                    // Keep the path at the recent end while this walk may still evict.
                    self.nodes.touch(key);
                }
                None => {
                    self.nodes.insert(key, Node { parent, holders: bit });
                }
            }
        }
        // Refresh leaf first, root last: every node ends up more recent than its descendants.
        while key != ROOT {
            self.nodes.touch(key);
            key = self.nodes.peek(key).map_or(ROOT, |n| n.parent);
        }
    }
}

fn bounded(prefix: &[u8]) -> &[u8] {
    prefix.get(..PREFIX_BYTES).unwrap_or(prefix)
}
