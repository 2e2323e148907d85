use serde_json::json;

use super::*;
use crate::translate::ir::{Finish, Text, Thinking, ToolCall, Usage};

#[test]
fn events_carry_usage_first_and_the_finish_last() {
    let resp = Response {
        id: "r1".into(),
        model: String::new(),
        content: vec![
            Block::Thinking(Thinking { text: String::new(), signature: Some("s".into()) }),
            Block::Text(Text { text: "hi".into(), cache: None }),
            Block::ToolCall(ToolCall { id: "c".into(), name: "f".into(), arguments: json!({"a": 1}) }),
        ],
        finish: Finish::ToolCalls,
        usage: Usage { input: 3, output: 4, cached: 0, cache_write: 0 },
    };
    assert_eq!(
        events(&resp),
        [
            Event::Start { id: "r1".into() },
            Event::Usage(resp.usage),
            Event::Signature("s".into()),
            Event::Text("hi".into()),
            Event::ToolStart { index: 0, id: "c".into(), name: "f".into() },
            Event::ToolArgs { index: 0, json: "{\"a\":1}".into() },
            Event::Finish(Finish::ToolCalls),
        ]
    );
}

#[test]
fn gemini_events_become_a_json_array() {
    let sse = b"data: {\"a\":1}\n\n: comment\n\ndata: {\"b\":2}\n\n";
    assert_eq!(json_array(sse), b"[{\"a\":1},\n{\"b\":2}]");
    assert_eq!(json_array(b""), b"[]");
}
