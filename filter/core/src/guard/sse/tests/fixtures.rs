//! Streams for the guard's tests: an answer with planted values, as a chat provider streams
//! it and as the gateway translates it for each client; and what a client reads of a stream.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::super::*;
use crate::config::ProviderKind;
use crate::guard::detect::Detector;
use crate::guard::scan::{Action, Rule, RuleSet};
use crate::translate::stream::StreamTranslator;
use crate::translate::{pair, Context};

pub(super) const EMAIL: &str = "jane.doe@example.com";
pub(super) const PLANTED: &[&str] = &[EMAIL, "falcon", "Falcon", "project bluebird", "jane.", "bluebird"];

/// The answer's text, cut so that every planted value straddles deltas; `FILLER` goes in the
/// middle when the window is large, so that text leaves before the end.
pub(super) const TEXT: &[&str] = &[
    "Sure. Write to jane",
    ".doe@exa",
    "mple.com about proj",
    "ect blue",
    "bird; the fal",
    "con code word stays secret. ",
    "Last: Falcon and jane.doe@example.c",
    "om.",
];
pub(super) const FILLER: &[&str] = &[
    "Some filler that is long enough to leave the window before the text ends: lorem ipsum dolor sit amet, ",
    "consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua. ",
    "Ut enim ad minim veniam, quis nostrud exercitation ullamco laboris nisi ut aliquip ex ea commodo. ",
    "Duis aute irure dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla. ",
];

/// `TEXT` with `FILLER` before its last sentence.
pub(super) fn long_text() -> Vec<&'static str> {
    let (head, tail) = TEXT.split_at(6);
    head.iter().chain(FILLER).chain(tail).copied().collect()
}
pub(super) const ARGS: &[&str] = &["{\"to\": \"jane.", "doe@example.com\", \"note\": \"fal", "con\"}"];

pub(super) fn rules() -> RuleSet {
    let email = Detector::regex(r"[a-z]+\.[a-z]+@example\.com").unwrap();
    let words = Detector::keywords(&["falcon".into(), "project bluebird".into()]).unwrap();
    let rules = vec![
        Rule { name: "mail".into(), detector: email, action: Action::Redact },
        Rule { name: "codes".into(), detector: words, action: Action::Redact },
    ];
    RuleSet::new(rules, false)
}

/// The same values as keywords: a small window, so that scanning every cut of a stream is
/// quick.
pub(super) fn keyword_rules() -> RuleSet {
    let email = Detector::keywords(&[EMAIL.into()]).unwrap();
    let words = Detector::keywords(&["falcon".into(), "project bluebird".into()]).unwrap();
    let rules = vec![
        Rule { name: "mail".into(), detector: email, action: Action::Redact },
        Rule { name: "codes".into(), detector: words, action: Action::Redact },
    ];
    RuleSet::new(rules, false)
}

pub(super) fn blocking() -> RuleSet {
    let words = Detector::keywords(&["code word".into()]).unwrap();
    RuleSet::new(vec![Rule { name: "no-codes".into(), detector: words, action: Action::Block }], false)
}

/// An OpenAI chat stream (the provider's, or a chat client's) with `text` then a tool call.
pub(super) fn chat_stream(text: &[&str]) -> Vec<u8> {
    let head = r#""id":"chatcmpl-G1","object":"chat.completion.chunk","created":1700000000,"model":"m""#;
    let mut s = format!("data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"finish_reason\":null}}]}}\n\n");
    for t in text {
        let delta = json!({"index": 0, "delta": {"content": t}, "finish_reason": null});
        s += &format!("data: {{{head},\"choices\":[{delta}]}}\n\n");
    }
    let call = json!({"index": 0, "id": "call_1", "type": "function", "function": {"name": "send", "arguments": ""}});
    s += &format!("data: {{{head},\"choices\":[{}]}}\n\n", json!({"index": 0, "delta": {"tool_calls": [call]}}));
    for a in ARGS {
        let call = json!({"index": 0, "function": {"arguments": a}});
        s += &format!("data: {{{head},\"choices\":[{}]}}\n\n", json!({"index": 0, "delta": {"tool_calls": [call]}}));
    }
    s += &format!("data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"tool_calls\"}}]}}\n\n");
    s += &format!("data: {{{head},\"choices\":[],\"usage\":{{\"prompt_tokens\":9,\"completion_tokens\":50,\"total_tokens\":59}}}}\n\n");
    s += "data: [DONE]\n\n";
    s.into_bytes()
}

/// `chat_stream(long_text())` as the gateway sends it to a client of `dialect`.
pub(super) fn stream_for(dialect: Inbound) -> Vec<u8> {
    translated(dialect, &long_text())
}

/// `chat_stream(text)` as the gateway sends it to a client of `dialect`.
pub(super) fn translated(dialect: Inbound, text: &[&str]) -> Vec<u8> {
    let Some(p) = pair(dialect, ProviderKind::OpenAi) else { return chat_stream(text) };
    let ctx = Context { model: "client-model".into(), stream: true, ..Default::default() };
    let mut t = StreamTranslator::new(p, &ctx, 1_700_000_000);
    let mut out = t.feed(&chat_stream(text));
    out.extend(t.finish());
    out
}

pub(super) fn guard(
    dialect: Inbound,
    stages: &[Stage<'_>],
    vault: &mut Vault,
    pieces: &[&[u8]],
) -> (Vec<u8>, SseGuard) {
    let mut g = SseGuard::new(dialect, vec!["pii".into(), "second".into()]);
    let mut out = Vec::new();
    for p in pieces {
        out.extend(g.feed(stages, vault, p));
    }
    out.extend(g.finish(stages, vault));
    (out, g)
}

/// The events of a stream: (name, data).
pub(super) fn events(bytes: &[u8]) -> Vec<(String, Value)> {
    let mut splitter = crate::usage::sse::Splitter::default();
    let mut rest = bytes;
    let mut out = Vec::new();
    while let Some(end) = splitter.next_end(rest) {
        let (event, tail) = rest.split_at(end);
        rest = tail;
        let e = Event::new(event);
        let data = serde_json::from_slice(&e.data).unwrap_or(Value::String(String::from_utf8_lossy(&e.data).into()));
        let name = lines(event).find_map(|l| l.strip_prefix(b"event: ")).unwrap_or_default();
        out.push((String::from_utf8_lossy(name).into_owned(), data));
    }
    assert!(rest.is_empty(), "unterminated event: {}", String::from_utf8_lossy(rest));
    out
}

/// The texts a client assembles from the deltas, by (kind, index, index).
pub(super) fn texts(dialect: Inbound, bytes: &[u8]) -> BTreeMap<(u8, u64, u64), String> {
    let mut all: BTreeMap<(u8, u64, u64), String> = BTreeMap::new();
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    for (_, d) in events(bytes) {
        let mut add = |key, text: &Value| {
            if let Some(t) = text.as_str() {
                all.entry(key).or_default().push_str(t);
            }
        };
        match dialect {
            Inbound::OpenAiChat => {
                for c in d["choices"].as_array().into_iter().flatten() {
                    add((0, n(&c["index"]), 0), &c["delta"]["content"]);
                    for call in c["delta"]["tool_calls"].as_array().into_iter().flatten() {
                        add((1, n(&c["index"]), n(&call["index"])), &call["function"]["arguments"]);
                    }
                }
            }
            Inbound::Anthropic if d["type"] == "content_block_delta" => {
                add((0, n(&d["index"]), 0), &d["delta"]["text"]);
                add((0, n(&d["index"]), 0), &d["delta"]["partial_json"]);
            }
            Inbound::Gemini => {
                for c in d["candidates"].as_array().into_iter().flatten() {
                    for p in c["content"]["parts"].as_array().into_iter().flatten() {
                        add((0, n(&c["index"]), 0), &p["text"]);
                    }
                }
            }
            Inbound::Responses if d["type"] == "response.output_text.delta" => {
                add((0, n(&d["output_index"]), n(&d["content_index"])), &d["delta"]);
            }
            Inbound::Responses if d["type"] == "response.function_call_arguments.delta" => {
                add((1, n(&d["output_index"]), 0), &d["delta"]);
            }
            _ => {}
        }
    }
    all
}

/// `[TAG_n]` → `[TAG]`: placeholder numbers depend on which text renders first.
pub(super) fn unnumbered(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('[') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let close = tail.find(']').unwrap_or(0);
        match tail.get(..close).and_then(|p| p.rsplit_once('_')) {
            Some((tag, n)) if close > 0 && n.bytes().all(|b| b.is_ascii_digit()) && !n.is_empty() => {
                out.push_str(tag);
                out.push(']');
                rest = &tail[close + 1..];
            }
            _ => {
                out.push('[');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Each text of the unguarded `stream`, rewritten whole.
pub(super) fn expected(dialect: Inbound, rules: &RuleSet, stream: &[u8]) -> BTreeMap<(u8, u64, u64), String> {
    let mut vault = Vault::default();
    texts(dialect, stream)
        .into_iter()
        .map(|(k, t)| {
            let whole = rules.rewrite(&mut vault, &t, &mut Tally::default()).unwrap().unwrap_or(t);
            (k, unnumbered(&whole))
        })
        .collect()
}

pub(super) const DIALECTS: [Inbound; 4] =
    [Inbound::OpenAiChat, Inbound::Anthropic, Inbound::Gemini, Inbound::Responses];

pub(super) fn check(dialect: Inbound, out: &[u8], want: &BTreeMap<(u8, u64, u64), String>, what: &str) {
    let text = String::from_utf8_lossy(out);
    for v in PLANTED {
        assert!(!text.contains(v), "{dialect:?} {what}: {v:?} in\n{text}");
    }
    let got: BTreeMap<_, _> = texts(dialect, out).into_iter().map(|(k, t)| (k, unnumbered(&t))).collect();
    assert_eq!(&got, want, "{dialect:?} {what}");
}
