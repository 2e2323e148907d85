//! The sidecar's index against the filter's copy: events in, feed operations out, and the
//! score a request's own token ids get.

use ferrogate_core::kv::feed::{FeedEndpoint, FeedProvider};
use ferrogate_core::kv::{block_keys, chain_seed, KvFeed, KvIndex, Score};

use super::*;

const ENDPOINTS: [&str; 3] = ["a:1", "b:1", "c:1"];

fn stored(hashes: &[u64], parent: Option<u64>, tokens: std::ops::Range<u32>) -> Stored {
    Stored { hashes: hashes.to_vec(), parent, tokens: tokens.collect(), block_size: 16, ..Stored::default() }
}

/// The filter's view after `ops`, and each endpoint's score for `tokens`.
fn scores(ops: &[KvOp], tokens: std::ops::Range<u32>) -> (Score, Vec<u32>) {
    let endpoints = ENDPOINTS.iter().map(|a| FeedEndpoint { address: (*a).into(), connected: true }).collect();
    let feed = KvFeed {
        epoch: 1,
        generation: 1,
        reset: true,
        providers: vec![FeedProvider { name: "pool".into(), endpoints }],
        ops: ops.to_vec(),
    };
    let mut index = KvIndex::default();
    index.apply(&feed);
    let tokens: Vec<u32> = tokens.collect();
    let slots: Vec<String> = ENDPOINTS.iter().map(|a| (*a).to_string()).collect();
    let mut out = Vec::new();
    let s =
        index.score("pool", &slots, block_keys(chain_seed("pool", None), &tokens, 16), &Default::default(), &mut out);
    // In tenths of a GPU block (the default weights are in thousandths).
    let tenths = |v: u32| v / 100;
    (if let Score::Hit(v) = s { Score::Hit(tenths(v)) } else { s }, out.into_iter().map(tenths).collect())
}

/// The worked example: A caches three blocks in two events (chained by the parent hash), B
/// the first block only; a request sharing the three blocks and a tail scores A 3, B 1.
#[test]
fn events_become_the_scores_of_a_request() {
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 1000, 300);
    let mut ops = Vec::new();
    index.stored(0, &stored(&[101, 102], None, 1000..1032), 0, &mut ops).unwrap();
    index.stored(0, &stored(&[103], Some(102), 1032..1048), 0, &mut ops).unwrap();
    index.stored(1, &stored(&[201], None, 1000..1016), 0, &mut ops).unwrap();
    assert_eq!(index.len(), 3);
    assert_eq!(scores(&ops, 1000..1058), (Score::Hit(30), vec![30, 10, 0]));
    // A's third block is evicted: it then holds two.
    index.removed(0, &[103], Tier::Gpu, &mut ops);
    assert_eq!(scores(&ops, 1000..1058).1, [20, 10, 0]);
    // B clears its cache.
    index.clear(1, &mut ops);
    assert_eq!(scores(&ops, 1000..1058).1, [20, 0, 0]);
    assert_eq!(index.held_counts(), [2, 0, 0]);
}

#[test]
fn what_cannot_be_placed_is_skipped() {
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 1000, 300);
    let mut ops = Vec::new();
    assert_eq!(index.stored(0, &stored(&[5], Some(4), 0..16), 0, &mut ops), Err(Skip::Orphan));
    // Not a multiple of the provider's block size (a multiple is a chunk of blocks), or less.
    for size in [24, 8] {
        let mut other = stored(&[5], None, 0..32);
        other.block_size = size;
        assert_eq!(index.stored(0, &other, 0, &mut ops), Err(Skip::BlockSize), "{size}");
    }
    assert_eq!(index.stored(0, &stored(&[5, 6], None, 0..20), 0, &mut ops), Err(Skip::Tokens));
    let mut window = stored(&[5], None, 0..16);
    window.group = Some(1);
    assert_eq!(index.stored(0, &window, 0, &mut ops), Err(Skip::Group));
    assert!(ops.is_empty());
}

#[test]
fn offloaded_copies_and_other_key_spaces() {
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 1000, 300);
    let mut ops = Vec::new();
    index.stored(0, &stored(&[1, 2], None, 0..32), 0, &mut ops).unwrap();
    // A token-less CPU event for a known block adds the CPU tier to it.
    let cpu = Stored { hashes: vec![2, 99], tier: Tier::Cpu, block_size: 16, ..Stored::default() };
    index.stored(1, &cpu, 0, &mut ops).unwrap();
    assert_eq!(scores(&ops, 0..32).1, [20, 0, 0], "C has block 1 only: no leading run");
    // The same tokens under an adapter, or with extra keys, are other blocks.
    let mut lora = stored(&[7], None, 0..16);
    lora.lora = Some("sql".into());
    index.stored(2, &lora, 0, &mut ops).unwrap();
    let mut salted = stored(&[8], None, 0..16);
    salted.extra = vec![Some(b"salt".to_vec())];
    index.stored(2, &salted, 0, &mut ops).unwrap();
    assert_eq!(scores(&ops, 0..32).1[2], 0);
}

#[test]
fn the_bound_evicts_the_least_recent_and_reports_it() {
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 2, 300);
    let mut ops = Vec::new();
    index.stored(0, &stored(&[1, 2, 3], None, 0..48), 0, &mut ops).unwrap();
    assert_eq!(index.len(), 2);
    assert!(ops.iter().any(|op| matches!(op, KvOp::Remove { endpoint: 0, .. })), "{ops:?}");
    assert_eq!(scores(&ops, 0..48).1, [0, 0, 0], "the first block went: no leading run is left");
    let mut snapshot = Vec::new();
    index.snapshot(&mut snapshot);
    assert_eq!(snapshot.len(), 2);
}

/// LMCache's CPU and storage tiers send no removals: their blocks leave at the TTL after
/// their last store, while GPU blocks stay until the engine removes them.
#[test]
fn offloaded_blocks_age_out_and_gpu_blocks_do_not() {
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 1000, 10);
    let mut ops = Vec::new();
    index.stored(0, &stored(&[1, 2], None, 0..32), 0, &mut ops).unwrap();
    let mut cpu = stored(&[11, 12], None, 0..32);
    cpu.tier = Tier::Cpu;
    index.stored(1, &cpu, 1_000, &mut ops).unwrap();
    let mut disk = stored(&[21, 22], None, 0..32);
    disk.tier = Tier::Storage;
    index.stored(2, &disk, 2_000, &mut ops).unwrap();
    assert_eq!(scores(&ops, 0..32).1, [20, 16, 10]);
    // B stores its blocks again: its TTL starts over.
    index.stored(1, &cpu, 9_000, &mut ops).unwrap();
    index.expire(12_000, &mut ops);
    assert_eq!(scores(&ops, 0..32).1, [20, 16, 0], "C's storage copy aged out");
    index.expire(19_000, &mut ops);
    assert_eq!(scores(&ops, 0..32).1, [20, 0, 0], "B's CPU copy aged out");
    assert_eq!((index.len(), index.offloaded()), (2, 0));
    // A block removed by an event is not reported again when its TTL comes.
    index.stored(1, &cpu, 20_000, &mut ops).unwrap();
    index.removed(1, &[11, 12], Tier::Cpu, &mut ops);
    let before = ops.len();
    index.expire(40_000, &mut ops);
    assert_eq!(ops.len(), before);
}

#[test]
fn tier_counts_count_each_tier_a_block_is_held_in() {
    let mut index = ProviderIndex::new(0, "pool", 2, 16, 1000, 300);
    let mut ops = Vec::new();
    index.stored(0, &stored(&[1, 2], None, 0..32), 0, &mut ops).unwrap();
    let cpu = Stored { hashes: vec![2], tier: Tier::Cpu, block_size: 16, ..Stored::default() };
    index.stored(0, &cpu, 0, &mut ops).unwrap();
    index.removed(0, &[2], Tier::Gpu, &mut ops);
    let counts = index.tier_counts();
    assert_eq!(counts[0], TierCounts { all: 2, gpu: 1, cpu: 1, storage: 0 });
    assert_eq!(counts[1], TierCounts::default());
    assert_eq!(index.held_counts(), [2, 0]);
}

/// LMCache's chunks (256 tokens, its own hashes) are indexed as the 16-token blocks they span:
/// the connector's 257th token id is ignored, a chunk's hash chains the next chunk and removes
/// all its blocks, a chunk store without tokens re-adds a known chunk's blocks, and a parent
/// never seen (the connector's `0`) or a size that is not a multiple is skipped.
#[test]
fn chunk_events_span_the_blocks_they_hold() {
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 1000, 300);
    let mut ops = Vec::new();
    let chunk = |hash: u64, parent: Option<u64>, tokens: std::ops::Range<u32>| Stored {
        hashes: vec![hash],
        parent,
        tokens: tokens.collect(),
        block_size: 256,
        tier: Tier::Cpu,
        ..Stored::default()
    };
    index.stored(0, &chunk(100, None, 0..257), 0, &mut ops).unwrap();
    index.stored(0, &chunk(101, Some(100), 256..512), 0, &mut ops).unwrap();
    assert_eq!(scores(&ops, 0..512).1, [32 * 8, 0, 0], "32 blocks in CPU memory, 0.8 each");
    assert_eq!(index.stored(1, &chunk(102, Some(0), 0..256), 0, &mut ops), Err(Skip::Orphan));
    let odd = Stored { block_size: 100, ..chunk(103, None, 0..100) };
    assert_eq!(index.stored(1, &odd, 0, &mut ops), Err(Skip::BlockSize));
    index.removed(0, &[101], Tier::Cpu, &mut ops);
    assert_eq!(scores(&ops, 0..512).1, [16 * 8, 0, 0], "the second chunk's 16 blocks left");
    let tokenless = Stored { tokens: Vec::new(), ..chunk(101, None, 0..0) };
    index.stored(0, &tokenless, 0, &mut ops).unwrap();
    assert_eq!(scores(&ops, 0..512).1, [32 * 8, 0, 0], "a known chunk stored again by its hash");
}

/// LMCache 0.5.6's own bytes (`testdata/kv-events/lmcache-*`): the multiprocess connector's
/// chunk 1 chains onto its chunk 0 by LMCache's hash and is indexed; the in-process
/// connector's later store names parent 0 and, on an endpoint that announced nothing before
/// it, is skipped.
#[test]
fn lmcache_fixtures_chain_by_chunk_hash() {
    use ferrogate_core::kv::events::{decode, Event};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/kv-events");
    let stored = |name: &str| -> Vec<Stored> {
        let batch = decode(&std::fs::read(dir.join(name)).unwrap()).unwrap();
        batch.events.into_iter().filter_map(|e| if let Event::Stored(s) = e { Some(s) } else { None }).collect()
    };
    let chunk0 = |hash: u64, tokens: std::ops::Range<u32>| Stored {
        hashes: vec![hash],
        tokens: tokens.collect(),
        block_size: 256,
        tier: Tier::Cpu,
        ..Stored::default()
    };
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 1000, 300);
    let mut ops = Vec::new();
    index.stored(0, &chunk0(18_004_386_028_984_137_135, 3000..3256), 0, &mut ops).unwrap();
    let mp = stored("lmcache-mp-cpu-removed.msgpack");
    index.stored(0, &mp[0], 0, &mut ops).unwrap();
    assert_eq!(scores(&ops, 3000..3512).1, [32 * 8, 0, 0], "both chunks, 16 blocks each");
    let connector = stored("lmcache-v05-connector-cpu.msgpack");
    assert_eq!(index.stored(1, &connector[0], 0, &mut ops), Err(Skip::Orphan), "parent 0");
    assert_eq!(index.stored(1, &connector[1], 0, &mut ops), Err(Skip::Orphan), "its parent was skipped");
}

/// A chunk of LMCache's connector in the CPU tier.
fn cpu_chunk(hash: u64, parent: Option<u64>, tokens: std::ops::Range<u32>) -> Stored {
    Stored {
        hashes: vec![hash],
        parent,
        tokens: tokens.collect(),
        block_size: 256,
        tier: Tier::Cpu,
        ..Stored::default()
    }
}

/// LMCache 0.5.6's in-process connector prefilling a 1100-token prompt (ids 1000..2099) in
/// 512-token steps: step 1's store (chunks 0 and 1, the second cut at the step's end), then
/// step 2's own bytes (`lmcache-v05-connector-cpu.msgpack`), whose first chunk names parent 0.
/// It continues step 1's last chunk: the prompt is known past its first step, and step 2's
/// chunk hashes name their blocks.
#[test]
fn the_in_process_connectors_later_steps_continue_the_prompt() {
    use ferrogate_core::kv::events::{decode, Event};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/kv-events");
    let batch = decode(&std::fs::read(dir.join("lmcache-v05-connector-cpu.msgpack")).unwrap()).unwrap();
    let step2: Vec<Stored> =
        batch.events.into_iter().filter_map(|e| if let Event::Stored(s) = e { Some(s) } else { None }).collect();
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 1000, 300);
    let mut ops = Vec::new();
    index.stored(0, &cpu_chunk(11, None, 1000..1257), 0, &mut ops).unwrap();
    index.stored(0, &cpu_chunk(12, Some(11), 1256..1512), 0, &mut ops).unwrap();
    assert_eq!(scores(&ops, 1000..2024).1, [32 * 8, 0, 0], "step 1: two chunks");
    for s in &step2 {
        index.stored(0, s, 0, &mut ops).unwrap();
    }
    assert_eq!(scores(&ops, 1000..2024).1, [64 * 8, 0, 0], "step 2 continues it: four chunks");
    index.removed(0, &step2[1].hashes, Tier::Cpu, &mut ops);
    assert_eq!(scores(&ops, 1000..2024).1, [48 * 8, 0, 0], "a later chunk's hash names its blocks");
}

/// A conversation's next turn stores only its new part: its first chunk (parent 0) continues
/// the chunk whose event named its first token id. A newer store's last chunk would fit too;
/// the chunk whose continuation the engine's GPU events already hold is taken.
#[test]
fn a_later_turn_continues_the_chunk_it_follows() {
    let mut index = ProviderIndex::new(0, "pool", 3, 16, 1000, 300);
    let mut ops = Vec::new();
    // Turn 1 (chunks 0 and 1 of a longer prompt: chunk 1's ids run to the next chunk's first).
    index.stored(0, &cpu_chunk(21, None, 0..257), 0, &mut ops).unwrap();
    index.stored(0, &cpu_chunk(22, Some(21), 256..513), 0, &mut ops).unwrap();
    index.stored(0, &cpu_chunk(23, Some(0), 512..769), 0, &mut ops).unwrap();
    assert_eq!(scores(&ops, 0..768).1, [48 * 8, 0, 0], "the next token tells where it goes");
    // Endpoint 1: the same conversation, then another prompt's store ending at a chunk, and
    // the engine's own GPU blocks of the conversation's third chunk.
    index.stored(1, &cpu_chunk(31, None, 0..257), 0, &mut ops).unwrap();
    index.stored(1, &cpu_chunk(32, Some(31), 256..513), 0, &mut ops).unwrap();
    index.stored(1, &cpu_chunk(33, None, 9000..9257), 0, &mut ops).unwrap();
    index.stored(1, &cpu_chunk(34, Some(33), 9256..9512), 0, &mut ops).unwrap();
    let gpu = Stored {
        hashes: (100..148).collect(),
        parent: None,
        tokens: (0..768).collect(),
        block_size: 16,
        ..Stored::default()
    };
    index.stored(1, &gpu, 0, &mut ops).unwrap();
    index.stored(1, &cpu_chunk(35, Some(0), 512..769), 0, &mut ops).unwrap();
    let tokens: Vec<u32> = (0..768).collect();
    let mut keys = block_keys(chain_seed("pool", None), &tokens, 16);
    assert!(keys.all(|key| index.blocks.peek(key).is_some_and(|h| h.cpu & 0b10 != 0)), "all in endpoint 1's CPU tier");
}
