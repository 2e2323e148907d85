//! End to end: configuration changes reach the filter without a restart. `ferrogate serve`
//! watches its file and the filter polls the in-process sidecar; `ferrogate sidecar` serves
//! the snapshot with ETag revalidation, guards it with the internal token, and falls back to
//! its last-known-good cache when the file is broken at start. Real HTTP on loopback.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use ferrogate_sidecar::serve::{Gateway, ServeArgs};
use ferrogate_sidecar::standalone::{Sidecar, SidecarArgs};
use serde_json::{json, Value};

#[path = "common/wasm.rs"]
mod wasm;
use wasm::filter_wasm;
#[path = "common/sim.rs"]
mod sim_helper;
use sim_helper::start_sim;

#[derive(Parser)]
struct Cli<T: clap::Args> {
    #[command(flatten)]
    args: T,
}

struct TempDir(PathBuf);
impl TempDir {
    fn new() -> TempDir {
        let dir = std::env::temp_dir().join(format!("ferrogate-snap-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn provider(name: &str, addr: std::net::SocketAddr) -> String {
    format!("  - {{ name: {name}, kind: openai_compatible, base_url: 'http://{addr}' }}\n")
}

fn model(name: &str, provider: &str) -> String {
    format!("  - {{ name: {name}, targets: [{{ provider: {provider}, model: sim-small }}] }}\n")
}

/// Status and body of a chat request for `model`.
async fn ask(client: &reqwest::Client, base: &str, model: &str) -> (u16, Value) {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2});
    let r = client.post(format!("{base}/v1/chat/completions")).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_applies_config_edits_without_a_restart() {
    let (sim_a, sim_b) = (start_sim(&[]).await, start_sim(&[]).await);
    let dir = TempDir::new();
    let path = dir.0.join("config.yaml");
    let write = |providers: &str, models: &str| {
        std::fs::write(&path, format!("providers:\n{providers}models:\n{models}")).unwrap();
    };
    write(&provider("a", sim_a), &model("chat", "a"));
    let argv = [
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--sidecar-listen",
        "127.0.0.1:0",
        "--workers",
        "2",
        "--poll-interval-ms",
        "100",
    ];
    let mut args = Cli::<ServeArgs>::parse_from(argv).args;
    args.filter = Some(filter_wasm());
    let gateway = Gateway::start(&args).await.expect("gateway starts");
    let (base, admin) = (format!("http://{}", gateway.addr()), format!("http://{}", gateway.admin_addr()));
    let client = reqwest::Client::new();
    assert_eq!(ask(&client, &base, "chat").await.0, 200);
    assert_eq!(ask(&client, &base, "chat2").await.0, 404);

    // A new provider (a new upstream cluster) and a model on it, plus a row that cannot be served.
    let providers = format!("{}{}", provider("a", sim_a), provider("b", sim_b));
    write(&providers, &format!("{}{}{}", model("chat", "a"), model("chat2", "b"), model("ghost", "nowhere")));
    // Every worker VM adopts it on its own tick: wait for a run of successes spread over both.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut in_a_row = 0;
    while in_a_row < 20 {
        let (status, body) = ask(&client, &base, "chat2").await;
        in_a_row = if status == 200 { in_a_row + 1 } else { 0 };
        assert!(Instant::now() < deadline, "chat2: still {status} {body}");
    }
    assert_eq!(ask(&client, &base, "ghost").await.0, 404, "the broken row was dropped, not served");
    let report: Value =
        client.get(format!("{admin}/api/v1/config/problems")).send().await.unwrap().json().await.unwrap();
    assert_eq!(report["dropped"][0]["path"], "models[2].targets[0].provider", "{report}");

    // A broken edit keeps the last good configuration and says why.
    std::fs::write(&path, "providers: [ this is not yaml").unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let report: Value =
            client.get(format!("{admin}/api/v1/config/problems")).send().await.unwrap().json().await.unwrap();
        if report["rejected"].as_array().is_some_and(|r| !r.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "the broken edit was never reported: {report}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ask(&client, &base, "chat2").await.0, 200);
    gateway.shutdown().await;
}

async fn start_sidecar(config: &Path, cache: &Path, token: &str) -> Sidecar {
    let argv = [
        "sidecar",
        "--config",
        config.to_str().unwrap(),
        "--sidecar-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--snapshot-cache",
        cache.to_str().unwrap(),
        "--poll-interval-ms",
        "100",
    ];
    let mut args = Cli::<SidecarArgs>::parse_from(argv).args;
    args.internal_token = Some(token.to_string());
    args.admin_token = None;
    Sidecar::start(&args).await.expect("sidecar starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sidecar_serves_snapshots_with_etags_and_restores_the_last_good_one() {
    let dir = TempDir::new();
    let (config, cache) = (dir.0.join("config.yaml"), dir.0.join("snapshot.json"));
    let sim = start_sim(&[]).await;
    std::fs::write(&config, format!("providers:\n{}models:\n{}", provider("a", sim), model("chat", "a"))).unwrap();
    let sidecar = start_sidecar(&config, &cache, "s3cret").await;
    let url = format!("http://{}/v1/snapshot", sidecar.sidecar_addr);
    let client = reqwest::Client::new();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 401);
    let wrong = client.get(&url).bearer_auth("guess").send().await.unwrap();
    assert_eq!(wrong.status(), 401);
    let first = client.get(&url).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(first.status(), 200);
    let etag = first.headers()["etag"].to_str().unwrap().to_string();
    let doc: Value = first.json().await.unwrap();
    assert_eq!(format!("\"{}\"", doc["version"].as_str().unwrap()), etag);
    assert_eq!(doc["config"]["models"][0]["name"], "chat");
    let again = client.get(&url).bearer_auth("s3cret").header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(again.status(), 304);
    assert_eq!(again.headers()["etag"].to_str().unwrap(), etag);
    let ready = client.get(format!("http://{}/readyz", sidecar.admin_addr)).send().await.unwrap();
    assert_eq!(ready.status(), 200);
    sidecar.shutdown();

    // Broken at start: the cached snapshot is served, same version.
    std::fs::write(&config, "models: [").unwrap();
    let sidecar = start_sidecar(&config, &cache, "s3cret").await;
    let url = format!("http://{}/v1/snapshot", sidecar.sidecar_addr);
    let restored = client.get(&url).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(restored.status(), 200);
    assert_eq!(restored.headers()["etag"].to_str().unwrap(), etag);
    // Fixed while running: the edit is picked up.
    std::fs::write(&config, format!("providers:\n{}models:\n{}", provider("a", sim), model("chat3", "a"))).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let doc: Value = client.get(&url).bearer_auth("s3cret").send().await.unwrap().json().await.unwrap();
        if doc["config"]["models"][0]["name"] == "chat3" {
            break;
        }
        assert!(Instant::now() < deadline, "edit not picked up: {doc}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sidecar.shutdown();

    // Nothing usable and no cache: not ready, snapshot 503.
    std::fs::write(&config, "models: [").unwrap();
    let sidecar = start_sidecar(&config, &dir.0.join("none.json"), "s3cret").await;
    let none =
        client.get(format!("http://{}/v1/snapshot", sidecar.sidecar_addr)).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(none.status(), 503);
    let ready = client.get(format!("http://{}/readyz", sidecar.admin_addr)).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    sidecar.shutdown();
}
