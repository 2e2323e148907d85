//! MCP wire logic (`ferrogate_core::mcp`): any bytes give a message or a refusal, never a panic;
//! the error answer built for any id is valid JSON echoing that id; and a rewritten tools/list
//! answer is valid JSON (or a valid stream) that filtering again leaves alone. The stream
//! splitter gives back every byte, whatever the chunking; endpoint events, refusal stand-ins and
//! A2A cards never panic, and a rewritten card is JSON naming the gateway. The federation's
//! members header reads back what it wrote, a qualified tool name splits back into its parts,
//! and the search ranking returns in-range indices, at most the limit.
#![no_main]

use ferrogate_core::mcp::federation::{self, search};
use ferrogate_core::mcp::{error_body, filter_list, filter_list_sse, refusal, scan, sse, EventSplitter};
use libfuzzer_sys::fuzz_target;
use serde::de::IgnoredAny;

fn valid(b: &[u8]) -> bool {
    serde_json::from_slice::<IgnoredAny>(b).is_ok()
}

fuzz_target!(|data: &[u8]| {
    let allow = |n: &str| n.len() % 2 == 0;
    let id = match scan(data) {
        Ok(m) => {
            assert!(valid(data), "scan accepted invalid JSON");
            assert_eq!(m.method.is_none(), m.kind == ferrogate_core::mcp::Kind::Response);
            m.id
        }
        Err(e) => {
            assert!(e.code() == -32700 || e.code() == -32600);
            None
        }
    };
    let body = error_body(id.as_deref(), -32600, &String::from_utf8_lossy(data));
    let answer: serde_json::Value = serde_json::from_slice(&body).expect("error_body gives JSON");
    if let Some(id) = &id {
        let echoed: serde_json::Value = serde_json::from_str(id).expect("the id is JSON");
        assert_eq!(answer.get("id"), Some(&echoed));
    }
    if let Ok(Some(out)) = filter_list(data, &allow) {
        assert!(valid(&out), "filter_list gave invalid JSON");
        assert_eq!(filter_list(&out, &allow), Ok(None), "filtering twice changes more");
    }
    if let Ok(Some(out)) = filter_list_sse(data, &allow) {
        assert_eq!(filter_list_sse(&out, &allow), Ok(None), "filtering a stream twice changes more");
    }
    let mut splitter = EventSplitter::default();
    let cut = data.first().map_or(0, |&b| usize::from(b) % (data.len() + 1));
    let mut whole = splitter.push(&data[..cut], usize::MAX).expect("unbounded");
    whole.extend(splitter.push(&data[cut..], usize::MAX).expect("unbounded"));
    whole.extend(splitter.finish());
    assert_eq!(whole, data, "the splitter lost or changed bytes");
    if let Ok(path) = sse::gateway_endpoint("s", data, &|id| Some(format!("{id}.t"))) {
        assert!(path.starts_with("/mcp/s/"), "{path}");
    }
    let _ = sse::open_query(&String::from_utf8_lossy(data), &|id| Ok::<_, ()>(id.to_string()));
    if let Some(refusal) = refusal::restore(data) {
        assert!(valid(&refusal), "a restored refusal is JSON");
    }
    if let Ok(card) = ferrogate_core::a2a::rewrite_card(data, "http://gw/a2a/x") {
        let card: serde_json::Value = serde_json::from_slice(&card).expect("a rewritten card is JSON");
        assert!(card.get("signatures").is_none(), "signatures left in");
    }
    federation_checks(&String::from_utf8_lossy(data));
});

fn federation_checks(text: &str) {
    if let Ok(members) = federation::parse_members(text) {
        let again = federation::parse_members(&federation::members_header(&members));
        assert_eq!(again.as_ref(), Ok(&members), "the members header does not read back");
    }
    if let Some((server, tool)) = federation::split(text) {
        assert_eq!(federation::qualified(server, tool), text);
    }
    let candidates: Vec<search::Candidate<'_>> =
        text.split('\n').map(|line| search::Candidate { name: line, description: text }).collect();
    let limit = text.len() % 7;
    let found = search::rank(text, &candidates, limit);
    assert!(found.len() <= limit && found.iter().all(|&i| i < candidates.len()));
}
