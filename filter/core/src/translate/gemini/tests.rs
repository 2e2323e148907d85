//! Gemini codec details the golden files do not pin down.

use serde_json::{json, Value};

use super::*;
use crate::config::ProviderKind;
use crate::translate::ir::{Text, ToolCall};
use crate::translate::{anthropic, pair, Inbound, Outbound};

fn decoded(body: Value) -> Result<Request, TranslateError> {
    decode_request(body.to_string().as_bytes())
}

fn encoded(req: &Request) -> Value {
    serde_json::from_slice(&encode_request(req).unwrap()).unwrap()
}

fn text(role: Role, t: &str) -> Message {
    Message { role, content: vec![Block::Text(Text { text: t.into(), cache: None })] }
}

#[test]
fn results_without_ids_answer_the_oldest_open_call_of_their_name() {
    let call = |city: &str| json!({"functionCall": {"name": "weather", "args": {"city": city}}});
    let answer = |out: &str| json!({"functionResponse": {"name": "weather", "response": {"output": out}}});
    let body = json!({"contents": [
        {"role": "model", "parts": [call("A"), {"functionCall": {"id": "own", "name": "time", "args": {}}}, call("B")]},
        {"role": "user", "parts": [answer("b?"), {"functionResponse": {"name": "time", "response": {"error": "down"}}}, answer("a?")]},
    ]});
    let req = decoded(body).unwrap();
    let ids: Vec<(&str, bool)> = req.messages[1]
        .content
        .iter()
        .map(|b| match b {
            Block::ToolResult(r) => (r.id.as_str(), r.is_error),
            _ => panic!("{b:?}"),
        })
        .collect();
    // Name order, not content: the first `weather` result answers the first `weather` call.
    assert_eq!(ids, [("call_0", false), ("own", true), ("call_2", false)]);
    let orphan = json!({"contents": [{"parts": [answer("x")]}]});
    assert!(matches!(decoded(orphan), Err(TranslateError::Invalid { param, .. })
        if param == "contents[0].parts[0].functionResponse.name"));
}

#[test]
fn snake_case_field_names_are_read_but_data_is_left_alone() {
    let body = json!({
        "contents": [{"role": "model", "parts": [{"function_call": {"name": "f", "args": {"snake_key": 1}}}]}],
        "generation_config": {"max_output_tokens": 9, "thinking_config": {"thinking_budget": 0}},
    });
    let req = decoded(body).unwrap();
    assert_eq!(req.max_tokens, Some(9));
    assert_eq!(req.reasoning, None, "a zero budget turns thinking off, the neutral default");
    assert!(matches!(&req.messages[0].content[0], Block::ToolCall(c) if c.arguments == json!({"snake_key": 1})));
}

#[test]
fn openapi_schemas_become_json_schema() {
    let schema = json!({
        "type": "OBJECT",
        "properties": {
            "type": {"type": "STRING", "enum": ["a", "b"], "nullable": true},
            "any": {"anyOf": [{"type": "INTEGER"}], "nullable": true},
            "list": {"type": "ARRAY", "items": {"type": "NUMBER", "format": "float"}, "max_items": 3},
        },
        "property_ordering": ["type", "any", "list"],
    });
    assert_eq!(
        config::json_schema(schema),
        json!({"type": "object", "properties": {
            "type": {"type": ["string", "null"], "enum": ["a", "b", null]},
            "any": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "list": {"type": "array", "items": {"type": "number", "format": "float"}, "maxItems": 3},
        }})
    );
}

#[test]
fn thinking_settings() {
    let with = |t: Value| decoded(json!({"contents": [], "generationConfig": {"thinkingConfig": t}}));
    assert_eq!(with(json!({"thinkingBudget": -1})).unwrap().reasoning, None);
    assert_eq!(with(json!({"thinkingBudget": 512})).unwrap().reasoning, Some(Reasoning::Budget(512)));
    assert_eq!(with(json!({"thinkingLevel": "MEDIUM"})).unwrap().reasoning, Some(Reasoning::Effort("medium".into())));
    assert!(matches!(with(json!({"thinkingBudget": 5, "thinkingLevel": "LOW"})), Err(TranslateError::Invalid { .. })));
    assert!(matches!(with(json!({"thinkingBudget": -7})), Err(TranslateError::Invalid { .. })));
    let effort = |e: &str| Request { reasoning: Some(Reasoning::Effort(e.into())), ..Request::default() };
    assert_eq!(encoded(&effort("minimal"))["generationConfig"]["thinkingConfig"], json!({"thinkingLevel": "MINIMAL"}));
    assert_eq!(encode_request(&effort("xhigh")), Err(TranslateError::Unsupported { param: "reasoning_effort".into() }));
}

/// A Gemini signature on a call reaches an Anthropic client as a signature-only thinking block,
/// comes back with the history, and lands on the same call again.
#[test]
fn signatures_survive_a_round_trip_through_an_anthropic_client() {
    let answer = br#"{"candidates":[{"content":{"role":"model","parts":[
        {"functionCall":{"name":"f","args":{}},"thoughtSignature":"SIG"}]},"finishReason":"STOP"}],"responseId":"r"}"#;
    let resp = decode_response(answer).unwrap();
    let history: Value = serde_json::from_slice(&anthropic::encode_response(&resp, "m")).unwrap();
    assert_eq!(history["content"][0], json!({"type": "thinking", "thinking": "", "signature": "SIG"}));
    let next = json!({"model": "m", "max_tokens": 9, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": history["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_r_0", "content": "ok"}]},
    ]});
    let req = anthropic::decode_request(next.to_string().as_bytes()).unwrap();
    let out = encoded(&req);
    assert_eq!(
        out["contents"][1]["parts"],
        json!([{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "SIG"}])
    );
    assert_eq!(out["contents"][2]["parts"][0]["functionResponse"]["name"], "f");
}

#[test]
fn split_thoughts_are_one_thinking_block() {
    let parts = json!([
        {"text": "Weigh ", "thought": true}, {"text": "both.", "thought": true},
        {"text": "", "thought": true, "thoughtSignature": "S1"}, {"text": "Again.", "thought": true},
    ]);
    let req = decoded(json!({"contents": [{"role": "model", "parts": parts}]})).unwrap();
    let thinking = |text: &str, sig: Option<&str>| {
        Block::Thinking(Thinking { text: text.into(), signature: sig.map(str::to_string) })
    };
    assert_eq!(req.messages[0].content, [thinking("Weigh both.", Some("S1")), thinking("Again.", None)]);
}

#[test]
fn a_trailing_signature_gets_a_part_of_its_own() {
    let sig = Block::Thinking(Thinking { text: String::new(), signature: Some("S".into()) });
    let mut said = text(Role::Assistant, "done");
    said.content.push(sig);
    let out = encoded(&Request { messages: vec![text(Role::User, "hi"), said], ..Request::default() });
    assert_eq!(out["contents"][1]["parts"], json!([{"text": "done"}, {"text": "", "thoughtSignature": "S"}]));
}

#[test]
fn a_result_must_answer_an_earlier_call() {
    let result = Block::ToolResult(ToolResult { id: "nope".into(), content: vec![], is_error: false, cache: None });
    let req = Request { messages: vec![Message { role: Role::User, content: vec![result] }], ..Request::default() };
    assert!(
        matches!(encode_request(&req), Err(TranslateError::Invalid { param, .. }) if param == "messages[0].content[0]")
    );
    let call = Block::ToolCall(ToolCall { id: "c".into(), name: "f".into(), arguments: json!({}) });
    let said = Message { role: Role::Assistant, content: vec![call] };
    let out = encoded(&Request { messages: vec![said], ..Request::default() });
    assert_eq!(out["contents"][0]["parts"][0]["thoughtSignature"], SKIP_SIGNATURE);
}

#[test]
fn blocked_prompts_and_usage() {
    let blocked = br#"{"promptFeedback":{"blockReason":"SAFETY"},"usageMetadata":{"promptTokenCount":7}}"#;
    let resp = decode_response(blocked).unwrap();
    assert_eq!((resp.finish, resp.content.len(), resp.usage.input), (Finish::ContentFilter, 0, 7));
    assert!(matches!(decode_response(br#"{"candidates":[]}"#), Err(TranslateError::Invalid { .. })));
    let u = Usage { input: 10, output: 4, cached: 0, cache_write: 0 };
    assert_eq!(usage_json(&u), json!({"promptTokenCount": 10, "candidatesTokenCount": 4, "totalTokenCount": 14}));
}

#[test]
fn the_url_names_the_model_and_the_stream() {
    let p = pair(Inbound::Gemini, ProviderKind::OpenAi).unwrap();
    let body = br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#;
    let (out, ctx) = p.request_for_model(body, "gemini-2.5-flash", true, "gpt-4o").unwrap();
    assert_eq!((ctx.model.as_str(), ctx.stream), ("gemini-2.5-flash", true));
    let out: Value = serde_json::from_slice(&out).unwrap();
    assert_eq!((out["model"].as_str(), out["stream"].as_bool()), (Some("gpt-4o"), Some(true)));
    assert_eq!(pair(Inbound::Gemini, ProviderKind::Gemini), None, "Gemini to Gemini goes verbatim");
    assert_eq!(
        Outbound::Gemini.upstream_path("gemini-2.5-pro", false),
        "/v1beta/models/gemini-2.5-pro:generateContent"
    );
    assert_eq!(Outbound::Gemini.upstream_path("g", true), "/v1beta/models/g:streamGenerateContent?alt=sse");
    assert_eq!(Outbound::Anthropic.upstream_path("claude", true), "/v1/messages");
    // The model never goes in a Gemini body.
    let to_gemini = pair(Inbound::Anthropic, ProviderKind::Gemini).unwrap();
    let (out, _) = to_gemini.request(br#"{"model":"c","max_tokens":5,"messages":[],"stream":true}"#, "g").unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&out).unwrap(),
        json!({"contents": [], "generationConfig": {"maxOutputTokens": 5}})
    );
}
