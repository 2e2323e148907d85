//! The real filter passes a client's W3C `traceparent` on to the calls a request makes
//! (`/tokenize` here; the sidecar's lease asks alike), so those calls join the client's trace,
//! and hands its GenAI attributes to the host as filter state when asked to.

use crate::common::*;
use crate::ferrogate_filter::vm_with;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn plugin(extra: &str) -> String {
    format!(
        r#"{{"config":{{"providers":[{{"name":"pool","kind":"openai_compatible","base_url":"http://vllm:8000",
          "endpoints":[{{"address":"10.0.0.1:8000","kv_events":"tcp://10.0.0.1:5557"}}],
          "kv_block_size":16,"kv_tokenize":true}}],
          "models":[{{"name":"m","targets":[{{"provider":"pool","model":"llama"}}],"strategy":"precise_cache_aware"}}]}},
          "sidecar_cluster":"ferrogate_sidecar"{extra}}}"#
    )
}

/// Sends a chat request with `extra` headers; returns the `/tokenize` call it made.
fn tokenize_call(extra: &[(&str, &str)]) -> ferrogate_host::HttpCallRequest {
    let (_rt, mut vm) = vm_with(&plugin(""));
    let s = new_stream(&mut vm);
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(extra);
    vm.request_headers(s, req("POST", "/v1/chat/completions", &headers), false).unwrap();
    vm.request_data(s, br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#, true).unwrap();
    let calls = vm.take_http_calls();
    calls.into_iter().find(|c| header(&c.headers, ":path") == "/tokenize").expect("a /tokenize call")
}

#[test]
fn the_clients_traceparent_reaches_the_calls_it_causes() {
    let call = tokenize_call(&[("traceparent", TRACEPARENT)]);
    assert_eq!(header(&call.headers, "traceparent"), TRACEPARENT);
    // None sent, or a malformed one: none passed on.
    assert_eq!(header(&tokenize_call(&[]).headers, "traceparent"), "");
    assert_eq!(header(&tokenize_call(&[("traceparent", "00-zz\r\nx: y")]).headers, "traceparent"), "");
}

#[test]
fn gen_ai_attributes_are_filter_state_only_when_asked_for() {
    for (asked, extra) in [(true, r#","gen_ai_attributes":true"#), (false, "")] {
        let config =
            r#"{"config":{"providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
            "models":[{"name":"chat","targets":[{"provider":"local","model":"sim-small"}]}]}EXTRA}"#
                .replace("EXTRA", extra);
        let (_rt, mut vm) = vm_with(&config);
        let s = new_stream(&mut vm);
        vm.request_headers(s, req("POST", "/v1/chat/completions", &[("content-type", "application/json")]), false)
            .unwrap();
        vm.request_data(s, br#"{"model":"chat","max_tokens":9}"#, true).unwrap();
        vm.response_headers(s, resp("200", &[("content-type", "application/json")]), false).unwrap();
        vm.response_data(s, br#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#, true).unwrap();
        let state = vm.finish_stream(s, false);
        let attrs = state.get(b"ferrogate.gen_ai".as_slice());
        assert_eq!(attrs.is_some(), asked, "{state:?}");
        if let Some(json) = attrs {
            let v: serde_json::Value = serde_json::from_slice(json).unwrap();
            assert_eq!(v["gen_ai.request.model"], "chat");
            assert_eq!(v["gen_ai.response.model"], "sim-small");
            assert_eq!(v["gen_ai.request.max_tokens"], 9);
            assert_eq!(v["gen_ai.usage.input_tokens"], 4);
        }
    }
}
