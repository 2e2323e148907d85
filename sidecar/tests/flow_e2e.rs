//! Flow control end to end: `ferrogate serve` (two worker VMs, one shared queue) in front of
//! in-process sims that run at most `--max-running` requests each. The engines never hold more
//! than the configured concurrency while 50 requests arrive at once; a high-priority key's
//! request overtakes a queued batch; two keys of one band alternate; a full band is refused
//! with 429 and a request past its time to live with 503, both with `Retry-After`; a client
//! that goes away while queued leaves its place; a released slot wakes the next in line (a
//! push through the proxy's shared queues, counted as `woken`, not a timer).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "common/replicas.rs"]
mod replicas;
#[path = "common/sim.rs"]
mod sim_helper;

use replicas::{serve_env, tmpdir, Serve};

/// Keys: (name, secret, priority).
const KEYS: [(&str, &str, i32); 3] =
    [("batch", "fg-flow-batch", 0), ("batch2", "fg-flow-batch2", 0), ("interactive", "fg-flow-interactive", 10)];

/// A pool of `sims` with `max_concurrency` per endpoint, and `flow_control`; `limits` on every
/// key and `tail` appended, when not empty.
fn config(dir: &std::path::Path, sims: &[SocketAddr], max_concurrency: u32, flow: &str) -> std::path::PathBuf {
    config_with(dir, sims, max_concurrency, flow, ("", ""))
}

fn config_with(
    dir: &std::path::Path,
    sims: &[SocketAddr],
    max_concurrency: u32,
    flow: &str,
    (limits, tail): (&str, &str),
) -> std::path::PathBuf {
    use sha2::Digest;
    let endpoints: Vec<String> = sims.iter().map(|s| format!("'{s}'")).collect();
    let keys: Vec<String> = KEYS
        .iter()
        .map(|(name, secret, priority)| {
            let digest = hex::encode(sha2::Sha256::digest(secret.as_bytes()));
            let limits = if limits.is_empty() { String::new() } else { format!(", limits: {limits}") };
            format!("  - {{ name: {name}, digest: 'sha256:{digest}', models: ['*'], priority: {priority}{limits} }}\n")
        })
        .collect();
    let yaml = format!(
        "providers:\n  - {{ name: pool, kind: openai_compatible, base_url: 'http://{}', endpoints: [{}], max_concurrency: {max_concurrency} }}\n\
         models:\n  - name: chat\n    strategy: least_loaded\n    targets: [{{ provider: pool, model: sim-small }}]\n    flow_control: {flow}\n\
         keys:\n{}{tail}",
        sims[0],
        endpoints.join(", "),
        keys.concat()
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The answer of one request: status, `Retry-After`, `x-ferrogate-queued-ms`, when it ended.
#[derive(Debug, Clone)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    queued_ms: Option<u64>,
    done: Instant,
}

/// One chat request as `key` (an index into [`KEYS`]) that the sim holds for `hold_ms`.
async fn chat(client: &reqwest::Client, base: &str, key: usize, hold_ms: u64) -> Answer {
    let body = json!({"model": "chat", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]});
    let resp = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(KEYS[key].1)
        .header("x-sim-ttft-ms", hold_ms.to_string())
        .json(&body)
        .send()
        .await;
    let header =
        |r: &reqwest::Response, name: &str| r.headers().get(name).and_then(|v| v.to_str().ok()).map(String::from);
    match resp {
        Ok(r) => {
            let (retry_after, queued) = (header(&r, "retry-after"), header(&r, "x-ferrogate-queued-ms"));
            let status = r.status().as_u16();
            let _ = r.bytes().await;
            Answer { status, retry_after, queued_ms: queued.and_then(|q| q.parse().ok()), done: Instant::now() }
        }
        Err(_) => Answer { status: 0, retry_after: None, queued_ms: None, done: Instant::now() },
    }
}

/// [`chat`] on its own task, so the test can watch the gateway while it waits.
fn spawn_chat(client: &reqwest::Client, s: &Serve, key: usize, hold_ms: u64) -> tokio::task::JoinHandle<Answer> {
    let (client, base) = (client.clone(), s.base.clone());
    tokio::spawn(async move { chat(&client, &base, key, hold_ms).await })
}

/// Waits until `s`'s queue for `chat` holds `n` requests in band 0 (its depth gauge).
async fn wait_queued(s: &Serve, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = reqwest::get(format!("{}/metrics", s.admin)).await.unwrap().text().await.unwrap();
        let depth = text
            .lines()
            .find_map(|l| l.strip_prefix("ferrogate_queue_depth{model=\"chat\",band=\"0\"} ")?.parse::<u64>().ok());
        // No gauge yet: nothing was ever queued.
        if depth.unwrap_or(0) == n {
            return;
        }
        assert!(Instant::now() < deadline, "the queue never held {n}: {depth:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the sim at `addr` runs a request.
async fn wait_running(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
        let running = text.lines().filter(|l| l.starts_with("vllm:num_requests_running{"));
        if running.filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).any(|r| r >= 1.0) {
            return;
        }
        assert!(Instant::now() < deadline, "the sim never ran a request");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The most requests the sim at `addr` held at once (running plus waiting).
async fn peak(addr: SocketAddr) -> u64 {
    let text = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    let peaks = text.lines().filter(|l| l.starts_with("sim:peak_requests{"));
    peaks.map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap()).max().unwrap_or_else(|| panic!("{text}"))
}

async fn setup(sims: usize, max_concurrency: u32, flow: &str) -> (Vec<SocketAddr>, Serve, std::path::PathBuf) {
    let mut addrs = Vec::new();
    for _ in 0..sims {
        addrs.push(sim_helper::start_sim(&["--max-running", &max_concurrency.to_string()]).await);
    }
    let dir = tmpdir();
    let cfg = config(&dir, &addrs, max_concurrency, flow);
    let s = serve_env(&cfg, &[]);
    (addrs, s, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_at_once_never_put_more_than_the_bound_on_the_engines() {
    let (sims, s, dir) = setup(2, 2, "{ max_queue: 100, queue_ttl_ms: 20000 }").await;
    let client = reqwest::Client::new();
    let answers = futures_util::future::join_all((0..50).map(|_| chat(&client, &s.base, 0, 100))).await;
    assert!(answers.iter().all(|a| a.status == 200), "{answers:?}");
    for sim in &sims {
        assert!(peak(*sim).await <= 2, "an engine held more than max_concurrency");
    }
    let queued = answers.iter().filter(|a| a.queued_ms.is_some()).count();
    assert!(queued >= 40, "most of the 50 waited at the gateway, and said so: {queued}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_high_priority_request_overtakes_a_queued_batch() {
    let (_sims, s, dir) = setup(1, 2, "{ max_queue: 100, queue_ttl_ms: 20000 }").await;
    let client = reqwest::Client::new();
    // Two batch requests run, six wait; then the interactive one arrives.
    let batch = futures_util::future::join_all((0..8).map(|_| chat(&client, &s.base, 0, 600)));
    let interactive = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        chat(&client, &s.base, 2, 600).await
    };
    let (batch, interactive) = tokio::join!(batch, interactive);
    assert!(batch.iter().chain([&interactive]).all(|a| a.status == 200));
    let later = batch.iter().filter(|a| a.done > interactive.done).count();
    assert!(later >= 5, "the interactive request went with the first free slot: {later} batch requests ended after it");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_keys_in_one_band_take_turns() {
    let (sims, s, dir) = setup(1, 1, "{ max_queue: 100, queue_ttl_ms: 20000 }").await;
    let client = reqwest::Client::new();
    // Key 0's first request holds the only slot long enough for the rest to queue behind it on
    // a loaded machine: three more of key 0, then, once those are queued, three of key 1
    // (waiting on the queue's gauge, not a sleep: a connection can be slow to start). Only
    // when all six wait does the slot free, so the band's turns decide the order.
    let mut first = vec![spawn_chat(&client, &s, 0, 5_000)];
    wait_running(sims[0]).await;
    first.extend((0..3).map(|_| spawn_chat(&client, &s, 0, 250)));
    wait_queued(&s, 3).await;
    let second: Vec<_> = (0..3).map(|_| spawn_chat(&client, &s, 1, 250)).collect();
    wait_queued(&s, 6).await;
    let mut a = Vec::new();
    for h in first {
        a.push(h.await.unwrap());
    }
    let mut b = Vec::new();
    for h in second {
        b.push(h.await.unwrap());
    }
    let mut ends: Vec<(Instant, usize)> = a.iter().map(|x| (x.done, 0)).chain(b.iter().map(|x| (x.done, 1))).collect();
    ends.sort();
    let order: Vec<usize> = ends.iter().map(|(_, k)| *k).collect();
    assert_eq!(order, [0, 0, 1, 0, 1, 0, 1], "round-robin between the two keys of the band");
    let _ = std::fs::remove_dir_all(dir);
}

/// The value of `ferrogate_flow_control_total{outcome}` on `s` (0 before the first event).
async fn flow_count(s: &Serve, outcome: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", s.admin)).await.unwrap().text().await.unwrap();
    let series = format!("ferrogate_flow_control_total{{outcome=\"{outcome}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(series.as_str())?.parse::<f64>().ok()).map_or(0, |v| v as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_slot_wakes_the_next_in_line() {
    let (sims, s, dir) = setup(1, 1, "{ max_queue: 100, queue_ttl_ms: 20000 }").await;
    let client = reqwest::Client::new();
    let first = spawn_chat(&client, &s, 0, 1_500);
    wait_running(sims[0]).await;
    let queued: Vec<_> = (0..8).map(|i| spawn_chat(&client, &s, i % 2, 10)).collect();
    wait_queued(&s, 8).await;
    assert_eq!(first.await.unwrap().status, 200);
    for h in queued {
        let a = h.await.unwrap();
        assert_eq!((a.status, a.queued_ms.is_some()), (200, true), "{a:?}");
    }
    // Each of the eight was woken by the slot its predecessor released (its VM's tick, the
    // fallback, may win an odd race; without wake-ups this count stays 0). The counters reach
    // /metrics on the tick after the answers: wait for them.
    let deadline = Instant::now() + Duration::from_secs(10);
    while flow_count(&s, "woken").await < 4 {
        assert!(Instant::now() < deadline, "released slots woke {} requests", flow_count(&s, "woken").await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_request_that_asks_for_a_lease_gets_its_answer() {
    // Limits shared through Redis: a key's first request waits for a lease top-up, a call the
    // request makes itself. Key 1's request waits in the queue first, so it is woken from its
    // VM's root context, and the lease call it then makes is answered to that root, which must
    // hand the answer on (else the request would hang until the client gives up).
    let redis = replicas::Redis::start();
    let sims = vec![sim_helper::start_sim(&["--max-running", "1"]).await];
    let dir = tmpdir();
    let tail = "redis: { url_env: FERROGATE_REDIS_URL }\n";
    let cfg =
        config_with(&dir, &sims, 1, "{ max_queue: 100, queue_ttl_ms: 20000 }", ("{ requests_per_minute: 100 }", tail));
    let s = serve_env(&cfg, &[("FERROGATE_REDIS_URL", &redis.url())]);
    // A lost answer would hold the request forever: give up after a minute (status 0).
    let client = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap();
    let first = spawn_chat(&client, &s, 0, 1_000);
    wait_running(sims[0]).await;
    let woken = spawn_chat(&client, &s, 1, 10);
    wait_queued(&s, 1).await;
    let (first, woken) = (first.await.unwrap(), woken.await.unwrap());
    assert_eq!((first.status, woken.status), (200, 200), "{woken:?}");
    assert!(woken.queued_ms.is_some(), "it waited in the queue: {woken:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_band_gets_429_and_an_expired_wait_503() {
    let (sims, s, dir) = setup(1, 1, "{ max_queue: 1, queue_ttl_ms: 400 }").await;
    let client = reqwest::Client::new();
    let running = spawn_chat(&client, &s, 0, 1_500);
    wait_running(sims[0]).await;
    let queued = spawn_chat(&client, &s, 0, 10);
    wait_queued(&s, 1).await;
    let full = spawn_chat(&client, &s, 1, 10).await.unwrap();
    let (running, queued) = (running.await.unwrap(), queued.await.unwrap());
    assert_eq!(running.status, 200);
    assert_eq!((full.status, full.retry_after.as_deref()), (429, Some("1")), "{full:?}");
    assert_eq!((queued.status, queued.retry_after.as_deref()), (503, Some("1")), "{queued:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_while_queued_leaves_its_place() {
    let (sims, s, dir) = setup(1, 1, "{ max_queue: 1, queue_ttl_ms: 20000 }").await;
    let client = reqwest::Client::new();
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(300)).build().unwrap();
    let running = spawn_chat(&client, &s, 0, 2_000);
    wait_running(sims[0]).await;
    let gone = chat(&impatient, &s.base, 0, 10).await;
    // After the impatient client left, its place is free: this one queues (not 429).
    wait_queued(&s, 0).await;
    let next = chat(&client, &s.base, 1, 10).await;
    let running = running.await.unwrap();
    assert_eq!((running.status, gone.status, next.status), (200, 0, 200), "{gone:?} {next:?}");
    assert!(next.queued_ms.is_some(), "it waited for the running request");
    // The record of the request that left says 499, with its time in the queue.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let usage: Value =
            reqwest::get(format!("{}/api/v1/usage?key=batch", s.admin)).await.unwrap().json().await.unwrap();
        let records = usage["records"].as_array().cloned().unwrap_or_default();
        if let Some(r) = records.iter().find(|r| r["status"] == 499) {
            assert!(r["queued_ms"].as_u64().is_some_and(|q| q >= 150), "{r}");
            break;
        }
        assert!(Instant::now() < deadline, "no 499 record: {usage}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = std::fs::remove_dir_all(dir);
}
