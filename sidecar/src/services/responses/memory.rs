//! The in-memory response store of the file configuration store: one map under a mutex,
//! bounded by the `responses:` retention.
//!
//! Entries are numbered in the order they are stored. Every entry has the same TTL, so that
//! order is also the order they expire in, and the oldest (the first) is what goes when the
//! store is over `max_entries`. Each key's bytes are counted; a key over `max_bytes_per_key`
//! loses its own oldest entries, never another key's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use ferrogate_core::config::Responses;

use super::Entry;

/// Stored responses in memory.
#[derive(Debug)]
pub struct MemoryStore {
    retention: Responses,
    inner: Mutex<Inner>,
    /// The conversations kept beside the responses.
    pub(super) conversations: super::conversations::MemoryConversations,
}

#[derive(Debug, Default)]
struct Inner {
    /// The next entry's number.
    next: u64,
    /// (owner, id) → number.
    index: HashMap<(String, String), u64>,
    /// number → (owner, entry), oldest first.
    entries: BTreeMap<u64, (String, Entry)>,
    /// What each owner keeps.
    owners: HashMap<String, Owned>,
}

/// One owner's entries (their numbers, oldest first) and their bytes.
#[derive(Debug, Default)]
struct Owned {
    numbers: BTreeSet<u64>,
    bytes: u64,
}

impl MemoryStore {
    /// An empty store keeping `retention`.
    pub fn new(retention: Responses) -> MemoryStore {
        MemoryStore { retention, inner: Mutex::new(Inner::default()), conversations: Default::default() }
    }

    /// The retention kept.
    pub fn retention(&self) -> Responses {
        self.retention
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than losing the store: keep serving.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// See [`super::ResponseStore::put`].
    pub fn put(&self, owner: &str, entry: Entry) -> bool {
        let mut inner = self.lock();
        inner.remove(owner, &entry.id);
        let size = entry.bytes();
        if size > self.retention.max_bytes_per_key {
            return false;
        }
        let n = inner.next;
        inner.next += 1;
        inner.index.insert((owner.to_string(), entry.id.clone()), n);
        inner.entries.insert(n, (owner.to_string(), entry));
        let owned = inner.owners.entry(owner.to_string()).or_default();
        owned.numbers.insert(n);
        owned.bytes += size;
        loop {
            let over = inner.owners.get(owner).filter(|o| o.bytes > self.retention.max_bytes_per_key);
            let Some(oldest) = over.and_then(|o| o.numbers.first().copied()) else { break };
            inner.remove_number(oldest);
        }
        while inner.entries.len() as u64 > self.retention.max_entries {
            let Some(first) = inner.entries.keys().next().copied() else { break };
            inner.remove_number(first);
        }
        true
    }

    /// See [`super::ResponseStore::get`].
    pub fn get(&self, owner: &str, id: &str, now_ms: u64) -> Option<Entry> {
        self.get_in(&self.lock(), owner, id, now_ms).cloned()
    }

    fn get_in<'i>(&self, inner: &'i Inner, owner: &str, id: &str, now_ms: u64) -> Option<&'i Entry> {
        let n = inner.index.get(&(owner.to_string(), id.to_string()))?;
        let (_, entry) = inner.entries.get(n)?;
        (entry.expires_ms > now_ms).then_some(entry)
    }

    /// See [`super::ResponseStore::delete`].
    pub fn delete(&self, owner: &str, id: &str, now_ms: u64) -> bool {
        let mut inner = self.lock();
        // An expired entry is gone for the caller; the sweep frees it (as in Postgres).
        if self.get_in(&inner, owner, id, now_ms).is_none() {
            return false;
        }
        inner.remove(owner, id).is_some()
    }

    /// See [`super::ResponseStore::sweep`].
    pub fn sweep(&self, now_ms: u64) -> u64 {
        let mut inner = self.lock();
        let expired: Vec<u64> =
            inner.entries.iter().take_while(|(_, (_, e))| e.expires_ms <= now_ms).map(|(n, _)| *n).collect();
        for n in &expired {
            inner.remove_number(*n);
        }
        expired.len() as u64
    }

    /// How many entries are kept (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Inner {
    fn remove(&mut self, owner: &str, id: &str) -> Option<Entry> {
        let n = *self.index.get(&(owner.to_string(), id.to_string()))?;
        self.remove_number(n)
    }

    fn remove_number(&mut self, n: u64) -> Option<Entry> {
        let (owner, entry) = self.entries.remove(&n)?;
        self.index.remove(&(owner.clone(), entry.id.clone()));
        if let Some(owned) = self.owners.get_mut(&owner) {
            owned.numbers.remove(&n);
            owned.bytes = owned.bytes.saturating_sub(entry.bytes());
            if owned.numbers.is_empty() {
                self.owners.remove(&owner);
            }
        }
        Some(entry)
    }
}
