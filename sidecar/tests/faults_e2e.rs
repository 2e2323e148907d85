//! Faults end to end, through `ferrogate serve` (the real filter wasm) in front of
//! `ferrogate sim`: a client that hangs up mid-stream is charged for what it read, so a token
//! limit holds against it; an engine that dies or stops mid-stream gives the client a final
//! error event in its own dialect and a 502 record; an engine that dies before answering is a
//! 502 in the caller's dialect. Slow and hoarding clients: a head that never ends and a body
//! that stalls are cut off, and connections past `--max-connections` are closed at once.
//! Oversized bodies and heads are refused in the caller's dialect.

use std::time::Duration;

use ferrogate_core::usage::Record;
use ferrogate_sidecar::services::usage::Query;
use serde_json::{json, Value};

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, provider, Setup};
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

const KEY: &str = "fg-faults-test-key";

/// `sha256:` digest of [`KEY`].
fn digest() -> String {
    use sha2::Digest;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(KEY.as_bytes())))
}

/// `serve` (`workers` VMs, more `flags`) in front of a sim started with `sim_args`: model
/// `chat` on the `openai_compatible` provider `local`, plus `extra` top-level YAML.
async fn chat_gateway(sim_args: &[&str], extra: &str, workers: usize, flags: &[&str]) -> Setup {
    let sim = start_sim(sim_args).await.to_string();
    let providers = [provider("local", "openai_compatible", &sim)];
    let models = "  - { name: chat, targets: [{ provider: local, model: sim-small }] }\n";
    gateway_flags(&providers, models, extra, workers, flags).await
}

/// The usage records of `model` once `n` have arrived.
async fn records(gateway: &ferrogate_sidecar::serve::Gateway, model: &str, n: u64) -> Vec<Record> {
    let query = Query { model: Some(model.into()), ..Query::default() };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while gateway.usage().query(&query).await.unwrap().totals.requests < n {
        assert!(std::time::Instant::now() < deadline, "fewer than {n} usage records for {model}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gateway.usage().query(&query).await.unwrap().records
}

/// The meter's estimate (a token per four bytes of `content`) of the chat chunks in `sse`.
fn estimate_of(sse: &str) -> u64 {
    let bytes: usize = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::len))
        .sum();
    (bytes as u64).div_ceil(4)
}

/// A gateway before the sim (150 tokens per answer) with key `reader` under `limits`, the
/// streamed request the hang-up tests send, and the meter's estimate of its whole answer.
struct Reader {
    s: Setup,
    client: reqwest::Client,
    body: Value,
    whole: u64,
}

async fn reader(limits: &str) -> Reader {
    let keys = format!("keys: [{{ name: reader, digest: '{}', models: [chat], limits: {{ {limits} }} }}]\n", digest());
    let sim = start_sim(&["--itl-ms", "2", "--output-tokens", "150"]).await.to_string();
    let models = "  - { name: chat, targets: [{ provider: local, model: sim-small }] }\n";
    let s = gateway_flags(&[provider("local", "openai_compatible", &sim)], models, &keys, 2, &[]).await;
    let client = reqwest::Client::new();
    let body = json!({"model": "chat", "stream": true, "max_tokens": 150,
                      "messages": [{"role": "user", "content": "Tell me a long story."}]});
    // The whole answer, read from the sim itself (its text is a function of the prompt).
    let direct = json!({"model": "sim-small", "stream": true, "max_tokens": 150, "messages": body["messages"]});
    let whole = client.post(format!("http://{sim}/v1/chat/completions")).json(&direct).send().await.unwrap();
    let whole = estimate_of(&whole.text().await.unwrap()).max(150);
    Reader { s, client, body, whole }
}

/// Reads `resp` until about `chunks` content chunks (one token each) have arrived, then hangs
/// up; what was read.
async fn read_then_hang_up(mut resp: reqwest::Response, chunks: usize) -> String {
    let mut seen = String::new();
    while seen.matches("\"content\"").count() < chunks {
        match resp.chunk().await.unwrap() {
            Some(bytes) => seen.push_str(&String::from_utf8_lossy(&bytes)),
            None => panic!("the stream ended before the client hung up: {seen}"),
        }
    }
    seen
}

/// A client that reads about 100 tokens of a long stream and hangs up, again and again,
/// against a key limited to 400 tokens a minute: each abandoned stream is charged what it
/// delivered, so the limit refuses the fourth or fifth. (Charged nothing, every one would pass.)
///
/// What "delivered" is depends on how far the gateway got before it saw the hang-up (on a
/// loaded machine, up to the whole answer): at least the estimate of what the client read, at
/// most the estimate of the whole answer, or the provider's 150 when its final event passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_stream_is_charged_and_the_limit_holds() {
    let Reader { s, client, body, whole } = reader("tokens_per_minute: 400").await;
    let mut statuses = Vec::new();
    let mut least = u64::MAX;
    for _ in 0..8 {
        let resp =
            client.post(format!("{}/v1/chat/completions", s.base)).bearer_auth(KEY).json(&body).send().await.unwrap();
        statuses.push(resp.status().as_u16());
        if resp.status() != 200 {
            continue;
        }
        let seen = read_then_hang_up(resp, 100).await;
        // Complete events only: a chunk may end inside one.
        least = least.min(estimate_of(&seen[..seen.rfind("\n\n").unwrap_or(0)]));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let admitted = statuses.iter().filter(|&&st| st == 200).count();
    assert!(statuses.contains(&429), "the limit never refused: {statuses:?}");
    assert!((2..=4).contains(&admitted), "about 100 tokens charged per stream: {statuses:?}");
    let recorded = records(&s.gateway, "chat", statuses.len() as u64).await;
    let abandoned: Vec<&Record> = recorded.iter().filter(|r| r.status == 499).collect();
    assert_eq!(abandoned.len(), admitted, "{recorded:?}");
    for r in abandoned {
        assert!(r.partial && r.streamed, "{r:?}");
        assert!((least..=whole).contains(&r.completion_tokens), "charged what was read ({least}..={whole}): {r:?}");
        assert!(r.prompt_tokens > 0, "{r:?}");
    }
    s.gateway.shutdown().await;
}

/// The same hang-up on a key whose limit has `overrun: cut` (docs/limits.md): the stream's
/// allowance (150 reserved plus the minute's room, about 390 tokens) is far above what the
/// client reads, so no cut fires; the hang-up is recorded as such, 499 and partial, not as a
/// cut, and is charged what was delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_under_overrun_cut_is_charged_what_it_received() {
    let Reader { s, client, body, whole } = reader("tokens_per_minute: 400, overrun: cut").await;
    let resp =
        client.post(format!("{}/v1/chat/completions", s.base)).bearer_auth(KEY).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let seen = read_then_hang_up(resp, 60).await;
    assert!(!seen.contains("\"error\""), "no cut before the hang-up: {seen}");
    let least = estimate_of(&seen[..seen.rfind("\n\n").unwrap_or(0)]);
    let recorded = records(&s.gateway, "chat", 1).await;
    let r = &recorded[0];
    assert_eq!((r.status, r.partial, r.streamed, r.cut), (499, true, true, false), "{r:?}");
    assert!((least..=whole).contains(&r.completion_tokens), "charged what was read ({least}..={whole}): {r:?}");
    assert!(r.prompt_tokens > 0, "{r:?}");
    s.gateway.shutdown().await;
}

/// What a client of `path` reads when the sim is told (`fault` header) to stop after a few
/// frames; and the status of the usage record.
async fn stopped_stream(base: &str, path: &str, body: Value, fault: (&str, &str), anthropic: bool) -> String {
    let mut req = reqwest::Client::new().post(format!("{base}{path}")).header(fault.0, fault.1).json(&body);
    if anthropic {
        req = req.header("anthropic-version", "2023-06-01");
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200, "the stream had begun");
    // The body ends properly (no reset): reading it whole succeeds.
    String::from_utf8(resp.bytes().await.expect("a complete body").to_vec()).unwrap()
}

/// An engine that dies (connection dropped) or stops (clean end, no final events) a few
/// frames into a stream: the client gets a final error event in its dialect, the record says
/// 502 and partial, and what was delivered is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_dies_mid_stream_ends_the_answer_with_an_error_event() {
    let s = chat_gateway(&["--output-tokens", "40"], "", 2, &[]).await;
    let chat = json!({"model": "chat", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let messages =
        json!({"model": "chat", "stream": true, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]});
    for fault in [("x-sim-stream-reset-after", "6"), ("x-sim-stream-end-after", "6")] {
        let got = stopped_stream(&s.base, "/v1/chat/completions", chat.clone(), fault, false).await;
        assert!(got.contains("ended before the answer was complete"), "{fault:?}: {got}");
        assert!(got.ends_with("data: [DONE]\n\n"), "{fault:?}: {got}");
        // An Anthropic client of the same engine: translated, its own error event.
        let got = stopped_stream(&s.base, "/v1/messages", messages.clone(), fault, true).await;
        assert!(got.contains("event: error") && got.contains("ended before the answer was complete"), "{got}");
        assert!(!got.contains("message_stop"), "{got}");
    }
    let recorded = records(&s.gateway, "chat", 4).await;
    assert_eq!(recorded.len(), 4);
    for r in &recorded {
        assert_eq!((r.status, r.partial), (502, true), "{r:?}");
        assert!(r.completion_tokens > 0, "what was delivered is charged: {r:?}");
    }
    s.gateway.shutdown().await;
}

/// An engine that drops the connection before answering: 502 in the caller's dialect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_that_dies_before_answering_is_a_502_in_the_callers_dialect() {
    let s = chat_gateway(&[], "", 2, &[]).await;
    let client = reqwest::Client::new();
    let body = json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let resp = client
        .post(format!("{}/v1/messages", s.base))
        .header("x-sim-reset", "1")
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 502);
    let got: Value = resp.json().await.unwrap();
    assert_eq!(got["type"], "error", "Anthropic's envelope: {got}");
    s.gateway.shutdown().await;
}

/// Reads until the server closes (`true`) or `within` passes (`false`).
async fn closed_within(tcp: &mut tokio::net::TcpStream, within: Duration) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off() {
    use tokio::io::AsyncWriteExt;
    let flags = ["--header-timeout-ms", "300", "--body-timeout-ms", "300", "--max-connections", "3"];
    let s = chat_gateway(&[], "", 1, &flags).await;
    let addr = s.base.trim_start_matches("http://").to_string();
    // A head that never ends.
    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    assert!(closed_within(&mut slow, Duration::from_secs(5)).await, "an unfinished head is dropped");
    // A body that stalls after its first bytes.
    let mut stalled = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"model\"";
    stalled.write_all(head.as_bytes()).await.unwrap();
    assert!(closed_within(&mut stalled, Duration::from_secs(5)).await, "a stalled body is dropped");
    s.gateway.shutdown().await;
}

/// The connection cap, on a gateway whose header timeout (30 s) cannot close anything during
/// the test: what closes the fourth connection is the cap, while the three within it stay open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_closed() {
    let flags = ["--header-timeout-ms", "30000", "--max-connections", "3"];
    let s = chat_gateway(&[], "", 1, &flags).await;
    let addr = s.base.trim_start_matches("http://").to_string();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(&addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut extra = tokio::net::TcpStream::connect(&addr).await.unwrap();
    assert!(closed_within(&mut extra, Duration::from_secs(10)).await, "past the cap: closed");
    assert!(!closed_within(&mut held[0], Duration::from_millis(100)).await, "within the cap: still open");
    // Once they go, requests are served again.
    drop(held);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let body = json!({"model": "chat", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]});
    let resp = reqwest::Client::new().post(format!("{}/v1/chat/completions", s.base)).json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    s.gateway.shutdown().await;
}

/// A body over `--max-body-bytes` is refused by the filter in the caller's dialect (JSON),
/// not by the HTTP layer in plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_a_413_in_the_callers_dialect() {
    let s = chat_gateway(&[], "", 1, &["--max-body-bytes", "1000"]).await;
    let big = "x".repeat(5000);
    let body = json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": big}]});
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/messages", s.base))
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
    let got: Value = resp.json().await.unwrap();
    assert_eq!(got["type"], "error", "Anthropic's envelope: {got}");
    s.gateway.shutdown().await;
}

/// A request head over serve's bound (about 400 KiB) is refused with 431 as JSON in the
/// dialect of its path, not by the HTTP layer with an empty body; a head within the bound is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_head_is_a_431_in_the_callers_dialect() {
    let s = chat_gateway(&[], "", 1, &[]).await;
    let client = reqwest::Client::new();
    let body = json!({"model": "chat", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]});
    let send = |path: &str, header_bytes: usize| {
        client
            .post(format!("{}{path}", s.base))
            .header("anthropic-version", "2023-06-01")
            .header("x-padding", "a".repeat(header_bytes))
            .json(&body)
            .send()
    };
    let within = send("/v1/chat/completions", 300_000).await.unwrap();
    assert_eq!(within.status(), 200, "a 300 kB head is within the bound");
    for (path, field, want) in [
        ("/v1/chat/completions", "/error/code", "request_header_fields_too_large"),
        ("/v1/messages", "/error/type", "invalid_request_error"),
        ("/v1beta/models/chat:generateContent", "/error/status", "INVALID_ARGUMENT"),
    ] {
        let resp = send(path, 420_000).await.unwrap();
        assert_eq!(resp.status(), 431, "{path}");
        assert!(resp.headers()["content-type"].to_str().unwrap().starts_with("application/json"));
        let got: Value = resp.json().await.unwrap();
        assert_eq!(got.pointer(field).and_then(Value::as_str), Some(want), "{path}: {got}");
    }
    s.gateway.shutdown().await;
}
