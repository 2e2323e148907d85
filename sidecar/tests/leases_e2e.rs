//! Exact limits across replicas by leases, end to end: two `ferrogate serve` processes sharing
//! a private `redis-server`, 40 concurrent requests split over both, against a request limit,
//! a token limit and a USD budget: exactly the limit is admitted. The sim holds every answer
//! 5 s, so every admission is decided before any request settles (what the reservation
//! estimate would otherwise correct), and a request may wait up to 10 s for its grant
//! (`max_wait_ms`; the default, under load, is `leases_loaded_e2e.rs`). And a replica that dies
//! holding a lease: its capacity stays counted until the window slides past it, then comes
//! back.
//!
//! Needs `redis-server` on the PATH (Debian's `redis-server` package; `.ci/run` installs it).

use std::time::{Duration, Instant};

use serde_json::json;

#[path = "common/replicas.rs"]
mod replicas;
#[path = "common/sim.rs"]
mod sim_helper;

use replicas::{config_with, serve, tmpdir, wait_synced, Redis, Serve, KEY};

/// The test's chat request, as sent (the reservation estimate reads these bytes).
fn body() -> Vec<u8> {
    let body = json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    serde_json::to_vec(&body).unwrap()
}

/// What one request reserves: its estimated prompt plus its completion allowance.
fn reserved_tokens() -> u64 {
    let (prompt, completion) = ferrogate_core::limits::estimate::estimate(&body());
    prompt + completion
}

/// Sends one request whose answer the sim holds for `hold_ms`; the status and `Retry-After`.
async fn held_chat(client: &reqwest::Client, s: &Serve, hold_ms: u64) -> (u16, Option<String>) {
    let resp = client
        .post(format!("{}/v1/chat/completions", s.base))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .header("x-sim-ttft-ms", hold_ms.to_string())
        .body(body())
        .send()
        .await;
    match resp {
        Ok(r) => {
            let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
            (r.status().as_u16(), retry)
        }
        Err(_) => (0, None),
    }
}

/// How long the sim holds each answer: longer than the burst's admissions take.
const HOLD_MS: u64 = 5_000;

/// The limits block of the exactness tests: `limit` and the longest wait for a grant.
fn exact(limit: &str) -> String {
    format!("{{ {limit}, max_wait_ms: 10000 }}")
}

/// `n` requests at once, alternating between the replicas.
async fn burst(replicas: &[&Serve], n: usize) -> Vec<(u16, Option<String>)> {
    let client = reqwest::Client::new();
    let calls = (0..n).map(|i| held_chat(&client, replicas[i % replicas.len()], HOLD_MS));
    futures_util::future::join_all(calls).await
}

/// Two replicas under `limits` (and `extra` YAML), synced and with their filters' feeds
/// polled (so both admit by leases); then a burst of 40.
async fn burst_over_two(limits: &str, extra: &str) -> (usize, Vec<(u16, Option<String>)>) {
    let redis = Redis::start();
    let sim = sim_helper::start_sim(&[]).await;
    let dir = tmpdir();
    let cfg = config_with(&dir, sim, "exact", limits, "", extra);
    let (a, b) = (serve(&cfg, &redis), serve(&cfg, &redis));
    wait_synced(&a, true).await;
    wait_synced(&b, true).await;
    // The filters poll the feed every 250 ms: let both learn that leases are on.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let all = burst(&[&a, &b], 40).await;
    let admitted = all.iter().filter(|(s, _)| *s == 200).count();
    // Every admission waited for a grant: no lease was held before the burst.
    let mut waits = 0;
    for s in [&a, &b] {
        let text = reqwest::get(format!("{}/metrics", s.admin)).await.unwrap().text().await.unwrap();
        let line = text.lines().find(|l| l.starts_with("ferrogate_lease_asks_total{kind=\"wait\"}"));
        waits += line.and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok()).unwrap_or(0);
    }
    assert!(waits >= admitted as u64, "{waits} lease waits answered for {admitted} admitted");
    let _ = std::fs::remove_dir_all(dir);
    (admitted, all)
}

fn check_refusals(all: &[(u16, Option<String>)], status: u16) {
    for (s, retry) in all.iter().filter(|(s, _)| *s != 200) {
        assert_eq!(*s, status, "{all:?}");
        if status == 429 {
            assert!(retry.as_deref().and_then(|r| r.parse::<u64>().ok()).is_some_and(|r| r >= 1), "{all:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_limit_holds_exactly_over_two_replicas() {
    let (admitted, all) = burst_over_two(&exact("requests_per_minute: 10"), "").await;
    assert_eq!(admitted, 10, "{all:?}");
    check_refusals(&all, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_limit_holds_exactly_over_two_replicas() {
    let limit = 10 * reserved_tokens();
    let (admitted, all) = burst_over_two(&exact(&format!("tokens_per_minute: {limit}")), "").await;
    assert_eq!(admitted, 10, "tokens_per_minute {limit}, {} reserved each: {all:?}", reserved_tokens());
    check_refusals(&all, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_usd_budget_holds_exactly_over_two_replicas() {
    // 1,000 micro-USD per token: a request reserves 1,000 × its tokens.
    let pricing = "pricing:\n  sim-small: { input_per_mtok: 1000, output_per_mtok: 1000 }\n";
    let budget = (10 * reserved_tokens()) as f64 / 1000.0;
    let (admitted, all) = burst_over_two(&exact(&format!("cost_usd_per_day: {budget}")), pricing).await;
    assert_eq!(admitted, 10, "budget {budget} USD: {all:?}");
    check_refusals(&all, 402);
}

/// A replica dies holding the whole limit: the other one is refused for the rest of that
/// minute and admits again once the window slides past the dead one's grants (the minute after,
/// as the previous bucket's share decays).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_replicas_lease_comes_back_with_the_window() {
    let redis = Redis::start();
    let sim = sim_helper::start_sim(&[]).await;
    let dir = tmpdir();
    let cfg = config_with(&dir, sim, "dies", "{ requests_per_minute: 4 }", "", "");
    let (mut a, b) = (serve(&cfg, &redis), serve(&cfg, &redis));
    wait_synced(&a, true).await;
    wait_synced(&b, true).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    // Keep clear of a minute's end, so the whole run of `a` falls in one bucket.
    let into_minute = |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() % 60_000;
    while into_minute(std::time::SystemTime::now()) > 50_000 {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took: Vec<_> = burst(&[&a], 8).await;
    assert_eq!(took.iter().filter(|(s, _)| *s == 200).count(), 4, "{took:?}");
    let boundary = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() / 60_000 + 1;
    let _ = a.child.kill();
    let _ = a.child.wait();
    let client = reqwest::Client::new();
    assert_eq!(held_chat(&client, &b, 0).await.0, 429, "a's grants still count");
    // Back once the window has slid far enough: 4 × (time left of the minute) / 60 s ≤ 3.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (status, _) = held_chat(&client, &b, 0).await;
        let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
        if status == 200 {
            assert!(now_ms >= boundary * 60_000 + 14_000, "admitted before a's grants slid out ({now_ms})");
            break;
        }
        assert_eq!(status, 429);
        assert!(Instant::now() < deadline, "the dead replica's capacity never came back");
        tokio::time::sleep(Duration::from_millis(1_000)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
