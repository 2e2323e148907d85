//! A bounded map from 64-bit hashes to values with least-recently-used eviction: the memory
//! bound behind the prefix index, the session table and the adapter residency tables.
//!
//! Entries live in one vector threaded by an intrusive doubly-linked list (head = least recent),
//! so touching and evicting are O(1) and, once full, inserting reuses the evicted slot instead
//! of allocating.

use std::collections::HashMap;

use super::hash::IdBuild;

/// No slot (list end).
const NIL: u32 = u32::MAX;

struct Slot<V> {
    key: u64,
    value: V,
    prev: u32,
    next: u32,
}

/// A map of at most `cap` entries; inserting into a full map evicts the least recent entry.
pub struct Lru<V> {
    map: HashMap<u64, u32, IdBuild>,
    slots: Vec<Slot<V>>,
    head: u32,
    tail: u32,
    cap: usize,
    evictions: u64,
    /// Slots emptied by [`Lru::remove`], reused before the vector grows.
    free: Vec<u32>,
}

impl<V> Lru<V> {
    /// An empty map holding at most `cap` entries (at least 1; slot numbers are `u32`).
    pub fn new(cap: usize) -> Self {
        let cap = cap.clamp(1, (NIL - 1) as usize);
        Self { map: HashMap::default(), slots: Vec::new(), head: NIL, tail: NIL, cap, evictions: 0, free: Vec::new() }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Entries evicted to make room, since it was made.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// The value under `key`, without refreshing it.
    pub fn peek(&self, key: u64) -> Option<&V> {
        let i = *self.map.get(&key)?;
        self.slots.get(i as usize).map(|s| &s.value)
    }

    /// The value under `key` for changing, without refreshing it.
    pub fn peek_mut(&mut self, key: u64) -> Option<&mut V> {
        let i = *self.map.get(&key)?;
        self.slots.get_mut(i as usize).map(|s| &mut s.value)
    }

    /// Marks `key` most recent; false when absent.
    pub fn touch(&mut self, key: u64) -> bool {
        match self.map.get(&key) {
            Some(&i) => {
                self.refresh(i);
                true
            }
            None => false,
        }
    }

    /// Stores `value` under `key` as the most recent entry. Returns the entry evicted to make
    /// room, if any. Allocates only while the map is below its bound.
    pub fn insert(&mut self, key: u64, value: V) -> Option<(u64, V)> {
        if let Some(&i) = self.map.get(&key) {
            if let Some(slot) = self.slots.get_mut(i as usize) {
                slot.value = value;
            }
            self.refresh(i);
            return None;
        }
        if let Some(i) = self.free.pop() {
            if let Some(slot) = self.slots.get_mut(i as usize) {
                *slot = Slot { key, value, prev: NIL, next: NIL };
                self.map.insert(key, i);
                self.link_tail(i);
                return None;
            }
        }
        if self.map.len() < self.cap {
            let i = self.slots.len() as u32;
            self.slots.push(Slot { key, value, prev: NIL, next: NIL });
            self.map.insert(key, i);
            self.link_tail(i);
            return None;
        }
        let i = self.head;
        self.unlink(i);
        let slot = self.slots.get_mut(i as usize)?;
        let old_key = std::mem::replace(&mut slot.key, key);
        let old_value = std::mem::replace(&mut slot.value, value);
        self.map.remove(&old_key);
        self.map.insert(key, i);
        self.link_tail(i);
        self.evictions += 1;
        Some((old_key, old_value))
    }

    /// Takes `key` out; its slot is reused by the next insertion.
    pub fn remove(&mut self, key: u64) -> bool {
        let Some(i) = self.map.remove(&key) else { return false };
        self.unlink(i);
        self.free.push(i);
        true
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &V)> {
        self.map.values().filter_map(|&i| self.slots.get(i as usize)).map(|s| (s.key, &s.value))
    }

    /// Calls `f` on every entry, in no particular order, without refreshing any.
    pub fn for_each_mut(&mut self, mut f: impl FnMut(u64, &mut V)) {
        for &i in self.map.values() {
            if let Some(s) = self.slots.get_mut(i as usize) {
                f(s.key, &mut s.value);
            }
        }
    }

    /// Keys from least to most recent (for tests and diagnostics).
    #[cfg(test)]
    pub(crate) fn keys(&self) -> Vec<u64> {
        let mut out = Vec::new();
        let mut i = self.head;
        while let Some(s) = self.slots.get(i as usize) {
            out.push(s.key);
            i = s.next;
        }
        out
    }

    fn refresh(&mut self, i: u32) {
        if self.tail != i {
            self.unlink(i);
            self.link_tail(i);
        }
    }

    fn unlink(&mut self, i: u32) {
        let Some((prev, next)) = self.slots.get(i as usize).map(|s| (s.prev, s.next)) else { return };
        match self.slots.get_mut(prev as usize) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match self.slots.get_mut(next as usize) {
            Some(n) => n.prev = prev,
            None => self.tail = prev,
        }
    }

    fn link_tail(&mut self, i: u32) {
        let tail = self.tail;
        if let Some(s) = self.slots.get_mut(i as usize) {
            s.prev = tail;
            s.next = NIL;
        }
        match self.slots.get_mut(tail as usize) {
            Some(t) => t.next = i,
            None => self.head = i,
        }
        self.tail = i;
    }
}

#[cfg(test)]
mod remove_tests {
    use super::Lru;

    #[test]
    fn removed_slots_are_reused_and_order_kept() {
        let mut l = Lru::new(3);
        for k in 1..=3 {
            l.insert(k, k * 10);
        }
        assert!(l.remove(2));
        assert!(!l.remove(2));
        assert_eq!(l.keys(), [1, 3]);
        assert_eq!(l.insert(4, 40), None, "a freed slot, no eviction");
        assert_eq!(l.keys(), [1, 3, 4]);
        assert_eq!(l.insert(5, 50), Some((1, 10)), "full again: the least recent goes");
        let mut seen = Vec::new();
        l.for_each_mut(|k, v| {
            *v += 1;
            seen.push(k);
        });
        seen.sort_unstable();
        assert_eq!((seen, l.peek(4)), (vec![3, 4, 5], Some(&41)));
    }
}
