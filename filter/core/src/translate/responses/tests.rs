//! Responses codec details the golden files do not pin down.

use serde_json::{json, Value};

use super::*;
use crate::config::ProviderKind;
use crate::translate::ir::{Request, Role, Text, Thinking, ToolCall};
use crate::translate::{pair, Inbound};

fn decode(body: Value) -> Result<Request, TranslateError> {
    decode_request(body.to_string().as_bytes())
}

fn refused(body: Value) -> String {
    match decode(body) {
        Err(TranslateError::Unsupported { param }) => param,
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn a_replayed_output_joins_one_model_turn_and_results_one_user_turn() {
    let req = decode(json!({"model": "m", "input": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Two cities."}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "w", "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
        {"type": "function_call", "call_id": "call_2", "name": "w", "arguments": ""},
        {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "24C"}]},
        {"role": "user", "content": "Which is warmer?"},
    ]}))
    .unwrap();
    let roles: Vec<Role> = req.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User, Role::User]);
    assert_eq!(req.messages[1].content.len(), 2, "the unsigned reasoning is not sent; both calls share the turn");
    assert!(matches!(&req.messages[1].content[1], Block::ToolCall(c) if c.arguments == json!({})));
    assert_eq!(req.messages[2].content.len(), 2);
}

#[test]
fn instructions_come_before_system_messages() {
    let req = decode(json!({"model": "m", "instructions": "Be brief.",
        "input": [{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Use French."}]}]}))
    .unwrap();
    let system: Vec<&str> = req.system.iter().map(|t| t.text.as_str()).collect();
    assert_eq!(system, ["Be brief.", "Use French."]);
    assert!(req.messages.is_empty());
}

/// A thinking block with a signature leaves as a reasoning item and comes back as the same
/// thinking block when the client sends its output back.
#[test]
fn signed_reasoning_round_trips() {
    let thinking = Thinking { text: "Let me see.".into(), signature: Some("sig==".into()) };
    let resp = Response {
        id: "msg_01".into(),
        content: vec![
            Block::Thinking(thinking.clone()),
            Block::Text(Text { text: "Hi".into(), cache: None }),
            Block::ToolCall(ToolCall { id: "toolu_1".into(), name: "f".into(), arguments: json!({"a": 1}) }),
        ],
        ..Response::default()
    };
    let out: Value = serde_json::from_slice(&encode_response(&resp, "m", 7)).unwrap();
    let ids: Vec<&str> = out["output"].as_array().unwrap().iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["rs_msg_01_0", "msg_msg_01_1", "fc_msg_01_2"]);
    assert_eq!(out["id"], "resp_msg_01");
    assert_eq!(out["output"][0]["encrypted_content"], "sig==");
    assert_eq!(out["output"][2]["call_id"], "toolu_1");
    let again = decode(json!({"model": "m", "input": out["output"]})).unwrap();
    assert_eq!(again.messages.len(), 1);
    assert_eq!(again.messages[0].content, resp.content);
}

#[test]
fn a_length_limited_answer_is_incomplete() {
    let resp = Response {
        id: "x".into(),
        content: vec![Block::Text(Text { text: "It was".into(), cache: None })],
        finish: Finish::Length,
        usage: Usage { input: 5, output: 2, cached: 1, cache_write: 0 },
        ..Response::default()
    };
    let out: Value = serde_json::from_slice(&encode_response(&resp, "m", 7)).unwrap();
    assert_eq!(out["status"], "incomplete");
    assert_eq!(out["incomplete_details"], json!({"reason": "max_output_tokens"}));
    assert_eq!(out["output"][0]["status"], "incomplete");
    assert_eq!(out["usage"]["total_tokens"], 7);
    assert_eq!(out["usage"]["input_tokens_details"]["cached_tokens"], 1);
}

#[test]
fn what_needs_stored_state_or_openai_itself_is_refused_by_name() {
    let input = json!("hi");
    let cases = [
        (json!({"model": "m", "input": input, "conversation": "conv_1"}), "conversation"),
        (json!({"model": "m", "input": input, "prompt": {"id": "pmpt_1"}}), "prompt"),
        (json!({"model": "m", "input": input, "include": ["file_search_call.results"]}), "include"),
        (json!({"model": "m", "input": input, "truncation": "auto"}), "truncation"),
        (json!({"model": "m", "input": input, "text": {"verbosity": "low"}}), "text.verbosity"),
        (json!({"model": "m", "input": input, "tool_choice": {"type": "web_search_preview"}}), "tool_choice.type"),
        (json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}), "input[0].type"),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}),
            "input[0].content[0].input_file",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f", "detail": "auto"}]}]}),
            "input[0].content[0].file_id",
        ),
    ];
    for (body, param) in cases {
        assert_eq!(refused(body), param);
    }
}

#[test]
fn defaults_and_bookkeeping_are_accepted() {
    let req =
        decode(json!({"model": "m", "input": "hi", "store": true, "metadata": {"k": "v"}, "truncation": "disabled",
        "include": [], "background": false, "prompt_cache_key": "k", "safety_identifier": "s", "user": "u",
        "reasoning": {"effort": "low", "summary": "auto"}, "stream_options": {"include_obfuscation": false},
        "tools": [{"type": "function", "name": "f", "parameters": null, "strict": true}]}))
        .unwrap();
    assert_eq!(req.user.as_deref(), Some("u"), "`user` wins over `safety_identifier`");
    assert_eq!(req.reasoning, Some(crate::translate::ir::Reasoning::Effort("low".into())));
    assert_eq!(req.tools[0].parameters, json!({"type": "object", "properties": {}}));
}

/// The provider's encoder names neutral paths; the client hears its own.
#[test]
fn encoder_refusals_name_the_clients_parameters() {
    let to_anthropic = pair(Inbound::Responses, ProviderKind::Anthropic).unwrap();
    let body = json!({"model": "m", "input": "hi", "reasoning": {"effort": "high"}}).to_string();
    let err = to_anthropic.request(body.as_bytes(), "up").unwrap_err();
    assert_eq!(err, TranslateError::Unsupported { param: "reasoning.effort".into() });
    let to_openai = pair(Inbound::Responses, ProviderKind::OpenAi).unwrap();
    let body = json!({"model": "m", "input": [
        {"type": "function_call", "call_id": "c", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": [
            {"type": "input_text", "text": "here"},
            {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"}]},
    ]})
    .to_string();
    let err = to_openai.request(body.as_bytes(), "up").unwrap_err();
    assert_eq!(err, TranslateError::Unsupported { param: "input[1].output[1]".into() });
}
