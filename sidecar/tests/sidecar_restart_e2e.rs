//! A sidecar restarted under traffic: the real filter in the embedded host, fed by a real
//! `ferrogate sidecar` over HTTP the way Envoy carries its callouts. While the sidecar is
//! down the filter keeps routing on its last snapshot; once a new sidecar answers on the same
//! address, the edit made meanwhile reaches the filter without a restart of the proxy.

use std::time::{Duration, Instant};

use ferrogate_host::{Headers, Runtime, StreamEvent, Vm};
use sidecar_link::{carry, start_sidecar};

#[path = "common/sidecar_link.rs"]
mod sidecar_link;
#[path = "common/wasm.rs"]
mod wasm;

const TOKEN: &str = "t0k-restart";

fn config(model: &str) -> String {
    format!(
        "providers: [{{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:9' }}]\n\
         models: [{{ name: {model}, targets: [{{ provider: local, model: up-{model} }}] }}]\n"
    )
}

/// The filter VM, polling the `ferrogate_sidecar` cluster every 100 ms.
fn filter() -> (Runtime, Vm) {
    let plugin =
        format!(r#"{{"sidecar_cluster":"ferrogate_sidecar","internal_token":"{TOKEN}","poll_interval_ms":100}}"#);
    wasm::filter_vm(plugin)
}

/// One tick of the filter, its callouts carried to `sidecar` over HTTP (a refused connection
/// is what Envoy's async client answers then: 503).
async fn tick(vm: &mut Vm, sidecar: &str) {
    vm.on_tick().unwrap();
    for call in vm.take_http_calls() {
        let answer = carry(sidecar, &call.headers, call.body.clone()).await;
        vm.http_call_response(call.token, Some(answer)).unwrap();
    }
}

/// Routes a chat request for `model`: the upstream model id, or the local reply's status.
fn route(vm: &mut Vm, model: &str) -> Result<String, String> {
    let s = vm.create_stream(ferrogate_host::StreamInfo::default(), None);
    let head = Headers::from_pairs([
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gw"),
        ("content-type", "application/json"),
    ]);
    vm.request_headers(s, head, false).unwrap();
    vm.request_data(s, format!(r#"{{"model":"{model}"}}"#).as_bytes(), true).unwrap();
    let events = vm.take_events(s);
    vm.finish_stream(s, true);
    for e in &events {
        match e {
            StreamEvent::ResponseHeaders { headers, .. } => {
                return Err(headers.get_str(":status").unwrap_or("").into())
            }
            StreamEvent::RequestData { data, .. } => {
                let v: serde_json::Value = serde_json::from_slice(data).unwrap();
                return Ok(v["model"].as_str().unwrap_or_default().to_string());
            }
            _ => {}
        }
    }
    Err(format!("no outcome: {events:?}"))
}

/// Ticks (carrying polls) until `model` routes to `up-<model>`, for at most 10 s.
async fn until_routed(vm: &mut Vm, sidecar: &str, model: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while route(vm, model) != Ok(format!("up-{model}")) {
        assert!(Instant::now() < deadline, "{model} never routed: {:?}", route(vm, model));
        tick(vm, sidecar).await;
        tokio::time::sleep(Duration::from_millis(110)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_flows_on_the_last_snapshot_while_the_sidecar_restarts() {
    let dir = std::env::temp_dir().join(format!("ferrogate-restart-{}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("config.yaml");
    std::fs::write(&file, config("chat")).unwrap();
    let first = start_sidecar(&file, "127.0.0.1:0", TOKEN).await;
    let addr = first.sidecar_addr.to_string();
    let (_rt, mut vm) = filter();
    assert_eq!(route(&mut vm, "chat"), Err("503".into()), "no snapshot yet");
    until_routed(&mut vm, &addr, "chat").await;

    // The sidecar goes away; polls fail; requests keep flowing on the last snapshot.
    first.shutdown();
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(&file, config("chat2")).unwrap();
    for _ in 0..10 {
        tick(&mut vm, &addr).await;
        assert_eq!(route(&mut vm, "chat"), Ok("up-chat".into()), "served on the last snapshot");
        tokio::time::sleep(Duration::from_millis(110)).await;
    }
    assert_eq!(route(&mut vm, "chat2"), Err("404".into()), "the edit is not known yet");

    // A new sidecar on the same address: the edit arrives.
    let second = start_sidecar(&file, &addr, TOKEN).await;
    until_routed(&mut vm, &addr, "chat2").await;
    assert_eq!(route(&mut vm, "chat"), Err("404".into()), "the edit replaced the model");
    second.shutdown();
    let _ = std::fs::remove_dir_all(dir);
}
