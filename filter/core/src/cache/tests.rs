//! Round trips through the whole cache path: a complete answer replayed as a stream
//! ([`replay::stream`]) and assembled back ([`Assembler`]) in chunks of 1, 7 and all bytes is
//! the same answer (text, reasoning, tool calls, finish, usage) in every dialect. Real
//! upstream streams are assembled in `assemble/tests.rs`.

use serde_json::{json, Value};

use super::*;
use crate::translate::ir::Response;
use crate::translate::{anthropic, gemini, openai_chat};

const LIMIT: usize = 1 << 20;

fn opts() -> replay::ReplayOptions<'static> {
    replay::ReplayOptions { model: "client-model", created: 1_700_000_000, include_usage: true }
}

fn assemble(shape: Shape, stream: &[u8], step: usize) -> Option<Vec<u8>> {
    let mut a = Assembler::new(shape, LIMIT);
    for piece in stream.chunks(step.max(1)) {
        a.feed(piece);
    }
    a.finish()
}

/// Replays `body` as `shape` and assembles it back in chunks of 1, 7 and all bytes; the three
/// results are equal and returned.
fn round_trip(shape: Shape, body: &[u8]) -> Vec<u8> {
    let stream = replay::stream(shape, body, &opts()).unwrap();
    let whole =
        assemble(shape, &stream, stream.len()).unwrap_or_else(|| panic!("{}", String::from_utf8_lossy(&stream)));
    for step in [1, 7] {
        assert_eq!(assemble(shape, &stream, step).as_deref(), Some(&whole[..]), "step {step}");
    }
    whole
}

/// The neutral answer without the model (replays report the client's).
fn neutral(resp: Response) -> Response {
    Response { model: String::new(), ..resp }
}

fn chat_answer(message: Value, finish: &str) -> Vec<u8> {
    json!({
        "id": "chatcmpl-abc", "object": "chat.completion", "created": 1, "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27, "prompt_tokens_details": {"cached_tokens": 4}},
    })
    .to_string()
    .into_bytes()
}

#[test]
fn chat_round_trips() {
    let text = chat_answer(json!({"role": "assistant", "content": "Hello there, ünïcode ✓"}), "stop");
    let call = json!({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}});
    let tools = chat_answer(json!({"role": "assistant", "content": null, "tool_calls": [call]}), "tool_calls");
    let length = chat_answer(json!({"role": "assistant", "content": "Cut"}), "length");
    for body in [text, tools, length] {
        let back = round_trip(Shape::ChatSse, &body);
        let want = neutral(openai_chat::decode_response(&body).unwrap());
        assert_eq!(neutral(openai_chat::decode_response(&back).unwrap()), want);
        let v: Value = serde_json::from_slice(&back).unwrap();
        assert_eq!((v["model"].as_str(), v["created"].as_u64()), (Some("client-model"), Some(1_700_000_000)));
    }
}

#[test]
fn chat_replay_has_the_sdk_shape() {
    let body = chat_answer(json!({"role": "assistant", "content": "Hi"}), "stop");
    let stream = String::from_utf8(replay::stream(Shape::ChatSse, &body, &opts()).unwrap()).unwrap();
    assert!(stream.ends_with("data: [DONE]\n\n"));
    for line in stream.lines().filter_map(|l| l.strip_prefix("data: ")).filter(|d| *d != "[DONE]") {
        let chunk: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            (chunk["object"].as_str(), chunk["id"].as_str()),
            (Some("chat.completion.chunk"), Some("chatcmpl-abc"))
        );
    }
    let no_usage = replay::ReplayOptions { include_usage: false, ..opts() };
    let quiet = String::from_utf8(replay::stream(Shape::ChatSse, &body, &no_usage).unwrap()).unwrap();
    assert!(stream.contains("\"usage\"") && !quiet.contains("\"usage\""));
}

fn anthropic_answer(content: Value, stop: &str) -> Vec<u8> {
    json!({
        "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": content,
        "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 30, "cache_read_input_tokens": 5, "cache_creation_input_tokens": 2},
    })
    .to_string()
    .into_bytes()
}

#[test]
fn anthropic_round_trips() {
    let bodies = [
        anthropic_answer(json!([{"type": "text", "text": "Hello!"}]), "end_turn"),
        anthropic_answer(
            json!([
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris", "days": [1, 2]}},
            ]),
            "tool_use",
        ),
        anthropic_answer(
            json!([
                {"type": "thinking", "thinking": "Let me think.", "signature": "sig-abc"},
                {"type": "text", "text": "42"},
            ]),
            "end_turn",
        ),
    ];
    for body in bodies {
        let back = round_trip(Shape::AnthropicSse, &body);
        let want = neutral(anthropic::decode_response(&body, false).unwrap());
        assert_eq!(neutral(anthropic::decode_response(&back, false).unwrap()), want);
    }
}

fn gemini_answer(parts: Value) -> Vec<u8> {
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 11, "totalTokenCount": 20},
        "modelVersion": "gemini-2.5-flash", "responseId": "resp-g1",
    })
    .to_string()
    .into_bytes()
}

#[test]
fn gemini_round_trips_in_both_stream_shapes() {
    let bodies = [
        gemini_answer(json!([{"text": "The sky is blue."}])),
        gemini_answer(
            json!([{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "s1"}]),
        ),
        gemini_answer(json!([{"text": "Hmm.", "thought": true, "thoughtSignature": "s2"}, {"text": "Blue."}])),
    ];
    for body in bodies {
        let want = neutral(gemini::decode_response(&body).unwrap());
        for shape in [Shape::GeminiSse, Shape::GeminiJsonArray] {
            let back = round_trip(shape, &body);
            assert_eq!(neutral(gemini::decode_response(&back).unwrap()), want, "{shape:?}");
        }
    }
    let array = replay::stream(Shape::GeminiJsonArray, &bodies_first(), &opts()).unwrap();
    let chunks: Vec<Value> = serde_json::from_slice(&array).unwrap();
    assert!(chunks.len() >= 2 && chunks.iter().all(|c| c["modelVersion"] == "client-model"));
}

fn bodies_first() -> Vec<u8> {
    gemini_answer(json!([{"text": "The sky is blue."}]))
}

fn responses_answer(output: Value, status: &str) -> Vec<u8> {
    json!({
        "id": "resp_1", "object": "response", "created_at": 1, "status": status, "error": null,
        "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "model": "gpt-4.1", "output": output, "parallel_tool_calls": true, "store": false, "tools": [],
        "usage": {"input_tokens": 8, "output_tokens": 4, "total_tokens": 12},
    })
    .to_string()
    .into_bytes()
}

#[test]
fn responses_round_trip() {
    let message = json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "Hi there!", "annotations": []}]});
    let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{\"a\":1}", "status": "completed"});
    let reasoning =
        json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Thinking..."}]});
    let bodies = [
        responses_answer(json!([message]), "completed"),
        responses_answer(json!([call]), "completed"),
        responses_answer(json!([reasoning, message]), "completed"),
        responses_answer(json!([message]), "incomplete"),
    ];
    for body in bodies {
        let back = round_trip(Shape::ResponsesSse, &body);
        let mut want: Value = serde_json::from_slice(&body).unwrap();
        want["model"] = json!("client-model");
        want["created_at"] = json!(1_700_000_000);
        assert_eq!(serde_json::from_slice::<Value>(&back).unwrap(), want);
    }
}

#[test]
fn responses_replay_numbers_its_events() {
    let message = json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": "Hi", "annotations": []}]});
    let stream =
        replay::stream(Shape::ResponsesSse, &responses_answer(json!([message]), "completed"), &opts()).unwrap();
    let kinds: Vec<(String, u64)> = String::from_utf8(stream)
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .map(|v| (v["type"].as_str().unwrap().to_string(), v["sequence_number"].as_u64().unwrap()))
        .collect();
    let names: Vec<&str> = kinds.iter().map(|k| k.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    assert!(kinds.iter().enumerate().all(|(i, k)| k.1 == i as u64));
}

#[test]
fn replay_refuses_what_is_not_an_answer() {
    for shape in [Shape::ChatSse, Shape::AnthropicSse, Shape::GeminiSse, Shape::GeminiJsonArray, Shape::ResponsesSse] {
        assert!(replay::stream(shape, b"{\"nope\": 1}", &opts()).is_err(), "{shape:?}");
        assert!(replay::stream(shape, b"garbage", &opts()).is_err(), "{shape:?}");
    }
    let failed = responses_answer(json!([]), "failed");
    assert!(
        matches!(replay::stream(Shape::ResponsesSse, &failed, &opts()), Err(ReplayError::Status(s)) if s == "failed")
    );
}

#[test]
fn a_complete_json_body_is_taken_as_it_is() {
    let body = chat_answer(json!({"role": "assistant", "content": "Hi"}), "stop");
    assert_eq!(assemble(Shape::Json, &body, 3), Some(body.clone()));
    assert_eq!(assemble(Shape::Json, &body[..body.len() - 1], 3), None);
    assert_eq!(replay::stream(Shape::Json, &body, &opts()).unwrap(), body);
}

/// A deterministic stand-in for the fuzz targets (core has no randomness; cargo-fuzz needs
/// nightly): damaged streams and stored bodies never panic, assemble the same however they
/// are cut, and replays of whatever replays assemble.
#[test]
fn damaged_streams_and_bodies_never_panic() {
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let shapes = [Shape::ChatSse, Shape::AnthropicSse, Shape::GeminiSse, Shape::GeminiJsonArray, Shape::ResponsesSse];
    let bodies = [
        chat_answer(json!({"role": "assistant", "content": "Hello"}), "stop"),
        anthropic_answer(json!([{"type": "tool_use", "id": "t", "name": "f", "input": 5}]), "tool_use"),
        gemini_answer(json!([{"text": "Hi", "thought": true}, {"functionCall": {"name": "f", "args": {}}}])),
        responses_answer(
            json!([{"type": "message", "id": "m", "content": [{"type": "refusal", "refusal": "no"}]}, 5]),
            "completed",
        ),
    ];
    for round in 0..400 {
        let shape = shapes[next() as usize % shapes.len()];
        let mut body = bodies[round % bodies.len()].clone();
        if let Ok(stream) = replay::stream(shape, &body, &opts()) {
            assert!(assemble(shape, &stream, 1 + next() as usize % 9).is_some(), "{shape:?} {round}");
            let mut damaged = stream.clone();
            for _ in 0..1 + next() % 4 {
                let at = next() as usize % damaged.len();
                damaged[at] = next() as u8;
            }
            damaged.truncate(damaged.len() - next() as usize % 8);
            let limit = 64 + next() as usize % 2048;
            let mut whole = Assembler::new(shape, limit);
            whole.feed(&damaged);
            let whole = whole.finish();
            let mut cut = Assembler::new(shape, limit);
            damaged.chunks(1 + next() as usize % 13).for_each(|c| cut.feed(c));
            assert_eq!(whole, cut.finish(), "{shape:?} {round}");
            assert!(whole.is_none_or(|w| w.len() <= limit && serde_json::from_slice::<Value>(&w).is_ok()));
        }
        let at = next() as usize % body.len();
        body[at] = next() as u8;
        let _ = replay::stream(shape, &body, &opts());
    }
}
