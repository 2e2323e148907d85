//! Costs of precise KV-cache routing, measured natively on one thread:
//!
//! - **ingest**: vLLM event batches (map form, as current vLLM sends them) decoded, ordered
//!   and applied to the sidecar's index with their feed operations logged ([`Kv::live`], what
//!   a consumer does per message; socket I/O excluded), in events and blocks per second;
//! - **memory**: bytes allocated per block by the sidecar's index (keys, holders, the
//!   engine-hash map) and by a worker VM's copy (`KvIndex`), measured with a counting
//!   allocator over 1,000,000 blocks;
//! - **score**: one request's score at 100,000 indexed blocks (its 1,024 token ids hashed
//!   into 64 block keys, all held by one of four endpoints: the longest walk), in ns.
//!
//! `cargo run --profile native -p ferrogate-sidecar --example kv_bench`

use std::alloc::{GlobalAlloc, Layout as AllocLayout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use bytes::Bytes;
use ferrogate_core::config::KvSource;
use ferrogate_core::kv::feed::{FeedEndpoint, FeedProvider};
use ferrogate_core::kv::{block_keys, chain_seed, KvFeed, KvIndex, KvOp, Tier};
use ferrogate_sidecar::services::kv::{Installed, Kv, Layout, PoolLayout, Source};
use rmpv::Value;

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: AllocLayout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: AllocLayout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: AllocLayout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BLOCK: u32 = 16;
const ENDPOINTS: usize = 4;

fn layout(max_blocks: u64) -> Layout {
    let endpoints = (0..ENDPOINTS)
        .map(|i| {
            let source = KvSource { events: format!("tcp://10.0.0.{i}:5557"), replay: None };
            (format!("10.0.0.{i}:8000"), Some(source))
        })
        .collect();
    Layout {
        pools: vec![PoolLayout {
            provider: "pool".into(),
            block_size: BLOCK,
            topic: String::new(),
            max_blocks,
            offload_ttl_secs: 300,
            endpoints,
            controller: None,
        }],
    }
}

/// Batch `seq` of one engine: one `BlockStored` of `blocks` blocks chained to the previous
/// batch's last block (a new chain every 64 batches), map form.
fn batch(seq: u64, blocks: u64) -> Vec<u8> {
    let first = seq * blocks + 1;
    let parent = if seq.is_multiple_of(64) { Value::Nil } else { Value::from(first - 1) };
    let tokens = (0..blocks * u64::from(BLOCK)).map(|t| Value::from((seq * 7919 + t) % 150_000)).collect();
    let event = Value::Map(vec![
        ("type".into(), "BlockStored".into()),
        ("block_hashes".into(), Value::Array((first..first + blocks).map(Value::from).collect())),
        ("parent_block_hash".into(), parent),
        ("token_ids".into(), Value::Array(tokens)),
        ("block_size".into(), BLOCK.into()),
        ("lora_id".into(), Value::Nil),
        ("medium".into(), "GPU".into()),
        ("lora_name".into(), Value::Nil),
    ]);
    let mut out = Vec::new();
    let _ = rmpv::encode::write_value(&mut out, &Value::Array(vec![1.5.into(), Value::Array(vec![event]), 0.into()]));
    out
}

fn ingest(blocks_per_event: u64, events: u64) {
    let kv = Kv::default();
    let epoch = epoch_of(kv.install(layout(1_000_000)));
    let payloads: Vec<Bytes> = (0..events).map(|s| Bytes::from(batch(s, blocks_per_event))).collect();
    let src = Source { epoch, pool: 0, endpoint: 0, incarnation: 1 };
    let start = Instant::now();
    for (seq, payload) in payloads.into_iter().enumerate() {
        kv.live(src, seq as u64, payload, 0);
    }
    let secs = start.elapsed().as_secs_f64();
    let stats = &kv.stats(0)[0].1[0];
    assert_eq!(stats.events, events, "every event applied");
    println!(
        "ingest: {events} events of {blocks_per_event} blocks: {:.0} events/s, {:.0} blocks/s ({:.2} µs per event)",
        events as f64 / secs,
        (events * blocks_per_event) as f64 / secs,
        secs * 1e6 / events as f64
    );
}

fn memory() {
    const N: u64 = 1_000_000;
    let before = LIVE.load(Ordering::Relaxed);
    let kv = Kv::default();
    let epoch = epoch_of(kv.install(layout(N)));
    let src = Source { epoch, pool: 0, endpoint: 0, incarnation: 1 };
    for seq in 0..N / 4 {
        kv.live(src, seq, Bytes::from(batch(seq, 4)), 0);
    }
    let sidecar = LIVE.load(Ordering::Relaxed) - before;
    let blocks = kv.blocks()[0].1 as isize;
    // The filter's copy, built from a reset answer of the same index.
    let Ok(feed) = (match kv.feed(None) {
        ferrogate_sidecar::services::kv::Answer::Feed(body) => KvFeed::decode(&body),
        ferrogate_sidecar::services::kv::Answer::NotModified => Ok(KvFeed::default()),
    }) else {
        return;
    };
    let before = LIVE.load(Ordering::Relaxed);
    let mut index = KvIndex::default();
    index.apply(&feed);
    let filter = LIVE.load(Ordering::Relaxed) - before;
    println!(
        "memory: {blocks} blocks: sidecar {} B per block (index, engine-hash map, feed log of {} ops), filter copy {} B per block",
        sidecar / blocks,
        ferrogate_sidecar::services::kv::LOG_OPS,
        filter / index.len().max(1) as isize
    );
}

fn score() {
    const BLOCKS: u64 = 100_000;
    let endpoints = (0..ENDPOINTS).map(|i| FeedEndpoint { address: format!("10.0.0.{i}:8000"), connected: true });
    let providers = vec![FeedProvider { name: "pool".into(), endpoints: endpoints.collect() }];
    // 1,562 prompts of 64 blocks each, spread over the endpoints; the request is prompt 7.
    let seed = chain_seed("pool", None);
    let prompt = |p: u64| -> Vec<u32> { (0..1024).map(|t| (p * 100_003 + t) as u32).collect() };
    let mut ops = Vec::new();
    for p in 0..BLOCKS / 64 {
        let endpoint = (p % ENDPOINTS as u64) as u8;
        ops.extend(block_keys(seed, &prompt(p), BLOCK).map(|key| KvOp::Add {
            provider: 0,
            endpoint,
            key,
            tier: Tier::Gpu,
        }));
    }
    let mut index = KvIndex::default();
    index.apply(&KvFeed { epoch: 1, generation: 1, reset: true, providers, ops });
    let slots: Vec<String> = (0..ENDPOINTS).map(|i| format!("10.0.0.{i}:8000")).collect();
    let tokens = prompt(7);
    let mut out = Vec::new();
    let n = 200_000;
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(index.score(
            "pool",
            &slots,
            block_keys(seed, std::hint::black_box(&tokens), BLOCK),
            &Default::default(),
            &mut out,
        ));
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(n);
    let header = tokens.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    let mut ids = Vec::new();
    let start = Instant::now();
    for _ in 0..n {
        let _ = ferrogate_core::kv::parse_token_ids(std::hint::black_box(header.as_bytes()), &mut ids);
    }
    let parse_ns = start.elapsed().as_nanos() as f64 / f64::from(n);
    println!("header: {} bytes, 1,024 ids parsed in {parse_ns:.0} ns", header.len());
    println!(
        "score: {} blocks indexed, a 1,024-token request held whole by one endpoint: {ns:.0} ns per score ({:?})",
        index.len(),
        out
    );
}

/// The epoch a new layout started (0 when it started none, which a fresh `Kv` always does).
fn epoch_of(installed: Installed) -> u64 {
    match installed {
        Installed::Epoch(epoch, _) => epoch,
        _ => 0,
    }
}

fn main() {
    ingest(1, 400_000);
    ingest(4, 200_000);
    ingest(16, 50_000);
    memory();
    score();
}
