//! vLLM's KV-cache events for the simulated engine: what its prefix cache stores and evicts,
//! published over ZMQ exactly as vLLM's `ZmqEventPublisher` does, with vLLM's replay service.
//!
//! Each request's changes are one batch: a `BlockRemoved` per evicted block, then one
//! `BlockStored` for the blocks it newly cached (the sim's chained block hashes, the token ids
//! of `super::tokens`, block size 16, medium `GPU`); `/reset_prefix_cache` publishes
//! `AllBlocksCleared`. A batch is the msgpack array `[ts, events, data_parallel_rank]`, its
//! events maps tagged by `"type"` (vLLM now) or, with `--kv-positional`, tagged positional
//! arrays (vLLM before). On the PUB socket (`--kv-events`) a batch is the three frames
//! `[topic, seq (8 bytes big-endian), payload]`, `seq` counting batches from 0.
//!
//! Request handlers only queue batches (an unbounded channel, never blocking); one task owns
//! the PUB socket, numbers and sends them and keeps the last [`REPLAY_BUFFER`]. The ROUTER
//! socket (`--kv-replay`) takes `[identity, "", start_seq]` and answers every buffered batch
//! with `seq >= start_seq` as `[identity, "", topic, seq, payload]`, then the end marker
//! `[identity, "", "", 0xFFFFFFFFFFFFFFFF, ""]` (vLLM sends an empty topic frame there).

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rmpv::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage, ZmqResult};

use super::metrics::BLOCK_TOKENS;
use super::prefix::CacheChanges;
use super::tokens::token_ids;

/// Batches kept for replay (vLLM's default `buffer_steps`).
pub const REPLAY_BUFFER: usize = 10_000;
/// The sequence number of the replay's end marker (vLLM's -1 as 8 big-endian bytes).
pub const END_SEQ: u64 = u64::MAX;
/// vLLM's storage medium of the GPU KV cache.
const MEDIUM: &str = "GPU";

/// KV-cache event options of `ferrogate sim` (none set: no sockets, no events).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KvEventsArgs {
    /// Publish vLLM KV-cache events on a ZMQ PUB socket bound to ADDR, e.g.
    /// `tcp://127.0.0.1:5557` (`tcp://*:5557` binds every interface).
    #[arg(long, value_name = "ADDR")]
    pub kv_events: Option<String>,
    /// Answer vLLM's KV-event replay requests on a ZMQ ROUTER socket bound to ADDR.
    #[arg(long, value_name = "ADDR")]
    pub kv_replay: Option<String>,
    /// Encode events as tagged positional arrays (older vLLM) instead of tagged maps.
    #[arg(long)]
    pub kv_positional: bool,
    /// Topic frame of every event message.
    #[arg(long, value_name = "TOPIC", default_value = "")]
    pub kv_topic: String,
}

/// One KV-cache event, as vLLM names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvEvent {
    /// Full blocks newly cached, first to last.
    BlockStored {
        /// Chained hashes of the blocks.
        block_hashes: Vec<u64>,
        /// Hash of the block before the first one, if any.
        parent_block_hash: Option<u64>,
        /// Token ids of all the blocks, in order.
        token_ids: Vec<u32>,
        /// Tokens per block.
        block_size: u32,
    },
    /// Blocks evicted.
    BlockRemoved {
        /// Hashes of the evicted blocks.
        block_hashes: Vec<u64>,
    },
    /// The whole cache was emptied.
    AllBlocksCleared,
}

impl KvEvent {
    /// The event's fields in vLLM's declaration order, the `type` tag first.
    fn fields(&self) -> Vec<(&'static str, Value)> {
        let hashes = |hashes: &[u64]| Value::Array(hashes.iter().map(|&hash| Value::from(hash)).collect());
        match self {
            KvEvent::BlockStored { block_hashes, parent_block_hash, token_ids, block_size } => vec![
                ("type", Value::from("BlockStored")),
                ("block_hashes", hashes(block_hashes)),
                ("parent_block_hash", parent_block_hash.map_or(Value::Nil, Value::from)),
                ("token_ids", Value::Array(token_ids.iter().map(|&id| Value::from(id)).collect())),
                ("block_size", Value::from(*block_size)),
                ("lora_id", Value::Nil),
                ("medium", Value::from(MEDIUM)),
                ("lora_name", Value::Nil),
            ],
            KvEvent::BlockRemoved { block_hashes } => vec![
                ("type", Value::from("BlockRemoved")),
                ("block_hashes", hashes(block_hashes)),
                ("medium", Value::from(MEDIUM)),
            ],
            KvEvent::AllBlocksCleared => vec![("type", Value::from("AllBlocksCleared"))],
        }
    }

    /// msgspec's encoding: a map tagged by `"type"`, or with `positional` the tagged array.
    fn to_value(&self, positional: bool) -> Value {
        let fields = self.fields().into_iter();
        if positional {
            Value::Array(fields.map(|(_, value)| value).collect())
        } else {
            Value::Map(fields.map(|(key, value)| (Value::from(key), value)).collect())
        }
    }
}

/// The msgpack payload of one batch, byte for byte as vLLM's msgspec encoder writes it:
/// `[ts (float64), events, data_parallel_rank (0)]`.
pub fn encode_batch(ts: f64, events: &[KvEvent], positional: bool) -> Vec<u8> {
    let events = events.iter().map(|event| event.to_value(positional)).collect();
    let batch = Value::Array(vec![Value::F64(ts), Value::Array(events), Value::from(0u8)]);
    let mut payload = Vec::new();
    // Writing into a Vec cannot fail.
    let _ = rmpv::encode::write_value(&mut payload, &batch);
    payload
}

/// The events of one prefix-cache lookup of `prompt`: a `BlockRemoved` per evicted block,
/// then one `BlockStored` for the newly stored blocks (none if nothing changed).
pub fn cache_events(prompt: &str, changes: &CacheChanges) -> Vec<KvEvent> {
    let mut events: Vec<KvEvent> =
        changes.evicted.iter().map(|&hash| KvEvent::BlockRemoved { block_hashes: vec![hash] }).collect();
    if !changes.stored.is_empty() {
        let block = BLOCK_TOKENS as usize;
        let ids = token_ids(prompt);
        let start = (changes.first_stored * block).min(ids.len());
        let end = (start + changes.stored.len() * block).min(ids.len());
        events.push(KvEvent::BlockStored {
            block_hashes: changes.stored.clone(),
            parent_block_hash: changes.parent,
            token_ids: ids[start..end].to_vec(),
            block_size: BLOCK_TOKENS as u32,
        });
    }
    events
}

/// Queues batches for the publisher task; cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct KvSender(mpsc::UnboundedSender<Vec<KvEvent>>);

impl KvSender {
    /// Queues `events` as one batch (nothing when empty).
    pub fn publish(&self, events: Vec<KvEvent>) {
        if !events.is_empty() && self.0.send(events).is_err() {
            tracing::debug!("sim: the KV-event publisher has stopped; batch dropped");
        }
    }
}

/// The addresses the publisher's sockets are bound to (ports resolved).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvEndpoints {
    /// The PUB socket (`--kv-events`), e.g. `tcp://127.0.0.1:5557`.
    pub events: Option<String>,
    /// The ROUTER socket (`--kv-replay`).
    pub replay: Option<String>,
}

/// A running KV-event publisher: bound sockets and the task that owns them. The task ends
/// when every [`KvSender`] (this handle's and the router's) is dropped.
#[derive(Debug)]
pub struct KvPublisher {
    sender: KvSender,
    endpoints: KvEndpoints,
}

impl KvPublisher {
    /// Binds the sockets `args` asks for and starts the publisher; `None` when it asks for
    /// neither. Must run inside a tokio runtime.
    ///
    /// # Errors
    /// A socket cannot be bound (bad address, port in use).
    pub async fn start(args: &KvEventsArgs) -> io::Result<Option<Self>> {
        if args.kv_events.is_none() && args.kv_replay.is_none() {
            return Ok(None);
        }
        let mut endpoints = KvEndpoints::default();
        let mut socket = None;
        if let Some(addr) = &args.kv_events {
            let mut publisher = PubSocket::new();
            endpoints.events = Some(bind(&mut publisher, "--kv-events", addr).await?);
            socket = Some(publisher);
        }
        let buffer = Buffer::default();
        let topic = Bytes::from(args.kv_topic.clone().into_bytes());
        let mut replay = None;
        if let Some(addr) = &args.kv_replay {
            let mut router = RouterSocket::new();
            endpoints.replay = Some(bind(&mut router, "--kv-replay", addr).await?);
            replay = Some(tokio::spawn(serve_replay(router, Arc::clone(&buffer), topic.clone())));
        }
        let (sender, batches) = mpsc::unbounded_channel();
        let publisher = Publisher { socket, buffer, topic, positional: args.kv_positional, replay };
        tokio::spawn(publisher.run(batches));
        Ok(Some(Self { sender: KvSender(sender), endpoints }))
    }

    /// Where the sockets are bound.
    pub fn endpoints(&self) -> &KvEndpoints {
        &self.endpoints
    }

    /// A handle that queues batches.
    pub fn sender(&self) -> KvSender {
        self.sender.clone()
    }
}

/// Binds `socket` to `addr` (`*` as the host means every interface); returns the bound address.
async fn bind<S: Socket>(socket: &mut S, flag: &str, addr: &str) -> io::Result<String> {
    let target = addr.replacen("://*:", "://0.0.0.0:", 1);
    match socket.bind(&target).await {
        Ok(endpoint) => Ok(endpoint.to_string()),
        Err(error) => Err(io::Error::other(format!("cannot bind {flag} {addr}: {error}"))),
    }
}

/// The last [`REPLAY_BUFFER`] batches as `(seq, payload)`, oldest first.
type Buffer = Arc<Mutex<VecDeque<(u64, Bytes)>>>;

/// The publisher task's state.
struct Publisher {
    socket: Option<PubSocket>,
    buffer: Buffer,
    topic: Bytes,
    positional: bool,
    replay: Option<JoinHandle<()>>,
}

impl Publisher {
    /// Numbers, encodes, sends and keeps every batch until the senders are gone; then stops
    /// the replay service too.
    async fn run(mut self, mut batches: mpsc::UnboundedReceiver<Vec<KvEvent>>) {
        let mut seq = 0u64;
        while let Some(events) = batches.recv().await {
            let payload = Bytes::from(encode_batch(unix_seconds(), &events, self.positional));
            if let Some(socket) = &mut self.socket {
                let frames = message(self.topic.clone(), [seq_frame(seq), payload.clone()]);
                if let Err(error) = socket.send(frames).await {
                    tracing::warn!(%error, seq, "sim: KV-event batch not sent");
                }
            }
            self.keep(seq, payload);
            seq += 1;
        }
        if let Some(replay) = self.replay.take() {
            replay.abort();
        }
    }

    /// Buffers a sent batch for replay, dropping the oldest beyond [`REPLAY_BUFFER`].
    fn keep(&self, seq: u64, payload: Bytes) {
        let mut buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        if buffer.len() == REPLAY_BUFFER {
            buffer.pop_front();
        }
        buffer.push_back((seq, payload));
    }
}

/// Answers replay requests until the socket fails (or the publisher aborts the task).
async fn serve_replay(mut socket: RouterSocket, buffer: Buffer, topic: Bytes) {
    loop {
        let request = match socket.recv().await {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(%error, "sim: the KV replay socket failed; replay stopped");
                return;
            }
        };
        let Some((identity, start)) = replay_request(request) else { continue };
        let batches = since(&buffer, start);
        if let Err(error) = answer_replay(&mut socket, identity, &topic, batches).await {
            tracing::debug!(%error, "sim: KV replay answer not delivered");
        }
    }
}

/// `(identity, start_seq)` of a ROUTER-received `[identity, "", start_seq (8 bytes)]`.
fn replay_request(request: ZmqMessage) -> Option<(Bytes, u64)> {
    let frames = request.into_vec();
    let start = match frames.as_slice() {
        [_, _, start] => <[u8; 8]>::try_from(start.as_ref()).ok(),
        _ => None,
    };
    match (frames.into_iter().next(), start) {
        (Some(identity), Some(start)) => Some((identity, u64::from_be_bytes(start))),
        _ => {
            tracing::debug!("sim: malformed KV replay request ignored");
            None
        }
    }
}

/// The buffered batches with `seq >= start`.
fn since(buffer: &Buffer, start: u64) -> Vec<(u64, Bytes)> {
    let buffer = buffer.lock().unwrap_or_else(PoisonError::into_inner);
    buffer.iter().filter(|(seq, _)| *seq >= start).cloned().collect()
}

/// Sends `batches` to `identity`, then the end marker.
async fn answer_replay(
    socket: &mut RouterSocket,
    identity: Bytes,
    topic: &Bytes,
    batches: Vec<(u64, Bytes)>,
) -> ZmqResult<()> {
    for (seq, payload) in batches {
        socket.send(message(identity.clone(), [Bytes::new(), topic.clone(), seq_frame(seq), payload])).await?;
    }
    socket.send(message(identity, [Bytes::new(), Bytes::new(), seq_frame(END_SEQ), Bytes::new()])).await
}

/// A multipart message of `first` then `rest`.
fn message(first: Bytes, rest: impl IntoIterator<Item = Bytes>) -> ZmqMessage {
    let mut message = ZmqMessage::from(first);
    rest.into_iter().for_each(|frame| message.push_back(frame));
    message
}

fn seq_frame(seq: u64) -> Bytes {
    Bytes::copy_from_slice(&seq.to_be_bytes())
}

fn unix_seconds() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |elapsed| elapsed.as_secs_f64())
}

#[cfg(test)]
mod tests;
