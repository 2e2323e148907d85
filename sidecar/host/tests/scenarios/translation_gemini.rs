//! The real filter with Gemini on either side: the model named in the path, a Gemini client
//! reaching a Gemini provider verbatim (its `key` query parameter never forwarded), a Gemini
//! client served by an OpenAI-compatible provider, and an OpenAI client streaming from a
//! Gemini provider.

use crate::common::*;
use crate::translation::{send, usage_record};
use ferrogate_host::{Runtime, Vm};
use serde_json::{json, Value};

const CONFIG: &str = r#"{"config":{
  "providers":[
    {"name":"google","kind":"gemini","base_url":"https://generativelanguage.googleapis.com","api_key":"g-upstream"},
    {"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[
    {"name":"gem","targets":[{"provider":"google","model":"gemini-x"}]},
    {"name":"gpt","targets":[{"provider":"local","model":"sim-small"}]}]},
  "max_body_bytes":65536}"#;

fn vm() -> (Runtime, Vm) {
    crate::ferrogate_filter::vm_with(CONFIG)
}

const GEMINI_BODY: &str = r#"{"contents":[{"role":"user","parts":[{"text":"Why is the sky blue?"}]}],"generationConfig":{"maxOutputTokens":50}}"#;

#[test]
fn a_gemini_client_reaches_a_gemini_provider_verbatim() {
    let (rt, mut vm) = vm();
    let (s, up, sent) = send(&mut vm, "/v1beta/models/gem:generateContent?key=client-secret", GEMINI_BODY);
    assert_eq!(header(&up, ":path"), "/v1beta/models/gemini-x:generateContent");
    assert_eq!(header(&up, "x-goog-api-key"), "g-upstream");
    assert_eq!(sent, GEMINI_BODY.as_bytes(), "the body is forwarded as sent");
    let answer = r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Rayleigh."}]},"finishReason":"STOP","index":0}],
      "usageMetadata":{"promptTokenCount":6,"candidatesTokenCount":3,"totalTokenCount":9},"modelVersion":"gemini-x"}"#;
    vm.response_headers(s, resp("200", &[("content-type", "application/json")]), false).unwrap();
    vm.response_data(s, answer.as_bytes(), true).unwrap();
    assert_eq!(response_body(&vm.take_events(s)), answer.as_bytes());
    let r = usage_record(&rt, &mut vm, s);
    assert_eq!((r["prompt_tokens"].as_u64(), r["completion_tokens"].as_u64()), (Some(6), Some(3)));
    assert_eq!(r["model_requested"], "gem");
}

#[test]
fn a_gemini_client_is_served_by_an_openai_compatible_provider() {
    let (rt, mut vm) = vm();
    let (s, up, sent) = send(&mut vm, "/v1beta/models/gpt:generateContent", GEMINI_BODY);
    assert_eq!(header(&up, ":path"), "/v1/chat/completions");
    let sent: Value = serde_json::from_slice(&sent).unwrap();
    assert_eq!(sent["model"], "sim-small");
    assert_eq!(sent["messages"], json!([{"role": "user", "content": "Why is the sky blue?"}]));
    let answer = r#"{"id":"c1","object":"chat.completion","created":1,"model":"sim-small",
      "choices":[{"index":0,"message":{"role":"assistant","content":"Scattering."},"finish_reason":"stop"}],
      "usage":{"prompt_tokens":6,"completion_tokens":2,"total_tokens":8}}"#;
    vm.response_headers(s, resp("200", &[("content-type", "application/json")]), false).unwrap();
    vm.response_data(s, answer.as_bytes(), true).unwrap();
    let got: Value = serde_json::from_slice(&response_body(&vm.take_events(s))).unwrap();
    assert_eq!(got["candidates"][0]["content"]["parts"][0]["text"], "Scattering.");
    assert_eq!(got["candidates"][0]["finishReason"], "STOP");
    assert_eq!(got["usageMetadata"]["promptTokenCount"], 6);
    assert_eq!(usage_record(&rt, &mut vm, s)["completion_tokens"], 2);
}

#[test]
fn an_openai_client_streams_from_a_gemini_provider() {
    let (rt, mut vm) = vm();
    let body = r#"{"model":"gem","stream":true,"messages":[{"role":"user","content":"Hi"}]}"#;
    let (s, up, _) = send(&mut vm, "/v1/chat/completions", body);
    assert_eq!(header(&up, ":path"), "/v1beta/models/gemini-x:streamGenerateContent?alt=sse");
    vm.response_headers(s, resp("200", &[("content-type", "text/event-stream")]), false).unwrap();
    let chunks = [
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hel"}]},"index":0}],"responseId":"r1"}"#,
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"lo"}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2,"totalTokenCount":6},"responseId":"r1"}"#,
    ];
    let mut out = String::new();
    for (i, c) in chunks.iter().enumerate() {
        vm.response_data(s, format!("data: {c}\r\n\r\n").as_bytes(), i + 1 == chunks.len()).unwrap();
        out.push_str(&String::from_utf8(response_body(&vm.take_events(s))).unwrap());
    }
    let datas: Vec<&str> = out.split("\n\n").filter_map(|e| e.strip_prefix("data: ")).collect();
    assert_eq!(datas.last(), Some(&"[DONE]"));
    let text: String = datas[..datas.len() - 1]
        .iter()
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str().map(str::to_string))
        .collect();
    assert_eq!(text, "Hello");
    let r = usage_record(&rt, &mut vm, s);
    assert_eq!((r["prompt_tokens"].as_u64(), r["completion_tokens"].as_u64()), (Some(4), Some(2)));
}
