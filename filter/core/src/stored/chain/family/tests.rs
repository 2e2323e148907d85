//! Reasoning across provider families: each target keeps the reasoning its family signed.

use serde_json::{json, Value};

use super::*;
use crate::stored::chain::rebuild;
use crate::translate::{gemini::SKIP_SIGNATURE, Context, Inbound, Pair};

/// A chain begun on Anthropic (thinking signed `anth-sig`, then a call), the call's output as
/// the follow-up's input.
fn anthropic_chain() -> Rebuilt {
    let chain = vec![
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}),
        json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Ask the tool."}],
               "encrypted_content": "anth-sig", FAMILY_KEY: "anthropic"}),
        json!({"type": "function_call", "call_id": "toolu_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}),
    ];
    let request =
        json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "toolu_1", "output": "sunny"}]});
    rebuild(request.to_string().as_bytes(), chain).unwrap()
}

/// Routed as the filter routes it: `rebuilt.body` translated for `outbound` (`None`: to an
/// OpenAI provider, untranslated).
fn routed(rebuilt: &Rebuilt, outbound: Option<Outbound>) -> RouteDecision<'static> {
    let translation = outbound.map(|outbound| (Pair { inbound: Inbound::Responses, outbound }, Context::default()));
    let body = match &translation {
        Some((pair, _)) => pair.request_for_model(&rebuilt.body, "", false, "up").unwrap().0,
        None => rebuilt.body.clone(),
    };
    RouteDecision {
        provider: "p",
        provider_index: 0,
        authority: "p.example",
        path: String::new(),
        body: Some(body),
        upstream_model: "up".into(),
        endpoint: None,
        endpoint_index: None,
        credential: None,
        aws: None,
        requested: "m".into(),
        translation,
        may_stream: true,
    }
}

fn fitted(rebuilt: &Rebuilt, outbound: Option<Outbound>) -> Value {
    let mut d = routed(rebuilt, outbound);
    fit(rebuilt, &mut d).unwrap();
    serde_json::from_slice(d.body.as_deref().unwrap()).unwrap()
}

#[test]
fn anthropic_thinking_goes_back_to_anthropic_with_its_signature() {
    let rebuilt = anthropic_chain();
    assert_eq!(rebuilt.for_family(Family::Anthropic), None, "nothing to drop");
    let sent = fitted(&rebuilt, Some(Outbound::Anthropic));
    let turn = &sent["messages"][1];
    assert_eq!(turn["role"], "assistant");
    assert_eq!(turn["content"][0], json!({"type": "thinking", "thinking": "Ask the tool.", "signature": "anth-sig"}));
    assert_eq!(turn["content"][1]["type"], "tool_use");
}

#[test]
fn a_gemini_target_is_not_sent_anthropics_signature() {
    let sent = fitted(&anthropic_chain(), Some(Outbound::Gemini));
    assert!(!sent.to_string().contains("anth-sig"), "{sent}");
    let parts = &sent["contents"][1]["parts"];
    assert_eq!(parts.as_array().map(Vec::len), Some(1), "no thought: {parts}");
    assert_eq!(parts[0]["functionCall"]["name"], "get_weather");
    assert_eq!(parts[0]["thoughtSignature"], SKIP_SIGNATURE, "the placeholder Gemini documents for foreign calls");
    assert!(sent["contents"][2]["parts"][0].get("functionResponse").is_some());
}

#[test]
fn an_openai_target_is_not_sent_anthropics_reasoning() {
    let sent = fitted(&anthropic_chain(), None);
    let kinds: Vec<&str> = sent["input"].as_array().unwrap().iter().filter_map(|i| i["type"].as_str()).collect();
    assert_eq!(kinds, ["message", "function_call", "function_call_output"]);
    assert!(!sent.to_string().contains("anth-sig"));
    assert_eq!(sent["model"], "up", "the upstream model, as routing wrote it");
}

#[test]
fn a_chat_target_is_left_alone() {
    let rebuilt = anthropic_chain();
    let mut d = routed(&rebuilt, Some(Outbound::OpenAiChat));
    let before = d.body.clone();
    fit(&rebuilt, &mut d).unwrap();
    assert_eq!(d.body, before, "chat completions are sent no reasoning whoever signed it");
}

#[test]
fn a_mixed_chain_keeps_the_targets_own_reasoning_only() {
    let chain = vec![
        json!({"type": "message", "role": "user", "content": "hi"}),
        json!({"type": "reasoning", "summary": [], "encrypted_content": "anth-sig", FAMILY_KEY: "anthropic"}),
        json!({"type": "message", "role": "assistant", "content": "hello"}),
        json!({"type": "reasoning", "summary": [], "encrypted_content": "gem-sig", FAMILY_KEY: "gemini"}),
        json!({"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}),
    ];
    let request = br#"{"model":"m","input":[{"type":"function_call_output","call_id":"c1","output":"ok"}]}"#;
    let rebuilt = rebuild(request, chain).unwrap();
    let sent = fitted(&rebuilt, Some(Outbound::Gemini)).to_string();
    assert!(sent.contains("gem-sig") && !sent.contains("anth-sig"), "{sent}");
    let sent = fitted(&rebuilt, Some(Outbound::Anthropic)).to_string();
    assert!(sent.contains("anth-sig") && !sent.contains("gem-sig"), "{sent}");
}

#[test]
fn families_are_spelled_and_read_alike() {
    for family in [Family::OpenAi, Family::Anthropic, Family::Gemini] {
        assert_eq!(Family::parse(family.as_str()), Some(family));
    }
    assert_eq!(Family::parse("openai_compatible"), None);
    assert_eq!(Family::of(None), Family::OpenAi);
    assert_eq!(Family::of(Some(Outbound::OpenAiChat)), Family::OpenAi);
    assert_eq!(Family::of(Some(Outbound::Gemini)), Family::Gemini);
}
