//! The real filter's data path with virtual keys: every status of SPEC's table the filter
//! decides (400, 401, 403, 404, 413, 503) in the caller's dialect, every resolution form,
//! usage records on the shared queue, and the injected usage chunk hidden from the client.

use crate::common::*;
use ferrogate_host::{Runtime, StreamEvent, Vm};

const CONFIG: &str = r#"{"config":{
  "providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[
    {"name":"chat","targets":[{"provider":"local","model":"sim-small"}],"fallbacks":["backup"]},
    {"name":"backup","targets":[{"provider":"local","model":"sim-tiny"}]},
    {"name":"embed","targets":[{"provider":"local","model":"sim-embed"}]}],
  "aliases":{"default":"chat"},
  "groups":[{"name":"dev","models":["chat"]}],
  "keys":[
    {"name":"alice","digest":"sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c","groups":["dev"],"models":["local/*"]},
    {"name":"bob","digest":"sha256:36c76b48bb2ee1d9d37140550e9d7ed7d395cf56f41050dc2a72e5291c0011f0","models":["embed"]},
    {"name":"old","digest":"sha256:d3e64608f5182a4408eef248830800d9f4b82167cb91b4b193ac488aa1235fc9","models":["*"],"expires_at":"2020-01-01T00:00:00Z"}],
  "pricing":{"sim-small":{"input_per_mtok":1.0,"output_per_mtok":2.0}}},
  "max_body_bytes":4096}"#;

fn keyed_vm(config: &str) -> (Runtime, Vm) {
    crate::ferrogate_filter::vm_with(config)
}

/// Runs a POST with `key` (as `Authorization: Bearer`) and returns the events.
fn call(vm: &mut Vm, path: &str, key: Option<&str>, body: &str) -> Vec<StreamEvent> {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut extra = vec![("content-type", "application/json")];
    if let Some(a) = &auth {
        extra.push(("authorization", a.as_str()));
    }
    let s = new_stream(vm);
    vm.request_headers(s, req("POST", path, &extra), false).unwrap();
    let mut events = vm.take_events(s);
    if !events.iter().any(|e| matches!(e, StreamEvent::ResponseHeaders { .. })) {
        vm.request_data(s, body.as_bytes(), true).unwrap();
        events.extend(vm.take_events(s));
    }
    events
}

fn status(events: &[StreamEvent]) -> String {
    header(response_headers(events), ":status")
}

fn reply_json(events: &[StreamEvent]) -> serde_json::Value {
    let body = response_body(events);
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)))
}

fn forwarded_model(events: &[StreamEvent]) -> String {
    let body = request_body(events);
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    json["model"].as_str().unwrap().to_string()
}

#[test]
fn statuses_in_the_openai_dialect() {
    let (_rt, mut vm) = keyed_vm(CONFIG);
    let chat = r#"{"model":"chat","messages":[]}"#;
    let cases: [(Option<&str>, &str, &str); 8] = [
        (None, chat, "401"),
        (Some("sk-nobody"), chat, "401"),
        (Some("sk-old"), chat, "401"),
        (Some("sk-bob"), chat, "403"),
        (Some("sk-bob"), r#"{"model":"nope","messages":[]}"#, "404"),
        (Some("sk-alice"), "{not json", "400"),
        (Some("sk-alice"), r#"{"messages":[]}"#, "400"),
        (Some("sk-alice"), &format!(r#"{{"model":"chat","x":"{}"}}"#, "y".repeat(5000)), "413"),
    ];
    for (key, body, want) in cases {
        let events = call(&mut vm, "/v1/chat/completions", key, body);
        assert_eq!(status(&events), want, "key {key:?} body {}", &body[..body.len().min(40)]);
        let json = reply_json(&events);
        assert!(json["error"]["message"].is_string(), "{json}");
        assert!(!events.iter().any(|e| matches!(e, StreamEvent::RequestHeaders { .. })), "nothing goes upstream");
    }
}

#[test]
fn errors_follow_the_callers_dialect() {
    let (_rt, mut vm) = keyed_vm(CONFIG);
    let events = call(&mut vm, "/v1/messages", None, "{}");
    assert_eq!(status(&events), "401");
    let json = reply_json(&events);
    assert_eq!(json["type"], "error");
    assert_eq!(json["error"]["type"], "authentication_error");
    let events = call(&mut vm, "/v1beta/models/chat:generateContent", None, "{}");
    let json = reply_json(&events);
    assert_eq!(json["error"]["code"], 401);
    assert_eq!(json["error"]["status"], "UNAUTHENTICATED");
}

#[test]
fn every_resolution_form_routes() {
    let (_rt, mut vm) = keyed_vm(CONFIG);
    for (model, upstream) in [
        ("chat", "sim-small"),
        ("default", "sim-small"),       // alias of a granted model
        ("backup", "sim-tiny"),         // fallback of a granted model
        ("local/anything", "anything"), // provider/* grant, id passed through
    ] {
        let body = format!(r#"{{"model":"{model}","messages":[]}}"#);
        let events = call(&mut vm, "/v1/chat/completions", Some("sk-alice"), &body);
        assert_eq!(forwarded_model(&events), upstream, "{model}");
        let StreamEvent::RequestHeaders { headers, .. } = &events[0] else { panic!("{events:?}") };
        assert!(headers.get("authorization").is_none(), "the client key never goes upstream");
    }
}

#[test]
fn models_list_is_filtered_per_key() {
    let (_rt, mut vm) = keyed_vm(CONFIG);
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("GET", "/v1/models", &[("x-api-key", "sk-bob")]), true).unwrap();
    let events = vm.take_events(s);
    let ids: Vec<String> =
        reply_json(&events)["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids, ["embed"]);
}

#[test]
fn streamed_usage_is_recorded_and_the_injected_chunk_hidden() {
    let (rt, mut vm) = keyed_vm(CONFIG);
    let body = r#"{"model":"chat","stream":true,"messages":[]}"#;
    let s = new_stream(&mut vm);
    let auth = [("authorization", "Bearer sk-alice"), ("x-request-id", "rid-usage")];
    vm.request_headers(s, req("POST", "/v1/chat/completions", &auth), false).unwrap();
    vm.request_data(s, body.as_bytes(), true).unwrap();
    let events = vm.take_events(s);
    let forwarded: serde_json::Value = serde_json::from_slice(match &events[1] {
        StreamEvent::RequestData { data, .. } => data,
        other => panic!("{other:?}"),
    })
    .unwrap();
    assert_eq!(forwarded["stream_options"]["include_usage"], true, "the gateway asks for usage");
    vm.response_headers(s, resp("200", &[("content-type", "text/event-stream")]), false).unwrap();
    let content = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
    let usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n";
    let done = "data: [DONE]\n\n";
    let stream = format!("{content}{usage}{done}");
    let (a, b) = stream.as_bytes().split_at(content.len() + 10); // split inside the usage event
    vm.response_data(s, a, false).unwrap();
    vm.response_data(s, b, true).unwrap();
    let sent = response_body(&vm.take_events(s));
    assert_eq!(String::from_utf8(sent).unwrap(), format!("{content}{done}"), "usage chunk hidden");
    vm.finish_stream(s, false);
    let record = dequeue_record(&rt, &mut vm);
    assert_eq!(record["request_id"], "rid-usage");
    assert_eq!(record["key"], "alice");
    assert_eq!(record["groups"], serde_json::json!(["dev"]));
    assert_eq!(record["prompt_tokens"], 7);
    assert_eq!(record["completion_tokens"], 3);
    assert_eq!(record["cost_micro_usd"], 13); // 7 × $1 + 3 × $2 per million tokens
    assert_eq!(record["streamed"], true);
    assert_eq!(record["status"], 200);
}

#[test]
fn client_disconnect_is_recorded_as_499() {
    let (rt, mut vm) = keyed_vm(CONFIG);
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/v1/chat/completions", &[("x-api-key", "sk-alice")]), false).unwrap();
    vm.request_data(s, br#"{"model":"chat","stream":true}"#, true).unwrap();
    vm.response_headers(s, resp("200", &[("content-type", "text/event-stream")]), false).unwrap();
    vm.response_data(s, b"data: {\"choices\":[]}\n\n", false).unwrap();
    vm.finish_stream(s, true);
    assert_eq!(dequeue_record(&rt, &mut vm)["status"], 499);
}

/// Records wait in the VM's outbox until a full batch or the tick; without a sidecar the
/// root then logs them. Nothing reaches the queue before the tick.
fn dequeue_record(rt: &Runtime, vm: &mut Vm) -> serde_json::Value {
    assert!(rt.shared().take_from_queue("ferrogate", "ferrogate.usage").is_none(), "one record is not a batch yet");
    vm.on_tick().unwrap();
    let logs = vm.take_logs();
    let lines: Vec<&str> = logs.iter().filter_map(|(_, m)| m.strip_prefix("usage ")).collect();
    assert_eq!(lines.len(), 1, "{logs:?}");
    serde_json::from_str(lines[0]).unwrap()
}

#[test]
fn usage_records_reach_the_queue_in_batches_of_64() {
    let (rt, mut vm) = keyed_vm(CONFIG);
    let queued = || rt.shared().take_from_queue("ferrogate", "ferrogate.usage");
    for i in 0..64 {
        assert!(queued().is_none(), "record {i} posted before the batch was full");
        let s = new_stream(&mut vm);
        let headers = req("POST", "/v1/chat/completions", &[("authorization", "Bearer sk-alice")]);
        vm.request_headers(s, headers, false).unwrap();
        vm.request_data(s, br#"{"model":"chat"}"#, true).unwrap();
        vm.finish_stream(s, true);
    }
    let batch = queued().expect("a full outbox is one queue item");
    let lines: Vec<&[u8]> = batch.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len(), 64);
    for line in lines {
        let record: serde_json::Value = serde_json::from_slice(line).unwrap();
        assert_eq!(record["key"], "alice");
    }
    assert!(queued().is_none());
}

/// Runs `n` routed requests whose clients go away (one 499 record each).
fn abandoned_requests(vm: &mut Vm, n: usize) {
    for _ in 0..n {
        let s = new_stream(vm);
        let headers = req("POST", "/v1/chat/completions", &[("authorization", "Bearer sk-alice")]);
        vm.request_headers(s, headers, false).unwrap();
        vm.request_data(s, br#"{"model":"chat"}"#, true).unwrap();
        vm.finish_stream(s, true);
    }
}

/// The one usage post the tick made (snapshot and targets polls aside): its token and how many
/// records it carried.
fn usage_post(vm: &mut Vm) -> (u32, usize) {
    let polls = ["/v1/snapshot", "/v1/targets"];
    let calls: Vec<_> =
        vm.take_http_calls().into_iter().filter(|c| !polls.contains(&header(&c.headers, ":path").as_str())).collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let call = &calls[0];
    assert_eq!(call.cluster, "ferrogate_sidecar");
    assert_eq!(header(&call.headers, ":path"), "/v1/usage");
    assert_eq!(header(&call.headers, "authorization"), "Bearer t0k");
    (call.token, call.body.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count())
}

fn sidecar_answer(status: &str) -> Option<ferrogate_host::HttpCallResponse> {
    Some(ferrogate_host::HttpCallResponse {
        headers: ferrogate_host::Headers::from_pairs([(":status", status)]),
        body: Vec::new(),
        trailers: ferrogate_host::Headers::new(),
    })
}

#[test]
fn usage_batches_are_posted_to_the_sidecar_and_kept_until_acknowledged() {
    let with_sidecar = CONFIG.replace(
        r#""max_body_bytes":4096}"#,
        r#""max_body_bytes":4096,"sidecar_cluster":"ferrogate_sidecar","internal_token":"t0k"}"#,
    );
    let (_rt, mut vm) = keyed_vm(&with_sidecar);
    abandoned_requests(&mut vm, 3);
    assert!(vm.take_http_calls().is_empty(), "nothing is posted before the tick");
    vm.on_tick().unwrap();
    let (token, records) = usage_post(&mut vm);
    assert_eq!(records, 3);
    // The sidecar is down: the records stay and go again on the next tick.
    vm.http_call_response(token, sidecar_answer("503")).unwrap();
    vm.on_tick().unwrap();
    let (token, records) = usage_post(&mut vm);
    assert_eq!(records, 3, "the failed batch is retried whole");
    abandoned_requests(&mut vm, 2);
    vm.http_call_response(token, sidecar_answer("200")).unwrap();
    vm.on_tick().unwrap();
    assert_eq!(usage_post(&mut vm).1, 2, "acknowledged records are not sent again");
}

/// A batch the sidecar refuses (400) is dropped, not resent forever ahead of every later
/// record; a 429 is about the call and is retried.
#[test]
fn a_refused_usage_batch_does_not_block_later_ones() {
    let with_sidecar = CONFIG.replace(
        r#""max_body_bytes":4096}"#,
        r#""max_body_bytes":4096,"sidecar_cluster":"ferrogate_sidecar","internal_token":"t0k"}"#,
    );
    let (_rt, mut vm) = keyed_vm(&with_sidecar);
    abandoned_requests(&mut vm, 3);
    vm.on_tick().unwrap();
    let (token, _) = usage_post(&mut vm);
    vm.http_call_response(token, sidecar_answer("429")).unwrap();
    vm.on_tick().unwrap();
    let (token, records) = usage_post(&mut vm);
    assert_eq!(records, 3, "429 is retried");
    vm.http_call_response(token, sidecar_answer("400")).unwrap();
    abandoned_requests(&mut vm, 2);
    vm.on_tick().unwrap();
    assert_eq!(usage_post(&mut vm).1, 2, "the refused batch is gone, the next one goes out");
}

#[test]
fn no_snapshot_yet_is_503() {
    // A sidecar-fed filter before its first snapshot.
    let (_rt, mut vm) = keyed_vm(r#"{"sidecar_cluster":"ferrogate_sidecar"}"#);
    let events = call(&mut vm, "/v1/chat/completions", Some("sk-alice"), r#"{"model":"chat"}"#);
    assert_eq!(status(&events), "503");
    assert!(reply_json(&events)["error"]["message"].as_str().unwrap().contains("snapshot"));
}

#[test]
fn metrics_count_requests_tokens_and_times() {
    let (rt, mut vm) = keyed_vm(CONFIG);
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/v1/chat/completions", &[("x-api-key", "sk-alice")]), false).unwrap();
    vm.request_data(s, br#"{"model":"chat"}"#, true).unwrap();
    vm.response_headers(s, resp("200", &[("content-type", "application/json")]), false).unwrap();
    vm.response_data(s, br#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#, true).unwrap();
    vm.finish_stream(s, false);
    let text = crate::ferrogate_filter::labelled_metrics(&rt);
    let at = r#"{model="chat",provider="local"}"#;
    assert!(text.contains(&format!("ferrogate_request_duration_ms_count{at} 1\n")), "recorded at once: {text}");
    assert!(text.contains("ferrogate_filter_duration_us_count 1\n"), "{text}");
    // Counters are summed in the VM and handed over on the tick.
    vm.on_tick().unwrap();
    let text = crate::ferrogate_filter::labelled_metrics(&rt);
    for line in [
        r#"ferrogate_requests_total{api="chat_completions",model="chat",provider="local",status="200",status_class="2xx"} 1"#,
        r#"ferrogate_tokens_total{model="chat",provider="local",type="input"} 4"#,
        r#"ferrogate_tokens_total{model="chat",provider="local",type="output"} 2"#,
        r#"ferrogate_upstream_attempts_total{provider="local"} 1"#,
    ] {
        assert!(text.contains(&format!("{line}\n")), "{line} missing from {text}");
    }
}

/// Runs one finished request: POST `path` with `key` and `body`, the upstream answering 200.
fn finished(vm: &mut Vm, path: &str, key: Option<&str>, body: &str) {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut extra = vec![("content-type", "application/json")];
    extra.extend(auth.as_deref().map(|a| ("authorization", a)));
    let s = new_stream(vm);
    vm.request_headers(s, req("POST", path, &extra), false).unwrap();
    if !vm.take_events(s).iter().any(|e| matches!(e, StreamEvent::ResponseHeaders { .. })) {
        vm.request_data(s, body.as_bytes(), true).unwrap();
        if !vm.take_events(s).iter().any(|e| matches!(e, StreamEvent::ResponseHeaders { .. })) {
            vm.response_headers(s, resp("200", &[("content-type", "application/json")]), false).unwrap();
            vm.response_data(s, br#"{"choices":[]}"#, true).unwrap();
        }
    }
    vm.finish_stream(s, false);
}

#[test]
fn every_request_is_counted_with_labels_the_config_bounds() {
    let (rt, mut vm) = keyed_vm(CONFIG);
    for i in 0..40 {
        finished(&mut vm, "/v1/chat/completions", Some("sk-alice"), &format!(r#"{{"model":"made-up-{i}"}}"#));
    }
    finished(&mut vm, "/v1/chat/completions", None, r#"{"model":"chat"}"#);
    finished(&mut vm, "/v1/nowhere", Some("sk-alice"), "{}");
    finished(&mut vm, "/v1/chat/completions", Some("sk-alice"), "not json");
    finished(&mut vm, "/v1/chat/completions", Some("sk-alice"), r#"{"model":"local/anything"}"#);
    vm.on_tick().unwrap();
    let text = crate::ferrogate_filter::labelled_metrics(&rt);
    assert!(!text.contains("made-up"), "a client's model name never becomes a label: {text}");
    for line in [
        r#"ferrogate_requests_total{api="chat_completions",model="unknown",provider="none",status="404",status_class="4xx"} 40"#,
        r#"ferrogate_errors_total{api="chat_completions",model="unknown",provider="none",reason="model_not_found"} 40"#,
        r#"ferrogate_requests_total{api="chat_completions",model="unknown",provider="none",status="401",status_class="4xx"} 1"#,
        r#"ferrogate_requests_total{api="unknown",model="unknown",provider="none",status="404",status_class="4xx"} 1"#,
        r#"ferrogate_requests_total{api="chat_completions",model="unknown",provider="none",status="400",status_class="4xx"} 1"#,
        r#"ferrogate_requests_total{api="chat_completions",model="local/*",provider="local",status="200",status_class="2xx"} 1"#,
    ] {
        assert!(text.contains(&format!("{line}\n")), "{line} missing from {text}");
    }
}
