use serde_json::Value;

use super::*;

/// The marker word the bodies below put in text parts and, to show they are kept, in ids,
/// names, URLs and data.
const WORD: &str = "Alice";
const NEW: &str = "Bob";

fn parse_str(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or(Value::Null)
}

/// String leaves that differ between `a` and `b` (by JSON pointer); any other difference (a
/// leaf of another kind, a key, an array length) fails the test.
fn changed_strings(a: &Value, b: &Value, path: &str, out: &mut Vec<(String, String, String)>) {
    match (a, b) {
        (Value::String(x), Value::String(y)) if x != y => out.push((path.to_string(), x.clone(), y.clone())),
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "array length at {path}");
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                changed_strings(x, y, &format!("{path}/{i}"), out);
            }
        }
        (Value::Object(x), Value::Object(y)) => {
            assert_eq!(x.keys().collect::<Vec<_>>(), y.keys().collect::<Vec<_>>(), "keys at {path}");
            for (k, x) in x {
                changed_strings(x, &y[k], &format!("{path}/{k}"), out);
            }
        }
        (x, y) => assert_eq!(x, y, "value at {path}"),
    }
}

fn replace_word(text: &str) -> Result<Option<String>, String> {
    Ok(text.contains(WORD).then(|| text.replace(WORD, NEW)))
}

/// Checks a body of `shape`: its text parts are exactly `expected` (in order); a rewrite of
/// [`WORD`] changes those parts and nothing else, and the values at the `kept` pointers (which
/// hold the word too) stay as they were; a rewrite that changes nothing gives `None`; a
/// callback error stops the walk.
fn check(shape: Shape, body: &str, expected: &[&str], kept: &[&str]) {
    let bytes = body.as_bytes();
    assert_eq!(texts(shape, bytes).ok(), Some(expected.iter().map(|t| t.to_string()).collect()), "{shape:?}");
    let chars: usize = expected.iter().map(|t| t.chars().count()).sum();
    assert_eq!(text_chars(shape, bytes).ok(), Some(chars));

    let out = rewrite(shape, bytes, &mut replace_word);
    let Ok(Some(out)) = out else { panic!("{shape:?}: no rewrite: {out:?}") };
    let (before, after) = (parse_str(body), serde_json::from_slice::<Value>(&out).unwrap_or(Value::Null));
    let mut changed = Vec::new();
    changed_strings(&before, &after, "", &mut changed);
    for (path, old, new) in &changed {
        assert_eq!(*new, old.replace(WORD, NEW), "{shape:?} at {path}");
    }
    assert_eq!(changed.len(), expected.iter().filter(|t| t.contains(WORD)).count(), "{shape:?}: {changed:?}");
    for pointer in kept {
        let value = before.pointer(pointer).map(Value::to_string).unwrap_or_default();
        assert!(value.contains(WORD), "{shape:?}: the test body has no {WORD} at {pointer}");
        assert_eq!(after.pointer(pointer), before.pointer(pointer), "{shape:?}: {pointer} changed");
    }
    let rewritten: Vec<String> = expected.iter().map(|t| t.replace(WORD, NEW)).collect();
    assert_eq!(texts(shape, &out).ok(), Some(rewritten));

    // Nothing replaced, or replaced by itself: the caller forwards the original bytes.
    assert!(matches!(rewrite::<String>(shape, bytes, &mut |_| Ok(None)), Ok(None)));
    assert!(matches!(rewrite::<String>(shape, bytes, &mut |t| Ok(Some(t.to_string()))), Ok(None)));

    // A block at the second part (the first if there is one): the walk stops there.
    let stop = expected.len().min(2);
    let mut seen = Vec::new();
    let result = rewrite(shape, bytes, &mut |t| {
        seen.push(t.to_string());
        if seen.len() == stop {
            Err(format!("blocked: {t}"))
        } else {
            Ok(Some(t.to_uppercase()))
        }
    });
    assert_eq!(seen, expected.iter().take(stop).map(|t| t.to_string()).collect::<Vec<_>>());
    assert!(matches!(result, Err(RewriteError::Stopped(e)) if e == format!("blocked: {}", expected[stop - 1])));
}

#[test]
fn chat_request() {
    let body = r#"{
      "model": "gpt-4o",
      "messages": [
        {"role": "system", "content": "You help Alice with travel."},
        {"role": "user", "name": "Alice", "content": [
          {"type": "text", "text": "Hi, I am Alice. What is in this picture?"},
          {"type": "image_url", "image_url": {"url": "https://example.com/Alice.png", "detail": "high"}},
          {"type": "input_audio", "input_audio": {"data": "AliceAAAA", "format": "wav"}},
          {"type": "file", "file": {"filename": "Alice.pdf", "file_data": "data:application/pdf;base64,Alice"}}
        ]},
        {"role": "assistant", "content": null, "tool_calls": [
          {"id": "call_Alice", "type": "function",
           "function": {"name": "lookup_Alice", "arguments": "{\"who\":\"Alice\",\"age\":30}"}}
        ]},
        {"role": "tool", "tool_call_id": "call_Alice", "content": "Alice lives in Paris."},
        {"role": "assistant", "content": [{"type": "text", "text": "Alice lives in Paris."}], "refusal": null},
        {"role": "assistant", "content": null, "refusal": "I won't track Alice."},
        {"role": "user", "content": "Thanks"}
      ],
      "tools": [{"type": "function", "function": {"name": "lookup_Alice", "description": "Finds Alice",
        "parameters": {"type": "object", "properties": {"who": {"type": "string"}}}}}],
      "temperature": 0.7, "max_tokens": 256, "user": "Alice", "stream": false
    }"#;
    check(
        Shape::ChatRequest,
        body,
        &[
            "You help Alice with travel.",
            "Hi, I am Alice. What is in this picture?",
            r#"{"who":"Alice","age":30}"#,
            "Alice lives in Paris.",
            "Alice lives in Paris.",
            "I won't track Alice.",
            "Thanks",
        ],
        &[
            "/messages/1/name",
            "/messages/1/content/1/image_url/url",
            "/messages/1/content/2/input_audio/data",
            "/messages/1/content/3/file",
            "/messages/2/tool_calls/0/id",
            "/messages/2/tool_calls/0/function/name",
            "/messages/3/tool_call_id",
            "/tools",
            "/user",
        ],
    );
}

#[test]
fn chat_answer() {
    let body = r#"{
      "id": "chatcmpl-Alice", "object": "chat.completion", "created": 1700000000, "model": "gpt-4o-2024-08-06",
      "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "Alice, your trip is booked.", "refusal": null,
          "tool_calls": [{"id": "call_Alice", "type": "function",
            "function": {"name": "notify_Alice", "arguments": "{\"to\":\"alice@example.com\",\"name\":\"Alice\"}"}}],
          "annotations": []},
         "logprobs": null, "finish_reason": "tool_calls"},
        {"index": 1, "message": {"role": "assistant", "content": null, "refusal": "I can't help Alice with that."},
         "logprobs": null, "finish_reason": "stop"}
      ],
      "usage": {"prompt_tokens": 10, "completion_tokens": 20, "total_tokens": 30},
      "system_fingerprint": "fp_Alice"
    }"#;
    check(
        Shape::ChatAnswer,
        body,
        &[
            "Alice, your trip is booked.",
            r#"{"to":"alice@example.com","name":"Alice"}"#,
            "I can't help Alice with that.",
        ],
        &[
            "/id",
            "/choices/0/message/tool_calls/0/id",
            "/choices/0/message/tool_calls/0/function/name",
            "/system_fingerprint",
        ],
    );
}

#[test]
fn completions() {
    let body = r#"{"model": "gpt-3.5-turbo-instruct", "prompt": ["Say hi to Alice", "Say bye to Alice"],
      "suffix": "Signed, Alice", "max_tokens": 7, "temperature": 0, "user": "Alice"}"#;
    check(Shape::CompletionsRequest, body, &["Say hi to Alice", "Say bye to Alice", "Signed, Alice"], &["/user"]);
    let body = r#"{"model": "gpt-3.5-turbo-instruct", "prompt": "Dear Alice", "logit_bias": {"50256": -100}}"#;
    check(Shape::CompletionsRequest, body, &["Dear Alice"], &[]);
    let answer = r#"{"id": "cmpl-Alice", "object": "text_completion", "created": 1700000000,
      "model": "gpt-3.5-turbo-instruct",
      "choices": [{"text": "\n\nHi Alice!", "index": 0, "logprobs": null, "finish_reason": "stop"},
                  {"text": "Bye Alice.", "index": 1, "logprobs": null, "finish_reason": "length"}],
      "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12}}"#;
    check(Shape::CompletionsAnswer, answer, &["\n\nHi Alice!", "Bye Alice."], &["/id"]);
}

#[test]
fn token_prompts_are_not_text() {
    for body in [r#"{"prompt": [1212, 318]}"#, r#"{"prompt": [[1212, 318], [50256]]}"#, r#"{"prompt": null}"#] {
        assert_eq!(texts(Shape::CompletionsRequest, body.as_bytes()).ok(), Some(Vec::new()));
    }
    let body = br#"{"model": "text-embedding-3-small", "input": [[1, 2, 3], [4]], "encoding_format": "float"}"#;
    assert_eq!(texts(Shape::EmbeddingsRequest, body).ok(), Some(Vec::new()));
    assert!(matches!(rewrite::<String>(Shape::EmbeddingsRequest, body, &mut replace_word), Ok(None)));
}

#[test]
fn embeddings() {
    let body = r#"{"model": "text-embedding-3-small", "input": ["Alice likes tea", "Bob likes Alice"],
      "encoding_format": "float", "dimensions": 256, "user": "Alice"}"#;
    check(Shape::EmbeddingsRequest, body, &["Alice likes tea", "Bob likes Alice"], &["/user"]);
    let body = r#"{"model": "text-embedding-3-small", "input": "Alice alone", "user": "Alice"}"#;
    check(Shape::EmbeddingsRequest, body, &["Alice alone"], &["/user"]);
}

#[test]
fn messages_request() {
    let body = r#"{
      "model": "claude-sonnet-4-5", "max_tokens": 1024,
      "system": [{"type": "text", "text": "You help Alice.", "cache_control": {"type": "ephemeral"}}],
      "messages": [
        {"role": "user", "content": [
          {"type": "text", "text": "Where does Alice live?"},
          {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AliceAAAA"}},
          {"type": "image", "source": {"type": "url", "url": "https://example.com/Alice.png"}}
        ]},
        {"role": "assistant", "content": [
          {"type": "thinking", "thinking": "Alice is the user.", "signature": "sigAlice"},
          {"type": "text", "text": "Let me look Alice up."},
          {"type": "tool_use", "id": "toolu_Alice", "name": "lookup_Alice",
           "input": {"filters": {"city": "Paris of Alice", "tags": ["Alice", 42, true, null]}, "limit": 3, "name": "Alice"}}
        ]},
        {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "toolu_Alice", "content": [
            {"type": "text", "text": "Alice: Paris"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AliceBBBB"}}
          ]},
          {"type": "tool_result", "tool_use_id": "toolu_Alice2", "content": "Alice is 30", "is_error": false},
          {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Alice's CV"},
           "title": "Alice CV"},
          {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AliceCCCC"}}
        ]},
        {"role": "assistant", "content": "Alice lives in Paris."}
      ],
      "metadata": {"user_id": "Alice"}, "temperature": 0.5
    }"#;
    check(
        Shape::MessagesRequest,
        body,
        &[
            "You help Alice.",
            "Where does Alice live?",
            "Let me look Alice up.",
            "Paris of Alice",
            "Alice",
            "Alice",
            "Alice: Paris",
            "Alice is 30",
            "Alice's CV",
            "Alice lives in Paris.",
        ],
        &[
            "/messages/0/content/1/source/data",
            "/messages/0/content/2/source/url",
            "/messages/1/content/0/thinking",
            "/messages/1/content/0/signature",
            "/messages/1/content/2/id",
            "/messages/1/content/2/name",
            "/messages/2/content/0/tool_use_id",
            "/messages/2/content/0/content/1/source/data",
            "/messages/2/content/2/title",
            "/messages/2/content/3/source/data",
            "/metadata/user_id",
        ],
    );
    let body = r#"{"model": "claude-haiku-4-5", "max_tokens": 64, "system": "Greet Alice.",
      "messages": [{"role": "user", "content": "Hello, I am Alice"}]}"#;
    check(Shape::MessagesRequest, body, &["Greet Alice.", "Hello, I am Alice"], &[]);
}

#[test]
fn messages_answer() {
    let body = r#"{
      "id": "msg_Alice", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5-20250929",
      "content": [
        {"type": "thinking", "thinking": "Alice wants a room.", "signature": "sigAlice"},
        {"type": "text", "text": "Booking for Alice.", "citations": null},
        {"type": "tool_use", "id": "toolu_Alice", "name": "book_Alice", "input": {"guest": "Alice", "nights": 2}}
      ],
      "stop_reason": "tool_use", "stop_sequence": null,
      "usage": {"input_tokens": 12, "output_tokens": 34, "cache_read_input_tokens": 0}
    }"#;
    check(
        Shape::MessagesAnswer,
        body,
        &["Booking for Alice.", "Alice"],
        &["/id", "/content/0/thinking", "/content/2/id", "/content/2/name"],
    );
}

#[test]
fn gemini_request() {
    let body = r#"{
      "contents": [
        {"role": "user", "parts": [
          {"text": "Describe Alice's photo"},
          {"inlineData": {"mimeType": "image/png", "data": "AliceAAAA"}},
          {"fileData": {"mimeType": "image/png", "fileUri": "gs://bucket/Alice.png"}}
        ]},
        {"role": "model", "parts": [
          {"functionCall": {"name": "find_Alice", "args": {"page": 1, "query": "Alice"}}, "thoughtSignature": "Alice-sig"}
        ]},
        {"role": "user", "parts": [
          {"functionResponse": {"name": "find_Alice", "response": {"output": {"city": "Paris", "owner": "Alice"}}}}
        ]}
      ],
      "systemInstruction": {"parts": [{"text": "Be kind to Alice."}]},
      "tools": [{"functionDeclarations": [{"name": "find_Alice", "description": "Finds Alice"}]}],
      "generationConfig": {"temperature": 0.2, "maxOutputTokens": 100},
      "safetySettings": []
    }"#;
    check(
        Shape::GeminiRequest,
        body,
        &["Be kind to Alice.", "Describe Alice's photo", "Alice", "Paris", "Alice"],
        &[
            "/contents/0/parts/1/inlineData/data",
            "/contents/0/parts/2/fileData/fileUri",
            "/contents/1/parts/0/functionCall/name",
            "/contents/1/parts/0/thoughtSignature",
            "/contents/2/parts/0/functionResponse/name",
            "/tools",
        ],
    );
}

#[test]
fn gemini_request_in_snake_case() {
    let body = r#"{
      "system_instruction": {"parts": [{"text": "Speak to Alice."}]},
      "contents": [{"parts": [
        {"text": "Hi, Alice here"},
        {"inline_data": {"mime_type": "image/jpeg", "data": "AliceAAAA"}},
        {"function_call": {"name": "f_Alice", "args": {"a": "Alice"}}},
        {"function_response": {"name": "f_Alice", "response": {"result": "Alice ok"}}}
      ]}],
      "generation_config": {"max_output_tokens": 10}
    }"#;
    check(
        Shape::GeminiRequest,
        body,
        &["Speak to Alice.", "Hi, Alice here", "Alice", "Alice ok"],
        &["/contents/0/parts/1/inline_data/data", "/contents/0/parts/2/function_call/name"],
    );
}

#[test]
fn gemini_answer() {
    let body = r#"{
      "candidates": [{
        "content": {"role": "model", "parts": [
          {"text": "Thinking about Alice", "thought": true},
          {"text": "Alice is in Paris."},
          {"functionCall": {"name": "email_Alice", "args": {"body": "Hello Alice", "to": "alice@example.com"}}}
        ]},
        "finishReason": "STOP", "index": 0,
        "safetyRatings": [{"category": "HARM_CATEGORY_HARASSMENT", "probability": "NEGLIGIBLE"}]
      }],
      "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 7, "totalTokenCount": 12},
      "modelVersion": "gemini-2.5-flash", "responseId": "Alice123"
    }"#;
    check(
        Shape::GeminiAnswer,
        body,
        &["Thinking about Alice", "Alice is in Paris.", "Hello Alice", "alice@example.com"],
        &["/candidates/0/content/parts/2/functionCall/name", "/responseId"],
    );
}

#[test]
fn responses_request() {
    let body = r#"{
      "model": "gpt-4.1", "instructions": "Help Alice.",
      "input": [
        {"role": "user", "content": [
          {"type": "input_text", "text": "Who is Alice?"},
          {"type": "input_image", "image_url": "https://example.com/Alice.png", "detail": "auto"}
        ]},
        {"type": "message", "id": "msg_Alice", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": "Alice is a user.", "annotations": []}]},
        {"type": "reasoning", "id": "rs_Alice", "summary": [{"type": "summary_text", "text": "Alice thinking"}],
         "encrypted_content": "encAlice"},
        {"type": "function_call", "id": "fc_Alice", "call_id": "call_Alice", "name": "lookup_Alice",
         "arguments": "{\"who\":\"Alice\"}"},
        {"type": "function_call_output", "call_id": "call_Alice", "output": "Alice: Paris"},
        {"type": "function_call_output", "call_id": "call_Alice2",
         "output": [{"type": "input_text", "text": "Alice: 30"}]},
        {"role": "developer", "content": "Answer Alice briefly."}
      ],
      "tools": [{"type": "function", "name": "lookup_Alice", "description": "Finds Alice",
        "parameters": {"type": "object", "properties": {}}}],
      "store": false, "safety_identifier": "Alice"
    }"#;
    check(
        Shape::ResponsesRequest,
        body,
        &[
            "Help Alice.",
            "Who is Alice?",
            "Alice is a user.",
            r#"{"who":"Alice"}"#,
            "Alice: Paris",
            "Alice: 30",
            "Answer Alice briefly.",
        ],
        &[
            "/input/0/content/1/image_url",
            "/input/1/id",
            "/input/2",
            "/input/3/call_id",
            "/input/3/name",
            "/input/4/call_id",
            "/tools",
            "/safety_identifier",
        ],
    );
    let body = r#"{"model": "gpt-4.1-mini", "input": "Write a poem about Alice", "user": "Alice"}"#;
    check(Shape::ResponsesRequest, body, &["Write a poem about Alice"], &["/user"]);
}

#[test]
fn responses_answer() {
    let body = r#"{
      "id": "resp_Alice", "object": "response", "created_at": 1741476542, "status": "completed",
      "model": "gpt-4.1-2025-04-14",
      "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "About Alice"}]},
        {"type": "message", "id": "msg_Alice", "status": "completed", "role": "assistant", "content": [
          {"type": "output_text", "text": "Alice is in Paris.",
           "annotations": [{"type": "url_citation", "url": "https://example.com/Alice", "title": "Alice",
             "start_index": 0, "end_index": 5}]},
          {"type": "refusal", "refusal": "No more on Alice."}
        ]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_Alice", "name": "notify_Alice",
         "arguments": "{\"who\":\"Alice\"}", "status": "completed"}
      ],
      "output_text": "Alice is in Paris.",
      "instructions": "Help Alice.", "user": null, "metadata": {},
      "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    }"#;
    check(
        Shape::ResponsesAnswer,
        body,
        &["Alice is in Paris.", "No more on Alice.", r#"{"who":"Alice"}"#, "Alice is in Paris."],
        &[
            "/id",
            "/output/0/summary",
            "/output/1/content/0/annotations",
            "/output/2/call_id",
            "/output/2/name",
            "/instructions",
        ],
    );
}

#[test]
fn rewrites_only_what_changed_and_keeps_values() {
    // Numbers and literals survive a re-serialisation unchanged in meaning.
    let body = br#"{"model": "m", "temperature": 0.1, "seed": -7, "max_tokens": 18446744073709551615,
      "logprobs": false, "stop": null, "messages": [{"role": "user", "content": "Alice \u00e9\ud83d\ude00"}]}"#;
    let out = rewrite(Shape::ChatRequest, body, &mut replace_word);
    let Ok(Some(out)) = out else { panic!("no rewrite: {out:?}") };
    let after: Value = serde_json::from_slice(&out).unwrap_or(Value::Null);
    let mut expected: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    expected["messages"][0]["content"] = Value::from("Bob \u{e9}\u{1f600}");
    assert_eq!(after, expected);
    assert_eq!(text_chars(Shape::ChatRequest, body).ok(), Some(8));
}

#[test]
fn unknown_parts_and_wrong_shapes_are_skipped() {
    let bodies: [(Shape, &str); 6] = [
        (Shape::ChatRequest, r#"{"messages": 5}"#),
        (
            Shape::ChatRequest,
            r#"{"messages": [7, null, {"content": {"text": "x"}}, {"content": [{"text": "no type"}]}]}"#,
        ),
        (Shape::MessagesRequest, r#"{"messages": [{"content": [{"type": "server_tool_use", "input": {"q": "x"}}]}]}"#),
        (Shape::GeminiRequest, r#"{"contents": {"parts": [{"text": "not a list"}]}}"#),
        (Shape::ResponsesRequest, r#"{"input": [{"type": "custom", "content": "x"}, 3, "s"]}"#),
        (Shape::ChatAnswer, r#"{"choices": [{"message": null}, {"text": "a completion's"}]}"#),
    ];
    for (shape, body) in bodies {
        assert_eq!(texts(shape, body.as_bytes()).ok(), Some(Vec::new()), "{body}");
        assert!(matches!(rewrite::<String>(shape, body.as_bytes(), &mut replace_word), Ok(None)));
    }
    // A body of one shape read as another has no text parts there, not an error.
    let chat = br#"{"messages": [{"role": "user", "content": "hi"}]}"#;
    assert_eq!(texts(Shape::GeminiRequest, chat).ok(), Some(Vec::new()));
}

#[test]
fn malformed_bodies_are_errors() {
    for body in
        [&b""[..], b"not json", b"{\"messages\": [", b"{\"a\": 1} trailing", b"\xff\xfe", b"{\"s\": \"\\ud800\"}"]
    {
        for shape in Shape::ALL {
            assert!(matches!(texts(shape, body), Err(BodyError::Json(_))), "{shape:?} {body:?}");
            assert!(matches!(text_chars(shape, body), Err(BodyError::Json(_))));
            let result = rewrite::<String>(shape, body, &mut replace_word);
            assert!(matches!(result, Err(RewriteError::Body(BodyError::Json(_)))));
        }
    }
    for body in [&b"[]"[..], b"\"text\"", b"42", b"null"] {
        assert_eq!(texts(Shape::ChatRequest, body), Err(BodyError::NotObject));
    }
    // Deeper than the parser's limit: an error, not a stack overflow.
    let deep = format!("{{\"input\": {}{}}}", "[".repeat(10_000), "]".repeat(10_000));
    assert!(matches!(texts(Shape::EmbeddingsRequest, deep.as_bytes()), Err(BodyError::Json(_))));
}
