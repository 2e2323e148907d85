//! Converse answers: every `testdata/clouds/converse/responses/<case>.in.json` translated for
//! each client dialect equals `<case>.<client>.out.json` (`BLESS=1` writes missing ones).

use serde_json::{json, Value};

use super::{dir, expected, inbound_named, to_bedrock};
use crate::translate::converse::answer::{finish, usage};
use crate::translate::converse::decode_response;
use crate::translate::ir::{Block, Finish, Thinking, Usage};
use crate::translate::{Context, TranslateError};

#[test]
fn golden_responses() {
    let mut count = 0;
    for entry in std::fs::read_dir(dir("responses")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(case) = name.strip_suffix(".in.json") else { continue };
        let input = std::fs::read(&path).unwrap();
        for client in ["openai", "anthropic", "gemini", "responses"] {
            let pair = to_bedrock(inbound_named(client));
            let ctx = Context { model: "client-model".into(), ..Context::default() };
            let body = pair.response(&input, &ctx, 1_700_000_000).unwrap_or_else(|e| panic!("{case}: {e}"));
            let got: Value = serde_json::from_slice(&body).unwrap();
            let want = expected(&dir("responses").join(format!("{case}.{client}.out.json")), &got);
            assert_eq!(got, want, "{case} for {client}:\n{}", serde_json::to_string_pretty(&got).unwrap());
            count += 1;
        }
    }
    assert!(count >= 12);
}

#[test]
fn reasoning_and_calls_decode_in_order_and_redacted_reasoning_is_left_out() {
    let body = std::fs::read(dir("responses").join("tools-thinking.in.json")).unwrap();
    let resp = decode_response(&body).unwrap();
    assert_eq!(resp.id, "", "Converse answers have no id");
    assert_eq!(resp.finish, Finish::ToolCalls);
    assert_eq!(resp.content.len(), 3);
    assert_eq!(
        resp.content[0],
        Block::Thinking(Thinking {
            text: "The user wants the weather.".into(),
            signature: Some("EqQBCkYIBxgC".into())
        })
    );
    assert!(matches!(&resp.content[2], Block::ToolCall(c) if c.id == "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"
        && c.arguments == json!({"city": "Paris"})));
}

#[test]
fn stop_reasons() {
    let cases = [
        ("end_turn", Finish::Stop),
        ("tool_use", Finish::ToolCalls),
        ("max_tokens", Finish::Length),
        ("model_context_window_exceeded", Finish::Length),
        ("stop_sequence", Finish::StopSequence(None)),
        ("guardrail_intervened", Finish::ContentFilter),
        ("content_filtered", Finish::ContentFilter),
        ("malformed_model_output", Finish::Stop),
        ("malformed_tool_use", Finish::Stop),
    ];
    for (reason, want) in cases {
        assert_eq!(finish(Some(reason), false), want, "{reason}");
    }
    assert_eq!(finish(None, true), Finish::ToolCalls);
    assert_eq!(finish(Some("something_new"), false), Finish::Stop);
}

#[test]
fn cache_reads_and_writes_are_part_of_the_prompt() {
    let u = json!({"inputTokens": 12, "outputTokens": 9, "totalTokens": 2071,
        "cacheReadInputTokens": 2000, "cacheWriteInputTokens": 50});
    assert_eq!(usage(&u), Usage { input: 2062, output: 9, cached: 2000, cache_write: 50 });
    assert_eq!(usage(&json!({})), Usage::default());
}

#[test]
fn malformed_answers_are_refused() {
    let refused = |body: &str| decode_response(body.as_bytes()).unwrap_err();
    assert!(matches!(refused("[]"), TranslateError::Invalid { .. }));
    assert!(
        matches!(refused(r#"{"stopReason":"end_turn"}"#), TranslateError::Invalid { param, .. } if param == "output")
    );
    let video = r#"{"output":{"message":{"role":"assistant","content":[{"video":{}}]}},"stopReason":"end_turn"}"#;
    assert_eq!(refused(video), TranslateError::Unsupported { param: "output.message.content[0].video".into() });
    let cited = r#"{"output":{"message":{"content":[{"citationsContent":{"content":[{"text":"a"},{"text":"b"}],"citations":[]}}]}}}"#;
    assert!(matches!(&decode_response(cited.as_bytes()).unwrap().content[0], Block::Text(t) if t.text == "ab"));
}

#[test]
fn bedrock_errors_reach_the_client_in_its_dialect() {
    let pair = to_bedrock(inbound_named("openai"));
    let body = pair.error_body(400, br#"{"message":"Malformed input request: #: extraneous key [foo]"}"#);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["error"]["message"], "Malformed input request: #: extraneous key [foo]");
    let denied = pair.error_body(403, br#"{"Message":"User is not authorized to perform bedrock:InvokeModel"}"#);
    let v: Value = serde_json::from_slice(&denied).unwrap();
    assert_eq!(v["error"]["message"], "User is not authorized to perform bedrock:InvokeModel");
}
