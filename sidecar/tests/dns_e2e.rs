//! End to end: a pool whose endpoints come from DNS (`endpoints_dns`) in `ferrogate serve`.
//!
//! The provider's `base_url` is a closed port (tcpmux, never handed out), so a request can only reach the
//! sim through the endpoint the name resolved to. (How a pool follows changing answers is
//! tested against a scripted resolver in `services::dns`.)

use serde_json::json;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::gateway_flags;
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_from_dns_serves_through_the_resolved_endpoint() {
    let sim = start_sim(&[]).await;
    let provider = format!(
        "{{ name: pool, kind: openai_compatible, base_url: 'http://127.0.0.1:1', endpoints_dns: '127.0.0.1:{}' }}",
        sim.port()
    );
    let models = "  - { name: chat, targets: [{ provider: pool, model: sim-small }] }\n";
    let s = gateway_flags(&[provider], models, "", 2, &["--dns-refresh-ms", "100"]).await;
    let client = reqwest::Client::new();
    let body = json!({"model": "chat", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]});
    let mut answered = None;
    // The first snapshot has no endpoints yet (base_url, unreachable, serves): the resolved
    // one follows within a refresh.
    for _ in 0..100 {
        let resp = client.post(format!("{}/v1/chat/completions", s.base)).json(&body).send().await.unwrap();
        if resp.status() == 200 {
            answered = resp.headers().get("x-sim-endpoint").map(|v| v.to_str().unwrap().to_string());
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(answered.as_deref(), Some(sim.to_string().as_str()), "served by the resolved endpoint");
    s.gateway.shutdown().await;
}
