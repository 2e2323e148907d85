//! Pending stores: the vector a missed lookup computed, kept under an opaque ticket until the
//! filter brings the answer (`PUT /v1/cache/semantic/{ticket}`), so the turn is embedded once.
//!
//! Bounded in time ([`TICKET_TTL_MS`]) and count ([`MAX_TICKETS`], the oldest dropped first):
//! at most `MAX_TICKETS × (4·d + ~300 B)`, about 15 MB with 384-dimension vectors.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::signature::Signature;
use super::store::Partition;

/// How long a ticket waits for its answer, ms (longer than any upstream answer takes).
pub const TICKET_TTL_MS: u64 = 10 * 60 * 1000;
/// Tickets kept at most (misses in flight at once).
pub const MAX_TICKETS: usize = 8_192;

/// What a missed lookup leaves for its store call.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Where the answer will be stored.
    pub partition: Arc<Partition>,
    /// The turn's unit vector.
    pub vector: Box<[f32]>,
    /// SHA-256 of the turn.
    pub text_digest: [u8; 32],
    /// The turn's lexical signature.
    pub signature: Signature,
    /// The lookup's `ttl_secs`: the entry's lifetime when the store call names none.
    pub ttl_secs: u64,
}

#[derive(Default)]
struct Inner {
    by_id: HashMap<String, (u64, u64, Pending)>,
    /// Issue order → id: the oldest go first when full or expired.
    order: BTreeMap<u64, String>,
    next: u64,
}

/// The pending tickets.
#[derive(Default)]
pub struct Tickets {
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for Tickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tickets {{ pending: {} }}", self.len())
    }
}

impl Tickets {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `pending` and returns its new ticket (128 random bits, hex).
    pub fn issue(&self, pending: Pending, now_ms: u64) -> String {
        let id = hex::encode(rand::random::<[u8; 16]>());
        let mut inner = self.lock();
        inner.sweep(now_ms);
        while inner.by_id.len() >= MAX_TICKETS {
            if !inner.drop_oldest() {
                break;
            }
        }
        let seq = inner.next;
        inner.next += 1;
        inner.order.insert(seq, id.clone());
        inner.by_id.insert(id.clone(), (seq, now_ms, pending));
        id
    }

    /// Takes the ticket's pending store (once): `None` when unknown, used or expired.
    pub fn take(&self, ticket: &str, now_ms: u64) -> Option<Pending> {
        let mut inner = self.lock();
        let (seq, issued_ms, pending) = inner.by_id.remove(ticket)?;
        inner.order.remove(&seq);
        (issued_ms.saturating_add(TICKET_TTL_MS) > now_ms).then_some(pending)
    }

    /// Whether no ticket is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tickets held.
    pub fn len(&self) -> usize {
        self.lock().by_id.len()
    }
}

impl Inner {
    /// Drops the expired tickets (the oldest are first in `order`).
    fn sweep(&mut self, now_ms: u64) {
        while let Some((_, id)) = self.order.first_key_value() {
            let expired = self.by_id.get(id).is_none_or(|(_, at, _)| at.saturating_add(TICKET_TTL_MS) <= now_ms);
            if !expired || !self.drop_oldest() {
                break;
            }
        }
    }

    fn drop_oldest(&mut self) -> bool {
        let Some((_, id)) = self.order.pop_first() else { return false };
        self.by_id.remove(&id);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(scope: &str) -> Pending {
        let partition = Arc::new(Partition {
            scope: scope.into(),
            model: "m".into(),
            context: "c".into(),
            embedding_model: "e".into(),
        });
        let signature = Signature(0);
        Pending { partition, vector: vec![1.0].into_boxed_slice(), text_digest: [0; 32], signature, ttl_secs: 60 }
    }

    #[test]
    fn a_ticket_is_taken_once() {
        let t = Tickets::default();
        let id = t.issue(pending("global"), 1_000);
        assert_eq!(id.len(), 32);
        assert_eq!(t.take(&id, 2_000).unwrap().partition.scope, "global");
        assert!(t.take(&id, 2_000).is_none());
        assert!(t.take("nope", 2_000).is_none());
        assert_eq!(t.len(), 0);
    }

    #[test]
    fn tickets_expire() {
        let t = Tickets::default();
        let id = t.issue(pending("global"), 1_000);
        assert!(t.take(&id, 1_000 + TICKET_TTL_MS).is_none());
        // Expired ones are swept when the next is issued.
        t.issue(pending("a"), 0);
        t.issue(pending("b"), 1_000 + TICKET_TTL_MS);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn the_oldest_go_when_full() {
        let t = Tickets::default();
        let first = t.issue(pending("first"), 0);
        let second = t.issue(pending("second"), 0);
        for _ in 0..MAX_TICKETS - 1 {
            t.issue(pending("x"), 0);
        }
        assert_eq!(t.len(), MAX_TICKETS);
        assert!(t.take(&first, 0).is_none());
        assert!(t.take(&second, 0).is_some());
    }
}
