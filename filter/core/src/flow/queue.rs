//! The flow-control queue of one model and its shared-data form.
//!
//! Service order: bands from the highest priority down; within a band, round-robin over the
//! fairness ids (keys) that have entries, starting after the one served last, each id's entries
//! oldest first (the first round takes every id's oldest, the second round every id's second,
//! and so on). An entry whose owner has not checked it for [`DEAD_MS`] is dropped (the proxy
//! restarted a VM, or the request ended without leaving), as is one past its deadline.
//!
//! Bytes (little-endian): version u32, next sequence u64, count of `(band, last served id)`
//! pairs u32 and the pairs (i32, u32), count of entries u32 and the entries (seq u64, band
//! i32, fair u32, deadline u64, last checked u64). Anything else decodes as an empty queue.

use std::collections::BTreeMap;

/// Layout version of the encoded queue.
pub const QUEUE_VERSION: u32 = 1;
/// An entry not checked by its owner for this long is dropped.
pub const DEAD_MS: u64 = 2_000;

/// One waiting request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its number, unique in the queue, in arrival order.
    pub seq: u64,
    /// Its priority band.
    pub band: i32,
    /// Its fairness id.
    pub fair: u32,
    /// When it expires (Unix ms).
    pub deadline_ms: u64,
    /// When its owner last checked it (Unix ms).
    pub alive_ms: u64,
}

/// A model's queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queue {
    next_seq: u64,
    /// Per band, the fairness id served last.
    last: BTreeMap<i32, u32>,
    entries: Vec<Entry>,
}

impl Queue {
    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in arrival order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// How many wait in band `band`.
    pub fn band_len(&self, band: i32) -> usize {
        self.entries.iter().filter(|e| e.band == band).count()
    }

    /// Drops entries past their deadline or not checked for [`DEAD_MS`].
    pub fn prune(&mut self, now_ms: u64) {
        self.entries.retain(|e| now_ms < e.deadline_ms && now_ms < e.alive_ms.saturating_add(DEAD_MS));
    }

    /// Adds an entry; returns its number.
    pub fn push(&mut self, band: i32, fair: u32, deadline_ms: u64, now_ms: u64) -> u64 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        self.entries.push(Entry { seq, band, fair, deadline_ms, alive_ms: now_ms });
        seq
    }

    /// Where entry `seq` is in arrival order.
    pub fn position(&self, seq: u64) -> Option<usize> {
        self.entries.iter().position(|e| e.seq == seq)
    }

    /// Marks entry `seq` as checked at `now_ms`.
    pub fn touch(&mut self, seq: u64, now_ms: u64) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.seq == seq) {
            e.alive_ms = now_ms;
        }
    }

    /// Removes entry `seq` as served: its band's round-robin moves past its id.
    pub fn take(&mut self, seq: u64) -> Option<Entry> {
        let at = self.position(seq)?;
        let e = self.entries.remove(at);
        self.last.insert(e.band, e.fair);
        Some(e)
    }

    /// Puts a served entry back where its number places it (its request lost its target to
    /// another one and must wait again, in the same place).
    pub fn restore(&mut self, entry: Entry) {
        if self.position(entry.seq).is_some() {
            return;
        }
        let at = self.entries.iter().position(|e| e.seq > entry.seq).unwrap_or(self.entries.len());
        self.entries.insert(at, entry);
    }

    /// Removes entry `seq` without serving it (its request left).
    pub fn remove(&mut self, seq: u64) -> Option<Entry> {
        let at = self.position(seq)?;
        Some(self.entries.remove(at))
    }

    /// Entry `seq`'s place in the service order (0: next).
    pub fn rank(&self, seq: u64) -> Option<usize> {
        self.order().iter().position(|e| e.seq == seq)
    }

    /// The entries in service order.
    pub fn order(&self) -> Vec<Entry> {
        let mut bands: Vec<i32> = self.entries.iter().map(|e| e.band).collect();
        bands.sort_unstable_by(|a, b| b.cmp(a));
        bands.dedup();
        let mut out = Vec::with_capacity(self.entries.len());
        for band in bands {
            self.band_order(band, &mut out);
        }
        out
    }

    fn band_order(&self, band: i32, out: &mut Vec<Entry>) {
        // Per fairness id, its entries oldest first (arrival order is `entries`' order).
        let mut ids: BTreeMap<u32, Vec<Entry>> = BTreeMap::new();
        for e in self.entries.iter().filter(|e| e.band == band) {
            ids.entry(e.fair).or_default().push(*e);
        }
        // Start after the id served last, wrapping around.
        let last = self.last.get(&band).copied();
        let mut cycle: Vec<&Vec<Entry>> =
            ids.range(last.map_or(0, |l| l.saturating_add(1))..).map(|(_, v)| v).collect();
        let wrapped = ids.range(..last.map_or(0, |l| l.saturating_add(1))).map(|(_, v)| v);
        cycle.extend(wrapped);
        let rounds = cycle.iter().map(|v| v.len()).max().unwrap_or(0);
        for round in 0..rounds {
            out.extend(cycle.iter().filter_map(|v| v.get(round)).copied());
        }
    }

    /// The shared-data form.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + self.last.len() * 8 + self.entries.len() * 32);
        out.extend_from_slice(&QUEUE_VERSION.to_le_bytes());
        out.extend_from_slice(&self.next_seq.to_le_bytes());
        out.extend_from_slice(&u32::try_from(self.last.len()).unwrap_or(0).to_le_bytes());
        for (band, fair) in &self.last {
            out.extend_from_slice(&band.to_le_bytes());
            out.extend_from_slice(&fair.to_le_bytes());
        }
        out.extend_from_slice(&u32::try_from(self.entries.len()).unwrap_or(0).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.seq.to_le_bytes());
            out.extend_from_slice(&e.band.to_le_bytes());
            out.extend_from_slice(&e.fair.to_le_bytes());
            out.extend_from_slice(&e.deadline_ms.to_le_bytes());
            out.extend_from_slice(&e.alive_ms.to_le_bytes());
        }
        out
    }

    /// Decodes the shared-data form; anything malformed is an empty queue.
    pub fn decode(bytes: &[u8]) -> Queue {
        decode(bytes).unwrap_or_default()
    }
}

/// Little-endian reader over a byte slice.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_at_checked(N)?;
        self.0 = rest;
        head.try_into().ok()
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take::<4>().map(i32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_le_bytes)
    }
}

fn decode(bytes: &[u8]) -> Option<Queue> {
    let mut r = Reader(bytes);
    if r.u32()? != QUEUE_VERSION {
        return None;
    }
    let next_seq = r.u64()?;
    let mut last = BTreeMap::new();
    for _ in 0..r.u32()? {
        last.insert(r.i32()?, r.u32()?);
    }
    let count = r.u32()? as usize;
    // Each entry is 32 bytes: a count the bytes cannot hold is malformed.
    if count > r.0.len() / 32 {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let (seq, band, fair, deadline_ms, alive_ms) = (r.u64()?, r.i32()?, r.u32()?, r.u64()?, r.u64()?);
        entries.push(Entry { seq, band, fair, deadline_ms, alive_ms });
    }
    r.0.is_empty().then_some(Queue { next_seq, last, entries })
}
