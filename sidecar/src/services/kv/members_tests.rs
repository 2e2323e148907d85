//! Endpoints that come and go within one layout: kept indexes, vacated and reused slots, late
//! batches of a stopped consumer dropped, a returning address resynced.

use bytes::Bytes;
use ferrogate_core::config::KvSource;
use ferrogate_core::kv::{KvFeed, KvOp};
use rmpv::Value;

use super::super::{Answer, Installed, Kv, Layout, Source};

fn source(host: &str) -> Option<KvSource> {
    Some(KvSource { events: format!("tcp://{host}:5557"), replay: Some(format!("tcp://{host}:5558")) })
}

/// One pool of 4-token blocks over `hosts` (endpoints `host:8000`, publishing at 5557).
fn layout(hosts: &[&str]) -> Layout {
    Layout::one_pool(hosts.iter().map(|h| (format!("{h}:8000"), source(h))).collect())
}

/// A batch storing one 4-token block with hash `hash`.
fn stored(hash: u64) -> Bytes {
    let event = Value::Array(vec![
        "BlockStored".into(),
        Value::Array(vec![hash.into()]),
        Value::Nil,
        Value::Array((0..4).map(|t| Value::from(hash * 10 + t)).collect()),
        4.into(),
        Value::Nil,
    ]);
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, &Value::Array(vec![1.5.into(), Value::Array(vec![event])])).unwrap();
    out.into()
}

fn feed(kv: &Kv, reader: Option<(u64, u64)>) -> KvFeed {
    match kv.feed(reader) {
        Answer::Feed(body) => KvFeed::decode(&body).unwrap(),
        Answer::NotModified => panic!("not modified"),
    }
}

fn table(feed: &KvFeed) -> Vec<&str> {
    feed.providers[0].endpoints.iter().map(|e| e.address.as_str()).collect()
}

#[test]
fn endpoints_that_come_and_go_keep_the_others_blocks() {
    let kv = Kv::default();
    let Installed::Epoch(epoch, spawns) = kv.install(layout(&["10.0.0.1", "10.0.0.2"])) else { panic!("epoch") };
    assert_eq!(spawns.iter().map(|s| (s.src.endpoint, s.src.incarnation)).collect::<Vec<_>>(), [(0, 1), (1, 1)]);
    let (a, b) = (spawns[0].src, spawns[1].src);
    kv.live(a, 0, stored(1), 0);
    kv.live(b, 0, stored(2), 0);
    let before = feed(&kv, None);
    assert_eq!(before.ops.len(), 2);

    // .2 leaves, .3 arrives: same epoch, .1's block kept, .2's cleared, .3 takes the slot.
    let Installed::Endpoints(spawns) = kv.install(layout(&["10.0.0.1", "10.0.0.3"])) else { panic!("endpoints") };
    let [c] = spawns.as_slice() else { panic!("one consumer to start: {}", spawns.len()) };
    assert_eq!((c.src.epoch, c.src.endpoint, c.src.incarnation), (epoch, 1, 2));
    assert_eq!(c.source.events, "tcp://10.0.0.3:5557");
    let delta = feed(&kv, Some((epoch, before.generation)));
    assert!(!delta.reset);
    assert_eq!(delta.ops, [KvOp::Clear { provider: 0, endpoint: 1 }]);
    assert_eq!(table(&delta), ["10.0.0.1:8000", "10.0.0.3:8000"]);
    assert_eq!(kv.blocks()[0].1, 1, "the block of the endpoint that stayed is kept");

    // A late batch of .2's stopped consumer is dropped; .3's lands in the slot.
    kv.live(b, 1, stored(7), 0);
    assert_eq!(kv.blocks()[0].1, 1);
    kv.live(c.src, 0, stored(3), 0);
    assert_eq!(kv.blocks()[0].1, 2);

    // Scaled down to one: the vacant slot stays in the table with no address, out of the stats.
    let Installed::Endpoints(none) = kv.install(layout(&["10.0.0.3"])) else { panic!("endpoints") };
    assert!(none.is_empty());
    assert_eq!(table(&feed(&kv, None)), ["", "10.0.0.3:8000"]);
    let stats = kv.stats(0);
    assert_eq!(stats[0].1.iter().map(|s| s.endpoint.as_str()).collect::<Vec<_>>(), ["10.0.0.3:8000"]);
    assert!(spawns_stop(&mut [c.stop.clone()]), "the consumer of a remaining endpoint runs on");
}

/// Whether every receiver still waits (its endpoint holds its slot).
fn spawns_stop(receivers: &mut [tokio::sync::watch::Receiver<bool>]) -> bool {
    receivers.iter_mut().all(|r| !*r.borrow() && r.has_changed().is_ok())
}

#[test]
fn a_returning_address_is_a_new_engine_resynced_from_its_replay() {
    let kv = Kv::default();
    let Installed::Epoch(epoch, spawns) = kv.install(layout(&["10.0.0.1"])) else { panic!("epoch") };
    let first = spawns[0].src;
    let mut stopped = spawns[0].stop.clone();
    kv.live(first, 0, stored(1), 0);
    assert!(kv.resync(first).is_some());
    kv.replay_done(first, 0);
    let Installed::Endpoints(_) = kv.install(layout(&[])) else { panic!("endpoints") };
    assert!(*stopped.borrow_and_update() || stopped.has_changed().is_err(), "its consumer is told to stop");
    assert_eq!(kv.blocks()[0].1, 0);
    let Installed::Endpoints(spawns) = kv.install(layout(&["10.0.0.1"])) else { panic!("endpoints") };
    let again: Source = spawns[0].src;
    assert_eq!((again.epoch, again.endpoint, again.incarnation), (epoch, 0, 2));
    assert_eq!(kv.resync(again), Some(0), "replayed from its first batch, as a restarted engine");
    assert_eq!(kv.stats(0)[0].1[0].last_sequence, None, "a fresh stream");
}

/// LMCache's admits name an endpoint by address: after the pool changed, they reach the slot
/// that address holds now.
#[test]
fn lmcache_admits_follow_the_address_to_its_slot() {
    use ferrogate_core::kv::lmcache::ChunkOp;
    use ferrogate_core::kv::Tier;
    let kv = Kv::default();
    let Installed::Epoch(epoch, _) = kv.install(layout(&["10.0.0.1", "10.0.0.2"])) else { panic!("epoch") };
    let Installed::Endpoints(spawns) = kv.install(layout(&["10.0.0.2", "10.0.0.3"])) else { panic!("endpoints") };
    let c = spawns[0].src;
    assert_eq!(c.endpoint, 0, ".3 took the slot .1 left");
    assert_eq!(kv.addresses(epoch, 0), ["10.0.0.3:8000", "10.0.0.2:8000"]);
    kv.live(c, 0, stored(5), 0);
    kv.chunk_ops(epoch, 0, "10.0.0.3:8000", Tier::Cpu, &[ChunkOp { admit: true, key: 5, seq: 0 }], 0);
    kv.chunk_ops(epoch, 0, "10.0.0.1:8000", Tier::Cpu, &[ChunkOp { admit: true, key: 5, seq: 0 }], 0);
    let stats = kv.stats(0);
    let by = |a: &str| stats[0].1.iter().find(|s| s.endpoint == a).cloned().unwrap();
    assert_eq!((by("10.0.0.3:8000").lmcache_ops, by("10.0.0.3:8000").cpu_blocks), (1, 1));
    assert_eq!(by("10.0.0.2:8000").lmcache_ops, 0, "an address gone from the pool reaches nothing");
}
