//! One proxied request: the glue between hyper, the filter VM and the upstream.
//!
//! The driver plays the parts of Envoy's connection manager and router around the filter.
//! Inputs (client request frames, upstream response frames, wake-ups from callouts and ticks)
//! go into the VM; the VM's [`StreamEvent`]s say what the filter chain released, and the driver
//! carries that out: start the upstream request when headers are released (the route decision
//! point), forward body chunks, send the response head, stream the response body, reset.
//! Each send awaits room in a bounded channel, so a slow peer slows the other side down
//! instead of filling memory.

use std::convert::Infallible;
use std::rc::Rc;
use std::sync::Arc;

use ferrogate_host::{Headers, StreamEvent, StreamId};
use http::{Request, Response};
use hyper::body::Incoming;
use tokio::sync::{oneshot, Notify};
use tracing::{Instrument, Span};

use super::body::{BodySender, ChannelBody};
use super::headers::{response_to_filter, status_of, to_header_map};
use super::trace;
use super::upstream::UpstreamFuture;
use super::worker::{ConnInfo, VmRef, Worker};

mod deadline;
mod failover;
mod frames;
mod read;

use read::next_frame;

/// hyper service entry point: runs the driver on this worker and waits for the response head.
pub async fn handle(
    worker: Rc<Worker>,
    conn: Rc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ChannelBody>, super::body::BodyAborted> {
    if let Some(refusal) = super::head::refuse_oversized(&req) {
        return Ok(refusal);
    }
    let (head_tx, head_rx) = oneshot::channel();
    tokio::task::spawn_local(async move {
        let driver = Driver::start(worker, &conn, req, head_tx);
        // A disabled span (no trace export) makes `instrument` a no-op.
        let span = driver.span.clone();
        let _: Result<(), Infallible> = driver.run().instrument(span).await;
    });
    // A driver that ends without a head means the stream was reset: returning an error makes
    // hyper drop the connection (HTTP/1) or reset the stream (HTTP/2), as Envoy does.
    head_rx.await.map_err(|_| super::body::BodyAborted("stream reset".into()))
}

struct Driver {
    worker: Rc<Worker>,
    vm: VmRef,
    id: StreamId,
    wake: Arc<Notify>,
    head_tx: Option<oneshot::Sender<Response<ChannelBody>>>,
    request_body: Option<Incoming>,
    request_eos_sent: bool,
    /// When the client's request body counts as stalled (`--body-timeout-ms` after its last
    /// chunk; `None` without a limit).
    body_deadline: Option<tokio::time::Instant>,
    upstream_body_tx: Option<BodySender>,
    upstream: Option<UpstreamFuture>,
    response_body: Option<Incoming>,
    /// When the upstream's response body counts as stalled (`--upstream-idle-timeout-ms`
    /// after the driver last waited for it; `None` without a limit).
    response_deadline: Option<tokio::time::Instant>,
    response_eos_sent: bool,
    /// The upstream's answer is an event stream (it can be ended with a final event).
    response_is_stream: bool,
    /// The client has had response body bytes (until then frames are not joined, see
    /// `on_response_read`).
    client_body_started: bool,
    downstream_tx: Option<BodySender>,
    finished: bool,
    reset: bool,
    /// `ferrogate.request`, disabled unless traces are exported.
    span: Span,
    /// The request as sent, for another attempt ([`failover`]).
    replay: failover::Replay,
    /// The route timeout the filter asked for ([`deadline`]).
    route_timeout: Option<std::time::Duration>,
    /// When the answer must have ended, once the whole request went upstream.
    route_deadline: Option<tokio::time::Instant>,
}

impl Driver {
    fn start(
        worker: Rc<Worker>,
        conn: &ConnInfo,
        req: Request<Incoming>,
        head_tx: oneshot::Sender<Response<ChannelBody>>,
    ) -> Driver {
        let vm = worker.vm();
        let wake = Arc::new(Notify::new());
        let waker = wake.clone();
        let (parts, body) = req.into_parts();
        let info = conn.stream_info(parts.version);
        let span = trace::request_span(&parts);
        let mut headers = super::headers::request_to_filter(&parts, super::worker::new_request_id);
        // Only the filter sets a route timeout (Envoy's connection manager drops clients' copies).
        headers.remove(ferrogate_core::headers::UPSTREAM_TIMEOUT);
        let replay = failover::Replay::new(&mut headers, info.clone(), worker.failover());
        let body_deadline = worker.body_timeout().map(|t| tokio::time::Instant::now() + t);
        let id = vm.borrow_mut().create_stream(info, Some(Box::new(move || waker.notify_one())));
        let eos = hyper::body::Body::is_end_stream(&body);
        let mut driver = Driver {
            worker,
            vm,
            id,
            wake,
            head_tx: Some(head_tx),
            request_body: (!eos).then_some(body),
            request_eos_sent: eos,
            body_deadline,
            upstream_body_tx: None,
            upstream: None,
            response_body: None,
            response_deadline: None,
            response_eos_sent: false,
            response_is_stream: false,
            client_body_started: false,
            downstream_tx: None,
            finished: false,
            reset: false,
            span,
            replay,
            route_timeout: None,
            route_deadline: None,
        };
        driver.call(|vm, id| vm.request_headers(id, headers, eos));
        driver
    }

    /// Runs one host input and dispatches whatever callouts it issued.
    fn call(&mut self, f: impl FnOnce(&mut ferrogate_host::Vm, StreamId) -> Result<(), ferrogate_host::HostError>) {
        let result = f(&mut self.vm.borrow_mut(), self.id);
        if let Err(e) = result {
            tracing::error!(stream = self.id, error = %e, "filter host error; resetting stream");
            self.reset = true;
        }
        self.worker.pump(&self.vm);
    }

    async fn run(mut self) -> Result<(), Infallible> {
        loop {
            self.apply_events().await;
            if self.finished || self.reset {
                break;
            }
            self.wait_for_input().await;
        }
        self.finish().await;
        Ok(())
    }

    async fn wait_for_input(&mut self) {
        let wake = self.wake.clone();
        tokio::select! {
            biased;
            _ = wake.notified() => {}
            result = poll_opt(&mut self.upstream), if self.upstream.is_some() => {
                self.upstream = None;
                self.on_upstream_response(result).await;
                // Envoy flushes a connection's writes once per event-loop pass, so a response
                // head and the body bytes that arrived with it leave in one write: the upstream
                // connection gets one scheduler pass to hand over the first body frame before
                // the head is released. A body not there yet does not delay the head further.
                let first = match self.response_body.as_mut() {
                    Some(body) => read::frame_in_same_pass(body).await,
                    None => None,
                };
                if let Some(frame) = first {
                    self.on_response_read(frame).await;
                }
                self.response_deadline = self.idle_deadline();
            }
            frame = next_frame(&mut self.response_body), if self.response_body.is_some() => {
                self.on_response_read(frame).await;
                // Counted from here, so time spent waiting on a slow client is not silence.
                self.response_deadline = self.idle_deadline();
            }
            frame = next_frame(&mut self.request_body), if self.request_body.is_some() => {
                self.body_deadline = self.worker.body_timeout().map(|t| tokio::time::Instant::now() + t);
                self.on_request_frame(frame);
            }
            () = client_gone(&mut self.head_tx), if self.head_tx.is_some() => {
                // As Envoy resets a stream whose downstream closed: the filter's `on_log` runs
                // (a request held by the filter, queued say, leaves at once).
                tracing::debug!(stream = self.id, "client went away before the response");
                self.head_tx = None;
                self.request_body = None;
                self.reset = true;
            }
            () = sleep_until(self.response_deadline), if self.response_body.is_some() => {
                tracing::warn!(stream = self.id, timeout = ?self.worker.upstream_idle_timeout(), "upstream response stalled; answer ended as timed out (--upstream-idle-timeout-ms)");
                self.end_response_early(UPSTREAM_IDLE_DETAILS);
            }
            () = sleep_until(self.route_deadline), if self.route_deadline_pending() => self.on_route_timeout(),
            () = sleep_until(self.body_deadline), if self.request_body.is_some() => {
                tracing::info!(stream = self.id, timeout = ?self.worker.body_timeout(), "request body stalled; stream reset (--body-timeout-ms)");
                self.request_body = None;
                self.reset = true;
            }
        }
    }

    async fn on_upstream_response(&mut self, result: Result<Response<Incoming>, super::upstream::UpstreamError>) {
        if self.try_failover(&result).await {
            return;
        }
        match result {
            Ok(resp) => {
                let (parts, body) = resp.into_parts();
                // Without the host-only headers: only this host marks an answer abandoned.
                let headers = response_to_filter(parts.status, &parts.headers);
                let eos = hyper::body::Body::is_end_stream(&body);
                self.response_eos_sent = eos;
                self.response_body = (!eos).then_some(body);
                self.response_is_stream = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
                self.call(|vm, id| vm.response_headers(id, headers, eos));
            }
            Err(e) => {
                tracing::warn!(stream = self.id, error = %e, "upstream request failed");
                self.router_failure(&e);
            }
        }
    }

    /// Carries out everything the filter chain released, in order.
    async fn apply_events(&mut self) {
        loop {
            let events = self.vm.borrow_mut().take_events(self.id);
            if events.is_empty() {
                return;
            }
            for event in events {
                self.apply(event).await;
            }
        }
    }

    async fn apply(&mut self, event: StreamEvent) {
        match event {
            StreamEvent::RequestHeaders { headers, end_of_stream } => {
                self.start_upstream(headers, end_of_stream).await;
            }
            StreamEvent::RequestData { data, end_of_stream } => {
                if let Some(tx) = &self.upstream_body_tx {
                    tx.data(data).await;
                }
                if end_of_stream {
                    self.upstream_body_tx = None;
                    self.arm_route_deadline();
                }
            }
            StreamEvent::RequestTrailers(trailers) => {
                if let Some(tx) = self.upstream_body_tx.take() {
                    tx.trailers(to_header_map(&trailers)).await;
                }
                self.arm_route_deadline();
            }
            StreamEvent::ResponseHeaders { headers, end_of_stream } => self.send_head(&headers, end_of_stream),
            StreamEvent::ResponseData { data, end_of_stream } => self.send_data(data, end_of_stream).await,
            StreamEvent::ResponseTrailers(trailers) => {
                if let Some(tx) = self.downstream_tx.take() {
                    tx.trailers(to_header_map(&trailers)).await;
                }
                self.finished = true;
            }
            StreamEvent::AbortUpstream { details } => {
                tracing::debug!(stream = self.id, details, "upstream abandoned for a local reply");
                self.upstream = None;
                self.upstream_body_tx = None;
                self.response_body = None;
                self.request_body = None;
            }
            StreamEvent::Reset { details } => {
                tracing::debug!(stream = self.id, details, "stream reset by the filter chain");
                self.reset = true;
            }
        }
    }

    async fn start_upstream(&mut self, mut headers: Headers, end_of_stream: bool) {
        self.replay.on_release(&mut headers);
        self.route_timeout = deadline::take_route_timeout(&mut headers);
        trace::inject(&self.span, &mut headers);
        let (body, tx) = if end_of_stream {
            (ChannelBody::empty(), None)
        } else {
            let (tx, body) = ChannelBody::channel();
            (body, Some(tx))
        };
        match self.worker.upstream().start(&headers, body) {
            Ok(fut) => {
                self.upstream = Some(fut);
                self.upstream_body_tx = tx;
                if end_of_stream {
                    self.arm_route_deadline();
                }
            }
            Err(e) => self.on_upstream_response(Err(e)).await,
        }
    }

    fn send_head(&mut self, headers: &Headers, end_of_stream: bool) {
        let body = if end_of_stream {
            self.finished = true;
            ChannelBody::empty()
        } else {
            let (tx, body) = ChannelBody::channel();
            self.downstream_tx = Some(tx);
            body
        };
        trace::record_head(&self.span, headers);
        let mut response = Response::new(body);
        *response.status_mut() = status_of(headers);
        *response.headers_mut() = to_header_map(headers);
        if let Some(head_tx) = self.head_tx.take() {
            if head_tx.send(response).is_err() {
                self.reset = true;
            }
        }
    }

    async fn send_data(&mut self, data: Vec<u8>, end_of_stream: bool) {
        self.client_body_started |= !data.is_empty();
        if let Some(tx) = &self.downstream_tx {
            if !tx.data(data).await {
                tracing::debug!(stream = self.id, "client disconnected during the response");
                self.reset = true;
                return;
            }
        }
        if end_of_stream {
            self.downstream_tx = None;
            self.finished = true;
        }
    }

    async fn finish(mut self) {
        if self.reset {
            trace::record_reset(&self.span);
            if let Some(tx) = self.downstream_tx.take() {
                tx.abort("reset").await;
            }
            // Dropping head_tx without sending makes `handle` fail the stream.
            self.head_tx = None;
        }
        self.upstream = None;
        let state = self.vm.borrow_mut().finish_stream(self.id, self.reset);
        trace::record_gen_ai(&self.span, &state);
        self.worker.pump(&self.vm);
    }
}

/// Sleeps until `deadline`, or forever without one.
/// Resolves when the client side of the stream is gone (hyper dropped the service future).
async fn client_gone(head_tx: &mut Option<oneshot::Sender<Response<ChannelBody>>>) {
    match head_tx {
        Some(tx) => tx.closed().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Envoy's `response.code_details` for an upstream that failed after its response began.
const UPSTREAM_RESET_DETAILS: &str = "upstream_reset_after_response_started{remote_reset}";

/// Envoy's `response.code_details` for an upstream attempt that went silent (the router's
/// per-try idle timeout): the filter records it as a timeout (504), not a failure (502).
const UPSTREAM_IDLE_DETAILS: &str = "upstream_per_try_idle_timeout";

async fn poll_opt(fut: &mut Option<UpstreamFuture>) -> Result<Response<Incoming>, super::upstream::UpstreamError> {
    match fut {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}
