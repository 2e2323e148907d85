//! The real filter with Bedrock (a SaaS: only its wire formats can be played here): Claude
//! through InvokeModel, whose event-stream answer is made Anthropic's server-sent events before
//! anything reads it, and ConverseStream, metered on the translation the client gets. Both are
//! cut at the key's budget (`overrun: cut`) and billed for what was delivered, like every other
//! stream (`limits.rs`).

use base64::Engine as _;
use ferrogate_host::Vm;
use serde_json::{json, Value};

use crate::common::*;
use crate::limits::{anthropic_stream, delivered_events, send_as, sse_events, tokens_counted, OVERRUN, STREAMED, TEXT};

/// [`OVERRUN`]'s keys and prices, with a Bedrock provider (signing keys as the sidecar hands
/// them over) serving Claude (`br-claude`) and Llama (`llama`).
fn config() -> String {
    let provider = r#"{"name":"br","kind":"bedrock","region":"us-east-1",
      "aws_keys":{"access_key_id":"AKIDEXAMPLE","secret_access_key":"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}},"#;
    let models = r#"{"name":"br-claude","targets":[{"provider":"br","model":"anthropic.claude-3-haiku-20240307-v1:0"}]},
      {"name":"llama","targets":[{"provider":"br","model":"meta.llama3-1-70b-instruct-v1:0"}]},"#;
    let prices = r#""anthropic.claude-3-haiku-20240307-v1:0":{"input_per_mtok":1.0,"output_per_mtok":2.0},
      "meta.llama3-1-70b-instruct-v1:0":{"input_per_mtok":1.0,"output_per_mtok":2.0},"#;
    OVERRUN
        .replacen(r#""providers":["#, &format!(r#""providers":[{provider}"#), 1)
        .replacen(r#""models":["#, &format!(r#""models":[{models}"#), 1)
        .replacen(r#""pricing":{"#, &format!(r#""pricing":{{{prices}"#), 1)
}

/// One event-stream frame: string headers, the payload, both CRCs.
fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in headers {
        block.push(u8::try_from(name.len()).unwrap());
        block.extend_from_slice(name.as_bytes());
        block.push(7);
        block.extend_from_slice(&u16::try_from(value.len()).unwrap().to_be_bytes());
        block.extend_from_slice(value.as_bytes());
    }
    let total = u32::try_from(16 + block.len() + payload.len()).unwrap();
    let mut out = [total.to_be_bytes(), u32::try_from(block.len()).unwrap().to_be_bytes()].concat();
    out.extend(crc32fast::hash(&out).to_be_bytes());
    out.extend(block);
    out.extend(payload);
    out.extend(crc32fast::hash(&out).to_be_bytes());
    out
}

fn event(kind: &str, payload: &Value) -> Vec<u8> {
    frame(
        &[(":event-type", kind), (":content-type", "application/json"), (":message-type", "event")],
        payload.to_string().as_bytes(),
    )
}

/// InvokeModelWithResponseStream: each event of an Anthropic stream base64 in a `chunk`.
fn invoke_stream(sse: &str) -> Vec<u8> {
    sse_events(sse)
        .iter()
        .flat_map(|(_, data)| {
            let bytes = base64::engine::general_purpose::STANDARD.encode(data);
            event("chunk", &json!({"bytes": bytes, "p": "abcdefghij"}))
        })
        .collect()
}

/// ConverseStream: `n` text deltas of [`TEXT`], the stop, and the usage (5 tokens a delta).
fn converse_stream(n: usize) -> Vec<u8> {
    let mut body = event("messageStart", &json!({"role": "assistant"}));
    for _ in 0..n {
        body.extend(event("contentBlockDelta", &json!({"contentBlockIndex": 0, "delta": {"text": TEXT}})));
    }
    body.extend(event("contentBlockStop", &json!({"contentBlockIndex": 0})));
    body.extend(event("messageStop", &json!({"stopReason": "end_turn"})));
    let usage = json!({"inputTokens": 12, "outputTokens": 5 * n, "totalTokens": 12 + 5 * n});
    body.extend(event("metadata", &json!({"usage": usage, "metrics": {"latencyMs": 9}})));
    body
}

/// Streams an event-stream `body` to `s` in 97-byte pieces (frames cut anywhere); returns the
/// client's headers' content type and what it got.
fn stream_frames(vm: &mut Vm, s: u32, body: &[u8]) -> (String, String) {
    let head = resp("200", &[("content-type", "application/vnd.amazon.eventstream")]);
    vm.response_headers(s, head, false).unwrap();
    let content_type = header(response_headers(&vm.take_events(s)), "content-type");
    let mut got = Vec::new();
    let pieces: Vec<&[u8]> = body.chunks(97).collect();
    for (i, piece) in pieces.iter().enumerate() {
        vm.response_data(s, piece, i + 1 == pieces.len()).unwrap();
        got.extend(response_body(&vm.take_events(s)));
    }
    (content_type, String::from_utf8(got).unwrap())
}

/// The `:path` of the request the filter sent upstream.
fn upstream_path(sent: &[ferrogate_host::StreamEvent]) -> String {
    sent.iter()
        .find_map(|e| match e {
            ferrogate_host::StreamEvent::RequestHeaders { headers, .. } => Some(header(headers, ":path")),
            _ => None,
        })
        .unwrap_or_default()
}

/// An Anthropic client's stream from Claude on Bedrock: the request goes to
/// `invoke-with-response-stream` signed, the frames reach the client as Anthropic's events
/// (verbatim, Bedrock's metrics included), and the provider's count is what is billed.
#[test]
fn claude_on_bedrock_streams_anthropic_events_billed_at_the_providers_count() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(&config());
    let body = r#"{"model":"br-claude","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"Hi"}]}"#;
    let s = new_stream(&mut vm);
    let head = req("POST", "/v1/messages", &[("x-api-key", "sk-erin"), ("content-type", "application/json")]);
    vm.request_headers(s, head, false).unwrap();
    vm.request_data(s, body.as_bytes(), true).unwrap();
    let sent = vm.take_events(s);
    assert_eq!(upstream_path(&sent), "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream");
    let signed = sent.iter().any(|e| {
        matches!(e, ferrogate_host::StreamEvent::RequestHeaders { headers, .. }
        if header(headers, "authorization").starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/"))
    });
    assert!(signed, "{sent:?}");
    let upstream: Value = serde_json::from_slice(&request_body(&sent)).unwrap();
    assert_eq!(upstream["anthropic_version"], "bedrock-2023-05-31");
    assert!(upstream.get("model").is_none() && upstream.get("stream").is_none(), "{upstream}");

    let sse = anthropic_stream(3).replace(
        r#"{"type":"message_stop"}"#,
        r#"{"type":"message_stop","amazon-bedrock-invocationMetrics":{"outputTokenCount":15}}"#,
    );
    let (content_type, got) = stream_frames(&mut vm, s, &invoke_stream(&sse));
    assert_eq!(content_type, "text/event-stream");
    assert_eq!(got, sse, "Anthropic's events, verbatim");
    let record = crate::translation::usage_record(&rt, &mut vm, s);
    assert_eq!((record["prompt_tokens"].as_u64(), record["completion_tokens"].as_u64()), (Some(12), Some(15)));
    assert_eq!((record["streamed"].as_bool(), record["cut"].as_bool()), (Some(true), Some(false)), "{record}");
}

/// The same stream past the key's budget: cut after the event that crossed it, with
/// Anthropic's error event and no `message_stop`, and billed for what was delivered.
#[test]
fn claude_on_bedrock_past_its_budget_is_cut_in_anthropics_dialect() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(&config());
    let body = r#"{"model":"br-claude","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"Hi"}]}"#;
    let prompt = body.len().div_ceil(4) as u64;
    let s = send_as(&mut vm, "sk-dave", "/v1/messages", body);
    let (_, got) = stream_frames(&mut vm, s, &invoke_stream(&anthropic_stream(300)));
    let delivered = delivered_events(&got, 1100 - prompt);
    let (name, data) = *sse_events(&got).last().unwrap();
    let error: Value = serde_json::from_str(data).unwrap();
    assert_eq!((name, error["error"]["type"].as_str()), (Some("error"), Some("rate_limit_error")), "{got}");
    assert!(!got.contains("message_stop"));
    let record = crate::translation::usage_record(&rt, &mut vm, s);
    assert_eq!((record["completion_tokens"].as_u64(), record["cut"].as_bool()), (Some(5 * delivered), Some(true)));
    assert_eq!(tokens_counted(&rt, "dave"), 12 + 5 * delivered, "settled at what was delivered");
}

/// A ConverseStream (Llama) translated for an OpenAI client is metered on what the client gets:
/// cut with OpenAI's error event and `[DONE]`, billed for what was delivered.
#[test]
fn a_converse_stream_past_its_budget_is_cut_in_the_clients_dialect() {
    let (rt, mut vm) = crate::ferrogate_filter::vm_with(&config());
    let body = STREAMED.replace(r#""chat""#, r#""llama""#);
    let prompt = body.len().div_ceil(4) as u64;
    let s = send_as(&mut vm, "sk-dave", "/v1/chat/completions", &body);
    let (content_type, got) = stream_frames(&mut vm, s, &converse_stream(300));
    assert_eq!(content_type, "text/event-stream");
    let delivered = delivered_events(&got, 1100 - prompt);
    let events = sse_events(&got);
    let error: Value = serde_json::from_str(events[events.len() - 2].1).unwrap();
    assert_eq!(error["error"]["code"], "rate_limit_exceeded", "{got}");
    assert_eq!(events.last().unwrap().1, "[DONE]");
    assert!(!got.contains("finish_reason\":\"stop"));
    let record = crate::translation::usage_record(&rt, &mut vm, s);
    assert_eq!((record["completion_tokens"].as_u64(), record["cut"].as_bool()), (Some(5 * delivered), Some(true)));
    assert_eq!(tokens_counted(&rt, "dave"), prompt + 5 * delivered);
}

/// A Responses client of the same stream: its error event is numbered after the last event it
/// got (the meter read the client's own events).
#[test]
fn a_converse_stream_cut_for_a_responses_client_numbers_its_error_in_sequence() {
    let (_rt, mut vm) = crate::ferrogate_filter::vm_with(&config());
    let body = r#"{"model":"llama","stream":true,"input":"Tell me a long story."}"#;
    let prompt = body.len().div_ceil(4) as u64;
    let s = send_as(&mut vm, "sk-dave", "/v1/responses", body);
    let (_, got) = stream_frames(&mut vm, s, &converse_stream(300));
    delivered_events(&got, 1100 - prompt);
    let events = sse_events(&got);
    let (name, data) = *events.last().unwrap();
    let error: Value = serde_json::from_str(data).unwrap();
    let before: Value = serde_json::from_str(events[events.len() - 2].1).unwrap();
    assert_eq!((name, error["code"].as_str()), (Some("error"), Some("rate_limit_exceeded")), "{got}");
    assert_eq!(error["sequence_number"].as_u64(), before["sequence_number"].as_u64().map(|n| n + 1));
    assert!(!got.contains("response.completed"));
}
