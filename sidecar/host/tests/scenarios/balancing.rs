//! Load balancing in the real filter across worker VMs of one proxy: weighted shares, session
//! stickiness (`consistent_hash`) on every VM, in-flight counts shared through shared data
//! (`least_loaded` sees requests another VM started; a client that goes away releases its
//! count), endpoints parked by the sidecar's targets feed skipped (and all used again when all
//! are parked), pool endpoints named in `x-gateway-destination-endpoint`, and `cache_aware`
//! moves made on one VM followed on the others (the shared prefix record).

use std::collections::BTreeMap;

use crate::common::*;
use crate::ferrogate_filter::vm_with;
use ferrogate_host::{Headers, HttpCallResponse, StreamEvent, Vm};

const DEST: &str = "x-gateway-destination-endpoint";

/// A plugin configuration: providers `a`..`d` (plain) and `pool` (three endpoints), `models`
/// appended, optionally fed by a sidecar.
fn plugin(models: &str, sidecar: bool) -> String {
    let side = if sidecar { r#","sidecar_cluster":"ferrogate_sidecar","poll_interval_ms":100"# } else { "" };
    format!(
        r#"{{"config":{{"providers":[
        {{"name":"a","kind":"openai_compatible","base_url":"http://a:8000"}},
        {{"name":"b","kind":"openai_compatible","base_url":"http://b:8000"}},
        {{"name":"c","kind":"openai_compatible","base_url":"http://c:8000"}},
        {{"name":"d","kind":"openai_compatible","base_url":"http://d:8000"}},
        {{"name":"pool","kind":"openai_compatible","base_url":"http://vllm:8000",
          "endpoints":["10.0.0.1:8000","10.0.0.2:8000","10.0.0.3:8000"]}}],
        "models":[{models}]}}{side}}}"#
    )
}

/// Sends a chat request for `model`; returns the stream (still open) and the released headers.
fn send(vm: &mut Vm, model: &str, session: Option<&str>) -> (u32, Headers) {
    send_text(vm, model, session, "hi")
}

/// [`send`] with `text` as the user's message.
fn send_text(vm: &mut Vm, model: &str, session: Option<&str>, text: &str) -> (u32, Headers) {
    let s = new_stream(vm);
    let mut extra = vec![("content-type", "application/json")];
    extra.extend(session.map(|id| ("x-session-id", id)));
    vm.request_headers(s, req("POST", "/v1/chat/completions", &extra), false).unwrap();
    let body = format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"{text}"}}]}}"#);
    vm.request_data(s, body.as_bytes(), true).unwrap();
    let events = vm.take_events(s);
    let headers = events
        .iter()
        .find_map(|e| match e {
            StreamEvent::RequestHeaders { headers, .. } => Some(headers.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("not routed: {events:?}"));
    (s, headers)
}

/// Where a request went: the cluster and the pool endpoint, if any.
fn place(h: &Headers) -> String {
    format!("{}{}", header(h, "x-ferrogate-cluster"), header(h, DEST))
}

/// Routes a request and ends it at once (a complete 200).
fn route_once(vm: &mut Vm, model: &str, session: Option<&str>) -> String {
    let (s, h) = send(vm, model, session);
    vm.response_headers(s, resp("200", &[("content-type", "application/json")]), true).unwrap();
    vm.finish_stream(s, false);
    place(&h)
}

#[test]
fn weighted_shares_hold_across_vms() {
    let models = r#"{"name":"chat","strategy":"weighted",
        "targets":[{"provider":"a","model":"m","weight":3},{"provider":"b","model":"m","weight":1}]}"#;
    let (rt, mut a) = vm_with(&plugin(models, false));
    let mut b = rt.new_vm(1).unwrap();
    let mut shares = BTreeMap::new();
    for i in 0..40 {
        let vm = if i % 2 == 0 { &mut a } else { &mut b };
        *shares.entry(route_once(vm, "chat", None)).or_insert(0) += 1;
    }
    assert_eq!(shares, BTreeMap::from([("a".to_string(), 30), ("b".to_string(), 10)]));
}

#[test]
fn consistent_hash_keeps_a_session_on_one_target_on_every_vm() {
    let models = r#"{"name":"chat","strategy":"consistent_hash","targets":[{"provider":"a","model":"m"},
        {"provider":"b","model":"m"},{"provider":"c","model":"m"},{"provider":"d","model":"m"}]}"#;
    let (rt, mut a) = vm_with(&plugin(models, false));
    let mut b = rt.new_vm(1).unwrap();
    let mut used = BTreeMap::new();
    for n in 0..16 {
        let session = format!("session-{n}");
        let first = route_once(&mut a, "chat", Some(&session));
        for _ in 0..3 {
            assert_eq!(route_once(&mut b, "chat", Some(&session)), first, "{session} moved on VM B");
            assert_eq!(route_once(&mut a, "chat", Some(&session)), first, "{session} moved on VM A");
        }
        *used.entry(first).or_insert(0) += 1;
    }
    assert!(used.len() >= 3, "sessions spread over the targets: {used:?}");
}

#[test]
fn least_loaded_sees_requests_in_flight_on_other_vms_and_disconnects_release_them() {
    let models = r#"{"name":"chat","strategy":"least_loaded",
        "targets":[{"provider":"a","model":"m"},{"provider":"b","model":"m"}]}"#;
    let (rt, mut a) = vm_with(&plugin(models, false));
    let mut b = rt.new_vm(1).unwrap();
    for _ in 0..5 {
        let (s1, h1) = send(&mut a, "chat", None);
        let (s2, h2) = send(&mut b, "chat", None);
        assert_ne!(place(&h1), place(&h2), "VM B must see VM A's request in flight");
        // The client of the first goes away: its target is free again, for either VM.
        a.finish_stream(s1, true);
        let (s3, h3) = send(&mut b, "chat", None);
        assert_eq!(place(&h3), place(&h1), "a disconnect releases the in-flight count");
        b.finish_stream(s2, true);
        b.finish_stream(s3, true);
    }
}

#[test]
fn pool_endpoints_are_balanced_and_named_in_the_destination_header() {
    let models = r#"{"name":"big","strategy":"least_loaded","targets":[{"provider":"pool","model":"llama"}]}"#;
    let (rt, mut a) = vm_with(&plugin(models, false));
    let mut b = rt.new_vm(1).unwrap();
    let mut held = Vec::new();
    let mut endpoints = Vec::new();
    for i in 0..3 {
        let vm = if i == 1 { &mut b } else { &mut a };
        let (s, h) = send(vm, "big", None);
        assert_eq!(header(&h, "x-ferrogate-cluster"), "pool");
        endpoints.push(header(&h, DEST));
        held.push((i, s));
    }
    endpoints.sort();
    assert_eq!(endpoints, ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"], "one request per replica");
    for (i, s) in held {
        let vm = if i == 1 { &mut b } else { &mut a };
        vm.finish_stream(s, true);
    }
}

fn feed_answer(body: String) -> Option<HttpCallResponse> {
    let headers = Headers::from_pairs([(":status", "200")]);
    Some(HttpCallResponse { headers, body: body.into_bytes(), trailers: Headers::new() })
}

/// A targets feed parking the pool endpoints `parked` (for a minute) and leaving the rest up.
fn feed(version: u64, parked: &[&str]) -> String {
    let until = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() + 60_000;
    let entries: Vec<String> = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"]
        .iter()
        .map(|e| match parked.contains(e) {
            true => format!(r#"{{"provider":"pool","endpoint":"{e}","healthy":false,"cooldown_until_ms":{until}}}"#),
            false => format!(r#"{{"provider":"pool","endpoint":"{e}","healthy":true}}"#),
        })
        .collect();
    format!(r#"{{"version":{version},"endpoints":[{}]}}"#, entries.join(","))
}

/// Ticks `vm`; the targets poll it made, if any.
fn targets_poll(vm: &mut Vm) -> Option<ferrogate_host::HttpCallRequest> {
    vm.on_tick().unwrap();
    vm.take_http_calls().into_iter().find(|c| header(&c.headers, ":path") == "/v1/targets")
}

#[test]
fn parked_endpoints_are_skipped_after_a_targets_feed_answer() {
    let models = r#"{"name":"big","targets":[{"provider":"pool","model":"llama"}]}"#;
    let (rt, mut a) = vm_with(&plugin(models, true));
    let mut b = rt.new_vm(1).unwrap();
    let call = targets_poll(&mut a).expect("VM A polls the targets feed");
    assert_eq!(call.cluster, "ferrogate_sidecar");
    assert_eq!(header(&call.headers, "if-none-match"), "");
    assert!(targets_poll(&mut b).is_none(), "one VM per interval polls");
    a.http_call_response(call.token, feed_answer(feed(7, &["10.0.0.1:8000", "10.0.0.2:8000"]))).unwrap();
    // VM B adopts the shared answer on its next tick.
    assert!(targets_poll(&mut b).is_none());
    for vm in [&mut a, &mut b] {
        for _ in 0..6 {
            assert_eq!(route_once(vm, "big", None), "pool10.0.0.3:8000");
        }
    }
    // Every endpoint parked: fail open, the pool is used as if nothing were known.
    std::thread::sleep(std::time::Duration::from_millis(1_050));
    let (mut va, mut vb) = (a, b);
    let (poller, call) = match targets_poll(&mut vb) {
        Some(call) => (&mut vb, call),
        None => {
            let call = targets_poll(&mut va).expect("a poll after the interval");
            (&mut va, call)
        }
    };
    assert_eq!(header(&call.headers, "if-none-match"), "\"7\"");
    let all = ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"];
    poller.http_call_response(call.token, feed_answer(feed(8, &all))).unwrap();
    let mut seen: Vec<String> = (0..6).map(|_| route_once(&mut va, "big", None)).collect();
    seen.extend((0..6).map(|_| {
        targets_poll(&mut vb);
        route_once(&mut vb, "big", None)
    }));
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3, "all parked: every endpoint serves again: {seen:?}");
}

/// Turn `turn` of one long conversation (a 2 KiB opening, then short turns).
fn turn(turn: usize) -> String {
    let mut text = "You are a careful assistant who checks every step. ".repeat(40);
    (0..turn).for_each(|t| text.push_str(&format!(" Question {t}, answer {t}.")));
    text
}

#[test]
fn a_cache_aware_move_made_on_one_vm_is_followed_on_the_others() {
    let models = r#"{"name":"big","strategy":"cache_aware","targets":[{"provider":"pool","model":"llama"}]}"#;
    let (rt, mut a) = vm_with(&plugin(models, false));
    let mut b = rt.new_vm(1).unwrap();
    // Three requests of turn 1 in flight on VM A all stay on the conversation's home...
    let held: Vec<(u32, Headers)> = (0..3).map(|_| send_text(&mut a, "big", None, &turn(1))).collect();
    let home = header(&held[0].1, DEST);
    assert!(held.iter().all(|(_, h)| header(h, DEST) == home), "affinity within the guard");
    // ...until the guard trips (3 ahead of idle replicas): turn 2 moves.
    let moved = route_text(&mut a, &turn(2));
    assert_ne!(moved, home, "the load guard moved turn 2");
    held.into_iter().for_each(|(s, _)| {
        a.finish_stream(s, true);
    });
    // VM B never saw the conversation; by its own knowledge it would go home. It follows the move.
    assert_eq!(route_text(&mut b, &turn(3)), moved, "VM B follows VM A's move");
    assert_eq!(route_text(&mut a, &turn(4)), moved);
}

/// Routes a `big` request with `text` and completes it; returns the pool endpoint.
fn route_text(vm: &mut Vm, text: &str) -> String {
    let (s, h) = send_text(vm, "big", None, text);
    vm.response_headers(s, resp("200", &[("content-type", "application/json")]), true).unwrap();
    vm.finish_stream(s, false);
    header(&h, DEST)
}
