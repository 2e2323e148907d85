//! Cross-replica limits end to end: two `ferrogate serve` processes (the real binary, the
//! real filter wasm) sharing a private `redis-server` that the test starts, stops and
//! restarts, in front of an in-process `ferrogate sim`.
//!
//! Needs `redis-server` on the PATH (Debian's `redis-server` package; `.ci/run` installs it).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

#[path = "common/sim.rs"]
mod sim_helper;
#[path = "common/wasm.rs"]
mod wasm;

/// A free loopback port (bound, then released for the child to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A `redis-server` of the test's own, without persistence (a restart loses everything).
struct Redis {
    port: u16,
    child: Option<Child>,
}

impl Redis {
    fn start() -> Redis {
        let mut r = Redis { port: free_port(), child: None };
        r.restart();
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn restart(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--save", "", "--appendonly", "no", "--bind", "127.0.0.1"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on the PATH");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One `ferrogate serve` child process.
struct Serve {
    child: Child,
    base: String,
    admin: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const KEY: &str = "fg-limits-e2e-key";

fn config(
    dir: &std::path::Path,
    sim: SocketAddr,
    key_name: &str,
    limits: &str,
    redis_extra: &str,
) -> std::path::PathBuf {
    use sha2::Digest;
    let digest = hex::encode(sha2::Sha256::digest(KEY.as_bytes()));
    let yaml = format!(
        "providers:\n  - {{ name: local, kind: openai_compatible, base_url: 'http://{sim}' }}\n\
         models:\n  - name: chat\n    targets: [{{ provider: local, model: sim-small }}]\n\
         keys:\n  - {{ name: {key_name}, digest: 'sha256:{digest}', models: ['*'], limits: {limits} }}\n\
         redis: {{ url_env: FERROGATE_REDIS_URL{redis_extra} }}\n"
    );
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn serve(config: &std::path::Path, redis: &Redis) -> Serve {
    let (listen, sidecar, admin) = (free_port(), free_port(), free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_ferrogate"))
        .arg("serve")
        .args(["--config", config.to_str().unwrap()])
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--sidecar-listen", &format!("127.0.0.1:{sidecar}")])
        .args(["--admin-listen", &format!("127.0.0.1:{admin}")])
        .args(["--workers", "2", "--poll-interval-ms", "200"])
        .args(["--filter", wasm::filter_wasm().to_str().unwrap()])
        .env("FERROGATE_REDIS_URL", redis.url())
        .env_remove("FERROGATE_ADMIN_TOKEN")
        .env_remove("FERROGATE_INTERNAL_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let s = Serve { child, base: format!("http://127.0.0.1:{listen}"), admin: format!("http://127.0.0.1:{admin}") };
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", listen)).is_err() {
        assert!(Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    s
}

async fn chat(client: &reqwest::Client, s: &Serve) -> u16 {
    let body = json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let resp = client.post(format!("{}/v1/chat/completions", s.base)).bearer_auth(KEY).json(&body).send().await;
    resp.map_or(0, |r| r.status().as_u16())
}

async fn limits(s: &Serve) -> Value {
    reqwest::get(format!("{}/api/v1/limits", s.admin)).await.unwrap().json().await.unwrap()
}

/// Waits until `s`'s sidecar reports `synced == want`.
async fn wait_synced(s: &Serve, want: bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while limits(s).await["synced"] != want {
        assert!(Instant::now() < deadline, "synced never became {want}: {}", limits(s).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `n` requests to `s`, one every `gap`; returns the statuses.
async fn drive(s: &Serve, n: usize, gap: Duration) -> Vec<u16> {
    let client = reqwest::Client::new();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(chat(&client, s).await);
        tokio::time::sleep(gap).await;
    }
    out
}

fn tmpdir() -> std::path::PathBuf {
    let dir =
        std::env::temp_dir().join(format!("ferrogate-limits-e2e-{}-{:x}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The documented bound: two replicas, each driven at 4 requests/s against a shared
/// `requests_per_day: 40`, admit at least the limit and at most 1.2× it.
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
    assert!((40..=48).contains(&admitted), "admitted {admitted} of 64 under a shared limit of 40: {ra:?} {rb:?}");
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
