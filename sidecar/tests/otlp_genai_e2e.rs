//! End to end: the OpenTelemetry GenAI attributes on `ferrogate serve`'s request spans, as an
//! OTLP collector stand-in receives them, for a plain, a streamed and a translated request
//! through the real binary in front of `ferrogate sim` (which speaks OpenAI and Anthropic).

use std::time::Duration;

use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;

#[path = "common/otlp.rs"]
mod otlp;
use otlp::{attr, int_attr, str_attr, Collector, Proc};

#[path = "common/sim.rs"]
mod sim_helper;

#[path = "common/wasm.rs"]
mod wasm;

/// `serve` with `chat` on an OpenAI-compatible sim and `claude` on the same sim speaking
/// Anthropic's API (so an OpenAI client's request to it is translated), exporting to a fresh
/// collector.
async fn gateway(dir: &std::path::Path) -> (Proc, String, Collector) {
    let sim = sim_helper::start_sim(&["--model", "sim-small", "--model", "sim-claude", "--itl-ms", "2"]).await;
    let yaml = format!(
        "providers:\n  - {{ name: local, kind: openai_compatible, base_url: 'http://{sim}' }}\n\
         \x20 - {{ name: claude, kind: anthropic, base_url: 'http://{sim}', api_key_env: SIM_KEY }}\n\
         models:\n  - {{ name: chat, targets: [{{ provider: local, model: sim-small }}] }}\n\
         \x20 - {{ name: claude-chat, targets: [{{ provider: claude, model: sim-claude }}] }}\n"
    );
    let config = dir.join("config.yaml");
    std::fs::write(&config, yaml).unwrap();
    let (config, filter) = (config.display().to_string(), wasm::filter_wasm().display().to_string());
    let (collector, endpoint) = Collector::start().await;
    let args = ["serve", "--config", &config, "--filter", &filter, "--workers", "1", "--listen", "127.0.0.1:0"];
    let args = [&args[..], &["--admin-listen", "127.0.0.1:0", "--sidecar-listen", "127.0.0.1:0"]].concat();
    let env =
        [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "200"), ("SIM_KEY", "k")];
    let mut proc = Proc::spawn(&args, &env);
    let base = format!("http://{}", proc.field("ferrogate serve listening", "addr").await);
    (proc, base, collector)
}

async fn chat(base: &str, model: &str, id: &str, stream: bool) {
    let body = json!({"model": model, "max_tokens": 24, "stream": stream,
                      "messages": [{"role": "user", "content": "Name three colours."}]});
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/chat/completions"))
        .header("x-request-id", id)
        .timeout(Duration::from_secs(20))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
}

fn double_attr(span: &Span, key: &str) -> Option<f64> {
    match attr(&span.attributes, key) {
        Some(AnyValue::DoubleValue(d)) => Some(*d),
        _ => None,
    }
}

async fn span_of(collector: &Collector, id: &str) -> Span {
    let ours = |s: &Span| {
        s.name == "ferrogate.request" && str_attr(&s.attributes, "http.response.header.x-request-id") == Some(id)
    };
    collector.wait_for(id, ours).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_spans_carry_the_genai_attributes() {
    let dir = std::env::temp_dir().join(format!("ferrogate-genai-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let (proc, base, collector) = gateway(&dir).await;
    chat(&base, "chat", "genai-plain", false).await;
    chat(&base, "chat", "genai-stream", true).await;
    chat(&base, "claude-chat", "genai-translated", false).await;
    for (id, model, provider, configured, response_model) in [
        ("genai-plain", "chat", "local", "local", "sim-small"),
        ("genai-stream", "chat", "local", "local", "sim-small"),
        ("genai-translated", "claude-chat", "anthropic", "claude", "sim-claude"),
    ] {
        let span = span_of(&collector, id).await;
        let a = &span.attributes;
        assert_eq!(str_attr(a, "gen_ai.operation.name"), Some("chat"), "{id}: {}", proc.log());
        assert_eq!(str_attr(a, "gen_ai.provider.name"), Some(provider), "{id}");
        assert_eq!(str_attr(a, "ferrogate.provider"), Some(configured), "{id}");
        assert_eq!(str_attr(a, "gen_ai.request.model"), Some(model), "{id}");
        assert_eq!(str_attr(a, "gen_ai.response.model"), Some(response_model), "{id}");
        assert_eq!(int_attr(a, "gen_ai.request.max_tokens"), Some(24), "{id}");
        assert!(int_attr(a, "gen_ai.usage.input_tokens").is_some_and(|n| n > 0), "{id}: {a:?}");
        assert!(int_attr(a, "gen_ai.usage.output_tokens").is_some_and(|n| n > 0), "{id}: {a:?}");
        assert!(double_attr(&span, "ferrogate.time_to_first_token").is_some_and(|s| s > 0.0 && s < 5.0), "{id}");
        let reasons = match attr(a, "gen_ai.response.finish_reasons") {
            Some(AnyValue::ArrayValue(list)) => list
                .values
                .iter()
                .filter_map(|v| match &v.value {
                    Some(AnyValue::StringValue(s)) => Some(s.clone()),
                    _ => None,
                })
                .collect::<Vec<_>>(),
            other => panic!("{id}: finish reasons {other:?}"),
        };
        assert_eq!(reasons.len(), 1, "{id}: {reasons:?}");
        // Content is never recorded.
        assert!(a.iter().all(|kv| !kv.key.contains("message") && !kv.key.contains("prompt")), "{id}: {a:?}");
    }
    drop(proc);
    let _ = std::fs::remove_dir_all(dir);
}
