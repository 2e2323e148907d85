//! End to end: what `precise_cache_aware` sends upstream, in `ferrogate serve` (the real
//! filter wasm in the embedded host) over a recording replica: an axum server that answers
//! chat completions, records each request's headers, and answers `POST /tokenize` as slowly
//! as the test asks.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_on, Setup};

/// What the replica saw.
#[derive(Default)]
struct Seen {
    /// The headers of each chat request, in arrival order.
    chats: Vec<HeaderMap>,
    /// `/tokenize` calls begun.
    tokenizes: usize,
}

#[derive(Clone)]
struct Replica {
    seen: Arc<Mutex<Seen>>,
    tokenize_delay: Duration,
}

async fn chat(State(r): State<Replica>, headers: HeaderMap) -> Json<Value> {
    r.seen.lock().unwrap().chats.push(headers);
    Json(json!({"id": "chatcmpl-rec", "object": "chat.completion", "created": 1, "model": "rec",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}))
}

async fn tokenize(State(r): State<Replica>) -> Json<Value> {
    r.seen.lock().unwrap().tokenizes += 1;
    tokio::time::sleep(r.tokenize_delay).await;
    Json(json!({"count": 3, "max_model_len": 4096, "tokens": [1, 2, 3]}))
}

/// A gateway whose one `precise_cache_aware` model goes to a recording replica. The replica
/// publishes no KV events: its `kv_events` address is a free port nothing listens on (the
/// strategy asks for one), so the index stays empty and only the token ids matter here.
async fn start(tokenize_delay: Duration) -> (Setup, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let replica = Replica { seen: seen.clone(), tokenize_delay };
    let app =
        Router::new().route("/v1/chat/completions", post(chat)).route("/tokenize", post(tokenize)).with_state(replica);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://pool.internal', kv_tokenize: true, \
         endpoints: [{{ address: '{addr}', kv_events: 'tcp://{silent}' }}] }}"
    );
    let models = "  - { name: kv, strategy: precise_cache_aware, targets: [{ provider: pool, model: kv }] }\n";
    (gateway_on(&[provider], models, "", 2).await, seen)
}

fn body() -> Value {
    json!({"model": "kv", "messages": [{"role": "user", "content": "hello there"}], "max_tokens": 2})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_ids_header_is_removed_before_the_upstream() {
    let (gateway, seen) = start(Duration::ZERO).await;
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/v1/chat/completions", gateway.base))
        .header("x-ferrogate-token-ids", "1, 2,3")
        .header("x-test-marker", "kept")
        .json(&body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.chats.len(), 1, "one request upstream");
    let headers = &seen.chats[0];
    // The premise: the caller's other headers do reach the replica.
    assert_eq!(headers.get("x-test-marker").map(|v| v.to_str().unwrap()), Some("kept"), "{headers:?}");
    assert!(headers.get("x-ferrogate-token-ids").is_none(), "the header went upstream: {headers:?}");
    // With the header, the gateway had no reason to tokenize.
    assert_eq!(seen.tokenizes, 0);
}

/// The bound `kv_tokenize` waits (docs/kv-routing.md): the request is held no longer.
const TOKENIZE_WAIT: Duration = Duration::from_millis(50);
/// How slowly the replica tokenizes: far past the bound.
const SLOW_TOKENIZE: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tokenize_falls_back_to_the_approximate_rules_without_holding_the_request() {
    let (gateway, seen) = start(SLOW_TOKENIZE).await;
    let client = reqwest::Client::new();
    let since = Instant::now();
    let response = client.post(format!("{}/v1/chat/completions", gateway.base)).json(&body()).send().await.unwrap();
    assert_eq!(response.status(), 200, "served all the same");
    let answer: Value = response.json().await.unwrap();
    let took = since.elapsed();
    assert_eq!(answer["choices"][0]["message"]["content"], "ok");
    // The premise: the gateway did ask (the call may land after the chat on a loaded
    // machine, so wait for it), and its answer could not have come in time.
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.lock().unwrap().tokenizes == 0 {
        assert!(Instant::now() < deadline, "the gateway never asked /tokenize");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(seen.lock().unwrap().tokenizes, 1, "one /tokenize call");
    // Served well before the slow tokenize could have answered: the wait was cut at its bound
    // (50 ms; the margin is for a loaded machine, not for the tokenize).
    assert!(took < SLOW_TOKENIZE - Duration::from_secs(1), "held {took:?} (bound {TOKENIZE_WAIT:?})");
    eprintln!("served in {took:?} with /tokenize taking {SLOW_TOKENIZE:?}");
    // And counted as a fallback, on the admin /metrics (flushed by the filter on its tick).
    let url = format!("http://{}/metrics", gateway.gateway.admin_addr());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = client.get(&url).send().await.unwrap().text().await.unwrap();
        let fallback = metrics
            .lines()
            .find(|l| l.starts_with("ferrogate_kv_decisions_total{") && l.contains("outcome=\"tokenize_fallback\""));
        if fallback.and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse::<f64>().ok()) == Some(1.0) {
            break;
        }
        assert!(Instant::now() < deadline, "no tokenize_fallback counted: {fallback:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
