//! The KV service: batches in, feed answers out; and a real ZMQ publisher (PUB and replay
//! ROUTER on loopback, as vLLM binds them) feeding it through the consumer.

use std::time::Duration;

use ferrogate_core::config::KvSource;
use ferrogate_core::kv::{KvFeed, KvOp, Tier};
use rmpv::Value;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

use super::*;

fn layout(events: &str, replay: Option<&str>) -> Layout {
    let source = KvSource { events: events.into(), replay: replay.map(String::from) };
    Layout::one_pool(vec![("a:1".into(), Some(source)), ("b:1".into(), None)])
}

/// A map-form batch with one `BlockStored` of `blocks` blocks of 4 tokens (hashes from
/// `first_hash`, tokens from `first_token`), chained to `parent`.
fn stored(first_hash: u64, blocks: u64, parent: Option<u64>, first_token: u64) -> Vec<u8> {
    stored_in("GPU", first_hash, blocks, parent, first_token)
}

/// [`stored`] with the blocks in `medium`.
fn stored_in(medium: &str, first_hash: u64, blocks: u64, parent: Option<u64>, first_token: u64) -> Vec<u8> {
    let hashes = (first_hash..first_hash + blocks).map(Value::from).collect();
    let tokens = (first_token..first_token + 4 * blocks).map(Value::from).collect();
    let event = Value::Map(vec![
        ("type".into(), "BlockStored".into()),
        ("block_hashes".into(), Value::Array(hashes)),
        ("parent_block_hash".into(), parent.map_or(Value::Nil, Value::from)),
        ("token_ids".into(), Value::Array(tokens)),
        ("block_size".into(), 4.into()),
        ("lora_id".into(), Value::Nil),
        ("medium".into(), medium.into()),
        ("lora_name".into(), Value::Nil),
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &Value::Array(vec![1.5.into(), Value::Array(vec![event]), 0.into()])).unwrap();
    out
}

/// The epoch of a layout that started one.
fn epoch_of(installed: Installed) -> u64 {
    match installed {
        Installed::Epoch(epoch, _) => epoch,
        _ => panic!("the layout should have started a new epoch"),
    }
}

fn decode(answer: Answer) -> KvFeed {
    match answer {
        Answer::Feed(body) => KvFeed::decode(&body).unwrap(),
        Answer::NotModified => panic!("not modified"),
    }
}

#[test]
fn the_feed_answers_changes_since_a_generation_or_everything() {
    let kv = Kv::default();
    let epoch = epoch_of(kv.install(layout("tcp://127.0.0.1:1", None)));
    assert!(matches!(kv.install(layout("tcp://127.0.0.1:1", None)), Installed::Unchanged), "same layout: kept");
    let src = Source { epoch, pool: 0, endpoint: 0, incarnation: 1 };
    kv.live(src, 0, stored(1, 2, None, 100).into(), 0);
    let all = decode(kv.feed(None));
    assert_eq!((all.reset, all.ops.len(), all.generation), (true, 2, 2));
    assert!(matches!(kv.feed(Some((epoch, 2))), Answer::NotModified));
    kv.live(src, 1, stored(3, 1, Some(2), 108).into(), 0);
    let delta = decode(kv.feed(Some((epoch, 2))));
    assert_eq!((delta.reset, delta.ops.len(), delta.generation), (false, 1, 3));
    let other = decode(kv.feed(Some((epoch ^ 2, 3))));
    assert_eq!((other.reset, other.ops.len()), (true, 3), "another epoch gets everything");
    // A restart (sequence back to 0) clears the endpoint.
    kv.live(src, 0, stored(9, 1, None, 500).into(), 0);
    let stats = &kv.stats(0)[0].1[0];
    assert_eq!((stats.restarts, stats.blocks, stats.events), (1, 1, 3));
    // A layout with other pool settings is a new epoch with an empty index.
    let mut other = layout("tcp://127.0.0.1:1", None);
    other.pools[0].block_size = 8;
    let next = epoch_of(kv.install(other));
    assert_ne!(next, epoch);
    assert_eq!(decode(kv.feed(Some((epoch, 5)))).ops.len(), 0);
    kv.live(src, 1, stored(1, 1, None, 100).into(), 0);
    assert_eq!(kv.blocks()[0].1, 0, "a batch of the old epoch is dropped");
}

/// A replay running when the subscription drops still delivers, and the batches held for it
/// are applied when it ends.
#[test]
fn a_disconnect_during_a_replay_loses_no_batch() {
    let kv = Kv::default();
    let epoch = epoch_of(kv.install(layout("tcp://127.0.0.1:1", Some("tcp://127.0.0.1:2"))));
    let src = Source { epoch, pool: 0, endpoint: 0, incarnation: 1 };
    kv.connected(src, true);
    kv.live(src, 0, chain(0).into(), 0);
    assert_eq!(kv.live(src, 2, chain(2).into(), 0), Some(1), "a gap: batch 2 held, 1 asked for");
    kv.connected(src, false);
    kv.replayed(src, 1, chain(1).into(), 0);
    kv.replay_done(src, 0);
    assert_eq!((kv.blocks()[0].1, kv.stats(0)[0].1[0].last_sequence), (3, Some(2)));
}

/// LMCache's CPU tier sends no removals: its blocks leave the feed `offload_ttl_secs` after
/// their last store, GPU blocks stay.
#[test]
fn offloaded_blocks_leave_the_feed_at_their_ttl() {
    let kv = Kv::default();
    let epoch = epoch_of(kv.install(layout("tcp://127.0.0.1:1", None)));
    let src = Source { epoch, pool: 0, endpoint: 0, incarnation: 1 };
    kv.live(src, 0, stored(1, 1, None, 100).into(), 1_000);
    kv.live(src, 1, stored_in("cpu", 5, 2, None, 200).into(), 1_000);
    let all = decode(kv.feed(None));
    let cpu_adds = all.ops.iter().filter(|op| matches!(op, KvOp::Add { tier: Tier::Cpu, .. })).count();
    assert_eq!((all.ops.len(), cpu_adds), (3, 2));
    kv.expire(300_999);
    assert!(matches!(kv.feed(Some((epoch, all.generation))), Answer::NotModified), "not yet due");
    kv.expire(301_000);
    let delta = decode(kv.feed(Some((epoch, all.generation))));
    assert!(delta.ops.iter().all(|op| matches!(op, KvOp::Remove { tier: Tier::Cpu, .. })), "{:?}", delta.ops);
    assert_eq!((delta.ops.len(), kv.blocks()[0].1), (2, 1), "the GPU block stays");
}

#[test]
fn garbage_is_counted_and_changes_nothing() {
    let kv = Kv::default();
    let epoch = epoch_of(kv.install(layout("tcp://127.0.0.1:1", None)));
    let src = Source { epoch, pool: 0, endpoint: 0, incarnation: 1 };
    kv.live(src, 0, Bytes::from_static(b"\xc1garbage"), 0);
    kv.malformed(src);
    assert_eq!(kv.stats(0)[0].1[0].malformed, 2);
    assert_eq!(decode(kv.feed(None)).ops.len(), 0);
}

async fn bound<S: Socket>(socket: &mut S) -> String {
    socket.bind("tcp://127.0.0.1:0").await.unwrap().to_string()
}

async fn publish(socket: &mut PubSocket, seq: u64, payload: Vec<u8>) {
    let frames = vec![Bytes::new(), Bytes::copy_from_slice(&seq.to_be_bytes()), Bytes::from(payload)];
    socket.send(ZmqMessage::try_from(frames).unwrap()).await.unwrap();
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Batches the engine published before the subscription: `0..REPLAYABLE`.
const REPLAYABLE: u64 = 10;

/// The engine's replay buffer: batches `0..=published`.
type Published = Arc<std::sync::atomic::AtomicU64>;

/// Answers replay requests with the buffered batches from their start, then the end marker,
/// sending each request's start to `starts`.
async fn serve_replays(
    mut router: RouterSocket,
    published: Published,
    starts: tokio::sync::mpsc::UnboundedSender<u64>,
) {
    loop {
        let request = router.recv().await.unwrap().into_vec();
        let [identity, empty, start] = request.as_slice() else { panic!("replay request {request:?}") };
        assert!(empty.is_empty());
        let start = u64::from_be_bytes(start.as_ref().try_into().unwrap());
        let frame = |seq: u64| Bytes::copy_from_slice(&seq.to_be_bytes());
        for seq in start..=published.load(std::sync::atomic::Ordering::SeqCst) {
            let frames = vec![identity.clone(), Bytes::new(), Bytes::new(), frame(seq), Bytes::from(chain(seq))];
            router.send(ZmqMessage::try_from(frames).unwrap()).await.unwrap();
        }
        let end = vec![identity.clone(), Bytes::new(), Bytes::new(), frame(u64::MAX), Bytes::new()];
        router.send(ZmqMessage::try_from(end).unwrap()).await.unwrap();
        if starts.send(start).is_err() {
            return;
        }
    }
}

/// Batch `seq` of a chain of one-block batches, each the parent of the next.
fn chain(seq: u64) -> Vec<u8> {
    stored(seq + 1, 1, (seq > 0).then_some(seq), 100 + 4 * seq)
}

#[tokio::test]
async fn a_zmq_publisher_feeds_the_index_and_a_gap_is_replayed() {
    let (mut publisher, mut router) = (PubSocket::new(), RouterSocket::new());
    let (events, replay) = (bound(&mut publisher).await, bound(&mut router).await);
    let (starts_tx, mut starts) = tokio::sync::mpsc::unbounded_channel();
    let published: Published = Arc::new((REPLAYABLE - 1).into());
    tokio::spawn(serve_replays(router, published.clone(), starts_tx));
    let kv = Arc::new(Kv::default());
    let Installed::Epoch(_, spawns) = kv.install(layout(&events, Some(&replay))) else { panic!("a new epoch") };
    let (_shutdown, shutdown_rx) = watch::channel(false);
    zmq::spawn_consumers(kv.clone(), spawns, shutdown_rx);
    let stats = || kv.stats(0)[0].1[0].clone();
    // A new subscription first replays what the engine published before it: batches 0..=4.
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), starts.recv()).await.unwrap(), Some(0));
    until("the resync", || stats().last_sequence == Some(REPLAYABLE - 1)).await;
    assert!(stats().connected);
    // Live batches go on (published until the subscription has one: slow joiner).
    published.store(REPLAYABLE, std::sync::atomic::Ordering::SeqCst);
    for _ in 0..200 {
        publish(&mut publisher, REPLAYABLE, chain(REPLAYABLE)).await;
        tokio::time::sleep(Duration::from_millis(25)).await;
        if stats().last_sequence == Some(REPLAYABLE) {
            break;
        }
    }
    // Batch 11 is lost; 12 arrives: the consumer asks for 11 onwards and gets it.
    published.store(REPLAYABLE + 2, std::sync::atomic::Ordering::SeqCst);
    publish(&mut publisher, REPLAYABLE + 2, chain(REPLAYABLE + 2)).await;
    assert_eq!(tokio::time::timeout(Duration::from_secs(5), starts.recv()).await.unwrap(), Some(REPLAYABLE + 1));
    until("the gap filled", || stats().last_sequence == Some(REPLAYABLE + 2)).await;
    let s = stats();
    assert_eq!((s.gaps, s.replays, s.blocks, s.restarts), (1, 2, REPLAYABLE as usize + 3, 0), "{s:?}");
    // The publisher goes away: the endpoint is disconnected.
    drop(publisher);
    until("disconnected", || !kv.stats(0)[0].1[0].connected).await;
    assert!(!decode(kv.feed(None)).providers[0].endpoints[0].connected);
}
