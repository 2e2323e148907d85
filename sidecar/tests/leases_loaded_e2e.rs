//! Leases exact at the defaults, end to end: two `ferrogate serve` processes sharing a private
//! `redis-server`, every limit at its default `max_wait_ms` (250 ms), while busy loops (one per
//! core) load the machine. A burst of 40 concurrent requests split over both replicas under
//! `requests_per_minute: 10` admits exactly 10 and refuses 30 with 429 and `Retry-After`, five
//! times over (a fresh key each time). Then the same with every lease answer held past
//! `max_wait_ms` by the sidecar's test fault (`FERROGATE_FAULT_LEASE_DELAY_MS`): a late answer
//! is awaited, never replaced by this proxy's own counts, so still exactly 10, and none of them
//! by the store-away fallback; held past that wait plus 2 s, every request is refused as late,
//! never admitted by local counts. And a replica that goes quiet gives back its unused lease
//! once the bucket ends, without serving that counter again.
//!
//! Needs `redis-server` on the PATH (Debian's `redis-server` package; `.ci/run` installs it).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

#[path = "common/replicas.rs"]
mod replicas;
#[path = "common/sim.rs"]
mod sim_helper;

use replicas::{serve_env, tmpdir, wait_synced, Redis, Serve};

/// Bursts, each on a key of its own (so each starts with no lease and an empty window).
const REPS: usize = 5;
const LIMIT: usize = 10;
const BURST: usize = 40;
/// The test fault: every lease answer is held this long, well past the default 250 ms wait.
const FAULT_DELAY_MS: u64 = 700;

fn secret(rep: usize) -> String {
    format!("fg-leases-loaded-{rep}")
}

/// One key per repetition, `requests_per_minute: limit`, no `max_wait_ms` (the default).
fn config(dir: &std::path::Path, sim: std::net::SocketAddr, limit: usize) -> std::path::PathBuf {
    use sha2::Digest;
    let mut yaml = format!(
        "providers:\n  - {{ name: local, kind: openai_compatible, base_url: 'http://{sim}' }}\n\
         models:\n  - name: chat\n    targets: [{{ provider: local, model: sim-small }}]\n\
         redis: {{ url_env: FERROGATE_REDIS_URL }}\nkeys:\n"
    );
    for rep in 0..REPS {
        let digest = hex::encode(sha2::Sha256::digest(secret(rep).as_bytes()));
        yaml.push_str(&format!(
            "  - {{ name: rep{rep}, digest: 'sha256:{digest}', models: ['*'], limits: {{ requests_per_minute: {limit} }} }}\n"
        ));
    }
    let path = dir.join("config.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Busy loops, one per core, beside the replicas; killed (by their own ids) when dropped.
struct Hog(Vec<Child>);

impl Hog {
    fn start() -> Hog {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let spawn = |_| Command::new("sh").args(["-c", "while :; do :; done"]).stdout(Stdio::null()).spawn().unwrap();
        Hog((0..cores).map(spawn).collect())
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One request on `rep`'s key: its status, `Retry-After` and how long it took.
async fn chat(client: &reqwest::Client, s: &Serve, rep: usize) -> (u16, Option<String>, Duration) {
    let body = json!({"model": "chat", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    let start = Instant::now();
    let resp = client.post(format!("{}/v1/chat/completions", s.base)).bearer_auth(secret(rep)).json(&body).send().await;
    let took = start.elapsed();
    match resp {
        Ok(r) => {
            let retry = r.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
            (r.status().as_u16(), retry, took)
        }
        Err(_) => (0, None, took),
    }
}

/// The value of the series `series` (name and labels, as printed) on `s`'s admin `/metrics`;
/// 0 when absent.
async fn metric(s: &Serve, series: &str) -> u64 {
    let text = reqwest::get(format!("{}/metrics", s.admin)).await.unwrap().text().await.unwrap();
    let line = text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ').map(str::to_string));
    line.and_then(|v| v.trim().parse::<f64>().ok()).map_or(0, |v| v as u64)
}

/// Waits until `s`'s filter holds a synced cross-replica view (so it admits by leases).
async fn wait_leased(s: &Serve) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(s, "ferrogate_limits_synced").await != 1 {
        assert!(Instant::now() < deadline, "the filter's limits view never synced");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Keeps a burst clear of a minute's end, so all of it falls in one bucket.
async fn clear_of_minute_end(margin_ms: u128) {
    let into_minute = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() % 60_000;
    while into_minute() > 60_000 - margin_ms {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Two replicas sharing a fresh Redis (with `env` set besides its URL), synced, on `config`.
async fn two_replicas(redis: &Redis, cfg: &std::path::Path, env: &[(&str, &str)]) -> (Serve, Serve) {
    let url = redis.url();
    let mut all = vec![("FERROGATE_REDIS_URL", url.as_str())];
    all.extend_from_slice(env);
    let (a, b) = (serve_env(cfg, &all), serve_env(cfg, &all));
    for s in [&a, &b] {
        wait_synced(s, true).await;
        wait_leased(s).await;
    }
    (a, b)
}

/// The bursts: exactly [`LIMIT`] admitted each time, the rest 429 with `Retry-After`; with a
/// fault delay, every admitted request waited at least that long (its grant's answer was late).
async fn exact_under_load(fault_delay_ms: Option<u64>) {
    let redis = Redis::start();
    let sim = sim_helper::start_sim(&[]).await;
    let dir = tmpdir();
    let cfg = config(&dir, sim, LIMIT);
    let delay = fault_delay_ms.map(|ms| ms.to_string());
    let env: Vec<(&str, &str)> = delay.iter().map(|d| ("FERROGATE_FAULT_LEASE_DELAY_MS", d.as_str())).collect();
    let (a, b) = two_replicas(&redis, &cfg, &env).await;
    let hog = Hog::start();
    let client = reqwest::Client::new();
    for rep in 0..REPS {
        clear_of_minute_end(10_000).await;
        let calls = (0..BURST).map(|i| chat(&client, [&a, &b][i % 2], rep));
        let all = futures_util::future::join_all(calls).await;
        let admitted: Vec<_> = all.iter().filter(|(s, ..)| *s == 200).collect();
        assert_eq!(admitted.len(), LIMIT, "repetition {rep}: {all:?}");
        for (status, retry, _) in all.iter().filter(|(s, ..)| *s != 200) {
            assert_eq!(*status, 429, "repetition {rep}: {all:?}");
            assert!(retry.as_deref().and_then(|r| r.parse::<u64>().ok()).is_some_and(|r| r >= 1), "{all:?}");
        }
        if let Some(ms) = fault_delay_ms {
            let early = admitted.iter().filter(|(.., took)| *took < Duration::from_millis(ms)).count();
            assert_eq!(early, 0, "repetition {rep}: admitted before any lease answer could arrive: {all:?}");
        }
    }
    drop(hog);
    // Once the filters have flushed every refusal, none of the admissions was the fallback's.
    let refused = "ferrogate_limit_rejections_total{metric=\"requests\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&a, refused).await + metric(&b, refused).await < ((BURST - LIMIT) * REPS) as u64 {
        assert!(Instant::now() < deadline, "the refusals never showed in the filters' metrics");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waited = "ferrogate_lease_waits_total{outcome=\"admitted\"}";
    assert!(metric(&a, waited).await + metric(&b, waited).await > 0, "the series below is the one the filters write");
    for s in [&a, &b] {
        let away = metric(s, "ferrogate_lease_waits_total{outcome=\"store_away\"}").await;
        let late = metric(s, "ferrogate_lease_waits_total{outcome=\"late\"}").await;
        assert_eq!(away, 0, "admissions by local counts while the store was reachable ({late} late)");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_limit_holds_exactly_at_the_default_wait_on_a_loaded_machine() {
    exact_under_load(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_limit_holds_exactly_when_every_lease_answer_is_late() {
    exact_under_load(Some(FAULT_DELAY_MS)).await;
}

/// An answer later than `max_wait_ms` plus the 2 s allowed for one on its way, while the store
/// is reachable (the limits feed is not delayed): every request is refused as late with 429 and
/// `Retry-After`, none is admitted by the replicas' own counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_answer_past_the_bound_is_refused_not_counted_locally() {
    let redis = Redis::start();
    let sim = sim_helper::start_sim(&[]).await;
    let dir = tmpdir();
    let cfg = config(&dir, sim, LIMIT);
    let (a, b) = two_replicas(&redis, &cfg, &[("FERROGATE_FAULT_LEASE_DELAY_MS", "3500")]).await;
    clear_of_minute_end(10_000).await;
    let client = reqwest::Client::new();
    let all = futures_util::future::join_all((0..BURST).map(|i| chat(&client, [&a, &b][i % 2], 0))).await;
    for (status, retry, _) in &all {
        assert_eq!(*status, 429, "{all:?}");
        assert!(retry.as_deref().and_then(|r| r.parse::<u64>().ok()).is_some_and(|r| r >= 1), "{all:?}");
    }
    let late = "ferrogate_lease_waits_total{outcome=\"late\"}";
    let deadline = Instant::now() + Duration::from_secs(30);
    while metric(&a, late).await + metric(&b, late).await < BURST as u64 {
        assert!(Instant::now() < deadline, "the late refusals never showed in the filters' metrics");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for s in [&a, &b] {
        assert_eq!(metric(s, "ferrogate_lease_waits_total{outcome=\"store_away\"}").await, 0);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// What the store holds on `counter`'s `bucket`, over every replica.
async fn held_in_redis(redis: &Redis, counter: &str, bucket: u128) -> u64 {
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("fg:lease:{counter}:{bucket}");
    let values: Vec<u64> = redis::cmd("HVALS").arg(&key).query_async(&mut conn).await.unwrap();
    values.iter().sum()
}

/// Waits until `series` on `s` reaches `want`; the time it was seen.
async fn wait_metric(s: &Serve, series: &str, want: u64, within: Duration) -> SystemTime {
    let deadline = Instant::now() + within;
    loop {
        let value = metric(s, series).await;
        if value >= want {
            return SystemTime::now();
        }
        assert!(Instant::now() < deadline, "{series} stayed at {value}, short of {want}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A replica that took more lease than it used and then serves nothing more gives the rest back
/// at its first tick after the bucket ends, so the store's figure for that bucket ends as what
/// was used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_replica_gives_back_its_unused_lease_after_the_bucket() {
    let redis = Redis::start();
    let sim = sim_helper::start_sim(&[]).await;
    let dir = tmpdir();
    let cfg = config(&dir, sim, 40);
    let (a, _b) = two_replicas(&redis, &cfg, &[]).await;
    // Far enough from the minute's end that the request and its top-up fall in one bucket.
    clear_of_minute_end(20_000).await;
    let bucket = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() / 60_000;
    let client = reqwest::Client::new();
    assert_eq!(chat(&client, &a, 0).await.0, 200);
    // That admission emptied the lease: a top-up follows on the filter's next tick.
    let (granted, returned) =
        ("ferrogate_lease_amount_total{kind=\"granted\"}", "ferrogate_lease_amount_total{kind=\"returned\"}");
    wait_metric(&a, granted, 2, Duration::from_secs(30)).await;
    let held = metric(&a, granted).await;
    let counter = "ferrogate.limit.key.rep0.requests.minute";
    assert_eq!(held_in_redis(&redis, counter, bucket).await, held, "the store holds the lease for a");
    // Quiet from here on: the unused part goes back once the minute is over.
    let seen = wait_metric(&a, returned, held - 1, Duration::from_secs(150)).await;
    let seen_ms = seen.duration_since(UNIX_EPOCH).unwrap().as_millis();
    assert!(seen_ms >= (bucket + 1) * 60_000, "given back before its bucket ended");
    assert_eq!(metric(&a, returned).await, held - 1, "exactly the unused part");
    assert_eq!(held_in_redis(&redis, counter, bucket).await, 1, "the bucket ends as what was used");
    let _ = std::fs::remove_dir_all(dir);
}
