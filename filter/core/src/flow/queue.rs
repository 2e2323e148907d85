//! The flow-control queue of one model.
//!
//! Service order: bands from the highest priority down; within a band, round-robin over the
//! fairness ids (keys) that have entries, starting after the one served last, each id's entries
//! oldest first (the first round takes every id's oldest, the second round every id's second,
//! and so on). An entry whose owner has not checked it for [`DEAD_MS`] is dropped (the proxy
//! restarted a VM, or the request ended without leaving), as is one past its deadline.
//!
//! An entry let go is *in transit* until its request holds its target (it is
//! [`confirm`](Queue::confirm)ed) or lost it to another request (it is
//! [`restore`](Queue::restore)d to its place, the band's turn with it): while in transit it
//! counts against the room the gate sees, so two worker VMs that read the in-flight counts at
//! the same moment cannot let two requests go for one free slot. Each entry names where its
//! owner is woken ([`Entry::waker`], [`Entry::ctx`]); the bytes are in [`super::wire`].

use std::collections::BTreeMap;

/// An entry not checked by its owner for this long is dropped. Owners check on every wake-up
/// and at least once per root tick (at most a second), so this leaves room for a slow machine.
pub const DEAD_MS: u64 = 10_000;
/// An entry in transit longer than this is dropped (its owner went away before confirming).
pub const TRANSIT_MS: u64 = 2_000;

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
    /// The shared queue that wakes its owner's VM (0: none; the owner checks on its ticks).
    pub waker: u32,
    /// Its owner's context id in that VM.
    pub ctx: u32,
}

/// Where a waiting request is woken: its VM's shared queue and its context there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Owner {
    /// The VM's wake-up queue token (0: none).
    pub waker: u32,
    /// The request's context id.
    pub ctx: u32,
}

/// An entry let go and not yet confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transit {
    /// The entry as it was queued.
    pub entry: Entry,
    /// Its band's turn before it was let go (restored with it).
    pub last: Option<u32>,
    /// When it is dropped if never confirmed (Unix ms).
    pub until_ms: u64,
}

/// A model's queue.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Queue {
    pub(super) next_seq: u64,
    /// Per band, the fairness id served last.
    pub(super) last: BTreeMap<i32, u32>,
    pub(super) entries: Vec<Entry>,
    pub(super) transit: Vec<Transit>,
}

impl Queue {
    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many were let go and have not yet confirmed their target.
    pub fn in_transit(&self) -> usize {
        self.transit.len()
    }

    /// The entries, in arrival order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// How many wait in band `band`.
    pub fn band_len(&self, band: i32) -> usize {
        self.entries.iter().filter(|e| e.band == band).count()
    }

    /// Drops entries past their deadline or not checked for [`DEAD_MS`], and transits past
    /// [`TRANSIT_MS`].
    pub fn prune(&mut self, now_ms: u64) {
        self.entries.retain(|e| now_ms < e.deadline_ms && now_ms < e.alive_ms.saturating_add(DEAD_MS));
        self.transit.retain(|t| now_ms < t.until_ms);
    }

    /// Adds an entry for a request woken at `owner`; returns its number.
    pub fn push(&mut self, band: i32, fair: u32, deadline_ms: u64, now_ms: u64, owner: Owner) -> u64 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let Owner { waker, ctx } = owner;
        self.entries.push(Entry { seq, band, fair, deadline_ms, alive_ms: now_ms, waker, ctx });
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

    /// Lets entry `seq` go at `now_ms`: it leaves the order, its band's round-robin moves past
    /// its id, and it stays in transit until [`confirm`](Self::confirm)ed or
    /// [`restore`](Self::restore)d.
    pub fn take(&mut self, seq: u64, now_ms: u64) -> Option<Entry> {
        let at = self.position(seq)?;
        let entry = self.entries.remove(at);
        let last = self.last.insert(entry.band, entry.fair);
        self.transit.push(Transit { entry, last, until_ms: now_ms.saturating_add(TRANSIT_MS) });
        Some(entry)
    }

    /// Entry `seq`'s request holds its target: it leaves transit. Returns who is next in
    /// line (to be woken: there may be room for it too).
    pub fn confirm(&mut self, seq: u64) -> Option<Entry> {
        self.transit.retain(|t| t.entry.seq != seq);
        self.head()
    }

    /// Entry `seq`'s request lost its target to another one: back from transit to where its
    /// number places it, and its band's turn back to what it was (unless another entry of the
    /// band was let go since). False when it is no longer in transit.
    pub fn restore(&mut self, seq: u64, now_ms: u64) -> bool {
        let Some(at) = self.transit.iter().position(|t| t.entry.seq == seq) else { return false };
        let t = self.transit.remove(at);
        let mut entry = t.entry;
        entry.alive_ms = now_ms;
        if self.last.get(&entry.band) == Some(&entry.fair) {
            match t.last {
                Some(l) => self.last.insert(entry.band, l),
                None => self.last.remove(&entry.band),
            };
        }
        let at = self.entries.iter().position(|e| e.seq > entry.seq).unwrap_or(self.entries.len());
        self.entries.insert(at, entry);
        true
    }

    /// The next entry in service order.
    pub fn head(&self) -> Option<Entry> {
        self.order().into_iter().next()
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
}
