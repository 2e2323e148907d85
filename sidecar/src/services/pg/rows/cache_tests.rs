//! The response cache in the Postgres store: `cache:` blocks of models, groups and keys written
//! through the admin API, read back and served in the snapshot; purges kept in the database.

use std::sync::Arc;

use ferrogate_core::config::cache::{Purge, Scope};
use serde_json::json;

use crate::services::pg::tests::{admin_over, call, Schema};
use crate::services::pg::PgStore;
use crate::services::snapshot::Snapshots;

#[tokio::test]
async fn cache_blocks_round_trip_through_the_admin_api_into_the_snapshot() {
    let schema = Schema::new().await;
    let store = Arc::new(PgStore::connect(&schema.url, None).await.unwrap());
    let (app, snapshots) = admin_over(store.clone());
    let provider = json!({"name": "local", "kind": "openai_compatible", "base_url": "http://127.0.0.1:8000"});
    assert_eq!(call(&app, "POST", "/api/v1/providers", provider).await.0, 200);
    let target = json!([{"provider": "local", "model": "m"}]);
    let model = json!({"name": "chat", "targets": target, "cache": {"ttl_secs": 120, "scope": "global"}});
    assert_eq!(call(&app, "POST", "/api/v1/models", model).await.0, 200);
    let group = json!({"name": "team", "models": ["*"], "cache": {"ttl_secs": 30, "scope": "group"}});
    assert_eq!(call(&app, "POST", "/api/v1/groups", group).await.0, 200);
    let digest = format!("sha256:{}", "4".repeat(64));
    let key = json!({"name": "alice", "digest": digest, "groups": ["team"], "cache": {"ttl_secs": 0}});
    assert_eq!(call(&app, "POST", "/api/v1/keys", key).await.0, 200);
    let (status, back) = call(&app, "GET", "/api/v1/models/chat", json!({})).await;
    assert_eq!((status, &back["cache"]), (200, &json!({"ttl_secs": 120, "scope": "global"})), "{back}");
    assert_eq!(call(&app, "GET", "/api/v1/groups/team", json!({})).await.1["cache"]["scope"], "group");
    assert_eq!(call(&app, "GET", "/api/v1/keys/alice", json!({})).await.1["cache"], json!({"ttl_secs": 0}));
    // A bad block is refused with its path.
    let bad = json!({"name": "other", "targets": target, "cache": {"ttl_secs": 5, "scope": "everyone"}});
    let (status, answer) = call(&app, "POST", "/api/v1/models", bad).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("cache.scope"), "{answer}");
    // Served: the key's ttl 0 turns caching off for it; the model's policy applies otherwise.
    let (_, raw) = store.load().await.unwrap();
    let served = snapshots.publish(raw).unwrap();
    assert!(String::from_utf8_lossy(&served.body).contains("\"cache\":{\"ttl_secs\":120"));
    let c = &served.config.cache;
    assert!(c.for_request(Some(0), Some(0), &[0]).is_none(), "the key's ttl 0");
    assert_eq!(c.for_request(Some(0), None, &[0]).map(|p| (p.ttl_secs, p.scope)), Some((30, Scope::Group)));
    assert_eq!(c.for_request(Some(0), None, &[]).map(|p| (p.ttl_secs, p.scope)), Some((120, Scope::Global)));
}

#[tokio::test]
async fn purges_are_kept_in_the_database_newest_first_bounded() {
    let schema = Schema::new().await;
    let store = PgStore::connect(&schema.url, None).await.unwrap();
    assert!(store.cache_purges().await.unwrap().is_empty());
    let purge = |scopes: &[&str], model: Option<&str>, at_ms| Purge {
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        model: model.map(String::from),
        at_ms,
    };
    store.record_purge(&purge(&["key:a"], None, 10)).await.unwrap();
    store.record_purge(&purge(&[], Some("chat"), 20)).await.unwrap();
    assert_eq!(store.cache_purges().await.unwrap(), [purge(&["key:a"], None, 10), purge(&[], Some("chat"), 20)]);
    store.record_purge(&purge(&[], None, 30)).await.unwrap();
    assert_eq!(store.cache_purges().await.unwrap(), [purge(&[], None, 30)], "everything: the older ones go");
    for at in 31..(31 + 300) {
        store.record_purge(&purge(&["global"], None, at)).await.unwrap();
    }
    let kept = store.cache_purges().await.unwrap();
    assert_eq!(kept.len(), crate::services::snapshot::MAX_PURGES);
    assert_eq!(kept.last().map(|p| p.at_ms), Some(330));
    // A sidecar that starts takes them into its snapshot.
    let snapshots = Snapshots::new(None);
    assert!(snapshots.merge_purges(&kept));
    assert_eq!(snapshots.purges(), kept);
}
