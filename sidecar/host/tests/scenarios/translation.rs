//! The real filter between dialects: an OpenAI client served by an Anthropic provider and an
//! Anthropic client served by an OpenAI-compatible one (bodies translated both ways, answers
//! buffered and translated back, usage read in the provider's dialect), an Anthropic client
//! reaching an Anthropic provider verbatim, upstream errors in the caller's envelope, and the
//! refusals that are said rather than attempted.

use crate::common::*;
use ferrogate_host::{Headers, Runtime, StreamEvent, Vm};
use serde_json::{json, Value};

const CONFIG: &str = r#"{"config":{
  "providers":[
    {"name":"claude-p","kind":"anthropic","base_url":"https://api.anthropic.com","api_key":"sk-ant-upstream"},
    {"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[
    {"name":"claude","targets":[{"provider":"claude-p","model":"claude-x"}]},
    {"name":"gpt","targets":[{"provider":"local","model":"sim-small"}]}],
  "pricing":{"claude-x":{"input_per_mtok":3.0,"output_per_mtok":15.0,"cached_input_per_mtok":0.3}}},
  "max_body_bytes":65536}"#;

fn vm() -> (Runtime, Vm) {
    crate::ferrogate_filter::vm_with(CONFIG)
}

/// Sends a request; returns the stream and what went upstream (headers, body).
pub fn send(vm: &mut Vm, path: &str, body: &str) -> (u32, Headers, Vec<u8>) {
    let s = new_stream(vm);
    let head = req("POST", path, &[("content-type", "application/json"), ("x-api-key", "client-key")]);
    vm.request_headers(s, head, false).unwrap();
    vm.request_data(s, body.as_bytes(), true).unwrap();
    let events = vm.take_events(s);
    let headers = events
        .iter()
        .find_map(|e| match e {
            StreamEvent::RequestHeaders { headers, .. } => Some(headers.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("nothing went upstream: {events:?}"));
    (s, headers, request_body(&events))
}

/// Answers with `status` and `body` in two pieces; returns the client's headers and body.
fn answer(vm: &mut Vm, s: u32, status: &str, body: &str) -> (Headers, Vec<u8>) {
    let len = body.len().to_string();
    vm.response_headers(s, resp(status, &[("content-type", "application/json"), ("content-length", &len)]), false)
        .unwrap();
    let (a, b) = body.as_bytes().split_at(body.len() / 2);
    vm.response_data(s, a, false).unwrap();
    let early = vm.take_events(s);
    assert!(response_body(&early).is_empty(), "a translated answer is held until it is whole");
    let headers_out = early.iter().any(|e| matches!(e, StreamEvent::ResponseHeaders { .. }));
    assert!(!headers_out, "its headers too, so a failed translation can still change the status");
    vm.response_data(s, b, true).unwrap();
    let mut events = early;
    events.extend(vm.take_events(s));
    (response_headers(&events).clone(), response_body(&events))
}

/// Ends the stream and returns its usage record (logged by the root: no sidecar here).
pub fn usage_record(rt: &Runtime, vm: &mut Vm, s: u32) -> Value {
    vm.finish_stream(s, false);
    assert!(rt.shared().take_from_queue("ferrogate", "ferrogate.usage").is_none());
    vm.on_tick().unwrap();
    let logs = vm.take_logs();
    let line = logs.iter().find_map(|(_, m)| m.strip_prefix("usage ")).unwrap_or_else(|| panic!("{logs:?}"));
    serde_json::from_str(line).unwrap()
}

const ANTHROPIC_ANSWER: &str = r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude-x",
  "content":[{"type":"text","text":"Hello!"}],"stop_reason":"end_turn","stop_sequence":null,
  "usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":1000,"cache_creation_input_tokens":0}}"#;

#[test]
fn an_openai_client_is_served_by_an_anthropic_provider() {
    let (rt, mut vm) = vm();
    let body =
        r#"{"model":"claude","messages":[{"role":"system","content":"Be kind."},{"role":"user","content":"Hi"}]}"#;
    let (s, up, sent) = send(&mut vm, "/v1/chat/completions", body);
    assert_eq!(header(&up, ":path"), "/v1/messages");
    assert_eq!(header(&up, "x-api-key"), "sk-ant-upstream", "the provider's key, never the client's");
    assert_eq!(header(&up, "anthropic-version"), "2023-06-01");
    assert_eq!(header(&up, "content-length"), sent.len().to_string());
    let sent: Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(sent["system"], json!([{"type": "text", "text": "Be kind."}]));
    assert_eq!((sent["model"].as_str(), sent["max_tokens"].as_u64()), (Some("claude-x"), Some(4096)));

    let (headers, got) = answer(&mut vm, s, "200", ANTHROPIC_ANSWER);
    assert_eq!(header(&headers, ":status"), "200");
    assert!(headers.get("content-length").is_none(), "the length changed with the translation");
    let got: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(got["object"], "chat.completion");
    assert_eq!(got["model"], "claude", "the client sees the name it asked for");
    assert_eq!(got["choices"][0]["message"]["content"], "Hello!");
    assert_eq!(got["usage"]["prompt_tokens"], 1010);
    assert_eq!(got["usage"]["prompt_tokens_details"]["cached_tokens"], 1000);
    let record = usage_record(&rt, &mut vm, s);
    assert_eq!((record["prompt_tokens"].as_u64(), record["completion_tokens"].as_u64()), (Some(1010), Some(5)));
    assert_eq!(record["provider"], "claude-p");
    // 10 × $3 + 1000 × $0.30 + 5 × $15 per million tokens.
    assert_eq!(record["cost_micro_usd"], 405);
}

#[test]
fn an_anthropic_client_is_served_by_an_openai_compatible_provider() {
    let (rt, mut vm) = vm();
    let body = r#"{"model":"gpt","max_tokens":20,"messages":[{"role":"user","content":"Hi"}]}"#;
    let (s, up, sent) = send(&mut vm, "/v1/messages", body);
    assert_eq!(header(&up, ":path"), "/v1/chat/completions");
    assert!(up.get("x-api-key").is_none() && up.get("anthropic-version").is_none());
    let sent: Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(sent["messages"], json!([{"role": "user", "content": "Hi"}]));
    assert_eq!(sent["max_completion_tokens"], 20);
    let openai = r#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"sim-small",
      "choices":[{"index":0,"message":{"role":"assistant","content":"Hey"},"finish_reason":"length"}],
      "usage":{"prompt_tokens":4,"completion_tokens":20,"total_tokens":24}}"#;
    let (_, got) = answer(&mut vm, s, "200", openai);
    let got: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(got["type"], "message");
    assert_eq!(got["model"], "gpt");
    assert_eq!(got["content"], json!([{"type": "text", "text": "Hey"}]));
    assert_eq!(got["stop_reason"], "max_tokens");
    assert_eq!(got["usage"]["input_tokens"], 4);
    let record = usage_record(&rt, &mut vm, s);
    assert_eq!(record["completion_tokens"], 20);
}

#[test]
fn an_anthropic_client_reaches_an_anthropic_provider_verbatim() {
    let (rt, mut vm) = vm();
    let body = r#"{ "max_tokens" : 9, "model":"claude",
      "messages":[{"role":"user","content":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}], "x_extra":1}"#;
    let (s, up, sent) = send(&mut vm, "/v1/messages", body);
    assert_eq!(header(&up, ":path"), "/v1/messages");
    assert_eq!(String::from_utf8(sent).unwrap(), body.replace(r#""model":"claude""#, r#""model":"claude-x""#));
    vm.response_headers(s, resp("200", &[("content-type", "application/json")]), false).unwrap();
    vm.response_data(s, ANTHROPIC_ANSWER.as_bytes(), true).unwrap();
    let events = vm.take_events(s);
    assert_eq!(response_body(&events), ANTHROPIC_ANSWER.as_bytes(), "the answer's bytes are untouched");
    let record = usage_record(&rt, &mut vm, s);
    assert_eq!(record["prompt_tokens"], 1010, "usage read in the Anthropic dialect");
}

#[test]
fn upstream_errors_reach_the_client_in_its_envelope() {
    let (_rt, mut vm) = vm();
    let (s, _, _) = send(&mut vm, "/v1/chat/completions", r#"{"model":"claude","messages":[]}"#);
    let error = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}"#;
    let (headers, got) = answer(&mut vm, s, "429", error);
    assert_eq!(header(&headers, ":status"), "429", "the status is kept");
    let got: Value = serde_json::from_slice(&got).unwrap();
    assert_eq!(got["error"]["message"], "Slow down");
    assert_eq!(got["error"]["type"], "rate_limit_error");
}

#[test]
fn a_success_that_cannot_be_translated_is_a_502_in_the_callers_envelope() {
    let (rt, mut vm) = vm();
    let body = r#"{"model":"claude","messages":[{"role":"user","content":"hi"}]}"#;
    let (s, _, _) = send(&mut vm, "/v1/chat/completions", body);
    let (headers, got) = answer(&mut vm, s, "200", r#"{"not":"an Anthropic message"}"#);
    assert_eq!(header(&headers, ":status"), "502", "never a 2xx carrying an error");
    assert_eq!(header(&headers, "content-type"), "application/json");
    let got: Value = serde_json::from_slice(&got).unwrap();
    let message = got["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("could not be translated"), "{got}");
    assert_eq!(usage_record(&rt, &mut vm, s)["status"], 502);
}

#[test]
fn what_cannot_be_translated_is_refused_before_anything_is_sent() {
    let (_rt, mut vm) = vm();
    for (path, body, needle) in [
        ("/v1/chat/completions", r#"{"model":"claude","messages":[],"seed":7}"#, "`seed`"),
        ("/v1/messages", r#"{"model":"gpt","max_tokens":5,"messages":[],"top_k":3}"#, "`top_k`"),
    ] {
        let s = new_stream(&mut vm);
        vm.request_headers(s, req("POST", path, &[("content-type", "application/json")]), false).unwrap();
        vm.request_data(s, body.as_bytes(), true).unwrap();
        let events = vm.take_events(s);
        assert!(!events.iter().any(|e| matches!(e, StreamEvent::RequestHeaders { .. })), "{body}");
        assert_eq!(header(response_headers(&events), ":status"), "400");
        let text = String::from_utf8(response_body(&events)).unwrap();
        assert!(text.contains(needle), "{text}");
    }
}

/// A streamed answer is translated chunk by chunk as it flows (nothing held back beyond the
/// event in progress), and its usage is recorded from the provider's own events.
#[test]
fn a_stream_is_translated_as_it_flows() {
    let (rt, mut vm) = vm();
    let body = r#"{"model":"claude","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hi"}]}"#;
    let (s, _, sent) = send(&mut vm, "/v1/chat/completions", body);
    let sent: Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(sent["stream"], true);
    assert!(sent.get("stream_options").is_none(), "Anthropic has no stream_options");
    vm.response_headers(s, resp("200", &[("content-type", "text/event-stream")]), false).unwrap();
    let events = [
        r#"{"type":"message_start","message":{"id":"msg_s","usage":{"input_tokens":7,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":2}}"#,
        r#"{"type":"message_stop"}"#,
    ];
    let mut text = String::new();
    let mut chunks = Vec::new();
    for (i, e) in events.iter().enumerate() {
        let name = serde_json::from_str::<Value>(e).unwrap()["type"].as_str().unwrap().to_string();
        let raw = format!("event: {name}\ndata: {e}\n\n");
        // Cut every event in two: the half that ends nothing yields nothing yet.
        let (a, b) = raw.as_bytes().split_at(raw.len() / 2);
        vm.response_data(s, a, false).unwrap();
        assert!(response_body(&vm.take_events(s)).is_empty());
        vm.response_data(s, b, i + 1 == events.len()).unwrap();
        chunks.push(String::from_utf8(response_body(&vm.take_events(s))).unwrap());
    }
    assert!(chunks[2].contains(r#""content":"Hel""#), "the first token leaves with its event: {chunks:?}");
    for c in &chunks {
        text.push_str(c);
    }
    let datas: Vec<&str> = text.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect();
    assert_eq!(datas.last(), Some(&"[DONE]"));
    let parsed: Vec<Value> = datas[..datas.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let content: String = parsed.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(content, "Hello");
    assert_eq!(parsed.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect::<Vec<_>>(), ["stop"]);
    let usage = parsed.last().unwrap();
    assert_eq!(
        (usage["usage"]["prompt_tokens"].as_u64(), usage["usage"]["completion_tokens"].as_u64()),
        (Some(7), Some(2))
    );
    let record = usage_record(&rt, &mut vm, s);
    assert_eq!((record["prompt_tokens"].as_u64(), record["completion_tokens"].as_u64()), (Some(7), Some(2)));
    assert_eq!(record["streamed"], true);
}

/// `count_tokens` is answered by the gateway (an estimate) for a model the caller may use.
#[test]
fn count_tokens_is_estimated_locally() {
    let (_rt, mut vm) = vm();
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/v1/messages/count_tokens", &[("content-type", "application/json")]), false)
        .unwrap();
    let body = r#"{"model":"claude","messages":[{"role":"user","content":"Hello, world"}]}"#;
    vm.request_data(s, body.as_bytes(), true).unwrap();
    let events = vm.take_events(s);
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::RequestHeaders { .. })), "nothing goes upstream");
    assert_eq!(header(response_headers(&events), ":status"), "200");
    let got: Value = serde_json::from_slice(&response_body(&events)).unwrap();
    assert_eq!(got, json!({"input_tokens": 6}));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/v1/messages/count_tokens", &[]), false).unwrap();
    vm.request_data(s, br#"{"model":"nope","messages":[]}"#, true).unwrap();
    let events = vm.take_events(s);
    assert_eq!(header(response_headers(&events), ":status"), "404");
    let got: Value = serde_json::from_slice(&response_body(&events)).unwrap();
    assert_eq!(got["type"], "error", "in the Anthropic envelope");
}
