//! How old the targets feed's engine figures are, proxy-wide.
//!
//! The VM that polls records the time of each answer confirming the feed (a 200 with a readable
//! body, or a 304) in shared data ([`CONFIRMED`]); every VM reads it on its tick and hands it,
//! with the plugin's `targets_max_age_ms`, to its balancers
//! (`ferrogate_core::targets::Freshness`): past the bound the figures count as unknown, so a
//! dead sidecar's last figures cannot keep saturated engines looking free.
//!
//! The gauge `ferrogate.targets_feed_stale` (1 while stale) follows a shared flag ([`STALE`]);
//! the VM whose compare-and-swap flips it logs the change and counts a turn to stale in
//! `ferrogate.targets_feed_stale_total`, so each change is reported once per proxy, not once
//! per worker VM.

use std::cell::RefCell;

use ferrogate_core::targets::Freshness;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

use crate::routing::RoutingCell;

/// Shared-data key: Unix ms of the sidecar's latest answer confirming the feed (u64 LE).
pub(crate) const CONFIRMED: &str = "ferrogate.targets.confirmed";
/// Shared-data key: one byte, 1 while the proxy reports the feed stale.
const STALE: &str = "ferrogate.targets.stale";

/// One VM's view of the feed's age.
#[derive(Debug, Default)]
pub(crate) struct FeedAge {
    /// Unix ms of this VM's first tick: before any answer, the figures (none) date from then.
    started_ms: Option<u64>,
    /// What the balancers were last given.
    applied: Option<Freshness>,
    /// Metric ids: the gauge, the counter of turns to stale.
    ids: Option<(u32, u32)>,
}

impl FeedAge {
    /// Records that the sidecar confirmed the feed at `now_ms` (the polling VM).
    pub(crate) fn confirmed(now_ms: u64) {
        if let Err(e) = hostcalls::set_shared_data(CONFIRMED, Some(&now_ms.to_le_bytes()), None) {
            log::warn!("targets feed confirmation not shared with other VMs: {e:?}");
        }
    }

    /// Once per tick: hand the figures' age to the balancers, report a change of staleness.
    pub(crate) fn on_tick(&mut self, now_ms: u64, max_age_ms: u64, routing: &RefCell<RoutingCell>) {
        let started_ms = *self.started_ms.get_or_insert(now_ms);
        let confirmed = match hostcalls::get_shared_data(CONFIRMED) {
            Ok((Some(b), _)) => b.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes),
            _ => None,
        };
        let freshness = Freshness { confirmed_ms: confirmed.unwrap_or(started_ms), max_age_ms };
        if self.applied != Some(freshness) {
            routing.borrow_mut().set_freshness(freshness);
            self.applied = Some(freshness);
        }
        let stale = freshness.stale(now_ms);
        // Worded only when a change is logged, not on every tick.
        let why = || match confirmed {
            Some(at) => format!("the sidecar last confirmed it {} ms ago", now_ms.saturating_sub(at)),
            None => format!("no answer from the sidecar in {} ms", now_ms.saturating_sub(started_ms)),
        };
        let shown = self.report(stale, why, max_age_ms);
        if let Some((gauge, _)) = self.ids() {
            // Every VM sets the gauge from the shared flag each tick: one that missed a change
            // (it read the flag just before another VM flipped it) is right again a tick later.
            let _ = hostcalls::record_metric(gauge, u64::from(shown));
        }
    }

    /// Flips the shared flag to `stale` when it says otherwise, logging and counting the change
    /// when this VM's swap wins; returns the flag as it now stands.
    fn report(&mut self, stale: bool, why: impl FnOnce() -> String, max_age_ms: u64) -> bool {
        let Ok((flag, cas)) = hostcalls::get_shared_data(STALE) else { return false };
        let shown = flag.as_deref() == Some(&[1]);
        if shown == stale || hostcalls::set_shared_data(STALE, Some(&[u8::from(stale)]), cas).is_err() {
            return shown; // No change, or another VM's swap came first (and reports it).
        }
        if stale {
            log::warn!(
                "targets feed stale: {} (bound {max_age_ms} ms); engine figures count as unknown \
                 (saturated for flow-control thresholds) until it answers",
                why()
            );
            if let Some((_, turns)) = self.ids() {
                let _ = hostcalls::increment_metric(turns, 1);
            }
        } else {
            log::info!("targets feed current again: the sidecar confirmed it; engine figures count again");
        }
        stale
    }

    /// The metric ids, defined on first use (so both series exist, at 0, from the first tick).
    fn ids(&mut self) -> Option<(u32, u32)> {
        if self.ids.is_none() {
            let gauge = hostcalls::define_metric(MetricType::Gauge, "ferrogate.targets_feed_stale").ok()?;
            let turns = hostcalls::define_metric(MetricType::Counter, "ferrogate.targets_feed_stale_total").ok()?;
            self.ids = Some((gauge, turns));
        }
        self.ids
    }
}
