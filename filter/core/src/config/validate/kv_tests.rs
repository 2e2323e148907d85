//! The KV settings of a pool: both endpoint forms, defaults, and every refusal with its path.

use crate::config::{Config, ConfigError, KvSource, RawConfig, Strategy, DEFAULT_KV_MAX_BLOCKS};

fn load(yaml: &str) -> Result<Config, ConfigError> {
    Config::try_from(serde_saphyr::from_str::<RawConfig>(yaml).expect("yaml shape"))
}

fn problems(yaml: &str) -> Vec<String> {
    load(yaml).expect_err("should be invalid").problems.iter().map(ToString::to_string).collect()
}

const POOL: &str = r#"
providers:
  - name: pool
    kind: openai_compatible
    base_url: "http://vllm:8000"
    kv_block_size: 32
    kv_tokenize: true
    endpoints:
      - "10.0.0.4:8000"
      - { address: "10.0.0.5:8000", kv_events: "tcp://10.0.0.5:5557", kv_replay: "tcp://10.0.0.5:5558" }
models: [{ name: m, strategy: precise_cache_aware, targets: [{ provider: pool, model: x }] }]
"#;

#[test]
fn both_endpoint_forms_are_read_with_defaults() {
    let c = load(POOL).unwrap();
    let p = &c.providers[0];
    assert_eq!(p.endpoints, ["10.0.0.4:8000", "10.0.0.5:8000"]);
    let kv = p.kv.as_ref().unwrap();
    assert_eq!((kv.block_size, kv.topic.as_str(), kv.max_blocks, kv.tokenize), (32, "", DEFAULT_KV_MAX_BLOCKS, true));
    let replay = Some("tcp://10.0.0.5:5558".to_string());
    assert_eq!(kv.sources, [None, Some(KvSource { events: "tcp://10.0.0.5:5557".into(), replay })]);
    assert_eq!(c.models[0].strategy, Strategy::PreciseCacheAware);
}

#[test]
fn plain_endpoints_serialize_as_strings_and_objects_round_trip() {
    let raw: RawConfig = serde_saphyr::from_str(POOL).unwrap();
    let json = serde_json::to_value(&raw).unwrap();
    assert_eq!(json["providers"][0]["endpoints"][0], "10.0.0.4:8000");
    assert_eq!(json["providers"][0]["endpoints"][1]["kv_replay"], "tcp://10.0.0.5:5558");
    assert_eq!(serde_json::from_value::<RawConfig>(json).unwrap(), raw);
    assert!(load(&POOL.replace("kv_tokenize: true", "")).unwrap().providers[0].kv.is_some());
}

#[test]
fn unknown_keys_in_an_endpoint_object_are_refused() {
    let e = serde_saphyr::from_str::<RawConfig>(&POOL.replace("kv_replay:", "kv_reply:")).unwrap_err();
    assert!(e.to_string().contains("kv_reply"), "{e}");
}

#[test]
fn bad_settings_are_named_by_path() {
    let bad = POOL
        .replace("kv_block_size: 32", "kv_block_size: 0\n    kv_max_blocks: 0")
        .replace("tcp://10.0.0.5:5557", "tcp://*:5557")
        .replace("tcp://10.0.0.5:5558", "http://10.0.0.5:5558");
    assert_eq!(
        problems(&bad),
        [
            "providers[0].endpoints[1].kv_replay: \"http://10.0.0.5:5558\" must be tcp://host:port",
            "providers[0].endpoints[1].kv_events: \"tcp://*:5557\" is a bind address; name the engine's host (the sidecar connects)",
            "providers[0].kv_block_size: 0 is not a block size (1 to 4096 tokens)",
            "providers[0].kv_max_blocks: 0 is out of range (1 to 100000000 blocks)",
        ]
    );
}

#[test]
fn replay_needs_events_and_settings_need_a_pool() {
    let no_events = POOL.replace("kv_events: \"tcp://10.0.0.5:5557\", ", "");
    assert!(problems(&no_events).contains(
        &"providers[0].endpoints[1].kv_replay: kv_replay needs kv_events (replay fills gaps in that stream)"
            .to_string()
    ));
    let no_pool = r#"
providers: [{ name: p, kind: openai, base_url: "http://h", kv_block_size: 16 }]
models: [{ name: m, strategy: precise_cache_aware, targets: [{ provider: p, model: x }] }]
"#;
    assert_eq!(
        problems(no_pool),
        [
            "providers[0].endpoints: kv_* settings need an endpoints pool (the engines they describe)",
            "models[0].strategy: precise_cache_aware needs endpoints of provider \"p\" with kv_events (or kv_events_port)",
        ]
    );
    let two = POOL.replace(
        "targets: [{ provider: pool, model: x }]",
        "targets: [{ provider: pool, model: x }, { provider: pool, model: y }]",
    );
    assert_eq!(
        problems(&two),
        ["models[0].strategy: precise_cache_aware needs exactly one target, whose provider has an endpoints pool"]
    );
    // lmcache_aware asks the same of its pool, in its own name.
    let lmcache = no_pool.replace("precise_cache_aware", "lmcache_aware");
    assert_eq!(
        problems(&lmcache)[1],
        "models[0].strategy: lmcache_aware needs endpoints of provider \"p\" with kv_events (or kv_events_port)"
    );
    assert_eq!(
        load(&POOL.replace("precise_cache_aware", "lmcache_aware")).unwrap().models[0].strategy,
        Strategy::LmcacheAware
    );
}

#[test]
fn tier_weights_and_offload_ttl_have_defaults_and_bounds() {
    let kv = load(POOL).unwrap().providers[0].kv.clone().unwrap();
    assert_eq!(kv.tier_weights, crate::kv::TierWeights { gpu: 1000, cpu: 800, storage: 500 });
    assert_eq!(kv.offload_ttl_secs, crate::config::DEFAULT_LMCACHE_TTL_SECS);
    let set =
        POOL.replace("kv_tokenize: true", "kv_tier_weights: { cpu: 0.9, storage: 0.25 }\n    lmcache_ttl_secs: 60");
    let kv = load(&set).unwrap().providers[0].kv.clone().unwrap();
    assert_eq!(kv.tier_weights, crate::kv::TierWeights { gpu: 1000, cpu: 900, storage: 250 });
    assert_eq!(kv.offload_ttl_secs, 60);
    let bad =
        POOL.replace("kv_tokenize: true", "kv_tier_weights: { gpu: 1.5, storage: -0.1 }\n    lmcache_ttl_secs: 0");
    assert_eq!(
        problems(&bad),
        [
            "providers[0].lmcache_ttl_secs: 0 is out of range (1 to 86400 seconds)",
            "providers[0].kv_tier_weights.gpu: 1.5 is not a weight (0 to 1)",
            "providers[0].kv_tier_weights.storage: -0.1 is not a weight (0 to 1)",
        ]
    );
    let typo = POOL.replace("kv_tokenize: true", "kv_tier_weights: { disk: 0.5 }");
    let e = serde_saphyr::from_str::<RawConfig>(&typo).unwrap_err();
    assert!(e.to_string().contains("disk"), "{e}");
}

#[test]
fn pool_ports_give_each_endpoint_its_sockets_unless_it_names_its_own() {
    let yaml = POOL
        .replace("kv_tokenize: true", "kv_events_port: 5557\n    kv_replay_port: 5558")
        .replace("      - \"10.0.0.4:8000\"\n", "      - \"10.0.0.4:8000\"\n      - \"[fd00::7]:8000\"\n");
    let c = load(&yaml.replace("10.0.0.5:5557", "10.0.0.9:6000")).unwrap();
    let sources = &c.providers[0].kv.as_ref().unwrap().sources;
    let at = |e: &str, r: Option<&str>| Some(KvSource { events: e.into(), replay: r.map(Into::into) });
    assert_eq!(
        sources.as_slice(),
        [
            at("tcp://10.0.0.4:5557", Some("tcp://10.0.0.4:5558")),
            at("tcp://[fd00::7]:5557", Some("tcp://[fd00::7]:5558")),
            at("tcp://10.0.0.9:6000", Some("tcp://10.0.0.5:5558")),
        ]
    );
    let bad = POOL.replace("kv_tokenize: true", "kv_replay_port: 5558\n    kv_events_port: 0");
    assert_eq!(
        problems(&bad),
        ["providers[0].kv_events_port: 0 is not a port"],
        "kv_replay_port with an invalid kv_events_port"
    );
    let alone = POOL.replace("kv_tokenize: true", "kv_replay_port: 5558");
    assert_eq!(
        problems(&alone),
        ["providers[0].kv_replay_port: kv_replay_port needs kv_events_port (replay fills gaps in that stream)"]
    );
}

/// A pool from DNS publishes through its ports; before its name resolves (or when it
/// resolves to nothing) it has no endpoints, and that is no error.
#[test]
fn a_dns_pool_publishes_through_its_ports() {
    let yaml = r#"
providers:
  - { name: pool, kind: openai_compatible, base_url: "http://vllm:8000", endpoints_dns: "vllm.llm.svc:8000",
      kv_events_port: 5557, kv_block_size: 16, lmcache: { pull: "tcp://0.0.0.0:8300" } }
models: [{ name: m, strategy: precise_cache_aware, targets: [{ provider: pool, model: x }] }]
"#;
    let c = load(yaml).unwrap();
    assert!(c.providers[0].endpoints.is_empty());
    assert!(c.providers[0].kv.as_ref().unwrap().sources.is_empty());
    let none = yaml.replace("kv_events_port: 5557, ", "");
    assert_eq!(
        problems(&none),
        [
            "providers[0].lmcache.pull: needs endpoints with kv_events (admits name chunks by hash; the events say which blocks those are)",
            "models[0].strategy: precise_cache_aware needs endpoints of provider \"pool\" with kv_events (or kv_events_port)",
        ]
    );
}
