//! The shared-data form of a flow-control [`Queue`]: what every worker VM of the proxy reads
//! and writes (with CAS) under the model's key.
//!
//! Bytes (little-endian): version u32, next sequence u64; count u32 of `(band i32, last served
//! id u32)` pairs; count u32 of entries (seq u64, band i32, fair u32, deadline u64, last
//! checked u64, waker u32, ctx u32: 40 bytes); count u32 of transits (an entry's 40 bytes, a
//! flag u32 saying whether its band had a turn before, that turn u32, until u64: 56 bytes).
//! Anything else, including an older version, decodes as an empty queue.

use std::collections::BTreeMap;

use super::queue::{Entry, Queue, Transit};

/// Layout version of the encoded queue.
pub const QUEUE_VERSION: u32 = 2;
const ENTRY_BYTES: usize = 40;
const TRANSIT_BYTES: usize = ENTRY_BYTES + 16;

impl Queue {
    /// The shared-data form.
    pub fn encode(&self) -> Vec<u8> {
        let size = 24 + self.last.len() * 8 + self.entries.len() * ENTRY_BYTES + self.transit.len() * TRANSIT_BYTES;
        let mut out = Vec::with_capacity(size);
        out.extend_from_slice(&QUEUE_VERSION.to_le_bytes());
        out.extend_from_slice(&self.next_seq.to_le_bytes());
        out.extend_from_slice(&count(self.last.len()));
        for (band, fair) in &self.last {
            out.extend_from_slice(&band.to_le_bytes());
            out.extend_from_slice(&fair.to_le_bytes());
        }
        out.extend_from_slice(&count(self.entries.len()));
        for e in &self.entries {
            put_entry(&mut out, e);
        }
        out.extend_from_slice(&count(self.transit.len()));
        for t in &self.transit {
            put_entry(&mut out, &t.entry);
            out.extend_from_slice(&u32::from(t.last.is_some()).to_le_bytes());
            out.extend_from_slice(&t.last.unwrap_or(0).to_le_bytes());
            out.extend_from_slice(&t.until_ms.to_le_bytes());
        }
        out
    }

    /// Decodes the shared-data form; anything malformed is an empty queue.
    pub fn decode(bytes: &[u8]) -> Queue {
        decode(bytes).unwrap_or_default()
    }
}

fn count(n: usize) -> [u8; 4] {
    u32::try_from(n).unwrap_or(0).to_le_bytes()
}

fn put_entry(out: &mut Vec<u8>, e: &Entry) {
    out.extend_from_slice(&e.seq.to_le_bytes());
    out.extend_from_slice(&e.band.to_le_bytes());
    out.extend_from_slice(&e.fair.to_le_bytes());
    out.extend_from_slice(&e.deadline_ms.to_le_bytes());
    out.extend_from_slice(&e.alive_ms.to_le_bytes());
    out.extend_from_slice(&e.waker.to_le_bytes());
    out.extend_from_slice(&e.ctx.to_le_bytes());
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
    /// A count of items of `size` bytes each; one the remaining bytes cannot hold is malformed
    /// (so a forged count never makes a huge allocation).
    fn count(&mut self, size: usize) -> Option<usize> {
        let n = self.u32()? as usize;
        (n <= self.0.len() / size).then_some(n)
    }
    fn entry(&mut self) -> Option<Entry> {
        let (seq, band, fair, deadline_ms, alive_ms) =
            (self.u64()?, self.i32()?, self.u32()?, self.u64()?, self.u64()?);
        let (waker, ctx) = (self.u32()?, self.u32()?);
        Some(Entry { seq, band, fair, deadline_ms, alive_ms, waker, ctx })
    }
}

fn decode(bytes: &[u8]) -> Option<Queue> {
    let mut r = Reader(bytes);
    if r.u32()? != QUEUE_VERSION {
        return None;
    }
    let next_seq = r.u64()?;
    let mut last = BTreeMap::new();
    for _ in 0..r.count(8)? {
        last.insert(r.i32()?, r.u32()?);
    }
    let n = r.count(ENTRY_BYTES)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        entries.push(r.entry()?);
    }
    let n = r.count(TRANSIT_BYTES)?;
    let mut transit = Vec::with_capacity(n);
    for _ in 0..n {
        let entry = r.entry()?;
        let (has_last, turn, until_ms) = (r.u32()?, r.u32()?, r.u64()?);
        transit.push(Transit { entry, last: (has_last != 0).then_some(turn), until_ms });
    }
    r.0.is_empty().then_some(Queue { next_seq, last, entries, transit })
}
