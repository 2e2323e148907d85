//! vLLM's KV-cache events for the simulated engine: what its prefix cache stores and evicts,
//! published over ZMQ exactly as vLLM's `ZmqEventPublisher` does, with vLLM's replay service.
//!
//! Each request's changes are one batch: a `BlockRemoved` per evicted block, then one
//! `BlockStored` for the blocks it newly cached (the sim's chained block hashes, the token ids
//! of `super::tokens`, block size 16, medium `GPU`); with an LMCache tier, also medium-`CPU`
//! events of what the tier stores and drops ([`cache_events`]); `/reset_prefix_cache`
//! publishes `AllBlocksCleared`. A batch is the msgpack array `[ts, events, data_parallel_rank]`, its
//! events maps tagged by `"type"` (vLLM now) or, with `--kv-positional`, tagged positional
//! arrays (vLLM before). On the PUB socket (`--kv-events`) a batch is the three frames
//! `[topic, seq (8 bytes big-endian), payload]`, `seq` counting batches from 0.
//!
//! Request handlers only queue batches (an unbounded channel, never blocking); one task owns
//! the PUB socket, numbers and sends them and keeps the last [`REPLAY_BUFFER`]. A batch queued
//! with [`KvSender::publish_dropped`] (`x-sim-kv-drop`) is numbered and kept but not sent, as
//! if ZMQ had dropped it at its high-water mark. The ROUTER socket (`--kv-replay`, in
//! `kv_events/replay.rs`) takes `[identity, "", start_seq]` and answers every buffered batch
//! with `seq >= start_seq` as `[identity, "", topic, seq, payload]`, then the end marker
//! `[identity, "", "", 0xFFFFFFFFFFFFFFFF, ""]` (vLLM sends an empty topic frame there).
//!
//! [`KvPublisher::shutdown`] stops the task and closes both sockets, so their addresses can be
//! bound again at once (a restarted engine).

mod replay;

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rmpv::Value;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use zeromq::{PubSocket, Socket, SocketSend, ZmqMessage};

use super::metrics::BLOCK_TOKENS;
use super::prefix::CacheChanges;
use super::tokens::token_ids;
use replay::Replay;

/// Batches kept for replay (vLLM's default `buffer_steps`).
pub const REPLAY_BUFFER: usize = 10_000;
/// The sequence number of the replay's end marker (vLLM's -1 as 8 big-endian bytes).
pub const END_SEQ: u64 = u64::MAX;
/// vLLM's storage medium of the GPU KV cache.
const MEDIUM: &str = "GPU";
/// The medium LMCache's connectors name for its CPU tier.
const OFFLOAD_MEDIUM: &str = "CPU";

/// KV-cache event options of `ferrogate sim` (none set: no sockets, no events).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct KvEventsArgs {
    /// Publish vLLM KV-cache events on a ZMQ PUB socket bound to ADDR, e.g.
    /// `tcp://127.0.0.1:5557` (`tcp://*:5557` binds every interface); default: no events.
    #[arg(long, value_name = "ADDR")]
    pub kv_events: Option<String>,
    /// Answer vLLM's KV-event replay requests on a ZMQ ROUTER socket bound to ADDR; default:
    /// no replay.
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
    /// Blocks the LMCache tier stored (`BlockStored` with medium `CPU`, no token ids: the
    /// blocks are known by the hashes of their earlier GPU events, as offload connectors send
    /// them).
    OffloadStored {
        /// Hashes of the blocks.
        block_hashes: Vec<u64>,
    },
    /// Blocks the LMCache tier dropped (`BlockRemoved` with medium `CPU`).
    OffloadRemoved {
        /// Hashes of the blocks.
        block_hashes: Vec<u64>,
    },
    /// The whole cache was emptied.
    AllBlocksCleared,
}

impl KvEvent {
    /// The event's fields in vLLM's declaration order, the `type` tag first.
    fn fields(&self) -> Vec<(&'static str, Value)> {
        let hashes = |hashes: &[u64]| Value::Array(hashes.iter().map(|&hash| Value::from(hash)).collect());
        let stored = |block_hashes: &[u64], parent: Option<u64>, token_ids: &[u32], block_size: u64, medium: &str| {
            vec![
                ("type", Value::from("BlockStored")),
                ("block_hashes", hashes(block_hashes)),
                ("parent_block_hash", parent.map_or(Value::Nil, Value::from)),
                ("token_ids", Value::Array(token_ids.iter().map(|&id| Value::from(id)).collect())),
                ("block_size", Value::from(block_size)),
                ("lora_id", Value::Nil),
                ("medium", Value::from(medium)),
                ("lora_name", Value::Nil),
            ]
        };
        let removed = |block_hashes: &[u64], medium: &str| {
            vec![
                ("type", Value::from("BlockRemoved")),
                ("block_hashes", hashes(block_hashes)),
                ("medium", Value::from(medium)),
            ]
        };
        match self {
            KvEvent::BlockStored { block_hashes, parent_block_hash, token_ids, block_size } => {
                stored(block_hashes, *parent_block_hash, token_ids, u64::from(*block_size), MEDIUM)
            }
            KvEvent::BlockRemoved { block_hashes } => removed(block_hashes, MEDIUM),
            KvEvent::OffloadStored { block_hashes } => stored(block_hashes, None, &[], BLOCK_TOKENS, OFFLOAD_MEDIUM),
            KvEvent::OffloadRemoved { block_hashes } => removed(block_hashes, OFFLOAD_MEDIUM),
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

/// The events of one prefix-cache lookup of `prompt`: with an LMCache tier, a CPU
/// `BlockStored` of the blocks it took from the GPU cache (before they leave it, as LMCache
/// stores before vLLM frees); a `BlockRemoved` per evicted GPU block; a CPU `BlockRemoved` of
/// the blocks the tier dropped; then one `BlockStored` for the blocks newly stored in GPU
/// memory (none if nothing changed).
pub fn cache_events(prompt: &str, changes: &CacheChanges) -> Vec<KvEvent> {
    let mut events = Vec::new();
    if !changes.offloaded.is_empty() {
        events.push(KvEvent::OffloadStored { block_hashes: changes.offloaded.clone() });
    }
    events.extend(changes.evicted.iter().map(|&hash| KvEvent::BlockRemoved { block_hashes: vec![hash] }));
    if !changes.dropped.is_empty() {
        events.push(KvEvent::OffloadRemoved { block_hashes: changes.dropped.clone() });
    }
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

/// What the publisher task is asked to do.
#[derive(Debug)]
enum Command {
    /// Number and keep a batch; send it on the PUB socket when `live`.
    Batch { events: Vec<KvEvent>, live: bool },
    /// Stop and close the sockets (commands queued before are handled first).
    Stop,
}

/// Queues batches for the publisher task; cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct KvSender(mpsc::UnboundedSender<Command>);

impl KvSender {
    /// Queues `events` as one batch (nothing when empty).
    pub fn publish(&self, events: Vec<KvEvent>) {
        self.queue(events, true);
    }

    /// Queues `events` as one batch that is numbered and kept for replay but not sent on the
    /// PUB socket, as if ZMQ had dropped it at its high-water mark (`x-sim-kv-drop`): the next
    /// batch sent shows the gap. Nothing when empty.
    pub fn publish_dropped(&self, events: Vec<KvEvent>) {
        self.queue(events, false);
    }

    fn queue(&self, events: Vec<KvEvent>, live: bool) {
        if !events.is_empty() && self.0.send(Command::Batch { events, live }).is_err() {
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

/// A running KV-event publisher: bound sockets and the task that owns them. The task ends on
/// [`KvPublisher::shutdown`], or once every [`KvSender`] (this handle's and the router's) is
/// dropped; either way it closes both sockets.
#[derive(Debug)]
pub struct KvPublisher {
    sender: KvSender,
    endpoints: KvEndpoints,
    task: JoinHandle<()>,
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
            match Replay::start(addr, Arc::clone(&buffer), topic.clone()).await {
                Ok((service, endpoint)) => {
                    endpoints.replay = Some(endpoint);
                    replay = Some(service);
                }
                Err(error) => {
                    if let Some(socket) = socket {
                        close("--kv-events", socket).await;
                    }
                    return Err(error);
                }
            }
        }
        let (sender, commands) = mpsc::unbounded_channel();
        let publisher = Publisher { socket, buffer, topic, positional: args.kv_positional, replay };
        let task = tokio::spawn(publisher.run(commands));
        Ok(Some(Self { sender: KvSender(sender), endpoints, task }))
    }

    /// Where the sockets are bound.
    pub fn endpoints(&self) -> &KvEndpoints {
        &self.endpoints
    }

    /// A handle that queues batches.
    pub fn sender(&self) -> KvSender {
        self.sender.clone()
    }

    /// Stops the publisher: batches queued before are still numbered, kept and sent, later
    /// ones are dropped. Returns once both sockets are closed, so their addresses can be
    /// bound again right away.
    pub async fn shutdown(self) {
        // Fails only when the task has ended already; awaiting it then returns at once.
        let _ = self.sender.0.send(Command::Stop);
        if let Err(error) = self.task.await {
            tracing::warn!(%error, "sim: the KV-event publisher task failed");
        }
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

/// Closes `socket`, returning once its bound addresses are released.
async fn close<S: Socket>(flag: &str, socket: S) {
    for error in socket.close().await {
        tracing::debug!(%error, flag, "sim: error while closing a KV-event socket");
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
    replay: Option<Replay>,
}

impl Publisher {
    /// Numbers, encodes, keeps and (unless dropped) sends every batch until told to stop or
    /// every sender is gone; then closes the PUB socket and stops the replay service.
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        let mut seq = 0u64;
        while let Some(Command::Batch { events, live }) = commands.recv().await {
            let payload = Bytes::from(encode_batch(unix_seconds(), &events, self.positional));
            // Kept first, so a subscriber that sees a batch can always replay it.
            self.keep(seq, payload.clone());
            if live {
                self.send(seq, payload).await;
            }
            seq += 1;
        }
        if let Some(socket) = self.socket.take() {
            close("--kv-events", socket).await;
        }
        if let Some(replay) = self.replay.take() {
            replay.stop().await;
        }
    }

    /// Sends a batch on the PUB socket, if there is one.
    async fn send(&mut self, seq: u64, payload: Bytes) {
        let Some(socket) = &mut self.socket else { return };
        if let Err(error) = socket.send(message(self.topic.clone(), [seq_frame(seq), payload])).await {
            tracing::warn!(%error, seq, "sim: KV-event batch not sent");
        }
    }

    /// Buffers a batch for replay, dropping the oldest beyond [`REPLAY_BUFFER`].
    fn keep(&self, seq: u64, payload: Bytes) {
        let mut buffer = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        if buffer.len() == REPLAY_BUFFER {
            buffer.pop_front();
        }
        buffer.push_back((seq, payload));
    }
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
