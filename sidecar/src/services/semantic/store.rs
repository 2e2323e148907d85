//! The bounded, in-memory vector store behind the semantic cache: entries grouped by
//! [`Partition`], searched by brute-force cosine within one partition among the entries of
//! the asked turn's lexical [`Signature`], bounded in count and in bytes (expired entries go
//! first, then the least recently used, until both bounds hold).
//!
//! An entry's bytes ([`NewEntry::cost`]): its answer, its vector (4 B a dimension), the names of
//! its partition (counted on every entry, although entries of one partition share them) and
//! [`ENTRY_OVERHEAD`] of bookkeeping. The answer is copied on store, so an entry never keeps
//! alive a larger buffer its bytes were cut from.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;

use super::signature::Signature;
use super::vector::cosine;

/// Bytes counted for each entry besides its answer, vector and partition names: the entry's
/// record (ids, text digest, signature, times, pointers: ~130 B), its slots in the partition,
/// expiry and use indexes (~60 B), a partition of its own (map slot, list, shared record:
/// ~200 B, as most conversations have their own context digest), with allocator slack.
pub const ENTRY_OVERHEAD: u64 = 512;

/// The bounds a store call applies (read from the served configuration on each call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Entries held at most (`cache_store.semantic_max_entries`; 0 counts as 1).
    pub entries: usize,
    /// Bytes held at most, by [`NewEntry::cost`] (`cache_store.semantic_max_bytes`).
    pub bytes: u64,
}

/// A store refused: the entry alone costs more than the byte budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge {
    /// The entry's cost, bytes.
    pub cost: u64,
    /// The budget, bytes.
    pub budget: u64,
}

/// What a candidate must share with the request to be considered at all. No hit ever crosses
/// a partition: another scope, model, conversation context or embedding model never answers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Partition {
    /// `key:<name>`, `group:<name>` or `global`.
    pub scope: String,
    /// The public model the answer came from.
    pub model: String,
    /// Digest of the rest of the conversation (everything but the embedded turn).
    pub context: String,
    /// The model whose vectors these are (vectors of two models are not comparable).
    pub embedding_model: String,
}

/// An answer to store, with the vector of the turn that produced it.
#[derive(Debug, Clone)]
pub struct NewEntry {
    /// Where it may be found again.
    pub partition: Arc<Partition>,
    /// The turn's unit vector.
    pub vector: Box<[f32]>,
    /// SHA-256 of the turn: storing the same turn again replaces the entry.
    pub text_digest: [u8; 32],
    /// The turn's lexical signature: only turns of the same one are served this entry.
    pub signature: Signature,
    /// The opaque entry bytes.
    pub body: Bytes,
    /// Lifetime, ms.
    pub ttl_ms: u64,
}

impl Partition {
    /// Bytes of its names.
    fn name_bytes(&self) -> u64 {
        [&self.scope, &self.model, &self.context, &self.embedding_model].iter().map(|s| s.len() as u64).sum()
    }
}

impl NewEntry {
    /// The bytes it is counted for against the budget: answer + `4·d` of vector + its
    /// partition's names + [`ENTRY_OVERHEAD`].
    pub fn cost(&self) -> u64 {
        let vector = std::mem::size_of_val::<[f32]>(&self.vector) as u64;
        (self.body.len() as u64) + vector + self.partition.name_bytes() + ENTRY_OVERHEAD
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// The stored entry bytes.
    pub body: Bytes,
    /// Cosine similarity of the stored turn to the asked one.
    pub similarity: f32,
}

/// One lookup: where, what, and how close and fresh a candidate must be.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    /// The partition searched.
    pub partition: &'a Partition,
    /// The asked turn's unit vector.
    pub vector: &'a [f32],
    /// The asked turn's lexical signature: a candidate must have the same.
    pub signature: Signature,
    /// Least similarity served.
    pub threshold: f32,
    /// Oldest entry served, ms (the policy's TTL now, which may be shorter than when the entry
    /// was stored); `None`: the entry's own expiry only.
    pub max_age_ms: Option<u64>,
}

struct Entry {
    partition: Arc<Partition>,
    vector: Box<[f32]>,
    text_digest: [u8; 32],
    signature: Signature,
    body: Bytes,
    stored_ms: u64,
    expires_ms: u64,
    /// Its key in `Inner::by_use`.
    used: u64,
    /// Its bytes ([`NewEntry::cost`]), in `Inner::bytes`.
    cost: u64,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<u64, Entry>,
    /// Entry ids per partition: the candidates of a lookup.
    partitions: HashMap<Arc<Partition>, Vec<u64>>,
    /// `(expires_ms, id)`: the expired are evicted first.
    by_expiry: BTreeSet<(u64, u64)>,
    /// Use tick → id: the least recently used is evicted next.
    by_use: BTreeMap<u64, u64>,
    /// Sum of the entries' costs.
    bytes: u64,
    next_id: u64,
    tick: u64,
}

/// The semantic store (shared by every lookup and store call, and the admin purge).
#[derive(Default)]
pub struct SemanticStore {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for SemanticStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        write!(f, "SemanticStore {{ entries: {}, bytes: {} }}", inner.entries.len(), inner.bytes)
    }
}

impl SemanticStore {
    /// An empty store.
    pub fn new() -> SemanticStore {
        SemanticStore::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves at worst a stale index entry: keep serving.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Entries held (expired ones not yet evicted included).
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// Bytes held by [`NewEntry::cost`] (expired entries not yet evicted included).
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Whether the store holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most similar live entry of the query's partition at or above its threshold, among
    /// those of the query's signature; a hit counts as a use (it moves away from eviction).
    /// Expired candidates met are dropped.
    pub fn lookup(&self, q: Query<'_>, now_ms: u64) -> Option<Hit> {
        let mut inner = self.lock();
        let ids = inner.partitions.get(q.partition)?;
        let mut best: Option<(u64, f32)> = None;
        let mut expired = Vec::new();
        for id in ids {
            let Some(e) = inner.entries.get(id) else { continue };
            if e.expires_ms <= now_ms {
                expired.push(*id);
                continue;
            }
            if q.max_age_ms.is_some_and(|age| e.stored_ms.saturating_add(age) <= now_ms) || e.signature != q.signature {
                continue;
            }
            let Some(sim) = cosine(q.vector, &e.vector) else { continue };
            if sim >= q.threshold && best.is_none_or(|(_, b)| sim > b) {
                best = Some((*id, sim));
            }
        }
        for id in expired {
            inner.remove(id);
        }
        let (id, similarity) = best?;
        inner.touch(id);
        inner.entries.get(&id).map(|e| Hit { body: e.body.clone(), similarity })
    }

    /// Stores `entry` (replacing one of the same turn in its partition), first evicting until
    /// fewer than `limits.entries` remain and it fits in `limits.bytes`: expired entries, then
    /// the least recently used. An entry costing more than `limits.bytes` on its own is not
    /// stored (and nothing is evicted for it).
    pub fn insert(&self, mut entry: NewEntry, limits: Limits, now_ms: u64) -> Result<(), TooLarge> {
        let cost = entry.cost();
        if cost > limits.bytes {
            return Err(TooLarge { cost, budget: limits.bytes });
        }
        // Its own allocation: the request's bytes may be a slice of a larger read buffer.
        entry.body = Bytes::copy_from_slice(&entry.body);
        let mut inner = self.lock();
        let same = inner.partitions.get(&entry.partition).and_then(|ids| {
            ids.iter().copied().find(|id| inner.entries.get(id).is_some_and(|e| e.text_digest == entry.text_digest))
        });
        if let Some(id) = same {
            inner.remove(id);
        }
        while inner.entries.len() >= limits.entries.max(1) || inner.bytes.saturating_add(cost) > limits.bytes {
            if !inner.evict_one(now_ms) {
                break;
            }
        }
        inner.add(entry, cost, now_ms);
        Ok(())
    }

    /// Drops every entry of `scopes` (empty: every scope) for `model` (`None`: every model);
    /// returns how many.
    pub fn purge(&self, scopes: &[String], model: Option<&str>) -> usize {
        let mut inner = self.lock();
        let matches =
            |p: &Partition| (scopes.is_empty() || scopes.contains(&p.scope)) && model.is_none_or(|m| p.model == m);
        let doomed: Vec<Arc<Partition>> = inner.partitions.keys().filter(|p| matches(p)).cloned().collect();
        let mut purged = 0;
        for p in doomed {
            // The partition's list goes first, whole: removing its entries one by one from it
            // would cost a scan of the list each.
            for id in inner.partitions.remove(&p).unwrap_or_default() {
                purged += usize::from(inner.remove(id));
            }
        }
        purged
    }
}

impl Inner {
    fn add(&mut self, e: NewEntry, cost: u64, now_ms: u64) {
        let id = self.next_id;
        self.next_id += 1;
        self.tick += 1;
        let expires_ms = now_ms.saturating_add(e.ttl_ms);
        self.by_expiry.insert((expires_ms, id));
        self.by_use.insert(self.tick, id);
        self.partitions.entry(e.partition.clone()).or_default().push(id);
        let entry = Entry {
            partition: e.partition,
            vector: e.vector,
            text_digest: e.text_digest,
            signature: e.signature,
            body: e.body,
            stored_ms: now_ms,
            expires_ms,
            used: self.tick,
            cost,
        };
        self.bytes += cost;
        self.entries.insert(id, entry);
    }

    fn touch(&mut self, id: u64) {
        self.tick += 1;
        let tick = self.tick;
        if let Some(e) = self.entries.get_mut(&id) {
            self.by_use.remove(&e.used);
            e.used = tick;
            self.by_use.insert(tick, id);
        }
    }

    /// Evicts the soonest-expiring entry when it has expired, else the least recently used;
    /// false when empty.
    fn evict_one(&mut self, now_ms: u64) -> bool {
        let expired = self.by_expiry.first().filter(|(at, _)| *at <= now_ms).map(|(_, id)| *id);
        match expired.or_else(|| self.by_use.first_key_value().map(|(_, id)| *id)) {
            Some(id) => self.remove(id),
            None => false,
        }
    }

    fn remove(&mut self, id: u64) -> bool {
        let Some(e) = self.entries.remove(&id) else { return false };
        self.bytes -= e.cost;
        self.by_expiry.remove(&(e.expires_ms, id));
        self.by_use.remove(&e.used);
        if let Some(ids) = self.partitions.get_mut(&e.partition) {
            ids.retain(|x| *x != id);
            if ids.is_empty() {
                self.partitions.remove(&e.partition);
            }
        }
        true
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
