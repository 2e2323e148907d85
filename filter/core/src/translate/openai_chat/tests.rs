//! OpenAI chat codec details the golden files do not pin down.

use serde_json::{json, Value};

use super::*;

#[test]
fn tool_results_of_one_turn_share_a_user_message() {
    let body = json!({"model": "m", "messages": [
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "user", "content": "next"},
    ]});
    let req = decode_request(body.to_string().as_bytes()).unwrap();
    assert_eq!(req.messages.len(), 3);
    assert_eq!(req.messages[1].content.len(), 2);
    assert!(
        matches!(&req.messages[0].content[0], Block::ToolCall(c) if c.arguments == json!({})),
        "empty arguments are {{}}"
    );
}

#[test]
fn a_streamed_request_asks_for_usage() {
    let req = Request { model: "m".into(), stream: true, ..Request::default() };
    let out: Value = serde_json::from_slice(&encode_request(&req).unwrap()).unwrap();
    assert_eq!(out["stream_options"], json!({"include_usage": true}));
}

#[test]
fn answers_keep_refusals_and_cached_tokens() {
    let body = br#"{"id":"x","model":"m","choices":[{"finish_reason":"content_filter","message":{"content":null,"refusal":"No."}}],
        "usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}"#;
    let resp = decode_response(body).unwrap();
    assert_eq!(resp.finish, Finish::ContentFilter);
    assert_eq!(resp.content, vec![Block::Text(Text { text: "No.".into(), cache: None })]);
    assert_eq!(resp.usage, Usage { input: 10, output: 2, cached: 8, cache_write: 0 });
    assert!(decode_response(br#"{"choices":[]}"#).is_err());
}

/// The portable `cache_control` object: defaults, validation, and refusal by targets that
/// cannot honour it.
#[test]
fn portable_cache_control() {
    let decode = |cc: &str| decode_request(format!(r#"{{"model":"m","messages":[],"cache_control":{cc}}}"#).as_bytes());
    let c = decode("{}").unwrap().cache.unwrap();
    assert_eq!((c.ttl.as_str(), c.breakpoints.as_slice()), ("5m", &[crate::translate::ir::Breakpoint::System][..]));
    assert_eq!(decode(r#"{"enabled":false}"#).unwrap().cache, None);
    assert!(
        matches!(decode(r#"{"ttl":"2h"}"#), Err(TranslateError::Invalid { param, .. }) if param == "cache_control.ttl")
    );
    assert!(decode(r#"{"breakpoints":["nope"]}"#).is_err());
    let req = decode("{}").unwrap();
    assert_eq!(encode_request(&req), Err(TranslateError::Unsupported { param: "cache_control".into() }));
}
