//! End to end: failover and passive health in `ferrogate serve` (the real filter wasm in the
//! embedded host) in front of `ferrogate sim` engines, dead ports and stub upstreams that
//! count what reaches them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use clap::Parser;
use ferrogate_sidecar::serve::{Gateway, ServeArgs};
use serde_json::{json, Value};

#[path = "common/wasm.rs"]
mod wasm;
use wasm::filter_wasm;
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

#[derive(Parser)]
struct ServeCli {
    #[command(flatten)]
    args: ServeArgs,
}

/// An upstream answering every request with one status and body, counting the POSTs.
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
            // Only requests count: the sidecar's health probes are GETs.
            if method == axum::http::Method::POST {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            let status = axum::http::StatusCode::from_u16(status).unwrap();
            (status, [("content-type", "application/json")], body)
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

struct Setup {
    gateway: Gateway,
    base: String,
    _dir: TempDir,
}

struct TempDir(std::path::PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A gateway over `providers` (YAML flow entries) and `models` (YAML block entries).
async fn gateway(providers: &[String], models: &str) -> Setup {
    let dir = std::env::temp_dir().join(format!("ferrogate-failover-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let providers: String = providers.iter().map(|p| format!("  - {p}\n")).collect();
    std::fs::write(dir.join("config.yaml"), format!("providers:\n{providers}models:\n{models}")).unwrap();
    let config = dir.join("config.yaml");
    let argv = [
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--sidecar-listen",
        "127.0.0.1:0",
        "--workers",
        "2",
    ];
    let mut args = ServeCli::parse_from(argv).args;
    args.filter = Some(filter_wasm());
    let gateway = Gateway::start(&args).await.expect("gateway starts");
    let base = format!("http://{}", gateway.addr());
    Setup { gateway, base, _dir: TempDir(dir) }
}

fn provider(name: &str, kind: &str, addr: &str) -> String {
    format!("{{ name: {name}, kind: {kind}, base_url: 'http://{addr}' }}")
}

async fn ask(base: &str, model: &str) -> (u16, String, Option<String>) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8});
    let resp = reqwest::Client::new().post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap();
    let provider = resp.headers().get("x-ferrogate-provider").map(|v| v.to_str().unwrap().to_string());
    (resp.status().as_u16(), resp.text().await.unwrap(), provider)
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
