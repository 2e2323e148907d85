//! Purges and the cache status through the admin routes, against the machine's real Redis
//! (each test under a key prefix of its own): what each purge deletes, what it records in the
//! snapshot, and the requests it refuses.

use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use serde_json::json;
use tower::ServiceExt;

use super::super::tests::{cache_over, config, digest, put, redis_url, STORE};
use super::super::{CacheApi, MODEL_HEADER, SCOPE_HEADER, TTL_HEADER};
use super::*;
use crate::services::limits::Ledger;
use crate::services::targets::{self, Targets};
use crate::services::usage::{UsageBackend, UsageStore};

fn admin_over(cache: &Arc<Cache>) -> axum::Router {
    crate::services::admin::router(Admin {
        identity: crate::services::identity::Identity::new(
            Default::default(),
            Some("admin".into()),
            Arc::new(OnceLock::new()),
            false,
        ),
        runtime: None,
        usage: Arc::new(UsageBackend::memory(UsageStore::new(None))),
        snapshots: cache.snapshots.clone(),
        db: Arc::new(OnceLock::new()),
        postgres: false,
        ledger: Arc::new(Ledger::new("test".into(), false)),
        targets: Arc::new(Targets::new(targets::Settings::default())),
        kv: Arc::default(),
        cache: cache.clone(),
    })
}

async fn call(app: &axum::Router, method: &str, uri: &str, body: &str) -> (u16, Value) {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("authorization", "Bearer admin")
        .body(Body::from(body.to_string()))
        .unwrap();
    let answer = app.clone().oneshot(req).await.unwrap();
    let status = answer.status().as_u16();
    let bytes = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn config_of(served: &crate::services::snapshot::Served) -> Config {
    ferrogate_core::snapshot::Snapshot::parse(&served.body).unwrap().1
}

#[test]
fn purge_bodies_are_read_strictly() {
    assert_eq!(parse_target(br#"{"key": "a"}"#), Ok(Target::Key("a".into())));
    assert_eq!(parse_target(br#"{"group": "g"}"#), Ok(Target::Group("g".into())));
    assert_eq!(parse_target(br#"{"model": "m"}"#), Ok(Target::Model("m".into())));
    assert_eq!(parse_target(br#"{"all": true}"#), Ok(Target::All));
    for bad in [
        &br#"{}"#[..],
        br#"{"key": "a", "model": "m"}"#,
        br#"{"all": false}"#,
        br#"{"key": ""}"#,
        br#"{"key": 3}"#,
        br#"{"scope": "global"}"#,
        br#"["key"]"#,
        b"not json",
    ] {
        let why = parse_target(bad).unwrap_err();
        assert!(!why.is_empty(), "{}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn targets_resolve_to_scopes_and_models() {
    let cache = cache_over(config("FG_CACHE_TEST_REDIS_RESOLVE", &redis_url()));
    let c = cache.snapshots.current().unwrap().config.clone();
    assert_eq!(resolve(&Target::Key("alice".into()), &c), Ok((vec!["key:alice".into()], None)));
    let team = vec!["group:team".to_string(), "key:alice".into(), "key:bob".into()];
    assert_eq!(resolve(&Target::Group("team".into()), &c), Ok((team, None)));
    assert_eq!(resolve(&Target::Model("fast".into()), &c), Ok((vec![], Some("chat".into()))), "an alias: its model");
    assert_eq!(resolve(&Target::All, &c), Ok((vec![], None)));
    for unknown in [Target::Key("zed".into()), Target::Group("zed".into()), Target::Model("zed".into())] {
        assert!(resolve(&unknown, &c).unwrap_err().contains("zed"));
    }
}

/// Stores entries under several models and scopes, then purges them one way after another.
#[tokio::test]
async fn purges_delete_what_they_cover_in_redis_and_reach_the_snapshot() {
    let cache = cache_over(config("FG_CACHE_TEST_REDIS_PURGE", &redis_url()));
    let filter = super::super::router(CacheApi { cache: cache.clone(), internal_token: Some("internal".into()) });
    let admin = admin_over(&cache);
    let entries = [
        (1, "chat", "key:alice"),
        (2, "chat", "key:bob"),
        (3, "other", "key:bob"),
        (4, "other", "group:team"),
        (5, "other", "key:carol"),
        (6, "chat", "global"),
        (7, "other", "global"),
    ];
    for (n, model, scope) in entries {
        let headers = [(TTL_HEADER, "60"), (MODEL_HEADER, model), (SCOPE_HEADER, scope)];
        assert_eq!(put(&filter, &digest(n), b"x", &headers).await, 204);
    }
    let version = cache.snapshots.current().unwrap().version.clone();
    let (status, answer) = call(&admin, "POST", "/api/v1/cache/purge", r#"{"model": "fast"}"#).await;
    assert_eq!((status, &answer["purged"]), (200, &json!(3)), "{answer}");
    assert_eq!(answer["purge"]["model"], "chat");
    assert_eq!(answer["semantic"], Value::Null, "no semantic store wired");
    let served = cache.snapshots.current().unwrap();
    assert_ne!(served.version, version, "a purge is a new snapshot version");
    let at = answer["purge"]["at_ms"].as_u64().unwrap();
    assert!(config_of(&served).cache.purged("chat", "key:zed", at));
    // The group: its own scope and its keys' (bob's entry of `other`, the group's), not carol's.
    let dropped = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = dropped.clone();
    cache.set_semantic_purge(Arc::new(move |scopes: &[String], model: Option<&str>| {
        seen.lock().unwrap().push((scopes.to_vec(), model.map(String::from)));
        2
    }));
    let (status, answer) = call(&admin, "POST", "/api/v1/cache/purge", r#"{"group": "team"}"#).await;
    assert_eq!((status, &answer["purged"], &answer["semantic"]), (200, &json!(2), &json!(2)), "{answer}");
    assert_eq!(dropped.lock().unwrap()[0].0, ["group:team", "key:alice", "key:bob"]);
    let (_, answer) = call(&admin, "POST", "/api/v1/cache/purge", r#"{"key": "carol"}"#).await;
    assert_eq!(answer["purged"], json!(1), "{answer}");
    let (status, status_doc) = call(&admin, "GET", "/api/v1/cache", "").await;
    assert_eq!(status, 200);
    assert_eq!((status_doc["store"].as_str(), status_doc["max_entry_bytes"].as_u64()), (Some("redis"), Some(1024)));
    assert_eq!(status_doc["redis"], json!({"reachable": true, "entries": 1, "complete": true}), "{status_doc}");
    assert_eq!(status_doc["purges"].as_array().map(Vec::len), Some(3));
    let (_, answer) = call(&admin, "POST", "/api/v1/cache/purge", r#"{"all": true}"#).await;
    assert_eq!(answer["purged"], json!(1), "{answer}");
    assert_eq!(cache.snapshots.purges().len(), 1, "everything: the older purges go");
    let (_, status_doc) = call(&admin, "GET", "/api/v1/cache", "").await;
    assert_eq!(status_doc["redis"]["entries"], json!(0));
    assert_eq!(put(&filter, &digest(1), b"again", &STORE).await, 204, "a purged cache fills again");
    cache.redis.purge_all(&redis_url()).await.unwrap();
}

#[tokio::test]
async fn bad_purges_are_refused_and_an_outage_still_records_the_purge() {
    let cache = cache_over(config("FG_CACHE_TEST_REDIS_BAD", "redis://127.0.0.1:1"));
    let admin = admin_over(&cache);
    let (status, answer) = call(&admin, "POST", "/api/v1/cache/purge", r#"{"key": "a", "all": true}"#).await;
    assert_eq!(status, 400, "{answer}");
    assert!(answer["error"].as_str().unwrap().contains("exactly one"), "{answer}");
    assert_eq!(call(&admin, "POST", "/api/v1/cache/purge", r#"{"all": false}"#).await.0, 400);
    let (status, answer) = call(&admin, "POST", "/api/v1/cache/purge", r#"{"group": "nobody"}"#).await;
    assert_eq!(status, 404, "{answer}");
    assert!(cache.snapshots.purges().is_empty(), "nothing recorded for refused requests");
    let (status, answer) = call(&admin, "POST", "/api/v1/cache/purge", r#"{"key": "alice"}"#).await;
    assert_eq!(status, 503, "{answer}");
    assert_eq!(answer["purge"]["scopes"], json!(["key:alice"]));
    assert_eq!(cache.snapshots.purges().len(), 1, "recorded all the same");
    let (status, doc) = call(&admin, "GET", "/api/v1/cache", "").await;
    assert_eq!((status, &doc["redis"]["reachable"]), (200, &json!(false)), "{doc}");
    let unauthorized = Request::get("/api/v1/cache").body(Body::empty()).unwrap();
    assert_eq!(admin.clone().oneshot(unauthorized).await.unwrap().status().as_u16(), 401);
}

/// With the memory store nothing is asked of Redis: the purge is only recorded.
#[tokio::test]
async fn with_the_memory_store_a_purge_is_recorded_only() {
    let mut raw = config("FG_CACHE_TEST_REDIS_MEMORY", "redis://127.0.0.1:1");
    raw.cache_store = None;
    let cache = cache_over(raw);
    let admin = admin_over(&cache);
    let (status, answer) = call(&admin, "POST", "/api/v1/cache/purge", r#"{"model": "other"}"#).await;
    assert_eq!((status, &answer["purged"]), (200, &Value::Null), "{answer}");
    let (_, doc) = call(&admin, "GET", "/api/v1/cache", "").await;
    assert_eq!((doc["store"].as_str(), &doc["redis"]), (Some("memory"), &Value::Null), "{doc}");
    assert_eq!(doc["purges"][0]["model"], "other");
}
