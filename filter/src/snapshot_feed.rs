//! The configuration feed from the sidecar: poll `GET /v1/snapshot`, share what arrives with
//! every worker VM, swap it in for new requests.
//!
//! One VM per poll interval makes the call: the due time lives in shared data
//! ([`LEASE`]) and is claimed with CAS, so N worker VMs do not make N calls. The poller asks
//! with `If-None-Match` (usually a 304); a new snapshot is validated once, then its body goes to
//! shared data ([`BODY`]) and its version to [`VERSION`] — in that order, so a VM that sees a
//! version can always read a body at least that new. Every VM compares [`VERSION`] with its own
//! on each tick (a few bytes) and parses the body only when it changed, so a new snapshot is in
//! use on every VM within one tick of its arrival. Requests already running keep the
//! configuration they started with.
//!
//! While the sidecar is down the last snapshot keeps serving (and, before the first one, the
//! inline configuration if there is one, else 503). Dropped rows the sidecar reports are logged
//! once per version per process (claimed in shared data, like the open-gateway warning).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use ferrogate_core::config::Config;
use ferrogate_core::plugin::SidecarSettings;
use ferrogate_core::snapshot::{Received, Snapshot};
use proxy_wasm::hostcalls;

use crate::sidecar_call;

/// Shared-data key of the latest snapshot body.
pub(crate) const BODY: &str = "ferrogate.snapshot";
/// Shared-data key of the latest snapshot's version.
pub(crate) const VERSION: &str = "ferrogate.snapshot.version";
/// Shared-data key of the next poll's due time (u64 nanoseconds, little-endian).
const LEASE: &str = "ferrogate.snapshot.lease";
/// Shared-data key of the last version whose problems were logged.
const LOGGED: &str = "ferrogate.snapshot.logged";
/// How long a poll may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// One VM's side of the feed.
#[derive(Debug, Default)]
pub(crate) struct SnapshotFeed {
    /// Version in use on this VM.
    version: Option<String>,
    /// Token of this VM's poll in flight.
    in_flight: Option<u32>,
    /// Failed polls in a row (logged on the first and then every 60th).
    failures: sidecar_call::Failures,
}

impl SnapshotFeed {
    /// Once per tick: adopt a newer shared snapshot, then poll if this VM wins the lease.
    pub(crate) fn on_tick(&mut self, now_ns: u64, sidecar: &SidecarSettings, active: &RefCell<Option<Rc<Config>>>) {
        self.adopt_shared(active);
        if self.in_flight.is_none() && sidecar_call::claim_lease(LEASE, now_ns, sidecar.poll_interval_ms) {
            self.poll(sidecar);
        }
    }

    /// The version of the snapshot this VM applies, once it has one.
    pub(crate) fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// Takes the shared snapshot when its version differs from this VM's.
    fn adopt_shared(&mut self, active: &RefCell<Option<Rc<Config>>>) {
        let Ok((Some(version), _)) = hostcalls::get_shared_data(VERSION) else { return };
        if self.version.as_deref().map(str::as_bytes) == Some(version.as_slice()) {
            return;
        }
        let Ok((Some(body), _)) = hostcalls::get_shared_data(BODY) else { return };
        match Snapshot::receive(&body) {
            Ok(doc) => self.install(doc, active),
            Err(e) => log::error!("shared snapshot unusable, keeping version {:?}: {e}", self.version),
        }
    }

    fn poll(&mut self, sidecar: &SidecarSettings) {
        let etag = self.version.as_ref().map(|v| format!("\"{v}\""));
        let extra: &[(&str, &str)] = match &etag {
            Some(etag) => &[("if-none-match", etag.as_str())],
            None => &[],
        };
        match sidecar_call::call(sidecar, "GET", "/v1/snapshot", extra, None, CALL_TIMEOUT) {
            Ok(token) => self.in_flight = Some(token),
            Err(e) => self.failed(&format!("cannot call cluster {:?}: {e:?}", sidecar.cluster)),
        }
    }

    /// Whether `token` is this feed's call in flight.
    pub(crate) fn is_waiting_for(&self, token: u32) -> bool {
        self.in_flight == Some(token)
    }

    /// Handles a poll's answer; false when `token` is not this feed's call.
    pub(crate) fn on_response(
        &mut self,
        token: u32,
        status: Option<u16>,
        body: Option<Vec<u8>>,
        active: &RefCell<Option<Rc<Config>>>,
    ) -> bool {
        if self.in_flight != Some(token) {
            return false;
        }
        self.in_flight = None;
        match (status, body) {
            (Some(304), _) => self.failures.reset(),
            (Some(200), Some(body)) => match Snapshot::receive(&body) {
                Ok(doc) => {
                    self.failures.reset();
                    // Body before version: whoever sees the version finds a body as new.
                    let shared = hostcalls::set_shared_data(BODY, Some(&body), None)
                        .and_then(|()| hostcalls::set_shared_data(VERSION, Some(doc.version.as_bytes()), None));
                    if let Err(e) = shared {
                        log::warn!("snapshot {} not shared with other VMs: {e:?}", doc.version);
                    }
                    self.install(doc, active);
                }
                Err(e) => self.failed(&format!("snapshot refused, keeping version {:?}: {e}", self.version)),
            },
            (other, _) => self.failed(&format!("sidecar answered {other:?}; keeping version {:?}", self.version)),
        }
        true
    }

    fn install(&mut self, doc: Received, active: &RefCell<Option<Rc<Config>>>) {
        if first_to_log(&doc.version) {
            log::info!(
                "configuration snapshot {}: {} models, {} keys",
                doc.version,
                doc.config.models.len(),
                doc.config.keys.len()
            );
            for p in &doc.problems {
                log::warn!("snapshot {}: {}: {}", doc.version, p.path, p.message);
            }
        }
        *active.borrow_mut() = Some(Rc::new(doc.config));
        self.version = Some(doc.version);
    }

    fn failed(&mut self, what: &str) {
        self.failures.record("snapshot", what, "");
    }
}

/// True for the one VM that logs a version's summary and problems.
fn first_to_log(version: &str) -> bool {
    match hostcalls::get_shared_data(LOGGED) {
        Ok((Some(v), _)) if v == version.as_bytes() => false,
        Ok((_, cas)) => hostcalls::set_shared_data(LOGGED, Some(version.as_bytes()), cas).is_ok(),
        Err(_) => true,
    }
}
