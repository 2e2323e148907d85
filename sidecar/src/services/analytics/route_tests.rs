//! The analytics routes through the admin router: JSON answers, 400 for bad parameters, 409
//! with the file store.

use std::sync::{Arc, OnceLock};

use super::params::DAY_MS;
use super::tests::{store, two_models, T0};
use crate::services::pg::tests::Schema;
use crate::services::pg::PgStore;
use crate::services::source::Database;

/// An admin API with the Postgres store on `pool`'s database (`None`: the file store).
fn admin(store: Option<PgStore>) -> crate::services::admin::Admin {
    use crate::services::{cache, identity, limits, snapshot, targets, usage};
    let snapshots = Arc::new(snapshot::Snapshots::new(None));
    let db = Arc::new(OnceLock::new());
    let postgres = store.is_some();
    if let Some(store) = store {
        db.set(Database { store: Arc::new(store), changed: Arc::default(), redis: None }).ok();
    }
    crate::services::admin::Admin {
        runtime: None,
        usage: Arc::new(usage::UsageBackend::memory(usage::UsageStore::new(None))),
        snapshots: snapshots.clone(),
        db,
        postgres,
        ledger: Arc::new(limits::Ledger::new("test".into(), false)),
        targets: Arc::new(targets::Targets::new(targets::Settings::default())),
        kv: Arc::default(),
        cache: Arc::new(cache::Cache::new(snapshots)),
        identity: identity::Identity::new(Default::default(), None, Arc::new(OnceLock::new()), false),
    }
}

async fn get(app: &axum::Router, uri: &str) -> (u16, serde_json::Value) {
    use tower::ServiceExt;
    let req = axum::http::Request::builder().uri(uri).body(axum::body::Body::empty()).unwrap();
    let answer = app.clone().oneshot(req).await.unwrap();
    let status = answer.status().as_u16();
    let body = axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap();
    (status, serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{uri}: {e}: not JSON")))
}

#[tokio::test]
async fn the_routes_answer_json_and_refuse_bad_parameters() {
    let schema = Schema::new().await;
    let app = crate::services::admin::router(admin(Some(store(&schema, &two_models()).await)));
    let (status, body) = get(&app, &format!("/api/v1/analytics/usage?from={T0}&to={}&by=model", T0 + DAY_MS)).await;
    assert_eq!((status, body["bucket"].as_str(), body["series"][0]["requests"].as_u64()), (200, Some("hour"), Some(4)));
    let (status, body) =
        get(&app, &format!("/api/v1/analytics/top?from={T0}&to={}&by=key&metric=errors", T0 + DAY_MS)).await;
    assert_eq!((status, body["items"][0]["name"].as_str()), (200, Some("k2")));
    let (status, body) = get(&app, &format!("/api/v1/analytics/top?from={T0}&to={}&by=client", T0 + DAY_MS)).await;
    assert_eq!((status, body["by"].as_str(), body["items"][0]["name"].as_str()), (200, Some("client"), Some("")));
    let (status, body) = get(&app, &format!("/api/v1/analytics/events?from={T0}&to={}&limit=1", T0 + DAY_MS)).await;
    assert_eq!((status, body["events"][0]["kind"].as_str()), (200, Some("budget_reached")));
    assert!(body["next_cursor"].is_string());
    let (status, body) = get(&app, "/api/v1/analytics/forecast?at=1700006400000").await;
    assert_eq!((status, body["days_left"].as_f64()), (200, Some(16.0)));
    for bad in [
        "/api/v1/analytics/usage?bucket=week",
        "/api/v1/analytics/usage?from=10&to=5",
        "/api/v1/analytics/usage?from=0&to=100000000000&bucket=minute",
        "/api/v1/analytics/usage?color=red",
        "/api/v1/analytics/top?metric=joy",
        "/api/v1/analytics/top?limit=0",
        "/api/v1/analytics/events?cursor=xyz",
        "/api/v1/analytics/forecast?at=soon",
    ] {
        let (status, body) = get(&app, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(body["error"].is_string(), "{bad}: {body}");
    }
    let file_store = crate::services::admin::router(admin(None));
    let (status, body) = get(&file_store, "/api/v1/analytics/top").await;
    assert_eq!(status, 409);
    assert!(body["error"].as_str().unwrap().contains("postgres"), "{body}");
}
