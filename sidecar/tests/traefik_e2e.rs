//! The Traefik build (`ferrogate_traefik.wasm`) run the way Traefik runs it (`ferrogate
//! http-wasm`: the http-wasm host, an internal router per provider matched on the routing
//! header) in front of a recording upstream and `ferrogate sim`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "common/sim.rs"]
mod sim;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Uri};
use clap::Parser;
use ferrogate_sidecar::httpwasm_cmd::{HttpWasmArgs, HttpWasmGateway};
use serde_json::{json, Value};
use sha2::Digest;

use sim::start_sim;

const ALICE: &str = "fg-alice-key";
const BOB: &str = "fg-bob-key";
const LIMITED: &str = "fg-limited-key";

/// What the recording upstream saw of each request.
#[derive(Clone, Debug)]
struct Seen {
    uri: String,
    headers: HeaderMap,
    body: Bytes,
}

/// An OpenAI-compatible upstream that records requests and answers a fixed completion.
async fn recorder() -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |uri: Uri, headers: HeaderMap, body: Bytes| {
        let log = log.clone();
        async move {
            log.lock().unwrap().push(Seen { uri: uri.to_string(), headers, body });
            axum::Json(json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "upstream",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
            }))
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

fn digest(key: &str) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(key.as_bytes())))
}

/// The configuration document (the snake_case file shape) for the two upstreams.
fn config(rec: SocketAddr, sim: SocketAddr) -> Value {
    json!({
        "providers": [
            {"name": "rec", "kind": "openai_compatible", "base_url": format!("http://{rec}/prefix"), "api_key": "sk-upstream"},
            {"name": "local", "kind": "openai_compatible", "base_url": format!("http://{sim}")},
            {"name": "claude", "kind": "anthropic", "base_url": format!("http://{sim}"), "api_key": "sk-ant"}
        ],
        "models": [
            {"name": "chat", "targets": [{"provider": "rec", "model": "gpt-4o-mini-2024-07-18"}]},
            {"name": "a-long-public-name", "targets": [{"provider": "rec", "model": "m1"}]},
            {"name": "simchat", "targets": [{"provider": "local", "model": "sim-small"}]},
            {"name": "claude-chat", "targets": [{"provider": "claude", "model": "sim-claude"}]}
        ],
        "keys": [
            {"name": "alice", "digest": digest(ALICE), "models": ["*"]},
            {"name": "bob", "digest": digest(BOB), "models": ["simchat"]},
            {"name": "limited", "digest": digest(LIMITED), "models": ["*"], "limits": {"requests_per_minute": 2}}
        ]
    })
}

/// A scratch directory (the plugin mount), removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("ferrogate-traefik-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

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

/// The Traefik build with `settings` (written as the middleware's settings), its mount at
/// `/ferrogate` on `dir`, one route per provider, and `flags`.
async fn traefik(settings: &Value, dir: &Path, routes: &[(&str, SocketAddr)], flags: &[&str]) -> HttpWasmGateway {
    let settings_path = dir.join("settings.json");
    std::fs::write(&settings_path, serde_json::to_vec(settings).unwrap()).unwrap();
    let wasm = ferrogate_host::dev::workspace_wasm("ferrogate_traefik.wasm", "FERROGATE_TRAEFIK_WASM");
    let mount = format!("{}:/ferrogate", dir.display());
    let mut argv: Vec<String> =
        ["http-wasm", "--listen", "127.0.0.1:0", "--wasm", wasm.to_str().unwrap()].map(String::from).to_vec();
    argv.extend(["--settings".into(), settings_path.display().to_string(), "--mount".into(), mount]);
    for (name, addr) in routes {
        argv.extend(["--route".into(), format!("{name}=http://{addr}")]);
    }
    argv.extend(flags.iter().map(|f| f.to_string()));
    HttpWasmGateway::start(&Cli::parse_from(argv).args).await.expect("the http-wasm host starts")
}

async fn post(gw: &HttpWasmGateway, path: &str, key: Option<&str>, body: &[u8]) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("http://{}{path}", gw.addr))
        .header("content-type", "application/json")
        .body(body.to_vec());
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    req.send().await.unwrap()
}

fn chat_body(model: &str) -> Vec<u8> {
    format!(r#"{{"model": "{model}", "messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 8}}"#)
        .into_bytes()
}

async fn setup(flags: &[&str], extra: Value) -> (HttpWasmGateway, Arc<Mutex<Vec<Seen>>>, Scratch) {
    let (rec, seen) = recorder().await;
    let sim = start_sim(&["--model", "sim-small", "--model", "sim-claude"]).await;
    let dir = Scratch::new();
    let mut settings = json!({"config": config(rec, sim), "usageFile": "/ferrogate/usage.jsonl"});
    settings.as_object_mut().unwrap().extend(extra.as_object().cloned().unwrap_or_default());
    let gw = traefik(&settings, &dir.0, &[("rec", rec), ("local", sim), ("claude", sim)], flags).await;
    (gw, seen, dir)
}

fn usage_records(dir: &Scratch) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.0.join("usage.jsonl")).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn errors_come_in_the_filters_order_and_the_callers_dialect() {
    let (gw, seen, dir) = setup(&[], json!({})).await;
    // No key: 401, even on a path that does not exist.
    let r = post(&gw, "/v1/nothing-here", None, b"{}").await;
    assert_eq!(r.status(), 401);
    // A key: the unknown path is 404, then the model checks.
    assert_eq!(post(&gw, "/v1/nothing-here", Some(ALICE), b"{}").await.status(), 404);
    let r = post(&gw, "/v1/chat/completions", Some(ALICE), &chat_body("no-such-model")).await;
    assert_eq!(r.status(), 404);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["code"], "model_not_found");
    let r = post(&gw, "/v1/chat/completions", Some(BOB), &chat_body("chat")).await;
    assert_eq!(r.status(), 403);
    // Anthropic's path answers in Anthropic's error shape.
    let r = post(&gw, "/v1/messages", Some(BOB), &chat_body("chat")).await;
    assert_eq!(r.status(), 403);
    assert_eq!(r.json::<Value>().await.unwrap()["type"], "error");
    assert!(seen.lock().unwrap().is_empty(), "nothing refused reached the upstream");
    // Refusals that named a model are recorded (the 401 and the unknown path are not usage).
    let records = usage_records(&dir);
    let got: Vec<(&str, u64)> =
        records.iter().map(|r| (r["model_requested"].as_str().unwrap(), r["status"].as_u64().unwrap())).collect();
    assert_eq!(got, [("no-such-model", 404), ("chat", 403), ("chat", 403)]);
    // The model list is answered by the guest, filtered by the key's grants.
    let list: Value = reqwest::Client::new()
        .get(format!("http://{}/v1/models", gw.addr))
        .bearer_auth(BOB)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = list["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["simchat"]);
}

#[tokio::test]
async fn the_model_is_rewritten_in_place_and_the_credential_swapped() {
    let (gw, seen, _dir) = setup(&["--buffering"], json!({"followedByBuffering": true})).await;
    let body = chat_body("chat");
    let mut req = reqwest::Client::new()
        .post(format!("http://{}/v1/chat/completions?trace=1", gw.addr))
        .header("content-type", "application/json")
        .header("x-api-key", ALICE)
        .header("x-ferrogate-cluster", "local")
        .bearer_auth(ALICE);
    req = req.body(body.clone());
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-ferrogate-provider"], "rec");
    let seen = seen.lock().unwrap().pop().expect("the upstream saw the request");
    let want = String::from_utf8(body).unwrap().replace(r#""model": "chat""#, r#""model": "gpt-4o-mini-2024-07-18""#);
    assert_eq!(std::str::from_utf8(&seen.body).unwrap(), want, "only the model's value changed");
    assert_eq!(seen.uri, "/prefix/v1/chat/completions?trace=1");
    assert_eq!(seen.headers["authorization"], "Bearer sk-upstream");
    assert!(seen.headers.get("x-api-key").is_none(), "no client key upstream");
    assert_eq!(seen.headers.get_all("x-ferrogate-cluster").iter().count(), 1);
    assert_eq!(seen.headers["x-ferrogate-cluster"], "rec", "the client cannot pick the route");
}

#[tokio::test]
async fn without_buffering_a_rewritten_body_keeps_the_clients_length() {
    let (gw, seen, _dir) = setup(&[], json!({})).await;
    // A shorter upstream name: padded to the client's length, still the same JSON.
    let r = post(&gw, "/v1/chat/completions", Some(ALICE), &chat_body("a-long-public-name")).await;
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let got = seen.lock().unwrap().pop().unwrap();
    assert_eq!(got.body.len(), chat_body("a-long-public-name").len());
    let v: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(v["model"], "m1");
    // A longer one fits by losing the encoding's spaces (an indented body has room).
    let pretty = serde_json::to_vec_pretty(&serde_json::from_slice::<Value>(&chat_body("chat")).unwrap()).unwrap();
    assert_eq!(post(&gw, "/v1/chat/completions", Some(ALICE), &pretty).await.status(), 200);
    let got = seen.lock().unwrap().pop().unwrap();
    assert_eq!(got.body.len(), pretty.len());
    assert_eq!(serde_json::from_slice::<Value>(&got.body).unwrap()["model"], "gpt-4o-mini-2024-07-18");
    // Compact already and longer: a clear error instead of Go's refusal to send it.
    let compact = br#"{"model":"chat","messages":[{"role":"user","content":"hi"}]}"#;
    let r = post(&gw, "/v1/chat/completions", Some(ALICE), compact).await;
    assert_eq!(r.status(), 500);
    let msg = r.json::<Value>().await.unwrap()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("followedByBuffering"), "{msg}");
}

#[tokio::test]
async fn limits_count_in_the_guest() {
    let (gw, _seen, dir) = setup(&[], json!({})).await;
    for _ in 0..2 {
        assert_eq!(post(&gw, "/v1/chat/completions", Some(LIMITED), &chat_body("simchat")).await.status(), 200);
    }
    let r = post(&gw, "/v1/chat/completions", Some(LIMITED), &chat_body("simchat")).await;
    assert_eq!(r.status(), 429);
    assert!(r.headers().get("retry-after").is_some());
    // The refusal is usage too: recorded with the provider it would have gone to.
    let records = usage_records(&dir);
    let statuses: Vec<u64> = records.iter().map(|r| r["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!((records[2]["provider"].as_str(), records[2]["admitted"].as_bool()), (Some("local"), Some(false)));
}

#[tokio::test]
async fn a_translated_answer_comes_back_in_the_callers_dialect_with_its_usage_record() {
    let (gw, _seen, dir) = setup(&["--buffering"], json!({"followedByBuffering": true})).await;
    let r = post(&gw, "/v1/chat/completions", Some(ALICE), &chat_body("claude-chat")).await;
    assert_eq!(r.status(), 200);
    let id = r.headers()["x-request-id"].to_str().unwrap().to_string();
    let answer: Value = r.json().await.unwrap();
    assert_eq!(answer["object"], "chat.completion", "{answer}");
    assert_eq!(answer["model"], "claude-chat");
    let prompt = answer["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 0);
    let records = usage_records(&dir);
    let record = records.iter().find(|r| r["request_id"] == id.as_str()).expect("a usage record");
    assert_eq!(record["provider"], "claude");
    assert_eq!(record["key"], "alice");
    assert_eq!(record["status"], 200);
    assert_eq!(record["prompt_tokens"].as_u64(), Some(prompt));
}

#[tokio::test]
async fn a_stream_passes_through_untouched() {
    let (gw, _seen, dir) = setup(&[], json!({})).await;
    let body = br#"{"model": "simchat", "stream": true, "messages": [{"role": "user", "content": "hi"}]}"#;
    let r = post(&gw, "/v1/chat/completions", Some(ALICE), body).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let text = r.text().await.unwrap();
    assert!(text.contains("data: ") && text.trim_end().ends_with("data: [DONE]"), "{text}");
    let records = usage_records(&dir);
    let record = records.last().expect("a record of the stream");
    assert_eq!((record["streamed"].as_bool(), record["status"].as_u64()), (Some(true), Some(0)));
}

#[tokio::test]
async fn a_snapshot_file_is_followed() {
    let (rec, _seen) = recorder().await;
    let sim = start_sim(&["--model", "sim-small", "--model", "sim-claude"]).await;
    let dir = Scratch::new();
    let write = |cfg: &Value, version: &str| {
        let doc = json!({"version": version, "config": cfg});
        let tmp = dir.0.join("snapshot.tmp");
        std::fs::write(&tmp, serde_json::to_vec(&doc).unwrap()).unwrap();
        std::fs::rename(&tmp, dir.0.join("snapshot.json")).unwrap();
    };
    let mut cfg = config(rec, sim);
    write(&cfg, "1");
    let settings = json!({"snapshotFile": "/ferrogate/snapshot.json", "snapshotCheckMs": 50});
    let gw = traefik(&settings, &dir.0, &[("local", sim)], &[]).await;
    assert_eq!(post(&gw, "/v1/chat/completions", Some(ALICE), &chat_body("simchat")).await.status(), 200);
    cfg["models"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "renamed", "targets": [{"provider": "local", "model": "sim-small"}]}));
    write(&cfg, "2");
    let mut status = 0;
    for _ in 0..50 {
        status = post(&gw, "/v1/chat/completions", Some(ALICE), &chat_body("renamed")).await.status().as_u16();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status, 200, "the new snapshot serves");
    // A broken file leaves the last good configuration serving.
    std::fs::write(dir.0.join("snapshot.json"), b"{not json").unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(post(&gw, "/v1/chat/completions", Some(ALICE), &chat_body("renamed")).await.status(), 200);
}
