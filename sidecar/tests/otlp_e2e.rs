//! End to end: OTLP trace export of the real `ferrogate` binary. A fake OTLP/HTTP collector
//! (axum on an ephemeral port, decoding the protobuf bodies with `opentelemetry-proto`)
//! receives what `ferrogate serve` and `ferrogate sidecar`, run as subprocesses with
//! `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at it, export. Ports are ephemeral and directories
//! unique, so the tests run in parallel; every subprocess is killed when its test ends.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::HeaderMap;
use opentelemetry_proto::tonic::trace::v1::{span::SpanKind, Span};
use serde_json::json;

#[path = "common/otlp.rs"]
mod otlp;
use otlp::{int_attr, is_error, serve_router, str_attr, Collector, Proc};

#[path = "common/wasm.rs"]
mod wasm;
use wasm::filter_wasm;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

struct TempDir(PathBuf);
impl TempDir {
    fn with_config(upstream: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("ferrogate-otlp-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        let yaml = format!(
            "providers:\n  - {{ name: fake, kind: openai_compatible, base_url: '{upstream}' }}\n\
             models:\n  - {{ name: chat, targets: [{{ provider: fake, model: up-model }}] }}\n"
        );
        std::fs::write(dir.join("config.yaml"), yaml).unwrap();
        TempDir(dir)
    }
    fn config(&self) -> String {
        self.0.join("config.yaml").display().to_string()
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An OpenAI-compatible upstream that records each request's `traceparent`.
async fn fake_upstream() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |headers: HeaderMap| async move {
            let tp = headers.get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
            sink.lock().unwrap().push(tp);
            axum::Json(json!({
                "id": "c1", "object": "chat.completion", "created": 0, "model": "up-model",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
            }))
        }),
    );
    (serve_router(app).await, seen)
}

async fn chat(base: &str, model: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// `ferrogate serve` in front of [`fake_upstream`], exporting to a fresh [`Collector`].
struct Gateway {
    proc: Proc,
    base: String,
    collector: Collector,
    /// The `traceparent` of each request the upstream received.
    seen: Arc<Mutex<Vec<String>>>,
    _dir: TempDir,
}

async fn start_gateway() -> Gateway {
    let (collector, endpoint) = Collector::start().await;
    let (upstream, seen) = fake_upstream().await;
    let dir = TempDir::with_config(&upstream);
    let (config, wasm) = (dir.config(), filter_wasm().display().to_string());
    let args = ["serve", "--config", &config, "--filter", &wasm, "--workers", "1", "--listen", "127.0.0.1:0"];
    let args = [&args[..], &["--admin-listen", "127.0.0.1:0", "--sidecar-listen", "127.0.0.1:0"]].concat();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "200")];
    let mut proc = Proc::spawn(&args, &env);
    let base = format!("http://{}", proc.field("ferrogate serve listening", "addr").await);
    Gateway { proc, base, collector, seen, _dir: dir }
}

fn is_request_span(s: &Span) -> bool {
    s.name == "ferrogate.request"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_exports_one_span_per_request_in_the_callers_trace() {
    let gw = start_gateway().await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    let resp = chat(&gw.base, "chat", &[("traceparent", &traceparent), ("x-request-id", "req-otlp-1")]).await;
    assert_eq!(resp.status(), 200, "{}", gw.proc.log());
    let in_callers_trace = |s: &Span| is_request_span(s) && hex::encode(&s.trace_id) == TRACE_ID;
    let (service, span) = gw.collector.wait_for("ferrogate.request in the caller's trace", in_callers_trace).await;
    assert_eq!(service, "ferrogate");
    assert_eq!(hex::encode(&span.parent_span_id), PARENT_ID);
    assert_eq!(span.kind, SpanKind::Server as i32);
    let a = &span.attributes;
    assert_eq!(str_attr(a, "http.request.method"), Some("POST"));
    assert_eq!(str_attr(a, "url.path"), Some("/v1/chat/completions"));
    assert_eq!(int_attr(a, "http.response.status_code"), Some(200));
    assert_eq!(str_attr(a, "http.response.header.x-ferrogate-model"), Some("up-model"));
    assert_eq!(str_attr(a, "http.response.header.x-ferrogate-provider"), Some("fake"));
    assert_eq!(str_attr(a, "http.response.header.x-request-id"), Some("req-otlp-1"));
    assert!(!is_error(&span));
    // The upstream call continues the trace, with this span as its parent.
    let forwarded = format!("00-{TRACE_ID}-{}-01", hex::encode(&span.span_id));
    assert_eq!(gw.seen.lock().unwrap().as_slice(), [forwarded]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_starts_a_trace_when_the_caller_has_none_and_traces_local_replies() {
    let gw = start_gateway().await;
    assert_eq!(chat(&gw.base, "chat", &[]).await.status(), 200, "{}", gw.proc.log());
    let root = |s: &Span| is_request_span(s) && s.parent_span_id.is_empty();
    let (_, span) = gw.collector.wait_for("ferrogate.request without a parent", root).await;
    let forwarded = format!("00-{}-{}-01", hex::encode(&span.trace_id), hex::encode(&span.span_id));
    assert_eq!(gw.seen.lock().unwrap().as_slice(), [forwarded]);

    // A local reply of the filter (unknown model) is traced too; a 4xx is not a server error.
    assert_eq!(chat(&gw.base, "nope", &[]).await.status(), 404);
    let not_found = |s: &Span| is_request_span(s) && int_attr(&s.attributes, "http.response.status_code") == Some(404);
    let (_, local) = gw.collector.wait_for("the 404", not_found).await;
    assert!(!is_error(&local));
    assert_eq!(str_attr(&local.attributes, "http.response.header.x-ferrogate-provider"), None);
    assert_eq!(gw.seen.lock().unwrap().len(), 1, "the 404 never went upstream");
}

fn sidecar_args(config: &str) -> Vec<&str> {
    vec!["sidecar", "--config", config, "--sidecar-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]
}

async fn get(url: &str, headers: &[(&str, &str)]) -> u16 {
    let mut req = reqwest::Client::new().get(url).bearer_auth("tok");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_exports_http_spans_and_flushes_them_at_exit() {
    let (collector, endpoint) = Collector::start().await;
    let dir = TempDir::with_config("http://127.0.0.1:9");
    let config = dir.config();
    // A minute between batches: only the flush at exit can deliver these spans.
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ("FERROGATE_INTERNAL_TOKEN", "tok"),
    ];
    let mut sidecar = Proc::spawn(&sidecar_args(&config), &env);
    let api = format!("http://{}", sidecar.field("ferrogate sidecar listening", "sidecar_addr").await);
    let admin = format!("http://{}", sidecar.field("ferrogate sidecar listening", "admin_addr").await);
    let traceparent = format!("00-{TRACE_ID}-{PARENT_ID}-01");
    assert_eq!(get(&format!("{api}/v1/snapshot"), &[("traceparent", &traceparent)]).await, 200);
    assert_eq!(get(&format!("{api}/v1/snapshot"), &[("if-none-match", "*")]).await, 304);
    // The file store lists the served rows: the span's route is still the template.
    assert_eq!(get(&format!("{admin}/api/v1/providers"), &[]).await, 200);
    assert_eq!(get(&format!("{admin}/healthz"), &[]).await, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(collector.spans().is_empty(), "exported before the batch delay");

    sidecar.terminate(Duration::from_secs(10)).await;
    check_sidecar_spans(&collector.spans());
}

/// The spans of [`sidecar_exports_http_spans_and_flushes_them_at_exit`]'s requests.
fn check_sidecar_spans(spans: &[(String, Span)]) {
    let snapshot: Vec<&Span> = spans.iter().map(|(_, s)| s).filter(|s| s.name == "GET /v1/snapshot").collect();
    assert_eq!(snapshot.len(), 2, "{:?}", spans.iter().map(|(_, s)| &s.name).collect::<Vec<_>>());
    assert!(spans.iter().all(|(service, _)| service == "ferrogate"));
    let first = snapshot.iter().find(|s| hex::encode(&s.trace_id) == TRACE_ID).expect("the caller's trace");
    assert_eq!(hex::encode(&first.parent_span_id), PARENT_ID);
    assert_eq!(first.kind, SpanKind::Server as i32);
    assert_eq!(str_attr(&first.attributes, "http.request.method"), Some("GET"));
    assert_eq!(str_attr(&first.attributes, "http.route"), Some("/v1/snapshot"));
    assert_eq!(str_attr(&first.attributes, "url.path"), Some("/v1/snapshot"));
    let statuses: Vec<_> = snapshot.iter().map(|s| int_attr(&s.attributes, "http.response.status_code")).collect();
    assert!(statuses.contains(&Some(200)) && statuses.contains(&Some(304)), "{statuses:?}");
    let crud = spans.iter().map(|(_, s)| s).find(|s| s.name == "GET /api/v1/{section}").expect("admin span");
    assert_eq!(str_attr(&crud.attributes, "url.path"), Some("/api/v1/providers"));
    assert_eq!(int_attr(&crud.attributes, "http.response.status_code"), Some(200));
    assert!(!is_error(crud));
    assert!(!spans.iter().any(|(_, s)| str_attr(&s.attributes, "url.path") == Some("/healthz")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_collector_costs_one_warning_and_nothing_else() {
    // A port that was just free: connections are refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let dir = TempDir::with_config("http://127.0.0.1:9");
    let config = dir.config();
    let endpoint = format!("http://{closed}");
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
        ("FERROGATE_INTERNAL_TOKEN", "tok"),
    ];
    let mut sidecar = Proc::spawn(&sidecar_args(&config), &env);
    let api: SocketAddr = sidecar.field("ferrogate sidecar listening", "sidecar_addr").await.parse().unwrap();
    // Several batches, each of which fails to export.
    for _ in 0..6 {
        assert_eq!(get(&format!("http://{api}/v1/snapshot"), &[]).await, 200);
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    sidecar.terminate(Duration::from_secs(10)).await;
    let log = sidecar.log();
    assert_eq!(log.matches("trace export failed").count(), 1, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_endpoint_disables_export_with_a_warning() {
    let dir = TempDir::with_config("http://127.0.0.1:9");
    let config = dir.config();
    let env = [("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"), ("FERROGATE_INTERNAL_TOKEN", "tok")];
    let mut sidecar = Proc::spawn(&sidecar_args(&config), &env);
    let api = sidecar.field("ferrogate sidecar listening", "sidecar_addr").await;
    assert_eq!(get(&format!("http://{api}/v1/snapshot"), &[]).await, 200);
    sidecar.terminate(Duration::from_secs(10)).await;
    let log = sidecar.log();
    assert!(log.contains("trace export disabled") && log.contains("collector:4318"), "{log}");
}
