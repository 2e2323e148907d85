//! Worker threads of `ferrogate serve`, modelled on Envoy's workers.
//!
//! Each worker is an OS thread with a single-threaded tokio runtime and its own filter VM
//! (Envoy's thread-local VM clone), serving the connections the acceptor hands it
//! ([`super::balance`]). VMs share
//! only what Envoy's share: shared data, shared queues and metrics, all inside the host
//! [`Runtime`]. A VM that traps is replaced by a fresh one for new streams (Envoy's
//! `FAIL_RELOAD` policy); streams already on the failed VM finish with its failure replies.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrogate_host::{Runtime, StreamInfo, Vm};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::sync::{watch, Notify};

use super::balance::Inbox;
use super::stream;
use super::upstream::Upstream;

/// A VM shared by the streams of one worker (never crosses threads).
pub type VmRef = Rc<RefCell<Vm>>;

/// What every worker shares.
pub struct WorkerConfig {
    /// The compiled filter and its process-wide state.
    pub runtime: Runtime,
    /// Upstream clusters.
    pub clusters: Arc<super::cluster::LiveClusters>,
    /// Routing header the filter sets.
    pub cluster_header: String,
    /// How long an upstream may take to connect, to answer, and between body chunks.
    pub upstream_timeouts: super::upstream::UpstreamTimeouts,
    /// How long shutdown waits for in-flight requests.
    pub drain_timeout: Duration,
    /// Failed attempts are replayed on another target (`--no-failover` turns it off).
    pub failover: bool,
    /// How long a request head may take (and an HTTP/1.1 connection may idle between
    /// requests); `None`: no limit.
    pub header_timeout: Option<Duration>,
    /// Longest pause between two chunks of a request body; `None`: no limit.
    pub body_timeout: Option<Duration>,
}

/// Connection facts handed to each stream.
#[derive(Debug)]
pub struct ConnInfo {
    peer: SocketAddr,
    local: SocketAddr,
    id: u64,
}

impl ConnInfo {
    /// The host's view of this connection.
    pub fn stream_info(&self, version: http::Version) -> StreamInfo {
        let protocol = match version {
            http::Version::HTTP_2 => "HTTP/2",
            http::Version::HTTP_10 => "HTTP/1.0",
            _ => "HTTP/1.1",
        };
        StreamInfo {
            source_address: Some(self.peer),
            destination_address: Some(self.local),
            connection_id: self.id,
            protocol: protocol.to_string(),
        }
    }
}

static CONNECTION_IDS: AtomicU64 = AtomicU64::new(1);

/// A fresh request id, as Envoy's connection manager makes when the client sent none.
pub fn new_request_id() -> String {
    let v: u128 = rand::random();
    let h = format!("{v:032x}");
    format!("{}-{}-4{}-a{}-{}", &h[0..8], &h[8..12], &h[13..16], &h[17..20], &h[20..32])
}

/// One worker's state.
pub struct Worker {
    index: usize,
    config: Arc<WorkerConfig>,
    vm: RefCell<VmRef>,
    upstream: Rc<Upstream>,
    queue_ready: Arc<Notify>,
}

impl Worker {
    fn new(index: usize, config: Arc<WorkerConfig>) -> Result<Rc<Worker>, super::ServeError> {
        let upstream = Upstream::new(config.clusters.clone(), config.cluster_header.clone(), config.upstream_timeouts)?;
        let queue_ready = Arc::new(Notify::new());
        let vm = start_vm(&config.runtime, index, &queue_ready)?;
        Ok(Rc::new(Worker { index, config, vm: RefCell::new(vm), upstream: Rc::new(upstream), queue_ready }))
    }

    /// Whether failed attempts are replayed ([`WorkerConfig::failover`]).
    pub fn failover(&self) -> bool {
        self.config.failover
    }

    /// Longest pause between two chunks of a request body ([`WorkerConfig::body_timeout`]).
    pub fn body_timeout(&self) -> Option<Duration> {
        self.config.body_timeout
    }

    /// Longest silence between two chunks of an upstream response body
    /// ([`super::upstream::UpstreamTimeouts::idle`]).
    pub fn upstream_idle_timeout(&self) -> Option<Duration> {
        self.config.upstream_timeouts.idle
    }

    /// The VM new streams should use, replacing a failed one first.
    pub fn vm(&self) -> VmRef {
        let current = self.vm.borrow().clone();
        if !current.borrow().is_failed() {
            return current;
        }
        match start_vm(&self.config.runtime, self.index, &self.queue_ready) {
            Ok(fresh) => {
                tracing::warn!(worker = self.index, "filter VM failed; started a fresh one");
                *self.vm.borrow_mut() = fresh.clone();
                fresh
            }
            Err(e) => {
                tracing::error!(worker = self.index, error = %e, "cannot restart the filter VM");
                current
            }
        }
    }

    /// The upstream client.
    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// Dispatches the callouts `vm` issued and drops its drained log buffer.
    pub fn pump(self: &Rc<Self>, vm: &VmRef) {
        let calls = {
            let mut vm = vm.borrow_mut();
            vm.take_logs();
            vm.take_http_calls()
        };
        for call in calls {
            let upstream = self.upstream.clone();
            let vm = vm.clone();
            let worker = self.clone();
            tokio::task::spawn_local(async move {
                let token = call.token;
                let response = upstream.callout(call).await;
                let result = vm.borrow_mut().http_call_response(token, response);
                if let Err(e) = result {
                    tracing::error!(token, error = %e, "delivering a callout response failed");
                }
                worker.pump(&vm);
            });
        }
    }
}

fn start_vm(runtime: &Runtime, index: usize, queue_ready: &Arc<Notify>) -> Result<VmRef, super::ServeError> {
    let mut vm = runtime.new_vm(index)?;
    let notify = queue_ready.clone();
    vm.set_queue_waker(Box::new(move || notify.notify_one()));
    Ok(Rc::new(RefCell::new(vm)))
}

/// Runs the root context's timer for the current VM.
async fn tick_loop(worker: Rc<Worker>) {
    loop {
        let vm = worker.vm();
        let period = vm.borrow().tick_period();
        match period {
            // The first tick fires one period after it was set, as in Envoy.
            Some(p) => tokio::time::sleep(p).await,
            None => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        }
        if vm.borrow().tick_period().is_none() {
            continue;
        }
        let result = vm.borrow_mut().on_tick();
        if let Err(e) = result {
            tracing::error!(worker = worker.index, error = %e, "on_tick failed");
        }
        worker.pump(&vm);
    }
}

/// Delivers `proxy_on_queue_ready` to this worker's VM when another VM enqueued for it.
async fn queue_loop(worker: Rc<Worker>) {
    loop {
        worker.queue_ready.notified().await;
        let vm = worker.vm();
        let result = vm.borrow_mut().deliver_queue_ready();
        if let Err(e) = result {
            tracing::error!(worker = worker.index, error = %e, "on_queue_ready failed");
        }
        worker.pump(&vm);
    }
}

/// Spawns the executor hyper's HTTP/2 server needs for per-stream tasks on this thread.
#[derive(Clone, Copy, Debug)]
struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: std::future::Future + 'static,
{
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}

/// Runs worker `index` on the current thread until `shutdown` flips, then drains.
pub fn run_worker(
    index: usize,
    config: Arc<WorkerConfig>,
    (inbox, epp): (Inbox, super::epp::Inbox),
    shutdown: watch::Receiver<bool>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e.to_string()));
            return;
        }
    };
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let worker = match Worker::new(index, config.clone()) {
            Ok(w) => w,
            Err(e) => {
                let _ = ready.send(Err(e.to_string()));
                return;
            }
        };
        let _ = ready.send(Ok(()));
        tokio::task::spawn_local(tick_loop(worker.clone()));
        tokio::task::spawn_local(queue_loop(worker.clone()));
        tokio::task::spawn_local(super::epp::run_streams(worker.clone(), epp));
        accept_loop(worker, inbox, shutdown, &config).await;
    });
}

/// The connection settings: request heads must arrive within the header timeout (hyper
/// closes the connection otherwise, and restarts that timer while an HTTP/1.1 connection waits
/// for its next request) and may be read up to twice the size `serve` accepts, so a head over
/// it is refused in the caller's dialect ([`super::head`]); HTTP/2 peers are pinged when quiet,
/// and closed if they stop answering.
fn connection_builder(config: &WorkerConfig) -> auto::Builder<LocalExec> {
    let mut builder = auto::Builder::new(LocalExec);
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .max_buf_size(super::head::READ_BUFFER_BYTES);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(H2_PING_EVERY).keep_alive_timeout(H2_PING_TIMEOUT);
    builder
}

/// HTTP/2 keep-alive: a ping after this much silence ...
const H2_PING_EVERY: Duration = Duration::from_secs(30);
/// ... which must be answered within this, or the connection is closed.
const H2_PING_TIMEOUT: Duration = Duration::from_secs(20);

async fn accept_loop(worker: Rc<Worker>, mut inbox: Inbox, mut shutdown: watch::Receiver<bool>, config: &WorkerConfig) {
    let graceful = GracefulShutdown::new();
    let builder = connection_builder(config);
    let drain = config.drain_timeout;
    loop {
        tokio::select! {
            handed = inbox.next() => {
                let Some((tcp, open)) = handed else { break };
                let Ok(tcp) = tokio::net::TcpStream::from_std(tcp) else { continue };
                let Ok(peer) = tcp.peer_addr() else { continue };
                let _ = tcp.set_nodelay(true);
                let local = tcp.local_addr().unwrap_or(peer);
                let conn = Rc::new(ConnInfo { peer, local, id: CONNECTION_IDS.fetch_add(1, Ordering::Relaxed) });
                let w = worker.clone();
                let service = hyper::service::service_fn(move |req| stream::handle(w.clone(), conn.clone(), req));
                let connection = builder.serve_connection(TokioIo::new(tcp), service).into_owned();
                let watched = graceful.watch(connection);
                tokio::task::spawn_local(async move {
                    if let Err(e) = watched.await {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    drop(open);
                });
            }
            _ = shutdown.changed() => break,
        }
    }
    drop(inbox);
    if tokio::time::timeout(drain, graceful.shutdown()).await.is_err() {
        tracing::warn!(worker = worker.index, "drain timeout: closing remaining connections");
    }
}
