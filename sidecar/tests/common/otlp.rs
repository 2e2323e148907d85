//! An OTLP/HTTP collector stand-in (axum on an ephemeral port, decoding the protobuf bodies
//! with `opentelemetry-proto`), span attribute readers, and `ferrogate` subprocesses whose
//! stderr is collected, for the OTLP end-to-end tests.
#![allow(dead_code)]

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value as AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span};
use prost::Message;

/// Every span received, with its resource's `service.name`.
#[derive(Clone, Default)]
pub struct Collector(Arc<Mutex<Vec<(String, Span)>>>);

impl Collector {
    pub async fn start() -> (Collector, String) {
        let got = Collector::default();
        let sink = got.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| async move {
                let Ok(req) = ExportTraceServiceRequest::decode(body) else {
                    return axum::http::StatusCode::BAD_REQUEST;
                };
                sink.add(req);
                axum::http::StatusCode::OK
            }),
        );
        (got, serve_router(app).await)
    }

    fn add(&self, req: ExportTraceServiceRequest) {
        let mut all = self.0.lock().unwrap();
        for rs in req.resource_spans {
            let resource = rs.resource.map(|r| r.attributes).unwrap_or_default();
            let service = str_attr(&resource, "service.name").unwrap_or_default().to_string();
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                all.push((service.clone(), span));
            }
        }
    }

    pub fn spans(&self) -> Vec<(String, Span)> {
        self.0.lock().unwrap().clone()
    }

    /// Waits until a span matching `pred` arrives.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&Span) -> bool) -> (String, Span) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(hit) = self.spans().into_iter().find(|(_, s)| pred(s)) {
                return hit;
            }
            let names: Vec<String> = self.spans().iter().map(|(_, s)| s.name.clone()).collect();
            assert!(Instant::now() < deadline, "no span {what} arrived; got {names:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

pub async fn serve_router(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

pub fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.as_ref()).and_then(|v| v.value.as_ref())
}

pub fn str_attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match attr(attrs, key) {
        Some(AnyValue::StringValue(s)) => Some(s),
        _ => None,
    }
}

pub fn int_attr(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key) {
        Some(AnyValue::IntValue(i)) => Some(*i),
        _ => None,
    }
}

pub fn is_error(span: &Span) -> bool {
    span.status.as_ref().is_some_and(|s| s.code == StatusCode::Error as i32)
}

/// A `ferrogate` subprocess whose stderr is collected; killed on drop.
pub struct Proc {
    pub child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Proc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferrogate"));
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        for var in std::env::vars().map(|(k, _)| k).filter(|k| k.starts_with("OTEL_")) {
            cmd.env_remove(var);
        }
        cmd.env("FERROGATE_LOG", "info").envs(env.iter().copied());
        let mut child = cmd.spawn().expect("ferrogate starts");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Proc { child, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// The value of `field=` on the first log line containing `message`, once it is logged.
    pub async fn field(&mut self, message: &str, field: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let prefix = format!("{field}=");
            let found = self
                .log
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.contains(message))
                .find_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix(prefix.as_str())).map(String::from));
            if let Some(value) = found {
                return value;
            }
            let exited = self.child.try_wait().unwrap();
            assert!(exited.is_none() && Instant::now() < deadline, "no {message:?} line:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then waits for a clean exit (the process flushes its spans on the way out).
    pub async fn terminate(&mut self, within: Duration) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let deadline = Instant::now() + within;
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "still running {within:?} after SIGTERM:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(self.child.wait().unwrap().success(), "exit status:\n{}", self.log());
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
