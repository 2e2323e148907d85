//! Tests of the sim's KV-cache events: the encoder against msgspec's bytes
//! (`testdata/kv-events/`), and the PUB and ROUTER sockets end to end with a SUB and a DEALER
//! of the zeromq crate, driven by requests to the sim router.

use std::time::Duration;

use axum::Router;
use serde_json::json;
use tower::ServiceExt as _;
use zeromq::{DealerSocket, SocketRecv, SubSocket};

use super::*;
use crate::sim::{prefix, router_with_events, SimArgs};

const H1: u64 = 17_507_053_300_047_258_101;
const H2: u64 = 14_424_512_966_625_972_522;
const H3: u64 = 6_803_416_000_392_209_307;

fn fixture(name: &str) -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/kv-events");
    std::fs::read(dir.join(name)).unwrap()
}

#[test]
fn positional_encoding_matches_msgspec() {
    // v0.11's BlockStored had 7 fields; from v0.12 vLLM appends `lora_name` (nil here), which
    // the sim sends: msgspec's bytes with an 8-element array and one more nil (0xc0).
    let mut expected = fixture("v011-positional.msgpack");
    assert_eq!((expected[11], expected[44]), (0x97, 0x00)); // the event's array header, the dp rank
    expected[11] = 0x98;
    expected.insert(44, 0xc0);
    let stored =
        KvEvent::BlockStored { block_hashes: vec![H1], parent_block_hash: None, token_ids: vec![1, 2], block_size: 2 };
    assert_eq!(encode_batch(1.5, &[stored], true), expected);
    let removed = KvEvent::BlockRemoved { block_hashes: vec![H3] };
    let cleared = encode_batch(1.5, &[removed, KvEvent::AllBlocksCleared], true);
    assert_eq!(cleared, fixture("v011-removed-cleared.msgpack"));
}

#[test]
fn map_encoding_matches_msgspec() {
    let events = [
        KvEvent::BlockStored {
            block_hashes: vec![H1, H2, H3],
            parent_block_hash: None,
            token_ids: (1000..1048).collect(),
            block_size: 16,
        },
        KvEvent::BlockRemoved { block_hashes: vec![H1] },
        KvEvent::AllBlocksCleared,
    ];
    assert_eq!(encode_batch(1_760_000_000.125, &events, false), fixture("v026-map.msgpack"));
}

#[test]
fn cache_changes_become_removed_then_stored() {
    let prompt = (0..40).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
    let changes = prefix::CacheChanges {
        first_stored: 1,
        parent: Some(7),
        stored: vec![9],
        evicted: vec![3, 4],
        ..Default::default()
    };
    let ids = crate::sim::tokens::token_ids(&prompt);
    assert_eq!(
        cache_events(&prompt, &changes),
        [
            KvEvent::BlockRemoved { block_hashes: vec![3] },
            KvEvent::BlockRemoved { block_hashes: vec![4] },
            KvEvent::BlockStored {
                block_hashes: vec![9],
                parent_block_hash: Some(7),
                token_ids: ids[16..32].to_vec(),
                block_size: 16
            },
        ]
    );
    assert!(cache_events(&prompt, &prefix::CacheChanges::default()).is_empty());
}

/// With an LMCache tier: the tier's store comes first (before the GPU removals), its drops
/// after them, and both decode as CPU-tier events (tokenless stores, known by their hashes).
#[test]
fn offload_changes_are_cpu_tier_events() {
    use ferrogate_core::kv::events::{decode, Event};
    use ferrogate_core::kv::Tier;
    let changes =
        prefix::CacheChanges { evicted: vec![3, 4], offloaded: vec![3, 4], dropped: vec![1], ..Default::default() };
    let events = cache_events("", &changes);
    assert_eq!(
        events,
        [
            KvEvent::OffloadStored { block_hashes: vec![3, 4] },
            KvEvent::BlockRemoved { block_hashes: vec![3] },
            KvEvent::BlockRemoved { block_hashes: vec![4] },
            KvEvent::OffloadRemoved { block_hashes: vec![1] },
        ]
    );
    let batch = decode(&encode_batch(1.0, &events, false)).unwrap();
    let Event::Stored(stored) = &batch.events[0] else { panic!("{:?}", batch.events[0]) };
    assert_eq!(
        (stored.hashes.as_slice(), stored.tier, stored.tokens.len(), stored.block_size),
        (&[3, 4][..], Tier::Cpu, 0, 16)
    );
    assert_eq!(batch.events[1], Event::Removed { hashes: vec![3], tier: Tier::Gpu, group: None });
    assert_eq!(batch.events[3], Event::Removed { hashes: vec![1], tier: Tier::Cpu, group: None });
}

#[test]
fn flags_parse_into_sim_args() {
    use clap::Parser as _;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }
    let cli = Cli::parse_from([
        "sim",
        "--kv-events",
        "tcp://*:5557",
        "--kv-replay",
        "tcp://127.0.0.1:5558",
        "--kv-positional",
        "--lmcache-blocks",
        "64",
        "--prefill-us-per-token",
        "50",
    ]);
    assert_eq!((cli.sim.lmcache.lmcache_blocks, cli.sim.lmcache.prefill_us_per_token), (64, 50.0));
    assert_eq!(cli.sim.lmcache.lmcache_load_ratio, 0.1);
    assert_eq!(cli.sim.kv.kv_events.as_deref(), Some("tcp://*:5557"));
    assert_eq!(cli.sim.kv.kv_replay.as_deref(), Some("tcp://127.0.0.1:5558"));
    assert!(cli.sim.kv.kv_positional);
    assert_eq!(cli.sim.kv.kv_topic, "");
    assert!(Cli::parse_from(["sim"]).sim.kv.kv_events.is_none());
}

/// One batch as a SUB receives it.
#[derive(Debug)]
struct Batch {
    topic: Bytes,
    seq: u64,
    payload: Bytes,
    events: Vec<Value>,
}

fn batch(frames: ZmqMessage) -> Batch {
    let frames = frames.into_vec();
    assert_eq!(frames.len(), 3, "{frames:?}");
    let seq = u64::from_be_bytes(frames[1].as_ref().try_into().unwrap());
    let value = rmpv::decode::read_value(&mut frames[2].as_ref()).unwrap();
    let events = value[1].as_array().unwrap().clone();
    assert_eq!(value[2], Value::from(0));
    Batch { topic: frames[0].clone(), seq, payload: frames[2].clone(), events }
}

async fn recv_batch(sub: &mut SubSocket) -> Batch {
    batch(tokio::time::timeout(Duration::from_secs(5), sub.recv()).await.expect("no batch").unwrap())
}

/// A sim router with a publisher on ephemeral ports (4 cached blocks), and a SUB that is
/// known to be subscribed (probe batches until one arrives: PUB/SUB's slow joiner).
async fn start(topic: &str) -> (Router, KvPublisher, SubSocket, u64) {
    let kv = KvEventsArgs {
        kv_events: Some("tcp://127.0.0.1:0".into()),
        kv_replay: Some("tcp://127.0.0.1:0".into()),
        kv_topic: topic.into(),
        ..KvEventsArgs::default()
    };
    let publisher = KvPublisher::start(&kv).await.unwrap().unwrap();
    let app = router_with_events(&SimArgs { kv_blocks: 4, ..SimArgs::default() }, Some(&publisher));
    let mut sub = SubSocket::new();
    sub.connect(publisher.endpoints().events.as_deref().unwrap()).await.unwrap();
    sub.subscribe("").await.unwrap();
    // Once one probe arrives the subscription is live; drain to the last probe sent.
    let mut probes = 0u64;
    loop {
        publisher.sender().publish(vec![KvEvent::AllBlocksCleared]);
        probes += 1;
        if let Ok(frames) = tokio::time::timeout(Duration::from_millis(100), sub.recv()).await {
            let mut seq = batch(frames.unwrap()).seq;
            while seq + 1 < probes {
                seq = recv_batch(&mut sub).await.seq;
            }
            return (app, publisher, sub, seq);
        }
    }
}

async fn post(app: &Router, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let request = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null))
}

fn words(from: usize, n: usize) -> String {
    (from..from + n).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
}

fn field<'a>(event: &'a Value, key: &str) -> &'a Value {
    let map = event.as_map().unwrap();
    &map.iter().find(|(k, _)| k.as_str() == Some(key)).unwrap().1
}

fn u64s(value: &Value) -> Vec<u64> {
    value.as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect()
}

#[tokio::test]
async fn a_chat_request_publishes_its_blocks_with_the_tokenize_ids() {
    let (app, _publisher, mut sub, probe) = start("kv@sim@sim-small").await;
    let messages = json!([{"role": "system", "content": words(0, 40)}, {"role": "user", "content": "hi"}]);
    let chat = json!({"model": "sim-small", "max_tokens": 1, "messages": messages});
    assert_eq!(post(&app, "/v1/chat/completions", chat.clone()).await.0, 200);
    let stored = recv_batch(&mut sub).await;
    assert_eq!((stored.topic.as_ref(), stored.seq), (&b"kv@sim@sim-small"[..], probe + 1));
    let [event] = stored.events.as_slice() else { panic!("{stored:?}") };
    let keys: Vec<&str> = event.as_map().unwrap().iter().map(|(k, _)| k.as_str().unwrap()).collect();
    let expected =
        ["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"];
    assert_eq!(keys, expected);
    assert_eq!(field(event, "type").as_str(), Some("BlockStored"));
    let text = format!("system: {}\nuser: hi", words(0, 40));
    assert_eq!(u64s(field(event, "block_hashes")), prefix::block_hashes(&text));
    assert!(field(event, "parent_block_hash").is_nil() && field(event, "lora_id").is_nil());
    assert_eq!((field(event, "block_size").as_u64(), field(event, "medium").as_str()), (Some(16), Some("GPU")));
    // /tokenize of the same messages gives the ids the two 16-token blocks carry.
    let (status, tokenized) = post(&app, "/tokenize", json!({"model": "sim-small", "messages": messages})).await;
    assert_eq!((status, tokenized["count"].as_u64()), (200, Some(43)));
    let tokens: Vec<u64> = tokenized["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap()).collect();
    assert_eq!(u64s(field(event, "token_ids")), tokens[..32]);
    // A repeat stores nothing new; a longer conversation stores its new block after the old ones.
    assert_eq!(post(&app, "/v1/chat/completions", chat).await.0, 200);
    let longer = json!([{"role": "system", "content": words(0, 40)}, {"role": "user", "content": words(100, 20)}]);
    assert_eq!(post(&app, "/v1/chat/completions", json!({"model": "sim-small", "messages": longer})).await.0, 200);
    let grown = recv_batch(&mut sub).await;
    assert_eq!(grown.seq, probe + 2);
    let hashes = u64s(field(&stored.events[0], "block_hashes"));
    assert_eq!(field(&grown.events[0], "parent_block_hash").as_u64(), Some(hashes[1]));
}

#[tokio::test]
async fn eviction_and_reset_publish_removed_and_cleared() {
    let (app, _publisher, mut sub, _) = start("").await;
    let first = json!({"model": "sim-small", "max_tokens": 1, "prompt": words(0, 32)});
    assert_eq!(post(&app, "/v1/completions", first).await.0, 200);
    let head = u64s(field(&recv_batch(&mut sub).await.events[0], "block_hashes"));
    // 3 more blocks in a cache of 4: the first prompt's tail goes, in the same batch.
    let second = json!({"model": "sim-small", "max_tokens": 1, "prompt": words(500, 48)});
    assert_eq!(post(&app, "/v1/completions", second).await.0, 200);
    let batch = recv_batch(&mut sub).await;
    assert_eq!(batch.events.len(), 2, "{batch:?}");
    assert_eq!(field(&batch.events[0], "type").as_str(), Some("BlockRemoved"));
    assert_eq!(u64s(field(&batch.events[0], "block_hashes")), [head[1]]);
    assert_eq!(field(&batch.events[0], "medium").as_str(), Some("GPU"));
    assert_eq!(u64s(field(&batch.events[1], "block_hashes")), prefix::block_hashes(&words(500, 48)));
    assert_eq!(post(&app, "/reset_prefix_cache", json!({})).await.0, 200);
    let cleared = recv_batch(&mut sub).await;
    assert_eq!(cleared.events, [Value::Map(vec![("type".into(), "AllBlocksCleared".into())])]);
    // The cache is empty: the same prompt is stored again, from its first block.
    assert_eq!(post(&app, "/v1/completions", json!({"model": "sim-small", "prompt": words(0, 16)})).await.0, 200);
    assert_eq!(u64s(field(&recv_batch(&mut sub).await.events[0], "block_hashes")), head[..1]);
}

async fn replay_from(dealer: &mut DealerSocket, start: u64) -> Vec<Vec<Bytes>> {
    let request = ZmqMessage::try_from(vec![Bytes::new(), Bytes::copy_from_slice(&start.to_be_bytes())]).unwrap();
    dealer.send(request).await.unwrap();
    let mut replies = Vec::new();
    loop {
        let reply = tokio::time::timeout(Duration::from_secs(5), dealer.recv()).await.expect("no reply").unwrap();
        let frames = reply.into_vec();
        let end = frames.get(2).is_some_and(|seq| seq.as_ref() == END_SEQ.to_be_bytes());
        replies.push(frames);
        if end {
            return replies;
        }
    }
}

#[tokio::test]
async fn a_dealer_gets_the_buffered_batches_then_the_end_marker() {
    let (app, publisher, mut sub, probe) = start("t").await;
    let mut published = Vec::new();
    for i in 0..3 {
        let body = json!({"model": "sim-small", "max_tokens": 1, "prompt": words(i * 100, 16)});
        assert_eq!(post(&app, "/v1/completions", body).await.0, 200);
        published.push(recv_batch(&mut sub).await);
    }
    let mut dealer = DealerSocket::new();
    dealer.connect(publisher.endpoints().replay.as_deref().unwrap()).await.unwrap();
    let replies = replay_from(&mut dealer, probe + 2).await;
    assert_eq!(replies.len(), 3, "{replies:?}"); // seqs probe+2, probe+3, then the end marker
    for (reply, batch) in replies.iter().zip(&published[1..]) {
        let expected = [Bytes::new(), Bytes::from_static(b"t"), Bytes::copy_from_slice(&batch.seq.to_be_bytes())];
        assert_eq!(reply[..3], expected);
        assert_eq!(reply[3], batch.payload);
    }
    assert_eq!(replies[2], [Bytes::new(), Bytes::new(), Bytes::from(vec![0xff; 8]), Bytes::new()]);
    // A malformed request is ignored; the service still answers the next one (all 4 + end).
    let bad = ZmqMessage::try_from(vec![Bytes::new(), Bytes::from_static(b"abc")]).unwrap();
    dealer.send(bad).await.unwrap();
    assert_eq!(replay_from(&mut dealer, 0).await.len(), usize::try_from(probe).unwrap() + 5);
}

#[tokio::test]
async fn start_binds_what_is_asked_and_reports_bad_addresses() {
    assert!(KvPublisher::start(&KvEventsArgs::default()).await.unwrap().is_none());
    let any = KvEventsArgs { kv_events: Some("tcp://*:0".into()), ..KvEventsArgs::default() };
    let publisher = KvPublisher::start(&any).await.unwrap().unwrap();
    assert!(publisher.endpoints().events.as_deref().unwrap().starts_with("tcp://0.0.0.0:"), "{publisher:?}");
    assert_eq!(publisher.endpoints().replay, None);
    let bad = KvEventsArgs { kv_replay: Some("nonsense".into()), ..KvEventsArgs::default() };
    let error = KvPublisher::start(&bad).await.unwrap_err();
    assert!(error.to_string().starts_with("cannot bind --kv-replay nonsense"), "{error}");
    // `run` refuses to start on an address it cannot bind.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let args = SimArgs { kv: bad, ..SimArgs::default() };
    assert!(crate::sim::run(args, listener, std::future::pending()).await.is_err());
}

mod lifecycle;
