//! The http-wasm host against host-go v0.7.0's ABI semantics, with guests written in WAT.
//! Guests report what they saw through the response body (`$emit`), request headers that
//! `next` receives, or response headers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use ferrogate_host::httpwasm::{Body, ContentLength, Middleware, PluginSettings};
use http::{Request, Response};
use http_body_util::{BodyExt, Full};

/// Every import the tests use, a page of memory, `$emit` helpers, then the test's own parts.
fn module(extra: &str) -> Vec<u8> {
    let text = format!(
        r#"(module
  (import "http_handler" "enable_features" (func $enable_features (param i32) (result i32)))
  (import "http_handler" "get_config" (func $get_config (param i32 i32) (result i32)))
  (import "http_handler" "log" (func $log (param i32 i32 i32)))
  (import "http_handler" "log_enabled" (func $log_enabled (param i32) (result i32)))
  (import "http_handler" "get_method" (func $get_method (param i32 i32) (result i32)))
  (import "http_handler" "set_method" (func $set_method (param i32 i32)))
  (import "http_handler" "get_uri" (func $get_uri (param i32 i32) (result i32)))
  (import "http_handler" "set_uri" (func $set_uri (param i32 i32)))
  (import "http_handler" "get_protocol_version" (func $get_protocol_version (param i32 i32) (result i32)))
  (import "http_handler" "get_header_names" (func $get_header_names (param i32 i32 i32) (result i64)))
  (import "http_handler" "get_header_values" (func $get_header_values (param i32 i32 i32 i32 i32) (result i64)))
  (import "http_handler" "set_header_value" (func $set_header_value (param i32 i32 i32 i32 i32)))
  (import "http_handler" "add_header_value" (func $add_header_value (param i32 i32 i32 i32 i32)))
  (import "http_handler" "remove_header" (func $remove_header (param i32 i32 i32)))
  (import "http_handler" "read_body" (func $read_body (param i32 i32 i32) (result i64)))
  (import "http_handler" "write_body" (func $write_body (param i32 i32 i32)))
  (import "http_handler" "get_status_code" (func $get_status_code (result i32)))
  (import "http_handler" "set_status_code" (func $set_status_code (param i32)))
  (import "http_handler" "get_source_addr" (func $get_source_addr (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (func $emit (param $ptr i32) (param $len i32) (call $write_body (i32.const 1) (local.get $ptr) (local.get $len)))
  (func $emit_i64 (param $v i64) (i64.store (i32.const 60000) (local.get $v)) (call $emit (i32.const 60000) (i32.const 8)))
  (func $emit_i32 (param $v i32) (i32.store (i32.const 60000) (local.get $v)) (call $emit (i32.const 60000) (i32.const 4)))
  {extra}
)"#
    );
    wat::parse_str(text).unwrap()
}

/// A guest with these parts and an empty `handle_response` unless `extra` has one.
fn middleware(extra: &str) -> Middleware {
    Middleware::new(&module(extra), PluginSettings::default()).unwrap()
}

fn remote() -> SocketAddr {
    "10.1.2.3:4567".parse().unwrap()
}

fn get(uri: &str) -> Request<Bytes> {
    Request::builder().uri(uri).header("host", "example.com").body(Bytes::new()).unwrap()
}

fn post(uri: &str, body: &'static [u8]) -> Request<Bytes> {
    Request::builder()
        .method("POST")
        .uri(uri)
        .header("host", "example.com")
        .header("content-length", body.len().to_string())
        .body(Bytes::from_static(body))
        .unwrap()
}

fn full(body: &'static [u8]) -> Body {
    Full::new(Bytes::from_static(body)).map_err(|never| match never {}).boxed()
}

/// A `next` that records the request it got and answers 200 `upstream!`.
type Seen = Arc<Mutex<Option<Request<Bytes>>>>;

async fn serve(mw: &Middleware, req: Request<Bytes>) -> (Response<Bytes>, Option<Request<Bytes>>) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let resp = mw
        .serve(req, remote(), move |r| async move {
            *record.lock().unwrap() = Some(r);
            Response::builder().header("content-length", "9").header("x-up", "1").body(full(b"upstream!")).unwrap()
        })
        .await;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    let got = seen.lock().unwrap().take();
    (Response::from_parts(parts, body), got)
}

fn i64_at(body: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(body[at..at + 8].try_into().unwrap())
}

fn i32_at(body: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(body[at..at + 4].try_into().unwrap())
}

#[tokio::test]
async fn buf_limit_too_small_returns_length_and_writes_nothing() {
    let mw = middleware(
        r#"(data (i32.const 1024) "ZZZZ")
        (func (export "handle_request") (result i64)
          (call $emit_i32 (call $get_uri (i32.const 1024) (i32.const 2)))
          (call $emit (i32.const 1024) (i32.const 4))
          (call $emit_i32 (call $get_uri (i32.const 2048) (i32.const 100)))
          (call $emit (i32.const 2048) (call $get_uri (i32.const 2048) (i32.const 100)))
          (call $emit_i32 (call $get_method (i32.const 1024) (i32.const 0)))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (resp, next) = serve(&mw, get("/hello?x=1")).await;
    let body = resp.body();
    assert!(next.is_none());
    assert_eq!(i32_at(body, 0), 10, "the full length, although the buffer is too small");
    assert_eq!(&body[4..8], b"ZZZZ", "nothing written when it does not fit");
    assert_eq!(i32_at(body, 8), 10);
    assert_eq!(&body[12..22], b"/hello?x=1");
    assert_eq!(i32_at(body, 22), 3, "buf_limit 0 probes: GET");
}

#[tokio::test]
async fn header_names_and_values_are_nul_terminated_lists_with_counts() {
    let mw = middleware(
        r#"(data (i32.const 100) "X-A")
        (data (i32.const 110) "host")
        (data (i32.const 120) "x-missing")
        (func (export "handle_request") (result i64)
          (call $emit_i64 (call $get_header_names (i32.const 0) (i32.const 0) (i32.const 0)))
          (call $emit_i64 (call $get_header_names (i32.const 0) (i32.const 2048) (i32.const 1000)))
          (call $emit (i32.const 2048) (i32.const 13))
          (call $emit_i64 (call $get_header_values (i32.const 0) (i32.const 100) (i32.const 3) (i32.const 3072) (i32.const 100)))
          (call $emit (i32.const 3072) (i32.const 4))
          (call $emit_i64 (call $get_header_values (i32.const 0) (i32.const 110) (i32.const 4) (i32.const 3072) (i32.const 100)))
          (call $emit (i32.const 3072) (i32.const 12))
          (call $emit_i64 (call $get_header_values (i32.const 0) (i32.const 120) (i32.const 9) (i32.const 3072) (i32.const 100)))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let req = Request::builder()
        .uri("/")
        .header("host", "example.com")
        .header("X-B", "2")
        .header("x-a", "1")
        .header("x-a", "3")
        .body(Bytes::new())
        .unwrap();
    let (resp, _) = serve(&mw, req).await;
    let body = resp.body();
    let list = 3i64 << 32 | 13;
    assert_eq!(i64_at(body, 0), list, "probe: count<<32|len");
    assert_eq!(i64_at(body, 8), list);
    assert_eq!(&body[16..29], b"host\0x-a\0x-b\0", "lower-cased, sorted, host included");
    assert_eq!(i64_at(body, 29), 2i64 << 32 | 4, "two values of x-a, any name case");
    assert_eq!(&body[37..41], b"1\x003\0");
    assert_eq!(i64_at(body, 41), 1i64 << 32 | 12);
    assert_eq!(&body[49..61], b"example.com\0", "host from the Host header");
    assert_eq!(i64_at(body, 61), 0, "no values: 0");
}

#[tokio::test]
async fn request_header_edits_uri_and_method_reach_next() {
    let mw = middleware(
        r#"(data (i32.const 100) "x-set") (data (i32.const 110) "v")
        (data (i32.const 120) "x-add") (data (i32.const 130) "a") (data (i32.const 140) "b")
        (data (i32.const 150) "x-del") (data (i32.const 160) "/new?q=2") (data (i32.const 170) "PUT")
        (func (export "handle_request") (result i64)
          (call $set_header_value (i32.const 0) (i32.const 100) (i32.const 5) (i32.const 110) (i32.const 1))
          (call $add_header_value (i32.const 0) (i32.const 120) (i32.const 5) (i32.const 130) (i32.const 1))
          (call $add_header_value (i32.const 0) (i32.const 120) (i32.const 5) (i32.const 140) (i32.const 1))
          (call $remove_header (i32.const 0) (i32.const 150) (i32.const 5))
          (call $set_uri (i32.const 160) (i32.const 8))
          (call $set_method (i32.const 170) (i32.const 3))
          (i64.const 1))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let req = Request::builder()
        .uri("/old?x=1")
        .header("host", "example.com")
        .header("x-set", "1")
        .header("x-set", "2")
        .header("x-del", "gone")
        .body(Bytes::new())
        .unwrap();
    let (resp, next) = serve(&mw, req).await;
    let next = next.expect("next called");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.body().as_ref(), b"upstream!");
    assert_eq!(next.uri(), "/new?q=2");
    assert_eq!(next.method(), "PUT");
    let values =
        |n: &str| next.headers().get_all(n).iter().map(|v| v.to_str().unwrap().to_string()).collect::<Vec<_>>();
    assert_eq!(values("x-set"), ["v"]);
    assert_eq!(values("x-add"), ["a", "b"]);
    assert!(values("x-del").is_empty());
    assert_eq!(values("host"), ["example.com"]);
}

#[tokio::test]
async fn get_uri_keeps_the_escaped_path_and_query() {
    let mw = middleware(
        r#"(func (export "handle_request") (result i64)
          (call $emit (i32.const 2048) (call $get_uri (i32.const 2048) (i32.const 100)))
          (call $emit (i32.const 2048) (call $get_source_addr (i32.const 2048) (i32.const 100)))
          (call $emit (i32.const 2048) (call $get_protocol_version (i32.const 2048) (i32.const 100)))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (resp, _) = serve(&mw, get("/a%2Fb?x=1&y")).await;
    assert_eq!(resp.body().as_ref(), b"/a%2Fb?x=1&y10.1.2.3:4567HTTP/1.1");
}

/// Reads `limit` bytes of the request body, puts them in request header `x-read` and the EOF
/// flag in `x-eof`, then calls next.
fn body_reader(limit: u32, features: u32) -> Middleware {
    middleware(&format!(
        r#"(data (i32.const 100) "x-read") (data (i32.const 110) "x-eof") (data (i32.const 120) "01")
        (func (export "handle_request") (result i64) (local $r i64)
          (drop (call $enable_features (i32.const {features})))
          (local.set $r (call $read_body (i32.const 0) (i32.const 2048) (i32.const {limit})))
          (call $set_header_value (i32.const 0) (i32.const 100) (i32.const 6) (i32.const 2048) (i32.wrap_i64 (local.get $r)))
          (call $set_header_value (i32.const 0) (i32.const 110) (i32.const 5)
            (i32.add (i32.const 120) (i32.wrap_i64 (i64.shr_u (local.get $r) (i64.const 32)))) (i32.const 1))
          (i64.const 1))
        (func (export "handle_response") (param i32 i32))"#
    ))
}

#[tokio::test]
async fn read_body_without_buffer_request_consumes_what_next_gets() {
    let mw = body_reader(5, 0);
    let (_, next) = serve(&mw, post("/", b"hello world")).await;
    let next = next.unwrap();
    assert_eq!(next.headers()["x-read"], "hello");
    assert_eq!(next.headers()["x-eof"], "0");
    assert_eq!(next.body().as_ref(), b" world", "next gets the unread remainder");
    assert_eq!(next.extensions().get::<ContentLength>(), Some(&ContentLength(Some(11))));
}

#[tokio::test]
async fn read_body_sets_eof_with_the_last_bytes() {
    let mw = body_reader(100, 0);
    let (_, next) = serve(&mw, post("/", b"hello world")).await;
    let next = next.unwrap();
    assert_eq!(next.headers()["x-read"], "hello world");
    assert_eq!(next.headers()["x-eof"], "1");
    assert!(next.body().is_empty());
}

#[tokio::test]
async fn buffer_request_keeps_only_the_final_piece_like_host_go_v0_7_0() {
    let small = body_reader(100, 1);
    let (_, next) = serve(&small, post("/", b"hello world")).await;
    assert_eq!(next.unwrap().body().as_ref(), b"hello world", "read in one piece: intact");
    let split = body_reader(5, 1);
    let (_, next) = serve(&split, post("/", b"hello world")).await;
    assert_eq!(next.unwrap().body().as_ref(), b" world", "the first piece came without EOF: lost");
}

#[tokio::test]
async fn write_body_replaces_then_appends_and_leaves_content_length() {
    let mw = middleware(
        r#"(data (i32.const 100) "new") (data (i32.const 110) "er")
        (func (export "handle_request") (result i64)
          (call $write_body (i32.const 0) (i32.const 100) (i32.const 3))
          (call $write_body (i32.const 0) (i32.const 110) (i32.const 2))
          (i64.const 1))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (_, next) = serve(&mw, post("/", b"original")).await;
    let next = next.unwrap();
    assert_eq!(next.body().as_ref(), b"newer");
    assert_eq!(next.extensions().get::<ContentLength>(), Some(&ContentLength(Some(8))), "Go's r.ContentLength");
    assert_eq!(next.headers()["content-length"], "8");
}

#[tokio::test]
async fn next_zero_sends_the_guest_response_committed_at_set_status_code() {
    let mw = middleware(
        r#"(data (i32.const 100) "x-h") (data (i32.const 110) "1") (data (i32.const 120) "x-late")
        (data (i32.const 130) "teapot")
        (func (export "handle_request") (result i64)
          (call $set_header_value (i32.const 1) (i32.const 100) (i32.const 3) (i32.const 110) (i32.const 1))
          (call $set_status_code (i32.const 418))
          (call $set_header_value (i32.const 1) (i32.const 120) (i32.const 6) (i32.const 110) (i32.const 1))
          (call $write_body (i32.const 1) (i32.const 130) (i32.const 6))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (resp, next) = serve(&mw, get("/")).await;
    assert!(next.is_none());
    assert_eq!(resp.status(), 418);
    assert_eq!(resp.headers()["x-h"], "1");
    assert!(resp.headers().get("x-late").is_none(), "headers set after the status are lost");
    assert_eq!(resp.body().as_ref(), b"teapot");
}

#[tokio::test]
async fn next_zero_without_writes_is_200_with_the_headers() {
    let mw = middleware(
        r#"(data (i32.const 100) "x-h") (data (i32.const 110) "1")
        (func (export "handle_request") (result i64)
          (call $set_header_value (i32.const 1) (i32.const 100) (i32.const 3) (i32.const 110) (i32.const 1))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32) unreachable)"#,
    );
    let (resp, _) = serve(&mw, get("/")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-h"], "1");
    assert!(resp.body().is_empty());
}

#[tokio::test]
async fn buffer_response_lets_handle_response_rewrite_the_upstream_response() {
    let mw = middleware(
        r#"(data (i32.const 100) "<") (data (i32.const 110) "content-length") (data (i32.const 130) "x-was-200")
        (data (i32.const 140) "y")
        (func (export "handle_request") (result i64)
          (drop (call $enable_features (i32.const 2)))
          (i64.const 1))
        (func (export "handle_response") (param i32 i32) (local $r i64)
          (if (i32.eq (call $get_status_code) (i32.const 200))
            (then (call $set_header_value (i32.const 1) (i32.const 130) (i32.const 9) (i32.const 140) (i32.const 1))))
          (local.set $r (call $read_body (i32.const 1) (i32.const 2048) (i32.const 100)))
          (call $write_body (i32.const 1) (i32.const 100) (i32.const 1))
          (call $write_body (i32.const 1) (i32.const 2048) (i32.wrap_i64 (local.get $r)))
          (call $remove_header (i32.const 1) (i32.const 110) (i32.const 14))
          (call $set_status_code (i32.const 201)))"#,
    );
    let (resp, next) = serve(&mw, get("/")).await;
    assert!(next.is_some());
    assert_eq!(resp.status(), 201);
    assert_eq!(resp.body().as_ref(), b"<upstream!");
    assert_eq!(resp.headers()["x-was-200"], "y");
    assert_eq!(resp.headers()["x-up"], "1", "upstream headers kept");
}

#[tokio::test]
async fn get_status_code_traps_without_buffer_response() {
    let mw = middleware(
        r#"(func (export "handle_request") (result i64) (drop (call $get_status_code)) (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (resp, _) = serve(&mw, get("/")).await;
    assert_eq!(resp.status(), 500);
    let text = String::from_utf8_lossy(resp.body());
    assert!(text.contains("interface conversion"), "{text}");
}

#[tokio::test]
async fn handle_response_cannot_change_an_unbuffered_response() {
    let mw = middleware(
        r#"(global $after (mut i32) (i32.const 7))
        (func (export "handle_request") (result i64)
          (if (i32.eq (call $get_method (i32.const 0) (i32.const 0)) (i32.const 4))
            (then (call $emit_i32 (global.get $after)) (return (i64.const 0))))
          (i64.const 1))
        (func (export "handle_response") (param i32 i32)
          (call $set_status_code (i32.const 201))
          (global.set $after (i32.const 1)))"#,
    );
    let (resp, _) = serve(&mw, get("/")).await;
    assert_eq!(resp.status(), 200, "set_status_code after next traps without buffer_response");
    assert_eq!(resp.body().as_ref(), b"upstream!");
    let report = Request::builder().method("POST").uri("/").body(Bytes::new()).unwrap();
    let (resp, _) = serve(&mw, report).await;
    assert_eq!(i32_at(resp.body(), 0), 7, "handle_response stopped at the trap");
}

#[tokio::test]
async fn trap_in_handle_request_is_500_with_the_error_and_the_instance_returns() {
    let mw = middleware(
        r#"(global $n (mut i32) (i32.const 0))
        (func (export "handle_request") (result i64)
          (global.set $n (i32.add (global.get $n) (i32.const 1)))
          (if (i32.eq (global.get $n) (i32.const 1)) (then unreachable))
          (call $emit_i32 (global.get $n))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (resp, next) = serve(&mw, get("/")).await;
    assert!(next.is_none());
    assert_eq!(resp.status(), 500);
    let text = String::from_utf8_lossy(resp.body());
    assert!(text.contains("wasm error") && text.contains("unreachable"), "{text}");
    assert_eq!(mw.instances(), 1, "back in the pool after the trap");
    let (resp, _) = serve(&mw, get("/")).await;
    assert_eq!(i32_at(resp.body(), 0), 2, "the same instance, its globals kept");
}

#[tokio::test]
async fn unknown_header_kind_traps() {
    let mw = middleware(
        r#"(func (export "handle_request") (result i64)
          (drop (call $get_header_names (i32.const 7) (i32.const 0) (i32.const 0))) (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (resp, _) = serve(&mw, get("/")).await;
    assert_eq!(resp.status(), 500);
    assert!(String::from_utf8_lossy(resp.body()).contains("unsupported header kind: 7"));
}

#[tokio::test]
async fn start_exit_zero_leaves_an_unusable_instance() {
    let mw = middleware(
        r#"(func (export "_start") (call $proc_exit (i32.const 0)))
        (func (export "handle_request") (result i64) (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (resp, _) = serve(&mw, get("/")).await;
    assert_eq!(resp.status(), 500);
    assert!(String::from_utf8_lossy(resp.body()).contains("module closed with exit_code(0)"));
}

#[tokio::test]
async fn start_nonzero_exit_fails_the_middleware() {
    let wasm = module(
        r#"(func (export "_start") (call $proc_exit (i32.const 3)))
        (func (export "handle_request") (result i64) (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let err = Middleware::new(&wasm, PluginSettings::default()).err().expect("refused");
    assert!(err.to_string().contains("exit_code(3)"), "{err}");
}

#[tokio::test]
async fn request_functions_trap_during_init() {
    let wasm = module(
        r#"(func (export "_initialize") (drop (call $get_method (i32.const 0) (i32.const 0))))
        (func (export "handle_request") (result i64) (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let err = Middleware::new(&wasm, PluginSettings::default()).err().expect("refused");
    assert!(err.to_string().contains("interface conversion"), "{err}");
}

#[tokio::test]
async fn init_time_features_apply_to_every_request_and_config_is_readable() {
    let wasm = module(
        r#"(global $init (mut i32) (i32.const 0))
        (func (export "_start") (global.set $init (call $enable_features (i32.const 2))))
        (func (export "_initialize") (drop (call $get_config (i32.const 0) (i32.const 0))))
        (func (export "handle_request") (result i64)
          (call $emit_i32 (global.get $init))
          (call $emit_i32 (call $get_status_code))
          (call $emit_i32 (call $enable_features (i32.const 1)))
          (call $emit (i32.const 2048) (call $get_config (i32.const 2048) (i32.const 100)))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let settings = PluginSettings { guest_config: br#"{"a":1}"#.to_vec(), ..PluginSettings::default() };
    let mw = Middleware::new(&wasm, settings).unwrap();
    for _ in 0..2 {
        let (resp, _) = serve(&mw, get("/")).await;
        assert_eq!(resp.status(), 200, "get_status_code works: buffer_response is on");
        let body = resp.body();
        assert_eq!(i32_at(body, 0), 2);
        assert_eq!(i32_at(body, 4), 200);
        assert_eq!(i32_at(body, 8), 3, "the union of init-time and request features");
        assert_eq!(&body[12..], br#"{"a":1}"#);
    }
}

#[tokio::test]
async fn request_features_do_not_outlive_the_request() {
    let mw = middleware(
        r#"(global $n (mut i32) (i32.const 0))
        (func (export "handle_request") (result i64)
          (global.set $n (i32.add (global.get $n) (i32.const 1)))
          (if (i32.eq (global.get $n) (i32.const 1)) (then (drop (call $enable_features (i32.const 2)))))
          (call $emit_i32 (call $get_status_code))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (first, _) = serve(&mw, get("/")).await;
    assert_eq!(first.status(), 200);
    let (second, _) = serve(&mw, get("/")).await;
    assert_eq!(second.status(), 500, "buffer_response was for the first request only");
}

#[tokio::test]
async fn one_pooled_instance_serves_sequential_requests() {
    let mw = middleware(
        r#"(global $n (mut i32) (i32.const 0))
        (func (export "handle_request") (result i64)
          (global.set $n (i32.add (global.get $n) (i32.const 1)))
          (call $emit_i32 (global.get $n))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    for expected in 1..=3 {
        let (resp, _) = serve(&mw, get("/")).await;
        assert_eq!(i32_at(resp.body(), 0), expected);
        assert_eq!(mw.instances(), 1);
    }
}

#[tokio::test]
async fn concurrent_requests_get_their_own_instance_for_request_and_response() {
    let mw = middleware(
        r#"(global $id (mut i32) (i32.const 0))
        (data (i32.const 100) "x-id") (data (i32.const 110) "x-same") (data (i32.const 120) "yes")
        (func (export "handle_request") (result i64)
          (drop (call $enable_features (i32.const 2)))
          (drop (call $get_header_values (i32.const 0) (i32.const 100) (i32.const 4) (i32.const 2048) (i32.const 10)))
          (global.set $id (i32.load8_u (i32.const 2048)))
          (i64.or (i64.shl (i64.extend_i32_u (global.get $id)) (i64.const 32)) (i64.const 1)))
        (func (export "handle_response") (param $ctx i32) (param i32)
          (if (i32.eq (local.get $ctx) (global.get $id))
            (then (call $set_header_value (i32.const 1) (i32.const 110) (i32.const 6) (i32.const 120) (i32.const 3)))))"#,
    );
    let release = Arc::new(tokio::sync::Notify::new());
    let request = |id: &str| Request::builder().uri("/").header("x-id", id).body(Bytes::new()).unwrap();
    let (wait, wake) = (release.clone(), release.clone());
    let first = mw.serve(request("A"), remote(), move |_| async move {
        wait.notified().await;
        Response::new(full(b"a"))
    });
    let second = mw.serve(request("B"), remote(), move |_| async move {
        wake.notify_one();
        Response::new(full(b"b"))
    });
    let (a, b) = tokio::join!(first, second);
    assert_eq!(a.headers().get("x-same").map(|v| v.as_bytes()), Some(&b"yes"[..]));
    assert_eq!(b.headers().get("x-same").map(|v| v.as_bytes()), Some(&b"yes"[..]));
    assert_eq!(mw.instances(), 2, "two in flight: two instances, both back in the pool");
}

#[tokio::test]
async fn guest_log_goes_to_the_log_crate_and_log_enabled_is_true() {
    let mw = middleware(
        r#"(data (i32.const 100) "hello from the guest")
        (func (export "handle_request") (result i64)
          (call $log (i32.const 1) (i32.const 100) (i32.const 20))
          (call $emit_i32 (call $log_enabled (i32.const -1)))
          (i64.const 0))
        (func (export "handle_response") (param i32 i32))"#,
    );
    let (resp, _) = serve(&mw, get("/")).await;
    assert_eq!(i32_at(resp.body(), 0), 1);
}

#[test]
fn missing_exports_are_refused_with_host_go_messages() {
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1) (func (export "handle_request") (result i64) (i64.const 0)))"#,
    )
    .unwrap();
    let err = Middleware::new(&wasm, PluginSettings::default()).err().expect("refused");
    assert_eq!(err.to_string(), "wasm: guest doesn't export func[handle_response]");
}
