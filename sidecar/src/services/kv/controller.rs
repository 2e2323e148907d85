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
//!   nothing until it is answered: `RegisterRetMsg` naming the same socket as its
//!   `heartbeat_url`, so a worker with a heartbeat interval beats there; a `HeartbeatMsg` gets
//!   `HeartbeatRetMsg` with no commands (never a full sync, which stalls the engine); anything
//!   else `ErrorMsg`. Answers go back in arrival order, as `[identity, "", payload]`.
//! - An instance is the endpoint `instances` names, else the one endpoint whose host is the
//!   address it last registered or beat from. A worker registers once, when it starts: the
//!   address it gave is kept across layouts, and its heartbeats teach it again to a restarted
//!   sidecar. Messages of an instance known neither way are dropped (a warning once per
//!   instance).
//!
//! The sockets outlive layouts ([`channel`]): a worker connects its PUSH socket once and never
//! again on its own, so a new layout takes over the bound sockets instead of binding new ones.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, UdpSocket};
use std::sync::Arc;

use bytes::Bytes;
use ferrogate_core::config::syntax::endpoint_parts;
use ferrogate_core::config::Controller as Config;
use ferrogate_core::kv::lmcache::{decode, encode_reply, ChunkOp, Liveness, Reply, Worker, WorkerMsg};
use tokio::sync::watch;
use zeromq::ZmqMessage;

use super::Kv;

mod channel;

pub use channel::RELEASE_AFTER;

/// Frames kept while no layout takes them (between a layout's end and the next one's start).
const HELD_MAX: usize = 4096;

/// Instances whose address is kept (far more than a pool has workers; a bound on what any
/// sender on the controller sockets can make the sidecar keep).
const LEARNED_MAX: usize = 4096;

/// One layout's view of a pool's controller channel: where its workers' messages go.
pub struct Controller {
    kv: Arc<Kv>,
    epoch: u64,
    pool: usize,
    /// Instance id → endpoint address, as configured.
    instances: HashMap<String, String>,
}

impl Controller {
    /// The channel of pool `pool` (layout `epoch`), with `config`'s instances. The pool's
    /// endpoints are read from `kv` when a message comes, so a pool whose endpoints come and
    /// go (`endpoints_dns`) is matched as it is now.
    pub fn new(kv: Arc<Kv>, epoch: u64, pool: usize, config: &Config) -> Self {
        let instances = config.instances.iter().cloned().collect();
        Self { kv, epoch, pool, instances }
    }

    /// Hands the pool's messages to this layout until `stop`: the sockets of `config` are
    /// bound when no earlier layout holds them, and released after `shutdown`, or
    /// [`RELEASE_AFTER`] without a layout.
    pub async fn run(self, config: Config, stop: watch::Receiver<bool>, shutdown: watch::Receiver<bool>) {
        channel::attach(&config, self, stop, shutdown);
    }

    /// The address of the one endpoint of the pool whose host is `ip` now.
    fn by_host(&self, ip: &str) -> Option<String> {
        let host = |e: &String| endpoint_parts(e).map_or(e.as_str(), |(h, _)| h).trim_matches(['[', ']']).to_string();
        let mut matching = self.kv.addresses(self.epoch, self.pool).into_iter().filter(|e| host(e) == ip);
        match (matching.next(), matching.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        }
    }
}

/// What a channel does with its messages, across the layouts it serves.
pub(super) struct Handler {
    /// The current layout's view, if any.
    target: Option<Controller>,
    /// Instance id → the address it last registered or beat from.
    learned: HashMap<String, String>,
    /// Instances warned about (unknown) under the current layout.
    warned: HashSet<String>,
    /// Frames pushed while no layout was attached, oldest first.
    held: VecDeque<Bytes>,
    /// The reply socket's bind address, for the `heartbeat_url` handed out.
    reply: Option<String>,
}

impl Handler {
    /// A handler answering registrations with a heartbeat socket at `reply` (bind address).
    pub(super) fn new(reply: Option<String>) -> Self {
        Self { target: None, learned: HashMap::new(), warned: HashSet::new(), held: VecDeque::new(), reply }
    }

    /// `target`'s layout takes the messages from now on, the held ones first.
    pub(super) fn attach(&mut self, target: Controller) {
        self.target = Some(target);
        self.warned.clear();
        while let Some(frame) = self.held.pop_front() {
            self.pushed(&frame);
        }
    }

    /// No layout takes the messages: they are held until one does.
    pub(super) fn detach(&mut self) {
        self.target = None;
    }

    /// One pushed frame.
    pub(super) fn pushed(&mut self, frame: &[u8]) {
        if self.target.is_none() {
            if self.held.len() >= HELD_MAX {
                self.held.pop_front();
            }
            self.held.push_back(Bytes::copy_from_slice(frame));
            return;
        }
        let now = super::super::now_ms();
        match decode(frame) {
            Ok(WorkerMsg::Ops { worker, location, ops }) => self.ops(&worker, &location, &ops, now),
            Ok(WorkerMsg::FullSync { worker, location, keys }) => {
                let ops: Vec<_> = keys.into_iter().map(|key| ChunkOp { admit: true, key, seq: 0 }).collect();
                self.ops(&worker, &location, &ops, now);
            }
            Ok(WorkerMsg::Liveness { worker, ip, .. }) => self.alive(&worker, &ip, now),
            Ok(WorkerMsg::Other(tag)) => tracing::debug!(tag, "LMCache controller: a message of another type skipped"),
            Err(error) => tracing::debug!(%error, "LMCache controller: a frame that is not a worker message skipped"),
        }
    }

    fn ops(&mut self, worker: &Worker, location: &str, ops: &[ChunkOp], now: u64) {
        if let (Some(endpoint), Some(t)) = (self.endpoint_of(worker), &self.target) {
            t.kv.chunk_ops(t.epoch, t.pool, &endpoint, WorkerMsg::tier_of(location), ops, now);
        }
    }

    /// The answer to a request on the ROUTER socket (`[identity, "", payload]`), if it is one.
    pub(super) fn answer(&mut self, request: ZmqMessage) -> Option<ZmqMessage> {
        let frames = request.into_vec();
        let (identity, payload) = (frames.first()?.clone(), frames.last()?.clone());
        let delimited = frames.len() > 2;
        let heartbeat_url;
        let reply = match decode(&payload) {
            Ok(WorkerMsg::Liveness { kind, worker, ip, .. }) => {
                self.alive(&worker, &ip, super::super::now_ms());
                match kind {
                    Liveness::Register => {
                        heartbeat_url = self.reply.as_deref().and_then(|bind| heartbeat_url_for(bind, &ip));
                        Reply::Registered { heartbeat_url: heartbeat_url.as_deref() }
                    }
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

    /// `worker`, at `ip`, is alive: its address is kept, and its endpoint marked seen.
    fn alive(&mut self, worker: &Worker, ip: &str, now: u64) {
        let changed = self.learned.get(&worker.instance_id).is_none_or(|known| known != ip);
        let room = self.learned.len() < LEARNED_MAX || self.learned.contains_key(&worker.instance_id);
        if changed && room {
            self.learned.insert(worker.instance_id.clone(), ip.to_string());
        }
        let Some(endpoint) = self.endpoint_of_quiet(worker) else { return };
        if let Some(t) = &self.target {
            if changed && !t.instances.contains_key(&worker.instance_id) {
                tracing::info!(instance = %worker.instance_id, %endpoint, "LMCache instance registered");
            }
            t.kv.lmcache_seen(t.epoch, t.pool, &endpoint, now);
        }
    }

    /// The endpoint of `worker`'s instance under the current layout: configured, else by the
    /// address it gave.
    fn endpoint_of_quiet(&self, worker: &Worker) -> Option<String> {
        let t = self.target.as_ref()?;
        let learned = || t.by_host(self.learned.get(&worker.instance_id)?);
        t.instances.get(&worker.instance_id).cloned().or_else(learned)
    }

    /// [`Handler::endpoint_of_quiet`], warning once per layout when there is none.
    fn endpoint_of(&mut self, worker: &Worker) -> Option<String> {
        let found = self.endpoint_of_quiet(worker);
        if found.is_none() && self.warned.insert(worker.instance_id.clone()) {
            tracing::warn!(
                instance = %worker.instance_id,
                "LMCache controller: an instance matching no endpoint (name it in lmcache.instances, or give its workers a heartbeat interval); its messages are dropped"
            );
        }
        found
    }
}

/// The `heartbeat_url` for a worker at `worker_ip` (`host:port`, as LMCache wants it): the
/// reply socket itself. A wildcard bind host becomes the local address the worker is reached
/// from, as LMCache's own controller hands it out; `None` when that cannot be told.
pub(super) fn heartbeat_url_for(bind: &str, worker_ip: &str) -> Option<String> {
    let address = bind.strip_prefix("tcp://").unwrap_or(bind);
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_matches(['[', ']']);
    let wildcard = matches!(host, "*" | "0.0.0.0" | "::" | "");
    let ip: IpAddr = if wildcard { local_ip_towards(worker_ip.parse().ok()?)? } else { host.parse().ok()? };
    Some(std::net::SocketAddr::new(ip, port.parse().ok()?).to_string())
}

/// The local address the kernel would send from to reach `peer` (no packet is sent).
fn local_ip_towards(peer: IpAddr) -> Option<IpAddr> {
    let any: IpAddr = if peer.is_ipv4() { Ipv4Addr::UNSPECIFIED.into() } else { Ipv6Addr::UNSPECIFIED.into() };
    let socket = UdpSocket::bind((any, 0)).ok()?;
    socket.connect((peer, 9)).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod tests;
