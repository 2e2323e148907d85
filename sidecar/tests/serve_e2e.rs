//! End to end: `ferrogate serve` (the real filter wasm in the embedded host) in front of
//! `ferrogate sim`, over real HTTP on loopback. Each test starts its own sim and gateway on
//! ephemeral ports, so the tests run in parallel.

use std::time::{Duration, Instant};

use clap::Parser;
use ferrogate_sidecar::serve::{Gateway, ServeArgs};
use ferrogate_sidecar::sim::SimArgs;
use futures_util::StreamExt;
use serde_json::{json, Value};

#[path = "common/wasm.rs"]
mod wasm;
use wasm::filter_wasm;
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

#[derive(Parser)]
struct SimCli {
    #[command(flatten)]
    args: SimArgs,
}

#[derive(Parser)]
struct ServeCli {
    #[command(flatten)]
    args: ServeArgs,
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

fn write_config(upstream: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("ferrogate-e2e-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = format!(
        "providers:\n  - {{ name: local, kind: openai_compatible, base_url: 'http://{upstream}' }}\n\
         models:\n  - name: chat\n    targets: [{{ provider: local, model: sim-small }}]\n\
         aliases: {{ default: chat }}\n"
    );
    std::fs::write(dir.join("config.yaml"), yaml).unwrap();
    TempDir(dir)
}

fn rand_suffix() -> u64 {
    rand::random()
}

async fn start(sim_extra: &[&str], serve_extra: &[&str]) -> Setup {
    let sim = start_sim(sim_extra).await;
    start_with_upstream(&sim.to_string(), serve_extra).await
}

async fn start_with_upstream(upstream: &str, serve_extra: &[&str]) -> Setup {
    let dir = write_config(upstream);
    let config = dir.0.join("config.yaml");
    let mut argv = vec![
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
    argv.extend_from_slice(serve_extra);
    let mut args = ServeCli::parse_from(argv).args;
    args.filter = Some(filter_wasm());
    let gateway = Gateway::start(&args).await.expect("gateway starts");
    let base = format!("http://{}", gateway.addr());
    Setup { gateway, base, _dir: dir }
}

fn chat(stream: bool) -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": "hello there"}], "stream": stream, "max_tokens": 8})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_chat_completion_is_routed_and_model_rewritten() {
    let s = start(&[], &[]).await;
    let resp =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", s.base)).json(&chat(false)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-ferrogate-provider"], "local");
    assert!(resp.headers().contains_key("x-request-id"));
    let body: Value = resp.json().await.unwrap();
    // The sim echoes the model it was asked for: the filter rewrote "chat" to "sim-small".
    assert_eq!(body["model"], "sim-small");
    assert_eq!(body["object"], "chat.completion");
    assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_is_served() {
    let s = start(&[], &[]).await;
    let client = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let resp = client.post(format!("{}/v1/chat/completions", s.base)).json(&chat(false)).send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["model"], "sim-small");
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_first_byte_arrives_before_upstream_finishes() {
    // 8 tokens, 150 ms apart: the upstream needs > 1 s to finish.
    let s = start(&["--itl-ms", "150", "--output-tokens", "8"], &[]).await;
    let started = Instant::now();
    let resp =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", s.base)).json(&chat(true)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut first = None;
    let mut all = Vec::new();
    while let Some(chunk) = stream.next().await {
        first.get_or_insert_with(|| started.elapsed());
        all.extend_from_slice(&chunk.unwrap());
    }
    let total = started.elapsed();
    let first = first.unwrap();
    let text = String::from_utf8(all).unwrap();
    assert!(text.contains("chat.completion.chunk"), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    assert!(first + Duration::from_millis(600) < total, "first byte {first:?}, total {total:?}: response was buffered");
    s.gateway.shutdown().await;
}

/// Regression guard for a stall, not a benchmark: a 16-token stream with no configured delays
/// through the gateway (client side and upstream side sockets both) takes about a millisecond;
/// a socket left with Nagle's algorithm on makes it wait for a delayed ACK (about 40 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_without_delays_do_not_stall() {
    let s = start(&[], &[]).await;
    let client = reqwest::Client::new();
    let mut body = chat(true);
    body["max_tokens"] = json!(16);
    let mut times = Vec::new();
    for _ in 0..7 {
        let started = Instant::now();
        let resp = client.post(format!("{}/v1/chat/completions", s.base)).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let text = resp.text().await.unwrap();
        times.push(started.elapsed());
        let events = text.split("\n\n").filter(|e| e.starts_with("data: ")).count();
        assert_eq!(events, 1 + 16 + 1 + 1, "role, 16 tokens, finish, [DONE]: {text}");
    }
    times.sort();
    // The median, so one request delayed by a loaded machine cannot fail it.
    assert!(times[3] < Duration::from_millis(20), "16-token streams took {times:?}");
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_model_gets_openai_shaped_404() {
    let s = start(&[], &[]).await;
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", s.base))
        .json(&json!({"model": "nope", "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("nope"), "{body}");
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_upstream_is_a_502() {
    // Port 1 (tcpmux) is never handed out for `bind(0)`: a freed ephemeral port could be
    // taken by a server of a test running alongside (it was, once: a 404 instead of a 502).
    let s = start_with_upstream("127.0.0.1:1", &[]).await;
    let resp =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", s.base)).json(&chat(false)).send().await.unwrap();
    assert_eq!(resp.status(), 502);
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_request_body_streams_through() {
    let s = start(&[], &[]).await;
    let input: Vec<String> = (0..20_000).map(|i| format!("sentence number {i} of a large batch")).collect();
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/embeddings", s.base))
        .json(&json!({"model": "chat", "input": input}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["data"].as_array().unwrap().len(), 20_000);
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_in_flight_stream() {
    let s = start(&["--itl-ms", "100", "--output-tokens", "10"], &[]).await;
    let url = format!("{}/v1/chat/completions", s.base);
    let request = tokio::spawn(async move {
        let resp = reqwest::Client::new().post(url).json(&chat(true)).send().await.unwrap();
        resp.text().await.unwrap()
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base = s.base.clone();
    s.gateway.shutdown().await;
    let text = request.await.unwrap();
    assert!(text.trim_end().ends_with("data: [DONE]"), "in-flight stream was cut: {text}");
    // The listener is closed after shutdown.
    assert!(reqwest::Client::new().get(format!("{base}/v1/models")).send().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_list_answered_by_the_filter() {
    let s = start(&[], &[]).await;
    let resp = reqwest::get(format!("{}/v1/models", s.base)).await.unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    let ids: Vec<&str> = body["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"chat"), "{body}");
    s.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_timeout_is_a_504() {
    let s = start(&["--ttft-ms", "2000"], &["--upstream-timeout-ms", "300"]).await;
    let resp =
        reqwest::Client::new().post(format!("{}/v1/chat/completions", s.base)).json(&chat(false)).send().await.unwrap();
    assert_eq!(resp.status(), 504);
    s.gateway.shutdown().await;
}
