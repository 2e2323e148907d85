//! Publication, failed builds, the problems report and the last-known-good cache.

use super::*;

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

#[test]
fn the_cache_restores_the_last_good_snapshot() {
    let dir = std::env::temp_dir().join(format!("fg-snap-{}-{:?}", std::process::id(), std::thread::current().id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("snapshot.json");
    let first = Snapshots::new(Some(cache.clone()));
    assert!(!first.restore_cached().is_ok_and(|r| r), "nothing cached yet");
    let served = first.publish(raw(GOOD)).unwrap();
    let second = Snapshots::new(Some(cache.clone()));
    assert!(second.restore_cached().unwrap());
    let restored = second.current().unwrap();
    assert_eq!((restored.version.as_str(), &restored.body), (served.version.as_str(), &served.body));
    std::fs::write(&cache, b"{ torn").unwrap();
    assert!(matches!(Snapshots::new(Some(cache)).restore_cached(), Err(CacheError::Snapshot(_))));
    assert!(!Snapshots::new(None).restore_cached().unwrap());
    std::fs::remove_dir_all(dir).unwrap();
}
