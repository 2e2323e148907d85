//! InvokeModel bodies and the re-framing of its streamed answers, cut at every byte.

use base64::Engine as _;
use serde_json::{json, Value};

use super::*;
use crate::clouds::eventstream::test_frame;

fn chunk(event: &Value) -> Vec<u8> {
    let bytes = base64::engine::general_purpose::STANDARD.encode(event.to_string());
    let headers = [(":event-type", "chunk"), (":content-type", "application/json"), (":message-type", "event")];
    test_frame(&headers, json!({"bytes": bytes, "p": "abcdefgh"}).to_string().as_bytes())
}

fn exception(kind: &str, message: &str) -> Vec<u8> {
    let headers = [(":exception-type", kind), (":content-type", "application/json"), (":message-type", "exception")];
    test_frame(&headers, json!({"message": message}).to_string().as_bytes())
}

/// Anthropic's stream events as Bedrock sends them; the last carries Bedrock's metrics.
pub(crate) fn events() -> Vec<Value> {
    vec![
        json!({"type": "message_start", "message": {"id": "msg_bdrk_1", "type": "message", "role": "assistant",
            "model": "claude-3-haiku-20240307", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop", "amazon-bedrock-invocationMetrics":
            {"inputTokenCount": 12, "outputTokenCount": 5, "invocationLatency": 310, "firstByteLatency": 120}}),
    ]
}

/// The InvokeModelWithResponseStream body of `events`.
pub(crate) fn body_of(events: &[Value]) -> Vec<u8> {
    events.iter().flat_map(chunk).collect()
}

fn sse(events: &[Value]) -> String {
    events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or_default())).collect()
}

fn reframe_in_pieces(body: &[u8], cut: usize) -> String {
    let mut r = Reframer::default();
    let (a, b) = body.split_at(cut);
    let mut out = r.feed(a);
    out.extend(r.feed(b));
    out.extend(r.finish());
    String::from_utf8(out).unwrap_or_default()
}

#[test]
fn anthropic_models_are_told_apart_from_the_others() {
    for id in [
        "anthropic.claude-3-haiku-20240307-v1:0",
        "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        "arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.anthropic.claude-3-5-sonnet-20240620-v1:0",
    ] {
        assert!(is_anthropic(id), "{id}");
    }
    for id in [
        "meta.llama3-1-70b-instruct-v1:0",
        "amazon.nova-lite-v1:0",
        "us.meta.llama3-2-1b-instruct-v1:0",
        "anthropic",
        "anthropic.",
        "us.anthropic",
        "us.anthropic.",
        "claude-3-haiku",
        "mistral.anthropic-like-v1",
    ] {
        assert!(!is_anthropic(id), "{id}");
    }
    assert_eq!(
        path("anthropic.claude-3-haiku-20240307-v1:0", false),
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke"
    );
    assert_eq!(
        path("us.anthropic.claude-x-v1:0", true),
        "/model/us.anthropic.claude-x-v1%3A0/invoke-with-response-stream"
    );
}

#[test]
fn the_messages_body_loses_model_and_stream_and_gains_bedrocks_version() {
    let sent = json!({"model": "claude", "stream": true, "max_tokens": 9, "system": [{"type": "text",
        "text": "be brief", "cache_control": {"type": "ephemeral"}}], "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 1024}});
    let (body, stream) = body(sent.to_string().as_bytes()).unwrap_or_default();
    let got: Value = serde_json::from_slice(&body).unwrap_or_default();
    assert!(stream);
    let mut want = sent.clone();
    want.as_object_mut().map(|o| (o.remove("model"), o.remove("stream")));
    want["anthropic_version"] = json!("bedrock-2023-05-31");
    assert_eq!(got, want);
    let (_, stream) = super::body(br#"{"max_tokens":1,"messages":[]}"#).unwrap_or_default();
    assert!(!stream);
    assert!(matches!(super::body(b"[1]"), Err(InvokeError::NotAnObject(_))));
}

#[test]
fn betas_from_the_header_join_the_body_once() {
    let body = br#"{"anthropic_version":"bedrock-2023-05-31","anthropic_beta":["a"],"max_tokens":1}"#;
    let got = with_betas(body, b"a, token-efficient-tools-2025-02-19 ,,interleaved-thinking-2025-05-14").ok().flatten();
    let got: Value = serde_json::from_slice(&got.unwrap_or_default()).unwrap_or_default();
    assert_eq!(
        got["anthropic_beta"],
        json!(["a", "token-efficient-tools-2025-02-19", "interleaved-thinking-2025-05-14"])
    );
    assert_eq!(got["max_tokens"], 1);
    assert_eq!(with_betas(body, b" , "), Ok(None));
}

#[test]
fn chunks_become_anthropic_server_sent_events_wherever_the_body_is_cut() {
    let events = events();
    let body = body_of(&events);
    let want = sse(&events);
    for cut in 0..=body.len() {
        assert_eq!(reframe_in_pieces(&body, cut), want, "cut at {cut}");
    }
}

#[test]
fn an_exception_after_the_200_is_anthropics_error_event_and_ends_the_stream() {
    let events = events();
    let mut body = body_of(&events[..3]);
    body.extend(exception("throttlingException", "Too many tokens, please wait."));
    body.extend(chunk(&events[3]));
    let got = reframe_in_pieces(&body, body.len() / 2);
    let error = json!({"type": "error", "error": {"type": "overloaded_error",
        "message": "throttlingException: Too many tokens, please wait."}});
    assert_eq!(got, format!("{}event: error\ndata: {error}\n\n", sse(&events[..3])));
}

#[test]
fn a_corrupt_or_truncated_body_ends_with_an_error_event() {
    let events = events();
    let mut body = body_of(&events[..2]);
    let whole = body.len();
    body.extend(chunk(&events[2]));
    body[whole + 20] ^= 0x55;
    let got = reframe_in_pieces(&body, 7);
    assert!(got.starts_with(&sse(&events[..2])), "{got}");
    assert!(got.ends_with("\n\n") && got.matches("event: error").count() == 1 && got.contains("CRC"), "{got}");

    let body = body_of(&events[..2]);
    let got = reframe_in_pieces(&body[..body.len() - 3], 0);
    assert!(got.starts_with(&sse(&events[..1])) && got.contains("event: error") && got.contains("api_error"), "{got}");
}

#[test]
fn chunks_that_are_not_base64_anthropic_events_are_errors() {
    let headers = [(":event-type", "chunk"), (":message-type", "event")];
    for (payload, why) in [
        (json!({"bytes": "%%%"}), "not base64"),
        (json!({"nope": 1}), "without bytes"),
        (json!({"bytes": base64::engine::general_purpose::STANDARD.encode("[1,2]")}), "not an Anthropic event"),
    ] {
        let got = reframe_in_pieces(&test_frame(&headers, payload.to_string().as_bytes()), 0);
        assert!(got.starts_with("event: error\n") && got.contains(why), "{got}");
    }
}

#[test]
fn an_event_spanning_lines_keeps_one_data_field_per_line() {
    let text = "{\n  \"type\": \"ping\"\n}";
    let bytes = base64::engine::general_purpose::STANDARD.encode(text);
    let headers = [(":event-type", "chunk"), (":message-type", "event")];
    let got = reframe_in_pieces(&test_frame(&headers, json!({"bytes": bytes}).to_string().as_bytes()), 3);
    assert_eq!(got, "event: ping\ndata: {\ndata:   \"type\": \"ping\"\ndata: }\n\n");
}

#[test]
fn one_frame_is_held_at_most() {
    let events = events();
    let body = body_of(&events);
    let longest = events.iter().map(|e| chunk(e).len()).max().unwrap_or(0);
    let mut r = Reframer::default();
    for byte in &body {
        let _ = r.feed(std::slice::from_ref(byte));
        assert!(r.held() < longest);
    }
    assert_eq!(r.held(), 0);
}
