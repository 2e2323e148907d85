//! The Endpoint Picker (`serve --epp-listen`): Envoy's external-processing gRPC service
//! (`envoy.service.ext_proc.v3.ExternalProcessor/Process`) answering with the pick of the same
//! filter code `serve` runs, for gateways implementing the Gateway API Inference Extension.
//!
//! tonic's handlers run on the shared runtime and must be `Send`, while filter VMs live on
//! worker threads (`!Send`). So each gRPC stream is handed, as a [`Job`], to a worker through
//! a channel (round-robin, as the acceptor hands connections out in [`super::balance`]), and
//! the worker drives it through its VM ([`driver`]). The replies go back through a bounded
//! channel that tonic streams to the gateway.

mod convert;
mod driver;
mod hint;
pub mod ready;

use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};

use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_server::{
    ExternalProcessor, ExternalProcessorServer,
};
use envoy_types::pb::envoy::service::ext_proc::v3::{ProcessingRequest, ProcessingResponse};
use futures_util::Stream;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};

use super::worker::Worker;

/// One reply to the gateway, or the gRPC error ending the stream.
pub(crate) type Reply = Result<ProcessingResponse, Status>;

/// Replies buffered per stream before the driver waits for the gateway to read.
const REPLY_BUFFER: usize = 16;

/// Errors of the EPP listener.
#[derive(Debug, thiserror::Error)]
pub enum EppError {
    /// The gRPC server stopped with an error.
    #[error("EPP gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// How the gateway sends a body (ext_proc `ProcessingMode.BodySendMode`), as far as the EPP
/// supports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyMode {
    /// NONE: no body is sent.
    None,
    /// STREAMED: chunks, each answered in order after the headers; the EPP supports it only
    /// when the gateway sends the body without waiting for the headers reply
    /// (`send_body_without_waiting_for_header_response`), since the pick needs the body.
    Streamed,
    /// BUFFERED: the whole body in one message, after the headers were answered.
    Buffered,
    /// BUFFERED_PARTIAL: as BUFFERED, but a body past the gateway's buffer comes cut short
    /// (`end_of_stream` false), which cannot be routed: refused with a 413.
    Partial,
    /// FULL_DUPLEX_STREAMED: chunks sent without waiting; the headers reply may wait for the
    /// body's end, and the body must be streamed back.
    Duplex,
}

impl BodyMode {
    /// The mode of a `BodySendMode` number; `None` for an unknown one.
    fn of(mode: i32) -> Option<BodyMode> {
        match mode {
            0 => Some(BodyMode::None),
            1 => Some(BodyMode::Streamed),
            2 => Some(BodyMode::Buffered),
            3 => Some(BodyMode::Partial),
            4 => Some(BodyMode::Duplex),
            _ => None,
        }
    }

    /// The gateway waits for the headers reply before it sends the body.
    fn waits_for_headers(self) -> bool {
        matches!(self, BodyMode::Buffered | BodyMode::Partial)
    }
}

/// One ext_proc stream on its way to a worker.
pub struct Job {
    /// The gateway's messages.
    inbound: Streaming<ProcessingRequest>,
    /// Where the replies go.
    out: mpsc::Sender<Reply>,
    /// The gateway's address.
    peer: Option<SocketAddr>,
    /// Fallback endpoints to list after the pick (`--epp-fallbacks`).
    fallbacks: usize,
}

/// A worker's side of the hand-off: the streams given to it.
pub struct Inbox(mpsc::UnboundedReceiver<Box<Job>>);

/// The service's side: one sender per worker.
#[derive(Clone)]
struct Dispatch {
    workers: std::sync::Arc<Vec<mpsc::UnboundedSender<Box<Job>>>>,
    next: std::sync::Arc<AtomicUsize>,
}

/// One inbox per worker and the senders that feed them.
pub fn inboxes(count: usize) -> (Vec<mpsc::UnboundedSender<Box<Job>>>, Vec<Inbox>) {
    (0..count).map(|_| mpsc::unbounded_channel()).map(|(tx, rx)| (tx, Inbox(rx))).unzip()
}

impl Dispatch {
    /// Hands `job` to the next worker that still takes work.
    fn hand(&self, job: Job) -> Result<(), Status> {
        let mut job = Box::new(job);
        for _ in 0..self.workers.len() {
            let i = self.next.fetch_add(1, Ordering::Relaxed) % self.workers.len();
            let Some(tx) = self.workers.get(i) else { break };
            match tx.send(job) {
                Ok(()) => return Ok(()),
                // That worker has exited: try the next.
                Err(back) => job = back.0,
            }
        }
        Err(Status::unavailable("no worker left to take the stream"))
    }
}

/// The ext_proc service.
struct Epp {
    dispatch: Dispatch,
    fallbacks: usize,
}

type ReplyStream = Pin<Box<dyn Stream<Item = Reply> + Send>>;

#[tonic::async_trait]
impl ExternalProcessor for Epp {
    type ProcessStream = ReplyStream;

    async fn process(&self, request: Request<Streaming<ProcessingRequest>>) -> Result<Response<ReplyStream>, Status> {
        let peer = request.remote_addr();
        let (out, rx) = mpsc::channel(REPLY_BUFFER);
        self.dispatch.hand(Job { inbound: request.into_inner(), out, peer, fallbacks: self.fallbacks })?;
        let replies = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
        Ok(Response::new(Box::pin(replies)))
    }
}

/// The gRPC health services: the Inference Extension's `liveness` and `readiness`, the
/// processor's own name, which Envoy's health checks ask for, and the server as a whole.
/// `liveness` is SERVING once the listener serves (the VMs hold a configuration by then); the
/// others once the picker is ready ([`ready::watch`]).
pub const HEALTH_SERVICES: [&str; 4] = ["", "liveness", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"];

/// Serves ext_proc and gRPC health on `listener` (h2c) until `shutdown` flips, handing
/// streams to `workers`; each pick lists up to `fallbacks` fallback endpoints after it.
/// Readiness follows `ready`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    workers: Vec<mpsc::UnboundedSender<Box<Job>>>,
    fallbacks: usize,
    ready: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), EppError> {
    let dispatch = Dispatch { workers: std::sync::Arc::new(workers), next: Default::default() };
    let service = ExternalProcessorServer::new(Epp { dispatch, fallbacks });
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_service_status("liveness", tonic_health::ServingStatus::Serving).await;
    let mut ready = ready;
    let now = *ready.borrow_and_update();
    ready::set(&reporter, now).await;
    tokio::spawn(ready::report(reporter, ready));
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(health)
        .add_service(service)
        .serve_with_incoming_shutdown(incoming, async move {
            let _ = shutdown.wait_for(|stop| *stop).await;
        })
        .await?;
    Ok(())
}

/// Drives the streams handed to `worker` until the service stops.
pub(super) async fn run_streams(worker: Rc<Worker>, mut inbox: Inbox) {
    while let Some(job) = inbox.0.recv().await {
        let driver = driver::Driver::new(worker.clone(), *job);
        tokio::task::spawn_local(driver.run());
    }
}
