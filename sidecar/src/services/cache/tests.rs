//! The filter-facing cache routes against the machine's real Redis
//! (`FERROGATE_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`; each test under a key prefix
//! of its own), and against a Redis that is not there: misses, refusals, the breaker and what
//! a lookup costs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use tower::ServiceExt;

use super::*;

pub(crate) const TOKEN: &str = "internal";

pub(crate) fn redis_url() -> String {
    std::env::var("FERROGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A configuration using Redis through the variable `var` (each test names its own, as tests
/// run in parallel in one process), set to `url`.
pub(crate) fn config(var: &str, url: &str) -> ferrogate_core::config::RawConfig {
    std::env::set_var(var, url);
    let yaml = format!(
        r#"
providers: [{{ name: local, kind: openai_compatible, base_url: "http://127.0.0.1:9" }}]
models:
  - {{ name: chat, targets: [{{ provider: local, model: m }}], cache: {{ ttl_secs: 60 }} }}
  - {{ name: other, targets: [{{ provider: local, model: m }}] }}
aliases: {{ fast: chat }}
groups: [{{ name: team, models: ["*"] }}]
keys:
  - {{ name: alice, digest: "sha256:{a}", groups: [team] }}
  - {{ name: bob, digest: "sha256:{b}", groups: [team] }}
  - {{ name: carol, digest: "sha256:{c}" }}
redis: {{ url_env: {var} }}
cache_store: {{ kind: redis, max_entry_bytes: 1024 }}
"#,
        a = "1".repeat(64),
        b = "2".repeat(64),
        c = "3".repeat(64),
    );
    serde_saphyr::from_str(&yaml).unwrap()
}

/// A cache serving `raw`, its keys under a prefix of its own.
pub(crate) fn cache_over(raw: ferrogate_core::config::RawConfig) -> Arc<Cache> {
    let snapshots = Arc::new(Snapshots::new(None));
    snapshots.publish(raw).unwrap();
    let prefix = format!("fgtest:{:016x}:cache:", rand::random::<u64>());
    Arc::new(Cache::with_prefix(snapshots, &prefix))
}

fn app(cache: &Arc<Cache>) -> Router {
    router(CacheApi { cache: cache.clone(), internal_token: Some(TOKEN.into()) })
}

pub(crate) fn digest(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

async fn get(app: &Router, digest: &str) -> (u16, Vec<u8>) {
    let req = Request::get(format!("/v1/cache/entries/{digest}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    let answer = app.clone().oneshot(req).await.unwrap();
    let status = answer.status().as_u16();
    (status, axum::body::to_bytes(answer.into_body(), 1 << 20).await.unwrap().to_vec())
}

pub(crate) async fn put(app: &Router, digest: &str, body: &[u8], headers: &[(&str, &str)]) -> u16 {
    let mut req =
        Request::put(format!("/v1/cache/entries/{digest}")).header("authorization", format!("Bearer {TOKEN}"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    app.clone().oneshot(req.body(Body::from(body.to_vec())).unwrap()).await.unwrap().status().as_u16()
}

pub(crate) const STORE: [(&str, &str); 3] = [(TTL_HEADER, "60"), (MODEL_HEADER, "chat"), (SCOPE_HEADER, "key:alice")];

#[test]
fn digests_scopes_and_headers_are_checked() {
    assert!(is_digest(&digest(0xab)));
    assert!(!is_digest(&digest(0xab).to_uppercase()));
    assert!(!is_digest(&"a".repeat(63)));
    assert!(!is_digest(&format!("{}g", "a".repeat(63))));
    for ok in ["global", "key:a", "group:team:x"] {
        assert!(is_scope(ok), "{ok}");
    }
    for bad in ["", "key:", "group:", "everyone", "keys:a", "Global"] {
        assert!(!is_scope(bad), "{bad}");
    }
    let headers = |pairs: &[(&str, &str)]| {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.insert(axum::http::HeaderName::from_bytes(n.as_bytes()).unwrap(), v.parse().unwrap());
        }
        h
    };
    let good = store_headers(&headers(&STORE)).unwrap();
    assert_eq!(good, StoreHeaders { ttl_secs: 60, model: "chat".into(), scope: "key:alice".into() });
    for (name, value) in [(TTL_HEADER, "0"), (TTL_HEADER, "2592001"), (TTL_HEADER, "x"), (SCOPE_HEADER, "nobody")] {
        let mut pairs = STORE.to_vec();
        pairs.retain(|(n, _)| *n != name);
        pairs.push((name, value));
        assert!(store_headers(&headers(&pairs)).is_err(), "{name}: {value}");
    }
    assert!(store_headers(&headers(&STORE[..2])).unwrap_err().contains(SCOPE_HEADER));
    assert_eq!(store_headers(&headers(&[STORE[0], STORE[2], (MODEL_HEADER, "a:b*c")])).unwrap().model, "a:b*c");
}

#[tokio::test]
async fn entries_are_stored_and_found_again_in_redis() {
    let cache = cache_over(config("FG_CACHE_TEST_REDIS_A", &redis_url()));
    let app = app(&cache);
    let d = digest(1);
    assert_eq!(get(&app, &d).await.0, 404, "absent");
    assert_eq!(put(&app, &d, b"entry \x00\xff bytes", &STORE).await, 204);
    assert_eq!(get(&app, &d).await, (200, b"entry \x00\xff bytes".to_vec()));
    assert_eq!(get(&app, "NOT-A-DIGEST").await.0, 400);
    assert_eq!(put(&app, "abc", b"x", &STORE).await, 400);
    assert_eq!(put(&app, &d, b"x", &STORE[..2]).await, 400, "no scope");
    assert_eq!(put(&app, &digest(2), &[7u8; 1025], &STORE).await, 413, "over max_entry_bytes (1024)");
    assert_eq!(put(&app, &digest(2), &[7u8; 1024], &STORE).await, 204, "at the bound");
    let unauthorized = Request::get(format!("/v1/cache/entries/{d}")).body(Body::empty()).unwrap();
    assert_eq!(app.clone().oneshot(unauthorized).await.unwrap().status().as_u16(), 401);
    // The TTL is the entry's, and the indexes live at least as long.
    let mut c = ::redis::Client::open(redis_url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let ttl: i64 = ::redis::cmd("TTL").arg(cache.redis.entry_key(&d)).query_async(&mut c).await.unwrap();
    assert!((58..=60).contains(&ttl), "{ttl}");
    let index = cache.redis.model_index("chat");
    let ttl: i64 = ::redis::cmd("TTL").arg(&index).query_async(&mut c).await.unwrap();
    assert!((58..=60).contains(&ttl), "{ttl}");
    let members: Vec<String> = ::redis::cmd("ZRANGE").arg(&index).arg(0).arg(-1).query_async(&mut c).await.unwrap();
    assert_eq!(members, [d.clone(), digest(2)]);
    cache.redis.purge_all(&redis_url()).await.unwrap();
}

/// Redis not there: lookups are misses and stores 503, at once once the breaker is open; the
/// breaker lets one call probe again after a second.
#[tokio::test]
async fn an_unreachable_redis_is_a_miss_and_the_breaker_skips_it() {
    // Nothing listens on port 1: connections are refused at once.
    let cache = cache_over(config("FG_CACHE_TEST_REDIS_DOWN", "redis://127.0.0.1:1"));
    let down = app(&cache);
    assert_eq!(get(&down, &digest(1)).await.0, 404);
    assert!(cache.redis.breaker.is_open(), "the failure opened the breaker");
    assert_eq!(put(&down, &digest(1), b"x", &STORE).await, 503);
    assert!(!cache.redis.breaker.allow(), "skipped while open");
    // A Redis that does not answer at all (a black-holed address) costs at most the connect bound.
    let silent = cache_over(config("FG_CACHE_TEST_REDIS_SILENT", "redis://10.255.255.1:6379"));
    let started = Instant::now();
    assert_eq!(get(&app(&silent), &digest(1)).await.0, 404);
    assert!(started.elapsed() < Duration::from_millis(400), "{:?}", started.elapsed());
    tokio::time::sleep(redis::BREAK_FOR + Duration::from_millis(50)).await;
    assert!(cache.redis.breaker.allow(), "one probe after a second");
    assert!(!cache.redis.breaker.allow(), "the others still skip");
}

/// What a miss costs, measured in process (router, token check, Redis round trip or breaker).
/// Printed for the record; the bounds only catch a lookup gone pathological.
#[tokio::test]
async fn a_miss_stays_cheap() {
    const N: u32 = 2_000;
    let up = cache_over(config("FG_CACHE_TEST_REDIS_COST", &redis_url()));
    let down = cache_over(config("FG_CACHE_TEST_REDIS_COST_DOWN", "redis://127.0.0.1:1"));
    let mut costs = Vec::new();
    for (name, cache) in [("redis up, absent entry", &up), ("redis down, breaker open", &down)] {
        let app = app(cache);
        assert_eq!(get(&app, &digest(9)).await.0, 404, "warm up (and open the breaker when down)");
        let started = Instant::now();
        for _ in 0..N {
            assert_eq!(get(&app, &digest(9)).await.0, 404);
        }
        let each = started.elapsed() / N;
        eprintln!("cache lookup, {name}: {each:?} per 404 (mean of {N})");
        costs.push(each);
    }
    assert!(costs[0] < Duration::from_millis(5), "{costs:?}");
    assert!(costs[1] < Duration::from_micros(500), "{costs:?}");
}
