//! Cross-replica limits end to end: two `ferrogate serve` processes (the real binary, the
//! real filter wasm) sharing a private `redis-server` that the test starts, stops and
//! restarts, in front of an in-process `ferrogate sim`.
//!
//! Needs `redis-server` on the PATH (Debian's `redis-server` package; `.ci/run` installs it).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "common/replicas.rs"]
mod replicas;
#[path = "common/sim.rs"]
mod sim_helper;

use replicas::{chat, config, drive, limits, serve, tmpdir, wait_synced, Redis};

/// Two replicas, each driven at 4 requests/s against a shared `requests_per_day: 40`, admit
/// exactly the limit (leases), and both sidecars' views agree.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_a_limit_within_the_bound() {
    let redis = Redis::start();
    let sim = sim_helper::start_sim(&[]).await;
    let dir = tmpdir();
    let cfg = config(&dir, sim, "shared", "{ requests_per_day: 40 }", "");
    let (a, b) = (serve(&cfg, &redis), serve(&cfg, &redis));
    wait_synced(&a, true).await;
    wait_synced(&b, true).await;
    let gap = Duration::from_millis(250);
    let (ra, rb) = tokio::join!(drive(&a, 32, gap), drive(&b, 32, gap));
    let all: Vec<u16> = ra.iter().chain(&rb).copied().collect();
    let admitted = all.iter().filter(|&&s| s == 200).count();
    eprintln!("admitted {admitted} of 64 (limit 40): a {ra:?}, b {rb:?}");
    assert!(all.iter().all(|&s| s == 200 || s == 429), "{all:?}");
    assert_eq!(admitted, 40, "admitted {admitted} of 64 under a shared limit of 40: {ra:?} {rb:?}");
    // Both sidecars see every replica's consumption once the last records are folded.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for s in [&a, &b] {
        let seen = limits(s).await;
        assert_eq!(seen["limits"][0]["used"], json!(admitted), "{seen}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Redis stopped mid-run: requests keep flowing (fail-open), the sidecars say they are out of
/// sync, no usage row is lost; once it is back (empty) the sidecars write their amounts
/// again and the counters hold every request, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_fails_open_and_loses_nothing() {
    let mut redis = Redis::start();
    let sim = sim_helper::start_sim(&[]).await;
    let dir = tmpdir();
    let cfg = config(&dir, sim, "outage", "{ requests_per_day: 1000 }", "");
    let (a, b) = (serve(&cfg, &redis), serve(&cfg, &redis));
    wait_synced(&a, true).await;
    let gap = Duration::from_millis(20);
    let (ra, rb) = tokio::join!(drive(&a, 10, gap), drive(&b, 10, gap));
    redis.stop();
    wait_synced(&a, false).await;
    let (ra2, rb2) = tokio::join!(drive(&a, 15, gap), drive(&b, 5, gap));
    // Meanwhile `a` shows what it counted itself (25), not the last shared view (20) or 0.
    let deadline = Instant::now() + Duration::from_secs(10);
    while limits(&a).await["limits"][0]["used"] != json!(25) {
        assert!(Instant::now() < deadline, "used during the outage: {}", limits(&a).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    redis.restart();
    wait_synced(&a, true).await;
    wait_synced(&b, true).await;
    let statuses: Vec<u16> = [ra, rb, ra2, rb2].concat();
    assert!(statuses.iter().all(|&s| s == 200), "fail-open: {statuses:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let used = limits(&a).await["limits"][0]["used"].clone();
        if used == json!(40) {
            break;
        }
        assert!(Instant::now() < deadline, "counters after the outage: {used}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for s in [&a, &b] {
        let usage: Value = reqwest::get(format!("{}/api/v1/usage", s.admin)).await.unwrap().json().await.unwrap();
        let want = if std::ptr::eq(s, &a) { 25 } else { 15 };
        assert_eq!(usage["totals"]["requests"], json!(want), "every request has its usage row: {usage}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `redis.fail_closed`: while the shared counters are out of reach, requests under limits get
/// 503; when Redis is back they are admitted again, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_closed_refuses_while_redis_is_away() {
    let mut redis = Redis::start();
    let sim = sim_helper::start_sim(&[]).await;
    let dir = tmpdir();
    let cfg = config(&dir, sim, "closed", "{ requests_per_day: 1000 }", ", fail_closed: true");
    let a = serve(&cfg, &redis);
    wait_synced(&a, true).await;
    let client = reqwest::Client::new();
    // The filter's view turns synced on its first feed poll after the sidecar's read.
    let deadline = Instant::now() + Duration::from_secs(10);
    while chat(&client, &a).await != 200 {
        assert!(Instant::now() < deadline, "never admitted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    redis.stop();
    let deadline = Instant::now() + Duration::from_secs(15);
    while chat(&client, &a).await != 503 {
        assert!(Instant::now() < deadline, "never refused while Redis was away");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    while chat(&client, &a).await != 200 {
        assert!(Instant::now() < deadline, "not admitted again after Redis came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
