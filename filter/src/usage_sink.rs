//! Where usage records go after a stream ends: a per-VM outbox, a shared queue drained by one
//! root context per process, and the sidecar, in batches at every step.
//!
//! A stream appends its record as one JSON line to its VM's [`Outbox`] (no hostcall, no
//! network hop on the request path). The outbox goes onto the `ferrogate.usage` shared queue
//! as one item once it holds [`OUTBOX_RECORDS`] records, and on every tick (1 s): one queue
//! post and one cross-thread notification per batch instead of per request. Every VM
//! registers the queue; the host notifies the last registrant, so one root context per process
//! consumes. It posts batches to the sidecar's `POST /v1/usage` with `dispatch_http_call` — a
//! full batch at once, anything else on the next tick — keeps unacknowledged records in a
//! bounded buffer while the sidecar is away, and retries on its tick, backing off up to 4 s
//! while it keeps failing (one log line when that starts, one when it ends). Without a sidecar the
//! records are written to the proxy's log instead. A VM that dies loses at most its outbox
//! (under a second of records).

use std::collections::VecDeque;
use std::time::Duration;

use ferrogate_core::backoff::Backoff;
use ferrogate_core::plugin::SidecarSettings;
use ferrogate_core::usage::RecordView;
use proxy_wasm::hostcalls;
use proxy_wasm::types::Bytes;

/// Queue name, shared by every VM with the same `vm_id`.
pub(crate) const QUEUE: &str = "ferrogate.usage";
/// Record bytes held while the sidecar is unreachable (about 13,000 records); beyond this the
/// oldest are dropped. Bytes, not records: counting lines would cost a scan of every batch.
const MAX_PENDING: usize = 4 << 20;
/// Bytes per POST (about 400 records).
const BATCH: usize = 128 << 10;
/// Records a VM's outbox collects before it becomes one queue item.
pub(crate) const OUTBOX_RECORDS: usize = 64;
/// Callout timeout.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The consuming side of the usage queue (one per root context).
#[derive(Default)]
pub(crate) struct UsageSink {
    queue: Option<u32>,
    /// Queue items (newline-terminated record lines) waiting for the sidecar, oldest first.
    pending: VecDeque<Chunk>,
    /// Bytes in `pending`.
    pending_bytes: usize,
    /// Token and number of chunks of the batch being posted.
    in_flight: Option<(u32, usize)>,
    dropped: usize,
    /// Paces retries while the sidecar fails.
    backoff: Backoff,
}

/// One queue item: a VM's outbox, kept whole (no per-record copy).
struct Chunk {
    lines: Bytes,
}

/// One VM's records not yet on the shared queue: newline-terminated JSON lines.
#[derive(Default)]
pub(crate) struct Outbox {
    lines: Vec<u8>,
    records: usize,
}

impl Outbox {
    /// Appends one record; returns true when the outbox is full and should be posted.
    pub(crate) fn push(&mut self, record: &RecordView<'_>) -> bool {
        record.write_json_line(&mut self.lines);
        self.records += 1;
        self.records >= OUTBOX_RECORDS
    }

    /// Posts everything collected as one item on the usage queue.
    pub(crate) fn post(&mut self, queue: u32) {
        if self.records == 0 {
            return;
        }
        if let Err(e) = hostcalls::enqueue_shared_queue(queue, Some(&self.lines)) {
            log::warn!("{} usage records not queued: {e:?}", self.records);
        }
        self.lines.clear();
        self.records = 0;
    }
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

    /// A batch of records was queued (by any VM): take it, ship full batches.
    pub(crate) fn on_queue_ready(&mut self, sidecar: Option<&SidecarSettings>) {
        self.drain(sidecar);
    }

    /// Moves queued records into the pending buffer and ships full batches.
    fn drain(&mut self, sidecar: Option<&SidecarSettings>) {
        let Some(queue) = self.queue else { return };
        while let Ok(Some(item)) = hostcalls::dequeue_shared_queue(queue) {
            self.keep(item, sidecar.is_some());
        }
        if self.dropped > 0 {
            log::warn!("usage buffer full: {} records dropped while the sidecar was away", self.dropped);
            self.dropped = 0;
        }
        // Ship full batches at once; smaller ones wait for the tick, so a busy proxy makes
        // one sidecar call per batch or per second, not one per request.
        if self.has_full_batch() {
            self.send(sidecar);
        }
    }

    /// Holds one queue item for the sidecar (or logs its records when there is none); past
    /// [`MAX_PENDING`] bytes the oldest items are dropped.
    fn keep(&mut self, mut lines: Bytes, to_sidecar: bool) {
        if !to_sidecar {
            for line in lines.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                log::info!("usage {}", String::from_utf8_lossy(line));
            }
            return;
        }
        if lines.last().is_some_and(|&b| b != b'\n') {
            lines.push(b'\n');
        }
        self.pending_bytes += lines.len();
        self.pending.push_back(Chunk { lines });
        // Never drop the batch in flight: its acknowledgement removes it by count.
        let keep_front = self.in_flight.map_or(0, |(_, n)| n);
        while self.pending_bytes > MAX_PENDING && self.pending.len() > keep_front + 1 {
            let Some(old) = self.pending.remove(keep_front) else { break };
            self.pending_bytes = self.pending_bytes.saturating_sub(old.lines.len());
            self.dropped += line_count(&old.lines);
        }
    }

    /// The periodic flush: whatever is pending goes out (and failed batches are retried).
    pub(crate) fn on_tick(&mut self, sidecar: Option<&SidecarSettings>) {
        self.drain(sidecar);
        if self.backoff.tick() {
            self.send(sidecar);
        }
    }

    /// Posts the next batch unless one is already in flight.
    pub(crate) fn send(&mut self, sidecar: Option<&SidecarSettings>) {
        let Some(sidecar) = sidecar else { return };
        if self.in_flight.is_some() || self.pending.is_empty() || !self.backoff.ready() {
            return;
        }
        // Whole chunks until the batch holds BATCH bytes (one chunk at least).
        let mut body = Vec::new();
        let mut n = 0;
        for chunk in &self.pending {
            if n > 0 && body.len() + chunk.lines.len() > BATCH {
                break;
            }
            body.extend_from_slice(&chunk.lines);
            n += 1;
        }
        let ndjson = [("content-type", "application/x-ndjson")];
        match crate::sidecar_call::call(sidecar, "POST", "/v1/usage", &ndjson, Some(&body), CALL_TIMEOUT) {
            Ok(token) => self.in_flight = Some((token, n)),
            Err(e) => {
                if self.backoff.failed() {
                    log::warn!(
                        "usage: cannot reach sidecar cluster {:?}: {e:?}; retrying with backoff",
                        sidecar.cluster
                    );
                }
            }
        }
    }

    /// Whether a whole batch is pending (worth sending before the next tick).
    pub(crate) fn has_full_batch(&self) -> bool {
        self.pending_bytes >= BATCH
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
                self.forget(n);
                if let Some(failures) = self.backoff.succeeded() {
                    log::info!("usage: the sidecar takes records again (after {failures} failed posts)");
                }
            }
            // The sidecar read the batch and refused it (400: a record it cannot parse, e.g.
            // after a version skew): sending it again would block every later record behind
            // it until the buffer overflows. 401, 408 and 429 are about the call, not the
            // batch, and are retried like outages.
            Some(s) if (400..500).contains(&s) && !matches!(s, 401 | 408 | 429) => {
                let records = self.pending.iter().take(n).map(|c| line_count(&c.lines)).sum::<usize>();
                log::error!("usage: sidecar refused a batch with {s}; {records} records dropped");
                self.forget(n);
            }
            other => {
                if self.backoff.failed() {
                    log::warn!(
                        "usage: sidecar answered {other:?}; {} bytes of records kept, retried with backoff until it takes them",
                        self.pending_bytes
                    );
                }
            }
        }
        true
    }

    /// Removes the first `n` chunks (the batch just answered).
    fn forget(&mut self, n: usize) {
        for chunk in self.pending.drain(..n.min(self.pending.len())) {
            self.pending_bytes = self.pending_bytes.saturating_sub(chunk.lines.len());
        }
    }
}

fn line_count(lines: &[u8]) -> usize {
    lines.iter().filter(|&&b| b == b'\n').count()
}
