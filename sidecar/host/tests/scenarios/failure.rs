//! Guest failures: a trap or a runaway loop fails the VM (500 local reply or reset for
//! the stream, later calls fail without entering the guest), while a new VM from the same
//! Runtime keeps serving; a rejected configuration is an error.

use crate::common::*;
use ferrogate_host::{HostError, LogLevel, StreamEvent, StreamInfo};
use std::time::{Duration, Instant};

fn is_fail_reply(events: &[StreamEvent]) -> bool {
    matches!(events,
        [StreamEvent::AbortUpstream { details }, StreamEvent::ResponseHeaders { headers, end_of_stream: true }]
        if details == "wasm_fail_stream" && headers.get_str(":status") == Some("500"))
}

#[test]
fn trap_fails_vm_and_a_new_vm_serves() {
    let rt = runtime(spec("none", ""));
    let mut vm = rt.new_vm(0).unwrap();
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("GET", "/", &[("x-trap", "1")]), true).unwrap();
    assert!(is_fail_reply(&vm.take_events(s)));
    assert!(vm.is_failed());
    let logs = vm.take_logs();
    assert!(logs.iter().any(|(l, m)| *l == LogLevel::Critical && m.contains("trap requested")), "{logs:?}");
    // Later streams on the failed VM get the same reply without entering the guest.
    let s2 = new_stream(&mut vm);
    vm.request_headers(s2, req("GET", "/", &[]), true).unwrap();
    assert!(is_fail_reply(&vm.take_events(s2)));
    assert!(matches!(vm.on_tick(), Err(HostError::VmFailed)));
    vm.finish_stream(s, false);
    // Fail-reload: a fresh VM from the same Runtime works.
    let mut fresh = rt.new_vm(0).unwrap();
    let s3 = new_stream(&mut fresh);
    fresh.request_headers(s3, req("GET", "/", &[]), true).unwrap();
    assert!(matches!(fresh.take_events(s3)[..], [StreamEvent::RequestHeaders { end_of_stream: true, .. }]));
}

#[test]
fn runaway_loop_hits_the_deadline() {
    let mut spec = spec("none", "");
    spec.callback_deadline_ms = 100;
    let (_rt, mut vm) = vm(spec);
    let s = new_stream(&mut vm);
    let started = Instant::now();
    vm.request_headers(s, req("GET", "/", &[("x-loop", "1")]), true).unwrap();
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(is_fail_reply(&vm.take_events(s)));
    assert!(vm.is_failed());
}

#[test]
fn trap_after_response_started_resets() {
    let (_rt, mut vm) = vm(spec("none", ""));
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("GET", "/", &[("x-trap-phase", "response-body")]), true).unwrap();
    vm.response_headers(s, resp("200", &[]), false).unwrap();
    vm.take_events(s);
    vm.response_data(s, b"x", true).unwrap();
    assert_eq!(vm.take_events(s), [StreamEvent::Reset { details: "wasm_fail_stream".into() }]);
}

#[test]
fn trap_fails_other_paused_streams_and_wakes_them() {
    let (_rt, mut vm) = vm(spec("callout", ""));
    let (wakes, wake) = waker();
    let paused = vm.create_stream(StreamInfo::default(), wake);
    vm.request_headers(paused, req("GET", "/", &[]), true).unwrap();
    let s = new_stream(&mut vm);
    vm.request_headers(s, req("GET", "/", &[("x-trap", "1")]), true).unwrap();
    assert_eq!(count(&wakes), 1);
    assert!(is_fail_reply(&vm.take_events(paused)));
    assert!(matches!(vm.http_call_response(4, None), Err(HostError::VmFailed)));
}

#[test]
fn rejected_configuration_is_an_error() {
    let rt = runtime(spec("reject", ""));
    assert!(matches!(rt.new_vm(0), Err(HostError::ConfigRejected)));
    let mut spec = spec("none", "");
    spec.vm_configuration = b"reject".to_vec();
    let rt = runtime(spec);
    assert!(matches!(rt.new_vm(0), Err(HostError::ConfigRejected)));
}

#[test]
fn memory_limit_applies_per_vm() {
    let mut spec = spec("none", "");
    spec.max_memory_bytes = 64 * 1024; // below the module's initial memory
    let rt = runtime(spec);
    assert!(matches!(rt.new_vm(0), Err(HostError::Module(_))));
}
