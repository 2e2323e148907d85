use serde_json::json;

use super::*;

fn key(api: Api, body: serde_json::Value) -> String {
    exact_key(api, body.to_string().as_bytes(), "gpt-4o", "key:alice").unwrap()
}

fn chat() -> serde_json::Value {
    json!({
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "temperature": 0.2,
    })
}

#[test]
fn delivery_and_accounting_fields_do_not_change_the_key() {
    let base = key(Api::ChatCompletions, chat());
    let mut other = chat();
    for (k, v) in [
        ("stream", json!(true)),
        ("stream_options", json!({"include_usage": true})),
        ("user", json!("u-1")),
        ("metadata", json!({"a": "b"})),
        ("store", json!(true)),
        ("service_tier", json!("auto")),
        ("model", json!("gpt-4o-alias")),
    ] {
        other[k] = v;
        assert_eq!(key(Api::ChatCompletions, other.clone()), base, "{k}");
    }
}

#[test]
fn what_shapes_the_answer_changes_the_key() {
    let base = key(Api::ChatCompletions, chat());
    let changes = [
        ("messages", json!([{"role": "user", "content": "Hello"}])),
        ("tools", json!([{"type": "function", "function": {"name": "f", "parameters": {}}}])),
        ("temperature", json!(0.3)),
        ("max_tokens", json!(10)),
    ];
    for (k, v) in changes {
        let mut other = chat();
        other[k] = v;
        assert_ne!(key(Api::ChatCompletions, other), base, "{k}");
    }
    let body = chat().to_string();
    let b = body.as_bytes();
    assert_ne!(exact_key(Api::ChatCompletions, b, "gpt-4o-mini", "key:alice").unwrap(), base);
    assert_ne!(exact_key(Api::ChatCompletions, b, "gpt-4o", "key:bob").unwrap(), base);
    assert_ne!(exact_key(Api::Responses, b, "gpt-4o", "key:alice").unwrap(), base);
}

#[test]
fn model_and_scope_cannot_run_into_each_other() {
    let body = chat().to_string();
    let a = exact_key(Api::ChatCompletions, body.as_bytes(), "ab", "c").unwrap();
    let b = exact_key(Api::ChatCompletions, body.as_bytes(), "a", "bc").unwrap();
    assert_ne!(a, b);
}

#[test]
fn key_order_and_whitespace_do_not_matter() {
    let a = br#"{"model":"m","temperature":0.5,"messages":[{"role":"user","content":"Hi"}]}"#;
    let b = b"{ \"messages\" : [ { \"content\" : \"Hi\", \"role\" : \"user\" } ],\n \"temperature\": 0.5 }";
    let ka = exact_key(Api::ChatCompletions, a, "m", "global").unwrap();
    assert_eq!(ka, exact_key(Api::ChatCompletions, b, "m", "global").unwrap());
    assert_eq!(ka.len(), 64);
    assert!(ka.bytes().all(|c| c.is_ascii_hexdigit()));
}

#[test]
fn gemini_methods_share_a_key() {
    let body = br#"{"contents":[{"role":"user","parts":[{"text":"Hi"}]}]}"#;
    assert_eq!(
        exact_key(Api::GenerateContent, body, "gemini-2.5-flash", "global"),
        exact_key(Api::StreamGenerateContent, body, "gemini-2.5-flash", "global"),
    );
}

#[test]
fn refusals() {
    let cases: [(Api, &[u8], Uncacheable); 11] = [
        (Api::ChatCompletions, br#"{"n": 2, "messages": []}"#, Uncacheable::MultipleChoices("n")),
        (Api::Completions, br#"{"prompt": "x", "stream": true}"#, Uncacheable::StreamedCompletions),
        (
            Api::GenerateContent,
            br#"{"generationConfig": {"candidateCount": 3}}"#,
            Uncacheable::MultipleChoices("candidateCount"),
        ),
        (Api::Responses, br#"{"previous_response_id": "resp_1"}"#, Uncacheable::Stateful("previous_response_id")),
        (Api::Responses, br#"{"conversation": "conv_1"}"#, Uncacheable::Stateful("conversation")),
        (Api::Responses, br#"{"background": true}"#, Uncacheable::Stateful("background")),
        (Api::ImagesGenerations, br#"{"prompt": "a cat"}"#, Uncacheable::Api("images_generations")),
        (Api::AudioSpeech, br#"{"input": "x"}"#, Uncacheable::Api("audio_speech")),
        (Api::CountTokens, br#"{"messages": []}"#, Uncacheable::Api("count_tokens")),
        (Api::ChatCompletions, b"not json", Uncacheable::NotJson),
        (Api::ChatCompletions, b"[1]", Uncacheable::NotAnObject),
    ];
    for (api, body, want) in cases {
        assert_eq!(exact_key(api, body, "m", "s"), Err(want), "{}", String::from_utf8_lossy(body));
    }
    // Defaults are fine.
    assert!(exact_key(Api::ChatCompletions, br#"{"n": 1, "messages": []}"#, "m", "s").is_ok());
    assert!(exact_key(Api::Responses, br#"{"background": false, "previous_response_id": null}"#, "m", "s").is_ok());
}

fn conversation(first: &str, last: &str) -> Vec<u8> {
    json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": first},
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": last},
        ],
    })
    .to_string()
    .into_bytes()
}

#[test]
fn semantic_context_is_everything_but_the_last_user_text() {
    let parts = |body: &[u8]| semantic_parts(Api::ChatCompletions, body, "gpt-4o", "global").unwrap();
    let a = parts(&conversation("Talk about Paris", "What is the capital of France?"));
    assert_eq!(a.text, "What is the capital of France?");
    let paraphrase = parts(&conversation("Talk about Paris", "Which city is France's capital?"));
    assert_eq!(paraphrase.context, a.context);
    let other_history = parts(&conversation("Talk about Rome", "What is the capital of France?"));
    assert_ne!(other_history.context, a.context);
    assert_ne!(semantic_parts(Api::ChatCompletions, &conversation("x", "y"), "gpt-4o", "key:bob").unwrap().context, {
        parts(&conversation("x", "y")).context
    });
}

#[test]
fn semantic_text_of_each_dialect() {
    let cases: [(Api, serde_json::Value, Option<&str>); 9] = [
        (
            Api::Messages,
            json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}),
            Some("a\nb"),
        ),
        (Api::GenerateContent, json!({"contents": [{"parts": [{"text": "hi"}]}]}), Some("hi")),
        (Api::GenerateContent, json!({"contents": [{"role": "model", "parts": [{"text": "hi"}]}]}), None),
        (Api::Responses, json!({"input": "hello"}), Some("hello")),
        (
            Api::Responses,
            json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "q"}]}]}),
            Some("q"),
        ),
        (Api::Responses, json!({"input": [{"type": "function_call_output", "call_id": "c", "output": "1"}]}), None),
        (Api::Completions, json!({"prompt": "Once upon"}), Some("Once upon")),
        (Api::Embeddings, json!({"input": "x"}), None),
        (
            Api::ChatCompletions,
            json!({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}),
            None,
        ),
    ];
    for (api, body, want) in cases {
        let got = semantic_parts(api, body.to_string().as_bytes(), "m", "s").map(|p| p.text);
        assert_eq!(got.as_deref(), want, "{api:?} {body}");
    }
}

#[test]
fn semantic_context_keeps_images_of_the_last_turn() {
    let body = |url: &str| {
        json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": url}},
        ]}]})
        .to_string()
    };
    let a = semantic_parts(Api::ChatCompletions, body("https://x/1.png").as_bytes(), "m", "s").unwrap();
    let b = semantic_parts(Api::ChatCompletions, body("https://x/2.png").as_bytes(), "m", "s").unwrap();
    assert_eq!(a.text, "What is this?");
    assert_ne!(a.context, b.context);
}
