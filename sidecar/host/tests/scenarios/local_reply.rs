//! proxy_send_local_response from on_request_headers: the return value is overridden, the
//! reply runs through the plugin's own on_response_headers, later inputs are dropped.

use crate::common::*;
use ferrogate_host::{LogLevel, StreamEvent};

#[test]
fn local_reply_passes_through_on_response_headers() {
    let (_rt, mut vm) = vm(spec("local_reply", ""));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("POST", "/", &[]), false).unwrap();
    let events = vm.take_events(s);
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(matches!(events[0], StreamEvent::AbortUpstream { .. }));
    let StreamEvent::ResponseHeaders { headers, end_of_stream: false } = &events[1] else {
        panic!("{events:?}");
    };
    assert_eq!(header(headers, ":status"), "401");
    assert_eq!(header(headers, "x-local"), "1");
    assert_eq!(header(headers, "content-length"), "4");
    assert_eq!(header(headers, "content-type"), "text/plain");
    assert_eq!(header(headers, "x-filter-saw-response"), "401");
    assert_eq!(events[2], StreamEvent::ResponseData { data: b"nope".to_vec(), end_of_stream: true });
    // The request is not forwarded, later body and an upstream answer are ignored.
    vm.request_data(s, b"x", true).unwrap();
    vm.response_headers(s, resp("200", &[]), true).unwrap();
    assert!(vm.take_events(s).is_empty());
    vm.finish_stream(s, false);
    let logs = vm.take_logs();
    assert!(logs.contains(&(LogLevel::Info, format!("on_log {s}"))), "{logs:?}");
}
