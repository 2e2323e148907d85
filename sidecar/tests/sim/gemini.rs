//! The Gemini dialect: `generateContent`, `streamGenerateContent` with `alt=sse` (CRLF-framed
//! events) and without (a JSON array), function calls and responses, and errors in Google's
//! envelope.

use serde_json::{json, Value};

use super::{chat_body, testdata, Sim};
use ferrogate_sidecar::sim::SimArgs;

const GENERATE: &str = "/v1beta/models/sim-small:generateContent";
const STREAM: &str = "/v1beta/models/sim-small:streamGenerateContent";

fn gemini_body(user: &str, max_tokens: u32) -> Value {
    json!({
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "contents": [{"role": "user", "parts": [{"text": user}]}],
        "generationConfig": {"maxOutputTokens": max_tokens, "temperature": 0.7},
    })
}

impl Sim {
    async fn gemini(&self, path: &str, body: &Value) -> reqwest::Response {
        self.post(path, body).header("x-goog-api-key", "test-key").send().await.unwrap()
    }

    async fn generate(&self, body: &Value) -> Value {
        let response = self.gemini(GENERATE, body).await;
        assert_eq!(response.status(), 200);
        response.json().await.unwrap()
    }

    /// The responses of `streamGenerateContent?alt=sse`: `data: <json>` events, CRLF-framed.
    async fn stream_sse(&self, body: &Value) -> Vec<Value> {
        let response = self.gemini(&format!("{STREAM}?alt=sse&key=test-key"), body).await;
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let text = response.text().await.unwrap();
        assert!(text.ends_with("\r\n\r\n"), "{text:?}");
        text.split("\r\n\r\n")
            .filter(|frame| !frame.is_empty())
            .map(|frame| serde_json::from_str(frame.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }
}

fn part_text(response: &Value) -> &str {
    response["candidates"][0]["content"]["parts"][0]["text"].as_str().unwrap()
}

#[tokio::test]
async fn generate_content_has_the_documented_shape_and_the_openai_text() {
    let sim = Sim::start(SimArgs::default()).await;
    let answer = sim.generate(&gemini_body("what is rust", 5)).await;
    let candidate = &answer["candidates"][0];
    assert_eq!(candidate["content"]["role"], "model");
    assert_eq!((candidate["finishReason"].as_str(), candidate["index"].as_u64()), (Some("MAX_TOKENS"), Some(0)));
    let usage = json!({"promptTokenCount": 16, "candidatesTokenCount": 5, "totalTokenCount": 21});
    assert_eq!(answer["usageMetadata"], usage);
    assert_eq!(answer["modelVersion"], "sim-small");
    assert!(answer["responseId"].as_str().is_some_and(|id| !id.is_empty()));
    // The same conversation gets the same text over OpenAI.
    let chat = sim.post_json("/v1/chat/completions", &chat_body("what is rust", 5)).await;
    assert_eq!(part_text(&answer), chat["choices"][0]["message"]["content"].as_str().unwrap());

    let mut uncapped = gemini_body("what is rust", 0);
    uncapped.as_object_mut().unwrap().remove("generationConfig");
    let full = sim.generate(&uncapped).await;
    assert_eq!(full["candidates"][0]["finishReason"], "STOP");
    assert_eq!(full["usageMetadata"]["candidatesTokenCount"], 16);
}

#[tokio::test]
async fn sse_stream_carries_one_token_per_event_and_final_usage() {
    let sim = Sim::start(SimArgs::default()).await;
    let body = gemini_body("stream me", 5);
    let plain = sim.generate(&body).await;
    let chunks = sim.stream_sse(&body).await;
    assert_eq!(chunks.len(), 5);
    let text: String = chunks.iter().map(part_text).collect();
    assert_eq!(text, part_text(&plain));
    for (index, chunk) in chunks.iter().enumerate() {
        assert_eq!(chunk["responseId"], chunks[0]["responseId"]);
        assert_eq!(chunk["candidates"][0]["content"]["role"], "model");
        // usageMetadata is cumulative, as Gemini sends it.
        assert_eq!(chunk["usageMetadata"]["candidatesTokenCount"], index + 1);
        let last = index == chunks.len() - 1;
        assert_eq!(chunk["candidates"][0].get("finishReason").is_some(), last, "{chunk}");
    }
    assert_eq!(chunks[4]["candidates"][0]["finishReason"], "MAX_TOKENS");
    assert_eq!(chunks[4]["usageMetadata"], plain["usageMetadata"]);

    // Without alt=sse the same responses come as one JSON array.
    let response = sim.gemini(STREAM, &body).await;
    assert_eq!(response.headers()["content-type"], "application/json");
    let array: Vec<Value> = response.json().await.unwrap();
    assert_eq!(array.iter().map(part_text).collect::<String>(), text);
    assert_eq!(array[4]["usageMetadata"], plain["usageMetadata"]);
}

#[tokio::test]
async fn function_calls_use_the_schema_and_responses_get_text() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = testdata("gemini-tools.json");
    let answer = sim.generate(&body).await;
    let candidate = &answer["candidates"][0];
    assert_eq!(candidate["finishReason"], "STOP");
    let call = &candidate["content"]["parts"][0]["functionCall"];
    assert_eq!(call["name"], "get_weather");
    assert_eq!(call["args"], testdata("tool-arguments.json"));

    let chunks = sim.stream_sse(&body).await;
    assert_eq!(chunks.len(), 1, "Gemini streams a function call whole");
    assert_eq!(chunks[0]["candidates"][0]["content"]["parts"][0]["functionCall"], *call);
    assert_eq!(chunks[0]["usageMetadata"], answer["usageMetadata"]);

    let contents = body["contents"].as_array_mut().unwrap();
    contents.push(json!({"role": "model", "parts": [{"functionCall": call}]}));
    let response = json!({"functionResponse": {"name": "get_weather", "response": {"temp": 21}}});
    contents.push(json!({"role": "user", "parts": [response]}));
    let answer = sim.generate(&body).await;
    assert_eq!(part_text(&answer), "The tool returned: {\"temp\":21}");

    let mut forced = testdata("gemini-tools.json");
    forced["toolConfig"] = json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_time"]}});
    let call = sim.generate(&forced).await["candidates"][0]["content"]["parts"][0]["functionCall"].clone();
    assert_eq!(call, json!({"name": "get_time", "args": {}}));
    forced["toolConfig"] = json!({"functionCallingConfig": {"mode": "NONE"}});
    assert!(sim.generate(&forced).await["candidates"][0]["content"]["parts"][0]["text"].is_string());
}

#[tokio::test]
async fn json_output_follows_the_response_schema() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut body = gemini_body("give me json", 100);
    let schema = json!({"type": "OBJECT", "properties": {"name": {"type": "STRING"}, "n": {"type": "INTEGER"}}, "required": ["name", "n"]});
    body["generationConfig"] = json!({"responseMimeType": "application/json", "responseSchema": schema});
    let answer = sim.generate(&body).await;
    let value: Value = serde_json::from_str(part_text(&answer)).unwrap();
    assert_eq!(value, json!({"name": "sim", "n": 1}));
}

async fn google_error(response: reqwest::Response, code: u16, status: &str) -> String {
    assert_eq!(response.status(), code);
    let error: Value = response.json().await.unwrap();
    assert_eq!(
        (error["error"]["code"].as_u64(), error["error"]["status"].as_str()),
        (Some(u64::from(code)), Some(status))
    );
    error["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn errors_use_google_envelope() {
    let sim = Sim::start(SimArgs::default()).await;
    let mut leaked = gemini_body("x", 5);
    leaked["max_tokens"] = json!(5);
    let message = google_error(sim.gemini(GENERATE, &leaked).await, 400, "INVALID_ARGUMENT").await;
    assert!(message.contains("Unknown name \"max_tokens\""), "{message}");
    let empty = json!({"contents": []});
    google_error(sim.gemini(GENERATE, &empty).await, 400, "INVALID_ARGUMENT").await;

    let body = gemini_body("x", 5);
    let message =
        google_error(sim.gemini("/v1beta/models/gemini-nope:generateContent", &body).await, 404, "NOT_FOUND").await;
    assert!(message.starts_with("models/gemini-nope is not found"), "{message}");
    google_error(sim.gemini("/v1beta/models/sim-small:embedContent", &body).await, 404, "NOT_FOUND").await;
    google_error(sim.gemini("/v1beta/nothing", &body).await, 404, "NOT_FOUND").await;

    let limited = sim.post(GENERATE, &body).header("x-sim-status", "429").send().await.unwrap();
    assert_eq!(limited.headers()["retry-after"], "1");
    google_error(limited, 429, "RESOURCE_EXHAUSTED").await;
    let unavailable = sim.post(GENERATE, &body).header("x-sim-status", "503").send().await.unwrap();
    google_error(unavailable, 503, "UNAVAILABLE").await;
}
