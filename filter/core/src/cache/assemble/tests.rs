//! The assembler on its own: JSON-array framing, how events join, the limit, and real
//! upstream-looking streams (`testdata/usage`, and the translator's golden client streams).

use std::path::Path;

use serde_json::{json, Value};

use super::*;
use crate::translate::ir::{Block, Thinking};

const LIMIT: usize = 1 << 20;

fn assemble(shape: Shape, stream: &[u8], step: usize) -> Option<Vec<u8>> {
    let mut a = Assembler::new(shape, LIMIT);
    for piece in stream.chunks(step.max(1)) {
        a.feed(piece);
    }
    a.finish()
}

fn elements(input: &[u8], step: usize) -> (Vec<String>, ArrayScanner) {
    let mut scanner = ArrayScanner::default();
    let mut out = Vec::new();
    for piece in input.chunks(step) {
        scanner.feed(piece, |e| out.push(String::from_utf8_lossy(e).into_owned()));
    }
    (out, scanner)
}

#[test]
fn array_elements_are_cut_at_their_closing_brace_only() {
    let input = br#" [ {"a": "}{\"]", "b": [1, {"c": 2}]},
{"d": "\\"} ] "#;
    for step in [1, 2, 5, input.len()] {
        let (out, scanner) = elements(input, step);
        assert_eq!(out, [r#"{"a": "}{\"]", "b": [1, {"c": 2}]}"#, r#"{"d": "\\"}"#], "step {step}");
        assert!(scanner.closed && !scanner.malformed && scanner.pending.is_empty());
    }
    assert!(elements(b"[1, 2]", 1).1.malformed);
    assert!(elements(b"{}", 1).1.malformed);
    assert!(!elements(b"[{}", 1).1.closed);
}

#[test]
fn a_signature_closes_the_thinking_before_it_or_stands_alone() {
    let mut c = Collect::default();
    for e in [
        Event::Thinking("a".into()),
        Event::Thinking("b".into()),
        Event::Signature("s1".into()),
        Event::Signature("s2".into()),
        Event::ToolStart { index: 0, id: "c1".into(), name: "f".into() },
        Event::ToolArgs { index: 0, json: "{\"x\":".into() },
        Event::ToolArgs { index: 0, json: "1}".into() },
    ] {
        c.event(e);
    }
    let resp = c.response(Finish::Stop, String::new()).unwrap();
    let thinking = |text: &str, sig: &str| Block::Thinking(Thinking { text: text.into(), signature: Some(sig.into()) });
    assert_eq!(resp.content[..2], [thinking("ab", "s1"), thinking("", "s2")]);
    assert!(matches!(&resp.content[2], Block::ToolCall(call) if call.arguments == serde_json::json!({"x": 1})));
}

#[test]
fn calls_with_broken_arguments_are_not_assembled() {
    let mut c = Collect::default();
    c.event(Event::ToolStart { index: 0, id: "c1".into(), name: "f".into() });
    c.event(Event::ToolArgs { index: 0, json: "{\"x\":".into() });
    assert!(c.response(Finish::ToolCalls, String::new()).is_none());
}

#[test]
fn the_limit_counts_the_event_in_progress() {
    // One event larger than the limit, never finished: held bytes grow past it.
    let mut a = Assembler::new(Shape::ResponsesSse, 100);
    a.feed(b"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"x\":\"");
    a.feed(&[b'a'; 100]);
    assert!(a.overflowed);
    a.feed(b"\"}}\n\n");
    assert_eq!(a.finish(), None);
}

#[test]
fn an_event_over_the_limit_fails_however_it_is_cut() {
    let big = format!(
        "data: {{\"id\":\"c\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
        "a".repeat(200)
    );
    let stream = [
        big.as_bytes(),
        b"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    ]
    .concat();
    for step in [1, 7, stream.len()] {
        let mut a = Assembler::new(Shape::ChatSse, 150);
        stream.chunks(step).for_each(|c| a.feed(c));
        assert_eq!(a.finish(), None, "step {step}");
    }
}

fn fixture(path: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(path)).unwrap()
}

/// Assembles a fixture in every chunking and returns the answer.
fn assemble_fixture(shape: Shape, path: &str) -> Vec<u8> {
    let stream = fixture(path);
    let whole = assemble(shape, &stream, stream.len()).unwrap_or_else(|| panic!("{path}"));
    for step in [1, 7] {
        assert_eq!(assemble(shape, &stream, step).as_deref(), Some(&whole[..]), "{path} step {step}");
    }
    whole
}

#[test]
fn upstream_chat_streams_assemble() {
    let tools =
        openai_chat::decode_response(&assemble_fixture(Shape::ChatSse, "usage/openai-chat-stream-tools.sse")).unwrap();
    assert_eq!(tools.id, "chatcmpl-9vTnGQpZ5y9bvJ8T2kq8nTfHCwXoq");
    assert_eq!(
        (tools.finish, tools.usage.input, tools.usage.output, tools.usage.cached),
        (Finish::ToolCalls, 355, 18, 256)
    );
    let text = assemble_fixture(Shape::ChatSse, "usage/openai-chat-stream-usage.sse");
    let v: Value = serde_json::from_slice(&text).unwrap();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["model"], "gpt-4o-mini-2024-07-18");
    assert_eq!(v["created"], 1_745_406_929);
    assert_eq!(v["usage"]["prompt_tokens"], 19);
    // vLLM: comments, `data:` without a space, an event split over two data lines.
    let vllm = openai_chat::decode_response(&assemble_fixture(Shape::ChatSse, "usage/vllm-chat-stream-continuous.sse"))
        .unwrap();
    assert_eq!(
        vllm.content,
        [crate::translate::ir::Block::Text(crate::translate::ir::Text {
            text: "The answer is 42.".into(),
            cache: None
        })]
    );
    assert_eq!(vllm.usage.output, 5);
}

#[test]
fn upstream_anthropic_streams_assemble() {
    let text = anthropic::decode_response(
        &assemble_fixture(Shape::AnthropicSse, "usage/anthropic-messages-stream.sse"),
        false,
    )
    .unwrap();
    assert_eq!((text.usage.input, text.usage.cached, text.usage.cache_write, text.usage.output), (2125, 2000, 100, 15));
    let tools = assemble_fixture(Shape::AnthropicSse, "usage/anthropic-messages-stream-tools.sse");
    let v: Value = serde_json::from_slice(&tools).unwrap();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"][1]["input"], json!({"location": "San Francisco, CA", "unit": "fahrenheit"}));
    assert_eq!(v["model"], "claude-sonnet-4-5-20250929");
}

#[test]
fn upstream_gemini_and_responses_streams_assemble() {
    let sse = gemini::decode_response(&assemble_fixture(Shape::GeminiSse, "usage/gemini-stream.sse")).unwrap();
    let array =
        gemini::decode_response(&assemble_fixture(Shape::GeminiJsonArray, "usage/gemini-stream-array.json")).unwrap();
    assert_eq!(sse, array);
    assert_eq!(sse.usage.output, 11);
    let resp = assemble_fixture(Shape::ResponsesSse, "usage/openai-responses-stream.sse");
    let v: Value = serde_json::from_slice(&resp).unwrap();
    assert_eq!(
        (v["object"].as_str(), v["output"][0]["content"][0]["text"].as_str()),
        (Some("response"), Some("Hi there!"))
    );
}

/// The translator's golden client streams (`<client>-to-<provider>/*.out.sse`) assemble in the
/// client's shape, except the one that ends with an error.
#[test]
fn translated_streams_assemble() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/translate/streams");
    let mut seen = 0;
    for dir in std::fs::read_dir(root).unwrap() {
        let dir = dir.unwrap().path();
        let name = dir.file_name().unwrap().to_str().unwrap().to_string();
        let shape = match name.split_once("-to-").unwrap().0 {
            "openai" => Shape::ChatSse,
            "anthropic" => Shape::AnthropicSse,
            "gemini" => Shape::GeminiSse,
            _ => Shape::ResponsesSse,
        };
        for file in std::fs::read_dir(&dir).unwrap() {
            let path = file.unwrap().path();
            let file = path.file_name().unwrap().to_str().unwrap().to_string();
            if !file.ends_with(".out.sse") {
                continue;
            }
            let got = assemble(shape, &std::fs::read(&path).unwrap(), 5);
            assert_eq!(got.is_some(), file != "error.out.sse", "{name}/{file}");
            seen += 1;
        }
    }
    assert!(seen >= 15);
}

#[test]
fn unfinished_failed_or_oversized_streams_are_not_assembled() {
    for (shape, path) in [
        (Shape::ChatSse, "usage/openai-chat-stream-usage.sse"),
        (Shape::AnthropicSse, "usage/anthropic-messages-stream.sse"),
        (Shape::GeminiSse, "usage/gemini-stream.sse"),
        (Shape::GeminiJsonArray, "usage/gemini-stream-array.json"),
        (Shape::ResponsesSse, "usage/openai-responses-stream.sse"),
    ] {
        let stream = fixture(path);
        let text = String::from_utf8(stream.clone()).unwrap();
        // Cut before the closing event (for the array, before its closing bracket).
        let cut = match shape {
            Shape::GeminiJsonArray => text.trim_end().len() - 1,
            _ => text.rfind("data:").unwrap(),
        };
        assert_eq!(assemble(shape, &stream[..cut], 7), None, "{path} cut");
        let mut small = Assembler::new(shape, 64);
        small.feed(&stream);
        assert_eq!(small.finish(), None, "{path} limit");
    }
    let error = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
                 data: {\"error\":{\"message\":\"overloaded\"}}\n\n\
                 data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    assert_eq!(assemble(Shape::ChatSse, error.as_bytes(), 3), None);
    let overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let anthropic = [fixture("usage/anthropic-messages-stream.sse"), overloaded.as_bytes().to_vec()].concat();
    assert_eq!(assemble(Shape::AnthropicSse, &anthropic, 7), None);
}
