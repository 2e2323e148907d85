//! The simulated engine as an LMCache worker reporting to a cache controller
//! (`--lmcache-controller`): what its CPU tier admits and evicts, pushed as LMCache 0.5's
//! workers push it.
//!
//! - With `--lmcache-controller-reply`, the worker first registers there (`RegisterMsg` on a
//!   DEALER, `[b"", payload]`) and waits for the controller's answer, at most 30 s, as LMCache
//!   0.3.12 and later do; without an answer it reports nothing. Without a reply address it
//!   pushes its `RegisterMsg` first, as LMCache 0.3.11 and older do.
//! - Each request's changes to the CPU tier are one `BatchedKVOperationMsg` (location
//!   `LocalCPUBackend`, admits then evicts, `seq_num` counting from 0) in its own frame on a
//!   PUSH socket; the keys are the blocks' hashes, as in the sim's KV events. A send that
//!   fails because the controller closed the connection connects the socket again and is
//!   retried once, as libzmq's transport does for LMCache; the worker never registers again.
//! - With `--lmcache-heartbeat-secs` and a `heartbeat_url` in the registration's answer, it
//!   sends a `HeartbeatMsg` there on a DEALER of its own every interval, making that socket
//!   again when an answer does not come within [`HEARTBEAT_WAIT`], as LMCache does.
//!
//! Messages are msgpack maps tagged `"type"` with the fields in LMCache's declaration order,
//! byte for byte what its msgspec classes encode (`testdata/lmcache/`).

use std::time::Duration;

use bytes::Bytes;
use rmpv::Value;
use tokio::sync::mpsc;
use zeromq::{DealerSocket, PushSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// How long a worker waits for its registration's answer (LMCache's receive timeout).
const REGISTER_WAIT: Duration = Duration::from_secs(30);

/// How long a heartbeat waits for its answer before the socket is made again.
pub const HEARTBEAT_WAIT: Duration = Duration::from_secs(5);

/// The operations of one request on the CPU tier: `(admit, key)`, in order.
pub type Ops = Vec<(bool, u64)>;

/// Queues the CPU tier's changes for the worker task; cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct WorkerSender(mpsc::UnboundedSender<Ops>);

impl WorkerSender {
    /// Queues `ops` (nothing when empty).
    pub fn report(&self, ops: Ops) {
        if !ops.is_empty() && self.0.send(ops).is_err() {
            tracing::debug!("sim: the LMCache worker has stopped; operations dropped");
        }
    }
}

/// Who the worker is and where its controller listens.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The controller's PULL socket (`host:port`, a `tcp://` prefix allowed).
    pub pull: String,
    /// Its ROUTER socket, for the registration (LMCache 0.3.12 and later).
    pub reply: Option<String>,
    /// `lmcache_instance_id`.
    pub instance_id: String,
    /// Seconds between heartbeats, when the controller names a heartbeat socket; 0 = none.
    pub heartbeat_secs: u64,
}

/// Starts the worker task; returns the sender the prefix caches report to.
pub fn start(config: WorkerConfig) -> WorkerSender {
    let (sender, ops) = mpsc::unbounded_channel();
    tokio::spawn(run(config, ops));
    WorkerSender(sender)
}

fn tcp(address: &str) -> String {
    if address.starts_with("tcp://") {
        address.to_string()
    } else {
        format!("tcp://{address}")
    }
}

async fn run(config: WorkerConfig, mut ops: mpsc::UnboundedReceiver<Ops>) {
    let mut push = PushSocket::new();
    if let Err(error) = push.connect(&tcp(&config.pull)).await {
        tracing::warn!(%error, pull = %config.pull, "sim: cannot reach the LMCache controller");
        return;
    }
    let register = encode(&register_msg(&config.instance_id));
    match &config.reply {
        Some(reply) => match registered(reply, register).await {
            Ok(heartbeat_url) => {
                if let (Some(url), 1..) = (heartbeat_url, config.heartbeat_secs) {
                    let every = Duration::from_secs(config.heartbeat_secs);
                    tokio::spawn(beat(tcp(&url), encode(&liveness_msg("HeartbeatMsg", &config.instance_id)), every));
                }
            }
            Err(error) => {
                tracing::warn!(%error, "sim: the LMCache controller did not answer the registration; nothing is reported");
                return;
            }
        },
        None => {
            if let Err(error) = push.send(ZmqMessage::from(Bytes::from(register))).await {
                tracing::warn!(%error, "sim: registration not pushed");
            }
        }
    }
    let mut seq = 0u64;
    while let Some(batch) = ops.recv().await {
        let frame = Bytes::from(encode(&batched_ops(&config.instance_id, &batch, &mut seq)));
        if let Err(error) = pushed(&mut push, &config.pull, frame).await {
            tracing::debug!(%error, "sim: LMCache operations not pushed");
        }
    }
}

/// Sends `frame` on `push`; when that fails (the controller closed the connection, say it
/// restarted), connects a new socket to `pull` and sends it there, as libzmq reconnects.
async fn pushed(push: &mut PushSocket, pull: &str, frame: Bytes) -> Result<(), String> {
    if push.send(ZmqMessage::from(frame.clone())).await.is_ok() {
        return Ok(());
    }
    *push = PushSocket::new();
    push.connect(&tcp(pull)).await.map_err(|e| e.to_string())?;
    push.send(ZmqMessage::from(frame)).await.map_err(|e| e.to_string())
}

/// LMCache's heartbeat loop: `heartbeat` on a DEALER to `url` every `every`, the socket made
/// again when an answer does not come within [`HEARTBEAT_WAIT`].
async fn beat(url: String, heartbeat: Vec<u8>, every: Duration) {
    let mut dealer: Option<DealerSocket> = None;
    loop {
        tokio::time::sleep(every).await;
        if dealer.is_none() {
            let mut socket = DealerSocket::new();
            dealer = socket.connect(&url).await.is_ok().then_some(socket);
        }
        let Some(socket) = dealer.as_mut() else { continue };
        let mut message = ZmqMessage::from(Bytes::new());
        message.push_back(Bytes::from(heartbeat.clone()));
        let answered = socket.send(message).await.is_ok()
            && matches!(tokio::time::timeout(HEARTBEAT_WAIT, socket.recv()).await, Ok(Ok(_)));
        if !answered {
            tracing::debug!(%url, "sim: an LMCache heartbeat was not answered; a new socket");
            dealer = None;
        }
    }
}

/// Registers on the controller's ROUTER and waits for its answer; the `heartbeat_url` it names.
async fn registered(reply: &str, register: Vec<u8>) -> Result<Option<String>, String> {
    let mut dealer = DealerSocket::new();
    dealer.connect(&tcp(reply)).await.map_err(|e| e.to_string())?;
    let mut message = ZmqMessage::from(Bytes::new());
    message.push_back(Bytes::from(register));
    dealer.send(message).await.map_err(|e| e.to_string())?;
    match tokio::time::timeout(REGISTER_WAIT, dealer.recv()).await {
        Ok(Ok(answer)) => Ok(answer.into_vec().last().and_then(|frame| heartbeat_url(frame))),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {REGISTER_WAIT:?}")),
    }
}

/// The `heartbeat_url` a `RegisterRetMsg` frame names in its `extra_config`.
fn heartbeat_url(frame: &[u8]) -> Option<String> {
    let answer = rmpv::decode::read_value(&mut &frame[..]).ok()?;
    let field =
        |map: &Value, key: &str| map.as_map()?.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v.clone());
    field(&field(&answer, "extra_config")?, "heartbeat_url")?.as_str().map(String::from)
}

/// `RegisterMsg` of worker 0 of `instance_id` (the sim has no command socket: port 0).
pub fn register_msg(instance_id: &str) -> Value {
    liveness_msg("RegisterMsg", instance_id)
}

/// A `RegisterMsg` or `HeartbeatMsg` (the same fields) of worker 0 of `instance_id`.
fn liveness_msg(tag: &str, instance_id: &str) -> Value {
    tagged(
        tag,
        vec![
            ("instance_id", Value::from(instance_id)),
            ("worker_id", Value::from(0)),
            ("ip", Value::from("127.0.0.1")),
            ("port", Value::from(0)),
            ("peer_init_url", Value::Nil),
        ],
    )
}

/// `BatchedKVOperationMsg` of `ops` in the CPU backend, numbered from `seq` on.
pub fn batched_ops(instance_id: &str, ops: &[(bool, u64)], seq: &mut u64) -> Value {
    let operations = ops
        .iter()
        .map(|&(admit, key)| {
            let op = Value::Map(vec![
                (Value::from("op_type"), Value::from(if admit { "admit" } else { "evict" })),
                (Value::from("key"), Value::from(key)),
                (Value::from("seq_num"), Value::from(*seq)),
            ]);
            *seq += 1;
            op
        })
        .collect();
    tagged(
        "BatchedKVOperationMsg",
        vec![
            ("instance_id", Value::from(instance_id)),
            ("worker_id", Value::from(0)),
            ("location", Value::from("LocalCPUBackend")),
            ("operations", Value::Array(operations)),
        ],
    )
}

fn tagged(tag: &str, fields: Vec<(&str, Value)>) -> Value {
    let mut pairs = vec![(Value::from("type"), Value::from(tag))];
    pairs.extend(fields.into_iter().map(|(k, v)| (Value::from(k), v)));
    Value::Map(pairs)
}

fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, value);
    out
}

#[cfg(test)]
mod tests {
    use ferrogate_core::kv::lmcache::{decode, ChunkOp, Liveness, WorkerMsg};

    use super::*;

    #[test]
    fn messages_decode_as_the_controller_reads_them() {
        let WorkerMsg::Liveness { kind, worker, ip, port } = decode(&encode(&register_msg("sim-a"))).unwrap() else {
            panic!("not a registration")
        };
        assert_eq!(
            (kind, worker.instance_id.as_str(), worker.worker_id, ip.as_str(), port),
            (Liveness::Register, "sim-a", 0, "127.0.0.1", 0)
        );
        let mut seq = 5;
        let ops = batched_ops("sim-a", &[(true, u64::MAX), (false, 7)], &mut seq);
        let WorkerMsg::Ops { location, ops, .. } = decode(&encode(&ops)).unwrap() else { panic!("not ops") };
        assert_eq!(location, "LocalCPUBackend");
        assert_eq!(ops, [ChunkOp { admit: true, key: u64::MAX, seq: 5 }, ChunkOp { admit: false, key: 7, seq: 6 }]);
        assert_eq!(seq, 7);
    }

    /// The controller's answers, as LMCache 0.5.6 encodes them, with and without a heartbeat
    /// socket; the heartbeat is LMCache's bytes too.
    #[test]
    fn the_heartbeat_url_is_read_from_the_answer() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/lmcache");
        let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
        assert_eq!(heartbeat_url(&read("reply-register-heartbeat.msgpack")).as_deref(), Some("127.0.0.1:8500"));
        assert_eq!(heartbeat_url(&read("reply-register.msgpack")), None);
        let mut beat = liveness_msg("HeartbeatMsg", "vllm-0");
        if let Value::Map(pairs) = &mut beat {
            pairs[3].1 = Value::from("10.0.0.5");
            pairs[4].1 = Value::from(8001);
        }
        assert_eq!(encode(&beat), read("heartbeat.msgpack"));
    }

    /// The same bytes LMCache 0.5.6's msgspec classes write for the fixture's registration.
    #[test]
    fn a_registration_is_lmcaches_bytes() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/lmcache");
        let fixture = std::fs::read(dir.join("register.msgpack")).unwrap();
        let mut value = register_msg("vllm-0");
        if let Value::Map(pairs) = &mut value {
            pairs[3].1 = Value::from("10.0.0.5");
            pairs[4].1 = Value::from(8001);
        }
        assert_eq!(encode(&value), fixture);
    }
}
