//! End-to-end tests of `ferrogate sim` over real loopback HTTP: OpenAI shapes, usage,
//! determinism, real streaming, metrics and fault injection. The Anthropic and Gemini dialects
//! and tool calling (in every dialect) are tested in the modules under `tests/sim/`, with
//! request bodies from `testdata/sim/`.

#[path = "sim/anthropic.rs"]
mod anthropic;
#[path = "sim/gemini.rs"]
mod gemini;
#[path = "sim/tools.rs"]
mod tools;

use std::time::{Duration, Instant};

use ferrogate_sidecar::sim::{self, SimArgs};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// A sim serving on an ephemeral loopback port; shuts down when dropped.
struct Sim {
    base: String,
    client: reqwest::Client,
    _stop: oneshot::Sender<()>,
}

impl Sim {
    async fn start(args: SimArgs) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(sim::run(args, listener, async {
            let _ = stopped.await;
        }));
        Self { base, client: reqwest::Client::new(), _stop: stop }
    }

    fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.client.post(format!("{}{path}", self.base)).json(body)
    }

    async fn get_text(&self, path: &str) -> String {
        let response = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    }

    async fn post_json(&self, path: &str, body: &Value) -> Value {
        let response = self.post(path, body).send().await.unwrap();
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }
}

/// A request body (or expected value) from `testdata/sim/`.
fn testdata(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/sim").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn args(configure: impl FnOnce(&mut SimArgs)) -> SimArgs {
    let mut args = SimArgs::default();
    configure(&mut args);
    args
}

fn chat_body(user: &str, max_tokens: u32) -> Value {
    json!({
        "model": "sim-small",
        "max_tokens": max_tokens,
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": user},
        ],
    })
}

/// The `data:` payloads of an SSE body, in order.
fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|frame| !frame.is_empty())
        .map(|frame| frame.strip_prefix("data: ").unwrap().to_owned())
        .collect()
}

/// The value of a metric line `name{labels} value` in a Prometheus text body.
fn metric(text: &str, series: &str) -> f64 {
    let line = text.lines().find(|l| l.starts_with(series)).unwrap_or_else(|| panic!("{series} missing:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn models_list_has_configured_models() {
    let sim = Sim::start(args(|a| a.models = vec!["m-a".into(), "m-b".into()])).await;
    let list: Value = serde_json::from_str(&sim.get_text("/v1/models").await).unwrap();
    assert_eq!(list["object"], "list");
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["m-a", "m-b"]);
    assert_eq!(list["data"][0]["object"], "model");

    let default = Sim::start(SimArgs::default()).await;
    let list: Value = serde_json::from_str(&default.get_text("/v1/models").await).unwrap();
    assert_eq!(list["data"][0]["id"], "sim-small");
    assert_eq!(default.get_text("/health").await, "");
}

#[tokio::test]
async fn chat_completion_has_usage_and_is_deterministic() {
    let sim = Sim::start(SimArgs::default()).await;
    let first = sim.post_json("/v1/chat/completions", &chat_body("what is rust", 5)).await;
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["model"], "sim-small");
    assert!(first["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(first["created"].as_u64().unwrap() > 1_600_000_000);
    let choice = &first["choices"][0];
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["finish_reason"], "length");
    let content = choice["message"]["content"].as_str().unwrap();
    assert_eq!(content.split(' ').count(), 5);
    // (2 words + 4) + (3 words + 4) + 3 reply priming.
    assert_eq!(first["usage"], json!({"prompt_tokens": 16, "completion_tokens": 5, "total_tokens": 21}));

    let again = sim.post_json("/v1/chat/completions", &chat_body("what is rust", 5)).await;
    assert_eq!(again["choices"][0]["message"]["content"], content);
    assert_ne!(again["id"], first["id"]);
    let other = sim.post_json("/v1/chat/completions", &chat_body("what is go", 5)).await;
    assert_ne!(other["choices"][0]["message"]["content"], content);

    // Without max_tokens the default --output-tokens (16) applies and the model "stops".
    let mut uncapped = chat_body("what is rust", 0);
    uncapped.as_object_mut().unwrap().remove("max_tokens");
    let full = sim.post_json("/v1/chat/completions", &uncapped).await;
    assert_eq!(full["usage"]["completion_tokens"], 16);
    assert_eq!(full["choices"][0]["finish_reason"], "stop");
    let full_text = full["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(full_text.starts_with(content), "{full_text} vs {content}");
}

#[tokio::test]
async fn streamed_chat_streams_openai_chunks_with_usage() {
    let sim = Sim::start(SimArgs::default()).await;
    let plain = sim.post_json("/v1/chat/completions", &chat_body("stream me", 5)).await;
    let mut body = chat_body("stream me", 5);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});

    let started = Instant::now();
    let response = sim.post("/v1/chat/completions", &body).header("x-sim-itl-ms", "200").send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.bytes_stream();
    let mut raw = Vec::new();
    let mut first_chunk_at = None;
    while let Some(bytes) = stream.next().await {
        first_chunk_at.get_or_insert_with(|| started.elapsed());
        raw.extend_from_slice(&bytes.unwrap());
    }
    let total = started.elapsed();
    let first_chunk_at = first_chunk_at.unwrap();
    // 4 gaps of 200 ms between 5 tokens: the body must have been streamed, not buffered.
    assert!(total >= Duration::from_millis(750), "total {total:?}");
    assert!(first_chunk_at + Duration::from_millis(300) < total, "first {first_chunk_at:?}, total {total:?}");

    let frames = sse_data(std::str::from_utf8(&raw).unwrap());
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1].iter().map(|f| serde_json::from_str(f).unwrap()).collect();
    // role + 5 tokens + finish + usage
    assert_eq!(chunks.len(), 8, "{frames:?}");
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["id"], chunks[0]["id"]);
        assert_eq!(chunk["model"], "sim-small");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks[1..6].iter().map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap()).collect();
    assert_eq!(text, plain["choices"][0]["message"]["content"].as_str().unwrap());
    assert!(chunks[..6].iter().all(|c| c["choices"][0]["finish_reason"].is_null() && c["usage"].is_null()));
    assert_eq!(chunks[6]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[6]["choices"][0]["delta"], json!({}));
    assert_eq!(chunks[7]["choices"], json!([]));
    assert_eq!(chunks[7]["usage"], plain["usage"]);
}

/// Regression guard for a stall, not a benchmark: each frame of a stream is its own small
/// write, and without `TCP_NODELAY` Nagle's algorithm holds the second one until the client's
/// delayed ACK (about 40 ms on Linux), so every stream took 44 ms instead of about one.
#[tokio::test]
async fn stream_without_delays_does_not_stall_between_frames() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = chat_body("stall", 16);
    body["stream"] = json!(true);
    let mut times = Vec::new();
    // One kept-alive connection, as a gateway's pool uses it (delayed ACKs are at their worst
    // on a connection past its first exchanges).
    for _ in 0..7 {
        let started = Instant::now();
        let text = sim.post("/v1/chat/completions", &body).send().await.unwrap().text().await.unwrap();
        times.push(started.elapsed());
        assert_eq!(sse_data(&text).len(), 1 + 16 + 1 + 1, "role, 16 tokens, finish, [DONE]");
    }
    times.sort();
    // The median, so one request delayed by a loaded machine cannot fail it.
    assert!(times[3] < Duration::from_millis(20), "16-token streams took {times:?}");
}

#[tokio::test]
async fn stream_without_include_usage_has_no_usage_chunk() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = chat_body("x", 2);
    body["stream"] = json!(true);
    let text = sim.post("/v1/chat/completions", &body).send().await.unwrap().text().await.unwrap();
    let frames = sse_data(&text);
    assert_eq!(frames.len(), 1 + 2 + 1 + 1, "{frames:?}"); // role, 2 tokens, finish, [DONE]
    assert!(!frames[3].contains("usage"), "{}", frames[3]);
}

#[tokio::test]
async fn completions_plain_and_stream_agree() {
    let sim = Sim::start(args(|a| a.output_tokens = 4)).await;
    let body = json!({"model": "sim-small", "prompt": "once upon a time"});
    let plain = sim.post_json("/v1/completions", &body).await;
    assert_eq!(plain["object"], "text_completion");
    assert_eq!(plain["choices"][0]["finish_reason"], "stop");
    assert_eq!(plain["usage"], json!({"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}));

    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let text = sim.post("/v1/completions", &streamed).send().await.unwrap().text().await.unwrap();
    let frames = sse_data(&text);
    assert_eq!(frames.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = frames[..frames.len() - 1].iter().map(|f| serde_json::from_str(f).unwrap()).collect();
    assert_eq!(chunks.len(), 4 + 2);
    let joined: String = chunks[..4].iter().map(|c| c["choices"][0]["text"].as_str().unwrap()).collect();
    assert_eq!(joined, plain["choices"][0]["text"].as_str().unwrap());
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(chunks[5]["usage"], plain["usage"]);
}

#[tokio::test]
async fn embeddings_are_deterministic_per_input() {
    let sim = Sim::start(SimArgs::default()).await;
    let one = sim.post_json("/v1/embeddings", &json!({"model": "sim-small", "input": "hello world"})).await;
    assert_eq!(one["object"], "list");
    assert_eq!(one["data"][0]["embedding"].as_array().unwrap().len(), 16);
    assert_eq!(one["usage"], json!({"prompt_tokens": 2, "total_tokens": 2}));
    let many = sim.post_json("/v1/embeddings", &json!({"model": "sim-small", "input": ["other", "hello world"]})).await;
    assert_eq!(many["data"].as_array().unwrap().len(), 2);
    assert_eq!(many["data"][1]["index"], 1);
    assert_eq!(many["data"][1]["embedding"], one["data"][0]["embedding"]);
    assert_ne!(many["data"][0]["embedding"], one["data"][0]["embedding"]);
}

#[tokio::test]
async fn unknown_model_and_bad_json_use_openai_error_shape() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = chat_body("x", 1);
    body["model"] = json!("nope");
    let response = sim.post("/v1/chat/completions", &body).send().await.unwrap();
    assert_eq!(response.status(), 404);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "model_not_found");
    assert_eq!(error["error"]["param"], "model");
    assert!(error["error"]["message"].as_str().unwrap().contains("nope"));

    let response = sim
        .client
        .post(format!("{}/v1/chat/completions", sim.base))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert!(error["error"].get("code").is_some());
}

#[tokio::test]
async fn metrics_track_running_requests_and_tokens() {
    let sim = Sim::start(SimArgs::default()).await;
    let text = sim.get_text("/metrics").await;
    for name in [
        "vllm:num_requests_running{model_name=\"sim-small\"}",
        "vllm:num_requests_waiting{model_name=\"sim-small\"}",
        "vllm:kv_cache_usage_perc{model_name=\"sim-small\"}",
        "vllm:gpu_cache_usage_perc{model_name=\"sim-small\"}",
        "vllm:prompt_tokens_total{model_name=\"sim-small\"}",
        "vllm:generation_tokens_total{model_name=\"sim-small\"}",
        "vllm:request_success_total{finished_reason=\"stop\",model_name=\"sim-small\"}",
    ] {
        assert_eq!(metric(&text, name), 0.0, "{name}");
    }

    let slow = sim.post("/v1/chat/completions", &chat_body("slow one", 3)).header("x-sim-ttft-ms", "1500");
    let pending = tokio::spawn(slow.send());
    let deadline = Instant::now() + Duration::from_millis(1200);
    let running = loop {
        let text = sim.get_text("/metrics").await;
        let running = metric(&text, "vllm:num_requests_running{");
        if running > 0.0 || Instant::now() > deadline {
            break (running, metric(&text, "vllm:kv_cache_usage_perc{"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(running.0, 1.0);
    // 2 + 4 + 2 + 4 + 3 = 15 prompt tokens of a 100 × 16 token cache.
    assert!((running.1 - 15.0 / 1600.0).abs() < 1e-9, "kv {}", running.1);
    assert_eq!(pending.await.unwrap().unwrap().status(), 200);

    let text = sim.get_text("/metrics").await;
    assert_eq!(metric(&text, "vllm:num_requests_running{"), 0.0);
    assert_eq!(metric(&text, "vllm:kv_cache_usage_perc{"), 0.0);
    assert_eq!(metric(&text, "vllm:prompt_tokens_total{"), 15.0);
    assert_eq!(metric(&text, "vllm:generation_tokens_total{"), 3.0);
    assert_eq!(metric(&text, "vllm:request_success_total{finished_reason=\"length\""), 1.0);
}

#[tokio::test]
async fn error_rate_one_always_fails_but_ops_endpoints_answer() {
    let sim = Sim::start(args(|a| a.error_500_rate = 1.0)).await;
    for _ in 0..3 {
        let response = sim.post("/v1/chat/completions", &chat_body("x", 1)).send().await.unwrap();
        assert_eq!(response.status(), 500);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "server_error");
    }
    sim.get_text("/metrics").await;
    sim.get_text("/v1/models").await;
}

#[tokio::test]
async fn forced_429_carries_retry_after() {
    let sim = Sim::start(SimArgs::default()).await;
    let response = sim
        .post("/v1/completions", &json!({"model": "sim-small", "prompt": "x"}))
        .header("x-sim-status", "429")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["error"]["code"], "rate_limit_exceeded");
}

#[tokio::test]
async fn reset_drops_the_connection_without_a_response() {
    let sim = Sim::start(SimArgs::default()).await;
    let result = sim.post("/v1/chat/completions", &chat_body("x", 1)).header("x-sim-reset", "1").send().await;
    let error = result.expect_err("a reset must not produce a response");
    assert!(!error.is_status() && !error.is_decode(), "{error:?}");
    // The server itself keeps serving.
    sim.post_json("/v1/chat/completions", &chat_body("x", 1)).await;

    let always = Sim::start(args(|a| a.reset_rate = 1.0)).await;
    assert!(always.post("/v1/embeddings", &json!({"model": "sim-small", "input": "x"})).send().await.is_err());
}

#[tokio::test]
async fn slow_rate_delays_requests() {
    let sim = Sim::start(args(|a| {
        a.slow_rate = 1.0;
        a.slow_ms = 400;
    }))
    .await;
    let started = Instant::now();
    sim.post_json("/v1/chat/completions", &chat_body("x", 1)).await;
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
}

#[tokio::test]
async fn run_returns_after_shutdown() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(sim::run(SimArgs::default(), listener, async {
        let _ = stopped.await;
    }));
    stop.send(()).unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), server).await;
    result.expect("run must return after shutdown").unwrap().unwrap();
}
