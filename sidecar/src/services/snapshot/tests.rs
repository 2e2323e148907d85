//! Publication, failed builds, the problems report and the last-known-good cache.

use super::*;
use ferrogate_core::config::cache::Purge;

fn raw(yaml: &str) -> RawConfig {
    serde_saphyr::from_str(yaml).unwrap()
}

const GOOD: &str = r#"
providers: [{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000" }]
models:
  - { name: chat, targets: [{ provider: local, model: m }] }
  - { name: lost, targets: [{ provider: nowhere, model: m }] }
"#;

#[test]
fn publishes_a_pruned_snapshot_with_a_content_version() {
    let snapshots = Snapshots::new(None);
    assert!(snapshots.current().is_none());
    let served = snapshots.publish(raw(GOOD)).unwrap();
    let (doc, config) = Snapshot::parse(&served.body).unwrap();
    assert_eq!(doc.version, served.version);
    assert_eq!(config.models.len(), 1);
    assert_eq!(served.problems.len(), 1);
    assert_eq!(served.problems[0].path, "models[1].targets[0].provider");
    // The same content is the same version; a change is a new one.
    assert_eq!(snapshots.publish(raw(GOOD)).unwrap().version, served.version);
    let edited = GOOD.replace("model: m }] }\n  - { name: lost", "model: m2 }] }\n  - { name: lost");
    assert_ne!(snapshots.publish(raw(&edited)).unwrap().version, served.version);
}

#[test]
fn a_failed_build_keeps_the_last_good_snapshot_and_says_why() {
    let snapshots = Snapshots::new(None);
    let good = snapshots.publish(raw(GOOD)).unwrap();
    let broken = format!("{GOOD}store: {{ kind: etcd }}\n");
    assert!(snapshots.publish(raw(&broken)).is_err());
    assert_eq!(snapshots.current().unwrap().version, good.version);
    let report = snapshots.report();
    assert_eq!(report.version.as_deref(), Some(good.version.as_str()));
    assert_eq!(report.dropped.len(), 1);
    assert!(report.rejected.iter().any(|p| p.path == "store.kind"), "{report:?}");
    // The next good build clears the rejection.
    snapshots.publish(raw(GOOD)).unwrap();
    assert!(snapshots.report().rejected.is_empty());
}

fn scratch() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fg-snap-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_cache_restores_the_last_good_snapshot() {
    let dir = scratch();
    let cache = dir.join("snapshot.json");
    let first = Snapshots::with_master(Some(cache.clone()), None);
    assert!(!first.restore_cached().is_ok_and(|r| r), "nothing cached yet");
    let served = first.publish(raw(GOOD)).unwrap();
    let second = Snapshots::with_master(Some(cache.clone()), None);
    assert!(second.restore_cached().unwrap());
    let restored = second.current().unwrap();
    assert_eq!(restored.version, served.version, "same configuration, same version");
    assert_eq!(Snapshot::parse(&restored.body).unwrap().0.config, Snapshot::parse(&served.body).unwrap().0.config);
    std::fs::write(&cache, b"{ torn").unwrap();
    assert!(matches!(Snapshots::with_master(Some(cache), None).restore_cached(), Err(CacheError::Format(_))));
    assert!(!Snapshots::new(None).restore_cached().unwrap());
    std::fs::remove_dir_all(dir).unwrap();
}

const KEYED: &str = r#"
providers:
  - { name: sealed, kind: openai, base_url: "https://api.example", api_key: sk-secret-one }
  - { name: fromenv, kind: openai, base_url: "https://api.example", api_key_env: FG_TEST_CACHE_KEY_NEVER_SET }
models: [{ name: chat, targets: [{ provider: sealed, model: m }] }]
"#;

fn master() -> MasterKey {
    use base64::Engine;
    MasterKey::from_base64(&base64::engine::general_purpose::STANDARD.encode([7u8; 32])).unwrap()
}

#[test]
fn the_cache_file_is_private_and_holds_no_key_in_clear() {
    let dir = scratch();
    let cache = dir.join("snapshot.json");
    let mut keyed = raw(KEYED);
    keyed.providers[1].api_key = Some("sk-secret-two".into()); // as resolved from its variable
    let server = "{name: tools, url: 'http://127.0.0.1:9/mcp', api_key_env: FG_CACHE_TEST_MCP, api_key: sk-secret-mcp}";
    keyed.mcp_servers = raw(&format!("mcp_servers: [{server}]")).mcp_servers;
    keyed.a2a_agents = raw("a2a_agents: [{name: echo, url: 'http://127.0.0.1:9/', api_key: sk-secret-a2a}]").a2a_agents;
    for master in [None, Some(master())] {
        let sealing = master.is_some();
        let snapshots = Snapshots::with_master(Some(cache.clone()), master);
        let served = snapshots.publish(keyed.clone()).unwrap();
        assert!(String::from_utf8_lossy(&served.body).contains("sk-secret-one"), "filters get the key");
        assert!(String::from_utf8_lossy(&served.body).contains("sk-secret-mcp"), "and the MCP server's");
        let text = std::fs::read_to_string(&cache).unwrap();
        assert!(!text.contains("sk-secret"), "a key in clear in the cache: {text}");
        assert_eq!(text.contains("fgs1:"), sealing, "{text}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "cache mode {mode:o}");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn sealed_keys_come_back_with_the_master_key_and_unsealed_ones_from_their_variables() {
    let dir = scratch();
    let cache = dir.join("snapshot.json");
    let mut keyed = raw(KEYED);
    keyed.providers[1].api_key = Some("sk-secret-two".into());
    Snapshots::with_master(Some(cache.clone()), Some(master())).publish(keyed).unwrap();
    let env = |name: &str| (name == "FG_TEST_CACHE_KEY_NEVER_SET").then(|| "sk-from-env".to_string());
    let (back, _) = cache::read(&cache, Some(&master()), env).unwrap();
    assert_eq!(back.providers[0].api_key.as_deref(), Some("sk-secret-one"));
    assert_eq!(back.providers[1].api_key.as_deref(), Some("sk-secret-two"));
    // Without the master key a sealed cache is refused rather than served keyless.
    assert!(matches!(cache::read(&cache, None, env), Err(CacheError::Format(_))));
    // Written without a master key: the variable's current value is used.
    let mut keyed = raw(KEYED);
    keyed.providers[1].api_key = Some("sk-old-value".into());
    keyed.providers[0].api_key = None;
    Snapshots::with_master(Some(cache.clone()), None).publish(keyed).unwrap();
    let (back, _) = cache::read(&cache, None, env).unwrap();
    assert_eq!(back.providers[1].api_key.as_deref(), Some("sk-from-env"));
    std::fs::remove_dir_all(dir).unwrap();
}

/// `responses:` is checked with the rest but never sent to filters (an older filter would
/// refuse a key it does not know); the sidecar reads it from the file itself.
#[test]
fn the_responses_block_stays_with_the_sidecar() {
    let snapshots = Snapshots::new(None);
    let with = format!("{GOOD}responses: {{ttl_secs: 60}}\n");
    let served = snapshots.publish(raw(&with)).unwrap();
    assert!(!String::from_utf8_lossy(&served.body).contains("responses"), "{:?}", served.body);
    assert_eq!(served.version, snapshots.publish(raw(GOOD)).unwrap().version);
    let bad = format!("{GOOD}responses: {{ttl_secs: 0}}\n");
    let e = snapshots.publish(raw(&bad)).unwrap_err();
    assert_eq!(e.problems[0].path, "responses.ttl_secs");
}

fn purge(scopes: &[&str], model: Option<&str>, at_ms: u64) -> Purge {
    Purge { scopes: scopes.iter().map(|s| s.to_string()).collect(), model: model.map(String::from), at_ms }
}

/// A purge publishes the configuration again under a new version, with the purges in the body
/// and in the served configuration; a purge of everything drops the older ones; the bound holds.
#[test]
fn a_purge_is_a_new_version_carrying_the_purges() {
    let snapshots = Snapshots::new(None);
    assert!(!snapshots.add_purge(purge(&["key:a"], None, 1)), "nothing published yet");
    let first = snapshots.publish(raw(GOOD)).unwrap();
    assert_eq!(first.config.cache.purges.len(), 1, "a purge made before the first publication is kept");
    assert!(snapshots.add_purge(purge(&[], Some("chat"), 2)));
    let second = snapshots.current().unwrap();
    assert_ne!(second.version, first.version);
    let received = Snapshot::receive(&second.body).unwrap();
    assert_eq!(received.version, second.version);
    assert!(received.config.cache.purged("chat", "key:b", 2) && !received.config.cache.purged("x", "key:b", 2));
    assert_eq!(second.config.cache.purges, snapshots.purges());
    assert_eq!(snapshots.publish(raw(GOOD)).unwrap().version, second.version, "the store publishing again keeps them");
    snapshots.add_purge(purge(&[], None, 3));
    assert_eq!(snapshots.purges(), [purge(&[], None, 3)], "everything: the older ones go");
    for at in 4..(4 + MAX_PURGES as u64 + 10) {
        snapshots.add_purge(purge(&["global"], None, at));
    }
    let all = snapshots.purges();
    assert_eq!(all.len(), MAX_PURGES);
    assert_eq!(all.last().map(|p| p.at_ms), Some(3 + MAX_PURGES as u64 + 10));
    // Purges from elsewhere: new ones merged in time order, known ones change nothing.
    let version = snapshots.current().unwrap().version.clone();
    assert!(!snapshots.merge_purges(&all[..3]));
    assert_eq!(snapshots.current().unwrap().version, version);
    assert!(snapshots.merge_purges(&[purge(&["key:z"], None, 100_000)]));
    assert_ne!(snapshots.current().unwrap().version, version);
}

/// The cache file keeps the purges: a sidecar restored from it serves them, same version.
#[test]
fn the_cache_keeps_the_purges() {
    let dir = scratch();
    let cache = dir.join("snapshot.json");
    let first = Snapshots::with_master(Some(cache.clone()), None);
    first.publish(raw(GOOD)).unwrap();
    first.add_purge(purge(&["group:team"], Some("chat"), 42));
    let served = first.current().unwrap();
    let second = Snapshots::with_master(Some(cache.clone()), None);
    assert!(second.restore_cached().unwrap());
    assert_eq!(second.purges(), first.purges());
    assert_eq!(second.current().unwrap().version, served.version);
    std::fs::remove_dir_all(dir).unwrap();
}
