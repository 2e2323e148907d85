//! The prefix record every worker VM of one proxy shares, so `cache_aware` sends a
//! conversation where *any* VM last sent it (a per-VM [`super::PrefixIndex`] only knows its own
//! picks: a conversation the load guard moved on one VM would still go to its old target from
//! the others).
//!
//! The store is a [`PrefixTable`]: a bounded map of 64-bit keys to 64-bit values that the
//! gateway keeps in proxy-wasm shared data (tests use a `HashMap`). The request's prefix is cut
//! into [`CHECKPOINT_BYTES`] checkpoints; a checkpoint's key is the chained hash of every
//! [`BLOCK_BYTES`] block up to it (seeded per model layout, so models and snapshots never mix),
//! its value the slot that last served a prefix reaching that far.
//!
//! - Lookup: the deepest checkpoint present, found by binary search (a few reads, at most
//!   `log2(128) + 1`). It works because the checkpoints present form a prefix-closed set: a
//!   pick writes the checkpoints from the deepest one found to the end of its own prefix.
//!   A hole (a slot another key took over) only makes the answer shallower.
//! - Record: a pick that stays writes only the checkpoints beyond the deepest found (a new
//!   turn's growth, usually one to three); a pick that moves (load guard, dead target) also
//!   rewrites the deepest one, so every VM's next lookup lands on the new target.
//!
//! Writes are last-writer-wins without CAS: two VMs placing the same new prefix at once both
//! write, and the later one stands, which is what the engines will hold after both requests.

use std::fmt;

use super::hash::hash64;
use super::prefix::BLOCK_BYTES;
use super::PREFIX_BYTES;

/// Bytes between checkpoints: the granularity of cross-VM matching.
pub const CHECKPOINT_BYTES: usize = 256;

/// Blocks per checkpoint.
const CHECKPOINT_BLOCKS: usize = CHECKPOINT_BYTES / BLOCK_BYTES;

/// Checkpoints of the longest prefix looked at.
pub const MAX_CHECKPOINTS: usize = PREFIX_BYTES / CHECKPOINT_BYTES;

/// A bounded shared map from checkpoint keys to slots. Reads and writes go through `&self`:
/// the store lives outside the VM (shared data) or behind interior mutability.
pub trait PrefixTable: fmt::Debug {
    /// The value stored under `key`, if that key (not another one sharing its room) is there.
    fn get(&self, key: u64) -> Option<u64>;
    /// Stores `value` under `key`, replacing whatever held its room.
    fn put(&self, key: u64, value: u64);
}

/// A [`PrefixTable`] and the seed of one model's layout (its routing fingerprint).
#[derive(Debug, Clone, Copy)]
pub struct SharedPrefixes<'a> {
    /// The store.
    pub table: &'a dyn PrefixTable,
    /// Seeds the checkpoint chain, so two models (or two layouts of one) never share keys.
    pub seed: u64,
}

/// One request's checkpoints and what the lookup found; kept by the strategy between picks so
/// the key buffer is allocated once.
#[derive(Debug, Default)]
pub(crate) struct Checkpoints {
    keys: Vec<u64>,
    /// Deepest checkpoint found: its index and the slot stored there.
    hit: Option<(usize, u64)>,
}

impl Checkpoints {
    /// Computes the checkpoint keys of `prefix` and finds the deepest one recorded. Returns the
    /// slot stored there and how many leading bytes it covers.
    pub(crate) fn lookup(&mut self, shared: SharedPrefixes<'_>, prefix: &[u8]) -> Option<(usize, u32)> {
        self.keys.clear();
        self.hit = None;
        let mut key = shared.seed;
        let full = prefix.len().min(PREFIX_BYTES) / CHECKPOINT_BYTES * CHECKPOINT_BYTES;
        for (i, block) in prefix.get(..full).unwrap_or_default().chunks_exact(BLOCK_BYTES).enumerate() {
            key = hash64(key, block);
            if (i + 1) % CHECKPOINT_BLOCKS == 0 {
                self.keys.push(key);
            }
        }
        let (mut lo, mut hi) = (0, self.keys.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.keys.get(mid).and_then(|&k| shared.table.get(k)) {
                Some(slot) => {
                    self.hit = Some((mid, slot));
                    lo = mid + 1;
                }
                None => hi = mid,
            }
        }
        let (index, slot) = self.hit?;
        let bytes = u32::try_from((index + 1) * CHECKPOINT_BYTES).unwrap_or(u32::MAX);
        Some((usize::try_from(slot).ok()?, bytes))
    }

    /// Records that `slot` now holds the prefix of the last [`Checkpoints::lookup`].
    pub(crate) fn record(&self, shared: SharedPrefixes<'_>, slot: usize) {
        let from = match self.hit {
            Some((index, held)) if held == slot as u64 => index + 1,
            Some((index, _)) => index,
            None => 0,
        };
        for &key in self.keys.get(from..).unwrap_or_default() {
            shared.table.put(key, slot as u64);
        }
    }
}

/// A table counting its reads and writes.
#[cfg(test)]
#[derive(Debug, Default)]
pub(crate) struct MapTable {
    map: std::cell::RefCell<std::collections::HashMap<u64, u64>>,
    pub(crate) gets: std::cell::Cell<usize>,
    pub(crate) puts: std::cell::Cell<usize>,
}

#[cfg(test)]
impl PrefixTable for MapTable {
    fn get(&self, key: u64) -> Option<u64> {
        self.gets.set(self.gets.get() + 1);
        self.map.borrow().get(&key).copied()
    }
    fn put(&self, key: u64, value: u64) {
        self.puts.set(self.puts.get() + 1);
        self.map.borrow_mut().insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| b'a' + ((i * 7 + usize::from(seed) * 13) % 26) as u8).collect()
    }

    #[test]
    fn a_grown_prompt_finds_where_its_earlier_turn_went() {
        let table = MapTable::default();
        let shared = SharedPrefixes { table: &table, seed: 1 };
        let mut cp = Checkpoints::default();
        let turn1 = text(3000, 1);
        assert_eq!(cp.lookup(shared, &turn1), None);
        cp.record(shared, 2);
        assert_eq!(table.puts.get(), 3000 / CHECKPOINT_BYTES, "first placement writes every checkpoint");
        let mut turn2 = turn1.clone();
        turn2.extend(text(700, 9));
        table.gets.set(0);
        assert_eq!(cp.lookup(shared, &turn2), Some((2, 2816)));
        assert!(table.gets.get() <= 5, "binary search: {} reads", table.gets.get());
        table.puts.set(0);
        cp.record(shared, 2);
        assert_eq!(table.puts.get(), 3, "staying writes only the growth");
    }

    #[test]
    fn a_move_rewrites_the_deepest_checkpoint_and_other_models_never_match() {
        let table = MapTable::default();
        let (a, b) = (SharedPrefixes { table: &table, seed: 1 }, SharedPrefixes { table: &table, seed: 2 });
        let mut cp = Checkpoints::default();
        let prompt = text(2048, 3);
        cp.lookup(a, &prompt);
        cp.record(a, 0);
        assert_eq!(cp.lookup(b, &prompt), None, "another model's layout shares nothing");
        assert_eq!(cp.lookup(a, &prompt), Some((0, 2048)));
        table.puts.set(0);
        cp.record(a, 3);
        assert_eq!(table.puts.get(), 1);
        assert_eq!(cp.lookup(a, &prompt), Some((3, 2048)));
        // A shorter prompt sharing the opening still finds the older placement there.
        assert_eq!(cp.lookup(a, prompt.get(..1024).unwrap()), Some((0, 1024)));
    }

    #[test]
    fn prompts_shorter_than_a_checkpoint_and_huge_ones_are_bounded() {
        let table = MapTable::default();
        let shared = SharedPrefixes { table: &table, seed: 7 };
        let mut cp = Checkpoints::default();
        assert_eq!(cp.lookup(shared, &text(CHECKPOINT_BYTES - 1, 1)), None);
        cp.record(shared, 1);
        assert_eq!(table.puts.get(), 0);
        cp.lookup(shared, &text(PREFIX_BYTES * 3, 2));
        cp.record(shared, 1);
        assert_eq!(table.puts.get(), MAX_CHECKPOINTS);
    }
}
