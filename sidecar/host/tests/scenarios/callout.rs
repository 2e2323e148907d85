//! Pause on request headers, dispatch_http_call, resume (or deny) from the callout
//! response — in Envoy's default mode C and with allow_on_headers_stop_iteration (mode D).

use crate::common::*;
use ferrogate_host::{Headers, HttpCallResponse, StreamEvent, StreamInfo};
use std::collections::HashSet;

fn ok_response(body: &str) -> Option<HttpCallResponse> {
    Some(HttpCallResponse {
        headers: Headers::from_pairs([(":status", "200")]),
        body: body.as_bytes().to_vec(),
        trailers: Headers::new(),
    })
}

#[test]
fn mode_d_delivers_body_while_paused_then_resumes() {
    let mut spec = spec("callout", "");
    spec.allow_on_headers_stop_iteration = true;
    let (_rt, mut vm) = vm(spec);
    let (wakes, wake) = waker();
    let s = vm.create_stream(StreamInfo::default(), wake);
    vm.request_headers(s, req("POST", "/v1/chat", &[]), false).unwrap();
    assert!(vm.take_events(s).is_empty(), "headers must be held");
    let calls = vm.take_http_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].token, calls[0].cluster.as_str(), calls[0].timeout_ms), (4, "auth", 1000));
    assert_eq!(calls[0].headers.get_str(":path"), Some("/check"));
    vm.request_data(s, b"ab", false).unwrap();
    vm.request_data(s, b"cd", true).unwrap();
    assert!(vm.take_events(s).is_empty(), "body is buffered by the paused filter");
    vm.http_call_response(4, ok_response("alice")).unwrap();
    assert_eq!(count(&wakes), 1, "a callout response wakes the stream");
    let events = vm.take_events(s);
    let StreamEvent::RequestHeaders { headers, end_of_stream: false } = &events[0] else {
        panic!("{events:?}");
    };
    assert_eq!(headers.get_str("x-auth"), Some("alice"));
    assert_eq!(events[1], StreamEvent::RequestData { data: b"abcd".to_vec(), end_of_stream: true });
    assert_eq!(events.len(), 2);
    vm.response_headers(s, resp("200", &[]), true).unwrap();
    let events = vm.take_events(s);
    let h = response_headers(&events);
    // Mode D: both chunks reached on_request_body before the resume, cumulative sizes.
    assert_eq!(header(h, "x-body-calls-before-resume"), "2");
    assert_eq!(header(h, "x-body-sizes"), "2,4");
    assert_eq!(count(&wakes), 1, "own inputs do not wake");
}

#[test]
fn mode_c_holds_body_in_hcm_until_resume() {
    let (_rt, mut vm) = vm(spec("callout", ""));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/v1/chat", &[]), false).unwrap();
    vm.request_data(s, b"ab", false).unwrap();
    vm.request_data(s, b"cd", true).unwrap();
    assert!(vm.take_events(s).is_empty());
    let token = vm.take_http_calls()[0].token;
    vm.http_call_response(token, ok_response("bob")).unwrap();
    let events = vm.take_events(s);
    assert!(
        matches!(&events[0], StreamEvent::RequestHeaders { headers, end_of_stream: false }
        if headers.get_str("x-auth") == Some("bob")),
        "{events:?}"
    );
    assert_eq!(events[1], StreamEvent::RequestData { data: b"abcd".to_vec(), end_of_stream: true });
    vm.response_headers(s, resp("200", &[]), true).unwrap();
    let events = vm.take_events(s);
    let h = response_headers(&events);
    // Mode C: no body callback while stopped-all, then one with everything after resume.
    assert_eq!(header(h, "x-body-calls-before-resume"), "0");
    assert_eq!(header(h, "x-body-calls"), "1");
    assert_eq!(header(h, "x-body-sizes"), "4");
}

#[test]
fn denied_callout_sends_403_through_the_filter() {
    let (_rt, mut vm) = vm(spec("callout", ""));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("GET", "/", &[]), true).unwrap();
    let denied = HttpCallResponse {
        headers: Headers::from_pairs([(":status", "401")]),
        body: Vec::new(),
        trailers: Headers::new(),
    };
    vm.http_call_response(4, Some(denied)).unwrap();
    let events = vm.take_events(s);
    assert!(matches!(events[0], StreamEvent::AbortUpstream { .. }), "{events:?}");
    let h = response_headers(&events);
    assert_eq!(header(h, ":status"), "403");
    assert_eq!(header(h, "x-denied"), "1");
    assert_eq!(header(h, "x-filter-saw-response"), "403");
    assert_eq!(events[2], StreamEvent::ResponseData { data: b"denied".to_vec(), end_of_stream: true });
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::RequestHeaders { .. })));
}

#[test]
fn reset_callout_is_num_headers_zero_and_tokens_step_by_four() {
    let (_rt, mut vm) = vm(spec("callout", ""));
    let s1 = new_stream(&mut vm);
    let s2 = new_stream(&mut vm);
    vm.request_headers(s1, req("GET", "/", &[]), true).unwrap();
    vm.request_headers(s2, req("GET", "/", &[]), true).unwrap();
    let tokens: Vec<u32> = vm.take_http_calls().iter().map(|c| c.token).collect();
    assert_eq!(tokens, [4, 8]);
    vm.http_call_response(8, None).unwrap();
    assert_eq!(header(response_headers(&vm.take_events(s2)), ":status"), "403");
    vm.http_call_response(4, ok_response("x")).unwrap();
    assert!(matches!(vm.take_events(s1)[0], StreamEvent::RequestHeaders { end_of_stream: true, .. }));
    // A late answer for a finished stream's call is dropped, not a crash.
    let s3 = new_stream(&mut vm);
    vm.request_headers(s3, req("GET", "/", &[]), true).unwrap();
    vm.finish_stream(s3, true);
    vm.http_call_response(12, ok_response("late")).unwrap();
    assert!(!vm.is_failed());
}

#[test]
fn unknown_cluster_is_bad_argument() {
    let mut spec = spec("callout", "");
    spec.clusters = Some(HashSet::from(["other".to_string()]));
    let (_rt, mut vm) = vm(spec);
    let s = new_stream(&mut vm);
    let events = roundtrip(&mut vm, s, req("GET", "/", &[]));
    assert!(vm.take_http_calls().is_empty());
    assert_eq!(header(response_headers(&events), "x-callout-error"), "BadArgument");
}

#[test]
fn mode_c_resume_replays_body_then_trailers_through_the_filter() {
    let (_rt, mut vm) = vm(spec("callout", ""));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/", &[]), false).unwrap();
    vm.request_data(s, b"ab", false).unwrap();
    vm.request_trailers(s, Headers::from_pairs([("x-t", "1")])).unwrap();
    assert!(vm.take_events(s).is_empty());
    vm.http_call_response(4, ok_response("carol")).unwrap();
    let events = vm.take_events(s);
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(matches!(events[0], StreamEvent::RequestHeaders { end_of_stream: false, .. }));
    // With trailers the body never carries end_of_stream.
    assert_eq!(events[1], StreamEvent::RequestData { data: b"ab".to_vec(), end_of_stream: false });
    assert_eq!(events[2], StreamEvent::RequestTrailers(Headers::from_pairs([("x-t", "1")])));
}
