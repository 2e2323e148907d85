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

pub(crate) fn forwarded(events: &[StreamEvent]) -> bool {
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

/// Keys whose streams overrun: dave and fay cut them (a token cap, a USD budget), erin lets
/// them run. Prices: 1 µ$ a prompt token, 2 µ$ a completion token. `claude` is served by an
/// Anthropic provider.
pub(crate) const OVERRUN: &str = r#"{"config":{
  "providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"},
    {"name":"claude-p","kind":"anthropic","base_url":"https://api.anthropic.com","api_key":"sk-ant-upstream"}],
  "models":[{"name":"chat","targets":[{"provider":"local","model":"sim-small"}]},
    {"name":"claude","targets":[{"provider":"claude-p","model":"claude-x"}]}],
  "keys":[
    {"name":"dave","digest":"sha256:501152388012ffde91fdb04068985171cc8ca85fbe18bd233679b25712b4b64a","models":["*"],
     "limits":{"tokens_per_day":1100,"overrun":"cut"}},
    {"name":"erin","digest":"sha256:1ba73778f50a157e4cdb409ed336a04eb85d97750c6972fbd452182df0defef0","models":["*"],
     "limits":{"tokens_per_day":1100}},
    {"name":"fay","digest":"sha256:d9d7c670bfef8bd3c7431c9ddf01102f47b31690d1008122cf356d85ccacda95","models":["*"],
     "limits":{"cost_usd_per_day":0.003,"overrun":"cut"}}],
  "pricing":{"sim-small":{"input_per_mtok":1.0,"output_per_mtok":2.0},"claude-x":{"input_per_mtok":1.0,"output_per_mtok":2.0}}},
  "max_body_bytes":65536}"#;

/// A streamed chat request without an output cap: admission reserves 1,024 completion tokens,
/// and the answer may run longer.
pub(crate) const STREAMED: &str =
    r#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"Tell me a long story."}]}"#;

/// The text every upstream event carries: 20 bytes, 5 tokens by the meter's estimate.
pub(crate) const TEXT: &str = "twenty bytes of text";

/// An OpenAI chat stream of `n` content events of [`TEXT`], then its finish, its usage (5
/// tokens an event) and `[DONE]`.
pub(crate) fn chat_stream(n: usize, prompt: u64) -> String {
    let chunk = |delta: &str, finish: &str| {
        let choice = format!(r#"{{"index":0,"delta":{delta},"finish_reason":{finish}}}"#);
        format!(r#"data: {{"id":"c","object":"chat.completion.chunk","model":"sim-small","choices":[{choice}]}}"#)
            + "\n\n"
    };
    let mut body: String = (0..n).map(|_| chunk(&format!(r#"{{"content":"{TEXT}"}}"#), "null")).collect();
    body += &chunk("{}", r#""stop""#);
    let usage = format!(r#"{{"prompt_tokens":{prompt},"completion_tokens":{}}}"#, 5 * n);
    body + &format!("data: {{\"id\":\"c\",\"choices\":[],\"usage\":{usage}}}\n\ndata: [DONE]\n\n")
}

/// An Anthropic Messages stream of `n` text deltas of [`TEXT`].
pub(crate) fn anthropic_stream(n: usize) -> String {
    let event = |data: String| {
        let name = serde_json::from_str::<Value>(&data).unwrap()["type"].as_str().unwrap().to_string();
        format!("event: {name}\ndata: {data}\n\n")
    };
    let mut body = event(
        r#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":12,"output_tokens":1}}}"#.into(),
    );
    body += &event(r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#.into());
    for _ in 0..n {
        body += &event(format!(
            r#"{{"type":"content_block_delta","index":0,"delta":{{"type":"text_delta","text":"{TEXT}"}}}}"#
        ));
    }
    body += &event(r#"{"type":"content_block_stop","index":0}"#.into());
    body += &event(format!(
        r#"{{"type":"message_delta","delta":{{"stop_reason":"end_turn"}},"usage":{{"output_tokens":{}}}}}"#,
        5 * n
    ));
    body + &event(r#"{"type":"message_stop"}"#.into())
}

/// Sends `body` to `path` as `key` (an `x-api-key`); the request must go through.
pub(crate) fn send_as(vm: &mut Vm, key: &str, path: &str, body: &str) -> u32 {
    let s = new_stream(vm);
    vm.request_headers(s, req("POST", path, &[("x-api-key", key), ("content-type", "application/json")]), false)
        .unwrap();
    vm.request_data(s, body.as_bytes(), true).unwrap();
    assert!(forwarded(&vm.take_events(s)), "{path} as {key} was not forwarded");
    s
}

/// Streams `body` to `s` in 97-byte pieces (events cut anywhere); returns what the client got.
pub(crate) fn stream_answer(vm: &mut Vm, s: u32, body: &str) -> String {
    vm.response_headers(s, resp("200", &[("content-type", "text/event-stream")]), false).unwrap();
    let mut got = Vec::new();
    let pieces: Vec<&[u8]> = body.as_bytes().chunks(97).collect();
    for (i, piece) in pieces.iter().enumerate() {
        vm.response_data(s, piece, i + 1 == pieces.len()).unwrap();
        got.extend(response_body(&vm.take_events(s)));
    }
    String::from_utf8(got).unwrap()
}

/// Each event of an SSE body: its `event:` name, if any, and its `data`.
pub(crate) fn sse_events(body: &str) -> Vec<(Option<&str>, &str)> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: "));
            (name, e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or_default())
        })
        .collect()
}

/// How many events of `body` carry [`TEXT`]; checks that the first one past `allowance`
/// tokens was the last delivered.
pub(crate) fn delivered_events(body: &str, allowance: u64) -> u64 {
    let n = sse_events(body).iter().filter(|(_, d)| d.contains(TEXT)).count() as u64;
    assert!(5 * n > allowance && 5 * (n - 1) <= allowance, "{n} events delivered for {allowance} tokens");
    n
}

/// The key's own count on its tokens-per-day counter (the second word of the entry).
pub(crate) fn tokens_counted(rt: &ferrogate_host::Runtime, key: &str) -> u64 {
    let counter = format!("ferrogate.limit.key.{key}.tokens.day");
    let (bytes, _) = rt.shared().get_shared_data("ferrogate", &counter).unwrap();
    u64::from_le_bytes(bytes[8..16].try_into().unwrap())
}

/// `overrun: cut`: an answer longer than the 1,024 tokens reserved for it stops after the event
/// that takes it past what the key has left (1,100 tokens a day less the prompt), ends with an
/// OpenAI error event and `[DONE]`, and is billed for what was delivered; the key's next
/// request is refused.
#[test]
fn a_stream_past_its_budget_is_cut_and_billed_for_what_was_delivered() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(OVERRUN);
    let prompt = STREAMED.len().div_ceil(4) as u64;
    let s = send_as(&mut vm, "sk-dave", "/v1/chat/completions", STREAMED);
    let got = stream_answer(&mut vm, s, &chat_stream(300, prompt));
    let delivered = delivered_events(&got, 1100 - prompt);
    let events = sse_events(&got);
    let n = events.len();
    assert_eq!(n as u64, delivered + 2, "the content, the error, [DONE]: {got}");
    let error: Value = serde_json::from_str(events[n - 2].1).unwrap();
    assert_eq!(error["error"]["code"], "rate_limit_exceeded");
    assert!(error["error"]["message"].as_str().unwrap().contains("key dave allows 1100 tokens per day"), "{error}");
    assert_eq!(events[n - 1].1, "[DONE]");
    assert!(!got.contains("\"stop\""), "nothing after the cut reaches the client");

    let record = crate::translation::usage_record(&rt, &mut vm, s);
    assert_eq!((record["status"].as_u64(), record["completion_tokens"].as_u64()), (Some(200), Some(5 * delivered)));
    assert_eq!((record["cut"].as_bool(), record["admitted"].as_bool()), (Some(true), Some(true)), "{record}");
    assert_eq!(record["prompt_tokens"].as_u64(), Some(prompt), "the provider never said: admission's estimate");
    assert_eq!(record["cost_micro_usd"].as_u64(), Some(prompt + 2 * 5 * delivered));
    assert_eq!(tokens_counted(&rt, "dave"), prompt + 5 * delivered, "settled at what was delivered");
    assert!(
        crate::ferrogate_filter::labelled_metrics(&rt).contains("ferrogate_limit_cuts_total{metric=\"tokens\"} 1\n")
    );
    let (_, events) = ask(&mut vm, "sk-dave", r#"{"model":"chat","max_tokens":1,"messages":[]}"#);
    assert_eq!(header(response_headers(&events), ":status"), "429", "the budget is spent");
}

/// Without the policy (`allow`, the default) the same stream is delivered whole and billed at
/// the provider's count.
#[test]
fn without_the_policy_the_stream_runs_to_its_end() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(OVERRUN);
    let prompt = STREAMED.len().div_ceil(4) as u64;
    let s = send_as(&mut vm, "sk-erin", "/v1/chat/completions", STREAMED);
    let got = stream_answer(&mut vm, s, &chat_stream(300, prompt));
    let events = sse_events(&got);
    assert_eq!(events.iter().filter(|(_, d)| d.contains(TEXT)).count(), 300);
    assert!(!got.contains("\"error\""));
    assert_eq!(events.last().map(|e| e.1), Some("[DONE]"));
    let record = crate::translation::usage_record(&rt, &mut vm, s);
    assert_eq!(record["completion_tokens"].as_u64(), Some(1500));
    assert_eq!(record["cut"].as_bool(), Some(false));
    assert_eq!(tokens_counted(&rt, "erin"), prompt + 1500);
    let (_, events) = ask(&mut vm, "sk-erin", r#"{"model":"chat","max_tokens":1,"messages":[]}"#);
    assert_eq!(header(response_headers(&events), ":status"), "429", "the overrun was billed");
}

/// An OpenAI client served by an Anthropic provider (asked for 4,096 tokens where admission
/// reserved 1,024), under a USD budget: the translated stream is cut after its allowance (the
/// budget's room at 2 µ$ a token), ends with an OpenAI `insufficient_quota` error event and
/// `[DONE]`, and is billed for what was delivered (the prompt as Anthropic counted it); the
/// next request is refused 402.
#[test]
fn a_translated_stream_is_cut_in_the_clients_dialect() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(OVERRUN);
    let body = STREAMED.replace(r#""chat""#, r#""claude""#);
    let prompt = body.len().div_ceil(4) as u64;
    let s = send_as(&mut vm, "sk-fay", "/v1/chat/completions", &body);
    let got = stream_answer(&mut vm, s, &anthropic_stream(400));
    let delivered = delivered_events(&got, (3000 - prompt) / 2);
    let events = sse_events(&got);
    let error: Value = serde_json::from_str(events[events.len() - 2].1).unwrap();
    assert_eq!(error["error"]["type"], "insufficient_quota", "{got}");
    assert_eq!(events.last().unwrap().1, "[DONE]");
    assert!(!got.contains("finish_reason\":\"stop"));
    let record = crate::translation::usage_record(&rt, &mut vm, s);
    assert_eq!(
        (record["prompt_tokens"].as_u64(), record["completion_tokens"].as_u64()),
        (Some(12), Some(5 * delivered))
    );
    assert_eq!(record["cost_micro_usd"].as_u64(), Some(12 + 10 * delivered));
    assert!(crate::ferrogate_filter::labelled_metrics(&rt).contains("ferrogate_limit_cuts_total{metric=\"usd\"} 1\n"));
    let (_, events) = ask(&mut vm, "sk-fay", r#"{"model":"chat","max_tokens":1,"messages":[]}"#);
    assert_eq!(header(response_headers(&events), ":status"), "402");
}

/// An Anthropic client served by an OpenAI-compatible provider whose stream runs past the
/// request's own `max_tokens`: cut with Anthropic's `event: error` (`rate_limit_error`) and no
/// `message_stop`. A Responses client: cut with its `error` event, numbered after the last one.
#[test]
fn anthropic_and_responses_clients_get_their_own_final_events() {
    let (_rt, mut vm) = crate::ferrogate_filter::vm_with(OVERRUN);
    let body = r#"{"model":"chat","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Hi"}]}"#;
    let prompt = body.len().div_ceil(4) as u64;
    let s = send_as(&mut vm, "sk-dave", "/v1/messages", body);
    let got = stream_answer(&mut vm, s, &chat_stream(300, prompt));
    delivered_events(&got, 1100 - prompt);
    let (name, data) = *sse_events(&got).last().unwrap();
    assert_eq!(name, Some("error"));
    let error: Value = serde_json::from_str(data).unwrap();
    assert_eq!((error["type"].as_str(), error["error"]["type"].as_str()), (Some("error"), Some("rate_limit_error")));
    assert!(!got.contains("message_stop"), "{got}");

    let (_rt, mut vm) = crate::ferrogate_filter::vm_with(OVERRUN);
    let body = r#"{"model":"chat","stream":true,"input":"Tell me a long story."}"#;
    let prompt = body.len().div_ceil(4) as u64;
    let s = send_as(&mut vm, "sk-dave", "/v1/responses", body);
    let got = stream_answer(&mut vm, s, &chat_stream(300, prompt));
    delivered_events(&got, 1100 - prompt);
    let events = sse_events(&got);
    let (name, data) = *events.last().unwrap();
    assert_eq!(name, Some("error"));
    let error: Value = serde_json::from_str(data).unwrap();
    let before: Value = serde_json::from_str(events[events.len() - 2].1).unwrap();
    assert_eq!(error["code"], "rate_limit_exceeded");
    assert_eq!(error["sequence_number"].as_u64(), before["sequence_number"].as_u64().map(|n| n + 1));
    assert!(!got.contains("response.completed"), "{got}");
}
