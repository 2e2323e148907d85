//! What the endpoint picker costs beside the in-proxy pick: the pick's own latency over
//! ext_proc, and the whole request when a gateway routes through the picker, against the same
//! request through `serve` (the filter picking in the proxy) and straight to an engine.
//!
//! Two `ferrogate sim` engines (no delays) as a pool and one `ferrogate serve --epp-listen` in
//! front of them, all child processes. Each client connection repeats, one after another so all
//! three see the same machine:
//! - `direct`: the chat completion straight to an engine (the floor);
//! - `in-proxy`: the same through `serve` (virtual key, resolution, the pool's pick, usage);
//! - `epp`: what an Inference Extension gateway does per request: one ext_proc stream
//!   (FULL_DUPLEX_STREAMED) with the request headers and body, the pick read from the headers
//!   reply and the body streamed back (`pick`), the request sent to the picked engine, and its
//!   response headers and body through the same stream (`epp total`). The gateway's own proxying
//!   is not in it: an Envoy would add its hop on top, as `serve` does in `in-proxy`.
//!
//! `cargo run --profile native -p ferrogate-sidecar --example epp_bench -- --ferrogate
//! target/native/ferrogate --filter target/wasm32-unknown-unknown/release/ferrogate_filter.wasm`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use envoy_types::pb::envoy::config::core::v3::{HeaderMap, HeaderValue};
use envoy_types::pb::envoy::service::ext_proc::v3::external_processor_client::ExternalProcessorClient;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_request::Request as Msg;
use envoy_types::pb::envoy::service::ext_proc::v3::processing_response::Response as Out;
use envoy_types::pb::envoy::service::ext_proc::v3::{
    body_mutation, HttpBody, HttpHeaders, ProcessingRequest, ProcessingResponse, ProtocolConfiguration,
};
use serde_json::json;
use tokio::sync::mpsc;
use tonic::transport::Channel;

#[path = "common/bench.rs"]
mod bench;
use bench::{digest, free_port, pct as quantile, spawn};

#[derive(Parser)]
struct Args {
    /// The `ferrogate` binary (runs the sims and `serve`).
    #[arg(long, default_value = "target/native/ferrogate")]
    ferrogate: PathBuf,
    /// The filter wasm (default: next to the binary).
    #[arg(long)]
    filter: Option<PathBuf>,
    /// Worker VMs of `serve`.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Requests per connection and case.
    #[arg(long, default_value_t = 500)]
    requests: usize,
    /// Concurrent connections, comma-separated.
    #[arg(long, default_value = "1,8", value_delimiter = ',')]
    concurrency: Vec<usize>,
}

const KEY: &str = "fg-bench-epp";
const FULL_DUPLEX: i32 = 4;

/// The sims, `serve` and its temporary directory.
struct Fleet {
    _children: Vec<tokio::process::Child>,
    engines: Vec<String>,
    gateway: String,
    epp: String,
    dir: PathBuf,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(args: &Args) -> Fleet {
    let ports = [free_port(), free_port()];
    let engines: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let mut children: Vec<_> =
        engines.iter().map(|e| spawn(&args.ferrogate, &["sim".into(), "--listen".into(), e.clone()])).collect();
    let dir = std::env::temp_dir().join(format!("ferrogate-epp-bench-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    let yaml = format!(
        "providers:\n  - {{ name: pool, kind: openai_compatible, base_url: 'http://{}', endpoints: ['{}', '{}'] }}\n\
         models:\n  - {{ name: chat, targets: [{{ provider: pool, model: sim-small }}] }}\n\
         keys:\n  - {{ name: bench, digest: 'sha256:{}', models: ['*'] }}\n",
        engines[0],
        engines[0],
        engines[1],
        digest(KEY)
    );
    std::fs::write(dir.join("config.yaml"), yaml).unwrap();
    let (port, epp) = (free_port(), free_port());
    let filter = args.filter.clone().unwrap_or_else(|| args.ferrogate.with_file_name("ferrogate_filter.wasm"));
    let argv: Vec<String> = [
        "serve",
        "--config",
        &dir.join("config.yaml").display().to_string(),
        "--filter",
        &filter.display().to_string(),
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--epp-listen",
        &format!("127.0.0.1:{epp}"),
        "--admin-listen",
        "127.0.0.1:0",
        "--sidecar-listen",
        "127.0.0.1:0",
        "--workers",
        &args.workers.to_string(),
    ]
    .map(String::from)
    .to_vec();
    children.push(spawn(&args.ferrogate, &argv));
    let (gateway, epp) = (format!("http://127.0.0.1:{port}"), format!("http://127.0.0.1:{epp}"));
    Fleet { _children: children, engines, gateway, epp, dir }
}

fn chat(model: &str) -> Vec<u8> {
    let body =
        json!({"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "Tell me about the sea."}]});
    serde_json::to_vec(&body).unwrap()
}

/// A chat completion to `url`; `None` unless it answered 200.
async fn post(client: &reqwest::Client, url: &str, body: Vec<u8>, key: bool) -> Option<bytes::Bytes> {
    let mut req = client.post(url).header("content-type", "application/json").body(body);
    if key {
        req = req.bearer_auth(KEY);
    }
    let resp = req.send().await.ok()?;
    resp.status().is_success().then_some(())?;
    resp.bytes().await.ok()
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let headers = pairs
        .iter()
        .map(|(k, v)| HeaderValue { key: k.to_string(), raw_value: v.as_bytes().to_vec(), ..HeaderValue::default() })
        .collect();
    HeaderMap { headers }
}

fn message(request: Msg) -> ProcessingRequest {
    ProcessingRequest { request: Some(request), ..ProcessingRequest::default() }
}

/// Reads replies until the last streamed body chunk; the body echoed and the pick, if any.
async fn until_body_end(replies: &mut tonic::Streaming<ProcessingResponse>) -> Option<(Vec<u8>, Option<String>)> {
    let (mut body, mut pick) = (Vec::new(), None);
    loop {
        let reply = replies.message().await.ok()??;
        let common = match reply.response? {
            Out::RequestHeaders(h) | Out::ResponseHeaders(h) => h.response,
            Out::RequestBody(b) | Out::ResponseBody(b) => b.response,
            _ => return None,
        }?;
        if let Some(m) = &common.header_mutation {
            let set = m.set_headers.iter().filter_map(|h| h.header.as_ref());
            for h in set.filter(|h| h.key == "x-gateway-destination-endpoint") {
                pick = String::from_utf8(h.raw_value.clone()).ok();
            }
        }
        if let Some(body_mutation::Mutation::StreamedResponse(s)) = common.body_mutation.and_then(|m| m.mutation) {
            body.extend_from_slice(&s.body);
            if s.end_of_stream {
                return Some((body, pick));
            }
        }
    }
}

/// One request as a gateway routes it through the picker: (pick, whole).
async fn through_epp(
    epp: &mut ExternalProcessorClient<Channel>,
    http: &reqwest::Client,
) -> Option<(Duration, Duration)> {
    let start = Instant::now();
    let (tx, rx) = mpsc::channel(8);
    let outbound = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
    let body = chat("chat");
    let auth = format!("Bearer {KEY}");
    let length = body.len().to_string();
    let map = headers(&[
        (":method", "POST"),
        (":path", "/v1/chat/completions"),
        (":authority", "gateway"),
        ("content-type", "application/json"),
        ("authorization", &auth),
        ("content-length", &length),
    ]);
    let mut first = message(Msg::RequestHeaders(HttpHeaders { headers: Some(map), ..HttpHeaders::default() }));
    first.protocol_config = Some(ProtocolConfiguration {
        request_body_mode: FULL_DUPLEX,
        response_body_mode: FULL_DUPLEX,
        ..Default::default()
    });
    tx.send(first).await.ok()?;
    tx.send(message(Msg::RequestBody(HttpBody { body, end_of_stream: true, ..HttpBody::default() }))).await.ok()?;
    let mut replies = epp.process(outbound).await.ok()?.into_inner();
    let (upstream_body, pick) = until_body_end(&mut replies).await?;
    let picked = start.elapsed();
    let answer = post(http, &format!("http://{}/v1/chat/completions", pick?), upstream_body, false).await?;
    let head = headers(&[(":status", "200"), ("content-type", "application/json")]);
    tx.send(message(Msg::ResponseHeaders(HttpHeaders { headers: Some(head), ..HttpHeaders::default() }))).await.ok()?;
    let last = HttpBody { body: answer.to_vec(), end_of_stream: true, ..HttpBody::default() };
    tx.send(message(Msg::ResponseBody(last))).await.ok()?;
    until_body_end(&mut replies).await?;
    Some((picked, start.elapsed()))
}

/// Per case, the samples of one batch.
#[derive(Default)]
struct Samples {
    direct: Vec<Duration>,
    proxy: Vec<Duration>,
    pick: Vec<Duration>,
    epp: Vec<Duration>,
}

async fn connection(fleet: (Vec<String>, String, String), requests: usize) -> Samples {
    let (engines, gateway, epp) = fleet;
    let http = || reqwest::Client::builder().pool_max_idle_per_host(2).build().unwrap();
    let (to_engine, to_gateway, to_picked) = (http(), http(), http());
    let mut picker = ExternalProcessorClient::connect(epp).await.unwrap();
    let mut s = Samples::default();
    let (direct_url, proxy_url) =
        (format!("http://{}/v1/chat/completions", engines[0]), format!("{gateway}/v1/chat/completions"));
    for _ in 0..requests {
        let t = Instant::now();
        if post(&to_engine, &direct_url, chat("sim-small"), false).await.is_some() {
            s.direct.push(t.elapsed());
        }
        let t = Instant::now();
        if post(&to_gateway, &proxy_url, chat("chat"), true).await.is_some() {
            s.proxy.push(t.elapsed());
        }
        if let Some((pick, whole)) = through_epp(&mut picker, &to_picked).await {
            s.pick.push(pick);
            s.epp.push(whole);
        }
    }
    s
}

async fn batch(fleet: &Fleet, conns: usize, requests: usize) -> Samples {
    let tasks: Vec<_> = (0..conns)
        .map(|_| {
            let f = (fleet.engines.clone(), fleet.gateway.clone(), fleet.epp.clone());
            tokio::task::spawn_local(connection(f, requests))
        })
        .collect();
    let mut all = Samples::default();
    for t in tasks {
        let s = t.await.unwrap();
        all.direct.extend(s.direct);
        all.proxy.extend(s.proxy);
        all.pick.extend(s.pick);
        all.epp.extend(s.epp);
    }
    all
}

/// (p50, p99) in ms.
fn pct(samples: &mut [Duration]) -> (f64, f64) {
    samples.sort();
    (quantile(samples, 0.5), quantile(samples, 0.99))
}

async fn wait_ready(fleet: &Fleet) {
    let http = reqwest::Client::new();
    for _ in 0..300 {
        let url = format!("{}/v1/chat/completions", fleet.gateway);
        if post(&http, &url, chat("chat"), true).await.is_some() {
            if let Ok(mut picker) = ExternalProcessorClient::connect(fleet.epp.clone()).await {
                if through_epp(&mut picker, &http).await.is_some() {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the gateway or its picker did not answer");
}

async fn run(args: Args) {
    let fleet = start(&args);
    wait_ready(&fleet).await;
    println!(
        "EPP: ferrogate serve --epp-listen ({} workers) over two ferrogate sims (no delays), {} requests per \
         connection and case, the cases interleaved; ms",
        args.workers, args.requests
    );
    println!(
        "{:>4}  {:>15} {:>15} {:>15} {:>15}  {:>15} {:>15}",
        "conc", "direct p50/p99", "in-proxy", "epp pick", "epp total", "proxy added", "epp added"
    );
    for &conns in &args.concurrency {
        batch(&fleet, conns, 20).await; // warm-up, unrecorded
        let mut s = batch(&fleet, conns, args.requests).await;
        let (d, p, k, e) = (pct(&mut s.direct), pct(&mut s.proxy), pct(&mut s.pick), pct(&mut s.epp));
        println!(
            "{:>4}  {:>7.3}/{:<7.3} {:>7.3}/{:<7.3} {:>7.3}/{:<7.3} {:>7.3}/{:<7.3}  {:>7.3}/{:<7.3} {:>7.3}/{:<7.3}",
            conns,
            d.0,
            d.1,
            p.0,
            p.1,
            k.0,
            k.1,
            e.0,
            e.1,
            p.0 - d.0,
            p.1 - d.1,
            e.0 - d.0,
            e.1 - d.1
        );
    }
}

fn main() {
    let args = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(tokio::task::LocalSet::new().run_until(run(args)));
}
