//! Properties (request.*, source.address, plugin_name, response.code, set_property
//! read-back) and header-map liveness after Continue.

use crate::common::*;
use ferrogate_host::{StreamEvent, StreamInfo};

#[test]
fn properties_are_copied_into_response_headers() {
    let (_rt, mut vm) = vm(spec("properties", ""));
    let info = StreamInfo { source_address: Some("10.0.0.7:51234".parse().unwrap()), ..StreamInfo::default() };
    let s = vm.create_stream(info, None);
    let events = roundtrip(&mut vm, s, req("GET", "/v1/x?y=1", &[("x-foo", "bar")]));
    let h = response_headers(&events);
    assert_eq!(header(h, "x-prop-path"), "/v1/x?y=1");
    assert_eq!(header(h, "x-prop-source"), "10.0.0.7:51234");
    assert_eq!(header(h, "x-prop-plugin"), "testfilter");
    assert_eq!(header(h, "x-prop-header"), "bar");
    assert_eq!(header(h, "x-prop-readback"), "stored");
    assert_eq!(header(h, "x-prop-response-code"), "200");
}

#[test]
fn header_map_is_null_after_continue() {
    let (_rt, mut vm) = vm(spec("lifetime", ""));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/", &[]), false).unwrap();
    vm.request_data(s, b"x", true).unwrap();
    let events = vm.take_events(s);
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[1], StreamEvent::RequestData { data: b"x".to_vec(), end_of_stream: true });
    vm.response_headers(s, resp("200", &[]), true).unwrap();
    let events = vm.take_events(s);
    let h = response_headers(&events);
    assert_eq!(header(h, "x-pairs-in-headers"), "4");
    assert_eq!(header(h, "x-pairs-after-continue"), "0");
    assert_eq!(header(h, "x-request-pairs-in-response"), "0");
    assert!(!vm.is_failed());
}
