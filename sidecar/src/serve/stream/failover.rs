//! Failover in `ferrogate serve`: an attempt that failed before anything reached the client is
//! replayed through a fresh filter stream, which routes it to a target not tried yet (then to
//! the model's fallbacks, translated for that target's dialect).
//!
//! The policy is `ferrogate_core::failover::decide` (retryable outcomes, attempt and time
//! budgets, `Retry-After` up to a cap); the filter says what it tried and whether anything is
//! left (`x-ferrogate-tried`, `x-ferrogate-failover`). The abandoned attempt's filter stream
//! sees the answer's head marked `x-ferrogate-abandoned` (its passive health counts it, it
//! writes no usage record) and is closed without reaching the client. The last attempt's
//! answer goes through the filter as any answer does, so the client gets it as the upstream
//! sent it (translated into the client's dialect where the filter translates).

use std::time::{Duration, Instant};

use ferrogate_core::failover::{self, Outcome, Progress, Step};
use ferrogate_host::{Headers, StreamInfo};
use http::Response;
use hyper::body::Incoming;

use super::super::headers::response_to_filter;
use super::super::upstream::{router_reply, UpstreamError};
use super::Driver;

/// Largest request body kept for replay; a larger one is sent once, without failover.
const REPLAY_LIMIT: usize = 16 << 20;

/// What a retry needs: the client's request as the filter first saw it, and the attempts so far.
pub(super) struct Replay {
    /// The client's request head, [`Headers::pack`]ed (one allocation per request, not one
    /// per header name and value: most requests are never replayed).
    headers: Vec<u8>,
    body: Vec<u8>,
    /// The body is whole in `body` (no trailers, within [`REPLAY_LIMIT`]).
    replayable: bool,
    info: StreamInfo,
    started: Instant,
    attempts: u32,
    /// From the last released request: its tried list and whether anything is left.
    tried: Option<Vec<u8>>,
    more: bool,
}

impl Replay {
    /// Keeps the client's request head; the host-only headers a client sent
    /// ([`ferrogate_core::headers::HOST_ONLY`]: failover's and the endpoint picker's) are
    /// dropped from `headers` first. Not `enabled`: nothing is kept and nothing replayed.
    pub(super) fn new(headers: &mut Headers, info: StreamInfo, enabled: bool) -> Replay {
        for name in ferrogate_core::headers::HOST_ONLY {
            headers.remove(name);
        }
        let (body, replayable, started) = (Vec::new(), enabled, Instant::now());
        // Without failover the head is never needed again: no copy.
        let kept = if enabled { headers.pack() } else { Vec::new() };
        Replay { headers: kept, body, replayable, info, started, attempts: 1, tried: None, more: false }
    }

    /// A request body chunk as the client sent it.
    pub(super) fn record(&mut self, data: &[u8]) {
        if self.replayable && self.body.len() + data.len() <= REPLAY_LIMIT {
            self.body.extend_from_slice(data);
        } else {
            self.replayable = false;
            self.body = Vec::new();
        }
    }

    /// The request had trailers: not replayed.
    pub(super) fn give_up(&mut self) {
        self.replayable = false;
        self.body = Vec::new();
    }

    /// Released request headers: notes the filter's failover headers and removes every
    /// internal one, so none goes upstream.
    pub(super) fn on_release(&mut self, headers: &mut Headers) {
        self.tried = headers.get(failover::TRIED_HEADER).map(<[u8]>::to_vec);
        self.more = headers.get(failover::FAILOVER_HEADER) == Some(b"more");
        for name in failover::INTERNAL_HEADERS {
            headers.remove(name);
        }
    }

    /// The next attempt's request head.
    fn next_headers(&mut self) -> Headers {
        self.attempts += 1;
        let mut headers = Headers::unpack(&self.headers).unwrap_or_default();
        headers.set(failover::ATTEMPT_HEADER, self.attempts.to_string());
        if let Some(tried) = self.tried.take() {
            headers.set(failover::TRIED_HEADER, tried);
        }
        self.more = false;
        headers
    }
}

type Answer = Result<Response<Incoming>, UpstreamError>;

impl Driver {
    /// Whether `answer` is replaced by another attempt (already started when true).
    pub(super) async fn try_failover(&mut self, answer: &Answer) -> bool {
        let (outcome, retry_after) = match answer {
            Ok(resp) => (Outcome::Status(resp.status().as_u16()), resp.headers().get(http::header::RETRY_AFTER)),
            Err(UpstreamError::Timeout) => (Outcome::Timeout, None),
            Err(UpstreamError::Connect(_)) => (Outcome::ConnectFailure, None),
            Err(_) => return false,
        };
        let r = &self.replay;
        let body_in = self.request_body.is_none() && self.request_eos_sent && r.replayable;
        let progress = Progress {
            attempts: r.attempts,
            elapsed_ms: u64::try_from(r.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            more: r.more,
            nothing_sent: self.head_tx.is_some() && body_in,
        };
        let Step::Retry { delay_ms } = failover::decide(outcome, progress, retry_after.map(|v| v.as_bytes())) else {
            return false;
        };
        tracing::info!(stream = self.id, ?outcome, attempt = r.attempts, delay_ms, "retrying on another target");
        self.abandon(answer);
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        self.next_attempt();
        true
    }

    /// Shows the failed answer's head to the attempt's filter stream, marked abandoned, and
    /// closes that stream; nothing of it reaches the client.
    fn abandon(&mut self, answer: &Answer) {
        let mut headers = match answer {
            Ok(resp) => response_to_filter(resp.status(), resp.headers()),
            Err(e) => router_reply(e).0,
        };
        headers.set(failover::ABANDONED_HEADER, "1");
        self.call(|vm, id| vm.response_headers(id, headers, true));
        let _ = self.vm.borrow_mut().take_events(self.id);
        self.vm.borrow_mut().finish_stream(self.id, false);
        self.worker.pump(&self.vm);
        self.upstream = None;
        self.upstream_body_tx = None;
        self.response_body = None;
        self.response_eos_sent = false;
    }

    /// Starts the next attempt: a fresh filter stream given the original request again.
    fn next_attempt(&mut self) {
        let waker = self.wake.clone();
        let info = self.replay.info.clone();
        self.id = self.vm.borrow_mut().create_stream(info, Some(Box::new(move || waker.notify_one())));
        let headers = self.replay.next_headers();
        let body = std::mem::take(&mut self.replay.body);
        let empty = body.is_empty();
        self.call(|vm, id| vm.request_headers(id, headers, empty));
        if !empty {
            self.call(|vm, id| vm.request_data(id, &body, true));
        }
        self.replay.body = body;
    }
}
