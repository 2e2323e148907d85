//! The real filter fed by a sidecar: the first snapshot ends the 503s, one VM polls per
//! interval and every VM adopts what it fetched, 304s and outages keep the current snapshot, a
//! bad snapshot is refused, and a request keeps the configuration it started with.

use std::time::Duration;

use crate::common::*;
use ferrogate_host::{Headers, HttpCallRequest, HttpCallResponse, PluginSpec, Runtime, StreamEvent, Vm};

const PLUGIN: &str = r#"{"sidecar_cluster":"ferrogate_sidecar","internal_token":"t0k","poll_interval_ms":100}"#;
/// The lease: a VM may poll again once this much has passed (the plugin's interval).
const INTERVAL: Duration = Duration::from_millis(120);

fn runtime() -> Runtime {
    let spec = PluginSpec {
        name: "ferrogate".into(),
        root_id: "ferrogate".into(),
        vm_id: "ferrogate".into(),
        configuration: PLUGIN.as_bytes().to_vec(),
        allow_on_headers_stop_iteration: true,
        ..PluginSpec::default()
    };
    Runtime::new(crate::ferrogate_filter::filter_wasm(), spec).expect("runtime")
}

/// A snapshot body serving `model` (open gateway: no keys).
fn snapshot(version: &str, model: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "version": version,
        "config": {
            "providers": [{"name": "local", "kind": "openai_compatible", "base_url": "http://127.0.0.1:8000"}],
            "models": [{"name": model, "targets": [{"provider": "local", "model": format!("up-{model}")}]}]
        },
        "problems": [{"path": "models[1].targets[0].provider", "message": "unknown provider (row dropped)"}]
    }))
    .unwrap()
}

fn answer(status: &str, body: Vec<u8>) -> Option<HttpCallResponse> {
    Some(HttpCallResponse { headers: Headers::from_pairs([(":status", status)]), body, trailers: Headers::new() })
}

/// The snapshot polls among the calls `vm` made.
fn polls(vm: &mut Vm) -> Vec<HttpCallRequest> {
    vm.take_http_calls().into_iter().filter(|c| header(&c.headers, ":path") == "/v1/snapshot").collect()
}

/// Sends a chat request for `model`: the upstream model it was routed to, or the local status.
fn route(vm: &mut Vm, model: &str) -> Result<String, String> {
    let s = new_stream(vm);
    vm.request_headers(s, req("POST", "/v1/chat/completions", &[("content-type", "application/json")]), false).unwrap();
    let mut events = vm.take_events(s);
    if !replied(&events) {
        vm.request_data(s, format!(r#"{{"model":"{model}"}}"#).as_bytes(), true).unwrap();
        events.extend(vm.take_events(s));
    }
    outcome(&events)
}

fn replied(events: &[StreamEvent]) -> bool {
    events.iter().any(|e| matches!(e, StreamEvent::ResponseHeaders { .. }))
}

fn outcome(events: &[StreamEvent]) -> Result<String, String> {
    if replied(events) {
        return Err(header(response_headers(events), ":status"));
    }
    let json: serde_json::Value = serde_json::from_slice(&request_body(events)).unwrap();
    Ok(json["model"].as_str().unwrap().to_string())
}

#[test]
fn the_first_snapshot_ends_the_503s_and_every_vm_adopts_it() {
    let rt = runtime();
    let (mut a, mut b) = (rt.new_vm(0).unwrap(), rt.new_vm(1).unwrap());
    assert_eq!(route(&mut a, "chat"), Err("503".into()));
    a.on_tick().unwrap();
    b.on_tick().unwrap();
    let mut calls = polls(&mut a);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(polls(&mut b).is_empty(), "one VM per interval polls");
    let call = calls.remove(0);
    assert_eq!(call.cluster, "ferrogate_sidecar");
    assert_eq!(header(&call.headers, ":method"), "GET");
    assert_eq!(header(&call.headers, "authorization"), "Bearer t0k");
    assert_eq!(header(&call.headers, "if-none-match"), "", "nothing to revalidate yet");
    a.http_call_response(call.token, answer("200", snapshot("v1", "chat"))).unwrap();
    assert_eq!(route(&mut a, "chat"), Ok("up-chat".into()));
    // The other VM takes it from shared data on its next tick, without a call of its own.
    assert_eq!(route(&mut b, "chat"), Err("503".into()));
    b.on_tick().unwrap();
    assert!(polls(&mut b).is_empty());
    assert_eq!(route(&mut b, "chat"), Ok("up-chat".into()));
}

/// Ticks `vm` until it polls (the lease moves one interval per poll).
fn next_poll(vm: &mut Vm) -> HttpCallRequest {
    for _ in 0..50 {
        vm.on_tick().unwrap();
        if let Some(call) = polls(vm).pop() {
            return call;
        }
        std::thread::sleep(INTERVAL / 4);
    }
    panic!("no poll within 50 ticks");
}

#[test]
fn revalidation_outages_and_bad_snapshots_keep_the_current_one() {
    let rt = runtime();
    let mut vm = rt.new_vm(0).unwrap();
    let call = next_poll(&mut vm);
    vm.http_call_response(call.token, answer("200", snapshot("v1", "chat"))).unwrap();
    let call = next_poll(&mut vm);
    assert_eq!(header(&call.headers, "if-none-match"), "\"v1\"");
    vm.http_call_response(call.token, answer("304", Vec::new())).unwrap();
    assert_eq!(route(&mut vm, "chat"), Ok("up-chat".into()));
    // Sidecar down (reset), failing, or sending something unusable: v1 stays.
    let call = next_poll(&mut vm);
    vm.http_call_response(call.token, None).unwrap();
    let call = next_poll(&mut vm);
    vm.http_call_response(call.token, answer("500", Vec::new())).unwrap();
    let call = next_poll(&mut vm);
    let invalid = br#"{"version":"v2","config":{"models":[{"name":"x","targets":[]}]}}"#.to_vec();
    vm.http_call_response(call.token, answer("200", invalid)).unwrap();
    let call = next_poll(&mut vm);
    assert_eq!(header(&call.headers, "if-none-match"), "\"v1\"", "the refused v2 was not adopted");
    vm.http_call_response(call.token, answer("200", b"{ torn".to_vec())).unwrap();
    assert_eq!(route(&mut vm, "chat"), Ok("up-chat".into()));
}

#[test]
fn a_request_keeps_the_configuration_it_started_with() {
    let rt = runtime();
    let mut vm = rt.new_vm(0).unwrap();
    let call = next_poll(&mut vm);
    vm.http_call_response(call.token, answer("200", snapshot("v1", "chat"))).unwrap();
    // Headers arrive under v1; the body after v2 replaced `chat` with `chat2`.
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/v1/chat/completions", &[("content-type", "application/json")]), false).unwrap();
    let call = next_poll(&mut vm);
    vm.http_call_response(call.token, answer("200", snapshot("v2", "chat2"))).unwrap();
    vm.request_data(s, br#"{"model":"chat"}"#, true).unwrap();
    assert_eq!(outcome(&vm.take_events(s)), Ok("up-chat".into()));
    assert_eq!(route(&mut vm, "chat"), Err("404".into()));
    assert_eq!(route(&mut vm, "chat2"), Ok("up-chat2".into()));
}
