//! Snapshot building: rows dropped with their original paths, cascades, structural failures.

use super::*;
use crate::config::cache::Purge;

fn raw(yaml: &str) -> RawConfig {
    serde_saphyr::from_str(yaml).unwrap()
}

const DIGEST_A: &str = "sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c";
const DIGEST_B: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const DIGEST_C: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

#[test]
fn a_valid_document_is_kept_whole() {
    let doc = raw(r#"
providers: [{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000" }]
models: [{ name: chat, targets: [{ provider: local, model: m }] }]
"#);
    let built = build(doc.clone()).unwrap();
    assert!(built.problems.is_empty());
    assert_eq!(built.raw, doc);
    assert_eq!(built.config.models.len(), 1);
}

#[test]
fn unservable_rows_are_dropped_with_cascades_and_original_paths() {
    let doc = raw(&format!(
        r#"
providers:
  - {{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000" }}
models:
  - {{ name: gone, targets: [{{ provider: nowhere, model: m }}] }}
  - {{ name: chat, targets: [{{ provider: local, model: m }}] }}
aliases: {{ old: gone, default: chat }}
groups:
  - {{ name: dev, models: ["chat"] }}
keys:
  - {{ name: a, digest: "{DIGEST_A}", groups: [nobody] }}
  - {{ name: b, digest: "{DIGEST_B}", groups: [dev] }}
  - {{ name: c, digest: "{DIGEST_C}", groups: [ghosts] }}
"#
    ));
    let built = build(doc).unwrap();
    let names: Vec<&str> = built.raw.models.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["chat"]);
    assert_eq!(built.raw.aliases.keys().collect::<Vec<_>>(), ["default"]);
    assert_eq!(built.raw.keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["b"]);
    let paths: Vec<&str> = built.problems.iter().map(|p| p.path.as_str()).collect();
    // The alias dangles only once its model is gone: found in the second round, still named.
    for want in ["models[0].targets[0].provider", "keys[0].groups[0]", "keys[2].groups[0]", "aliases.old"] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    assert!(built.problems.iter().all(|p| p.message.ends_with("(row dropped)")));
    assert!(built.config.authenticate(Some(b"sk-alice"), 0).is_err(), "key a was dropped");
}

#[test]
fn a_dropped_provider_takes_its_models_along() {
    let doc = raw(r#"
providers:
  - { name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000" }
  - { name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8001" }
  - { name: broken, kind: teapot, base_url: "http://127.0.0.1:8002" }
models:
  - { name: chat, targets: [{ provider: local, model: m }] }
  - { name: tea, targets: [{ provider: broken, model: m }] }
pricing:
  gpt-4.1: { input_per_mtok: -1, output_per_mtok: 1 }
  m: { input_per_mtok: 1, output_per_mtok: 1 }
"#);
    let built = build(doc).unwrap();
    assert_eq!(built.raw.providers.len(), 1);
    assert_eq!(built.raw.models.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["chat"]);
    assert_eq!(built.raw.pricing.keys().collect::<Vec<_>>(), ["m"], "a dotted pricing name is one row");
    let paths: Vec<&str> = built.problems.iter().map(|p| p.path.as_str()).collect();
    assert!(paths.contains(&"providers[1].name"), "{paths:?}");
    assert!(paths.contains(&"providers[2].kind"), "{paths:?}");
    assert!(paths.iter().any(|p| p.starts_with("models[1].")), "{paths:?}");
    assert!(paths.iter().any(|p| p.starts_with("pricing.gpt-4.1.")), "{paths:?}");
}

#[test]
fn an_unservable_mcp_server_or_a2a_agent_is_a_row_and_takes_the_keys_granting_it() {
    let doc = raw(&format!(
        r#"
mcp_servers:
  - {{ name: tools, url: "http://127.0.0.1:9000/mcp", auth: none }}
  - {{ name: broken, url: "ftp://127.0.0.1/mcp", auth: none }}
a2a_agents:
  - {{ name: helper, url: "http://127.0.0.1:9001/", auth: none }}
  - {{ name: helper, url: "http://127.0.0.1:9002/", auth: none }}
keys:
  - {{ name: a, digest: "{DIGEST_A}", mcp: ["broken/*"] }}
  - {{ name: b, digest: "{DIGEST_B}", mcp: ["tools/*"], a2a: [helper] }}
"#
    ));
    let built = build(doc).unwrap();
    let servers: Vec<&str> = built.raw.mcp_servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(servers, ["tools"]);
    assert_eq!(built.raw.a2a_agents.len(), 1, "the second helper is a duplicate");
    assert_eq!(built.raw.keys.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(), ["b"]);
    let paths: Vec<&str> = built.problems.iter().map(|p| p.path.as_str()).collect();
    for want in ["mcp_servers[1].url", "a2a_agents[1].name", "keys[0].mcp[0]"] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
}

#[test]
fn a_problem_outside_the_rows_fails_the_build() {
    let doc = raw(r#"
providers: [{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000" }]
models: [{ name: chat, targets: [{ provider: nowhere, model: m }] }]
store: { kind: etcd }
"#);
    let err = build(doc).unwrap_err();
    assert!(err.problems.iter().any(|p| p.path == "store.kind"), "{err}");
}

#[test]
fn snapshots_round_trip_and_versions_follow_content() {
    let doc = raw(r#"
providers: [{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000" }]
models: [{ name: chat, targets: [{ provider: local, model: m }] }]
"#);
    let json = serde_json::to_vec(&doc).unwrap();
    let v1 = content_version(&json);
    assert_eq!(v1, content_version(&json));
    assert_ne!(v1, content_version(b"{}"));
    let problems = vec![WireProblem { path: "x".into(), message: "y".into() }];
    let snap = Snapshot { version: v1, config: doc, problems, cache_purges: Vec::new() };
    let body = serde_json::to_vec(&snap).unwrap();
    let (back, config) = Snapshot::parse(&body).unwrap();
    assert_eq!(back, snap);
    assert_eq!(config.models.len(), 1);
    let received = Snapshot::receive(&body).unwrap();
    assert_eq!((received.version, received.problems), (snap.version.clone(), snap.problems.clone()));
    assert_eq!(received.config, config);
    assert!(matches!(Snapshot::parse(b"{\"version\":\"1\"}"), Err(SnapshotError::Syntax(_))));
    let bad = br#"{"version":"1","config":{"models":[{"name":"x","targets":[]}]}}"#;
    assert!(matches!(Snapshot::parse(bad), Err(SnapshotError::Invalid(_))));
    assert!(matches!(Snapshot::receive(bad), Err(SnapshotError::Invalid(_))));
}

#[test]
fn a_version_as_a_number_is_its_first_32_bits() {
    let version = content_version(b"{}");
    assert_eq!(version_number(&version), u64::from_str_radix(&version[..8], 16).ok());
    assert_eq!(version_number("00000001ffffffff"), Some(1));
    assert_eq!(version_number("short"), None);
    assert_eq!(version_number("zzzzzzzz"), None);
}

fn purge(scopes: &[&str], model: Option<&str>, at_ms: u64) -> Purge {
    Purge { scopes: scopes.iter().map(|s| s.to_string()).collect(), model: model.map(String::from), at_ms }
}

#[test]
fn purges_change_the_version_only_when_there_are_some() {
    let json = br#"{"models":[]}"#;
    assert_eq!(version_with_purges(json, &[]), content_version(json), "no purge: the version of old sidecars");
    let one = [purge(&["key:alice"], None, 1_000)];
    let two = [purge(&["key:alice"], None, 1_000), purge(&[], Some("chat"), 2_000)];
    let versions = [version_with_purges(json, &[]), version_with_purges(json, &one), version_with_purges(json, &two)];
    assert_ne!(versions[0], versions[1]);
    assert_ne!(versions[1], versions[2]);
    assert_eq!(versions[2], version_with_purges(json, &two), "stable");
}

/// A snapshot without `cache_purges` (an older sidecar) is read with none, and one with purges
/// gives the filter `config.cache.purged(..)` for exactly the entries they cover.
#[test]
fn a_received_snapshot_carries_its_purges_into_the_cache_settings() {
    let doc = raw(r#"
providers: [{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000" }]
models: [{ name: chat, targets: [{ provider: local, model: m }] }, { name: other, targets: [{ provider: local, model: m }] }]
"#);
    let old = serde_json::json!({"version": "1", "config": doc});
    let received = Snapshot::receive(&serde_json::to_vec(&old).unwrap()).unwrap();
    assert!(received.config.cache.purges.is_empty());
    assert!(!received.config.cache.purged("chat", "global", 0));
    let purges = vec![purge(&["key:alice", "group:team"], None, 5_000), purge(&[], Some("chat"), 7_000)];
    let snap = Snapshot { version: "2".into(), config: doc, problems: Vec::new(), cache_purges: purges.clone() };
    let body = serde_json::to_vec(&snap).unwrap();
    assert!(String::from_utf8_lossy(&body).contains("\"cache_purges\""));
    let received = Snapshot::receive(&body).unwrap();
    assert_eq!(received.config.cache.purges, purges);
    let c = &received.config.cache;
    assert!(c.purged("other", "key:alice", 4_000), "a scope purge covers every model");
    assert!(c.purged("other", "group:team", 5_000), "at the purge's own millisecond");
    assert!(!c.purged("other", "key:alice", 5_001), "created after the purge");
    assert!(!c.purged("other", "key:bob", 1), "another scope");
    assert!(c.purged("chat", "key:bob", 6_999), "a model purge covers every scope");
    assert!(!c.purged("chat", "key:bob", 7_001));
    assert!(!c.purged("other", "global", 1), "another model, another scope");
    let everything = Snapshot { cache_purges: vec![purge(&[], None, 9_000)], ..snap };
    let (_, config) = Snapshot::parse(&serde_json::to_vec(&everything).unwrap()).unwrap();
    assert!(config.cache.purged("other", "global", 8_000) && !config.cache.purged("other", "global", 9_001));
}
