//! End to end: failover and passive health in `ferrogate serve` (the real filter wasm in the
//! embedded host) in front of `ferrogate sim` engines, dead ports and stub upstreams that
//! count what reaches them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway, gateway_with, pool, provider};
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

/// An upstream answering every POST with one status and body, counting them. GETs (the
/// sidecar's health probes) get a 200: active health must not park it while a slow run is
/// still testing what passive health makes of its answers.
struct Stub {
    addr: std::net::SocketAddr,
    hits: Arc<AtomicUsize>,
}

async fn stub(status: u16, body: &'static str) -> Stub {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().fallback(move |method: axum::http::Method| {
        let counter = counter.clone();
        async move {
            if method != axum::http::Method::POST {
                return (axum::http::StatusCode::OK, [("content-type", "application/json")], "{}");
            }
            counter.fetch_add(1, Ordering::SeqCst);
            let status = axum::http::StatusCode::from_u16(status).unwrap();
            (status, [("content-type", "application/json")], body)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Stub { addr, hits }
}

/// A pass-through to `target` (a sim) counting the POSTs it forwards.
async fn tap(target: std::net::SocketAddr) -> Stub {
    let hits = Arc::new(AtomicUsize::new(0));
    let (counter, client) = (hits.clone(), reqwest::Client::new());
    let app = axum::Router::new().fallback(move |request: axum::extract::Request| {
        let (counter, client) = (counter.clone(), client.clone());
        async move {
            let (parts, body) = request.into_parts();
            if parts.method == axum::http::Method::POST {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let url = format!("http://{target}{}", parts.uri.path_and_query().map_or("/", |p| p.as_str()));
            let resp = client.request(parts.method, url).headers(parts.headers).body(body).send().await.unwrap();
            let (status, mut headers) = (resp.status(), resp.headers().clone());
            // The body is passed on whole: its framing is axum's to set.
            headers.remove("transfer-encoding");
            headers.remove("content-length");
            (status, headers, resp.bytes().await.unwrap())
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Stub { addr, hits }
}

/// A loopback port nothing listens on.
fn dead_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

async fn ask(base: &str, model: &str) -> (u16, String, Option<String>) {
    let (status, body, provider, _) = ask_with(base, model, &[]).await;
    (status, body, provider)
}

/// A chat request with extra `headers`: status, body, `x-ferrogate-provider`, `x-sim-endpoint`.
async fn ask_with(base: &str, model: &str, headers: &[(&str, &str)]) -> (u16, String, Option<String>, Option<String>) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8});
    let mut request = reqwest::Client::new().post(format!("{base}/v1/chat/completions")).json(&body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let resp = request.send().await.unwrap();
    let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().unwrap().to_string());
    let (provider, endpoint) = (header("x-ferrogate-provider"), header("x-sim-endpoint"));
    (resp.status().as_u16(), resp.text().await.unwrap(), provider, endpoint)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_target_and_a_500_replica_are_failed_over() {
    let sim = start_sim(&[]).await.to_string();
    let bad = stub(500, r#"{"error":{"message":"boom"}}"#).await;
    let providers = [
        provider("dead", "openai_compatible", &dead_port()),
        provider("bad", "openai_compatible", &bad.addr.to_string()),
        provider("good", "openai_compatible", &sim),
    ];
    let models = "  - { name: chat, targets: [{provider: dead, model: sim-small}, {provider: good, model: sim-small}] }\n  - { name: flaky, targets: [{provider: bad, model: sim-small}, {provider: good, model: sim-small}] }\n";
    let s = gateway(&providers, models).await;
    for model in ["chat", "flaky"] {
        for i in 0..6 {
            let (status, body, provider) = ask(&s.base, model).await;
            assert_eq!(status, 200, "{model} request {i}: {body}");
            assert_eq!(provider.as_deref(), Some("good"));
        }
    }
    assert!(bad.hits.load(Ordering::SeqCst) >= 1, "round robin reached the 500 replica");
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_dead_falls_back_to_another_dialect_translated() {
    let sim = start_sim(&[]).await.to_string();
    let providers = [provider("dead", "openai_compatible", &dead_port()), provider("claude", "anthropic", &sim)];
    let models = "  - { name: gone, targets: [{provider: dead, model: sim-small}], fallbacks: [backup] }\n  - { name: backup, targets: [{provider: claude, model: sim-small}] }\n";
    let s = gateway(&providers, models).await;
    for _ in 0..4 {
        let (status, body, provider) = ask(&s.base, "gone").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(provider.as_deref(), Some("claude"));
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["object"], "chat.completion", "answered in the client's dialect: {body}");
        assert!(v["choices"][0]["message"]["content"].is_string(), "{body}");
    }
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_is_never_retried_and_exhaustion_returns_the_last_answer() {
    let sim = start_sim(&[]).await.to_string();
    let refusing = stub(400, r#"{"error":{"message":"bad request"}}"#).await;
    let first = stub(503, r#"{"error":{"message":"first"}}"#).await;
    let last = stub(502, r#"{"error":{"message":"last one","code":7}}"#).await;
    let providers = [
        provider("refusing", "openai_compatible", &refusing.addr.to_string()),
        provider("first", "openai_compatible", &first.addr.to_string()),
        provider("last", "openai_compatible", &last.addr.to_string()),
        provider("good", "openai_compatible", &sim),
    ];
    let models = "  - { name: strict, strategy: priority, targets: [{provider: refusing, model: sim-small}, {provider: good, model: sim-small}] }\n  - { name: doomed, strategy: priority, targets: [{provider: first, model: sim-small}, {provider: last, model: sim-small}] }\n";
    let s = gateway(&providers, models).await;
    let (status, body, _) = ask(&s.base, "strict").await;
    assert_eq!((status, body.as_str()), (400, r#"{"error":{"message":"bad request"}}"#));
    assert_eq!(refusing.hits.load(Ordering::SeqCst), 1);
    let (status, body, provider) = ask(&s.base, "doomed").await;
    assert_eq!((status, body.as_str()), (502, r#"{"error":{"message":"last one","code":7}}"#), "verbatim");
    assert_eq!(provider.as_deref(), Some("last"));
    assert_eq!((first.hits.load(Ordering::SeqCst), last.hits.load(Ordering::SeqCst)), (1, 1));
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_health_parks_a_failing_target_after_three_failures() {
    let sim = start_sim(&[]).await.to_string();
    let bad = stub(500, r#"{"error":{"message":"boom"}}"#).await;
    let providers =
        [provider("bad", "openai_compatible", &bad.addr.to_string()), provider("good", "openai_compatible", &sim)];
    let models = "  - { name: pas, strategy: priority, targets: [{provider: bad, model: sim-small}, {provider: good, model: sim-small}] }\n  - { name: only, targets: [{provider: bad, model: sim-small}] }\n";
    let s = gateway(&providers, models).await;
    for i in 0..10 {
        let (status, body, _) = ask(&s.base, "pas").await;
        assert_eq!(status, 200, "request {i}: {body}");
    }
    // Priority always picks `bad` first: only the first three requests reached it.
    assert_eq!(bad.hits.load(Ordering::SeqCst), 3);
    // A model whose only target is parked (no fallbacks) is unavailable.
    let (status, body, _) = ask(&s.base, "only").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(bad.hits.load(Ordering::SeqCst), 3);
    s.gateway.shutdown().await;
}

/// One 429 with `Retry-After: 20` parks that replica for every request on every worker VM at
/// once; without `Retry-After` the counting rule needs three failures in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_parks_the_replica_at_once() {
    for (retry_after, hits) in [("20", 1), ("0", 3)] {
        let limited = tap(start_sim(&["--error-429-rate", "1", "--retry-after-secs", retry_after]).await).await;
        let good = start_sim(&[]).await.to_string();
        let s = gateway(
            &[pool("pool", &[limited.addr.to_string(), good.clone()])],
            "  - { name: chat, targets: [{provider: pool, model: sim-small}] }\n",
        )
        .await;
        for i in 0..12 {
            let (status, body, _, endpoint) = ask_with(&s.base, "chat", &[]).await;
            assert_eq!(status, 200, "Retry-After {retry_after}, request {i}: {body}");
            assert_eq!(endpoint.as_deref(), Some(good.as_str()), "request {i}");
        }
        // Round robin would otherwise send every other pick to the limited replica.
        assert_eq!(limited.hits.load(Ordering::SeqCst), hits, "Retry-After {retry_after}");
        s.gateway.shutdown().await;
    }
}

/// A request-count limit counts client requests, not upstream attempts: with the first
/// target failing, `requests_per_minute: 6` lets six client requests through (each of the
/// first three took two attempts), then refuses, also a client claiming to be a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_over_request_counts_once_against_a_request_limit() {
    let sim = start_sim(&[]).await.to_string();
    let bad = stub(500, r#"{"error":{"message":"boom"}}"#).await;
    let providers =
        [provider("bad", "openai_compatible", &bad.addr.to_string()), provider("good", "openai_compatible", &sim)];
    let models = "  - { name: lim, strategy: priority, targets: [{provider: bad, model: sim-small}, {provider: good, model: sim-small}] }\n";
    let s = gateway_with(&providers, models, "limits: { requests_per_minute: 6 }\n").await;
    for i in 0..6 {
        let (status, body, provider) = ask(&s.base, "lim").await;
        assert_eq!((status, provider.as_deref()), (200, Some("good")), "request {i}: {body}");
    }
    assert_eq!(bad.hits.load(Ordering::SeqCst), 3, "the first three were failed over, then it was parked");
    let replay = [("x-ferrogate-attempt", "2"), ("x-ferrogate-tried", "lim#0")];
    for headers in [&[][..], &replay[..]] {
        let (status, body, _, _) = ask_with(&s.base, "lim", headers).await;
        assert_eq!(status, 429, "{headers:?}: {body}");
        assert!(body.contains("org allows 6 requests per minute"), "{body}");
    }
    // One usage record per client request: abandoned attempts write none.
    let records = usage_of(&s.gateway, "lim", 8).await;
    let statuses: Vec<u16> = records.iter().map(|r| r.status).collect();
    assert_eq!(statuses.len(), 8, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&st| st == 200).count(), 6, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|&&st| st == 429).count(), 2, "{statuses:?}");
    // Retries count the attempts before the one that answered: one for the three failed over,
    // none for the rest (the bad target parked), nor for a client claiming to be a replay.
    let mut retries: Vec<(u16, u64)> = records.iter().map(|r| (r.status, r.retries)).collect();
    retries.sort_unstable();
    assert_eq!(retries, [(200, 0), (200, 0), (200, 0), (200, 1), (200, 1), (200, 1), (429, 0), (429, 0)]);
    s.gateway.shutdown().await;
}

/// The usage records of `model` once `n` have arrived, after a pause for stragglers.
async fn usage_of(
    gateway: &ferrogate_sidecar::serve::Gateway,
    model: &str,
    n: u64,
) -> Vec<ferrogate_core::usage::Record> {
    use ferrogate_sidecar::services::usage::Query;
    let query = Query { model: Some(model.into()), ..Query::default() };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while gateway.usage().query(&query).await.unwrap().totals.requests < n {
        assert!(std::time::Instant::now() < deadline, "fewer than {n} usage records for {model}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(1_000)).await;
    gateway.usage().query(&query).await.unwrap().records
}
