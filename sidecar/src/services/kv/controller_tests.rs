//! The controller channel on LMCache 0.5.6's own message bytes (`testdata/lmcache/`): what
//! workers push lands in the CPU or storage tier of their endpoint, registrations and
//! heartbeats are answered as LMCache's msgspec encodes the answers, and the sockets work
//! with a real DEALER and PUSH.

use std::time::Duration;

use ferrogate_core::config::{Controller as Config, KvSource};
use rmpv::Value;
use zeromq::{DealerSocket, PushSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::super::{EndpointStats, Layout, PoolLayout, Source};
use super::*;

/// The key `batched-admit-evict.msgpack` admits first.
const ADMITTED: u64 = 12_345_678_901_234_567_890;

fn fixture(name: &str) -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/lmcache");
    std::fs::read(dir.join(name)).unwrap()
}

fn config(pull: &str, reply: Option<&str>) -> Config {
    Config { pull: pull.into(), reply: reply.map(String::from), instances: Vec::new() }
}

/// A pool of two endpoints, the first at the address `register.msgpack` names.
fn layout(controller: Config) -> Layout {
    let source = KvSource { events: "tcp://10.0.0.5:5557".into(), replay: None };
    Layout {
        pools: vec![PoolLayout {
            provider: "pool".into(),
            block_size: 4,
            topic: String::new(),
            max_blocks: 1000,
            offload_ttl_secs: 300,
            endpoints: vec![("10.0.0.5:8000".into(), Some(source)), ("10.0.0.6:8000".into(), None)],
            controller: Some(controller),
        }],
    }
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

/// A Kv with the pool installed and engine 0's GPU block `ADMITTED` indexed.
fn kv_with_block(controller: Config) -> (Arc<Kv>, u64) {
    let kv = Arc::new(Kv::default());
    let epoch = kv.install(layout(controller)).unwrap();
    kv.live(Source { epoch, pool: 0, endpoint: 0 }, 0, gpu_block(ADMITTED).into(), 0);
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

#[test]
fn pushes_after_registration_land_in_the_endpoints_tier() {
    let (kv, epoch) = kv_with_block(config("tcp://127.0.0.1:1", None));
    let endpoints = vec!["10.0.0.5:8000".to_string(), "10.0.0.6:8000".to_string()];
    let mut c = Controller::new(kv.clone(), epoch, 0, endpoints, &config("tcp://127.0.0.1:1", None));
    // An instance nothing names yet: dropped.
    c.pushed(&fixture("batched-admit-evict.msgpack"));
    assert_eq!((stats(&kv)[0].cpu_blocks, stats(&kv)[0].lmcache_ops), (0, 0));
    // Its registration (from 10.0.0.5) is answered as LMCache encodes RegisterRetMsg, and
    // makes it the first endpoint's.
    let answer = c.answer(request(&fixture("register.msgpack"))).unwrap().into_vec();
    assert_eq!(answer, [Bytes::from_static(b"worker-1"), Bytes::new(), Bytes::from(fixture("reply-register.msgpack"))]);
    assert!(stats(&kv)[0].lmcache_seen_ms.is_some());
    // Admits of a known chunk hash add the CPU tier; an unknown one (7) changes nothing.
    c.pushed(&fixture("batched-admit-evict.msgpack"));
    let s = &stats(&kv)[0];
    assert_eq!((s.gpu_blocks, s.cpu_blocks, s.lmcache_ops), (1, 1, 3));
    // The same in JSON; an evict takes the block out of that tier only.
    let evict = r#"{"type": "BatchedKVOperationMsg", "instance_id": "vllm-0", "worker_id": 0,
        "location": "LocalCPUBackend", "operations": [{"op_type": "evict", "key": 12345678901234567890, "seq_num": 3}]}"#;
    c.pushed(evict.as_bytes());
    assert_eq!((stats(&kv)[0].gpu_blocks, stats(&kv)[0].cpu_blocks), (1, 0));
    // The disk backend is the storage tier.
    let disk = evict.replace("LocalCPUBackend", "LocalDiskBackend").replace("evict", "admit");
    c.pushed(disk.as_bytes());
    assert_eq!(stats(&kv)[0].storage_blocks, 1);
    // A heartbeat gets no commands; anything else asked is an error.
    let beat = c.answer(request(&fixture("heartbeat.msgpack"))).unwrap().into_vec();
    assert_eq!(beat[2], Bytes::from(fixture("reply-heartbeat.msgpack")));
    let other = c.answer(request(&fixture("batched-disk.msgpack"))).unwrap().into_vec();
    let decoded: Value = rmpv::decode::read_value(&mut &other[2][..]).unwrap();
    assert_eq!(decoded.as_map().unwrap()[0].1.as_str(), Some("ErrorMsg"));
    // Garbage is skipped.
    c.pushed(b"\xc1 not msgpack");
}

#[test]
fn a_configured_instance_needs_no_registration() {
    let mut named = config("tcp://127.0.0.1:1", None);
    named.instances = vec![("vllm-0".into(), "10.0.0.6:8000".into())];
    let (kv, epoch) = kv_with_block(named.clone());
    let endpoints = vec!["10.0.0.5:8000".to_string(), "10.0.0.6:8000".to_string()];
    let mut c = Controller::new(kv.clone(), epoch, 0, endpoints, &named);
    c.pushed(&fixture("batched-admit-evict.msgpack"));
    // Endpoint 1 never stored the block, so its hash means nothing there; the ops are counted.
    assert_eq!((stats(&kv)[1].cpu_blocks, stats(&kv)[1].lmcache_ops), (0, 3));
    assert_eq!(stats(&kv)[0].lmcache_ops, 0);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A worker's two sockets against the running channel: DEALER registers and is answered,
/// PUSH sends a batch that reaches the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_registers_then_pushes_over_real_sockets() {
    let (pull, reply) = (format!("tcp://127.0.0.1:{}", free_port()), format!("tcp://127.0.0.1:{}", free_port()));
    let c = config(&pull, Some(&reply));
    let (kv, epoch) = kv_with_block(c.clone());
    let endpoints = vec!["10.0.0.5:8000".to_string(), "10.0.0.6:8000".to_string()];
    let (stop_tx, stop) = watch::channel(false);
    let (_shutdown_tx, shutdown) = watch::channel(false);
    let task = tokio::spawn(Controller::new(kv.clone(), epoch, 0, endpoints, &c).run(c.clone(), stop, shutdown));
    let mut dealer = DealerSocket::new();
    dealer.connect(&reply).await.unwrap();
    let mut register = ZmqMessage::from(Bytes::new());
    register.push_back(Bytes::from(fixture("register.msgpack")));
    dealer.send(register).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), dealer.recv()).await.unwrap().unwrap().into_vec();
    assert_eq!(answer.last(), Some(&Bytes::from(fixture("reply-register.msgpack"))));
    let mut push = PushSocket::new();
    push.connect(&pull).await.unwrap();
    push.send(ZmqMessage::from(Bytes::from(fixture("batched-admit-evict.msgpack")))).await.unwrap();
    for _ in 0..500 {
        if stats(&kv)[0].cpu_blocks == 1 {
            stop_tx.send(true).unwrap();
            task.await.unwrap();
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the pushed admit never reached the index: {:?}", stats(&kv)[0]);
}
