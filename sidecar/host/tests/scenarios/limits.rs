//! The real filter's limits: counters shared by every worker VM of the proxy (exact under
//! interleaving), reservations at the door replaced by real usage at the end, 429 with
//! `Retry-After` for rates and 402 for budgets, in the caller's dialect.

use crate::common::*;
use ferrogate_host::{StreamEvent, Vm};
use serde_json::Value;

const CONFIG: &str = r#"{"config":{
  "providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[{"name":"chat","targets":[{"provider":"local","model":"sim-small"}]}],
  "groups":[{"name":"team","models":["*"],"limits":{"requests_per_minute":1}}],
  "keys":[
    {"name":"alice","digest":"sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c","groups":["team"]},
    {"name":"bob","digest":"sha256:36c76b48bb2ee1d9d37140550e9d7ed7d395cf56f41050dc2a72e5291c0011f0","models":["*"],
     "limits":{"tokens_per_day":1500}},
    {"name":"carol","digest":"sha256:1d0e7afc963efdf084924177294d02cc02800e540bf46e7b846529396be4eddf","models":["*"],
     "limits":{"cost_usd_per_day":0.0025}}],
  "pricing":{"sim-small":{"input_per_mtok":1.0,"output_per_mtok":2.0}}},
  "max_body_bytes":65536}"#;

/// Sends a chat request as `key` on a new stream of `vm`; returns the stream and its events.
fn ask(vm: &mut Vm, key: &str, body: &str) -> (u32, Vec<StreamEvent>) {
    let s = new_stream(vm);
    let auth = format!("Bearer {key}");
    vm.request_headers(s, req("POST", "/v1/chat/completions", &[("authorization", auth.as_str())]), false).unwrap();
    vm.request_data(s, body.as_bytes(), true).unwrap();
    (s, vm.take_events(s))
}

fn forwarded(events: &[StreamEvent]) -> bool {
    events.iter().any(|e| matches!(e, StreamEvent::RequestHeaders { .. }))
}

/// Answers a forwarded request with `prompt` + `completion` tokens of usage and ends it.
fn answer(vm: &mut Vm, s: u32, prompt: u64, completion: u64) {
    let body = format!(
        r#"{{"id":"x","object":"chat.completion","model":"sim-small","choices":[{{"index":0,"message":{{"role":"assistant","content":"ok"}},"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{prompt},"completion_tokens":{completion}}}}}"#
    );
    vm.response_headers(s, resp("200", &[("content-type", "application/json")]), false).unwrap();
    vm.response_data(s, body.as_bytes(), true).unwrap();
    vm.finish_stream(s, false);
}

/// 64 requests spread over four worker VMs, all admitted before any finishes, against a
/// group's 1 request per minute: exactly one goes through.
#[test]
fn one_request_per_minute_admits_exactly_one_across_vms() {
    let (rt, _vm) = crate::ferrogate_filter::vm_with(CONFIG);
    let mut vms: Vec<Vm> = (1..5).map(|i| rt.new_vm(i).unwrap()).collect();
    let mut through = 0;
    let mut refused = Vec::new();
    for i in 0..64 {
        let (_, events) = ask(&mut vms[i % 4], "sk-alice", r#"{"model":"chat","messages":[]}"#);
        if forwarded(&events) {
            through += 1;
        } else {
            refused.push(events);
        }
    }
    assert_eq!(through, 1);
    let events = &refused[0];
    let head = response_headers(events);
    assert_eq!(header(head, ":status"), "429");
    let retry: u64 = header(head, "retry-after").parse().unwrap();
    assert!((1..=120).contains(&retry), "{retry}");
    let body: Value = serde_json::from_slice(&response_body(events)).unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(body["error"]["message"].as_str().unwrap().contains("group team allows 1 requests per minute"));
    let _ = rt;
}

/// A token cap stops the key at the request whose reservation no longer fits, after earlier
/// reservations were replaced by real usage; a USD budget refuses with 402.
#[test]
fn token_caps_and_budgets_stop_the_key_at_the_right_request() {
    let (_rt, mut vm) = crate::ferrogate_filter::vm_with(CONFIG);
    // Each request reserves ~10 prompt tokens + 400 completion; each uses 500 in the end.
    let body = r#"{"model":"chat","max_tokens":400,"messages":[]}"#;
    for _ in 0..2 {
        let (s, events) = ask(&mut vm, "sk-bob", body);
        assert!(forwarded(&events));
        answer(&mut vm, s, 100, 400);
    }
    // 1000 used + ~412 reserved fits under 1500; once it has used 500 more, nothing does.
    let (s, events) = ask(&mut vm, "sk-bob", body);
    assert!(forwarded(&events), "1000 used + a 412 reservation fit in 1500");
    answer(&mut vm, s, 100, 400);
    let (_, events) = ask(&mut vm, "sk-bob", body);
    assert_eq!(header(response_headers(&events), ":status"), "429", "1500 used: the fourth is refused");

    // Budgets: carol's $0.0025/day = 2500 micro-USD. Two requests that use 900 µ$ each leave
    // 700; the third reserves ~813 µ$ (13 prompt tokens at $1/M, 400 at $2/M) and is refused.
    for _ in 0..2 {
        let (s, events) = ask(&mut vm, "sk-carol", body);
        assert!(forwarded(&events));
        answer(&mut vm, s, 100, 400);
    }
    let (_, events) = ask(&mut vm, "sk-carol", body);
    assert_eq!(header(response_headers(&events), ":status"), "402");
    let body: Value = serde_json::from_slice(&response_body(&events)).unwrap();
    assert_eq!(body["error"]["type"], "insufficient_quota");
}

/// A request whose client went away still settles: its reservation is replaced by what the
/// tracker saw (nothing here), so the room comes back.
#[test]
fn an_abandoned_request_gives_its_reservation_back() {
    let (_rt, mut vm) = crate::ferrogate_filter::vm_with(CONFIG);
    let body = r#"{"model":"chat","max_tokens":1400,"messages":[]}"#;
    let (s, events) = ask(&mut vm, "sk-bob", body);
    assert!(forwarded(&events));
    let (_, events) = ask(&mut vm, "sk-bob", body);
    assert_eq!(header(response_headers(&events), ":status"), "429", "the first holds the room");
    vm.finish_stream(s, true);
    let (_, events) = ask(&mut vm, "sk-bob", body);
    assert!(forwarded(&events), "released when the first ended");
}

/// A USD budget over a model without a price: served under `warn` (the default), 402 under
/// `block`.
#[test]
fn unpriced_models_follow_the_policy() {
    let unpriced =
        CONFIG.replace(r#""pricing":{"sim-small":{"input_per_mtok":1.0,"output_per_mtok":2.0}}"#, r#""pricing":{}"#);
    let (_rt, mut vm) = crate::ferrogate_filter::vm_with(&unpriced);
    let (_, events) = ask(&mut vm, "sk-carol", r#"{"model":"chat","messages":[]}"#);
    assert!(forwarded(&events), "warn serves it");
    let blocked = unpriced.replace(r#""pricing":{}"#, r#""pricing":{},"unpriced":"block""#);
    let (_rt, mut vm) = crate::ferrogate_filter::vm_with(&blocked);
    let (_, events) = ask(&mut vm, "sk-carol", r#"{"model":"chat","messages":[]}"#);
    assert_eq!(header(response_headers(&events), ":status"), "402");
    let (_, events) = ask(&mut vm, "sk-bob", r#"{"model":"chat","messages":[]}"#);
    assert!(forwarded(&events), "no USD budget applies to bob");
}
