//! Upstream timeouts end to end, through `ferrogate serve` (the real filter wasm) in front of
//! scripted raw TCP upstreams: an upstream that accepts and never answers is a 504 in the
//! caller's dialect; one that goes silent mid-stream gets the client a final error event in
//! its dialect and a 504 partial record; one that streams slowly but steadily, for longer than
//! the idle timeout, is not cut. The defaults bound every wait.
//!
//! An MCP server's or A2A agent's `timeout_ms` (the filter's `x-envoy-upstream-rq-timeout-ms`)
//! bounds a whole POST exchange: a silent server is a 504 JSON-RPC error, an answer still
//! streaming at the deadline is cut, a GET stream is never cut, and a client's own copy of the
//! header is neither honoured nor passed on.
//!
//! The tests run at the default flags except the timeout under test, lowered by its flag
//! (`--upstream-timeout-ms 1000`, `--upstream-idle-timeout-ms 1000`/`1500`) to keep them
//! short. Clients give up after 60 s, so a missing timeout fails a test instead of hanging it.

use std::time::{Duration, Instant};

use clap::Parser;
use ferrogate_core::usage::Record;
use ferrogate_sidecar::serve::ServeArgs;
use ferrogate_sidecar::services::usage::Query;
use serde_json::{json, Value};

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, provider, Setup};
#[path = "common/raw_upstream.rs"]
mod raw_upstream;
use raw_upstream::Script;

/// Longer than any timeout here on a loaded machine; far shorter than no timeout at all.
const CLIENT_PATIENCE: Duration = Duration::from_secs(60);

/// `serve` with `flags` in front of `script`: model `chat` on an `openai_compatible` provider
/// and model `claude` on an `anthropic` one, both the scripted upstream.
async fn gateway_over(script: Script, flags: &[&str]) -> Setup {
    let upstream = raw_upstream::start(script).await.to_string();
    let providers = [provider("raw", "openai_compatible", &upstream), provider("rawant", "anthropic", &upstream)];
    let models = "  - { name: chat, targets: [{ provider: raw, model: raw }] }\n\
                  \x20 - { name: claude, targets: [{ provider: rawant, model: raw }] }\n";
    gateway_flags(&providers, models, "", 2, flags).await
}

/// POSTs `body` to `path` (as an Anthropic client when `anthropic`); the status, the whole
/// body and how long it took.
async fn post(base: &str, path: &str, body: Value, anthropic: bool) -> (u16, String, Duration) {
    let client = reqwest::Client::builder().timeout(CLIENT_PATIENCE).build().unwrap();
    let mut req = client.post(format!("{base}{path}")).json(&body);
    if anthropic {
        req = req.header("anthropic-version", "2023-06-01");
    }
    let started = Instant::now();
    let resp = req.send().await.expect("an answer before the client gives up");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("a complete body before the client gives up");
    (status, text, started.elapsed())
}

/// The usage records of `model` once `n` have arrived.
async fn records(gateway: &ferrogate_sidecar::serve::Gateway, model: &str, n: u64) -> Vec<Record> {
    let query = Query { model: Some(model.into()), ..Query::default() };
    let deadline = Instant::now() + Duration::from_secs(20);
    while gateway.usage().query(&query).await.unwrap().totals.requests < n {
        assert!(Instant::now() < deadline, "fewer than {n} usage records for {model}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gateway.usage().query(&query).await.unwrap().records
}

fn chat(stream: bool) -> Value {
    json!({"model": "chat", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

fn messages(stream: bool) -> Value {
    json!({"model": "claude", "stream": stream, "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]})
}

#[derive(Parser)]
struct ServeCli {
    #[command(flatten)]
    args: ServeArgs,
}

/// Without any timeout flag, every upstream wait is bounded: connect 5 s, response head
/// 10 minutes, silence between body chunks 5 minutes.
#[test]
fn the_defaults_bound_every_upstream_wait() {
    let args = ServeCli::parse_from(["serve", "--config", "config.yaml"]).args;
    assert_eq!(args.upstream_connect_timeout_ms, 5_000);
    assert_eq!(args.upstream_timeout_ms, 600_000);
    assert_eq!(args.upstream_idle_timeout_ms, 300_000);
}

/// An upstream that accepts and never answers: after `--upstream-timeout-ms` the client gets
/// a 504 in its own dialect (OpenAI's and Anthropic's envelopes), streamed request or not,
/// and the records say 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_never_answers_is_a_504_in_the_callers_dialect() {
    let s = gateway_over(Script::Silent, &["--upstream-timeout-ms", "1000"]).await;
    for stream in [false, true] {
        let (status, body, took) = post(&s.base, "/v1/chat/completions", chat(stream), false).await;
        assert_eq!(status, 504, "{body}");
        assert!(took >= Duration::from_millis(1000), "answered before the timeout: {took:?}");
        let got: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("stream {stream}: {e}: {body:?}"));
        assert!(got["error"]["message"].is_string(), "OpenAI's envelope: {got}");
        let (status, body, took) = post(&s.base, "/v1/messages", messages(stream), true).await;
        assert_eq!(status, 504, "{body}");
        assert!(took >= Duration::from_millis(1000), "answered before the timeout: {took:?}");
        let got: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(got["type"], "error", "Anthropic's envelope: {got}");
    }
    for model in ["chat", "claude"] {
        for r in records(&s.gateway, model, 2).await {
            assert_eq!(r.status, 504, "{r:?}");
        }
    }
    s.gateway.shutdown().await;
}

/// Streams that go silent after a few events, OpenAI and Anthropic: after
/// `--upstream-idle-timeout-ms` the client's stream ends properly with a final error event in
/// its dialect saying it stalled, and the record says 504, partial, what was delivered charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_stalls_ends_with_a_timeout_error_event() {
    let flags = ["--upstream-idle-timeout-ms", "1000"];
    let openai = vec![raw_upstream::openai_chunk("Once upon "), raw_upstream::openai_chunk("a time")];
    let s = gateway_over(Script::StallAfter(openai), &flags).await;
    let (status, body, took) = post(&s.base, "/v1/chat/completions", chat(true), false).await;
    assert_eq!(status, 200, "the stream had begun: {body}");
    assert!(took >= Duration::from_millis(1000), "ended before the idle timeout: {took:?}");
    assert!(body.contains("Once upon ") && body.contains("a time"), "{body}");
    assert!(body.contains("stalled"), "a final error event: {body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let recorded = records(&s.gateway, "chat", 1).await;
    s.gateway.shutdown().await;
    assert_eq!((recorded[0].status, recorded[0].partial), (504, true), "{:?}", recorded[0]);

    let anthropic = raw_upstream::anthropic_events(&["Once upon ", "a time"]);
    let s = gateway_over(Script::StallAfter(anthropic), &flags).await;
    let (status, body, took) = post(&s.base, "/v1/messages", messages(true), true).await;
    assert_eq!(status, 200, "the stream had begun: {body}");
    assert!(took >= Duration::from_millis(1000), "ended before the idle timeout: {took:?}");
    assert!(body.contains("event: error") && body.contains("stalled"), "a final error event: {body}");
    assert!(!body.contains("message_stop"), "{body}");
    let recorded = records(&s.gateway, "claude", 1).await;
    s.gateway.shutdown().await;
    assert_eq!((recorded[0].status, recorded[0].partial), (504, true), "{:?}", recorded[0]);
    assert!(recorded[0].completion_tokens > 0, "what was delivered is charged: {:?}", recorded[0]);
}

/// A stream whose events come 200 ms apart for longer than `--upstream-idle-timeout-ms`
/// (1.5 s) in all: never silent that long, so it runs to its end, whole, recorded 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_but_steady_stream_is_not_cut() {
    let mut events: Vec<String> = (0..12).map(|i| raw_upstream::openai_chunk(&format!("word{i} "))).collect();
    events.extend(raw_upstream::openai_end(12));
    let script = Script::Steady(events, Duration::from_millis(200));
    let s = gateway_over(script, &["--upstream-idle-timeout-ms", "1500"]).await;
    let (status, body, took) = post(&s.base, "/v1/chat/completions", chat(true), false).await;
    assert_eq!(status, 200, "{body}");
    assert!(took > Duration::from_millis(1500), "the stream outlasted the idle timeout: {took:?}");
    assert!(body.contains("word11 ") && !body.contains("stalled"), "{body}");
    assert!(body.ends_with("data: [DONE]\n\n"), "{body}");
    let recorded = records(&s.gateway, "chat", 1).await;
    s.gateway.shutdown().await;
    assert_eq!((recorded[0].status, recorded[0].partial), (200, false), "{:?}", recorded[0]);
}

/// Numbered MCP-ish events, `n` of them (`data: {"event": i}`).
fn numbered_events(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("data: {{\"event\": {i}}}\n\n")).collect()
}

/// `serve` fronting scripted MCP servers and an A2A agent: `silent` never answers, `steady`
/// streams 8 events 300 ms apart (2.1 s in all), `echo` answers at once with the request head
/// it got. The servers with `timeout_ms: 1000` are the ones under test.
async fn agents_gateway() -> Setup {
    let silent = raw_upstream::start(Script::Silent).await;
    let steady = raw_upstream::start(Script::Steady(numbered_events(8), Duration::from_millis(300))).await;
    let echo = raw_upstream::start(Script::EchoHead).await;
    let extra = format!(
        "mcp_servers:\n\
         \x20 - {{ name: silent, url: 'http://{silent}/mcp', auth: none, timeout_ms: 1000 }}\n\
         \x20 - {{ name: steady, url: 'http://{steady}/mcp', auth: none, timeout_ms: 1000 }}\n\
         \x20 - {{ name: steady-open, url: 'http://{steady}/mcp', auth: none }}\n\
         \x20 - {{ name: echo, url: 'http://{echo}/mcp', auth: none, timeout_ms: 5000 }}\n\
         a2a_agents:\n\
         \x20 - {{ name: silent, url: 'http://{silent}/', auth: none, timeout_ms: 1000 }}\n"
    );
    let providers = [provider("raw", "openai_compatible", &silent.to_string())];
    let models = "  - { name: chat, targets: [{ provider: raw, model: raw }] }\n";
    gateway_flags(&providers, models, &extra, 2, &[]).await
}

/// A JSON-RPC `tools/call` request.
fn tools_call() -> Value {
    json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "slow", "arguments": {}}})
}

/// Sends `req`; the status, how long the head took, and the body (or the error that ended it)
/// with the total time.
async fn exchange(req: reqwest::RequestBuilder) -> (u16, Result<String, reqwest::Error>, Duration) {
    let started = Instant::now();
    let resp = req.send().await.expect("an answer before the client gives up");
    let status = resp.status().as_u16();
    let body = resp.text().await;
    (status, body, started.elapsed())
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().timeout(CLIENT_PATIENCE).build().unwrap()
}

fn mcp_post(base: &str, server: &str) -> reqwest::RequestBuilder {
    client()
        .post(format!("{base}/mcp/{server}"))
        .header("accept", "application/json, text/event-stream")
        .json(&tools_call())
}

/// A POST to an MCP server or an A2A agent that does not answer within its `timeout_ms`: the
/// client gets the proxy's 504 as a JSON-RPC error (not `--upstream-timeout-ms`'s ten minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_call_past_its_timeout_is_a_json_rpc_504() {
    let s = agents_gateway().await;
    let a2a = client().post(format!("{}/a2a/silent", s.base)).json(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "message/send",
        "params": {"message": {"role": "user", "parts": [{"kind": "text", "text": "hi"}], "messageId": "m1"}}
    }));
    for (what, req) in [("mcp", mcp_post(&s.base, "silent")), ("a2a", a2a)] {
        let (status, body, took) = exchange(req).await;
        let body = body.expect("a whole body");
        assert_eq!(status, 504, "{what}: {body}");
        assert!(took >= Duration::from_millis(1000), "{what}: answered before the timeout: {took:?}");
        assert!(took < CLIENT_PATIENCE, "{what}: {took:?}");
        let got: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: {e}: {body}"));
        assert_eq!(got["jsonrpc"], "2.0", "{what}: {got}");
        assert_eq!(got["error"]["data"]["http_status"], 504, "{what}: {got}");
        assert!(got["error"]["message"].as_str().unwrap().contains("upstream request timeout"), "{what}: {got}");
    }
    s.gateway.shutdown().await;
}

/// The deadline covers a POST's whole answer, streamed or not: an event stream still flowing
/// at the deadline is cut (the client's stream is reset, as Envoy resets it). A GET's event
/// stream is long-lived and never gets the deadline: the same 2.1 s stream arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_covers_a_streamed_post_but_not_a_get_stream() {
    let s = agents_gateway().await;
    let (status, body, took) = exchange(mcp_post(&s.base, "steady")).await;
    assert_eq!(status, 200, "the answer had begun");
    assert!(body.is_err(), "the stream is cut, not ended: {body:?}");
    assert!(took >= Duration::from_millis(1000), "cut before the timeout: {took:?}");
    let get = client().get(format!("{}/mcp/steady", s.base)).header("accept", "text/event-stream");
    let (status, body, took) = exchange(get).await;
    let body = body.expect("a whole stream");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"event\": 7"), "every event: {body}");
    assert!(took > Duration::from_millis(1000), "the stream outlasted the POST deadline: {took:?}");
    s.gateway.shutdown().await;
}

/// Only the gateway sets `x-envoy-upstream-rq-timeout-ms`: a client's copy is neither honoured
/// (a server without `timeout_ms` streams on past it) nor passed on, and the gateway's own
/// never reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_gateway_sets_the_route_timeout() {
    let s = agents_gateway().await;
    let (status, body, _) =
        exchange(mcp_post(&s.base, "steady-open").header("x-envoy-upstream-rq-timeout-ms", "200")).await;
    let body = body.expect("a whole stream: the client's timeout is not believed");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"event\": 7"), "{body}");
    for sent in [None, Some("1")] {
        let mut req = mcp_post(&s.base, "echo");
        if let Some(v) = sent {
            req = req.header("x-envoy-upstream-rq-timeout-ms", v);
        }
        let (status, body, _) = exchange(req).await;
        let body = body.unwrap();
        assert_eq!(status, 200, "{body}");
        let got: Value = serde_json::from_str(&body).unwrap();
        let head = got["result"]["head"].as_str().unwrap();
        assert!(head.starts_with("post /mcp "), "{head}");
        assert!(!head.contains("x-envoy-upstream-rq-timeout-ms"), "{head}");
    }
    s.gateway.shutdown().await;
}

/// When the deadline passes while the gateway still holds the answer's head (a `tools/list`
/// being filtered to a key's tools waits for the whole list), the proxy's 504 goes straight to
/// the client, as Envoy sends a local reply past the filters once the response has begun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_answer_past_the_deadline_is_the_proxys_own_504() {
    use sha2::Digest;
    const KEY: &str = "fg-timeout-test-key";
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(KEY.as_bytes())));
    let steady = raw_upstream::start(Script::Steady(numbered_events(8), Duration::from_millis(300))).await;
    let extra = format!(
        "mcp_servers:\n  - {{ name: steady, url: 'http://{steady}/mcp', auth: none, timeout_ms: 1000 }}\n\
         keys:\n  - {{ name: k, digest: '{digest}', mcp: ['steady/echo'] }}\n"
    );
    let providers = [provider("raw", "openai_compatible", &steady.to_string())];
    let models = "  - { name: chat, targets: [{ provider: raw, model: raw }] }\n";
    let s = gateway_flags(&providers, models, &extra, 2, &[]).await;
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let req = client()
        .post(format!("{}/mcp/steady", s.base))
        .bearer_auth(KEY)
        .header("accept", "application/json, text/event-stream")
        .json(&list);
    let (status, body, took) = exchange(req).await;
    let body = body.expect("a whole body");
    assert_eq!((status, body.as_str()), (504, "upstream request timeout"));
    assert!(took >= Duration::from_millis(1000), "answered before the timeout: {took:?}");
    s.gateway.shutdown().await;
}
