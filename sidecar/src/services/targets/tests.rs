use std::net::SocketAddr;

use axum::http::StatusCode;
use axum::routing::get;
use ferrogate_core::config::RawConfig;

use super::*;

fn snapshots(config: serde_json::Value) -> Snapshots {
    let snapshots = Snapshots::new(None);
    let raw: RawConfig = serde_json::from_value(config).unwrap();
    snapshots.publish(raw).unwrap();
    snapshots
}

fn provider(name: &str, kind: &str, base_url: &str, endpoints: &[&str]) -> serde_json::Value {
    serde_json::json!({"name": name, "kind": kind, "base_url": base_url, "endpoints": endpoints})
}

fn fast() -> Settings {
    Settings { timeout: Duration::from_millis(500), ..Settings::default() }
}

/// A loopback port nobody listens on.
fn dead_port() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

fn feed_of(t: &Targets) -> TargetFeed {
    TargetFeed::parse(&t.feed().1).unwrap()
}

#[test]
fn every_pool_member_or_authority_is_a_target_and_only_engines_are_probed() {
    let s = snapshots(serde_json::json!({"providers": [
        provider("oai", "openai", "https://api.openai.com/v1", &[]),
        provider("local", "openai_compatible", "http://127.0.0.1:8000", &[]),
        provider("pool", "openai_compatible", "https://vllm.internal/api", &["10.0.0.1:8000", "10.0.0.2:8001"]),
    ]}));
    let got: Vec<(String, String, bool, String, String)> = probe::targets(&s.current().unwrap().config)
        .into_iter()
        .map(|t| (t.provider, t.endpoint, t.active, t.origin, t.path_prefix))
        .collect();
    let row = |p: &str, e: &str, a: bool, o: &str, x: &str| (p.into(), e.into(), a, o.into(), x.into());
    assert_eq!(
        got,
        [
            row("oai", "api.openai.com", false, "https://api.openai.com", "/v1"),
            row("local", "127.0.0.1:8000", true, "http://127.0.0.1:8000", ""),
            row("pool", "10.0.0.1:8000", true, "https://10.0.0.1:8000", "/api"),
            row("pool", "10.0.0.2:8001", true, "https://10.0.0.2:8001", "/api"),
        ]
    );
}

#[test]
fn the_view_lists_each_providers_key_fingerprints_and_never_a_key() {
    let s = snapshots(serde_json::json!({"providers": [
        {"name": "pool", "kind": "openai", "base_url": "https://api.openai.com", "api_keys": ["sk-first", "sk-second"]},
        {"name": "one", "kind": "anthropic", "base_url": "https://api.anthropic.com", "api_key": "sk-only"},
        provider("local", "openai_compatible", "http://127.0.0.1:8000", &[]),
    ]}));
    let t = Targets::new(fast());
    t.sync(s.current().as_deref());
    let report = t.report();
    let keys = |provider: &str, secrets: &[&str]| ProviderKeys {
        provider: provider.into(),
        keys: secrets.iter().map(|k| ferrogate_core::keypool::fingerprint(k)).collect(),
    };
    assert_eq!(report.provider_keys, [keys("pool", &["sk-first", "sk-second"]), keys("one", &["sk-only"])]);
    let json = serde_json::to_string(&report).unwrap();
    assert!(json.contains(&ferrogate_core::keypool::fingerprint("sk-second")), "{json}");
    for secret in ["sk-first", "sk-second", "sk-only"] {
        assert!(!json.contains(secret), "{secret} in {json}");
    }
}

#[tokio::test]
async fn saas_targets_are_healthy_unprobed_with_unknown_load() {
    let s = snapshots(
        serde_json::json!({"providers": [provider("claude", "anthropic", "https://api.anthropic.com", &[])]}),
    );
    let t = Targets::new(fast());
    t.sync(s.current().as_deref());
    t.probe_round().await;
    t.scrape_round().await;
    let feed = feed_of(&t);
    assert_eq!(
        feed.endpoints,
        [EndpointState {
            provider: "claude".into(),
            endpoint: "api.anthropic.com".into(),
            healthy: true,
            ..Default::default()
        }]
    );
    assert_eq!(t.report().targets[0].health.probes, 0);
}

#[tokio::test]
async fn snapshot_changes_keep_the_state_of_kept_endpoints() {
    let (dead, other) = (dead_port(), dead_port());
    let t = Targets::new(fast());
    let first = snapshots(
        serde_json::json!({"providers": [provider("p", "openai_compatible", "http://h", &[&dead.to_string()])]}),
    );
    t.sync(first.current().as_deref());
    for _ in 0..3 {
        t.probe_round().await;
    }
    assert!(!feed_of(&t).endpoints[0].healthy);
    let v = t.feed().0;
    t.sync(first.current().as_deref());
    assert_eq!(t.feed().0, v, "same snapshot, same feed");
    let both = [dead.to_string(), other.to_string()];
    let second = snapshots(serde_json::json!({"providers": [
        provider("p", "openai_compatible", "http://h", &[&both[1], &both[0]]),
    ]}));
    t.sync(second.current().as_deref());
    let feed = feed_of(&t);
    assert!(feed.version > v);
    let health: Vec<(&str, bool)> = feed.endpoints.iter().map(|e| (e.endpoint.as_str(), e.healthy)).collect();
    assert_eq!(health, [(both[1].as_str(), true), (both[0].as_str(), false)]);
    assert_eq!(t.report().targets[1].health.consecutive_failures, 3);
    t.sync(None);
    assert!(feed_of(&t).endpoints.is_empty());
}

#[tokio::test]
async fn the_feed_version_moves_only_when_a_state_changes() {
    let sim = serve(crate::sim::router(&crate::sim::SimArgs::default())).await;
    let s = snapshots(
        serde_json::json!({"providers": [provider("sim", "openai_compatible", &format!("http://{sim}"), &[])]}),
    );
    let t = Targets::new(fast());
    t.sync(s.current().as_deref());
    let v = t.feed().0;
    t.probe_round().await;
    assert_eq!(t.feed().0, v, "a healthy endpoint probed healthy changes nothing");
    t.scrape_round().await;
    let feed = feed_of(&t);
    assert_eq!(feed.version, v + 1, "the load became known");
    let e = &feed.endpoints[0];
    assert_eq!((e.running, e.waiting, e.kv_usage_permille), (Some(0), Some(0), Some(0)));
    t.scrape_round().await;
    assert_eq!(t.feed().0, v + 1, "same load, same version");
}

#[test]
fn a_restarted_sidecar_never_repeats_a_version_of_its_predecessor() {
    // A filter holding the old feed asks with its version; the same number from the new
    // sidecar would answer 304 and keep the old figures (confirmed, as if current).
    let s = snapshots(serde_json::json!({"providers": [provider("p", "openai_compatible", "http://p:1", &["a:1"])]}));
    let before = Targets::new(fast());
    for _ in 0..3 {
        before.sync(None);
        before.sync(s.current().as_deref());
    }
    std::thread::sleep(Duration::from_millis(2));
    let after = Targets::new(fast());
    assert!(after.feed().0 > before.feed().0, "{} after {}", after.feed().0, before.feed().0);
}

#[tokio::test]
async fn health_falls_back_to_the_models_list_and_trusts_any_answer_below_500() {
    let no_health = serve(axum::Router::new().route("/v1/models", get(|| async { StatusCode::UNAUTHORIZED }))).await;
    let broken = serve(axum::Router::new().route("/health", get(|| async { StatusCode::SERVICE_UNAVAILABLE }))).await;
    let models_fail = serve(axum::Router::new().route("/v1/models", get(|| async { StatusCode::BAD_GATEWAY }))).await;
    let prober = Prober::new(Duration::from_millis(500));
    let target = |addr: SocketAddr| Target {
        provider: "p".into(),
        endpoint: addr.to_string(),
        kind: ferrogate_core::config::ProviderKind::OpenAiCompatible,
        active: true,
        origin: format!("http://{addr}"),
        path_prefix: String::new(),
        credential: None,
        occupancy_url: None,
    };
    assert_eq!(prober.health(&target(no_health)).await, Ok(()));
    assert_eq!(prober.health(&target(broken)).await, Err("GET /health: 503 Service Unavailable".into()));
    assert_eq!(prober.health(&target(models_fail)).await, Err("GET /v1/models: 502 Bad Gateway".into()));
    let dead = prober.health(&target(dead_port())).await.unwrap_err();
    assert!(dead.starts_with("GET /health: ") && dead.contains("onnect"), "{dead}");
}

#[tokio::test]
async fn a_target_without_engine_metrics_is_scraped_again_only_later() {
    let plain = serve(axum::Router::new().route("/health", get(|| async { "ok" }))).await;
    let s = snapshots(
        serde_json::json!({"providers": [provider("p", "openai_compatible", &format!("http://{plain}"), &[])]}),
    );
    let t = Targets::new(fast());
    t.sync(s.current().as_deref());
    let metrics_due = |t: &Targets| t.scrape_work(now_ms()).iter().filter(|(_, due)| *due).count();
    assert_eq!(metrics_due(&t), 1);
    t.scrape_round().await;
    assert_eq!(metrics_due(&t), 0, "404 on /metrics: put off");
    assert_eq!(t.active_targets().len(), 1, "still probed");
    assert_eq!(feed_of(&t).endpoints[0].running, None);
}

/// Targets over one engine whose `/metrics` answers `page` while the flag is set (503 after),
/// scraped once.
async fn engine_serving(page: &'static str) -> (std::sync::Arc<std::sync::atomic::AtomicBool>, Targets) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let up = std::sync::Arc::new(AtomicBool::new(true));
    let serving = up.clone();
    let metrics = move || {
        let serving = serving.load(Ordering::SeqCst);
        async move {
            if serving {
                Ok(page)
            } else {
                Err(StatusCode::SERVICE_UNAVAILABLE)
            }
        }
    };
    let engine = serve(axum::Router::new().route("/metrics", get(metrics))).await;
    let s = snapshots(
        serde_json::json!({"providers": [provider("p", "openai_compatible", &format!("http://{engine}"), &[])]}),
    );
    let t = Targets::new(fast());
    t.sync(s.current().as_deref());
    t.scrape_round().await;
    (up, t)
}

#[tokio::test]
async fn the_feed_carries_the_adapters_an_engine_reports() {
    use std::sync::atomic::Ordering;
    let page = concat!(
        "vllm:num_requests_running{model_name=\"base\"} 1\n",
        "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"sql\",waiting_lora_adapters=\"chat\"} 7\n",
        "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 3\n",
    );
    let (up, t) = engine_serving(page).await;
    let e = feed_of(&t).endpoints.remove(0);
    assert_eq!((e.adapters, e.max_loras), (vec!["sql".to_string(), "chat".to_string()], Some(2)));
    let text = String::from_utf8(t.feed().1.to_vec()).unwrap();
    assert!(text.contains(r#""adapters":["sql","chat"],"max_loras":2"#), "{text}");
    assert_eq!(t.report().targets[0].adapters, ["sql", "chat"]);
    assert!(t.report().targets[0].cache.is_none(), "no LMCache series: no cache figures");
    // A failed scrape: unknown, not stale.
    up.store(false, Ordering::SeqCst);
    t.scrape_round().await;
    let e = feed_of(&t).endpoints.remove(0);
    assert_eq!((e.adapters.len(), e.max_loras), (0, None));
}

#[test]
fn prometheus_gauges_cover_known_values_only() {
    let known = TargetReport {
        provider: "pool".into(),
        endpoint: "10.0.0.1:8000".into(),
        kind: "openai_compatible",
        probed: true,
        health: Health::default(),
        running: Some(3),
        waiting: Some(1),
        kv_usage: Some(0.25),
        adapters: Vec::new(),
        max_loras: None,
        cache_occupancy: Some(0.5),
        cache: None,
    };
    let down = TargetReport {
        endpoint: "10.0.0.2:8000".into(),
        health: Health { healthy: false, ..Health::default() },
        running: None,
        waiting: None,
        kv_usage: None,
        cache_occupancy: None,
        ..known.clone()
    };
    let mut text = String::new();
    let report = Report { version: 1, probe_interval_ms: 5000, targets: vec![known, down], provider_keys: Vec::new() };
    prometheus(&report, &mut text);
    let expected = "\
# TYPE ferrogate_target_healthy gauge
ferrogate_target_healthy{provider=\"pool\",endpoint=\"10.0.0.1:8000\"} 1
ferrogate_target_healthy{provider=\"pool\",endpoint=\"10.0.0.2:8000\"} 0
# TYPE ferrogate_target_running gauge
ferrogate_target_running{provider=\"pool\",endpoint=\"10.0.0.1:8000\"} 3
# TYPE ferrogate_target_waiting gauge
ferrogate_target_waiting{provider=\"pool\",endpoint=\"10.0.0.1:8000\"} 1
# TYPE ferrogate_target_kv_usage gauge
ferrogate_target_kv_usage{provider=\"pool\",endpoint=\"10.0.0.1:8000\"} 0.25
# TYPE ferrogate_target_cache_occupancy gauge
ferrogate_target_cache_occupancy{provider=\"pool\",endpoint=\"10.0.0.1:8000\"} 0.5
";
    let without_help: String = text.lines().filter(|l| !l.starts_with("# HELP ")).map(|l| format!("{l}\n")).collect();
    assert_eq!(without_help, expected);
    assert_eq!(text.lines().filter(|l| l.starts_with("# HELP ferrogate_target_")).count(), 5, "{text}");
}

/// An engine with LMCache reports its CPU cache and hit figures; the admin report shows them
/// and a failed scrape forgets them.
#[tokio::test]
async fn the_report_carries_an_engines_cache_figures() {
    use std::sync::atomic::Ordering;
    let page = concat!(
        "vllm:num_requests_running{model_name=\"m\"} 1\n",
        "lmcache:local_cache_usage{model_name=\"m\",worker_id=\"0\"} 5e8\n",
        "lmcache:lookup_hit_rate{model_name=\"m\",worker_id=\"0\"} 0.25\n",
        "vllm:external_prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 64\n",
    );
    let (up, t) = engine_serving(page).await;
    let cache = t.report().targets[0].cache.expect("cache figures");
    assert_eq!(
        (cache.cpu_bytes, cache.lookup_hit_rate, cache.external_hit_tokens),
        (Some(5e8), Some(0.25), Some(64.0))
    );
    let json = serde_json::to_value(t.report()).unwrap();
    assert_eq!(json["targets"][0]["cache"]["cpu_bytes"], 5e8);
    up.store(false, Ordering::SeqCst);
    t.scrape_round().await;
    assert!(t.report().targets[0].cache.is_none(), "unknown, not stale");
}

/// An engine whose LMCache occupancy source answers `body` while the flag is set (500 after):
/// its occupancy reaches the feed and the report, is re-read every round, and is unknown (not
/// stale) once the source fails; an engine without `/metrics` is still read every round.
#[tokio::test]
async fn occupancy_is_read_from_its_source_every_round() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex as StdMutex;
    let body = Arc::new(StdMutex::new(r#"{"occupancy": 0.42, "cache_available": true}"#.to_string()));
    let up = Arc::new(AtomicBool::new(true));
    let (b, u) = (body.clone(), up.clone());
    let source = move || {
        let (b, u) = (b.clone(), u.clone());
        async move {
            if u.load(Ordering::SeqCst) {
                (StatusCode::OK, b.lock().unwrap().clone())
            } else {
                (StatusCode::INTERNAL_SERVER_ERROR, String::new())
            }
        }
    };
    let engine = serve(axum::Router::new().route("/lmcache/occupancy", get(source))).await;
    let mut p = provider("pool", "openai_compatible", &format!("http://{engine}"), &[&engine.to_string()]);
    p["lmcache"] = serde_json::json!({"occupancy": "/lmcache/occupancy"});
    let s = snapshots(serde_json::json!({"providers": [p]}));
    let t = Targets::new(fast());
    t.sync(s.current().as_deref());
    t.scrape_round().await;
    assert_eq!(feed_of(&t).endpoints[0].cache_occupancy_permille, Some(420));
    assert_eq!(t.report().targets[0].cache_occupancy, Some(0.42));
    *body.lock().unwrap() = r#"{"occupancy": 0.1, "cache_available": false}"#.into();
    t.scrape_round().await;
    assert_eq!(feed_of(&t).endpoints[0].cache_occupancy_permille, Some(1000), "unavailable: full");
    up.store(false, Ordering::SeqCst);
    t.scrape_round().await;
    assert_eq!(feed_of(&t).endpoints[0].cache_occupancy_permille, None, "unknown, not stale");
}
