//! End to end: `predicted_latency` in `ferrogate serve` (the real filter wasm, two worker VMs)
//! over a pool of two `ferrogate sim` replicas, one fast and one slow to its first token.
//!
//! While a VM has fewer than 8 successful samples of a replica it picks the least loaded
//! (sequential requests tie, so both replicas are sampled); once it has learned both, the
//! fast replica should take nearly every request. Shares are asserted with a wide margin, and
//! nothing about wall-clock time.

use serde_json::json;

#[path = "common/gateway.rs"]
mod gateway_helper;
use gateway_helper::{gateway, pool};
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

/// `n` streamed chat requests one after the other, each on a new connection (so they spread
/// over the worker VMs); the replica that answered each (`x-sim-endpoint`).
async fn run(base: &str, n: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let body = json!({
            "model": "chat", "stream": true, "max_tokens": 4,
            "messages": [{"role": "user", "content": format!("request {i}")}],
        });
        let resp = reqwest::Client::new().post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 200, "request {i}");
        let endpoint = resp.headers().get("x-sim-endpoint").unwrap().to_str().unwrap().to_string();
        let text = resp.text().await.unwrap();
        assert!(text.contains("[DONE]"), "request {i}: {text}");
        out.push(endpoint);
    }
    out
}

fn share(picks: &[String], replica: &str) -> f64 {
    picks.iter().filter(|p| *p == replica).count() as f64 / picks.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicted_latency_sends_most_requests_to_the_fast_replica() {
    let fast = start_sim(&["--ttft-ms", "5"]).await.to_string();
    let slow = start_sim(&["--ttft-ms", "100"]).await.to_string();
    let model = "  - { name: chat, strategy: predicted_latency, targets: [{provider: pool, model: sim-small}] }\n";
    let s = gateway(&[pool("pool", &[slow.clone(), fast.clone()])], model).await;
    // Warm-up: about 60 requests per VM, so each VM samples each replica 8 times (ties are
    // random, the slow one is busier) and then stops sending to the slow one.
    let warm = run(&s.base, 120).await;
    let warm_slow = warm.iter().filter(|p| **p == slow).count();
    assert!(warm_slow >= 8, "the slow replica is sampled while the models learn: {warm_slow} of 120");
    let measured = run(&s.base, 40).await;
    let fast_share = share(&measured, &fast);
    eprintln!("predicted_latency: slow replica {warm_slow} of 120 while learning, fast share after {fast_share:.2}");
    assert!(fast_share >= 0.8, "the fast replica takes the clear majority once learned: {fast_share:.2}");
    s.gateway.shutdown().await;
}
