//! The official http-wasm TCK (technology compatibility kit) against the http-wasm host.
//!
//! The guest is `testdata/httpwasm/tck.wasm`, copied from http-wasm-host-go v0.7.0
//! (`d9e07495`, `tck/tck.wasm`; see `testdata/httpwasm/TCK.md`). This file translates that
//! commit's Go runner (`tck/run.go`: the cases, the request each sends with header
//! `x-httpwasm-tck-testid`, the checks on the response) and backend handler
//! (`tck/backend.go`: echoes the method, `RequestURI` and every request header of the request
//! it gets as `x-httpwasm-next-*` response headers) to Rust. Instead of a client and a server,
//! each request goes straight through [`Middleware::serve`] with the backend as `next`.
//!
//! Requests look like what Go's `http.Client` sends and what Go's server then hands the
//! middleware: `Host`, `User-Agent`, `Accept-Encoding: gzip`, the case's headers,
//! `Content-Length` on POST; the client's address is `127.0.0.1:<port>`. Like host-go's own
//! `handler/nethttp/tck_test.go`, every case runs over HTTP/1.1 and over HTTP/2.0 (here the
//! request as an HTTP/2 server hands it over: absolute URI from `:scheme`/`:authority`, no
//! `Host` header; no TLS is involved since nothing goes over the wire).
//!
//! The checks are the runner's: `x-httpwasm-tck-handled: 1`, status not 500 (failure message
//! from `x-httpwasm-tck-failed`), then the case's own expectations. Failures of all cases of
//! a group are collected (Go's `t.Error` goes on), and the group's test fails listing them.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::SocketAddr;

use bytes::Bytes;
use ferrogate_host::httpwasm::{canonical_key, Body, Middleware, PluginSettings};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty};

/// The TCK guest, vendored from host-go v0.7.0.
const TCK_WASM: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/httpwasm/tck.wasm");

/// The test server's address as the runner's URL names it (Go's `httptest.Server`).
const SERVER: &str = "127.0.0.1:38080";

/// The client's address: `get_source_addr` must give an IPv4 `127.0.0.1:<port>`.
const CLIENT: &str = "127.0.0.1:52814";

/// The protocols host-go's `TestTCK` runs the kit over, with Go's `resp.Proto` for each.
const PROTOCOLS: [(Version, &str); 2] = [(Version::HTTP_11, "HTTP/1.1"), (Version::HTTP_2, "HTTP/2.0")];

/// The middleware with the TCK guest; its `main` enables buffer_request, buffer_response and
/// trailers at init.
fn tck_middleware() -> Middleware {
    let wasm = std::fs::read(TCK_WASM).expect("testdata/httpwasm/tck.wasm");
    Middleware::new(&wasm, PluginSettings::default()).expect("TCK guest instantiates")
}

/// `tck.BackendHandler`: echoes the request into response headers, no body, implicit 200.
/// Go's server keeps `Host` out of `r.Header` (it is `r.Host`), so it is not echoed.
async fn backend(req: Request<Bytes>) -> Response<Body> {
    let mut headers = HeaderMap::new();
    let mut set = |name: String, value: HeaderValue| {
        headers.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), value);
    };
    set("x-httpwasm-next-method".into(), HeaderValue::from_str(req.method().as_str()).unwrap());
    let request_uri = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
    set("x-httpwasm-next-uri".into(), HeaderValue::from_str(request_uri).unwrap());
    for name in req.headers().keys() {
        if name == http::header::HOST {
            continue;
        }
        for (i, value) in req.headers().get_all(name).iter().enumerate() {
            set(format!("x-httpwasm-next-header-{}-{i}", canonical_key(name.as_str())), value.clone());
        }
    }
    let mut resp = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *resp.headers_mut() = headers;
    resp
}

/// What the runner's client got back.
struct TckResponse {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl TckResponse {
    /// Go's `resp.Header.Get`: the first value, `""` when absent.
    fn header(&self, name: &str) -> String {
        self.headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned()).unwrap_or_default()
    }
}

/// One group of cases run over one protocol, collecting failures like Go's `t.Error`.
struct Runner {
    mw: Middleware,
    version: Version,
    proto: &'static str,
    failures: Vec<String>,
}

impl Runner {
    fn new(mw: Middleware, (version, proto): (Version, &'static str)) -> Runner {
        Runner { mw, version, proto, failures: Vec::new() }
    }

    fn error(&mut self, test_id: &str, msg: String) {
        self.failures.push(format!("[{}] {test_id}: {msg}", self.proto));
    }

    /// `http.NewRequest(method, url, body)` + the case's headers + `client.Do`, the request as
    /// Go's server hands it to the middleware.
    async fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> TckResponse {
        let mut req = Request::builder().method(Method::from_bytes(method.as_bytes()).unwrap()).version(self.version);
        req = if self.version == Version::HTTP_2 {
            req.uri(format!("http://{SERVER}{path}")).header("user-agent", "Go-http-client/2.0")
        } else {
            req.uri(path).header("host", SERVER).header("user-agent", "Go-http-client/1.1")
        };
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        // Go sends Content-Length for a body, and `0` for an empty POST/PUT/PATCH body.
        if let Some(b) = body {
            req = req.header("content-length", b.len().to_string());
        }
        req = req.header("accept-encoding", "gzip");
        let req = req.body(Bytes::from(body.unwrap_or_default().to_string())).unwrap();
        let remote: SocketAddr = CLIENT.parse().unwrap();
        let (parts, body) = self.mw.serve(req, remote, backend).await.into_parts();
        let body = body.collect().await.expect("response body").to_bytes();
        TckResponse { status: parts.status, headers: parts.headers, body }
    }

    /// The runner's `checkResponse`; returns the body.
    fn check_response(&mut self, test_id: &str, resp: &TckResponse) -> String {
        if resp.header("x-httpwasm-tck-handled") != "1" {
            self.error(test_id, "x-httpwasm-tck-handled header is missing".into());
        }
        if resp.status == StatusCode::INTERNAL_SERVER_ERROR {
            let msg = resp.header("x-httpwasm-tck-failed");
            if msg.is_empty() {
                let body = String::from_utf8_lossy(&resp.body).into_owned();
                self.error(test_id, format!("error status without test failure message (body: {body:?})"));
            }
            self.error(test_id, format!("assertion failed: {msg}"));
        }
        String::from_utf8_lossy(&resp.body).into_owned()
    }

    /// Sends the case's request with `x-httpwasm-tck-testid` and applies `check_response`.
    async fn case(
        &mut self,
        test_id: &str,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (TckResponse, String) {
        let mut all = headers.to_vec();
        all.push(("x-httpwasm-tck-testid", test_id));
        let resp = self.send(method, path, &all, body).await;
        let body = self.check_response(test_id, &resp);
        (resp, body)
    }

    fn expect_eq(&mut self, test_id: &str, what: &str, want: &str, have: &str) {
        if want != have {
            self.error(test_id, format!("expected {what} to be {want}, have {have}"));
        }
    }

    fn finish(self) -> Vec<String> {
        self.failures
    }
}

/// Runs `group` over every protocol, each with a fresh middleware, and fails listing every
/// failed check.
async fn run_group<F>(group: F)
where
    F: for<'a> Fn(&'a mut Runner) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + 'a>>,
{
    let mut failures = Vec::new();
    for protocol in PROTOCOLS {
        let mut runner = Runner::new(tck_middleware(), protocol);
        group(&mut runner).await;
        failures.extend(runner.finish());
    }
    assert!(failures.is_empty(), "TCK failures:\n{}", failures.join("\n"));
}

#[tokio::test]
async fn get_protocol_version() {
    run_group(|r| {
        Box::pin(async move {
            let test_id = "get_protocol_version";
            let (_, body) = r.case(test_id, "GET", "/get_protocol_version", &[], None).await;
            // Go's `resp.Proto`: the protocol the connection speaks, the request's.
            let want = r.proto;
            if want != body {
                r.error(test_id, format!("expected protocol version to be {want}, have {body}"));
            }
        })
    })
    .await;
}

#[tokio::test]
async fn get_method() {
    run_group(|r| {
        Box::pin(async move {
            // The runner leaves CONNECT out ("often handled outside of middleware").
            for method in ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "TRACE", "PATCH"] {
                let test_id = format!("get_method/{method}");
                r.case(&test_id, method, "/", &[], None).await;
            }
        })
    })
    .await;
}

#[tokio::test]
async fn set_method() {
    run_group(|r| {
        Box::pin(async move {
            let test_id = "set_method";
            let (resp, _) = r.case(test_id, "GET", "/", &[], None).await;
            r.expect_eq(test_id, "method", "POST", &resp.header("x-httpwasm-next-method"));
        })
    })
    .await;
}

/// The URIs of the get_uri and set_uri cases.
const URIS: [(&str, &str); 4] = [
    ("simple", "/simple"),
    ("simple/escaping", "/simple%26clean"),
    ("query", "/animal?name=panda"),
    ("query/escaping", "/disney?name=chip%26dale"),
];

#[tokio::test]
async fn get_uri() {
    run_group(|r| {
        Box::pin(async move {
            for (name, uri) in URIS {
                r.case(&format!("get_uri/{name}"), "GET", uri, &[], None).await;
            }
        })
    })
    .await;
}

#[tokio::test]
async fn set_uri() {
    run_group(|r| {
        Box::pin(async move {
            for (name, uri) in URIS {
                let test_id = format!("set_uri/{name}");
                let (resp, _) = r.case(&test_id, "GET", "/", &[], None).await;
                r.expect_eq(&test_id, "uri", uri, &resp.header("x-httpwasm-next-uri"));
            }
        })
    })
    .await;
}

#[tokio::test]
async fn get_header_values_request() {
    run_group(|r| {
        Box::pin(async move {
            let cases: [(&str, &str, &[&str]); 4] = [
                ("lowercase-key", "single-header", &["value"]),
                ("mixedcase-key", "Single-Header", &["value"]),
                ("not-exists", "not-header", &[]),
                ("multiple-values", "multi-header", &["value1", "value2"]),
            ];
            for (name, key, values) in cases {
                let headers: Vec<(&str, &str)> = values.iter().map(|v| (key, *v)).collect();
                r.case(&format!("get_header_values/request/{name}"), "GET", "/", &headers, None).await;
            }
        })
    })
    .await;
}

#[tokio::test]
async fn get_header_names_request() {
    run_group(|r| {
        Box::pin(async move {
            let headers = [("a-header", "value1"), ("b-header", "2")];
            r.case("get_header_names/request", "GET", "/", &headers, None).await;
        })
    })
    .await;
}

#[tokio::test]
async fn set_header_value_request() {
    run_group(|r| {
        Box::pin(async move {
            for (name, header) in [("new", "new-header"), ("existing", "existing-header")] {
                let test_id = format!("set_header_value/request/{name}");
                let (resp, _) = r.case(&test_id, "GET", "/", &[("existing-header", "bear")], None).await;
                let have = resp.header(&format!("x-httpwasm-next-header-{header}-0"));
                r.expect_eq(&test_id, "header", "value", &have);
            }
        })
    })
    .await;
}

#[tokio::test]
async fn add_header_value_request() {
    run_group(|r| {
        Box::pin(async move {
            let cases: [(&str, &str, &[&str]); 2] =
                [("new", "new-header", &["value"]), ("existing", "existing-header", &["bear", "value"])];
            for (name, header, values) in cases {
                let test_id = format!("add_header_value/request/{name}");
                let (resp, _) = r.case(&test_id, "GET", "/", &[("existing-header", "bear")], None).await;
                for (i, want) in values.iter().enumerate() {
                    let have = resp.header(&format!("x-httpwasm-next-header-{header}-{i}"));
                    r.expect_eq(&test_id, "header", want, &have);
                }
            }
        })
    })
    .await;
}

#[tokio::test]
async fn remove_header_request() {
    run_group(|r| {
        Box::pin(async move {
            for (name, removed) in [("new", false), ("existing", true)] {
                let test_id = format!("remove_header/request/{name}");
                let (resp, _) = r.case(&test_id, "GET", "/", &[("existing-header", "bear")], None).await;
                let want = if removed { "" } else { "bear" };
                let have = resp.header("x-httpwasm-next-header-existing-header-0");
                r.expect_eq(&test_id, "header", want, &have);
            }
        })
    })
    .await;
}

#[tokio::test]
async fn read_body_request() {
    run_group(|r| {
        Box::pin(async move {
            for (name, size) in [("empty", 0), ("small", 5), ("medium", 2048), ("large", 4096), ("xlarge", 5000)] {
                let payload = "a".repeat(size);
                r.case(&format!("read_body/request/{name}"), "POST", "/", &[], Some(&payload)).await;
            }
        })
    })
    .await;
}

#[tokio::test]
async fn get_source_addr() {
    run_group(|r| {
        Box::pin(async move {
            r.case("get_source_addr", "GET", "/", &[], None).await;
        })
    })
    .await;
}
