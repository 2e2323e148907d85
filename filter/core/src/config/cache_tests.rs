//! The cache settings: precedence, scopes, bounds and the problems bad blocks give.

use crate::config::cache::{
    Scope, StoreKind, DEFAULT_MAX_ENTRIES, DEFAULT_SEMANTIC_MAX_BYTES, DEFAULT_SEMANTIC_MAX_ENTRIES, DEFAULT_THRESHOLD,
};
use crate::config::{Config, RawConfig};

fn load(yaml_json: serde_json::Value) -> Result<Config, Vec<String>> {
    let raw: RawConfig = serde_json::from_value(yaml_json).map_err(|e| vec![e.to_string()])?;
    Config::try_from(raw).map_err(|e| e.problems.iter().map(|p| format!("{}: {}", p.path, p.message)).collect())
}

fn base(extra: serde_json::Value) -> serde_json::Value {
    let mut doc = serde_json::json!({
        "providers": [{"name": "local", "kind": "openai_compatible", "base_url": "http://127.0.0.1:8000"}],
        "models": [
            {"name": "chat", "targets": [{"provider": "local", "model": "m"}], "cache": {"ttl_secs": 60}},
            {"name": "embed", "targets": [{"provider": "local", "model": "e"}]}
        ],
        "groups": [{"name": "team", "models": ["*"], "cache": {"ttl_secs": 120, "scope": "group"}}],
        "keys": [
            {"name": "a", "digest": format!("sha256:{}", "a".repeat(64)), "groups": ["team"]},
            {"name": "b", "digest": format!("sha256:{}", "b".repeat(64)), "groups": [], "models": ["*"],
             "cache": {"ttl_secs": 0}},
            {"name": "c", "digest": format!("sha256:{}", "c".repeat(64)), "groups": [], "models": ["*"]}
        ]
    });
    if let (Some(d), Some(e)) = (doc.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            d.insert(k.clone(), v.clone());
        }
    }
    doc
}

#[test]
fn key_then_group_then_model_and_zero_turns_it_off() {
    let c = load(base(serde_json::json!({}))).unwrap_or_else(|e| panic!("{e:?}"));
    let s = &c.cache;
    assert!(!s.is_empty());
    assert_eq!(s.store, StoreKind::Memory);
    assert_eq!(s.max_entries, DEFAULT_MAX_ENTRIES);
    assert_eq!((s.semantic_max_entries, s.semantic_max_bytes), (DEFAULT_SEMANTIC_MAX_ENTRIES, 64 * 1024 * 1024));
    let team = s.for_request(Some(0), Some(0), &[0]).map(|p| (p.ttl_secs, p.scope));
    assert_eq!(team, Some((120, Scope::Group)));
    assert!(s.for_request(Some(0), Some(1), &[]).is_none(), "ttl 0 on the key turns the model's off");
    assert_eq!(s.for_request(Some(0), Some(2), &[]).map(|p| p.ttl_secs), Some(60));
    assert!(s.for_request(Some(1), Some(2), &[]).is_none(), "embed has no cache");
}

#[test]
fn nothing_configured_is_empty() {
    let mut doc = base(serde_json::json!({}));
    doc["models"][0].as_object_mut().map(|m| m.remove("cache"));
    doc["groups"][0].as_object_mut().map(|g| g.remove("cache"));
    let c = load(doc).unwrap_or_else(|e| panic!("{e:?}"));
    assert!(c.cache.is_empty(), "a key's ttl 0 alone turns nothing on");
}

#[test]
fn semantic_needs_an_existing_model_and_a_sane_threshold() {
    let mut doc = base(serde_json::json!({}));
    doc["models"][0]["cache"]["semantic"] = serde_json::json!({"embedding_model": "embed"});
    let c = load(doc.clone()).unwrap_or_else(|e| panic!("{e:?}"));
    let sem = c.cache.for_request(Some(0), Some(2), &[]).and_then(|p| p.semantic.clone());
    assert_eq!(sem.map(|s| (s.embedding_model, s.threshold)), Some(("embed".to_string(), DEFAULT_THRESHOLD)));
    doc["models"][0]["cache"]["semantic"] = serde_json::json!({"embedding_model": "nope", "threshold": 1.5});
    let problems = load(doc).err().unwrap_or_default();
    assert!(problems.iter().any(|p| p.starts_with("models[0].cache.semantic.embedding_model")), "{problems:?}");
    assert!(problems.iter().any(|p| p.starts_with("models[0].cache.semantic.threshold")), "{problems:?}");
}

#[test]
fn bad_values_are_problems_with_their_path() {
    let mut doc =
        base(serde_json::json!({"cache_store": {"kind": "redis", "max_entries": 0, "semantic_max_bytes": 5}}));
    doc["groups"][0]["cache"]["scope"] = serde_json::json!("everyone");
    doc["models"][0]["cache"]["ttl_secs"] = serde_json::json!(999_999_999u64);
    let problems = load(doc).err().unwrap_or_default();
    let paths = ["cache_store.kind", "cache_store.max_entries", "cache_store.semantic_max_bytes"];
    for path in paths.into_iter().chain(["groups[0].cache.scope", "models[0].cache.ttl_secs"]) {
        assert!(problems.iter().any(|p| p.starts_with(path)), "{path} missing from {problems:?}");
    }
}

#[test]
fn semantic_max_bytes_is_read_and_bounded() {
    let set = |v: serde_json::Value| load(base(serde_json::json!({"cache_store": {"semantic_max_bytes": v}})));
    let c = set(serde_json::json!(1u64 << 20)).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.cache.semantic_max_bytes, 1 << 20, "1 MiB is the least allowed");
    let c = set(serde_json::json!(64u64 << 30)).unwrap_or_else(|e| panic!("{e:?}"));
    assert_eq!(c.cache.semantic_max_bytes, 64 << 30, "64 GiB is the most allowed");
    assert_eq!(DEFAULT_SEMANTIC_MAX_BYTES, 67_108_864);
    for (v, message) in [
        (serde_json::json!(0), "must be at least 1048576"),
        (serde_json::json!((1u64 << 20) - 1), "must be at least 1048576"),
        (serde_json::json!((64u64 << 30) + 1), "at most 68719476736"),
    ] {
        let problems = set(v.clone()).err().unwrap_or_default();
        let expected = format!("cache_store.semantic_max_bytes: {message}");
        assert!(problems.contains(&expected), "{v}: {problems:?}");
    }
    let problems = set(serde_json::json!(-1)).err().unwrap_or_default();
    assert!(!problems.is_empty(), "a negative size does not parse");
}

#[test]
fn unknown_keys_are_refused() {
    let mut doc = base(serde_json::json!({}));
    doc["models"][0]["cache"]["ttl"] = serde_json::json!(5);
    let problems = load(doc).err().unwrap_or_default();
    assert!(problems.iter().any(|p| p.contains("unknown field `ttl`")), "{problems:?}");
}
