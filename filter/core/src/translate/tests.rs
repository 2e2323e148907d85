//! Golden tests: every `*.in.json` under `testdata/translate/{requests,responses}/<client>-to-<provider>/`
//! is translated and compared (as JSON values) with its `*.out.json`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::*;

fn dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/translate").join(kind)
}

fn pair_named(name: &str) -> Pair {
    let (client, provider) = name.split_once("-to-").expect("<client>-to-<provider>");
    let inbound = match client {
        "openai" => Inbound::OpenAiChat,
        "anthropic" => Inbound::Anthropic,
        "gemini" => Inbound::Gemini,
        "responses" => Inbound::Responses,
        other => panic!("unknown client dialect {other}"),
    };
    let kind = match provider {
        "openai" => ProviderKind::OpenAi,
        "anthropic" => ProviderKind::Anthropic,
        "gemini" => ProviderKind::Gemini,
        other => panic!("unknown provider dialect {other}"),
    };
    pair(inbound, kind).expect("a translating pair")
}

/// (pair, case name, input, expected) for every golden case of `kind`.
fn cases(kind: &str) -> Vec<(Pair, String, Vec<u8>, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir(kind)).unwrap() {
        let pair_dir = entry.unwrap().path();
        let pair = pair_named(pair_dir.file_name().unwrap().to_str().unwrap());
        for file in std::fs::read_dir(&pair_dir).unwrap() {
            let path = file.unwrap().path();
            let Some(case) = path.file_name().unwrap().to_str().unwrap().strip_suffix(".in.json") else { continue };
            let out_path = pair_dir.join(format!("{case}.out.json"));
            // `BLESS=1` writes a missing expected file from the current output (review it).
            let expected = std::fs::read(&out_path).unwrap_or_default();
            let expected: Value = serde_json::from_slice(&expected).unwrap_or(Value::Null);
            out.push((pair, format!("{}/{case}", pair_dir.display()), std::fs::read(&path).unwrap(), expected));
        }
    }
    assert!(out.len() >= 4, "golden cases of {kind} missing");
    out
}

/// Under `BLESS=1`, writes `got` as the expected output of a case that has none yet.
fn bless(case: &str, got: &Value, expected: &Value) {
    if std::env::var_os("BLESS").is_some() && expected.is_null() {
        let text = serde_json::to_string_pretty(got).unwrap() + "\n";
        std::fs::write(format!("{case}.out.json"), text).unwrap();
    }
}

fn upstream_model(p: Pair) -> &'static str {
    match p.outbound {
        Outbound::OpenAiChat => "gpt-upstream",
        Outbound::Anthropic => "claude-upstream",
        Outbound::Gemini => "gemini-upstream",
        Outbound::Converse => "bedrock-upstream",
    }
}

/// The model a Gemini client's URL names (its body names none).
const GEMINI_ASKED: &str = "gemini-client";

#[test]
fn golden_requests() {
    for (pair, case, input, expected) in cases("requests") {
        let translated = match pair.inbound {
            Inbound::Gemini => pair.request_for_model(&input, GEMINI_ASKED, false, upstream_model(pair)),
            _ => pair.request(&input, upstream_model(pair)),
        };
        let (body, ctx) = translated.unwrap_or_else(|e| panic!("{case}: {e}"));
        let got: Value = serde_json::from_slice(&body).unwrap();
        bless(&case, &got, &expected);
        assert_eq!(got, expected, "{case}:\n{}", serde_json::to_string_pretty(&got).unwrap());
        let asked: Value = serde_json::from_slice(&input).unwrap();
        let asked = asked.get("model").cloned().unwrap_or_else(|| GEMINI_ASKED.into());
        assert_eq!(ctx.model, asked, "{case}: the client's model name is kept for the answer");
    }
}

#[test]
fn golden_responses() {
    for (pair, case, input, expected) in cases("responses") {
        let model = match pair.inbound {
            Inbound::OpenAiChat => "chat",
            Inbound::Anthropic => "claude",
            Inbound::Gemini => GEMINI_ASKED,
            Inbound::Responses => "responses",
        };
        let ctx = Context { model: model.into(), ..Context::default() };
        let body = pair.response(&input, &ctx, 1_700_000_000).unwrap_or_else(|e| panic!("{case}: {e}"));
        let got: Value = serde_json::from_slice(&body).unwrap();
        bless(&case, &got, &expected);
        assert_eq!(got, expected, "{case}:\n{}", serde_json::to_string_pretty(&got).unwrap());
    }
}

#[test]
fn same_dialects_are_not_translated() {
    assert_eq!(pair(Inbound::OpenAiChat, ProviderKind::OpenAiCompatible), None);
    assert_eq!(pair(Inbound::Anthropic, ProviderKind::Anthropic), None);
    assert!(pair(Inbound::Anthropic, ProviderKind::OpenAi).is_some());
}

/// What a target cannot express is a 400 naming the parameter, never dropped.
#[test]
fn untranslatable_parameters_are_refused_by_name() {
    let to_anthropic = pair(Inbound::OpenAiChat, ProviderKind::Anthropic).unwrap();
    let to_openai = pair(Inbound::Anthropic, ProviderKind::OpenAi).unwrap();
    let from_responses = pair(Inbound::Responses, ProviderKind::Anthropic).unwrap();
    let msgs = r#""messages":[{"role":"user","content":"hi"}]"#;
    let cases = [
        (to_anthropic, format!(r#"{{"model":"m",{msgs},"seed":1}}"#), "seed"),
        (to_anthropic, format!(r#"{{"model":"m",{msgs},"logit_bias":{{"1":2}}}}"#), "logit_bias"),
        (to_anthropic, format!(r#"{{"model":"m",{msgs},"n":2}}"#), "n"),
        (to_anthropic, format!(r#"{{"model":"m",{msgs},"presence_penalty":0.5}}"#), "presence_penalty"),
        (to_anthropic, format!(r#"{{"model":"m",{msgs},"reasoning_effort":"high"}}"#), "reasoning_effort"),
        (
            to_anthropic,
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}]}"#.into(),
            "messages[0].content[0].input_audio",
        ),
        (
            to_anthropic,
            r#"{"model":"m","messages":[{"role":"user","content":"x","name":"bob"}]}"#.into(),
            "messages[0].name",
        ),
        (to_openai, format!(r#"{{"model":"m","max_tokens":5,{msgs},"top_k":3}}"#), "top_k"),
        (
            to_openai,
            format!(r#"{{"model":"m","max_tokens":5,{msgs},"thinking":{{"type":"enabled","budget_tokens":2048}}}}"#),
            "thinking.budget_tokens",
        ),
        (to_openai, format!(r#"{{"model":"m","max_tokens":5,{msgs},"container":"c"}}"#), "container"),
        (
            to_openai,
            format!(
                r#"{{"model":"m","max_tokens":5,{msgs},"tools":[{{"type":"web_search_20250305","name":"web_search"}}]}}"#
            ),
            "tools[0].type",
        ),
        (
            to_openai,
            r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"document","source":{}}]}]}"#
                .into(),
            "messages[0].content[0].document",
        ),
        (
            from_responses,
            r#"{"model":"m","input":"hi","previous_response_id":"resp_1"}"#.into(),
            "previous_response_id",
        ),
        (from_responses, r#"{"model":"m","input":"hi","background":true}"#.into(), "background"),
        (from_responses, r#"{"model":"m","input":"hi","tools":[{"type":"web_search"}]}"#.into(), "tools[0].type"),
    ];
    assert_refused(&cases);
}

/// Each request is refused with a 400 naming exactly its parameter.
fn assert_refused(cases: &[(Pair, String, &str)]) {
    for (pair, body, param) in cases {
        let err = pair.request_for_model(body.as_bytes(), "asked", false, "up").expect_err(param);
        assert_eq!(err, TranslateError::Unsupported { param: param.to_string() }, "{body}");
        let api = pair.refusal(&err);
        assert_eq!(api.status, 400);
        assert!(api.message.contains(&format!("`{param}`")), "{}", api.message);
    }
}

/// The same rule towards Gemini providers.
#[test]
fn parameters_gemini_cannot_express_are_refused_by_name() {
    let to_gemini = pair(Inbound::OpenAiChat, ProviderKind::Gemini).unwrap();
    let from_anthropic = pair(Inbound::Anthropic, ProviderKind::Gemini).unwrap();
    let msgs = r#""messages":[{"role":"user","content":"hi"}]"#;
    let url = r#"[{"type":"image_url","image_url":{"url":"https://example.com/cat.png"}}]"#;
    let called = r#"{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}"#;
    let image = r#"{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBO"}}"#;
    let result =
        format!(r#"{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t","content":[{image}]}}]}}"#);
    let no_parallel = r#""tool_choice":{"type":"auto","disable_parallel_tool_use":true}"#;
    let cases = [
        (to_gemini, format!(r#"{{"model":"m",{msgs},"logit_bias":{{"1":2}}}}"#), "logit_bias"),
        (to_gemini, format!(r#"{{"model":"m",{msgs},"user":"u-1"}}"#), "user"),
        (to_gemini, format!(r#"{{"model":"m",{msgs},"parallel_tool_calls":false}}"#), "parallel_tool_calls"),
        (to_gemini, format!(r#"{{"model":"m",{msgs},"reasoning_effort":"none"}}"#), "reasoning_effort"),
        (
            to_gemini,
            format!(r#"{{"model":"m","messages":[{{"role":"user","content":{url}}}]}}"#),
            "messages[0].content[0].image_url",
        ),
        (
            from_anthropic,
            format!(r#"{{"model":"m","max_tokens":5,"messages":[{called},{result}]}}"#),
            "messages[1].content[0].content[0]",
        ),
        (from_anthropic, format!(r#"{{"model":"m","max_tokens":5,{msgs},{no_parallel}}}"#), "parallel_tool_calls"),
    ];
    assert_refused(&cases);
}

/// The same rule for Gemini clients: Google-only features are refused by their own names.
#[test]
fn gemini_parameters_without_a_counterpart_are_refused_by_name() {
    let to_openai = pair(Inbound::Gemini, ProviderKind::OpenAi).unwrap();
    let to_anthropic = pair(Inbound::Gemini, ProviderKind::Anthropic).unwrap();
    let g = |extra: &str| format!(r#"{{"contents":[{{"role":"user","parts":[{{"text":"hi"}}]}}],{extra}}}"#);
    let config = |c: &str| g(&format!(r#""generationConfig":{c}"#));
    let calling = |f: &str| g(&format!(r#""toolConfig":{{"functionCallingConfig":{f}}}"#));
    let part = |p: &str| format!(r#"{{"contents":[{{"parts":[{p}]}}]}}"#);
    let pdf = r#"{"inlineData":{"mimeType":"application/pdf","data":"JVBERi0="}}"#;
    let file = r#"{"fileData":{"mimeType":"image/png","fileUri":"https://generativelanguage.googleapis.com/v1beta/files/f1"}}"#;
    let safety = r#""safetySettings":[{"category":"HARM_CATEGORY_HARASSMENT","threshold":"BLOCK_NONE"}]"#;
    let names = "toolConfig.functionCallingConfig.allowedFunctionNames";
    let cases = [
        (to_openai, config(r#"{"topK":40}"#), "top_k"),
        (to_openai, config(r#"{"thinkingConfig":{"thinkingBudget":1024}}"#), "thinking.budget_tokens"),
        (to_openai, config(r#"{"candidateCount":2}"#), "generationConfig.candidateCount"),
        (to_openai, g(safety), "safetySettings"),
        (to_openai, g(r#""cachedContent":"cachedContents/abc123""#), "cachedContent"),
        (to_openai, calling(r#"{"mode":"VALIDATED"}"#), "toolConfig.functionCallingConfig.mode"),
        (to_openai, calling(r#"{"mode":"ANY","allowedFunctionNames":["a","b"]}"#), names),
        (to_openai, part(pdf), "contents[0].parts[0].inlineData"),
        (to_anthropic, part(file), "contents[0].parts[0].fileData"),
        (to_anthropic, g(r#""tools":[{"googleSearch":{}}]"#), "tools[0].googleSearch"),
        (to_anthropic, config(r#"{"seed":3}"#), "seed"),
        (to_anthropic, config(r#"{"thinkingConfig":{"thinkingLevel":"HIGH"}}"#), "reasoning_effort"),
        (to_anthropic, config(r#"{"responseMimeType":"text/x.enum"}"#), "generationConfig.responseMimeType"),
        (to_anthropic, config(r#"{"responseModalities":["TEXT","IMAGE"]}"#), "generationConfig.responseModalities"),
    ];
    assert_refused(&cases);
}

#[test]
fn malformed_requests_name_the_parameter() {
    let p = pair(Inbound::OpenAiChat, ProviderKind::Anthropic).unwrap();
    let bad = |body: &str| p.request(body.as_bytes(), "up").unwrap_err();
    assert!(matches!(bad("not json"), TranslateError::Json(_)));
    assert!(matches!(bad("[1]"), TranslateError::Invalid { .. }));
    let args = r#"{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1"}}]}]}"#;
    assert_eq!(
        bad(args),
        TranslateError::Invalid {
            param: "messages[0].tool_calls[0].function.arguments".into(),
            message: "expected a JSON object in a string".into(),
        }
    );
    let role = r#"{"model":"m","messages":[{"role":"robot","content":"x"}]}"#;
    assert!(matches!(bad(role), TranslateError::Invalid { param, .. } if param == "messages[0].role"));
}

/// Structured output reaches Anthropic as a forced tool, and its call comes back as the JSON
/// text an OpenAI client expects, with a plain `stop`.
#[test]
fn structured_output_round_trips_through_a_forced_tool() {
    let p = pair(Inbound::OpenAiChat, ProviderKind::Anthropic).unwrap();
    let req = br#"{"model":"m","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}}"#;
    let (_, ctx) = p.request(req, "up").unwrap();
    assert!(ctx.structured);
    let answer =
        br#"{"id":"msg","model":"up","content":[{"type":"tool_use","id":"t","name":"json_output","input":{"a":1}}],
        "stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}"#;
    let out: Value = serde_json::from_slice(&p.response(answer, &ctx, 5).unwrap()).unwrap();
    assert_eq!(out["choices"][0]["message"]["content"], r#"{"a":1}"#);
    assert_eq!(out["choices"][0]["finish_reason"], "stop");
    assert!(out["choices"][0]["message"].get("tool_calls").is_none());
}

/// Upstream errors reach the client in its own envelope with the status and message kept.
#[test]
fn upstream_errors_are_carried_in_the_clients_envelope() {
    let to_anthropic = pair(Inbound::OpenAiChat, ProviderKind::Anthropic).unwrap();
    let anthropic_err = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let v: Value = serde_json::from_slice(&to_anthropic.error_body(529, anthropic_err)).unwrap();
    assert_eq!(v["error"]["message"], "Overloaded");
    assert_eq!(v["error"]["type"], "server_error");
    let to_openai = pair(Inbound::Anthropic, ProviderKind::OpenAi).unwrap();
    let openai_err = br#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
    let v: Value = serde_json::from_slice(&to_openai.error_body(429, openai_err)).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limit reached"}})
    );
    let v: Value = serde_json::from_slice(&to_openai.error_body(502, b"<html>bad gateway</html>")).unwrap();
    assert_eq!(v["error"]["message"], "upstream answered 502: <html>bad gateway</html>");
}

/// Gemini clients get Google's envelope; Gemini's own errors are read like the others.
#[test]
fn gemini_errors_in_both_directions() {
    let from_gemini = pair(Inbound::Gemini, ProviderKind::Anthropic).unwrap();
    let anthropic_err = br#"{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}"#;
    let v: Value = serde_json::from_slice(&from_gemini.error_body(429, anthropic_err)).unwrap();
    assert_eq!(v, serde_json::json!({"error": {"code": 429, "message": "Slow down", "status": "RESOURCE_EXHAUSTED"}}));
    let to_gemini = pair(Inbound::OpenAiChat, ProviderKind::Gemini).unwrap();
    let gemini_err = br#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT",
        "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}"#;
    let v: Value = serde_json::from_slice(&to_gemini.error_body(400, gemini_err)).unwrap();
    assert_eq!(v["error"]["message"], "API key not valid. Please pass a valid API key.");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    let refusal = to_gemini.refusal(&TranslateError::Unsupported { param: "user".into() });
    assert!(refusal.message.contains("gemini API"), "{}", refusal.message);
}
