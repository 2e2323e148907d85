//! The controller channel on LMCache 0.5.6's own message bytes (`testdata/lmcache/`): what
//! workers push lands in the CPU or storage tier of their endpoint, registrations and
//! heartbeats are answered as LMCache's msgspec encodes the answers, and the sockets work
//! with a real DEALER and PUSH, across a new layout and a restarted sidecar.

use std::time::Duration;

use ferrogate_core::config::{Controller as Config, KvSource};
use rmpv::Value;
use zeromq::{DealerSocket, PushSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::super::{EndpointStats, Layout, Source};
use super::*;

/// The key `batched-admit-evict.msgpack` admits first.
const ADMITTED: u64 = 12_345_678_901_234_567_890;

/// How long a test waits for what the sockets deliver (a loaded machine is slow, never this).
const PATIENCE: Duration = Duration::from_secs(30);

fn fixture(name: &str) -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/lmcache");
    std::fs::read(dir.join(name)).unwrap()
}

fn config(pull: &str, reply: Option<&str>) -> Config {
    Config { pull: pull.into(), reply: reply.map(String::from), instances: Vec::new() }
}

const ENDPOINTS: [&str; 2] = ["10.0.0.5:8000", "10.0.0.6:8000"];

/// A pool of two endpoints, the first at the address `register.msgpack` names, whose
/// offloaded blocks live `ttl` seconds.
fn layout(controller: Config, ttl: u64) -> Layout {
    let source = KvSource { events: "tcp://10.0.0.5:5557".into(), replay: None };
    let mut layout = Layout::one_pool(vec![(ENDPOINTS[0].into(), Some(source)), (ENDPOINTS[1].into(), None)]);
    (layout.pools[0].offload_ttl_secs, layout.pools[0].controller) = (ttl, Some(controller));
    layout
}

/// A batch storing one GPU block (engine hash `hash`, 4 tokens), as vLLM publishes it.
fn gpu_block(hash: u64) -> Vec<u8> {
    let event = Value::Map(vec![
        ("type".into(), "BlockStored".into()),
        ("block_hashes".into(), Value::Array(vec![Value::from(hash)])),
        ("parent_block_hash".into(), Value::Nil),
        ("token_ids".into(), Value::Array((0..4u32).map(Value::from).collect())),
        ("block_size".into(), Value::from(4)),
        ("medium".into(), "GPU".into()),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &Value::Array(vec![Value::F64(1.0), Value::Array(vec![event])])).unwrap();
    out
}

/// Installs `layout` in `kv` and indexes engine 0's GPU block `ADMITTED` under it.
fn install(kv: &Kv, layout: Layout) -> u64 {
    let super::super::Installed::Epoch(epoch, _) = kv.install(layout) else { panic!("a new epoch") };
    kv.live(Source { epoch, pool: 0, endpoint: 0, incarnation: 1 }, 0, gpu_block(ADMITTED).into(), 0);
    epoch
}

/// A Kv with the pool installed and engine 0's GPU block `ADMITTED` indexed.
fn kv_with_block(controller: Config) -> (Arc<Kv>, u64) {
    let kv = Arc::new(Kv::default());
    let epoch = install(&kv, layout(controller, 300));
    (kv, epoch)
}

fn stats(kv: &Kv) -> Vec<EndpointStats> {
    kv.stats(0).remove(0).1
}

fn request(payload: &[u8]) -> ZmqMessage {
    let mut message = ZmqMessage::from(Bytes::from_static(b"worker-1"));
    message.push_back(Bytes::new());
    message.push_back(Bytes::copy_from_slice(payload));
    message
}

/// A handler serving `kv`'s layout `epoch`, answering with a heartbeat socket at `reply`.
fn handler(kv: &Arc<Kv>, epoch: u64, c: &Config, reply: Option<&str>) -> Handler {
    let mut h = Handler::new(reply.map(String::from));
    h.attach(Controller::new(kv.clone(), epoch, 0, c));
    h
}

#[test]
fn pushes_after_registration_land_in_the_endpoints_tier() {
    let c = config("tcp://127.0.0.1:1", None);
    let (kv, epoch) = kv_with_block(c.clone());
    let mut h = handler(&kv, epoch, &c, None);
    // An instance nothing names yet: dropped.
    h.pushed(&fixture("batched-admit-evict.msgpack"));
    assert_eq!((stats(&kv)[0].cpu_blocks, stats(&kv)[0].lmcache_ops), (0, 0));
    // Its registration (from 10.0.0.5) is answered as LMCache encodes RegisterRetMsg, and
    // makes it the first endpoint's.
    let answer = h.answer(request(&fixture("register.msgpack"))).unwrap().into_vec();
    assert_eq!(answer, [Bytes::from_static(b"worker-1"), Bytes::new(), Bytes::from(fixture("reply-register.msgpack"))]);
    assert!(stats(&kv)[0].lmcache_seen_ms.is_some());
    // Admits of a known chunk hash add the CPU tier; an unknown one (7) changes nothing.
    h.pushed(&fixture("batched-admit-evict.msgpack"));
    let s = &stats(&kv)[0];
    assert_eq!((s.gpu_blocks, s.cpu_blocks, s.lmcache_ops), (1, 1, 3));
    // The same in JSON; an evict takes the block out of that tier only.
    let evict = r#"{"type": "BatchedKVOperationMsg", "instance_id": "vllm-0", "worker_id": 0,
        "location": "LocalCPUBackend", "operations": [{"op_type": "evict", "key": 12345678901234567890, "seq_num": 3}]}"#;
    h.pushed(evict.as_bytes());
    assert_eq!((stats(&kv)[0].gpu_blocks, stats(&kv)[0].cpu_blocks), (1, 0));
    // The disk backend is the storage tier.
    let disk = evict.replace("LocalCPUBackend", "LocalDiskBackend").replace("evict", "admit");
    h.pushed(disk.as_bytes());
    assert_eq!(stats(&kv)[0].storage_blocks, 1);
    // A heartbeat gets no commands; anything else asked is an error.
    let beat = h.answer(request(&fixture("heartbeat.msgpack"))).unwrap().into_vec();
    assert_eq!(beat[2], Bytes::from(fixture("reply-heartbeat.msgpack")));
    let other = h.answer(request(&fixture("batched-disk.msgpack"))).unwrap().into_vec();
    let decoded: Value = rmpv::decode::read_value(&mut &other[2][..]).unwrap();
    assert_eq!(decoded.as_map().unwrap()[0].1.as_str(), Some("ErrorMsg"));
    // Garbage is skipped.
    h.pushed(b"\xc1 not msgpack");
}

#[test]
fn a_configured_instance_needs_no_registration() {
    let mut named = config("tcp://127.0.0.1:1", None);
    named.instances = vec![("vllm-0".into(), "10.0.0.6:8000".into())];
    let (kv, epoch) = kv_with_block(named.clone());
    let mut h = handler(&kv, epoch, &named, None);
    h.pushed(&fixture("batched-admit-evict.msgpack"));
    // Endpoint 1 never stored the block, so its hash means nothing there; the ops are counted.
    assert_eq!((stats(&kv)[1].cpu_blocks, stats(&kv)[1].lmcache_ops), (0, 3));
    assert_eq!(stats(&kv)[0].lmcache_ops, 0);
}

/// The registration's answer names the reply socket as the heartbeat socket, in LMCache's
/// `host:port` form (a wildcard bind host made the address the worker reaches); the address an
/// instance gave is kept across layouts, and pushes between two layouts wait for the next.
#[test]
fn registrations_name_the_heartbeat_socket_and_outlive_layouts() {
    let c = config("tcp://127.0.0.1:1", Some("tcp://127.0.0.1:8500"));
    let (kv, epoch) = kv_with_block(c.clone());
    let mut h = handler(&kv, epoch, &c, c.reply.as_deref());
    let answer = h.answer(request(&fixture("register.msgpack"))).unwrap().into_vec();
    assert_eq!(answer[2], Bytes::from(fixture("reply-register-heartbeat.msgpack")));
    assert_eq!(heartbeat_url_for("tcp://0.0.0.0:8400", "127.0.0.1").as_deref(), Some("127.0.0.1:8400"));
    assert_eq!(heartbeat_url_for("tcp://[::1]:8400", "::1").as_deref(), Some("[::1]:8400"));
    assert_eq!(heartbeat_url_for("tcp://0.0.0.0:8400", "not an address"), None);
    // A new layout (another TTL): the instance is still the first endpoint's.
    h.detach();
    h.pushed(&fixture("batched-admit-evict.msgpack"));
    let epoch = install(&kv, layout(c.clone(), 301));
    h.attach(Controller::new(kv.clone(), epoch, 0, &c));
    assert_eq!((stats(&kv)[0].cpu_blocks, stats(&kv)[0].lmcache_ops), (1, 3), "the held push, applied");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until `f` holds of the first pool's figures.
async fn until(kv: &Kv, what: &str, f: impl Fn(&[EndpointStats]) -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !f(&stats(kv)) {
        assert!(tokio::time::Instant::now() < deadline, "waited for {what}: {:?}", stats(kv));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs `kv`'s layout `epoch` on the channel of `c` until the returned stop is sent.
fn run(kv: &Arc<Kv>, epoch: u64, c: &Config, shutdown: &watch::Receiver<bool>) -> watch::Sender<bool> {
    let (stop_tx, stop) = watch::channel(false);
    let task = Controller::new(kv.clone(), epoch, 0, c);
    tokio::spawn(task.run(c.clone(), stop, shutdown.clone()));
    stop_tx
}

/// An LMCache 0.5.6 worker's sockets (`lmcache/v1/cache_controller/worker.py`): it registers
/// once, on a DEALER to the reply socket; it beats on a DEALER of its own to the
/// `heartbeat_url` it was answered, if any, making that socket again when an answer does not
/// come in time; it pushes on a PUSH socket connected once. Its transport reconnects a PUSH
/// connection the other side closed, as libzmq does; the worker itself never does.
struct Worker {
    push: PushSocket,
    pull: String,
}

impl Worker {
    async fn start(pull: &str, reply: &str) -> Worker {
        let mut push = PushSocket::new();
        push.connect(pull).await.unwrap();
        let mut dealer = DealerSocket::new();
        dealer.connect(reply).await.unwrap();
        let mut register = ZmqMessage::from(Bytes::new());
        register.push_back(Bytes::from(fixture("register.msgpack")));
        dealer.send(register).await.unwrap();
        let answer = tokio::time::timeout(PATIENCE, dealer.recv()).await.unwrap().unwrap().into_vec();
        let answer: Value = rmpv::decode::read_value(&mut &answer.last().unwrap()[..]).unwrap();
        let extra = answer.as_map().unwrap().iter().find(|(k, _)| k.as_str() == Some("extra_config")).unwrap();
        let url = extra.1.as_map().unwrap().iter().find(|(k, _)| k.as_str() == Some("heartbeat_url"));
        if let Some((_, url)) = url {
            tokio::spawn(beat(format!("tcp://{}", url.as_str().unwrap())));
        }
        Worker { push, pull: pull.to_string() }
    }

    /// Pushes one batch (admit `ADMITTED`, evict, admit 7).
    async fn push(&mut self) {
        let batch = || ZmqMessage::from(Bytes::from(fixture("batched-admit-evict.msgpack")));
        if self.push.send(batch()).await.is_err() {
            self.push = PushSocket::new();
            if self.push.connect(&self.pull).await.is_ok() {
                let _ = self.push.send(batch()).await;
            }
        }
    }
}

/// LMCache's heartbeat loop: every second, `heartbeat.msgpack` on a DEALER to `url`, a new
/// socket when the answer does not come within a second (its receive timeout, set short).
async fn beat(url: String) {
    let mut dealer: Option<DealerSocket> = None;
    loop {
        if dealer.is_none() {
            let mut socket = DealerSocket::new();
            if socket.connect(&url).await.is_ok() {
                dealer = Some(socket);
            }
        }
        if let Some(socket) = dealer.as_mut() {
            let mut message = ZmqMessage::from(Bytes::new());
            message.push_back(Bytes::from(fixture("heartbeat.msgpack")));
            let sent = socket.send(message).await.is_ok();
            let answered =
                sent && matches!(tokio::time::timeout(Duration::from_secs(1), socket.recv()).await, Ok(Ok(_)));
            if !answered {
                dealer = None;
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A worker's two sockets against the running channel: DEALER registers and is answered,
/// PUSH sends a batch that reaches the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_registers_then_pushes_over_real_sockets() {
    let (pull, reply) = (format!("tcp://127.0.0.1:{}", free_port()), format!("tcp://127.0.0.1:{}", free_port()));
    let c = config(&pull, Some(&reply));
    let (kv, epoch) = kv_with_block(c.clone());
    let (shutdown_tx, shutdown) = watch::channel(false);
    let _stop = run(&kv, epoch, &c, &shutdown);
    let mut worker = Worker::start(&pull, &reply).await;
    worker.push().await;
    until(&kv, "the pushed admit", |s| s[0].cpu_blocks == 1).await;
    shutdown_tx.send(true).unwrap();
}

/// A hot reload that changes the pool's layout (`lmcache_ttl_secs` 300 → 301) starts a new
/// epoch; a worker that connected before it, and never connects again, is counted after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_connected_before_a_new_layout_is_counted_after_it() {
    let (pull, reply) = (format!("tcp://127.0.0.1:{}", free_port()), format!("tcp://127.0.0.1:{}", free_port()));
    let c = config(&pull, Some(&reply));
    let (kv, epoch) = kv_with_block(c.clone());
    let (shutdown_tx, shutdown) = watch::channel(false);
    let stop = run(&kv, epoch, &c, &shutdown);
    let mut worker = Worker::start(&pull, &reply).await;
    worker.push().await;
    until(&kv, "the admit before the reload", |s| s[0].lmcache_ops == 3).await;
    // The reload, as the KV service makes it: the new layout installed, the old one stopped,
    // the new one started.
    let epoch = install(&kv, layout(c.clone(), 301));
    stop.send(true).unwrap();
    let _stop = run(&kv, epoch, &c, &shutdown);
    assert_eq!(stats(&kv)[0].lmcache_ops, 0, "a new epoch");
    for _ in 0..3 {
        worker.push().await;
    }
    until(&kv, "the admits after the reload", |s| s[0].cpu_blocks == 1 && s[0].lmcache_ops == 9).await;
    shutdown_tx.send(true).unwrap();
}

/// An instance matched by its address (no `instances` entry) registers once; after the
/// sidecar restarts, its heartbeats tell the new one where it runs, and its pushes count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_matched_worker_is_counted_again_after_a_restart() {
    let (pull, reply) = (format!("tcp://127.0.0.1:{}", free_port()), format!("tcp://127.0.0.1:{}", free_port()));
    let c = config(&pull, Some(&reply));
    let (kv, epoch) = kv_with_block(c.clone());
    let (shutdown_tx, shutdown) = watch::channel(false);
    let _stop = run(&kv, epoch, &c, &shutdown);
    let mut worker = Worker::start(&pull, &reply).await;
    worker.push().await;
    until(&kv, "the admit before the restart", |s| s[0].lmcache_ops == 3).await;
    // The restart: everything the old sidecar knew is gone, the addresses are bound again.
    shutdown_tx.send(true).unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while channel::running(&pull) {
        assert!(tokio::time::Instant::now() < deadline, "the old channel never released its sockets");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (kv, epoch) = kv_with_block(c.clone());
    let (shutdown_tx, shutdown) = watch::channel(false);
    let _stop = run(&kv, epoch, &c, &shutdown);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while stats(&kv)[0].cpu_blocks == 0 {
        assert!(tokio::time::Instant::now() < deadline, "never counted after the restart: {:?}", stats(&kv));
        worker.push().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(stats(&kv)[0].lmcache_seen_ms.is_some(), "its heartbeats");
    shutdown_tx.send(true).unwrap();
}
