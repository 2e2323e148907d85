//! End to end: the response cache of a standalone `ferrogate sidecar` over the machine's real
//! Redis (`FERROGATE_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`). An entry stored through
//! the filter-facing listener is found again; a purge through the admin listener deletes it
//! from Redis and reaches the snapshot filters poll, under a new version. Real HTTP on loopback.

use std::path::PathBuf;

use clap::Parser;
use ferrogate_core::snapshot::Snapshot;
use ferrogate_sidecar::standalone::{Sidecar, SidecarArgs};
use serde_json::{json, Value};

#[derive(Parser)]
struct Cli<T: clap::Args> {
    #[command(flatten)]
    args: T,
}

const TOKEN: &str = "s3cret";

struct TempDir(PathBuf);
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn start(model: &str) -> (Sidecar, TempDir) {
    let dir = std::env::temp_dir().join(format!("ferrogate-cache-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = std::env::var("FERROGATE_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    std::env::set_var("FG_E2E_CACHE_REDIS_URL", url);
    let config = dir.join("config.yaml");
    let yaml = format!(
        "providers: [{{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:9' }}]\n\
         models: [{{ name: {model}, targets: [{{ provider: local, model: m }}], cache: {{ ttl_secs: 60, scope: global }} }}]\n\
         redis: {{ url_env: FG_E2E_CACHE_REDIS_URL }}\n\
         cache_store: {{ kind: redis }}\n"
    );
    std::fs::write(&config, yaml).unwrap();
    let argv = [
        "sidecar",
        "--config",
        config.to_str().unwrap(),
        "--sidecar-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
    ];
    let mut args = Cli::<SidecarArgs>::parse_from(argv).args;
    args.internal_token = Some(TOKEN.to_string());
    args.admin_token = None;
    (Sidecar::start(&args).await.expect("sidecar starts"), TempDir(dir))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_round_trip_and_a_purge_reaches_redis_and_the_snapshot() {
    let model = format!("cached-{:08x}", rand::random::<u32>());
    let (sidecar, _dir) = start(&model).await;
    let client = reqwest::Client::new();
    let entry = format!("http://{}/v1/cache/entries/{}", sidecar.sidecar_addr, hex_digest());
    let stored = client
        .put(&entry)
        .bearer_auth(TOKEN)
        .header("x-ferrogate-cache-ttl", "60")
        .header("x-ferrogate-cache-model", &model)
        .header("x-ferrogate-cache-scope", "global")
        .body(b"opaque entry".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(stored.status(), 204);
    let found = client.get(&entry).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(found.status(), 200);
    assert_eq!(found.bytes().await.unwrap().as_ref(), b"opaque entry");
    assert_eq!(client.get(&entry).send().await.unwrap().status(), 401, "the internal token guards it");

    let snapshot = format!("http://{}/v1/snapshot", sidecar.sidecar_addr);
    let before = client.get(&snapshot).bearer_auth(TOKEN).send().await.unwrap().bytes().await.unwrap();
    let before = Snapshot::receive(&before).unwrap();
    assert!(before.config.cache.purges.is_empty());

    let admin = format!("http://{}/api/v1/cache", sidecar.admin_addr);
    let purge = client.post(format!("{admin}/purge")).json(&json!({"model": model})).send().await.unwrap();
    assert_eq!(purge.status(), 200);
    let answer: Value = purge.json().await.unwrap();
    assert_eq!(answer["purged"], json!(1), "{answer}");
    let at = answer["purge"]["at_ms"].as_u64().unwrap();
    assert_eq!(client.get(&entry).bearer_auth(TOKEN).send().await.unwrap().status(), 404, "gone from Redis");

    let after = client.get(&snapshot).bearer_auth(TOKEN).send().await.unwrap().bytes().await.unwrap();
    let after = Snapshot::receive(&after).unwrap();
    assert_ne!(after.version, before.version, "filters see a new version");
    assert!(after.config.cache.purged(&model, "global", at));
    assert!(!after.config.cache.purged(&model, "global", at + 1), "answers stored after the purge stay");

    let status: Value = client.get(&admin).send().await.unwrap().json().await.unwrap();
    assert_eq!((status["store"].as_str(), &status["redis"]["reachable"]), (Some("redis"), &json!(true)), "{status}");
    assert_eq!(status["purges"][0]["model"], json!(model));
    sidecar.shutdown();
}

fn hex_digest() -> String {
    (0..4).map(|_| format!("{:016x}", rand::random::<u64>())).collect()
}
