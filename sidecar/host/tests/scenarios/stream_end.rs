//! How a streamed answer that stops early is told and charged, with the real filter: a client
//! that hangs up is charged what was delivered (499, partial); an upstream that ends early or
//! fails gives the client a final error event in its dialect and is recorded as 502 (partial,
//! charged); in Envoy, where the proxy resets the client instead, the filter still records 502
//! from `response.code_details`.

use crate::common::*;
use ferrogate_host::{Runtime, Vm};
use serde_json::Value;

const CONFIG: &str = r#"{"config":{
  "providers":[
    {"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"},
    {"name":"claude-p","kind":"anthropic","base_url":"http://127.0.0.1:8001"}],
  "models":[
    {"name":"chat","targets":[{"provider":"local","model":"sim-small"}]},
    {"name":"claude","targets":[{"provider":"claude-p","model":"claude-x"}]}],
  "pricing":{"sim-small":{"input_per_mtok":1.0,"output_per_mtok":2.0}}},
  "max_body_bytes":65536}"#;

/// `n` content chunks of `word` in OpenAI's stream shape.
fn chat_chunks(word: &str, n: usize) -> String {
    let chunk = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"finish_reason\":null}}]}}\n\n"
    );
    chunk.repeat(n)
}

/// Starts a streamed request with `body` at `path`; the upstream answers 200 with an event
/// stream.
fn start(vm: &mut Vm, path: &str, body: &str) -> u32 {
    let s = new_stream(vm);
    vm.request_headers(s, req("POST", path, &[("content-type", "application/json")]), false).unwrap();
    vm.request_data(s, body.as_bytes(), true).unwrap();
    vm.response_headers(s, resp("200", &[("content-type", "text/event-stream")]), false).unwrap();
    s
}

fn record(rt: &Runtime, vm: &mut Vm) -> Value {
    assert!(rt.shared().take_from_queue("ferrogate", "ferrogate.usage").is_none());
    vm.on_tick().unwrap();
    let logs = vm.take_logs();
    let line = logs.iter().find_map(|(_, m)| m.strip_prefix("usage ")).unwrap_or_else(|| panic!("{logs:?}"));
    serde_json::from_str(line).unwrap()
}

/// Status and completion tokens of a record that must say `partial`.
fn partial_record(r: &Value) -> (u64, u64) {
    assert_eq!(r["partial"], true, "{r}");
    (r["status"].as_u64().unwrap_or_default(), r["completion_tokens"].as_u64().unwrap_or_default())
}

const CHAT: &str = r#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"Tell me a long story."}]}"#;

#[test]
fn a_client_that_hangs_up_is_charged_for_what_it_got() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(CONFIG);
    let s = start(&mut vm, "/v1/chat/completions", CHAT);
    // 40 chunks of an eight-byte word: 320 bytes of text, about 80 tokens; no usage yet.
    vm.response_data(s, chat_chunks("abcdefgh", 40).as_bytes(), false).unwrap();
    vm.finish_stream(s, true);
    let r = record(&rt, &mut vm);
    assert_eq!(partial_record(&r), (499, 80), "{r}");
    assert_eq!(r["prompt_tokens"], CHAT.len().div_ceil(4), "admission's estimate: no usage was seen");
    assert!(r["cost_micro_usd"].as_u64().unwrap_or(0) > 0, "charged: {r}");
}

#[test]
fn an_upstream_that_ends_early_gets_a_final_error_event_and_a_502_record() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(CONFIG);
    let s = start(&mut vm, "/v1/chat/completions", CHAT);
    vm.response_data(s, chat_chunks("abcd", 10).as_bytes(), false).unwrap();
    vm.response_data(s, b"", true).unwrap(); // a clean end, but no finish_reason nor [DONE]
    let sent = String::from_utf8(response_body(&vm.take_events(s))).unwrap();
    assert!(sent.starts_with(&chat_chunks("abcd", 10)), "what was delivered stays: {sent}");
    let tail = sent.trim_end().rsplit("\n\n").nth(1).unwrap_or_default();
    let error: Value = serde_json::from_str(tail.trim_start_matches("data: ")).unwrap();
    assert_eq!(error["error"]["type"], "server_error", "{sent}");
    assert!(sent.ends_with("data: [DONE]\n\n"), "{sent}");
    vm.finish_stream(s, false);
    let r = record(&rt, &mut vm);
    assert_eq!(partial_record(&r), (502, 10), "{r}");
}

#[test]
fn a_complete_stream_is_left_alone() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(CONFIG);
    let s = start(&mut vm, "/v1/chat/completions", CHAT);
    let done = format!(
        "{}data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n",
        chat_chunks("ab", 3)
    );
    vm.response_data(s, done.as_bytes(), true).unwrap();
    let sent = String::from_utf8(response_body(&vm.take_events(s))).unwrap();
    assert!(!sent.contains("error"), "{sent}");
    vm.finish_stream(s, false);
    let r = record(&rt, &mut vm);
    assert_eq!((r["status"].as_u64(), r.get("partial")), (Some(200), None), "{r}");
}

#[test]
fn an_upstream_reset_in_serve_ends_the_stream_with_an_error_event() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(CONFIG);
    let s = start(&mut vm, "/v1/chat/completions", CHAT);
    vm.response_data(s, chat_chunks("abcd", 4).as_bytes(), false).unwrap();
    vm.upstream_reset(s, "upstream_reset_after_response_started{remote_reset}", true).unwrap();
    let sent = String::from_utf8(response_body(&vm.take_events(s))).unwrap();
    assert!(sent.contains("ended before the answer was complete") && sent.ends_with("data: [DONE]\n\n"), "{sent}");
    vm.finish_stream(s, false);
    let r = record(&rt, &mut vm);
    assert_eq!(partial_record(&r), (502, 4), "{r}");
}

#[test]
fn an_upstream_reset_in_envoy_is_recorded_from_the_code_details() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(CONFIG);
    let s = start(&mut vm, "/v1/chat/completions", CHAT);
    vm.response_data(s, chat_chunks("abcd", 4).as_bytes(), false).unwrap();
    // Envoy resets the client; the filter only learns it in on_log.
    vm.upstream_reset(s, "upstream_reset_after_response_started{remote_reset}", false).unwrap();
    vm.finish_stream(s, true);
    let r = record(&rt, &mut vm);
    assert_eq!(partial_record(&r), (502, 4), "{r}");
}

#[test]
fn a_translated_stream_cut_short_is_a_502_too() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(CONFIG);
    let body = r#"{"model":"claude","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let s = start(&mut vm, "/v1/chat/completions", body);
    let events = concat!(
        "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"claude-x\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"abcdefgh\"}}\n\n",
    );
    vm.response_data(s, events.as_bytes(), false).unwrap();
    vm.response_data(s, b"", true).unwrap();
    let sent = String::from_utf8(response_body(&vm.take_events(s))).unwrap();
    assert!(sent.contains("ended before the answer was complete"), "{sent}");
    assert_eq!(sent.matches("ended before").count(), 1, "one error event, the translator's: {sent}");
    vm.finish_stream(s, false);
    let r = record(&rt, &mut vm);
    assert_eq!(partial_record(&r), (502, 2), "{r}");
    assert_eq!(r["prompt_tokens"], 9, "the provider's own prompt count: {r}");
}
