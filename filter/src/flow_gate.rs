//! The flow-control queues in proxy-wasm shared data (`ferrogate_core::flow`): one entry per
//! model, `ferrogate.flow.<model>`, read and written with CAS so every worker VM of the proxy
//! shares one queue. A request that finds nobody waiting and room on the targets reads the
//! entry once and writes nothing.
//!
//! Wake-ups are pushed, never polled: every VM registers a shared queue of its own
//! ([`register_waker`]) and each entry names it; a slot released ([`wake_head`]) or taken by a
//! request let go ([`confirm`]) posts the waiting head's context id there, and the host calls
//! that VM's `on_queue_ready` (`crate::flow_wake`). No sidecar call is involved.

use ferrogate_core::flow::{self, Caller, Entry, Gate, Queue};
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;

/// CAS conflicts tolerated per update.
const RETRIES: usize = 32;
/// A CAS token no entry can have (see `crate::limits`).
const ABSENT: u32 = u32::MAX;

/// The shared-data key of `model`'s queue.
pub(crate) fn key(model: &str) -> String {
    format!("ferrogate.flow.{model}")
}

/// [`flow::gate`] on `model`'s shared queue. After too many conflicts a newcomer goes (the
/// in-flight bound still holds at the pick) and a waiting request keeps waiting.
pub(crate) fn gate(model: &str, me: Option<u64>, caller: Caller, limits: (u32, u64), free: u64, now_ms: u64) -> Gate {
    let key = key(model);
    let outcome = update(&key, |q| {
        let was_empty = q.is_empty();
        let gate = flow::gate(q, me, caller, limits, free, now_ms);
        // A newcomer that went straight through changed nothing worth writing.
        let write = !(gate == Gate::Go && me.is_none() && was_empty);
        (gate, write)
    });
    outcome.unwrap_or(match me {
        Some(seq) => Gate::Wait(seq),
        None => Gate::Go,
    })
}

/// Takes entry `seq` out of `model`'s queue without serving it (its request went away).
pub(crate) fn leave(model: &str, seq: u64) {
    let _ = update(&key(model), |q| (q.remove(seq).is_some(), true));
}

/// Puts entry `seq` back in its place (and its band's turn with it): its request was let go
/// but lost its target to another request in between.
pub(crate) fn restore(model: &str, seq: u64, now_ms: u64) {
    let _ = update(&key(model), |q| (q.restore(seq, now_ms), true));
}

/// Entry `seq`'s request holds its target (or left for good): it stops counting against the
/// room, and the next in line is woken, since there may be room for it too.
pub(crate) fn confirm(model: &str, seq: u64) {
    if let Some(Some(next)) = update(&key(model), |q| (q.confirm(seq), true)) {
        wake(&next);
    }
}

/// A slot of `model` was released: wake whoever is first in line (nothing is written; with
/// nobody waiting this is one shared-data read).
pub(crate) fn wake_head(model: &str) {
    if let Ok((Some(bytes), _)) = hostcalls::get_shared_data(&key(model)) {
        if let Some(head) = Queue::decode(&bytes).head() {
            wake(&head);
        }
    }
}

/// Posts `entry`'s context id to its VM's wake-up queue (an entry without one is checked on
/// its VM's ticks).
fn wake(entry: &Entry) {
    if entry.waker == 0 {
        return;
    }
    if let Err(e) = hostcalls::enqueue_shared_queue(entry.waker, Some(&entry.ctx.to_le_bytes())) {
        log::debug!("flow-control wake-up of context {} not posted: {e:?}", entry.ctx);
    }
}

/// Shared-data key of the number the next VM's wake-up queue takes.
const WAKERS: &str = "ferrogate.flow.wakers";

/// Registers this VM's wake-up queue, `ferrogate.flow.wake.<n>` with `n` claimed with CAS so
/// every VM has its own (registering a name again moves its notifications to the latest VM).
/// Returns its token, 0 when the host has none (waiting requests then check on ticks).
pub(crate) fn register_waker() -> u32 {
    for _ in 0..RETRIES {
        let Ok((bytes, cas)) = hostcalls::get_shared_data(WAKERS) else { return 0 };
        let n = bytes.as_deref().and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
        let token = if bytes.is_some() { cas } else { Some(ABSENT) };
        match hostcalls::set_shared_data(WAKERS, Some(&n.wrapping_add(1).to_le_bytes()), token) {
            Ok(()) => return hostcalls::register_shared_queue(&format!("ferrogate.flow.wake.{n}")).unwrap_or(0),
            Err(Status::CasMismatch) => continue,
            Err(_) => return 0,
        }
    }
    0
}

/// The number of requests waiting in each band of `model`'s queue, highest band first.
pub(crate) fn depths(model: &str) -> Vec<(i32, usize)> {
    let q = match hostcalls::get_shared_data(&key(model)) {
        Ok((Some(bytes), _)) => Queue::decode(&bytes),
        _ => return Vec::new(),
    };
    let mut out: Vec<(i32, usize)> = Vec::new();
    for e in q.entries() {
        match out.iter_mut().find(|(b, _)| *b == e.band) {
            Some((_, n)) => *n += 1,
            None => out.push((e.band, 1)),
        }
    }
    out.sort_unstable_by_key(|b| std::cmp::Reverse(b.0));
    out
}

/// Applies `f` to the queue at `key` and writes it back (when `f` says so) under CAS, retried
/// on conflicts; `None` when the host kept refusing.
fn update<T>(key: &str, mut f: impl FnMut(&mut Queue) -> (T, bool)) -> Option<T> {
    for _ in 0..RETRIES {
        let Ok((bytes, cas)) = hostcalls::get_shared_data(key) else { return None };
        let mut queue = bytes.as_deref().map(Queue::decode).unwrap_or_default();
        let (out, write) = f(&mut queue);
        if !write {
            return Some(out);
        }
        let token = if bytes.is_some() { cas } else { Some(ABSENT) };
        match hostcalls::set_shared_data(key, Some(&queue.encode()), token) {
            Ok(()) => return Some(out),
            Err(Status::CasMismatch) => continue,
            Err(e) => {
                log::warn!("flow-control queue {key} not updated: {e:?}");
                return None;
            }
        }
    }
    log::warn!("flow-control queue {key}: {RETRIES} concurrent updates in a row");
    None
}
