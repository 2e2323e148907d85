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
//!   PUSH socket; the keys are the blocks' hashes, as in the sim's KV events.
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
        Some(reply) => {
            if let Err(error) = registered(reply, register).await {
                tracing::warn!(%error, "sim: the LMCache controller did not answer the registration; nothing is reported");
                return;
            }
        }
        None => {
            if let Err(error) = push.send(ZmqMessage::from(Bytes::from(register))).await {
                tracing::warn!(%error, "sim: registration not pushed");
            }
        }
    }
    let mut seq = 0u64;
    while let Some(batch) = ops.recv().await {
        let message = batched_ops(&config.instance_id, &batch, &mut seq);
        if let Err(error) = push.send(ZmqMessage::from(Bytes::from(encode(&message)))).await {
            tracing::debug!(%error, "sim: LMCache operations not pushed");
        }
    }
}

/// Registers on the controller's ROUTER and waits for its answer.
async fn registered(reply: &str, register: Vec<u8>) -> Result<(), String> {
    let mut dealer = DealerSocket::new();
    dealer.connect(&tcp(reply)).await.map_err(|e| e.to_string())?;
    let mut message = ZmqMessage::from(Bytes::new());
    message.push_back(Bytes::from(register));
    dealer.send(message).await.map_err(|e| e.to_string())?;
    match tokio::time::timeout(REGISTER_WAIT, dealer.recv()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {REGISTER_WAIT:?}")),
    }
}

/// `RegisterMsg` of worker 0 of `instance_id` (the sim has no command socket: port 0).
pub fn register_msg(instance_id: &str) -> Value {
    tagged(
        "RegisterMsg",
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
