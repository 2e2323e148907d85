//! Unit tests: cost, records, `include_usage` splicing, SSE framing details and the memory
//! bounds of the tracker.

use super::super::json::top_level_object;
use super::super::sse::{event_data, Splitter};
use super::*;

fn price(input: f64, output: f64, cached: f64) -> Price {
    Price { input_per_mtok: input, output_per_mtok: output, cached_input_per_mtok: cached }
}

#[test]
fn cost_prefers_provider_qualified_price_and_bills_cache() {
    let mut pricing = BTreeMap::new();
    pricing.insert("gpt-4o".to_string(), price(2.5, 10.0, 1.25));
    pricing.insert("azure/gpt-4o".to_string(), price(5.0, 15.0, 5.0));
    let usage = Usage { prompt_tokens: 1_000_000, completion_tokens: 100_000, cached_tokens: 400_000 };
    // 600k × 2.5 + 400k × 1.25 + 100k × 10 micro-USD
    assert_eq!(cost_micro_usd(&pricing, "openai", "gpt-4o", &usage), Some(1_500_000 + 500_000 + 1_000_000));
    assert_eq!(cost_micro_usd(&pricing, "azure", "gpt-4o", &usage), Some(5_000_000 + 1_500_000));
    assert_eq!(cost_micro_usd(&pricing, "openai", "unpriced", &usage), None);
    // Names too long for the stack key still find their qualified price.
    let long = "m".repeat(300);
    pricing.insert(format!("azure/{long}"), price(5.0, 15.0, 5.0));
    assert_eq!(cost_micro_usd(&pricing, "azure", &long, &usage), Some(5_000_000 + 1_500_000));
}

#[test]
fn cost_is_exact_then_rounded_up() {
    let pricing = BTreeMap::from([("m".to_string(), price(0.1, 0.4, 0.1))]);
    let cost =
        |p, c| cost_micro_usd(&pricing, "p", "m", &Usage { prompt_tokens: p, completion_tokens: c, cached_tokens: 0 });
    // 1000 × 0.1 is 100.00000000000001 in f64; the integer arithmetic keeps it 100.
    assert_eq!(cost(1000, 0), Some(100));
    assert_eq!(cost(1, 0), Some(1));
    assert_eq!(cost(0, 0), Some(0));
    assert_eq!(cost(10, 3), Some(3));
    // Cached tokens beyond the prompt are clamped, never underflow.
    let odd = Usage { prompt_tokens: 5, completion_tokens: 0, cached_tokens: 9 };
    assert_eq!(cost_micro_usd(&pricing, "p", "m", &odd), Some(1));
    let huge = Usage { prompt_tokens: u64::MAX, completion_tokens: u64::MAX, cached_tokens: 0 };
    let pricey = BTreeMap::from([("m".to_string(), price(1e30, 1e30, 1e30))]);
    assert_eq!(cost_micro_usd(&pricey, "p", "m", &huge), Some(u64::MAX));
}

#[test]
fn hand_written_record_json_matches_serde() {
    let awkward = "q\"b\\s/\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}é✓";
    let records = [
        Record::default(),
        Record {
            request_id: awkward.into(),
            key: Some(awkward.into()),
            groups: vec!["a".into(), awkward.into(), String::new()],
            model_requested: awkward.into(),
            provider: "p".into(),
            upstream_model: "org/model:v1".into(),
            status: 65535,
            prompt_tokens: u64::MAX,
            completion_tokens: 10,
            cached_tokens: 9,
            cost_micro_usd: Some(0),
            latency_ms: 1,
            ttft_ms: Some(u64::MAX),
            started_at_unix_ms: 1_700_000_000_123,
            streamed: true,
            admitted: true,
            cut: true,
            partial: true,
            queued_ms: 1_234,
            retries: 2,
            continues: Some(awkward.into()),
            rebuilt: true,
            guardrails: Some(every_guardrail_field(awkward)),
            cached: true,
            user_agent: Some(awkward.into()),
            endpoint: Some(awkward.into()),
        },
        Record { endpoint: Some("10.0.0.2:8000".into()), ..Record::default() },
        Record { cached: true, provider: String::new(), cost_micro_usd: None, ..Record::default() },
        Record { queued_ms: 7, ..Record::default() },
        Record { retries: 1, ..Record::default() },
        Record { continues: Some("resp_0123456789abcdef".into()), ..Record::default() },
        Record { rebuilt: true, ..Record::default() },
        // Each part of the guardrails alone, and none (an empty object).
        Record { guardrails: Some(GuardrailRecord::default()), ..Record::default() },
        Record {
            guardrails: Some(GuardrailRecord { blocked: Some("pii/email".into()), ..GuardrailRecord::default() }),
            ..Record::default()
        },
        Record {
            guardrails: Some(GuardrailRecord { hits: every_guardrail_field("x").hits, ..GuardrailRecord::default() }),
            ..Record::default()
        },
        Record {
            guardrails: Some(GuardrailRecord {
                checks: every_guardrail_field("x").checks,
                ..GuardrailRecord::default()
            }),
            rebuilt: true,
            ..Record::default()
        },
    ];
    for r in records {
        let line = r.to_json_line();
        assert_eq!(line, format!("{}\n", serde_json::to_string(&r).unwrap()));
        assert_eq!(Record::parse_lines(line.as_bytes()).unwrap(), [r], "reads back equal");
    }
}

/// Guardrails with every field set, two hits and two checks, `text` in every string.
fn every_guardrail_field(text: &str) -> GuardrailRecord {
    GuardrailRecord {
        blocked: Some(format!("{text}/block")),
        hits: vec![
            GuardrailHit { rule: format!("pii/{text}"), stage: "input".into(), action: "redact".into(), count: 3 },
            GuardrailHit { rule: "pii/card".into(), stage: text.into(), action: text.into(), count: u32::MAX },
        ],
        checks: vec![
            GuardrailCheck {
                rule: format!("hook/{text}"),
                stage: "output".into(),
                verdict: "allow".into(),
                latency_ms: 0,
            },
            GuardrailCheck { rule: "hook/mod".into(), stage: text.into(), verdict: text.into(), latency_ms: u64::MAX },
        ],
    }
}

#[test]
fn record_json_line_round_trip() {
    let mut r = Record {
        request_id: "req-1".into(),
        key: Some("alice".into()),
        groups: vec!["dev".into()],
        model_requested: "chat".into(),
        provider: "local".into(),
        upstream_model: "sim-small".into(),
        status: STATUS_CLIENT_CLOSED,
        cost_micro_usd: Some(12),
        latency_ms: 250,
        ttft_ms: Some(40),
        started_at_unix_ms: 1_700_000_000_000,
        streamed: true,
        ..Record::default()
    };
    r.set_usage(&Usage { prompt_tokens: 10, completion_tokens: 5, cached_tokens: 2 });
    let line = r.to_json_line();
    assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
    // The borrowed view the filter writes is byte-identical to the owned record's JSON.
    assert_eq!(line, format!("{}\n", serde_json::to_string(&r).unwrap()));
    let two = format!("{line}\n{line}");
    assert_eq!(Record::parse_lines(two.as_bytes()).unwrap(), vec![r.clone(), r.clone()]);
    // A bad line is named by its 1-based number in the batch (blank lines still count).
    let bad = format!("{line}\n{{\"request_id\":1}}\n");
    assert_eq!(Record::parse_lines(bad.as_bytes()).unwrap_err().line, 3);
    assert_eq!(r.usage().total_tokens(), 15);
    // Optional fields may be absent and unknown ones are ignored (version skew).
    let minimal = r#"{"request_id":"x","model_requested":"m","provider":"p","upstream_model":"u",
        "status":200,"latency_ms":1,"started_at_unix_ms":2,"future_field":true}"#;
    let parsed: Record = serde_json::from_str(minimal).unwrap();
    assert_eq!((parsed.key, parsed.cost_micro_usd, parsed.streamed), (None, None, false));
}

/// Both variants: the checked one, and the request path's (body already validated).
fn include(body: &str) -> Option<String> {
    let checked = ensure_include_usage(body.as_bytes()).unwrap();
    assert_eq!(ensure_include_usage_in_valid(body.as_bytes()).unwrap(), checked, "variants differ on {body}");
    checked.map(|b| String::from_utf8(b).unwrap())
}

#[test]
fn include_usage_splices_bytes() {
    // The key search skips look-alikes (`"upstream"`) before the real key.
    assert_eq!(
        include(r#"{"upstream":false,"x":"a stream","stream":true}"#).as_deref(),
        Some(r#"{"upstream":false,"x":"a stream","stream":true,"stream_options":{"include_usage":true}}"#)
    );
    assert_eq!(include(r#"{"upstream":true,"streams":true}"#), None);
    assert_eq!(
        include("{ \"model\" : \"m\",\n \"stream\": true }").as_deref(),
        Some("{ \"model\" : \"m\",\n \"stream\": true,\"stream_options\":{\"include_usage\":true} }")
    );
    assert_eq!(
        include(r#"{"stream":true,"stream_options":{"include_usage":false},"n":1}"#).as_deref(),
        Some(r#"{"stream":true,"stream_options":{"include_usage":true},"n":1}"#)
    );
    assert_eq!(
        include(r#"{"stream_options":{ },"stream":true}"#).as_deref(),
        Some(r#"{"stream_options":{"include_usage":true },"stream":true}"#)
    );
    assert_eq!(
        include(r#"{"stream_options":{"x":1},"stream":true}"#).as_deref(),
        Some(r#"{"stream_options":{"x":1,"include_usage":true},"stream":true}"#)
    );
    assert_eq!(
        include(r#"{"stream":true,"stream_options":null}"#).as_deref(),
        Some(r#"{"stream":true,"stream_options":{"include_usage":true}}"#)
    );
    // Escaped keys are the same keys to the provider.
    assert_eq!(include(r#"{"str\u0065am":true,"stream_options":{"include_usag\u0065":true}}"#), None);
    // ...and a stream asked for with an escaped key is still metered.
    assert_eq!(
        include(r#"{"str\u0065am":true}"#).as_deref(),
        Some(r#"{"str\u0065am":true,"stream_options":{"include_usage":true}}"#)
    );
    let out = include(r#"{"messages":[{"content":"\"stream\": true"}],"stream":true}"#).unwrap();
    assert!(serde_json::from_str::<serde_json::Value>(&out).unwrap()["stream_options"]["include_usage"] == true);
}

#[test]
fn include_usage_leaves_other_requests_alone() {
    for body in [
        r#"{"model":"m"}"#,
        r#"{"stream":false}"#,
        r#"{"stream":"true"}"#,
        r#"{"stream":true,"stream_options":{"include_usage":true}}"#,
        r#"{"stream":true,"stream_options":"weird"}"#,
        r#"{"stream":true,"stream":false}"#,
        r#"{"nested":{"stream":true}}"#,
    ] {
        assert_eq!(include(body), None, "{body}");
    }
    assert_eq!(ensure_include_usage(b"[1]"), Err(IncludeUsageError::NotObject));
    assert!(matches!(ensure_include_usage(b"{\"stream\":tru"), Err(IncludeUsageError::NotJson(_))));
    assert!(matches!(ensure_include_usage(b"\xff"), Err(IncludeUsageError::NotJson(_))));
}

#[test]
fn splitter_line_ends_and_data_lines() {
    let mut s = Splitter::default();
    assert_eq!(s.next_end(b"data: a\r\n\r\nrest"), Some(11));
    assert_eq!(s.next_end(b"data: b\r"), None);
    assert_eq!(s.next_end(b"\r"), None, "a final \\r may still be followed by \\n");
    assert_eq!(s.next_end(b"\ndata"), Some(1));
    assert_eq!(s.next_end(b"data"), None);
    assert_eq!(s.next_end(b"\n\n"), Some(2));
    assert_eq!(event_data(b"event: x\ndata: {\"a\":\ndata:1}\n\n").as_ref(), b"{\"a\":\n1}");
    assert_eq!(event_data(b": comment\r\ndata:x\r\n\r\n").as_ref(), b"x");
    assert_eq!(event_data(b"id: 1\n\n").as_ref(), b"");
}

#[test]
fn first_token_ignores_preamble_events() {
    let mut t = Tracker::new(UsageDialect::OpenAi, true, false);
    t.on_chunk(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n");
    assert!(!t.first_token_seen());
    t.on_chunk(b"data: {\"choices\":[{\"delta\":{\"content\": \"Hi\"}}]}\n\n");
    assert!(t.first_token_seen());
    let mut a = Tracker::new(UsageDialect::Anthropic, true, false);
    a.on_chunk(&fixture("anthropic-messages-stream.sse")[..400]);
    assert!(!a.first_token_seen(), "message_start and ping are not tokens");
}

/// Groq (`preset: groq`) reports a stream's usage in its last chunk's `x_groq`.
#[test]
fn groq_stream_usage_is_read_from_x_groq() {
    let mut t = Tracker::new(UsageDialect::OpenAi, true, false);
    t.on_chunk(b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n");
    let last = br#"data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"x_groq":{"id":"req_01","usage":{"queue_time":0.02,"prompt_tokens":18,"prompt_time":0.001,"completion_tokens":7,"completion_time":0.02,"total_tokens":25,"total_time":0.03}}}"#;
    t.on_chunk(last);
    t.on_end(b"\n\ndata: [DONE]\n\n");
    let u = t.finish().unwrap_or_default();
    assert_eq!((u.prompt_tokens, u.completion_tokens), (18, 7));
}

fn big_json(pad: usize, tail: &str) -> Vec<u8> {
    format!(r#"{{"choices":[{{"message":{{"content":"{}"}}}}]{tail}}}"#, "x".repeat(pad)).into_bytes()
}

#[test]
fn large_json_uses_the_tail() {
    let usage = r#","usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}"#;
    let body = big_json(3 * WHOLE_BODY_MAX, usage);
    let mut t = Tracker::new(UsageDialect::OpenAi, false, false);
    let mut rng = Rng(7);
    let (sent, got) = run(&mut t, &body, &rng.cuts(body.len(), 5000));
    assert_eq!((sent == body, got), (true, Some(Usage { prompt_tokens: 7, completion_tokens: 3, cached_tokens: 2 })));
    // Usage further from the end than the tail keeps is not found: reported as unknown.
    let far = format!("{usage},\"filler\":\"{}\"", "y".repeat(3 * TAIL_MAX));
    let mut t = Tracker::new(UsageDialect::OpenAi, false, false);
    assert_eq!(run(&mut t, &big_json(WHOLE_BODY_MAX, &far), &[]).1, None);
}

#[test]
fn small_json_is_parsed_whole_whatever_the_key_order() {
    // A nested "usage" after the real one (a tool input) must not win.
    let body = br#"{"usage":{"input_tokens":3,"output_tokens":4},"content":[{"type":"tool_use","input":{"usage":{"input_tokens":99}}}]}"#;
    let mut t = Tracker::new(UsageDialect::Anthropic, false, false);
    assert_eq!(run(&mut t, body, &[10]).1, Some(Usage { prompt_tokens: 3, completion_tokens: 4, cached_tokens: 0 }));
    // Not JSON at all (a proxy's HTML error page): no usage, no panic.
    let mut t = Tracker::new(UsageDialect::Gemini, false, false);
    assert_eq!(run(&mut t, b"<html>502 \"usageMetadata\": {</html>", &[]).1, None);
}

#[test]
fn a_usage_member_found_from_the_end_counts_only_when_it_is_the_top_level_objects_last() {
    let usage = |dialect, body: &[u8]| {
        let mut t = Tracker::new(dialect, false, false);
        run(&mut t, body, &[]).1
    };
    // The usual layout, in one chunk: read from the end (cached tokens from the details).
    let body = br#"{"id":"x","choices":[],"usage":{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":2},"completion_tokens":3} }"#;
    assert_eq!(
        usage(UsageDialect::OpenAi, body),
        Some(Usage { prompt_tokens: 7, completion_tokens: 3, cached_tokens: 2 })
    );
    // The last "usage" in the text is nested (a tool input): the top-level one still wins.
    let body = br#"{"usage":{"input_tokens":3,"output_tokens":4},"content":[{"type":"tool_use","input":{"usage":{"input_tokens":99}}}]}"#;
    assert_eq!(
        usage(UsageDialect::Anthropic, body),
        Some(Usage { prompt_tokens: 3, completion_tokens: 4, cached_tokens: 0 })
    );
    let body = br#"{"usage":{"prompt_tokens":1,"completion_tokens":2},"data":{"usage":{"prompt_tokens":9,"completion_tokens":9}}}"#;
    assert_eq!(
        usage(UsageDialect::OpenAi, body),
        Some(Usage { prompt_tokens: 1, completion_tokens: 2, cached_tokens: 0 })
    );
    // A count serde refuses is refused the quick way too.
    assert_eq!(usage(UsageDialect::OpenAi, br#"{"usage":{"prompt_tokens":1.5,"completion_tokens":2}}"#), None);
    // Gemini writes usageMetadata before other members: found by the scan instead.
    let body =
        br#"{"candidates":[],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":5},"modelVersion":"g"}"#;
    assert_eq!(
        usage(UsageDialect::Gemini, body),
        Some(Usage { prompt_tokens: 4, completion_tokens: 5, cached_tokens: 0 })
    );
}

#[test]
fn oversized_event_is_forwarded_and_tail_scanned() {
    // A Gemini image chunk: megabytes of base64, then usageMetadata.
    let image = "A".repeat(EVENT_MAX + 5000);
    let event = format!(
        "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"inlineData\":{{\"data\":\"{image}\"}}}}]}}}}],\"usageMetadata\":{{\"promptTokenCount\":12,\"candidatesTokenCount\":1290}}}}\r\n\r\n"
    );
    let body = format!("{event}data: {{\"candidates\":[]}}\r\n\r\n").into_bytes();
    let mut t = Tracker::new(UsageDialect::Gemini, true, true);
    let mut rng = Rng(3);
    let cuts = rng.cuts(body.len(), 64 * 1024);
    let mut sent = Vec::new();
    let mut start = 0;
    for &end in cuts.iter().chain(std::iter::once(&body.len())) {
        match t.on_chunk(&body[start..end]) {
            Chunk::Forward => sent.extend_from_slice(&body[start..end]),
            Chunk::Replace(v) => sent.extend_from_slice(&v),
        }
        assert!(t.buffered_bytes() <= EVENT_MAX, "bounded memory: {}", t.buffered_bytes());
        start = end;
    }
    sent.extend_from_slice(&t.flush());
    assert!(sent == body);
    assert_eq!(t.finish(), Some(Usage { prompt_tokens: 12, completion_tokens: 1290, cached_tokens: 0 }));
}

#[test]
fn unterminated_last_event_is_still_read() {
    let usage = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}";
    let body = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"a\"}}}}]}}\n\n{usage}");
    let mut t = Tracker::new(UsageDialect::OpenAi, true, false);
    assert_eq!(
        run(&mut t, body.as_bytes(), &[7]).1,
        Some(Usage { prompt_tokens: 1, completion_tokens: 2, cached_tokens: 0 })
    );
    // Hiding: the held usage event is dropped, the rest flushed.
    let mut t = Tracker::new(UsageDialect::OpenAi, true, true);
    let (sent, got) = run(&mut t, format!("{usage}\n\ndata: [DONE]").as_bytes(), &[]);
    assert_eq!(sent, b"data: [DONE]");
    assert!(got.is_some());
}

#[test]
fn on_end_appends_flushed_bytes() {
    let mut t = Tracker::new(UsageDialect::OpenAi, true, true);
    assert_eq!(t.on_chunk(b"data: {\"choi"), Chunk::Replace(Vec::new()));
    assert_eq!(t.on_end(b"ces\":[1]}"), Chunk::Replace(b"data: {\"choices\":[1]}".to_vec()));
    assert_eq!(t.on_chunk(b"late"), Chunk::Forward);
    let mut t = Tracker::new(UsageDialect::OpenAi, true, false);
    assert_eq!(t.on_end(b"data: x"), Chunk::Forward);
}

#[test]
fn top_level_member_scan_skips_nested_values_and_strings() {
    fn at(body: &str) -> Option<&str> {
        top_level_object(body.as_bytes(), b"usage").map(|i| &body[i..])
    }
    assert_eq!(at(r#"{"usage":{"a":1}}"#), Some(r#"{"a":1}}"#));
    // Nested members, strings with braces, quotes and escapes do not count.
    let body = r#"{"s":"}\"usage\":{","c":[{"usage":{"x":1}}],"o":{"usage":{}}, "usage" : {"b":2}}"#;
    assert_eq!(at(body), Some(r#"{"b":2}}"#));
    assert_eq!(
        at(r#"{"usage":{"a":1},"content":[{"input":{"usage":{"a":9}}}]}"#),
        Some(r#"{"a":1},"content":[{"input":{"usage":{"a":9}}}]}"#)
    );
    // Not an object value, not an object body, an escaped key, trailing objects: no quick answer.
    assert_eq!(at(r#"{"usage":null}"#), None);
    assert_eq!(at(r#"[{"usage":{}}]"#), None);
    assert_eq!(at(r#"{"us\u0061ge":{"a":1}}"#), None);
    assert_eq!(at(r#"{"a":1} {"usage":{"a":1}}"#), None);
    assert_eq!(at(r#"{"unterminated"#), None);
}

/// The quick reader of usage objects against serde on generated objects: whenever it answers,
/// serde answers the same; whatever it declines, serde still decides.
#[test]
fn quick_usage_reader_agrees_with_serde() {
    use super::super::extract::{quick_value, serde_value, Acc};
    const KEYS: [&str; 18] = [
        "prompt_tokens",
        "completion_tokens",
        "input_tokens",
        "output_tokens",
        "total_tokens",
        "prompt_tokens_details",
        "input_tokens_details",
        "cached_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "promptTokenCount",
        "candidatesTokenCount",
        "thoughtsTokenCount",
        "inputTokens",
        "outputTokens",
        "cacheReadInputTokens",
        "cacheWriteInputTokens",
        "x",
    ];
    // Valid JSON values only: members the quick reader skips are skipped leniently (like the
    // scan of the rest of the body), where serde would refuse a malformed one.
    const VALUES: [&str; 12] =
        ["0", "7", "123456", "99999999999999999999", "1.5", "-1", "0.0", "1e3", "null", "\"s\"", "true", "[1,{}]"];
    fn object(rng: &mut Rng, depth: u32) -> String {
        let n = rng.next() % 5;
        let members: Vec<String> = (0..n)
            .map(|_| {
                let key = KEYS[(rng.next() % KEYS.len() as u64) as usize];
                let value = if depth == 0 && rng.next().is_multiple_of(4) {
                    object(rng, 1)
                } else {
                    VALUES[(rng.next() % VALUES.len() as u64) as usize].to_string()
                };
                let ws = [" ", "", "\n"][(rng.next() % 3) as usize];
                format!("{ws}\"{key}\"{ws}:{ws}{value}")
            })
            .collect();
        format!("{{{}}}", members.join(","))
    }
    let mut rng = Rng(0x5eed);
    let (mut quick_answers, mut declined) = (0, 0);
    for _ in 0..20_000 {
        let text = object(&mut rng, 0);
        for dialect in [UsageDialect::OpenAi, UsageDialect::Anthropic, UsageDialect::Gemini, UsageDialect::Converse] {
            let (mut by_serde, mut by_quick) = (Acc::default(), Acc::default());
            let serde_ok = serde_value(dialect, text.as_bytes(), &mut by_serde);
            match quick_value(dialect, text.as_bytes()) {
                Some((found, len)) => {
                    quick_answers += 1;
                    assert_eq!(len, text.len(), "{text}");
                    found.add_to(&mut by_quick);
                    assert!(serde_ok, "quick read what serde refuses: {text}");
                    assert_eq!(by_quick.result(), by_serde.result(), "{dialect:?} {text}");
                }
                None => declined += 1,
            }
        }
    }
    assert!(quick_answers > 10_000 && declined > 10_000, "{quick_answers} {declined}");
}

/// `cached` is written only when true, and a line without it (every older filter's) reads false.
#[test]
fn cached_is_written_only_when_true() {
    let plain = Record::default().to_json_line();
    assert!(!plain.contains("cached\""), "{plain}");
    let hit = Record { cached: true, cost_micro_usd: Some(0), ..Record::default() }.to_json_line();
    assert!(hit.ends_with(",\"cached\":true}\n"), "{hit}");
    assert!(Record::parse_lines(hit.as_bytes()).unwrap()[0].cached);
    assert!(!Record::parse_lines(plain.as_bytes()).unwrap()[0].cached);
}
