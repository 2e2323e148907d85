//! The real `ferrogate_filter.wasm` in the host, with Envoy's body-routing mode
//! (`allow_on_headers_stop_iteration`): headers are held while the body arrives in chunks,
//! then released with the route decision applied and the body rewritten in place.

use crate::common::*;
use ferrogate_host::{Headers, PluginSpec, Runtime, StreamEvent, Vm};
use std::sync::OnceLock;

pub fn filter_wasm() -> &'static [u8] {
    static WASM: OnceLock<Vec<u8>> = OnceLock::new();
    WASM.get_or_init(|| {
        let path = ferrogate_host::dev::workspace_wasm("ferrogate_filter.wasm", "FERROGATE_FILTER_WASM");
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read filter {}: {e}", path.display()))
    })
}

const CONFIG: &str = r#"{"config":{
  "providers":[
    {"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"},
    {"name":"pool","kind":"openai_compatible","base_url":"http://vllm.internal:8000/prefix",
     "endpoints":["10.0.0.1:8000","10.0.0.2:8000"],"api_key":"sk-pool"}],
  "models":[
    {"name":"chat","targets":[{"provider":"local","model":"sim-small"}]},
    {"name":"big","targets":[{"provider":"pool","model":"llama-70b"}]}],
  "aliases":{"default":"chat"}},
  "max_body_bytes":4096}"#;

/// Prometheus text of `rt` with the labels an Envoy with `envoy/stats-tags.yaml` gives.
pub fn labelled_metrics(rt: &Runtime) -> String {
    let labels = ferrogate_core::metrics::LABELS;
    let tags = labels.iter().map(|l| ferrogate_host::TagSpecifier::new(l, &ferrogate_core::metrics::tag_regex(l)));
    rt.set_stats_tags(tags.collect::<Result<_, _>>().unwrap());
    rt.prometheus_text()
}

fn filter_vm() -> (Runtime, Vm) {
    vm_with(CONFIG)
}

/// A runtime of the real filter with plugin configuration `config`, and its first VM.
pub fn vm_with(config: &str) -> (Runtime, Vm) {
    let spec = PluginSpec {
        name: "ferrogate".into(),
        root_id: "ferrogate".into(),
        vm_id: "ferrogate".into(),
        configuration: config.as_bytes().to_vec(),
        allow_on_headers_stop_iteration: true,
        ..PluginSpec::default()
    };
    let rt = Runtime::new(filter_wasm(), spec).expect("runtime");
    let vm = rt.new_vm(0).expect("vm");
    (rt, vm)
}

/// Sends `body` in `chunk`-byte pieces; returns the events of the whole request phase.
fn post(vm: &mut Vm, path: &str, extra: &[(&str, &str)], body: &[u8], chunk: usize) -> (u32, Vec<StreamEvent>) {
    let s = new_stream(vm);
    vm.request_headers(s, req("POST", path, extra), false).unwrap();
    let mut events = vm.take_events(s);
    assert!(events.is_empty(), "headers must wait for the body: {events:?}");
    let pieces: Vec<&[u8]> = body.chunks(chunk).collect();
    for (i, piece) in pieces.iter().enumerate() {
        vm.request_data(s, piece, i + 1 == pieces.len()).unwrap();
        events.extend(vm.take_events(s));
    }
    (s, events)
}

fn released(events: &[StreamEvent]) -> (&Headers, Vec<u8>) {
    let headers = events
        .iter()
        .find_map(|e| match e {
            StreamEvent::RequestHeaders { headers, .. } => Some(headers),
            _ => None,
        })
        .unwrap_or_else(|| panic!("request headers not released: {events:?}"));
    (headers, request_body(events))
}

#[test]
fn routes_after_the_body_and_rewrites_only_the_model_bytes() {
    let (_rt, mut vm) = filter_vm();
    // Odd but valid JSON: unusual whitespace, key order and an unknown field.
    let body = br#"{ "messages" : [ {"role":"user","content":"hi \"model\": x"} ],"zz_unknown":{"model":"keep"},
        "model"   :	"default" , "stream":false }"#;
    let (_s, events) = post(&mut vm, "/v1/chat/completions", &[("authorization", "Bearer client-key")], body, 7);
    let (headers, forwarded) = released(&events);
    let expected = String::from_utf8_lossy(body).replace("\"default\"", "\"sim-small\"");
    assert_eq!(String::from_utf8(forwarded).unwrap(), expected);
    assert_eq!(header(headers, "x-ferrogate-cluster"), "local");
    assert_eq!(header(headers, ":authority"), "127.0.0.1:8000");
    assert_eq!(header(headers, ":path"), "/v1/chat/completions");
    assert_eq!(header(headers, "content-length"), expected.len().to_string());
    assert!(headers.get("authorization").is_none(), "client key must never go upstream");
}

#[test]
fn pool_provider_gets_endpoint_prefix_and_credential() {
    let (_rt, mut vm) = filter_vm();
    let body = br#"{"model":"big","input":"x"}"#;
    let (_s, events) = post(&mut vm, "/v1/embeddings", &[("x-gateway-destination-endpoint", "6.6.6.6:1")], body, 100);
    let (headers, forwarded) = released(&events);
    assert_eq!(forwarded, br#"{"model":"llama-70b","input":"x"}"#);
    assert_eq!(header(headers, "x-ferrogate-cluster"), "pool");
    assert_eq!(header(headers, ":path"), "/prefix/v1/embeddings");
    assert_eq!(header(headers, "authorization"), "Bearer sk-pool");
    let endpoint = header(headers, "x-gateway-destination-endpoint");
    assert!(endpoint == "10.0.0.1:8000" || endpoint == "10.0.0.2:8000", "client value must be overwritten: {endpoint}");
}

#[test]
fn errors_are_local_replies_in_openai_shape() {
    let (_rt, mut vm) = filter_vm();
    for (body, status) in [
        (&br#"{"model":"nope","messages":[]}"#[..], "404"),
        (&br#"{"messages":[]}"#[..], "400"),
        (&b"not json"[..], "400"),
    ] {
        let (_s, events) = post(&mut vm, "/v1/chat/completions", &[], body, 4);
        assert!(events.iter().any(|e| matches!(e, StreamEvent::AbortUpstream { .. })), "{events:?}");
        let h = response_headers(&events);
        assert_eq!(header(h, ":status"), status, "{}", String::from_utf8_lossy(body));
        let reply = response_body(&events);
        let json: serde_json::Value = serde_json::from_slice(&reply).unwrap();
        assert!(json["error"]["message"].is_string(), "{json}");
    }
}

#[test]
fn body_over_the_limit_is_413() {
    let (_rt, mut vm) = filter_vm();
    let big = format!(r#"{{"model":"chat","messages":"{}"}}"#, "x".repeat(8192));
    let (_s, events) = post(&mut vm, "/v1/chat/completions", &[], big.as_bytes(), 1024);
    assert_eq!(header(response_headers(&events), ":status"), "413");
}

#[test]
fn models_list_is_answered_locally() {
    let (_rt, mut vm) = filter_vm();
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("GET", "/v1/models", &[]), true).unwrap();
    let events = vm.take_events(s);
    assert_eq!(header(response_headers(&events), ":status"), "200");
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::RequestHeaders { .. })));
}

#[test]
fn response_carries_gateway_headers() {
    let (_rt, mut vm) = filter_vm();
    let (s, _) = post(&mut vm, "/v1/chat/completions", &[("x-request-id", "rid-1")], br#"{"model":"chat"}"#, 64);
    vm.response_headers(s, resp("200", &[("content-type", "application/json")]), false).unwrap();
    let events = vm.take_events(s);
    let h = response_headers(&events);
    assert_eq!(header(h, "x-ferrogate-provider"), "local");
    assert_eq!(header(h, "x-ferrogate-model"), "sim-small");
    assert_eq!(header(h, "x-request-id"), "rid-1");
    assert!(header(h, "x-ferrogate-overhead-us").parse::<u64>().is_ok());
    vm.response_data(s, b"{}", true).unwrap();
    vm.finish_stream(s, false);
    assert!(!vm.is_failed());
    let logs = vm.take_logs();
    assert!(!logs.iter().any(|(l, _)| *l >= ferrogate_host::LogLevel::Critical), "{logs:?}");
}
