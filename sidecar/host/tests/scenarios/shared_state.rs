//! Process-wide state shared by VMs of one Runtime: shared data with CAS, shared queues,
//! ticks, and metrics in Prometheus text.

use crate::common::*;
use ferrogate_host::LogLevel;
use std::time::Duration;

fn shared_str(rt: &ferrogate_host::Runtime, key: &str) -> String {
    let (value, _) = rt.shared().get_shared_data("vm", key).unwrap_or_else(|| panic!("no {key}"));
    String::from_utf8(value).unwrap()
}

#[test]
fn cas_conflict_between_two_vms() {
    let rt = runtime(spec("shared", ""));
    let mut a = rt.new_vm(0).unwrap();
    let mut b = rt.new_vm(1).unwrap();
    // Seed the counter so both streams read a real CAS.
    let s = new_stream(&mut a);
    a.request_headers(s, req("POST", "/", &[]), false).unwrap();
    a.request_data(s, b"x", true).unwrap();
    assert_eq!(rt.shared().get_shared_data("vm", "counter"), Some((b"1".to_vec(), 1)));
    // Both read (1, cas 1) in on_request_headers, then set in on_request_body.
    let sa = new_stream(&mut a);
    let sb = new_stream(&mut b);
    a.request_headers(sa, req("POST", "/", &[]), false).unwrap();
    b.request_headers(sb, req("POST", "/", &[]), false).unwrap();
    a.request_data(sa, b"x", true).unwrap();
    b.request_data(sb, b"x", true).unwrap();
    a.response_headers(sa, resp("200", &[]), true).unwrap();
    b.response_headers(sb, resp("200", &[]), true).unwrap();
    let ha = response_headers(&a.take_events(sa)).clone();
    let hb = response_headers(&b.take_events(sb)).clone();
    assert_eq!((header(&ha, "x-cas-mismatch"), header(&ha, "x-counter")), ("0".into(), "2".into()));
    assert_eq!((header(&hb, "x-cas-mismatch"), header(&hb, "x-counter")), ("1".into(), "3".into()));
    assert_eq!(rt.shared().get_shared_data("vm", "counter"), Some((b"3".to_vec(), 3)));
}

#[test]
fn queue_enqueued_on_a_is_delivered_to_registrant_b() {
    let rt = runtime(spec("queue", ""));
    let mut a = rt.new_vm(0).unwrap();
    let mut b = rt.new_vm(1).unwrap(); // registers last: the notification target
    let wakes = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let w = wakes.clone();
    b.set_queue_waker(Box::new(move || {
        w.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }));
    let s = new_stream(&mut a);
    a.request_headers(s, req("GET", "/a", &[]), true).unwrap();
    assert_eq!(rt.shared().queue_len("vm", "events"), Some(1));
    assert_eq!(count(&wakes), 1);
    assert_eq!(a.deliver_queue_ready().unwrap(), 0);
    assert_eq!(b.deliver_queue_ready().unwrap(), 1);
    assert_eq!(rt.shared().queue_len("vm", "events"), Some(0));
    assert!(b.take_logs().contains(&(LogLevel::Info, "dequeued /a".to_string())));
    assert_eq!(shared_str(&rt, "dequeued"), "/a");
}

#[test]
fn ticks_count_into_shared_data() {
    let rt = runtime(spec("tick", r#","tick_ms":"250""#));
    let mut vm = rt.new_vm(0).unwrap();
    assert_eq!(vm.tick_period(), Some(Duration::from_millis(250)));
    for _ in 0..3 {
        vm.on_tick().unwrap();
    }
    assert_eq!(shared_str(&rt, "ticks"), "3");
    let mut other = rt.new_vm(1).unwrap();
    other.on_tick().unwrap();
    assert_eq!(shared_str(&rt, "ticks"), "4");
    let (_rt, no_tick) = vm_pair_without_tick();
    assert_eq!(no_tick.tick_period(), None);
}

fn vm_pair_without_tick() -> (ferrogate_host::Runtime, ferrogate_host::Vm) {
    vm(spec("none", ""))
}

#[test]
fn metrics_in_prometheus_text() {
    let rt = runtime(spec("metrics", ""));
    let mut a = rt.new_vm(0).unwrap();
    let mut b = rt.new_vm(1).unwrap();
    let sa = new_stream(&mut a);
    let events = roundtrip(&mut a, sa, req("GET", "/", &[("x-latency", "3")]));
    assert_eq!(header(response_headers(&events), "x-counter-zero-increment"), "Err(BadArgument)");
    let sb = new_stream(&mut b);
    roundtrip(&mut b, sb, req("GET", "/", &[("x-latency", "70")]));
    let text = rt.prometheus_text();
    assert!(text.contains("# TYPE ferrogate_inflight gauge\nferrogate_inflight 2\n"), "{text}");
    a.finish_stream(sa, false);
    b.finish_stream(sb, false);
    let text = rt.prometheus_text();
    assert!(text.contains("# TYPE ferrogate_requests_total counter\nferrogate_requests_total 2\n"), "{text}");
    assert!(text.contains("ferrogate_inflight 0\n"), "{text}");
    assert!(text.contains("# TYPE ferrogate_latency_ms histogram\n"), "{text}");
    assert!(text.contains("ferrogate_latency_ms_bucket{le=\"1\"} 0\n"), "{text}");
    assert!(text.contains("ferrogate_latency_ms_bucket{le=\"5\"} 1\n"), "{text}");
    assert!(text.contains("ferrogate_latency_ms_bucket{le=\"100\"} 2\n"), "{text}");
    assert!(text.contains("ferrogate_latency_ms_sum 73\nferrogate_latency_ms_count 2\n"), "{text}");
}
