//! The VM's side of leases (`ferrogate_core::limits::lease`): the asks its requests produce
//! (top-ups ahead of need, give-backs, charges) wait here and go to the sidecar's
//! `POST /v1/limits/lease` on the root's tick, at most one call in flight per VM; the grants
//! that come back are added to the shared-data counters, where every VM of the proxy sees them.
//! A waiting request makes its own call (`http::lease_wait`) and applies its answer the same way.
//! Every counter an answer leaves holding a lease is noted in the VM's holdings; the root's tick
//! sweeps them ([`sweep`]), so an unused lease goes back at the first tick after its bucket
//! ends even when no request uses that counter again.

use std::cell::RefCell;
use std::time::Duration;

use ferrogate_core::limits::lease::{Ask, LeaseAnswer, LeaseRequest};
use ferrogate_core::limits::{window_of, CounterStore};
use ferrogate_core::plugin::SidecarSettings;

use crate::http::Shared;
use crate::limits::SharedCounters;
use crate::sidecar_call;

/// Path of the lease endpoint on the sidecar.
pub(crate) const PATH: &str = "/v1/limits/lease";
/// The most asks a VM keeps for the next call (beyond this, top-ups are dropped first; the
/// store's expiry covers a lost give-back).
const MAX_PENDING: usize = 1_024;
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// Adds `asks` to the VM's pending ones: adjustments to one counter's bucket are summed, a
/// top-up asked again is kept once.
pub(crate) fn queue(pending: &RefCell<Vec<Ask>>, asks: Vec<Ask>) {
    if asks.is_empty() {
        return;
    }
    let mut pending = pending.borrow_mut();
    for ask in asks {
        let same = |p: &Ask| p.counter == ask.counter && p.bucket == ask.bucket && (p.adjust == 0) == (ask.adjust == 0);
        if let Some(p) = pending.iter_mut().find(|p| same(p)) {
            p.adjust = p.adjust.saturating_add(ask.adjust);
        } else if pending.len() < MAX_PENDING {
            pending.push(ask);
        } else {
            log::debug!("lease asks: {MAX_PENDING} pending; {} dropped", ask.counter);
        }
    }
}

/// The body of a call carrying `asks`.
pub(crate) fn body(asks: Vec<Ask>) -> Vec<u8> {
    serde_json::to_vec(&LeaseRequest { asks }).unwrap_or_default()
}

/// Records an answer's holdings in the shared counters at `now_ms` (a lease it rolls queues
/// its give-back) and notes the counters for the sweep. Returns the answer (`None`: no usable
/// answer).
pub(crate) fn apply(status: Option<u16>, body: Option<&[u8]>, now_ms: u64, shared: &Shared) -> Option<LeaseAnswer> {
    let answer = match (status, body) {
        (Some(200), Some(body)) => LeaseAnswer::parse(body).ok()?,
        _ => return None,
    };
    let mut backs = Vec::new();
    let mut holdings = shared.lease_holdings.borrow_mut();
    for g in answer.grants.iter().filter(|g| g.held > 0) {
        let Some(window) = window_of(&g.counter) else { continue };
        let mut back = None;
        let _ = SharedCounters.update::<()>(&g.counter, &mut |c| {
            back = c.hold(window, now_ms, g.bucket, g.held);
            Ok(())
        });
        holdings.note(&g.counter, now_ms);
        if let Some((bucket, amount)) = back {
            let adjust = -i64::try_from(amount).unwrap_or(i64::MAX);
            backs.push(Ask { counter: g.counter.clone(), bucket, need: 0, adjust });
        }
    }
    queue(&shared.lease_asks, backs);
    Some(answer)
}

/// The root's tick: gives back the unused lease of every noted counter whose bucket ended by
/// `now_ms` (queued for this tick's call), whether or not a request uses it again.
pub(crate) fn sweep(now_ms: u64, shared: &Shared) {
    let mut backs = Vec::new();
    shared.lease_holdings.borrow_mut().sweep(now_ms, &mut SharedCounters, &mut backs);
    queue(&shared.lease_asks, backs);
}

/// The root's periodic call with the VM's pending asks.
#[derive(Debug, Default)]
pub(crate) struct LeaseFlush {
    in_flight: Option<(u32, Vec<Ask>)>,
}

impl LeaseFlush {
    /// Sends the pending asks, unless a call is already in flight.
    pub(crate) fn on_tick(&mut self, sidecar: &SidecarSettings, pending: &RefCell<Vec<Ask>>) {
        if self.in_flight.is_some() || pending.borrow().is_empty() {
            return;
        }
        let asks = std::mem::take(&mut *pending.borrow_mut());
        let headers = [("content-type", "application/json")];
        match sidecar_call::call(sidecar, "POST", PATH, &headers, Some(&body(asks.clone())), CALL_TIMEOUT) {
            Ok(token) => self.in_flight = Some((token, asks)),
            Err(e) => {
                log::debug!("lease asks not sent: {e:?}");
                keep_adjustments(pending, asks);
            }
        }
    }

    /// Whether `token` is this flush's call.
    pub(crate) fn is_waiting_for(&self, token: u32) -> bool {
        self.in_flight.as_ref().is_some_and(|(t, _)| *t == token)
    }

    /// Applies the answer; when the store was away the adjustments are kept for the next call
    /// (top-ups are asked again by the requests that need them).
    pub(crate) fn on_response(&mut self, status: Option<u16>, body: Option<&[u8]>, now_ms: u64, shared: &Shared) {
        let Some((_, asks)) = self.in_flight.take() else { return };
        if !apply(status, body, now_ms, shared).is_some_and(|a| a.synced) {
            keep_adjustments(&shared.lease_asks, asks);
        }
    }
}

fn keep_adjustments(pending: &RefCell<Vec<Ask>>, asks: Vec<Ask>) {
    queue(pending, asks.into_iter().filter(|a| a.adjust != 0).collect());
}
