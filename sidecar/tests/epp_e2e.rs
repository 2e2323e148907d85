//! End to end: `ferrogate serve --epp-listen` as a Gateway API Inference Extension endpoint
//! picker. The test plays the gateway (Envoy's ext_proc client, from the same `envoy-types`
//! protos) against a config whose models target a pool of two `ferrogate sim` engines, with
//! virtual keys configured: BUFFERED and FULL_DUPLEX_STREAMED picks (header and `envoy.lb`
//! metadata agree, and name one of the pool's engines), an unknown key answered 401 as an
//! immediate response, and the response path ending in a usage record.

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Msg;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Out;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, CommonResponse, HttpHeaders, ProcessingRequest, ProcessingResponse,
};
use envoy_types::pb::google::protobuf::value::Kind;
use ferrogate_sidecar::services::usage::Query;
use serde_json::json;
use tonic::Streaming;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, Setup};
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;
#[path = "common/ext_proc.rs"]
mod ext_proc;
use ext_proc::*;

/// A gateway serving the EPP on a free port over a pool of two sims; the engines and a key.
async fn setup() -> (Setup, SocketAddr, Vec<String>, String) {
    let sims = [start_sim(&["--model", "base"]).await, start_sim(&["--model", "base"]).await];
    let endpoints: Vec<String> = sims.iter().map(|s| s.to_string()).collect();
    let listed: Vec<String> = endpoints.iter().map(|e| format!("'{e}'")).collect();
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://{}', endpoints: [{}] }}",
        sims[0],
        listed.join(", ")
    );
    let models = "  - { name: chat, targets: [{ provider: pool, model: base }] }\n\
                  \x20 - { name: metered, targets: [{ provider: pool, model: base }] }\n";
    let (key, digest) = ferrogate_sidecar::cli::new_key();
    let keys = format!("keys:\n  - {{ name: alice, digest: '{digest}', models: ['*'] }}\n");
    // Port 0: the EPP binds a free port of its own, read back from the gateway.
    let flags = ["--epp-listen", "127.0.0.1:0"];
    let setup = gateway_flags(std::slice::from_ref(&provider), models, &keys, 2, &flags).await;
    let epp = setup.gateway.epp_addr().expect("the EPP listens");
    (setup, epp, endpoints, key)
}

/// (a) BUFFERED: headers answered at once, the body's reply carries the pick.
async fn buffered_pick(epp: SocketAddr, key: &str, engines: &[String]) {
    let endpoint = buffered_pick_of(epp, key, &chat("chat"), &[]).await;
    assert!(engines.contains(&endpoint), "{endpoint} is one of {engines:?}");
}

/// (b) FULL_DUPLEX_STREAMED: the headers reply comes only after the last chunk, then the body.
async fn duplex_pick(epp: SocketAddr, key: &str, engines: &[String]) {
    let (tx, mut replies) = open(epp).await;
    let payload = chat("chat");
    tx.send(request_headers(key, payload.len(), FULL_DUPLEX)).await.unwrap();
    let parts: Vec<&[u8]> = payload.chunks(payload.len() / 3 + 1).collect();
    for (i, part) in parts.iter().enumerate() {
        tx.send(body(part, i + 1 == parts.len(), false)).await.unwrap();
    }
    let reply = next(&mut replies).await;
    let Some(Out::RequestHeaders(h)) = &reply.response else { panic!("not a headers reply: {reply:?}") };
    let endpoint = pick(&reply, h.response.as_ref().unwrap());
    assert!(engines.contains(&endpoint), "{endpoint} is one of {engines:?}");
    let mut echoed = Vec::new();
    loop {
        let reply = next(&mut replies).await;
        let Some(Out::RequestBody(b)) = reply.response else { panic!("not a body reply") };
        let mutation = b.response.and_then(|c| c.body_mutation).and_then(|m| m.mutation);
        let Some(body_mutation::Mutation::StreamedResponse(s)) = mutation else { panic!("not streamed") };
        echoed.extend_from_slice(&s.body);
        if s.end_of_stream {
            break;
        }
    }
    assert!(serde_json::from_slice::<serde_json::Value>(&echoed).is_ok(), "the body comes back whole");
}

/// (c) An unknown virtual key: the filter's 401 as an immediate response.
async fn unknown_key(epp: SocketAddr) {
    let (tx, mut replies) = open(epp).await;
    let payload = chat("chat");
    tx.send(request_headers("sk-not-a-key", payload.len(), FULL_DUPLEX)).await.unwrap();
    // The filter may answer from the headers alone; the body may then find the stream closed.
    let _ = tx.send(body(&payload, true, false)).await;
    let reply = next(&mut replies).await;
    let Some(Out::ImmediateResponse(r)) = &reply.response else { panic!("not immediate: {reply:?}") };
    assert_eq!(r.status.as_ref().map(|s| s.code), Some(401), "{r:?}");
    assert!(!r.body.is_empty(), "an error body in the caller's dialect");
}

/// (d) The response path: headers and a JSON body with usage; a usage record follows.
async fn response_usage(setup: &Setup, epp: SocketAddr, key: &str) {
    let (tx, mut replies) = open(epp).await;
    let payload = chat("metered");
    tx.send(request_headers(key, payload.len(), FULL_DUPLEX)).await.unwrap();
    tx.send(body(&payload, true, false)).await.unwrap();
    while !matches!(next(&mut replies).await.response, Some(Out::RequestBody(b)) if is_last(&b.response)) {}
    let answer = json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "base",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}});
    let answer = serde_json::to_vec(&answer).unwrap();
    let length = answer.len().to_string();
    let head = header_map(&[(":status", "200"), ("content-type", "application/json"), ("content-length", &length)]);
    let headers = HttpHeaders { headers: Some(head), end_of_stream: false, ..Default::default() };
    tx.send(ProcessingRequest { request: Some(Msg::ResponseHeaders(headers)), ..Default::default() }).await.unwrap();
    tx.send(body(&answer, true, true)).await.unwrap();
    let reply = next(&mut replies).await;
    assert!(matches!(reply.response, Some(Out::ResponseHeaders(_))), "{reply:?}");
    while !matches!(next(&mut replies).await.response, Some(Out::ResponseBody(b)) if is_last(&b.response)) {}
    drop(tx);
    let r = first_usage(setup, "metered").await;
    assert_eq!((r.status, r.prompt_tokens, r.completion_tokens), (200, 11, 3), "{r:?}");
}

/// The first usage record of `model`, once the stream that makes it has ended.
async fn first_usage(setup: &Setup, model: &str) -> ferrogate_core::usage::Record {
    let query = Query { model: Some(model.into()), ..Query::default() };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let records = setup.gateway.usage().query(&query).await.unwrap().records;
        if let Some(r) = records.into_iter().next() {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "no usage record for the EPP's stream");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the gateway forwards for one STREAMED chunk `sent` (of the response when `response`),
/// from the picker's reply to it: the body the reply puts in its place, or the chunk as sent.
fn forwarded(reply: ProcessingResponse, sent: &[u8], response: bool) -> Vec<u8> {
    let common = match (reply.response, response) {
        (Some(Out::RequestBody(b)), false) | (Some(Out::ResponseBody(b)), true) => b.response,
        (other, _) => panic!("not a body reply of the right side: {other:?}"),
    };
    match common.and_then(|c| c.body_mutation).and_then(|m| m.mutation) {
        Some(body_mutation::Mutation::Body(replaced)) => replaced,
        None => sent.to_vec(),
        other => panic!("unexpected mutation {other:?}"),
    }
}

/// Whether a body reply is the last streamed chunk.
fn is_last(common: &Option<CommonResponse>) -> bool {
    let mutation = common.as_ref().and_then(|c| c.body_mutation.as_ref()).and_then(|m| m.mutation.as_ref());
    matches!(mutation, Some(body_mutation::Mutation::StreamedResponse(s)) if s.end_of_stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epp_picks_refuses_and_records_usage() {
    let (setup, epp, engines, key) = setup().await;
    buffered_pick(epp, &key, &engines).await;
    duplex_pick(epp, &key, &engines).await;
    unknown_key(epp).await;
    response_usage(&setup, epp, &key).await;
}

/// (e) A body before any headers is refused, never left hanging.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_before_headers_is_refused() {
    let (_setup, epp, _, _) = setup().await;
    let (tx, mut replies) = open(epp).await;
    tx.send(body(b"{}", true, false)).await.unwrap();
    let reply = tokio::time::timeout(Duration::from_secs(60), replies.message()).await.expect("an answer");
    match reply {
        Err(status) => assert_eq!(status.code(), tonic::Code::InvalidArgument),
        Ok(Some(r)) => assert!(matches!(r.response, Some(Out::ImmediateResponse(_))), "{r:?}"),
        Ok(None) => panic!("the stream ended without a refusal"),
    }
}

/// gRPC Health Checking answers SERVING for the services gateways and probes ask about, and
/// NOT_FOUND for others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_health_reports_serving() {
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;
    let (_setup, epp, _, _) = setup().await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{epp}")).unwrap().connect().await.unwrap();
    let mut client = HealthClient::new(channel);
    for service in ferrogate_sidecar::serve::epp::HEALTH_SERVICES {
        let answer = client.check(HealthCheckRequest { service: service.into() }).await.unwrap().into_inner();
        assert_eq!(
            answer.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    let unknown = client.check(HealthCheckRequest { service: "inference-extension-x".into() }).await.unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

/// A gateway whose EPP lists one fallback, over engines on two loopback IPs (the subset hint
/// names pods by IP).
async fn setup_two_ips() -> (Setup, SocketAddr, Vec<String>, String) {
    let sims = [
        sim_helper::start_sim_on("127.0.0.2", &["--model", "base"]).await,
        sim_helper::start_sim_on("127.0.0.3", &["--model", "base"]).await,
    ];
    let endpoints: Vec<String> = sims.iter().map(|s| s.to_string()).collect();
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://{}', endpoints: ['{}', '{}'] }}",
        sims[0], endpoints[0], endpoints[1]
    );
    let models = "  - { name: chat, targets: [{ provider: pool, model: base }] }\n";
    let (key, digest) = ferrogate_sidecar::cli::new_key();
    let keys = format!("keys:\n  - {{ name: alice, digest: '{digest}', models: ['*'] }}\n");
    let flags = ["--epp-listen", "127.0.0.1:0", "--epp-fallbacks", "1"];
    let setup = gateway_flags(std::slice::from_ref(&provider), models, &keys, 2, &flags).await;
    let epp = setup.gateway.epp_addr().expect("the EPP listens");
    (setup, epp, endpoints, key)
}

/// `msg` with the gateway's subset hint (`envoy.lb.subset_hint`) as a list of strings.
fn with_subset(mut msg: ProcessingRequest, subset: &[&str]) -> ProcessingRequest {
    use envoy_types::pb::envoy::config::core::v3::Metadata;
    use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};
    let values = subset.iter().map(|s| Value { kind: Some(Kind::StringValue(s.to_string())) }).collect();
    let mut hint = Struct::default();
    hint.fields.insert(
        "x-gateway-destination-endpoint-subset".into(),
        Value { kind: Some(Kind::ListValue(ListValue { values })) },
    );
    let mut metadata = Metadata::default();
    metadata.filter_metadata.insert("envoy.lb.subset_hint".into(), hint);
    msg.metadata_context = Some(metadata);
    msg
}

/// The request headers message with one more header.
fn with_header(mut msg: ProcessingRequest, name: &str, value: &str) -> ProcessingRequest {
    if let Some(Msg::RequestHeaders(h)) = &mut msg.request {
        let header = HeaderValue { key: name.into(), raw_value: value.as_bytes().to_vec(), ..HeaderValue::default() };
        h.headers.get_or_insert_with(HeaderMap::default).headers.push(header);
    }
    msg
}

/// Routes one FULL_DUPLEX request: the pick and the headers removed, or the immediate status.
async fn route(epp: SocketAddr, headers: ProcessingRequest) -> Result<(String, Vec<String>), i32> {
    let (tx, mut replies) = open(epp).await;
    tx.send(headers).await.unwrap();
    let _ = tx.send(body(&chat("chat"), true, false)).await;
    let reply = next(&mut replies).await;
    match &reply.response {
        Some(Out::RequestHeaders(h)) => {
            let common = h.response.as_ref().unwrap();
            let removed = common.header_mutation.as_ref().map(|m| m.remove_headers.clone()).unwrap_or_default();
            Ok((pick(&reply, common), removed))
        }
        Some(Out::ImmediateResponse(r)) => Err(r.status.as_ref().map_or(0, |s| s.code)),
        other => panic!("neither a pick nor an immediate response: {other:?}"),
    }
}

/// The subset hint restricts the pick (503 when it leaves nothing), the pick lists its
/// fallback within the subset, and a client's copy of the host-only subset header is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_subset_hint_is_obeyed_and_fallbacks_follow_the_pick() {
    let (_setup, epp, engines, key) = setup_two_ips().await;
    let headers = || request_headers(&key, chat("chat").len(), FULL_DUPLEX);
    // No hint: the pick and the other engine as its fallback, in header and metadata alike.
    for _ in 0..4 {
        let (list, _) = route(epp, headers()).await.unwrap();
        let mut entries: Vec<&str> = list.split(',').collect();
        assert_eq!(entries.len(), 2, "{list}");
        entries.sort_unstable();
        let mut all: Vec<&str> = engines.iter().map(String::as_str).collect();
        all.sort_unstable();
        assert_eq!(entries, all, "pick then fallback: {list}");
    }
    // A subset of one engine, named by another port of its IP: always that engine, alone.
    let other_port = format!("{}:1", engines[1].rsplit_once(':').unwrap().0);
    for _ in 0..10 {
        let (list, _) = route(epp, with_subset(headers(), &[&other_port])).await.unwrap();
        assert_eq!(list, engines[1], "only the subset's engine, no fallback outside it");
    }
    // An empty subset, or one naming no pool member: nothing eligible.
    assert_eq!(route(epp, with_subset(headers(), &[])).await, Err(503));
    assert_eq!(route(epp, with_subset(headers(), &["10.9.9.9:8000"])).await, Err(503));
    // A client's own `x-ferrogate-subset` neither restricts nor goes upstream.
    let (list, removed) = route(epp, with_header(headers(), "x-ferrogate-subset", "10.9.9.9:1")).await.unwrap();
    assert_eq!(list.split(',').count(), 2, "{list}");
    assert!(removed.iter().any(|h| h == "x-ferrogate-subset"), "{removed:?}");
    // ... nor overrides the gateway's hint.
    let spoofed = with_header(with_subset(headers(), &[&engines[0]]), "x-ferrogate-subset", &engines[1]);
    assert_eq!(route(epp, spoofed).await.unwrap().0, engines[0]);
}

const STREAMED: i32 = 1;
const BUFFERED_PARTIAL: i32 = 3;

/// `msg` (a request headers message) saying the gateway sends the body without waiting.
fn without_waiting(mut msg: ProcessingRequest) -> ProcessingRequest {
    if let Some(c) = msg.protocol_config.as_mut() {
        c.send_body_without_waiting_for_header_response = true;
    }
    msg
}

/// STREAMED (body sent without waiting): the pick on the headers reply once the body ended,
/// then one reply per chunk, in order; the response path answers each chunk and is metered.
/// Without that setting, and for a BUFFERED_PARTIAL body cut short, a clear refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_and_partial_modes() {
    let (setup, epp, engines, key) = setup().await;
    let (tx, mut replies) = open(epp).await;
    let payload = chat("metered");
    tx.send(without_waiting(request_headers(&key, payload.len(), STREAMED))).await.unwrap();
    let parts: Vec<&[u8]> = payload.chunks(payload.len() / 3 + 1).collect();
    for (i, part) in parts.iter().enumerate() {
        tx.send(body(part, i + 1 == parts.len(), false)).await.unwrap();
    }
    let reply = next(&mut replies).await;
    let Some(Out::RequestHeaders(h)) = &reply.response else { panic!("not a headers reply: {reply:?}") };
    assert!(engines.contains(&pick(&reply, h.response.as_ref().unwrap())));
    let mut upstream = Vec::new();
    for part in &parts {
        upstream.extend(forwarded(next(&mut replies).await, part, false));
    }
    let sent: serde_json::Value = serde_json::from_slice(&upstream).expect("the chunks make the body whole");
    assert_eq!(sent["model"], "base", "the body as the filter routed it: {sent}");
    let head = header_map(&[(":status", "200"), ("content-type", "application/json")]);
    let headers = HttpHeaders { headers: Some(head), end_of_stream: false, ..Default::default() };
    tx.send(ProcessingRequest { request: Some(Msg::ResponseHeaders(headers)), ..Default::default() }).await.unwrap();
    assert!(matches!(next(&mut replies).await.response, Some(Out::ResponseHeaders(_))));
    let answer = json!({"id": "c", "object": "chat.completion", "model": "base",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}});
    let answer = serde_json::to_vec(&answer).unwrap();
    let (first, rest) = answer.split_at(answer.len() / 2);
    let mut echoed = Vec::new();
    for (part, last) in [(first, false), (rest, true)] {
        tx.send(body(part, last, true)).await.unwrap();
        echoed.extend(forwarded(next(&mut replies).await, part, true));
    }
    assert_eq!(echoed, answer, "the client gets the answer whole");
    drop(tx);
    let r = first_usage(&setup, "metered").await;
    assert_eq!((r.prompt_tokens, r.completion_tokens), (7, 2), "the STREAMED stream's record: {r:?}");

    // STREAMED while the gateway waits for the headers reply: the pick cannot be made.
    let (tx, mut replies) = open(epp).await;
    tx.send(request_headers(&key, payload.len(), STREAMED)).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(60), replies.message()).await.expect("an answer");
    assert_eq!(answer.unwrap_err().code(), tonic::Code::Unimplemented);

    // BUFFERED_PARTIAL whose body the gateway cut at its buffer: 413, not a hang.
    let (tx, mut replies) = open(epp).await;
    tx.send(request_headers(&key, payload.len(), BUFFERED_PARTIAL)).await.unwrap();
    assert!(matches!(next(&mut replies).await.response, Some(Out::RequestHeaders(_))));
    tx.send(body(&payload[..10], false, false)).await.unwrap();
    let reply = next(&mut replies).await;
    let Some(Out::ImmediateResponse(r)) = &reply.response else { panic!("not immediate: {reply:?}") };
    assert_eq!(r.status.as_ref().map(|s| s.code), Some(413));
}

/// Flow control through the picker: with one engine taking one request at a time, a burst is
/// held (no reply) and released one by one as streams end, the higher priority band first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flow_control_holds_a_burst_and_releases_it_by_priority() {
    use futures_util::FutureExt;
    let sim = start_sim(&["--model", "base"]).await;
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://{sim}', endpoints: ['{sim}'], max_concurrency: 1 }}"
    );
    let models =
        "  - { name: chat, targets: [{ provider: pool, model: base }], flow_control: { queue_ttl_ms: 120000 } }\n";
    let (batch_key, batch_digest) = ferrogate_sidecar::cli::new_key();
    let (ui_key, ui_digest) = ferrogate_sidecar::cli::new_key();
    let extra = format!(
        "groups:\n  - {{ name: batch, models: ['*'], priority: 0 }}\n  - {{ name: ui, models: ['*'], priority: 10 }}\n\
         keys:\n  - {{ name: b, digest: '{batch_digest}', groups: [batch] }}\n  - {{ name: u, digest: '{ui_digest}', groups: [ui] }}\n"
    );
    let flags = ["--epp-listen", "127.0.0.1:0"];
    let setup = gateway_flags(std::slice::from_ref(&provider), models, &extra, 2, &flags).await;
    let epp = setup.gateway.epp_addr().expect("the EPP listens");
    let payload = chat("chat");
    // Opens a stream and sends the whole request; returns the sender (dropped: the stream ends).
    let ask = |key: String| {
        let payload = payload.clone();
        async move {
            let (tx, replies) = open(epp).await;
            tx.send(request_headers(&key, payload.len(), FULL_DUPLEX)).await.unwrap();
            tx.send(body(&payload, true, false)).await.unwrap();
            (tx, replies)
        }
    };
    let (first_tx, mut first) = ask(batch_key.clone()).await;
    assert!(matches!(next(&mut first).await.response, Some(Out::RequestHeaders(_))), "the first goes at once");
    let admin = setup.gateway.admin_addr();
    let (b1_tx, mut b1) = ask(batch_key.clone()).await;
    wait_queued(admin, 0, 1).await;
    let (b2_tx, mut b2) = ask(batch_key.clone()).await;
    wait_queued(admin, 0, 2).await;
    let (ui_tx, mut ui) = ask(ui_key.clone()).await;
    wait_queued(admin, 10, 1).await;
    // The engine's one place is taken: all three are held.
    let held = |r: &mut Streaming<ProcessingResponse>| r.message().now_or_never().is_none();
    assert!(held(&mut b1) && held(&mut b2) && held(&mut ui));
    drop((first_tx, first)); // the first request ends: its place goes to the higher band
    assert!(matches!(next(&mut ui).await.response, Some(Out::RequestHeaders(_))), "priority 10 first");
    assert!(held(&mut b1) && held(&mut b2), "the batch requests still wait");
    drop((ui_tx, ui));
    assert!(matches!(next(&mut b1).await.response, Some(Out::RequestHeaders(_))), "then in arrival order");
    assert!(held(&mut b2));
    drop((b1_tx, b1));
    assert!(matches!(next(&mut b2).await.response, Some(Out::RequestHeaders(_))));
    drop(b2_tx);
}

/// Waits until the queue of `chat` holds `n` requests in `band` (its depth gauge).
async fn wait_queued(admin: SocketAddr, band: u32, n: u64) {
    let prefix = format!("ferrogate_queue_depth{{model=\"chat\",band=\"{band}\"}} ");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = reqwest::get(format!("http://{admin}/metrics")).await.unwrap().text().await.unwrap();
        let depth = text.lines().find_map(|l| l.strip_prefix(&prefix)?.parse::<u64>().ok());
        if depth.unwrap_or(0) == n {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the queue never held {n} in band {band}: {depth:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
