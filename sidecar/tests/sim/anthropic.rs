//! The Anthropic Messages dialect: `/v1/messages` plain and streamed (events in the documented
//! order), stop sequences, tool use, tool results, `count_tokens` and errors in Anthropic's
//! envelope.

use serde_json::{json, Value};

use super::{args, chat_body, metric, testdata, Sim};
use ferrogate_sidecar::sim::SimArgs;

const VERSION: &str = "2023-06-01";

fn messages_body(user: &str, max_tokens: u32) -> Value {
    json!({
        "model": "sim-small",
        "max_tokens": max_tokens,
        "system": "be brief",
        "messages": [{"role": "user", "content": user}],
    })
}

impl Sim {
    /// `POST /v1/messages` (or another Anthropic path) with the version header.
    async fn anthropic(&self, path: &str, body: &Value) -> reqwest::Response {
        let request = self.post(path, body).header("anthropic-version", VERSION).header("x-api-key", "sk-ant-test");
        request.send().await.unwrap()
    }

    async fn message(&self, body: &Value) -> Value {
        let response = self.anthropic("/v1/messages", body).await;
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// A streamed answer as `(event name, data)` pairs, checking the content type and that
    /// every event's `type` is its name.
    async fn message_events(&self, body: &Value) -> Vec<(String, Value)> {
        let mut body = body.clone();
        body["stream"] = json!(true);
        let response = self.anthropic("/v1/messages", &body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let text = response.text().await.unwrap();
        let events: Vec<(String, Value)> = text
            .split("\n\n")
            .filter(|frame| !frame.is_empty())
            .map(|frame| {
                let (event, data) = frame.split_once('\n').unwrap();
                let name = event.strip_prefix("event: ").unwrap().to_owned();
                (name, serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap())
            })
            .collect();
        assert!(events.iter().all(|(name, data)| data["type"] == name.as_str()), "{events:?}");
        events
    }
}

fn names(events: &[(String, Value)]) -> Vec<&str> {
    events.iter().map(|(name, _)| name.as_str()).collect()
}

/// The documented event order with `deltas` content_block_delta events.
fn expected_order(deltas: usize) -> Vec<&'static str> {
    let mut order = vec!["message_start", "content_block_start", "ping"];
    order.extend(std::iter::repeat_n("content_block_delta", deltas));
    order.extend(["content_block_stop", "message_delta", "message_stop"]);
    order
}

#[tokio::test]
async fn message_has_the_documented_shape_and_the_openai_text() {
    let sim = Sim::start(SimArgs::default()).await;
    let message = sim.message(&messages_body("what is rust", 5)).await;
    assert!(message["id"].as_str().unwrap().starts_with("msg_"), "{message}");
    assert_eq!((message["type"].as_str(), message["role"].as_str()), (Some("message"), Some("assistant")));
    assert_eq!(message["model"], "sim-small");
    assert_eq!(message["stop_reason"], "max_tokens");
    assert_eq!(message["stop_sequence"], Value::Null);
    let usage =
        json!({"input_tokens": 16, "output_tokens": 5, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    assert_eq!(message["usage"], usage);
    // The same conversation gets the same text over OpenAI.
    let chat = sim.post_json("/v1/chat/completions", &chat_body("what is rust", 5)).await;
    let text = chat["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(message["content"], json!([{"type": "text", "text": text}]));

    let full = sim.message(&messages_body("what is rust", 1024)).await;
    assert_eq!((full["stop_reason"].as_str(), full["usage"]["output_tokens"].as_u64()), (Some("end_turn"), Some(16)));
}

#[tokio::test]
async fn stream_events_come_in_the_documented_order() {
    let sim = Sim::start(SimArgs::default()).await;
    let body = messages_body("stream me", 5);
    let plain = sim.message(&body).await;
    let events = sim.message_events(&body).await;
    assert_eq!(names(&events), expected_order(5));

    let start = &events[0].1["message"];
    assert_eq!(start["id"].as_str().map(|id| id.starts_with("msg_")), Some(true));
    assert_eq!((start["content"].clone(), start["stop_reason"].clone()), (json!([]), Value::Null));
    // (2 words + 4) + (2 words + 4) + 3: the input usage comes first.
    assert_eq!(start["usage"]["input_tokens"], 15);
    assert_eq!(start["usage"]["input_tokens"], plain["usage"]["input_tokens"]);
    assert_eq!(
        events[1].1,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    );
    let text: String = events[3..8]
        .iter()
        .map(|(_, data)| {
            assert_eq!((data["index"].as_u64(), data["delta"]["type"].as_str()), (Some(0), Some("text_delta")));
            data["delta"]["text"].as_str().unwrap()
        })
        .collect();
    assert_eq!(text, plain["content"][0]["text"].as_str().unwrap());
    assert_eq!(events[8].1, json!({"type": "content_block_stop", "index": 0}));
    let delta = &events[9].1;
    assert_eq!(delta["delta"], json!({"stop_reason": "max_tokens", "stop_sequence": null}));
    assert_eq!(delta["usage"]["output_tokens"], 5);
}

#[tokio::test]
async fn stop_sequences_end_the_text_and_are_reported() {
    let sim = Sim::start(SimArgs::default()).await;
    let body = messages_body("stop early", 1024);
    let full = sim.message(&body).await["content"][0]["text"].as_str().unwrap().to_owned();
    let words: Vec<&str> = full.split(' ').collect();
    let sequence = format!(" {} {}", words[3], words[4]);
    let kept = &full[..full.find(&sequence).unwrap()];
    let mut stopping = body.clone();
    stopping["stop_sequences"] = json!(["never-generated", sequence]);
    let message = sim.message(&stopping).await;
    assert_eq!(message["content"][0]["text"], kept);
    assert_eq!(
        (message["stop_reason"].as_str(), message["stop_sequence"].as_str()),
        (Some("stop_sequence"), Some(sequence.as_str()))
    );
    let events = sim.message_events(&stopping).await;
    assert_eq!(events[events.len() - 2].1["delta"]["stop_sequence"], sequence.as_str());
}

#[tokio::test]
async fn tools_are_called_with_arguments_from_the_schema() {
    let sim = Sim::start(SimArgs::default()).await;
    let body = testdata("anthropic-tools.json");
    let message = sim.message(&body).await;
    assert_eq!(message["stop_reason"], "tool_use");
    let block = &message["content"][0];
    assert_eq!((block["type"].as_str(), block["name"].as_str()), (Some("tool_use"), Some("get_weather")));
    assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
    assert_eq!(block["input"], testdata("tool-arguments.json"));

    let events = sim.message_events(&body).await;
    let deltas = events.iter().filter(|(name, _)| name == "content_block_delta").count();
    assert_eq!(names(&events), expected_order(deltas));
    let opening = &events[1].1["content_block"];
    assert_eq!((opening["type"].as_str(), opening["input"].clone()), (Some("tool_use"), json!({})));
    let partial: String = events[3..3 + deltas]
        .iter()
        .map(|(_, data)| {
            assert_eq!(data["delta"]["type"], "input_json_delta");
            data["delta"]["partial_json"].as_str().unwrap()
        })
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), testdata("tool-arguments.json"));
    let delta = &events[events.len() - 2].1;
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], message["usage"]["output_tokens"]);
}

#[tokio::test]
async fn tool_results_are_answered_in_text_and_tool_choice_is_honoured() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = testdata("anthropic-tools.json");
    let call = sim.message(&body).await["content"][0].clone();
    let messages = body["messages"].as_array_mut().unwrap();
    messages.push(json!({"role": "assistant", "content": [call.clone()]}));
    let result = json!({"type": "tool_result", "tool_use_id": call["id"], "content": "21 degrees and sunny"});
    messages.push(json!({"role": "user", "content": [result]}));
    let message = sim.message(&body).await;
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["content"][0]["text"], "The tool returned: 21 degrees and sunny");

    let mut named = testdata("anthropic-tools.json");
    named["tool_choice"] = json!({"type": "tool", "name": "get_time"});
    let block = sim.message(&named).await["content"][0].clone();
    assert_eq!((block["name"].as_str(), block["input"].clone()), (Some("get_time"), json!({})));
    named["tool_choice"] = json!({"type": "none"});
    assert_eq!(sim.message(&named).await["content"][0]["type"], "text");
}

async fn anthropic_error(response: reqwest::Response, status: u16, kind: &str) -> String {
    assert_eq!(response.status(), status);
    let error: Value = response.json().await.unwrap();
    assert_eq!((error["type"].as_str(), error["error"]["type"].as_str()), (Some("error"), Some(kind)), "{error}");
    error["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn errors_use_anthropic_envelope() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = messages_body("x", 5);
    body.as_object_mut().unwrap().remove("max_tokens");
    let message = anthropic_error(sim.anthropic("/v1/messages", &body).await, 400, "invalid_request_error").await;
    assert_eq!(message, "max_tokens: Field required");

    let unversioned = sim.post("/v1/messages", &messages_body("x", 5)).send().await.unwrap();
    let message = anthropic_error(unversioned, 400, "invalid_request_error").await;
    assert_eq!(message, "anthropic-version: header is required");

    let mut leaked = messages_body("x", 5);
    leaked["stream_options"] = json!({"include_usage": true});
    let message = anthropic_error(sim.anthropic("/v1/messages", &leaked).await, 400, "invalid_request_error").await;
    assert_eq!(message, "stream_options: Extra inputs are not permitted");

    let mut unknown = messages_body("x", 5);
    unknown["model"] = json!("claude-nope");
    anthropic_error(sim.anthropic("/v1/messages", &unknown).await, 404, "not_found_error").await;
    anthropic_error(sim.anthropic("/v1/messages/nope", &unknown).await, 404, "not_found_error").await;

    let overloaded = sim.post("/v1/messages", &messages_body("x", 5)).header("x-sim-status", "529").send().await;
    anthropic_error(overloaded.unwrap(), 529, "overloaded_error").await;
    let limited = sim.post("/v1/messages", &messages_body("x", 5)).header("x-sim-status", "429").send().await;
    let limited = limited.unwrap();
    assert_eq!(limited.headers()["retry-after"], "1");
    anthropic_error(limited, 429, "rate_limit_error").await;
}

#[tokio::test]
async fn count_tokens_and_metrics_match_the_messages_answer() {
    let sim = Sim::start(args(|a| a.output_tokens = 4)).await;
    let body = messages_body("count me please", 100);
    let count_body = json!({"model": "sim-small", "system": "be brief", "messages": body["messages"]});
    let counted: Value = sim.anthropic("/v1/messages/count_tokens", &count_body).await.json().await.unwrap();
    let message = sim.message(&body).await;
    assert_eq!(counted, json!({"input_tokens": message["usage"]["input_tokens"]}));
    sim.message_events(&body).await;

    let text = sim.get_text("/metrics").await;
    let prompt = message["usage"]["input_tokens"].as_f64().unwrap();
    assert_eq!(metric(&text, "vllm:prompt_tokens_total{"), 2.0 * prompt);
    assert_eq!(metric(&text, "vllm:generation_tokens_total{"), 8.0);
    assert_eq!(metric(&text, "vllm:request_success_total{finished_reason=\"stop\""), 2.0);
    assert_eq!(metric(&text, "vllm:num_requests_running{"), 0.0);
}
