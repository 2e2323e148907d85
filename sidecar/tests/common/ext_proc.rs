//! The gateway's side of Envoy's external-processing protocol, for tests that play a gateway
//! against `serve --epp-listen`: a stream, the messages Envoy sends (request headers with the
//! processing modes, bodies) and the pick read from a reply (header and `envoy.lb` metadata).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Msg;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Out;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    CommonResponse, HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse, ProtocolConfiguration,
};
use envoy_types::pb::google::protobuf::value::Kind;
use serde_json::json;
use tokio::sync::mpsc;
use tonic::Streaming;

pub const ENDPOINT: &str = "x-gateway-destination-endpoint";
pub const BUFFERED: i32 = 2;
pub const FULL_DUPLEX: i32 = 4;

/// One ext_proc stream: the sender of the gateway's messages and the replies.
pub async fn open(epp: SocketAddr) -> (mpsc::Sender<ProcessingRequest>, Streaming<ProcessingResponse>) {
    let mut client = ExternalProcessorClient::connect(format!("http://{epp}")).await.unwrap();
    let (tx, rx) = mpsc::channel(16);
    let outbound = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let replies = client.process(outbound).await.unwrap().into_inner();
    (tx, replies)
}

pub fn header_map(pairs: &[(&str, &str)]) -> HeaderMap {
    let headers = pairs
        .iter()
        .map(|(k, v)| HeaderValue { key: k.to_string(), raw_value: v.as_bytes().to_vec(), ..HeaderValue::default() })
        .collect();
    HeaderMap { headers }
}

/// The request headers message of a chat completion for `model` with `key`, in `mode`.
pub fn request_headers(key: &str, body_len: usize, mode: i32) -> ProcessingRequest {
    request_headers_with(key, body_len, mode, &[])
}

/// [`request_headers`] with `extra` headers.
pub fn request_headers_with(key: &str, body_len: usize, mode: i32, extra: &[(&str, &str)]) -> ProcessingRequest {
    let auth = format!("Bearer {key}");
    let length = body_len.to_string();
    let mut pairs = vec![
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway.example"),
        (":scheme", "http"),
        ("content-type", "application/json"),
        ("authorization", auth.as_str()),
        ("content-length", length.as_str()),
    ];
    pairs.extend_from_slice(extra);
    let map = header_map(&pairs);
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

pub fn body(bytes: &[u8], end_of_stream: bool, response: bool) -> ProcessingRequest {
    let b = HttpBody { body: bytes.to_vec(), end_of_stream, ..Default::default() };
    let request = if response { Msg::ResponseBody(b) } else { Msg::RequestBody(b) };
    ProcessingRequest { request: Some(request), ..Default::default() }
}

pub fn chat(model: &str) -> Vec<u8> {
    let b =
        json!({"model": model, "messages": [{"role": "user", "content": "pick an engine for me"}], "max_tokens": 4});
    serde_json::to_vec(&b).unwrap()
}

pub async fn next(replies: &mut Streaming<ProcessingResponse>) -> ProcessingResponse {
    let reply = tokio::time::timeout(Duration::from_secs(60), replies.message()).await;
    reply.expect("a reply within a minute").expect("no gRPC error").expect("a reply, not the end")
}

/// The pick in the header mutation and in the `envoy.lb` metadata of `reply` (they must agree).
pub fn pick(reply: &ProcessingResponse, common: &CommonResponse) -> String {
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

/// The body's reply for `payload` sent BUFFERED with `extra` headers (the headers are answered
/// at once, the body's reply carries the pick).
pub async fn buffered_reply_of(
    epp: SocketAddr,
    key: &str,
    payload: &[u8],
    extra: &[(&str, &str)],
) -> ProcessingResponse {
    let (tx, mut replies) = open(epp).await;
    tx.send(request_headers_with(key, payload.len(), BUFFERED, extra)).await.unwrap();
    let first = next(&mut replies).await;
    assert!(matches!(first.response, Some(Out::RequestHeaders(_))), "{first:?}");
    tx.send(body(payload, true, false)).await.unwrap();
    next(&mut replies).await
}

/// The pick for `payload` sent BUFFERED with `extra` headers.
pub async fn buffered_pick_of(epp: SocketAddr, key: &str, payload: &[u8], extra: &[(&str, &str)]) -> String {
    let reply = buffered_reply_of(epp, key, payload, extra).await;
    let Some(Out::RequestBody(b)) = &reply.response else { panic!("not a body reply: {reply:?}") };
    pick(&reply, b.response.as_ref().unwrap())
}

/// The pick header of a body reply, if it has one (none while the pool has no endpoint).
pub fn pick_header(reply: &ProcessingResponse) -> Option<String> {
    let Some(Out::RequestBody(b)) = &reply.response else { return None };
    let mutation = b.response.as_ref()?.header_mutation.as_ref()?;
    let header = mutation.set_headers.iter().filter_map(|h| h.header.as_ref()).find(|h| h.key == ENDPOINT)?;
    Some(String::from_utf8(header.raw_value.clone()).unwrap())
}
