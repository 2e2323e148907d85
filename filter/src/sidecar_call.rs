//! The two things every sidecar feed of the filter does: decide which VM makes the due call
//! (a lease in shared data) and call the sidecar cluster with its authority and internal token.

use std::time::Duration;

use ferrogate_core::plugin::SidecarSettings;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, Status};

/// True when this VM takes the call due under `lease` (a shared-data key holding the next due
/// time, u64 ns little-endian): the due time has passed and the CAS that moves it `interval_ms`
/// ahead succeeded, so N worker VMs make one call per interval, not N.
pub(crate) fn claim_lease(lease: &str, now_ns: u64, interval_ms: u64) -> bool {
    let Ok((current, cas)) = hostcalls::get_shared_data(lease) else { return false };
    let due = current.and_then(|b| b.get(..8)?.try_into().ok()).map_or(0, u64::from_le_bytes);
    if now_ns < due {
        return false;
    }
    let next = now_ns.saturating_add(interval_ms.saturating_mul(1_000_000));
    hostcalls::set_shared_data(lease, Some(&next.to_le_bytes()), cas).is_ok()
}

/// Calls `method path` on the sidecar cluster with its authority, the internal bearer token
/// when there is one, and `extra` headers; returns the call's token.
pub(crate) fn call(
    sidecar: &SidecarSettings,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<u32, Status> {
    let auth = sidecar.internal_token.as_ref().map(|t| format!("Bearer {t}"));
    let mut headers = vec![(":method", method), (":path", path), (":authority", sidecar.authority.as_str())];
    headers.extend_from_slice(extra);
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_str()));
    }
    hostcalls::dispatch_http_call(&sidecar.cluster, headers, body, vec![], timeout)
}

/// The `:status` of the answer to the call being delivered (`None`: no answer, e.g. a
/// timeout or a reset), read from within `on_http_call_response`.
pub(crate) fn answer_status(num_headers: usize) -> Option<u16> {
    if num_headers == 0 {
        return None;
    }
    let value = hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status").ok().flatten()?;
    std::str::from_utf8(&value).ok()?.parse().ok()
}

/// The body of that answer when its status is 200 (only then is it read).
pub(crate) fn ok_body(status: Option<u16>, body_size: usize) -> Option<Vec<u8>> {
    if status != Some(200) {
        return None;
    }
    hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten()
}

/// Consecutive failed polls of a feed; the first of a run and every 60th after it are logged,
/// so an outage is reported without flooding the log.
#[derive(Debug, Default)]
pub(crate) struct Failures(u32);

impl Failures {
    /// Counts a failure of `feed`'s poll: `what` happened, `keeping` says what is used meanwhile.
    pub(crate) fn record(&mut self, feed: &str, what: &str, keeping: &str) {
        if self.0.is_multiple_of(60) {
            log::warn!("{feed} poll: {what} (failure {} in a row){keeping}", self.0 + 1);
        }
        self.0 = self.0.saturating_add(1);
    }

    /// A poll succeeded.
    pub(crate) fn reset(&mut self) {
        self.0 = 0;
    }
}
