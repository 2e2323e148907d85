//! Anthropic codec details the golden files do not pin down.

use serde_json::{json, Value};

use super::*;
use crate::translate::ir::{Text, Thinking, ToolResult};

fn text(role: Role, t: &str) -> Message {
    Message { role, content: vec![Block::Text(Text { text: t.into(), cache: None })] }
}

fn encoded(req: &Request) -> Value {
    serde_json::from_slice(&encode_request(req).unwrap()).unwrap()
}

#[test]
fn roles_alternate_and_start_with_the_user() {
    let req = Request {
        messages: vec![text(Role::Assistant, "a"), text(Role::User, "b"), text(Role::User, "c")],
        ..Request::default()
    };
    let out = encoded(&req);
    let roles: Vec<&str> = out["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(out["messages"][2]["content"].as_array().unwrap().len(), 2, "same-role neighbours merge");
    assert_eq!(out["max_tokens"], DEFAULT_MAX_TOKENS);
}

#[test]
fn thinking_signatures_errors_and_cache_marks_survive() {
    let cache = Some(json!({"type": "ephemeral", "ttl": "1h"}));
    let req = Request {
        messages: vec![
            Message {
                role: Role::Assistant,
                content: vec![Block::Thinking(Thinking { text: "hmm".into(), signature: Some("sig".into()) })],
            },
            Message {
                role: Role::User,
                content: vec![Block::ToolResult(ToolResult {
                    id: "t1".into(),
                    content: vec![],
                    is_error: true,
                    cache,
                })],
            },
        ],
        reasoning: Some(Reasoning::Budget(1024)),
        ..Request::default()
    };
    let out = encoded(&req);
    assert_eq!(out["messages"][1]["content"][0], json!({"type": "thinking", "thinking": "hmm", "signature": "sig"}));
    let result = &out["messages"][2]["content"][0];
    assert_eq!(result["is_error"], true);
    assert_eq!(result["cache_control"]["ttl"], "1h");
    assert_eq!(out["thinking"], json!({"type": "enabled", "budget_tokens": 1024}));
}

#[test]
fn usage_separates_cached_prompt_tokens() {
    let u = Usage { input: 125, output: 15, cached: 100, cache_write: 5 };
    let v = usage_json(&u);
    assert_eq!(v["input_tokens"], 20);
    assert_eq!(decode::usage(&v), u, "and back");
}

#[test]
fn tools_together_with_structured_output_are_refused() {
    let req = Request {
        tools: vec![Tool { name: "f".into(), description: None, parameters: json!({}), cache: None }],
        output: Some(OutputFormat::JsonObject),
        ..Request::default()
    };
    assert!(matches!(encode_request(&req), Err(TranslateError::Unsupported { .. })));
}
