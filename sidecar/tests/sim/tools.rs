//! Tool calling over OpenAI Chat Completions (plain and streamed `tool_calls`), structured
//! output, and the rule shared by every dialect: the first declared tool is called with
//! arguments built from its schema unless the last turn is a tool result.

use serde_json::{json, Value};

use super::{chat_body, sse_data, testdata, Sim};
use ferrogate_sidecar::sim::SimArgs;

/// The chunks of a streamed chat completion (without `[DONE]`).
async fn chat_chunks(sim: &Sim, body: &Value) -> Vec<Value> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let text = sim.post("/v1/chat/completions", &body).send().await.unwrap().text().await.unwrap();
    let frames = sse_data(&text);
    assert_eq!(frames.last().unwrap(), "[DONE]");
    frames[..frames.len() - 1].iter().map(|f| serde_json::from_str(f).unwrap()).collect()
}

#[tokio::test]
async fn chat_calls_the_first_tool_with_schema_arguments() {
    let sim = Sim::start(SimArgs::default()).await;
    let answer = sim.post_json("/v1/chat/completions", &testdata("openai-tools.json")).await;
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(
        (calls[0]["type"].as_str(), calls[0]["function"]["name"].as_str()),
        (Some("function"), Some("get_weather"))
    );
    let arguments: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, testdata("tool-arguments.json"));
    assert!(answer["usage"]["completion_tokens"].as_u64().unwrap() > 1);
}

#[tokio::test]
async fn streamed_tool_call_fragments_reassemble_to_the_arguments() {
    let sim = Sim::start(SimArgs::default()).await;
    let body = testdata("openai-tools.json");
    let plain = sim.post_json("/v1/chat/completions", &body).await;
    let chunks = chat_chunks(&sim, &body).await;
    let head = &chunks[0]["choices"][0]["delta"];
    assert_eq!((head["role"].as_str(), head["content"].clone()), (Some("assistant"), Value::Null));
    let opening = &head["tool_calls"][0];
    assert_eq!((opening["index"].as_u64(), opening["type"].as_str()), (Some(0), Some("function")));
    assert_eq!(opening["function"], json!({"name": "get_weather", "arguments": ""}));
    assert!(opening["id"].as_str().unwrap().starts_with("call_"));

    let (finish, usage) = (&chunks[chunks.len() - 2], &chunks[chunks.len() - 1]);
    let fragments = &chunks[1..chunks.len() - 2];
    assert!(fragments.len() > 1);
    let arguments: String = fragments
        .iter()
        .map(|chunk| {
            let call = &chunk["choices"][0]["delta"]["tool_calls"][0];
            assert_eq!(call["index"], 0);
            call["function"]["arguments"].as_str().unwrap()
        })
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&arguments).unwrap(), testdata("tool-arguments.json"));
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(usage["usage"], plain["usage"]);
    assert_eq!(usage["usage"]["completion_tokens"], fragments.len());
}

#[tokio::test]
async fn tool_results_get_text_and_tool_choice_is_honoured() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = testdata("openai-tools.json");
    let call = sim.post_json("/v1/chat/completions", &body).await["choices"][0]["message"].clone();
    let id = call["tool_calls"][0]["id"].clone();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(call);
    messages.push(json!({"role": "tool", "tool_call_id": id, "content": "21 degrees and sunny"}));
    let answer = sim.post_json("/v1/chat/completions", &body).await;
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["choices"][0]["message"]["content"], "The tool returned: 21 degrees and sunny");

    // "required" calls even after a result; a named tool is called; "none" answers in text.
    body["tool_choice"] = json!("required");
    assert_eq!(sim.post_json("/v1/chat/completions", &body).await["choices"][0]["finish_reason"], "tool_calls");
    let mut named = testdata("openai-tools.json");
    named["tool_choice"] = json!({"type": "function", "function": {"name": "get_time"}});
    let call = sim.post_json("/v1/chat/completions", &named).await["choices"][0]["message"]["tool_calls"][0].clone();
    assert_eq!(call["function"], json!({"name": "get_time", "arguments": "{}"}));
    named["tool_choice"] = json!("none");
    let text = sim.post_json("/v1/chat/completions", &named).await;
    assert!(text["choices"][0]["message"]["content"].is_string());
    named["tool_choice"] = json!({"type": "function", "function": {"name": "undeclared"}});
    assert_eq!(sim.post("/v1/chat/completions", &named).send().await.unwrap().status(), 400);
}

#[tokio::test]
async fn json_schema_output_and_stop_apply_to_chat() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = chat_body("give me json", 100);
    let schema = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]});
    body["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": true}});
    let answer = sim.post_json("/v1/chat/completions", &body).await;
    assert_eq!(answer["choices"][0]["message"]["content"], "{\"ok\":true}");

    let full = sim.post_json("/v1/chat/completions", &chat_body("stop here", 100)).await;
    let text = full["choices"][0]["message"]["content"].as_str().unwrap().to_owned();
    let stop = text.split(' ').nth(2).unwrap().to_owned();
    let mut stopping = chat_body("stop here", 100);
    stopping["stop"] = json!(stop);
    let stopped = sim.post_json("/v1/chat/completions", &stopping).await;
    assert_eq!(stopped["choices"][0]["message"]["content"], &text[..text.find(&stop).unwrap()]);
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn every_dialect_calls_the_same_tool_with_the_same_arguments() {
    let sim = Sim::start(SimArgs::default()).await;
    let openai = sim.post_json("/v1/chat/completions", &testdata("openai-tools.json")).await;
    let openai = &openai["choices"][0]["message"]["tool_calls"][0]["function"];
    let anthropic = sim
        .post("/v1/messages", &testdata("anthropic-tools.json"))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    let anthropic: Value = anthropic.json().await.unwrap();
    let gemini = sim.post_json("/v1beta/models/sim-small:generateContent", &testdata("gemini-tools.json")).await;
    let gemini = &gemini["candidates"][0]["content"]["parts"][0]["functionCall"];
    let expected = testdata("tool-arguments.json");
    assert_eq!(serde_json::from_str::<Value>(openai["arguments"].as_str().unwrap()).unwrap(), expected);
    assert_eq!(anthropic["content"][0]["input"], expected);
    assert_eq!(gemini["args"], expected);
    assert!([&openai["name"], &anthropic["content"][0]["name"], &gemini["name"]].iter().all(|n| **n == "get_weather"));
}
