//! LMCache's cache-controller channel for one pool: the sockets LMCache workers push to and
//! register with (a provider's `lmcache: { pull, reply, instances }`), as the production-stack
//! router embeds LMCache's controller.
//!
//! - PULL (`pull`): each frame one worker message ([`ferrogate_core::kv::lmcache::decode`]).
//!   `BatchedKVOperationMsg` admits and evicts chunk hashes in a backend (`LocalCPUBackend`:
//!   CPU tier, others: storage) of the instance's endpoint ([`Kv::chunk_ops`]); a full-sync
//!   batch admits; registrations and heartbeats (pushed by LMCache 0.3.11 and older) mark the
//!   endpoint alive.
//! - ROUTER (`reply`): a worker of LMCache 0.3.12 or later registers (`RegisterMsg`) and pushes
//!   nothing until it is answered: `RegisterRetMsg` without a heartbeat socket, so it sends no
//!   heartbeats; a `HeartbeatMsg` gets `HeartbeatRetMsg` with no commands (never a full sync,
//!   which stalls the engine); anything else `ErrorMsg`. Answers go back in arrival order, as
//!   `[identity, "", payload]`.
//! - An instance is the endpoint `instances` names, else the one endpoint whose host is the
//!   address it registered with. Messages of an instance known neither way are dropped (a
//!   warning once per instance).
//!
//! The sockets are bound again, with a backoff, until the bind succeeds: a new layout's task
//! may start before the old one has released the addresses.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ferrogate_core::config::Controller as Config;
use ferrogate_core::kv::lmcache::{decode, encode_reply, Liveness, Reply, Worker, WorkerMsg};
use tokio::sync::watch;
use zeromq::{PullSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::Kv;

/// The longest wait between two attempts to bind.
const BIND_RETRY_MAX: Duration = Duration::from_secs(2);

/// One pool's controller channel.
pub struct Controller {
    kv: Arc<Kv>,
    epoch: u64,
    pool: usize,
    /// The pool's endpoints (`host:port`), in layout order.
    endpoints: Vec<String>,
    /// Instance id → endpoint position, configured or learned from registrations.
    instances: HashMap<String, usize>,
    /// Instances warned about (unknown).
    warned: HashSet<String>,
}

/// What one turn of the loop received.
enum Got {
    Pushed(ZmqMessage),
    Request(ZmqMessage),
    Failed(String),
    Stop,
}

impl Controller {
    /// The channel of pool `pool` (layout `epoch`) over `endpoints`, with `config`'s instances.
    pub fn new(kv: Arc<Kv>, epoch: u64, pool: usize, endpoints: Vec<String>, config: &Config) -> Self {
        let position = |address: &String| endpoints.iter().position(|e| e == address);
        let instances =
            config.instances.iter().filter_map(|(id, address)| Some((id.clone(), position(address)?))).collect();
        Self { kv, epoch, pool, endpoints, instances, warned: HashSet::new() }
    }

    /// Binds the sockets and serves them until `stop` or `shutdown`.
    pub async fn run(mut self, config: Config, mut stop: watch::Receiver<bool>, mut shutdown: watch::Receiver<bool>) {
        let Some(mut pull) = bind(PullSocket::new, &config.pull, &mut stop, &mut shutdown).await else { return };
        let mut router = match &config.reply {
            Some(reply) => match bind(RouterSocket::new, reply, &mut stop, &mut shutdown).await {
                Some(router) => Some(router),
                None => return,
            },
            None => None,
        };
        tracing::info!(pull = %config.pull, reply = ?config.reply, "LMCache controller channel listening");
        loop {
            let got = tokio::select! {
                m = pull.recv() => m.map_or_else(|e| Got::Failed(e.to_string()), Got::Pushed),
                m = recv_request(&mut router) => m.map_or_else(|e| Got::Failed(e.to_string()), Got::Request),
                _ = stop.changed() => Got::Stop,
                _ = shutdown.changed() => Got::Stop,
            };
            match got {
                Got::Pushed(message) => message.into_vec().iter().for_each(|frame| self.pushed(frame)),
                Got::Request(message) => {
                    if let (Some(router), Some(answer)) = (router.as_mut(), self.answer(message)) {
                        if let Err(error) = router.send(answer).await {
                            tracing::debug!(%error, "LMCache controller: an answer was not delivered");
                        }
                    }
                }
                Got::Failed(error) => {
                    tracing::warn!(%error, "LMCache controller channel failed; stopped");
                    break;
                }
                Got::Stop => break,
            }
        }
        let _ = pull.close().await;
        if let Some(router) = router {
            let _ = router.close().await;
        }
    }

    /// One pushed frame.
    fn pushed(&mut self, frame: &[u8]) {
        let now = super::super::now_ms();
        match decode(frame) {
            Ok(WorkerMsg::Ops { worker, location, ops }) => {
                if let Some(endpoint) = self.endpoint_of(&worker) {
                    let tier = WorkerMsg::tier_of(&location);
                    self.kv.chunk_ops(self.epoch, self.pool, endpoint, tier, &ops, now);
                }
            }
            Ok(WorkerMsg::FullSync { worker, location, keys }) => {
                if let Some(endpoint) = self.endpoint_of(&worker) {
                    let ops: Vec<_> = keys
                        .into_iter()
                        .map(|key| ferrogate_core::kv::lmcache::ChunkOp { admit: true, key, seq: 0 })
                        .collect();
                    self.kv.chunk_ops(self.epoch, self.pool, endpoint, WorkerMsg::tier_of(&location), &ops, now);
                }
            }
            Ok(WorkerMsg::Liveness { worker, ip, .. }) => self.alive(&worker, &ip, now),
            Ok(WorkerMsg::Other(tag)) => tracing::debug!(tag, "LMCache controller: a message of another type skipped"),
            Err(error) => tracing::debug!(%error, "LMCache controller: a frame that is not a worker message skipped"),
        }
    }

    /// The answer to a request on the ROUTER socket (`[identity, "", payload]`), if it is one.
    fn answer(&mut self, request: ZmqMessage) -> Option<ZmqMessage> {
        let frames = request.into_vec();
        let (identity, payload) = (frames.first()?.clone(), frames.last()?.clone());
        let delimited = frames.len() > 2;
        let reply = match decode(&payload) {
            Ok(WorkerMsg::Liveness { kind, worker, ip, .. }) => {
                self.alive(&worker, &ip, super::super::now_ms());
                match kind {
                    Liveness::Register => Reply::Registered { heartbeat_url: None },
                    Liveness::Heartbeat => Reply::Heartbeat,
                    Liveness::Deregister => Reply::Error("deregistration is pushed, not asked"),
                }
            }
            _ => Reply::Error("this controller answers registrations and heartbeats only"),
        };
        let mut message = ZmqMessage::from(identity);
        if delimited {
            message.push_back(Bytes::new());
        }
        message.push_back(Bytes::from(encode_reply(&reply)));
        Some(message)
    }

    /// `worker`, at `ip`, is alive: learn its endpoint from the address if not known yet.
    fn alive(&mut self, worker: &Worker, ip: &str, now: u64) {
        if !self.instances.contains_key(&worker.instance_id) {
            let host =
                |e: &String| e.rsplit_once(':').map_or(e.as_str(), |(h, _)| h).trim_matches(['[', ']']).to_string();
            let matching: Vec<usize> = (0..self.endpoints.len()).filter(|&i| host(&self.endpoints[i]) == ip).collect();
            if let [only] = matching.as_slice() {
                tracing::info!(instance = %worker.instance_id, endpoint = %self.endpoints[*only], "LMCache instance registered");
                self.instances.insert(worker.instance_id.clone(), *only);
            }
        }
        if let Some(&endpoint) = self.instances.get(&worker.instance_id) {
            self.kv.lmcache_seen(self.epoch, self.pool, endpoint, now);
        }
    }

    /// The endpoint of `worker`'s instance, warning once when it has none.
    fn endpoint_of(&mut self, worker: &Worker) -> Option<usize> {
        let found = self.instances.get(&worker.instance_id).copied();
        if found.is_none() && self.warned.insert(worker.instance_id.clone()) {
            tracing::warn!(
                instance = %worker.instance_id,
                "LMCache controller: an instance matching no endpoint (name it in lmcache.instances); its messages are dropped"
            );
        }
        found
    }
}

/// The next request on the ROUTER socket, or never without one.
async fn recv_request(router: &mut Option<RouterSocket>) -> zeromq::ZmqResult<ZmqMessage> {
    match router {
        Some(router) => router.recv().await,
        None => std::future::pending().await,
    }
}

/// A socket made by `make` bound to `address`, tried again with a backoff; `None` on stop.
async fn bind<S: Socket>(
    make: fn() -> S,
    address: &str,
    stop: &mut watch::Receiver<bool>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<S> {
    let mut wait = Duration::from_millis(50);
    let mut failures = 0u32;
    loop {
        let mut socket = make();
        match socket.bind(address).await {
            Ok(_) => return Some(socket),
            Err(error) => {
                if failures.is_power_of_two() || failures == 0 {
                    tracing::warn!(%address, %error, "LMCache controller: cannot bind yet (attempt {})", failures + 1);
                }
                failures += 1;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = stop.changed() => return None,
            _ = shutdown.changed() => return None,
        }
        wait = (wait * 2).min(BIND_RETRY_MAX);
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
