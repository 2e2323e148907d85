//! Target health and engine load end to end, over real loopback HTTP: `ferrogate sim`
//! engines started in this process, a dead endpoint (a port nobody listens on, later taken
//! by a sim), the probe and scrape loops, the filter-facing `GET /v1/targets` and the admin
//! `GET /api/v1/targets` and `/metrics`.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ferrogate_core::config::RawConfig;
use ferrogate_core::targets::{EndpointState, TargetFeed};
use ferrogate_sidecar::services::admin::{self, Admin};
use ferrogate_sidecar::services::filter_api::{self, FilterApi};
use ferrogate_sidecar::services::limits::Ledger;
use ferrogate_sidecar::services::snapshot::Snapshots;
use ferrogate_sidecar::services::targets::{self, Settings, Targets, FAILURES_TO_UNHEALTHY};
use ferrogate_sidecar::services::usage::{UsageBackend, UsageStore};
use ferrogate_sidecar::sim::{self, SimArgs};
use serde_json::{json, Value};

const TOKEN: &str = "internal-token";

/// A loopback address nobody listens on (bound, then released).
fn dead_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

/// Starts a sim on `addr` (port 0: any).
async fn start_sim_on(addr: SocketAddr, args: SimArgs) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(sim::run(args, listener, std::future::pending()));
    addr
}

async fn start_sim(args: SimArgs) -> SocketAddr {
    start_sim_on("127.0.0.1:0".parse().unwrap(), args).await
}

/// Snapshots serving one `openai_compatible` provider `pool` over `endpoints`, plus a SaaS one.
fn snapshots(endpoints: &[SocketAddr]) -> Arc<Snapshots> {
    let snapshots = Arc::new(Snapshots::new(None));
    publish(&snapshots, endpoints);
    snapshots
}

fn publish(snapshots: &Snapshots, endpoints: &[SocketAddr]) {
    let endpoints: Vec<String> = endpoints.iter().map(ToString::to_string).collect();
    let raw: RawConfig = serde_json::from_value(json!({"providers": [
        {"name": "pool", "kind": "openai_compatible", "base_url": "http://pool.internal", "endpoints": endpoints},
        {"name": "oai", "kind": "openai", "base_url": "https://api.openai.com/v1"},
    ]}))
    .unwrap();
    snapshots.publish(raw).unwrap();
}

fn state(feed: &TargetFeed, endpoint: SocketAddr) -> &EndpointState {
    feed.get("pool", &endpoint.to_string()).unwrap_or_else(|| panic!("{endpoint} not in {feed:?}"))
}

fn feed(t: &Targets) -> TargetFeed {
    TargetFeed::parse(&t.feed().1).unwrap()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Polls `check` every 20 ms until it yields a value, for at most `within`.
async fn eventually<T>(within: Duration, what: &str, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_dead_endpoint_turns_unhealthy_on_the_third_failed_probe_and_recovers_on_the_second_success() {
    let live = start_sim(SimArgs::default()).await;
    let dead = dead_addr();
    let snapshots = snapshots(&[live, dead]);
    let t = Targets::new(Settings { timeout: Duration::from_secs(1), ..Settings::default() });
    t.sync(snapshots.current().as_deref());
    for round in 1..3 {
        t.probe_round().await;
        let f = feed(&t);
        assert!(state(&f, dead).healthy, "still healthy after {round} failed probe(s)");
        assert_eq!(state(&f, dead).cooldown_until_ms, None);
    }
    let before = now_ms();
    t.probe_round().await;
    let f = feed(&t);
    let down = state(&f, dead);
    assert!(!down.healthy, "unhealthy after the third failed probe");
    let first_cooldown = down.cooldown_until_ms.unwrap();
    assert!((before + 30_000..=now_ms() + 30_000).contains(&first_cooldown), "{first_cooldown}");
    assert!(down.parked(now_ms()));
    assert!(state(&f, live).healthy && state(&f, live).cooldown_until_ms.is_none());
    let detail = t.report().targets.into_iter().find(|r| r.endpoint == dead.to_string()).unwrap();
    assert_eq!(detail.health.consecutive_failures, 3);
    assert!(detail.health.last_error.unwrap().starts_with("GET /health: "));

    tokio::time::sleep(Duration::from_millis(5)).await;
    t.probe_round().await;
    let extended = state(&feed(&t), dead).cooldown_until_ms.unwrap();
    assert!(extended > first_cooldown, "the cooldown is extended while it keeps failing");
    recovers_on_the_second_success(&t, dead, extended).await;
}

/// Something starts listening on `dead`: healthy again after exactly two probes.
async fn recovers_on_the_second_success(t: &Targets, dead: SocketAddr, cooldown: u64) {
    start_sim_on(dead, SimArgs::default()).await;
    t.probe_round().await;
    let f = feed(t);
    assert!(!state(&f, dead).healthy, "one success is not enough");
    assert_eq!(state(&f, dead).cooldown_until_ms, Some(cooldown), "a success does not extend the cooldown");
    t.probe_round().await;
    let f = feed(t);
    assert!(state(&f, dead).healthy, "healthy again after two successes");
    assert_eq!(state(&f, dead).cooldown_until_ms, None);
}

/// The filter-facing and admin listeners of a sidecar with `targets`.
async fn listeners(snapshots: Arc<Snapshots>, targets: Arc<Targets>) -> (SocketAddr, SocketAddr) {
    let ledger = Arc::new(Ledger::new("t".into(), false));
    let usage = Arc::new(UsageBackend::memory(UsageStore::new(None)));
    let api = FilterApi {
        usage: usage.clone(),
        snapshots: snapshots.clone(),
        internal_token: Some(TOKEN.into()),
        ledger: ledger.clone(),
        targets: targets.clone(),
        kv: Default::default(),
        usage_failing: Default::default(),
    };
    let state = Admin {
        identity: ferrogate_sidecar::services::identity::Identity::new(
            Default::default(),
            Some("admin".into()),
            Arc::new(OnceLock::new()),
            false,
        ),
        runtime: None,
        usage,
        cache: Arc::new(ferrogate_sidecar::services::cache::Cache::new(snapshots.clone())),
        snapshots,
        db: Arc::new(OnceLock::new()),
        postgres: false,
        ledger,
        targets,
        kv: Default::default(),
    };
    (serve(filter_api::router(api)).await, serve(admin::router(state)).await)
}

async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

async fn get_feed(http: &reqwest::Client, sidecar: SocketAddr) -> TargetFeed {
    let res = http.get(format!("http://{sidecar}/v1/targets")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(res.status(), 200);
    let etag = res.headers()["etag"].to_str().unwrap().to_string();
    let feed = TargetFeed::parse(&res.bytes().await.unwrap()).unwrap();
    assert_eq!(etag, format!("\"{}\"", feed.version));
    feed
}

/// Loops fast enough for a test: a probe every 150 ms, a scrape every 50 ms.
const FAST_LOOPS: Settings = Settings {
    probe_interval: Duration::from_millis(150),
    scrape_interval: Duration::from_millis(50),
    timeout: Duration::from_secs(1),
    cooldown: Duration::from_secs(30),
};

#[tokio::test]
async fn the_loops_feed_health_over_get_v1_targets_and_follow_the_snapshot() {
    let dead = dead_addr();
    let snapshots = snapshots(&[dead]);
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let t = targets::start(snapshots.clone(), FAST_LOOPS, rx);
    let (sidecar, admin) = listeners(snapshots.clone(), t.clone()).await;
    let http = reqwest::Client::new();

    let res = http.get(format!("http://{sidecar}/v1/targets")).send().await.unwrap();
    assert_eq!(res.status(), 401, "the internal token is required");
    let first = get_feed(&http, sidecar).await;
    assert!(state(&first, dead).healthy, "not probed yet: healthy");
    let saas = first.get("oai", "api.openai.com").unwrap();
    assert!(saas.healthy && saas.running.is_none());

    turns_unhealthy_on_the_third_failure(&t, dead).await;

    let down = get_feed(&http, sidecar).await;
    assert!(!state(&down, dead).healthy && state(&down, dead).cooldown_until_ms.is_some());
    let etag = format!("\"{}\"", t.feed().0);
    let res = http.get(format!("http://{sidecar}/v1/targets")).bearer_auth(TOKEN).header("if-none-match", etag);
    assert_eq!(res.send().await.unwrap().status(), 304);
    admin_shows_it_unhealthy(&http, admin, dead).await;

    // A new snapshot with a live endpoint is followed, its load scraped.
    let live = start_sim(SimArgs::default()).await;
    publish(&snapshots, &[live]);
    let feed = eventually(Duration::from_secs(5), "the new endpoint's load", async || {
        let feed = get_feed(&http, sidecar).await;
        let e = feed.get("pool", &live.to_string())?;
        e.running.is_some().then_some(feed.clone())
    })
    .await;
    assert!(feed.get("pool", &dead.to_string()).is_none(), "the removed endpoint is gone");
    assert_eq!(feed.endpoints.len(), 2);
}

/// Waits for the probe loop to mark `dead` unhealthy; every report seen on the way agrees
/// with the threshold (healthy below three failures), and both 1 and 2 failures are seen.
async fn turns_unhealthy_on_the_third_failure(t: &Targets, dead: SocketAddr) {
    let mut seen = std::collections::BTreeSet::new();
    eventually(Duration::from_secs(10), "the dead endpoint to turn unhealthy", async || {
        let report = t.report();
        let d = report.targets.iter().find(|r| r.endpoint == dead.to_string())?;
        assert_eq!(d.health.healthy, d.health.consecutive_failures < 3, "{d:?}");
        seen.insert(d.health.consecutive_failures.min(3));
        (!d.health.healthy).then_some(())
    })
    .await;
    assert!(seen.is_superset(&[1, 2].into()), "observed the endpoint healthy after 1 and 2 failures: {seen:?}");
}

/// `GET /api/v1/targets` and `/metrics` on the admin listener show `dead` unhealthy.
async fn admin_shows_it_unhealthy(http: &reqwest::Client, admin: SocketAddr, dead: SocketAddr) {
    let res = http.get(format!("http://{admin}/api/v1/targets")).send().await.unwrap();
    assert_eq!(res.status(), 401, "the admin token is required");
    let report: Value = http
        .get(format!("http://{admin}/api/v1/targets"))
        .bearer_auth("admin")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let row = report["targets"].as_array().unwrap().iter().find(|r| r["endpoint"] == dead.to_string()).unwrap();
    assert_eq!(
        (row["healthy"].clone(), row["probed"].clone(), row["kind"].clone()),
        (json!(false), json!(true), json!("openai_compatible"))
    );
    assert!(row["consecutive_failures"].as_u64().unwrap() >= 3, "{row}");
    let metrics = http.get(format!("http://{admin}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(
        metrics.contains(&format!("ferrogate_target_healthy{{provider=\"pool\",endpoint=\"{dead}\"}} 0\n")),
        "{metrics}"
    );
    assert!(
        metrics.contains("ferrogate_target_healthy{provider=\"oai\",endpoint=\"api.openai.com\"} 1\n"),
        "{metrics}"
    );
}

/// A streamed chat completion of `tokens` tokens, one every `itl_ms`.
async fn slow_stream(sim: SocketAddr, tokens: u32, itl_ms: u64) -> reqwest::StatusCode {
    let body = json!({"model": "sim-small", "messages": [{"role": "user", "content": "hi"}], "stream": true, "max_tokens": tokens});
    let res = reqwest::Client::new()
        .post(format!("http://{sim}/v1/chat/completions"))
        .header(sim::ITL_HEADER, itl_ms.to_string())
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = res.status();
    let _ = res.bytes().await.unwrap();
    status
}

#[tokio::test]
async fn engine_load_from_the_sims_metrics_appears_while_requests_run() {
    let engine = start_sim(SimArgs { max_running: 2, kv_blocks: 4, ..SimArgs::default() }).await;
    let snapshots = snapshots(&[engine]);
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let settings = Settings { scrape_interval: Duration::from_millis(50), ..Settings::default() };
    let t = targets::start(snapshots, settings, rx);

    let idle = eventually(Duration::from_secs(5), "an idle scrape", async || {
        let f = feed(&t);
        let e = state(&f, engine);
        e.running.map(|_| (e.running, e.waiting, e.kv_usage_permille))
    })
    .await;
    assert_eq!(idle, (Some(0), Some(0), Some(0)));

    let requests: Vec<_> = (0..3).map(|_| tokio::spawn(slow_stream(engine, 20, 100))).collect();
    let busy = eventually(Duration::from_secs(5), "two running, one waiting", async || {
        let f = feed(&t);
        let e = state(&f, engine).clone();
        (e.running == Some(2) && e.waiting == Some(1)).then_some(e)
    })
    .await;
    let kv = busy.kv_usage_permille.unwrap();
    assert!(kv > 0 && kv <= 1000, "two prompts and their tokens occupy a 64-token cache: {kv}");
    let report = t.report();
    assert_eq!((report.targets[0].running, report.targets[0].waiting), (Some(2), Some(1)));

    for r in requests {
        assert_eq!(r.await.unwrap(), 200);
    }
    eventually(Duration::from_secs(5), "the engine idle again", async || {
        let f = feed(&t);
        let e = state(&f, engine);
        (e.running == Some(0) && e.waiting == Some(0) && e.kv_usage_permille == Some(0)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn inference_faults_leave_an_engine_healthy_and_a_stopped_one_loses_its_load() {
    let faulty = start_sim(SimArgs { error_500_rate: 1.0, ..SimArgs::default() }).await;
    let resetting = start_sim(SimArgs { reset_rate: 1.0, ..SimArgs::default() }).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let stopping = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(sim::run(SimArgs::default(), listener, async move { drop(stopped.await) }));
    let snapshots = snapshots(&[faulty, resetting, stopping]);
    let t = Targets::new(Settings { timeout: Duration::from_secs(1), ..Settings::default() });
    t.sync(snapshots.current().as_deref());
    for _ in 0..FAILURES_TO_UNHEALTHY {
        t.probe_round().await;
    }
    t.scrape_round().await;
    let f = feed(&t);
    for e in [faulty, resetting, stopping] {
        assert!(state(&f, e).healthy, "{e}: /health and /metrics answer whatever inference does");
        assert_eq!(state(&f, e).running, Some(0));
    }

    stop.send(()).unwrap();
    server.await.unwrap().unwrap();
    t.scrape_round().await;
    let f = feed(&t);
    assert_eq!(state(&f, stopping).running, None, "no answer: the load is unknown, not stale");
    assert!(state(&f, stopping).healthy, "one failed scrape does not touch health");
    assert_eq!(state(&f, faulty).running, Some(0));
    for _ in 0..FAILURES_TO_UNHEALTHY {
        t.probe_round().await;
    }
    assert!(!state(&feed(&t), stopping).healthy);
}
