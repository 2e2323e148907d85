//! End to end: `ferrogate serve --epp-listen` as a Gateway API Inference Extension endpoint
//! picker. The test plays the gateway (Envoy's ext_proc client, from the same `envoy-types`
//! protos) against a config whose models target a pool of two `ferrogate sim` engines, with
//! virtual keys configured: BUFFERED and FULL_DUPLEX_STREAMED picks (header and `envoy.lb`
//! metadata agree, and name one of the pool's engines), an unknown key answered 401 as an
//! immediate response, and the response path ending in a usage record.

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Msg;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Out;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, CommonResponse, HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse, ProtocolConfiguration,
};
use envoy_types::pb::google::protobuf::value::Kind;
use ferrogate_sidecar::services::usage::Query;
use serde_json::json;
use tokio::sync::mpsc;
use tonic::Streaming;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, Setup};
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

const ENDPOINT: &str = "x-gateway-destination-endpoint";
const BUFFERED: i32 = 2;
const FULL_DUPLEX: i32 = 4;

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

/// One ext_proc stream: the sender of the gateway's messages and the replies.
async fn open(epp: SocketAddr) -> (mpsc::Sender<ProcessingRequest>, Streaming<ProcessingResponse>) {
    let mut client = ExternalProcessorClient::connect(format!("http://{epp}")).await.unwrap();
    let (tx, rx) = mpsc::channel(16);
    let outbound = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let replies = client.process(outbound).await.unwrap().into_inner();
    (tx, replies)
}

fn header_map(pairs: &[(&str, &str)]) -> HeaderMap {
    let headers = pairs
        .iter()
        .map(|(k, v)| HeaderValue { key: k.to_string(), raw_value: v.as_bytes().to_vec(), ..HeaderValue::default() })
        .collect();
    HeaderMap { headers }
}

/// The request headers message of a chat completion for `model` with `key`, in `mode`.
fn request_headers(key: &str, body_len: usize, mode: i32) -> ProcessingRequest {
    let auth = format!("Bearer {key}");
    let length = body_len.to_string();
    let map = header_map(&[
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway.example"),
        (":scheme", "http"),
        ("content-type", "application/json"),
        ("authorization", &auth),
        ("content-length", &length),
    ]);
    ProcessingRequest {
        protocol_config: Some(ProtocolConfiguration {
            request_body_mode: mode,
            response_body_mode: mode,
            ..Default::default()
        }),
        request: Some(Msg::RequestHeaders(HttpHeaders {
            headers: Some(map),
            end_of_stream: false,
            ..Default::default()
        })),
        ..Default::default()
    }
}

fn body(bytes: &[u8], end_of_stream: bool, response: bool) -> ProcessingRequest {
    let b = HttpBody { body: bytes.to_vec(), end_of_stream, ..Default::default() };
    let request = if response { Msg::ResponseBody(b) } else { Msg::RequestBody(b) };
    ProcessingRequest { request: Some(request), ..Default::default() }
}

fn chat(model: &str) -> Vec<u8> {
    let b =
        json!({"model": model, "messages": [{"role": "user", "content": "pick an engine for me"}], "max_tokens": 4});
    serde_json::to_vec(&b).unwrap()
}

async fn next(replies: &mut Streaming<ProcessingResponse>) -> ProcessingResponse {
    let reply = tokio::time::timeout(Duration::from_secs(60), replies.message()).await;
    reply.expect("a reply within a minute").expect("no gRPC error").expect("a reply, not the end")
}

/// The pick in the header mutation and in the `envoy.lb` metadata of `reply` (they must agree).
fn pick(reply: &ProcessingResponse, common: &CommonResponse) -> String {
    let mutation = common.header_mutation.as_ref().expect("a header mutation");
    let header = mutation
        .set_headers
        .iter()
        .filter_map(|h| h.header.as_ref())
        .find(|h| h.key == ENDPOINT)
        .map(|h| String::from_utf8(h.raw_value.clone()).unwrap())
        .expect("the pick header");
    let metadata = reply.dynamic_metadata.as_ref().expect("dynamic metadata");
    let Some(Kind::StructValue(lb)) = &metadata.fields["envoy.lb"].kind else { panic!("envoy.lb not a struct") };
    let Some(Kind::StringValue(value)) = &lb.fields[ENDPOINT].kind else { panic!("pick not a string") };
    assert_eq!(&header, value, "header and metadata agree");
    assert!(common.clear_route_cache, "the route is recomputed");
    header
}

/// (a) BUFFERED: headers answered at once, the body's reply carries the pick.
async fn buffered_pick(epp: SocketAddr, key: &str, engines: &[String]) {
    let (tx, mut replies) = open(epp).await;
    let payload = chat("chat");
    tx.send(request_headers(key, payload.len(), BUFFERED)).await.unwrap();
    let first = next(&mut replies).await;
    assert!(matches!(first.response, Some(Out::RequestHeaders(_))), "{first:?}");
    tx.send(body(&payload, true, false)).await.unwrap();
    let reply = next(&mut replies).await;
    let Some(Out::RequestBody(b)) = &reply.response else { panic!("not a body reply: {reply:?}") };
    let endpoint = pick(&reply, b.response.as_ref().unwrap());
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
    let query = Query { model: Some("metered".into()), ..Query::default() };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let records = setup.gateway.usage().query(&query).await.unwrap().records;
        if let Some(r) = records.first() {
            assert_eq!((r.status, r.prompt_tokens, r.completion_tokens), (200, 11, 3), "{r:?}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no usage record for the EPP's stream");
        tokio::time::sleep(Duration::from_millis(100)).await;
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
