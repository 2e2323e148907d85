//! The real filter's side of failover, across worker VMs: a 429 with `Retry-After` parks its
//! target for every VM at once (passive health in shared data), and a replayed attempt
//! (`x-ferrogate-attempt` > 1, trusted only under `host_failover`) is not counted again by a
//! request limit.

use crate::common::*;
use crate::ferrogate_filter::vm_with;
use ferrogate_host::{Headers, StreamEvent, Vm};

/// Providers `a` and `b` behind model `chat` (round robin) in open mode, with `extra`
/// top-level configuration; `host_failover` as given.
fn plugin(host_failover: bool, extra: &str) -> String {
    format!(
        r#"{{"config":{{"providers":[
        {{"name":"a","kind":"openai_compatible","base_url":"http://a:8000"}},
        {{"name":"b","kind":"openai_compatible","base_url":"http://b:8000"}}],
        "models":[{{"name":"chat","targets":[{{"provider":"a","model":"m"}},{{"provider":"b","model":"m"}}]}}]{extra}}},
        "host_failover":{host_failover}}}"#
    )
}

const LIMIT: &str = r#","limits":{"requests_per_minute":2}"#;

/// Sends a chat request with `extra` headers; the stream and its events.
fn send(vm: &mut Vm, extra: &[(&str, &str)]) -> (u32, Vec<StreamEvent>) {
    let s = new_stream(vm);
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(extra);
    vm.request_headers(s, req("POST", "/v1/chat/completions", &headers), false).unwrap();
    vm.request_data(s, br#"{"model":"chat","messages":[{"role":"user","content":"hi"}]}"#, true).unwrap();
    (s, vm.take_events(s))
}

/// The request headers the filter released (`None`: it answered itself).
fn released(events: &[StreamEvent]) -> Option<&Headers> {
    events.iter().find_map(|e| match e {
        StreamEvent::RequestHeaders { headers, .. } => Some(headers),
        _ => None,
    })
}

/// Answers stream `s` with `status` and `extra` response headers, and ends it.
fn answer(vm: &mut Vm, s: u32, status: &str, extra: &[(&str, &str)]) {
    let mut headers = vec![("content-type", "application/json")];
    headers.extend_from_slice(extra);
    vm.response_headers(s, resp(status, &headers), false).unwrap();
    vm.response_data(s, b"{}", true).unwrap();
    vm.finish_stream(s, false);
}

/// Routes a request on `vm`, answers it with `status` and `extra`; where it went.
fn route(vm: &mut Vm, status: &str, extra: &[(&str, &str)]) -> String {
    let (s, events) = send(vm, &[]);
    let to = cluster(released(&events).unwrap());
    answer(vm, s, status, extra);
    to
}

fn cluster(h: &Headers) -> String {
    header(h, "x-ferrogate-cluster")
}

/// One 429 with `Retry-After: 20` seen on one VM: every VM avoids that target from then on
/// (round robin would alternate), and a 429 without it only counts as one failure of three.
#[test]
fn a_retry_after_parks_the_target_on_every_vm() {
    let (rt, mut first) = vm_with(&plugin(false, ""));
    let mut vms: Vec<Vm> = (1..3).map(|i| rt.new_vm(i).unwrap()).collect();
    let limited = route(&mut first, "429", &[("retry-after", "20")]);
    vms.push(first);
    for i in 0..12 {
        assert_ne!(route(&mut vms[i % 3], "200", &[]), limited, "request {i}");
    }
    // Both asked for a pause: no fallbacks, so the model is unavailable meanwhile.
    route(&mut vms[0], "503", &[("retry-after", "20")]);
    let (_, events) = send(&mut vms[1], &[]);
    assert_eq!(header(response_headers(&events), ":status"), "503");
    // Without Retry-After the counting rule applies: the target is still picked.
    let (rt, mut vm) = vm_with(&plugin(false, ""));
    let once = route(&mut vm, "429", &[]);
    let mut other = rt.new_vm(1).unwrap();
    let picks: Vec<String> = (0..4).map(|_| route(&mut other, "200", &[])).collect();
    assert!(picks.contains(&once), "{picks:?}");
}

/// Under `host_failover`, attempt 2 of a client request is not counted again: two client
/// requests fit in 2 a minute even when the first was failed over; the third is refused.
#[test]
fn a_replayed_attempt_is_not_counted_again() {
    let (rt, mut vm) = vm_with(&plugin(true, LIMIT));
    let (s, events) = send(&mut vm, &[]);
    let first = released(&events).unwrap();
    let (tried, failed) = (header(first, "x-ferrogate-tried"), cluster(first));
    answer(&mut vm, s, "500", &[("x-ferrogate-abandoned", "1")]);
    // The host replays it, here on another VM.
    let mut other = rt.new_vm(1).unwrap();
    let (s, events) = send(&mut other, &[("x-ferrogate-attempt", "2"), ("x-ferrogate-tried", &tried)]);
    let replay = released(&events).expect("the replay is admitted");
    assert_ne!(cluster(replay), failed, "it went to the other target");
    answer(&mut other, s, "200", &[]);
    let (s, events) = send(&mut vm, &[]);
    assert!(released(&events).is_some(), "the second client request fits");
    answer(&mut vm, s, "200", &[]);
    let (_, events) = send(&mut other, &[]);
    assert!(released(&events).is_none(), "the third is refused");
    assert_eq!(header(response_headers(&events), ":status"), "429");
}

/// Without `host_failover` (Envoy) a client's own `x-ferrogate-attempt` is ignored: it cannot
/// skip its request count by claiming to be a replay.
#[test]
fn a_clients_attempt_header_does_not_skip_the_count() {
    let (_rt, mut vm) = vm_with(&plugin(false, LIMIT));
    for i in 0..3 {
        let (s, events) = send(&mut vm, &[("x-ferrogate-attempt", "2")]);
        if i < 2 {
            assert!(released(&events).is_some(), "request {i}");
            answer(&mut vm, s, "200", &[]);
        } else {
            assert_eq!(header(response_headers(&events), ":status"), "429", "the third is refused");
        }
    }
}

/// Under `host_failover` the released head tells the host what this attempt tried only when a
/// retry could reach something else: with two targets it carries `x-ferrogate-tried` and
/// `x-ferrogate-failover: more`; with one target and no fallbacks it carries neither (the host
/// then never retries, and the filter writes and allocates nothing for it).
#[test]
fn the_tried_list_is_announced_only_when_a_retry_has_somewhere_to_go() {
    let (_rt, mut vm) = vm_with(&plugin(true, ""));
    let (_, events) = send(&mut vm, &[]);
    let two = released(&events).unwrap();
    assert!(header(two, "x-ferrogate-tried").starts_with("chat#"), "{two:?}");
    assert_eq!(header(two, "x-ferrogate-failover"), "more");
    let single = r#"{"config":{"providers":[{"name":"a","kind":"openai_compatible","base_url":"http://a:8000"}],
        "models":[{"name":"chat","targets":[{"provider":"a","model":"m"}]}]},"host_failover":true}"#;
    let (_rt, mut vm) = vm_with(single);
    let (_, events) = send(&mut vm, &[("x-ferrogate-attempt", "2"), ("x-ferrogate-tried", "other#0")]);
    let one = released(&events).unwrap();
    assert!(one.get("x-ferrogate-failover").is_none(), "{one:?}");
    assert!(one.get("x-ferrogate-attempt").is_none(), "a replay's number never goes upstream");
    assert_eq!(header(one, "x-ferrogate-tried"), "other#0", "the host's list is left as it came");
}
