//! Guardrails in the Traefik build (`ferrogate_traefik.wasm` run by `ferrogate http-wasm`, the
//! way Traefik runs it): input rules on the buffered request body (a redaction the upstream
//! sees, a block answered in the caller's dialect), output rules and restored placeholders on
//! a non-streamed answer, the usage record's `guardrails`, and external checks skipped.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use clap::Parser;
use ferrogate_sidecar::httpwasm_cmd::{HttpWasmArgs, HttpWasmGateway};
use serde_json::{json, Value};
use sha2::Digest;

const ALICE: &str = "fg-alice-key";
/// The address the upstream's answer adds (the output rules redact it).
const VENDOR: &str = "support@vendor.example";

/// An OpenAI-compatible upstream that records request bodies and answers with the last user
/// message followed by [`VENDOR`].
async fn echo_upstream() -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |body: Bytes| {
        let log = log.clone();
        async move {
            let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let said = request["messages"][0]["content"].as_str().unwrap_or_default().to_string();
            log.lock().unwrap().push(request);
            axum::Json(json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "upstream",
                "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": format!("You said: {said}. Write to {VENDOR}.")}}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            }))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// `pii` redacts addresses both ways and blocks cards (and has a webhook nobody answers, which
/// would refuse everything if it were run: `fail: closed`); `vault` redacts addresses in the
/// request and puts them back in the answer.
fn config(upstream: SocketAddr) -> Value {
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(ALICE.as_bytes())));
    json!({
        "providers": [{"name": "rec", "kind": "openai_compatible", "base_url": format!("http://{upstream}")}],
        "models": [
            {"name": "guarded", "targets": [{"provider": "rec", "model": "m1"}], "guardrails": ["pii"]},
            {"name": "restored", "targets": [{"provider": "rec", "model": "m1"}], "guardrails": ["vault"]},
            {"name": "open", "targets": [{"provider": "rec", "model": "m1"}]}
        ],
        "keys": [{"name": "alice", "digest": digest, "models": ["*"]}],
        "guardrails": [
            {"name": "pii",
             "input": [
                {"detector": "email", "action": "redact"},
                {"detector": "card", "action": "block"},
                {"kind": "webhook", "name": "dlp", "url": "http://127.0.0.1:9/check", "fail": "closed"}
             ],
             "output": [{"detector": "email", "action": "redact"}]},
            {"name": "vault", "restore": true, "input": [{"detector": "email", "action": "redact"}]}
        ]
    })
}

/// A scratch directory (the plugin mount), removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: HttpWasmArgs,
}

/// The Traefik build in front of the echoing upstream, usage records in the mount.
async fn setup() -> (HttpWasmGateway, Arc<Mutex<Vec<Value>>>, Scratch) {
    let (upstream, seen) = echo_upstream().await;
    let dir =
        std::env::temp_dir().join(format!("ferrogate-traefik-guard-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let settings = json!({"config": config(upstream), "usageFile": "/ferrogate/usage.jsonl"});
    let settings_path = dir.join("settings.json");
    std::fs::write(&settings_path, serde_json::to_vec(&settings).unwrap()).unwrap();
    let wasm = ferrogate_host::dev::workspace_wasm("ferrogate_traefik.wasm", "FERROGATE_TRAEFIK_WASM");
    let argv = [
        "http-wasm".to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--wasm".into(),
        wasm.display().to_string(),
        "--settings".into(),
        settings_path.display().to_string(),
        "--mount".into(),
        format!("{}:/ferrogate", dir.display()),
        "--route".into(),
        format!("rec=http://{upstream}"),
    ];
    let gw = HttpWasmGateway::start(&Cli::parse_from(argv).args).await.expect("the http-wasm host starts");
    (gw, seen, Scratch(dir))
}

async fn post(gw: &HttpWasmGateway, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("http://{}{path}", gw.addr))
        .header("content-type", "application/json")
        .bearer_auth(ALICE)
        .body(serde_json::to_vec(body).unwrap())
        .send()
        .await
        .unwrap()
}

fn chat(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": 8})
}

fn usage_records(dir: &Scratch) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.0.join("usage.jsonl")).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn answer_text(answer: &Value) -> &str {
    answer["choices"][0]["message"]["content"].as_str().unwrap()
}

#[tokio::test]
async fn input_rules_redact_what_the_upstream_sees_and_output_rules_redact_the_answer() {
    let (gw, seen, dir) = setup().await;
    let r = post(&gw, "/v1/chat/completions", &chat("guarded", "mail alice@example.com today")).await;
    assert_eq!(r.status(), 200);
    let length: usize = r.headers()["content-length"].to_str().unwrap().parse().unwrap();
    let raw = r.bytes().await.unwrap();
    assert_eq!(raw.len(), length, "the rewritten answer's length is announced");
    let answer: Value = serde_json::from_slice(&raw).unwrap();
    // The upstream saw the placeholder (in a body brought to the client's length), never the address.
    let upstream = seen.lock().unwrap().pop().expect("the upstream was called");
    assert_eq!(upstream["messages"][0]["content"], "mail [EMAIL_1] today");
    assert_eq!(upstream["model"], "m1");
    // Its answer's new address is redacted on the way out; the input placeholder stays (no restore).
    let text = answer_text(&answer);
    assert!(!text.contains(VENDOR), "{text}");
    assert_eq!(text, "You said: mail [EMAIL_1] today. Write to [EMAIL_2].");
    // The record names rules and counts, never the text; the skipped webhook has no check.
    let records = usage_records(&dir);
    let g = &records.last().unwrap()["guardrails"];
    assert!(g.get("blocked").is_none() && g.get("checks").is_none(), "{g}");
    let hits: Vec<(&str, &str, &str, u64)> = g["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let s = |k: &str| h[k].as_str().unwrap();
            (s("rule"), s("stage"), s("action"), h["count"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(hits, [("pii/email", "input", "redact", 1), ("pii/email", "output", "redact", 1)]);
}

#[tokio::test]
async fn a_block_rule_refuses_in_the_callers_dialect_and_the_upstream_is_not_called() {
    let (gw, seen, dir) = setup().await;
    let r = post(&gw, "/v1/chat/completions", &chat("guarded", "card 4111 1111 1111 1111")).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "guardrail_blocked");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(message.contains("pii/card") && !message.contains("4111"), "{message}");
    // Anthropic's path answers in Anthropic's error shape.
    let body = json!({"model": "guarded", "max_tokens": 8,
        "messages": [{"role": "user", "content": "card 4111-1111-1111-1111"}]});
    let r = post(&gw, "/v1/messages", &body).await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error");
    assert!(e["error"]["message"].as_str().unwrap().contains("pii/card"), "{e}");
    assert!(seen.lock().unwrap().is_empty(), "nothing refused reached the upstream");
    let records = usage_records(&dir);
    let got: Vec<(u64, &str)> =
        records.iter().map(|r| (r["status"].as_u64().unwrap(), r["guardrails"]["blocked"].as_str().unwrap())).collect();
    assert_eq!(got, [(400, "pii/card"), (400, "pii/card")]);
}

#[tokio::test]
async fn restore_puts_the_callers_values_back_and_unguarded_models_are_untouched() {
    let (gw, seen, _dir) = setup().await;
    let r = post(&gw, "/v1/chat/completions", &chat("restored", "mail alice@example.com today")).await;
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    let upstream = seen.lock().unwrap().pop().unwrap();
    assert_eq!(upstream["messages"][0]["content"], "mail [EMAIL_1] today");
    assert_eq!(answer_text(&answer), format!("You said: mail alice@example.com today. Write to {VENDOR}."));
    // A model with no policy: the text goes both ways as written.
    let r = post(&gw, "/v1/chat/completions", &chat("open", "mail alice@example.com today")).await;
    assert_eq!(r.status(), 200);
    let answer: Value = r.json().await.unwrap();
    assert_eq!(seen.lock().unwrap().pop().unwrap()["messages"][0]["content"], "mail alice@example.com today");
    assert!(answer_text(&answer).contains(VENDOR));
}
