//! Process-wide shared data and shared queues (cpp-host `shared_data.cc`,
//! `shared_queue.cc`): one instance per [`crate::Runtime`], visible to every VM of it, like
//! one Envoy process. Data is keyed by `vm_id`; one global CAS counter starts at 1. Queues
//! notify the VM that registered them last.

use std::collections::{HashMap, VecDeque};

use rustc_hash::FxHashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Callback that wakes the driver of a VM when queue notifications arrive for it.
pub(crate) type QueueWaker = Arc<dyn Fn() + Send + Sync>;

/// Result of a CAS set, as the ABI reports it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SetOutcome {
    Stored,
    CasMismatch,
}

/// A queue's notification target: (VM uid, root context id).
type Target = (u64, u32);

struct Queue {
    items: VecDeque<Vec<u8>>,
    target: Target,
}

#[derive(Default)]
struct Notifier {
    pending: Vec<(u32, u32)>,
    waker: Option<QueueWaker>,
}

#[derive(Default)]
struct Inner {
    data: FxHashMap<String, FxHashMap<String, (Vec<u8>, u32)>>,
    last_cas: u32,
    queue_tokens: HashMap<(String, String), u32>,
    queues: HashMap<u32, Queue>,
    last_queue_token: u32,
    notifiers: HashMap<u64, Notifier>,
}

/// Process-wide shared data (keyed by vm_id, global CAS counter from 1) and shared queues.
#[derive(Default)]
pub struct Shared {
    inner: Mutex<Inner>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that
        // matters more than losing shared data, so keep serving.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Value and CAS of `key` in the `vm_id` namespace.
    pub fn get_shared_data(&self, vm_id: &str, key: &str) -> Option<(Vec<u8>, u32)> {
        self.lock().data.get(vm_id)?.get(key).cloned()
    }

    /// Envoy's CAS rules: `cas == 0` or an absent key store unconditionally; a present key
    /// with a different non-zero CAS is a mismatch; every store takes a fresh global CAS.
    pub(crate) fn set_shared_data(&self, vm_id: &str, key: &str, value: Vec<u8>, cas: u32) -> SetOutcome {
        let mut guard = self.lock();
        let inner = &mut *guard;
        let fresh = inner.last_cas.wrapping_add(1).max(1); // 0 means "no CAS" to the SDK
                                                           // Updating an existing entry (the common case: counters, feeds) allocates nothing.
        if let Some(entry) = inner.data.get_mut(vm_id).and_then(|m| m.get_mut(key)) {
            if cas != 0 && cas != entry.1 {
                return SetOutcome::CasMismatch;
            }
            *entry = (value, fresh);
        } else {
            inner.data.entry(vm_id.to_string()).or_default().insert(key.to_string(), (value, fresh));
        }
        inner.last_cas = fresh;
        SetOutcome::Stored
    }

    /// Number of items waiting in queue `name` of `vm_id`, if it was ever registered.
    pub fn queue_len(&self, vm_id: &str, name: &str) -> Option<usize> {
        let inner = self.lock();
        let token = inner.queue_tokens.get(&(vm_id.to_string(), name.to_string()))?;
        inner.queues.get(token).map(|q| q.items.len())
    }

    /// Takes the oldest item of queue `name` of `vm_id` from outside any VM (tests, or a host
    /// that consumes a queue itself). `None` when empty or never registered.
    pub fn take_from_queue(&self, vm_id: &str, name: &str) -> Option<Vec<u8>> {
        let mut inner = self.lock();
        let token = *inner.queue_tokens.get(&(vm_id.to_string(), name.to_string()))?;
        inner.queues.get_mut(&token)?.items.pop_front()
    }

    /// Registers (or re-registers) a queue; the caller becomes its notification target.
    pub(crate) fn register_queue(&self, vm_id: &str, name: &str, target: Target) -> u32 {
        let mut inner = self.lock();
        let key = (vm_id.to_string(), name.to_string());
        if let Some(token) = inner.queue_tokens.get(&key).copied() {
            if let Some(q) = inner.queues.get_mut(&token) {
                q.target = target;
            }
            return token;
        }
        inner.last_queue_token += 1;
        let token = inner.last_queue_token;
        inner.queue_tokens.insert(key, token);
        inner.queues.insert(token, Queue { items: VecDeque::new(), target });
        token
    }

    /// Token of a registered queue.
    pub(crate) fn resolve_queue(&self, vm_id: &str, name: &str) -> Option<u32> {
        self.lock().queue_tokens.get(&(vm_id.to_string(), name.to_string())).copied()
    }

    /// Appends an item and posts one `on_queue_ready` to the registrant; false = unknown token.
    pub(crate) fn enqueue(&self, token: u32, item: Vec<u8>) -> bool {
        let waker = {
            let mut inner = self.lock();
            let Some(queue) = inner.queues.get_mut(&token) else {
                return false;
            };
            queue.items.push_back(item);
            let (vm, root) = queue.target;
            // A target VM that is gone gets nothing (Envoy drops posts to dead threads).
            inner.notifiers.get_mut(&vm).and_then(|n| {
                n.pending.push((root, token));
                n.waker.clone()
            })
        };
        // Called without the lock: the waker may well look at the queue itself.
        if let Some(wake) = waker {
            wake();
        }
        true
    }

    /// Pops the oldest item: `Ok(None)` = empty, `Err(())` = unknown token.
    pub(crate) fn dequeue(&self, token: u32) -> Result<Option<Vec<u8>>, ()> {
        let mut inner = self.lock();
        let queue = inner.queues.get_mut(&token).ok_or(())?;
        Ok(queue.items.pop_front())
    }

    /// Makes a VM reachable for queue notifications.
    pub(crate) fn add_vm(&self, vm: u64) {
        self.lock().notifiers.entry(vm).or_default();
    }

    /// Forgets a VM (its pending notifications are dropped).
    pub(crate) fn remove_vm(&self, vm: u64) {
        self.lock().notifiers.remove(&vm);
    }

    /// Sets the callback run when a notification is posted to `vm`.
    pub(crate) fn set_waker(&self, vm: u64, waker: QueueWaker) {
        self.lock().notifiers.entry(vm).or_default().waker = Some(waker);
    }

    /// Takes the pending (root id, queue token) notifications of `vm`.
    pub(crate) fn take_notifications(&self, vm: u64) -> Vec<(u32, u32)> {
        self.lock().notifiers.get_mut(&vm).map(|n| std::mem::take(&mut n.pending)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cas_rules() {
        let s = Shared::default();
        // Absent key: stored whatever the CAS; first CAS is 1.
        assert_eq!(s.set_shared_data("vm", "k", b"a".to_vec(), 77), SetOutcome::Stored);
        assert_eq!(s.get_shared_data("vm", "k"), Some((b"a".to_vec(), 1)));
        // Stale CAS: mismatch, value unchanged.
        assert_eq!(s.set_shared_data("vm", "k", b"b".to_vec(), 5), SetOutcome::CasMismatch);
        assert_eq!(s.get_shared_data("vm", "k"), Some((b"a".to_vec(), 1)));
        // Matching CAS: stored with the next global CAS.
        assert_eq!(s.set_shared_data("vm", "k", b"c".to_vec(), 1), SetOutcome::Stored);
        assert_eq!(s.get_shared_data("vm", "k"), Some((b"c".to_vec(), 2)));
        // CAS 0: unconditional. The counter is global across keys and vm ids.
        assert_eq!(s.set_shared_data("other", "x", b"d".to_vec(), 0), SetOutcome::Stored);
        assert_eq!(s.set_shared_data("vm", "k", b"e".to_vec(), 0), SetOutcome::Stored);
        assert_eq!(s.get_shared_data("vm", "k"), Some((b"e".to_vec(), 4)));
        assert_eq!(s.get_shared_data("other", "k"), None);
    }

    #[test]
    fn queue_notifies_last_registrant() {
        let s = Shared::default();
        s.add_vm(1);
        s.add_vm(2);
        let t1 = s.register_queue("vm", "q", (1, 1));
        let t2 = s.register_queue("vm", "q", (2, 1));
        assert_eq!(t1, t2);
        assert!(s.enqueue(t1, b"x".to_vec()));
        assert!(s.take_notifications(1).is_empty());
        assert_eq!(s.take_notifications(2), vec![(1, t1)]);
        assert_eq!(s.queue_len("vm", "q"), Some(1));
        assert_eq!(s.dequeue(t1), Ok(Some(b"x".to_vec())));
        assert_eq!(s.dequeue(t1), Ok(None));
        assert_eq!(s.dequeue(99), Err(()));
        assert!(!s.enqueue(99, vec![]));
    }
}
