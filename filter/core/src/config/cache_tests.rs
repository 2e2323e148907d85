//! The cache settings: precedence, scopes, bounds and the problems bad blocks give.

use crate::config::cache::{Scope, StoreKind, DEFAULT_MAX_ENTRIES, DEFAULT_THRESHOLD};
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
    let mut doc = base(serde_json::json!({"cache_store": {"kind": "redis", "max_entries": 0}}));
    doc["groups"][0]["cache"]["scope"] = serde_json::json!("everyone");
    doc["models"][0]["cache"]["ttl_secs"] = serde_json::json!(999_999_999u64);
    let problems = load(doc).err().unwrap_or_default();
    for path in ["cache_store.kind", "cache_store.max_entries", "groups[0].cache.scope", "models[0].cache.ttl_secs"] {
        assert!(problems.iter().any(|p| p.starts_with(path)), "{path} missing from {problems:?}");
    }
}

#[test]
fn unknown_keys_are_refused() {
    let mut doc = base(serde_json::json!({}));
    doc["models"][0]["cache"]["ttl"] = serde_json::json!(5);
    let problems = load(doc).err().unwrap_or_default();
    assert!(problems.iter().any(|p| p.contains("unknown field `ttl`")), "{problems:?}");
}
