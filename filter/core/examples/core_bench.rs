//! Native timing of the core pieces on the request path, to see which ones dominate the
//! filter's per-request cost. `cargo run --release -p ferrogate-core --example core_bench`.

use std::hint::black_box;
use std::time::Instant;

use ferrogate_core::auth::{extract_key, Caller};
use ferrogate_core::config::{Config, RawConfig};
use ferrogate_core::route::{route, Api};
use ferrogate_core::usage::{cost_micro_usd, ensure_include_usage, Record, Tracker, UsageDialect};

const CONFIG: &str = r#"{
  "providers":[{"name":"local","kind":"openai_compatible","base_url":"http://127.0.0.1:8000"}],
  "models":[{"name":"chat","targets":[{"provider":"local","model":"sim-small"}]}],
  "groups":[{"name":"dev","models":["chat"]}],
  "keys":[{"name":"alice","digest":"sha256:099295a3784e1bd368dc348843a7398c1931b6b8ec2504c73e91ed2040bdc46c","groups":["dev"]}],
  "pricing":{"sim-small":{"input_per_mtok":0.1,"output_per_mtok":0.4}}}"#;
const BODY: &[u8] = br#"{"model":"chat","messages":[{"role":"user","content":"ping"}],"max_tokens":4}"#;
const ANSWER: &[u8] = br#"{"id":"x","object":"chat.completion","created":0,"model":"sim-small","choices":[{"index":0,"message":{"role":"assistant","content":"pong"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;

fn time(name: &str, n: u32, mut f: impl FnMut()) {
    for _ in 0..n / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..n {
        f();
    }
    println!("{name:<22} {:>8.3} µs", start.elapsed().as_secs_f64() * 1e6 / f64::from(n));
}

fn main() {
    let raw: RawConfig = serde_json::from_str(CONFIG).unwrap_or_default();
    let Ok(config) = Config::try_from(raw) else { return };
    let n = 200_000;
    time("authenticate", n, || {
        let key = extract_key(Some(b"Bearer sk-alice"), None, None);
        black_box(config.authenticate(black_box(key), 0).is_ok());
    });
    time("route", n, || {
        black_box(route(&config, Caller::Key(0), Api::ChatCompletions, "/v1/chat/completions", BODY, 1).is_ok());
    });
    time("ensure_include_usage", n, || {
        black_box(ensure_include_usage(black_box(BODY)).is_ok());
    });
    time("tracker (JSON answer)", n, || {
        let mut t = Tracker::new(UsageDialect::OpenAi, false, false);
        black_box(t.on_end(black_box(ANSWER)));
        black_box(t.finish());
    });
    time("record + json line", n, || {
        let usage = ferrogate_core::usage::Usage { prompt_tokens: 5, completion_tokens: 1, cached_tokens: 0 };
        let mut r = Record { request_id: "0b6f4a4e".into(), model_requested: "chat".into(), ..Record::default() };
        r.set_usage(&usage);
        r.cost_micro_usd = cost_micro_usd(&config.pricing, "local", "sim-small", &usage);
        black_box(r.to_json_line());
    });
}
