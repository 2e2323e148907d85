//! LMCache's worker messages, as its workers send them to a cache controller (LMCache 0.5's
//! `lmcache/v1/cache_controller/message.py`): one message per ZMQ frame, a msgpack map tagged
//! by `"type"` (the class name), or the same map as JSON from external senders (a frame that
//! starts with `{`).
//!
//! - `BatchedKVOperationMsg`: admits and evicts of chunk keys in one backend of a worker
//!   (`location`: `LocalCPUBackend`, `LocalDiskBackend`), each numbered by `seq_num`. The older
//!   single-operation `KVAdmitMsg` and `KVEvictMsg` read as a batch of one.
//! - `RegisterMsg`, `DeRegisterMsg`, `HeartbeatMsg`: a worker's liveness.
//! - `FullSyncBatchMsg`: every key a backend holds, in batches, after a re-registration.
//!
//! A controller answers a worker's requests on its reply socket ([`encode_reply`]):
//! `RegisterRetMsg` (without it a worker of LMCache 0.3.12 or later never pushes anything),
//! `HeartbeatRetMsg` with no commands, `ErrorMsg` to anything else.
//!
//! A chunk key is LMCache's prefix-chained chunk hash: a signed or unsigned 64-bit integer,
//! read as `u64` (two's complement). Unknown message types decode as [`WorkerMsg::Other`], so
//! the consumer counts and skips them; a frame that is not such a map is an error.

use rmpv::Value;

use super::Tier;

/// Deepest nesting read (the messages nest three levels).
const MAX_DEPTH: usize = 16;

/// One admit or evict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkOp {
    /// Admitted (`true`) or evicted.
    pub admit: bool,
    /// The chunk hash.
    pub key: u64,
    /// The sender's operation number (one sequence per worker and backend).
    pub seq: u64,
}

/// Which worker of which engine instance sent a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worker {
    /// The engine instance (`lmcache_instance_id`).
    pub instance_id: String,
    /// The worker within it (the tensor-parallel rank).
    pub worker_id: i64,
}

/// A decoded worker message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerMsg {
    /// Admits and evicts in one backend, in order.
    Ops {
        /// The sender.
        worker: Worker,
        /// The backend (`LocalCPUBackend`, `LocalDiskBackend`).
        location: String,
        /// The operations.
        ops: Vec<ChunkOp>,
    },
    /// A worker starts (`Register`), beats (`Heartbeat`) or leaves (`Deregister`).
    Liveness {
        /// Which of the three.
        kind: Liveness,
        /// The sender.
        worker: Worker,
        /// The address of the worker's command socket.
        ip: String,
        /// Its port.
        port: u16,
    },
    /// A batch of the keys one backend holds (a full sync).
    FullSync {
        /// The sender.
        worker: Worker,
        /// The backend.
        location: String,
        /// The keys.
        keys: Vec<u64>,
    },
    /// A message of another type, by its tag.
    Other(String),
}

/// The liveness messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Liveness {
    /// `RegisterMsg`.
    Register,
    /// `HeartbeatMsg`.
    Heartbeat,
    /// `DeRegisterMsg`.
    Deregister,
}

impl WorkerMsg {
    /// The tier a backend's keys are held in (`LocalCPUBackend`: CPU; any other: storage).
    pub fn tier_of(location: &str) -> Tier {
        match Tier::of_medium(Some(location)) {
            Tier::Gpu => Tier::Storage,
            t => t,
        }
    }
}

/// Why a frame is not a worker message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LmcacheError {
    /// Not msgpack, or not JSON when it starts with `{`.
    #[error("not msgpack or JSON: {0}")]
    Syntax(String),
    /// A map, but a field is missing or of the wrong type.
    #[error("{tag}: field {field} missing or of the wrong type")]
    Field {
        /// The message type.
        tag: String,
        /// The field.
        field: &'static str,
    },
    /// Not a map tagged by `"type"`.
    #[error("not a tagged map")]
    Untagged,
    /// Bytes after the message.
    #[error("{0} bytes after the message")]
    Trailing(usize),
}

/// Decodes one frame.
///
/// # Errors
/// The frame is not a tagged msgpack or JSON map, or a known message lacks a field
/// ([`LmcacheError`]); an unknown type is [`WorkerMsg::Other`], not an error.
pub fn decode(frame: &[u8]) -> Result<WorkerMsg, LmcacheError> {
    let value = if frame.first() == Some(&b'{') {
        let json: serde_json::Value = serde_json::from_slice(frame).map_err(|e| LmcacheError::Syntax(e.to_string()))?;
        from_json(&json, 0).ok_or(LmcacheError::Syntax("JSON nested too deeply".into()))?
    } else {
        let mut reader = frame;
        let value = rmpv::decode::read_value_with_max_depth(&mut reader, MAX_DEPTH)
            .map_err(|e| LmcacheError::Syntax(e.to_string()))?;
        if !reader.is_empty() {
            return Err(LmcacheError::Trailing(reader.len()));
        }
        value
    };
    message(&value)
}

fn message(value: &Value) -> Result<WorkerMsg, LmcacheError> {
    let tag = field(value, "type").and_then(Value::as_str).ok_or(LmcacheError::Untagged)?;
    let m = Map { value, tag };
    Ok(match tag {
        "BatchedKVOperationMsg" => {
            let ops = m.array("operations")?.iter().map(|op| chunk_op(&m, op)).collect::<Result<_, _>>()?;
            WorkerMsg::Ops { worker: m.worker()?, location: m.str("location")?, ops }
        }
        "KVAdmitMsg" | "KVEvictMsg" => {
            let seq = field(value, "seq_num").and_then(Value::as_u64).unwrap_or(0);
            let op = ChunkOp { admit: tag == "KVAdmitMsg", key: m.key("key")?, seq };
            WorkerMsg::Ops { worker: m.worker()?, location: m.str("location")?, ops: vec![op] }
        }
        "RegisterMsg" | "HeartbeatMsg" | "DeRegisterMsg" => {
            let kind = match tag {
                "RegisterMsg" => Liveness::Register,
                "HeartbeatMsg" => Liveness::Heartbeat,
                _ => Liveness::Deregister,
            };
            let port = field(value, "port").and_then(Value::as_u64).and_then(|p| u16::try_from(p).ok());
            WorkerMsg::Liveness { kind, worker: m.worker()?, ip: m.str("ip")?, port: port.ok_or(m.missing("port"))? }
        }
        "FullSyncBatchMsg" => {
            let keys = m.array("keys")?.iter().map(|k| key(k).ok_or(m.missing("keys"))).collect::<Result<_, _>>()?;
            WorkerMsg::FullSync { worker: m.worker()?, location: m.str("location")?, keys }
        }
        other => WorkerMsg::Other(other.to_string()),
    })
}

fn chunk_op(m: &Map<'_>, op: &Value) -> Result<ChunkOp, LmcacheError> {
    let admit = match field(op, "op_type").and_then(Value::as_str) {
        Some("admit") => true,
        Some("evict") => false,
        _ => return Err(m.missing("operations.op_type")),
    };
    let key = field(op, "key").and_then(key).ok_or(m.missing("operations.key"))?;
    let seq = field(op, "seq_num").and_then(Value::as_u64).ok_or(m.missing("operations.seq_num"))?;
    Ok(ChunkOp { admit, key, seq })
}

/// A tagged message's fields.
struct Map<'a> {
    value: &'a Value,
    tag: &'a str,
}

impl<'a> Map<'a> {
    fn missing(&self, field: &'static str) -> LmcacheError {
        LmcacheError::Field { tag: self.tag.to_string(), field }
    }
    fn str(&self, name: &'static str) -> Result<String, LmcacheError> {
        field(self.value, name).and_then(Value::as_str).map(str::to_string).ok_or(self.missing(name))
    }
    fn array(&self, name: &'static str) -> Result<&'a [Value], LmcacheError> {
        match field(self.value, name) {
            Some(Value::Array(a)) => Ok(a),
            _ => Err(self.missing(name)),
        }
    }
    fn key(&self, name: &'static str) -> Result<u64, LmcacheError> {
        field(self.value, name).and_then(key).ok_or(self.missing(name))
    }
    fn worker(&self) -> Result<Worker, LmcacheError> {
        let worker_id = field(self.value, "worker_id").and_then(Value::as_i64).ok_or(self.missing("worker_id"))?;
        Ok(Worker { instance_id: self.str("instance_id")?, worker_id })
    }
}

/// A map's value under `key`.
fn field<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    let Value::Map(pairs) = map else { return None };
    pairs.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v)
}

/// A chunk hash: any integer from −2⁶³ to 2⁶⁴−1, negative ones by two's complement.
fn key(v: &Value) -> Option<u64> {
    let Value::Integer(i) = v else { return None };
    i.as_u64().or_else(|| i.as_i64().map(|n| n as u64))
}

/// The msgpack value of a JSON value (`None` past [`MAX_DEPTH`]).
fn from_json(v: &serde_json::Value, depth: usize) -> Option<Value> {
    use serde_json::Value as J;
    if depth > MAX_DEPTH {
        return None;
    }
    Some(match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Value::from(u),
            (_, Some(i), _) => Value::from(i),
            (_, _, f) => Value::F64(f.unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => Value::Array(a.iter().map(|e| from_json(e, depth + 1)).collect::<Option<_>>()?),
        J::Object(o) => Value::Map(
            o.iter().map(|(k, e)| Some((Value::from(k.as_str()), from_json(e, depth + 1)?))).collect::<Option<_>>()?,
        ),
    })
}

/// What a controller answers on its reply socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply<'a> {
    /// `RegisterRetMsg`, naming the heartbeat socket when there is one (`host:port`).
    Registered {
        /// Where the worker sends heartbeats (LMCache's `extra_config["heartbeat_url"]`).
        heartbeat_url: Option<&'a str>,
    },
    /// `HeartbeatRetMsg` with no commands (a full sync would stall the engine).
    Heartbeat,
    /// `ErrorMsg`.
    Error(&'a str),
}

/// The msgpack frame of `reply`, as LMCache's msgspec decoder reads it.
pub fn encode_reply(reply: &Reply<'_>) -> Vec<u8> {
    let tagged = |tag: &str, fields: Vec<(&str, Value)>| {
        let mut pairs = vec![(Value::from("type"), Value::from(tag))];
        pairs.extend(fields.into_iter().map(|(k, v)| (Value::from(k), v)));
        Value::Map(pairs)
    };
    let value = match reply {
        Reply::Registered { heartbeat_url } => {
            let extra = heartbeat_url.map(|url| (Value::from("heartbeat_url"), Value::from(url))).into_iter().collect();
            tagged("RegisterRetMsg", vec![("extra_config", Value::Map(extra))])
        }
        Reply::Heartbeat => tagged("HeartbeatRetMsg", vec![("commands", Value::Array(Vec::new()))]),
        Reply::Error(error) => tagged("ErrorMsg", vec![("error", Value::from(*error))]),
    };
    let mut out = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut out, &value);
    out
}

#[cfg(test)]
#[path = "lmcache_tests.rs"]
mod tests;
