//! Body rewrite with buffering until end_of_stream (request and response, chunked input,
//! cumulative body_size) and the buffer limits (413 / 500 / reset).

use crate::common::*;
use ferrogate_host::StreamEvent;

#[test]
fn mode_b_rewrites_request_and_response_bodies() {
    let (_rt, mut vm) = vm(spec("body", ""));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/", &[("content-length", "6")]), false).unwrap();
    let events = vm.take_events(s);
    // Headers go on at once (sequence B), without the stale content-length.
    let [StreamEvent::RequestHeaders { headers, end_of_stream: false }] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert!(headers.get("content-length").is_none());
    vm.request_data(s, b"ab", false).unwrap();
    vm.request_data(s, b"cd", false).unwrap();
    assert!(vm.take_events(s).is_empty(), "paused body callbacks buffer");
    vm.request_data(s, b"ef", true).unwrap();
    assert_eq!(
        vm.take_events(s),
        [StreamEvent::RequestData { data: b"rewritten:ABCDEF".to_vec(), end_of_stream: true }]
    );
    vm.response_headers(s, resp("200", &[("content-length", "5")]), false).unwrap();
    let events = vm.take_events(s);
    let h = response_headers(&events);
    assert!(h.get("content-length").is_none());
    assert_eq!(header(h, "x-body-sizes"), "2,4,6", "body_size is cumulative while paused");
    vm.response_data(s, b"hel", false).unwrap();
    assert!(vm.take_events(s).is_empty());
    vm.response_data(s, b"lo", true).unwrap();
    assert_eq!(vm.take_events(s), [StreamEvent::ResponseData { data: b"[hello]".to_vec(), end_of_stream: true }]);
}

#[test]
fn mode_d_holds_headers_and_fixes_content_length() {
    let mut spec = spec("body", r#","hold":"1""#);
    spec.allow_on_headers_stop_iteration = true;
    let (_rt, mut vm) = vm(spec);
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/", &[("content-length", "4")]), false).unwrap();
    vm.request_data(s, b"ab", false).unwrap();
    assert!(vm.take_events(s).is_empty());
    vm.request_data(s, b"cd", true).unwrap();
    let events = vm.take_events(s);
    let StreamEvent::RequestHeaders { headers, end_of_stream: false } = &events[0] else {
        panic!("{events:?}");
    };
    assert_eq!(headers.get_str("content-length"), Some("14"));
    assert_eq!(events[1], StreamEvent::RequestData { data: b"rewritten:ABCD".to_vec(), end_of_stream: true });
    vm.response_headers(s, resp("200", &[("content-length", "2")]), false).unwrap();
    assert!(vm.take_events(s).is_empty(), "response headers held in mode D");
    vm.response_data(s, b"ok", true).unwrap();
    let events = vm.take_events(s);
    assert_eq!(header(response_headers(&events), "content-length"), "4");
    assert_eq!(events[1], StreamEvent::ResponseData { data: b"[ok]".to_vec(), end_of_stream: true });
}

#[test]
fn request_over_limit_is_413_through_the_filter() {
    let mut spec = spec("body", "");
    spec.body_buffer_limit = 8;
    let (_rt, mut vm) = vm(spec);
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/", &[]), false).unwrap();
    vm.take_events(s);
    vm.request_data(s, b"aaaa", false).unwrap();
    vm.request_data(s, b"bbbb", false).unwrap();
    assert!(vm.take_events(s).is_empty(), "8 bytes fit");
    vm.request_data(s, b"c", false).unwrap();
    let events = vm.take_events(s);
    assert_eq!(events[0], StreamEvent::AbortUpstream { details: "request_payload_too_large".into() });
    let h = response_headers(&events);
    assert_eq!(header(h, ":status"), "413");
    assert_eq!(header(h, "x-filter-saw-response"), "413");
    assert_eq!(header(h, "x-body-sizes"), "4,8", "the overflowing chunk's callback is skipped");
    // The reply body went through this filter's own on_response_body (which wraps bodies).
    let reply_body = b"[Payload Too Large]".to_vec();
    assert_eq!(events[2], StreamEvent::ResponseData { data: reply_body, end_of_stream: true });
    vm.request_data(s, b"more", true).unwrap();
    assert!(vm.take_events(s).is_empty(), "request dropped after a local reply");
}

#[test]
fn response_over_limit_is_500_if_headers_held_else_reset() {
    let mut held = spec("body", r#","hold":"1""#);
    held.allow_on_headers_stop_iteration = true;
    held.body_buffer_limit = 4;
    let (_rt, mut vm) = vm(held);
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("GET", "/", &[]), true).unwrap();
    vm.response_headers(s, resp("200", &[]), false).unwrap();
    vm.take_events(s);
    vm.response_data(s, b"0123", false).unwrap();
    vm.response_data(s, b"4", false).unwrap();
    let events = vm.take_events(s);
    assert_eq!(events[0], StreamEvent::AbortUpstream { details: "response_payload_too_large".into() });
    assert_eq!(header(response_headers(&events), ":status"), "500");

    let mut sent = spec("body", "");
    sent.body_buffer_limit = 4;
    let (_rt2, mut vm2) = crate::common::vm(sent);
    let s = new_stream(&mut vm2);
    vm2.request_headers(s, req("GET", "/", &[]), true).unwrap();
    vm2.response_headers(s, resp("200", &[]), false).unwrap();
    vm2.take_events(s);
    vm2.response_data(s, b"01234", false).unwrap();
    assert_eq!(vm2.take_events(s), [StreamEvent::Reset { details: "response_payload_too_large".into() }]);
}

#[test]
fn trailers_continue_releases_the_buffered_body() {
    let (_rt, mut vm) = vm(spec("body", ""));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/", &[]), false).unwrap();
    vm.take_events(s);
    vm.request_data(s, b"ab", false).unwrap();
    assert!(vm.take_events(s).is_empty(), "paused body is held");
    let trailers = ferrogate_host::Headers::from_pairs([("grpc-status", "0")]);
    vm.request_trailers(s, trailers.clone()).unwrap();
    assert_eq!(
        vm.take_events(s),
        [
            StreamEvent::RequestData { data: b"ab".to_vec(), end_of_stream: false },
            StreamEvent::RequestTrailers(trailers)
        ]
    );
}
