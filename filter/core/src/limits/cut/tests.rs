//! The overrun policy: its configuration, the allowance, the delivery meter and the final
//! events.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::*;
use crate::config::{Config, RawConfig};
use crate::error::ApiError;
use crate::limits::{admit, Counter, Scope, Window};
use crate::translate::Inbound;

/// Counters in a map.
#[derive(Default)]
struct Store(HashMap<String, Counter>);

impl CounterStore for Store {
    fn update<E>(&mut self, key: &str, f: &mut dyn FnMut(&mut Counter) -> Result<(), E>) -> Result<(), E> {
        let mut c = self.0.get(key).copied().unwrap_or_default();
        f(&mut c)?;
        self.0.insert(key.to_string(), c);
        Ok(())
    }
}

const NOW: u64 = 1_000 * 60_000;

const YAML: &str = r#"
providers: [{ name: p, kind: openai, base_url: "http://h" }]
models: [{ name: m, targets: [{ provider: p, model: x }] }]
groups: [{ name: team, models: ["*"], limits: { tokens_per_minute: 5000, cost_usd_per_day: 0.01 } }]
keys:
  - { name: a, digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", groups: [team], limits: { tokens_per_day: 1000, overrun: cut } }
  - { name: b, digest: "sha256:2222222222222222222222222222222222222222222222222222222222222222", models: ["*"] }
"#;

fn config(yaml: &str) -> Result<Config, crate::config::ConfigError> {
    Config::try_from(serde_saphyr::from_str::<RawConfig>(yaml).unwrap())
}

#[test]
fn the_policy_is_a_keys_and_is_validated() {
    let c = config(YAML).unwrap();
    assert_eq!((c.keys[0].limits.overrun, c.keys[1].limits.overrun), (Overrun::Cut, Overrun::Allow));
    let err = config(&YAML.replace("overrun: cut", "overrun: stop")).unwrap_err();
    assert_eq!(err.problems[0].path, "keys[0].limits.overrun");
    assert!(err.problems[0].message.contains("expected allow or cut"), "{err}");
    let err = config(&YAML.replace("cost_usd_per_day: 0.01", "cost_usd_per_day: 0.01, overrun: cut")).unwrap_err();
    assert_eq!(err.problems[0].path, "groups[0].limits.overrun");
    let err = config(&format!("{YAML}limits: {{ overrun: allow }}\n")).unwrap_err();
    assert_eq!(err.problems[0].path, "limits.overrun");
}

#[test]
fn the_allowance_is_the_reservation_plus_the_tightest_room() {
    let room = |tokens: Option<u64>, usd: Option<u64>| Room {
        tokens: tokens.map(|room| Tightest { spec: 1, room }),
        micro_usd: usd.map(|room| Tightest { spec: 4, room }),
    };
    let tokens = |n, spec, metric| Some(Allowance { completion_tokens: n, spec, metric });
    assert_eq!(allowance(100, room(Some(50), None), None), tokens(150, 1, Metric::Tokens));
    // 300 micro-USD at $2 per million output tokens (2 µ$ a token) buy 150 tokens.
    assert_eq!(allowance(100, room(None, Some(300)), Some(2.0)), tokens(250, 4, Metric::MicroUsd));
    assert_eq!(allowance(100, room(Some(200), Some(300)), Some(2.0)), tokens(250, 4, Metric::MicroUsd));
    assert_eq!(allowance(100, room(Some(100), Some(300)), Some(2.0)), tokens(200, 1, Metric::Tokens));
    // Fractional prices round the tokens down: 10 µ$ at $0.3/M is 33.3 tokens.
    assert_eq!(allowance(0, room(None, Some(10)), Some(0.3)), tokens(33, 4, Metric::MicroUsd));
    assert_eq!(allowance(100, room(None, Some(300)), None), None, "unpriced: no USD bound");
    assert_eq!(allowance(100, room(None, Some(300)), Some(0.0)), None, "free output: no USD bound");
    assert_eq!(allowance(100, Room::default(), Some(2.0)), None, "no token or USD limit");
    assert_eq!(allowance(u64::MAX, room(Some(u64::MAX), None), None), tokens(u64::MAX, 1, Metric::Tokens));
    assert_eq!(allowance(1, room(None, Some(u64::MAX)), Some(1e-6)).map(|a| a.completion_tokens), Some(u64::MAX));
}

#[test]
fn room_is_read_after_admission_without_changing_counters() {
    let c = config(YAML).unwrap();
    let plan = c.limit_plans.for_key(Some(0));
    let mut store = Store::default();
    let amounts = Amounts::model(300, Some(2_000));
    admit(plan, amounts, NOW, &mut store).unwrap();
    let before = store.0.clone();
    let room = Room::read(plan, amounts, NOW, &mut store);
    assert_eq!(store.0, before, "reading stores nothing");
    let day = plan.iter().position(|s| s.scope == Scope::Key && s.window == Window::Day).unwrap();
    let usd = plan.iter().position(|s| s.metric == Metric::MicroUsd).unwrap();
    assert_eq!(room.tokens, Some(Tightest { spec: day, room: 700 }), "1000 - 300 beats 5000 - 300");
    assert_eq!(room.micro_usd, Some(Tightest { spec: usd, room: 8_000 }));
    let unpriced = Room::read(plan, Amounts::model(300, None), NOW, &mut store);
    assert_eq!(unpriced.micro_usd, None, "an unpriced request does not count against budgets");
    // 8000 µ$ at $1/M output is 8000 tokens: the key's 700 tokens are tighter.
    let a = allowance(200, room, Some(1.0)).unwrap();
    assert_eq!((a.completion_tokens, a.metric, plan[a.spec].describe()), (900, Metric::Tokens, day_desc()));
}

fn day_desc() -> String {
    "key a allows 1000 tokens per day".to_string()
}

/// One SSE event per data line.
fn sse(datas: &[&str]) -> String {
    datas.iter().map(|d| format!("data: {d}\n\n")).collect()
}

fn chat_delta(text: &str) -> String {
    json!({"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":text},"finish_reason":null}]})
        .to_string()
}

#[test]
fn the_meter_cuts_after_the_event_that_crosses_the_allowance() {
    // 8 bytes of text is 2 tokens an event.
    let events: Vec<String> = (0..5).map(|_| chat_delta("abcdefgh")).collect();
    let stream = sse(&events.iter().map(String::as_str).collect::<Vec<_>>());
    let mut m = Meter::new(Inbound::OpenAiChat, 5);
    let at = m.feed(stream.as_bytes()).unwrap();
    let first_three = sse(&events[..3].iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(at, first_three.len(), "6 tokens > 5: cut after the third event");
    assert_eq!(m.delivered(), 6);
    // The same offset whatever the chunking.
    for cut in 0..stream.len() {
        let mut m = Meter::new(Inbound::OpenAiChat, 5);
        let (a, b) = stream.as_bytes().split_at(cut);
        let at = m.feed(a).or_else(|| m.feed(b).map(|x| x + cut));
        assert_eq!(at, Some(first_three.len()), "cut at {cut}");
    }
    let mut roomy = Meter::new(Inbound::OpenAiChat, 10);
    assert_eq!(roomy.feed(stream.as_bytes()), None);
    assert_eq!(roomy.delivered(), 10);
}

#[test]
fn only_events_with_text_cut_and_provider_counts_raise_the_estimate() {
    let usage = r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":40}}"#;
    let mut m = Meter::new(Inbound::OpenAiChat, 5);
    assert_eq!(m.feed(sse(&[usage]).as_bytes()), None, "no text: never the cut point");
    assert_eq!(m.delivered(), 40);
    let text = chat_delta("x");
    let stream = sse(&[&text]);
    assert_eq!(m.feed(stream.as_bytes()), Some(stream.len()), "the next text event is");
    // Gemini's count is candidates + thoughts; other members never count.
    let mut g = Meter::new(Inbound::Gemini, 1000);
    let chunk = r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"usageMetadata":{"promptTokenCount":900,"candidatesTokenCount":30,"thoughtsTokenCount":12}}"#;
    g.feed(sse(&[chunk]).as_bytes());
    assert_eq!(g.delivered(), 42);
}

#[test]
fn each_dialect_counts_its_own_text_members() {
    let cases: [(Inbound, &str, &str, u64); 4] = [
        (
            Inbound::Anthropic,
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"12345678"}}"#,
            2,
        ),
        (
            Inbound::Anthropic,
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Paris\"}"}}"#,
            6,
        ),
        (
            Inbound::Responses,
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"12345678","sequence_number":7}"#,
            2,
        ),
        // A `.done` event repeats the text: not counted again.
        (
            Inbound::Responses,
            "response.output_text.done",
            r#"{"type":"response.output_text.done","text":"12345678","sequence_number":8}"#,
            0,
        ),
    ];
    for (shape, name, data, tokens) in cases {
        let mut m = Meter::new(shape, u64::MAX);
        m.feed(format!("event: {name}\ndata: {data}\n\n").as_bytes());
        assert_eq!(m.delivered(), tokens, "{data}");
    }
    let mut r = Meter::new(Inbound::Responses, u64::MAX);
    r.feed(b"event: response.in_progress\ndata: {\"type\":\"response.in_progress\",\"sequence_number\":1}\n\n");
    r.feed(b"event: response.output_text.delta\ndata: {\"delta\":\"a\",\"sequence_number\":2}\n\n");
    assert_eq!(r.sequence(), Some(2));
}

/// The text estimate of recorded OpenAI streams, before any final count, against the
/// provider's count; a running count (vLLM's continuous usage) is taken as it comes.
#[test]
fn the_estimate_tracks_recorded_streams() {
    let read =
        |name: &str| std::fs::read(format!("{}/../../testdata/usage/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let estimate = |name: &str| {
        let mut m = Meter::new(Inbound::OpenAiChat, u64::MAX);
        m.feed(&read(name));
        let (estimate, reported, _) = m.internals();
        (estimate, reported)
    };
    // Text: 34 bytes, 10 tokens.
    assert_eq!(estimate("openai-chat-stream-usage.sse"), (9, 10));
    // A tool call's framing tokens are not on the wire: its arguments alone undercount it.
    assert_eq!(estimate("openai-chat-stream-tools.sse"), (8, 18));
    let vllm = read("vllm-chat-stream-continuous.sse");
    let mut m = Meter::new(Inbound::OpenAiChat, 4);
    let at = m.feed(&vllm).unwrap();
    assert_eq!(m.delivered(), 5, "the fifth token's event crosses 4");
    assert!(std::str::from_utf8(&vllm[..at]).unwrap().ends_with("\"completion_tokens\":5}}\n\n"));
}

#[test]
fn an_oversized_event_counts_all_its_bytes() {
    let big = "x".repeat(EVENT_CAP + 4_000);
    let event = format!("data: {}\n\n", chat_delta(&big));
    let mut m = Meter::new(Inbound::OpenAiChat, u64::MAX);
    for piece in event.as_bytes().chunks(1000) {
        assert_eq!(m.feed(piece), None);
    }
    assert!(m.delivered() >= (big.len() / 4) as u64);
    assert!(m.internals().2 <= EVENT_CAP, "never held whole");
    let mut small = Meter::new(Inbound::OpenAiChat, 10);
    let over = "y".repeat(EVENT_CAP * 2);
    let event = format!("data: {}\n\n", chat_delta(&over));
    let (a, b) = event.as_bytes().split_at(EVENT_CAP + 10);
    assert_eq!(small.feed(a), None);
    assert_eq!(small.feed(b), Some(b.len()), "cut at its end");
}

fn data_of(bytes: &[u8], nth: usize) -> Value {
    let text = std::str::from_utf8(bytes).unwrap();
    let event = text.split("\n\n").filter(|e| !e.is_empty()).nth(nth).unwrap();
    let data = event.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
    serde_json::from_str(data).unwrap()
}

/// A stream that ends without its dialect's final event was cut short by the upstream.
#[test]
fn the_meter_knows_whether_the_stream_reached_its_end() {
    let cases: [(Inbound, &str, &str); 4] = [
        (Inbound::OpenAiChat, &chat_delta("Hello"), "[DONE]"),
        (
            Inbound::Anthropic,
            r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"Hi"}}"#,
            r#"{"type":"message_stop"}"#,
        ),
        (
            Inbound::Gemini,
            r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}"#,
            r#"{"candidates":[{"content":{"parts":[{"text":"!"}]},"finishReason":"STOP"}]}"#,
        ),
        (
            Inbound::Responses,
            r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
            r#"{"type":"response.completed"}"#,
        ),
    ];
    for (shape, middle, last) in cases {
        let mut m = Meter::new(shape, u64::MAX);
        m.feed(sse(&[middle, middle]).as_bytes());
        assert!(!m.finished(), "{shape:?}: not yet");
        assert!(m.delivered() > 0);
        m.feed(sse(&[last]).as_bytes());
        assert!(m.finished(), "{shape:?}: {last}");
    }
    // A chat chunk whose finish_reason is set ends the answer even before [DONE].
    let mut m = Meter::new(Inbound::OpenAiChat, u64::MAX);
    let last = json!({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}).to_string();
    m.feed(sse(&[&chat_delta("x"), &last]).as_bytes());
    assert!(m.finished());
    // The provider's own error event is an end too.
    let mut m = Meter::new(Inbound::Anthropic, u64::MAX);
    m.feed(b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n");
    assert!(m.finished());
}

#[test]
fn final_events_follow_each_dialect() {
    let tokens = Allowance { completion_tokens: 900, spec: 0, metric: Metric::Tokens };
    let e = cut_error(&tokens, None);
    assert_eq!((e.status, e.code), (429, Some("rate_limit_exceeded")));
    let chat = final_event(Inbound::OpenAiChat, &e, 0);
    assert_eq!(data_of(&chat, 0)["error"]["code"], "rate_limit_exceeded");
    assert!(chat.ends_with(b"\n\ndata: [DONE]\n\n"));
    let anthropic = final_event(Inbound::Anthropic, &e, 0);
    assert!(anthropic.starts_with(b"event: error\ndata: "));
    assert_eq!(data_of(&anthropic, 0), json!({"type":"error","error":{"type":"rate_limit_error","message":e.message}}));
    let gemini = final_event(Inbound::Gemini, &e, 0);
    assert_eq!(data_of(&gemini, 0), json!({"error":{"code":429,"message":e.message,"status":"RESOURCE_EXHAUSTED"}}));
    let responses = final_event(Inbound::Responses, &e, 12);
    assert!(responses.starts_with(b"event: error\ndata: "));
    let want =
        json!({"type":"error","code":"rate_limit_exceeded","message":e.message,"param":null,"sequence_number":12});
    assert_eq!(data_of(&responses, 0), want);
    // A USD budget: 402 classes.
    let usd = Allowance { metric: Metric::MicroUsd, ..tokens };
    let e = cut_error(&usd, None);
    assert_eq!(data_of(&final_event(Inbound::Anthropic, &e, 0), 0)["error"]["type"], "billing_error");
    assert_eq!(data_of(&final_event(Inbound::OpenAiChat, &e, 0), 0)["error"]["type"], "insufficient_quota");
}

#[test]
fn the_cut_error_names_the_limit() {
    let c = config(YAML).unwrap();
    let plan = c.limit_plans.for_key(Some(0));
    let a = Allowance { completion_tokens: 77, spec: 0, metric: Metric::Tokens };
    let e: ApiError = cut_error(&a, plan.first());
    assert!(e.message.contains("about 77 completion tokens"), "{}", e.message);
    assert!(e.message.contains("key a allows 1000 tokens per day"), "{}", e.message);
}

/// A stream that passed whole, whose client went away before reading it all, is charged the
/// provider's count: 150 tokens of five bytes each are 188 by the four-bytes rule.
#[test]
fn a_finished_stream_is_charged_the_providers_count() {
    let words: Vec<String> = (0..150).map(|_| chat_delta("story")).collect();
    let last = json!({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}).to_string();
    let usage = r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":150}}"#;
    let mut all: Vec<&str> = words.iter().map(String::as_str).collect();
    all.extend([last.as_str(), usage, "[DONE]"]);
    let mut m = Meter::new(Inbound::OpenAiChat, u64::MAX);
    m.feed(sse(&all).as_bytes());
    assert!(m.finished());
    assert_eq!(m.delivered(), 188, "the estimate overshoots");
    assert_eq!(m.charged(150, false), 150, "the provider's final count is what it bills");
    // Stopped before its end: the provider's count (if any) may not cover the text after it.
    let mut early = Meter::new(Inbound::OpenAiChat, u64::MAX);
    early.feed(sse(&all[..100]).as_bytes());
    assert!(!early.finished());
    assert_eq!(early.charged(0, false), 125);
    assert_eq!(early.charged(140, false), 140);
    // A cut charges what passed, whatever the provider says.
    assert_eq!(early.charged(140, true), 125);
}
