//! Where usage records go after a stream ends: a shared queue, drained by one root context
//! per process and shipped to the sidecar in batches.
//!
//! Streams enqueue one JSON line each on the `ferrogate.usage` shared queue (no network hop on
//! the request path). Every VM registers the queue; the host notifies the last registrant,
//! so one root context per process consumes. It posts batches to the sidecar's
//! `POST /v1/usage` with `dispatch_http_call` — a full batch at once, anything else on the next
//! tick (1 s) — keeps unacknowledged records in a bounded buffer while the sidecar is away,
//! and retries on its tick. Without a sidecar the records
//! are written to the proxy's log instead.

use std::collections::VecDeque;
use std::time::Duration;

use ferrogate_core::plugin::SidecarSettings;
use proxy_wasm::hostcalls;
use proxy_wasm::types::Bytes;

/// Queue name, shared by every VM with the same `vm_id`.
pub(crate) const QUEUE: &str = "ferrogate.usage";
/// Records held while the sidecar is unreachable; beyond this the oldest are dropped.
const MAX_PENDING: usize = 10_000;
/// Records per POST.
const BATCH: usize = 500;
/// Callout timeout.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The consuming side of the usage queue (one per root context).
#[derive(Default)]
pub(crate) struct UsageSink {
    queue: Option<u32>,
    pending: VecDeque<Bytes>,
    /// Token and size of the batch being posted.
    in_flight: Option<(u32, usize)>,
    dropped: u64,
    /// Records announced by `on_queue_ready` since the last drain.
    announced: usize,
}

impl UsageSink {
    /// Registers (or re-registers, moving notifications to this VM) the queue.
    pub(crate) fn register(&mut self) -> Option<u32> {
        match hostcalls::register_shared_queue(QUEUE) {
            Ok(id) => self.queue = Some(id),
            Err(e) => log::error!("cannot register the usage queue: {e:?}"),
        }
        self.queue
    }

    /// One record was queued. Draining is batched: the queue is read once a batch has
    /// accumulated, or on the tick, instead of once per request.
    pub(crate) fn on_queue_ready(&mut self, sidecar: Option<&SidecarSettings>) {
        self.announced += 1;
        if self.announced >= BATCH {
            self.drain(sidecar);
        }
    }

    /// Moves queued records into the pending buffer and ships full batches.
    fn drain(&mut self, sidecar: Option<&SidecarSettings>) {
        self.announced = 0;
        let Some(queue) = self.queue else { return };
        while let Ok(Some(line)) = hostcalls::dequeue_shared_queue(queue) {
            if sidecar.is_none() {
                log::info!("usage {}", String::from_utf8_lossy(&line));
                continue;
            }
            if self.pending.len() == MAX_PENDING {
                self.pending.pop_front();
                self.dropped += 1;
            }
            self.pending.push_back(line);
        }
        if self.dropped > 0 {
            log::warn!("usage buffer full: {} records dropped while the sidecar was away", self.dropped);
            self.dropped = 0;
        }
        // Ship full batches at once; smaller ones wait for the tick, so a busy proxy makes
        // one sidecar call per batch or per second, not one per request.
        if self.pending.len() >= BATCH {
            self.send(sidecar);
        }
    }

    /// The periodic flush: whatever is pending goes out (and failed batches are retried).
    pub(crate) fn on_tick(&mut self, sidecar: Option<&SidecarSettings>) {
        self.drain(sidecar);
        self.send(sidecar);
    }

    /// Posts the next batch unless one is already in flight.
    pub(crate) fn send(&mut self, sidecar: Option<&SidecarSettings>) {
        let Some(sidecar) = sidecar else { return };
        if self.in_flight.is_some() || self.pending.is_empty() {
            return;
        }
        let n = self.pending.len().min(BATCH);
        let mut body = Vec::new();
        for line in self.pending.iter().take(n) {
            body.extend_from_slice(line);
            body.push(b'\n');
        }
        let auth = sidecar.internal_token.as_ref().map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            (":method", "POST"),
            (":path", "/v1/usage"),
            (":authority", sidecar.authority.as_str()),
            ("content-type", "application/x-ndjson"),
        ];
        if let Some(auth) = &auth {
            headers.push(("authorization", auth.as_str()));
        }
        match hostcalls::dispatch_http_call(&sidecar.cluster, headers, Some(&body), vec![], CALL_TIMEOUT) {
            Ok(token) => self.in_flight = Some((token, n)),
            Err(e) => log::warn!("usage: cannot reach sidecar cluster {:?}: {e:?}", sidecar.cluster),
        }
    }

    /// Whether a whole batch is pending (worth sending before the next tick).
    pub(crate) fn has_full_batch(&self) -> bool {
        self.pending.len() >= BATCH
    }

    /// Handles the sidecar's answer: acknowledged records leave the buffer. Returns false
    /// when the token was not ours.
    pub(crate) fn on_response(&mut self, token: u32, status: Option<u16>) -> bool {
        let Some((expected, n)) = self.in_flight else { return false };
        if expected != token {
            return false;
        }
        self.in_flight = None;
        match status {
            Some(s) if (200..300).contains(&s) => {
                self.pending.drain(..n.min(self.pending.len()));
            }
            other => log::warn!("usage: sidecar answered {other:?}; {} records kept for retry", self.pending.len()),
        }
        true
    }
}
