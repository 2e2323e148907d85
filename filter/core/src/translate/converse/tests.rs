//! Converse request tests. Goldens: every `testdata/clouds/converse/requests/<client>-<case>.in.json`
//! translated for a Bedrock provider equals its `.out.json` (as JSON values); `BLESS=1` writes
//! a missing expected file from the current output (review it). Answers: `tests/answers.rs`.

mod answers;

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::*;
use crate::translate::ir::{Block, Message, Role, Text, ToolCall, ToolResult};
use crate::translate::{Inbound, Outbound, Pair};

pub(super) fn dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/clouds/converse").join(kind)
}

pub(super) fn to_bedrock(inbound: Inbound) -> Pair {
    Pair { inbound, outbound: Outbound::Converse }
}

pub(super) fn inbound_named(name: &str) -> Inbound {
    match name {
        "openai" => Inbound::OpenAiChat,
        "anthropic" => Inbound::Anthropic,
        "gemini" => Inbound::Gemini,
        "responses" => Inbound::Responses,
        other => panic!("unknown client dialect {other}"),
    }
}

/// The expected JSON at `path`, written from `got` first under `BLESS=1` when missing.
pub(super) fn expected(path: &Path, got: &Value) -> Value {
    if std::env::var_os("BLESS").is_some() && !path.exists() {
        std::fs::write(path, serde_json::to_string_pretty(got).unwrap() + "\n").unwrap();
    }
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&text).unwrap()
}

fn encoded(req: &Request) -> Value {
    serde_json::from_slice(&encode_request(req).unwrap()).unwrap()
}

fn text(role: Role, t: &str) -> Message {
    Message { role, content: vec![Block::Text(Text { text: t.into(), cache: None })] }
}

fn call(id: &str) -> Block {
    Block::ToolCall(ToolCall { id: id.into(), name: "f".into(), arguments: json!({"x": 1}) })
}

fn result(id: &str) -> Block {
    Block::ToolResult(ToolResult { id: id.into(), content: Vec::new(), is_error: false, cache: None })
}

#[test]
fn golden_requests() {
    let mut count = 0;
    for entry in std::fs::read_dir(dir("requests")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(case) = name.strip_suffix(".in.json") else { continue };
        let (client, _) = case.split_once('-').unwrap();
        let pair = to_bedrock(inbound_named(client));
        let input = std::fs::read(&path).unwrap();
        let translated = match pair.inbound {
            Inbound::Gemini => pair.request_for_model(&input, "gemini-client", true, "anthropic.claude-v2:1"),
            _ => pair.request(&input, "anthropic.claude-v2:1"),
        };
        let (body, ctx) = translated.unwrap_or_else(|e| panic!("{case}: {e}"));
        let got: Value = serde_json::from_slice(&body).unwrap();
        let want = expected(&dir("requests").join(format!("{case}.out.json")), &got);
        assert_eq!(got, want, "{case}:\n{}", serde_json::to_string_pretty(&got).unwrap());
        assert!(got.get("model").is_none() && got.get("stream").is_none(), "{case}: both are in the path");
        assert!(!ctx.structured, "{case}: structured output is native, not a forced tool");
        count += 1;
    }
    assert!(count >= 5);
}

/// What Converse cannot express is a 400 naming the parameter, never dropped.
#[test]
fn untranslatable_parameters_are_refused_by_name() {
    let chat = to_bedrock(Inbound::OpenAiChat);
    let msgs = r#""messages":[{"role":"user","content":"hi"}]"#;
    let cases = [
        (format!(r#"{{"model":"m",{msgs},"seed":1}}"#), "seed"),
        (format!(r#"{{"model":"m",{msgs},"presence_penalty":0.5}}"#), "presence_penalty"),
        (format!(r#"{{"model":"m",{msgs},"frequency_penalty":0.5}}"#), "frequency_penalty"),
        (format!(r#"{{"model":"m",{msgs},"user":"u-1"}}"#), "user"),
        (format!(r#"{{"model":"m",{msgs},"parallel_tool_calls":false}}"#), "parallel_tool_calls"),
        (format!(r#"{{"model":"m",{msgs},"reasoning_effort":"high"}}"#), "reasoning_effort"),
        (
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}"#
                .into(),
            "messages[0].content[0].image_url",
        ),
        (
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/tiff;base64,AA=="}}]}]}"#
                .into(),
            "messages[0].content[0].media_type",
        ),
    ];
    for (body, param) in cases {
        let err = chat.request(body.as_bytes(), "m").unwrap_err();
        assert_eq!(err, TranslateError::Unsupported { param: param.into() }, "{body}");
        let refusal = chat.refusal(&err);
        assert!(refusal.message.contains("bedrock API"), "{}", refusal.message);
    }
    let out_of_range = [
        (format!(r#"{{"model":"m",{msgs},"temperature":1.5}}"#), "temperature"),
        (format!(r#"{{"model":"m",{msgs},"top_p":-0.1}}"#), "top_p"),
        (
            format!(
                r#"{{"model":"m",{msgs},"tools":[{{"type":"function","function":{{"name":"a.b","parameters":{{}}}}}}]}}"#
            ),
            "tools[0].name",
        ),
    ];
    for (body, param) in out_of_range {
        let err = chat.request(body.as_bytes(), "m").unwrap_err();
        assert!(matches!(&err, TranslateError::Invalid { param: p, .. } if p == param), "{body}: {err:?}");
    }
    // A one-hour Anthropic breakpoint is carried; another kind of breakpoint is not.
    let anthropic = to_bedrock(Inbound::Anthropic);
    let odd = r#"{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"persistent"}}],"messages":[]}"#;
    let err = anthropic.request(odd.as_bytes(), "m").unwrap_err();
    assert_eq!(err, TranslateError::Unsupported { param: "system[0].cache_control".into() });
}

#[test]
fn tool_choice_none_leaves_the_tools_out_unless_the_history_needs_them() {
    let tool = Tool { name: "f".into(), description: None, parameters: json!({"type": "object"}), cache: None };
    let mut req = Request {
        messages: vec![text(Role::User, "hi")],
        tools: vec![tool],
        tool_choice: Some(ToolChoice::None),
        ..Request::default()
    };
    assert_eq!(encoded(&req).get("toolConfig"), None, "without tool history the model cannot call a tool");
    req.messages = vec![
        text(Role::User, "hi"),
        Message { role: Role::Assistant, content: vec![call("c1")] },
        Message { role: Role::User, content: vec![result("c1")] },
    ];
    let config = json!({"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}]});
    assert_eq!(encoded(&req)["toolConfig"], config, "Bedrock requires toolConfig once tools were used");
    for (choice, want) in [
        (ToolChoice::Auto, json!({"auto": {}})),
        (ToolChoice::Required, json!({"any": {}})),
        (ToolChoice::Named("f".into()), json!({"tool": {"name": "f"}})),
    ] {
        req.tool_choice = Some(choice);
        assert_eq!(encoded(&req)["toolConfig"]["toolChoice"], want);
    }
}

#[test]
fn tool_use_ids_are_rewritten_the_same_way_on_call_and_result() {
    let long = "x".repeat(70);
    for id in ["call def/2", "", long.as_str(), "toolu_é"] {
        let got = tool_use_id(id);
        assert!((1..=64).contains(&got.len()), "{id:?} -> {got}");
        assert!(got.chars().all(|c| c.is_ascii_alphanumeric() || "_.:-".contains(c)), "{id:?} -> {got}");
        assert_eq!(tool_use_id(id), got, "deterministic");
    }
    assert_ne!(tool_use_id("a b"), tool_use_id("a/b"), "ids that differ stay different");
    assert_eq!(tool_use_id("tooluse_kZ.J:M-1"), "tooluse_kZ.J:M-1", "a valid id is kept");
    let req = Request {
        messages: vec![
            Message { role: Role::Assistant, content: vec![call("a b")] },
            Message { role: Role::User, content: vec![result("a b")] },
        ],
        ..Request::default()
    };
    let out = encoded(&req);
    let id = tool_use_id("a b").into_owned();
    assert_eq!(out["messages"][1]["content"][0]["toolUse"]["toolUseId"], json!(id));
    assert_eq!(out["messages"][2]["content"][0]["toolResult"]["toolUseId"], json!(id));
}

#[test]
fn roles_alternate_and_the_user_speaks_first() {
    let req = Request {
        messages: vec![
            text(Role::Assistant, "Hello."),
            text(Role::User, "a"),
            Message { role: Role::User, content: vec![Block::Text(Text::default())] },
            text(Role::User, "b"),
            text(Role::Assistant, "c"),
            text(Role::Assistant, "d"),
        ],
        ..Request::default()
    };
    assert_eq!(
        encoded(&req),
        json!({"messages": [
            {"role": "user", "content": [{"text": "(continue)"}]},
            {"role": "assistant", "content": [{"text": "Hello."}]},
            {"role": "user", "content": [{"text": "a"}, {"text": "b"}]},
            {"role": "assistant", "content": [{"text": "c"}, {"text": "d"}]},
        ]})
    );
}

#[test]
fn portable_breakpoints_do_not_double_the_clients_own() {
    let mut said = text(Role::User, "q");
    said.content.push(Block::Text(Text { text: "r".into(), cache: Some(json!({"type": "ephemeral"})) }));
    let req = Request {
        system: vec![Text { text: "s".into(), cache: None }],
        messages: vec![said],
        cache: Some(PortableCache {
            ttl: "5m".into(),
            breakpoints: vec![Breakpoint::System, Breakpoint::Tools, Breakpoint::Messages],
        }),
        ..Request::default()
    };
    let out = encoded(&req);
    assert_eq!(out["system"], json!([{"text": "s"}, {"cachePoint": {"type": "default"}}]));
    assert_eq!(
        out["messages"][0]["content"],
        json!([{"text": "q"}, {"text": "r"}, {"cachePoint": {"type": "default"}}])
    );
    assert_eq!(out.get("toolConfig"), None);
}

#[test]
fn model_ids_are_escaped_as_botocore_does() {
    assert_eq!(
        escape_model_id("anthropic.claude-3-5-sonnet-20240620-v1:0"),
        "anthropic.claude-3-5-sonnet-20240620-v1%3A0"
    );
    assert_eq!(
        escape_model_id("arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.meta.llama3-2-1b-instruct-v1:0"),
        "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.meta.llama3-2-1b-instruct-v1%3A0"
    );
    assert_eq!(escape_model_id("a~b_c d+é"), "a~b_c%20d%2B%C3%A9");
    assert_eq!(
        Outbound::Converse.upstream_path("us.anthropic.claude-sonnet-4-5-20250929-v1:0", false),
        "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    );
    assert_eq!(Outbound::Converse.upstream_path("m:1", true), "/model/m%3A1/converse-stream");
    assert_eq!(Outbound::Converse.name(), "bedrock");
}
