//! Per-request cost of the real `ferrogate_filter.wasm` in the host, with no network: one VM,
//! one thread, the full data path (virtual key, grants, resolution, body rewrite, usage
//! tracking of a JSON answer, usage record, metrics).
//!
//! `cargo run --release -p ferrogate-host --example filter_bench [-- N]` (after `make wasm`);
//! `REF_FILTER=$(scripts/reference-filter)` measures the foundation's filter instead;
//! `LIMITS=1` adds one limit (a request rate on the key: one counter per request);
//! `LIMITS=7` seven (requests, tokens and USD on the key, its group and the org, reserved and
//! settled per request).
//! `KV=1` routes by `precise_cache_aware` over a pool of four engines whose KV index (100,000
//! blocks, fed to the filter as the sidecar's `/v1/kv` answer) holds the request's prompt on
//! one engine; the request carries its 1,024 token ids (`x-ferrogate-token-ids`). `KV=0`: the
//! same without the header (no scoring), so the difference is the header's parsing and the pick;
//! `IDS=n` sends only the first n ids (a shorter prompt: n/16 blocks).
//! `GUARD=1` gives the model a guardrail policy with every built-in detector (email, phone,
//! card, iban, ip, ssn, secret), action redact, on input and output (on top of any of the
//! configurations above but the reference's). `BODY_KB=n` pads the user message to n KiB of
//! plain prose with one email address in its middle (the only match); without it, "ping".
//! Prints the mean wall time per request: the filter's guest code plus the host's hostcalls.

use std::time::Instant;

use ferrogate_host::{Headers, PluginSpec, Runtime, StreamInfo};

const CONFIG: &str = r#"{"config":{
  "providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[{"name":"chat","targets":[{"provider":"local","model":"sim-small"}]}],
  "groups":[{"name":"dev","models":["chat"]}],
  "keys":[{"name":"alice","digest":"sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c","groups":["dev"]}],
  "pricing":{"sim-small":{"input_per_mtok":0.1,"output_per_mtok":0.4}}}}"#;

/// `LIMITS=7`: the same with limits on the key, its group and the org (requests, tokens and
/// USD, so admission estimates, prices and reserves on seven counters, and settles them).
const LIMITS_CONFIG: &str = r#"{"config":{
  "providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[{"name":"chat","targets":[{"provider":"local","model":"sim-small"}]}],
  "limits":{"requests_per_day":1000000000},
  "groups":[{"name":"dev","models":["chat"],"limits":{"requests_per_minute":1000000000,"cost_usd_per_month":1000000}}],
  "keys":[{"name":"alice","digest":"sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c","groups":["dev"],
    "limits":{"tokens_per_minute":1000000000000,"tokens_per_day":1000000000000,"tokens_per_month":1000000000000,"cost_usd_per_day":1000000}}],
  "pricing":{"sim-small":{"input_per_mtok":0.1,"output_per_mtok":0.4}}}}"#;

/// `LIMITS=1`: one request-rate limit on the key, the common case.
const ONE_LIMIT_CONFIG: &str = r#"{"config":{
  "providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[{"name":"chat","targets":[{"provider":"local","model":"sim-small"}]}],
  "groups":[{"name":"dev","models":["chat"]}],
  "keys":[{"name":"alice","digest":"sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c","groups":["dev"],
    "limits":{"requests_per_minute":1000000000}}],
  "pricing":{"sim-small":{"input_per_mtok":0.1,"output_per_mtok":0.4}}}}"#;

/// The reference filter (scripts/reference-filter) predates keys and pricing: open config.
const REF_CONFIG: &str = r#"{"config":{
  "providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[{"name":"chat","targets":[{"provider":"local","model":"sim-small"}]}]}}"#;
const BODY: &[u8] = br#"{"model":"chat","messages":[{"role":"user","content":"ping"}],"max_tokens":4}"#;
const ANSWER: &[u8] = br#"{"id":"x","object":"chat.completion","created":0,"model":"sim-small","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;

/// `KV`: a pool of four engines publishing KV events, and a sidecar to feed the index.
const KV_CONFIG: &str = r#"{"sidecar_cluster":"ferrogate_sidecar","poll_interval_ms":250,"config":{
  "providers":[{"name":"pool","kind":"openai_compatible","base_url":"http://pool:8000","endpoints":[
    {"address":"10.0.0.0:8000","kv_events":"tcp://10.0.0.0:5557"},{"address":"10.0.0.1:8000","kv_events":"tcp://10.0.0.1:5557"},
    {"address":"10.0.0.2:8000","kv_events":"tcp://10.0.0.2:5557"},{"address":"10.0.0.3:8000","kv_events":"tcp://10.0.0.3:5557"}]}],
  "models":[{"name":"chat","strategy":"precise_cache_aware","targets":[{"provider":"pool","model":"sim-small"}]}],
  "groups":[{"name":"dev","models":["chat"]}],
  "keys":[{"name":"alice","digest":"sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c","groups":["dev"]}],
  "pricing":{"sim-small":{"input_per_mtok":0.1,"output_per_mtok":0.4}}}}"#;

/// `GUARD=1`: a policy with every built-in detector, redact, on the request and the answer.
const GUARD_DETECTORS: [&str; 7] = ["email", "phone", "card", "iban", "ip", "ssn", "secret"];

/// `configuration` with the `GUARD=1` policy added and named by its first model.
fn with_guard(configuration: &str) -> Result<String, Box<dyn std::error::Error>> {
    let mut plugin: serde_json::Value = serde_json::from_str(configuration)?;
    let rules: Vec<serde_json::Value> =
        GUARD_DETECTORS.iter().map(|d| serde_json::json!({"detector": d, "action": "redact"})).collect();
    let config = &mut plugin["config"];
    config["guardrails"] = serde_json::json!([{"name": "bench", "input": rules, "output": rules}]);
    config["models"][0]["guardrails"] = serde_json::json!(["bench"]);
    Ok(plugin.to_string())
}

/// `BODY_KB=n`: the request with its user message padded to n KiB of prose (no digits, no `@`,
/// nothing a detector takes) with one email address in the middle; `BODY` without it.
fn request_body(kb: usize) -> Vec<u8> {
    if kb == 0 {
        return BODY.to_vec();
    }
    const PROSE: &str = "Thanks for getting back to me so quickly about the delivery schedule. The team \
        reviewed the draft over the weekend and we agree that the second option is the better fit for our \
        warehouse, although the loading dock will need a small change before the first truck arrives. Could \
        you send the revised plan when it is ready, and let me know whether the installation crew can start \
        earlier in the morning? ";
    let size = kb * 1024;
    let text: String = PROSE.chars().cycle().take(size).collect();
    let mid = text[..size / 2].rfind(' ').unwrap_or(0);
    let mut content =
        format!("{} Please copy maria.lopez@example.com on the reply. {}", &text[..mid], &text[mid + 1..]);
    content.truncate(size);
    let body =
        serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": content}], "max_tokens": 4});
    body.to_string().into_bytes()
}

/// Prompt `p`'s 1,024 token ids.
fn prompt(p: u64) -> Vec<u32> {
    (0..1024).map(|t| (p * 100_003 + t) as u32).collect()
}

/// The ids a request sends: the first `IDS` (default all 1,024) of prompt 7.
fn request_ids() -> String {
    let n = std::env::var("IDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1024);
    prompt(7).iter().take(n).map(u32::to_string).collect::<Vec<_>>().join(",")
}

/// The sidecar's `/v1/kv` answer: 100,000 blocks, 64 per prompt, prompts spread over the four
/// engines.
fn kv_feed() -> Vec<u8> {
    use ferrogate_core::kv::feed::{FeedEndpoint, FeedProvider};
    use ferrogate_core::kv::{block_keys, chain_seed, KvFeed, KvOp, Tier};
    let endpoints = (0..4).map(|i| FeedEndpoint { address: format!("10.0.0.{i}:8000"), connected: true }).collect();
    let seed = chain_seed("pool", None);
    let mut ops = Vec::new();
    for p in 0..100_000 / 64 {
        let endpoint = (p % 4) as u8;
        ops.extend(block_keys(seed, &prompt(p), 16).map(|key| KvOp::Add {
            provider: 0,
            endpoint,
            key,
            tier: Tier::Gpu,
        }));
    }
    let providers = vec![FeedProvider { name: "pool".into(), endpoints }];
    KvFeed { epoch: 1, generation: 1, reset: true, providers, ops }.encode()
}

/// Runs the VM's tick and answers its sidecar calls: the KV feed, 503 for the rest.
fn feed_kv(vm: &mut ferrogate_host::Vm) -> Result<(), Box<dyn std::error::Error>> {
    vm.on_tick()?;
    for call in vm.take_http_calls() {
        let kv = call.headers.get_str(":path").is_some_and(|p| p.starts_with("/v1/kv"));
        let (status, body) = if kv { ("200", kv_feed()) } else { ("503", Vec::new()) };
        let headers = Headers::from_pairs([(":status", status)]);
        let response = ferrogate_host::HttpCallResponse { headers, body, trailers: Headers::new() };
        vm.http_call_response(call.token, Some(response))?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // REF_FILTER=<wasm> measures another build (the foundation's filter) the same way.
    let reference = std::env::var_os("REF_FILTER");
    // FILTER=<wasm> measures another build of ferrogate's filter (an older commit, say) with
    // the same configuration.
    let path = reference.clone().or_else(|| std::env::var_os("FILTER")).map_or_else(
        || root.join("target/wasm32-unknown-unknown/release/ferrogate_filter.wasm"),
        std::path::PathBuf::from,
    );
    let wasm = std::fs::read(path)?;
    let limits = std::env::var("LIMITS").ok();
    let kv = std::env::var("KV").ok();
    let guard = std::env::var("GUARD").is_ok_and(|g| g != "0");
    let body_kb: usize = std::env::var("BODY_KB").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    let body = request_body(body_kb);
    let configuration = match (reference.is_some(), limits.as_deref()) {
        (true, _) => REF_CONFIG,
        (false, _) if kv.is_some() => KV_CONFIG,
        (false, Some("7")) => LIMITS_CONFIG,
        (false, Some(_)) => ONE_LIMIT_CONFIG,
        (false, None) => CONFIG,
    };
    if guard && reference.is_some() {
        return Err("GUARD=1: the reference filter has no guardrails".into());
    }
    let spec = PluginSpec {
        configuration: if guard { with_guard(configuration)? } else { configuration.to_string() }.into_bytes(),
        allow_on_headers_stop_iteration: true,
        ..PluginSpec::default()
    };
    let rt = Runtime::new(&wasm, spec)?;
    let mut vm = rt.new_vm(0)?;
    if kv.is_some() {
        feed_kv(&mut vm)?;
    }
    let ids = request_ids();
    let mut request = Headers::from_pairs([
        (":method", "POST"),
        (":scheme", "http"),
        (":authority", "gw"),
        (":path", "/v1/chat/completions"),
        ("content-type", "application/json"),
        ("content-length", body.len().to_string().as_str()),
        ("authorization", "Bearer sk-alice"),
        ("x-request-id", "0b6f4a4e-8d1c-4c1e-9a53-3d7c2a1b9e10"),
    ]);
    if kv.as_deref() == Some("1") {
        request.add("x-ferrogate-token-ids", ids.as_str());
    }
    let response =
        Headers::from_pairs([(":status", "200"), ("content-type", "application/json"), ("content-length", "220")]);
    let mut run = |count: usize| -> Result<f64, Box<dyn std::error::Error>> {
        let start = Instant::now();
        for i in 0..count {
            let s = vm.create_stream(StreamInfo::default(), None);
            vm.request_headers(s, request.clone(), false)?;
            vm.request_data(s, &body, true)?;
            vm.response_headers(s, response.clone(), false)?;
            vm.response_data(s, ANSWER, true)?;
            vm.finish_stream(s, false);
            vm.take_events(s);
            // The usage queue has no consumer here; drop the records like a sidecar would take
            // them. The filter queues 64 records per item: draining each time would add a
            // lookup per request that the reference (no queue) does not pay.
            if i % 64 == 63 {
                while rt.shared().take_from_queue("", "ferrogate.usage").is_some() {}
            }
        }
        Ok(start.elapsed().as_secs_f64() * 1e6 / count as f64)
    };
    run(n / 10)?; // warm-up
    let us = run(n)?;
    let with_ids = format!("filter, precise_cache_aware at 100,000 blocks, {} token ids", ids.split(',').count());
    let which = match (reference.is_some(), limits.as_deref()) {
        (true, _) => "reference filter",
        (false, _) if kv.as_deref() == Some("1") => with_ids.as_str(),
        (false, _) if kv.is_some() => "filter, precise_cache_aware pool, no token ids",
        (false, Some("7")) => "filter with 7 limits",
        (false, Some(_)) => "filter with 1 limit",
        (false, None) => "filter",
    };
    let guarded = if guard { ", guardrails (7 detectors, redact, input and output)" } else { "" };
    let sized = if body_kb > 0 { format!(", {body_kb} KiB message") } else { String::new() };
    println!("filter_bench: {n} requests, {us:.2} µs per request ({which}{guarded}{sized} + host, one thread)");
    Ok(())
}
