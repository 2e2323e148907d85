//! [`score_model`]: which tiers each KV strategy counts.

use super::feed::{FeedEndpoint, FeedProvider};
use super::*;
use crate::config::{Config, RawConfig};

const CONFIG: &str = r#"
providers:
  - name: pool
    kind: openai_compatible
    base_url: "http://vllm:8000"
    kv_block_size: 4
    endpoints:
      - { address: "10.0.0.1:8000", kv_events: "tcp://10.0.0.1:5557" }
      - { address: "10.0.0.2:8000", kv_events: "tcp://10.0.0.2:5557" }
models:
  - { name: precise, strategy: precise_cache_aware, targets: [{ provider: pool, model: x }] }
  - { name: lmcache, strategy: lmcache_aware, targets: [{ provider: pool, model: x }] }
  - { name: plain, strategy: least_loaded, targets: [{ provider: pool, model: x }] }
"#;

/// Endpoint 0 holds the request's first block in GPU memory; endpoint 1 all three of its
/// blocks, offloaded to CPU memory.
#[test]
fn precise_counts_gpu_blocks_and_lmcache_aware_every_tier() {
    let config = Config::try_from(serde_saphyr::from_str::<RawConfig>(CONFIG).expect("yaml")).expect("valid");
    let tokens: Vec<u32> = (0..12).collect();
    let keys: Vec<u64> = block_keys(chain_seed("pool", None), &tokens, 4).collect();
    let add = |endpoint, key, tier| KvOp::Add { provider: 0, endpoint, key, tier };
    let mut ops = vec![add(0, keys[0], Tier::Gpu)];
    ops.extend(keys.iter().map(|&k| add(1, k, Tier::Cpu)));
    let endpoint = |a: &str| FeedEndpoint { address: a.to_string(), connected: true };
    let endpoints = vec![endpoint("10.0.0.1:8000"), endpoint("10.0.0.2:8000")];
    let providers = vec![FeedProvider { name: "pool".into(), endpoints }];
    let mut index = KvIndex::default();
    index.apply(&KvFeed { epoch: 1, generation: 1, reset: true, providers, ops });
    let mut out = Vec::new();
    assert_eq!(score_model(&config, 0, &index, &tokens, None, &mut out), Some(Score::Hit(1000)));
    assert_eq!(out, [1000, 0], "precise_cache_aware: GPU blocks only");
    assert_eq!(score_model(&config, 1, &index, &tokens, None, &mut out), Some(Score::Hit(2400)));
    assert_eq!(out, [1000, 2400], "lmcache_aware: three CPU blocks at 0.8 beat one GPU block");
    assert_eq!(score_model(&config, 2, &index, &tokens, None, &mut out), None, "not a KV strategy");
}
