//! End to end: a real `ferrogate sidecar` exchanging files with a filter that makes no network
//! calls. `--snapshot-file` holds the served snapshot (the body of `GET /v1/snapshot`) and is
//! rewritten when the configuration file is edited; records appended to `--usage-inbox` show
//! up in the admin usage API, each once, and a restarted sidecar does not ingest them again.

use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Parser;
use ferrogate_sidecar::standalone::{Sidecar, SidecarArgs};
use serde_json::Value;

#[derive(Parser)]
struct SidecarCli {
    #[command(flatten)]
    args: SidecarArgs,
}

struct TempDir(PathBuf);
impl TempDir {
    fn new() -> TempDir {
        let dir =
            std::env::temp_dir().join(format!("ferrogate-files-{}-{}", std::process::id(), rand::random::<u64>()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(model: &str) -> String {
    format!(
        "providers: [{{ name: local, kind: openai_compatible, base_url: 'http://127.0.0.1:9' }}]\n\
         models: [{{ name: {model}, targets: [{{ provider: local, model: up-{model} }}] }}]\n"
    )
}

fn record(id: u32) -> String {
    format!(
        r#"{{"request_id":"inbox-{id}","key":"traefik","groups":[],"model_requested":"chat","provider":"local","upstream_model":"up-chat","status":200,"prompt_tokens":10,"completion_tokens":2,"cached_tokens":0,"cost_micro_usd":null,"latency_ms":5,"ttft_ms":null,"started_at_unix_ms":{id},"streamed":false}}"#
    ) + "\n"
}

async fn start(dir: &Path) -> Sidecar {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let argv = [
        "sidecar".to_string(),
        "--config".into(),
        path("config.yaml"),
        "--sidecar-listen".into(),
        "127.0.0.1:0".into(),
        "--admin-listen".into(),
        "127.0.0.1:0".into(),
        "--poll-interval-ms".into(),
        "100".into(),
        "--snapshot-file".into(),
        path("snapshot.json"),
        "--usage-inbox".into(),
        path("usage-inbox.jsonl"),
    ];
    let mut args = SidecarCli::parse_from(argv).args;
    args.internal_token = None;
    args.admin_token = None;
    Sidecar::start(&args).await.expect("sidecar starts")
}

/// Polls `check` every 50 ms until it returns `Some`, for at most 10 s.
async fn until<T, F: Future<Output = Option<T>>>(what: &str, mut check: impl FnMut() -> F) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The version the snapshot file holds (it always parses: it is replaced, never rewritten in place).
fn file_version(path: &Path) -> Option<String> {
    let body = std::fs::read(path).ok()?;
    let doc: Value = serde_json::from_slice(&body).expect("a whole snapshot document");
    doc["version"].as_str().map(str::to_string)
}

/// The number of records of the key `traefik` the admin API answers about.
async fn stored(sidecar: &Sidecar) -> u64 {
    let url = format!("http://{}/api/v1/usage?key=traefik", sidecar.admin_addr);
    let answer: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
    answer["totals"]["requests"].as_u64().unwrap()
}

fn append(path: &Path, text: &str) {
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_snapshot_file_follows_the_config_and_the_inbox_is_ingested() {
    let dir = TempDir::new();
    std::fs::write(dir.0.join("config.yaml"), config("chat")).unwrap();
    let sidecar = start(&dir.0).await;
    let snapshot_file = dir.0.join("snapshot.json");
    let first = sidecar.snapshots.current().expect("the config loads").version.clone();
    until("the snapshot file", || async { (file_version(&snapshot_file) == Some(first.clone())).then_some(()) }).await;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&snapshot_file).unwrap().permissions().mode() & 0o777, 0o600);
    }
    // The body is the one `GET /v1/snapshot` answers.
    let served = reqwest::get(format!("http://{}/v1/snapshot", sidecar.sidecar_addr)).await.unwrap();
    assert_eq!(served.bytes().await.unwrap(), std::fs::read(&snapshot_file).unwrap());

    std::fs::write(dir.0.join("config.yaml"), config("chat2")).unwrap();
    let second = until("the edit", || async {
        let v = sidecar.snapshots.current().map(|s| s.version.clone()).filter(|v| *v != first)?;
        (file_version(&snapshot_file) == Some(v.clone())).then_some(v)
    })
    .await;
    assert_ne!(first, second);

    let inbox = dir.0.join("usage-inbox.jsonl");
    append(&inbox, &(record(1) + &record(2) + "not a record\n"));
    append(&inbox, &record(3)[..30]);
    until("the inbox records", || async { (stored(&sidecar).await == 2).then_some(()) }).await;
    append(&inbox, &record(3)[30..]);
    until("the completed line", || async { (stored(&sidecar).await == 3).then_some(()) }).await;
    sidecar.shutdown();

    // A restarted sidecar (the same memory store is gone: it counts what it ingests anew)
    // starts from the kept offset: only the record appended since.
    tokio::time::sleep(Duration::from_millis(200)).await;
    append(&inbox, &record(4));
    let restarted = start(&dir.0).await;
    until("the new record", || async { (stored(&restarted).await == 1).then_some(()) }).await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(stored(&restarted).await, 1, "nothing ingested twice");
    restarted.shutdown();
}
