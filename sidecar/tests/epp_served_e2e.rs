//! End to end: the endpoint that served, as the gateway tells `ferrogate serve --epp-listen`
//! on the response path (`envoy.lb` / `x-gateway-destination-endpoint-served`: a retry of the
//! gateway walked past the pick). The usage record names that endpoint and passive health
//! counts the answer against it, not against the pick; an address outside the pool changes
//! nothing; the in-flight count stays the pick's, released once. On serve's HTTP listener
//! neither a client's nor an upstream's `x-ferrogate-served` is believed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Metadata;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Msg;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Out;
use envoy_types::pb::envoy::service::ext_proc::v3::{body_mutation, HttpHeaders, ProcessingRequest};
use envoy_types::pb::google::protobuf::{value::Kind, Struct, Value};
use ferrogate_sidecar::services::usage::Query;
use serde_json::json;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway_flags, Setup};
#[path = "common/ext_proc.rs"]
mod ext_proc;
use ext_proc::*;

/// A chat completion with usage, as an engine answers.
fn completion() -> Vec<u8> {
    let answer = json!({"id": "chatcmpl-1", "object": "chat.completion", "model": "base",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}});
    serde_json::to_vec(&answer).unwrap()
}

/// An engine stand-in: every POST answered with [`completion`] and an `x-ferrogate-served`
/// naming the other engine (an upstream's copy, which must count for nothing), counted; GETs
/// (the sidecar's probes) get a 200.
struct Engine {
    addr: String,
    hits: Arc<AtomicUsize>,
}

async fn engines() -> [Engine; 2] {
    let listeners = [
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
    ];
    let addrs = listeners.each_ref().map(|l| l.local_addr().unwrap().to_string());
    let mut out = Vec::new();
    for (i, listener) in listeners.into_iter().enumerate() {
        let (hits, other) = (Arc::new(AtomicUsize::new(0)), addrs[1 - i].clone());
        let counter = hits.clone();
        let app = axum::Router::new().fallback(move |method: axum::http::Method| {
            let (counter, other) = (counter.clone(), other.clone());
            async move {
                let headers = [("content-type", "application/json".to_string()), ("x-ferrogate-served", other)];
                if method != axum::http::Method::POST {
                    return (headers, b"{}".to_vec());
                }
                counter.fetch_add(1, Ordering::SeqCst);
                (headers, completion())
            }
        });
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        out.push(Engine { addr: addrs[i].clone(), hits });
    }
    out.try_into().unwrap_or_else(|_| unreachable!())
}

/// A gateway with the picker over a pool of the two engines (`pool_extra` added to the
/// provider), models `chat` and `metered` (`models_extra` added to each).
async fn setup(engines: &[Engine; 2], pool_extra: &str, models_extra: &str) -> (Setup, SocketAddr, String) {
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://{}', endpoints: ['{}', '{}']{pool_extra} }}",
        engines[0].addr, engines[0].addr, engines[1].addr
    );
    let models = format!(
        "  - {{ name: chat, targets: [{{ provider: pool, model: base }}]{models_extra} }}\n\
         \x20 - {{ name: metered, targets: [{{ provider: pool, model: base }}]{models_extra} }}\n"
    );
    let (key, digest) = ferrogate_sidecar::cli::new_key();
    let keys = format!("keys:\n  - {{ name: alice, digest: '{digest}', models: ['*'] }}\n");
    let flags = ["--epp-listen", "127.0.0.1:0"];
    let setup = gateway_flags(std::slice::from_ref(&provider), &models, &keys, 2, &flags).await;
    let epp = setup.gateway.epp_addr().expect("the EPP listens");
    (setup, epp, key)
}

/// The usage record of request `id`, once its stream has ended.
async fn record_of(setup: &Setup, id: &str) -> ferrogate_core::usage::Record {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let records = setup.gateway.usage().query(&Query::default()).await.unwrap().records;
        if let Some(r) = records.into_iter().find(|r| r.request_id == id) {
            return r;
        }
        assert!(std::time::Instant::now() < deadline, "no usage record for {id}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `envoy.lb` metadata saying `served` served.
fn served_metadata(served: &str) -> Metadata {
    let mut lb = Struct::default();
    let value = Value { kind: Some(Kind::StringValue(served.into())) };
    lb.fields.insert("x-gateway-destination-endpoint-served".into(), value);
    let mut metadata = Metadata::default();
    metadata.filter_metadata.insert("envoy.lb".into(), lb);
    metadata
}

/// One request of `model` through the picker (FULL_DUPLEX) as request `id`, answered with
/// `status` (a 429 with `Retry-After: 120`), the gateway saying `served(pick)` served; the pick.
async fn exchange(
    epp: SocketAddr,
    key: &str,
    (model, id): (&str, &str),
    status: &str,
    served: impl Fn(&str) -> String,
) -> String {
    let (tx, mut replies) = open(epp).await;
    let payload = chat(model);
    tx.send(request_headers_with(key, payload.len(), FULL_DUPLEX, &[("x-request-id", id)])).await.unwrap();
    tx.send(body(&payload, true, false)).await.unwrap();
    let reply = next(&mut replies).await;
    let Some(Out::RequestHeaders(h)) = &reply.response else { panic!("not a headers reply: {reply:?}") };
    let picked = pick(&reply, h.response.as_ref().unwrap());
    while !matches!(next(&mut replies).await.response, Some(Out::RequestBody(b)) if last(&b.response)) {}
    let answer = if status == "200" { completion() } else { br#"{"error":{"message":"slow down"}}"#.to_vec() };
    let length = answer.len().to_string();
    let mut head = vec![(":status", status), ("content-type", "application/json"), ("content-length", &length)];
    if status == "429" {
        head.push(("retry-after", "120"));
    }
    let headers = HttpHeaders { headers: Some(header_map(&head)), end_of_stream: false, ..Default::default() };
    let msg = ProcessingRequest {
        request: Some(Msg::ResponseHeaders(headers)),
        metadata_context: Some(served_metadata(&served(&picked))),
        ..Default::default()
    };
    tx.send(msg).await.unwrap();
    tx.send(body(&answer, true, true)).await.unwrap();
    assert!(matches!(next(&mut replies).await.response, Some(Out::ResponseHeaders(_))));
    while !matches!(next(&mut replies).await.response, Some(Out::ResponseBody(b)) if last(&b.response)) {}
    picked
}

fn last(common: &Option<envoy_types::pb::envoy::service::ext_proc::v3::CommonResponse>) -> bool {
    let mutation = common.as_ref().and_then(|c| c.body_mutation.as_ref()).and_then(|m| m.mutation.as_ref());
    matches!(mutation, Some(body_mutation::Mutation::StreamedResponse(s)) if s.end_of_stream)
}

/// The other engine of the pool.
fn other<'a>(engines: &'a [Engine; 2], endpoint: &str) -> &'a str {
    let other = engines.iter().find(|e| e.addr != endpoint).expect("a two-engine pool");
    &other.addr
}

/// serve's HTTP listener (the same VMs, picker headers believed): a client's
/// `x-ferrogate-served` and the engines' own copies change nothing; each record names the
/// engine the request reached.
async fn http_listener_believes_no_served_header(setup: &Setup, engines: &[Engine; 2], key: &str) {
    let client = reqwest::Client::new();
    for i in 0..6 {
        let id = format!("http-{i}");
        let before = engines.each_ref().map(|e| e.hits.load(Ordering::SeqCst));
        let resp = client
            .post(format!("{}/v1/chat/completions", setup.base))
            .bearer_auth(key)
            .header("x-request-id", &id)
            .header("x-ferrogate-served", &engines[1].addr)
            .header("content-type", "application/json")
            .body(chat("chat"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
        let reached: Vec<&Engine> =
            engines.iter().zip(before).filter(|(e, n)| e.hits.load(Ordering::SeqCst) > *n).map(|(e, _)| e).collect();
        assert_eq!(reached.len(), 1, "one engine answered request {i}");
        let r = record_of(setup, &id).await;
        assert_eq!(r.endpoint.as_deref(), Some(reached[0].addr.as_str()), "request {i}: {r:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_passive_health_go_to_the_endpoint_that_served() {
    let engines = engines().await;
    let (setup, epp, key) = setup(&engines, "", "").await;
    http_listener_believes_no_served_header(&setup, &engines, &key).await;

    let moved = |pick: &str| other(&engines, pick).to_string();

    // The gateway says the other engine served: the record names it.
    let picked = exchange(epp, &key, ("metered", "epp-moved"), "200", moved).await;
    let r = record_of(&setup, "epp-moved").await;
    assert_eq!(r.endpoint.as_deref(), Some(other(&engines, &picked)), "{r:?}");
    assert_eq!((r.status, r.prompt_tokens, r.completion_tokens), (200, 11, 3), "{r:?}");
    // The pick itself, or an address outside the pool: the pick's.
    for (id, served) in [("epp-pick", None), ("epp-unknown", Some("10.9.9.9:8000"))] {
        let same = |pick: &str| served.map_or(pick.to_string(), str::to_string);
        let picked = exchange(epp, &key, ("metered", id), "200", same).await;
        assert_eq!(record_of(&setup, id).await.endpoint.as_deref(), Some(picked.as_str()), "{id}");
    }

    // A 429 with Retry-After from the engine that served parks that engine, not the pick:
    // every later pick is the engine that was picked.
    let picked = exchange(epp, &key, ("chat", "epp-429"), "429", moved).await;
    assert_eq!(record_of(&setup, "epp-429").await.endpoint.as_deref(), Some(other(&engines, &picked)));
    for i in 0..8 {
        let now = buffered_pick_of(epp, &key, &chat("chat"), &[]).await;
        assert_eq!(now, picked, "pick {i}: the engine that answered 429 is parked");
    }
}

/// The in-flight count is released as it was taken, on the pick, whichever endpoint served:
/// with each engine taking one request at a time (flow control), two requests after a moved
/// one both go at once, one to each engine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_flight_count_is_the_picks_to_release() {
    let engines = engines().await;
    let bounded = ", flow_control: { queue_ttl_ms: 120000 }";
    let (_setup, epp, key) = setup(&engines, ", max_concurrency: 1", bounded).await;
    let moved = |pick: &str| other(&engines, pick).to_string();
    for i in 0..3 {
        exchange(epp, &key, ("chat", &format!("moved-{i}")), "200", moved).await;
    }
    let payload = chat("chat");
    let (mut held, mut picks) = (Vec::new(), Vec::new());
    for _ in 0..2 {
        let (tx, mut replies) = open(epp).await;
        tx.send(request_headers(&key, payload.len(), FULL_DUPLEX)).await.unwrap();
        tx.send(body(&payload, true, false)).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(20), next(&mut replies)).await.expect("not held");
        let Some(Out::RequestHeaders(h)) = &reply.response else { panic!("not a pick: {reply:?}") };
        picks.push(pick(&reply, h.response.as_ref().unwrap()));
        held.push((tx, replies));
    }
    picks.sort_unstable();
    let mut all: Vec<String> = engines.iter().map(|e| e.addr.clone()).collect();
    all.sort_unstable();
    assert_eq!(picks, all, "one request on each engine, none left counted");
}
