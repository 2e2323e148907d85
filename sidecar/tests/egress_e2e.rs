//! The egress policy through `ferrogate serve` (the real filter wasm): an upstream named by a
//! DNS name passes the configuration's check, but when the name resolves to an address the
//! policy blocks (`localhost` → 127.0.0.1 under `block_loopback`), the connection is refused:
//! a model request gets the proxy's 502 in its dialect and an MCP call a JSON-RPC 502, both
//! naming the policy, while the gateway's own in-process sidecar on loopback keeps working.
//! The same upstream under the default policy answers. An address the policy blocks written
//! in the file, in any spelling, stops `serve` from starting.

use clap::Parser;
use ferrogate_sidecar::serve::{Gateway, ServeArgs};
use serde_json::{json, Value};

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, Setup};
#[path = "common/raw_upstream.rs"]
mod raw_upstream;
use raw_upstream::Script;

/// `serve` with `egress` (YAML flow map) over a model `chat` and an MCP server `tools`, both
/// at `http://localhost:<port>` of an upstream that echoes what it gets.
async fn gateway_under(egress: &str) -> Setup {
    let echo = raw_upstream::start(Script::EchoHead).await;
    let port = echo.port();
    let providers = [format!("{{ name: local, kind: openai_compatible, base_url: 'http://localhost:{port}' }}")];
    let models = "  - { name: chat, targets: [{ provider: local, model: echo }] }\n";
    let extra = format!(
        "mcp_servers:\n  - {{ name: tools, url: 'http://localhost:{port}/mcp', auth: none }}\negress: {egress}\n"
    );
    gateway_flags(&providers, models, &extra, 2, &[]).await
}

async fn post(url: String, body: Value) -> (u16, Value) {
    let client = reqwest::Client::builder().timeout(std::time::Duration::from_secs(60)).build().unwrap();
    let resp = client.post(url).header("accept", "application/json, text/event-stream").json(&body).send().await;
    let resp = resp.expect("an answer");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}")))
}

fn chat() -> Value {
    json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]})
}

fn tools_list() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
}

/// `localhost` passes the configuration's check (a name), but resolves only to loopback
/// addresses, which `block_loopback` refuses at connect time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_a_blocked_address_is_refused_at_connect() {
    let s = gateway_under("{ block_loopback: true }").await;
    let (status, body) = post(format!("{}/v1/chat/completions", s.base), chat()).await;
    assert_eq!(status, 502, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("egress policy refuses localhost"), "OpenAI's envelope, naming the policy: {body}");
    assert!(message.contains("egress.block_loopback"), "{body}");
    let (status, body) = post(format!("{}/mcp/tools", s.base), tools_list()).await;
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("egress.block_loopback"), "{body}");
    // The filter still reaches the in-process sidecar on loopback: the usage record arrives.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let query = ferrogate_sidecar::services::usage::Query { model: Some("chat".into()), ..Default::default() };
    while s.gateway.usage().query(&query).await.unwrap().totals.requests < 1 {
        assert!(std::time::Instant::now() < deadline, "no usage record through the sidecar");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    s.gateway.shutdown().await;

    // The same upstream under the default policy answers.
    let s = gateway_under("{}").await;
    let (status, body) = post(format!("{}/mcp/tools", s.base), tools_list()).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["result"]["head"].as_str().unwrap().starts_with("post /mcp "), "{body}");
    s.gateway.shutdown().await;
}

#[derive(Parser)]
struct ServeCli {
    #[command(flatten)]
    args: ServeArgs,
}

/// A blocked address written in the file, in a spelling browsers and `getaddrinfo` accept, is
/// a configuration problem: `serve` does not start, and says where and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocked_address_in_the_file_stops_the_start() {
    let dir = std::env::temp_dir().join(format!("ferrogate-egress-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("config.yaml");
    let yaml = "egress: { block_loopback: true }\n\
                providers: [{ name: local, kind: openai_compatible, base_url: 'http://0x7f.1:8000' }]\n\
                a2a_agents: [{ name: meta, url: 'http://[::ffff:169.254.169.254]/', auth: none }]\n";
    std::fs::write(&config, yaml).unwrap();
    let argv = ["serve", "--config", config.to_str().unwrap(), "--listen", "127.0.0.1:0"];
    let mut args = ServeCli::parse_from(argv).args;
    // The module `gateway_flags` loads (common/wasm.rs), found the same way.
    args.filter = Some(ferrogate_host::dev::workspace_wasm("ferrogate_filter.wasm", "FERROGATE_FILTER_WASM"));
    let error = Gateway::start(&args).await.err().expect("the start is refused").to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        error.contains("providers[0].base_url: host 0x7f.1 (127.0.0.1) is blocked by egress.block_loopback"),
        "{error}"
    );
    assert!(
        error.contains("a2a_agents[0].url: host [::ffff:169.254.169.254] is blocked by egress.block_link_local"),
        "{error}"
    );
}
