//! The targets feed from the sidecar: poll `GET /v1/targets` (health and engine load of every
//! provider endpoint, `ferrogate_core::targets`), share it with every worker VM, apply it to
//! the VM's balancers.
//!
//! Like the snapshot feed: one VM per [`INTERVAL_MS`] makes the call (a lease claimed with CAS
//! in shared data), asking with `If-None-Match` so an unchanged feed is a 304. A new body goes to
//! shared data ([`BODY`]) before its version ([`VERSION`]); every VM compares the version with
//! its own on each tick and re-parses the body only when it changed. While the sidecar is down
//! the last feed stays; its cooldowns expire on their own, so stale health fails open, and its
//! engine figures age out ([`crate::targets_age`]): past `targets_max_age_ms` they count as
//! unknown.

use std::cell::RefCell;
use std::time::Duration;

use ferrogate_core::plugin::SidecarSettings;
use ferrogate_core::targets::TargetFeed;
use proxy_wasm::hostcalls;

use crate::routing::RoutingCell;
use crate::sidecar_call;
use crate::targets_age::FeedAge;

/// How often the proxy asks for the feed.
pub(crate) const INTERVAL_MS: u64 = 1_000;
/// Shared-data key of the latest feed body.
pub(crate) const BODY: &str = "ferrogate.targets";
/// Shared-data key of the latest feed's version (u64 little-endian).
pub(crate) const VERSION: &str = "ferrogate.targets.version";
/// Shared-data key of the next poll's due time (u64 ns, little-endian).
const LEASE: &str = "ferrogate.targets.lease";
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// One VM's side of the feed.
#[derive(Debug, Default)]
pub(crate) struct TargetsFeed {
    version: Option<u64>,
    in_flight: Option<u32>,
    failures: sidecar_call::Failures,
    age: FeedAge,
}

impl TargetsFeed {
    /// Once per tick: adopt a newer shared feed and its age, then poll if this VM wins the lease.
    pub(crate) fn on_tick(&mut self, now_ns: u64, sidecar: &SidecarSettings, routing: &RefCell<RoutingCell>) {
        self.adopt_shared(routing);
        self.age.on_tick(now_ns / 1_000_000, sidecar.targets_max_age_ms, routing);
        if self.in_flight.is_none() && sidecar_call::claim_lease(LEASE, now_ns, INTERVAL_MS) {
            self.poll(sidecar);
        }
    }

    fn adopt_shared(&mut self, routing: &RefCell<RoutingCell>) {
        let Ok((Some(version), _)) = hostcalls::get_shared_data(VERSION) else { return };
        let version = version.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
        if version.is_none() || version == self.version {
            return;
        }
        let Ok((Some(body), _)) = hostcalls::get_shared_data(BODY) else { return };
        match TargetFeed::parse(&body) {
            Ok(feed) => self.install(feed, routing),
            Err(e) => log::warn!("shared targets feed unusable, keeping version {:?}: {e}", self.version),
        }
    }

    fn poll(&mut self, sidecar: &SidecarSettings) {
        let etag = self.version.map(|v| format!("\"{v}\""));
        let extra: &[(&str, &str)] = match &etag {
            Some(etag) => &[("if-none-match", etag.as_str())],
            None => &[],
        };
        match sidecar_call::call(sidecar, "GET", "/v1/targets", extra, None, CALL_TIMEOUT) {
            Ok(token) => self.in_flight = Some(token),
            Err(e) => self.failed(&format!("cannot call cluster {:?}: {e:?}", sidecar.cluster)),
        }
    }

    /// Whether `token` is this feed's call in flight.
    pub(crate) fn is_waiting_for(&self, token: u32) -> bool {
        self.in_flight == Some(token)
    }

    /// Handles a poll's answer.
    pub(crate) fn on_response(&mut self, status: Option<u16>, body: Option<Vec<u8>>, routing: &RefCell<RoutingCell>) {
        self.in_flight = None;
        match (status, body) {
            (Some(304), _) => {
                self.failures.reset();
                FeedAge::confirmed(crate::raw::now_nanos() / 1_000_000);
            }
            (Some(200), Some(body)) => match TargetFeed::parse(&body) {
                Ok(feed) => {
                    self.failures.reset();
                    FeedAge::confirmed(crate::raw::now_nanos() / 1_000_000);
                    let version = feed.version.to_le_bytes();
                    let shared = hostcalls::set_shared_data(BODY, Some(&body), None)
                        .and_then(|()| hostcalls::set_shared_data(VERSION, Some(&version), None));
                    if let Err(e) = shared {
                        log::warn!("targets feed {} not shared with other VMs: {e:?}", feed.version);
                    }
                    self.install(feed, routing);
                }
                Err(e) => self.failed(&format!("unreadable answer: {e}")),
            },
            (other, _) => self.failed(&format!("sidecar answered {other:?}")),
        }
    }

    fn install(&mut self, feed: TargetFeed, routing: &RefCell<RoutingCell>) {
        self.version = Some(feed.version);
        routing.borrow_mut().set_feed(feed);
    }

    fn failed(&mut self, what: &str) {
        self.failures.record("targets feed", what, "; keeping the last feed");
    }
}
