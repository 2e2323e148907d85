//! The cross-replica limits feed: other replicas' consumption, polled from the sidecar and
//! written into the `others` half of each shared-data counter (see
//! `ferrogate_core::limits::feed`).
//!
//! Only when the configuration has `redis:` (the sidecars share consumption through it) and
//! some limit. One VM per [`INTERVAL_MS`] makes the call, claimed with CAS like the snapshot
//! poll; it writes every counter it receives, so all VMs of the proxy see the same view. The
//! time of the last synced answer is kept in [`SYNCED`]: with `redis.fail_closed` a request
//! under limits is refused with 503 when it is older than [`STALE_MS`]; otherwise (fail-open)
//! the proxy keeps enforcing its own counts plus the last view, the gauge
//! `ferrogate.limits_synced` drops to 0 and one line is logged per change.

use std::time::Duration;

use ferrogate_core::limits::feed::Feed;
use ferrogate_core::limits::CounterStore;
use ferrogate_core::plugin::SidecarSettings;
use proxy_wasm::hostcalls;
use proxy_wasm::types::MetricType;

use crate::limits::SharedCounters;
use crate::sidecar_call;

/// How often the proxy asks for the global view.
pub(crate) const INTERVAL_MS: u64 = 250;
/// A view older than this is stale (`redis.fail_closed` then refuses).
pub(crate) const STALE_MS: u64 = 3_000;
/// Shared-data key: Unix ms of the last synced feed (u64 little-endian), then one byte: 1 when
/// that feed said admission takes from leases.
pub(crate) const SYNCED: &str = "ferrogate.limits.synced";
/// Shared-data key of the next poll's due time (u64 ns, little-endian).
const LEASE: &str = "ferrogate.limits.lease";
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// One VM's side of the feed.
#[derive(Debug, Default)]
pub(crate) struct LimitsFeed {
    in_flight: Option<u32>,
    /// Whether the last answer this VM handled was synced (for the log line on change).
    synced: Option<bool>,
    gauge: Option<u32>,
}

impl LimitsFeed {
    /// Once per tick: poll when this VM wins the lease.
    pub(crate) fn on_tick(&mut self, now_ns: u64, sidecar: &SidecarSettings) {
        if self.in_flight.is_some() || !sidecar_call::claim_lease(LEASE, now_ns, INTERVAL_MS) {
            return;
        }
        match sidecar_call::call(sidecar, "GET", "/v1/limits", &[], None, CALL_TIMEOUT) {
            Ok(token) => self.in_flight = Some(token),
            Err(e) => self.note_sync(false, &format!("cannot call cluster {:?}: {e:?}", sidecar.cluster)),
        }
    }

    /// Whether `token` is this feed's call.
    pub(crate) fn is_waiting_for(&self, token: u32) -> bool {
        self.in_flight == Some(token)
    }

    /// Applies an answer: every counter's `others` half, then the sync time.
    pub(crate) fn on_response(&mut self, status: Option<u16>, body: Option<&[u8]>, now_ms: u64) {
        self.in_flight = None;
        let feed = match (status, body) {
            (Some(200), Some(body)) => Feed::parse(body),
            (other, _) => return self.note_sync(false, &format!("sidecar answered {other:?}")),
        };
        let feed = match feed {
            Ok(feed) => feed,
            Err(e) => return self.note_sync(false, &format!("unreadable answer: {e}")),
        };
        for (counter, tally) in feed.tallies() {
            let _ = SharedCounters.update::<()>(counter, &mut |c| {
                c.others = tally;
                Ok(())
            });
        }
        if feed.synced {
            let mut value = [0u8; 9];
            value[..8].copy_from_slice(&now_ms.to_le_bytes());
            value[8] = u8::from(feed.leases);
            let _ = hostcalls::set_shared_data(SYNCED, Some(&value), None);
        }
        self.note_sync(feed.synced, "the sidecar cannot reach the shared store (Redis)");
    }

    /// Sets the gauge and logs when the state changed.
    fn note_sync(&mut self, synced: bool, why: &str) {
        if self.synced != Some(synced) {
            if synced {
                log::info!("cross-replica limits: in sync");
            } else {
                log::warn!("cross-replica limits: not in sync ({why}); enforcing this proxy's own counts and the last global view");
            }
        }
        self.synced = Some(synced);
        if self.gauge.is_none() {
            self.gauge = hostcalls::define_metric(MetricType::Gauge, "ferrogate.limits_synced").ok();
        }
        if let Some(id) = self.gauge {
            let _ = hostcalls::record_metric(id, u64::from(synced));
        }
    }
}

/// What admission needs of the cross-replica view at `now_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct View {
    /// Older than [`STALE_MS`], or never synced.
    pub(crate) stale: bool,
    /// The last synced feed said admission takes from leases.
    pub(crate) leases: bool,
}

/// The cross-replica view as of the last synced feed (one shared-data read).
pub(crate) fn view(now_ms: u64) -> View {
    let value = match hostcalls::get_shared_data(SYNCED) {
        Ok((Some(b), _)) => b,
        _ => Vec::new(),
    };
    let synced = value.get(..8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
    View { stale: now_ms.saturating_sub(synced) > STALE_MS, leases: value.get(8) == Some(&1) }
}
